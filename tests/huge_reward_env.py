"""A point task whose reward turns huge: finite, as an env must return it, but its
squared TD errors overflow float32, so the critic loss is inf (the loss guard's case)."""

import gymnasium
import numpy as np


class HugeRewardEnv(gymnasium.Env):
    """Observation 0, reward ``-|action|`` for the env's first ``huge_after`` steps (over
    all its episodes), then 1e30."""

    def __init__(self, huge_after=0):
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._steps = 0
        self._huge_after = huge_after

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._steps += 1
        reward = 1e30 if self._steps > self._huge_after else -abs(float(action[0]))
        return np.zeros(2, np.float32), reward, False, False, {}


# Every reward huge, in episodes of 7 steps; huge after 250 steps, in episodes of 20.
if 'alf_test/HugeReward-v0' not in gymnasium.registry:
    gymnasium.register('alf_test/HugeReward-v0', entry_point=HugeRewardEnv, max_episode_steps=7)
    gymnasium.register(
        'alf_lite_tests/HugeReward-v0',
        entry_point=HugeRewardEnv,
        max_episode_steps=20,
        kwargs=dict(huge_after=250),
    )
