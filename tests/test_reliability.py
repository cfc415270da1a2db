"""What happens when things go wrong: bad input, kills, signals, NaN, a full disk."""

import csv
import datetime
import logging
import math
import os
import pty
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
import torch

import alf_lite.all_configurables  # noqa: F401
import dropped_signal
import hanging_env
import huge_reward_env  # noqa: F401  (registers alf_lite_tests/HugeReward-v0)
import tensorboard_server
from alf_lite import checkpoint as ckpt
from alf_lite import signals as signals_module
from alf_lite import trainer as trainer_module
from alf_lite.config import parse_config, write_text_atomically
from alf_lite.environments import create_environment
from alf_lite.environments.suite_gym import (
    BatchedEnvironment,
    EnvironmentCrashedError,
    EnvironmentHungError,
    EpisodeReplayError,
    env_traceback,
)
from alf_lite.environments.watchdog import HUNG_ENV_EXIT_CODE
from alf_lite.run_dir import (
    MOVED_ASIDE,
    RunDir,
    RunDirLock,
    config_changed_since,
    latest_checkpoint,
)
from alf_lite.runs import EVAL_RETURN, MAX_LINE_CHARS, NONDETERMINISTIC_COLUMNS
from alf_lite.signals import (
    SAME_STOP_WITHIN_S,
    InterruptedInEnvCall,
    StopSignals,
    TrainingInterrupted,
)
from alf_lite.trainer import Trainer, TrainerConfig, TrainingError
from cli_helpers import (
    EXAMPLES,
    PENDULUM,
    REPO_ROOT,
    RUN_TIMEOUT_S,
    TINY,
    assert_ok,
    checkpoint_steps,
    copy_run,
    fails_after,
    run_python,
    run_train,
    run_with_file_size_limit,
    send_as_user,
    signal_on_import,
    sigterm_as_the_training_envs_give_episodes,
    start_in_own_session,
    start_train,
    train_command,
    train_env,
    tree_digest,
    with_prelude,
    with_read_only_rename,
)

SHORT = TINY + [
    'TrainerConfig.num_env_steps=400',
    'TrainerConfig.summary_interval=100',
    'TrainerConfig.eval_interval=200',
    'TrainerConfig.checkpoint_interval=200',
    'TrainerConfig.num_eval_episodes=1',
]


def resumed_from(root_dir, step):
    """The line train logs when it resumes from ``root_dir``'s checkpoint of ``step``."""
    return (
        f'resumed from {os.path.join(root_dir, "checkpoints", f"ckpt-{step}")} at {step} env steps'
    )


def steps_in_csv(root_dir):
    with open(os.path.join(root_dir, 'progress.csv'), newline='') as f:
        return [int(r['env_steps']) for r in csv.DictReader(f)]


# --- bad input: exit 2, a message naming the problem, nothing created or overwritten -----


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory):
    root_dir = tmp_path_factory.mktemp('finished') / 'run'
    assert_ok(run_train(train_command(root_dir, [PENDULUM], SHORT)))
    return root_dir


BAD_PARAMS = [
    (
        "TrainerConfig.num_env_steps='many'",
        "is 'many' (str), but 'num_env_steps' of 'TrainerConfig' takes int",
    ),
    ('TrainerConfig.mini_batch_size=-1', 'mini_batch_size must be positive'),
    ('TrainerConfig.replay_buffer_length=0', 'replay_buffer_length must be positive'),
    ('TrainerConfig.mini_batch_length=1', 'mini_batch_length must be >= 2'),
    ('TrainerConfig.initial_collect_steps=100000', 'initial_collect_steps must be in'),
    ('SacAlgorithm.target_update_tau=1.5', 'target_update_tau must be in (0, 1]'),
    ('SacAlgorithm.target_update_tau=0.0', 'target_update_tau must be in (0, 1]'),
    ("create_environment.env_name='CartPole-v1'", 'continuous bounded action space'),
    ("create_environment.env_name='Pendulum-v9'", "Closest registered ids: 'Pendulum-v1'"),
    ('TrainerConfig.replay_buffer_length=100000000000', 'bytes'),
    ('TrainerConfig.num_env_stepz=10', "Closest valid names: 'num_env_steps'"),
    ('TrainerConfg.random_seed=1', "'TrainerConfig'"),
    ('TrainerConfig.random_seed=(1', "Cannot parse --gin_param 'TrainerConfig.random_seed=(1'"),
    ('CriticNetwork.num_replicas=3', "'num_replicas' of 'CriticNetwork' in --gin_param"),
    ('TrainerConfig.torch_num_threads=100000', 'torch_num_threads must be at most 1024'),
]


@pytest.mark.parametrize(
    'param, message',
    BAD_PARAMS,
    ids=[p.split('=')[0] + '=' + p.split('=')[1][:12] for p, _ in BAD_PARAMS],
)
def test_bad_parameter_exits_2_and_creates_nothing(tmp_path, param, message):
    root_dir = tmp_path / 'new' / 'run'
    result = run_train(train_command(root_dir, [PENDULUM], SHORT + [param]))
    assert result.returncode == 2, result.stderr[-3000:]
    assert message in result.stderr, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr
    assert not (tmp_path / 'new').exists()


def test_more_torch_threads_than_usable_cores_are_warned_about(tmp_path):
    threads = len(os.sched_getaffinity(0)) + 1
    params = SHORT + [
        'TrainerConfig.num_env_steps=200',
        f'TrainerConfig.torch_num_threads={threads}',
    ]
    result = run_train(train_command(tmp_path / 'run', [PENDULUM], params))
    assert_ok(result)
    assert (
        f'TrainerConfig.torch_num_threads = {threads} is more than the {threads - 1} cores '
        'this process may use'
    ) in result.stderr, result.stderr[-3000:]
    within = ['TrainerConfig.num_env_steps=200', f'TrainerConfig.torch_num_threads={threads - 1}']
    result = run_train(train_command(tmp_path / 'run2', [PENDULUM], SHORT + within))
    assert_ok(result)
    assert 'torch_num_threads = ' not in result.stderr, result.stderr[-3000:]


def test_replay_buffer_too_large_says_bytes_needed_and_available(tmp_path):
    result = run_train(
        train_command(
            tmp_path / 'run',
            [PENDULUM],
            SHORT + ['TrainerConfig.replay_buffer_length=100000000000'],
        )
    )
    assert result.returncode == 2
    assert (
        '2500000000000 bytes' in result.stderr.replace(',', '') and 'available' in result.stderr
    ), result.stderr
    assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize(
    'param', ["TrainerConfig.num_env_steps='many'", 'SacAlgorithm.target_update_tau=2.0']
)
def test_bad_parameter_on_resume_leaves_the_run_untouched(finished_run, param):
    before = tree_digest(finished_run)
    result = run_train(train_command(finished_run, params=[param]))
    assert result.returncode == 2, result.stderr[-3000:]
    assert tree_digest(finished_run) == before


# Each appended to a finished run's progress.csv, and what the error then says of the file.
PROGRESS_DAMAGE = {
    'not text': (b'400,\xff\xfe\n', 'progress.csv is not text: utf-8 cannot decode its byte 0xff'),
    'a field over the csv limit': (
        b'500,"' + b'x' * 200_000 + b'"\n',
        'progress.csv, line 7: field larger than field limit',
    ),
    'a line over MAX_LINE_CHARS': (
        b'9' * (MAX_LINE_CHARS + 1) + b'\n',
        f'progress.csv, line 7: over {MAX_LINE_CHARS} characters long',
    ),
}


@pytest.mark.parametrize('damage', PROGRESS_DAMAGE)
def test_a_damaged_progress_csv_stops_the_resume_naming_it_and_changes_nothing(
    finished_run, tmp_path, damage
):
    root_dir = copy_run(finished_run, tmp_path)
    line, message = PROGRESS_DAMAGE[damage]
    with open(root_dir / 'progress.csv', 'ab') as f:
        f.write(line)
    before = tree_digest(root_dir)
    # No evaluation due at the checkpoint: nothing else reads progress.csv before the
    # summary that appends to it, once config.gin and the event files are written.
    params = ['TrainerConfig.num_env_steps=600', 'TrainerConfig.eval_interval=1000']
    result = run_train(train_command(root_dir, params=params))
    assert result.returncode == 2, result.stderr[-3000:]
    assert f'error: {root_dir / message}' in result.stderr, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr and 'mend the file' in result.stderr
    assert tree_digest(root_dir) == before


def test_missing_gin_file_and_syntax_error_are_named(tmp_path):
    result = run_train(train_command(tmp_path / 'a', [tmp_path / 'nothere.gin']))
    assert (
        result.returncode == 2 and 'nothere.gin' in result.stderr and 'not found' in result.stderr
    ), result.stderr
    bad = tmp_path / 'bad.gin'
    bad.write_text(f"include '{PENDULUM}'\nTrainerConfig.num_env_steps = )\n")
    result = run_train(train_command(tmp_path / 'b', [bad]))
    assert result.returncode == 2 and 'bad.gin, line 2' in result.stderr, result.stderr
    assert not (tmp_path / 'a').exists() and not (tmp_path / 'b').exists()


def test_root_dir_of_another_experiment_is_refused_then_start_over_moves_it(finished_run, tmp_path):
    # --start_over moves the run aside: work on a copy, the fixture is shared.
    finished_run = copy_run(finished_run, tmp_path)
    before = tree_digest(finished_run)
    ddpg = train_command(
        finished_run,
        [EXAMPLES / 'ddpg_pendulum.gin'],
        SHORT + ['DeterministicActorNetwork.hidden_layers=(32,)'],
    )
    result = run_train(ddpg)
    assert result.returncode == 2 and 'another experiment' in result.stderr, result.stderr
    assert '--start_over' in result.stderr
    assert tree_digest(finished_run) == before

    started = datetime.datetime.now().replace(microsecond=0)
    assert_ok(run_train(ddpg + ['--start_over']))
    moved = [p for p in os.listdir(finished_run.parent) if p.startswith('run.old-')]
    assert len(moved) == 1 and tree_digest(finished_run.parent / moved[0]) == before
    # Named with the time of the move.
    assert MOVED_ASIDE.search(moved[0]), moved
    moved_at = datetime.datetime.strptime(moved[0][len('run.old-') :], '%Y%m%d-%H%M%S')
    assert started <= moved_at <= datetime.datetime.now()
    assert 'DdpgAlgorithm' in (finished_run / 'config.gin').read_text()


@pytest.mark.parametrize('inner', ['sub', 'eval/sub'])
def test_a_new_run_inside_another_run_is_refused_naming_it_and_nothing_is_written(
    finished_run, tmp_path, inner
):
    # TensorBoard on the outer run would show the inner one as part of it.
    outer = copy_run(finished_run, tmp_path)
    before = tree_digest(tmp_path)
    root_dir = outer / inner
    for extra in ([], ['--start_over']):
        result = run_train(train_command(root_dir, [PENDULUM], SHORT) + extra)
        assert result.returncode == 2, result.stderr[-3000:]
        assert result.stderr.strip().splitlines()[-1] == (
            f'error: --root_dir {root_dir} is inside the run {outer} (a trainer wrote there: '
            'progress.csv, checkpoints or TensorBoard events): TensorBoard would show both runs '
            'as one, plot would not find this one below that one, and its --start_over would '
            f'move this one aside with it. Choose a --root_dir outside {outer}.'
        ), result.stderr[-3000:]
        assert tree_digest(tmp_path) == before and not root_dir.exists()


def test_a_run_already_inside_another_resumes_but_does_not_start_over(finished_run, tmp_path):
    outer = copy_run(finished_run, tmp_path)
    inner = outer / 'inner'
    shutil.copytree(finished_run, inner)
    before = tree_digest(tmp_path)
    # Made before runs inside runs were refused: it goes on (here: it is complete).
    assert_ok(run_train(train_command(inner)))
    result = run_train(train_command(inner, [PENDULUM], SHORT) + ['--start_over'])
    assert result.returncode == 2 and f'is inside the run {outer} ' in result.stderr
    # Neither run moved aside, nor its rows changed.
    assert sorted(os.listdir(outer)) == sorted(os.listdir(finished_run) + ['inner'])
    after = tree_digest(tmp_path)
    for progress in ('run/progress.csv', 'run/inner/progress.csv'):
        assert after[progress] == before[progress]


def test_a_config_gin_saved_again_with_a_byte_order_mark_resumes_as_the_same_config(
    finished_run, tmp_path
):
    # An editor on Windows adds the mark as it saves: no binding changed.
    root_dir = copy_run(finished_run, tmp_path)
    config_file = root_dir / 'config.gin'
    config_file.write_bytes(b'\xef\xbb\xbf' + config_file.read_bytes().replace(b'\n', b'\r\n'))
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert_ok(result)
    assert checkpoint_steps(root_dir)[-1] == 600
    assert not list(root_dir.glob('config-until-*')), result.stderr[-3000:]


def test_a_resume_that_changes_the_experiment_keeps_the_config_it_trained_with(
    finished_run, tmp_path
):
    root_dir = copy_run(finished_run, tmp_path)
    trained_with = (root_dir / 'config.gin').read_text()
    assert 'SacAlgorithm.target_update_tau = 0.005' in trained_with
    changed = ['TrainerConfig.num_env_steps=600', 'SacAlgorithm.target_update_tau=0.5']
    result = run_train(train_command(root_dir, params=changed))
    assert_ok(result)
    assert (root_dir / 'config-until-400.gin').read_text() == trained_with
    assert 'SacAlgorithm.target_update_tau = 0.5' in (root_dir / 'config.gin').read_text()
    assert 'the experiment changes at env step 400' in result.stderr
    assert 'SacAlgorithm.target_update_tau = 0.5' in result.stderr
    # A resume that changes only the run length keeps nothing more.
    assert_ok(run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=800'])))
    assert sorted(p.name for p in root_dir.glob('*.gin')) == [
        'config-until-400.gin',
        'config.gin',
        'operative_config.gin',
    ]
    assert checkpoint_steps(root_dir)[-1] == 800
    # As if the run died before its checkpoints after 400: the resume from 400 checks
    # it against the config it was trained with there, kept aside, and goes on.
    for step in [step for step in checkpoint_steps(root_dir) if step > 400]:
        shutil.rmtree(root_dir / 'checkpoints' / f'ckpt-{step}')
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert_ok(result)
    assert resumed_from(root_dir, 400) in result.stderr, result.stderr[-3000:]


def assert_each_checkpoint_has_the_config_it_was_trained_with(root_dir):
    """The config of each checkpoint, as play and a resume look it up, is the experiment it
    keeps (the run length aside, which a resume may change)."""
    run_dir = RunDir(str(root_dir))
    for step in checkpoint_steps(root_dir):
        path = str(root_dir / 'checkpoints' / f'ckpt-{step}')
        state = ckpt.trainer_state(ckpt.load_state(path), path)
        assert config_changed_since(run_dir.config_file_of(step), state.config_text, path) is None


def changed_at_400(finished_run, tmp_path):
    """A copy of ``finished_run`` resumed to 600 with ``target_update_tau`` changed from
    0.005 at 400, and the config it was trained with until then."""
    root_dir = copy_run(finished_run, tmp_path)
    trained_with = (root_dir / 'config.gin').read_text()
    changed = ['TrainerConfig.num_env_steps=600', 'SacAlgorithm.target_update_tau=0.5']
    assert_ok(run_train(train_command(root_dir, params=changed)))
    return root_dir, trained_with


@pytest.mark.parametrize('then', ['kept', 'undone'])
def test_a_resume_from_before_a_change_of_the_experiment_records_the_config_of_its_checkpoint(
    finished_run, tmp_path, then
):
    # Changed at 400, then back to the checkpoint at 200 (those after it lost, or corrupt and
    # skipped): steps 200 to 400 are trained again, under the config the resume goes on with.
    root_dir, trained_with = changed_at_400(finished_run, tmp_path)
    assert (root_dir / 'config-until-400.gin').read_text() == trained_with
    for step in [step for step in checkpoint_steps(root_dir) if step > 200]:
        shutil.rmtree(root_dir / 'checkpoints' / f'ckpt-{step}')
    params = ['TrainerConfig.num_env_steps=600']
    if then == 'undone':
        params.append('SacAlgorithm.target_update_tau=0.005')
    result = run_train(train_command(root_dir, params=params))
    assert_ok(result)
    assert resumed_from(root_dir, 200) in result.stderr, result.stderr[-3000:]
    # The change at 400 belongs to the training after 200 that this resume replaced.
    abandoned = root_dir / 'config-until-400.gin.abandoned'
    assert abandoned.read_text() == trained_with
    assert f'moved {root_dir / "config-until-400.gin"} to {abandoned}' in result.stderr
    kept = sorted(p.name for p in root_dir.glob('*.gin'))
    if then == 'kept':
        assert 'the experiment changes at env step 200' in result.stderr
        assert (
            'SacAlgorithm.target_update_tau = 0.005 -> SacAlgorithm.target_update_tau = 0.5'
        ) in result.stderr
        assert kept == ['config-until-200.gin', 'config.gin', 'operative_config.gin']
        assert (root_dir / 'config-until-200.gin').read_text() == trained_with
    else:
        assert 'the experiment changes' not in result.stderr, result.stderr[-3000:]
        assert kept == ['config.gin', 'operative_config.gin']
    assert checkpoint_steps(root_dir) == [200, 400, 600]
    assert_each_checkpoint_has_the_config_it_was_trained_with(root_dir)
    # And a resume of the run as it is now goes on without a word of a change.
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=800']))
    assert_ok(result)
    assert 'the experiment changes' not in result.stderr
    assert sorted(p.name for p in root_dir.glob('*.gin')) == kept


@pytest.mark.parametrize('then', ['undone', 'changed_again'])
def test_a_resume_from_the_checkpoint_where_the_experiment_changed_compares_with_its_config(
    finished_run, tmp_path, then
):
    # Changed at 400, then back to the checkpoint at 400 (those after it lost): what the
    # resume goes on with is compared with the config trained with until 400, not with the
    # change that this resume trains again from there.
    root_dir, trained_with = changed_at_400(finished_run, tmp_path)
    shutil.rmtree(root_dir / 'checkpoints' / 'ckpt-600')
    tau = {'undone': '0.005', 'changed_again': '0.9'}[then]
    params = ['TrainerConfig.num_env_steps=600', f'SacAlgorithm.target_update_tau={tau}']
    result = run_train(train_command(root_dir, params=params))
    assert_ok(result)
    assert resumed_from(root_dir, 400) in result.stderr, result.stderr[-3000:]
    kept = root_dir / 'config-until-400.gin'
    if then == 'undone':
        # No change at 400 any more: its record goes aside, and plot sees none.
        assert 'the experiment changes' not in result.stderr, result.stderr[-3000:]
        abandoned = root_dir / 'config-until-400.gin.abandoned'
        assert abandoned.read_text() == trained_with
        assert f'moved {kept} to {abandoned}' in result.stderr
        assert sorted(p.name for p in root_dir.glob('*.gin')) == [
            'config.gin',
            'operative_config.gin',
        ]
    else:
        assert (
            'the experiment changes at env step 400: config.gin differs from the config it '
            'was trained with until now in 1 binding(s): SacAlgorithm.target_update_tau = '
            '0.005 -> SacAlgorithm.target_update_tau = 0.9'
        ) in result.stderr, result.stderr[-3000:]
        assert kept.read_text() == trained_with
    assert checkpoint_steps(root_dir) == [200, 400, 600]
    assert_each_checkpoint_has_the_config_it_was_trained_with(root_dir)


def test_a_damaged_record_of_a_change_a_resume_trains_again_is_moved_aside(finished_run, tmp_path):
    # The checkpoint keeps the config it was trained with: a resume from before a change
    # has no need of the record of that change, which it moves aside whatever it holds.
    root_dir, trained_with = changed_at_400(finished_run, tmp_path)
    for step in (400, 600):
        shutil.rmtree(root_dir / 'checkpoints' / f'ckpt-{step}')
    kept = root_dir / 'config-until-400.gin'
    kept.write_bytes(b'\x89PNG\r\n' + bytes(range(256)))
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert_ok(result)
    assert resumed_from(root_dir, 200) in result.stderr, result.stderr[-3000:]
    assert (root_dir / 'config-until-200.gin').read_text() == trained_with
    assert (root_dir / 'config-until-400.gin.abandoned').read_bytes().startswith(b'\x89PNG')
    assert checkpoint_steps(root_dir) == [200, 400, 600]


def test_a_damaged_record_of_the_config_of_the_checkpoint_resumed_is_named(finished_run, tmp_path):
    # Where the resume would keep it, changing the experiment there again: exit 2, naming it.
    root_dir, _ = changed_at_400(finished_run, tmp_path)
    shutil.rmtree(root_dir / 'checkpoints' / 'ckpt-600')
    kept = root_dir / 'config-until-400.gin'
    kept.write_bytes(b'\x89PNG\r\n' + bytes(range(256)))
    before = tree_digest(root_dir)
    params = ['TrainerConfig.num_env_steps=600', 'SacAlgorithm.target_update_tau=0.9']
    result = run_train(train_command(root_dir, params=params))
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr
    assert f'{kept} is not text: utf-8 cannot decode its byte 0x89' in result.stderr
    assert tree_digest(root_dir) == before


def test_a_checkpoint_written_again_by_a_resume_that_changed_the_experiment_keeps_its_config(
    tmp_path,
):
    # A resume that ends at the step it resumed from (its final evaluation, due there now)
    # writes that checkpoint again, with nothing trained since: under the config it was
    # trained with, which config-until-<step>.gin keeps, not the one the resume goes on with.
    root_dir = tmp_path / 'run'
    params = SHORT + ['TrainerConfig.num_env_steps=600', 'TrainerConfig.eval_interval=300']
    assert_ok(run_train(train_command(root_dir, [PENDULUM], params)))
    trained_with = (root_dir / 'config.gin').read_text()
    shutil.rmtree(root_dir / 'checkpoints' / 'ckpt-600')
    ends_at_400 = ['TrainerConfig.num_env_steps=400', 'SacAlgorithm.target_update_tau=0.5']
    result = run_train(train_command(root_dir, params=ends_at_400))
    assert_ok(result)
    assert resumed_from(root_dir, 400) in result.stderr, result.stderr[-3000:]
    assert (root_dir / 'config-until-400.gin').read_text() == trained_with
    path = str(root_dir / 'checkpoints' / 'ckpt-400')
    state = ckpt.trainer_state(ckpt.load_state(path), path)
    assert (
        config_changed_since(str(root_dir / 'config-until-400.gin'), state.config_text, path)
        is None
    )
    # Changed again from 400; back to 400 later (the checkpoint after it lost): it resumes.
    again = ['TrainerConfig.num_env_steps=600', 'SacAlgorithm.gamma=0.9']
    assert_ok(run_train(train_command(root_dir, params=again)))
    shutil.rmtree(root_dir / 'checkpoints' / 'ckpt-600')
    result = run_train(train_command(root_dir))
    assert_ok(result)
    assert resumed_from(root_dir, 400) in result.stderr, result.stderr[-3000:]


def test_a_restart_with_no_checkpoint_to_resume_keeps_no_config_of_the_attempt_before(tmp_path):
    # Stopped by the non-finite guard before its first checkpoint (at 200), then started
    # again with other learning rates: nothing was trained with the old ones that goes on.
    root_dir = tmp_path / 'run'
    diverging = SHORT + ['critic/Adam.lr=1e20', 'actor/Adam.lr=1e20']
    result = run_train(train_command(root_dir, [PENDULUM], diverging))
    assert result.returncode == 1, result.stderr[-3000:]
    assert checkpoint_steps(root_dir) == []
    result = run_train(
        train_command(root_dir, params=['critic/Adam.lr=3e-4', 'actor/Adam.lr=3e-4'])
    )
    assert_ok(result)
    assert 'critic/Adam.lr = 1e+20 -> critic/Adam.lr = 0.0003' in result.stderr
    assert 'the experiment changes at env step' not in result.stderr
    assert not list(root_dir.glob('config-until-*')), result.stderr[-3000:]
    assert 'critic/Adam.lr = 0.0003' in (root_dir / 'config.gin').read_text()


@pytest.mark.parametrize('change', ['emptied', 'edited'])
def test_a_config_gin_changed_after_its_checkpoint_is_refused_and_the_run_left_as_it_is(
    finished_run, tmp_path, change
):
    root_dir = copy_run(finished_run, tmp_path)
    config = root_dir / 'config.gin'
    trained_with = config.read_text()
    if change == 'emptied':
        config.write_text('')
    else:
        config.write_text(
            trained_with.replace(
                'SacAlgorithm.target_update_tau = 0.005', 'SacAlgorithm.target_update_tau = 0.5'
            )
        )
    before = tree_digest(root_dir)
    # Past the default initial_collect_steps, which an emptied config.gin gives.
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=1200']))
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    checkpoint = root_dir / 'checkpoints' / 'ckpt-400'
    assert f'error: {config} is not the config that {checkpoint} was trained with' in (
        result.stderr
    ), result.stderr[-3000:]
    if change == 'edited':
        assert "it differs in 1 binding(s), e.g. ['SacAlgorithm.target_update_tau = 0.005 -> " in (
            result.stderr
        ), result.stderr[-3000:]
    assert tree_digest(root_dir) == before
    # With the run's config put back, it resumes.
    config.write_text(trained_with)
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert_ok(result)
    assert resumed_from(root_dir, 400) in result.stderr, result.stderr[-3000:]


def test_same_gin_file_resumes_with_other_device_settings(finished_run, tmp_path):
    """Where and how a run computes is no part of the experiment: a run started with
    one device setting resumes under another with its gin file given again."""
    root_dir = copy_run(finished_run, tmp_path)
    longer = SHORT + [
        'TrainerConfig.num_env_steps=600',
        "TrainerConfig.device='cpu'",
        'TrainerConfig.defer_non_finite_checks=True',
        "ReplayBuffer.device='cpu'",
    ]
    result = run_train(train_command(root_dir, [PENDULUM], longer))
    assert_ok(result)
    assert resumed_from(root_dir, 400) in result.stderr, result.stderr[-3000:]
    assert checkpoint_steps(root_dir)[-1] == 600
    assert "TrainerConfig.device = 'cpu'" in (root_dir / 'config.gin').read_text()


def test_root_dir_in_use_by_another_train_is_refused_and_left_as_it_is(finished_run, tmp_path):
    root_dir = copy_run(finished_run, tmp_path)  # a train of SHORT
    before = tree_digest(root_dir)
    longer = train_command(root_dir, [PENDULUM], SHORT + ['TrainerConfig.num_env_steps=600'])
    with RunDirLock(str(root_dir)):  # as a train running in root_dir holds it
        for command in (longer, longer + ['--start_over']):
            result = run_train(command)
            assert result.returncode == 2 and 'is in use' in result.stderr, result.stderr
            assert str(root_dir) in result.stderr
            # Refused before the envs and the replay buffer were built.
            assert 'Created ' not in result.stderr and 'allocated' not in result.stderr
            assert tree_digest(root_dir) == before
        assert os.listdir(tmp_path) == ['run']  # --start_over moved nothing aside
    assert_ok(run_train(longer))
    assert checkpoint_steps(root_dir)[-1] == 600


def test_same_gin_file_with_a_longer_run_resumes(finished_run, tmp_path):
    root_dir = copy_run(finished_run, tmp_path)  # a train of SHORT
    result = run_train(
        train_command(root_dir, [PENDULUM], SHORT + ['TrainerConfig.num_env_steps=600'])
    )
    assert_ok(result)
    assert resumed_from(root_dir, 400) in result.stderr, result.stderr[-3000:]
    assert checkpoint_steps(root_dir)[-1] == 600
    assert steps_in_csv(root_dir) == list(range(0, 601, 100))


@pytest.mark.parametrize('extra', [[], ['--start_over']], ids=['resume', 'start_over'])
def test_non_alf_lite_directory_is_refused(tmp_path, extra):
    mine = tmp_path / 'mine'
    mine.mkdir()
    (mine / 'notes.txt').write_text('mine')
    result = run_train(train_command(mine, [PENDULUM], SHORT) + extra)
    assert result.returncode == 2 and 'not an alf_lite experiment' in result.stderr
    assert os.listdir(tmp_path) == ['mine'] and os.listdir(mine) == ['notes.txt']


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks a machine without CUDA')
@pytest.mark.parametrize('device', ['cuda', 'cuda:1'])
def test_a_gpu_asked_for_where_there_is_none_is_refused_in_one_line(tmp_path, device):
    result = run_train(
        train_command(tmp_path / 'run', [PENDULUM], SHORT + [f"TrainerConfig.device = '{device}'"])
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert 'Traceback' not in result.stderr and f"device '{device}'" in result.stderr
    assert not (tmp_path / 'run').exists()


def test_root_dir_that_is_a_file_or_cannot_be_created_is_refused(tmp_path):
    (tmp_path / 'afile').write_text('mine')
    result = run_train(train_command(tmp_path / 'afile', [PENDULUM], SHORT))
    assert result.returncode == 2 and 'is a file, not a directory' in result.stderr
    assert (tmp_path / 'afile').read_text() == 'mine'
    result = run_train(train_command(tmp_path / 'afile' / 'run', [PENDULUM], SHORT))
    assert result.returncode == 2 and 'cannot create or lock the root_dir' in result.stderr
    assert 'Traceback' not in result.stderr


def test_root_dir_whose_name_is_not_utf8_is_refused_before_anything_is_written(tmp_path):
    # TensorBoard's writer failed on it with a traceback, after config.gin was written.
    root_dir = tmp_path / os.fsdecode(b'run\xff')
    result = run_train(train_command(root_dir, [PENDULUM], SHORT))
    assert result.returncode == 2, result.stderr[-2000:]
    assert f'--root_dir {ascii(str(root_dir))} is no UTF-8 name' in result.stderr, result.stderr
    assert 'Traceback' not in result.stderr
    assert os.listdir(tmp_path) == []


# --- checkpoints: corrupt, truncated, disk full -------------------------------------------


POINT = [os.path.join(EXAMPLES, 'common', 'sac.gin')]
POINT_PARAMS = [
    "create_environment.env_name = 'alf_lite/PointTarget-v0'",
    'TanhNormalActorNetwork.hidden_layers = (16,)',
    'CriticNetwork.hidden_layers = (16,)',
    'TrainerConfig.mini_batch_size = 16',
    'TrainerConfig.initial_collect_steps = 50',
    'TrainerConfig.summary_interval = 100',
    'TrainerConfig.eval_interval = 200',
    'TrainerConfig.checkpoint_interval = 100',
    'TrainerConfig.num_eval_episodes = 1',
    'TrainerConfig.replay_buffer_length = 1000',
]


def train_in_process(root_dir, *params):
    parse_config(POINT, POINT_PARAMS + list(params))
    with Trainer(TrainerConfig(), str(root_dir)) as trainer:
        return trainer.train()


def trained_once(tmp_path_factory, *params):
    """A run of POINT_PARAMS and ``params`` (checkpoints every 100 env steps), trained once
    for the tests of this module that read it, or damage or resume a copy (``copy_run``)."""
    root_dir = tmp_path_factory.mktemp('point') / 'run'
    train_in_process(root_dir, *params)
    return root_dir


@pytest.fixture(scope='module')
def point_run_to_300(tmp_path_factory):
    return trained_once(tmp_path_factory, 'TrainerConfig.num_env_steps = 300')


@pytest.fixture(scope='module')
def point_run_to_400(tmp_path_factory):
    return trained_once(tmp_path_factory, 'TrainerConfig.num_env_steps = 400')


@pytest.fixture(scope='module')
def point_run_to_300_summarised_every_200(tmp_path_factory):
    return trained_once(
        tmp_path_factory,
        'TrainerConfig.summary_interval = 200',
        'TrainerConfig.num_env_steps = 300',
    )


def test_truncated_checkpoint_falls_back_to_the_previous_one(point_run_to_300, tmp_path, caplog):
    root_dir = copy_run(point_run_to_300, tmp_path)
    model = root_dir / 'checkpoints' / 'ckpt-300' / 'model.pt'
    model.write_bytes(model.read_bytes()[:100])
    train_in_process(root_dir, 'TrainerConfig.num_env_steps = 400')
    assert 'ckpt-300 is unreadable' in caplog.text
    # Resumed from ckpt-200, whose replay buffer was pruned when ckpt-300 was written.
    assert 'ckpt-200 holds no replay buffer' in caplog.text
    assert steps_in_csv(root_dir) == [0, 100, 200, 300, 400]
    state, _ = ckpt.load_checkpoint(str(root_dir / 'checkpoints' / 'ckpt-400'))
    assert state['env_steps'] == 400


def test_a_run_without_its_checkpoints_is_refused_rather_than_started_over(
    point_run_to_300, tmp_path
):
    root_dir = copy_run(point_run_to_300, tmp_path)
    shutil.rmtree(root_dir / 'checkpoints')  # copied without them, say
    before = {p: p.read_bytes() for p in root_dir.rglob('*') if p.is_file()}
    with pytest.raises(ckpt.CheckpointError, match='has rows up to 300 env steps, but there is no'):
        train_in_process(root_dir, 'TrainerConfig.num_env_steps = 400')
    with pytest.raises(
        ckpt.CheckpointError,
        match=re.escape('or pass --start_over to train afresh (it moves the root_dir aside).'),
    ):
        train_in_process(root_dir, 'TrainerConfig.num_env_steps = 400')
    assert {p: p.read_bytes() for p in root_dir.rglob('*') if p.is_file()} == before
    # A run killed before its first checkpoint (at 100) left rows up to 100 at most: it
    # starts over, its rows written again.
    progress = root_dir / 'progress.csv'
    progress.write_text(''.join(progress.read_text().splitlines(True)[:3]))
    assert steps_in_csv(root_dir) == [0, 100]
    train_in_process(root_dir, 'TrainerConfig.num_env_steps = 200')
    assert steps_in_csv(root_dir) == [0, 100, 200]
    assert checkpoint_steps(root_dir) == [100, 200]


def test_a_refused_resume_past_a_corrupt_checkpoint_leaves_it_where_it_was(
    point_run_to_300, tmp_path
):
    root_dir = copy_run(point_run_to_300, tmp_path)
    model = root_dir / 'checkpoints' / 'ckpt-300' / 'model.pt'
    model.write_bytes(model.read_bytes()[:100])
    before = {p: p.read_bytes() for p in root_dir.rglob('*') if p.is_file()}
    # ckpt-200, the one that loads, is past the run's length: the resume is refused.
    with pytest.raises(ckpt.CheckpointError, match='past TrainerConfig.num_env_steps = 150'):
        train_in_process(root_dir, 'TrainerConfig.num_env_steps = 150')
    assert {p: p.read_bytes() for p in root_dir.rglob('*') if p.is_file()} == before
    # A resume that goes on from ckpt-200 moves it aside.
    train_in_process(root_dir, 'TrainerConfig.num_env_steps = 300')
    assert (root_dir / 'checkpoints' / 'ckpt-300.corrupt' / 'model.pt').is_file()
    assert checkpoint_steps(root_dir) == [100, 200, 300]


@pytest.mark.parametrize(
    'damage',
    [
        lambda rb: dict(rb, total_added=5),  # a counter that does not match the rows
        lambda rb: dict(rb, step_type=[rb['step_type'][0].fill_(7)]),  # no StepType
        lambda rb: dict(rb, reward=[rb['reward'][0].to('meta')]),  # no values
        lambda rb: dict(rb, length=float(rb['length'])),  # no count: not another length
    ],
    ids=['counter', 'step_type', 'meta_tensor', 'length'],
)
def test_a_damaged_replay_buffer_resumes_its_checkpoint_without_it(
    point_run_to_300, tmp_path, caplog, damage
):
    root_dir = copy_run(point_run_to_300, tmp_path)
    rb_file = root_dir / 'checkpoints' / 'ckpt-300' / 'replay_buffer.pt'
    rb = {
        k: [t.clone() for t in v] if isinstance(v, list) else v
        for k, v in torch.load(rb_file).items()
    }
    torch.save(damage(rb), rb_file)
    # A resume with nothing left to train has nothing to refill: no word of it.
    train_in_process(root_dir, 'TrainerConfig.num_env_steps = 300')
    assert f'the replay buffer of {rb_file.parent} is damaged' in caplog.text
    assert 'holds no replay buffer' not in caplog.text
    train_in_process(root_dir, 'TrainerConfig.num_env_steps = 400')
    assert f'the replay buffer of {rb_file.parent} is damaged' in caplog.text
    assert 'ckpt-300 holds no replay buffer: training continues after 50 steps' in caplog.text
    assert checkpoint_steps(root_dir) == [100, 200, 300, 400]
    assert steps_in_csv(root_dir) == [0, 100, 200, 300, 400]


def test_checkpoints_written_after_resuming_past_a_corrupt_one_keep_their_replay_buffer(
    tmp_path, caplog
):
    train_in_process(
        tmp_path, 'TrainerConfig.num_env_steps = 400', 'TrainerConfig.checkpoint_interval = 200'
    )
    checkpoints = tmp_path / 'checkpoints'
    (checkpoints / 'ckpt-400' / 'model.pt').write_bytes(b'garbage')
    # Resumed from ckpt-200; a shorter interval writes checkpoints below the corrupt 400.
    train_in_process(
        tmp_path, 'TrainerConfig.num_env_steps = 300', 'TrainerConfig.checkpoint_interval = 100'
    )
    assert sorted(os.listdir(checkpoints)) == ['ckpt-200', 'ckpt-300', 'ckpt-400.corrupt']
    assert (checkpoints / 'ckpt-300' / 'replay_buffer.pt').is_file()
    caplog.clear()
    caplog.set_level(logging.INFO)
    train_in_process(
        tmp_path, 'TrainerConfig.num_env_steps = 400', 'TrainerConfig.checkpoint_interval = 100'
    )
    assert 'ckpt-300 at 300 env steps' in caplog.text
    assert 'holds no replay buffer' not in caplog.text
    assert checkpoint_steps(tmp_path) == [200, 300, 400]


def test_all_checkpoints_corrupt_stops_with_a_clear_error(finished_run, tmp_path):
    root_dir = copy_run(finished_run, tmp_path)  # a train of SHORT
    for step in checkpoint_steps(root_dir):
        (root_dir / 'checkpoints' / f'ckpt-{step}' / 'model.pt').write_bytes(b'garbage')
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'none of the 2 checkpoints' in result.stderr and 'Traceback' not in result.stderr


def test_checkpoint_with_non_finite_weights_is_corrupt_and_the_one_before_is_resumed(
    finished_run, tmp_path
):
    root_dir = copy_run(finished_run, tmp_path)
    model = root_dir / 'checkpoints' / 'ckpt-400' / 'model.pt'
    state = torch.load(model, weights_only=True)
    name = next(k for k in state['algorithm']['module'] if k.startswith('_actor'))
    state['algorithm']['module'][name].fill_(math.nan)
    torch.save(state, model)
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert_ok(result)
    assert f'{model}: parameter {name} holds NaN or inf' in result.stderr, result.stderr[-3000:]
    # Resumed from ckpt-200, which wrote ckpt-400 again.
    assert resumed_from(root_dir, 200) in result.stderr, result.stderr[-3000:]
    assert sorted(os.listdir(root_dir / 'checkpoints')) == [
        'ckpt-200',
        'ckpt-400',
        'ckpt-400.corrupt',
        'ckpt-600',
    ]
    assert steps_in_csv(root_dir) == list(range(0, 601, 100))


def test_a_corrupt_checkpoint_that_cannot_be_moved_aside_stops_train_with_one_line(
    finished_run, tmp_path
):
    root_dir = copy_run(finished_run, tmp_path)
    corrupt = root_dir / 'checkpoints' / 'ckpt-400'
    (corrupt / 'model.pt').write_bytes(b'garbage')
    command = train_command(root_dir, params=['TrainerConfig.num_env_steps=600'])
    # The rename to ckpt-400.corrupt fails, as in a read-only checkpoint directory.
    command = with_read_only_rename(command, '.corrupt')
    result = run_train(command)
    assert result.returncode == 2, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(
        f'error: could not move the unreadable checkpoint {corrupt} aside to {corrupt}.corrupt '
        '(OSError: [Errno 30] Read-only file system'
    ), last_line
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert sorted(os.listdir(root_dir / 'checkpoints')) == ['ckpt-200', 'ckpt-400']
    assert steps_in_csv(root_dir) == steps_in_csv(finished_run)


def break_rng(state):
    state['rng']['python'] = (3, (1, 2), None)


def break_env_steps(state):
    state['env_steps'] = 'abc'


def replace_with_foreign_keys(state):
    state.clear()
    state['x'] = torch.zeros(1)


def break_collection(state):
    state['collection'] = 'abc'


@pytest.mark.parametrize(
    'corrupt, problem',
    [
        (break_rng, 'its RNG state is invalid'),
        (break_env_steps, "env_steps is 'abc', of the wrong type"),
        (replace_with_foreign_keys, "not a trainer checkpoint: its keys are ['x']"),
        (break_collection, "collection is 'abc', of the wrong type"),
    ],
    ids=['rng', 'env_steps', 'keys', 'collection'],
)
def test_checkpoint_with_bad_contents_is_named_with_its_problem(
    finished_run, tmp_path, corrupt, problem
):
    root_dir = copy_run(finished_run, tmp_path)
    for step in checkpoint_steps(root_dir):
        model = root_dir / 'checkpoints' / f'ckpt-{step}' / 'model.pt'
        state = torch.load(model, weights_only=True)
        corrupt(state)
        torch.save(state, model)
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert f'{model}: {problem}' in result.stderr, result.stderr[-3000:]
    assert 'none of the 2 checkpoints' in result.stderr


def test_failed_config_write_is_a_clear_error_and_leaves_nothing(tmp_path):
    root_dir = tmp_path / 'run'
    # Below config.gin's size.
    result = run_with_file_size_limit(train_command(root_dir, [PENDULUM], SHORT), 1000)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f'cannot write {root_dir / "config.gin"}: [Errno 27] File too large' in result.stderr
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert os.listdir(tmp_path) == []


def test_cleanup_of_a_failed_atomic_write_does_not_hide_its_error(tmp_path, monkeypatch):
    def unlink_on_a_read_only_file_system(path):
        raise OSError(30, 'Read-only file system', path)

    # As on a read-only file system: the temp file cannot be created, nor removed.
    monkeypatch.setattr(os, 'unlink', unlink_on_a_read_only_file_system)
    with pytest.raises(FileNotFoundError) as error:
        write_text_atomically(str(tmp_path / 'missing' / 'config.gin'), 'x = 1\n')
    assert error.value.__context__ is None


def test_disk_full_while_checkpointing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    real_save = ckpt._save_synced
    calls = []

    def save_then_fill_disk(obj, path):
        calls.append(path)
        if len(calls) > 2:  # the first checkpoint's model and replay buffer succeed
            raise OSError(28, 'No space left on device')
        real_save(obj, path)

    monkeypatch.setattr(ckpt, '_save_synced', save_then_fill_disk)
    with pytest.raises(TrainingError, match='No space left on device.*previous checkpoints'):
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 300')
    assert os.listdir(tmp_path / 'checkpoints') == ['ckpt-100']
    state, rb = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / 'ckpt-100'))
    assert state['env_steps'] == 100 and rb is not None


def test_disk_full_in_torchs_zip_writer_stops_with_the_disk_full_message(finished_run, tmp_path):
    """torch's writer turns a failed write into ``RuntimeError: ... unexpected pos``; a
    file size limit makes it fail the way a full disk does."""
    root_dir = copy_run(finished_run, tmp_path)
    # Above every other file train writes (operative_config.gin, the largest, has
    # about 3,900 bytes); model.pt reaches it within a tensor record, where torch's
    # writer raises the RuntimeError (elsewhere, Python's file raises an OSError).
    limit = 4_000
    assert all(
        os.path.getsize(root_dir / 'checkpoints' / f'ckpt-{step}' / 'model.pt') > limit
        for step in checkpoint_steps(root_dir)
    )
    command = train_command(root_dir, params=['TrainerConfig.num_env_steps=600'])
    result = run_with_file_size_limit(command, limit)
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert 'could not write the checkpoint at env step 600' in result.stderr
    assert 'unexpected pos' in result.stderr and 'the disk is full' in result.stderr
    assert result.stderr.strip().endswith(
        'The previous checkpoints are intact: re-run the same command, once this is fixed, '
        'to resume from its latest checkpoint.'
    ), result.stderr[-3000:]
    assert sorted(os.listdir(root_dir / 'checkpoints')) == ['ckpt-200', 'ckpt-400']
    state, rb = ckpt.load_checkpoint(str(root_dir / 'checkpoints' / 'ckpt-400'))
    assert state['env_steps'] == 400 and rb is not None
    assert_ok(run_train(command))
    assert checkpoint_steps(root_dir)[-1] == 600


def test_disk_full_at_the_first_checkpoint_of_a_start_over_says_to_start_again_without_it(
    tmp_path,
):
    # Re-run with --start_over, the run would be moved aside again.
    root_dir = tmp_path / 'run'
    command = train_command(root_dir, [PENDULUM], SHORT) + ['--start_over']
    result = run_with_file_size_limit(command, 4_000)
    assert result.returncode == 1, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.endswith(
        'No checkpoint was written before it: re-run the same command without --start_over, '
        'once this is fixed, to start the run again.'
    ), result.stderr[-3000:]
    assert checkpoint_steps(root_dir) == []
    assert_ok(run_train(command[:-1]))
    assert checkpoint_steps(root_dir) == [200, 400]
    assert not list(tmp_path.glob('run.old-*'))


def assert_a_full_disk_stops_train_with_one_line_and_keeps_the_run(root_dir, prelude, where):
    """Resumed to 600 env steps with ``prelude`` filling the disk, the finished run's copy
    at ``root_dir`` stops with the disk-full line (``where``: what it names) and no
    traceback, keeps its checkpoints, and the same command then resumes it to the end."""
    command = train_command(root_dir, params=['TrainerConfig.num_env_steps=600'])
    result = run_train(with_prelude(command, prelude))
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert 'Exception in thread' not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f'error: [Errno 28] No space left on device{where}. The run stopped; what it '
        'wrote before is kept: re-run the same command, once this is fixed, to resume from '
        'its latest checkpoint.'
    ), result.stderr[-3000:]
    assert sorted(os.listdir(root_dir / 'checkpoints')) == ['ckpt-200', 'ckpt-400']
    assert_ok(run_train(command))
    assert checkpoint_steps(root_dir)[-1] == 600


@pytest.mark.parametrize('named', [True, False], ids=['file_named', 'no_file_named'])
def test_a_run_file_that_cannot_be_written_stops_train_naming_it_and_keeps_the_run(
    finished_run, tmp_path, named
):
    # The disk fills as the resume writes its first row to progress.csv: an open that
    # fails names the file, a write does not.
    root_dir = copy_run(finished_run, tmp_path)
    prelude = (
        'import errno, os\n'
        'from alf_lite import summary\n'
        'def disk_full(self, row):\n'
        '    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)'
        + (', self._path)\n' if named else ')\n')
        + 'summary.ProgressCsv.write = disk_full\n'
    )
    where = f": '{root_dir / 'progress.csv'}'" if named else f', writing in {root_dir}'
    assert_a_full_disk_stops_train_with_one_line_and_keeps_the_run(root_dir, prelude, where)


def test_a_full_disk_before_the_first_checkpoint_says_the_same_command_starts_again(tmp_path):
    root_dir = tmp_path / 'run'
    prelude = (
        'import errno, os\n'
        'from alf_lite import summary\n'
        'def disk_full(self, row):\n'
        '    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)\n'
        'summary.ProgressCsv.write = disk_full\n'
    )
    command = train_command(root_dir, [PENDULUM], SHORT)
    result = run_train(with_prelude(command, prelude))
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: [Errno 28] No space left on device: '{root_dir / 'progress.csv'}'. The run "
        'stopped; what it wrote before is kept: re-run the same command, once this is fixed, '
        'to start the run again (it stopped before its first checkpoint).'
    ), result.stderr[-3000:]
    assert_ok(run_train(command))
    assert checkpoint_steps(root_dir) == [200, 400]


def test_a_full_disk_met_by_tensorboards_writer_thread_stops_train_with_one_line(
    finished_run, tmp_path
):
    # TensorBoard writes the events in a thread of its own; its error reaches the run at
    # the run's next summary or checkpoint, and the thread itself printed it as well.
    root_dir = copy_run(finished_run, tmp_path)
    prelude = (
        'import errno, os, threading\n'
        'from tensorboard.summary.writer import record_writer\n'
        'write = record_writer.RecordWriter.write\n'
        'def disk_full(self, data):\n'
        '    if threading.current_thread() is not threading.main_thread():\n'
        '        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n'
        '    return write(self, data)\n'
        'record_writer.RecordWriter.write = disk_full\n'
    )
    where = f', writing in {root_dir}'
    assert_a_full_disk_stops_train_with_one_line_and_keeps_the_run(root_dir, prelude, where)


def test_resume_removes_what_checkpoint_writes_killed_midway_left(finished_run, tmp_path):
    root_dir = copy_run(finished_run, tmp_path)
    checkpoints = root_dir / 'checkpoints'
    # As a SIGKILL during a save leaves them, each under the pid of its dead writer.
    left = [checkpoints / '.tmp-ckpt-600-999999', checkpoints / '.tmp-last_good-500-999998']
    for path in left:
        path.mkdir()
        (path / 'replay_buffer.pt').write_bytes(b'partial')
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert_ok(result)
    assert sorted(os.listdir(checkpoints)) == ['ckpt-200', 'ckpt-400', 'ckpt-600']
    for path in left:
        assert f'removed {path}' in result.stderr, result.stderr[-3000:]


# --- NaN and inf ----------------------------------------------------------------------------


def test_a_non_finite_loss_stops_naming_the_loss_and_step_and_keeps_good_checkpoints(tmp_path):
    with pytest.raises(TrainingError) as error:
        train_in_process(
            tmp_path,
            "create_environment.env_name = 'alf_lite_tests/HugeReward-v0'",
            'TrainerConfig.num_env_steps = 2000',
        )
    message = str(error.value)
    found = re.search(r'the critic loss is inf at env step (\d+)', message)
    assert found, message
    saved = sorted(os.listdir(tmp_path / 'checkpoints'))
    last_good = [s for s in saved if s.startswith('last_good-')]
    assert len(last_good) == 1 and last_good[0] in message
    # The step named is the one stopped at, after the rewards turned huge (past 250)
    # and before the checkpoint at 300.
    bad_step = int(found.group(1))
    assert last_good[0] == f'last_good-{bad_step}' and 250 < bad_step <= 300, message
    assert [s for s in saved if s.startswith('ckpt-')] == ['ckpt-100', 'ckpt-200']
    for name in saved:
        state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / name))
        for value in state['algorithm']['module'].values():
            if torch.is_tensor(value) and value.is_floating_point():
                assert torch.isfinite(value).all(), name
    # A resume never picks the last-good state by itself.
    assert latest_checkpoint(str(tmp_path / 'checkpoints')).endswith('ckpt-200')


def test_non_finite_parameters_are_never_checkpointed(tmp_path):
    parse_config(POINT, POINT_PARAMS + ['TrainerConfig.num_env_steps = 200'])
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        trainer.train()
        with torch.no_grad():
            next(trainer._algorithm._critic.parameters())[0, 0, 0] = math.inf
        trainer._env_steps = 300
        with pytest.raises(TrainingError, match='_critic.*not finite at env step 300'):
            trainer._save()
    assert checkpoint_steps(tmp_path) == [100, 200]


# --- killed at random moments ---------------------------------------------------------------

KILL_STEPS = 4000
KILL_PARAMS = TINY + [
    f'TrainerConfig.num_env_steps={KILL_STEPS}',
    'TrainerConfig.summary_interval=100',
    'TrainerConfig.eval_interval=1000',
    'TrainerConfig.checkpoint_interval=300',
    'TrainerConfig.num_eval_episodes=1',
    f'TrainerConfig.replay_buffer_length={KILL_STEPS}',
]


def deterministic_rows(root_dir):
    """``progress.csv`` without the columns that time or memory make differ between runs."""
    with open(root_dir / 'progress.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in row.items() if k not in NONDETERMINISTIC_COLUMNS} for row in rows]


# About 50 s alone, 150 to 210 s on cores other work keeps busy: more than the usual 300.
@pytest.mark.timeout(600)
def test_sigkill_at_random_moments_then_resume_loses_nothing(tmp_path, read_tensorboard):
    root_dir = tmp_path / 'run'
    command = train_command(root_dir, [PENDULUM], KILL_PARAMS)
    rng = random.Random(0)
    cycles = 8
    latest = []
    for cycle in range(cycles):
        before = checkpoint_steps(root_dir)[-1] if checkpoint_steps(root_dir) else None
        log = tmp_path / f'cycle-{cycle}.log'
        # A child of the train server, which imported the dependencies once: a real
        # process of its own, SIGKILLed as one started from scratch is.
        process = start_train(command, log)
        try:
            # Wait until it works (the csv grows past where it was), then a random moment.
            csv_file = root_dir / 'progress.csv'
            started_rows = len(steps_in_csv(root_dir)) if csv_file.exists() else 0
            deadline = time.time() + 120
            while process.poll() is None:
                if csv_file.exists() and len(steps_in_csv(root_dir)) > started_rows:
                    break
                if time.time() > deadline:
                    pytest.fail(
                        f'cycle {cycle}: no new row within 120 s: {log.read_text()[-3000:]}'
                    )
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 1.0))
        finally:
            process.kill()
            process.wait()
        # Killed, or done: a run that failed by itself would hide behind the kills.
        assert process.returncode in (0, -signal.SIGKILL), (cycle, log.read_text()[-3000:])
        # Each run continued from the last checkpoint before it, not from step 0.
        if before is not None:
            assert resumed_from(root_dir, before) in log.read_text(), (cycle, before)
        latest.append(checkpoint_steps(root_dir)[-1] if checkpoint_steps(root_dir) else 0)
        if process.returncode == 0:
            break
    assert latest == sorted(latest) and latest[-1] > 0, latest
    result = run_train(command)
    assert_ok(result)
    assert resumed_from(root_dir, latest[-1]) in result.stderr, result.stderr[-3000:]
    steps = steps_in_csv(root_dir)
    assert steps == list(range(0, KILL_STEPS + 1, 100)), steps
    train = read_tensorboard(root_dir / 'train')
    assert [e.step for e in train['env_steps_per_sec']] == list(range(100, KILL_STEPS + 1, 100))
    assert len(latest) == cycles
    # Every resume continued the envs' episodes: the numbers are those of a run never killed.
    never_killed = tmp_path / 'never_killed'
    assert_ok(
        run_train(train_command(never_killed, [PENDULUM], KILL_PARAMS), fresh_interpreter=True)
    )
    assert deterministic_rows(root_dir) == deterministic_rows(never_killed)
    # And as TensorBoard shows them, with each reader: the same steps of every
    # scalar, the same values of those that time and memory do not change.
    for load_fast in tensorboard_server.readers():
        log = tmp_path / f'tensorboard-{load_fast}.log'
        with tensorboard_server.TensorBoard(tmp_path, load_fast, log) as tensorboard:
            deadline = time.monotonic() + 60
            while True:
                killed, whole = (
                    tensorboard_scalars(tensorboard, run) for run in ('run', 'never_killed')
                )
                if (killed == whole and whole) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert killed == whole, load_fast
        steps = [step for step, _ in whole['train/env_steps_per_sec']]
        assert steps == list(range(100, KILL_STEPS + 1, 100)), load_fast


def tensorboard_scalars(tensorboard, run):
    """``{'mode/tag': [(step, value), ...]}`` of the runs ``run/train`` and ``run/eval`` as
    ``tensorboard`` shows them, the value None in the columns that time or memory set."""
    tags = tensorboard.tags() or {}
    scalars = {}
    for mode in ('train', 'eval'):
        for tag in tags.get(f'{run}/{mode}', []):
            points = tensorboard.points(f'{run}/{mode}', tag) or []
            if f'{mode}/{tag}' in NONDETERMINISTIC_COLUMNS:
                points = [(step, None) for step, _ in points]
            scalars[f'{mode}/{tag}'] = points
    return scalars


# --- SIGINT / SIGTERM -----------------------------------------------------------------------


def start_long_run(root_dir, *params, flags=()):
    """A train of 100,000 env steps with ``params`` (and train's ``flags``), started in its
    own session; returned once its progress.csv holds 3 rows (summaries every 100 env
    steps, no checkpoint)."""
    params = TINY + [
        'TrainerConfig.num_env_steps=100000',
        'TrainerConfig.summary_interval=100',
        'TrainerConfig.eval_interval=100000',
        'TrainerConfig.checkpoint_interval=100000',
        *params,
    ]
    # A child of the train server, which imported the dependencies once: a real process
    # in a session of its own, signalled as one started from scratch is.
    stderr = root_dir.parent / f'{root_dir.name}.stderr'
    command = train_command(root_dir, [PENDULUM], params) + list(flags)
    process = start_train(command, stderr, new_session=True)
    deadline = time.time() + 60
    while not ((root_dir / 'progress.csv').exists() and len(steps_in_csv(root_dir)) >= 3):
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.05)
    return process


@pytest.mark.parametrize(
    'sig, to_the_group',
    [
        (signal.SIGTERM, False),
        (signal.SIGINT, True),
        # As Slurm (a job cancelled, preempted or out of time) or systemd sends it.
        (signal.SIGTERM, True),
        # Slurm's warning before a time limit (--signal=USR1@60) to every process of the job.
        (signal.SIGUSR1, True),
    ],
)
def test_signal_writes_a_final_checkpoint_and_leaves_no_process(tmp_path, sig, to_the_group):
    root_dir = tmp_path / 'run'
    process = start_long_run(
        root_dir,
        'TrainerConfig.num_eval_episodes=1',
        'create_environment.num_parallel_environments=2',
        'create_environment.use_subprocesses=True',
    )
    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) >= 2  # the env subprocesses
    if to_the_group:
        os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + sig, stderr[-3000:]
    assert 'Traceback' not in stderr, stderr[-3000:]
    # Said as the signal came, once.
    said = f'{sig.name}: stopping once the iteration under way ends, with a checkpoint'
    assert stderr.count(said) == 1, stderr[-3000:]
    assert_stopped_at_a_checkpoint(root_dir, children)
    # The env processes lived on to the checkpoint, which keeps their episodes.
    state, _ = ckpt.load_checkpoint(latest_checkpoint(str(root_dir / 'checkpoints')))
    assert state['collection'] is not None


def assert_stopped_at_a_checkpoint(root_dir, children):
    """One checkpoint, at or past the last progress.csv row, and the env processes
    ``children`` gone."""
    steps = checkpoint_steps(root_dir)
    assert len(steps) == 1 and steps[0] >= steps_in_csv(root_dir)[-1]
    gone = psutil.wait_procs(children, timeout=10)[1] == []
    assert gone, [c.pid for c in children if c.is_running()]


def test_a_closed_terminal_stops_train_at_a_checkpoint(tmp_path):
    # Train on a terminal (a pseudo-terminal) that closes: the kernel sends it SIGHUP, and
    # every write to stderr fails from then on, the progress line of each iteration among them.
    root_dir = tmp_path / 'run'
    params = TINY + [
        'TrainerConfig.num_env_steps=100000',
        'TrainerConfig.summary_interval=2',
        'TrainerConfig.eval_interval=100000',
        'TrainerConfig.checkpoint_interval=100000',
        'create_environment.num_parallel_environments=2',
        'create_environment.use_subprocesses=True',
    ]
    command = train_command(root_dir, [PENDULUM], params)
    env = train_env()
    pid, terminal = pty.fork()
    if pid == 0:
        try:
            os.chdir(REPO_ROOT)
            os.execve(command[0], command, env)
        finally:
            os._exit(127)
    deadline = time.time() + 60
    try:
        while not ((root_dir / 'progress.csv').exists() and len(steps_in_csv(root_dir)) >= 3):
            assert time.time() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0)
            if select.select([terminal], [], [], 0.05)[0]:
                os.read(terminal, 65536)  # a terminal's reader: train never blocks writing
        children = psutil.Process(pid).children(recursive=True)
        assert len(children) >= 2  # the env subprocesses
    finally:
        os.close(terminal)
    try:
        with fails_after(60):
            _, status = os.waitpid(pid, 0)
    except BaseException:
        # A train that did not stop would otherwise run its 100000 steps beside the suite.
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGHUP
    assert_stopped_at_a_checkpoint(root_dir, children)


def test_sighup_ignored_as_train_starts_stays_ignored(tmp_path):
    # As under nohup: the run goes on, its env processes too.
    root_dir = tmp_path / 'run'
    prelude = 'import signal\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\n'
    command = with_prelude(train_command(root_dir, [PENDULUM], SHORT), prelude, alter_sys=True)
    process = start_in_own_session(command)
    deadline = time.time() + 60
    while not (root_dir / 'progress.csv').exists():
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.05)
    send_as_user(process, signal.SIGHUP)
    _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    assert process.returncode == 0, stderr[-3000:]
    assert checkpoint_steps(root_dir)[-1] >= 400


@pytest.mark.parametrize('gap_s', [0.02, 0.2])
@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_while_train_stops_keeps_its_exit_code_and_message(tmp_path, sig, gap_s):
    # Ctrl-C pressed twice, or grid_search passing on each signal it gets: the second
    # comes while the first one's checkpoint is written or the process exits.
    root_dir = tmp_path / 'run'
    process = start_long_run(root_dir)
    process.send_signal(sig)
    time.sleep(gap_s)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + sig, stderr[-3000:]
    assert 'Traceback' not in stderr, stderr[-3000:]
    last_line = stderr.strip().splitlines()[-1]
    assert last_line.endswith(
        f'interrupted by {sig.name}: checkpoint written, env processes closed; re-run the '
        'same command to continue.'
    ), stderr[-3000:]
    assert len(checkpoint_steps(root_dir)) == 1


def test_a_start_over_run_stopped_by_a_signal_says_to_resume_without_start_over(tmp_path):
    # The same command would move the run aside again and start afresh.
    root_dir = tmp_path / 'run'
    process = start_long_run(root_dir, flags=['--start_over'])
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGINT, stderr[-3000:]
    last_line = stderr.strip().splitlines()[-1]
    assert last_line.endswith(
        'interrupted by SIGINT: checkpoint written, env processes closed; re-run the same '
        'command without --start_over to continue.'
    ), stderr[-3000:]
    [stopped_at] = checkpoint_steps(root_dir)
    resume = train_command(root_dir, params=[f'TrainerConfig.num_env_steps={stopped_at + 100}'])
    assert_ok(run_train(resume))
    assert checkpoint_steps(root_dir)[-1] == stopped_at + 100
    assert not list(tmp_path.glob('run.old-*'))


@pytest.mark.parametrize(
    'num_envs, sig',
    [(2, signal.SIGINT), (1, signal.SIGINT), (2, signal.SIGTERM)],
    ids=['SIGINT while env processes start', 'SIGINT while an env starts in train', 'SIGTERM'],
)
def test_a_signal_while_the_envs_start_stops_train_at_once_leaving_nothing(tmp_path, num_envs, sig):
    markers = tmp_path / 'started'
    markers.mkdir()
    root_dir = tmp_path / 'run'
    command, env = hanging_train(
        root_dir,
        'alf_lite_tests/SlowToStart-v0',
        f'create_environment.num_parallel_environments={num_envs}',
        'TrainerConfig.num_env_steps=200',
    )
    env[hanging_env.START_MARKER_DIR_VARIABLE] = str(markers)
    process = start_hanging_train(command, env, new_session=True)

    def env_starting() -> bool:
        # Two envs start in env processes; one starts in train's own process.
        pids = {int(marker.name) for marker in markers.iterdir()}
        return any((pid != process.pid) == (num_envs > 1) for pid in pids)

    deadline = time.time() + 60
    while not env_starting():
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.05)
    descendants = psutil.Process(process.pid).children(recursive=True)
    send_as_user(process, sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + sig, stderr[-3000:]
    assert f'error: {sig.name} arrived outside the training loop' in stderr, stderr[-3000:]
    assert 'Traceback' not in stderr, stderr[-3000:]
    assert not root_dir.exists()
    gone = psutil.wait_procs(descendants, timeout=10)[1] == []
    assert gone, [p.pid for p in descendants if p.is_running()]


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_train_imports_its_modules_stops_it_with_one_line(tmp_path, sig):
    # The signal arrives while train's module imports absl, before main runs.
    root_dir = tmp_path / 'run'
    command = train_command(root_dir, [PENDULUM], SHORT)
    prelude = (
        'import os, signal, sys\n'
        'class SignalOnAbsl:\n'
        '    def find_spec(self, name, path=None, target=None):\n'
        '        if name == "absl":\n'
        '            sys.meta_path.remove(self)\n'
        f'            os.kill(os.getpid(), {int(sig)})\n'
        'sys.meta_path.insert(0, SignalOnAbsl())\n'
    )
    command = with_prelude(command, prelude, alter_sys=True)
    result = run_train(command)
    assert result.returncode == 128 + sig, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f'error: {sig.name} arrived outside the training loop (while starting up or shutting '
        'down): no checkpoint was written for it, and the files in the root_dir are complete; '
        're-run the same command to start or resume the run.'
    ], result.stderr[-3000:]
    assert os.listdir(tmp_path) == []


def test_a_signal_while_train_imports_torch_stops_it_with_one_line(tmp_path):
    # The signal arrives once torch's fake_tensor module registered its exit-time log of
    # cache stats and before torch's import set its loggers' level: no log follows the line.
    root_dir = tmp_path / 'run'
    command = train_command(root_dir, [PENDULUM], SHORT)
    prelude = (
        'import os, signal, sys\n'
        'class SignalWhileTorchImports:\n'
        '    def find_spec(self, name, path=None, target=None):\n'
        '        fake_tensor = sys.modules.get("torch._subclasses.fake_tensor")\n'
        '        if hasattr(fake_tensor, "dump_cache_stats"):\n'
        '            sys.meta_path.remove(self)\n'
        '            os.kill(os.getpid(), signal.SIGTERM)\n'
        'sys.meta_path.insert(0, SignalWhileTorchImports())\n'
    )
    result = run_train(with_prelude(command, prelude, alter_sys=True))
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: SIGTERM arrived outside'), lines
    assert os.listdir(tmp_path) == []


def test_a_signal_that_cuts_torchs_lazy_import_short_still_stops_train_by_that_signal(tmp_path):
    # torch.use_deterministic_algorithms imports torch's compiler, and sympy with it, on its
    # first call, as the trainer starts; the signal arrives inside sympy's import, and the
    # trainer's clean-up calls the function again, which fails on the half-imported sympy.
    root_dir = tmp_path / 'run'
    command = train_command(root_dir, [PENDULUM], SHORT)
    prelude = signal_on_import(signal.SIGINT, 'sympy.simplify')
    result = run_train(with_prelude(command, prelude, alter_sys=True))
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    # The clean-up's failure is named, after the signal that caused it.
    assert 'while stopping for SIGINT: AttributeError' in result.stderr, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith('error: SIGINT arrived outside the training loop'), last_line
    assert os.listdir(tmp_path) == []


# Sends SIGINT (once, noting it in the file MARKER) while torch's C++ part registers the
# classes of torch.distributed (torch._C._c10d_init): it runs importlib's Python code
# there, where a signal handler may run.
SIGINT_IN_C10D_INIT = """
import _frozen_importlib, linecache, os, signal, sys
lock_unlock = _frozen_importlib._lock_unlock_module
def interrupt_in_c10d_init(name):
    frame = sys._getframe(1)
    while frame is not None:
        if "_c10d_init()" in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
            _frozen_importlib._lock_unlock_module = lock_unlock
            open(MARKER, "w").close()
            os.kill(os.getpid(), signal.SIGINT)
            break
        frame = frame.f_back
    return lock_unlock(name)
_frozen_importlib._lock_unlock_module = interrupt_in_c10d_init
"""


def test_a_signal_while_torch_initialises_its_cpp_part_stops_train_with_one_line(tmp_path):
    # The signal's exception raised inside torch's C++ initialisation was a C++ exception
    # there, which ended the process at once (std::terminate: exit 134, a core dump).
    root_dir = tmp_path / 'run'
    marker = tmp_path / 'signalled'
    prelude = f'MARKER = {str(marker)!r}\n' + SIGINT_IN_C10D_INIT
    command = with_prelude(train_command(root_dir, [PENDULUM], SHORT), prelude)
    result = run_train(command)
    assert marker.exists(), 'no signal was sent: torch initialises otherwise now'
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith('error: SIGINT arrived outside the training loop'), last_line
    assert 'terminate called' not in result.stderr, result.stderr[-3000:]
    assert os.listdir(tmp_path) == ['signalled']


def test_a_signal_once_train_made_its_root_dir_removes_it(tmp_path):
    root_dir = tmp_path / 'run'
    command = train_command(root_dir, [PENDULUM], SHORT)
    # SIGINT as soon as train made and locked root_dir, before it wrote anything there.
    prelude = (
        'import os, signal\n'
        'from alf_lite.trainer import Trainer\n'
        'lock = Trainer.lock_root_dir\n'
        'def lock_then_interrupt(self):\n'
        '    lock(self)\n'
        '    os.kill(os.getpid(), signal.SIGINT)\n'
        'Trainer.lock_root_dir = lock_then_interrupt\n'
    )
    command = with_prelude(command, prelude)
    result = run_train(command)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert 'error: SIGINT arrived outside the training loop' in result.stderr, result.stderr[-3000:]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('how', [dropped_signal.DROPPED, dropped_signal.REPLACED])
def test_a_signal_whose_exception_never_reaches_train_before_its_config_is_written_stops_it(
    tmp_path, how
):
    # SIGINT once train locked root_dir, in a __del__ that drops its exception: the check
    # before the first write stops the run there, as if it had been raised. Or in code that
    # raises an error of its own in its place (as a C extension calling back into Python
    # may): was that error's traceback, exit 1.
    root_dir = tmp_path / 'run'
    args = train_command(root_dir, [PENDULUM], SHORT)[3:]
    result = dropped_signal.run_tool(
        'train', args, 'alf_lite.trainer', 'Trainer.lock_root_dir', how
    )
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith('error: SIGINT arrived outside the training loop'), last_line
    assert 'Exception ignored' not in result.stderr, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert os.listdir(tmp_path) == []


def test_train_stops_for_a_signal_that_comes_as_it_writes_its_final_checkpoint(tmp_path):
    # The only checkpoint is the final one: the SIGINT after it is recorded by the loop's
    # handler, past the loop's last read of it. train still exits for it.
    root_dir = tmp_path / 'run'
    params = SHORT + ['TrainerConfig.checkpoint_interval=1000']
    args = train_command(root_dir, [PENDULUM], params)[3:]
    result = dropped_signal.run_tool('train', args, 'alf_lite.trainer', 'Trainer._save')
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert 'SIGINT came as the run wrote its final checkpoint: the run is complete' in (
        result.stderr
    ), result.stderr[-3000:]
    assert checkpoint_steps(root_dir) == [400]
    assert steps_in_csv(root_dir)[-1] == 400
    progress = (root_dir / 'progress.csv').read_text()
    assert_ok(run_train(train_command(root_dir, [PENDULUM], params)))
    assert (root_dir / 'progress.csv').read_text() == progress


def sigterm_in_training_env_step(monkeypatch, number, hangs=True):
    """Make the training envs' env step ``number`` (1-based) get a SIGTERM while it is under
    way, as a kill from outside would, then hang in it for good (unless not ``hangs``), as
    a deadlocked simulator does; the step's patience is 0.2 s. Returns the real
    ``create_environment``."""
    monkeypatch.setattr(trainer_module, 'SIGNALLED_STEP_PATIENCE_S', 0.2)
    real_create = trainer_module.create_environment
    made, steps = [], []

    def create_signalling(*args, **kwargs):
        env = real_create(*args, **kwargs)
        if not made:  # the training envs, made first
            real_step = env._env.step

            def step(action):
                steps.append(action)
                if len(steps) == number:
                    os.kill(os.getpid(), signal.SIGTERM)
                    while hangs:
                        time.sleep(0.01)
                return real_step(action)

            monkeypatch.setattr(env._env, 'step', step)
        made.append(env)
        return env

    monkeypatch.setattr(trainer_module, 'create_environment', create_signalling)
    return real_create


def sigterm_during_the_second_evaluation(monkeypatch, signalled=None):
    """Make the run's second evaluation (env step 200 at eval_interval 200) get a SIGTERM
    while its eval env steps, as a kill from outside would (appended to ``signalled``
    where given); returns the real ``evaluate``."""
    real_evaluate = trainer_module.evaluate
    evaluations = []

    def evaluate_interrupted_at_200(env, policy, on_step=None, seed=None):
        evaluations.append(env)
        if len(evaluations) == 2:
            real_step = env._env.step

            def step_then_signal(action):
                os.kill(os.getpid(), signal.SIGTERM)
                if signalled is not None:
                    signalled.append(signal.SIGTERM)
                return real_step(action)

            monkeypatch.setattr(env._env, 'step', step_then_signal)
        return real_evaluate(env, policy, on_step, seed)

    monkeypatch.setattr(trainer_module, 'evaluate', evaluate_interrupted_at_200)
    return real_evaluate


def test_signal_during_an_evaluation_then_resume_writes_every_row_once(
    tmp_path, monkeypatch, read_tensorboard, caplog
):
    real_evaluate = sigterm_during_the_second_evaluation(monkeypatch)
    with pytest.raises(TrainingInterrupted):
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert checkpoint_steps(tmp_path) == [100, 200]
    assert steps_in_csv(tmp_path) == [0, 100]
    monkeypatch.setattr(trainer_module, 'evaluate', real_evaluate)
    # A resume killed after it wrote the pending row and the next, before its next
    # checkpoint: the one after it resumes from the same pending checkpoint.
    real_save = Trainer._save

    def killed(self, *args, **kwargs):
        raise KilledBeforeItsCheckpoint()

    monkeypatch.setattr(Trainer, '_save', killed)
    with pytest.raises(KilledBeforeItsCheckpoint):
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert steps_in_csv(tmp_path) == [0, 100, 200, 300]
    monkeypatch.setattr(Trainer, '_save', real_save)
    caplog.set_level(logging.INFO)
    train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert resumed_from(tmp_path, 200) in caplog.text
    assert steps_in_csv(tmp_path) == [0, 100, 200, 300, 400]
    evaluated = read_tensorboard(tmp_path / 'eval')['AverageReturn']
    assert [e.step for e in evaluated] == [0, 200, 400]
    trained = read_tensorboard(tmp_path / 'train')['env_steps_per_sec']
    assert [e.step for e in trained] == [100, 200, 300, 400]


def test_a_resume_with_num_env_steps_below_the_checkpoint_is_refused_changing_nothing(
    point_run_to_300, tmp_path, caplog
):
    root_dir = copy_run(point_run_to_300, tmp_path)
    before = {p: p.read_bytes() for p in root_dir.rglob('*') if p.is_file()}
    with pytest.raises(ckpt.CheckpointError, match='past TrainerConfig.num_env_steps = 200'):
        train_in_process(root_dir, 'TrainerConfig.num_env_steps = 200')
    assert {p: p.read_bytes() for p in root_dir.rglob('*') if p.is_file()} == before
    # The run's own length resumes, with nothing left to do.
    with caplog.at_level(logging.INFO):
        train_in_process(root_dir, 'TrainerConfig.num_env_steps = 300')
    assert 'nothing left to train: the checkpoint is at TrainerConfig.num_env_steps = 300\n' in (
        caplog.text
    )
    # Not followed by word of the training envs going on.
    assert 'continue their episodes' not in caplog.text
    assert steps_in_csv(root_dir) == [0, 100, 200, 300]


def test_a_run_shortened_to_a_checkpoint_before_its_end_gets_the_final_evaluation_there(
    point_run_to_300, point_run_to_400, tmp_path, read_tensorboard, caplog
):
    # The run that was 300 steps long from the start, only read here.
    whole = point_run_to_300
    # A longer run killed after its checkpoint at 300, then given 300 as its length.
    shortened = copy_run(point_run_to_400, tmp_path)
    shutil.rmtree(shortened / 'checkpoints' / 'ckpt-400')
    with caplog.at_level(logging.INFO):
        last_eval = train_in_process(shortened, 'TrainerConfig.num_env_steps = 300')
    assert 'at TrainerConfig.num_env_steps = 300 (its evaluation is written now)' in caplog.text
    # The rows of the run that was 300 steps long from the start: the evaluation at 300
    # in the row of that step's training scalars.
    rows = {root: deterministic_rows(root) for root in (whole, shortened)}
    assert [r['env_steps'] for r in rows[shortened]] == ['0', '100', '200', '300']
    assert rows[shortened] == rows[whole]
    assert last_eval[EVAL_RETURN] == float(rows[whole][-1][EVAL_RETURN])
    for root in (whole, shortened):
        assert [e.step for e in read_tensorboard(root / 'eval')['AverageReturn']] == [0, 200, 300]
        assert [e.step for e in read_tensorboard(root / 'train')['critic_loss']] == [100, 200, 300]
    # Written once: the checkpoint no longer holds it as pending, and a rerun writes nothing.
    state, _ = ckpt.load_checkpoint(str(shortened / 'checkpoints' / 'ckpt-300'))
    assert state['pending_evaluation'] is None
    train_in_process(shortened, 'TrainerConfig.num_env_steps = 300')
    assert deterministic_rows(shortened) == rows[whole]


def test_a_run_shortened_to_a_checkpoint_between_summaries_writes_its_final_row_in_full(
    point_run_to_300_summarised_every_200, tmp_path, read_tensorboard
):
    # Summaries every 200 steps: a run of 300 summarises at its end, and one of 400 does not
    # summarise at its checkpoint of 300.
    params = ['TrainerConfig.summary_interval = 200']
    whole, shortened = point_run_to_300_summarised_every_200, tmp_path / 'shortened'
    train_in_process(shortened, *params, 'TrainerConfig.num_env_steps = 400')
    shutil.rmtree(shortened / 'checkpoints' / 'ckpt-400')
    train_in_process(shortened, *params, 'TrainerConfig.num_env_steps = 300')
    # The evaluation at 300 with the training scalars that step had, kept by its checkpoint.
    rows = {root: deterministic_rows(root) for root in (whole, shortened)}
    assert [r['env_steps'] for r in rows[shortened]] == ['0', '200', '300']
    assert rows[shortened][-1]['train/critic_loss'] != ''
    assert rows[shortened] == rows[whole]
    with open(shortened / 'progress.csv', newline='') as f:
        assert float(list(csv.DictReader(f))[-1]['train/env_steps_per_sec']) > 0
    for root in (whole, shortened):
        assert [e.step for e in read_tensorboard(root / 'train')['critic_loss']] == [200, 300]


def test_a_run_shortened_to_an_evaluation_checkpoint_between_summaries_writes_its_row_in_full(
    tmp_path, read_tensorboard
):
    # Evaluations every 100 steps, summaries every 200: a run of 100 summarises at its end,
    # and one of 300 evaluates at 100 without a summary there.
    params = ['TrainerConfig.summary_interval = 200', 'TrainerConfig.eval_interval = 100']
    whole, shortened = tmp_path / 'whole', tmp_path / 'shortened'
    train_in_process(whole, *params, 'TrainerConfig.num_env_steps = 100')
    train_in_process(shortened, *params, 'TrainerConfig.num_env_steps = 300')
    for step in (200, 300):
        shutil.rmtree(shortened / 'checkpoints' / f'ckpt-{step}')
    train_in_process(shortened, *params, 'TrainerConfig.num_env_steps = 100')
    # The evaluation at 100 in one row with the training scalars its checkpoint kept.
    rows = {root: deterministic_rows(root) for root in (whole, shortened)}
    assert [r['env_steps'] for r in rows[shortened]] == ['0', '100']
    assert rows[shortened][-1]['train/critic_loss'] != ''
    assert rows[shortened] == rows[whole]
    for root in (whole, shortened):
        assert [e.step for e in read_tensorboard(root / 'train')['critic_loss']] == [100]
    # Resumed again, the finished run writes nothing more.
    train_in_process(shortened, *params, 'TrainerConfig.num_env_steps = 100')
    assert deterministic_rows(shortened) == rows[whole]


def test_a_run_shortened_to_an_evaluation_a_signal_cut_short_between_summaries_writes_it_in_full(
    tmp_path, monkeypatch
):
    # Evaluations every 100 steps, summaries every 200: a run of 100 summarises at its end,
    # and one of 300 does not summarise at 100, where a signal interrupts its evaluation.
    params = ['TrainerConfig.summary_interval = 200', 'TrainerConfig.eval_interval = 100']
    whole, shortened = tmp_path / 'whole', tmp_path / 'shortened'
    train_in_process(whole, *params, 'TrainerConfig.num_env_steps = 100')
    real_evaluate = sigterm_during_the_second_evaluation(monkeypatch)  # the one at 100
    with pytest.raises(TrainingInterrupted):
        train_in_process(shortened, *params, 'TrainerConfig.num_env_steps = 300')
    assert checkpoint_steps(shortened) == [100] and steps_in_csv(shortened) == [0]
    monkeypatch.setattr(trainer_module, 'evaluate', real_evaluate)
    train_in_process(shortened, *params, 'TrainerConfig.num_env_steps = 100')
    # The evaluation at 100 with the training scalars that step had, kept by its checkpoint.
    rows = {root: deterministic_rows(root) for root in (whole, shortened)}
    assert [r['env_steps'] for r in rows[shortened]] == ['0', '100']
    assert rows[shortened][-1]['train/critic_loss'] != ''
    assert rows[shortened] == rows[whole]


def test_a_run_shortened_to_a_summary_checkpoint_without_its_progress_csv_writes_that_summary(
    point_run_to_400, tmp_path
):
    root_dir = copy_run(point_run_to_400, tmp_path)
    with open(root_dir / 'progress.csv', newline='') as f:
        written = {r['env_steps']: r for r in csv.DictReader(f)}
    # A checkpoint keeps the training scalars of its step, not its evaluation's.
    state, _ = ckpt.load_checkpoint(str(root_dir / 'checkpoints' / 'ckpt-400'))
    assert written['400'][EVAL_RETURN] != ''
    assert state['train_scalars'] == {
        k: float(v) for k, v in written['400'].items() if k.startswith('train/')
    }
    shutil.rmtree(root_dir / 'checkpoints' / 'ckpt-400')
    summarised = written['300']
    # Moved aside (as a damaged one is): the final row at 300 is all there is to write, with
    # the training scalars of the summary there, rates included, kept by the checkpoint.
    os.rename(root_dir / 'progress.csv', root_dir / 'progress.csv.damaged')
    train_in_process(root_dir, 'TrainerConfig.num_env_steps = 300')
    with open(root_dir / 'progress.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    assert [(r['env_steps'], r[EVAL_RETURN] != '') for r in rows] == [('300', True)]
    trained = {k: v for k, v in summarised.items() if k.startswith('train/')}
    assert 'train/env_steps_per_sec' in trained and trained['train/critic_loss'] != ''
    assert {k: rows[0][k] for k in trained} == trained
    # The checkpoint rewritten with that row keeps them: moved aside once more, the same row.
    os.rename(root_dir / 'progress.csv', root_dir / 'progress.csv.second')
    train_in_process(root_dir, 'TrainerConfig.num_env_steps = 300')
    with open(root_dir / 'progress.csv', newline='') as f:
        again = list(csv.DictReader(f))
    assert [{k: r[k] for k in trained} for r in again] == [trained]


def test_a_resume_that_makes_its_checkpoint_between_summaries_an_evaluation_step_adds_no_summary(
    point_run_to_300_summarised_every_200, tmp_path
):
    # Summaries every 200 steps: the run is killed after its checkpoint at 100, between two.
    params = ['TrainerConfig.summary_interval = 200']
    root_dir = copy_run(point_run_to_300_summarised_every_200, tmp_path)
    for step in (200, 300):
        shutil.rmtree(root_dir / 'checkpoints' / f'ckpt-{step}')
    # Resumed with evaluations every 50: 100 is one, but no summary is due there.
    resumed = ['TrainerConfig.num_env_steps = 200', 'TrainerConfig.eval_interval = 50']
    train_in_process(root_dir, *params, *resumed)
    rows = deterministic_rows(root_dir)
    assert [(r['env_steps'], r[EVAL_RETURN] != '', r['train/critic_loss'] != '') for r in rows] == [
        ('0', True, False),
        ('100', True, False),
        ('150', True, False),
        ('200', True, True),
    ]


def test_a_resume_with_an_eval_interval_that_makes_its_checkpoint_an_evaluation_step_evaluates(
    point_run_to_300, tmp_path, read_tensorboard
):
    # Evaluations every 200 steps; the run is killed after its checkpoint at 100.
    root_dir = copy_run(point_run_to_300, tmp_path)
    for step in (200, 300):
        shutil.rmtree(root_dir / 'checkpoints' / f'ckpt-{step}')
    # Resumed with evaluations every 50: 100 is one, where the first run had none.
    resumed = ['TrainerConfig.num_env_steps = 200', 'TrainerConfig.eval_interval = 50']
    train_in_process(root_dir, *resumed)
    rows = deterministic_rows(root_dir)
    assert [(r['env_steps'], r[EVAL_RETURN] != '') for r in rows] == [
        ('0', True),
        ('100', True),  # its training scalars and the evaluation, in one row
        ('150', True),
        ('200', True),
    ]
    assert rows[1]['train/critic_loss'] != ''
    evaluated = [0, 100, 150, 200]
    assert [e.step for e in read_tensorboard(root_dir / 'eval')['AverageReturn']] == evaluated
    # Written once: a rerun of the finished run writes nothing more.
    train_in_process(root_dir, *resumed)
    assert deterministic_rows(root_dir) == rows


def test_a_run_whose_last_iteration_ends_past_num_env_steps_reruns_with_nothing_to_do(
    tmp_path, caplog
):
    # Iterations of 30 env steps: a run of 100 ends at 120.
    unrolled = ['TrainerConfig.unroll_length = 30', 'TrainerConfig.num_env_steps = 100']
    train_in_process(tmp_path, *unrolled)
    assert checkpoint_steps(tmp_path) == [120]
    progress = (tmp_path / 'progress.csv').read_text()
    with caplog.at_level(logging.INFO):
        train_in_process(tmp_path, *unrolled)
    assert 'nothing left to train: the checkpoint is at 120 env steps, the end of the last ' in (
        caplog.text
    )
    assert (tmp_path / 'progress.csv').read_text() == progress
    # A run of 90 would have ended at 90: its iteration to 120 never began.
    with pytest.raises(ckpt.CheckpointError, match='Give num_env_steps >= 91'):
        train_in_process(
            tmp_path, 'TrainerConfig.unroll_length = 30', 'TrainerConfig.num_env_steps = 90'
        )
    # Where its last iteration began is the run's own (30 steps), whatever the resume
    # sets: without the unroll it still has nothing to do, and 1-step iterations do not
    # let it be shortened below its checkpoint.
    state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / 'ckpt-120'))
    assert state['iteration_length'] == 30
    train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 100')
    assert (tmp_path / 'progress.csv').read_text() == progress
    with pytest.raises(ckpt.CheckpointError, match='Give num_env_steps >= 91'):
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 90')


class KilledBeforeItsCheckpoint(BaseException):
    """Stands for a SIGKILL: nothing after it runs, no checkpoint included."""


def test_signal_during_the_last_evaluation_then_reruns_write_its_row_once(
    tmp_path, monkeypatch, read_tensorboard
):
    real_evaluate = sigterm_during_the_second_evaluation(monkeypatch)  # the last, at 200
    with pytest.raises(TrainingInterrupted):
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 200')
    assert steps_in_csv(tmp_path) == [0, 100]
    monkeypatch.setattr(trainer_module, 'evaluate', real_evaluate)
    # The same command again, twice: the first writes the row and checkpoints it as
    # written; the second has nothing left to do.
    for _ in range(2):
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 200')
        assert steps_in_csv(tmp_path) == [0, 100, 200]
        state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / 'ckpt-200'))
        assert state['pending_evaluation'] is None
    evaluated = read_tensorboard(tmp_path / 'eval')['AverageReturn']
    assert [e.step for e in evaluated] == [0, 200]
    trained = read_tensorboard(tmp_path / 'train')['env_steps_per_sec']
    assert [e.step for e in trained] == [100, 200]


def test_a_second_signal_as_the_stop_in_an_evaluation_reads_the_episodes_still_checkpoints(
    tmp_path, monkeypatch
):
    # The first SIGTERM ends the evaluation after its eval env step; a second comes while
    # the checkpoint written for it reads the training envs' episodes (Ctrl-C twice; here
    # sooner after the first than a repeat of it would count as a second).
    monkeypatch.setattr(signals_module, 'SAME_STOP_WITHIN_S', 0.0)
    signalled = []
    real_evaluate = sigterm_during_the_second_evaluation(monkeypatch, signalled)
    real_create = trainer_module.create_environment
    sigterm_as_the_training_envs_give_episodes(monkeypatch, when=lambda made: bool(signalled))
    with pytest.raises(TrainingInterrupted) as error:
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert error.value.signum == signal.SIGTERM
    assert checkpoint_steps(tmp_path) == [100, 200]
    state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / 'ckpt-200'))
    assert state['collection'] is None  # the training envs were stopped
    monkeypatch.setattr(trainer_module, 'evaluate', real_evaluate)
    monkeypatch.setattr(trainer_module, 'create_environment', real_create)
    train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert steps_in_csv(tmp_path) == [0, 100, 200, 300, 400]


def test_a_stop_that_ends_a_resumes_episode_replay_leaves_its_checkpoint_as_it_was(
    tmp_path, monkeypatch, caplog
):
    # Ctrl-C twice, or a replay hung past its patience: nothing was trained since the
    # checkpoint, which is not written again (its replay buffer with it), and keeps the
    # final summary's training scalars, which one written then would not.
    train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 200')
    checkpoint = tmp_path / 'checkpoints' / 'ckpt-200'
    state, _ = ckpt.load_checkpoint(str(checkpoint))
    assert state['collection'] is not None and state['train_scalars']
    files = {p.name: p.read_bytes() for p in checkpoint.iterdir()}

    def replay(self, records):
        raise InterruptedInEnvCall(signal.SIGINT)

    monkeypatch.setattr(BatchedEnvironment, 'replay', replay)
    with pytest.raises(TrainingInterrupted) as error:
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert error.value.signum == signal.SIGINT
    assert {p.name: p.read_bytes() for p in checkpoint.iterdir()} == files
    assert checkpoint_steps(tmp_path) == [100, 200]
    monkeypatch.undo()
    with caplog.at_level(logging.INFO):
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert 'the training envs continue their episodes from the checkpoint' in caplog.text
    assert steps_in_csv(tmp_path) == [0, 100, 200, 300, 400]


def hang_with_a_sigterm_in_the_training_envs(monkeypatch, method, name=None):
    """Make the next run's training envs send SIGTERM to this process, then hang for good, in
    their vector env's ``method`` (for ``call``: when it calls ``name``); the patience of a
    call a signal came in is 0.2 s."""
    monkeypatch.setattr(trainer_module, 'SIGNALLED_STEP_PATIENCE_S', 0.2)
    real_create = trainer_module.create_environment
    made = []

    def create_hanging(*args, **kwargs):
        env = real_create(*args, **kwargs)
        if not made:  # the training envs, made first
            real_method = getattr(env._env, method)

            def hanging(*call_args, **call_kwargs):
                if name is None or call_args[0] == name:
                    os.kill(os.getpid(), signal.SIGTERM)
                    while True:
                        time.sleep(0.01)
                return real_method(*call_args, **call_kwargs)

            monkeypatch.setattr(env._env, method, hanging)
        made.append(env)
        return env

    monkeypatch.setattr(trainer_module, 'create_environment', create_hanging)


@pytest.mark.parametrize('replayed', [True, False], ids=['replay', 'reset'])
def test_a_signal_as_a_resumes_training_envs_start_says_a_hung_call_leaves_its_checkpoint(
    tmp_path, monkeypatch, capfd, replayed
):
    # The stop is announced as the signal comes: while a resume's training envs start (they
    # replay the checkpoint's episodes, or reset where they cannot), the stop a hung call
    # ends writes no checkpoint, and the announcement says which is left as it was.
    train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 200')
    checkpoint = tmp_path / 'checkpoints' / 'ckpt-200'
    files = {p.name: p.read_bytes() for p in checkpoint.iterdir()}
    if replayed:
        hang_with_a_sigterm_in_the_training_envs(monkeypatch, 'call', 'alf_lite_replay_episode')
    else:

        def replay(self, records):
            raise EpisodeReplayError('not replayable here')

        monkeypatch.setattr(BatchedEnvironment, 'replay', replay)
        hang_with_a_sigterm_in_the_training_envs(monkeypatch, 'reset')
    capfd.readouterr()
    parse_config(POINT, POINT_PARAMS + ['TrainerConfig.num_env_steps = 400'])
    with Trainer(TrainerConfig(), str(tmp_path), announce_stops=True) as trainer:
        with pytest.raises(TrainingInterrupted) as error:
            trainer.train()
    assert error.value.signum == signal.SIGTERM and not error.value.checkpoint_written
    said = capfd.readouterr().err
    assert said.count('SIGTERM: stopping') == 1, said
    assert (
        'SIGTERM: stopping once the iteration under way ends, with a checkpoint (the training '
        'envs start from the checkpoint this run resumed from: a call of theirs still '
        'running 0.2 s after this signal is ended, leaving that checkpoint as it was; another '
        'signal ends it at once)'
    ) in said, said
    assert {p.name: p.read_bytes() for p in checkpoint.iterdir()} == files
    assert checkpoint_steps(tmp_path) == [100, 200]


def test_a_signal_after_a_resumes_episode_replay_is_announced_as_any_other(
    tmp_path, monkeypatch, capfd
):
    # The replay is over: a signal in the iteration that follows it is that of any run.
    train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 200')
    sigterm_in_training_env_step(monkeypatch, 1, hangs=False)
    capfd.readouterr()
    parse_config(POINT, POINT_PARAMS + ['TrainerConfig.num_env_steps = 400'])
    with Trainer(TrainerConfig(), str(tmp_path), announce_stops=True) as trainer:
        with pytest.raises(TrainingInterrupted) as error:
            trainer.train()
    assert error.value.checkpoint_written
    said = capfd.readouterr().err
    assert (
        'SIGTERM: stopping once the iteration under way ends, with a checkpoint (an env call '
        'still running 0.2 s after this signal is ended; another signal ends it at once)'
    ) in said, said
    assert checkpoint_steps(tmp_path) == [100, 200, 201]


def test_signal_in_an_eval_env_step_lets_it_end_and_train_again_goes_on(tmp_path, monkeypatch):
    # The step is no hung one: the eval envs are left whole, and the trainer goes on.
    sigterm_during_the_second_evaluation(monkeypatch)
    parse_config(POINT, POINT_PARAMS + ['TrainerConfig.num_env_steps = 300'])
    with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
        with pytest.raises(TrainingInterrupted):
            trainer.train()
        assert checkpoint_steps(tmp_path) == [100, 200]
        monkeypatch.undo()  # the eval env steps without a signal again
        trainer.train()
    assert steps_in_csv(tmp_path) == [0, 100, 200, 300]


def test_signal_while_the_evaluation_computes_ends_it_at_its_next_step_with_a_checkpoint(
    tmp_path, monkeypatch
):
    real_evaluate = trainer_module.evaluate
    evaluations, actions = [], []

    def evaluate_signalled_at_200(env, policy, on_step=None, seed=None):
        evaluations.append(env)
        if len(evaluations) == 2:  # the evaluation at env step 200

            def policy_then_signal(observation):
                # In the policy, not in an env step: the evaluation ends after the step.
                actions.append(observation)
                os.kill(os.getpid(), signal.SIGINT)
                return policy(observation)

            return real_evaluate(env, policy_then_signal, on_step, seed)
        return real_evaluate(env, policy, on_step, seed)

    monkeypatch.setattr(trainer_module, 'evaluate', evaluate_signalled_at_200)
    params = ['TrainerConfig.num_env_steps = 400', 'TrainerConfig.checkpoint_interval = 1000']
    with pytest.raises(TrainingInterrupted):
        train_in_process(tmp_path, *params)
    assert len(actions) == 1
    assert checkpoint_steps(tmp_path) == [200]
    # Its row is the resume's to write.
    assert steps_in_csv(tmp_path) == [0, 100]
    state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / 'ckpt-200'))
    assert state['pending_evaluation'] is not None and state['collection'] is not None
    monkeypatch.setattr(trainer_module, 'evaluate', real_evaluate)
    train_in_process(tmp_path, *params)
    assert steps_in_csv(tmp_path) == [0, 100, 200, 300, 400]


class SignalSeenAtRead(StopSignals):
    """A SIGTERM that is first seen at the ``seen_at``-th read of ``received`` by the
    training loop (from 0; an evaluation's reads at each of its steps are not counted): it
    arrived just before that read, wherever the loop reads it."""

    seen_at = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reads = 0

    @property
    def received(self):
        if sys._getframe(1).f_code.co_name != 'on_step':
            self.reads += 1
        return signal.SIGTERM if self.reads > self.seen_at else None

    @received.setter
    def received(self, signum):
        pass


@pytest.mark.parametrize('seen_at', range(6))
def test_a_signal_seen_at_any_read_of_the_stop_flag_stops_with_a_checkpoint(
    tmp_path, monkeypatch, seen_at
):
    # Each read of the flag ends a window in which a signal can arrive: whichever
    # it arrives in, training stops after a checkpoint of the step it stops at.
    monkeypatch.setattr(SignalSeenAtRead, 'seen_at', seen_at)
    monkeypatch.setattr(trainer_module, 'StopSignals', SignalSeenAtRead)
    params = ['TrainerConfig.num_env_steps = 400', 'TrainerConfig.checkpoint_interval = 1000']
    with pytest.raises(TrainingInterrupted) as error:
        train_in_process(tmp_path, *params)
    assert error.value.signum == signal.SIGTERM
    steps = checkpoint_steps(tmp_path)
    assert len(steps) == 1
    state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / f'ckpt-{steps[0]}'))
    assert state['env_steps'] == steps[0] >= steps_in_csv(tmp_path)[-1]


def test_a_signal_as_the_final_checkpoint_is_written_stops_the_complete_run_for_it(
    tmp_path, monkeypatch, caplog
):
    # After the loop's last read of the flag: the run is complete, and the signal is still
    # reported (train's exit code 128 + its number), as at every other moment of a run.
    real_save = Trainer._save

    def save_signalled_at_the_end(self, *args, **kwargs):
        if self._env_steps == 400:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_save(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, '_save', save_signalled_at_the_end)
    with caplog.at_level(logging.WARNING), pytest.raises(TrainingInterrupted) as error:
        train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert error.value.signum == signal.SIGTERM and error.value.checkpoint_written
    assert 'SIGTERM came as the run wrote its final checkpoint: the run is complete' in caplog.text
    assert checkpoint_steps(tmp_path)[-1] == 400
    progress = (tmp_path / 'progress.csv').read_text()
    assert steps_in_csv(tmp_path) == [0, 100, 200, 300, 400]
    monkeypatch.undo()
    train_in_process(tmp_path, 'TrainerConfig.num_env_steps = 400')
    assert (tmp_path / 'progress.csv').read_text() == progress


@pytest.mark.parametrize(
    'param, message',
    [
        # With the ways to go on with the new setting.
        (
            'create_environment.num_parallel_environments=2',
            'create_environment.num_parallel_environments). Resume with the config the run '
            'started with, or train afresh with the new one: in another root_dir, or with '
            '--start_over, which moves this run aside.',
        ),
        ('TrainerConfig.replay_buffer_length=2000', 'does not fit the configured one'),
        # torch's lines of size mismatches: the first, and a count of the others.
        (
            "create_environment.env_name='MountainCarContinuous-v0'",
            'does not fit the configured algorithm (size mismatch for _actor._encoder.0.weight: '
            'copying a param with shape torch.Size([32, 3]) from checkpoint, the shape in '
            'current model is torch.Size([32, 2]); and 2 more). Was the config changed?',
        ),
        # Named as what the state lacks, not as the bare key "('actor_loss')".
        (
            'TrainerConfig.algorithm_ctor=@DdpgAlgorithm',
            "does not fit the configured algorithm (its state has no 'actor_loss').",
        ),
    ],
    ids=['num_envs', 'replay_buffer_length', 'env_name', 'algorithm'],
)
def test_resume_with_a_config_that_does_not_fit_changes_nothing_and_still_resumes(
    finished_run, tmp_path, param, message
):
    root_dir = copy_run(finished_run, tmp_path)
    before = tree_digest(root_dir)
    progress = (root_dir / 'progress.csv').read_text()
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600', param]))
    assert result.returncode == 2, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith('error: ') and message in last_line, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    # config.gin included: the run resumes from it as before.
    assert tree_digest(root_dir) == before
    result = run_train(train_command(root_dir, params=['TrainerConfig.num_env_steps=600']))
    assert_ok(result)
    assert resumed_from(root_dir, 400) in result.stderr, result.stderr[-3000:]
    # The rows up to 400 kept as written, wall times included: none was written again.
    assert (root_dir / 'progress.csv').read_text().startswith(progress)
    assert checkpoint_steps(root_dir)[-1] == 600


# --- a hung environment ---------------------------------------------------------------------

TESTS_DIR = REPO_ROOT / 'tests'
HANG_PARAMS = TINY + [
    'TrainerConfig.num_env_steps=1000',
    'TrainerConfig.summary_interval=100',
    'TrainerConfig.eval_interval=100000',
    'TrainerConfig.checkpoint_interval=100',
    'TrainerConfig.num_eval_episodes=1',
]


def hanging_train(root_dir, env_id, *params):
    """The train command and environment for a run on ``env_id`` of ``hanging_env``."""
    command = train_command(
        root_dir, [PENDULUM], HANG_PARAMS + [f"create_environment.env_name='{env_id}'", *params]
    )
    # train is run as a module after importing hanging_env, which registers the ids.
    command = with_prelude(command, 'import hanging_env\n')
    env = train_env()
    env['PYTHONPATH'] = os.pathsep.join([str(TESTS_DIR), env['PYTHONPATH']])
    return command, env


def start_hanging_train(command, env, new_session=False):
    """``hanging_train``'s ``command`` with ``env`` started by ``start_train``: a child of
    the train server, which imported the dependencies (not ``hanging_env``) once, imports
    ``hanging_env`` as a fresh interpreter does; its stderr goes to a file beside the
    root_dir."""
    root_dir = command[command.index('--root_dir') + 1]
    return start_train(command, f'{root_dir}.stderr', env=env, new_session=new_session)


def run_hanging(root_dir, env_id, *params):
    process = start_hanging_train(*hanging_train(root_dir, env_id, *params))
    try:
        _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        process.kill()
        process.wait()
    return subprocess.CompletedProcess(root_dir, process.returncode, None, stderr)


def env_process_ids(env) -> set:
    """The process ids of the env processes of ``env``, whose ``Process`` objects a crash or
    ``close()`` closes."""
    return {process.pid for process in env._env.processes}


def child_process_ids() -> set:
    """This process's children, alive or not yet reaped."""
    return {child.pid for child in psutil.Process().children()}


def test_env_process_that_never_answers_is_named_with_its_index_and_every_process_ends():
    env = create_environment(
        env_name='alf_lite_tests/HangsInStep5-v0',
        num_parallel_environments=2,
        use_subprocesses=True,
        step_timeout=1,
    )
    pids = env_process_ids(env)
    env.reset()
    started = time.monotonic()
    with pytest.raises(EnvironmentHungError) as error:
        for _ in range(10):
            env.step(torch.zeros(2, 1))
    assert time.monotonic() - started < 10
    message = str(error.value)
    assert "'alf_lite_tests/HangsInStep5-v0' (env 1 of 2)" in message, message
    assert 'step() within 1 s' in message and 'step_timeout' in message, message
    assert not pids & child_process_ids()
    env.close()


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_an_env_that_calls_sys_exit_is_named_as_one_that_raised(use_subprocesses):
    env = create_environment(
        env_name='alf_lite_tests/ExitsInStep5-v0',
        num_parallel_environments=2,
        use_subprocesses=use_subprocesses,
    )
    with env, pytest.raises(EnvironmentCrashedError) as error:
        env.reset()
        for _ in range(10):
            env.step(torch.zeros(2, 1))
    message = str(error.value)
    assert message == (
        "Environment 'alf_lite_tests/ExitsInStep5-v0' (env 1 of 2) raised in step(): SystemExit: 3"
    ), message
    assert re.search(r'hanging_env\.py", line \d+, in _hang', env_traceback(error.value))


def test_env_process_whose_close_never_returns_is_terminated_after_step_timeout(caplog):
    env = create_environment(
        env_name='alf_lite_tests/HangsInClose-v0',
        num_parallel_environments=2,
        use_subprocesses=True,
        step_timeout=1,
    )
    pids = env_process_ids(env)
    try:
        env.reset()
        # In a thread: a close that waits for the processes forever is seen to.
        closing = threading.Thread(target=env.close, daemon=True)
        closing.start()
        closing.join(10)
        assert not closing.is_alive(), 'close() still waits for the env processes'
        assert not pids & child_process_ids()
        assert "'alf_lite_tests/HangsInClose-v0' (env 0, 1 of 2) did not return from close()" in (
            caplog.text
        ), caplog.text
    finally:
        for child in psutil.Process().children():
            if child.pid in pids:
                child.kill()


def test_in_process_env_whose_close_never_returns_ends_the_process_after_step_timeout():
    result = run_python(
        f'import sys; sys.path.insert(0, {str(TESTS_DIR)!r})\n'
        'import hanging_env\n'
        'from alf_lite.environments import create_environment\n'
        "env = create_environment(env_name='alf_lite_tests/HangsInClose-v0', step_timeout=1)\n"
        'env.reset()\n'
        'env.close()\n',
        timeout=30,
    )
    assert result.returncode == HUNG_ENV_EXIT_CODE, result.stderr[-3000:]
    assert (
        "'alf_lite_tests/HangsInClose-v0' (env 0 of 1) (in process) did not return from close() "
        'within 1 s (create_environment.step_timeout)'
    ) in result.stderr, result.stderr[-3000:]


def test_trainer_stops_on_an_env_process_that_never_answers(tmp_path):
    root_dir = tmp_path / 'run'
    result = run_hanging(
        root_dir,
        'alf_lite_tests/HangsAfterCheckpoint-v0',
        'create_environment.num_parallel_environments=2',
        'create_environment.use_subprocesses=True',
        'create_environment.step_timeout=2',
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert '(env 0 of 2) did not answer step() within 2 s' in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().endswith(
        're-run the same command to resume from the latest (at 300 env steps).'
    ), result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    # Env 0 hangs in its 150th step, after the checkpoints at 100, 200 and 300 env steps.
    assert checkpoint_steps(root_dir) == [100, 200, 300]
    state, _ = ckpt.load_checkpoint(str(root_dir / 'checkpoints' / 'ckpt-300'))
    assert state['env_steps'] == 300


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_env_that_raises_stops_the_run_with_a_message_naming_it(tmp_path, use_subprocesses):
    root_dir = tmp_path / 'run'
    result = run_hanging(
        root_dir,
        'alf_lite_tests/CrashesAfterCheckpoint-v0',
        'create_environment.num_parallel_environments=2',
        f'create_environment.use_subprocesses={use_subprocesses}',
    )
    assert result.returncode == 1, result.stderr[-3000:]
    # The env's own stack, and last the
    # message naming the env; none of the trainer's frames.
    assert re.search(r'hanging_env\.py", line \d+, in _hang', result.stderr), result.stderr[-3000:]
    assert 'trainer.py", line' not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: Environment 'alf_lite_tests/CrashesAfterCheckpoint-v0' (env 0 of 2) "
        'raised in step(): RuntimeError: the simulator exploded. The run stopped; its '
        'checkpoints are left as they were: once the env is fixed, re-run the same command '
        'to resume from the latest (at 300 env steps).'
    ), result.stderr[-3000:]
    # Env 0 raises in its 150th step, after the checkpoints at 100, 200 and 300 env steps.
    assert checkpoint_steps(root_dir) == [100, 200, 300]


def test_an_in_process_env_whose_close_fails_after_it_raised_is_still_named(tmp_path):
    root_dir = tmp_path / 'run'
    result = run_hanging(
        root_dir,
        'alf_lite_tests/CrashesAndCannotClose-v0',
        'create_environment.num_parallel_environments=2',
        'create_environment.use_subprocesses=False',
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r'hanging_env\.py", line \d+, in _hang', result.stderr), result.stderr[-3000:]
    assert 'trainer.py", line' not in result.stderr, result.stderr[-3000:]
    assert 'not connected to the simulator' in result.stderr, result.stderr[-3000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(
        "error: Environment 'alf_lite_tests/CrashesAndCannotClose-v0' (env 0 of 2) "
        'raised in step(): RuntimeError: the simulator exploded. The run stopped;'
    ), result.stderr[-3000:]
    assert checkpoint_steps(root_dir) == [100, 200, 300]


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_envs_whose_close_raises_at_the_end_of_a_run_are_warnings_naming_them(
    tmp_path, use_subprocesses
):
    root_dir = tmp_path / 'run'
    result = run_hanging(
        root_dir,
        'alf_lite_tests/CannotClose-v0',
        'create_environment.num_parallel_environments=2',
        f'create_environment.use_subprocesses={use_subprocesses}',
        'TrainerConfig.num_env_steps=300',
    )
    # The run is done and written: its envs' close is no failure of the run.
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    for where in ('env 0 of 2', 'env 1 of 2', 'eval env 0 of'):
        assert re.search(
            rf"Environment 'alf_lite_tests/CannotClose-v0' \({where}.*\) raised in close\(\): "
            'RuntimeError: not connected to the simulator',
            result.stderr,
        ), result.stderr[-3000:]
    assert checkpoint_steps(root_dir) == [100, 200, 300]


def test_an_eval_env_that_raises_is_named_as_an_eval_env(tmp_path):
    # Before the first checkpoint: the same command starts the run again.
    params = (
        'create_environment.num_parallel_environments=2',
        'TrainerConfig.eval_interval=200',
        'TrainerConfig.num_eval_episodes=3',
        'TrainerConfig.checkpoint_interval=1000',
    )
    for _ in range(2):
        result = run_hanging(tmp_path / 'run', 'alf_lite_tests/CrashesWhenEvaluated-v0', *params)
        assert result.returncode == 1, result.stderr[-3000:]
        assert result.stderr.strip().splitlines()[-1] == (
            "error: Environment 'alf_lite_tests/CrashesWhenEvaluated-v0' (eval env 0 of 3) "
            'raised in step(): RuntimeError: the simulator exploded. The run stopped before '
            'its first checkpoint: once the env is fixed, re-run the same command to start it '
            'again.'
        ), result.stderr[-3000:]
        assert checkpoint_steps(tmp_path / 'run') == []


def test_a_nan_observation_stops_the_run_naming_it_in_one_line(tmp_path):
    root_dir = tmp_path / 'run'
    result = run_hanging(root_dir, 'alf_lite_tests/NanAfterCheckpoint-v0')
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    # Before the policy acts on it: the env, the step and the value are named.
    assert re.match(
        r"error: Environment 'alf_lite_tests/NanAfterCheckpoint-v0' \(env 0 of 1\): the "
        r'observation and the reward of step \d+ are not finite: observation\[0\] = nan, '
        r'reward = nan\. An env must return finite ones',
        last,
    ), last
    assert checkpoint_steps(root_dir) == [100]


def test_in_process_env_that_never_returns_ends_the_run_with_every_stack(tmp_path):
    root_dir = tmp_path / 'run'
    result = run_hanging(
        root_dir, 'alf_lite_tests/HangsAfterCheckpoint-v0', 'create_environment.step_timeout=2'
    )
    assert result.returncode == HUNG_ENV_EXIT_CODE, result.stderr[-3000:]
    assert '(in process) did not return from step() within 2 s' in result.stderr
    # Every thread's stack, the hung step among them.
    assert 'most recent call first' in result.stderr, result.stderr[-3000:]
    assert re.search(r'hanging_env\.py", line \d+ in _hang', result.stderr), result.stderr[-3000:]
    # The env hangs in its 150th step: the checkpoint at 100 is the last, complete and loadable.
    assert sorted(os.listdir(root_dir / 'checkpoints')) == ['ckpt-100']
    state, rb = ckpt.load_checkpoint(str(root_dir / 'checkpoints' / 'ckpt-100'))
    assert state['env_steps'] == 100 and rb is not None


@pytest.mark.parametrize(
    'sig, use_subprocesses',
    [
        (signal.SIGTERM, False),
        (signal.SIGINT, False),
        (signal.SIGTERM, True),
        (signal.SIGINT, True),
    ],
)
def test_signal_ends_a_run_whose_env_never_returns(tmp_path, sig, use_subprocesses):
    root_dir = tmp_path / 'run'
    marker = tmp_path / 'hanging'
    command, env = hanging_train(
        root_dir,
        'alf_lite_tests/HangsAfterCheckpoint-v0',
        'create_environment.num_parallel_environments=2',
        f'create_environment.use_subprocesses={use_subprocesses}',
    )
    env[hanging_env.MARKER_VARIABLE] = str(marker)
    process = start_hanging_train(command, env, new_session=True)
    try:
        deadline = time.time() + RUN_TIMEOUT_S
        while not marker.exists():
            assert process.poll() is None and time.time() < deadline, process.communicate()[1]
            time.sleep(0.05)
        children = psutil.Process(process.pid).children(recursive=True)
        time.sleep(0.5)  # well inside the hung step
        send_as_user(process, sig)
        # The step is given its patience (10 s) to end; a second signal ends it at once
        # (sent later than a repeat of the first would be).
        time.sleep(SAME_STOP_WITHIN_S + 0.2)
        assert process.poll() is None
        send_as_user(process, sig)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:  # the signal did not end it: leave nothing behind
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 128 + sig, stderr[-3000:]
    # A final checkpoint of the state before the hung step.
    steps = checkpoint_steps(root_dir)
    assert steps[-1] >= 200, steps
    state, _ = ckpt.load_checkpoint(str(root_dir / 'checkpoints' / f'ckpt-{steps[-1]}'))
    assert state['env_steps'] == steps[-1]
    # The signal ended an env step, so the envs' state is unknown: a resume restarts them.
    assert state['collection'] is None
    earlier, _ = ckpt.load_checkpoint(str(root_dir / 'checkpoints' / f'ckpt-{steps[-2]}'))
    assert earlier['collection'] is not None
    gone = psutil.wait_procs(children, timeout=10)[1] == []
    assert gone, [c.pid for c in children if c.is_running()]


@pytest.mark.parametrize(
    'num_env_steps, signalled_step, rows, checkpoints',
    [
        # Mid-iteration: the summary, evaluation and checkpoint due at 100 come at 120.
        (300, 105, ['0', '120', '210', '300'], [104, 120, 210, 300]),
        # In its last env step, after its updates: they are not done again.
        (300, 120, ['0', '120', '210', '300'], [119, 120, 210, 300]),
        # In the run's last iteration, which ends past num_env_steps, as the run's end does.
        (100, 105, ['0', '120'], [104, 120]),
    ],
    ids=['mid_iteration', 'last_env_step', 'last_iteration'],
)
def test_an_iteration_a_signal_cut_short_is_finished_by_the_resume(
    tmp_path, monkeypatch, num_env_steps, signalled_step, rows, checkpoints
):
    # Iterations of 30 env steps end at 30, 60, 90, 120...; a SIGTERM during an env step
    # that hangs ends that step, and the checkpoint is of the steps before it.
    unrolled = [
        'TrainerConfig.unroll_length = 30',
        f'TrainerConfig.num_env_steps = {num_env_steps}',
        'TrainerConfig.eval_interval = 100',
    ]
    whole, cut = tmp_path / 'whole', tmp_path / 'cut'
    train_in_process(whole, *unrolled)
    real_create = sigterm_in_training_env_step(monkeypatch, signalled_step)
    with pytest.raises(TrainingInterrupted):
        train_in_process(cut, *unrolled)
    state, _ = ckpt.load_checkpoint(str(cut / 'checkpoints' / f'ckpt-{signalled_step - 1}'))
    assert state['iteration_start'] == 90 and state['collection'] is None
    assert state['iteration_trained'] == (signalled_step == 120)
    monkeypatch.setattr(trainer_module, 'create_environment', real_create)
    train_in_process(cut, *unrolled)
    # The resume collects the steps the iteration had left: nothing due in it is skipped,
    # no update is done twice, and every later iteration ends where the run never
    # stopped ended its own.
    rows_of = {root: deterministic_rows(root) for root in (whole, cut)}
    assert [r['env_steps'] for r in rows_of[whole]] == rows
    assert [(r['env_steps'], r['num_updates'], r[EVAL_RETURN] != '') for r in rows_of[cut]] == [
        (r['env_steps'], r['num_updates'], r[EVAL_RETURN] != '') for r in rows_of[whole]
    ]
    assert checkpoint_steps(cut) == checkpoints
    state, _ = ckpt.load_checkpoint(str(cut / 'checkpoints' / 'ckpt-120'))
    assert state['iteration_start'] is None and not state['iteration_trained']


def run_whole_and_cut_at(tmp_path, monkeypatch, step, num_env_steps, hangs=True):
    """Runs of iterations of 30 env steps: ``whole`` to its end, ``cut`` until a SIGTERM
    ends its env step ``step``, which hangs; returns both directories and the params (to
    resume with).
    """
    unrolled = [
        'TrainerConfig.unroll_length = 30',
        f'TrainerConfig.num_env_steps = {num_env_steps}',
        'TrainerConfig.eval_interval = 100',
    ]
    whole, cut = tmp_path / 'whole', tmp_path / 'cut'
    train_in_process(whole, *unrolled)
    real_create = sigterm_in_training_env_step(monkeypatch, step, hangs)
    with pytest.raises(TrainingInterrupted):
        train_in_process(cut, *unrolled)
    monkeypatch.setattr(trainer_module, 'create_environment', real_create)
    return whole, cut, unrolled


def test_a_signal_in_an_env_step_that_ends_lets_the_iteration_finish_as_if_never_stopped(
    tmp_path, monkeypatch
):
    # Iterations of 30 env steps; a SIGTERM comes during env step 105, which ends within
    # its patience: the iteration from 90 to 120 finishes with its updates, its checkpoint
    # keeps the envs' episodes, and the resume trains on as the run never stopped did, to
    # the last digit.
    whole, cut, unrolled = run_whole_and_cut_at(
        tmp_path, monkeypatch, 105, num_env_steps=300, hangs=False
    )
    assert checkpoint_steps(cut) == [120]
    state, _ = ckpt.load_checkpoint(str(cut / 'checkpoints' / 'ckpt-120'))
    assert state['collection'] is not None and state['iteration_start'] is None
    train_in_process(cut, *unrolled)
    assert deterministic_rows(cut) == deterministic_rows(whole)
    weights = {}
    for root in (whole, cut):
        state, _ = ckpt.load_checkpoint(str(root / 'checkpoints' / 'ckpt-300'))
        weights[root] = ckpt.policy_state(state['algorithm'])
    tensors = [k for k, v in weights[whole].items() if torch.is_tensor(v)]
    assert len(tensors) > 10
    assert all(torch.equal(weights[cut][k], weights[whole][k]) for k in tensors)


def test_a_cut_iterations_summary_holds_the_losses_of_its_updates_done_before_the_signal(
    tmp_path, monkeypatch
):
    # Iterations of 30 env steps; a SIGTERM ends env step 120 (hung), the last of the
    # iteration from 90 to 120, after its updates. The resume does not do them again, and
    # the summary at 120 holds their losses, as that of the run never stopped does.
    whole, cut, unrolled = run_whole_and_cut_at(tmp_path, monkeypatch, 120, num_env_steps=150)
    state, _ = ckpt.load_checkpoint(str(cut / 'checkpoints' / 'ckpt-119'))
    assert state['iteration_trained']
    train_in_process(cut, *unrolled)
    rows = {root: {r['env_steps']: r for r in deterministic_rows(root)} for root in (whole, cut)}
    losses = [column for column in rows[whole]['120'] if column.endswith('_loss')]
    assert 'train/critic_loss' in losses
    # The envs restarted: other numbers, but every loss is there.
    assert all(rows[cut]['120'][column] != '' for column in losses)
    assert rows[cut]['120']['num_updates'] == rows[whole]['120']['num_updates']


@pytest.mark.parametrize(
    'unroll_length, rows', [(10, [0, 120, 200, 300]), (60, [0, 120, 240, 300])]
)
def test_a_cut_iteration_resumed_with_another_unroll_length_is_finished_in_its_own(
    tmp_path, monkeypatch, unroll_length, rows
):
    # Iterations of 30 env steps; a SIGTERM ends env step 105 (hung), in the one from 90 to 120.
    # The resume changes unroll_length: the cut iteration still ends at 120 with its
    # updates, and the new length counts from there.
    whole, cut, unrolled = run_whole_and_cut_at(tmp_path, monkeypatch, 105, num_env_steps=300)
    train_in_process(cut, *unrolled, f'TrainerConfig.unroll_length = {unroll_length}')
    resumed = {int(r['env_steps']): int(r['num_updates']) for r in deterministic_rows(cut)}
    assert sorted(resumed) == rows
    uncut = {int(r['env_steps']): int(r['num_updates']) for r in deterministic_rows(whole)}
    assert resumed[120] == uncut[120] > 0
    # Then one iteration's updates for each iteration of the new length.
    per_iteration, remainder = divmod(uncut[300] - uncut[210], 3)
    assert per_iteration > 0 and remainder == 0
    assert resumed[300] == resumed[120] + (300 - 120) // unroll_length * per_iteration
    state, _ = ckpt.load_checkpoint(str(cut / 'checkpoints' / 'ckpt-120'))
    assert (state['iteration_start'], state['iteration_length']) == (None, 30)
    state, _ = ckpt.load_checkpoint(str(cut / 'checkpoints' / 'ckpt-300'))
    assert (state['iteration_start'], state['iteration_length']) == (None, unroll_length)


def test_a_signal_in_an_env_step_after_a_deferred_nan_reports_it(tmp_path, monkeypatch):
    # The rewards turn huge after 250 steps; with the check deferred, nothing reads the
    # losses back before a summary or checkpoint (at 1000). A SIGTERM ends env step 400 (hung).
    sigterm_in_training_env_step(monkeypatch, 400)
    with pytest.raises(TrainingError, match=r'the critic loss is inf at env step \d+'):
        train_in_process(
            tmp_path,
            "create_environment.env_name = 'alf_lite_tests/HugeReward-v0'",
            'TrainerConfig.num_env_steps = 2000',
            'TrainerConfig.defer_non_finite_checks = True',
            'TrainerConfig.summary_interval = 1000',
            'TrainerConfig.checkpoint_interval = 1000',
        )
    # The state before the bad update is kept as last-good; no regular checkpoint
    # holds the state its skipped updates left.
    saved = sorted(os.listdir(tmp_path / 'checkpoints'))
    assert [s for s in saved if s.startswith('ckpt-')] == []
    assert [s for s in saved if s.startswith('last_good-')] == ['last_good-399']


def test_deferred_nan_check_stops_at_the_next_summary_with_finite_checkpoints(tmp_path):
    # The check a GPU run makes: no loss is read back per update; updates after
    # the bad one are skipped and the run stops at the next summary.
    with pytest.raises(TrainingError) as error:
        train_in_process(
            tmp_path,
            "create_environment.env_name = 'alf_lite_tests/HugeReward-v0'",
            'TrainerConfig.num_env_steps = 2000',
            'TrainerConfig.defer_non_finite_checks = True',
            # No checkpoint before the run ends: only a summary stops it in time.
            'TrainerConfig.checkpoint_interval = 1000',
        )
    message = str(error.value)
    found = re.search(r'the critic loss is inf at env step (\d+) \(update \d+\)', message)
    assert found and 'skipped' in message, message
    bad_step = int(found.group(1))
    saved = sorted(os.listdir(tmp_path / 'checkpoints'))
    (last_good,) = [s for s in saved if s.startswith('last_good-')]
    assert last_good in message
    stopped_at = int(last_good.split('-')[1])
    summary_interval = 100
    assert bad_step <= stopped_at <= bad_step + summary_interval
    for name in saved:
        state, _ = ckpt.load_checkpoint(str(tmp_path / 'checkpoints' / name))
        for value in state['algorithm']['module'].values():
            if torch.is_tensor(value) and value.is_floating_point():
                assert torch.isfinite(value).all(), name
