"""``python -m alf_lite.bin.grid_search``: a 2 x 2 grid of tiny runs, locally and on Ray."""

import collections
import contextlib
import csv
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import psutil
import pytest

import dropped_signal
from alf_lite.run_dir import MAX_CONFIG_BYTES
from alf_lite.runs import MAX_LINE_CHARS, NONDETERMINISTIC_COLUMNS
from cli_helpers import (
    PENDULUM,
    REPO_ROOT,
    RUN_TIMEOUT_S,
    ClockSetBack,
    checkpoint_steps,
    run_train,
    run_with_output_reader_gone,
    signal_on_import,
    train_env,
    with_prelude,
)

NUM_ENV_STEPS = 20
# Config, not --gin_param: the grid's runs must get it through their config text.
TINY_GIN = f"""include '{PENDULUM}'
TanhNormalActorNetwork.hidden_layers = (16,)
CriticNetwork.hidden_layers = (16,)
TrainerConfig.mini_batch_size = 16
TrainerConfig.replay_buffer_length = 100
TrainerConfig.initial_collect_steps = 1
TrainerConfig.num_env_steps = {NUM_ENV_STEPS}
TrainerConfig.summary_interval = 10
TrainerConfig.eval_interval = 10
TrainerConfig.checkpoint_interval = 10
TrainerConfig.num_eval_episodes = 1
create_environment.max_episode_steps = 5
"""
GRID = {'parameters': {'SacAlgorithm.target_update_tau': [0.005, 0.01]}, 'repeats': 2}
RUN_NAMES = [
    'target_update_tau=0.005,seed=0',
    'target_update_tau=0.005,seed=1',
    'target_update_tau=0.01,seed=0',
    'target_update_tau=0.01,seed=1',
]


def write_inputs(directory, grid):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / 'tiny.gin').write_text(TINY_GIN)
    (directory / 'grid.json').write_text(json.dumps(grid))
    return directory / 'tiny.gin', directory / 'grid.json'


def grid_command(root_dir, *args):
    """grid_search of grid.json and tiny.gin (relative paths: the driver resolves them)."""
    return [
        sys.executable,
        '-m',
        'alf_lite.bin.grid_search',
        '--search_config',
        'grid.json',
        '--gin_file',
        'tiny.gin',
        '--root_dir',
        str(root_dir),
        *args,
    ]


def run_grid(directory, root_dir, *args, env=None):
    """Run the grid from ``directory``; without ``env``, as a child of the train server,
    which imported the sweep's dependencies once (its runs still start afresh)."""
    # One torch thread whatever the backend, so both give the same numbers.
    command = grid_command(root_dir, '--gin_param', 'TrainerConfig.torch_num_threads=1', *args)
    if env is None:
        return run_train(command, cwd=directory)
    return subprocess.run(
        command,
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def summary(root_dir):
    with open(root_dir / 'grid_summary.csv', newline='') as f:
        return {r['run']: r for r in csv.DictReader(f)}


def deterministic_progress(run_dir):
    with open(run_dir / 'progress.csv', newline='') as f:
        return [
            {k: v for k, v in row.items() if k not in NONDETERMINISTIC_COLUMNS}
            for row in csv.DictReader(f)
        ]


@pytest.fixture(scope='module')
def local_grid(tmp_path_factory):
    """The 2 x 2 grid trained on the local backend: ``(directory, root_dir, first result)``."""
    directory = tmp_path_factory.mktemp('grid')
    write_inputs(directory, GRID)
    root_dir = directory / 'runs'
    result = run_grid(directory, root_dir, '--max_workers', '2')
    return directory, root_dir, result


def assert_finished_grid(root_dir, result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(p.name for p in root_dir.iterdir() if p.name.startswith('target')) == RUN_NAMES
    for name in RUN_NAMES:
        run_dir = root_dir / name
        assert checkpoint_steps(run_dir)[-1] == NUM_ENV_STEPS, name
        config = (run_dir / 'config.gin').read_text()
        assert f'TrainerConfig.random_seed = {name[-1]}' in config
        assert f'SacAlgorithm.target_update_tau = {name.split("=")[1].split(",")[0]}' in config
    rows = summary(root_dir)
    assert sorted(rows) == RUN_NAMES
    assert {r['status'] for r in rows.values()} == {'finished'}
    for name, row in rows.items():
        assert row['error'] == '' and float(row['wall_time_s']) > 0
        # The final return in the table is the run's last evaluation.
        assert float(row['final_eval_return']) == float(
            deterministic_progress(root_dir / name)[-1]['eval/AverageReturn']
        )


def test_local_grid_trains_each_combination_and_seed_and_rerun_skips_them(local_grid):
    directory, root_dir, result = local_grid
    assert_finished_grid(root_dir, result)
    # run_grid's --gin_param sets 1 torch thread for the runs themselves, over the sweep's
    # share of the cores: the sweep reports that.
    assert '(1 torch thread(s) each)' in result.stdout
    for name in RUN_NAMES:
        assert name in result.stdout  # the summary table
    # Different seeds learn differently: same tau, seeds 0 and 1 differ.
    assert deterministic_progress(root_dir / RUN_NAMES[0]) != deterministic_progress(
        root_dir / RUN_NAMES[1]
    )

    progress = {n: (root_dir / n / 'progress.csv').read_text() for n in RUN_NAMES}
    wall_times = {n: r['wall_time_s'] for n, r in summary(root_dir).items()}
    rerun = run_grid(directory, root_dir, '--max_workers', '2')
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert '0 to train' in rerun.stdout
    assert f', {len(RUN_NAMES)} not started ({len(RUN_NAMES)} finished before).' in rerun.stdout
    assert {r['status'] for r in summary(root_dir).values()} == {'skipped (finished before)'}
    # A skipped run keeps the wall time it trained in.
    assert {n: r['wall_time_s'] for n, r in summary(root_dir).items()} == wall_times
    assert {n: (root_dir / n / 'progress.csv').read_text() for n in RUN_NAMES} == progress


@pytest.mark.parametrize('env_steps', ['ten', 'nan', 'inf'])
def test_a_finished_run_with_a_row_whose_env_steps_is_no_number_is_skipped_with_its_return(
    local_grid, tmp_path, env_steps
):
    _, trained, _ = local_grid
    names = [RUN_NAMES[0], RUN_NAMES[2]]  # seed 0 of each tau
    root_dir = tmp_path / 'runs'
    for name in names:
        shutil.copytree(trained / name, root_dir / name)
    # An edited row, which train keeps as it is and counts no step of; its evaluation is
    # not the run's last (at inf, it would come last).
    progress = root_dir / names[0] / 'progress.csv'
    rows = progress.read_text().splitlines(keepends=True)
    assert rows[2].startswith('10,')
    progress.write_text(''.join(rows[:2] + [env_steps + rows[2][2:]] + rows[3:]))
    write_inputs(tmp_path, dict(GRID, repeats=1))
    result = run_grid(tmp_path, root_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert '0 to train' in result.stdout
    rows = summary(root_dir)
    for name in names:
        assert rows[name]['status'] == 'skipped (finished before)'
        assert float(rows[name]['final_eval_return']) == float(
            deterministic_progress(trained / name)[-1]['eval/AverageReturn']
        )


def test_a_sweep_whose_output_reader_is_gone_trains_on_and_writes_its_table(tmp_path):
    write_inputs(tmp_path, dict(GRID, repeats=1))
    root_dir = tmp_path / 'runs'
    command = grid_command(root_dir, '--gin_param', 'TrainerConfig.torch_num_threads=1')
    with subprocess.Popen(
        command + ['--max_workers', '2'],
        cwd=tmp_path,
        env=train_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout.readline().startswith('2 runs in ')
        # As `| head -1` does, or a `| tee` that the Ctrl-C stopping the sweep ended too.
        process.stdout.close()
        _, err = process.communicate(timeout=RUN_TIMEOUT_S)
    assert process.returncode == 0 and 'Traceback' not in err, err[-3000:]
    rows = summary(root_dir)
    assert sorted(rows) == [name for name in RUN_NAMES if name.endswith('seed=0')]
    assert {r['status'] for r in rows.values()} == {'finished'}


def test_unfinished_run_resumes(tmp_path):
    write_inputs(
        tmp_path, {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 1}
    )
    root_dir = tmp_path / 'runs'
    short = run_grid(tmp_path, root_dir, '--gin_param', 'TrainerConfig.num_env_steps=10')
    assert short.returncode == 0, short.stderr[-3000:]
    run_dir = root_dir / 'seed=0'
    assert checkpoint_steps(run_dir) == [10]
    # The first sweep's time, made long enough to tell from the second's.
    table = root_dir / 'grid_summary.csv'
    first_s = float(summary(root_dir)['seed=0']['wall_time_s'])
    table.write_text(table.read_text().replace(f',{first_s},', ',1000.0,'))
    longer = run_grid(tmp_path, root_dir)
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert checkpoint_steps(run_dir) == [10, 20]
    assert 'resumed from' in (root_dir / 'logs' / 'seed=0.log').read_text()
    assert [int(r['env_steps']) for r in deterministic_progress(run_dir)] == [0, 10, 20]
    # The resumed run's wall time covers both sweeps.
    second_s = float(re.search(r'seed=0: finished in (\d+) s', longer.stdout).group(1))
    assert float(summary(root_dir)['seed=0']['wall_time_s']) == pytest.approx(
        1000 + second_s, abs=1
    )


# A module of the user's own beside the sweep, registering an env id.
SWEEP_ENVS = (
    'import gymnasium\n'
    "gymnasium.register('SweepPendulum-v0', "
    "entry_point='gymnasium.envs.classic_control.pendulum:PendulumEnv')\n"
)


def test_runs_import_a_module_of_the_sweeps_working_directory_as_the_sweep_did(tmp_path):
    # README: an env of your own is named with its module, importable where train runs;
    # the sweep's own parse imports it from its working directory (python -m puts it on
    # the path), and so must each run's train, whose working directory is the logs'.
    write_inputs(
        tmp_path, {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 1}
    )
    (tmp_path / 'sweep_envs.py').write_text(SWEEP_ENVS)
    root_dir = tmp_path / 'runs'
    result = run_grid(
        tmp_path,
        root_dir,
        '--gin_param',
        "create_environment.env_name='sweep_envs:SweepPendulum-v0'",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert 'seed=0: finished' in result.stdout, result.stdout
    assert "create_environment.env_name = 'sweep_envs:SweepPendulum-v0'" in (
        (root_dir / 'seed=0' / 'config.gin').read_text()
    )


def test_finished_run_of_another_config_fails_naming_the_differing_binding(tmp_path):
    write_inputs(
        tmp_path, {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 1}
    )
    root_dir = tmp_path / 'runs'
    first = run_grid(tmp_path, root_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = root_dir / 'seed=0'
    progress = (run_dir / 'progress.csv').read_text()
    wall_time = summary(root_dir)['seed=0']['wall_time_s']

    # A setting a resume may change leaves it the same experiment.
    same = run_grid(tmp_path, root_dir, '--gin_param', 'TrainerConfig.num_eval_episodes=2')
    assert same.returncode == 0, same.stderr[-3000:]
    assert summary(root_dir)['seed=0']['status'] == 'skipped (finished before)'

    changed = run_grid(tmp_path, root_dir, '--gin_param', 'actor/Adam.lr=0.002')
    assert changed.returncode == 1, changed.stderr[-3000:]
    assert '0 to train' in changed.stdout
    row = summary(root_dir)['seed=0']
    assert row['status'] == 'failed', row
    assert f'{run_dir} holds another experiment' in row['error']
    assert "'actor/Adam.lr = 0.001 -> actor/Adam.lr = 0.002'" in row['error'], row['error']
    # Its return and steps are the old config's, not this sweep's; its wall time stays
    # for the sweep that continues it.
    assert row['final_eval_return'] == row['env_steps'] == ''
    assert row['wall_time_s'] == wall_time
    assert 'holds another experiment' in changed.stdout  # the table shows the error too
    assert '--start_over' not in changed.stdout  # a flag of train, not of grid_search
    assert (run_dir / 'progress.csv').read_text() == progress


def training_processes(root_dir):
    return [
        p
        for p in psutil.process_iter(['cmdline'])
        if f'--root_dir {root_dir}/' in ' '.join(p.info['cmdline'] or [])
    ]


def progress_rows(run_dir):
    try:
        with open(run_dir / 'progress.csv', newline='') as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def start_long_grid(directory, root_dir, *args, env=None, prelude=None):
    """The grid, with runs too long to finish and no checkpoint at an interval (only a
    stop writes one), in a session of its own: a Ctrl-C reaches the whole foreground
    group, as killpg does. ``prelude``: run first, as ``with_prelude`` runs it."""
    command = grid_command(
        root_dir,
        '--gin_param',
        'TrainerConfig.num_env_steps=100000',
        '--gin_param',
        'TrainerConfig.checkpoint_interval=100000',
        *args,
    )
    if prelude is not None:
        command = with_prelude(command, prelude, 'alf_lite.bin.grid_search', alter_sys=True)
    return subprocess.Popen(
        command,
        cwd=directory,
        env=env or train_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_until(condition, process, what):
    """Wait until ``condition()``, while ``process`` (the sweep) runs, for at most
    ``RUN_TIMEOUT_S``; ``what``: what is waited for, in the failure."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not condition():
        assert process.poll() is None, f'grid_search ended waiting for {what}'
        assert time.monotonic() < deadline, f'no {what} within {RUN_TIMEOUT_S} s'
        time.sleep(0.05)


def signal_once(process, root_dir, ready, send):
    """Wait until ``ready()``, ``send()`` the signal and return the grid's output;
    whatever fails, no sweep or training process outlives it."""
    try:
        wait_until(ready, process, 'the moment to signal')
        send()
        return process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        for p in [process] + training_processes(root_dir):
            with contextlib.suppress(psutil.Error, OSError):
                p.kill()


def resume_to_the_end(tmp_path, root_dir, stopped):
    """Re-run the sweep, 10 steps past the furthest checkpoint of the ``stopped`` run
    dirs: every run finishes, the stopped ones resumed."""
    until = max(checkpoint_steps(run_dir)[-1] for run_dir in stopped) + 10
    again = run_grid(
        tmp_path,
        root_dir,
        '--max_workers',
        '2',
        '--gin_param',
        f'TrainerConfig.num_env_steps={until}',
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert {r['status'] for r in summary(root_dir).values()} == {'finished'}
    for run_dir in stopped:
        assert 'resumed from' in (root_dir / 'logs' / f'{run_dir.name}.log').read_text()


@pytest.mark.parametrize(
    'sig, to_group',
    # SIGUSR2: a batch system's warning before its time limit (Grid Engine's -notify).
    [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGUSR2, False)],
)
def test_signal_stops_the_sweep_with_checkpoints_and_the_same_command_continues_it(
    tmp_path, sig, to_group
):
    write_inputs(tmp_path, GRID)
    root_dir = tmp_path / 'runs'
    process = start_long_grid(tmp_path, root_dir, '--max_workers', '2')
    running = [root_dir / name for name in RUN_NAMES[:2]]
    stdout, stderr = signal_once(
        process,
        root_dir,
        lambda: all(len(progress_rows(run_dir)) >= 2 for run_dir in running),
        lambda: os.killpg(process.pid, sig) if to_group else process.send_signal(sig),
    )
    assert process.returncode == 128 + sig, stderr[-3000:]
    assert 'Traceback' not in stderr, stderr[-3000:]
    assert f'{sig.name} stopped the sweep: 2 run(s) stopped' in stderr
    rows = summary(root_dir)
    for run_dir in running:
        # Each stopped at a checkpoint of its last step, written as it stopped: its only one.
        assert rows[run_dir.name]['status'] == 'stopped', rows[run_dir.name]
        assert rows[run_dir.name]['error'] == ''
        steps = checkpoint_steps(run_dir)
        assert len(steps) == 1 and steps[0] == int(rows[run_dir.name]['env_steps'])
        assert steps[0] >= int(progress_rows(run_dir)[-1]['env_steps'])
        assert (
            'interrupted by ' + sig.name in (root_dir / 'logs' / f'{run_dir.name}.log').read_text()
        )
    for name in RUN_NAMES[2:]:
        assert rows[name]['status'] == 'not started (sweep stopped)'
        assert not (root_dir / name).exists()
    assert 'not started (sweep stopped)' in stdout
    # Every training process ended: none is left behind in its own session.
    assert training_processes(root_dir) == []

    if to_group:
        resume_to_the_end(tmp_path, root_dir, running)


# Each run with 2 env processes, which a pause must stop too.
ENV_PROCESSES = (
    '--gin_param',
    'create_environment.num_parallel_environments=2',
    '--gin_param',
    'create_environment.use_subprocesses=True',
)


def pause_the_sweep(process, root_dir, num_runs):
    """Ctrl-Z, as a terminal sends it to its foreground group (grid_search's alone, each
    run being in a session of its own); returns once every process of the sweep (the
    ``num_runs`` trains with their env processes) is stopped, the processes."""
    processes = [psutil.Process(process.pid)] + training_processes(root_dir)
    assert len(processes) == 1 + 3 * num_runs
    os.killpg(process.pid, signal.SIGTSTP)
    wait_until(
        lambda: all(p.status() == psutil.STATUS_STOPPED for p in processes),
        process,
        'stop of every process of the sweep',
    )
    return processes


def test_ctrl_z_pauses_the_sweep_with_its_runs_and_fg_goes_on_with_them(tmp_path):
    write_inputs(tmp_path, dict(GRID, repeats=1))
    root_dir = tmp_path / 'runs'
    process = start_long_grid(tmp_path, root_dir, '--max_workers', '2', *ENV_PROCESSES)
    running = [root_dir / name for name in (RUN_NAMES[0], RUN_NAMES[2])]

    def rows():
        return [len(progress_rows(run_dir)) for run_dir in running]

    try:
        wait_until(lambda: min(rows()) >= 2, process, 'progress rows')
        processes = pause_the_sweep(process, root_dir, num_runs=2)
        paused = rows()
        time.sleep(3)
        assert rows() == paused
        os.killpg(process.pid, signal.SIGCONT)
        wait_until(
            lambda: all(now > then for now, then in zip(rows(), paused)), process, 'new rows'
        )
        assert not [p for p in processes if p.status() == psutil.STATUS_STOPPED]
        # The sweep goes on as before: a Ctrl-C still stops it with its runs' checkpoints.
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
        assert process.returncode == 128 + signal.SIGINT, stderr[-3000:]
        assert 'Traceback' not in stderr, stderr[-3000:]
        statuses = {name: row['status'] for name, row in summary(root_dir).items()}
        assert statuses[RUN_NAMES[0]] == statuses[RUN_NAMES[2]] == 'stopped', statuses
        for run_dir in running:
            assert len(checkpoint_steps(run_dir)) == 1
    finally:
        for p in [process] + training_processes(root_dir):
            with contextlib.suppress(psutil.Error, OSError):
                p.kill()


def test_a_second_signal_as_a_stopped_sweep_exits_leaves_the_exit_code_of_the_first(tmp_path):
    # The second signal comes in the interpreter's last garbage collection, once Python has
    # set the handlers it had back to the default: it ended grid_search by that signal (a
    # batch system's SIGUSR1 then its SIGTERM, Ctrl-C twice).
    sig = signal.SIGUSR1
    write_inputs(tmp_path, GRID)
    root_dir = tmp_path / 'runs'
    prelude = (
        'import atexit, gc, os\n'
        'class SignalWhenCollected:\n'
        '    def __del__(self):\n'
        f'        os.kill(os.getpid(), {int(sig)})\n'
        'def leave_a_cycle():\n'
        # Left to the collection Python's exit runs after the exit-time callbacks.
        '    gc.disable()\n'
        '    cycle = SignalWhenCollected()\n'
        '    cycle.itself = cycle\n'
        'atexit.register(leave_a_cycle)\n'
    )
    process = start_long_grid(tmp_path, root_dir, '--max_workers', '2', prelude=prelude)
    running = [root_dir / name for name in RUN_NAMES[:2]]
    _, stderr = signal_once(
        process,
        root_dir,
        lambda: all(len(progress_rows(run_dir)) >= 2 for run_dir in running),
        lambda: process.send_signal(sig),
    )
    assert process.returncode == 128 + sig, stderr[-3000:]
    assert f'{sig.name} stopped the sweep: 2 run(s) stopped' in stderr, stderr[-3000:]
    assert {summary(root_dir)[run_dir.name]['status'] for run_dir in running} == {'stopped'}


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_sweep_reads_its_configs_exits_with_128_plus_it_in_one_line(
    tmp_path, sig
):
    write_inputs(tmp_path, GRID)
    root_dir = tmp_path / 'runs'
    command = grid_command(root_dir)
    # The signal comes once the base config was parsed, before the sweep's plan.
    prelude = (
        'import os\n'
        'import alf_lite.config as config\n'
        'parse = config.parse_config\n'
        'def parse_then_signal(*args, **kwargs):\n'
        '    result = parse(*args, **kwargs)\n'
        f'    os.kill(os.getpid(), {int(sig)})\n'
        '    return result\n'
        'config.parse_config = parse_then_signal\n'
    )
    command = with_prelude(command, prelude, module='alf_lite.bin.grid_search')
    result = run_train(command, cwd=tmp_path)
    assert result.returncode == 128 + sig, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    message = f'error: {sig.name} arrived while grid_search started up'
    assert message in result.stderr, result.stderr[-3000:]
    assert result.stdout == ''  # stopped before its plan
    assert not root_dir.exists()


@pytest.mark.parametrize('how', [dropped_signal.DROPPED, dropped_signal.REPLACED])
def test_a_signal_whose_exception_never_reaches_grid_search_as_it_reads_its_configs_stops_it(
    tmp_path, how
):
    # Dropped (in a __del__): the sweep's runs started and trained. Or replaced by an error
    # that the code the signal interrupted raised in its place (as a C extension calling
    # back into Python may): was that error's traceback, exit 1.
    write_inputs(tmp_path, GRID)
    root_dir = tmp_path / 'runs'
    args = grid_command(root_dir)[3:]
    result = dropped_signal.run_tool(
        'grid_search', args, 'alf_lite.config', 'parse_config', how, tmp_path
    )
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert 'Exception ignored' not in result.stderr, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith('error: SIGINT arrived while grid_search started up'), last_line
    assert not root_dir.exists() or not os.listdir(root_dir)  # no run started


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_grid_search_imports_its_modules_exits_with_128_plus_it_in_one_line(
    tmp_path, sig
):
    # Before main handles the signals: was a KeyboardInterrupt's traceback, or no word.
    write_inputs(tmp_path, GRID)
    root_dir = tmp_path / 'runs'
    command = with_prelude(
        grid_command(root_dir), signal_on_import(sig), 'alf_lite.bin.grid_search', alter_sys=True
    )
    result = run_train(command, cwd=tmp_path)
    assert result.returncode == 128 + sig, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f'error: {sig.name} arrived while grid_search started up or wrote its table, outside '
        'the sweep: no run was started or stopped by it; re-run the same command to start or '
        'continue the sweep.'
    ], result.stderr[-3000:]
    assert not root_dir.exists()


def test_a_run_that_fails_while_the_sweep_stops_is_stopped_and_keeps_its_error():
    from alf_lite.bin.grid_search import SweepStop

    stop = SweepStop()
    crashed = {'returncode': 1, 'error': 'exit code 1: ValueError: bad'}
    assert stop.mark(dict(crashed)) == crashed  # no signal: a failure as any other
    stop.signum = signal.SIGINT
    # train's exit after its checkpoint (128 + SIGINT) is no error; a crash meanwhile is.
    assert stop.mark({'returncode': 130, 'error': 'exit code 130: KeyboardInterrupt'}) == {
        'returncode': 130,
        'error': None,
        'stopped': True,
    }
    assert stop.mark(dict(crashed)) == dict(crashed, stopped=True)


def test_runs_stopped_by_the_first_of_two_signals_are_stopped_without_an_error():
    from alf_lite.bin.grid_search import SweepStop

    # Ctrl-C, then SIGTERM: each run exits with 128 + the first signal it got.
    with SweepStop() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
    assert stop.signum == signal.SIGTERM
    for returncode in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        result = {'returncode': returncode, 'error': f'exit code {returncode}: interrupted'}
        assert stop.mark(result) == {'returncode': returncode, 'error': None, 'stopped': True}


def kill_the_sweep_alone(process, root_dir, ready):
    """SIGKILL grid_search alone once ``ready()``; its runs, which had 100000 steps to go,
    must end within a minute by themselves. Returns them; none outlives the test."""
    try:
        wait_until(ready, process, 'the moment to kill the sweep')
        trains = training_processes(root_dir)
        process.kill()
        process.communicate()
        assert psutil.wait_procs(trains, timeout=60)[1] == []
        return trains
    finally:
        for p in [process] + training_processes(root_dir):
            with contextlib.suppress(psutil.Error, OSError):
                p.kill()


def test_a_run_whose_sweep_was_killed_stops_at_a_checkpoint_and_the_sweep_continues_it(
    tmp_path,
):
    # SIGKILL (or the OOM killer) lets grid_search pass no stop on: the run notices. One
    # seed of each tau: the first run trains, the second is not started when it is killed.
    write_inputs(tmp_path, dict(GRID, repeats=1))
    root_dir = tmp_path / 'runs'
    temp_dir = tmp_path / 'temp'
    temp_dir.mkdir()
    env = dict(train_env(), TMPDIR=str(temp_dir))
    process = start_long_grid(tmp_path, root_dir, '--max_workers', '1', env=env)
    run_dir = root_dir / RUN_NAMES[0]
    trains = kill_the_sweep_alone(process, root_dir, lambda: len(progress_rows(run_dir)) >= 2)
    assert len(trains) == 1
    # The run's config file, which the sweep removes as the run ends, did not outlive the
    # sweep outside its root_dir.
    assert list(temp_dir.rglob('*.gin')) == []
    log = (root_dir / 'logs' / f'{RUN_NAMES[0]}.log').read_text()
    assert f'the process that started this train (pid {process.pid}) ended' in log
    assert 'interrupted by SIGTERM: checkpoint written' in log
    # The only checkpoint, written as it stopped, at or past its last progress row.
    steps = checkpoint_steps(run_dir)
    assert len(steps) == 1 and steps[0] >= int(progress_rows(run_dir)[-1]['env_steps'])

    resume_to_the_end(tmp_path, root_dir, [run_dir])
    # Nor beyond the run's start in the same sweep.
    assert {p.suffix for p in (root_dir / 'logs').iterdir()} == {'.log'}


def test_a_run_stopped_by_a_signal_of_its_own_is_listed_as_stopped_and_the_sweep_continues_it(
    tmp_path,
):
    # SIGINT sent to the run's train alone (kill -INT): it stops at a checkpoint, as under a
    # stopped sweep, and the sweep, which was not signalled, says so and how to go on.
    grid = {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 1}
    write_inputs(tmp_path, grid)
    root_dir = tmp_path / 'runs'
    run_dir = root_dir / 'seed=0'  # a parameter of one value is no part of the name
    process = start_long_grid(tmp_path, root_dir)
    try:
        wait_until(lambda: len(progress_rows(run_dir)) >= 2, process, 'progress rows')
        (train,) = training_processes(root_dir)
        train.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        for p in [process] + training_processes(root_dir):
            with contextlib.suppress(psutil.Error, OSError):
                p.kill()
    assert process.returncode == 1, err[-3000:]
    assert '[1/1] seed=0: stopped in ' in out, out
    assert err.strip().splitlines()[-1] == (
        '1 of 1 runs were stopped by a signal sent to them; re-run the same command to '
        'continue them.'
    ), err[-3000:]
    row = summary(root_dir)['seed=0']
    # train's last line, without absl's prefix of severity, time, thread and source line.
    assert row['status'] == 'stopped'
    assert row['error'].startswith('exit code 130: interrupted by SIGINT: checkpoint written'), row
    resume_to_the_end(tmp_path, root_dir, [run_dir])


# The kernel gives a signal sent to a process to any of its threads that does not block it;
# Python runs the handler in the main thread, which a signal another thread got does not
# wake. This prelude makes every signal of the sweep reach a thread other than the main one.
SIGNALS_TO_OTHER_THREADS = (
    'import signal, threading\n'
    'SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGTSTP, signal.SIGCONT}\n'
    'signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)\n'
    'thread_run = threading.Thread.run\n'
    'def run_unblocked(self):\n'
    '    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)\n'
    '    thread_run(self)\n'
    'threading.Thread.run = run_unblocked\n'
)


def test_a_sweep_pauses_goes_on_and_stops_when_its_signals_reach_another_thread(tmp_path):
    # Ctrl-Z, fg, then Ctrl-C: each handled at once, though the main thread waits for runs
    # that, stopped, would never end.
    write_inputs(tmp_path, dict(GRID, repeats=1))
    root_dir = tmp_path / 'runs'
    process = start_long_grid(
        tmp_path, root_dir, '--max_workers', '2', *ENV_PROCESSES, prelude=SIGNALS_TO_OTHER_THREADS
    )
    running = [root_dir / name for name in (RUN_NAMES[0], RUN_NAMES[2])]

    def rows():
        return [len(progress_rows(run_dir)) for run_dir in running]

    try:
        wait_until(lambda: min(rows()) >= 2, process, 'progress rows')
        pause_the_sweep(process, root_dir, num_runs=2)
        paused = rows()
        os.killpg(process.pid, signal.SIGCONT)
        wait_until(
            lambda: all(now > then for now, then in zip(rows(), paused)), process, 'new rows'
        )
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        for p in [process] + training_processes(root_dir):
            with contextlib.suppress(psutil.Error, OSError):
                p.kill()
    assert process.returncode == 128 + signal.SIGINT, stderr[-3000:]
    for run_dir in running:
        assert len(checkpoint_steps(run_dir)) == 1, run_dir


def test_a_paused_sweep_killed_outright_leaves_its_runs_to_stop_at_a_checkpoint(tmp_path):
    # SIGKILL (kill -9 %1) of a sweep that Ctrl-Z paused left no process to continue its
    # runs: they stayed stopped, holding their root_dirs, until someone sent SIGCONT.
    write_inputs(tmp_path, dict(GRID, repeats=1))
    root_dir = tmp_path / 'runs'
    process = start_long_grid(tmp_path, root_dir, '--max_workers', '1', *ENV_PROCESSES)
    run_dir = root_dir / RUN_NAMES[0]
    wait_until(lambda: len(progress_rows(run_dir)) >= 2, process, 'progress rows')
    pause_the_sweep(process, root_dir, num_runs=1)
    # Its train and env processes all end.
    kill_the_sweep_alone(process, root_dir, lambda: True)
    log = (root_dir / 'logs' / f'{RUN_NAMES[0]}.log').read_text()
    assert f'the process that started this train (pid {process.pid}) ended' in log
    assert 'interrupted by SIGTERM: checkpoint written' in log
    assert len(checkpoint_steps(run_dir)) == 1


def test_broken_value_fails_its_runs_and_the_others_finish(tmp_path):
    # -1.0 fails when the optimizer is built (in the training process);
    # 'oops(' does not parse (caught before any process starts). One key sets two
    # parameters: the run is named after their common suffix.
    grid = {'parameters': {'actor/Adam.lr,critic/Adam.lr': [0.002, -1.0, 'oops(']}, 'repeats': 1}
    write_inputs(tmp_path, grid)
    root_dir = tmp_path / 'runs'
    result = run_grid(tmp_path, root_dir)
    assert result.returncode == 1, result.stderr[-3000:]
    rows = summary(root_dir)
    assert rows['lr=0.002,seed=0']['status'] == 'finished'
    assert checkpoint_steps(root_dir / 'lr=0.002,seed=0')[-1] == NUM_ENV_STEPS
    config = (root_dir / 'lr=0.002,seed=0' / 'config.gin').read_text()
    assert 'actor/Adam.lr = 0.002' in config and 'critic/Adam.lr = 0.002' in config
    assert rows['lr=-1.0,seed=0']['status'] == 'failed'
    assert 'Invalid learning rate: -1.0' in rows['lr=-1.0,seed=0']['error']
    assert rows['lr=oops,seed=0']['status'] == 'failed'
    assert (
        'Cannot parse the search config\'s "parameters" entry '
        "'actor/Adam.lr,critic/Adam.lr', value `oops(`" in rows['lr=oops,seed=0']['error']
    )
    assert not (root_dir / 'lr=oops,seed=0').exists()
    assert '2 to train' in result.stdout
    assert ', 1 not started (1 with a config that does not parse).' in result.stdout
    assert 'Invalid learning rate' in result.stdout  # the table shows the error too


BAD_INPUTS = {
    'misspelt name': (
        {'parameters': {'SacAlgorithm.target_update_tauu': [0.005, 0.01]}, 'repeats': 1},
        [],
        [
            '"parameters" entry \'SacAlgorithm.target_update_tauu\', value `0.005`',
            "Closest valid names: 'target_update_tau'",
        ],
    ),
    'negative seed': (
        {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': [-1]},
        [],
        ['"repeats" in grid.json', 'got [-1]'],
    ),
    'more seeds than numpy takes': (
        {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 2**40},
        [],
        ['"repeats" in grid.json must be a positive number of seeds', f'got {2**40}'],
    ),
    'seed numpy cannot take': (
        {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': [0, 2**32]},
        [],
        ['"repeats" in grid.json', 'integer seeds in [0, 2**32), got [0, 4294967296]'],
    ),
    'run name over the file-name limit': (
        {
            'parameters': {'create_environment.env_name': ["'" + 'x' * 300 + "'", "'y'"]},
            'repeats': 1,
        },
        [],
        ['longest part comes from "parameters" entry \'create_environment.env_name\''],
    ),
    # Quoted by its start in the message, still as the search config's entry.
    'value over the quoting limit': (
        {'parameters': {'TrainerConfig.mini_batch_size': ["'" + 'a' * 600 + "'"]}, 'repeats': 1},
        [],
        [
            "\"parameters\" entry 'TrainerConfig.mini_batch_size', value `'aaaa",
            'more characters)`',
        ],
    ),
    # The seed, bound after the searched values, would override them: runs named apart
    # would train alike.
    'seed searched by its full name': (
        {'parameters': {'alf_lite.trainer.TrainerConfig.random_seed': [5, 6]}, 'repeats': 1},
        [],
        ['alf_lite.trainer.TrainerConfig.random_seed', 'the seeds come from "repeats"'],
    ),
    'zero workers': (GRID, ['--max_workers', '0'], ['--max_workers', 'must be positive']),
    'zero CPUs per run': (
        GRID,
        ['--num_cpus_per_run', '0'],
        ['--num_cpus_per_run must be positive'],
    ),
    'negative runs per GPU': (
        GRID,
        ['--runs_per_gpu', '-1'],
        ['--runs_per_gpu and --num_gpus_per_run must be >= 0'],
    ),
    'negative GPUs per run': (
        GRID,
        ['--num_gpus_per_run', '-0.5'],
        ['--runs_per_gpu and --num_gpus_per_run must be >= 0'],
    ),
    'GPUs per run that are no number': (
        GRID,
        ['--num_gpus_per_run', 'nan'],
        ['--runs_per_gpu and --num_gpus_per_run must be >= 0'],
    ),
    # Ray takes a fraction of one GPU or whole GPUs: 1.5 failed after the plan was printed.
    'GPUs per run above 1 and not whole': (
        GRID,
        ['--num_gpus_per_run', '1.5'],
        ['--num_gpus_per_run 1.5: Ray reserves a fraction of one GPU or whole GPUs'],
    ),
    'GPUs per run below what Ray reserves': (
        GRID,
        ['--num_gpus_per_run', '0.00001'],
        ['--num_gpus_per_run 1e-05: Ray reserves no less than 0.0001 GPU for a task'],
    ),
    'search config that is a directory': (
        GRID,
        ['--search_config', '.'],
        ['--search_config . is a directory: give its JSON file'],
    ),
    # One value each: nothing else would tell that the later one overrides the earlier.
    'key given twice, spelt apart by a space': (
        {
            'parameters': {
                'SacAlgorithm.target_update_tau': [0.005],
                'SacAlgorithm.target_update_tau ': [0.01],
            },
            'repeats': 1,
        },
        [],
        [
            'grid.json has the key \'SacAlgorithm.target_update_tau\' twice in "parameters", as '
            "'SacAlgorithm.target_update_tau' and 'SacAlgorithm.target_update_tau '"
        ],
    ),
}


@pytest.mark.parametrize('case', BAD_INPUTS)
def test_bad_input_exits_2_naming_it_before_writing_anything(tmp_path, case):
    grid, args, expected = BAD_INPUTS[case]
    write_inputs(tmp_path, grid)
    root_dir = tmp_path / 'runs'
    result = run_grid(tmp_path, root_dir, *args)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'Traceback' not in result.stderr and '--gin_param' not in result.stderr
    for text in expected:
        assert text in result.stderr
    assert not root_dir.exists()


def test_help_names_a_run_as_its_example_grid_does(tmp_path):
    from alf_lite.bin import grid_search

    doc = grid_search.__doc__
    grid = re.search(r'``grid.json``::\n\n(.*?)\n\n', doc, re.S).group(1)
    (tmp_path / 'grid.json').write_text(grid)
    names = [
        name
        for name, _, _ in grid_search.expand_grid(
            grid_search.load_search_space(str(tmp_path / 'grid.json'))
        )
    ]
    example = re.search(r'e\.g\.\s+``([^`]*seed=\d+)``', doc).group(1)
    assert example in names


@pytest.mark.parametrize(
    'values',
    # The same value twice; two strings whose characters other than letters, digits and
    # '.+-' both become '_': a_b.
    [[1, 1], ["'a b'", "'a/b'"]],
)
def test_two_values_that_give_one_run_name_are_refused(tmp_path, values):
    from alf_lite.bin import grid_search

    (tmp_path / 'grid.json').write_text(
        json.dumps(
            {'parameters': {'create_environment.env_name': values, 'x.y': [1, 2]}, 'repeats': 1}
        )
    )
    space = grid_search.load_search_space(str(tmp_path / 'grid.json'))
    with pytest.raises(
        ValueError, match="two runs would share the directory 'env_name=.*,y=1,seed=0'"
    ):
        grid_search.expand_grid(space)


def load_space(directory, grid):
    """``grid`` (the search config's JSON object) as ``load_search_space`` reads it."""
    from alf_lite.bin import grid_search

    (directory / 'grid.json').write_text(json.dumps(grid))
    return grid_search.load_search_space(str(directory / 'grid.json'))


@pytest.mark.parametrize(
    'value, text',
    [
        ([64], '(64,)'),
        ([64, 32], '(64, 32)'),
        ([[0.1, 0.2]], '((0.1, 0.2),)'),
        (True, 'True'),
        (None, 'None'),
        (0.0003, '0.0003'),
        ("'Pendulum-v1'", "'Pendulum-v1'"),
        ('@GaussianNoise()', '@GaussianNoise()'),
    ],
)
def test_a_searched_value_is_bound_as_the_gin_value_its_json_spells(tmp_path, value, text):
    from alf_lite.bin import grid_search

    space = load_space(tmp_path, {'parameters': {'x.y': [value]}, 'repeats': 1})
    assert grid_search.expand_grid(space) == [('seed=0', 0, [f'x.y={text}'])]


def test_a_search_of_seeds_alone_names_each_run_by_its_seed(tmp_path):
    from alf_lite.bin import grid_search

    space = load_space(tmp_path, {'parameters': {}, 'repeats': [0, 3]})
    assert grid_search.expand_grid(space) == [('seed=0', 0, []), ('seed=3', 3, [])]


def test_a_sweep_of_seeds_alone_trains_each_seed_of_the_config(tmp_path):
    directory = tmp_path / 'sweep'
    write_inputs(directory, {'parameters': {}, 'repeats': 2})
    root_dir = directory / 'runs'
    result = run_grid(directory, root_dir, '--max_workers', '2')
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = summary(root_dir)
    assert sorted(rows) == ['seed=0', 'seed=1']
    assert {r['status'] for r in rows.values()} == {'finished'}
    for seed in (0, 1):
        run_dir = root_dir / f'seed={seed}'
        assert checkpoint_steps(run_dir)[-1] == NUM_ENV_STEPS
        assert f'TrainerConfig.random_seed = {seed}' in (run_dir / 'config.gin').read_text()
    assert deterministic_progress(root_dir / 'seed=0') != deterministic_progress(
        root_dir / 'seed=1'
    )
    # A sweep of seed 0 alone: its table keeps seed 1's row of the sweep before, as it was,
    # once though an edited table lists it twice, and no row of the sweep's logs directory.
    earlier = rows
    summary_file = root_dir / 'grid_summary.csv'
    seed_1 = next(line for line in summary_file.read_text().splitlines() if 'seed=1,' in line)
    with open(summary_file, 'a', newline='') as f:
        f.write(f'{seed_1}\r\nlogs,finished,0,-1.0,20,1.0,\r\n')
    write_inputs(directory, {'parameters': {}, 'repeats': 1})
    again = run_grid(directory, root_dir)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert (
        f'{summary_file} also keeps the row(s) of 1 run(s) in {root_dir} '
        'that this sweep does not have: seed=1\n'
    ) in again.stdout
    assert len(summary_file.read_text().splitlines()) == 3  # the header and two rows
    rows = summary(root_dir)
    assert sorted(rows) == ['seed=0', 'seed=1'] and rows['seed=1'] == earlier['seed=1']
    assert rows['seed=0']['status'] == 'skipped (finished before)'
    assert rows['seed=0']['wall_time_s'] == earlier['seed=0']['wall_time_s']
    # Its directory moved away, its row goes too.
    (root_dir / 'seed=1').rename(directory / 'seed=1')
    again = run_grid(directory, root_dir)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert sorted(summary(root_dir)) == ['seed=0'] and 'also keeps' not in again.stdout


@pytest.mark.parametrize(
    'grid, message',
    [
        (
            {'parameters': {'x.y': [1]}, 'repeats': 1, 'seeds': [3]},
            'must hold a JSON object with exactly the keys "parameters" and "repeats"',
        ),
        (
            {'parameters': {'x.y,TrainerConfig.random_seed': [1, 2]}, 'repeats': 1},
            'TrainerConfig.random_seed cannot be searched: the seeds come from "repeats"',
        ),
        ({'parameters': {'x.y': []}, 'repeats': 1}, "the values of 'x.y' must be a non-empty list"),
        (
            {'parameters': [['x.y', [1]]], 'repeats': 1},
            "must map gin names to lists of values ({} for seeds alone), got [['x.y', [1]]]",
        ),
        (
            {'parameters': {'x.y,': [1, 2]}, 'repeats': 1},
            "'x.y,' names an empty parameter (a stray comma?)",
        ),
        ({'parameters': {'': [1, 2]}, 'repeats': 1}, "'' names an empty parameter"),
    ],
    ids=['unknown key', 'seed searched', 'no value', 'no mapping', 'stray comma', 'empty name'],
)
def test_a_search_config_that_would_not_sweep_as_written_is_refused(tmp_path, grid, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_space(tmp_path, grid)


def test_a_search_config_saved_with_a_byte_order_mark_is_read_as_without(tmp_path):
    from alf_lite.bin import grid_search

    (tmp_path / 'bom').mkdir()
    path = tmp_path / 'bom' / 'grid.json'
    path.write_bytes(b'\xef\xbb\xbf' + json.dumps(GRID).encode())
    assert grid_search.load_search_space(str(path)) == load_space(tmp_path, GRID)


def test_a_search_config_with_typographic_quotes_is_refused_naming_them(tmp_path):
    from alf_lite.bin import grid_search

    path = tmp_path / 'grid.json'
    path.write_text('{"parameters": {\u201cx.y\u201d: [1]}, "repeats": 1}', 'utf-8')
    with pytest.raises(ValueError) as error:
        grid_search.load_search_space(str(path))
    assert str(error.value) == (
        f'{path} is not valid JSON: Expecting property name enclosed in double quotes: line 1 '
        'column 17 (char 16). The file holds \u201c (U+201C LEFT DOUBLE QUOTATION MARK), as a '
        'copy from a document or a chat gives: write " in its place.'
    )


def test_a_search_config_in_utf16_is_refused_naming_utf16(tmp_path):
    # As Windows PowerShell 5's `>` and Out-File write it.
    from alf_lite.bin import grid_search

    path = tmp_path / 'grid.json'
    path.write_bytes(json.dumps(GRID).encode('utf-16'))
    with pytest.raises(ValueError) as error:
        grid_search.load_search_space(str(path))
    assert str(error.value) == (
        f'{path} is UTF-16 text, not UTF-8 (it starts with a UTF-16 byte order mark): save it '
        'as UTF-8'
    )


def test_a_search_config_that_is_not_text_is_refused_naming_it(tmp_path):
    from alf_lite.bin import grid_search

    path = tmp_path / 'grid.json'
    path.write_bytes(b'\xff' + json.dumps(GRID).encode())
    with pytest.raises(
        ValueError, match=r'grid.json is not text: utf-8 cannot decode its byte 0xff$'
    ):
        grid_search.load_search_space(str(path))


@pytest.mark.parametrize(
    'depth, message',
    [
        # Deeper than json can read; deep enough that the value cannot become gin text.
        (100_000, 'grid.json nests its lists or objects too deeply for JSON to read'),
        (600, "a value of 'x.y' nests its lists too deeply to become a gin value"),
    ],
    ids=['json', 'gin'],
)
def test_a_search_config_nested_too_deeply_is_refused_naming_it(tmp_path, depth, message):
    from alf_lite.bin import grid_search

    path = tmp_path / 'grid.json'
    path.write_text('{"parameters": {"x.y": [0, ' + '[' * depth + ']' * depth + ']}, "repeats": 1}')
    with pytest.raises(ValueError, match=re.escape(message)):
        grid_search.load_search_space(str(path))


def test_a_search_config_with_half_a_surrogate_pair_is_refused_naming_it(tmp_path):
    # Valid JSON, but no character: the run's log, the table and grid_summary.csv could not
    # hold the value or an error naming it, and the sweep ended in a traceback after its runs.
    from alf_lite.bin import grid_search

    path = tmp_path / 'grid.json'
    path.write_text('{"parameters": {"x.y": ["\'a\'", "\'b\\ud800\'"]}, "repeats": 1}')
    with pytest.raises(
        ValueError, match=re.escape("grid.json holds '\\ud800', which is no character")
    ):
        grid_search.load_search_space(str(path))


@pytest.mark.parametrize(
    'text, key',
    [
        ('{"parameters": {"x.y": [1, 2], "x.y": [3]}, "repeats": 1}', 'x.y'),
        ('{"parameters": {"x.y": [1, 2]}, "repeats": 1, "repeats": 2}', 'repeats'),
    ],
    ids=['parameter', 'repeats'],
)
def test_a_key_given_twice_is_refused_rather_than_its_first_values_dropped(tmp_path, text, key):
    from alf_lite.bin import grid_search

    (tmp_path / 'grid.json').write_text(text)
    with pytest.raises(ValueError, match=re.escape(f'has the key {key!r} twice in one object')):
        grid_search.load_search_space(str(tmp_path / 'grid.json'))


@pytest.mark.parametrize(
    'parameters, key',
    [
        ({'x.y': [1], ' x.y': [2]}, 'x.y'),
        ({'a.x,b.y': [1, 2], 'a.x, b.y': [3]}, 'a.x,b.y'),
    ],
    ids=['one name', 'tied names'],
)
def test_a_key_given_twice_spelt_apart_by_spaces_is_refused(tmp_path, parameters, key):
    first, second = parameters
    message = f'has the key {key!r} twice in "parameters", as {first!r} and {second!r}'
    with pytest.raises(ValueError, match=re.escape(message)):
        load_space(tmp_path, {'parameters': parameters, 'repeats': 1})


def test_repeats_is_a_number_of_seeds_from_0_or_a_list_of_seeds(tmp_path):
    assert load_space(tmp_path, {'parameters': {'x.y': [1]}, 'repeats': 3}).seeds == [0, 1, 2]
    assert load_space(tmp_path, {'parameters': {'x.y': [1]}, 'repeats': [0, 7]}).seeds == [0, 7]


@pytest.mark.parametrize('repeats', [2**32, 50_001], ids=['every_seed', 'one_too_many'])
def test_a_search_of_more_runs_than_a_sweep_may_have_is_refused_before_listing_them(
    tmp_path, repeats
):
    from alf_lite.bin.grid_search import MAX_RUNS

    assert 2 * 50_000 == MAX_RUNS
    grid = {'parameters': {'x.y': [1, 2]}, 'repeats': repeats}
    message = (
        f'makes {2 * repeats} runs (2 combinations of "parameters" x {repeats} seeds), more '
        f'than the {MAX_RUNS} one sweep may have'
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        load_space(tmp_path, grid)


def test_a_sweep_of_as_many_runs_as_it_may_have_is_listed_at_once(tmp_path):
    from alf_lite.bin import grid_search

    space = load_space(tmp_path, {'parameters': {'x.y': [1, 2]}, 'repeats': 50_000})
    runs = grid_search.expand_grid(space)
    assert len(runs) == grid_search.MAX_RUNS
    assert runs[-1] == ('y=2,seed=49999', 49999, ['x.y=2'])


def test_a_run_is_named_after_its_parameters_in_the_search_configs_order(tmp_path):
    from alf_lite.bin import grid_search

    grid = {'parameters': {'z.tau': [0.1, 0.2], 'a.lr': [1, 2]}, 'repeats': 1}
    names = [name for name, _, _ in grid_search.expand_grid(load_space(tmp_path, grid))]
    assert names == [
        'tau=0.1,lr=1,seed=0',
        'tau=0.1,lr=2,seed=0',
        'tau=0.2,lr=1,seed=0',
        'tau=0.2,lr=2,seed=0',
    ]


@pytest.mark.parametrize(
    'parameters, names',
    [
        (
            {'actor/Adam.lr,critic/Adam.lr': [1, 2], 'alpha/Adam.lr': [3, 4]},
            ['Adam.lr=1,alpha.Adam.lr=3,seed=0', 'Adam.lr=1,alpha.Adam.lr=4,seed=0'],
        ),
        (
            {'a/X.lr,b/X.lr': [1, 2], 'c/X.lr,d/X.lr': [3, 4]},
            ['a.X.lr+b.X.lr=1,c.X.lr+d.X.lr=3,seed=0', 'a.X.lr+b.X.lr=1,c.X.lr+d.X.lr=4,seed=0'],
        ),
        (
            {'actor/Adam.lr,critic/Adam.lr': [1, 2], 'Adam.lr': [3, 4]},
            [
                'actor.Adam.lr+critic.Adam.lr=1,Adam.lr=3,seed=0',
                'actor.Adam.lr+critic.Adam.lr=1,Adam.lr=4,seed=0',
            ],
        ),
        (
            # Their common end is lr, not actor.lr: actor/Adam.lr and actor/SGD.lr do not end so.
            {'actor/Adam.lr,actor/SGD.lr': [1, 2], 'critic/Adam.lr': [3, 4]},
            ['lr=1,Adam.lr=3,seed=0', 'lr=1,Adam.lr=4,seed=0'],
        ),
    ],
    ids=['own ends', 'tied keys alike', 'tied key and its end', 'tied names of one scope'],
)
def test_no_two_keys_are_named_alike_in_a_run_name(tmp_path, parameters, names):
    from alf_lite.bin import grid_search

    space = load_space(tmp_path, {'parameters': parameters, 'repeats': 1})
    assert [name for name, _, _ in grid_search.expand_grid(space)][:2] == names


def test_tied_names_without_a_common_end_name_their_key_by_all_of_them(tmp_path):
    from alf_lite.bin import grid_search

    grid = {'parameters': {'actor/Adam.lr,SacAlgorithm.target_update_tau': [1, 2]}, 'repeats': 1}
    # Not the names as written: a scope's '/' would nest the run's directory in another.
    assert [name for name, _, _ in grid_search.expand_grid(load_space(tmp_path, grid))] == [
        'actor.Adam.lr+SacAlgorithm.target_update_tau=1,seed=0',
        'actor.Adam.lr+SacAlgorithm.target_update_tau=2,seed=0',
    ]


def test_a_run_name_may_fill_a_file_name_with_its_logs_suffix(tmp_path):
    from alf_lite.bin import grid_search

    # 'env_name=' + the value + ',seed=0' + '.log': 255 bytes, the most a file name holds.
    longest = 'x' * (grid_search.NAME_MAX - len('env_name=,seed=0.log'))
    for value, fits in ((longest, True), (longest + 'x', False)):
        grid = {'parameters': {'create_environment.env_name': [f"'{value}'", "'y'"]}, 'repeats': 1}
        space = load_space(tmp_path, grid)
        if fits:
            assert grid_search.expand_grid(space)[0][0] == f'env_name={value},seed=0'
        else:
            with pytest.raises(ValueError, match='a file name can hold'):
                grid_search.expand_grid(space)


def test_searched_values_win_over_gin_params_which_win_over_the_thread_count(tmp_path):
    import alf_lite.all_configurables  # noqa: F401  (registers every configurable)
    from alf_lite.bin import grid_search

    gin_file, grid = write_inputs(tmp_path, GRID)
    space = grid_search.load_search_space(str(grid))

    def configs(gin_params):
        runs = grid_search.configure_runs(
            space, str(tmp_path / 'runs'), [str(gin_file)], gin_params, num_threads=2
        )
        assert [run.error for run in runs] == [None] * len(runs)
        return {run.name: run.config_text for run in runs}

    assert all('TrainerConfig.torch_num_threads = 2\n' in c for c in configs([]).values())
    given = configs(['SacAlgorithm.target_update_tau=0.5', 'TrainerConfig.torch_num_threads=3'])
    assert sorted(given) == RUN_NAMES
    for name, config in given.items():
        tau = name.split(',')[0].split('=')[1]
        assert f'SacAlgorithm.target_update_tau = {tau}\n' in config
        assert 'TrainerConfig.torch_num_threads = 3\n' in config
        assert f'TrainerConfig.random_seed = {name[-1]}\n' in config


def test_the_modules_of_the_users_own_that_the_configs_import_are_found_to_ship_to_ray(
    tmp_path, monkeypatch, capsys
):
    import alf_lite.all_configurables  # noqa: F401  (registers every configurable)
    from alf_lite.bin import grid_search

    # A gin import of a package, an env module (a file) in a searched env id, one named
    # through a macro; none imported by the sweep but the package.
    (tmp_path / 'nets_pkg_7c1d').mkdir()
    (tmp_path / 'nets_pkg_7c1d' / '__init__.py').write_text('')
    (tmp_path / 'envs_a_7c1d.py').write_text('')
    (tmp_path / 'envs_b_7c1d.py').write_text('')
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ('nets_pkg_7c1d', 'envs_a_7c1d', 'envs_b_7c1d'):
        monkeypatch.delitem(sys.modules, name, raising=False)
    grid = {
        'parameters': {'create_environment.env_name': ["'envs_a_7c1d:A-v0'", '%ENV']},
        'repeats': 1,
    }
    gin_file, grid_file = write_inputs(tmp_path, grid)
    space = grid_search.load_search_space(str(grid_file))
    params = ['import nets_pkg_7c1d', "ENV = 'envs_b_7c1d.sub:B-v0'"]
    imports = set()
    runs = grid_search.configure_runs(
        space, str(tmp_path / 'runs'), [str(gin_file)], params, 1, imports
    )
    assert [run.error for run in runs] == [None] * len(runs)
    assert 'envs_a_7c1d' not in sys.modules and 'envs_b_7c1d' not in sys.modules
    assert {'nets_pkg_7c1d', 'envs_a_7c1d', 'envs_b_7c1d'} <= imports
    # The installed packages the configs import (alf_lite's gin files', gymnasium) stay.
    assert grid_search.modules_to_ship(imports) == [
        str(tmp_path / 'envs_a_7c1d.py'),
        str(tmp_path / 'envs_b_7c1d.py'),
        str(tmp_path / 'nets_pkg_7c1d'),
    ]
    assert grid_search.modules_to_ship(['json', 'gymnasium', 'alf_lite', 'no_such_7c1d']) == []
    # Compiled code cannot travel: refused, naming the module.
    (tmp_path / 'compiled_7c1d.pyc').write_bytes(b'')
    with pytest.raises(SystemExit) as exit_:
        grid_search.modules_to_ship(['compiled_7c1d'])
    assert exit_.value.code == 2
    assert (
        f'error: the config imports compiled_7c1d, whose code ({tmp_path / "compiled_7c1d.pyc"}) '
        'is not an installed package and cannot travel with the Ray tasks'
    ) in capsys.readouterr().err


def test_root_dir_whose_name_is_not_utf8_is_refused_before_anything_is_written(tmp_path):
    # Each run failed in TensorBoard's writer, after the sweep had written its files there.
    write_inputs(tmp_path, GRID)
    root_dir = tmp_path / os.fsdecode(b'runs\xff')
    result = run_grid(tmp_path, root_dir)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f'--root_dir {ascii(str(root_dir))} is no UTF-8 name' in result.stderr, result.stderr
    assert 'Traceback' not in result.stderr
    assert sorted(os.listdir(tmp_path)) == ['grid.json', 'tiny.gin']


def test_root_dir_that_is_a_file_or_a_train_run_is_refused_and_left_as_it_is(tmp_path):
    write_inputs(tmp_path, GRID)
    (tmp_path / 'runs').write_text('mine')
    result = run_grid(tmp_path, tmp_path / 'runs')
    assert result.returncode == 2 and 'is a file, not a directory' in result.stderr
    assert 'Traceback' not in result.stderr
    assert (tmp_path / 'runs').read_text() == 'mine'
    (tmp_path / 'run').mkdir()
    (tmp_path / 'run' / 'config.gin').write_text('TrainerConfig.random_seed = 0\n')
    result = run_grid(tmp_path, tmp_path / 'run')
    assert result.returncode == 2 and 'holds a train run (its config.gin, ' in result.stderr
    assert os.listdir(tmp_path / 'run') == ['config.gin']
    # One without config.gin (trained through the Python API): each run would be refused.
    (tmp_path / 'api_run' / 'checkpoints' / 'ckpt-100').mkdir(parents=True)
    result = run_grid(tmp_path, tmp_path / 'api_run')
    assert result.returncode == 2 and 'holds a train run (its config.gin, ' in result.stderr
    assert os.listdir(tmp_path / 'api_run') == ['checkpoints']
    # Inside one: TensorBoard on that run would show the sweep's runs as its own.
    (tmp_path / 'run' / 'progress.csv').write_text('env_steps\n')
    result = run_grid(tmp_path, tmp_path / 'run' / 'sweep')
    assert result.returncode == 2, result.stderr[-2000:]
    last_line = result.stderr.strip().splitlines()[-1]
    outer = tmp_path / 'run'
    assert last_line.startswith(f'error: --root_dir {outer / "sweep"} is inside the run {outer} ')
    assert sorted(os.listdir(tmp_path / 'run')) == ['config.gin', 'progress.csv']


def test_a_sweep_holds_its_root_dir_and_a_second_one_there_exits_2_before_writing_anything(
    tmp_path, monkeypatch, capsys
):
    from alf_lite.run_dir import RunDirLock, run_dir_in_use

    # A sweep that ran before, whose runs and table the second one must leave alone.
    root_dir = tmp_path / 'runs'
    (root_dir / RUN_NAMES[0]).mkdir(parents=True)
    (root_dir / 'grid_summary.csv').write_text('run,status\n')
    before = tree(root_dir)
    calls = {}
    with RunDirLock(str(root_dir)):  # as the sweep running there holds it
        with pytest.raises(SystemExit) as exit_info:
            run_main(tmp_path, monkeypatch, [], [], calls=calls)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    # It names the process that holds the lock: this one, here, neither a sweep nor a train.
    assert err == (
        f'error: --root_dir {root_dir} is in use: another process is using it (pid '
        f"{os.getpid()} holds the directory's lock). Wait for it to end or stop it, or "
        'choose another --root_dir.\n'
    )
    assert out == '' and calls == {} and tree(root_dir) == before

    # A sweep holds it while its runs train (each train locks its own directory) and
    # lets it go at the end.
    locked = []
    run_main(
        tmp_path, monkeypatch, [], [], on_train=lambda: locked.append(run_dir_in_use(root_dir))
    )
    assert locked == [True] and not run_dir_in_use(root_dir)
    assert {r['status'] for r in summary(root_dir).values()} == {'finished'}


def test_a_root_dir_held_by_a_train_or_a_sweep_is_named_as_such():
    from alf_lite.bin.grid_search import _holder_kind

    def kind(*argv):
        # A process whose command line is that of the tool, as ps shows it.
        script = 'import sys, time; sys.stdout.write("up\\n"); sys.stdout.flush(); time.sleep(60)'
        proc = subprocess.Popen(
            [sys.executable, '-c', script, *argv], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout.readline() == 'up\n'
            return _holder_kind([proc.pid])[0]
        finally:
            proc.kill()
            proc.wait()

    assert kind('-m', 'alf_lite.bin.grid_search') == 'another grid_search is sweeping in it'
    assert kind('-m', 'alf_lite.bin.train', '--root_dir', 'x').startswith('a train is running')
    assert kind('benchmarks/learning.py') == 'another process is using it'
    assert _holder_kind([]) == ('another process is using it', 'it')


# --- Ray ------------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(scope='module')
def ray_cluster():
    """A single-node Ray cluster on loopback with 2 CPUs, started once for the module's Ray
    tests (each sweep's tasks end with it): ``(address, env for its drivers, its temp dir)``."""
    pytest.importorskip('ray', reason='the Ray backend needs the ray extra: pip install .[ray]')
    # Ray advertises the machine's network address unless told to stay on
    # loopback; a fresh cluster needs no token.
    ray_env = dict(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER='0', RAY_AUTH_MODE='disabled')
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix='ray-', dir='/tmp')  # short: socket paths are limited
    ray_cli = os.path.join(os.path.dirname(sys.executable), 'ray')
    with open(os.path.join(temp_dir, 'start.log'), 'w') as log:
        head = subprocess.Popen(
            [
                ray_cli,
                'start',
                '--head',
                '--node-ip-address',
                '127.0.0.1',
                '--port',
                str(port),
                '--num-cpus',
                '2',
                '--include-dashboard=false',
                '--disable-usage-stats',
                '--temp-dir',
                temp_dir,
                '--block',
            ],
            # The workers get neither this checkout's PYTHONPATH nor the driver's working
            # directory; an editable install may still let them import this checkout,
            # so the tests check that the runs ran the copy shipped with the tasks.
            cwd=temp_dir,
            env={k: v for k, v in dict(os.environ, **ray_env).items() if k != 'PYTHONPATH'},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.time() + 120
        while 'Ray runtime started' not in open(log.name).read():
            assert head.poll() is None and time.time() < deadline, open(log.name).read()[-3000:]
            time.sleep(0.2)
        yield f'127.0.0.1:{port}', dict(train_env(), **ray_env), temp_dir
    finally:
        # --block: ending the start command stops the processes it started; anything
        # left is in its process group, which is this fixture's alone.
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def shipped_copies(ray_temp_dir):
    """The ``alf_lite`` directories that Ray unpacked for its workers under its temp dir."""
    found = glob.glob(os.path.join(ray_temp_dir, '**', 'alf_lite', 'runs.py'), recursive=True)
    return [os.path.dirname(path) for path in found]


def test_ray_grid_gives_the_same_runs_as_the_local_one(local_grid, ray_cluster, tmp_path):
    address, env, temp_dir = ray_cluster
    directory, local_root, _ = local_grid
    # Another working directory: the tasks must not depend on the driver's.
    write_inputs(tmp_path / 'driver', GRID)
    root_dir = tmp_path / 'shared' / 'runs'
    # Runs of more CPUs than any node has would wait forever: refused, nothing written.
    args = ['--ray_address', address, '--num_cpus_per_run', '4']
    refused = run_grid(tmp_path / 'driver', root_dir, *args, env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert (
        f'error: no node of the Ray cluster at {address} can ever run a run: each asks for '
        '4 CPU(s), and its alive nodes are: 1 with 2 CPU(s) and 0 GPU(s);' in refused.stderr
    )
    assert refused.stdout == '' and not root_dir.exists()
    result = run_grid(tmp_path / 'driver', root_dir, '--ray_address', address, env=env)
    assert_finished_grid(root_dir, result)
    assert f'Ray at {address}' in result.stdout
    # This checkout's alf_lite travelled with the tasks: Ray unpacked it for its workers.
    shipped = shipped_copies(temp_dir)
    assert shipped, os.listdir(temp_dir)
    for copy in shipped:
        assert (Path(copy) / 'runs.py').read_bytes() == (
            REPO_ROOT / 'alf_lite' / 'runs.py'
        ).read_bytes()
    for name in RUN_NAMES:
        assert (root_dir / name / 'config.gin').read_text() == (
            local_root / name / 'config.gin'
        ).read_text()
        assert deterministic_progress(root_dir / name) == deterministic_progress(local_root / name)


def test_ray_runs_import_the_configs_modules_of_the_sweeps_working_directory(ray_cluster, tmp_path):
    # README: the code travels with the tasks; the config's own modules that are not
    # installed (a gin import, an env id's module) live only where the sweep runs.
    address, env, temp_dir = ray_cluster
    write_inputs(
        tmp_path, {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 1}
    )
    (tmp_path / 'sweep_nets').mkdir()
    (tmp_path / 'sweep_nets' / '__init__.py').write_text(
        'import gin\n\n\n@gin.configurable\ndef sweep_layers(units=16):\n    return (units,)\n'
    )
    (tmp_path / 'sweep_envs.py').write_text(SWEEP_ENVS)
    root_dir = tmp_path / 'runs'
    result = run_grid(
        tmp_path,
        root_dir,
        '--ray_address',
        address,
        '--gin_param',
        'import sweep_nets',
        '--gin_param',
        'TanhNormalActorNetwork.hidden_layers = @sweep_layers()',
        '--gin_param',
        "create_environment.env_name='sweep_envs:SweepPendulum-v0'",
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'seed=0: finished' in result.stdout, result.stdout
    assert checkpoint_steps(root_dir / 'seed=0')[-1] == NUM_ENV_STEPS
    # They travelled with the task: Ray unpacked them for its workers.
    for shipped in ('sweep_envs.py', os.path.join('sweep_nets', '__init__.py')):
        assert glob.glob(os.path.join(temp_dir, '**', shipped), recursive=True), shipped


def test_a_ray_sweep_makes_no_mark_where_a_link_of_its_marks_directory_points(
    ray_cluster, tmp_path
):
    # README: a link in the sweep's directory leads grid_search to change nothing outside.
    address, env, _ = ray_cluster
    write_inputs(
        tmp_path, {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 1}
    )
    outside = tmp_path / 'outside'
    outside.mkdir()
    (outside / 'seed=0').write_text("not the sweep's\n")
    root_dir = tmp_path / 'runs'
    root_dir.mkdir()
    os.symlink(outside, root_dir / '.grid_search_started')
    result = run_grid(tmp_path, root_dir, '--ray_address', address, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'seed=0: finished' in result.stdout, result.stdout
    assert sorted(os.listdir(outside)) == ['seed=0']
    assert (outside / 'seed=0').read_text() == "not the sweep's\n"
    assert not os.path.lexists(root_dir / '.grid_search_started')


def training_environment(monkeypatch) -> dict:
    """The environment the next training subprocess of ``alf_lite.runs`` is started with,
    filled in as it starts; the subprocess is not started, and ends at once with 0."""
    import alf_lite.runs

    seen = {}

    class FakePopen:
        def __init__(self, command, **kwargs):
            seen.update(kwargs['env'])

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            pass

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(alf_lite.runs.subprocess, 'Popen', FakePopen)
    return seen


@pytest.mark.parametrize('num_gpus, seen_gpus', [(0, ''), (0.5, '0,1')])
def test_a_ray_run_that_reserved_no_gpu_sees_none(tmp_path, monkeypatch, num_gpus, seen_gpus):
    # Newer Ray leaves CUDA_VISIBLE_DEVICES as it is for a task of no GPUs: the run saw every
    # GPU of the node and TrainerConfig.device='auto' took cuda:0, unreserved.
    from alf_lite.bin.grid_search import STOP_FILE, _train_on_ray

    seen = training_environment(monkeypatch)
    # What the task's worker sees: every GPU, or (with GPUs reserved) those Ray gave it.
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,1')
    root_dir = tmp_path / 'runs'
    root_dir.mkdir()
    result = _train_on_ray(
        'seed=0',
        str(root_dir / 'seed=0'),
        '',
        1,
        str(root_dir / 'logs' / 'seed=0.log'),
        str(root_dir / STOP_FILE),
        num_gpus,
    )
    assert result['returncode'] == 0
    assert seen['CUDA_VISIBLE_DEVICES'] == seen_gpus


def test_a_ray_task_makes_no_mark_through_a_link(tmp_path):
    # A link made after the driver cleared the marks' directory: the task fails, naming it.
    from alf_lite.bin.grid_search import STARTED_DIR, STOP_FILE, _train_on_ray

    outside = tmp_path / 'outside'
    outside.mkdir()
    (outside / 'seed=0').write_text("not the sweep's\n")
    root_dir = tmp_path / 'runs'
    root_dir.mkdir()
    os.symlink(outside, root_dir / STARTED_DIR)
    # A stopped sweep: a task that made its mark starts no train.
    (root_dir / STOP_FILE).write_text('SIGINT\n')
    with pytest.raises(OSError, match=STARTED_DIR):
        _train_on_ray(
            'seed=0',
            str(root_dir / 'seed=0'),
            '',
            1,
            str(root_dir / 'logs' / 'seed=0.log'),
            str(root_dir / STOP_FILE),
            0,
        )
    assert (outside / 'seed=0').read_text() == "not the sweep's\n"


def test_signal_stops_a_ray_sweep_with_checkpoints(ray_cluster, tmp_path):
    address, env, temp_dir = ray_cluster
    write_inputs(tmp_path, GRID)
    root_dir = tmp_path / 'runs'
    process = start_long_grid(
        tmp_path, root_dir, '--ray_address', address, '--num_cpus_per_run', '1', env=env
    )
    pythonpaths = []

    def two_running():
        # The cluster's 2 CPUs hold two runs; the other two wait in Ray's queue.
        if sum(len(progress_rows(root_dir / n)) >= 2 for n in RUN_NAMES) < 2:
            return False
        pythonpaths.extend(p.environ()['PYTHONPATH'] for p in training_processes(root_dir))
        return True

    stdout, stderr = signal_once(
        process, root_dir, two_running, lambda: os.killpg(process.pid, signal.SIGINT)
    )
    assert process.returncode == 130, stderr[-3000:]
    assert 'Traceback' not in stderr, stderr[-3000:]
    rows = summary(root_dir)
    statuses = collections.Counter(r['status'] for r in rows.values())
    assert statuses == {'stopped': 2, 'not started (sweep stopped)': 2}, rows
    for name, row in rows.items():
        if row['status'] == 'stopped':
            # Its only checkpoint, written as it stopped, at its last step.
            assert row['error'] == ''
            steps = checkpoint_steps(root_dir / name)
            assert len(steps) == 1 and steps[0] == int(row['env_steps'])
            assert steps[0] >= int(progress_rows(root_dir / name)[-1]['env_steps'])
        else:
            assert not (root_dir / name).exists()
    assert training_processes(root_dir) == []
    assert not (root_dir / '.grid_search_stop').exists()  # a re-run is not stopped by it
    # Both trains ran the alf_lite shipped with the tasks, which Ray unpacked in its temp dir.
    shipped = {os.path.realpath(os.path.dirname(copy)) for copy in shipped_copies(temp_dir)}
    assert len(pythonpaths) == 2
    for pythonpath in pythonpaths:
        assert os.path.realpath(pythonpath.split(os.pathsep)[0]) in shipped, pythonpath


# --- GPUs ------------------------------------------------------------------------------------


def fake_runs(n, tmp_path):
    from alf_lite.bin.grid_search import GridRun

    return [
        GridRun(
            f'run{i}', i, str(tmp_path / f'run{i}'), str(tmp_path / f'run{i}.log'), 'text', 10, None
        )
        for i in range(n)
    ]


class FakeTraining:
    """Stands in for train_in_subprocess: records each run's environment, threads and GPU."""

    def __init__(self, meet: int = 0):
        self.lock = threading.Lock()
        # The first ``meet`` runs wait (up to 10 s) until all of them run, so a pool that
        # can run that many at once is seen to, however loaded the machine.
        self.meeting = threading.Barrier(meet, timeout=10) if meet else None
        self.env = {}
        self.in_use = collections.Counter()
        self.most_in_use = collections.Counter()
        self.started = []
        self.num_threads = {}
        self.running = 0
        self.most_running = 0

    def __call__(
        self, root_dir, config_text, num_threads, log_path, extra_env=None, on_start=None, **_
    ):
        gpu = (extra_env or {}).get('CUDA_VISIBLE_DEVICES')
        with self.lock:
            self.env[os.path.basename(root_dir)] = extra_env
            self.num_threads[os.path.basename(root_dir)] = num_threads
            self.started.append(gpu)
            self.in_use[gpu] += 1
            self.most_in_use[gpu] = max(self.most_in_use[gpu], self.in_use[gpu])
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            meet = self.meeting is not None and len(self.started) <= self.meeting.parties
        if meet:
            try:
                self.meeting.wait()
            except threading.BrokenBarrierError:
                pass  # fewer ran at once: the test's counts say so
        time.sleep(0.05)
        with self.lock:
            self.in_use[gpu] -= 1
            self.running -= 1
        return {'returncode': 0, 'wall_time_s': 0.05, 'error': None}


@pytest.mark.parametrize('runs_per_gpu', [1, 2])
def test_local_runs_get_one_gpu_each_spread_over_the_gpus_and_share_it_up_to_runs_per_gpu(
    tmp_path, monkeypatch, runs_per_gpu
):
    import alf_lite.runs
    from alf_lite.bin.grid_search import run_local

    training = FakeTraining(meet=2 * runs_per_gpu)
    monkeypatch.setattr(alf_lite.runs, 'train_in_subprocess', training)
    reported = []
    run_local(
        fake_runs(9, tmp_path),
        max_workers=2 * runs_per_gpu,
        num_threads=1,
        report=lambda run, result: reported.append(run.name),
        gpus=['3', '5'],
        runs_per_gpu=runs_per_gpu,
    )
    assert sorted(reported) == sorted(f'run{i}' for i in range(9))
    assert all(set(env) == {'CUDA_VISIBLE_DEVICES'} for env in training.env.values())
    assert set(training.started) == {'3', '5'} and set(training.started[:2]) == {'3', '5'}
    assert training.most_in_use == {'3': runs_per_gpu, '5': runs_per_gpu}


def test_a_new_run_gets_the_gpu_with_the_fewest_runs_the_first_of_a_tie():
    from alf_lite.bin.grid_search import GpuPool

    pool = GpuPool(['3', '5'], runs_per_gpu=2)
    assert [pool.acquire(), pool.acquire()] == ['3', '5']
    pool.release('3')
    assert pool.acquire() == '3'
    pool.release('3')
    # '5' still holds a run and '3' none: the next run goes to '3', not to '5'
    # after it, as a queue of freed slots would hand them out.
    assert pool.acquire() == '3'
    assert pool.acquire() == '3'  # one run on each: the first of the tie
    assert pool.acquire() == '5'

    # Both full: the next run waits for a GPU that frees.
    started = []
    waiting = threading.Thread(target=lambda: started.append(pool.acquire()))
    waiting.start()
    time.sleep(0.1)
    assert started == []
    pool.release('5')
    waiting.join(timeout=5)
    assert started == ['5']


def test_local_runs_without_gpus_keep_their_environment(tmp_path, monkeypatch):
    import alf_lite.runs
    from alf_lite.bin.grid_search import run_local

    training = FakeTraining()
    monkeypatch.setattr(alf_lite.runs, 'train_in_subprocess', training)
    run_local(fake_runs(3, tmp_path), max_workers=2, num_threads=1, report=lambda run, result: None)
    assert list(training.env.values()) == [None] * 3


def make_run1_fail(monkeypatch, error):
    """Replace training by a ``FakeTraining``, returned, except that the run named
    ``run1`` raises ``error``."""
    import alf_lite.runs

    training = FakeTraining()

    def train_or_fail(root_dir, *args, **kwargs):
        if root_dir.endswith('run1'):
            raise error
        return training(root_dir, *args, **kwargs)

    monkeypatch.setattr(alf_lite.runs, 'train_in_subprocess', train_or_fail)
    return training


def local_results(runs, max_workers):
    """``run_local``'s result of each of ``runs`` (1 thread a run), by name."""
    from alf_lite.bin.grid_search import run_local

    reported = {}
    run_local(
        runs,
        max_workers=max_workers,
        num_threads=1,
        report=lambda run, result: reported.update({run.name: result}),
    )
    return reported


def test_os_error_in_one_run_fails_that_run_and_the_others_train(tmp_path, monkeypatch):
    make_run1_fail(monkeypatch, OSError(36, 'File name too long'))
    reported = local_results(fake_runs(3, tmp_path), max_workers=2)
    assert sorted(reported) == ['run0', 'run1', 'run2']
    assert reported['run0']['returncode'] == reported['run2']['returncode'] == 0
    assert reported['run1']['returncode'] is None
    assert 'File name too long' in reported['run1']['error']
    assert reported['run1']['wall_time_s'] >= 0


def test_a_run_s_wall_time_is_not_changed_by_the_clock_being_set(tmp_path, monkeypatch):
    import alf_lite.bin.grid_search
    import alf_lite.runs

    # A run that fails after 0.3 s, while the clock is set back an hour (NTP stepping it).
    def fail_later(*args, **kwargs):
        time.sleep(0.3)
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(alf_lite.runs, 'train_in_subprocess', fail_later)
    monkeypatch.setattr(alf_lite.bin.grid_search, 'time', ClockSetBack(3600))
    reported = local_results(fake_runs(1, tmp_path), max_workers=1)
    assert 'No space left' in reported['run0']['error']
    assert 0.3 <= reported['run0']['wall_time_s'] < RUN_TIMEOUT_S, reported


def test_training_subprocess_gets_the_extra_environment(tmp_path, monkeypatch):
    import alf_lite.runs

    seen = training_environment(monkeypatch)
    result = alf_lite.runs.train_in_subprocess(
        str(tmp_path / 'run'),
        'text',
        3,
        str(tmp_path / 'logs' / 'run.log'),
        extra_env={'CUDA_VISIBLE_DEVICES': '7'},
    )
    assert result['returncode'] == 0
    assert seen['CUDA_VISIBLE_DEVICES'] == '7' and seen['OMP_NUM_THREADS'] == '3'


class FakeRay(types.ModuleType):
    """The part of the ray module that grid_search uses; tasks run at once.

    A task succeeds unless its root_dir is in ``errors``, which maps it to the
    text of the Ray error its ``get`` raises. ``init_error`` is raised by ``init``.
    ``nodes`` are those ``nodes()`` gives.
    """

    def __init__(
        self, errors=(), init_error=None, nodes=({'Alive': True, 'Resources': {'CPU': 8.0}},)
    ):
        super().__init__('ray')
        self.options = None
        self.init_kwargs = None
        self.task_args = []
        self.errors = dict(errors)
        self.init_error = init_error
        self.node_list = list(nodes)
        self.cancelled = []
        self.shut_down = False
        self.exceptions = types.SimpleNamespace(RayError=RuntimeError)

    def init(self, **kwargs):
        self.init_kwargs = kwargs
        if self.init_error:
            raise self.init_error

    def nodes(self):
        return self.node_list

    def shutdown(self):
        self.shut_down = True

    def remote(self, **options):
        def wrap(fn):
            self.options = options
            return types.SimpleNamespace(remote=lambda *args: self.submit(fn, *args))

        return wrap

    def submit(self, fn, name, root_dir, config_text, num_threads, log_path, stop_file, gpus):
        self.task_args.append((root_dir, config_text, num_threads, log_path))
        return root_dir  # the task's reference

    def wait(self, refs, num_returns, timeout=None):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref, timeout=None):
        if ref in self.errors:
            raise RuntimeError(self.errors[ref])
        return {'returncode': 0, 'wall_time_s': 0.0, 'error': None}

    def cancel(self, ref):
        self.cancelled.append(ref)


@pytest.mark.parametrize(
    'num_gpus, expected', [(0.25, {'num_gpus': 0.25}), (2, {'num_gpus': 2}), (0.0, {})]
)
def test_ray_tasks_request_the_gpus_per_run_fractions_included(
    tmp_path, monkeypatch, num_gpus, expected
):
    from alf_lite.bin.grid_search import run_ray

    ray = FakeRay()
    monkeypatch.setitem(sys.modules, 'ray', ray)
    reported = []
    run_ray(
        fake_runs(2, tmp_path),
        3,
        lambda run, result: reported.append(run.name),
        num_gpus_per_run=num_gpus,
    )
    assert ray.options == dict({'num_cpus': 3, 'max_calls': 1}, **expected)
    assert sorted(reported) == ['run0', 'run1']


def test_of_tied_gpus_the_first_in_the_given_order_is_taken():
    from alf_lite.bin.grid_search import GpuPool

    # The order of CUDA_VISIBLE_DEVICES, not the sorted ids.
    pool = GpuPool(['5', '3'], runs_per_gpu=1)
    assert [pool.acquire(), pool.acquire()] == ['5', '3']


def test_a_run_that_fails_with_an_os_error_hands_its_gpu_back(tmp_path, monkeypatch):
    from alf_lite.bin.grid_search import run_local

    training = make_run1_fail(monkeypatch, OSError(28, 'No space left on device'))
    # One worker: the runs start in order, each after the one before ended, so
    # every run finds both GPUs free and takes '0', the first.
    run_local(
        fake_runs(3, tmp_path),
        max_workers=1,
        num_threads=1,
        report=lambda run, result: None,
        gpus=['0', '1'],
        runs_per_gpu=1,
    )
    assert training.started == ['0', '0']


def test_local_runs_get_the_thread_count_and_at_most_max_workers_run_at_a_time(
    tmp_path, monkeypatch
):
    import alf_lite.runs
    from alf_lite.bin.grid_search import run_local

    # Three GPUs hold three runs at a time: max_workers is the tighter limit.
    for gpus in ([], ['0', '1', '2']):
        training = FakeTraining()
        monkeypatch.setattr(alf_lite.runs, 'train_in_subprocess', training)
        run_local(
            fake_runs(4, tmp_path),
            max_workers=2,
            num_threads=3,
            report=lambda run, result: None,
            gpus=gpus,
        )
        assert training.num_threads == {f'run{i}': 3 for i in range(4)}
        assert training.most_running == 2
    # A run whose config sets its torch threads gets as many OpenMP and MKL threads, on a
    # GPU too.
    runs = [run._replace(torch_num_threads=i + 1) for i, run in enumerate(fake_runs(2, tmp_path))]
    for gpus in ([], ['0']):
        training = FakeTraining()
        monkeypatch.setattr(alf_lite.runs, 'train_in_subprocess', training)
        run_local(runs, max_workers=2, num_threads=3, report=lambda run, result: None, gpus=gpus)
        assert training.num_threads == {'run0': 1, 'run1': 2}


@pytest.fixture
def listening_address():
    """``127.0.0.1:<port>`` where a socket listens (and accepts nothing): a TCP connect
    succeeds, also at the node address Ray may look at instead of 127.0.0.1."""
    with socket.create_server(('', 0)) as server:
        yield f'127.0.0.1:{server.getsockname()[1]}'


def test_ray_runs_ship_the_package_and_get_their_cpus_as_threads(
    tmp_path, monkeypatch, listening_address
):
    import alf_lite
    from alf_lite.bin.grid_search import connect_ray, run_ray

    ray = FakeRay()
    monkeypatch.setitem(sys.modules, 'ray', ray)
    runs = fake_runs(2, tmp_path)
    connect_ray(listening_address, 3, 0.0)
    assert ray.init_kwargs['address'] == listening_address
    assert ray.init_kwargs['runtime_env'] == {
        'py_modules': [os.path.dirname(os.path.abspath(alf_lite.__file__))]
    }
    run_ray(runs, 3, lambda run, result: None)
    assert ray.task_args == [(r.root_dir, r.config_text, 3, r.log_path) for r in runs]
    assert ray.shut_down
    # A run whose config sets its torch threads gets as many OpenMP and MKL threads.
    ray.task_args = []
    run_ray([runs[0]._replace(torch_num_threads=2)], 3, lambda run, result: None)
    assert ray.task_args == [(runs[0].root_dir, runs[0].config_text, 2, runs[0].log_path)]


def test_a_failed_ray_task_fails_its_run_with_the_errors_last_line(tmp_path, monkeypatch):
    from alf_lite.bin import grid_search

    runs = fake_runs(2, tmp_path)
    ray = FakeRay(
        errors={runs[1].root_dir: 'Traceback:\n  frame\n\nOutOfMemoryError: task killed\n'}
    )
    monkeypatch.setitem(sys.modules, 'ray', ray)
    # The clock reads 100.0 when both tasks are submitted and 107.5 when the error comes.
    clock = iter([100.0, 100.0, 107.5])
    monkeypatch.setattr(grid_search, 'time', types.SimpleNamespace(monotonic=lambda: next(clock)))
    reported = {}
    grid_search.run_ray(runs, 1, lambda run, result: reported.update({run.name: result}))
    assert reported['run0'] == {'returncode': 0, 'wall_time_s': 0.0, 'error': None}
    assert reported['run1'] == {
        'returncode': None,
        'wall_time_s': 7.5,
        'error': 'Ray task failed: OutOfMemoryError: task killed',
    }


def test_ray_is_shut_down_when_reporting_a_run_raises(tmp_path, monkeypatch):
    from alf_lite.bin.grid_search import run_ray

    ray = FakeRay()
    monkeypatch.setitem(sys.modules, 'ray', ray)

    def report(run, result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_ray(fake_runs(2, tmp_path), 1, report)
    assert ray.shut_down


@pytest.mark.parametrize('error', [ConnectionError('refused'), RuntimeError('no cluster')])
def test_a_ray_cluster_that_cannot_be_reached_exits_2_naming_its_address(
    monkeypatch, capsys, listening_address, error
):
    from alf_lite.bin.grid_search import connect_ray

    ray = FakeRay(init_error=error)
    monkeypatch.setitem(sys.modules, 'ray', ray)
    with pytest.raises(SystemExit) as exit_info:
        connect_ray(listening_address, 1, 0.0)
    assert exit_info.value.code == 2
    assert f'cannot connect to the Ray cluster at {listening_address}: {error}' in (
        capsys.readouterr().err
    )
    assert ray.shut_down


TWO_CPUS = {'Alive': True, 'Resources': {'CPU': 2.0, 'memory': 1e10}}
GPU_NODE = {'Alive': True, 'Resources': {'CPU': 8.0, 'GPU': 1.0}}


@pytest.mark.parametrize(
    'nodes, cpus, gpus, node_types, problem',
    [
        (
            [TWO_CPUS],
            4,
            0.0,
            [],
            'each asks for 4 CPU(s), and its alive nodes are: 1 with 2 CPU(s) and 0 GPU(s);',
        ),
        # A dead node's resources are not there.
        (
            [TWO_CPUS, TWO_CPUS, dict(GPU_NODE, Alive=False)],
            1,
            0.25,
            [],
            'each asks for 1 CPU(s) and 0.25 GPU(s), and its alive nodes are: 2 with 2 CPU(s) '
            'and 0 GPU(s);',
        ),
        # A node type the autoscaler may start counts only when it fits.
        (
            [TWO_CPUS],
            4,
            0.0,
            [{'CPU': 3.0}],
            'nodes are: 1 with 2 CPU(s) and 0 GPU(s), nor may its autoscaler start such a node;',
        ),
        # One node holds all a run asks for, or the autoscaler may start one.
        ([TWO_CPUS, GPU_NODE], 4, 0.5, [], None),
        ([TWO_CPUS], 4, 0.0, [{'CPU': 2.0}, {'CPU': 4.0}], None),
    ],
    ids=['cpus', 'gpus', 'node type too small', 'one node fits', 'node type fits'],
)
def test_ray_runs_that_no_node_can_hold_exit_2_naming_the_nodes(
    monkeypatch, capsys, listening_address, nodes, cpus, gpus, node_types, problem
):
    from alf_lite.bin import grid_search

    ray = FakeRay(nodes=nodes)
    monkeypatch.setitem(sys.modules, 'ray', ray)
    monkeypatch.setattr(grid_search, '_node_types_ray_may_start', lambda: node_types)
    if problem is None:
        grid_search.connect_ray(listening_address, cpus, gpus)
        assert not ray.shut_down
        return
    with pytest.raises(SystemExit) as exit_info:
        grid_search.connect_ray(listening_address, cpus, gpus)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: no node of the Ray cluster at {listening_address} can ever run')
    assert problem in err and 'Lower --num_cpus_per_run or --num_gpus_per_run' in err, err
    assert ray.shut_down


class StoppedRay(FakeRay):
    """A cluster where the first task begins and the others never do (another job holds
    the nodes): ``signum`` (SIGINT: Ctrl-C) comes while the sweep waits, the first task ends
    once the stop file is there, and the sweep must not wait for the others."""

    def __init__(self, signum=signal.SIGINT):
        super().__init__()
        self.signum = signum
        self.refs = []
        self.results = {}
        self.stop_file = None
        self.waits_after_stop = 0

    def submit(self, fn, name, root_dir, *args):
        if not self.refs:  # the first task begins: its train stops on SIGINT
            self.results[root_dir] = fn(name, root_dir, *args)
        self.refs.append(root_dir)
        self.stop_file = args[3]  # after config_text, num_threads and log_path
        return root_dir

    def wait(self, refs, num_returns, timeout=None):
        if not os.path.exists(self.stop_file):
            os.kill(os.getpid(), self.signum)  # while the runs go on
        elif self.refs[0] in refs:
            return [self.refs[0]], [r for r in refs if r != self.refs[0]]
        else:
            self.waits_after_stop += 1
            assert self.waits_after_stop < 20, 'the sweep waits for tasks that never begin'
        return [], refs

    def get(self, ref, timeout=None):
        return self.results[ref]


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1])
def test_ray_tasks_not_begun_when_a_signal_stops_the_sweep_are_cancelled_and_not_started(
    tmp_path, monkeypatch, capfd, sig
):
    import alf_lite.runs
    from alf_lite.bin.grid_search import run_ray

    def train_in_subprocess(root_dir, config_text, num_threads, log_path, stop_file, extra_env):
        # The task passes SIGINT on to its train, whatever stopped the sweep.
        error = 'exit code 130: interrupted by SIGINT: checkpoint written'
        return {'returncode': 130, 'wall_time_s': 1.0, 'error': error}

    monkeypatch.setattr(alf_lite.runs, 'train_in_subprocess', train_in_subprocess)
    ray = StoppedRay(sig)
    monkeypatch.setitem(sys.modules, 'ray', ray)
    runs = fake_runs(3, tmp_path)
    reported = {}
    signum = run_ray(runs, 1, lambda run, result: reported.update({run.name: result}))
    assert signum == sig
    assert reported['run0']['returncode'] == 130 and reported['run0']['stopped']
    # Stopped at its checkpoint as asked: no error (SIGTERM's and SIGHUP's had one).
    assert reported['run0']['error'] is None
    assert reported['run1']['not_started'] and reported['run2']['not_started']
    assert ray.cancelled == [runs[1].root_dir, runs[2].root_dir]
    assert f'{signal.Signals(sig).name}: stopping the sweep' in capfd.readouterr().err
    # Neither the stop file nor the marks of the runs begun are left to a re-run.
    assert os.listdir(tmp_path) == []


class SignalledRay(FakeRay):
    """A cluster whose ray.init the signal ``signum`` interrupts. As Ray's, it first puts
    in place a SIGTERM handler that exits with the signal's number."""

    def __init__(self, signum):
        super().__init__()
        self.signum = signum

    def init(self, **kwargs):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        os.kill(os.getpid(), self.signum)
        time.sleep(5)  # Ray waiting for its cluster


class SignalReachedTheTest(Exception):
    pass


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_a_signal_while_connecting_to_ray_exits_with_128_plus_it_before_anything_is_written(
    tmp_path, monkeypatch, capsys, listening_address, sig
):
    def reached_the_test(signum, frame):
        raise SignalReachedTheTest(signum)

    # Were the signal not handled while connecting, it would reach this handler
    # rather than end pytest.
    previous = signal.signal(sig, reached_the_test)
    ray = SignalledRay(sig)
    calls = {}
    try:
        with pytest.raises(SystemExit) as exit_info:
            args = ['--ray_address', listening_address]
            run_main(tmp_path, monkeypatch, args, [], calls=calls, ray=ray)
    finally:
        signal.signal(sig, previous)
    assert exit_info.value.code == 128 + sig
    out, err = capsys.readouterr()
    assert err == (
        f'error: {sig.name} while connecting to the Ray cluster at {listening_address}: '
        'nothing was started.\n'
    )
    assert out == '' and calls == {} and not (tmp_path / 'runs').exists()
    assert ray.shut_down


@pytest.mark.parametrize(
    'address, problem',
    [
        ('127.0.0.1:{free_port}', 'nothing listens at '),
        ('127.0.0.1:63a', "--ray_address 127.0.0.1:63a: '63a' is not a port number"),
        ('127.0.0.1:65536', "--ray_address 127.0.0.1:65536: '65536' is not a port number"),
    ],
    ids=['no cluster', 'not a port', 'port out of range'],
)
def test_a_ray_address_where_nothing_listens_exits_2_at_once_before_anything_is_written(
    tmp_path, monkeypatch, capsys, address, problem
):
    address = address.format(free_port=free_port())
    ray = FakeRay()
    calls = {}
    start = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, ['--ray_address', address], [], calls=calls, ray=ray)
    assert exit_info.value.code == 2 and time.monotonic() - start < 10
    out, err = capsys.readouterr()
    assert err.startswith('error: ') and err.count('\n') == 1 and problem in err, err
    if problem.startswith('nothing'):
        assert f'cannot connect to the Ray cluster at {address}: ' in err
        assert err.endswith(
            '(Connection refused). Start the cluster (`ray start --head --port '
            f'{address.split(":")[1]}` on its head) or fix --ray_address.\n'
        )
    # Ray was not asked: it would try for minutes. Nothing was printed or written.
    assert ray.init_kwargs is None and out == '' and calls == {}
    assert not (tmp_path / 'runs').exists()


def run_main(directory, monkeypatch, args, gpus, grid=GRID, calls=None, ray=None, on_train=None):
    """``grid_search.main`` on ``grid`` with ``args`` on 8 cores with ``gpus`` visible.

    The backends are replaced by recorders whose runs all finish at once (after
    calling ``on_train()``, if given), and the connection to Ray by one, unless
    a ``FakeRay`` is given as ``ray``.
    Returns ``calls``, filled as ``{backend name: its arguments}``.
    """
    from absl import flags
    from absl.testing import flagsaver

    import alf_lite.device
    from alf_lite.bin import grid_search

    gin_file, grid = write_inputs(directory, grid)
    calls = {} if calls is None else calls

    def finish_all(todo, report):
        if on_train is not None:
            on_train()
        for run in todo:
            report(run, {'returncode': 0, 'wall_time_s': 1.0, 'error': None})

    def run_local(todo, max_workers, num_threads, report, gpus=(), runs_per_gpu=1, **memory):
        calls['local'] = dict(
            max_workers=max_workers,
            num_threads=num_threads,
            gpus=list(gpus),
            runs_per_gpu=runs_per_gpu,
        )
        finish_all(todo, report)

    def connect_ray(address, num_cpus_per_run, num_gpus_per_run, py_modules=()):
        calls['ray'] = dict(
            address=address,
            num_cpus_per_run=num_cpus_per_run,
            num_gpus_per_run=num_gpus_per_run,
            py_modules=list(py_modules),
        )

    def run_ray(todo, num_cpus_per_run, report, num_gpus_per_run=0.0):
        calls.setdefault('ray', {})['config_text'] = todo[0].config_text
        finish_all(todo, report)

    monkeypatch.setattr(grid_search, 'run_local', run_local)
    if ray is None:
        monkeypatch.setattr(grid_search, 'connect_ray', connect_ray)
    monkeypatch.setattr(grid_search, 'run_ray', run_ray)
    monkeypatch.setattr(alf_lite.device, 'visible_gpu_ids', lambda: list(gpus))
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: set(range(8)))
    monkeypatch.setitem(sys.modules, 'ray', ray or FakeRay())
    with flagsaver.flagsaver():
        flags.FLAGS(
            ['grid_search', '--search_config', str(grid), '--gin_file', str(gin_file)]
            + ['--root_dir', str(directory / 'runs'), *args]
        )
        grid_search.main(['grid_search'])
    return calls


@pytest.mark.parametrize(
    'args, gpus, expected, backend',
    [
        # Two GPUs of two runs each: four workers share the 8 cores.
        (
            ['--runs_per_gpu', '2'],
            ['3', '5'],
            dict(max_workers=4, num_threads=2, gpus=['3', '5'], runs_per_gpu=2),
            '4 local worker(s), GPU(s) 3,5 with at most 2 run(s) each (2 torch thread(s) each)',
        ),
        (
            ['--max_workers', '2'],
            [],
            dict(max_workers=2, num_threads=4, gpus=[], runs_per_gpu=1),
            '2 local worker(s) (4 torch thread(s) each)',
        ),
        (
            ['--runs_per_gpu', '0'],
            ['3', '5'],
            dict(max_workers=8, num_threads=1, gpus=[], runs_per_gpu=0),
            '8 local worker(s) (1 torch thread(s) each)',
        ),
    ],
    ids=['two GPUs', 'no GPU', 'runs_per_gpu 0'],
)
def test_local_workers_are_capped_by_the_gpu_slots_and_share_the_cores(
    tmp_path, monkeypatch, capsys, args, gpus, expected, backend
):
    assert run_main(tmp_path, monkeypatch, args, gpus) == {'local': expected}
    assert f'4 to train on {backend}.' in capsys.readouterr().out


def test_the_plan_gives_the_torch_threads_that_a_gin_param_or_the_search_sets(
    tmp_path, monkeypatch, capsys
):
    # The runs' own count wins over the sweep's share of the cores (4 here).
    args = ['--max_workers', '2', '--gin_param', 'TrainerConfig.torch_num_threads=3']
    run_main(tmp_path, monkeypatch, args, [])
    assert '4 to train on 2 local worker(s) (3 torch thread(s) each).' in capsys.readouterr().out
    grid = {'parameters': {'TrainerConfig.torch_num_threads': [1, 2]}, 'repeats': 1}
    run_main(tmp_path / 'searched', monkeypatch, ['--max_workers', '2'], [], grid=grid)
    assert '2 to train on 2 local worker(s) (1 to 2 torch threads by run).' in (
        capsys.readouterr().out
    )


def test_ray_runs_get_the_cpus_gpus_and_threads_of_the_flags(tmp_path, monkeypatch, capsys):
    args = ['--ray_address', 'auto', '--num_cpus_per_run', '3', '--num_gpus_per_run', '0.25']
    calls = run_main(tmp_path, monkeypatch, args, gpus=['3', '5'])
    config_text = calls['ray'].pop('config_text')
    assert calls == {
        'ray': dict(address='auto', num_cpus_per_run=3, num_gpus_per_run=0.25, py_modules=[])
    }
    assert 'TrainerConfig.torch_num_threads = 3\n' in config_text
    assert 'on Ray at auto, 3 CPU(s) and 0.25 GPU(s) per run (3 torch thread(s) each)' in (
        capsys.readouterr().out
    )


# --- The summary ----------------------------------------------------------------------------


def test_summary_row_of_a_run_with_nothing_on_disk_has_no_return_or_steps(tmp_path):
    from alf_lite.bin.grid_search import summary_rows

    runs = fake_runs(2, tmp_path)  # their directories do not exist
    results = {
        'run0': {'returncode': 0, 'wall_time_s': 2.5, 'error': None, 'status': 'finished'},
        'run1': {'status': 'skipped (finished before)'},
    }
    empty = {'final_eval_return': None, 'env_steps': None}
    assert summary_rows(runs, results) == [
        dict(run='run0', status='finished', seed=0, **empty, wall_time_s=2.5, error=''),
        dict(
            run='run1',
            status='skipped (finished before)',
            seed=1,
            **empty,
            wall_time_s=None,
            error='',
        ),
    ]


def test_summary_row_gives_the_return_its_latest_checkpoint_keeps_not_a_later_one(
    local_grid, tmp_path
):
    # A run killed or failed after an evaluation but before its checkpoint: its
    # progress.csv goes past the latest checkpoint, whose step the row gives.
    from alf_lite.bin.grid_search import GridRun, summary_rows

    _, root_dir, _ = local_grid
    run_dir = tmp_path / RUN_NAMES[0]
    shutil.copytree(root_dir / RUN_NAMES[0], run_dir)
    returns = {
        int(row['env_steps']): float(row['eval/AverageReturn'])
        for row in deterministic_progress(run_dir)
        if row['eval/AverageReturn']
    }
    assert returns[10] != returns[NUM_ENV_STEPS]
    shutil.rmtree(run_dir / 'checkpoints' / f'ckpt-{NUM_ENV_STEPS}')
    run = GridRun(RUN_NAMES[0], 0, str(run_dir), str(tmp_path / 'run.log'), 'text', 1, None)
    result = {'status': 'failed', 'error': 'RuntimeError: x'}

    [row] = summary_rows([run], {run.name: result})
    assert (row['env_steps'], row['final_eval_return']) == (10, returns[10])
    # Without a checkpoint the next sweep starts it afresh: no return is kept.
    shutil.rmtree(run_dir / 'checkpoints' / 'ckpt-10')
    [row] = summary_rows([run], {run.name: result})
    assert (row['env_steps'], row['final_eval_return']) == (None, None)


SUMMARY_ROWS = [
    dict(
        run='a',
        status='finished',
        seed=0,
        final_eval_return=-123.456,
        env_steps=20,
        wall_time_s=3.14159,
        error='',
    ),
    dict(
        run='long_run_name',
        status='failed',
        seed=1,
        final_eval_return=float('nan'),
        env_steps=None,
        wall_time_s=None,
        error='ValueError: x',
    ),
]


def test_summary_table_aligns_its_columns_and_shows_a_missing_number_as_a_dash(capsys):
    from alf_lite.bin.grid_search import print_summary

    print_summary(SUMMARY_ROWS)
    # Floats to one decimal; a column is as wide as its header or its widest cell.
    assert capsys.readouterr().out.splitlines() == [
        'run            status    final eval return  env steps  wall time (s)  error',
        '-------------  --------  -----------------  ---------  -------------  -----',
        'a              finished  -123.5             20         3.1',
        'long_run_name  failed    -                  -          -              ValueError: x',
    ]


def test_summary_table_whose_reader_is_gone_is_printed_to_nothing(monkeypatch):
    # A `| tee` ended after the runs' lines: the table goes nowhere, without a
    # BrokenPipeError, and the lines after it too.
    from alf_lite.bin.grid_search import print_summary

    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, 'w', buffering=1) as stream:
        monkeypatch.setattr(sys, 'stdout', stream)
        print_summary(SUMMARY_ROWS)
        print_summary(SUMMARY_ROWS)


def test_summary_table_to_a_pipe_whose_reader_is_gone_exits_0():
    # A pipe's stdout is block-buffered: unflushed, the table met the gone reader only at
    # exit, where Python reports the BrokenPipeError and exits with code 120.
    script = (
        'import time\n'
        'from math import nan\n'
        'from alf_lite.bin.grid_search import print_summary\n'
        'time.sleep(0.5)\n'
        f'print_summary({SUMMARY_ROWS!r})\n'
    )
    returncode, err = run_with_output_reader_gone([sys.executable, '-c', script], timeout=60)
    assert returncode == 0 and 'BrokenPipeError' not in err, (returncode, err)


def test_a_summary_saved_again_by_a_spreadsheet_with_a_byte_order_mark_reads_as_before(tmp_path):
    # Excel's "CSV UTF-8" starts the file with one: the first column keeps its name.
    from alf_lite.bin.grid_search import read_summary, write_summary

    path = tmp_path / 'grid_summary.csv'
    write_summary(str(path), SUMMARY_ROWS)
    written = read_summary(str(path))
    path.write_bytes(b'\xef\xbb\xbf' + path.read_bytes())
    assert read_summary(str(path)) == written


def test_a_skipped_run_keeps_its_earlier_wall_time_and_a_trained_one_gets_its_new_one(tmp_path):
    from alf_lite.bin.grid_search import read_summary, summary_rows, wall_times, write_summary
    from alf_lite.runs import NOT_STARTED

    path = str(tmp_path / 'grid_summary.csv')
    assert read_summary(path) == []
    write_summary(path, SUMMARY_ROWS)
    assert wall_times(read_summary(path)) == {'a': 3.14159}  # long_run_name has none
    runs = fake_runs(2, tmp_path)
    results = {
        'run0': {'returncode': 0, 'wall_time_s': 2.5, 'error': None, 'status': 'finished'},
        'run1': {'status': 'skipped (finished before)'},
    }
    earlier = {'run0': 9.0, 'run1': 7.0}
    assert [r['wall_time_s'] for r in summary_rows(runs, results, earlier)] == [2.5, 7.0]
    # run0 went on from its checkpoint: both sweeps' times.
    rows = summary_rows(runs, results, earlier, resumed={'run0'})
    assert [r['wall_time_s'] for r in rows] == [11.5, 7.0]
    # A run this sweep did not start keeps its time.
    results['run0'] = dict(NOT_STARTED, status='not started (sweep stopped)')
    rows = summary_rows(runs, results, earlier, resumed={'run0'})
    assert [r['wall_time_s'] for r in rows] == [9.0, 7.0]
    # A resumed run whose earlier sweep was killed before its summary: this sweep's time.
    results['run0'] = {'returncode': 0, 'wall_time_s': 2.5, 'error': None, 'status': 'finished'}
    rows = summary_rows(runs, results, {'run1': 7.0}, resumed={'run0'})
    assert [r['wall_time_s'] for r in rows] == [2.5, 7.0]


def test_a_run_not_trained_keeps_its_wall_time_for_a_later_sweep_that_skips_it(tmp_path):
    from alf_lite.bin.grid_search import (
        SKIPPED,
        read_summary,
        summary_rows,
        wall_times,
        write_summary,
    )

    path = str(tmp_path / 'grid_summary.csv')
    runs = fake_runs(2, tmp_path)
    finished = {'returncode': 0, 'error': None, 'status': 'finished'}
    sweeps = [
        {'run0': dict(finished, wall_time_s=4.0), 'run1': dict(finished, wall_time_s=5.0)},
        # A changed config: one run holds another experiment, the other's does not parse.
        {
            'run0': {'status': 'failed', 'error': 'another experiment', 'other_experiment': True},
            'run1': {'status': 'failed', 'error': 'does not parse'},
        },
        # The sweep's own config again.
        {'run0': {'status': SKIPPED}, 'run1': {'status': SKIPPED}},
    ]
    for results in sweeps:
        rows = summary_rows(runs, results, wall_times(read_summary(path)))
        write_summary(path, rows)
        assert [r['wall_time_s'] for r in rows] == [4.0, 5.0]


def test_the_summary_keeps_rows_of_runs_of_other_sweeps_whose_directories_are_there(tmp_path):
    from alf_lite.bin.grid_search import read_summary, rows_of_other_runs, write_summary

    runs = fake_runs(2, tmp_path)
    for name in ('run0', 'other'):
        (tmp_path / name).mkdir()
        (tmp_path / name / 'config.gin').write_text('text')
    (tmp_path / 'gone_file').write_text('a file, no run')
    # Directories that hold no run: the sweep's logs, a link to another directory.
    (tmp_path / 'logs').mkdir()
    (tmp_path / 'link').symlink_to(tmp_path / 'logs')
    path = str(tmp_path / 'grid_summary.csv')
    # An edited older table: a column this one lacks, none of the error column, 'other'
    # twice.
    with open(path, 'w', newline='') as f:
        f.write('run,status,note\nrun0,finished,x\nother,failed,y\n..,finished,z\n')
        f.write('gone_file,finished,z\nmissing,finished,z\n,finished,z\nrun0/../other,x,z\n')
        f.write('logs,finished,z\nlink,finished,z\nnul\0,finished,z\nother,stopped,w\n')
    earlier = read_summary(path)
    others = rows_of_other_runs(earlier, runs, str(tmp_path))
    assert others == [{'run': 'other', 'status': 'stopped', 'note': 'w'}]
    write_summary(path, SUMMARY_ROWS + others)
    with open(path, newline='') as f:
        assert f.read().splitlines()[1:] == [
            'a,finished,0,-123.456,20,3.14159,',
            'long_run_name,failed,1,nan,,,ValueError: x',
            'other,stopped,,,,,',
        ]


def test_summary_csv_has_the_rows_columns_in_order_and_a_missing_value_empty(tmp_path):
    from alf_lite.bin.grid_search import write_summary

    write_summary(str(tmp_path / 'grid_summary.csv'), SUMMARY_ROWS)
    with open(tmp_path / 'grid_summary.csv', newline='') as f:
        assert f.read() == (
            'run,status,seed,final_eval_return,env_steps,wall_time_s,error\r\n'
            'a,finished,0,-123.456,20,3.14159,\r\n'
            'long_run_name,failed,1,nan,,,ValueError: x\r\n'
        )


@pytest.mark.parametrize(
    'old',
    [
        b'\xff\xfe\n',
        b'run,wall_time_s\n"' + b'x' * 200_000 + b'",3\n',
        b'run,wall_time_s\n' + b'x' * (MAX_LINE_CHARS + 1) + b'\n',
    ],
    ids=['not text', 'a field over the csv limit', 'a line over MAX_LINE_CHARS'],
)
def test_a_last_summary_that_cannot_be_read_is_moved_aside_before_the_runs_start(
    tmp_path, monkeypatch, capsys, old
):
    table = tmp_path / 'runs' / 'grid_summary.csv'
    table.parent.mkdir()
    table.write_bytes(old)
    there_at_start = []
    run_main(tmp_path, monkeypatch, [], [], on_train=lambda: there_at_start.append(table.exists()))
    assert there_at_start == [False]
    (aside,) = [p for p in table.parent.iterdir() if p.name.startswith('grid_summary.csv.old-')]
    assert aside.read_bytes() == old
    err = capsys.readouterr().err
    assert f'warning: the last summary cannot be read ({table}' in err, err
    assert f'moved it to {aside}; the runs this sweep does not train' in err, err
    # The sweep's own summary is written in its place.
    assert {r['status'] for r in summary(table.parent).values()} == {'finished'}
    assert sorted(summary(table.parent)) == RUN_NAMES


def test_a_directory_in_place_of_the_summary_ends_the_sweep_before_any_run_starts(
    tmp_path, monkeypatch, capsys
):
    table = tmp_path / 'runs' / 'grid_summary.csv'
    table.mkdir(parents=True)
    started = []
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, [], [], on_train=lambda: started.append(True))
    assert exit_info.value.code == 2 and not started
    assert f'error: {table} is a directory: the sweep writes its summary there' in (
        capsys.readouterr().err
    )
    assert os.listdir(table.parent) == ['grid_summary.csv'] and os.listdir(table) == []


# --- --gin_param and the searched parameters ---------------------------------------------

LR_GRID = {'parameters': {'actor/Adam.lr,critic/Adam.lr': [0.001, 0.0003]}, 'repeats': 1}
TAU_ENTRY = "the search config's \"parameters\" entry 'SacAlgorithm.target_update_tau' sweeps"
LR_ENTRY = "the search config's \"parameters\" entry 'actor/Adam.lr,critic/Adam.lr' sweeps"


def tree(root):
    """Every file under ``root`` with its bytes, and every directory (None)."""
    return {
        str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
        for path in sorted(root.rglob('*'))
    }


@pytest.mark.parametrize(
    'grid, gin_param, binding, swept',
    [
        (GRID, 'SacAlgorithm.target_update_tau=0.5', 'SacAlgorithm.target_update_tau', TAU_ENTRY),
        # Spaces around '=' do not matter; the binding is named as given.
        (
            GRID,
            'SacAlgorithm.target_update_tau = 0.5',
            'SacAlgorithm.target_update_tau = 0.5',
            TAU_ENTRY,
        ),
        # gin's full name of the configurable is the same parameter.
        (
            GRID,
            'alf_lite.algorithms.sac.SacAlgorithm.target_update_tau=0.5',
            'alf_lite.algorithms.sac.SacAlgorithm.target_update_tau',
            TAU_ENTRY,
        ),
        # One --gin_param of several statements.
        (
            GRID,
            'TrainerConfig.num_env_steps=10\nSacAlgorithm.target_update_tau=0.5',
            'SacAlgorithm.target_update_tau=0.5',
            TAU_ENTRY,
        ),
        # Any name of a key that ties several.
        (LR_GRID, 'critic/Adam.lr=0.1', 'critic/Adam.lr=0.1', LR_ENTRY),
        (GRID, 'TrainerConfig.random_seed=3', 'TrainerConfig.random_seed', '"repeats"'),
    ],
    ids=['plain', 'spaces', 'full name', 'several statements', 'tied key', 'seed'],
)
def test_gin_param_that_the_grid_would_override_exits_2_naming_both_before_anything_starts(
    tmp_path, monkeypatch, capsys, grid, gin_param, binding, swept
):
    from alf_lite.bin import grid_search

    # The audit's case: the same root_dir as a sweep before, which must stay as it was.
    root_dir = tmp_path / 'runs'
    (root_dir / RUN_NAMES[0]).mkdir(parents=True)
    (root_dir / RUN_NAMES[0] / 'config.gin').write_text('SacAlgorithm.target_update_tau = 0.005\n')
    (root_dir / 'grid_summary.csv').write_text('run,status\n')
    before = tree(root_dir)
    calls = {}
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, ['--gin_param', gin_param], [], grid=grid, calls=calls)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and err.startswith('error: --gin_param '), err
    for text in (binding, swept, "the grid's values would override it"):
        assert text in err, err
    assert calls == {}
    assert tree(root_dir) == before
    assert grid_search.GRID_ADVICE not in err


def test_a_trainer_setting_out_of_range_for_every_run_exits_2_before_anything_starts(
    tmp_path, monkeypatch, capsys
):
    calls = {}
    args = ['--gin_param', 'TrainerConfig.num_env_steps=0']
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, args, [], calls=calls)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == 'error: TrainerConfig.num_env_steps must be positive, got 0.\n', err
    assert calls == {} and not (tmp_path / 'runs').exists()


@pytest.mark.parametrize(
    'parameters, message',
    [
        (
            {'actor/Adam.lr,critic/Adam.lr': [0.001, 0.0003], 'actor/Adam.lr': [0.01, 0.1]},
            'actor/Adam.lr is searched by two entries of the search config\'s "parameters", '
            "'actor/Adam.lr,critic/Adam.lr' and 'actor/Adam.lr'",
        ),
        # gin's full name of the configurable is the same parameter.
        (
            {
                'SacAlgorithm.target_update_tau': [0.5, 0.1],
                'alf_lite.algorithms.sac.SacAlgorithm.target_update_tau': [0.2],
            },
            'alf_lite.algorithms.sac.SacAlgorithm.target_update_tau is searched by two entries',
        ),
    ],
    ids=['tied key', 'full name'],
)
def test_a_parameter_searched_by_two_entries_exits_2_before_anything_starts(
    tmp_path, monkeypatch, capsys, parameters, message
):
    err = refused_search(tmp_path, monkeypatch, capsys, parameters)
    assert err.count('\n') == 1 and message in err and 'search it in one entry' in err, err


def refused_search(tmp_path, monkeypatch, capsys, parameters) -> str:
    """grid_search's stderr for a search config of ``parameters`` that it refuses with exit
    code 2 before starting any run."""
    calls = {}
    grid = {'parameters': parameters, 'repeats': 1}
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, [], [], grid=grid, calls=calls)
    assert exit_info.value.code == 2
    assert calls == {}
    return capsys.readouterr().err


def pendulum_line(text):
    """``file <sac_pendulum.gin>, line <n>, `<text>``` as a config error names the line."""
    lines = PENDULUM.read_text().splitlines()
    return f'file {PENDULUM}, line {lines.index(text) + 1}, `{text}`'


@pytest.mark.parametrize(
    'parameters, gin_param, winners, remedy',
    [
        # The audit's case: the example binds the lr of each of SAC's three optimizers.
        (
            {'Adam.lr': [0.001, 0.1]},
            [],
            [
                f'`actor/Adam.lr` ({pendulum_line("actor/Adam.lr = 1e-3")})',
                f'`critic/Adam.lr` ({pendulum_line("critic/Adam.lr = 1e-3")})',
                f'`alpha/Adam.lr` ({pendulum_line("alpha/Adam.lr = 1e-3")})',
            ],
            'Search actor/Adam.lr, critic/Adam.lr, alpha/Adam.lr instead of Adam.lr (one entry '
            '"actor/Adam.lr,critic/Adam.lr,alpha/Adam.lr" sets them all to one value).',
        ),
        # A --gin_param in a scope, and another entry of the search config; gin's full name.
        (
            {'torch.optim.Adam.lr': [0.001, 0.1], 'critic/Adam.lr': [0.5]},
            ['--gin_param', 'actor/Adam.lr=0.2'],
            [
                "`actor/Adam.lr` (--gin_param 'actor/Adam.lr=0.2')",
                "`critic/Adam.lr` (the search config's \"parameters\" entry 'critic/Adam.lr', "
                'value `0.5`)',
            ],
            'instead of torch.optim.Adam.lr (one entry "actor/Adam.lr,critic/Adam.lr,'
            'alpha/Adam.lr" sets them all to one value), or leave out that --gin_param.',
        ),
    ],
    ids=['gin file', 'gin_param and search config'],
)
def test_a_searched_parameter_a_more_specific_scope_overrides_exits_2_naming_the_winners(
    tmp_path, monkeypatch, capsys, parameters, gin_param, winners, remedy
):
    calls = {}
    grid = {'parameters': parameters, 'repeats': 1}
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, gin_param, [], grid=grid, calls=calls)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'of the search config\'s "parameters" entry' in err, err
    assert 'is overridden by a binding of it in a more specific scope, ' + '; '.join(winners) in (
        err
    ), err
    assert err.endswith(remedy + '\n'), err
    assert calls == {} and not (tmp_path / 'runs').exists()


def test_a_searched_parameter_overridden_only_by_names_of_its_own_entry_is_searched(
    tmp_path, monkeypatch, capsys
):
    # One entry sets Adam.lr and each scope's lr that overrides it to the same value.
    names = 'Adam.lr,actor/Adam.lr,critic/Adam.lr,alpha/Adam.lr'
    grid = {'parameters': {names: [0.001, 0.1]}, 'repeats': 1}
    calls = run_main(tmp_path, monkeypatch, [], [], grid=grid)
    assert 'local' in calls
    assert '2 to train' in capsys.readouterr().out
    # Names that another entry or the gin file binds still override it.
    grid = {'parameters': {'Adam.lr,actor/Adam.lr': [0.001, 0.1]}, 'repeats': 1}
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path / 'partly', monkeypatch, [], [], grid=grid)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    winners = [
        f'`critic/Adam.lr` ({pendulum_line("critic/Adam.lr = 1e-3")})',
        f'`alpha/Adam.lr` ({pendulum_line("alpha/Adam.lr = 1e-3")})',
    ]
    assert 'overridden by a binding of it in a more specific scope, ' + '; '.join(
        winners
    ) + ':' in (err), err


def test_a_searched_macro_that_no_binding_uses_exits_2_before_anything_starts(
    tmp_path, monkeypatch, capsys
):
    macro_gin = tmp_path / 'macro.gin'
    macro_gin.write_text('width = (16,)\nCriticNetwork.hidden_layers = %width\n')
    macro = ['--gin_file', str(macro_gin)]
    grid = {'parameters': {'width': [[8], [4]]}, 'repeats': 1}
    calls = run_main(tmp_path, monkeypatch, macro, [], grid=grid)
    assert '2 to train' in capsys.readouterr().out and 'local' in calls
    # Misspelt, it would be a macro of its own: both runs would train alike.
    calls = {}
    grid = {'parameters': {'widht': [[8], [4]]}, 'repeats': 1}
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path / 'misspelt', monkeypatch, macro, [], grid=grid, calls=calls)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "entry 'widht' sets a macro that no binding uses (%widht)" in err, err
    assert calls == {} and not (tmp_path / 'misspelt' / 'runs').exists()
    # An entry that also sets a macro or a parameter in use changes the runs.
    for used in ('width', 'TanhNormalActorNetwork.hidden_layers'):
        grid = {'parameters': {f'widht,{used}': [[8], [4]]}, 'repeats': 1}
        calls = run_main(tmp_path / used, monkeypatch, macro, [], grid=grid)
        assert '2 to train' in capsys.readouterr().out and 'local' in calls


@pytest.mark.parametrize(
    'parameters, message',
    [
        # Another algorithm than the config's: both runs would train alike.
        (
            {'DdpgAlgorithm.gamma': [0.9, 0.99]},
            "entry 'DdpgAlgorithm.gamma' searches what the algorithm this config builds never "
            'uses (DdpgAlgorithm.gamma: the config calls `DdpgAlgorithm` nowhere)',
        ),
        # An optimizer the critic is not given, and a noise SAC has none of.
        (
            {'critic/AdamW.weight_decay,GaussianNoise.sigma': [0.1, 0.2]},
            '(critic/AdamW.weight_decay: the config calls `critic/AdamW` nowhere; '
            'GaussianNoise.sigma: the config calls `GaussianNoise` nowhere)',
        ),
    ],
)
def test_a_search_of_what_the_algorithm_never_uses_exits_2_before_anything_starts(
    tmp_path, monkeypatch, capsys, parameters, message
):
    err = refused_search(tmp_path, monkeypatch, capsys, parameters)
    assert message in err and 'its values would change no run' in err, err
    assert not (tmp_path / 'runs').exists()


def test_a_searched_macro_that_only_bindings_of_what_the_algorithm_never_uses_take_exits_2(
    tmp_path, monkeypatch, capsys
):
    # A SAC config whose macro feeds only DDPG's gamma, directly and through another macro:
    # both runs would train alike.
    macro_gin = tmp_path / 'macro.gin'
    macro_gin.write_text(
        'g = 0.9\nh = %g\nDdpgAlgorithm.gamma = %g\nGaussianNoise.sigma = (%h, %g)\n'
    )
    macro = ['--gin_file', str(macro_gin)]
    calls = {}
    with pytest.raises(SystemExit) as exit_info:
        run_main(
            tmp_path / 'unused',
            monkeypatch,
            macro,
            [],
            grid={'parameters': {'g': [0.9, 0.99]}, 'repeats': 1},
            calls=calls,
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "entry 'g' searches what the algorithm this config builds never uses" in err, err
    assert '%g in DdpgAlgorithm.gamma: the config calls `DdpgAlgorithm` nowhere' in err, err
    # Named once, though it takes %g twice (itself and through %h).
    assert err.count('%g in GaussianNoise.sigma: the config calls `GaussianNoise` nowhere') == 1
    assert calls == {} and not (tmp_path / 'unused' / 'runs').exists()
    # Taken by a macro only, which no binding takes: the message says so.
    only_macro_gin = tmp_path / 'only_macro.gin'
    only_macro_gin.write_text('g = 0.9\nh = %g\n')
    with pytest.raises(SystemExit) as exit_info:
        run_main(
            tmp_path / 'only_macro',
            monkeypatch,
            ['--gin_file', str(only_macro_gin)],
            [],
            grid={'parameters': {'g': [0.9, 0.99]}, 'repeats': 1},
            calls=calls,
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert '(%g: no binding takes it, only macros that none takes)' in err, err
    assert calls == {} and not (tmp_path / 'only_macro' / 'runs').exists()
    # Taken by a binding the algorithm uses too (through a macro): the runs differ.
    macro_gin.write_text(macro_gin.read_text() + 'actor/Adam.lr = %h\n')
    grid = {'parameters': {'g': [0.001, 0.002]}, 'repeats': 1}
    calls = run_main(tmp_path / 'used', monkeypatch, macro, [], grid=grid)
    assert '2 to train' in capsys.readouterr().out and 'local' in calls


def test_a_configurable_called_in_another_scope_than_the_searched_one_is_not_used_there(
    tmp_path, monkeypatch, capsys
):
    # The actor's optimizer is AdamW: the critic's (Adam) never reads critic/AdamW's bindings.
    grid = {'parameters': {'critic/AdamW.weight_decay': [0.1, 0.2]}, 'repeats': 1}
    args = ['--gin_param', 'SacAlgorithm.actor_optimizer = @actor/AdamW']
    calls = {}
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, args, [], grid=grid, calls=calls)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'critic/AdamW.weight_decay: the config calls `critic/AdamW` nowhere' in err, err
    assert calls == {}


@pytest.mark.parametrize(
    'parameters',
    [
        # Through a scope, in scopes inside the searched one, and called inside the algorithm.
        {'actor/Adam.lr': [0.1, 0.2]},
        {'Adam.eps': [1e-8, 1e-6]},
        {'CriticNetwork.hidden_layers': [[8], [4]]},
        # One name in use is enough: the runs differ.
        {'actor/Adam.lr,critic/AdamW.lr': [0.1, 0.2]},
        # AdamW is built in the runs of the second value of the other entry.
        {
            'SacAlgorithm.critic_optimizer': ['@critic/Adam', '@critic/AdamW'],
            'critic/AdamW.weight_decay': [0.1, 0.2],
        },
        # Outside the algorithm's build: the trainer's, the envs'.
        {'create_environment.max_episode_steps': [5, 6]},
        # DDPG's runs take it from its binding, TD3's set it themselves (TD3's own is bound).
        {
            'TrainerConfig.algorithm_ctor': ['@DdpgAlgorithm', '@Td3Algorithm'],
            'DdpgAlgorithm.target_update_tau': [0.01, 0.02],
        },
    ],
)
def test_a_search_of_what_some_run_uses_is_trained(tmp_path, monkeypatch, capsys, parameters):
    grid = {'parameters': parameters, 'repeats': 1}
    calls = run_main(tmp_path, monkeypatch, [], [], grid=grid)
    assert 'to train' in capsys.readouterr().out and 'local' in calls


LOUD_NETS = """import gin
from absl import logging

from alf_lite.networks.critic import CriticNetwork


@gin.configurable
class LoudCritic(CriticNetwork):
    def __init__(self, observation_dim, action_dim, num_replicas=1, **kwargs):
        logging.warning('LoudCritic is experimental')
        super().__init__(observation_dim, action_dim, num_replicas, **kwargs)
        logging.warning('LoudCritic of %d weights', sum(p.numel() for p in self.parameters()))
"""


def test_a_warning_the_algorithms_build_logs_alike_for_each_value_shows_once_on_the_console(
    tmp_path,
):
    # The critic, a network of the user's, subclasses CriticNetwork, which no binding refers
    # to: the sweep builds each combination's algorithm to see that the search is used, and
    # each build logs the critic's warnings.
    gin_file, _ = write_inputs(
        tmp_path, {'parameters': {'CriticNetwork.hidden_layers': [[8], [4]]}, 'repeats': 1}
    )
    gin_file.write_text(
        gin_file.read_text() + 'import loud_nets\nSacAlgorithm.critic_network_ctor = @LoudCritic\n'
    )
    (tmp_path / 'loud_nets.py').write_text(LOUD_NETS)
    root_dir = tmp_path / 'runs'
    result = run_grid(tmp_path, root_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count('LoudCritic is experimental') == 1, result.stderr
    # Warnings that differ (the critics' sizes) are each shown.
    sizes = re.findall(r'LoudCritic of (\d+) weights', result.stderr)
    assert len(sizes) == len(set(sizes)) == 2, result.stderr
    # Each run's log keeps its own.
    for name in ('hidden_layers=8,seed=0', 'hidden_layers=4,seed=0'):
        assert 'LoudCritic is experimental' in (root_dir / 'logs' / f'{name}.log').read_text()


def test_a_configurable_the_config_refers_to_counts_as_used_without_building_the_algorithm(
    monkeypatch,
):
    # A build's first optimizer costs torch a second of imports: the names that a binding
    # refers to (in the name's scope or one inside it) are taken as used without it.
    import alf_lite.all_configurables  # noqa: F401
    import alf_lite.trainer
    from alf_lite.bin.grid_search import SearchSpace, _referred_to, searched_calls
    from alf_lite.config import parse_config

    parse_config(
        [], ['SacAlgorithm.actor_optimizer = @actor/Adam', 'GaussianNoise.sigma = [(@AdamW,)]']
    )
    assert _referred_to('', 'torch.optim.Adam')  # in scope actor: inside ''
    assert _referred_to('actor', 'torch.optim.Adam')
    assert not _referred_to('critic', 'torch.optim.Adam')
    assert _referred_to('', 'torch.optim.AdamW')  # inside a list
    assert not _referred_to('', 'alf_lite.algorithms.sac.SacAlgorithm')

    def no_build():
        raise RuntimeError('the algorithm was built')

    monkeypatch.setattr(alf_lite.trainer, 'TrainerConfig', no_build)
    used = SearchSpace(parameters=[(('actor/Adam.lr', 'Adam.eps'), ['0.1'])], seeds=[0])
    assert searched_calls(used) == {
        ('actor', 'torch.optim.Adam', 'lr'): True,
        ('', 'torch.optim.Adam', 'eps'): True,
    }
    # One name not referred to: built (here, failing: nothing is judged).
    other = SearchSpace(parameters=[(('actor/Adam.lr', 'critic/Adam.lr'), ['0.1'])], seeds=[0])
    assert searched_calls(other) is None


def test_a_binding_overrides_a_searched_one_where_its_scope_begins_with_the_searched_scope():
    from alf_lite.config import more_specific_scope as _more_specific

    assert _more_specific('', 'actor') and _more_specific('actor', 'actor/target')
    # The same scope is the same parameter (gin_param_conflict's case); gin applies
    # critic/actor's binding where the scope begins with critic, where actor's never applies.
    assert not _more_specific('actor', 'actor')
    assert not _more_specific('actor', '') and not _more_specific('actor', 'critic/actor')
    assert not _more_specific('actor', 'actors/x')


@pytest.mark.parametrize(
    'gin_param, bound',
    [
        # Another scope, or none, is another parameter.
        ('Adam.lr=0.05', 'Adam.lr = 0.05'),
        ('alpha/Adam.lr=0.05', 'alpha/Adam.lr = 0.05'),
        # A parameter the grid does not search.
        ('SacAlgorithm.target_update_tau=0.5', 'SacAlgorithm.target_update_tau = 0.5'),
    ],
)
def test_gin_param_of_a_parameter_the_grid_does_not_search_applies_to_every_run(
    tmp_path, monkeypatch, capsys, gin_param, bound
):
    args = ['--ray_address', 'auto', '--gin_param', gin_param]
    calls = run_main(tmp_path, monkeypatch, args, [], grid=LR_GRID)
    config_text = calls['ray']['config_text']
    assert f'{bound}\n' in config_text
    assert 'actor/Adam.lr = 0.001\n' in config_text  # the first run's searched value
    assert '2 to train' in capsys.readouterr().out


def test_run_of_another_experiment_fails_with_advice_grid_search_can_follow_and_is_not_started(
    tmp_path, monkeypatch, capsys
):
    from alf_lite.bin import grid_search

    # One run finished and one unfinished, both trained with another tau than their names.
    root_dir = tmp_path / 'runs'
    finished, unfinished = root_dir / RUN_NAMES[0], root_dir / RUN_NAMES[1]
    for run_dir in (finished, unfinished):
        run_dir.mkdir(parents=True)
        (run_dir / 'config.gin').write_text('SacAlgorithm.target_update_tau = 0.5\n')
    (finished / 'checkpoints' / f'ckpt-{NUM_ENV_STEPS}').mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, [], [])
    assert exit_info.value.code == 1
    rows = summary(root_dir)
    for run_dir in (finished, unfinished):
        error = rows[run_dir.name]['error']
        assert rows[run_dir.name]['status'] == 'failed'
        assert error.startswith(f'{run_dir} holds another experiment'), error
        assert error.endswith(grid_search.GRID_ADVICE) and '--start_over' not in error
    # The others trained: the stand-in backend finished them, and only them.
    assert {rows[n]['status'] for n in RUN_NAMES[2:]} == {'finished'}
    out = capsys.readouterr().out
    assert '2 to train' in out and ', 2 not started (2 of another experiment).' in out
    assert not (root_dir / 'logs').exists()


@pytest.mark.parametrize('content', ['not text', 'oversized'])
def test_a_run_whose_config_gin_cannot_be_read_fails_naming_it_and_the_others_train(
    tmp_path, monkeypatch, capsys, content
):
    root_dir = tmp_path / 'runs'
    config = root_dir / RUN_NAMES[0] / 'config.gin'
    config.parent.mkdir(parents=True)
    if content == 'not text':
        config.write_bytes(b'\xff\xff\n')
        message = f'{config} is not text: utf-8 cannot decode its byte 0xff.'
    else:
        with open(config, 'w') as f:
            f.truncate(MAX_CONFIG_BYTES + 1)
        message = f'{config} holds {MAX_CONFIG_BYTES + 1} bytes, more than the'
    with pytest.raises(SystemExit) as exit_info:
        run_main(tmp_path, monkeypatch, [], [])
    assert exit_info.value.code == 1
    rows = summary(root_dir)
    assert rows[RUN_NAMES[0]]['status'] == 'failed'
    assert rows[RUN_NAMES[0]]['error'].startswith(message), rows[RUN_NAMES[0]]['error']
    assert rows[RUN_NAMES[0]]['error'].endswith('and rerun to train it afresh.')
    assert {rows[n]['status'] for n in RUN_NAMES[1:]} == {'finished'}
    assert ', 1 not started (1 with a config.gin that cannot be read).' in capsys.readouterr().out
    assert os.listdir(config.parent) == ['config.gin']


def test_a_run_is_finished_once_its_last_checkpoint_and_final_evaluation_are_written(tmp_path):
    from alf_lite.bin.grid_search import GridRun, is_finished

    run = GridRun('seed=0', 0, str(tmp_path), str(tmp_path / 'x.log'), '', 200, None)
    assert not is_finished(run)
    (tmp_path / 'checkpoints' / 'ckpt-100').mkdir(parents=True)
    progress = tmp_path / 'progress.csv'
    progress.write_text('env_steps,eval/AverageReturn\n0,-5\n100,\n')
    assert not is_finished(run)
    # A signal during the final evaluation: its checkpoint, without its row.
    (tmp_path / 'checkpoints' / 'ckpt-200').mkdir()
    assert not is_finished(run)
    progress.write_text(progress.read_text() + '200,-3\n')
    assert is_finished(run)


def test_a_run_stopped_past_a_shorter_sweeps_length_is_not_taken_for_finished(tmp_path):
    # A sweep of 4000 env steps stopped at 1000, an evaluation step, rerun for 500: the run
    # never finished (train refuses to shorten it, and says so).
    from alf_lite.bin.grid_search import GridRun, is_finished

    (tmp_path / 'checkpoints' / 'ckpt-1000').mkdir(parents=True)
    (tmp_path / 'progress.csv').write_text('env_steps,eval/AverageReturn\n0,-5\n1000,-3\n')
    config = tmp_path / 'config.gin'
    config.write_text('TrainerConfig.num_env_steps = 4000\n')
    run = GridRun('seed=0', 0, str(tmp_path), str(tmp_path / 'x.log'), '', 500, None)
    assert not is_finished(run)
    # One that ended at its own length, 1000, has finished for any length up to it.
    config.write_text('TrainerConfig.num_env_steps = 1000\n')
    assert is_finished(run)
    # Through a macro, as a config.gin may bind it.
    config.write_text('STEPS = 4000\nTrainerConfig.num_env_steps = %STEPS\n')
    assert not is_finished(run)
    # Unbound: TrainerConfig's own length, 100000.
    config.write_text('TrainerConfig.random_seed = 0\n')
    assert not is_finished(run)


def test_grid_search_advice_names_only_flags_grid_search_has():
    from absl import flags

    from alf_lite.bin import grid_search

    given = set(re.findall(r'--(\w+)', grid_search.GRID_ADVICE))
    assert given == {'gin_file', 'gin_param', 'root_dir'}
    assert given <= set(flags.FLAGS)


def test_memory_budget_starts_a_run_only_while_those_under_way_leave_room():
    from alf_lite.bin import grid_search

    budget = grid_search.MemoryBudget(10)
    assert budget.acquire(6, stopped=lambda: False)
    started = threading.Event()

    def second():
        budget.acquire(6, stopped=lambda: False)
        started.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not started.wait(0.3)  # 6 + 6 > 10: it waits
    budget.release(6)
    assert started.wait(5)
    thread.join()
    budget.release(6)
    # Larger than the budget: it starts once none is under way, and runs alone.
    assert budget.acquire(25, stopped=lambda: False)
    assert not budget.acquire(1, stopped=lambda: True)  # a stopped sweep starts no more
    budget.release(25)
    assert budget.acquire(10, stopped=lambda: True)  # room: started


def sweep_with_little_memory(tmp_path, parameters):
    """Two workers sweep ``parameters`` (one seed) while the sweep sees 10,000 bytes
    available; returns the root_dir, the result and the sweep's memory line."""
    write_inputs(tmp_path, {'parameters': parameters, 'repeats': 1})
    root_dir = tmp_path / 'runs'
    prelude = (
        'import alf_lite.device as device\n'
        'device.available_cpu_memory = lambda root="/": (10000, None)\n'
    )
    command = with_prelude(
        grid_command(root_dir, '--max_workers', '2'), prelude, module='alf_lite.bin.grid_search'
    )
    result = run_train(command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith('memory: '))
    return root_dir, result, line


def test_runs_whose_memory_does_not_fit_together_train_one_after_another(tmp_path):
    # Started together, each run found the memory free and passed its own check; then
    # together they took more than there was.
    root_dir, result, line = sweep_with_little_memory(
        tmp_path, {'SacAlgorithm.target_update_tau': [0.005, 0.01]}
    )
    assert re.fullmatch(
        r'memory: a run takes up to \d+\.\d KiB \(its replay buffer and its networks in '
        r"training; not counted: its process's Python and torch, its envs\), 2 at a time up "
        r'to \d+\.\d KiB, of 9\.8 KiB '
        r'available: more than max_memory_fraction=0\.8 of it \(7\.8 KiB\), so a run starts '
        r'only once those under way leave room for it\.',
        line,
    ), line
    spans = sorted(
        (os.stat(d / 'device.txt').st_mtime, os.stat(d / 'progress.csv').st_mtime)
        for d in root_dir.glob('target_update_tau=*')
    )
    assert len(spans) == 2, result.stdout
    assert spans[1][0] >= spans[0][1], spans  # the second started once the first ended


def test_a_sweep_over_max_memory_fraction_budgets_by_its_smallest_value(tmp_path):
    # The budget took the fraction of the last run configured, whatever the others said.
    fractions = [0.5, 0.9]
    root_dir, _, line = sweep_with_little_memory(
        tmp_path, {'ReplayBuffer.max_memory_fraction': fractions}
    )
    assert 'more than max_memory_fraction=0.5 of it (4.9 KiB)' in line, line
    assert sorted(p.name for p in root_dir.glob('max_memory_fraction=*')) == [
        f'max_memory_fraction={f},seed=0' for f in fractions
    ]


def test_a_run_on_a_device_this_machine_lacks_fails_alone_with_its_own_error(tmp_path):
    # Sizing the runs' memory resolved the device in the sweep itself, and the sweep
    # ended there with a traceback, before any run.
    write_inputs(
        tmp_path, {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 1}
    )
    root_dir = tmp_path / 'runs'
    result = run_train(
        grid_command(root_dir, '--gin_param', "TrainerConfig.device='cuda:99'"), cwd=tmp_path
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert 'failed in' in result.stdout and "device 'cuda:99'" in result.stdout, result.stdout


def test_sizing_the_runs_memory_does_not_initialise_cuda_in_the_sweep(tmp_path, monkeypatch):
    # On a GPU machine, resolving 'auto' to learn the current device initialised CUDA in
    # the sweep's own process: GPU memory taken by a process that trains nothing.
    import torch

    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.bin.grid_search import run_memory_bytes
    from alf_lite.config import parse_config
    from alf_lite.trainer import TrainerConfig

    def initialise(*args):
        raise AssertionError('CUDA initialised')

    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    monkeypatch.setattr(torch.cuda, 'current_device', initialise)
    monkeypatch.setattr(torch.cuda, '_lazy_init', initialise)
    gin_file, _ = write_inputs(tmp_path, GRID)
    parse_config([str(gin_file)], [])
    assert run_memory_bytes(TrainerConfig(), {}) is None  # 'auto': the run's GPU
    parse_config([str(gin_file)], ["ReplayBuffer.device = 'cuda'"])
    assert run_memory_bytes(TrainerConfig(device='cpu'), {}) is None


@pytest.mark.parametrize(
    'binding, known',
    [
        (None, True),
        ('create_environment.num_parallel_environments = -1', False),  # its run refuses it
        ("ReplayBuffer.device = 'cuda:99'", False),  # not this machine's memory
        ("create_environment.env_name = 'NoSuchEnv-v0'", False),
    ],
)
def test_run_memory_bytes_counts_only_what_it_knows_to_take_cpu_memory(tmp_path, binding, known):
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.bin.grid_search import run_memory_bytes
    from alf_lite.config import parse_config
    from alf_lite.trainer import TrainerConfig

    gin_file, _ = write_inputs(tmp_path, GRID)
    parse_config([str(gin_file)], [] if binding is None else [binding])
    memory = run_memory_bytes(TrainerConfig(), {})
    if known:
        # 100 steps of Pendulum's 25 bytes, and the networks with gradients and Adam's state.
        assert memory is not None and memory > 100 * 25
    else:
        assert memory is None
