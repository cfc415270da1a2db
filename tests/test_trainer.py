"""The trainer end to end, in process: learning, reproducibility, resume."""

import csv
import functools
import gc
import logging
import os
import random
import re
import shutil
import signal
import threading
import time
import types
import weakref

import gin
import gymnasium
import numpy as np
import psutil
import pytest
import torch
from gymnasium import spaces

import alf_lite.all_configurables  # noqa: F401
import huge_reward_env  # noqa: F401  (registers alf_test/HugeReward-v0)
from alf_lite import checkpoint as ckpt
from alf_lite.algorithms import SacAlgorithm
from alf_lite.algorithms.off_policy_algorithm import loss_mask
from alf_lite.config import parse_config
from alf_lite.data import Experience, StepType
from alf_lite.device import DeviceUnavailableError
from alf_lite.run_dir import RunDirInUseError, latest_checkpoint
from alf_lite.runs import NONDETERMINISTIC_COLUMNS
from alf_lite.signals import InterruptedInEnvCall, TrainingInterrupted
from alf_lite.trainer import Trainer, TrainerConfig, TrainerInUseError, TrainingError
from alf_lite.update import check_compiles
from cli_helpers import (
    RUN_TIMEOUT_S,
    checkpoint_steps,
    copy_run,
    fails_after,
    python_output,
    sigterm_as_the_training_envs_give_episodes,
    tree_digest,
)
from test_non_finite_guard import _tensors

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'examples')

POINT_PARAMS = [
    "create_environment.env_name = 'alf_lite/PointTarget-v0'",
    'TanhNormalActorNetwork.hidden_layers = (64, 64)',
    'CriticNetwork.hidden_layers = (64, 64)',
    'actor/Adam.lr = 1e-3',
    'critic/Adam.lr = 1e-3',
    'alpha/Adam.lr = 1e-3',
    'TrainerConfig.mini_batch_size = 64',
    'TrainerConfig.initial_collect_steps = 200',
    'TrainerConfig.summary_interval = 250',
    'TrainerConfig.eval_interval = 500',
    'TrainerConfig.checkpoint_interval = 1000',
    'TrainerConfig.num_eval_episodes = 10',
]


def train(root_dir, *params):
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS + list(params))
    with Trainer(TrainerConfig(), str(root_dir)) as trainer:
        return trainer.train()


def record_each_call(monkeypatch, algorithm, method, record):
    """Calls ``record`` with the arguments of each call of ``algorithm.<method>`` first."""
    wrapped = getattr(algorithm, method)

    def recorded(*args):
        record(*args)
        return wrapped(*args)

    monkeypatch.setattr(algorithm, method, recorded)


def read_csv(path, drop=NONDETERMINISTIC_COLUMNS):
    with open(path, newline='') as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def test_sac_solves_point_task(tmp_path):
    # Random actions score about -11 over the 20 steps, the optimal controller
    # about -0.6. A sign error in the actor or alpha loss stays below -5 here.
    result = train(tmp_path, 'TrainerConfig.num_env_steps = 2000')
    assert result['eval/AverageReturn'] > -2.0


def test_same_seed_same_progress_csv_in_one_process(tmp_path):
    params = [
        'TrainerConfig.num_env_steps = 600',
        'TrainerConfig.random_seed = 7',
        'create_environment.num_parallel_environments = 2',
        'create_environment.use_subprocesses = True',
    ]
    train(tmp_path / 'a', *params)
    train(tmp_path / 'b', *params)
    rows_a = read_csv(tmp_path / 'a' / 'progress.csv')
    rows_b = read_csv(tmp_path / 'b' / 'progress.csv')
    assert len(rows_a) >= 4 and rows_a == rows_b
    assert rows_a[-1]['train/critic_loss'] != ''


def build(root_dir, *params):
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS + list(params))
    return Trainer(TrainerConfig(), str(root_dir))


def trained_once(tmp_path_factory, num_env_steps):
    """A run of POINT_PARAMS to ``num_env_steps``, for the tests of a module to read or copy
    (``copy_run``): none of them writes into it."""
    root_dir = tmp_path_factory.mktemp(f'point_{num_env_steps}') / 'run'
    train(root_dir, f'TrainerConfig.num_env_steps = {num_env_steps}')
    return root_dir


@pytest.fixture(scope='module')
def point_run_to_310(tmp_path_factory):
    return trained_once(tmp_path_factory, 310)


@pytest.fixture(scope='module')
def point_run_to_400(tmp_path_factory):
    return trained_once(tmp_path_factory, 400)


def test_what_the_process_draws_between_building_and_training_changes_no_number(tmp_path):
    params = ['TrainerConfig.num_env_steps = 600', 'TrainerConfig.random_seed = 7']
    train(tmp_path / 'reference', *params)
    with build(tmp_path / 'a', *params) as a:
        # Another trainer built, with another seed and thread count, and
        # global generators drawn from, before the first one trains.
        with build(tmp_path / 'b', *params[:1], 'TrainerConfig.torch_num_threads = 2') as b:
            random.random(), np.random.rand(), torch.rand(1)
            torch.set_num_threads(3)
            threads = []
            a.train(stop_when=lambda scalars: threads.append(torch.get_num_threads()))
            assert threads and set(threads) == {1}
            b.train()
    reference = read_csv(tmp_path / 'reference' / 'progress.csv')
    assert read_csv(tmp_path / 'a' / 'progress.csv') == reference
    assert read_csv(tmp_path / 'b' / 'progress.csv') != reference
    # Each one's operative config is its own, not that of the config parsed last.
    operative = (tmp_path / 'a' / 'operative_config.gin').read_text()
    assert operative == (tmp_path / 'reference' / 'operative_config.gin').read_text()
    assert (
        'TrainerConfig.torch_num_threads = 2'
        in (tmp_path / 'b' / 'operative_config.gin').read_text()
    )


def test_the_operative_config_records_trainer_config_keyword_arguments(tmp_path):
    # gin sees no keyword argument of TrainerConfig(...), which wins over its binding: an
    # API run's seed and length were in none of its files.
    params = ['TrainerConfig.num_env_steps = 600', 'TrainerConfig.random_seed = 7']
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS + params)
    config = TrainerConfig(num_env_steps=300, random_seed=5, device='cpu')
    with Trainer(config, str(tmp_path / 'run')) as trainer:
        trainer.train()
    operative = (tmp_path / 'run' / 'operative_config.gin').read_text()
    for binding in (
        'TrainerConfig.num_env_steps = 300',
        'TrainerConfig.random_seed = 5',
        "TrainerConfig.device = 'cpu'",
    ):
        assert operative.count(binding) == 1, binding
    assert 'TrainerConfig.num_env_steps = 600' not in operative
    # Parsed back, the file gives the run's settings.
    parse_config([str(tmp_path / 'run' / 'operative_config.gin')], [])
    again = TrainerConfig()
    assert {name: getattr(again, name) for name in vars(config)} == vars(config)


def test_the_operative_config_records_the_keyword_arguments_of_this_trainers_config_alone(
    tmp_path,
):
    # gin's operative config holds the values of every TrainerConfig() the process made
    # since the last parse: another's seed and length stood in for this one's.
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS)
    TrainerConfig(num_env_steps=900)
    TrainerConfig()
    config = TrainerConfig(num_env_steps=300, random_seed=5)
    with Trainer(config, str(tmp_path / 'run')) as trainer:
        trainer.train()
    parse_config([str(tmp_path / 'run' / 'operative_config.gin')], [])
    again = TrainerConfig()
    assert {name: getattr(again, name) for name in vars(config)} == vars(config)


def test_a_binding_a_keyword_argument_of_trainer_config_overrides_is_said_so_not_unused(
    tmp_path, caplog
):
    parse_config(
        [os.path.join(EXAMPLES, 'common', 'sac.gin')],
        POINT_PARAMS + ['TrainerConfig.num_env_steps = 5000', 'TrainerConfig.random_seed = 3'],
    )
    with caplog.at_level('INFO'):
        Trainer(TrainerConfig(num_env_steps=300), str(tmp_path / 'run')).close()
    assert 'used by nothing' not in caplog.text, caplog.text
    assert (
        'keyword arguments of TrainerConfig(...) win over these bindings: '
        'TrainerConfig.num_env_steps = 5000 -> 300\n'
    ) in caplog.text


def test_more_torch_threads_than_the_one_usable_core_are_warned_about_in_the_singular(
    tmp_path, caplog, monkeypatch
):
    # taskset -c 0: one core.
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0})
    with caplog.at_level('WARNING'):
        build(tmp_path / 'run', 'TrainerConfig.torch_num_threads = 2').close()
    assert (
        'TrainerConfig.torch_num_threads = 2 is more than the 1 core this process may use'
    ) in caplog.text, caplog.text


def test_a_run_given_keyword_arguments_of_trainer_config_resumes_with_them(tmp_path):
    # They are in no config gin gives (config.gin, a checkpoint's config): no resume of the
    # same script is taken for another experiment.
    root_dir = tmp_path / 'run'

    def train_to(num_env_steps):
        params = ['TrainerConfig.mini_batch_size = 64']
        parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS + params)
        config = TrainerConfig(num_env_steps=num_env_steps, mini_batch_size=32)
        with Trainer(config, str(root_dir)) as trainer:
            trainer.train(
                before_writing=lambda: (root_dir / 'config.gin').write_text(gin.config_str())
            )

    train_to(300)
    train_to(600)
    assert checkpoint_steps(root_dir) == [300, 600]
    operative = (root_dir / 'operative_config.gin').read_text()
    assert operative.endswith('TrainerConfig.mini_batch_size = 32\n')


def test_a_trainer_config_argument_bound_through_a_macro_is_no_keyword_argument():
    from alf_lite.trainer import _unseen_trainer_config

    params = ['BS = 32', 'TrainerConfig.mini_batch_size = %BS', 'TrainerConfig.random_seed = 3']
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS + params)
    assert _unseen_trainer_config(TrainerConfig(), gin.operative_config_str()) == ''
    assert _unseen_trainer_config(TrainerConfig(random_seed=4), gin.operative_config_str()) == (
        '\n# Passed to TrainerConfig(...), over any binding of theirs:\n'
        'TrainerConfig.random_seed = 4\n'
    )


def test_a_resume_without_the_keyword_arguments_the_run_was_given_warns_of_them(tmp_path, caplog):
    # config.gin holds the bindings alone: a resume from it (train --root_dir) goes on
    # with their values, which operative_config.gin shows the run was not trained with.
    root_dir = tmp_path / 'run'
    parse_config(
        [os.path.join(EXAMPLES, 'common', 'sac.gin')],
        POINT_PARAMS + ['TrainerConfig.mini_batch_size = 64'],
    )
    with Trainer(TrainerConfig(num_env_steps=300, mini_batch_size=32), str(root_dir)) as t:
        t.train()
    with caplog.at_level('WARNING'):
        with Trainer(TrainerConfig(num_env_steps=600, mini_batch_size=32), str(root_dir)) as t:
            t.train()
    assert 'keyword arguments' not in caplog.text, caplog.text
    with caplog.at_level('WARNING'):
        with Trainer(TrainerConfig(num_env_steps=900), str(root_dir)) as t:
            t.train()
    assert (
        f'{root_dir / "operative_config.gin"} says the run was given keyword arguments of '
        'TrainerConfig(...) that this Trainer does not take: it goes on with '
        'TrainerConfig.mini_batch_size = 32 -> TrainerConfig.mini_batch_size = 64'
    ) in caplog.text, caplog.text
    assert checkpoint_steps(root_dir) == [300, 600, 900]


def test_a_resume_under_another_experiment_than_the_runs_config_gin_is_refused(tmp_path):
    # Each checkpoint keeps root_dir's config.gin as the config it was trained with: a
    # trainer built from another would have them name a config it did not train with.
    root_dir = tmp_path / 'run'

    def write_config():
        (root_dir / 'config.gin').write_text(gin.config_str())

    with build(root_dir, 'TrainerConfig.num_env_steps = 300') as trainer:
        trainer.train(before_writing=write_config)
    assert checkpoint_steps(root_dir) == [300]
    before = tree_digest(root_dir)
    changed = ['TrainerConfig.num_env_steps = 600', 'critic/Adam.lr = 0.05']
    with build(root_dir, *changed) as trainer:
        with pytest.raises(TrainingError) as refused:
            trainer.train()
        assert trainer.env_steps == 300
    assert str(refused.value).startswith(
        f'{root_dir / "config.gin"} is not the config this Trainer was built with: it '
        "differs in 1 binding(s), e.g. ['critic/Adam.lr = 0.001 -> critic/Adam.lr = 0.05']"
    )
    assert tree_digest(root_dir) == before
    # Nor where before_writing writes those bindings into config.gin (as train does, but
    # without keeping the config trained with so far): the checkpoint was trained with
    # another experiment. config.gin is put back as it was.
    with build(root_dir, *changed) as trainer:
        with pytest.raises(TrainingError) as refused:
            trainer.train(before_writing=write_config)
    assert str(refused.value).startswith(
        f'{root_dir / "checkpoints" / "ckpt-300"} was trained with another experiment than '
        "this Trainer was built with: it differs in 1 binding(s), e.g. ['critic/Adam.lr = "
        "0.001 -> critic/Adam.lr = 0.05']"
    )
    assert tree_digest(root_dir) == before
    # What a resume may change (the run length) is no other experiment.
    with build(root_dir, 'TrainerConfig.num_env_steps = 600') as trainer:
        trainer.train()
    assert checkpoint_steps(root_dir) == [300, 600]
    # A start afresh (no checkpoint: a run stopped before its first) goes on with the
    # config it was built from, which its checkpoints keep.
    fresh = tmp_path / 'fresh'
    fresh.mkdir()
    shutil.copy(root_dir / 'config.gin', fresh / 'config.gin')
    with build(fresh, 'TrainerConfig.num_env_steps = 300', 'critic/Adam.lr = 0.05') as trainer:
        trainer.train()
    path = str(fresh / 'checkpoints' / 'ckpt-300')
    kept = ckpt.trainer_state(ckpt.load_state(path), path).config_text
    # config.gin with it, which the next resume checks the checkpoint against.
    assert 'critic/Adam.lr = 0.05' in kept and kept == (fresh / 'config.gin').read_text()
    with build(fresh, 'TrainerConfig.num_env_steps = 600', 'critic/Adam.lr = 0.05') as trainer:
        trainer.train()
    assert checkpoint_steps(fresh) == [300, 600]


def test_a_trainer_of_another_thread_is_refused_while_one_builds_or_trains(tmp_path):
    # Trainers share the process's global random generators and torch's settings: two
    # training at once in threads gave other numbers than each alone, without a word.
    params = ['TrainerConfig.num_env_steps = 600', 'TrainerConfig.random_seed = 7']
    train(tmp_path / 'reference', *params)
    built = build(tmp_path / 'built', *params)
    inside, release = threading.Event(), threading.Event()

    def wait_inside(scalars):
        if not inside.is_set():
            # The thread that trains may build and train another trainer meanwhile.
            with build(tmp_path / 'nested', *params) as nested:
                nested.train()
        inside.set()
        assert release.wait(RUN_TIMEOUT_S)

    def train_first():
        with build(tmp_path / 'first', *params) as first:
            first.train(stop_when=wait_inside)

    thread = threading.Thread(target=train_first, name='first-run')
    thread.start()
    try:
        assert inside.wait(RUN_TIMEOUT_S)
        refused = r"another thread of this process \('first-run'\) is building or training a "
        with pytest.raises(TrainerInUseError, match=refused):
            Trainer(TrainerConfig(), str(tmp_path / 'second'))
        with pytest.raises(TrainerInUseError, match=refused):
            built.train()
    finally:
        release.set()
        thread.join(RUN_TIMEOUT_S)
    # Nothing was written, and each trains as alone once the other is done.
    assert not (tmp_path / 'second').exists() and not (tmp_path / 'built').exists()
    with built:
        built.train()
    reference = read_csv(tmp_path / 'reference' / 'progress.csv')
    assert read_csv(tmp_path / 'built' / 'progress.csv') == reference
    assert read_csv(tmp_path / 'nested' / 'progress.csv') == reference


def draw_from_every_global_generator(*args) -> None:
    random.random(), np.random.rand(), torch.rand(1)


@pytest.mark.parametrize('callback', ['stop_when', 'before_writing'])
def test_what_a_callback_draws_changes_no_number(point_run_to_400, tmp_path, callback):
    # A callback that samples the stochastic policy, say, or trains another run.
    calls = []

    def drawing(*args):
        calls.append(args)
        draw_from_every_global_generator()

    with build(tmp_path, 'TrainerConfig.num_env_steps = 400') as trainer:
        trainer.train(**{callback: drawing})
    # stop_when at the evaluations of env steps 0 and 400, before_writing once.
    assert len(calls) == (2 if callback == 'stop_when' else 1)
    assert read_csv(tmp_path / 'progress.csv') == read_csv(point_run_to_400 / 'progress.csv')


def test_updates_overlapping_subprocess_steps_give_the_in_process_numbers(tmp_path):
    # With subprocesses the updates run while the env step is pending; the
    # results must be those of the in-process step-then-train order.
    params = [
        'TrainerConfig.num_env_steps = 600',
        'TrainerConfig.random_seed = 3',
        'create_environment.num_parallel_environments = 2',
        'TrainerConfig.unroll_length = 2',
    ]
    train(tmp_path / 'async', *params, 'create_environment.use_subprocesses = True')
    train(tmp_path / 'sync', *params, 'create_environment.use_subprocesses = False')
    rows_async = read_csv(tmp_path / 'async' / 'progress.csv')
    rows_sync = read_csv(tmp_path / 'sync' / 'progress.csv')
    assert len(rows_sync) >= 4 and rows_async == rows_sync
    assert float(rows_sync[-1]['num_updates']) > 0


@pytest.fixture
def torch_globals():
    """torch's thread count and deterministic mode as the test found them, once it ends."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def test_a_trainer_leaves_torchs_threads_and_deterministic_mode_as_it_found_them(
    tmp_path, torch_globals
):
    params = ['TrainerConfig.num_env_steps = 300', 'TrainerConfig.torch_num_threads = 2']
    torch.set_num_threads(3)
    torch.use_deterministic_algorithms(False)
    during = []

    def record(scalars):
        during.append((torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()))

    def fail(scalars):
        raise RuntimeError('a callback of the user')

    with build(tmp_path / 'a', *params) as trainer:
        assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (3, False)
        trainer.train(stop_when=record)
        assert during and set(during) == {(2, True)}
        assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (3, False)
    with build(tmp_path / 'b', *params) as trainer:
        with pytest.raises(RuntimeError, match='a callback of the user'):
            trainer.train(stop_when=fail)
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (3, False)
    # A trainer whose construction fails after it seeded.
    with pytest.raises(Exception, match='NoSuchEnv'):
        build(tmp_path / 'c', *params, "create_environment.env_name = 'NoSuchEnv-v0'")
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (3, False)
    # The reproducibility holds as the trainer sets them itself.
    train(tmp_path / 'd', *params)
    assert read_csv(tmp_path / 'a' / 'progress.csv') == read_csv(tmp_path / 'd' / 'progress.csv')


def test_arguments_of_the_wrong_kind_are_named_before_anything_is_written(tmp_path):
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS)
    with pytest.raises(TypeError, match=r'config must be a TrainerConfig, got \{\}'):
        Trainer({}, str(tmp_path / 'run'))
    with pytest.raises(TypeError, match='root_dir must be a path .*, got None'):
        Trainer(TrainerConfig(), None)
    # Not the working directory, where train() would have written.
    for empty in ('', ' '):
        with pytest.raises(ValueError, match=rf'^Trainer: root_dir is empty \({empty!r}\): give'):
            Trainer(TrainerConfig(), empty)
    with build(tmp_path / 'run', 'TrainerConfig.num_env_steps = 300') as trainer:
        for name in ('stop_when', 'before_writing'):
            with pytest.raises(TypeError, match=f'{name} must be a function or None, got 5'):
                trainer.train(**{name: 5})
            assert not (tmp_path / 'run').exists()


def test_a_trainer_for_a_new_run_inside_another_run_is_refused_before_anything_is_written(
    tmp_path,
):
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS)
    outer = tmp_path / 'outer'
    (outer / 'eval').mkdir(parents=True)
    (outer / 'eval' / 'events.out.tfevents.1700000000.host.1.0').write_bytes(b'')
    for inner in (outer / 'sub', outer / 'eval' / 'sub'):
        with pytest.raises(ValueError, match=rf'^Trainer: root_dir {inner} is inside the run '):
            Trainer(TrainerConfig(), inner)
        assert not inner.exists()
    # One a trainer wrote in already (before this was refused) is built, to resume.
    (outer / 'old' / 'checkpoints' / 'ckpt-100').mkdir(parents=True)
    with build(outer / 'old', 'TrainerConfig.num_env_steps = 300'):
        pass


def test_different_seed_different_progress_csv(tmp_path):
    train(tmp_path / 'a', 'TrainerConfig.num_env_steps = 400', 'TrainerConfig.random_seed = 1')
    train(tmp_path / 'b', 'TrainerConfig.num_env_steps = 400', 'TrainerConfig.random_seed = 2')
    assert read_csv(tmp_path / 'a' / 'progress.csv') != read_csv(tmp_path / 'b' / 'progress.csv')
    # The seed seeds torch as well as the envs: the uniform random actions of the
    # first 200 env steps, drawn from torch's generator, differ too.
    actions = [
        ckpt.load_checkpoint(latest_checkpoint(str(tmp_path / run / 'checkpoints')))[1]['action'][0]
        for run in ('a', 'b')
    ]
    assert not torch.equal(actions[0][:200], actions[1][:200])


def drop_collection(root_dir) -> None:
    """Make the latest checkpoint one whose envs could not be kept (as when a signal ended
    an env step, or as alf_lite's older checkpoints are): a resume restarts the envs."""
    path = os.path.join(latest_checkpoint(str(root_dir / 'checkpoints')), ckpt.MODEL_FILE)
    state = torch.load(path, weights_only=True)
    assert state['collection'] is not None
    state['collection'] = None
    torch.save(state, path)


def final_weights(root_dir) -> dict:
    state, _ = ckpt.load_checkpoint(latest_checkpoint(str(root_dir / 'checkpoints')))
    return ckpt.policy_state(state['algorithm'])


# Runs cut where a training episode is under way, at its last step (the next
# step resets), mid-way through an episode after a truncation (with OU noise),
# and in a MuJoCo episode after terminations.
STOPPED_RUNS = {
    'sac-point-2-envs-subprocesses-unroll-2-mid-episode': (
        'sac.gin',
        POINT_PARAMS
        + [
            'create_environment.num_parallel_environments = 2',
            'create_environment.use_subprocesses = True',
            'TrainerConfig.unroll_length = 2',
            'TrainerConfig.num_updates_per_train_iter = 2',
        ],
        720,
        1000,
    ),
    'sac-point-at-a-last-step': ('sac.gin', POINT_PARAMS, 419, 700),
    'ddpg-ou-pendulum-after-a-truncation': (
        'ddpg.gin',
        [
            'DeterministicActorNetwork.hidden_layers = (32, 32)',
            'CriticNetwork.hidden_layers = (32, 32)',
            'TrainerConfig.initial_collect_steps = 100',
            'TrainerConfig.mini_batch_size = 32',
            'TrainerConfig.summary_interval = 100',
            'TrainerConfig.eval_interval = 300',
            'TrainerConfig.num_eval_episodes = 2',
        ],
        250,
        500,
    ),
    'td3-hopper-after-terminations': (
        'td3.gin',
        [
            "create_environment.env_name = 'Hopper-v5'",
            'DeterministicActorNetwork.hidden_layers = (32, 32)',
            'CriticNetwork.hidden_layers = (32, 32)',
            'TrainerConfig.initial_collect_steps = 100',
            'TrainerConfig.mini_batch_size = 32',
            'TrainerConfig.summary_interval = 100',
            'TrainerConfig.eval_interval = 200',
            'TrainerConfig.num_eval_episodes = 2',
        ],
        # After an odd number of updates (151): the delayed actor and target updates
        # go on in step only if the resume restores the train step count.
        251,
        500,
    ),
}


def train_stopped_run(run, root_dir, num_env_steps):
    """Train the STOPPED_RUNS entry ``run`` in ``root_dir`` (resuming it) to ``num_env_steps``."""
    gin_file, params, _, _ = STOPPED_RUNS[run]
    parse_config(
        [os.path.join(EXAMPLES, 'common', gin_file)],
        params
        + [
            'TrainerConfig.checkpoint_interval = 10000',
            f'TrainerConfig.num_env_steps = {num_env_steps}',
        ],
    )
    with Trainer(TrainerConfig(), str(root_dir)) as trainer:
        trainer.train()


def assert_same_rows_as_never_stopped(tmp_path, stop):
    """tmp_path/stopped's progress.csv is tmp_path/never_stopped's, but for the row of its
    first end at ``stop`` env steps."""
    expected = read_csv(tmp_path / 'never_stopped' / 'progress.csv')
    rows = read_csv(tmp_path / 'stopped' / 'progress.csv')
    rows = [r for r in rows if r['env_steps'] != str(stop)]
    assert len(expected) >= 4 and rows == expected


@pytest.mark.parametrize('run', list(STOPPED_RUNS))
def test_a_stopped_and_resumed_run_gives_the_numbers_of_a_run_never_stopped(tmp_path, run):
    _, _, stop, end = STOPPED_RUNS[run]
    train_stopped_run(run, tmp_path / 'never_stopped', end)
    train_stopped_run(run, tmp_path / 'stopped', stop)
    train_stopped_run(run, tmp_path / 'stopped', end)
    if run == 'sac-point-at-a-last-step':
        stopped_at = os.path.join(str(tmp_path / 'stopped' / 'checkpoints'), f'ckpt-{stop}')
        collection = ckpt.load_checkpoint(stopped_at)[0]['collection']
        assert collection['time_step']['step_type'].tolist() == [StepType.LAST]
    assert_same_rows_as_never_stopped(tmp_path, stop)
    weights, expected_weights = (
        final_weights(tmp_path / 'stopped'),
        final_weights(tmp_path / 'never_stopped'),
    )
    tensors = [k for k, v in expected_weights.items() if torch.is_tensor(v)]
    assert len(tensors) > 10
    assert all(torch.equal(weights[k], expected_weights[k]) for k in tensors)


# What model.pt held on 2026-12-01 (0ade99e): none of the fields added to TrainerState since.
OLDEST_TRAINER_STATE_KEYS = (
    'algorithm',
    'collection',
    'env_steps',
    'last_eval',
    'num_updates',
    'pending_evaluation',
    'recent_lengths',
    'recent_returns',
    'rng',
)


def test_a_checkpoint_of_an_older_alf_lite_resumes_to_the_numbers_of_a_run_never_stopped(
    tmp_path,
):
    # DDPG with OU noise, stopped mid-episode: the noise's state, the episode, the optimizers,
    # the replay buffer and the counters all come from the older file.
    run = 'ddpg-ou-pendulum-after-a-truncation'
    _, _, stop, end = STOPPED_RUNS[run]
    train_stopped_run(run, tmp_path / 'never_stopped', end)
    train_stopped_run(run, tmp_path / 'stopped', stop)
    path = os.path.join(latest_checkpoint(str(tmp_path / 'stopped' / 'checkpoints')), 'model.pt')
    state = torch.load(path, weights_only=True)
    assert set(OLDEST_TRAINER_STATE_KEYS) < set(state)
    assert state['collection'] is not None
    torch.save({key: state[key] for key in OLDEST_TRAINER_STATE_KEYS}, path)
    train_stopped_run(run, tmp_path / 'stopped', end)
    assert_same_rows_as_never_stopped(tmp_path, stop)
    resumed, _ = ckpt.load_checkpoint(latest_checkpoint(str(tmp_path / 'stopped' / 'checkpoints')))
    never_stopped, _ = ckpt.load_checkpoint(
        latest_checkpoint(str(tmp_path / 'never_stopped' / 'checkpoints'))
    )
    assert (resumed['env_steps'], resumed['num_updates']) == (
        never_stopped['env_steps'],
        never_stopped['num_updates'],
    )
    weights, expected_weights = (
        ckpt.policy_state(resumed['algorithm']),
        ckpt.policy_state(never_stopped['algorithm']),
    )
    tensors = [k for k, v in expected_weights.items() if torch.is_tensor(v)]
    assert len(tensors) > 4
    assert all(torch.equal(weights[k], expected_weights[k]) for k in tensors)
    # The exploration noise went on from the saved state, not from a new one.
    assert torch.equal(
        resumed['collection']['rollout']['exploration_noise']['state'],
        never_stopped['collection']['rollout']['exploration_noise']['state'],
    )


def test_a_signal_during_the_resumes_replay_keeps_the_checkpoints_episodes(
    point_run_to_310, tmp_path, monkeypatch
):
    root_dir = copy_run(point_run_to_310, tmp_path)
    saved, _ = ckpt.load_checkpoint(latest_checkpoint(str(root_dir / 'checkpoints')))

    def interrupted(records):
        raise InterruptedInEnvCall(signal.SIGINT)

    with build(root_dir, 'TrainerConfig.num_env_steps = 400') as trainer:
        monkeypatch.setattr(trainer._env, 'replay', interrupted)
        with pytest.raises(TrainingInterrupted):
            trainer.train()
    # The final checkpoint replaced ckpt-310 and kept its episodes for the next resume.
    rewritten, _ = ckpt.load_checkpoint(latest_checkpoint(str(root_dir / 'checkpoints')))
    assert rewritten['env_steps'] == 310
    assert torch.equal(
        rewritten['collection']['episodes'][0]['actions'],
        saved['collection']['episodes'][0]['actions'],
    )


class UnreplayableEnv(gymnasium.Env):
    """Starts each episode where ``os.urandom`` says: no seed or action replays it.

    The observation is the point and where its episode started: actions that
    push the point to a bound in both runs would otherwise make a replay arrive
    at the saved observation after all. With ``random_reward``, the episode
    starts where its seed says and the rewards are what ``os.urandom`` says:
    only the reward differs when it is replayed.
    """

    observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self, random_reward=False):
        self._random_reward = random_reward

    def _observation(self):
        return np.array([self._x, self._start], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self._random_reward:
            self._x = float(self.np_random.uniform(-1.0, 1.0))
        else:
            self._x = _urandom_fraction() * 2 - 1
        self._start = self._x
        return self._observation(), {}

    def step(self, action):
        self._x = float(np.clip(self._x + 0.1 * float(action[0]), -1.0, 1.0))
        reward = -abs(self._x)
        if self._random_reward:
            reward = _urandom_fraction()
        return self._observation(), reward, False, False, {}


def _urandom_fraction() -> float:
    """A number in [0, 1] from ``os.urandom`` (4 bytes: rarely the same twice)."""
    return int.from_bytes(os.urandom(4), 'little') / (2**32 - 1)


# test_seeding imports this module again under another name.
if 'alf_test/Unreplayable-v0' not in gymnasium.registry:
    gymnasium.register(
        'alf_test/Unreplayable-v0', entry_point=UnreplayableEnv, max_episode_steps=20
    )
    gymnasium.register(
        'alf_test/UnreplayableReward-v0',
        entry_point=UnreplayableEnv,
        max_episode_steps=20,
        kwargs=dict(random_reward=True),
    )


@pytest.mark.parametrize(
    'env_id, field',
    [('alf_test/Unreplayable-v0', 'observation'), ('alf_test/UnreplayableReward-v0', 'reward')],
)
def test_envs_that_do_not_replay_to_their_saved_step_start_new_episodes(
    tmp_path, caplog, env_id, field
):
    params = [
        f"create_environment.env_name = '{env_id}'",
        'TrainerConfig.checkpoint_interval = 500',
    ]
    train(tmp_path, 'TrainerConfig.num_env_steps = 310', *params)
    # INFO too: should the warning be missing, the log shows which way the resume went.
    with caplog.at_level('INFO'):
        train(tmp_path, 'TrainerConfig.num_env_steps = 400', *params)
    assert re.search(
        rf"Environment '{env_id}' \(env 0 of 1\) replayed its episode to another "
        rf'{field}.*they start new ones',
        caplog.text,
    ), caplog.text
    _, stored = ckpt.load_checkpoint(latest_checkpoint(str(tmp_path / 'checkpoints')))
    # Row 309 is a MID (21-row episodes); the restarted env wrote row 310 as a FIRST.
    assert stored['step_type'][0][309].item() == StepType.MID
    assert stored['step_type'][0][310].item() == StepType.FIRST


def drop_episode_stats(collection):
    del collection['episode_stats']


def int_time_step(collection):
    collection['time_step'] = 3


def int_episode_stats(collection):
    collection['episode_stats']['episode_return'] = 1.5


def nan_episode_return(collection):
    collection['episode_stats']['episode_return'][0] = float('nan')


def meta_actions(collection):
    actions = collection['episodes'][0]['actions']
    collection['episodes'][0]['actions'] = torch.empty(actions.shape, device='meta')


def ou_state_of_another_shape(collection):
    collection['rollout']['exploration_noise']['state'] = torch.zeros(3, 2)


DAMAGES = {
    'no episode stats': (
        'sac.gin',
        drop_episode_stats,
        r"the collection state holds \['episodes', 'rollout', 'time_step'\], not",
    ),
    'time step an int': ('sac.gin', int_time_step, 'has as time_step the int 3, not a dict'),
    'episode return a float': (
        'sac.gin',
        int_episode_stats,
        'has as episode_stats the dict .*, not a dict of tensors',
    ),
    'episode return NaN': (
        'sac.gin',
        nan_episode_return,
        'the running episode of env 0 has the return nan',
    ),
    'actions on the meta device': ('sac.gin', meta_actions, 'env 0 of 1.*not floats of shape'),
    'OU state of another shape': (
        'ddpg.gin',
        ou_state_of_another_shape,
        r'OUNoise: the saved state is torch.float32 of shape torch.Size\(\[3, 2\]\), not a '
        r'float tensor of shape \(1, 1\)',
    ),
}


@pytest.mark.parametrize('damage', list(DAMAGES))
def test_a_damaged_collection_state_restarts_the_envs_with_a_warning(
    request, tmp_path, caplog, damage
):
    gin_file, damage_state, message = DAMAGES[damage]
    params = (
        POINT_PARAMS
        if gin_file == 'sac.gin'
        else STOPPED_RUNS['ddpg-ou-pendulum-after-a-truncation'][1]
    )
    root_dir = tmp_path / 'run'

    def run_to(num_env_steps):
        parse_config(
            [os.path.join(EXAMPLES, 'common', gin_file)],
            params + [f'TrainerConfig.num_env_steps = {num_env_steps}'],
        )
        with Trainer(TrainerConfig(), str(root_dir)) as trainer:
            trainer.train()

    if gin_file == 'sac.gin':  # the run train() makes: trained once for the module
        copy_run(request.getfixturevalue('point_run_to_310'), tmp_path)
    else:
        run_to(310)
    path = os.path.join(latest_checkpoint(str(root_dir / 'checkpoints')), ckpt.MODEL_FILE)
    state = torch.load(path, weights_only=True)
    damage_state(state['collection'])
    torch.save(state, path)
    with caplog.at_level('WARNING'):
        run_to(400)
    assert re.search(
        f'the training envs cannot continue their episodes \\(.*{message}.*\\); they start '
        'new ones',
        caplog.text,
    ), caplog.text
    _, stored = ckpt.load_checkpoint(latest_checkpoint(str(root_dir / 'checkpoints')))
    assert stored['step_type'][0][310].item() == StepType.FIRST
    assert stored['step_type'][0][309].item() != StepType.LAST


def test_training_again_after_stop_when_gives_the_numbers_of_a_run_never_stopped(tmp_path):
    params = [
        'TrainerConfig.num_env_steps = 600',
        'TrainerConfig.eval_interval = 100',
        'TrainerConfig.summary_interval = 50',
        'TrainerConfig.initial_collect_steps = 50',
    ]
    train(tmp_path / 'never_stopped', *params)
    with build(tmp_path / 'stopped', *params) as trainer:
        # Stops at the evaluation at 100 (4 episodes ended, fewer than train/AverageReturn
        # averages; 50 updates made), then trains on from its checkpoint.
        trainer.train(stop_when=lambda last_eval: trainer.env_steps == 100)
        assert trainer.env_steps == 100
        trainer.train()
    expected = read_csv(tmp_path / 'never_stopped' / 'progress.csv')
    assert read_csv(tmp_path / 'stopped' / 'progress.csv') == expected


def test_training_again_from_a_checkpoint_without_replay_buffer_refills_it_as_a_new_trainer(
    tmp_path,
):
    params = [
        'TrainerConfig.num_env_steps = 400',
        'TrainerConfig.eval_interval = 100',
        'TrainerConfig.summary_interval = 50',
        'TrainerConfig.initial_collect_steps = 100',
        'TrainerConfig.checkpoint_replay_buffer = False',
    ]

    def stop_at_200(last_eval):
        return trainer.env_steps == 200

    # Stopped at 200, then resumed by a new trainer, as by a new process.
    with build(tmp_path / 'new', *params) as trainer:
        trainer.train(stop_when=stop_at_200)
    with build(tmp_path / 'new', *params) as trainer:
        trainer.train()
    with build(tmp_path / 'again', *params) as trainer:
        trainer.train(stop_when=stop_at_200)
        # The checkpoint at 200 holds no rows: the resume refills the buffer for 100
        # env steps before it updates, also where this trainer still holds 200 rows.
        trainer.train()
    expected = read_csv(tmp_path / 'new' / 'progress.csv')
    assert [r['num_updates'] for r in expected if r['env_steps'] in ('250', '300', '350')] == [
        '100',
        '100',
        '150',
    ]
    assert expected[5]['env_steps'] == '250' and expected[5]['train/critic_loss'] == ''
    assert read_csv(tmp_path / 'again' / 'progress.csv') == expected


@pytest.mark.parametrize('mask_out_loss_for_last_step', [True, False])
def test_resume_never_trains_on_the_pair_across_the_restart(
    tmp_path, monkeypatch, mask_out_loss_for_last_step
):
    params = [
        'TrainerConfig.checkpoint_interval = 500',
        f'TrainerConfig.mask_out_loss_for_last_step = {mask_out_loss_for_last_step}',
    ]
    train(tmp_path, 'TrainerConfig.num_env_steps = 500', *params)
    drop_collection(tmp_path)
    parse_config(
        [os.path.join(EXAMPLES, 'common', 'sac.gin')],
        POINT_PARAMS + params + ['TrainerConfig.num_env_steps = 700'],
    )
    trained = []
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        record_each_call(
            monkeypatch,
            trainer._algorithm,
            'train_step',
            lambda batch, loss_mask: trained.append((batch.observation, loss_mask)),
        )
        trainer.train()
        stored = trainer._replay_buffer.storage
    # 500 rows before the restart; with 21-row episodes row 499 is a MID, and the
    # resumed run's reset wrote row 500 as a FIRST.
    assert stored['step_type'][0, 499].item() == StepType.MID
    assert stored['step_type'][0, 500].item() == StepType.FIRST
    before, after = stored['observation'][0, 499], stored['observation'][0, 500]
    sampled = 0
    for observation, mask in trained:
        across = (observation[:, :-1] == before).all(-1) & (observation[:, 1:] == after).all(-1)
        sampled += int(across.sum())
        assert not (across & (mask > 0)).any()
    assert sampled > 0, 'the pair across the restart was never sampled: the test proves nothing'
    steps = [int(r['env_steps']) for r in read_csv(tmp_path / 'progress.csv')]
    assert steps == sorted(set(steps)) and steps[-1] == 700


@pytest.mark.parametrize('mask_out_loss_for_last_step', [True, False])
def test_loss_mask_never_keeps_a_first_that_follows_a_non_last_row(mask_out_loss_for_last_step):
    F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
    # Windows of 3 rows: a restart (M -> F) next to an episode boundary (L -> F).
    # The last window's LAST is followed by no FIRST (collection never writes
    # that): the mask drops the pair for the LAST alone.
    step_type = torch.tensor(
        [[F, M, M], [M, L, F], [M, M, F], [L, F, M], [M, L, M]], dtype=torch.uint8
    )
    batch = Experience(step_type, *(torch.zeros(5, 3) for _ in range(4)))
    boundary = 0.0 if mask_out_loss_for_last_step else 1.0
    expected = torch.tensor([[1, 1], [1, boundary], [1, 0], [boundary, 1], [1, boundary]])
    assert torch.equal(loss_mask(batch, mask_out_loss_for_last_step), expected)


def test_unrolls_updates_random_steps_and_the_last_evaluation_follow_the_config(
    tmp_path, monkeypatch
):
    # 2 envs, 3 env steps per iteration (6 env steps), 2 updates per iteration, random
    # actions for the first 100 env steps, 300 env steps: 50 iterations.
    updates_at, policy_at = [], []
    with build(
        tmp_path,
        'create_environment.num_parallel_environments = 2',
        'create_environment.use_subprocesses = False',
        'TrainerConfig.unroll_length = 3',
        'TrainerConfig.num_updates_per_train_iter = 2',
        'TrainerConfig.initial_collect_steps = 100',
        'TrainerConfig.num_env_steps = 300',
        'TrainerConfig.eval_interval = 200',
        'TrainerConfig.num_eval_episodes = 2',
    ) as trainer:
        algorithm, buffer = trainer._algorithm, trainer._replay_buffer
        record_each_call(
            monkeypatch, algorithm, 'train_step', lambda *_: updates_at.append(buffer.total_added)
        )
        record_each_call(
            monkeypatch, algorithm, 'rollout_step', lambda _: policy_at.append(trainer.env_steps)
        )
        trainer.train()
    # Iteration k writes rows 3k - 2 .. 3k of each env; its updates run at its last
    # step, once more than 100 env steps (2 x 3k > 100: k >= 17) are in the buffer.
    assert updates_at == [3 * k for k in range(17, 51) for _ in range(2)]
    # The policy acts from env step 100 on, at each of the 100 steps from there.
    assert policy_at == list(range(100, 300, 2))
    rows = read_csv(tmp_path / 'progress.csv')
    assert rows[-1]['num_updates'] == '68'
    # Evaluations at 0, at the first step past 200 (iterations end at multiples of 6),
    # and at the end although 300 is no multiple of 200.
    evaluated = [r['env_steps'] for r in rows if r['eval/AverageReturn']]
    assert evaluated == ['0', '204', '300']


def test_random_actions_are_uniform_and_independent_per_dimension(tmp_path):
    params = [
        "create_environment.env_name = 'Hopper-v5'",  # a 3-d action
        'TrainerConfig.initial_collect_steps = 2000',
        'TrainerConfig.num_env_steps = 2000',
        'TrainerConfig.eval_interval = 100000',
        'TrainerConfig.num_eval_episodes = 1',
    ]
    with build(tmp_path, *params) as trainer:
        trainer.train()
        action = trainer._replay_buffer.storage['action'][0, :2000]
    assert action.min() >= -1 and action.max() <= 1
    # Uniform on [-1, 1]: mean 0, variance 1/3; independent dimensions: no correlation.
    assert torch.allclose(action.mean(0), torch.zeros(3), atol=0.05)
    assert torch.allclose(action.var(0), torch.full((3,), 1 / 3), atol=0.03)
    correlation = torch.corrcoef(action.T)
    assert (correlation - torch.eye(3)).abs().max() < 0.1


@pytest.mark.parametrize('mask_out_loss_for_last_step', [True, False])
def test_the_trainer_trains_on_the_last_to_first_pair_only_when_told_to(
    tmp_path, monkeypatch, mask_out_loss_for_last_step
):
    trained = []
    with build(
        tmp_path,
        'TrainerConfig.num_env_steps = 300',
        f'TrainerConfig.mask_out_loss_for_last_step = {mask_out_loss_for_last_step}',
    ) as trainer:
        record_each_call(
            monkeypatch,
            trainer._algorithm,
            'train_step',
            lambda batch, loss_mask: trained.append((batch.step_type, loss_mask)),
        )
        trainer.train()
    L, F = StepType.LAST, StepType.FIRST
    across = torch.cat(
        [mask[(step_type[:, 0] == L) & (step_type[:, 1] == F), 0] for step_type, mask in trained]
    )
    assert len(across) > 0, 'no LAST -> FIRST pair was sampled: the test proves nothing'
    assert torch.all(across == (0.0 if mask_out_loss_for_last_step else 1.0))


def test_resumed_run_restores_networks_and_counters(point_run_to_400, tmp_path):
    root_dir = copy_run(point_run_to_400, tmp_path)
    state, _ = ckpt.load_checkpoint(latest_checkpoint(str(root_dir / 'checkpoints')))
    assert state['env_steps'] == 400 and state['num_updates'] == 200
    # Resumed with nothing left to train: the networks are the checkpoint's, bit for bit.
    with build(root_dir, 'TrainerConfig.num_env_steps = 400') as trainer:
        trainer.train()
        restored = trainer._algorithm.state_dict()
        # The train step count, which the target and policy update periods count in,
        # continues too (a TD3 run resumed after an odd number of updates would shift
        # its delayed actor and target updates by one step otherwise).
        assert trainer.algorithm.num_train_steps == 200
    saved = _tensors(state['algorithm']['module'])
    restored = _tensors(restored)
    assert restored.keys() == saved.keys() and len(saved) > 10
    for name, value in saved.items():
        assert torch.equal(restored[name], value), name
    train(root_dir, 'TrainerConfig.num_env_steps = 600')
    resumed, _ = ckpt.load_checkpoint(latest_checkpoint(str(root_dir / 'checkpoints')))
    assert resumed['env_steps'] == 600 and resumed['num_updates'] == 400
    # Adam's step count continued from the checkpoint instead of restarting at 0.
    step = resumed['algorithm']['optimizers']['critic']['state'][0]['step']
    assert int(step) == 400


def test_the_checkpoint_log_line_gives_the_bytes_of_each_file(tmp_path, caplog):
    with caplog.at_level('INFO'):
        train(tmp_path, 'TrainerConfig.num_env_steps = 400')
    path = latest_checkpoint(str(tmp_path / 'checkpoints'))
    model = os.path.getsize(os.path.join(path, ckpt.MODEL_FILE))
    rb = os.path.getsize(os.path.join(path, ckpt.REPLAY_BUFFER_FILE))
    assert (
        f'checkpoint written: {path} (model.pt {model} bytes, replay_buffer.pt {rb} bytes)'
        in caplog.text
    )
    # 400 rows of 2 + 1 floats of observation and action, a reward, a discount and a
    # step type (21 bytes), and the zip's records: far from the 100k-row allocation.
    assert 400 * 21 < rb < 400 * 21 + 20_000 < 100_000 * 21


def test_the_replay_buffer_bytes_column_is_the_whole_allocation(tmp_path):
    train(
        tmp_path,
        'create_environment.num_parallel_environments = 2',
        'create_environment.use_subprocesses = False',
        'TrainerConfig.replay_buffer_length = 300',
        'TrainerConfig.initial_collect_steps = 200',
        'TrainerConfig.summary_interval = 100',
        'TrainerConfig.num_env_steps = 200',
    )
    # 2 envs x 300 rows of a 2-float observation, a 1-float action, a float reward, a
    # float discount and a 1-byte step type: allocated whole from the start.
    expected = 2 * 300 * (2 * 4 + 1 * 4 + 4 + 4 + 1)
    rows = read_csv(tmp_path / 'progress.csv')
    values = [r['train/replay_buffer_bytes'] for r in rows if r['train/replay_buffer_bytes']]
    assert len(values) == 2 and all(float(v) == expected for v in values)


def test_without_checkpoint_replay_buffer_no_checkpoint_holds_one_and_the_resume_refills(
    tmp_path, caplog
):
    params = [
        'TrainerConfig.checkpoint_replay_buffer = False',
        'TrainerConfig.initial_collect_steps = 200',
        'TrainerConfig.checkpoint_interval = 100',
    ]
    train(tmp_path, 'TrainerConfig.num_env_steps = 200', *params)
    checkpoints = tmp_path / 'checkpoints'
    assert sorted(os.listdir(checkpoints)) == ['ckpt-100', 'ckpt-200']
    for name in ('ckpt-100', 'ckpt-200'):
        assert (checkpoints / name / ckpt.MODEL_FILE).is_file()
        assert not (checkpoints / name / ckpt.REPLAY_BUFFER_FILE).exists()
    with caplog.at_level(logging.WARNING):
        train(tmp_path, 'TrainerConfig.num_env_steps = 300', *params)
    assert 'holds no replay buffer' in caplog.text


def test_a_run_killed_before_its_first_checkpoint_of_long_iterations_starts_over(tmp_path):
    # Iterations of 3 env steps end at 99 and 102: the first checkpoint past the
    # interval of 100 is at 102, so a run killed just before it may have written
    # its summary row at 102 (and none past it).
    params = [
        'TrainerConfig.unroll_length = 3',
        'TrainerConfig.checkpoint_interval = 100',
        'TrainerConfig.initial_collect_steps = 6',
        'TrainerConfig.num_env_steps = 6',
    ]
    progress = tmp_path / 'progress.csv'
    progress.write_text('env_steps,num_updates,wall_time\n0,0,1.0\n102,0,2.0\n')
    train(tmp_path, *params)
    assert [r['env_steps'] for r in read_csv(progress)] == ['0', '6']
    # Rows past the first checkpoint's step with no checkpoint: checkpoints went missing.
    shutil.rmtree(tmp_path / 'checkpoints')
    progress.write_text('env_steps,num_updates,wall_time\n0,0,1.0\n105,0,2.0\n')
    with pytest.raises(ckpt.CheckpointError, match='has rows up to 105 env steps'):
        train(tmp_path, *params)


def test_a_run_killed_before_its_first_checkpoint_restarts_with_a_shorter_interval(tmp_path):
    # The killed run checkpointed every 1000 steps and wrote rows up to 600; the
    # restart asks for a checkpoint every 100 (a resume may change the intervals):
    # the rows are those of a run that never reached its first checkpoint.
    params = [
        'TrainerConfig.initial_collect_steps = 6',
        'TrainerConfig.num_env_steps = 6',
    ]
    (tmp_path / 'config.gin').write_text('TrainerConfig.checkpoint_interval = 1000\n')
    progress = tmp_path / 'progress.csv'
    progress.write_text('env_steps,num_updates,wall_time\n0,0,1.0\n600,0,2.0\n')
    train(tmp_path, 'TrainerConfig.checkpoint_interval = 100', *params)
    assert [r['env_steps'] for r in read_csv(progress)] == ['0', '6']
    # Rows past the first checkpoint of either interval: checkpoints went missing.
    shutil.rmtree(tmp_path / 'checkpoints')
    progress.write_text('env_steps,num_updates,wall_time\n0,0,1.0\n1200,0,2.0\n')
    with pytest.raises(ckpt.CheckpointError, match='has rows up to 1200 env steps'):
        train(tmp_path, 'TrainerConfig.checkpoint_interval = 100', *params)


def test_a_resumed_run_holds_no_second_copy_of_the_replay_buffer(
    point_run_to_400, tmp_path, monkeypatch
):
    root_dir = copy_run(point_run_to_400, tmp_path)
    loaded = []
    load = ckpt.load_checkpoint

    def load_and_watch(*args, **kwargs):
        state, rb = load(*args, **kwargs)
        fields = [rows for rows in rb.values() if isinstance(rows, list)]
        loaded.extend(weakref.ref(t) for rows in fields for t in rows)
        return state, rb

    monkeypatch.setattr(ckpt, 'load_checkpoint', load_and_watch)
    held = []

    def count_loaded_tensors_alive(last_eval):
        gc.collect()
        held.append(sum(ref() is not None for ref in loaded))
        return False

    with build(root_dir, 'TrainerConfig.num_env_steps = 600') as trainer:
        trainer.train(stop_when=count_loaded_tensors_alive)
    assert len(loaded) == 5  # a field's rows of the one env
    assert held == [0, 0]  # copied into the buffer's storage, and the loaded rows dropped


@pytest.mark.parametrize(
    'bad',
    [
        'TrainerConfig.mini_batch_length = 1',
        'TrainerConfig.replay_buffer_length = 0',
        'TrainerConfig.eval_interval = 0',
    ],
)
def test_nonsensical_sizes_are_refused(bad):
    parse_config([os.path.join(EXAMPLES, 'sac_pendulum.gin')], [bad])
    with pytest.raises(ValueError, match=bad.split('.')[1].split(' ')[0]):
        TrainerConfig()


def test_a_bool_is_refused_as_a_count():
    # True == 1 in Python, but 'unroll_length = True' is a slip, not one step.
    with pytest.raises(ValueError, match='unroll_length must be an integer, got True'):
        TrainerConfig(unroll_length=True)


def test_numpy_integers_are_counts_and_kept_as_python_ints():
    # Seeds from np.arange in a sweep from Python; a numpy bool is still refused.
    config = TrainerConfig(
        num_env_steps=np.int64(500),
        initial_collect_steps=np.int64(100),
        random_seed=np.uint32(3),
        num_eval_environments=np.int32(2),
    )
    assert (config.num_env_steps, config.random_seed, config.num_eval_environments) == (500, 3, 2)
    assert {type(config.num_env_steps), type(config.random_seed)} == {int}
    with pytest.raises(ValueError, match='random_seed must be an integer, got np.True_'):
        TrainerConfig(random_seed=np.bool_(True))


def test_compile_that_is_no_bool_is_refused():
    # A gin file's 'yes' is refused when parsed (config.py); this is the same from Python.
    with pytest.raises(ValueError, match='compile'):
        TrainerConfig(compile='yes')


def test_numpy_bools_are_taken_as_bools_and_kept_as_python_bools():
    # Flags from a sweep's np.array([True, False]) from Python; a string is still refused.
    names = ['mask_out_loss_for_last_step', 'checkpoint_replay_buffer', 'cuda_graph', 'compile']
    config = TrainerConfig(
        **{name: np.bool_(False) for name in names}, defer_non_finite_checks=np.bool_(True)
    )
    for name in names:
        assert type(getattr(config, name)) is bool and not getattr(config, name)
    assert config.defer_non_finite_checks is True
    with pytest.raises(ValueError, match='defer_non_finite_checks must be True, False or None'):
        TrainerConfig(defer_non_finite_checks=np.int64(1))


def test_a_binding_nothing_uses_is_named_with_where_it_was_written(tmp_path, caplog):
    ddpg = os.path.join(EXAMPLES, 'ddpg_pendulum.gin')
    experiment = tmp_path / 'exp.gin'
    # TD3's settings in a DDPG run: Td3Algorithm is never built.
    experiment.write_text(f"include '{ddpg}'\nTd3Algorithm.gamma = 0.5\n")
    # A scope the config opens (@critic/Adam), on an optimizer it never builds there.
    params = ['critic/AdamW.weight_decay = 0.01', 'TrainerConfig.initial_collect_steps = 100']
    with caplog.at_level(logging.INFO):
        parse_config([str(experiment)], params)
        Trainer(TrainerConfig(), str(tmp_path / 'run')).close()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith('these bindings are used by nothing this run builds')
    assert f'`Td3Algorithm.gamma` (file {experiment}, line 2, `Td3Algorithm.gamma = 0.5`)' in (
        warning
    )
    assert "`critic/AdamW.weight_decay` (--gin_param 'critic/AdamW.weight_decay = 0.01')" in (
        warning
    )
    # The shared file's OU noise, which this example replaces by Gaussian noise: noted only.
    assert 'OUNoise' not in warning
    assert 'bindings of included files this config leaves unused: `OUNoise.theta`' in caplog.text
    # A resume reads the run's config.gin, its files' bindings in one: only new ones warn.
    # Also where the root_dir is reached through a link (macOS's /tmp is one).
    (tmp_path / 'real').mkdir()
    (tmp_path / 'link').symlink_to(tmp_path / 'real')
    config_file = tmp_path / 'link' / 'config.gin'
    config_file.write_text(gin.config_str())
    caplog.clear()
    with caplog.at_level(logging.INFO):
        parse_config([str(config_file)], ['TrainerConfig.num_eval_episodes = 2'])
        Trainer(TrainerConfig(), str(tmp_path / 'link')).close()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING], caplog.text
    assert '`Td3Algorithm.gamma`' in caplog.text and '`OUNoise.theta`' in caplog.text


def test_a_gin_param_that_a_files_more_specific_scope_overrides_is_warned_about(tmp_path, caplog):
    sac = os.path.join(EXAMPLES, 'sac_pendulum.gin')  # binds actor/, critic/, alpha/Adam.lr
    experiment = tmp_path / 'exp.gin'
    experiment.write_text(f"include '{sac}'\n")
    params = [
        'Adam.lr = 1e-4',  # meant for all three: reaches none of them
        'alpha/Adam.lr = 5e-4',  # the user's own, more specific: no warning for it
        'critic/Adam.eps = 1e-6',  # bound nowhere else
        'TrainerConfig.initial_collect_steps = 100',
    ]
    with caplog.at_level(logging.WARNING):
        parse_config([str(experiment)], params)
        Trainer(TrainerConfig(), str(tmp_path / 'run')).close()
    (warning,) = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith('a binding of a gin')
    ]
    assert (
        "--gin_param 'Adam.lr = 1e-4' (`Adam.lr`): "
        f'`actor/Adam.lr` (file {sac}, line 13, `actor/Adam.lr = 1e-3`); '
        f'`critic/Adam.lr` (file {sac}, line 14, `critic/Adam.lr = 1e-3`).'
    ) in warning
    assert 'alpha/' not in warning and 'eps' not in warning
    # Said once: not also as a binding that nothing uses.
    assert 'used by nothing' not in caplog.text
    # The same parameter bound in the file's own scope: the --gin_param wins, no warning.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        parse_config([str(experiment)], ['actor/Adam.lr = 1e-4'])
        Trainer(TrainerConfig(), str(tmp_path / 'run2')).close()
    assert 'more specific scope' not in caplog.text


def test_initial_collect_uses_uniform_random_actions(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        train(
            tmp_path,
            'TrainerConfig.num_env_steps = 400',
            'TrainerConfig.initial_collect_steps = 400',
            'TrainerConfig.checkpoint_interval = 400',
        )
    # A run that only collects says so.
    assert 'initial_collect_steps = 400 with num_env_steps = 400: this run only collects' in (
        caplog.text
    )
    _, rb = ckpt.load_checkpoint(latest_checkpoint(str(tmp_path / 'checkpoints')))
    actions = rb['action'][0][:400]
    assert actions.min() >= -1 and actions.max() <= 1
    assert abs(actions.mean().item()) < 0.1 and actions.std().item() == pytest.approx(
        (1 / 3) ** 0.5, abs=0.05
    )
    state, _ = ckpt.load_checkpoint(latest_checkpoint(str(tmp_path / 'checkpoints')))
    assert state['num_updates'] == 0
    assert torch.is_tensor(actions)


@pytest.mark.parametrize(
    'num_env_steps, params, updates',
    [
        # The run's last iteration ends at its length or past it: updates start once more
        # than initial_collect_steps steps were collected by then.
        (400, ['TrainerConfig.initial_collect_steps = 399'], True),
        (400, ['TrainerConfig.initial_collect_steps = 400'], False),
        # Its last iteration of 30 steps ends at 420.
        (
            400,
            ['TrainerConfig.unroll_length = 30', 'TrainerConfig.initial_collect_steps = 400'],
            True,
        ),
        # Of 4 envs' steps: it ends at 400.
        (
            398,
            [
                'create_environment.num_parallel_environments = 4',
                'create_environment.use_subprocesses = False',
                'TrainerConfig.initial_collect_steps = 398',
            ],
            True,
        ),
    ],
    ids=['one_step_to_train', 'none_to_train', 'unrolled_past_the_end', 'four_envs_past_the_end'],
)
def test_the_collect_only_warning_says_whether_the_run_updates(
    tmp_path, caplog, num_env_steps, params, updates
):
    with caplog.at_level(logging.WARNING):
        train(tmp_path, f'TrainerConfig.num_env_steps = {num_env_steps}', *params)
    rows = read_csv(tmp_path / 'progress.csv')
    assert (int(rows[-1]['num_updates']) > 0) == updates
    assert ('this run only collects' in caplog.text) == (not updates), caplog.text


def test_a_run_too_short_for_one_window_says_so_and_names_no_random_actions(tmp_path, caplog):
    # Random actions end at once; the 30 steps never fill a window of 50 rows.
    with caplog.at_level(logging.WARNING):
        train(
            tmp_path,
            'TrainerConfig.num_env_steps = 30',
            'TrainerConfig.initial_collect_steps = 0',
            'TrainerConfig.mini_batch_length = 50',
        )
    assert read_csv(tmp_path / 'progress.csv')[-1]['num_updates'] == '0'
    assert 'mini_batch_length = 50 with num_env_steps = 30' in caplog.text, caplog.text
    assert 'uniform random actions' not in caplog.text


def test_evaluation_between_summaries(tmp_path):
    # Evaluations at 200 and 400 fall between summaries (every 300 env steps).
    train(
        tmp_path,
        'TrainerConfig.num_env_steps = 600',
        'TrainerConfig.summary_interval = 300',
        'TrainerConfig.eval_interval = 200',
    )
    rows = read_csv(tmp_path / 'progress.csv')
    assert [r['env_steps'] for r in rows] == ['0', '200', '300', '400', '600']
    assert [r['eval/AverageReturn'] != '' for r in rows] == [True, True, False, True, True]


def test_a_summary_holds_its_last_updates_scalars_with_alpha_before_that_updates_step(
    tmp_path, monkeypatch
):
    # What each update returned, and alpha = exp(log_alpha) once its steps were taken.
    updates = []
    train_step = SacAlgorithm.train_step

    def recorded(algorithm, batch, mask):
        scalars = train_step(algorithm, batch, mask)
        updates.append(
            ({k: float(v) for k, v in scalars.items()}, float(algorithm._log_alpha.detach().exp()))
        )
        return scalars

    monkeypatch.setattr(SacAlgorithm, 'train_step', recorded)
    # Updates from 200 env steps on; summaries at 250, 500 and 750.
    train(tmp_path, 'TrainerConfig.num_env_steps = 750')
    rows = [r for r in read_csv(tmp_path / 'progress.csv') if r['train/critic_loss']]
    assert [r['env_steps'] for r in rows] == ['250', '500', '750']
    for before, row in zip([{'num_updates': '0'}] + rows, rows):
        first, last = int(before['num_updates']), int(row['num_updates'])
        scalars, _ = updates[last - 1]
        assert {k: float(row[f'train/{k}']) for k in scalars} == scalars, row['env_steps']
        # Not the interval's mean: the critic loss changes from update to update.
        losses = [s['critic_loss'] for s, _ in updates[first:last]]
        assert scalars['critic_loss'] != pytest.approx(np.mean(losses), rel=1e-3)
        # The update read alpha before its own step on log_alpha, which moved it.
        alpha_before, alpha_after = updates[last - 2][1], updates[last - 1][1]
        assert float(row['train/alpha']) == alpha_before != alpha_after
    assert int(rows[-1]['num_updates']) == len(updates)


def test_env_steps_per_sec_leaves_out_evaluations_and_checkpoints(tmp_path, monkeypatch):
    import alf_lite.summary as summary_module
    import alf_lite.trainer as trainer_module

    # The rates' clock: real time, plus 100 s for each evaluation and checkpoint, which
    # would bring an interval that counted one below 1 env step per second however
    # loaded the machine. Nothing sleeps.
    skipped = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + skipped[0], time=time.time)
    monkeypatch.setattr(summary_module, 'time', clock)

    def slow(function):
        def wrapped(*args, **kwargs):
            skipped[0] += 100.0
            return function(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(trainer_module, 'evaluate', slow(trainer_module.evaluate))
    monkeypatch.setattr(Trainer, '_save', slow(Trainer._save))
    # Random steps of the point task only: thousands per second. An evaluation at
    # 0, 100 and 200 and a checkpoint at 100 and 200 fall in the intervals.
    train(
        tmp_path,
        'TrainerConfig.num_env_steps = 300',
        'TrainerConfig.initial_collect_steps = 300',
        'TrainerConfig.summary_interval = 100',
        'TrainerConfig.eval_interval = 100',
        'TrainerConfig.checkpoint_interval = 100',
    )
    assert skipped[0] >= 500
    with open(tmp_path / 'progress.csv', newline='') as f:
        speeds = [
            float(r['train/env_steps_per_sec']) for r in csv.DictReader(f) if r['env_steps'] != '0'
        ]
    assert len(speeds) == 3 and min(speeds) > 10, speeds


def test_a_checkpoint_between_summaries_leaves_the_next_summarys_rates_whole(tmp_path):
    # Updates from 100 env steps on, a checkpoint every 100 and a summary every 200: each
    # summary's rates cover the 200 env steps since the one before (checkpoint included),
    # so updates per env step are those num_updates counts over them.
    train(
        tmp_path,
        'TrainerConfig.num_env_steps = 400',
        'TrainerConfig.initial_collect_steps = 100',
        'TrainerConfig.summary_interval = 200',
        'TrainerConfig.eval_interval = 1000',
        'TrainerConfig.checkpoint_interval = 100',
        'TrainerConfig.num_eval_episodes = 1',
    )
    rows = read_csv(tmp_path / 'progress.csv', drop=())
    summaries = [r for r in rows if r['train/env_steps_per_sec']]
    assert [r['env_steps'] for r in summaries] == ['200', '400']
    before = 0
    for row in summaries:
        updates = int(row['num_updates']) - before
        ratio = float(row['train/updates_per_sec']) / float(row['train/env_steps_per_sec'])
        assert updates > 0 and ratio == pytest.approx(updates / 200, rel=1e-9), row['env_steps']
        before = int(row['num_updates'])


def test_the_first_summary_after_a_resume_rates_the_steps_and_updates_since_the_resume(tmp_path):
    # A run to 200 env steps, resumed to 400: the summary at 400 rates the 200 env steps
    # and the updates since the resume, not the run's counts since its start.
    params = [
        'TrainerConfig.initial_collect_steps = 100',
        'TrainerConfig.summary_interval = 200',
        'TrainerConfig.eval_interval = 1000',
        'TrainerConfig.num_eval_episodes = 1',
    ]
    train(tmp_path, *params, 'TrainerConfig.num_env_steps = 200')
    train(tmp_path, *params, 'TrainerConfig.num_env_steps = 400')
    rows = read_csv(tmp_path / 'progress.csv', drop=())
    summaries = [r for r in rows if r['train/env_steps_per_sec']]
    assert [r['env_steps'] for r in summaries] == ['200', '400']
    before, after = (int(r['num_updates']) for r in summaries)
    ratio = float(summaries[1]['train/updates_per_sec']) / float(
        summaries[1]['train/env_steps_per_sec']
    )
    assert before > 0 and ratio == pytest.approx((after - before) / 200, rel=1e-9)


def test_auto_device_is_the_cpu_without_a_gpu_and_each_run_records_its_device(tmp_path):
    params = ['TrainerConfig.num_env_steps = 400', 'TrainerConfig.random_seed = 4']
    train(tmp_path / 'default', *params)
    train(tmp_path / 'cpu', *params, "TrainerConfig.device = 'cpu'")
    assert (tmp_path / 'cpu' / 'device.txt').read_text().startswith('cpu')
    recorded = (tmp_path / 'default' / 'device.txt').read_text()
    if torch.cuda.is_available():  # 'auto' is the GPU there: other numbers
        assert recorded.startswith('cuda'), recorded
        return
    assert recorded.startswith('cpu'), recorded
    rows = read_csv(tmp_path / 'default' / 'progress.csv')
    assert len(rows) >= 2 and rows == read_csv(tmp_path / 'cpu' / 'progress.csv')


def test_a_second_trainer_in_the_same_root_dir_is_refused_until_the_first_closes(tmp_path):
    params = ['TrainerConfig.num_env_steps = 400']
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS + params)
    with Trainer(TrainerConfig(), str(tmp_path / 'run')) as first:
        first.lock_root_dir()
        with Trainer(TrainerConfig(), str(tmp_path / 'run')) as second:
            # Both are this process's: the refusal names the other trainer, not a process.
            with pytest.raises(
                RunDirInUseError, match='is in use: another Trainer of this process holds it'
            ):
                second.train()
            assert os.listdir(tmp_path / 'run') == []
            result = first.train()
            assert (tmp_path / 'run' / 'progress.csv').is_file()
            assert first.resumed_from is None
            # train() unlocks when it returns: the second trainer resumes the finished run
            # and, with nothing left to train, returns the evaluation the run ended with.
            assert second.train() == result != {}
            assert second.env_steps == 400 and second.last_eval == result
            assert second.resumed_from == str(tmp_path / 'run' / 'checkpoints' / 'ckpt-400')


def test_a_locked_trainer_dropped_without_closing_unlocks_its_root_dir(tmp_path):
    # A notebook cell that locked root_dir and failed before train() is run again: the
    # trainer it made first is gone, and nothing could close it.
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS)
    fds = len(os.listdir('/proc/self/fd'))
    dropped = Trainer(TrainerConfig(), str(tmp_path / 'run'))
    dropped.lock_root_dir()
    gone = weakref.ref(dropped)
    del dropped
    gc.collect()
    assert gone() is None
    assert len(os.listdir('/proc/self/fd')) == fds
    with Trainer(TrainerConfig(), str(tmp_path / 'run')) as trainer:
        trainer.lock_root_dir()


def test_cuda_graph_on_the_cpu_is_refused_before_anything_is_written(tmp_path):
    parse_config(
        [os.path.join(EXAMPLES, 'common', 'sac.gin')],
        POINT_PARAMS + ["TrainerConfig.device = 'cpu'", 'TrainerConfig.cuda_graph = True'],
    )
    with pytest.raises(ValueError, match='cuda_graph'):
        Trainer(TrainerConfig(), str(tmp_path / 'run'))
    assert not (tmp_path / 'run').exists()


DDPG_POINT_PARAMS = [
    "create_environment.env_name = 'alf_lite/PointTarget-v0'",
    'create_environment.num_parallel_environments = 1',
    'DeterministicActorNetwork.hidden_layers = (8,)',
    'CriticNetwork.hidden_layers = (8, 8)',
    'TrainerConfig.initial_collect_steps = 10',
    'TrainerConfig.num_env_steps = 20',
    'TrainerConfig.mini_batch_size = 1',
    'TrainerConfig.num_eval_episodes = 1',
]


def test_batch_norm_with_one_transition_per_update_is_refused_before_anything_is_written(
    tmp_path,
):
    # Windows of 2 rows hold one transition: batch norm has no batch statistics to use.
    parse_config([os.path.join(EXAMPLES, 'common', 'ddpg.gin')], DDPG_POINT_PARAMS)
    with pytest.raises(ValueError, match='1 transition per update.*batch norm'):
        Trainer(TrainerConfig(), str(tmp_path / 'run'))
    assert not (tmp_path / 'run').exists()
    # Windows of 3 rows hold 2: the run trains.
    parse_config(
        [os.path.join(EXAMPLES, 'common', 'ddpg.gin')],
        DDPG_POINT_PARAMS + ['TrainerConfig.mini_batch_length = 3'],
    )
    with Trainer(TrainerConfig(), str(tmp_path / 'run')) as trainer:
        trainer.train()
        assert trainer.num_updates > 0


def test_the_algorithm_is_left_in_eval_mode_whatever_train_did_last(tmp_path):
    # Batch norm predicts with its running statistics only in eval mode: in training mode
    # the same weights give other actions, move those statistics, and refuse one observation.
    params = DDPG_POINT_PARAMS + ['TrainerConfig.mini_batch_length = 3']
    parse_config([os.path.join(EXAMPLES, 'common', 'ddpg.gin')], params)
    observations = torch.tensor([[0.5, -0.3], [0.1, 0.1]])
    with Trainer(TrainerConfig(), str(tmp_path / 'run')) as trainer:
        assert trainer.algorithm.training is False  # built
        trainer.train()
        assert trainer.num_updates > 0
        actions = trainer.algorithm.predict_step(observations)
    # A trainer of the finished run: its train() returns at once, neither updating nor
    # evaluating.
    parse_config([os.path.join(EXAMPLES, 'common', 'ddpg.gin')], params)
    with Trainer(TrainerConfig(), str(tmp_path / 'run')) as trainer:
        trainer.train()
        assert trainer.algorithm.training is False
        assert torch.equal(trainer.algorithm.predict_step(observations), actions)
        trainer.algorithm.predict_step(observations[:1])
    # A train() stopped by an error in an update.
    parse_config(
        [os.path.join(EXAMPLES, 'common', 'ddpg.gin')],
        params + ['TrainerConfig.num_env_steps = 40'],
    )
    with Trainer(TrainerConfig(), str(tmp_path / 'run')) as trainer:

        def fail(*args):
            raise RuntimeError('in an update')

        trainer._runner.update = fail
        with pytest.raises(RuntimeError, match='in an update'):
            trainer.train()
        assert trainer.algorithm.training is False


def test_mini_batch_over_the_process_memory_limit_is_refused_naming_the_limit():
    # A fresh process: the limit stays with the process that sets it.
    script = """
import psutil, resource
from alf_lite.replay_buffer import ReplayBuffer
from alf_lite.trainer import _check_batch_fits

used = psutil.Process().memory_info().vms
resource.setrlimit(resource.RLIMIT_AS, (used + 400_000_000, resource.RLIM_INFINITY))
buffer = ReplayBuffer(1, 10, 3, 1)  # 25 bytes per step
try:
    _check_batch_fits(buffer, 10_000_000, 2)  # 500 MB, more than the 400 MB left
except ValueError as e:
    print(e)
_check_batch_fits(buffer, 4_000_000, 2)  # 200 MB
print('fits')
"""
    output = python_output(script)
    assert 'takes at least 500000000 bytes' in output
    assert "this process's ulimit -v limit" in output
    assert 'fits' in output


@pytest.mark.parametrize(
    'param, message',
    [
        ("TrainerConfig.precision = 'float16'", "precision must be one of 'float32', 'bfloat16'"),
        ("TrainerConfig.device = 'tpu'", 'tpu'),
    ],
)
def test_unknown_precision_or_device_is_refused(tmp_path, param, message):
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS + [param])
    with pytest.raises(ValueError, match=message):
        Trainer(TrainerConfig(), str(tmp_path / 'run'))
    assert not (tmp_path / 'run').exists()


BF16 = [
    "TrainerConfig.precision = 'bfloat16'",
    'TanhNormalActorNetwork.hidden_layers = (16,)',
    'CriticNetwork.hidden_layers = (16,)',
    'TrainerConfig.mini_batch_size = 16',
    'TrainerConfig.initial_collect_steps = 100',
    'TrainerConfig.summary_interval = 100',
    'TrainerConfig.checkpoint_interval = 200',
]


class CriticOfItsOwn(torch.nn.Module):
    """A critic without a ``compute_dtype``: it computes in float32 whatever the precision."""

    def __init__(self, observation_dim, action_dim, num_replicas=1):
        super().__init__()
        self._layer = torch.nn.Linear(observation_dim + action_dim, num_replicas)

    def forward(self, observation, action):
        return self._layer(torch.cat([observation, action], dim=-1))


@pytest.mark.parametrize('precision', ['bfloat16', 'float32'])
def test_bfloat16_warns_naming_a_network_of_ones_own_that_it_does_not_reach(
    tmp_path, caplog, precision
):
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS + BF16)
    config = TrainerConfig(
        algorithm_ctor=functools.partial(SacAlgorithm, critic_network_ctor=CriticOfItsOwn),
        precision=precision,
    )
    with caplog.at_level('WARNING'), Trainer(config, str(tmp_path / 'run')) as trainer:
        # The trainer sets the run's precision on alf_lite's networks (the actor here).
        dtypes = {
            m.compute_dtype for m in trainer.algorithm.modules() if hasattr(m, 'compute_dtype')
        }
        assert dtypes == {torch.bfloat16 if precision == 'bfloat16' else None}
    named = 'SacAlgorithm.critic_network_ctor (CriticOfItsOwn)'
    assert (named in caplog.text) == (precision == 'bfloat16'), caplog.text
    # The actor is alf_lite's: the precision reaches it.
    assert 'actor_network_ctor' not in caplog.text


def test_bfloat16_same_seed_same_progress_csv_and_its_checkpoint_resumes(tmp_path):
    train(tmp_path / 'a', *BF16, 'TrainerConfig.num_env_steps = 400')
    train(tmp_path / 'b', *BF16, 'TrainerConfig.num_env_steps = 400')
    rows = read_csv(tmp_path / 'a' / 'progress.csv')
    assert len(rows) >= 4 and rows == read_csv(tmp_path / 'b' / 'progress.csv')
    assert rows[-1]['train/critic_loss'] != ''
    # Resume the bfloat16 run; its checkpoints hold float32 tensors only.
    train(tmp_path / 'a', *BF16, 'TrainerConfig.num_env_steps = 600')
    resumed = read_csv(tmp_path / 'a' / 'progress.csv')
    assert int(resumed[-1]['env_steps']) == 600 and resumed[: len(rows)] == rows
    state, _ = ckpt.load_checkpoint(latest_checkpoint(str(tmp_path / 'a' / 'checkpoints')))
    floats = [v for v in state['algorithm']['module'].values() if torch.is_tensor(v)]
    assert all(v.dtype == torch.float32 for v in floats if v.is_floating_point())


def test_evaluation_compares_q_with_the_return_received_before_falls(tmp_path, monkeypatch):
    import alf_lite.trainer

    results = []

    class Recorded(alf_lite.trainer.TerminationValues):
        def result(self):
            results.append(super().result())
            return results[-1]

    monkeypatch.setattr(alf_lite.trainer, 'TerminationValues', Recorded)
    # Hopper's untrained policy falls within tens of steps: terminated episodes.
    train(
        tmp_path,
        "create_environment.env_name = 'Hopper-v5'",
        'TrainerConfig.num_env_steps = 300',
        'TrainerConfig.initial_collect_steps = 100',
        'TrainerConfig.eval_interval = 300',
        'TrainerConfig.num_eval_episodes = 3',
    )
    rows = read_csv(tmp_path / 'progress.csv')
    evals = [r for r in rows if r['eval/QNearTermination']]
    assert len(evals) == 2  # at 0 and 300 env steps
    # Rewards near a fall are about 1 per step: received returns of a few units.
    assert all(0 < float(r['eval/ReturnNearTermination']) < 20 for r in evals)
    # Each row holds its evaluation's critics' Q and received return.
    assert len(results) == 2 and None not in results
    for row, (q, received) in zip(evals, results):
        assert float(row['eval/QNearTermination']) == pytest.approx(q, rel=1e-6)
        assert float(row['eval/ReturnNearTermination']) == pytest.approx(received, rel=1e-6)
    assert results[0][0] != results[1][0]  # Q of the untrained critic, then of a trained one


def test_stop_when_ends_training_at_that_evaluation_with_a_checkpoint(tmp_path):
    parse_config(
        [os.path.join(EXAMPLES, 'common', 'sac.gin')],
        POINT_PARAMS
        + ['TrainerConfig.num_env_steps = 3000', 'TrainerConfig.summary_interval = 1000'],
    )
    seen = []

    def second_evaluation(last_eval):
        seen.append(last_eval)
        return len(seen) == 2

    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        assert trainer.last_eval == {} and trainer.env_steps == 0
        result = trainer.train(stop_when=second_evaluation)
        # Evaluations at 0 and 500 env steps; 500 is no summary or checkpoint step.
        assert trainer.env_steps == 500 and trainer.num_updates == 300
        assert result == trainer.last_eval == seen[-1]
        assert set(result) >= {'eval/AverageReturn', 'eval/AverageEpisodeLength'}
        assert trainer.algorithm.training is False  # evaluated last
    assert os.path.basename(latest_checkpoint(str(tmp_path / 'checkpoints'))) == 'ckpt-500'
    rows = read_csv(tmp_path / 'progress.csv')
    assert [int(r['env_steps']) for r in rows] == [0, 500]


def tiny_sac_pendulum(*params):
    """Parse examples/sac_pendulum.gin for a run of a few steps: ``params`` say how many."""
    parse_config(
        [os.path.join(EXAMPLES, 'sac_pendulum.gin')],
        [
            'TrainerConfig.initial_collect_steps = 5',
            'TrainerConfig.num_eval_episodes = 2',
            'TrainerConfig.mini_batch_size = 8',
            *params,
        ],
    )


def train_three_compiled_runs(tmp_path, params):
    """One alone, one of another batch size, then the first again after it."""
    try:
        for name, batch_size in (('alone', 8), ('other', 9), ('after_other', 8)):
            if name != 'after_other':
                torch._dynamo.reset()  # as in a new process; 'after_other' follows 'other'
            tiny_sac_pendulum(*params, f'TrainerConfig.mini_batch_size = {batch_size}')
            with Trainer(TrainerConfig(), str(tmp_path / name)) as trainer:
                trainer.train()
    finally:
        torch._dynamo.reset()


# torch.compile's first use imports torch.jit, which warns of its own deprecations.
@pytest.mark.filterwarnings('ignore::DeprecationWarning')
def test_a_compiled_run_after_another_in_the_process_gives_the_numbers_of_one_alone(tmp_path):
    # torch.compile keeps a few versions of each network function for the whole process
    # (8; 4 here, what one of these runs compiles of the critic), one per shape: those of
    # an earlier run's batch size used them up, and the next run went on eagerly.
    try:
        check_compiles(torch.device('cpu'))
    except ValueError as e:
        pytest.skip(str(e))
    params = [
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.compile = True',
        'TrainerConfig.num_env_steps = 30',
        'TanhNormalActorNetwork.hidden_layers = (16, 16)',
        'CriticNetwork.hidden_layers = (16, 16)',
    ]
    # torch's own patch: monkeypatch's undo leaves its config without the setting.
    with torch._dynamo.config.patch(recompile_limit=4):
        train_three_compiled_runs(tmp_path, params)
    alone, after_other = tmp_path / 'alone', tmp_path / 'after_other'
    assert read_csv(after_other / 'progress.csv') == read_csv(alone / 'progress.csv')
    weights, expected = final_weights(after_other), final_weights(alone)
    tensors = [k for k, v in expected.items() if torch.is_tensor(v)]
    assert all(torch.equal(weights[k], expected[k]) for k in tensors)


def test_a_finished_trainer_is_freed_without_the_cycle_collector(tmp_path):
    """A reference cycle through the trainer kept its buffer (and on a GPU its CUDA
    graphs, which must not be freed while another graph is captured) until the
    cycle collector happened to run."""
    import weakref

    import torch._inductor.config  # noqa: F401  (imported on a first run: imported first here)

    tiny_sac_pendulum('TrainerConfig.num_env_steps = 40', 'TrainerConfig.eval_interval = 20')
    gc.collect()
    gc.disable()
    try:
        with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
            trainer.train()
        freed = [weakref.ref(x) for x in (trainer, trainer._runner, trainer._replay_buffer)]
        del trainer
        assert [ref() is None for ref in freed] == [True, True, True]
    finally:
        gc.enable()


def test_restoring_a_checkpoint_drops_the_captured_update_graphs(tmp_path):
    """Loading optimizer states replaces their tensors: a graph captured before
    would read freed memory, so a second train() on one trainer captures anew."""
    tiny_sac_pendulum('TrainerConfig.num_env_steps = 20')
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        trainer.train()
        # As a GPU run holds them after its captures (the CPU never captures).
        trainer._runner._graphs[0] = 'captured before the restore'
        trainer._runner._eager_updates[0] = 99
        trainer.train()  # restores ckpt-20, then finds nothing left to train
        assert trainer._runner._graphs == {} and trainer._runner._eager_updates == {}


def test_an_evaluation_step_copies_to_the_device_once_and_back_once(tmp_path, monkeypatch):
    """The action and the critics' Q of it come back together: one copy each way per
    eval step (before: the observation went up twice and the action once more)."""
    from alf_lite.summary import Summary

    tiny_sac_pendulum(
        'TrainerConfig.num_env_steps = 10', 'create_environment.max_episode_steps = 7'
    )
    calls = {'to': 0, 'cpu': 0}
    real_to, real_cpu = torch.Tensor.to, torch.Tensor.cpu

    def to(self, *args, **kwargs):
        if any(isinstance(a, (torch.device, str)) for a in (*args, *kwargs.values())):
            calls['to'] += 1
        return real_to(self, *args, **kwargs)

    def cpu(self, *args, **kwargs):
        calls['cpu'] += 1
        return real_cpu(self, *args, **kwargs)

    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        summary = Summary(str(tmp_path), -1)
        try:
            with monkeypatch.context() as patched:
                patched.setattr(torch.Tensor, 'to', to)
                patched.setattr(torch.Tensor, 'cpu', cpu)
                trainer._evaluate_and_write(summary, {})
        finally:
            summary.close()
    # 7 steps; the env reads each action on the host once more (.cpu(), a no-op
    # for an action already there).
    assert calls == {'to': 7, 'cpu': 2 * 7}


def test_training_again_after_a_signal_goes_on_to_the_end(tmp_path):
    with build(tmp_path, 'TrainerConfig.num_env_steps = 300') as trainer:

        def signal_at_the_first_evaluation(last_eval):
            if trainer.env_steps == 0:
                os.kill(os.getpid(), signal.SIGINT)
            return False

        with pytest.raises(TrainingInterrupted):
            trainer.train(stop_when=signal_at_the_first_evaluation)
        assert trainer.env_steps == 1
        # No signal arrives this time: the one before does not stop it.
        trainer.train()
        assert trainer.env_steps == 300
    assert os.path.basename(latest_checkpoint(str(tmp_path / 'checkpoints'))) == 'ckpt-300'


def test_stop_when_at_the_first_evaluation_checkpoints_the_untrained_state(tmp_path):
    tiny_sac_pendulum(
        'TrainerConfig.num_env_steps = 20', 'create_environment.max_episode_steps = 7'
    )
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        result = trainer.train(stop_when=lambda last_eval: True)
        assert trainer.env_steps == 0 and trainer.num_updates == 0
        assert result == trainer.last_eval != {}
    # The evaluation at 0 env steps stopped the run: its checkpoint is the only one.
    assert os.listdir(tmp_path / 'checkpoints') == ['ckpt-0']
    assert [r['env_steps'] for r in read_csv(tmp_path / 'progress.csv')] == ['0']


def test_training_starts_once_the_buffer_holds_one_window(tmp_path, monkeypatch):
    # No random steps and a buffer of exactly one window of 3 rows per env: the
    # updates of iteration k see the k rows stored so far (the row of the step then
    # under way included), so they start at iteration 3 and run at each one after it.
    tiny_sac_pendulum(
        'TrainerConfig.initial_collect_steps = 0',
        'TrainerConfig.mini_batch_length = 3',
        'TrainerConfig.replay_buffer_length = 3',
        'TrainerConfig.num_env_steps = 14',
        'create_environment.max_episode_steps = 7',
    )
    updates_at = []
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        buffer = trainer._replay_buffer
        record_each_call(
            monkeypatch,
            trainer._algorithm,
            'train_step',
            lambda *_: updates_at.append(buffer.total_added),
        )
        trainer.train()
        assert trainer.num_updates == 12
    assert updates_at == list(range(3, 15))


@pytest.mark.parametrize('defer', [False, True], ids=['at-once', 'deferred'])
def test_a_non_finite_loss_names_the_env_step_of_its_update_in_both_check_modes(tmp_path, defer):
    # Every reward is huge, so the critic loss of the first update is inf: that update
    # runs with env step 6, the first step after more than initial_collect_steps = 5
    # were stored. A CPU run checks each loss as it is computed (the default there)
    # and stops before that optimizer step; a deferred check (a GPU's default) skips
    # the update and every one after it and stops at the next summary, at 20.
    # Either way the message names the same env step and update.
    tiny_sac_pendulum(
        "create_environment.env_name = 'alf_test/HugeReward-v0'",
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 100',
        'TrainerConfig.summary_interval = 20',
        *(['TrainerConfig.defer_non_finite_checks = True'] if defer else []),
    )
    stopped_at = 20 if defer else 6
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        with pytest.raises(
            TrainingError,
            match=r'the critic loss is inf at env step 6 \(update 1\)'
            + (
                '; its optimizer step and every later one were skipped'
                if defer
                else '; the optimizer step was not taken'
            ),
        ):
            trainer.train()
        assert trainer.env_steps == stopped_at
        assert trainer.num_updates == (15 if defer else 0)
    assert os.listdir(tmp_path / 'checkpoints') == [f'last_good-{stopped_at}']


def test_a_deferred_stop_at_a_first_sgd_step_keeps_the_state_from_before_it(tmp_path):
    # The critic loss of the first update (env step 6) is inf, and the critic's optimizer
    # is a fused SGD with momentum, whose buffers its first step makes: skipped, it leaves
    # them uninitialised (often not finite). The last-good state at the summary at 20
    # holds the critic's optimizer as before that step, with no buffers.
    tiny_sac_pendulum(
        "create_environment.env_name = 'alf_test/HugeReward-v0'",
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 100',
        'TrainerConfig.summary_interval = 20',
        'TrainerConfig.defer_non_finite_checks = True',
        'SacAlgorithm.critic_optimizer = @critic/SGD',
        'critic/SGD.lr = 1e-3',
        'critic/SGD.momentum = 0.9',
        'critic/SGD.fused = True',
    )
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        with pytest.raises(
            TrainingError,
            match=r'the critic loss is inf at env step 6 \(update 1\); its optimizer step and '
            r'every later one were skipped, so .*last_good-20 holds',
        ):
            trainer.train()
    state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / 'last_good-20'))
    assert state['algorithm']['optimizers']['critic']['state'] == {}


def test_train_again_after_a_stop_before_any_checkpoint_is_refused_changing_nothing(tmp_path):
    # The critic loss of the first update (env step 6) is inf, long before the first
    # checkpoint: no checkpoint holds the state the trainer was left in.
    tiny_sac_pendulum(
        "create_environment.env_name = 'alf_test/HugeReward-v0'",
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 100',
    )
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        with pytest.raises(TrainingError, match='the critic loss is inf'):
            trainer.train()
        rows = read_csv(tmp_path / 'progress.csv')
        with pytest.raises(TrainingError, match='trained before .* stopped without a checkpoint'):
            trainer.train()
        assert trainer.env_steps == 6
    assert read_csv(tmp_path / 'progress.csv') == rows and len(rows) == 1
    assert os.listdir(tmp_path / 'checkpoints') == ['last_good-6']


def test_a_signal_as_the_last_good_state_reads_the_episodes_still_keeps_it(tmp_path, monkeypatch):
    # The critic loss of the first update (env step 6) is inf; a SIGTERM comes while the
    # last-good state asks the training envs for their episodes, a call that ends within
    # its patience.
    tiny_sac_pendulum(
        "create_environment.env_name = 'alf_test/HugeReward-v0'",
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 100',
    )
    sigterm_as_the_training_envs_give_episodes(monkeypatch)
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        with pytest.raises(TrainingError, match='the critic loss is inf.* saved in .*last_good-6'):
            trainer.train()
    assert os.listdir(tmp_path / 'checkpoints') == ['last_good-6']
    state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / 'last_good-6'))
    assert state['collection'] is not None  # the envs gave their episodes


def test_the_events_are_synced_before_each_checkpoint(tmp_path, monkeypatch):
    from alf_lite.summary import Summary

    tiny_sac_pendulum(
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 40',
        'TrainerConfig.checkpoint_interval = 20',
    )
    checkpoints_at_sync = []
    sync = Summary.sync

    def recording_sync(self):
        made = os.path.isdir(tmp_path / 'checkpoints')
        checkpoints_at_sync.append(sorted(os.listdir(tmp_path / 'checkpoints')) if made else [])
        sync(self)

    monkeypatch.setattr(Summary, 'sync', recording_sync)
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        trainer.train()
    assert checkpoints_at_sync == [[], ['ckpt-20']]
    assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['ckpt-20', 'ckpt-40']


def test_train_after_close_is_refused_writing_nothing(tmp_path):
    # stop_when ended it before num_env_steps: a train() again would go on, but the envs
    # were stopped by close().
    tiny_sac_pendulum(
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 40',
        'TrainerConfig.eval_interval = 10',
    )
    trainer = Trainer(TrainerConfig(), str(tmp_path))
    trainer.train(stop_when=lambda scalars: trainer.env_steps >= 10)
    trainer.close()
    written = {p: os.stat(p).st_mtime_ns for p in tmp_path.rglob('*')}
    with pytest.raises(TrainingError, match='was closed, which stopped its envs: build a new'):
        trainer.train()
    assert {p: os.stat(p).st_mtime_ns for p in tmp_path.rglob('*')} == written
    assert trainer.env_steps == 10


def hanging_sac_pendulum(tmp_path, monkeypatch, *params):
    """``tiny_sac_pendulum`` of 300 steps in an env process that hangs after the checkpoint at
    100, without step_timeout; returns the file the env writes as it starts to hang."""
    import hanging_env

    marker = tmp_path / 'hanging'
    monkeypatch.setenv(hanging_env.MARKER_VARIABLE, str(marker))
    tiny_sac_pendulum(
        "TrainerConfig.device = 'cpu'",
        "create_environment.env_name = 'hanging_env:alf_lite_tests/HangsAfterCheckpoint-v0'",
        'create_environment.use_subprocesses = True',
        'create_environment.step_timeout = None',
        'TrainerConfig.num_env_steps = 300',
        'TrainerConfig.checkpoint_interval = 100',
        *params,
    )
    return marker


def test_train_again_after_a_signal_stopped_the_envs_is_refused_writing_nothing(
    tmp_path, monkeypatch
):
    # Ctrl-C while the env process hangs in its step ends that call once its patience is
    # over, and stops the env processes: a train() again is refused as after close(), not
    # failed by the closed vector env once train() began writing.
    import alf_lite.trainer as trainer_module

    monkeypatch.setattr(trainer_module, 'SIGNALLED_STEP_PATIENCE_S', 0.5)
    marker = hanging_sac_pendulum(tmp_path, monkeypatch)
    root_dir = tmp_path / 'run'

    def interrupt_once_hanging():
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    with Trainer(TrainerConfig(), str(root_dir)) as trainer:
        threading.Thread(target=interrupt_once_hanging, daemon=True).start()
        with pytest.raises(TrainingInterrupted):
            trainer.train()
        assert marker.exists() and trainer.env_steps < 300
        written = {p: os.stat(p).st_mtime_ns for p in root_dir.rglob('*')}
        with pytest.raises(TrainingError, match='were stopped .*build a new Trainer'):
            trainer.train()
        assert {p: os.stat(p).st_mtime_ns for p in root_dir.rglob('*')} == written


def test_a_signal_during_the_updates_ends_a_step_that_hangs_meanwhile(tmp_path, monkeypatch):
    # The envs step in their processes while the updates run, in no env call: a signal
    # then is only recorded, and the step it was sent with hangs. Waiting for that step
    # would wait for good (no step_timeout); it is abandoned, as a signal in it would.
    import alf_lite.trainer as trainer_module

    monkeypatch.setattr(trainer_module, 'SIGNALLED_STEP_PATIENCE_S', 0.5, raising=False)
    marker = hanging_sac_pendulum(tmp_path, monkeypatch, 'TrainerConfig.unroll_length = 1')
    updates = Trainer._train_iteration
    signalled = []

    def update_once_the_sent_step_hangs(trainer):
        # Until the env process answers the step just sent, or says it hangs in it.
        answer = trainer._env._env.parent_pipes[0]
        while not signalled and not answer.poll(0.01):
            if marker.exists():
                signalled.append(trainer.env_steps)
                os.kill(os.getpid(), signal.SIGINT)
        updates(trainer)

    monkeypatch.setattr(Trainer, '_train_iteration', update_once_the_sent_step_hangs)
    root_dir = tmp_path / 'run'
    with Trainer(TrainerConfig(), str(root_dir)) as trainer, fails_after(60):
        pids = [process.pid for process in trainer._env._env.processes]
        with pytest.raises(TrainingInterrupted):
            trainer.train()
    # Stopped at the step it hung in, whose updates were done: checkpointed there.
    assert len(signalled) == 1 and trainer.env_steps == signalled[0] > 100
    assert checkpoint_steps(root_dir) == [100, trainer.env_steps]
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_signal_during_the_updates_ends_an_in_process_step_that_hangs_after_them(
    tmp_path, monkeypatch
):
    # In process the iteration's last step runs after its updates: a signal during them is
    # only recorded, and the step begun afterwards is no call it could end. Without
    # step_timeout that step would hang for good; the signal, sent again once the patience
    # is over, ends it as one that the signal arrived in.
    import alf_lite.trainer as trainer_module

    monkeypatch.setattr(trainer_module, 'SIGNALLED_STEP_PATIENCE_S', 0.5, raising=False)
    marker = hanging_sac_pendulum(
        tmp_path,
        monkeypatch,
        'TrainerConfig.unroll_length = 1',
        'create_environment.use_subprocesses = False',
    )
    updates = Trainer._train_iteration
    signalled = []

    def signal_before_the_step_that_hangs(trainer):
        updates(trainer)
        # The env hangs in its 150th step (the env steps count its resets too), which this
        # iteration takes next.
        if trainer._env._env.envs[0].unwrapped._steps == 149 and not trainer._env._done[0]:
            signalled.append(trainer.env_steps)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Trainer, '_train_iteration', signal_before_the_step_that_hangs)
    root_dir = tmp_path / 'run'
    with Trainer(TrainerConfig(), str(root_dir)) as trainer, fails_after(60):
        with pytest.raises(TrainingInterrupted):
            trainer.train()
    assert len(signalled) == 1 and marker.exists()
    # Stopped in the step it hung in, whose updates were done: checkpointed before it.
    assert trainer.env_steps == signalled[0] > 100
    assert checkpoint_steps(root_dir) == [100, trainer.env_steps]


def test_a_checkpoint_call_that_hangs_after_a_signal_is_ended_once_its_patience_is_over(
    tmp_path, monkeypatch
):
    # A signal during the updates, in no env call; the stop's checkpoint then asks the
    # training envs for their episodes, a call begun after the signal, and that call hangs.
    # Each env call once a signal came is given its patience: this one is ended, and the
    # state is kept without the episodes.
    import alf_lite.trainer as trainer_module

    monkeypatch.setattr(trainer_module, 'SIGNALLED_STEP_PATIENCE_S', 0.3)
    tiny_sac_pendulum(
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 100',
        'TrainerConfig.checkpoint_interval = 1000',
    )
    updates = Trainer._train_iteration
    signalled = []

    def signal_during_the_updates(trainer):
        updates(trainer)
        if trainer.env_steps >= 30 and not signalled:
            signalled.append(trainer.env_steps + 1)  # the step the updates count as after
            os.kill(os.getpid(), signal.SIGINT)

    real_create = trainer_module.create_environment
    made = []

    def create_hanging_as_they_give_episodes(*args, **kwargs):
        env = real_create(*args, **kwargs)
        made.append(env)
        if len(made) == 1:  # the training envs
            real_call = env._env.call

            def call(name, *call_args, **call_kwargs):
                while name == 'alf_lite_episode_record' and signalled:
                    time.sleep(0.01)
                return real_call(name, *call_args, **call_kwargs)

            monkeypatch.setattr(env._env, 'call', call)
        return env

    monkeypatch.setattr(Trainer, '_train_iteration', signal_during_the_updates)
    monkeypatch.setattr(trainer_module, 'create_environment', create_hanging_as_they_give_episodes)
    root_dir = tmp_path / 'run'
    with Trainer(TrainerConfig(), str(root_dir)) as trainer, fails_after(60):
        with pytest.raises(TrainingInterrupted):
            trainer.train()
    assert checkpoint_steps(root_dir) == signalled
    state, _ = ckpt.load_checkpoint(str(root_dir / 'checkpoints' / f'ckpt-{signalled[0]}'))
    assert state['collection'] is None  # the training envs were stopped


def test_train_again_after_a_deferred_non_finite_loss_goes_on_from_the_checkpoint(tmp_path):
    # One critic loss is inf (at env step 31, update 26): the deferred check stops the run
    # at the summary at 40. A train() again on the same trainer resumes from ckpt-20, as a
    # new trainer would, and trains to the end: the failure it stopped for is not reported
    # again, nor its last-good state written over.
    tiny_sac_pendulum(
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 60',
        'TrainerConfig.summary_interval = 20',
        'TrainerConfig.checkpoint_interval = 20',
        'TrainerConfig.defer_non_finite_checks = True',
    )
    checkpoints = tmp_path / 'checkpoints'
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        algorithm = trainer._algorithm
        optimizer_step = algorithm.optimizer_step
        made_inf = []

        def inf_once(name, loss):
            if name == 'critic' and trainer.env_steps >= 30 and not made_inf:
                made_inf.append(trainer.num_updates + 1)
                loss = loss * float('inf')
            optimizer_step(name, loss)

        algorithm.optimizer_step = inf_once
        with pytest.raises(TrainingError, match=r'the critic loss is inf at env step 31 '):
            trainer.train()
        assert made_inf == [26] and trainer.env_steps == 40
        last_good = (checkpoints / 'last_good-40' / ckpt.MODEL_FILE).read_bytes()
        trainer.train()
        assert trainer.env_steps == 60 and trainer.num_updates == 55
    assert sorted(os.listdir(checkpoints)) == ['ckpt-20', 'ckpt-40', 'ckpt-60', 'last_good-40']
    assert (checkpoints / 'last_good-40' / ckpt.MODEL_FILE).read_bytes() == last_good
    # Its updates were taken: the weights moved on from ckpt-20's.
    weights = [
        torch.load(checkpoints / name / ckpt.MODEL_FILE)['algorithm']['module']
        for name in ('ckpt-20', 'ckpt-60')
    ]
    name = '_actor._encoder.0.weight'
    assert not torch.equal(weights[0][name], weights[1][name])


def test_batch_norm_statistics_made_non_finite_by_the_bad_batch_are_named_as_such(tmp_path):
    # The forward pass of the critic loss took the bad batch into the running statistics
    # before the loss was checked: no last-good state, and the message says which buffer.
    parse_config(
        [os.path.join(EXAMPLES, 'ddpg_pendulum.gin')],
        [
            'TrainerConfig.initial_collect_steps = 200',
            'TrainerConfig.num_env_steps = 240',
            'TrainerConfig.num_eval_episodes = 1',
            'TrainerConfig.mini_batch_size = 32',
            'DeterministicActorNetwork.hidden_layers = (32,)',
            'DeterministicActorNetwork.batch_norm = True',
            'CriticNetwork.hidden_layers = (32, 32)',
            'CriticNetwork.action_input_layer = 1',
            'CriticNetwork.batch_norm = True',
            'critic/Adam.lr = 1e30',
        ],
    )
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        with pytest.raises(TrainingError) as error:
            trainer.train()
    message = str(error.value)
    found = re.search(r'no last-good state was kept: (\w+) (\S+) is not finite', message)
    assert found, message
    assert found.groups() == ('buffer', found.group(2)), message
    assert found.group(2).endswith(('running_mean', 'running_var')), message


@pytest.mark.parametrize('defer', [False, True], ids=['at-once', 'deferred'])
def test_a_stop_that_cannot_keep_its_state_still_names_the_loss(tmp_path, defer):
    # A NaN gradient of a finite critic loss (which no loss check sees) makes the
    # critic's weights NaN at update 4; the actor loss computed through them is NaN. The
    # last-good state cannot be saved, and the stop says so, naming that loss: at once,
    # or at the next summary (env step 20) with the check deferred.
    tiny_sac_pendulum(
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 100',
        'TrainerConfig.summary_interval = 20',
        f'TrainerConfig.defer_non_finite_checks = {defer}',
    )
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        weight = next(trainer._algorithm._critic.parameters())
        calls = []

        def nan_after_three(grad):
            calls.append(1)
            return grad * float('nan') if len(calls) > 3 else grad

        weight.register_hook(nan_after_three)
        with pytest.raises(TrainingError) as error:
            trainer.train()
    message = str(error.value)
    found = re.search(
        r'^the actor loss is nan at env step (\d+) \(update 4\); no last-good', message
    )
    assert found, message
    stopped_at = 20 if defer else int(found.group(1))
    assert f'is not finite at env step {stopped_at}, so no checkpoint was written' in message
    assert not (tmp_path / 'checkpoints').exists() or os.listdir(tmp_path / 'checkpoints') == []


@pytest.mark.parametrize(
    'optimizer, key, why',
    [
        ('Adam', 'exp_avg_sq', r'Adam: a gradient overflowed its second moment'),
        # It blamed Adam's second moment for any optimizer's state.
        ('RMSprop', 'square_avg', r'square_avg: a gradient overflowed it'),
    ],
)
def test_optimizer_state_that_is_not_finite_is_never_checkpointed(tmp_path, optimizer, key, why):
    # A gradient so large that a squared-gradient average overflows leaves the weights
    # finite and the average inf (here set so after the update at env step 150). A resume
    # would refuse such a checkpoint as damaged, so the run stops at its next one, naming it.
    tiny_sac_pendulum(
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 400',
        'TrainerConfig.checkpoint_interval = 100',
        f'SacAlgorithm.critic_optimizer = @critic/{optimizer}',
        f'critic/{optimizer}.lr = 1e-3',
    )
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        critic = trainer._algorithm.optimizers['critic']
        assert type(critic).__name__ == optimizer

        def overflow_after_env_step_150(optimizer, args, kwargs):
            if trainer.env_steps >= 150:
                optimizer.state[optimizer.param_groups[0]['params'][1]][key][0] = float('inf')

        critic.register_step_post_hook(overflow_after_env_step_150)
        with pytest.raises(TrainingError) as error:
            trainer.train()
    assert re.match(
        rf'optimizer state critic\.1\.{key} is not finite at env step 200 \({why}',
        str(error.value),
    )
    assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['ckpt-100']


def test_a_non_finite_action_stops_the_run_before_any_env_steps_with_it(tmp_path):
    # The observations are finite (an env's are checked); the policy's action turns NaN
    # at env step 30 (as after its weights did). No env is stepped with it.
    tiny_sac_pendulum(
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 100',
        'TrainerConfig.initial_collect_steps = 0',
    )
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        rollout_step = trainer._algorithm.rollout_step

        def nan_from_env_step_30(time_step):
            action = rollout_step(time_step)
            return action * float('nan') if trainer.env_steps >= 30 else action

        trainer._algorithm.rollout_step = nan_from_env_step_30
        with pytest.raises(TrainingError) as error:
            trainer.train()
        assert trainer.env_steps == 30
    assert re.match(
        r"Environment 'Pendulum-v1' \(env 0 of 1\): the action of step \d+ is not finite: "
        r'\[nan\]\. .*The observations it acted on were finite',
        str(error.value),
    ), str(error.value)


def test_eval_episodes_played_in_rounds_on_fewer_envs_give_the_same_rows(tmp_path):
    # Hopper's untrained policy falls within tens of steps: episodes of different lengths,
    # some terminated, so rounds of 2 envs end at other steps than 5 envs side by side.
    params = [
        "create_environment.env_name = 'Hopper-v5'",
        'TrainerConfig.num_env_steps = 300',
        'TrainerConfig.initial_collect_steps = 100',
        'TrainerConfig.eval_interval = 300',
        'TrainerConfig.num_eval_episodes = 5',
    ]
    train(tmp_path / 'side_by_side', *params)
    with build(tmp_path / 'rounds', *params, 'TrainerConfig.num_eval_environments = 2') as trainer:
        assert trainer._eval_env.num_envs == 2
        trainer.train()
    rows = read_csv(tmp_path / 'side_by_side' / 'progress.csv')
    in_rounds = read_csv(tmp_path / 'rounds' / 'progress.csv')
    assert [r['env_steps'] for r in in_rounds] == [r['env_steps'] for r in rows]
    evals = [i for i, row in enumerate(rows) if row['eval/AverageReturn']]
    assert len(evals) == 2 and all(rows[i]['eval/QNearTermination'] for i in evals)
    for row, row_in_rounds in zip(rows, in_rounds):
        for name, value in row.items():
            if name.startswith('eval/') and value:
                # The same episodes; the policy's float32 products on a batch of 2 rows
                # round otherwise than on 5 (a wrong seed or a lost episode is far off).
                assert float(row_in_rounds[name]) == pytest.approx(float(value), rel=1e-6), name
            else:
                assert row_in_rounds[name] == value, name


@pytest.mark.parametrize('bad', [0, -2, True, 2.0, '2'])
def test_num_eval_environments_that_is_no_positive_integer_is_refused(bad):
    with pytest.raises(ValueError, match='num_eval_environments must be a positive integer'):
        TrainerConfig(num_eval_environments=bad)


@pytest.mark.parametrize('bad', [0, -1, True, 2.0, '2'])
def test_max_checkpoints_to_keep_that_is_no_positive_integer_is_refused(bad):
    with pytest.raises(ValueError, match='max_checkpoints_to_keep must be a positive integer'):
        TrainerConfig(max_checkpoints_to_keep=bad)


def test_max_checkpoints_to_keep_keeps_the_newest_and_a_resume_goes_on_from_the_latest(
    tmp_path, caplog
):
    params = [
        'TrainerConfig.checkpoint_interval = 100',
        'TrainerConfig.eval_interval = 200',
        'TrainerConfig.summary_interval = 100',
        'TrainerConfig.max_checkpoints_to_keep = 2',
    ]
    train(tmp_path / 'kept', 'TrainerConfig.num_env_steps = 400', *params)
    checkpoints = tmp_path / 'kept' / 'checkpoints'
    assert sorted(os.listdir(checkpoints)) == ['ckpt-300', 'ckpt-400']
    assert (checkpoints / 'ckpt-400' / ckpt.REPLAY_BUFFER_FILE).is_file()
    with caplog.at_level(logging.INFO):
        train(tmp_path / 'kept', 'TrainerConfig.num_env_steps = 600', *params[:-1])
    # Resumed from ckpt-400; without the setting every checkpoint written since is kept.
    assert sorted(os.listdir(checkpoints)) == ['ckpt-300', 'ckpt-400', 'ckpt-500', 'ckpt-600']
    assert 'removed the old checkpoint' not in caplog.text
    train(tmp_path / 'all', 'TrainerConfig.num_env_steps = 600', *params[:-1])
    assert sorted(os.listdir(tmp_path / 'all' / 'checkpoints')) == [
        f'ckpt-{step}' for step in range(100, 700, 100)
    ]
    # Training on is the same whether older checkpoints were removed or not.
    assert read_csv(tmp_path / 'kept' / 'progress.csv') == read_csv(
        tmp_path / 'all' / 'progress.csv'
    )
    train(
        tmp_path / 'kept',
        'TrainerConfig.num_env_steps = 700',
        *params[:-2],
        ('TrainerConfig.max_checkpoints_to_keep = 1'),
    )
    assert sorted(os.listdir(checkpoints)) == ['ckpt-700']


def test_no_more_eval_envs_than_episodes_are_built():
    assert TrainerConfig(num_eval_episodes=3, num_eval_environments=8).num_eval_environments == 3
    assert TrainerConfig(num_eval_episodes=3).num_eval_environments == 3
    assert TrainerConfig(num_eval_episodes=9, num_eval_environments=2).num_eval_environments == 2


def test_cuda_graphs_without_a_gpu_are_refused_before_any_env_is_made(tmp_path, monkeypatch):
    import alf_lite.trainer as trainer_module

    made = []
    monkeypatch.setattr(trainer_module, 'create_environment', lambda **kwargs: made.append(kwargs))
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS)
    with pytest.raises(ValueError, match=r'cuda_graph=True needs .* it is on cpu\. Set Trainer'):
        Trainer(TrainerConfig(device='cpu', cuda_graph=True), str(tmp_path / 'run'))
    assert made == [] and not (tmp_path / 'run').exists()


@pytest.mark.parametrize(
    'device, error, message',
    [
        ('gpu', ValueError, "TrainerConfig.device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"),
        ('cuda:7', DeviceUnavailableError, "TrainerConfig.device 'cuda:7' was asked for, but"),
    ],
)
def test_a_device_that_is_misspelt_or_not_here_is_refused_naming_its_setting(
    tmp_path, device, error, message
):
    if device.startswith('cuda') and torch.cuda.device_count() > 7:
        pytest.skip('this machine has a cuda:7')
    parse_config([os.path.join(EXAMPLES, 'common', 'sac.gin')], POINT_PARAMS)
    with pytest.raises(error, match=re.escape(message)):
        Trainer(TrainerConfig(device=device), str(tmp_path / 'run'))
    assert not (tmp_path / 'run').exists()


def files_and_contents(directory):
    return {
        os.path.relpath(os.path.join(parent, name), directory): open(
            os.path.join(parent, name), 'rb'
        ).read()
        for parent, _, names in os.walk(directory)
        for name in names
    }


@pytest.mark.parametrize('linked', ['progress.csv', os.path.join('checkpoints', 'ckpt-400')])
def test_a_trainer_refuses_a_run_that_links_to_what_it_would_write_as_train_does(tmp_path, linked):
    # README: train refuses such a run; the Trainer, which writes, does so too.
    archive, run = tmp_path / 'archive', tmp_path / 'run'
    train(archive, 'TrainerConfig.num_env_steps = 400', 'TrainerConfig.checkpoint_interval = 200')
    shutil.copytree(archive, run)
    shutil.rmtree(run / linked) if (run / linked).is_dir() else os.remove(run / linked)
    os.symlink(archive / linked, run / linked)
    before = files_and_contents(archive)
    with pytest.raises(TrainingError, match=f'{run / linked} is a symbolic link'):
        train(run, 'TrainerConfig.num_env_steps = 600', 'TrainerConfig.checkpoint_interval = 200')
    assert files_and_contents(archive) == before
