"""``python -m alf_lite.bin.train`` as a user runs it: real subprocesses, real files read back."""

import contextlib
import glob
import logging
import math
import multiprocessing
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from alf_lite.run_dir import RunDir, keep_superseded_config, run_dir_in_use
from alf_lite.signals import (
    PARENT_PID_VARIABLE,
    SAME_STOP_WITHIN_S,
    STOP_SIGNALS,
    InterruptedInEnvCall,
    InterruptedOutsideTraining,
    RaisingSignals,
    StopSignals,
    TrainingInterrupted,
    env_processes_starting,
)
from cli_helpers import (
    EXAMPLES,
    PENDULUM,
    REPO_ROOT,
    RUN_TIMEOUT_S,
    TINY,
    assert_ok,
    checkpoint_steps,
    run_python,
    run_train,
    start_and_kill,
    train_command,
    train_env,
    tree_digest,
    with_read_only_rename,
)
from dropped_signal import SignalledWhileDeleted

# A run of 200 env steps: one evaluation and one checkpoint at its end.
ONE_CHECKPOINT = TINY + [
    'TrainerConfig.num_env_steps=200',
    'TrainerConfig.summary_interval=100',
    'TrainerConfig.eval_interval=200',
    'TrainerConfig.checkpoint_interval=200',
    'TrainerConfig.num_eval_episodes=1',
]

TRAIN_SCALARS = (
    'critic_loss',
    'actor_loss',
    'alpha_loss',
    'alpha',
    'entropy',
    'q_mean',
    'AverageReturn',
    'AverageEpisodeLength',
    'env_steps_per_sec',
    'updates_per_sec',
    'replay_buffer_bytes',
    'process_rss_bytes',
    'env_processes_uss_bytes',
)
EVAL_SCALARS = ('AverageReturn', 'AverageEpisodeLength')


def column(rows, name, key='env_steps'):
    """``{int(row[key]): float(row[name])}`` over the rows where ``name`` has a value."""
    return {int(r[key]): float(r[name]) for r in rows if r.get(name, '') != ''}


def assert_close(a, b):
    # TensorBoard stores float32, progress.csv the full float64.
    assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6), (a, b)


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'param, must_name, closest',
    [
        ('TrainerConfig.num_env_stepz=10', 'num_env_stepz', 'num_env_steps'),
        ('TrainerConfg.random_seed=1', 'TrainerConfg', 'TrainerConfig'),
        ('TrainerConfig.mini_batch_length=1', 'mini_batch_length', None),
        ("create_environment.env_name='Pendulum-v9'", 'Pendulum-v9', 'Pendulum-v1'),
        # Known only once built, and before the first update would fail on it.
        (
            'SacAlgorithm.actor_network_ctor=@DeterministicActorNetwork',
            'SacAlgorithm.actor_network_ctor built a DeterministicActorNetwork',
            None,
        ),
        # A network as the algorithm failed at the first evaluation, after config.gin.
        (
            'TrainerConfig.algorithm_ctor=@CriticNetwork',
            'TrainerConfig.algorithm_ctor is the class CriticNetwork, which is no algorithm',
            None,
        ),
        # A class that does not take the algorithm's arguments: its TypeError named neither.
        (
            'TrainerConfig.algorithm_ctor=@GaussianNoise',
            'TrainerConfig.algorithm_ctor is the class GaussianNoise, which is no algorithm',
            None,
        ),
        # Integers no memory holds: tracebacks (an OverflowError; a TypeError at the first
        # update, after config.gin).
        (
            'TrainerConfig.replay_buffer_length=' + '9' * 400,
            'Lower replay_buffer_length',
            None,
        ),
        (
            'create_environment.num_parallel_environments=' + '9' * 400,
            'create_environment.num_parallel_environments = 999',
            None,
        ),
        (
            'TrainerConfig.mini_batch_size=' + '9' * 400,
            'TrainerConfig.mini_batch_size = 999',
            None,
        ),
        # The error named only the network's missing argument, not the parameter.
        (
            'SacAlgorithm.actor_optimizer=@actor/CriticNetwork',
            'SacAlgorithm.actor_optimizer is the class CriticNetwork, which is no optimizer',
            None,
        ),
        # The std overflowed float32: a non-finite critic loss at update 1, blamed on the
        # rewards, after config.gin and a checkpoint.
        (
            'TanhNormalActorNetwork.log_std_bounds=(-5.0, 200.0)',
            'log_std_bounds max must be at most 88.72',
            None,
        ),
        # The same of alpha, and a target entropy float32 cannot hold: a non-finite loss at
        # update 1, blamed on the rewards, after config.gin and a checkpoint.
        (
            'SacAlgorithm.initial_log_alpha=100.0',
            'SacAlgorithm: initial_log_alpha must be in [-3.4e38, 88.72]',
            None,
        ),
        (
            'SacAlgorithm.target_entropy=1e300',
            'SacAlgorithm: target_entropy must be at most 3.4e38 in magnitude',
            None,
        ),
    ],
    ids=[
        'misspelt_parameter',
        'misspelt_configurable',
        'bad_value',
        'unknown_env_id',
        'actor_that_cannot_sample',
        'network_as_the_algorithm',
        'noise_as_the_algorithm',
        'huge_replay_buffer_length',
        'huge_num_parallel_environments',
        'huge_mini_batch_size',
        'network_as_the_optimizer',
        'log_std_whose_std_overflows',
        'initial_log_alpha_whose_alpha_overflows',
        'target_entropy_beyond_float32',
    ],
)
def test_unknown_gin_parameter_exits_2_and_creates_nothing(tmp_path, param, must_name, closest):
    root_dir = tmp_path / 'experiments' / 'run'
    result = run_train(train_command(root_dir, [PENDULUM], TINY + [param]))
    assert result.returncode == 2, result.stderr[-4000:]
    assert must_name in result.stderr
    if closest is not None:
        # The suggestion, not just the list of every valid name.
        assert re.search(rf'closest[^.]*\b{closest}\b', result.stderr, re.IGNORECASE), result.stderr
    assert 'Traceback' not in result.stderr, result.stderr
    assert not (tmp_path / 'experiments').exists(), os.listdir(tmp_path / 'experiments')


def test_mini_batch_whose_layer_outputs_do_not_fit_exits_2_and_creates_nothing(tmp_path):
    # 4 GB of address space: the batch's rows (200 MB) fit, and so they passed; the first
    # update failed in F.linear allocating the actor's first layer output (4 GB), with a
    # traceback, after the initial collection and config.gin.
    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (4_000_000_000, resource.RLIM_INFINITY))

    root_dir = tmp_path / 'experiments' / 'run'
    params = [
        'TrainerConfig.num_env_steps=200',
        'TrainerConfig.initial_collect_steps=100',
        'TrainerConfig.replay_buffer_length=1000',
        'TrainerConfig.mini_batch_size=4000000',
    ]
    result = run_train(train_command(root_dir, [PENDULUM], params), preexec_fn=limit_memory)
    assert result.returncode == 2, result.stderr[-4000:]
    assert 'error: TrainerConfig.mini_batch_size = 4000000 with mini_batch_length = 2' in (
        result.stderr
    )
    # The critics' hidden layers: 2 replicas of 256 float32 outputs per transition.
    assert "2048 bytes per transition for the output of the networks' widest layer" in (
        result.stderr
    )
    assert 'Traceback' not in result.stderr, result.stderr
    assert not (tmp_path / 'experiments').exists(), os.listdir(tmp_path / 'experiments')


@pytest.mark.parametrize(
    'noise, must_name',
    [
        ('@actor/Adam', 'DdpgAlgorithm.exploration_noise is Adam, which fails as noise'),
        ('@create_environment()', 'exploration_noise is a BatchedEnvironment, which is no noise'),
    ],
    ids=['optimizer_as_the_noise', 'environment_as_the_noise'],
)
def test_exploration_noise_of_another_kind_exits_2_and_creates_nothing(tmp_path, noise, must_name):
    # Both failed at the first exploring step with a traceback, after config.gin.
    root_dir = tmp_path / 'experiments' / 'run'
    params = [
        'DeterministicActorNetwork.hidden_layers=(32,)',
        'CriticNetwork.hidden_layers=(32,)',
        'TrainerConfig.num_env_steps=300',
        'TrainerConfig.initial_collect_steps=100',
        f'DdpgAlgorithm.exploration_noise={noise}',
    ]
    result = run_train(train_command(root_dir, [EXAMPLES / 'ddpg_pendulum.gin'], params))
    assert result.returncode == 2, result.stderr[-4000:]
    assert must_name in result.stderr and '@GaussianNoise()' in result.stderr, result.stderr
    assert 'Traceback' not in result.stderr, result.stderr
    assert not (tmp_path / 'experiments').exists(), os.listdir(tmp_path / 'experiments')


def test_compile_where_torch_compile_cannot_compile_exits_2_and_creates_nothing(
    tmp_path, monkeypatch
):
    # No C++ compiler for torch.compile's CPU code (as in an image without one); a cache
    # of its own, so that no kernel compiled before is found there.
    monkeypatch.setenv('CXX', str(tmp_path / 'no-such-compiler'))
    monkeypatch.setenv('TORCHINDUCTOR_CACHE_DIR', str(tmp_path / 'inductor'))
    root_dir = tmp_path / 'experiments' / 'run'
    command = train_command(root_dir, [PENDULUM], TINY + ['TrainerConfig.compile = True'])
    result = run_train(command, fresh_interpreter=True)
    assert result.returncode == 2, result.stderr[-4000:]
    assert 'TrainerConfig.compile' in result.stderr and 'no-such-compiler' in result.stderr
    assert 'Traceback' not in result.stderr, result.stderr
    assert not (tmp_path / 'experiments').exists(), os.listdir(tmp_path / 'experiments')


@pytest.mark.parametrize(
    'params',
    [[], ["create_environment.env_kwargs = {'frame_skip': 5}"]],
    ids=['building_the_env', 'checking_env_kwargs'],
)
def test_a_mujoco_gl_that_mujoco_cannot_load_exits_2_naming_it_and_creates_nothing(
    tmp_path, monkeypatch, params
):
    # MuJoCo loads MUJOCO_GL's backend as it is imported: where the env is built, or
    # earlier, where its entry point is loaded to check env_kwargs.
    monkeypatch.setenv('MUJOCO_GL', 'no_such_backend')
    root_dir = tmp_path / 'experiments' / 'run'
    schedule = ['TrainerConfig.num_env_steps = 50', 'TrainerConfig.initial_collect_steps = 10']
    command = train_command(root_dir, [EXAMPLES / 'sac_halfcheetah.gin'], schedule + params)
    result = run_train(command, fresh_interpreter=True)
    assert result.returncode == 2, result.stderr[-4000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "Environment 'HalfCheetah-v5'" in last, last
    assert (
        'MuJoCo does not import with MUJOCO_GL=no_such_backend, the OpenGL backend it loads '
        'as it is imported (RuntimeError: ' in last
    ), last
    assert last.endswith(
        'Unset MUJOCO_GL (an env that renders nothing needs none) or set it to a backend this '
        'machine has: egl (headless), osmesa (headless, in software; needs the OSMesa library) '
        'or glfw (needs a display).'
    ), last
    assert 'Traceback' not in result.stderr, result.stderr
    assert not (tmp_path / 'experiments').exists(), os.listdir(tmp_path / 'experiments')


@pytest.mark.parametrize('make_root_dir', [False, True], ids=['missing_root_dir', 'empty_root_dir'])
def test_resume_without_gin_file_and_without_config_exits_2(tmp_path, make_root_dir):
    root_dir = tmp_path / 'run'
    if make_root_dir:
        root_dir.mkdir()
    result = run_train(train_command(root_dir))
    assert result.returncode == 2, result.stderr[-4000:]
    assert 'config.gin' in result.stderr and '--gin_file' in result.stderr, result.stderr
    assert 'Traceback' not in result.stderr, result.stderr
    if make_root_dir:
        assert os.listdir(root_dir) == []
    else:
        assert not root_dir.exists()


def test_start_over_without_gin_file_exits_2_and_moves_nothing(tmp_path):
    root_dir = tmp_path / 'run'
    root_dir.mkdir()
    # A config that no train builds: a train that went on would stop at once all the same.
    (root_dir / 'config.gin').write_text(
        f"include '{PENDULUM}'\nTrainerConfig.mini_batch_size = -1\n"
    )
    result = run_train(train_command(root_dir) + ['--start_over'])
    assert result.returncode == 2, result.stderr[-4000:]
    assert 'error: --start_over needs the --gin_file of the experiment to start.' in result.stderr
    assert os.listdir(tmp_path) == ['run'] and os.listdir(root_dir) == ['config.gin']


def test_start_over_that_cannot_move_the_root_dir_aside_exits_2_with_one_line(tmp_path):
    root_dir = tmp_path / 'run'
    root_dir.mkdir()
    (root_dir / 'config.gin').write_text("create_environment.env_name = 'Pendulum-v1'\n")
    before = tree_digest(tmp_path)
    command = train_command(root_dir, [PENDULUM], TINY) + ['--start_over']
    # The rename to run.old-<time> fails, as in a parent directory that is read-only.
    command = with_read_only_rename(command, '.old-')
    result = run_train(command)
    assert result.returncode == 2, result.stderr[-4000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf'error: --start_over could not move {re.escape(str(root_dir))} aside to '
        rf'{re.escape(str(root_dir))}\.old-\d{{8}}-\d{{6}}: \[Errno 30\] Read-only file system: .*',
        last_line,
    ), last_line
    assert 'Traceback' not in result.stderr, result.stderr[-4000:]
    assert tree_digest(tmp_path) == before and os.listdir(tmp_path) == ['run']


# --- a run and what it leaves in root_dir ---------------------------------------------------


def test_gin_file_by_absolute_path_works_from_any_directory(tmp_path):
    # From an unrelated directory, 'common/sac.gin' resolves only relative to the
    # including file; a relative --root_dir is relative to the working directory.
    cwd = tmp_path / 'elsewhere'
    cwd.mkdir()
    params = ONE_CHECKPOINT
    result = run_train(train_command('run', [PENDULUM.resolve()], params), cwd=cwd)
    assert_ok(result)
    root_dir = cwd / 'run'
    assert (root_dir / 'checkpoints' / 'ckpt-200' / 'model.pt').is_file()
    config = (root_dir / 'config.gin').read_text()
    assert "create_environment.env_name = 'Pendulum-v1'" in config  # from the file
    assert 'SacAlgorithm.target_update_tau = 0.005' in config  # from its include
    assert 'TrainerConfig.num_env_steps = 200' in config  # from --gin_param


@pytest.fixture(scope='module')
def latin1_locale(tmp_path_factory):
    """The environment of a process whose locale encodes text as ISO-8859-1, not UTF-8."""
    locales = tmp_path_factory.mktemp('locales')
    try:
        made = subprocess.run(
            ['localedef', '-i', 'en_US', '-f', 'ISO-8859-1', str(locales / 'en_US.ISO-8859-1')],
            capture_output=True,
            timeout=120,
        )
    except FileNotFoundError:
        pytest.skip('needs localedef (glibc) to make an ISO-8859-1 locale')
    if made.returncode != 0:
        pytest.skip(f'localedef could not make an ISO-8859-1 locale: {made.stderr[-500:]!r}')
    env = dict(train_env(), LOCPATH=str(locales), LC_ALL='en_US.ISO-8859-1')
    env.pop('PYTHONUTF8', None)
    return env


def test_gin_files_and_config_gin_are_utf8_whatever_the_locale(tmp_path, latin1_locale):
    # Read as latin-1, the file's 'café' would be 'cafÃ©'; config.gin written so could not be
    # read back as UTF-8 by the resume.
    encoding = [sys.executable, '-c', 'import locale; print(locale.getpreferredencoding())']
    assert subprocess.run(encoding, env=latin1_locale, capture_output=True, text=True).stdout == (
        'ISO-8859-1\n'
    )
    gin_file = tmp_path / 'label.gin'
    gin_file.write_bytes(f"include '{PENDULUM.resolve()}'\nLABEL = 'caf\u00e9'\n".encode())
    params = ONE_CHECKPOINT
    root_dir = tmp_path / 'run'
    assert_ok(run_train(train_command(root_dir, [gin_file], params), env=latin1_locale))
    assert "LABEL = 'caf\u00e9'" in (root_dir / 'config.gin').read_text(encoding='utf-8')
    resume = train_command(root_dir, params=['TrainerConfig.num_env_steps=400'])
    assert_ok(run_train(resume, env=latin1_locale))
    assert checkpoint_steps(root_dir) == [200, 400]


def test_root_dir_layout_and_tensorboard_scalars(tmp_path, read_tensorboard, read_progress):
    root_dir = tmp_path / 'run'
    # Training starts before the first summary, so every summary has the losses.
    params = TINY + [
        'TrainerConfig.initial_collect_steps=50',
        'TrainerConfig.num_env_steps=600',
        'TrainerConfig.summary_interval=100',
        'TrainerConfig.eval_interval=200',
        'TrainerConfig.checkpoint_interval=300',
        'TrainerConfig.num_eval_episodes=2',
    ]
    assert_ok(run_train(train_command(root_dir, [PENDULUM], params)))

    # Files.
    assert 'TrainerConfig.num_env_steps = 600' in (root_dir / 'config.gin').read_text()
    assert 'SacAlgorithm' in (root_dir / 'operative_config.gin').read_text()
    assert glob.glob(str(root_dir / 'train' / 'events.out.tfevents.*'))
    assert glob.glob(str(root_dir / 'eval' / 'events.out.tfevents.*'))
    assert checkpoint_steps(root_dir) == [300, 600]
    assert (root_dir / 'checkpoints' / 'ckpt-300' / 'model.pt').is_file()
    assert (root_dir / 'checkpoints' / 'ckpt-600' / 'model.pt').is_file()
    assert (root_dir / 'checkpoints' / 'ckpt-600' / 'replay_buffer.pt').is_file()
    assert not (root_dir / 'checkpoints' / 'ckpt-300' / 'replay_buffer.pt').exists()

    train = read_tensorboard(root_dir / 'train')
    evaluation = read_tensorboard(root_dir / 'eval')
    header, rows = read_progress(root_dir / 'progress.csv')
    assert set(TRAIN_SCALARS) <= set(train), sorted(train)
    assert set(EVAL_SCALARS) <= set(evaluation), sorted(evaluation)

    # The step axis is env steps: a summary every 100, an evaluation every 200 (and at 0).
    assert [e.step for e in train['env_steps_per_sec']] == [100, 200, 300, 400, 500, 600]
    assert [e.step for e in train['critic_loss']] == [100, 200, 300, 400, 500, 600]
    assert [e.step for e in evaluation['AverageReturn']] == [0, 200, 400, 600]
    # Pendulum episodes are 200 steps: no train return before the first one ends.
    assert [e.step for e in train['AverageReturn']] == [200, 300, 400, 500, 600]
    assert all(e.value == 200.0 for e in evaluation['AverageEpisodeLength'])

    # progress.csv: the same scalars, the same values at the same steps.
    expected_columns = (
        {'env_steps', 'num_updates', 'wall_time'}
        | {f'train/{name}' for name in TRAIN_SCALARS}
        | {f'eval/{name}' for name in EVAL_SCALARS}
    )
    assert set(header) == expected_columns, set(header) ^ expected_columns
    assert [int(r['env_steps']) for r in rows] == [0, 100, 200, 300, 400, 500, 600]
    for mode, events in (('train', train), ('eval', evaluation)):
        for tag, tag_events in events.items():
            from_csv = column(rows, f'{mode}/{tag}')
            assert [e.step for e in tag_events] == sorted(from_csv), (mode, tag)
            for e in tag_events:
                assert_close(e.value, from_csv[e.step])
    wall_times = {int(r['env_steps']): float(r['wall_time']) for r in rows}
    assert [e.wall_time for e in train['critic_loss']] == [
        wall_times[e.step] for e in train['critic_loss']
    ]


def test_rerunning_a_finished_run_changes_nothing(tmp_path, read_tensorboard):
    root_dir = tmp_path / 'run'
    params = TINY + [
        'TrainerConfig.num_env_steps=200',
        'TrainerConfig.summary_interval=100',
        'TrainerConfig.eval_interval=100',
        'TrainerConfig.checkpoint_interval=100',
        'TrainerConfig.num_eval_episodes=1',
    ]
    command = train_command(root_dir, [PENDULUM], params)
    assert_ok(run_train(command))

    def outputs():
        # Every checkpoint file's bytes, config.gin, progress.csv and each
        # TensorBoard event (wall time, step, value) of train and eval.
        return {
            'checkpoints': tree_digest(root_dir / 'checkpoints'),
            'config.gin': (root_dir / 'config.gin').read_text(),
            'progress.csv': (root_dir / 'progress.csv').read_text(),
            'train': read_tensorboard(root_dir / 'train'),
            'eval': read_tensorboard(root_dir / 'eval'),
        }

    before = outputs()
    assert_ok(run_train(command))
    after = outputs()
    for name, was in before.items():
        assert after[name] == was, name
    assert checkpoint_steps(root_dir) == [100, 200]


# --- kill and resume ------------------------------------------------------------------------

RESUME_STEPS = 3000
RESUME_PARAMS = [
    'TanhNormalActorNetwork.hidden_layers=(32,)',
    'CriticNetwork.hidden_layers=(32,)',
    'TrainerConfig.mini_batch_size=32',
    f'TrainerConfig.replay_buffer_length={RESUME_STEPS}',
    'TrainerConfig.initial_collect_steps=100',
    f'TrainerConfig.num_env_steps={RESUME_STEPS}',
    'TrainerConfig.checkpoint_interval=500',
    'TrainerConfig.summary_interval=250',
    'TrainerConfig.eval_interval=250',
    'TrainerConfig.num_eval_episodes=2',
]


def rows_after(rows, wall_time):
    return [r for r in rows if float(r['wall_time']) > wall_time]


def test_kill_and_resume_continues_step_count(tmp_path, read_tensorboard, read_progress):
    root_dir = tmp_path / 'run'
    full_command = train_command(root_dir, [PENDULUM], RESUME_PARAMS)

    # 1. Killed after its first checkpoint.
    killed_1 = start_and_kill(full_command, tmp_path, lambda: checkpoint_steps(root_dir), 'first')
    checkpoint_1 = checkpoint_steps(root_dir)[-1]
    assert checkpoint_1 < RESUME_STEPS

    # 2. The same command resumes; killed after it wrote a newer checkpoint.
    killed_2 = start_and_kill(
        full_command, tmp_path, lambda: checkpoint_steps(root_dir)[-1] > checkpoint_1, 'second'
    )
    checkpoint_2 = checkpoint_steps(root_dir)[-1]
    assert checkpoint_1 < checkpoint_2 < RESUME_STEPS
    _, rows = read_progress(root_dir / 'progress.csv')
    resumed_rows = rows_after(rows, killed_1)
    assert resumed_rows, 'the resumed run wrote no row'
    assert int(resumed_rows[0]['env_steps']) > checkpoint_1

    # 3. Only --root_dir: the config comes from root_dir/config.gin; runs to the end.
    result = run_train(train_command(root_dir))
    assert_ok(result)
    assert checkpoint_steps(root_dir)[-1] == RESUME_STEPS

    _, rows = read_progress(root_dir / 'progress.csv')
    resumed_rows = rows_after(rows, killed_2)
    assert resumed_rows, 'the last run wrote no row'
    assert int(resumed_rows[0]['env_steps']) > checkpoint_2
    env_steps = [int(r['env_steps']) for r in rows]
    assert env_steps == sorted(set(env_steps)), f'not strictly increasing: {env_steps}'
    assert env_steps == list(range(0, RESUME_STEPS + 1, 250))
    num_updates = [int(r['num_updates']) for r in rows]
    assert num_updates == sorted(set(num_updates)), f'not strictly increasing: {num_updates}'

    # TensorBoard, as it displays the three runs' event files together: the same
    # steps as progress.csv, each once, and the same values.
    for mode in ('train', 'eval'):
        events = read_tensorboard(root_dir / mode)
        name = 'critic_loss' if mode == 'train' else 'AverageReturn'
        from_csv = column(rows, f'{mode}/{name}')
        steps = [e.step for e in events[name]]
        assert steps == sorted(from_csv), (mode, steps, sorted(from_csv))
        assert steps[-1] == RESUME_STEPS
        for e in events[name]:
            assert_close(e.value, from_csv[e.step])


def test_rerun_after_kill_before_first_checkpoint_starts_over_without_duplicate_rows(
    tmp_path, read_tensorboard, read_progress
):
    root_dir = tmp_path / 'run'
    params = TINY + [
        'TrainerConfig.num_env_steps=800',
        'TrainerConfig.summary_interval=100',
        'TrainerConfig.eval_interval=400',
        'TrainerConfig.checkpoint_interval=10000',
        'TrainerConfig.num_eval_episodes=1',
    ]
    command = train_command(root_dir, [PENDULUM], params)

    def three_rows():
        path = root_dir / 'progress.csv'
        return path.exists() and len(path.read_text().splitlines()) >= 4

    start_and_kill(command, tmp_path, three_rows, 'killed')
    assert checkpoint_steps(root_dir) == []
    assert_ok(run_train(command))

    _, rows = read_progress(root_dir / 'progress.csv')
    assert [int(r['env_steps']) for r in rows] == list(range(0, 801, 100))
    # Training starts after initial_collect_steps=100: the first loss is at 200.
    steps = [e.step for e in read_tensorboard(root_dir / 'train')['critic_loss']]
    assert steps == list(range(200, 801, 100))


# --- every example --------------------------------------------------------------------------

EXAMPLE_FILES = sorted(glob.glob(str(EXAMPLES / '*.gin')))
NETWORKS = ('TanhNormalActorNetwork', 'DeterministicActorNetwork', 'CriticNetwork')
SMOKE = [
    'TrainerConfig.mini_batch_size=32',
    'TrainerConfig.replay_buffer_length=1000',
    'TrainerConfig.initial_collect_steps=100',
    'TrainerConfig.num_env_steps=300',
    'TrainerConfig.summary_interval=100',
    'TrainerConfig.eval_interval=100',
    'TrainerConfig.checkpoint_interval=100',
    'TrainerConfig.num_eval_episodes=1',
]


def small_networks(gin_file):
    """``<Network>.hidden_layers=(32,)`` for each network the file or its includes bind."""
    text, todo = '', [Path(gin_file)]
    while todo:
        path = todo.pop()
        content = path.read_text()
        text += content
        todo += [path.parent / m for m in re.findall(r"^include\s+'([^']+)'", content, re.M)]
    return [
        f'{name}.hidden_layers=(32,)'
        for name in NETWORKS
        if re.search(rf'^{name}\.hidden_layers\b', text, re.M)
    ]


def test_there_are_examples_to_smoke_test():
    assert any(f.endswith('sac_pendulum.gin') for f in EXAMPLE_FILES), EXAMPLE_FILES


@pytest.mark.parametrize(
    'gin_file, extra',
    [(f, []) for f in EXAMPLE_FILES]
    + [
        (
            str(PENDULUM),
            [
                'create_environment.num_parallel_environments=2',
                'create_environment.use_subprocesses=True',
            ],
        )
    ],
    ids=[os.path.basename(f)[: -len('.gin')] for f in EXAMPLE_FILES] + ['sac_pendulum_2_envs'],
)
def test_example_trains_and_checkpoints(tmp_path, read_progress, gin_file, extra):
    root_dir = tmp_path / 'run'
    result = run_train(
        train_command(root_dir, [gin_file], SMOKE + small_networks(gin_file) + extra)
    )
    assert_ok(result)
    # Every binding an example writes takes effect (its shared files' may not).
    assert 'used by nothing this run builds' not in result.stderr, result.stderr[-4000:]
    assert (root_dir / 'checkpoints' / 'ckpt-300' / 'model.pt').is_file()
    _, rows = read_progress(root_dir / 'progress.csv')
    assert int(rows[-1]['env_steps']) == 300
    assert rows[-1]['train/critic_loss'] != '' and math.isfinite(
        float(rows[-1]['train/critic_loss'])
    )
    if extra:
        # Two envs are stepped in subprocesses (the default for more than one).
        assert '2 x Pendulum-v1 (subprocesses)' in result.stderr, result.stderr[-4000:]


# --- the root_dir across resumes and restarts ---------------------------------------------


def test_stray_argument_exits_2_naming_it_and_creates_nothing(tmp_path):
    root_dir = tmp_path / 'run'
    params = TINY + ['TrainerConfig.num_env_steps=200', 'TrainerConfig.checkpoint_interval=200']
    result = run_train(train_command(root_dir, [PENDULUM], params) + ['extra.gin'])
    assert result.returncode == 2, result.stderr[-4000:]
    assert 'unexpected arguments: extra.gin' in result.stderr, result.stderr[-4000:]
    assert not root_dir.exists()


def test_start_over_locks_the_new_root_dir_not_the_one_moved_aside(tmp_path):
    root_dir = tmp_path / 'run'
    root_dir.mkdir()
    (root_dir / 'config.gin').write_text("create_environment.env_name = 'Pendulum-v1'\n")
    (root_dir / 'progress.csv').write_text('env_steps\n0\n')
    params = TINY + ['TrainerConfig.num_env_steps=1000000', 'TrainerConfig.summary_interval=100']
    command = train_command(root_dir, [PENDULUM], params) + ['--start_over']
    with open(tmp_path / 'train.log', 'w') as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=train_env(), stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.time() + RUN_TIMEOUT_S
            # The new run's first row: it trains in root_dir now.
            progress = root_dir / 'progress.csv'
            while not (progress.exists() and progress.read_text().startswith('env_steps,num')):
                assert process.poll() is None, (tmp_path / 'train.log').read_text()[-4000:]
                assert time.time() < deadline
                time.sleep(0.05)
            aside = [p for p in tmp_path.iterdir() if p.name.startswith('run.old-')]
            assert len(aside) == 1 and (aside[0] / 'config.gin').is_file()
            assert run_dir_in_use(str(root_dir))
            assert not run_dir_in_use(str(aside[0]))
        finally:
            process.kill()
            process.wait()
    assert not run_dir_in_use(str(root_dir))


def test_superseded_config_keeps_the_first_config_of_a_step_and_names_the_changes(tmp_path, caplog):
    run_dir = RunDir(str(tmp_path))
    trained_with = (
        '# Parameters for SacAlgorithm:\nSacAlgorithm.target_update_tau = 0.005\n'
        'TrainerConfig.num_env_steps = 400\n'
    )
    (tmp_path / 'config.gin').write_text(trained_with)
    # Only what a resume may change: nothing kept, the change logged.
    with caplog.at_level(logging.INFO):
        keep_superseded_config(run_dir, trained_with.replace('400', '800'), 400)
    assert sorted(os.listdir(tmp_path)) == ['config.gin']
    assert (
        'the resume changes TrainerConfig.num_env_steps = 400 -> TrainerConfig.num_env_steps = 800'
    ) in caplog.text
    assert 'the experiment changes' not in caplog.text
    caplog.clear()

    changed = trained_with.replace('0.005', '0.5')
    with caplog.at_level(logging.WARNING):
        keep_superseded_config(run_dir, changed, 400)
    assert (tmp_path / 'config-until-400.gin').read_text() == trained_with
    assert 'the experiment changes at env step 400' in caplog.text
    assert 'SacAlgorithm.target_update_tau = 0.005' in caplog.text
    assert 'SacAlgorithm.target_update_tau = 0.5' in caplog.text

    # That resume was killed before its next checkpoint and is resumed again from step
    # 400 with yet another change: the copy still holds what trained until step 400.
    (tmp_path / 'config.gin').write_text(changed)
    keep_superseded_config(run_dir, trained_with.replace('0.005', '0.05'), 400)
    assert (tmp_path / 'config-until-400.gin').read_text() == trained_with
    assert sorted(os.listdir(tmp_path)) == ['config-until-400.gin', 'config.gin']


def test_a_resume_that_changes_the_experiment_refuses_a_link_where_it_keeps_the_old_config(
    tmp_path,
):
    # The link's target holds something else: the run went on, its config.gin replaced, with
    # the warning saying that the config trained with until then was kept there.
    root_dir = tmp_path / 'run'
    assert_ok(
        run_train(train_command(root_dir, [PENDULUM], TINY + ['TrainerConfig.num_env_steps=200']))
    )
    elsewhere = tmp_path / 'elsewhere.gin'
    elsewhere.write_text('other\n')
    (root_dir / 'config-until-200.gin').symlink_to(elsewhere)
    before = tree_digest(tmp_path)
    params = ['TrainerConfig.num_env_steps=400', 'critic/Adam.lr=1e-5']
    result = run_train(train_command(root_dir, params=params))
    assert result.returncode == 2, result.stderr[-4000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f'error: cannot write {root_dir / "config.gin"}: {root_dir / "config-until-200.gin"} is '
        f'a symbolic link (to {elsewhere}), not the config trained with until env step 200, '
        'which a resume that changes the experiment keeps there. Remove the link, or resume '
        'without the changing --gin_param.'
    )
    assert tree_digest(tmp_path) == before


def test_a_resume_that_changes_many_bindings_names_each_one_in_its_warning(tmp_path, caplog):
    # The warning is the log's one record of what the experiment changed to: a change
    # left out of it would show only in a diff of the two config files.
    run_dir = RunDir(str(tmp_path))
    names = [f'SacAlgorithm.{name}' for name in ('gamma', 'target_update_tau')]
    names += [f'{scope}/Adam.lr' for scope in ('actor', 'critic', 'alpha')]
    trained_with = ''.join(f'{name} = 0.5\n' for name in names)
    (tmp_path / 'config.gin').write_text(trained_with)
    with caplog.at_level(logging.WARNING):
        keep_superseded_config(run_dir, trained_with.replace('0.5', '0.25'), 400)
    assert (tmp_path / 'config-until-400.gin').read_text() == trained_with
    assert 'in 5 binding(s)' in caplog.text
    for name in names:
        assert f'{name} = 0.5 -> {name} = 0.25' in caplog.text


# --- how SIGINT and SIGTERM reach the training loop (alf_lite.signals) ----------------------


@pytest.fixture
def signals_to_a_list():
    """SIGINT and SIGTERM appended to a list by their handlers, whatever this process inherited."""
    received = []

    def handler(signum, frame):
        received.append(signum)

    original = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield handler, received
    finally:
        for s, previous in original.items():
            signal.signal(s, previous)


def test_stop_signals_are_recorded_while_entered_and_the_handlers_restored_after(
    signals_to_a_list,
):
    handler, received = signals_to_a_list
    with StopSignals(lambda: None) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.received == signal.SIGTERM == 143 - 128
        assert str(TrainingInterrupted(stop.received)) == 'interrupted by SIGTERM'
        # Outside an env call, a second signal is recorded too.
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.received == signal.SIGINT
        # A batch system's warning before its time limit stops the run too (their default
        # action would end it without a checkpoint).
        for warning in (signal.SIGUSR1, signal.SIGUSR2):
            os.kill(os.getpid(), warning)
            assert stop.received == warning
    assert received == []
    assert all(signal.getsignal(s) is handler for s in STOP_SIGNALS)
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
    assert received == [signal.SIGINT, signal.SIGTERM]


def test_each_env_call_once_a_signal_came_is_given_its_patience(signals_to_a_list):
    handler, received = signals_to_a_list
    call = [None]  # the key of the env call under way
    with StopSignals(lambda: call[0], patience_s=0.3) as stop:
        # Call 1 ends in time; calls 2 and 3, begun after the signal, each take 0.2 s: none
        # is ended, whatever the time since the signal.
        call[0] = 1
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.received == signal.SIGTERM
        for number in (2, 3):
            call[0] = number
            time.sleep(0.2)
        call[0] = None
        time.sleep(0.5)  # in no call
        # Call 4, begun later still, never ends: it is ended at the end of its patience.
        call[0] = 4
        began = time.monotonic()
        with pytest.raises(InterruptedInEnvCall) as error:
            time.sleep(10)
        assert 0.3 <= time.monotonic() - began < 5
        assert error.value.signum == signal.SIGTERM == stop.received
        call[0] = None
    with StopSignals(lambda: call[0], patience_s=0.3) as stop:
        # Call 5 never ends: the signal is sent again at the end of its patience, and ends it.
        call[0] = 5
        began = time.monotonic()
        with pytest.raises(InterruptedInEnvCall) as error:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)
        assert 0.3 <= time.monotonic() - began < 5
        assert error.value.signum == signal.SIGINT == stop.received
    with StopSignals(lambda: call[0], patience_s=0.3) as stop:
        # A second signal ends the call at once, as Ctrl-C pressed twice.
        call[0] = 6
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(InterruptedInEnvCall) as error:
            os.kill(os.getpid(), signal.SIGTERM)
        assert error.value.signum == signal.SIGTERM == stop.received
        # Left before the patience of call 6 is over: nothing is sent once the block is left.
    time.sleep(0.6)
    assert received == []
    assert all(signal.getsignal(s) is handler for s in STOP_SIGNALS)


def test_the_same_signal_again_soon_after_the_first_is_the_same_stop_not_a_second(
    signals_to_a_list,
):
    # A batch system's SIGTERM reaches each process of a job, grid_search and its runs, and
    # grid_search passes its own on: the run gets it twice, within milliseconds.
    handler, received = signals_to_a_list
    call = [None]
    with StopSignals(lambda: call[0]) as stop:
        call[0] = 1
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # no InterruptedInEnvCall
        time.sleep(0.1)
        assert stop.received == signal.SIGTERM
        # Another signal is a second one, as is the same signal once the window is over.
        with pytest.raises(InterruptedInEnvCall):
            os.kill(os.getpid(), signal.SIGINT)
    with StopSignals(lambda: call[0]) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(SAME_STOP_WITHIN_S + 0.1)
        with pytest.raises(InterruptedInEnvCall):
            os.kill(os.getpid(), signal.SIGTERM)
        call[0] = None
    assert received == []


class _LockASignalReaches:
    """A lock that SIGTERM reaches just after it is taken, while armed: as one that comes
    as the block is left (at the run's end). It fails where it would wait for good."""

    def __init__(self):
        self._lock = threading.Lock()
        self.armed = False

    def __enter__(self):
        assert self._lock.acquire(timeout=5), 'the handler waits for a lock its thread holds'
        if self.armed:
            self.armed = False
            os.kill(os.getpid(), signal.SIGTERM)

    def __exit__(self, *exc_info):
        self._lock.release()


def test_a_signal_as_stop_signals_are_left_is_recorded_and_leaves(signals_to_a_list):
    handler, received = signals_to_a_list
    stop = StopSignals(lambda: None, patience_s=0.3)
    with stop:
        stop._lock = lock = _LockASignalReaches()
        lock.armed = True
    assert not lock.armed and stop.received == signal.SIGTERM
    assert received == []
    assert all(signal.getsignal(s) is handler for s in STOP_SIGNALS)


def test_stop_signals_reach_a_trainer_started_with_them_blocked(signals_to_a_list):
    # As in a process started from a thread that blocks them (a Ray worker's).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        with StopSignals(lambda: None) as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.received == signal.SIGTERM
        assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        # Outside the loop too: one that came while blocked is raised on entry. (Sent to
        # this thread: another thread of the process would take one sent to the process.)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        with pytest.raises(InterruptedOutsideTraining):
            with RaisingSignals(InterruptedOutsideTraining):
                time.sleep(0.5)
        assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert signal.getsignal(signal.SIGTERM) is signals_to_a_list[0]
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _signal_myself_then_exit_7(signum):
    os.kill(os.getpid(), signum)
    time.sleep(0.5)  # time for a Python handler to run
    os._exit(7)


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_while_env_processes_start_the_trainer_acts_on_a_signal_and_a_forked_process_does_not(
    signals_to_a_list, signum
):
    handler, received = signals_to_a_list
    # Raising, as the handlers train installs do: a forked process that ran it would exit 1.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    raising = contextlib.nullcontext()
    if signum == signal.SIGINT:
        raising = pytest.raises(KeyboardInterrupt)
    with raising, env_processes_starting():
        process = multiprocessing.get_context('fork').Process(
            target=_signal_myself_then_exit_7, args=(signum,)
        )
        process.start()
        process.join(30)
        os.kill(os.getpid(), signum)
        time.sleep(0.5)
        assert signum == signal.SIGTERM, 'SIGINT did not raise KeyboardInterrupt at once'
        assert received == [signum]
    # Ctrl-C reaches the env processes too, a batch system's SIGTERM as well: only the
    # trainer acts on them.
    assert process.exitcode == 7
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is handler


_SIGTERM_WHILE_ENV_PROCESSES_START = """
import os, signal, time
from alf_lite.signals import env_processes_starting
signal.signal(signal.SIGTERM, signal.SIG_DFL)
with env_processes_starting():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
print('went on')
"""


def test_while_env_processes_start_a_signal_of_default_action_still_ends_the_trainer():
    # As for a Trainer built in a program that installed no handler of its own.
    result = run_python(_SIGTERM_WHILE_ENV_PROCESSES_START)
    assert result.returncode == -signal.SIGTERM, result.stderr[-3000:]
    assert 'went on' not in result.stdout


_SIGHUP_IN_AN_ENV_PROCESS = """
import os, signal, time
from alf_lite.signals import set_env_process_signals
set_env_process_signals()
os.kill(os.getpid(), signal.SIGHUP)
time.sleep(0.5)
print('went on')
"""


def test_an_env_process_leaves_a_closed_terminals_sighup_to_the_trainer():
    # It reaches the whole process group; an env process started by spawn or forkserver
    # inherits no handler: its env state must outlive it, for the trainer's checkpoint.
    result = run_python(_SIGHUP_IN_AN_ENV_PROCESS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == 'went on\n'


def test_env_processes_start_in_another_thread_than_the_main_one_with_its_handlers(
    signals_to_a_list,
):
    # Only the main thread may install handlers (a Trainer run in a thread of its own).
    handler, _ = signals_to_a_list
    errors = []

    def start():
        try:
            with env_processes_starting():
                pass
        except Exception as e:  # noqa: BLE001  (reported by the assert below)
            errors.append(e)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert errors == []
    assert all(signal.getsignal(s) is handler for s in STOP_SIGNALS)


def test_outside_the_training_loop_a_signal_raises_and_the_handlers_are_restored_after(
    signals_to_a_list,
):
    handler, received = signals_to_a_list
    with RaisingSignals(InterruptedOutsideTraining):
        for signum in STOP_SIGNALS:
            with pytest.raises(InterruptedOutsideTraining) as raised:
                os.kill(os.getpid(), signum)
                time.sleep(0.5)
            assert raised.value.signum == signum
            assert signal.Signals(signum).name in str(raised.value)
    assert received == []
    assert all(signal.getsignal(s) is handler for s in STOP_SIGNALS)


# An error: the dropped exception is not printed either, it is acted on.
@pytest.mark.filterwarnings('error::pytest.PytestUnraisableExceptionWarning')
def test_a_signal_whose_exception_was_dropped_is_raised_at_the_next_check(signals_to_a_list):
    with RaisingSignals(InterruptedOutsideTraining) as signals:
        SignalledWhileDeleted()
        with pytest.raises(InterruptedOutsideTraining):
            signals.raise_if_received()
    # A second signal in an env call, whose exception is dropped: the training loop's flag
    # still stops the run after the iteration.
    with StopSignals(lambda: 1) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        SignalledWhileDeleted()
        assert stop.received == signal.SIGINT
    # While env processes start, the check is at the end of the block.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt):
        with env_processes_starting():
            SignalledWhileDeleted()
        pytest.fail('the dropped KeyboardInterrupt was not raised again')


def test_a_train_whose_starter_is_gone_stops_without_writing(tmp_path):
    # Started by a process that ended before train watched it: pid 1 is not its parent.
    root_dir = tmp_path / 'run'
    result = subprocess.run(
        train_command(root_dir, [PENDULUM], TINY),
        cwd=REPO_ROOT,
        env=dict(train_env(), **{PARENT_PID_VARIABLE: '1'}),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert 'the process that started this train (pid 1) ended' in result.stderr
    assert 'error: SIGTERM arrived outside the training loop' in result.stderr
    assert not root_dir.exists()


def test_same_seed_same_progress_csv_in_two_processes_with_other_hash_seeds(
    tmp_path, read_progress
):
    # Each interpreter orders sets of strings by its own hash seed: nothing the
    # numbers depend on may iterate over one.
    from alf_lite.runs import NONDETERMINISTIC_COLUMNS

    params = TINY + [
        'TrainerConfig.num_env_steps=300',
        'TrainerConfig.summary_interval=100',
        'TrainerConfig.eval_interval=300',
        'TrainerConfig.num_eval_episodes=1',
        'create_environment.num_parallel_environments=2',
    ]
    rows = []
    for hash_seed in ('1', '2'):
        root_dir = tmp_path / f'hash_seed_{hash_seed}'
        result = subprocess.run(
            train_command(root_dir, [PENDULUM], params),
            cwd=REPO_ROOT,
            env=dict(train_env(), PYTHONHASHSEED=hash_seed),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        assert_ok(result)
        _, progress = read_progress(root_dir / 'progress.csv')
        rows.append(
            [{k: v for k, v in r.items() if k not in NONDETERMINISTIC_COLUMNS} for r in progress]
        )
    assert len(rows[0]) == 4 and rows[0][-1]['eval/AverageReturn'] != ''
    assert rows[0] == rows[1]
