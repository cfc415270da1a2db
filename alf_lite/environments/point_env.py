"""A one-dimensional point that must reach a target: a seconds-long sanity task."""

import gymnasium
import numpy as np
from gymnasium import spaces

POINT_TARGET_ID = 'alf_lite/PointTarget-v0'


class PointTargetEnv(gymnasium.Env):
    """A point at ``x`` on a line moves by ``0.2 * action`` towards the target 0.

    Each episode starts at ``x ~ U[-1, 1]``; ``x`` stays in ``[-2, 2]``. The
    reward on arriving at ``x`` is ``-|x - target|``. There is no termination:
    the registered env is truncated after 20 steps by gymnasium's TimeLimit.
    The observation is ``[x, target]`` (the target is always 0; it is observed
    so that the policy reads the error it must close).

    Expected 20-step returns, measured over 10,000 episodes:
    - uniform random actions: about -11.4 (std 6.7);
    - the optimal controller ``a = -clip(5 * (x - target), -1, 1)``: about -0.61
      (std 0.61; it moves straight to the target and stays there).
    A learner that averages better than about -1.5 has solved the task.
    """

    metadata = {'render_modes': []}

    def __init__(self):
        self.observation_space = spaces.Box(-2.0, 2.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._target = 0.0
        self._x = 0.0

    def _observation(self):
        return np.array([self._x, self._target], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        """Start a new episode at a uniform random position in [-1, 1].

        Args:
            seed: seeds ``self.np_random`` when given.
            options: unused.
        Returns:
            ``(observation, info)``.
        """
        super().reset(seed=seed)
        self._x = float(self.np_random.uniform(-1.0, 1.0))
        return self._observation(), {}

    def step(self, action):
        """Move the point by ``0.2 * clip(action, -1, 1)``.

        Args:
            action: array of shape (1,).
        Returns:
            ``(observation, reward, terminated, truncated, info)``; never
            terminated or truncated here (the TimeLimit truncates).
        """
        a = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -1.0, 1.0))
        self._x = float(np.clip(self._x + 0.2 * a, -2.0, 2.0))
        reward = -abs(self._x - self._target)
        return self._observation(), reward, False, False, {}


gymnasium.register(
    id=POINT_TARGET_ID,
    entry_point='alf_lite.environments.point_env:PointTargetEnv',
    max_episode_steps=20,
)
