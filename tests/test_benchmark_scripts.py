"""Benchmark scripts run as a user runs them (a script path, from another directory), and
their functions in process with stand-ins for the clock, the envs and the trainer."""

import contextlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import types

import gin
import gymnasium
import numpy as np
import pytest
import torch

import alf_lite.all_configurables  # noqa: F401
from alf_lite.config import parse_config
from alf_lite.data import StepType
from alf_lite.environments import create_environment
from alf_lite.runs import EVAL_RETURN
from alf_lite.seeding import eval_env_seeds
from alf_lite.trainer import TrainerConfig
from benchmarks import (
    env_throughput,
    icub_gait,
    memory,
    mode_switch,
    random_buffer,
    sac_study_cost,
    time_to_solve,
)
from benchmarks.learning import suite_runs
from cli_helpers import (
    EXAMPLES,
    REPO_ROOT,
    RUN_TIMEOUT_S,
    TINY,
    assert_ok,
    run_train,
    train_command,
    train_env,
)
from fake_clock import Clock


@pytest.mark.parametrize(
    'script, args, message',
    [
        ('mode_switch.py', ['--rounds', '0'], 'argument --rounds: must be at least 1, got 0'),
        ('mode_switch.py', ['--switches', '1'], 'argument --switches: must be at least 2, got 1'),
        ('memory.py', ['--buffer', '0'], 'argument --buffer: must be at least 1, got 0'),
        ('memory.py', ['--env', 'Nope-v0'], '--env: Unknown environment id'),
        # 2.5 PB of buffer, refused before any of it is allocated.
        (
            'memory.py',
            ['--env', 'Pendulum-v1', '--buffer', str(10**14)],
            '--buffer: 100000000000000 steps do not fit in memory (alf_lite): ReplayBuffer of',
        ),
        # A buffer alf_lite cannot have: its figures were printed all the same.
        (
            'memory.py',
            ['--env', 'CartPole-v1', '--buffer', '10'],
            "--env: Environment 'CartPole-v1' has action space Discrete(2)",
        ),
        ('env_throughput.py', ['--repeats', '0'], 'argument --repeats: must be at least 1'),
        ('env_throughput.py', ['--seconds', 'nan'], '--seconds: must be a finite number >= 0.1'),
        ('icub_gait.py', ['--root_dir', 'x', '--num_episodes', '0'], '--num_episodes: must be'),
        ('icub_gait.py', ['--root_dir', 'x', '--noise_std', '-0.5'], '--noise_std: must be a'),
        ('icub_gait.py', ['--root_dir', 'x', '--noise_std', 'nan'], '--noise_std: must be a'),
        ('time_to_solve.py', ['--sb3_threads', 'two'], "--sb3_threads: 'two' is not an integer"),
        ('time_to_solve.py', ['--seeds', '0', '-1'], '--seeds: must be at least 0, got -1'),
        ('time_to_solve.py', ['--max_steps', '999'], '--max_steps: must be at least 1000, got 999'),
        # No return reaches nan or inf: every run would train all its steps unsolved (short
        # runs, should one start).
        *(
            (
                'time_to_solve.py',
                [f'--threshold={value}', '--seeds', '0', '--max_steps', '1000'],
                '--threshold: must be a finite number, got',
            )
            for value in ('nan', 'inf', '-inf')
        ),
        (
            'env_throughput.py',
            ['--env_names', 'Pendulum-v1,CartPole-v1'],
            "--env_names: Environment 'CartPole-v1' has action space Discrete(2)",
        ),
        ('env_throughput.py', ['--env_names', 'Nope-v0'], '--env_names: Unknown environment id'),
        ('env_throughput.py', ['--seconds', 'inf'], '--seconds: must be a finite number >= 0.1'),
        ('env_throughput.py', ['--num_envs', '1,0'], '--num_envs: must be at least 1'),
        ('sac_study_cost.py', ['--updates', '0'], '--updates: must be at least 1'),
        ('learning.py', ['--seeds', '-1'], '--seeds: must be at least 0'),
        # Modules of the scripts, which have no command line: they say which script to run.
        *(
            (f'{module}.py', ['--help'], f'benchmarks/{module}.py is a module of {user}')
            for module, user in (
                ('launcher', 'benchmarks/learning.py, not a script: run python benchmarks/'),
                ('random_buffer', 'benchmarks/throughput.py and'),
                ('sb3_common', 'the benchmarks that train Stable-Baselines3, not a script'),
            )
        ),
    ],
)
def test_a_benchmark_given_an_unusable_number_exits_2_naming_it(tmp_path, script, args, message):
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert 'Traceback' not in result.stderr
    if 'steps do not fit in memory' in message:
        # The remedy names the script's flag, not the trainer's replay_buffer_length.
        assert result.stderr.rstrip().endswith(' steps fit: lower --buffer.')
        assert 'replay_buffer_length' not in result.stderr


def test_throughput_ceilings_run_as_a_script_from_another_directory(tmp_path):
    pytest.importorskip('stable_baselines3')
    # As installed (`pip install -e .`): alf_lite imports from anywhere, the
    # benchmarks package only through the script's own path setup.
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['OMP_NUM_THREADS'] = '1'
    probe = [sys.executable, '-c', 'import alf_lite']
    if subprocess.run(probe, cwd=tmp_path, env=env, capture_output=True).returncode != 0:
        pytest.skip('alf_lite is not installed (pip install -e .), so a script cannot import it')
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / 'throughput.py'), '--ceiling_only']
        + ['--ceiling_updates', '3', '--learning_starts', '300', '--env', 'Pendulum-v1']
        + ['--threads', '1', '--sb3_threads', '1'],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'SAC Pendulum-v1, alf_lite in float32' in result.stdout.splitlines(), result.stdout
    found = re.search(
        r'pure-update ceiling on cpu: alf_lite \(1 torch thread\) ([\d.]+) updates/s, '
        r'SB3 \(1\) ([\d.]+) updates/s',
        result.stdout,
    )
    assert found and float(found[1]) > 0 and float(found[2]) > 0, result.stdout


@pytest.mark.parametrize('env_name', ['ICubWalk-v0', 'ICubWalk-v1'])
def test_icub_gait_plays_the_policy_and_both_baselines_on_the_runs_eval_seeds(tmp_path, env_name):
    root_dir = tmp_path / 'icub'
    params = TINY + [
        f"create_environment.env_name='{env_name}'",
        'create_environment.num_parallel_environments=1',
        'TrainerConfig.initial_collect_steps=1',
        'TrainerConfig.num_env_steps=2',
        'TrainerConfig.num_eval_episodes=1',
    ]
    assert_ok(run_train(train_command(root_dir, [EXAMPLES / 'sac_icub_walking.gin'], params)))
    gait = [sys.executable, str(REPO_ROOT / 'benchmarks' / 'icub_gait.py')]
    result = run_train(
        gait + ['--root_dir', str(root_dir), '--num_episodes', '1', '--noise_std', '0.5'],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'out of date' not in result.stderr  # gymnasium's warning for v0 beside v1
    # (PyBullet writes 'argv[0]=' lines to stdout.)
    lines = [line for line in result.stdout.splitlines() if not line.startswith('argv')]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {'policy', 'zero', 'random', 'zero+N(0,0.5)'}, result.stdout
    # The zero action holds the standing pose until the 200-step limit (10 s at 20 Hz);
    # random actions fall.
    assert 'length  200.0 steps (10.00 s)  fell 0/1' in rows['zero'], rows['zero']
    assert 'fell 1/1' in rows['random'], rows['random']
    assert 'fell 1/1' in rows['zero+N(0,0.5)'], rows['zero+N(0,0.5)']
    assert lines[0].startswith(f'{root_dir}/checkpoints/ckpt-2, 1 episodes'), lines[0]

    other = tmp_path / 'pendulum'
    other.mkdir()
    (other / 'config.gin').write_text("create_environment.env_name = 'Pendulum-v1'\n")
    refused = run_train(gait + ['--root_dir', str(other)], cwd=tmp_path)
    assert refused.returncode == 2
    assert 'trained on Pendulum-v1, not ICubWalk-v0 or ICubWalk-v1' in refused.stderr

    # A run from someone else: its config.gin imports a module shipped beside it.
    marker = tmp_path / 'ran'
    (tmp_path / 'shipped.py').write_text(f'open({str(marker)!r}, "w").write("ran")\n')
    config = root_dir / 'config.gin'
    config.write_text('import shipped\n' + config.read_text())
    beside = dict(train_env(), PYTHONPATH=f'{tmp_path}{os.pathsep}{REPO_ROOT}')

    def run_beside(command):
        return subprocess.run(
            command, cwd=tmp_path, env=beside, capture_output=True, text=True, timeout=240
        )

    refused = run_beside(gait + ['--root_dir', str(root_dir)])
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert '--trust_imports' in refused.stderr, refused.stderr[-3000:]
    assert str(tmp_path / 'shipped.py') in refused.stderr and not marker.exists()
    trusted = gait + ['--root_dir', str(root_dir), '--num_episodes', '1', '--trust_imports']
    assert_ok(run_beside(trusted))
    assert marker.read_text() == 'ran'


def icub_gait_of_a_tiny_run(tmp_path, params):
    """icub_gait.py's result, one episode, of a 2-step iCub run trained with ``params``
    (in ``tmp_path / 'icub'``)."""
    root_dir = tmp_path / 'icub'
    params = TINY + [
        'create_environment.num_parallel_environments=1',
        'TrainerConfig.initial_collect_steps=1',
        'TrainerConfig.num_env_steps=2',
        'TrainerConfig.num_eval_episodes=1',
        *params,
    ]
    assert_ok(run_train(train_command(root_dir, [EXAMPLES / 'sac_icub_walking.gin'], params)))
    gait = [sys.executable, str(REPO_ROOT / 'benchmarks' / 'icub_gait.py')]
    result = run_train(gait + ['--root_dir', str(root_dir), '--num_episodes', '1'], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_icub_gait_plays_a_run_whose_env_name_is_module_and_id(tmp_path):
    # train takes 'module:Id'; it was refused as a run of another env.
    params = [
        "create_environment.env_name='alf_lite.environments.icub_walking:ICubWalk-v0'",
        'create_environment.max_episode_steps=20',
        'TrainerConfig.random_seed=3',
    ]
    result = icub_gait_of_a_tiny_run(tmp_path, params)
    lines = [line for line in result.stdout.splitlines() if not line.startswith('argv')]
    zero = next(line for line in lines if line.startswith('zero'))
    assert 'length   20.0 steps ( 1.00 s)  fell 0/1' in zero, zero
    # The episodes of the run's own eval seeds, not those of seed 0.
    assert lines[0].endswith('random_seed 3'), lines[0]
    gait = [sys.executable, str(REPO_ROOT / 'benchmarks' / 'icub_gait.py')]
    args = ['--root_dir', str(tmp_path / 'icub'), '--num_episodes', '1', '--random_seed', '3']
    seeded = run_train(gait + args, cwd=tmp_path)
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    assert [line for line in seeded.stdout.splitlines() if not line.startswith('argv')] == lines


def test_icub_gait_plays_in_the_env_the_run_was_trained_in(tmp_path):
    # A time limit of 50 steps and a control period of 6 physics steps of 1/240 s.
    root_dir = tmp_path / 'icub'
    params = [
        'create_environment.max_episode_steps=50',
        "create_environment.env_kwargs={'physics_substeps': 6}",
    ]
    result = icub_gait_of_a_tiny_run(tmp_path, params)
    gait = [sys.executable, str(REPO_ROOT / 'benchmarks' / 'icub_gait.py')]
    assert 'control period 0.025 s' in result.stdout, result.stdout
    zero = next(line for line in result.stdout.splitlines() if line.startswith('zero'))
    assert 'length   50.0 steps ( 1.25 s)  fell 0/1' in zero, zero

    # A resume at 2 env steps that changed the time limit kept config-until-2.gin: its
    # checkpoint plays with the limit it was trained with, the later one with the new.
    params = ['create_environment.max_episode_steps=20', 'TrainerConfig.num_env_steps=3']
    assert_ok(run_train(train_command(root_dir, params=params)))
    assert (root_dir / 'config-until-2.gin').is_file()
    for step, length in ((2, '50.0'), (3, '20.0')):
        args = ['--root_dir', str(root_dir), '--num_episodes', '1', '--checkpoint_step', str(step)]
        result = run_train(gait + args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        zero = next(line for line in result.stdout.splitlines() if line.startswith('zero'))
        assert f'length {length:>6} steps' in zero, (step, zero)


def test_time_to_solve_runs_both_libraries_and_reports_the_ratio(tmp_path):
    pytest.importorskip('stable_baselines3')
    # A threshold any policy reaches: each run stops at its first evaluation, which
    # for alf_lite is the initial policy's and for SB3's EvalCallback the one after
    # 1000 steps.
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / 'time_to_solve.py'), '--seeds', '0']
        + ['--threshold', '-5000', '--max_steps', '1000', '--precision', 'bfloat16']
        + ['--threads', '1', '--sb3_threads', '1'],
        cwd=tmp_path,
        env={**os.environ, 'OMP_NUM_THREADS': '1'},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name, steps in (('alf_lite', 0), ('sb3', 1000)):
        assert re.search(rf'seed 0 {name} *: solved at {steps} env steps', result.stdout), (
            result.stdout
        )
    assert 'torch threads: alf_lite 1, SB3 1, alf_lite in bfloat16, on cpu' in result.stdout
    assert re.search(
        r'ratio alf_lite / SB3 \(median seconds\): [\d.]+ at equal resources '
        r'\(torch threads: alf_lite 1, SB3 1; cpu\)\n',
        result.stdout,
    )


def test_time_to_solve_says_in_words_a_ratio_without_a_median():
    # An unsolved run counts as infinitely slow: a median of inf has no ratio (it was nan).
    assert time_to_solve.ratio_text(30.0, 20.0) == '1.50'
    assert time_to_solve.ratio_text(math.inf, 20.0) == (
        'none (alf_lite left at least half its runs unsolved)'
    )
    assert time_to_solve.ratio_text(math.inf, math.inf) == (
        'none (alf_lite and SB3 left at least half their runs unsolved)'
    )


@pytest.fixture
def torch_threads():
    """The scripts set torch's thread count for the whole process."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def table_rows(lines, numbers):
    """``{name: [its last numbers fields]}`` of table lines whose name may hold spaces."""
    rows = {}
    for line in lines:
        fields = line.split()
        rows[' '.join(fields[:-numbers])] = fields[-numbers:]
    return rows


def test_alf_lite_replay_buffer_stores_the_raw_minimum_per_step():
    from alf_lite.replay_buffer import ReplayBuffer

    # float32 observation and action, float32 reward and discount, uint8 step type.
    raw = 100 * (17 * 4 + 6 * 4 + 4 + 4 + 1)
    assert memory.alf_lite_bytes(17, 6, 100) == raw
    # The bytes of the allocated storage are the figure the trainer logs.
    rb = ReplayBuffer(num_envs=1, length=100, observation_dim=17, action_dim=6)
    assert memory.alf_lite_buffer_bytes(rb) == rb.nbytes == raw


def test_memory_table_gives_bytes_per_step_mib_and_multiple_of_the_raw_minimum(
    monkeypatch, capsys, tmp_path
):
    pytest.importorskip('stable_baselines3')
    # MuJoCo appends the HalfCheetah model's warning to MUJOCO_LOG.TXT in the working directory.
    monkeypatch.chdir(tmp_path)
    buffer = 2**16
    monkeypatch.setattr(
        sys, 'argv', ['memory.py', '--env', 'HalfCheetah-v5', '--buffer', str(buffer)]
    )
    memory.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f'HalfCheetah-v5: observation 17 x float64, action 6; {buffer} steps'
    raw = 17 * 4 + 6 * 4 + 4 + 4 + 1
    # SB3: float64 observations (twice unless optimize_memory_usage), float32
    # actions, float32 reward, done and timeout.
    sb3 = 2 * 17 * 8 + 6 * 4 + 3 * 4
    sb3_optimized = 17 * 8 + 6 * 4 + 3 * 4
    per_step = {
        'raw minimum': raw,
        'alf_lite': raw,
        'SB3 ReplayBuffer (defaults)': sb3,
        'SB3 optimize_memory_usage=True': sb3_optimized,
    }
    assert table_rows(lines[2:], 3) == {
        name: [f'{n:.1f}', f'{n * buffer / 2**20:.1f}', f'{n / raw:.2f}']
        for name, n in per_step.items()
    }


def test_memory_script_knows_alf_lites_own_env_ids(tmp_path):
    """ICubWalk-v0 is registered by alf_lite, which the script imports after gymnasium."""
    pytest.importorskip('stable_baselines3')
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / 'memory.py')]
        + ['--env', 'ICubWalk-v0', '--buffer', '10'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    header = lines.index('ICubWalk-v0: observation 170 x float32, action 25; 10 steps')
    raw = 170 * 4 + 25 * 4 + 4 + 4 + 1
    assert table_rows(lines[header + 2 :], 3)['alf_lite'] == [f'{raw:.1f}', '0.0', '1.00']


def test_random_replay_buffer_samples_on_the_training_device(monkeypatch):
    import alf_lite.replay_buffer

    made = []

    class Recorded(alf_lite.replay_buffer.ReplayBuffer):
        def __init__(self, *args, **kwargs):
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(alf_lite.replay_buffer, 'ReplayBuffer', Recorded)
    device = torch.device('cpu')
    rb = random_buffer.random_replay_buffer(2, 12, 3, 2, device)
    assert [kwargs['training_device'] for kwargs in made] == [device]
    assert rb.num_steps == 12


def test_random_replay_buffer_ends_an_episode_every_episode_length_rows():
    rb = random_buffer.random_replay_buffer(2, 12, 3, 2, 'cpu', episode_length=4)
    assert rb.num_steps == rb.length == 12  # full
    # One step adds a row to every env: 12 steps, the next written at row 0.
    assert rb.total_added == 12
    assert rb.training_device == torch.device('cpu')
    first, mid, last = StepType.FIRST, StepType.MID, StepType.LAST
    storage = rb.storage
    for env in range(2):
        assert storage['step_type'][env].tolist() == [first, mid, mid, last] * 3
        assert storage['discount'][env].tolist() == [1.0, 1.0, 1.0, 0.0] * 3
    actions = storage['action']
    assert actions.shape == (2, 12, 2)
    assert actions.min() >= -1 and actions.max() <= 1 and actions.min() < 0 < actions.max()

    endless = random_buffer.random_replay_buffer(1, 5, 3, 2, 'cpu').storage
    assert endless['step_type'].tolist() == [[mid] * 5]
    assert endless['discount'].tolist() == [[1.0] * 5]


def test_env_steps_per_second_times_the_steps_after_the_warm_up_over_all_envs(monkeypatch):
    clock = Clock()
    made, actions = [], []

    @contextlib.contextmanager
    def timed_environment(env_name, num_envs, seed, use_subprocesses):
        # Each reset and step takes one second; the envs run in this process.
        made.append((env_name, num_envs, seed, use_subprocesses))
        with create_environment(env_name, num_envs, seed=seed, use_subprocesses=False) as env:
            step, reset = env.step, env.reset

            def timed_step(action):
                actions.append(action.clone())
                clock.now += 1.0
                return step(action)

            def timed_reset():
                clock.now += 1.0
                return reset()

            env.step, env.reset = timed_step, timed_reset
            yield env

    monkeypatch.setattr(env_throughput, 'time', clock)
    monkeypatch.setattr(env_throughput, 'create_environment', timed_environment)
    speed = env_throughput.steps_per_second('Pendulum-v1', 2, True, seconds=30, warmup_steps=5)
    # 30 timed steps of 2 envs in 30 s.
    assert speed == 2.0
    assert made == [('Pendulum-v1', 2, 0, True)]
    assert len(actions) == 5 + 30
    stacked = torch.stack(actions)
    assert stacked.shape == (35, 2, 1)
    # Uniform over the action range, which the env sees as [-1, 1].
    assert stacked.min() >= -1 and stacked.max() <= 1 and stacked.min() < 0 < stacked.max()


def test_env_throughput_table_takes_the_best_run_of_each_way_and_marks_a_slower_default(
    monkeypatch, capsys, torch_threads
):
    # Steps/s of each repeat, by (env, N, in subprocesses).
    runs = {
        ('Pendulum-v1', 1, False): [100.0, 300.0, 200.0],
        ('Pendulum-v1', 2, False): [400.0, 500.0, 450.0],
        ('Pendulum-v1', 2, True): [100.0, 250.0, 200.0],
        ('ICubWalk-v0', 1, False): [90.0, 80.0, 70.0],
        ('ICubWalk-v0', 2, False): [300.0, 200.0, 100.0],
        ('ICubWalk-v0', 2, True): [150.0, 100.0, 120.0],
    }
    calls = []

    def steps_per_second(env_name, num_envs, use_subprocesses, seconds):
        calls.append((env_name, num_envs, use_subprocesses, seconds, torch.get_num_threads()))
        repeat = sum(c[:3] == (env_name, num_envs, use_subprocesses) for c in calls) - 1
        return runs[env_name, num_envs, use_subprocesses][repeat]

    monkeypatch.setattr(env_throughput, 'steps_per_second', steps_per_second)
    torch.set_num_threads(2)
    argv = ['--env_names', 'Pendulum-v1,ICubWalk-v0', '--num_envs', '1,2', '--seconds', '0.5']
    monkeypatch.setattr(sys, 'argv', ['env_throughput.py'] + argv)
    env_throughput.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith('| ')]
    # README's columns: steps/s in process, in subprocesses, their ratio, the default.
    assert rows[0] == '| env | N | in process | subprocesses | ratio | default |'
    assert rows[1:] == [
        '| Pendulum-v1 | 1 | 300 | - | - | in process |',
        '| Pendulum-v1 | 2 | 500 | 250 | 0.50 | in process |',
        '| ICubWalk-v0 | 1 | 90 | - | - | in process |',
        '| ICubWalk-v0 | 2 | 300 | 150 | 0.50 | subprocesses (slower!) |',
    ]
    # The ways take turns within each repeat; one torch thread, as the trainer runs.
    assert [c[:3] for c in calls[3:9]] == [('Pendulum-v1', 2, False), ('Pendulum-v1', 2, True)] * 3
    assert {c[3:] for c in calls} == {(0.5, 1)}


def test_time_to_solve_table_counts_an_unsolved_run_as_infinitely_slow(monkeypatch, capsys):
    # (seconds, env steps, solved) of each seed's run.
    runs = {
        'alf_lite': [(10.0, 4000, True), (30.0, 6000, True), (20.0, 5000, True)],
        'sb3': [(40.0, 4000, True), (30.0, 9000, False), (35.0, 4000, True)],
    }
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        options = dict(zip(command[2::2], command[3::2]))
        seconds, steps, solved = runs[options['--_run']][int(options['--_seed'])]
        result = dict(seconds=seconds, env_steps=steps, solved=solved, eval_return=-180.0)
        return types.SimpleNamespace(
            returncode=0, stdout='a log line\n' + json.dumps(result) + '\n'
        )

    monkeypatch.setattr(
        time_to_solve, 'subprocess', types.SimpleNamespace(run=run, PIPE=subprocess.PIPE)
    )
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name: object())
    argv = ['--seeds', '0', '1', '2', '--threshold', '-150', '--max_steps', '9000']
    argv += ['--threads', '3', '--sb3_threads', '2', '--precision', 'bfloat16']
    monkeypatch.setattr(sys, 'argv', ['time_to_solve.py'] + argv)
    time_to_solve.main()
    out = capsys.readouterr().out.splitlines()

    # Each run in its own process, alternating per seed, with the script's options.
    assert [dict(zip(c[2::2], c[3::2])) for c in commands] == [
        {
            '--_run': name,
            '--_seed': str(seed),
            '--threshold': '-150.0',
            '--max_steps': '9000',
            '--threads': '3',
            '--sb3_threads': '2',
            '--precision': 'bfloat16',
        }
        for seed in range(3)
        for name in ('alf_lite', 'sb3')
    ]
    assert 'seed 1 sb3     : NOT solved at 9000 env steps, 30.0 s (eval return -180.0)' in out
    header = out.index(f'{"":10s} {"median s":>9s} {"median steps":>13s} {"solved":>7s}')
    rows = table_rows(out[header + 1 : header + 3], 3)
    assert rows == {'alf_lite': ['20.0', '5000', '3/3'], 'sb3': ['40.0', '4000', '2/3']}
    assert 'torch threads: alf_lite 3, SB3 2, alf_lite in bfloat16, on cpu' in out[header - 1]
    assert out[-1] == (
        f'ratio alf_lite / SB3 (median seconds): {20.0 / 40.0:.2f} at unequal resources '
        '(torch threads: alf_lite 3, SB3 2; cpu)'
    )


def test_time_to_solve_stops_naming_the_run_that_failed_without_a_traceback_of_its_own(
    monkeypatch, capsys
):
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        options = dict(zip(command[2::2], command[3::2]))
        if options['--_run'] == 'sb3':
            # The run's traceback went to the terminal: its stderr is not captured.
            return types.SimpleNamespace(returncode=-9, stdout='')
        result = dict(seconds=1.0, env_steps=2000, solved=True, eval_return=-150.0)
        return types.SimpleNamespace(returncode=0, stdout=json.dumps(result) + '\n')

    monkeypatch.setattr(
        time_to_solve, 'subprocess', types.SimpleNamespace(run=run, PIPE=subprocess.PIPE)
    )
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name: object())
    monkeypatch.setattr(sys, 'argv', ['time_to_solve.py', '--seeds', '3', '4'])
    with pytest.raises(SystemExit) as exit:
        time_to_solve.main()
    assert exit.value.code == 1
    captured = capsys.readouterr()
    assert captured.err == (
        'error: the sb3 run of seed 3 failed (killed by SIGKILL (exit code -9)); '
        'its error is printed above\n'
    )
    assert captured.out.startswith('seed 3 alf_lite: solved at 2000 env steps')
    assert len(commands) == 2  # no run after the failed one


def test_time_to_solve_without_stable_baselines3_exits_2_before_any_run(monkeypatch, capsys):
    def run(command, **kwargs):
        raise AssertionError('no run starts')

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        'find_spec',
        lambda name, *a: None if name == 'stable_baselines3' else real_find_spec(name, *a),
    )
    monkeypatch.setattr(
        time_to_solve, 'subprocess', types.SimpleNamespace(run=run, PIPE=subprocess.PIPE)
    )
    monkeypatch.setattr(sys, 'argv', ['time_to_solve.py', '--seeds', '0'])
    with pytest.raises(SystemExit) as exit:
        time_to_solve.main()
    assert exit.value.code == 2
    assert 'stable-baselines3 is not installed (pip install .[bench])' in capsys.readouterr().err


def test_time_to_solve_sb3_run_has_the_settings_of_the_pendulum_gin_file(
    monkeypatch, torch_threads
):
    pytest.importorskip('stable_baselines3')
    import stable_baselines3

    clock = Clock()
    seen = {}

    sac = stable_baselines3.SAC

    class RecordingSAC(sac):
        """Building takes 5 s more, learning 7 s; the evaluation reaches the threshold."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            clock.now += 5.0

        def learn(self, total_timesteps, callback):
            seen['learn'] = (total_timesteps, torch.get_num_threads(), callback, self)
            callback.best_mean_reward = callback.last_mean_reward = -150.0
            self.num_timesteps = 4000
            clock.now += 7.0
            return self

    monkeypatch.setattr(stable_baselines3, 'SAC', RecordingSAC)
    monkeypatch.setattr(time_to_solve, 'time', clock)
    torch.set_num_threads(2)
    result = time_to_solve.run_sb3(seed=4, threshold=-150.0, max_steps=9000, threads=1)
    # The clock includes building the agent; a run at the threshold has solved.
    assert result == dict(seconds=12.0, env_steps=4000, solved=True, eval_return=-150.0)
    total, threads, evaluation, model = seen['learn']
    assert (total, threads) == (9000, 1)

    parse_config([time_to_solve.GIN_FILE])
    for sb3_value, alf_lite_name in (
        (model.learning_rate, 'actor/Adam.lr'),
        (model.learning_rate, 'critic/Adam.lr'),
        (model.learning_rate, 'alpha/Adam.lr'),
        (model.buffer_size, 'TrainerConfig.replay_buffer_length'),
        (model.learning_starts, 'TrainerConfig.initial_collect_steps'),
        (model.batch_size, 'TrainerConfig.mini_batch_size'),
        (model.tau, 'SacAlgorithm.target_update_tau'),
        (model.gamma, 'SacAlgorithm.gamma'),
    ):
        assert sb3_value == gin.query_parameter(alf_lite_name), alf_lite_name
    assert list(model.policy_kwargs['net_arch']) == list(
        gin.query_parameter('CriticNetwork.hidden_layers')
    )
    # The temperature starts at the alpha of the SAC the gin file builds and targets its
    # entropy; its critics, and one gradient step per env step.
    config = TrainerConfig()
    algorithm = config.algorithm_ctor(
        observation_dim=model.observation_space.shape[0], action_dim=model.action_space.shape[0]
    )
    assert model.log_ent_coef.exp().item() == pytest.approx(algorithm._log_alpha.exp().item())
    assert model.target_entropy == algorithm._target_entropy
    assert model.critic.n_critics == algorithm._critic.num_replicas
    assert (model.seed, model.train_freq.frequency, model.gradient_steps) == (
        4,
        config.unroll_length,
        config.num_updates_per_train_iter,
    )
    assert evaluation.eval_freq == gin.query_parameter('TrainerConfig.eval_interval')
    assert evaluation.n_eval_episodes == gin.query_parameter('TrainerConfig.num_eval_episodes')
    assert evaluation.deterministic is True
    assert evaluation.callback_on_new_best.reward_threshold == -150.0


def test_time_to_solve_alf_lite_run_stops_the_clock_at_the_evaluation_that_reaches_the_threshold(
    monkeypatch,
):
    clock = Clock()
    seen = {}

    class FakeTrainer:
        """Evaluates every 10 s; saving its checkpoint at the stop takes 50 s."""

        def __init__(self, config, root_dir):
            seen['config'] = {
                name: gin.query_parameter(f'TrainerConfig.{name}')
                for name in (
                    'random_seed',
                    'num_env_steps',
                    'eval_interval',
                    'num_eval_episodes',
                    'torch_num_threads',
                    'precision',
                    'device',
                )
            }
            self.env_steps = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def train(self, stop_when):
            for self.env_steps, eval_return in ((0, -1500.0), (1000, -300.0), (2000, -150.0)):
                clock.now += 10.0
                last_eval = {EVAL_RETURN: eval_return}
                if stop_when(last_eval):
                    break
            clock.now += 50.0
            return last_eval

    monkeypatch.setattr('alf_lite.trainer.Trainer', FakeTrainer)
    monkeypatch.setattr(time_to_solve, 'time', clock)
    result = time_to_solve.run_alf_lite(
        seed=2, threshold=-150.0, max_steps=9000, threads=3, precision='bfloat16'
    )
    assert result == dict(seconds=30.0, env_steps=2000, solved=True, eval_return=-150.0)
    assert seen['config'] == dict(
        random_seed=2,
        num_env_steps=9000,
        eval_interval=1000,
        num_eval_episodes=10,
        torch_num_threads=3,
        precision='bfloat16',
        device='cpu',  # where SB3 runs: the default, 'auto', would take a GPU
    )


class RecordingRunner:
    """An ``UpdateRunner`` that records how it was made."""

    def __init__(
        self, algorithm, replay_buffer, mini_batch_size, mini_batch_length, loss_mask_fn, **kwargs
    ):
        self.replay_buffer = replay_buffer
        self.batch = (mini_batch_size, mini_batch_length)
        self.loss_mask_fn = loss_mask_fn


def test_study_cost_runs_each_settings_update_on_episodes_of_ten_rows(monkeypatch):
    monkeypatch.setattr('alf_lite.update.UpdateRunner', RecordingRunner)
    runs = {
        (r.task.tag, r.label): r
        for s in ('study_sac', 'study_window')
        for r in suite_runs(s, seeds=[0])
    }
    # A LAST -> FIRST pair, which only mask_out_loss_for_last_step=False trains on.
    boundary = types.SimpleNamespace(step_type=torch.tensor([[StepType.LAST, StepType.FIRST]]))
    for (tag, label), share, window, trains_across in (
        (('hopper', 'default'), 1.0, 2, 0.0),
        (('hopper', 'mask_out_loss_for_last_step=False'), 1.0, 2, 1.0),
        (('icub', 'default'), 1 / 12, 2, 0.0),
        (('icub', '5-row windows, one sample per state'), 1 / 12, 5, 0.0),
    ):
        runner, update_share, threads = sac_study_cost._setting_runner(runs[tag, label], 11, 3)
        assert update_share == pytest.approx(share), label
        assert threads == 1
        assert runner.batch == (gin.query_parameter('TrainerConfig.mini_batch_size'), window)
        assert runner.loss_mask_fn(boundary).tolist() == [[trains_across]], label
        rb = runner.replay_buffer
        assert rb.num_envs == (1 if tag == 'hopper' else 12)
        assert rb.length == sac_study_cost.BUFFER_ROWS // rb.num_envs
        assert rb.num_steps == rb.length
        assert rb.storage['step_type'][:, 9::10].eq(StepType.LAST).all()
        assert rb.storage['step_type'].eq(StepType.LAST).sum() == rb.num_envs * (rb.length // 10)


def test_study_cost_checks_each_loss_as_the_runs_trainer_does_on_the_cpu():
    (run,) = [r for r in suite_runs('study_sac', seeds=[0]) if r.name == 'hopper_default']
    runner, _, _ = sac_study_cost._setting_runner(run, 11, 3)
    # The study's runs train on the CPU with TrainerConfig.defer_non_finite_checks's
    # default: each loss read back before its step, no guard on the device.
    assert gin.query_parameter('TrainerConfig.device') == 'cpu'
    assert not runner.guard_enabled


def test_study_cost_table_gives_median_ms_per_update_against_the_default(
    monkeypatch, capsys, torch_threads
):
    clock = Clock()
    updates, rounds = 4, 3
    # Seconds per update of each setting, in round 1, 2 and 3 (before them, 20 warm-ups).
    costs = {
        'default': [0.002, 0.006, 0.004],
        'mask_out_loss_for_last_step=False': [0.003, 0.009, 0.006],
        'resample_action_per_loss=True': [0.005, 0.001, 0.003],
    }
    threads_seen = set()

    class TimedRunner:
        def __init__(self, label):
            self.label, self.calls = label, 0

        def update(self, env_steps, update):
            threads_seen.add(torch.get_num_threads())
            self.calls += 1
            if self.calls > 20:
                clock.now += costs[self.label][(self.calls - 21) // updates]

    def setting_runner(run, obs_dim, act_dim):
        assert (obs_dim, act_dim) == (11, 3)
        return TimedRunner(run.label), 0.5, 1

    monkeypatch.setattr(sac_study_cost, 'time', clock)
    monkeypatch.setattr(sac_study_cost, '_setting_runner', setting_runner)
    monkeypatch.setattr(sac_study_cost, '_dims', lambda env_name: (11, 3))
    torch.set_num_threads(2)
    args = ['--task', 'hopper', '--updates', str(updates), '--rounds', str(rounds)]
    assert sac_study_cost.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert threads_seen == {1}
    assert (
        'Hopper-v5: 11-d observation, 3-d action, 1 torch thread(s), 3 rounds of 4 updates; '
        'an update is 0.5 of an env step' in out
    )
    start = next(i for i, line in enumerate(out) if line.startswith('setting')) + 1
    ms = {label: sorted(1000 * c for c in cost) for label, cost in costs.items()}
    base = ms['default'][1]
    assert table_rows(out[start : start + 3], 4) == {
        label: [f'{v[1]:.2f}', f'{v[0]:.2f}', f'{v[2]:.2f}', f'{v[1] / base:.2f}']
        for label, v in ms.items()
    }
    assert out[start + 3] == 'update ms per env step: ' + ', '.join(
        f'{label} {0.5 * v[1]:.2f}' for label, v in ms.items()
    )


class FakeEpisodes:
    """An env whose episodes end after ``lengths[i]`` steps, terminated where ``fell[i]``."""

    def __init__(self, lengths, fell, control_dt=0.05):
        self.lengths, self.fell = lengths, fell
        self.unwrapped = types.SimpleNamespace(control_dt=control_dt)
        self.seeds, self.actions = [], []

    def reset(self, seed):
        self.seeds.append(seed)
        self.t = 0
        return np.zeros(3), {}

    def step(self, action):
        self.actions.append(np.asarray(action, dtype=np.float64))
        episode = len(self.seeds) - 1
        self.t += 1
        end = self.t == self.lengths[episode]
        terminated = end and self.fell[episode]
        info = {'forward_velocity': 0.5 * (episode + 1)}
        return np.zeros(3), 2.0, terminated, end and not terminated, info


def test_icub_gait_play_sums_return_and_distance_of_each_episode_until_it_ends():
    env = FakeEpisodes(lengths=[3, 5], fell=[True, False], control_dt=0.05)
    episodes = icub_gait.play(env, lambda observation: np.zeros(2), seeds=[7, 8])
    assert env.seeds == [7, 8]
    # Distance: forward velocity times the control period, summed over the steps.
    assert episodes == [
        (6.0, 3, True, pytest.approx(3 * 0.5 * 0.05)),
        (10.0, 5, False, pytest.approx(5 * 1.0 * 0.05)),
    ]


def test_icub_gait_summary_gives_mean_length_falls_and_speed_over_all_the_time():
    episodes = [(10.0, 4, True, 1.0), (20.0, 6, False, 2.0)]
    line = icub_gait.summary('policy', episodes, control_dt=0.05)
    # 3 m in 10 steps of 0.05 s.
    assert line == (
        'policy   return    15.0  length    5.0 steps ( 0.25 s)  fell 1/2  '
        'forward +1.50 m  speed +6.00 m/s'
    )


def test_icub_gait_maps_each_players_actions_into_the_action_range(
    monkeypatch, tmp_path, capsys, torch_threads
):
    import alf_lite.bin.policy

    (tmp_path / 'config.gin').write_text("create_environment.env_name = 'ICubWalk-v0'\n")
    low, high = np.array([-2.0, -2.0, 0.0]), np.array([4.0, 2.0, 1.0])
    env = FakeEpisodes(lengths=[2] * 8, fell=[False] * 8)
    env.action_space = gymnasium.spaces.Box(low, high, dtype=np.float64)
    env.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (3,))
    env.close = lambda: None

    class Policy:
        def predict_step(self, observation):
            return torch.tensor([[-1.0, 1.0, 0.0]])  # low, high and the middle

    monkeypatch.setattr(gymnasium, 'make', lambda name: env)
    monkeypatch.setattr(alf_lite.bin.policy, 'checkpoint_path', lambda root, step: 'ckpt-2')
    monkeypatch.setattr(alf_lite.bin.policy, 'load_policy', lambda *args: Policy())
    argv = ['--root_dir', str(tmp_path), '--num_episodes', '2', '--random_seed', '5']
    assert icub_gait.main(argv + ['--noise_std', '100']) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ['policy', 'zero', 'random', 'zero+N(0,100)']
    # Every player plays the run's eval seeds.
    assert env.seeds == eval_env_seeds(5, 2) * 4
    policy, zero, uniform, noisy = (np.array(env.actions[i : i + 4]) for i in range(0, 16, 4))
    assert (policy == [[-2.0, 2.0, 0.5]] * 4).all()
    assert (zero == 0.0).all()
    assert ((uniform >= low) & (uniform <= high)).all() and len(np.unique(uniform)) == 12
    # Noise of std 100 is clipped to [-1, 1]: the bounds of the range.
    assert ((noisy == low) | (noisy == high)).all()


def test_mode_switch_times_each_examples_algorithm_both_ways(capsys):
    # DDPG as its example config builds it: with batch norm, whose mode matters.
    ddpg = mode_switch.build_algorithm('ddpg')
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in ddpg.modules())
    mode_switch.main(['--rounds', '2', '--switches', '10'])
    rows = {}
    for line in capsys.readouterr().out.splitlines()[2:]:
        algo, modules, own, _, reference, _, ratio = line.split()
        rows[algo] = (int(modules), float(own), float(reference), float(ratio))
    assert sorted(rows) == sorted(mode_switch.ALGOS)
    for algo, (modules, own, reference, ratio) in rows.items():
        algorithm = mode_switch.build_algorithm(algo)
        assert modules == sum(1 for _ in algorithm.modules())
        assert own > 0 and reference > 0
        # Each figure is printed to one decimal (up to 0.05 off): the printed ratio
        # lies within what the printed times allow, whatever the load made them.
        half = 0.05
        assert (reference - half) / (own + half) - half <= ratio
        assert ratio <= (reference + half) / max(own - half, 1e-9) + half


def test_gpu_check_without_wheels_stops_at_once_and_says_how_to_fetch_them(tmp_path):
    # The GPU machine has no network: a run without .wheels/ must not spend its time.
    os.makedirs(tmp_path / 'benchmarks')
    script = tmp_path / 'benchmarks' / 'gpu_check.sh'
    with open(os.path.join(REPO_ROOT, 'benchmarks', 'gpu_check.sh')) as f:
        script.write_text(f.read())
    result = subprocess.run(
        ['bash', str(script)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert 'no wheels in .wheels/: fetch them as above' in result.stdout
    assert '=== machine' not in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks a machine where torch finds no GPU')
def test_gpu_check_where_torch_finds_no_gpu_stops_before_installing_anything(tmp_path):
    # A GPU machine whose torch sees no GPU (a driver too old for its CUDA) must not spend
    # its minutes on steps that all fail or skip, and must not end with exit code 0.
    os.makedirs(tmp_path / 'benchmarks')
    os.makedirs(tmp_path / '.wheels')
    (tmp_path / '.wheels' / 'placeholder-0-py3-none-any.whl').write_bytes(b'')
    script = tmp_path / 'benchmarks' / 'gpu_check.sh'
    with open(os.path.join(REPO_ROOT, 'benchmarks', 'gpu_check.sh')) as f:
        script.write_text(f.read())
    result = subprocess.run(
        ['bash', str(script)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert 'torch finds no CUDA GPU' in result.stdout, result.stdout
    assert '=== install .wheels' not in result.stdout


def test_path_flags_joined_to_a_tilde_by_an_equals_sign_are_read_from_home(
    tmp_path, monkeypatch, capsys
):
    # Bash leaves the ~ of --out=~/runs as it is: the scripts expand it, as alf_lite's tools do.
    from benchmarks import learning

    home, cwd = tmp_path / 'home', tmp_path / 'cwd'
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv('HOME', str(home))
    monkeypatch.chdir(cwd)
    argv = ['--suite', 'pendulum', '--runs', 'alf_td3', '--seeds', '0', '--steps', '2']
    assert learning.main(argv + ['--out=~/runs', '--docs_dir=~/docs', '--dry_run']) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert f'--root_dir {home}/runs/pendulum/alf_td3/seed0' in line, line
    with pytest.raises(SystemExit):
        icub_gait.main(['--root_dir=~/run'])
    assert f'{home}/run holds no config.gin' in capsys.readouterr().err
    assert os.listdir(cwd) == []
