"""The batched gymnasium environment (step types, parallel envs, crashes) and the point task."""

import contextlib
import gc
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from decimal import Decimal
from fractions import Fraction

import gymnasium
import numpy as np
import psutil
import pytest
import torch
from gymnasium import spaces
from gymnasium.envs.classic_control.pendulum import PendulumEnv
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AsyncVectorEnv

import alf_lite.all_configurables  # noqa: F401
from alf_lite.config import parse_config
from alf_lite.data import StepType
from alf_lite.environments import (
    BatchedEnvironment,
    EnvironmentCrashedError,
    create_environment,
    watchdog,
)
from alf_lite.environments.point_env import POINT_TARGET_ID
from alf_lite.environments.suite_gym import default_use_subprocesses, env_traceback
from alf_lite.environments.watchdog import HUNG_ENV_EXIT_CODE
from alf_lite.seeding import train_env_seeds
from alf_lite.trainer import Trainer, TrainerConfig
from cli_helpers import PENDULUM, TINY, run_python, run_train, train_command, train_env

SAC_GIN = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'examples', 'common', 'sac.gin'
)


class CountdownEnv(gymnasium.Env):
    """Terminates after a length drawn from [min_length, max_length]; reward 1 per step.

    The observation is ``[steps since reset, episode length]``.
    """

    def __init__(self, min_length=2, max_length=5):
        self.observation_space = spaces.Box(0.0, 100.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._min_length = min_length
        self._max_length = max_length

    def _observation(self):
        return np.array([self._t, self._length], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._length = int(self.np_random.integers(self._min_length, self._max_length + 1))
        return self._observation(), {}

    def step(self, action):
        self._t += 1
        return self._observation(), 1.0, self._t >= self._length, False, {}


class EchoEnv(gymnasium.Env):
    """Observes the action it received, so a test can read the mapped action."""

    def __init__(self):
        self.action_space = spaces.Box(
            np.array([-1.0, 0.0], dtype=np.float32), np.array([3.0, 2.0], dtype=np.float32)
        )
        self.observation_space = self.action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        return np.asarray(action, dtype=np.float32), 0.0, False, False, {}


class CountingEchoEnv(EchoEnv):
    """Observes the action it received and the number of steps since reset."""

    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Box(
            np.array([-1.0, 0.0, 0.0], dtype=np.float32),
            np.array([3.0, 2.0, 100.0], dtype=np.float32),
        )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(3, dtype=np.float32), {}

    def step(self, action):
        self._t += 1
        return np.append(action, self._t).astype(np.float32), 0.0, False, False, {}


class ImageEnv(gymnasium.Env):
    """Has a 2-D observation space, which BatchedEnvironment must refuse."""

    def __init__(self):
        self.observation_space = spaces.Box(0, 255, shape=(4, 4), dtype=np.uint8)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)


class EmptySpaceEnv(CountdownEnv):
    """Has an observation or action space of shape (0,), which holds no value."""

    def __init__(self, which='observation'):
        super().__init__()
        setattr(self, f'{which}_space', spaces.Box(-1.0, 1.0, shape=(0,), dtype=np.float32))


class IntegerActionEnv(CountdownEnv):
    """Has a Box action space of integers, which is no continuous action space."""

    def __init__(self):
        super().__init__()
        self.action_space = spaces.Box(0, 10, shape=(1,), dtype=np.int64)


class CannotStartInAProcessEnv(CountdownEnv):
    """Its constructor raises in an env process (as a simulator without a licence there would)."""

    def __init__(self):
        if multiprocessing.parent_process() is not None:
            raise RuntimeError('no licence in this process')
        super().__init__()


class CrashingEnv(gymnasium.Env):
    """The env seeded with ``crash_seed`` raises (or its process exits) at step ``crash_step``.

    ``BatchedEnvironment`` seeds env ``i`` with ``seed + i``, so with seed 0
    only env ``crash_seed`` crashes.
    """

    def __init__(self, crash_seed=1, crash_step=3, how='raise', message='simulator diverged'):
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._crash_seed, self._crash_step, self._how = crash_seed, crash_step, how
        self._message = message
        self._seed = None
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._seed = seed
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self._t += 1
        if self._seed == self._crash_seed and self._t >= self._crash_step:
            if self._how == 'exit':
                os._exit(3)  # Dies without a Python exception, as a segfault would.
            if self._how == 'wrong_shape':
                return np.zeros(2, dtype=np.float32), 0.0, False, False, {}
            if self._how == 'array_reward':  # as -x @ x of an x of shape (1, n) gives
                return np.zeros(1, dtype=np.float32), np.array([0.5]), False, False, {}
            if self._how == 'array_terminated':  # as x[:, 0] > 1 of an x of shape (1, n) gives
                return np.zeros(1, dtype=np.float32), 0.0, np.array([False]), False, {}
            if self._how == 'none_truncated':
                return np.zeros(1, dtype=np.float32), 0.0, False, None, {}
            if self._how == 'none_info':
                return np.zeros(1, dtype=np.float32), 0.0, False, False, None
            raise ValueError(self._message)
        return np.zeros(1, dtype=np.float32), 0.0, False, False, {}


# Registered before any vector env exists, so forked subprocesses inherit them. An env
# needs a time limit; 100 steps is beyond any of these tests.
gymnasium.register('alf_test/Countdown-v0', entry_point=CountdownEnv, max_episode_steps=100)
gymnasium.register(
    'alf_test/Countdown3-v0',
    entry_point=CountdownEnv,
    max_episode_steps=100,
    kwargs=dict(min_length=3, max_length=3),
)
gymnasium.register('alf_test/Echo-v0', entry_point=EchoEnv, max_episode_steps=100)
gymnasium.register('alf_test/CountingEcho-v0', entry_point=CountingEchoEnv, max_episode_steps=100)
gymnasium.register('alf_test/Image-v0', entry_point=ImageEnv, max_episode_steps=100)
gymnasium.register('alf_test/IntegerAction-v0', entry_point=IntegerActionEnv, max_episode_steps=100)
for _which in ('observation', 'action'):
    gymnasium.register(
        f'alf_test/Empty{_which.title()}-v0',
        entry_point=EmptySpaceEnv,
        max_episode_steps=100,
        kwargs=dict(which=_which),
    )
gymnasium.register(
    'alf_test/CannotStartInAProcess-v0', entry_point=CannotStartInAProcessEnv, max_episode_steps=100
)
# Never terminates, and has no time limit.
gymnasium.register(
    'alf_test/EndlessPendulum-v0',
    entry_point='gymnasium.envs.classic_control.pendulum:PendulumEnv',
)
gymnasium.register('alf_test/Raises-v0', entry_point=CrashingEnv, max_episode_steps=10)
gymnasium.register(
    'alf_test/RaisesPercent-v0',
    entry_point=CrashingEnv,
    max_episode_steps=10,
    kwargs=dict(message='torque at 120% of limit'),
)
gymnasium.register(
    'alf_test/Dies-v0', entry_point=CrashingEnv, max_episode_steps=10, kwargs=dict(how='exit')
)
# A CrashingEnv whose step returns what the vector env cannot take, by how.
for _name, _how in (
    ('WrongShape', 'wrong_shape'),
    ('ArrayReward', 'array_reward'),
    ('ArrayTerminated', 'array_terminated'),
    ('NoneTruncated', 'none_truncated'),
    ('NoneInfo', 'none_info'),
):
    gymnasium.register(
        f'alf_test/{_name}-v0', entry_point=CrashingEnv, max_episode_steps=10, kwargs=dict(how=_how)
    )
gymnasium.register(
    'alf_test/FirstDies-v0',
    entry_point=CrashingEnv,
    max_episode_steps=10,
    kwargs=dict(how='exit', crash_seed=0),
)
# The trainer seeds its envs from the seed sequence of TrainerConfig.random_seed (0 here).
gymnasium.register(
    'alf_test/DiesInTrainer-v0',
    entry_point=CrashingEnv,
    max_episode_steps=10,
    kwargs=dict(how='exit', crash_seed=train_env_seeds(0, 2)[1]),
)


def _rollout(env: BatchedEnvironment, num_steps: int, seed: int = 0):
    """Reset, then step with random actions; return the TimeSteps, reset first."""
    generator = torch.Generator().manual_seed(seed)
    steps = [env.reset()]
    for _ in range(num_steps):
        action = torch.rand(env.num_envs, env.action_dim, generator=generator) * 2 - 1
        steps.append(env.step(action))
    return steps


def _column(steps, field):
    """Stack one TimeStep field over time: [T, N, ...]."""
    return torch.stack([getattr(s, field) for s in steps])


def test_truncation_is_last_with_discount_one():
    with create_environment('Pendulum-v1', max_episode_steps=3) as env:
        steps = _rollout(env, 5)
    assert _column(steps, 'step_type')[:, 0].tolist() == [
        StepType.FIRST,
        StepType.MID,
        StepType.MID,
        StepType.LAST,
        StepType.FIRST,
        StepType.MID,
    ]
    assert _column(steps, 'discount')[:, 0].tolist() == [1.0] * 6
    reward = _column(steps, 'reward')[:, 0]
    assert reward[3] < 0  # The LAST step keeps its reward ...
    assert reward[4] == 0  # ... and the reset step after it has none.


def test_termination_is_last_with_discount_zero():
    with create_environment('alf_test/Countdown3-v0') as env:
        steps = _rollout(env, 5)
    assert _column(steps, 'step_type')[:, 0].tolist() == [
        StepType.FIRST,
        StepType.MID,
        StepType.MID,
        StepType.LAST,
        StepType.FIRST,
        StepType.MID,
    ]
    assert _column(steps, 'discount')[:, 0].tolist() == [1, 1, 1, 0, 1, 1]
    assert _column(steps, 'reward')[:, 0].tolist() == [0, 1, 1, 1, 0, 1]
    assert _column(steps, 'observation')[4, 0, 0] == 0  # A fresh episode.


@pytest.mark.parametrize('max_episode_steps, discount', [(3, 0.0), (2, 1.0)])
def test_termination_wins_over_truncation(max_episode_steps, discount):
    with create_environment('alf_test/Countdown3-v0', max_episode_steps=max_episode_steps) as env:
        steps = _rollout(env, max_episode_steps)
    assert steps[-1].step_type.item() == StepType.LAST
    assert steps[-1].discount.item() == discount


def test_reset_after_last_is_first_in_subprocesses():
    with create_environment('alf_test/Countdown-v0', num_parallel_environments=2) as env:
        assert isinstance(env._env, AsyncVectorEnv)
        steps = _rollout(env, 30)
    step_type = _column(steps, 'step_type')
    reward = _column(steps, 'reward')
    discount = _column(steps, 'discount')
    t_in_episode = _column(steps, 'observation')[:, :, 0]
    is_first = step_type == StepType.FIRST
    is_last = step_type == StepType.LAST
    assert torch.equal(is_first[1:], is_last[:-1])
    assert torch.all(reward[is_first] == 0) and torch.all(discount[is_first] == 1)
    assert torch.all(t_in_episode[is_first] == 0)
    assert torch.all(discount[is_last] == 0)
    assert torch.all(reward[~is_first] == 1)
    # The two envs' episodes have different lengths, so they end at different times.
    assert not torch.equal(is_last[:, 0], is_last[:, 1])
    assert is_last[:, 0].any() and is_last[:, 1].any()

    with create_environment('alf_test/Countdown-v0', 2, use_subprocesses=False) as env:
        in_process = _rollout(env, 30)
    for field in ('step_type', 'observation', 'reward', 'discount', 'env_id'):
        assert torch.equal(_column(steps, field), _column(in_process, field)), field


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_step_async_then_wait_is_step(use_subprocesses):
    actions = [torch.full((2, 1), v) for v in (0.5, -1.0, 0.25, 1.0, 0.0)]
    with create_environment('Pendulum-v1', 2, seed=4, use_subprocesses=use_subprocesses) as env:
        env.reset()
        stepped = [env.step(a) for a in actions]
    with create_environment('Pendulum-v1', 2, seed=4, use_subprocesses=use_subprocesses) as env:
        env.reset()
        waited = []
        for a in actions:
            env.step_async(a)
            waited.append(env.step_wait())
        with pytest.raises(RuntimeError, match='without a pending step_async'):
            env.step_wait()
        env.step_async(actions[0])
        with pytest.raises(RuntimeError, match='step_async called while a step is pending'):
            env.step_async(actions[0])
        # In process, the pending action was applied to the new episodes by step_wait.
        for call in (env.reset, lambda: env.replay([])):
            with pytest.raises(RuntimeError, match='called while a step is pending'):
                call()
        env.step_wait()
        assert env.reset(seed=4).observation.shape == (2, 3)  # nothing pending now
    for x, y in zip(stepped, waited):
        for field in ('step_type', 'observation', 'reward', 'discount'):
            assert torch.equal(getattr(x, field), getattr(y, field)), field


def test_action_mapping_with_asymmetric_bounds():
    with create_environment('alf_test/Echo-v0', num_parallel_environments=5) as env:
        np.testing.assert_array_equal(env.action_low, [-1, 0])
        np.testing.assert_array_equal(env.action_high, [3, 2])
        assert env.action_low.dtype == np.float32 and env.action_high.dtype == np.float32
        env.reset()
        action = torch.tensor([[-1, -1], [1, 1], [0, 0], [5, -7], [0.5, -0.5]])
        received = env.step(action).observation
        with pytest.raises(ValueError, match='shape'):
            env.step(torch.zeros(5, 3))
    expected = torch.tensor([[-1, 0], [3, 2], [1, 1], [3, 0], [2, 0.5]])
    assert torch.equal(received, expected)


@pytest.mark.parametrize('use_subprocesses', [False, True])
@pytest.mark.parametrize('bad', [float('nan'), float('inf')])
def test_action_that_is_not_finite_is_refused_naming_the_env_and_step(use_subprocesses, bad):
    env_name = 'alf_test/CountingEcho-v0'
    with create_environment(env_name, 2, use_subprocesses=use_subprocesses) as env:
        env.reset()
        first = env.step(torch.zeros(2, 2)).observation
        with pytest.raises(ValueError) as raised:
            env.step(torch.tensor([[0.0, 0.0], [0.5, bad]]))
        assert str(raised.value) == (
            f"Environment '{env_name}' (env 1 of 2): the action of step 2 is not "
            f'finite: [0.5, {bad}].'
        )
        # No env took the action: the envs go on as if it was never given, the
        # next action being the second step of each.
        received = env.step(torch.ones(2, 2)).observation
    assert torch.equal(first, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]))
    assert torch.equal(received, torch.tensor([[3.0, 2.0, 2.0], [3.0, 2.0, 2.0]]))


class Float64BoundsEnv(gymnasium.Env):
    """Bounds no float32 holds exactly; records each action and whether it was in them."""

    received = []  # of the env in this process

    def __init__(self):
        self.action_space = spaces.Box(
            np.array([-0.3, 0.1]), np.array([0.1, 0.7]), dtype=np.float64
        )
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.received.append((action.copy(), self.action_space.contains(action)))
        return np.zeros(1, dtype=np.float32), 0.0, False, False, {}


def test_float64_bounds_are_met_exactly_at_the_ends():
    received = Float64BoundsEnv.received
    received.clear()
    env = BatchedEnvironment([Float64BoundsEnv], seed=0)
    try:
        env.reset()
        for a in ([-1.0, -1.0], [1.0, 1.0], [7.0, -3.0]):
            env.step(torch.tensor([a]))
    finally:
        env.close()
    assert all(inside for _, inside in received), received
    assert [a.dtype for a, _ in received] == [np.float64] * 3
    assert [a.tolist() for a, _ in received] == [[-0.3, 0.1], [0.1, 0.7], [0.1, 0.1]]


@pytest.mark.parametrize(
    'kwargs',
    [
        dict(num_parallel_environments=0),
        dict(num_parallel_environments=-1),
        dict(num_parallel_environments='x'),
        dict(num_parallel_environments=2.0),
        dict(max_episode_steps=0),
        dict(max_episode_steps=True),
    ],
)
def test_env_counts_that_are_not_positive_integers_are_refused_naming_them(kwargs):
    ((name, value),) = kwargs.items()
    with pytest.raises(ValueError) as raised:
        create_environment('Pendulum-v1', **kwargs)
    message = f'create_environment.{name} must be a positive integer, got {value!r}.'
    assert str(raised.value).startswith(message)


def test_numpy_integer_counts_are_taken_as_the_integers_they_hold():
    with create_environment(
        'Pendulum-v1', np.int64(2), max_episode_steps=np.int64(2), use_subprocesses=False
    ) as env:
        steps = _rollout(env, 3)
    assert _column(steps, 'step_type')[:, 1].tolist() == [
        StepType.FIRST,
        StepType.MID,
        StepType.LAST,
        StepType.FIRST,
    ]


def test_mujoco_timestep_dtypes():
    with create_environment('HalfCheetah-v5', num_parallel_environments=2) as env:
        assert (env.observation_dim, env.action_dim) == (17, 6)
        steps = _rollout(env, 2)
    for time_step in steps:
        assert time_step.observation.dtype == torch.float32
        assert time_step.observation.shape == (2, 17)
        assert time_step.reward.dtype == torch.float32
        assert time_step.discount.dtype == torch.float32
        assert time_step.step_type.dtype == torch.uint8
        assert time_step.env_id.dtype == torch.int64
        assert time_step.env_id.tolist() == [0, 1]


@pytest.mark.parametrize(
    'env_name, dims',
    [
        ('Humanoid-v5', (348, 17)),
        ('HalfCheetah-v5', (17, 6)),
        ('Hopper-v5', (11, 3)),
        ('Walker2d-v5', (17, 6)),
        ('Ant-v5', (105, 8)),
    ],
)
def test_mujoco_v5_observations_are_float32(env_name, dims):
    # gymnasium gives float64; float32 halves the replay memory.
    assert gymnasium.make(env_name).observation_space.dtype == np.float64
    with create_environment(env_name) as env:
        assert (env.observation_dim, env.action_dim) == dims
        steps = _rollout(env, 3)
    assert all(s.observation.dtype == torch.float32 for s in steps)
    assert all(torch.isfinite(s.observation).all() for s in steps)


def test_seeding():
    with create_environment('Pendulum-v1', 2, seed=3, use_subprocesses=False) as env:
        first = _column(_rollout(env, 5), 'observation')
        later_reset = env.reset().observation
        reseeded = env.reset(seed=3).observation
    with create_environment('Pendulum-v1', 2, seed=3, use_subprocesses=False) as env:
        again = _column(_rollout(env, 5), 'observation')
    with create_environment('Pendulum-v1', 1, seed=4) as env:
        seed_4 = env.reset().observation
    assert torch.equal(first, again)
    assert torch.equal(reseeded, first[0])
    assert not torch.equal(later_reset, first[0])  # An unseeded reset continues the RNG.
    assert torch.equal(seed_4[0], first[0, 1])  # Env i is seeded with seed + i.


def test_env_without_a_time_limit_is_refused_naming_the_setting():
    # Its first evaluation would wait for an episode end that never comes.
    with pytest.raises(ValueError) as raised:
        create_environment('alf_test/EndlessPendulum-v0')
    assert str(raised.value).startswith(
        "Environment 'alf_test/EndlessPendulum-v0' has no time limit (it was registered "
        'without max_episode_steps); set create_environment.max_episode_steps, e.g. to 1000.'
    )
    with create_environment('alf_test/EndlessPendulum-v0', max_episode_steps=2) as env:
        steps = _rollout(env, 2)
    assert steps[-1].step_type.tolist() == [StepType.LAST]


def test_train_refuses_an_env_without_a_time_limit_in_one_line(tmp_path):
    (tmp_path / 'registers_endless.py').write_text(
        'import gymnasium\n'
        "gymnasium.register('alf_test/Endless-v0',\n"
        "    entry_point='gymnasium.envs.classic_control.pendulum:PendulumEnv')\n"
    )
    root_dir = tmp_path / 'run'
    env_name = 'registers_endless:alf_test/Endless-v0'
    command = train_command(
        root_dir, [PENDULUM], [f"create_environment.env_name='{env_name}'"] + TINY
    )
    result = run_train(command, cwd=tmp_path)  # which imports registers_endless
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith('error: ') and last.endswith(
        f"Environment '{env_name}' has no time limit (it was registered without "
        'max_episode_steps); set create_environment.max_episode_steps, e.g. to 1000.'
    ), result.stderr[-3000:]
    assert not root_dir.exists()


class UnlistedRenderModePendulum(PendulumEnv):
    """Pendulum, whose metadata lists no render mode."""

    metadata = {'render_modes': [], 'render_fps': 30}


gymnasium.register(
    'alf_test/UnlistedRenderMode-v0', entry_point=UnlistedRenderModePendulum, max_episode_steps=3
)


def test_a_render_mode_the_env_does_not_list_is_refused_naming_its_modes():
    # gymnasium only warns: Pendulum would then train rendering nothing.
    with pytest.raises(ValueError) as raised:
        create_environment('Pendulum-v1', render_mode='rgbarray')
    assert str(raised.value).startswith(
        "create_environment.render_mode is 'rgbarray', which 'Pendulum-v1' does not render "
        "in. Closest valid modes: 'rgb_array'. Its render modes are: 'human', 'rgb_array'."
    )
    with create_environment('Pendulum-v1', render_mode='rgb_array') as env:
        env.reset()
        assert env.render()[0].shape[-1] == 3
    # gymnasium's env checker would fail its first render, long after the run began.
    with pytest.raises(ValueError) as raised:
        create_environment('alf_test/UnlistedRenderMode-v0', render_mode='rgb_array')
    assert str(raised.value).startswith(
        "create_environment.render_mode is 'rgb_array', which 'alf_test/UnlistedRenderMode-v0' "
        "does not render in. It lists no render mode (its metadata['render_modes'] is empty)."
    )


def test_train_refuses_a_misspelt_render_mode_before_writing_anything(tmp_path):
    root_dir = tmp_path / 'run'
    params = [
        "create_environment.render_mode='rgbarray'",
        'TrainerConfig.num_env_steps=1001',
    ] + TINY
    result = run_train(train_command(root_dir, [PENDULUM], params))
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: create_environment.render_mode is 'rgbarray', which 'Pendulum-v1' does not"
    ), result.stderr[-3000:]
    assert not root_dir.exists()


def test_unknown_env_id_names_close_match():
    with pytest.raises(ValueError, match="'Pendulum-v2'.*'Pendulum-v1'"):
        create_environment('Pendulum-v2')


@pytest.mark.parametrize(
    'env_id, hint',
    [
        (
            'Pendulum\u2013v1',
            'It holds \u2013 (U+2013 EN DASH), as a copy from a document or a chat gives: write '
            '- in its place.',
        ),
        (
            'Pendulum-v1\u00a0',
            'It holds U+00A0 NO-BREAK SPACE, as a copy from a document or a chat gives: write a '
            'plain space in its place.',
        ),
    ],
    ids=['en dash', 'no-break space'],
)
def test_an_unknown_env_id_with_a_pasted_character_names_it(env_id, hint):
    # The closest id named looks the same as the one given.
    with pytest.raises(ValueError) as error:
        create_environment(env_id)
    message = str(error.value)
    assert message.startswith(f"Unknown environment id '{env_id}'. {hint} Closest"), message


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_module_colon_id_imports_the_module_that_registers_the_id(
    tmp_path, monkeypatch, use_subprocesses
):
    module = f'registers_short_pendulum_{int(use_subprocesses)}'
    env_id = f'alf_test/ShortPendulum{int(use_subprocesses)}-v0'
    (tmp_path / f'{module}.py').write_text(
        'import gymnasium\n'
        f'gymnasium.register({env_id!r}, max_episode_steps=3,\n'
        "    entry_point='gymnasium.envs.classic_control.pendulum:PendulumEnv')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=f"Unknown environment id '{env_id}'"):
        create_environment(env_id)  # not registered until the module is imported
    with create_environment(
        f'{module}:{env_id}', num_parallel_environments=2, use_subprocesses=use_subprocesses
    ) as env:
        env.reset()
        action = torch.zeros(2, 1)
        step_types = [env.step(action).step_type.tolist() for _ in range(3)]
    assert step_types[-1] == [StepType.LAST] * 2  # the module's time limit of 3
    # A misspelt id after the module: the closest ids are written with it, as they work.
    misspelt = env_id.replace('-v0', '-v1')
    with pytest.raises(ValueError, match=f"Closest registered ids: '{module}:{env_id}'"):
        create_environment(f'{module}:{misspelt}')
    with pytest.raises(ValueError, match="cannot import module 'no_such_module_here'"):
        create_environment('no_such_module_here:Pendulum-v1')


def test_a_module_named_before_the_env_id_that_raises_on_import_is_named(tmp_path, monkeypatch):
    # Not only an ImportError: gymnasium's DependencyNotInstalled (a missing extra such as
    # box2d) is none.
    (tmp_path / 'alf_test_module_raising_on_import.py').write_text(
        "raise RuntimeError('a simulator extra is not installed')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError,
        match=r"^Environment 'alf_test_module_raising_on_import:Env-v0': cannot import module "
        r"'alf_test_module_raising_on_import', which should register 'Env-v0': "
        r'RuntimeError: a simulator extra is not installed',
    ):
        create_environment('alf_test_module_raising_on_import:Env-v0')


@pytest.mark.parametrize(
    'env_name, message',
    [
        ('CartPole-v1', 'SAC, DDPG and TD3'),
        ('alf_test/IntegerAction-v0', 'SAC, DDPG and TD3'),
        ('alf_test/Image-v0', 'flat 1-D Box'),
        # Networks of zero inputs or outputs were built, and the replay buffer refused them.
        ('alf_test/EmptyObservation-v0', 'flat 1-D Box observation spaces of at least one'),
        ('alf_test/EmptyAction-v0', 'a 1-D float Box of at least one value'),
    ],
)
def test_unsupported_spaces_are_refused(env_name, message):
    with pytest.raises(ValueError, match=f"'{env_name}'.*{message}"):
        create_environment(env_name)


def test_point_env_passes_check_env():
    env = gymnasium.make(POINT_TARGET_ID)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        check_env(env.unwrapped)
    env.close()


def test_point_env_moves_a_fifth_of_the_clipped_action_and_is_rewarded_where_it_arrives():
    env = gymnasium.make(POINT_TARGET_ID)
    starts = [env.reset(seed=seed)[0][0] for seed in range(100)]
    assert -1 <= min(starts) < -0.9 and 0.9 < max(starts) <= 1
    obs, _ = env.reset(seed=0)
    x = float(obs[0])
    # Actions beyond [-1, 1] count as its ends; x stops at 2 and leaves it again.
    actions = [0.5, -3.0] + [7.0] * 16 + [-1.0, 0.25]
    for t, action in enumerate(actions, 1):
        obs, reward, terminated, truncated, _ = env.step(np.array([action], dtype=np.float32))
        x = min(max(x + 0.2 * min(max(action, -1.0), 1.0), -2.0), 2.0)
        # x is float64 in the env, float32 in the observation.
        assert obs.tolist() == pytest.approx([x, 0.0], abs=1e-6), t
        assert reward == pytest.approx(-abs(x), abs=1e-6), t
        assert not terminated and truncated == (t == 20), t
    assert max(starts) + 0.2 * 15 > 2  # x was held at 2 at some step
    env.close()


def _mean_episode_return(policy, num_envs=32, num_episodes_per_env=3):
    """Mean return of the point env's completed episodes under ``policy(obs)``."""
    returns = []
    with create_environment(POINT_TARGET_ID, num_envs, seed=1, use_subprocesses=False) as env:
        time_step = env.reset()
        episode_return = torch.zeros(num_envs)
        # 20 steps an episode plus the reset step that follows each LAST.
        for _ in range(21 * num_episodes_per_env - 1):
            time_step = env.step(policy(time_step.observation))
            episode_return += time_step.reward
            is_last = time_step.step_type == StepType.LAST
            returns.append(episode_return[is_last])
            episode_return[is_last] = 0
    returns = torch.cat(returns)
    assert len(returns) == num_envs * num_episodes_per_env
    return returns.mean().item()


def test_point_env_controller_beats_random():
    generator = torch.Generator().manual_seed(0)
    random_return = _mean_episode_return(
        lambda obs: torch.rand(obs.shape[0], 1, generator=generator) * 2 - 1
    )
    controller_return = _mean_episode_return(
        lambda obs: -torch.clamp(5 * (obs[:, :1] - obs[:, 1:]), -1, 1)
    )
    assert random_return < -7
    assert controller_return > -1.5


# --- parallel envs: which way they run, crashes, child processes -----------------------------


def new_children(before):
    """Child processes of this process (alive or zombie) that were not in ``before``."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in before]


def child_pids():
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize(
    'env_name, num_envs, subprocesses',
    [
        ('HalfCheetah-v5', 4, False),  # MuJoCo steps are cheaper than the IPC.
        ('Pendulum-v1', 12, False),
        ('HalfCheetahBullet-v0', 4, False),
        (POINT_TARGET_ID, 2, False),
        ('ICubWalk-v0', 1, False),
        ('ICubWalk-v0', 2, True),  # ~4 ms a step: subprocesses pay off.
        ('alf_test/Countdown-v0', 2, True),  # Unknown cost: one process per env.
    ],
)
def test_default_picks_the_faster_way_per_env(env_name, num_envs, subprocesses):
    assert default_use_subprocesses(gymnasium.spec(env_name), num_envs) == subprocesses


def test_default_is_what_create_environment_uses():
    with create_environment('HalfCheetah-v5', num_parallel_environments=2) as env:
        assert not env.use_subprocesses and not isinstance(env._env, AsyncVectorEnv)
    with create_environment('alf_test/Countdown-v0', num_parallel_environments=2) as env:
        assert env.use_subprocesses and isinstance(env._env, AsyncVectorEnv)
    with create_environment('Pendulum-v1', 2, use_subprocesses=True) as env:
        assert isinstance(env._env, AsyncVectorEnv)  # An explicit choice wins.


def own_bytes(pids) -> int:
    return sum(psutil.Process(pid).memory_full_info().uss for pid in pids)


@pytest.mark.timeout(60)
def test_processes_own_bytes_sums_the_env_processes_own_memory_and_is_0_in_process():
    with create_environment('Pendulum-v1', 2, use_subprocesses=False) as env:
        env.reset()
        assert env.processes_own_bytes() == 0
    with create_environment('Pendulum-v1', 2, use_subprocesses=True) as env:
        env.reset()
        pids = [p.pid for p in env._env.processes]
        # Their own pages, not those they share with this process (torch's among them),
        # which their resident memory counts: hundreds of MiB.
        resident = sum(psutil.Process(pid).memory_info().rss for pid in pids)
        assert 2**16 < env.processes_own_bytes() < resident / 4
        assert env.processes_own_bytes() == pytest.approx(own_bytes(pids), rel=0.05)
    assert env.processes_own_bytes() == 0


@pytest.mark.timeout(60)
def test_an_env_process_gone_or_a_zombie_counts_0_in_processes_own_bytes():
    env = create_environment('Pendulum-v1', 3, use_subprocesses=True)
    try:
        env.reset()
        killed, *alive = env._env.processes
        os.kill(killed.pid, signal.SIGKILL)
        # Not reaped yet: a zombie, whose pid psutil still finds.
        zombie = psutil.Process(killed.pid)
        while zombie.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
        assert env.processes_own_bytes() == pytest.approx(own_bytes(p.pid for p in alive), rel=0.05)
        killed.join()  # Reaped: the pid is gone.
        assert not psutil.pid_exists(killed.pid)
        assert env.processes_own_bytes() == pytest.approx(own_bytes(p.pid for p in alive), rel=0.05)
    finally:
        env.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize('use_subprocesses', [True, False])
@pytest.mark.parametrize('label', [None, 'eval env'])
def test_env_that_raises_is_named_with_its_index(use_subprocesses, label):
    before = child_pids()
    labelled = {} if label is None else {'label': label}
    env = create_environment('alf_test/Raises-v0', 3, use_subprocesses=use_subprocesses, **labelled)
    env.reset()
    with pytest.raises(
        EnvironmentCrashedError,
        match=rf"'alf_test/Raises-v0' \({label or 'env'} 1 of 3\) raised in step\(\): "
        'ValueError: simulator diverged',
    ):
        for _ in range(5):
            env.step(torch.zeros(3, 1))
    env.close()
    assert new_children(before) == []


def open_file_descriptors() -> int:
    return len(os.listdir('/proc/self/fd'))


@pytest.mark.timeout(60)
def test_an_env_process_that_raised_leaves_no_pipe_open_for_the_garbage_collector():
    # The error raised holds the env in a reference cycle through its traceback: a caller
    # that catches it and closes the env would keep the pipes to its dead processes until
    # the next garbage collection.
    with create_environment('alf_test/Raises-v0', 2, use_subprocesses=True) as env:
        # Made once per process and kept: the shared memory of the observations.
        env.reset()
    del env
    gc.collect()
    gc.disable()
    try:
        before = open_file_descriptors()
        env = create_environment('alf_test/Raises-v0', 2, use_subprocesses=True)
        env.reset()
        try:
            for _ in range(5):
                env.step(torch.zeros(2, 1))
        except EnvironmentCrashedError as e:
            assert str(e) == (
                "Environment 'alf_test/Raises-v0' (env 1 of 2) raised in step(): "
                'ValueError: simulator diverged'
            )
        else:
            raise AssertionError('no env raised')
        env.close()
        del env
        assert open_file_descriptors() == before
    finally:
        gc.enable()


@pytest.mark.timeout(60)
@pytest.mark.parametrize('use_subprocesses', [True, False])
def test_an_observation_of_another_shape_than_the_space_is_named_with_the_env(use_subprocesses):
    # The vector env stacks the observations into a buffer of the space's shape, which
    # failed with a ValueError that named no env.
    before = child_pids()
    env = create_environment('alf_test/WrongShape-v0', 3, use_subprocesses=use_subprocesses)
    env.reset()
    with pytest.raises(EnvironmentCrashedError) as raised:
        for _ in range(5):
            env.step(torch.zeros(3, 1))
    assert str(raised.value) == (
        "Environment 'alf_test/WrongShape-v0' (env 1 of 3) returned from step() an observation "
        'of shape (2,), not (1,), the shape of its observation space'
    )
    env.close()
    assert new_children(before) == []


class ExactRewardEnv(gymnasium.Env):
    """Rewards of 1/3 as a ``Fraction`` or a ``Decimal``, numbers that float() takes."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, kind):
        self._kind = kind

    def reset(self, seed=None, options=None):
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        reward = Fraction(1, 3) if self._kind == 'fraction' else Decimal(1) / Decimal(3)
        return np.zeros(1, dtype=np.float32), reward, False, False, {}


@pytest.mark.parametrize('kind', ['fraction', 'decimal'])
def test_a_reward_of_another_number_type_is_taken_as_its_float(kind):
    env_id = f'alf_test/ExactReward{kind.title()}-v0'
    if env_id not in gymnasium.registry:
        gymnasium.register(
            env_id, entry_point=ExactRewardEnv, max_episode_steps=5, kwargs=dict(kind=kind)
        )
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # gymnasium's checker warns of the type
        with create_environment(env_id, 1, use_subprocesses=False) as env:
            env.reset()
            reward = env.step(torch.zeros(1, 1)).reward
    assert reward.tolist() == [pytest.approx(1 / 3)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize('use_subprocesses', [True, False])
@pytest.mark.parametrize(
    'env_name, returned',
    [
        # The vector env writes each reward into an array of one number per env, which
        # failed with a ValueError that named no env.
        ('alf_test/ArrayReward-v0', 'a ndarray of shape (1,) as its reward, not a number'),
        # Env processes stacked the flags into one array, which failed with an error that
        # named no env; in process the array passed unnoticed.
        ('alf_test/ArrayTerminated-v0', 'a ndarray of shape (1,) as terminated, not a bool'),
        ('alf_test/NoneTruncated-v0', 'None as truncated, not a bool'),
        # The vector env gathers the infos with info.items(), which failed with an
        # AttributeError that named no env.
        ('alf_test/NoneInfo-v0', 'None as its info, not a dict'),
    ],
    ids=['array_reward', 'array_terminated', 'none_truncated', 'none_info'],
)
def test_a_step_result_the_vector_env_cannot_take_is_named_with_the_env(
    env_name, returned, use_subprocesses
):
    before = child_pids()
    env = create_environment(env_name, 3, use_subprocesses=use_subprocesses)
    env.reset()
    with pytest.raises(EnvironmentCrashedError) as raised:
        for _ in range(5):
            env.step(torch.zeros(3, 1))
    assert (
        str(raised.value)
        == f"Environment '{env_name}' (env 1 of 3) returned from step() {returned}"
    )
    env.close()
    assert new_children(before) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize('use_subprocesses', [True, False])
def test_env_error_with_a_percent_sign_is_named_with_its_message_and_stack(use_subprocesses):
    # gymnasium's logger applies % to the stack it logs; '% o' is a conversion.
    level = gymnasium.logger.min_level
    with create_environment(
        'alf_test/RaisesPercent-v0', 3, use_subprocesses=use_subprocesses
    ) as env:
        env.reset()
        with pytest.raises(EnvironmentCrashedError) as raised:
            for _ in range(5):
                env.step(torch.zeros(3, 1))
    assert str(raised.value) == (
        "Environment 'alf_test/RaisesPercent-v0' (env 1 of 3) raised in step(): "
        'ValueError: torque at 120% of limit'
    )
    stack = env_traceback(raised.value)
    assert re.search(r'test_environments\.py", line \d+, in step', stack), stack
    assert stack.endswith('ValueError: torque at 120% of limit'), stack
    assert gymnasium.logger.min_level == level


@pytest.mark.timeout(60)
def test_env_process_that_dies_gives_an_error_not_a_hang():
    before = child_pids()
    env = create_environment('alf_test/Dies-v0', 3)
    assert len(new_children(before)) == 3
    env.reset()
    with pytest.raises(
        EnvironmentCrashedError,
        match=r"'alf_test/Dies-v0': the process of env 1 of 3 \(exit code 3\) died ",
    ):
        for _ in range(5):
            env.step(torch.zeros(3, 1))
    env.close()  # After a crash: does nothing, and must not block.
    assert new_children(before) == []


@pytest.mark.timeout(60)
def test_close_after_an_env_process_died_unseen_does_not_hang():
    before = child_pids()
    env = create_environment('alf_test/Countdown-v0', 2)
    env.reset()
    children = new_children(before)
    children[1].kill()
    children[1].wait(10)
    env.close()
    assert new_children(before) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize('num_envs', [3, 1])
def test_first_env_process_that_dies_is_named_and_every_process_is_reaped(num_envs):
    # Env 0's pipe is the first one read: its EOF comes before the healthy envs' replies.
    before = child_pids()
    env = create_environment('alf_test/FirstDies-v0', num_envs, use_subprocesses=True)
    env.reset()
    with pytest.raises(
        EnvironmentCrashedError,
        match=rf"'alf_test/FirstDies-v0': the process of env 0 of {num_envs} \(exit code 3\) died",
    ):
        for _ in range(5):
            env.step_async(torch.zeros(num_envs, 1))
            for pipe in env._env.parent_pipes:  # every env answered, or died
                pipe.poll(10)
            env.step_wait()
    env.close()
    assert new_children(before) == []  # neither running nor zombie


@pytest.mark.timeout(60)
def test_env_processes_that_cannot_start_are_reaped():
    before = child_pids()
    with pytest.raises(EnvironmentCrashedError, match='an env process died while starting'):
        create_environment('alf_test/CannotStartInAProcess-v0', 2, use_subprocesses=True)
    assert new_children(before) == []


parent_pid = os.getpid()


class _StartsForever:
    """An env factory whose env never finishes being created in an env process."""

    def __call__(self):
        if os.getpid() != parent_pid:
            time.sleep(3600)
        return gymnasium.make('Pendulum-v1')


@pytest.mark.timeout(60)
@pytest.mark.parametrize('interrupted', ['after its fork', 'before its start'])
def test_a_signal_while_env_processes_start_leaves_no_process(monkeypatch, interrupted):
    # A signal handler that raises (Ctrl-C, train's SIGTERM) can cut the start
    # of env process 1 short: after its fork, so that the child runs but its
    # Process has no pid, or before it forked at all.
    from multiprocessing import popen_fork

    real_launch = popen_fork.Popen._launch
    launches = []

    def launch_then_signal(self, process_obj):
        launches.append(process_obj.name)
        if len(launches) == 2:
            if interrupted == 'after its fork':
                real_launch(self, process_obj)
            raise KeyboardInterrupt
        real_launch(self, process_obj)

    monkeypatch.setattr(popen_fork.Popen, '_launch', launch_then_signal)
    before = child_pids()
    with pytest.raises(KeyboardInterrupt):
        BatchedEnvironment([_StartsForever(), _StartsForever()], use_subprocesses=True)
    left = new_children(before)  # neither running nor zombie
    for process in left:  # A copy of pytest that would hold its output for an hour.
        process.kill()
        process.wait(10)
    assert len(launches) == 2
    assert left == []


def _signal_bits(pid: int, field: str) -> int:
    """A signal mask of /proc/<pid>/status: ``SigIgn`` (ignored), ``SigCgt`` (handled)."""
    with open(f'/proc/{pid}/status') as f:
        line = next(line for line in f if line.startswith(field + ':'))
    return int(line.split()[1], 16)


@pytest.mark.timeout(60)
@pytest.mark.skipif(not os.path.exists('/proc/self/status'), reason='reads /proc/<pid>/status')
def test_env_processes_ignore_stop_signals_whatever_their_parent_handles():
    # Ctrl-C reaches the process group, and a batch system's SIGTERM (Slurm, systemd) every
    # process of the job: the trainer shuts the envs down after its checkpoint, not the
    # signal. A parent that ignores SIGINT (started in the background) would pass it on: it
    # handles it.
    before = child_pids()
    original = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    original_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        env = create_environment('Pendulum-v1', 2, use_subprocesses=True)
    finally:
        signal.signal(signal.SIGTERM, original)
        signal.signal(signal.SIGINT, original_sigint)
    try:
        workers = new_children(before)
        assert len(workers) == 2
        for worker in workers:
            # SIGUSR1 and SIGUSR2: a batch system's warning before a time limit.
            stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
            for signum in stops:
                assert _signal_bits(worker.pid, 'SigIgn') & (1 << (signum - 1))
                worker.send_signal(signum)
        env.reset()
        env.step(torch.zeros(2, 1))
        assert all(worker.is_running() for worker in workers)
    finally:
        env.close()
    assert new_children(before) == []


_ENV_PROCESS_OF_A_KILLED_PARENT = """
import time, gymnasium, torch
from gymnasium.envs.classic_control.pendulum import PendulumEnv
from alf_lite.environments import create_environment

class HangsInStep(PendulumEnv):
    def step(self, action):
        time.sleep(1000)

gymnasium.register('alf_test/HangsInStep-v0', entry_point=HangsInStep, max_episode_steps=9)
env = create_environment('alf_test/HangsInStep-v0', 1, use_subprocesses=True, step_timeout=None)
env.reset()
print(env._env.processes[0].pid, flush=True)
env.step(torch.zeros(1, 1))
"""


def _kill_script_of_env_processes(tmp_path, script: str, after_s: float = 0.0):
    """Run ``script``, which prints the process ids of its env processes on one line, and
    SIGKILL it ``after_s`` seconds later. Returns its process id, how many env processes
    outlived it by 10 s, and its stderr (which its env processes share)."""
    stderr = tmp_path / 'stderr'
    with open(stderr, 'w') as f:
        process = subprocess.Popen(
            [sys.executable, '-c', script],
            stdout=subprocess.PIPE,
            stderr=f,
            text=True,
            env=train_env(),
        )
    workers = []

    def alive():
        return [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]

    try:
        workers = [psutil.Process(int(pid)) for pid in process.stdout.readline().split()]
        time.sleep(after_s)
        assert workers and alive() == workers
        process.kill()
        process.wait()
        deadline = time.monotonic() + 10
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = len(alive())
    finally:
        process.kill()
        process.stdout.close()
        for worker in workers:
            with contextlib.suppress(psutil.Error):
                worker.kill()
    return process.pid, left, stderr.read_text()


@pytest.mark.timeout(60)
def test_an_env_process_whose_parent_was_killed_while_its_env_hangs_exits(tmp_path):
    # It ignores SIGTERM: without this, only SIGKILL would end it.
    pid, left, said = _kill_script_of_env_processes(
        tmp_path,
        _ENV_PROCESS_OF_A_KILLED_PARENT,
        after_s=1.5,  # in its step
    )
    assert left == 0, 'the env process outlived its parent'
    assert f'the process that started it (pid {pid}) ended; exiting' in said, said


_STOPPED_WHILE_AN_ENV_STEPS = """
import sys, time, gymnasium, torch
from gymnasium.envs.classic_control.pendulum import PendulumEnv
from alf_lite.environments import create_environment

class StepInSlices(PendulumEnv):
    def step(self, action):
        # In slices: a step stopped midway still has most of its time to run once continued.
        for _ in range(40):
            time.sleep(0.01)
        return super().step(action)

gymnasium.register('alf_test/StepInSlices-v0', entry_point=StepInSlices, max_episode_steps=100)
env = create_environment(
    'alf_test/StepInSlices-v0', 2, use_subprocesses=sys.argv[1] == 'subprocesses', step_timeout=3
)
env.reset()
print('stepping', flush=True)
for _ in range(6):
    env.step(torch.zeros(2, 1))
env.close()
print('done', flush=True)
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize('where', ['subprocesses', 'in_process'])
def test_time_stopped_by_ctrl_z_does_not_count_towards_the_step_timeout(where):
    # Ctrl-Z, or a batch scheduler suspending the job, stops the run's whole process group
    # (its env processes with it) for longer than step_timeout; once continued, the step
    # in flight has all of its time. It used to end the run as a hung env.
    process = subprocess.Popen(
        [sys.executable, '-c', _STOPPED_WHILE_AN_ENV_STEPS, where],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=train_env(),
        start_new_session=True,
    )
    try:
        assert process.stdout.readline() == 'stepping\n'
        time.sleep(1.0)  # within a step: the envs spend 0.4 s of each in sleeps
        os.killpg(process.pid, signal.SIGSTOP)
        time.sleep(7.0)  # above step_timeout, also in process (3 s for each of its 2 envs)
        os.killpg(process.pid, signal.SIGCONT)
        out, err = process.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0 and out == 'done\n', err[-3000:]


_IDLE_ENV_PROCESSES = """
import time
from alf_lite.environments import create_environment

env = create_environment('Pendulum-v1', 2, use_subprocesses=True)
env.reset()
print(*(p.pid for p in env._env.processes), flush=True)
time.sleep(1000)
"""


@pytest.mark.timeout(60)
def test_idle_env_processes_of_a_killed_trainer_exit_with_one_line_each(tmp_path):
    # Not the tracebacks of gymnasium's loop, which meets the closed pipe (EOFError) and
    # then fails to report it (BrokenPipeError): a killed run's log would seem to blame them.
    _, left, said = _kill_script_of_env_processes(tmp_path, _IDLE_ENV_PROCESSES)
    assert left == 0
    assert 'Traceback' not in said, said
    assert said.count('the pipe to the process that started it closed; exiting') == 2


_ENV_PROCESSES_LEFT_OPEN = """
import gc, psutil
from alf_lite.environments import create_environment

dropped = create_environment('Pendulum-v1', 2, use_subprocesses=True)
dropped.reset()
workers = [psutil.Process(p.pid) for p in dropped._env.processes]
del dropped
gc.collect()  # gymnasium's __del__ closes it, forced
print(all(not w.is_running() or w.status() == psutil.STATUS_ZOMBIE for w in workers))
left_open = create_environment('Pendulum-v1', 2, use_subprocesses=True)
left_open.reset()
print('exiting', flush=True)
"""


@pytest.mark.timeout(120)
def test_env_processes_left_open_are_ended_when_dropped_and_at_exit():
    # They ignore SIGTERM, with which gymnasium's forced close and multiprocessing's exit
    # handler end them, and then wait for them: the program would never exit.
    result = run_python(_ENV_PROCESSES_LEFT_OPEN, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == 'True\nexiting\n'
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]


def train_briefly(root_dir, env_name, num_envs):
    parse_config(
        [SAC_GIN],
        [
            f"create_environment.env_name = '{env_name}'",
            f'create_environment.num_parallel_environments = {num_envs}',
            'TanhNormalActorNetwork.hidden_layers = (8,)',
            'CriticNetwork.hidden_layers = (8,)',
            'TrainerConfig.num_env_steps = 60',
            'TrainerConfig.initial_collect_steps = 10',
            'TrainerConfig.mini_batch_size = 8',
            'TrainerConfig.replay_buffer_length = 100',
            'TrainerConfig.summary_interval = 20',
            'TrainerConfig.eval_interval = 1000',
            'TrainerConfig.num_eval_episodes = 1',
            'TrainerConfig.checkpoint_interval = 1000',
        ],
    )
    with Trainer(TrainerConfig(), str(root_dir)) as trainer:
        return trainer.train()


@pytest.mark.timeout(120)
def test_trainer_leaves_no_child_process(tmp_path):
    before = child_pids()
    with create_environment('alf_test/Countdown-v0', 2):
        assert len(new_children(before)) == 2  # This env runs in subprocesses by default.
    train_briefly(tmp_path / 'ok', 'alf_test/Countdown-v0', 2)
    assert new_children(before) == []
    with pytest.raises(EnvironmentCrashedError, match=r'env 1 of 2 \(exit code 3\) died'):
        train_briefly(tmp_path / 'crash', 'alf_test/DiesInTrainer-v0', 2)
    assert new_children(before) == []


def test_a_sequence_of_seeds_gives_one_seed_per_env():
    with create_environment('Pendulum-v1', 2, seed=[9, 4], use_subprocesses=False) as env:
        listed = env.reset().observation
    with create_environment('Pendulum-v1', 1, seed=4) as env:
        seed_4 = env.reset().observation
    assert torch.equal(listed[1], seed_4[0])
    with pytest.raises(ValueError, match='3 seeds given for 2 envs'):
        create_environment('Pendulum-v1', 2, seed=[1, 2, 3], use_subprocesses=False)


def test_alf_lite_runs_where_pybullet_is_not_installed(tmp_path):
    # As on a GPU image without pybullet: the PyBullet tasks are left out, the rest works.
    code = """
import sys
sys.modules['pybullet'] = sys.modules['icub_models'] = None  # not installed
import gymnasium
import alf_lite.all_configurables
import alf_lite.environments as envs
assert not hasattr(envs, 'suite_pybullet') and 'HumanoidBullet-v0' not in gymnasium.registry
envs.create_environment('Pendulum-v1', num_parallel_environments=1).close()
print('ok')
"""
    result = run_python(code, timeout=120, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == 'ok', result.stderr[-3000:]


def test_pybullet_loads_only_where_a_pybullet_env_is_built(tmp_path):
    # It prints its build time on stderr as it loads: no line of it in a MuJoCo run's output.
    code = """
import sys
import gin
import alf_lite.all_configurables
gin.parse_config("ICubWalkEnv.control_mode = 'torque'")  # its configurable is registered
assert 'pybullet' not in sys.modules, 'imported without a PyBullet env'
print('building a PyBullet env', file=sys.stderr, flush=True)
from alf_lite.environments import create_environment
create_environment('HopperBullet-v0', num_parallel_environments=1).close()
assert 'pybullet' in sys.modules
"""
    result = run_python(code, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    before, _, after = result.stderr.partition('building a PyBullet env')
    assert 'pybullet' not in before and 'pybullet build time' in after, result.stderr


def test_a_pybullet_env_prints_nothing_on_standard_output(tmp_path):
    # PyBullet's native code prints a line (argv[0]=) as each client connects: stdout is
    # for what the tools print (play's returns), and the rest of it goes on as before.
    code = """
from alf_lite.environments import create_environment
print('before', flush=True)
for use_subprocesses in (False, True):
    with create_environment('HopperBullet-v0', 2, use_subprocesses=use_subprocesses) as env:
        env.reset()
        print('built', use_subprocesses)
print('after')
"""
    result = run_python(code, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == 'before\nbuilt False\nbuilt True\nafter\n'


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_a_reset_at_last_drops_the_autoreset_that_was_due(use_subprocesses):
    # Episodes of 3 steps: step 3 is LAST. reset() then starts the next episode
    # itself, so the step after it is that episode's first real step (MID,
    # reward 1, t = 1), not a second reset.
    with create_environment('alf_test/Countdown3-v0', 2, use_subprocesses=use_subprocesses) as env:
        steps = _rollout(env, 3)
        assert steps[-1].step_type.tolist() == [StepType.LAST] * 2
        reset = env.reset()
        after = env.step(torch.zeros(2, 1))
    assert reset.step_type.tolist() == [StepType.FIRST] * 2
    assert after.step_type.tolist() == [StepType.MID] * 2
    assert after.reward.tolist() == [1.0, 1.0]
    assert after.observation[:, 0].tolist() == [1.0, 1.0]


def test_time_steps_are_those_of_gymnasium_envs_stepped_by_hand():
    # Hopper terminates when it falls: LAST with discount 0, then the unseeded
    # reset of the same env as FIRST. Here the raw envs step alongside.
    num_envs, num_steps = 2, 80
    generator = torch.Generator().manual_seed(0)
    actions = [torch.rand(num_envs, 3, generator=generator) * 2 - 1 for _ in range(num_steps)]
    raw = [gymnasium.make('Hopper-v5') for _ in range(num_envs)]
    with create_environment('Hopper-v5', num_envs, seed=5) as env:
        steps = [env.reset()] + [env.step(a) for a in actions]
    expected = []  # (step_type, observation, reward, discount) per env per step
    for i, raw_env in enumerate(raw):
        obs, _ = raw_env.reset(seed=5 + i)
        rows = [(StepType.FIRST, obs, 0.0, 1.0)]
        for a in actions:
            if rows[-1][0] == StepType.LAST:
                obs, _ = raw_env.reset()
                rows.append((StepType.FIRST, obs, 0.0, 1.0))
                continue
            # Hopper's bounds are [-1, 1]: the action goes in as it is.
            obs, reward, terminated, truncated, _ = raw_env.step(a[i].numpy())
            step_type = StepType.LAST if terminated or truncated else StepType.MID
            rows.append((step_type, obs, reward, 0.0 if terminated else 1.0))
        raw_env.close()
        expected.append(rows)
    num_terminations = 0
    for t, time_step in enumerate(steps):
        for i in range(num_envs):
            step_type, obs, reward, discount = expected[i][t]
            assert time_step.step_type[i].item() == step_type, (t, i)
            assert torch.equal(time_step.observation[i], torch.tensor(obs, dtype=torch.float32))
            assert time_step.reward[i].item() == np.float32(reward)
            assert time_step.discount[i].item() == discount
            num_terminations += discount == 0.0
    assert num_terminations >= 2, 'no episode terminated: the test proves too little'


def test_step_types_are_stored_as_the_numbers_0_1_2():
    # Replay buffers and checkpoints keep these numbers: FIRST 0, MID 1, LAST 2.
    with create_environment('Pendulum-v1', max_episode_steps=2) as env:
        steps = _rollout(env, 4)
    step_type = _column(steps, 'step_type')[:, 0]
    assert step_type.dtype == torch.uint8
    assert step_type.tolist() == [0, 1, 2, 0, 1]


_HANG_BESIDE_AN_ENV_PROCESS = """
import multiprocessing, time
from alf_lite.environments import watchdog

def worker(conn, parent_end):
    # As an env process: serve the pipe until it closes, and fail loudly then.
    parent_end.close()
    while True:
        conn.recv()

if __name__ == '__main__':
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.Process(target=worker, args=(child, parent))
    process.start()
    child.close()
    print(process.pid, flush=True)
    watchdog.start(0.5, 'the hung call')
    time.sleep(30)
"""


def test_watchdog_stops_the_env_processes_before_they_print_their_closed_pipes(tmp_path):
    script = tmp_path / 'hang.py'
    script.write_text(_HANG_BESIDE_AN_ENV_PROCESS)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30, env=train_env()
    )
    assert result.returncode == HUNG_ENV_EXIT_CODE, result.stderr[-3000:]
    assert 'the hung call; the stacks of all threads follow' in result.stderr
    # The stacks are faulthandler's ("most recent call first"); no Python traceback
    # of the worker's EOFError follows them.
    assert 'EOFError' not in result.stderr and 'Traceback' not in result.stderr, result.stderr
    pid = int(result.stdout.split()[0])
    deadline = time.monotonic() + 5
    while os.path.exists(f'/proc/{pid}') and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f'/proc/{pid}'), 'the env process outlived the watchdog'


_TWO_WATCHED_CALLS = """
import time
from alf_lite.environments import watchdog
watchdog.start(0.2, 'the quick call')
watchdog.start(60.0, 'the slow call')
time.sleep(30)
"""


def test_watchdog_looks_at_a_quarter_of_the_shortest_timeout_so_it_is_late_by_at_most_that():
    # Checked only every second, a 0.2 s timeout would be reported at 1 s.
    dog = watchdog._Watchdog()
    dog._thread = threading.current_thread()  # alive: no thread of its own is started
    assert dog._period == 1.0
    dog.done(dog.start(60.0, 'the slow call'))
    assert dog._period == 1.0
    dog.done(dog.start(0.2, 'the quick call'))
    assert dog._period == 0.05


def test_watchdog_ends_the_process_at_the_earliest_deadline():
    # Deadlines 0.2 s and 60 s: the first one passed ends the process, long
    # before the second.
    process = subprocess.Popen(
        [sys.executable, '-c', _TWO_WATCHED_CALLS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=train_env(),
    )
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == HUNG_ENV_EXIT_CODE, stderr[-3000:]
    assert 'the quick call; the stacks of all threads follow' in stderr, stderr[-3000:]


_WATCHED_CALL_IN_A_FORKED_PROCESS = """
import os, time
from alf_lite.environments import watchdog
watchdog.done(watchdog.start(60.0, 'a call of the parent'))  # the parent's watchdog thread runs
pid = os.fork()
if pid == 0:  # has the watchdog's state, without its thread
    watchdog.start(0.2, 'the hung call of the forked process')
    time.sleep(10)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_watchdog_watches_the_calls_of_a_forked_process_too():
    result = run_python(_WATCHED_CALL_IN_A_FORKED_PROCESS)
    assert result.stdout.split() == [str(HUNG_ENV_EXIT_CODE)], result.stderr[-3000:]
    assert 'the hung call of the forked process; the stacks' in result.stderr


class _WatchdogClock:
    """Replaces the watchdog module's ``time``: ``sleep`` advances ``monotonic`` at once.

    ``late``: for the next sleeps in turn, ``(seconds, cpu_seconds)``: the sleep ends that
    much later, the process having used that much CPU time meanwhile."""

    def __init__(self):
        self.now = 0.0
        self.cpu = 0.0
        self.late = []

    def monotonic(self):
        return self.now

    def process_time(self):
        return self.cpu

    def sleep(self, seconds):
        self.now += seconds
        if self.late:
            seconds, cpu_seconds = self.late.pop(0)
            self.now += seconds
            self.cpu += cpu_seconds


class _Hung(Exception):
    """Raised where the watchdog would end the process: ``(time, what hung)``."""


def _watchdog_on_a_fake_clock(monkeypatch):
    """A ``_WatchdogClock`` and a watchdog on it, whose loop runs in this thread and raises
    ``_Hung`` where it would end the process."""
    clock = _WatchdogClock()
    monkeypatch.setattr(watchdog, 'time', clock)

    def exit_hung(description):
        raise _Hung(clock.now, description)

    monkeypatch.setattr(watchdog, '_exit_hung', exit_hung)
    dog = watchdog._Watchdog()
    dog._thread = threading.current_thread()  # alive: its loop runs here, on the fake clock
    return clock, dog


def test_watchdog_reports_the_hung_call_at_its_deadline_and_forgets_those_that_returned(
    monkeypatch,
):
    clock, dog = _watchdog_on_a_fake_clock(monkeypatch)
    dog.done(dog.start(0.2, 'the call that returned'))  # the period is now 0.05 s
    dog.start(60.0, 'the slow call')
    dog.start(2.0, 'the hung call')
    with pytest.raises(_Hung) as hung:
        dog._run()
    seconds, description = hung.value.args
    assert description == 'the hung call'
    assert 2.0 <= seconds <= 2.0 + 0.05 + 1e-9


@pytest.mark.parametrize(
    'cpu_seconds, reported_at',
    [
        # Stopped (Ctrl-Z) for 10 s, 0.5 s into the call: the 2 s it may take come after.
        (0.0, 12.0),
        # Late by 10 s for a native call that kept the GIL, busy: that is the call's time.
        (10.0, 10.5),
    ],
    ids=['stopped', 'busy'],
)
def test_watchdog_leaves_out_the_time_the_process_was_stopped(
    monkeypatch, cpu_seconds, reported_at
):
    clock, dog = _watchdog_on_a_fake_clock(monkeypatch)
    dog.start(2.0, 'the hung call')  # the period is now 0.5 s
    clock.late = [(10.0, cpu_seconds)]
    with pytest.raises(_Hung) as hung:
        dog._run()
    seconds, description = hung.value.args
    assert description == 'the hung call'
    assert reported_at <= seconds <= reported_at + 0.5 + 1e-9


def test_watchdog_gives_a_call_begun_after_a_stop_none_of_the_stops_time(monkeypatch):
    # The process was stopped for an hour while no call was watched; once continued, a
    # call begins before the watchdog's check finds the stop. It is not given that hour.
    clock, dog = _watchdog_on_a_fake_clock(monkeypatch)
    dog.done(dog.start(2.0, 'the call that returned'))  # the period is now 0.5 s
    sleep = clock.sleep

    def stopped_then_a_call(seconds):
        sleep(seconds)
        if clock.now == 0.5:
            clock.now += 3600.0
            dog.start(2.0, 'the hung call')

    clock.sleep = stopped_then_a_call
    with pytest.raises(_Hung) as hung:
        dog._run()
    seconds, description = hung.value.args
    assert description == 'the hung call'
    assert 3602.5 <= seconds <= 3602.5 + 0.5 + 1e-9


class _CountedFactory:
    """Makes ``env_id`` envs, counting those made (in this process) and those closed."""

    def __init__(self, env_id):
        self.env_id, self.made, self.closed = env_id, 0, 0

    def __call__(self):
        self.made += 1
        env = gymnasium.make(self.env_id)
        close, factory = env.close, self

        def counted_close():
            factory.closed += 1
            close()

        env.close = counted_close
        return env


class _Refused(Exception):
    pass


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_check_dims_sees_the_first_env_before_any_other_env_or_process_is_made(use_subprocesses):
    factory, asked = _CountedFactory('Pendulum-v1'), []

    def refuse(**sizes):
        asked.append(sizes)
        raise _Refused

    children = {p.pid for p in psutil.Process().children()}
    with pytest.raises(_Refused):
        BatchedEnvironment([factory] * 50, use_subprocesses=use_subprocesses, check_dims=refuse)
    assert asked == [dict(num_envs=50, observation_dim=3, action_dim=1)]
    assert (factory.made, factory.closed) == (1, 1)
    assert {p.pid for p in psutil.Process().children()} <= children  # no env process
    # Accepted: the env made first is one of the envs (in env processes: the env this
    # process reads the spaces of), not one more.
    with BatchedEnvironment(
        [factory] * 3,
        use_subprocesses=use_subprocesses,
        check_dims=lambda **sizes: asked.append(sizes),
    ) as env:
        env.reset()
        assert factory.made == 2 if use_subprocesses else 4
    assert factory.closed == 2 if use_subprocesses else 4


def test_an_unsupported_space_is_refused_on_the_first_env_before_the_others_are_made():
    factory = _CountedFactory('alf_test/Image-v0')
    with pytest.raises(ValueError, match='flat 1-D Box'):
        BatchedEnvironment([factory] * 20, use_subprocesses=False)
    assert (factory.made, factory.closed) == (1, 1)


def test_a_replay_buffer_too_large_for_the_envs_asked_is_refused_before_they_are_made(tmp_path):
    # A million Pendulum envs took minutes to make before the buffer's refusal.
    root_dir = tmp_path / 'run'
    result = run_train(
        train_command(
            root_dir, [PENDULUM], ['create_environment.num_parallel_environments=1000000']
        ),
        timeout=60,  # making the envs first took about 3 minutes
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith('error: ReplayBuffer of 1000000 envs x 100000 steps needs 2500000000000 bytes')
    ), result.stderr[-3000:]
    # Its most that fits is an upper bound: the networks, not built yet, take their share.
    assert (
        "envs, fewer once the networks' gradients and optimizer state, built later, take "
        'their share)'
    ) in result.stderr, result.stderr[-3000:]
    assert not root_dir.exists()


@pytest.mark.parametrize(
    'binding, error',
    [
        (
            "ReplayBuffer.device='gpu'",
            "error: ReplayBuffer: device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'.",
        ),
        (
            'ReplayBuffer.max_memory_fraction=2.0',
            'error: ReplayBuffer: max_memory_fraction must be in (0, 1], got 2.0',
        ),
    ],
)
def test_a_replay_buffer_setting_refused_once_the_first_env_is_made_names_the_replay_buffer(
    tmp_path, binding, error
):
    # Checked inside create_environment, the refusal read as create_environment's, which
    # has no such parameter.
    root_dir = tmp_path / 'run'
    result = run_train(train_command(root_dir, [PENDULUM], [binding]))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == error, result.stderr[-3000:]
    assert not root_dir.exists()


def test_mujoco_warnings_go_to_the_log_once_each_and_leave_no_file(tmp_path):
    # MuJoCo printed each warning and appended it to MUJOCO_LOG.TXT in the working
    # directory: gymnasium's HalfCheetah model warned of a deprecated attribute at every
    # env made (11 lines at a default start).
    code = """
import mujoco, numpy as np
from alf_lite.environments import create_environment
create_environment('HalfCheetah-v5', num_parallel_environments=3).close()
create_environment('HalfCheetah-v5', num_parallel_environments=2, use_subprocesses=True).close()
model = mujoco.MjModel.from_xml_string(
    '<mujoco><worldbody><body><freejoint/><geom size="1"/></body></worldbody></mujoco>'
)
for _ in range(2):  # each MjData warns once
    data = mujoco.MjData(model)
    data.qpos[0] = np.nan
    mujoco.mj_step(model, data)
"""
    result = run_python(code, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    unstable = 'Nan, Inf or huge value in QPOS at DOF 0'
    assert output.count(unstable) == 1, output[-3000:]
    assert f'MuJoCo: {unstable}' in output, output[-3000:]
    assert output.count('settotalmass') <= 1, output[-3000:]
    assert not (tmp_path / 'MUJOCO_LOG.TXT').exists()
