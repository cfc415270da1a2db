"""A training env's running episode, recorded and replayed in a new env: what a resume continues."""

import importlib
import re
import time

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from alf_lite.data import StepType
from alf_lite.environments import EpisodeReplayError, create_environment, episode_replay
from cli_helpers import PENDULUM, TINY, assert_ok, checkpoint_steps, run_train, train_command
from test_environments import _rollout  # registers the alf_test/ envs

FIELDS = ('step_type', 'observation', 'reward', 'discount')


def _actions(env, num_steps, seed):
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.rand(env.num_envs, env.action_dim, generator=generator) * 2 - 1
        for _ in range(num_steps)
    ]


def _assert_same(a, b, where):
    for field in FIELDS:
        assert torch.equal(getattr(a, field), getattr(b, field)), f'{field} at {where}'


def _assert_same_records(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert {k: v for k, v in x.items() if k != 'actions'} == {
            k: v for k, v in y.items() if k != 'actions'
        }, f'env {i}'
        assert torch.equal(x['actions'], y['actions']), f'actions of env {i}'


def _step_until(env, condition, max_steps=200):
    """Step with random actions until ``condition(time_step)``; return the steps, reset first."""
    steps = _rollout(env, 0)
    for action in _actions(env, max_steps, seed=1):
        steps.append(env.step(action))
        if condition(steps[-1]):
            return steps
    raise AssertionError(f'no step within {max_steps} met the condition')


@pytest.mark.parametrize(
    'env_name, num_envs, use_subprocesses, until',
    [
        # Random episode lengths from np_random: one env just ended (LAST, its
        # reset is due), one just reset (FIRST) after an unseeded reset.
        (
            'alf_test/Countdown-v0',
            3,
            True,
            lambda ts: (
                bool((ts.step_type == StepType.LAST).any())
                and bool((ts.step_type == StepType.FIRST).any())
            ),
        ),
        # Mid-way through the episode of the seeded first reset.
        ('Pendulum-v1', 2, False, 150),
        # MuJoCo with terminations (discount 0): an env just reset, unseeded.
        ('Hopper-v5', 2, False, lambda ts: (ts.step_type == StepType.FIRST).any()),
        # PyBullet (its contact cache is state too), in process and in subprocesses.
        ('HumanoidBullet-v0', 2, False, lambda ts: (ts.step_type == StepType.FIRST).any()),
        ('ICubWalk-v0', 2, True, lambda ts: (ts.step_type == StepType.FIRST).any()),
    ],
    ids=['countdown-subprocesses', 'pendulum-first-episode', 'hopper', 'humanoid-bullet', 'icub'],
)
def test_a_replayed_episode_goes_on_as_the_recorded_env_would(
    env_name, num_envs, use_subprocesses, until
):
    with create_environment(env_name, num_envs, seed=3, use_subprocesses=use_subprocesses) as env:
        steps = _rollout(env, until) if isinstance(until, int) else _step_until(env, until)
        records = env.episode_records()
        actions = _actions(env, 60, seed=2)
        went_on = [env.step(a) for a in actions]
        records_went_on = env.episode_records()
        # Unseeded: each env's random generator runs on.
        went_on.append(env.reset())
    # Another seed, so that nothing but the records can make the envs agree.
    with create_environment(env_name, num_envs, seed=99, use_subprocesses=use_subprocesses) as env:
        _assert_same(env.replay(records), steps[-1], 'the replayed step')
        # The replayed envs record their episodes again: a second resume continues them.
        _assert_same_records(env.episode_records(), records)
        replayed = [env.step(a) for a in actions]
        _assert_same_records(env.episode_records(), records_went_on)
        replayed.append(env.reset())
    for t, (a, b) in enumerate(zip(went_on, replayed)):
        _assert_same(a, b, f'step {t} after the replay')
    assert any((ts.step_type == StepType.FIRST).any() for ts in went_on[1:]), (
        'no episode ended after the replay: its resets were never checked'
    )
    for record in records:
        assert isinstance(record['actions'], torch.Tensor)
        assert (record['seed'] is None) != (record['rng'] is None)
    if env_name == 'Pendulum-v1':
        assert all(r['seed'] is not None and len(r['actions']) == 150 for r in records)
    else:
        assert any(r['rng'] is not None for r in records)


def test_a_malformed_record_is_refused_naming_the_env():
    with create_environment('Pendulum-v1', 2, seed=0) as env:
        _rollout(env, 5)
        records = env.episode_records()
        wrong_shape = [records[0], dict(records[1], actions=torch.zeros(5, 3))]
        with pytest.raises(EpisodeReplayError, match=r'env 1 of 2.*shape.*\[steps, 1\]'):
            env.replay(wrong_shape)
        no_reset = [dict(records[0], seed=None), records[1]]
        with pytest.raises(EpisodeReplayError, match='env 0 of 2.*exactly one of a seed'):
            env.replay(no_reset)
        with pytest.raises(EpisodeReplayError, match='env 1 of 2.*not a dict'):
            env.replay([records[0], {'seed': 1}])
        with pytest.raises(EpisodeReplayError, match='1 episode records for 2 envs'):
            env.replay(records[:1])


def test_an_env_that_cannot_replay_its_record_is_named_and_the_envs_still_reset():
    with create_environment('alf_test/Countdown-v0', 2, seed=0, use_subprocesses=True) as env:
        _rollout(env, 12)
        records = env.episode_records()
        other_generator = np.random.Generator(np.random.MT19937(0)).bit_generator.state
        records[1] = dict(records[1], seed=None, rng=other_generator)
        with pytest.raises(EpisodeReplayError, match=r'env 1 of 2.*could not replay.*MT19937'):
            env.replay(records)
        # The env processes live on: the caller resets them.
        assert env.reset(seed=[5, 6]).step_type.tolist() == [StepType.FIRST] * 2


def test_an_episode_longer_than_the_limit_has_no_record(monkeypatch):
    monkeypatch.setattr(episode_replay, 'MAX_RECORDED_STEPS', 5)
    with create_environment('Pendulum-v1', 1, seed=0) as env:
        _rollout(env, 5)
        assert env.episode_records()[0] is not None
        env.step(torch.zeros(1, 1))
        assert env.episode_records() == [None]
        env.reset(seed=1)
        assert len(env.episode_records()[0]['actions']) == 0


def test_records_are_refused_while_a_step_is_pending():
    with create_environment('Pendulum-v1', 1, seed=0) as env:
        env.reset()
        env.step_async(torch.zeros(1, 1))
        with pytest.raises(RuntimeError, match='pending'):
            env.episode_records()
        env.step_wait()


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_replaying_into_stepped_envs_forgets_the_resets_they_had_pending(use_subprocesses):
    # Episodes of 3 steps: after 3 steps every env is at LAST and resets at its next step.
    with create_environment('alf_test/Countdown3-v0', 2, seed=0) as env:
        _rollout(env, 1)
        records = env.episode_records()
        expected = env.step(torch.zeros(2, 1))
    with create_environment(
        'alf_test/Countdown3-v0', 2, seed=7, use_subprocesses=use_subprocesses
    ) as env:
        steps = _rollout(env, 3)
        assert steps[-1].step_type.tolist() == [StepType.LAST] * 2
        env.replay(records)
        _assert_same(env.step(torch.zeros(2, 1)), expected, 'the step after the replay')
        assert expected.step_type.tolist() == [StepType.MID] * 2


class LegacyGeneratorEnv(gymnasium.Env):
    """Draws its start from a ``RandomState`` or an MT19937 ``Generator`` in ``np_random``."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self, kind='random_state'):
        self._kind = kind

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._np_random = (
                np.random.RandomState(seed % 2**32)
                if self._kind == 'random_state'
                else np.random.Generator(np.random.MT19937(seed))
            )
        return np.array([self.np_random.uniform(-1, 1)], dtype=np.float32), {}

    def step(self, action):
        return np.zeros(1, dtype=np.float32), 0.0, True, False, {}


gymnasium.register('alf_test/RandomState-v0', entry_point=LegacyGeneratorEnv, max_episode_steps=10)
gymnasium.register(
    'alf_test/MT19937-v0',
    entry_point=LegacyGeneratorEnv,
    max_episode_steps=10,
    kwargs=dict(kind='mt19937'),
)


@pytest.mark.parametrize('env_name', ['alf_test/RandomState-v0', 'alf_test/MT19937-v0'])
def test_an_episode_from_a_generator_a_checkpoint_cannot_keep_has_no_record(env_name):
    with create_environment(env_name, 1, seed=0) as env:
        env.reset()
        assert env.episode_records()[0]['seed'] is not None  # seeded: replayable
        env.step(torch.zeros(1, 1))  # terminates
        env.step(torch.zeros(1, 1))  # the unseeded reset
        assert env.episode_records() == [None]


def test_a_record_longer_than_any_episode_is_refused_before_it_is_replayed():
    with create_environment('Pendulum-v1', 1, seed=0) as env:
        _rollout(env, 2)
        (record,) = env.episode_records()
        # A stride-0 tensor: a few bytes in a file, MAX_RECORDED_STEPS + 1 rows.
        huge = torch.zeros(1, 1).expand(episode_replay.MAX_RECORDED_STEPS + 1, 1)
        with pytest.raises(EpisodeReplayError, match='more than an episode record holds'):
            env.replay([dict(record, actions=huge)])


class SlowEnv(gymnasium.Env):
    """Each step takes ``seconds_per_step`` (10 ms)."""

    seconds_per_step = 0.01
    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        time.sleep(self.seconds_per_step)
        return np.asarray(action, dtype=np.float32), 0.0, False, False, {}


gymnasium.register('alf_test/Slow-v0', entry_point=SlowEnv, max_episode_steps=100)


def test_a_replay_may_take_the_step_timeout_for_each_step_it_replays():
    with create_environment(
        'alf_test/Slow-v0', 2, seed=0, use_subprocesses=True, step_timeout=0.05
    ) as env:
        _rollout(env, 30)
        records = env.episode_records()
    with create_environment(
        'alf_test/Slow-v0', 2, seed=0, use_subprocesses=True, step_timeout=0.05
    ) as env:
        start = time.monotonic()
        at = env.replay(records)  # 30 steps of 10 ms: more than one step's 0.05 s
        assert time.monotonic() - start > 0.25
        assert at.step_type.tolist() == [StepType.MID] * 2


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_an_episode_replayed_to_its_time_limit_resets_at_the_next_step(use_subprocesses):
    # Pendulum never terminates: its 3rd step is LAST by truncation (discount 1).
    with create_environment(
        'Pendulum-v1', 2, seed=3, use_subprocesses=use_subprocesses, max_episode_steps=3
    ) as env:
        steps = _rollout(env, 3)
        assert steps[-1].step_type.tolist() == [StepType.LAST] * 2
        assert steps[-1].discount.tolist() == [1.0, 1.0]
        records = env.episode_records()
        assert [r['ended'] for r in records] == [True, True]
        actions = _actions(env, 4, seed=2)
        went_on = [env.step(a) for a in actions]
        went_on_records = env.episode_records()
    with create_environment(
        'Pendulum-v1', 2, seed=99, use_subprocesses=use_subprocesses, max_episode_steps=3
    ) as env:
        _assert_same(env.replay(records), steps[-1], 'the replayed step')
        replayed = [env.step(a) for a in actions]
        replayed_records = env.episode_records()
    F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
    assert [ts.step_type.tolist() for ts in replayed] == [[F, F], [M, M], [M, M], [L, L]]
    for t, (a, b) in enumerate(zip(went_on, replayed)):
        _assert_same(a, b, f'step {t} after the replay')
    # The episode the reset began is recorded as well: a second resume continues it.
    _assert_same_records(replayed_records, went_on_records)


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_a_reset_after_replaying_an_ended_episode_drops_the_reset_that_was_due(use_subprocesses):
    # Episodes of 3 steps: the record's last step is LAST, so the replayed env
    # would reset at its next step; a reset() in between makes that step a real one.
    with create_environment('alf_test/Countdown3-v0', 2, seed=0) as env:
        _rollout(env, 3)
        records = env.episode_records()
    with create_environment(
        'alf_test/Countdown3-v0', 2, seed=7, use_subprocesses=use_subprocesses
    ) as env:
        assert env.replay(records).step_type.tolist() == [StepType.LAST] * 2
        env.reset(seed=[5, 6])
        after = env.step(torch.zeros(2, 1))
    assert after.step_type.tolist() == [StepType.MID] * 2
    assert after.reward.tolist() == [1.0, 1.0]
    assert after.observation[:, 0].tolist() == [1.0, 1.0]  # steps since the reset


class DoublingEnv(gymnasium.Env):
    """A point moved by twice its action, which it doubles in the array it is given."""

    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform(-1, 1))
        return np.array([self.x]), {}

    def step(self, action):
        action *= 2.0
        self.x += float(action[0])
        return np.array([self.x]), -abs(self.x), False, False, {}


gymnasium.register('alf_test/Doubling-v0', entry_point=DoublingEnv, max_episode_steps=50)


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_an_env_that_changes_its_action_in_place_replays_the_actions_it_was_given(
    use_subprocesses,
):
    with create_environment(
        'alf_test/Doubling-v0', 2, seed=0, use_subprocesses=use_subprocesses
    ) as env:
        steps = _rollout(env, 3)
        records = env.episode_records()
    kept = [r['actions'].clone() for r in records]
    with create_environment(
        'alf_test/Doubling-v0', 2, seed=9, use_subprocesses=use_subprocesses
    ) as env:
        _assert_same(env.replay(records), steps[-1], 'the replayed step')
        _assert_same_records(env.episode_records(), records)
    # The replay left the caller's records (a checkpoint's) as they were.
    for a, r in zip(kept, records):
        assert torch.equal(a, r['actions'])


# A module that registers 'alf_test/Diverging-v0', to write where a train process imports it: a
# simulator that is not deterministic across processes. In a process where DIVERGING_STEPS is n,
# the first n steps that its envs take observe NaN; every other step is finite.
DIVERGING_ENV_MODULE = """
import os

import gymnasium
import numpy as np

steps_in_process = 0


class DivergingEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float64)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform(-1, 1))
        return np.array([self.x, 0.0]), {}

    def step(self, action):
        global steps_in_process
        steps_in_process += 1
        self.x = 0.9 * self.x + 0.1 * float(action[0])
        diverged = steps_in_process <= int(os.environ.get('DIVERGING_STEPS', 0))
        return np.array([self.x, np.nan if diverged else 0.0]), -self.x**2, False, False, {}


gymnasium.register(
    'alf_test/Diverging-v0',
    entry_point=DivergingEnv,
    max_episode_steps=300,
    disable_env_checker=True,
)
"""
DIVERGING_ENV = 'diverging_env:alf_test/Diverging-v0'


def test_a_replay_that_ends_on_a_non_finite_value_did_not_replay_its_episode(tmp_path, monkeypatch):
    (tmp_path / 'diverging_env.py').write_text(DIVERGING_ENV_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    diverging_env = importlib.import_module('diverging_env')
    with create_environment(DIVERGING_ENV, 2, seed=0) as env:
        _rollout(env, 5)
        records = env.episode_records()
    # The replay's 10 steps (5 in each env) observe NaN.
    monkeypatch.setenv('DIVERGING_STEPS', str(diverging_env.steps_in_process + 10))
    with create_environment(DIVERGING_ENV, 2, seed=0) as env:
        with pytest.raises(EpisodeReplayError) as raised:
            env.replay(records)
        assert env.reset(seed=[5, 6]).step_type.tolist() == [StepType.FIRST] * 2
    assert str(raised.value) == (
        f"Environment '{DIVERGING_ENV}' (env 0 of 2) replayed its episode to values that are "
        'not finite (observation[1] = nan), unlike the recorded one: the env is not '
        'deterministic given its seed and actions, or not the one the episode was recorded '
        'in (an env setting the resume changed).'
    )


@pytest.mark.timeout(240)
def test_a_resume_whose_replay_ends_on_a_non_finite_value_restarts_the_envs_with_a_warning(
    tmp_path, monkeypatch
):
    (tmp_path / 'diverging_env.py').write_text(DIVERGING_ENV_MODULE)
    root_dir = tmp_path / 'run'
    params = TINY + [
        f"create_environment.env_name='{DIVERGING_ENV}'",
        'TrainerConfig.checkpoint_interval=150',
        'TrainerConfig.eval_interval=150',
        'TrainerConfig.num_eval_episodes=1',
    ]
    command = train_command(root_dir, [PENDULUM], params + ['TrainerConfig.num_env_steps=150'])
    assert_ok(run_train(command, cwd=tmp_path))
    # In the resumed process the replay of the checkpoint's 150 steps ends on NaN.
    monkeypatch.setenv('DIVERGING_STEPS', '150')
    # The env's module lies beside the run, outside the installed packages.
    command = train_command(root_dir, params=['TrainerConfig.num_env_steps=200'])
    result = run_train(command + ['--trust_imports'], cwd=tmp_path)
    assert_ok(result)
    assert re.search(
        r'the training envs cannot continue their episodes \('
        + re.escape(
            f"Environment '{DIVERGING_ENV}' (env 0 of 1) replayed its episode to values that "
            'are not finite (observation[1] = nan)'
        )
        + r'.*\); they start new ones',
        result.stderr,
    ), result.stderr[-3000:]
    assert checkpoint_steps(root_dir)[-1] == 200
