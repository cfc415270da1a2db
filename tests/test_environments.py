"""Tests of the batched gymnasium environment and the point-target toy task."""
import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AsyncVectorEnv

from alf_lite.data import StepType
from alf_lite.environments import BatchedEnvironment, create_environment
from alf_lite.environments.point_env import POINT_TARGET_ID


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
        self.action_space = spaces.Box(np.array([-1.0, 0.0], dtype=np.float32),
                                       np.array([3.0, 2.0], dtype=np.float32))
        self.observation_space = self.action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        return np.asarray(action, dtype=np.float32), 0.0, False, False, {}


class ImageEnv(gymnasium.Env):
    """Has a 2-D observation space, which BatchedEnvironment must refuse."""

    def __init__(self):
        self.observation_space = spaces.Box(0, 255, shape=(4, 4), dtype=np.uint8)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)


# Registered before any vector env exists, so forked subprocesses inherit them.
gymnasium.register('alf_test/Countdown-v0', entry_point=CountdownEnv)
gymnasium.register('alf_test/Countdown3-v0', entry_point=CountdownEnv,
                   kwargs=dict(min_length=3, max_length=3))
gymnasium.register('alf_test/Echo-v0', entry_point=EchoEnv)
gymnasium.register('alf_test/Image-v0', entry_point=ImageEnv)


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
        StepType.FIRST, StepType.MID, StepType.MID, StepType.LAST, StepType.FIRST, StepType.MID]
    assert _column(steps, 'discount')[:, 0].tolist() == [1.0] * 6
    reward = _column(steps, 'reward')[:, 0]
    assert reward[3] < 0  # The LAST step keeps its reward ...
    assert reward[4] == 0  # ... and the reset step after it has none.


def test_termination_is_last_with_discount_zero():
    with create_environment('alf_test/Countdown3-v0') as env:
        steps = _rollout(env, 5)
    assert _column(steps, 'step_type')[:, 0].tolist() == [
        StepType.FIRST, StepType.MID, StepType.MID, StepType.LAST, StepType.FIRST, StepType.MID]
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


def test_unknown_env_id_names_close_match():
    with pytest.raises(ValueError, match="'Pendulum-v2'.*'Pendulum-v1'"):
        create_environment('Pendulum-v2')


@pytest.mark.parametrize('env_name, message', [('CartPole-v1', 'SAC, DDPG and TD3'),
                                               ('alf_test/Image-v0', 'flat 1-D Box')])
def test_unsupported_spaces_are_refused(env_name, message):
    with pytest.raises(ValueError, match=f"'{env_name}'.*{message}"):
        create_environment(env_name)


def test_point_env_passes_check_env():
    env = gymnasium.make(POINT_TARGET_ID)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        check_env(env.unwrapped)
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
        lambda obs: torch.rand(obs.shape[0], 1, generator=generator) * 2 - 1)
    controller_return = _mean_episode_return(
        lambda obs: -torch.clamp(5 * (obs[:, :1] - obs[:, 1:]), -1, 1))
    assert random_return < -7
    assert controller_return > -1.5
