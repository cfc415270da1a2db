"""Envs that hang for good in one step, as a deadlocked simulator does.

Importable by name, so a train subprocess can use them:
``create_environment.env_name = 'hanging_env:alf_lite_tests/HangsAfterCheckpoint-v0'``
(with this directory on PYTHONPATH).
"""

import os
import sys
import time

import gymnasium
import numpy as np
from gymnasium import spaces

from alf_lite.seeding import train_env_seeds

# When set, the env writes this file as it starts to hang, so a test knows it hangs.
MARKER_VARIABLE = 'ALF_LITE_TEST_HANG_MARKER'


class HangingEnv(gymnasium.Env):
    """The env seeded with ``hang_seed`` never returns from its ``hang_step``-th step.

    ``create_environment(seed=0)`` seeds env ``i`` with ``i``, the trainer its
    train env ``i`` with ``train_env_seeds(random_seed, n)[i]``; only the env
    given ``hang_seed`` hangs (never an eval env). Otherwise a 1-D point to move
    towards 0, reward ``-|x|``.

    Args:
        hang_seed: seed of the env that hangs.
        hang_step: steps since creation after which it hangs.
    """

    def __init__(self, hang_seed=0, hang_step=5):
        self.observation_space = spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._hang_seed, self._hang_step = hang_seed, hang_step
        self._seed = None
        self._steps = 0
        self._x = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._seed = seed
        self._x = float(self.np_random.uniform(-1.0, 1.0))
        return np.array([self._x], dtype=np.float32), {}

    def step(self, action):
        self._steps += 1
        if self._seed == self._hang_seed and self._steps >= self._hang_step:
            self._hang()
        self._x = float(np.clip(self._x + 0.1 * float(action[0]), -10.0, 10.0))
        return np.array([self._x], dtype=np.float32), -abs(self._x), False, False, {}

    def _hang(self):
        marker = os.environ.get(MARKER_VARIABLE)
        if marker:
            with open(marker, 'w') as f:
                f.write(str(os.getpid()))
        while True:
            time.sleep(3600)


gymnasium.register(
    'alf_lite_tests/HangsInStep5-v0',
    entry_point=HangingEnv,
    max_episode_steps=20,
    kwargs=dict(hang_seed=1, hang_step=5),
)
# Train env 0 of a run with random_seed 0.
gymnasium.register(
    'alf_lite_tests/HangsAfterCheckpoint-v0',
    entry_point=HangingEnv,
    max_episode_steps=20,
    kwargs=dict(hang_seed=train_env_seeds(0, 1)[0], hang_step=150),
)


class CrashingEnv(HangingEnv):
    """As ``HangingEnv``, but the chosen env raises in that step instead of hanging."""

    def _hang(self):
        raise RuntimeError('the simulator exploded')


# Train env 0 of a run with random_seed 0.
gymnasium.register(
    'alf_lite_tests/CrashesAfterCheckpoint-v0',
    entry_point=CrashingEnv,
    max_episode_steps=20,
    kwargs=dict(hang_seed=train_env_seeds(0, 1)[0], hang_step=150),
)


class ExitingEnv(HangingEnv):
    """As ``HangingEnv``, but the chosen env calls ``sys.exit(3)`` in that step."""

    def _hang(self):
        sys.exit(3)


gymnasium.register(
    'alf_lite_tests/ExitsInStep5-v0',
    entry_point=ExitingEnv,
    max_episode_steps=20,
    kwargs=dict(hang_seed=1, hang_step=5),
)


class CrashingUnclosableEnv(CrashingEnv):
    """As ``CrashingEnv``, but once it raised its ``close`` raises too, as a simulator that
    lost its server does (PyBullet's ``disconnect``)."""

    _crashed = False

    def _hang(self):
        self._crashed = True
        super()._hang()

    def close(self):
        if self._crashed:
            raise RuntimeError('not connected to the simulator')
        super().close()


gymnasium.register(
    'alf_lite_tests/CrashesAndCannotClose-v0',
    entry_point=CrashingUnclosableEnv,
    max_episode_steps=20,
    kwargs=dict(hang_seed=train_env_seeds(0, 1)[0], hang_step=150),
)


class UnclosableEnv(HangingEnv):
    """As ``HangingEnv`` that never hangs, but its ``close`` raises (a simulator whose
    server went away at the end of a run)."""

    def close(self):
        raise RuntimeError('not connected to the simulator')


gymnasium.register(
    'alf_lite_tests/CannotClose-v0',
    entry_point=UnclosableEnv,
    max_episode_steps=20,
    kwargs=dict(hang_seed=-1),
)


class CrashesWhenEvaluatedEnv(CrashingEnv):
    """Raises in its first step after a reset with a seed that no train env of a run with
    random_seed 0 (up to 4 envs) gets: an evaluation's."""

    _TRAIN_SEEDS = train_env_seeds(0, 4)

    def step(self, action):
        if self._seed is not None and self._seed not in self._TRAIN_SEEDS:
            self._hang()
        return super().step(action)


gymnasium.register(
    'alf_lite_tests/CrashesWhenEvaluated-v0',
    entry_point=CrashesWhenEvaluatedEnv,
    max_episode_steps=20,
    kwargs=dict(hang_seed=None),
)


class NanObservationEnv(HangingEnv):
    """As ``HangingEnv``, but the chosen env's state turns NaN in that step instead of hanging."""

    def _hang(self):
        self._x = float('nan')


# Train env 0 of a run with random_seed 0.
gymnasium.register(
    'alf_lite_tests/NanAfterCheckpoint-v0',
    entry_point=NanObservationEnv,
    max_episode_steps=20,
    kwargs=dict(hang_seed=train_env_seeds(0, 1)[0], hang_step=150),
)


# When set, each env writes a file named by its process id into this directory as it starts.
START_MARKER_DIR_VARIABLE = 'ALF_LITE_TEST_START_MARKER_DIR'


class SlowToStartEnv(HangingEnv):
    """As ``HangingEnv`` without the hang, but each env takes 3 s to be created, as a
    simulator that loads its assets does."""

    def __init__(self):
        super().__init__(hang_seed=None, hang_step=2**62)
        directory = os.environ.get(START_MARKER_DIR_VARIABLE)
        if directory:
            with open(os.path.join(directory, str(os.getpid())), 'w'):
                pass
        time.sleep(3.0)


gymnasium.register(
    'alf_lite_tests/SlowToStart-v0', entry_point=SlowToStartEnv, max_episode_steps=20
)


class HangsInCloseEnv(HangingEnv):
    """As ``HangingEnv`` without the hang in a step, but once reset, its ``close()`` never
    returns, as a simulator whose shutdown deadlocks. (Never reset, as the env gymnasium
    builds in the main process to read the spaces, it closes at once.)"""

    def __init__(self):
        super().__init__(hang_seed=None, hang_step=2**62)

    def close(self):
        if self._seed is not None:
            self._hang()


gymnasium.register(
    'alf_lite_tests/HangsInClose-v0', entry_point=HangsInCloseEnv, max_episode_steps=20
)
