"""Gymnasium environments (classic control, MuJoCo, ...) as one batched environment."""
import difflib
import functools
import logging
from typing import Callable, Optional, Sequence

import gin
import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from alf_lite.data import StepType, TimeStep

logger = logging.getLogger(__name__)


class BatchedEnvironment:
    """N copies of a gymnasium env stepped together, speaking ``TimeStep`` tensors.

    Actions come in normalised to [-1, 1] and are mapped per dimension to the
    env's ``[low, high]``. gymnasium's next-step autoreset is turned into ALF's
    step types: the step after an env's LAST is that env's next FIRST.

    Args:
        env_fns: one callable per env, each returning a new gymnasium env with
            a flat 1-D Box observation space and a bounded Box action space.
        seed: env ``i`` is seeded with ``seed + i`` on the first ``reset``.
        use_subprocesses: step the envs in subprocesses (``AsyncVectorEnv``);
            ``None`` means yes when there is more than one env.
        name: how errors and logs name the env.
    Raises:
        ValueError: when the observation or action space is not supported.
    """

    def __init__(self,
                 env_fns: Sequence[Callable[[], gymnasium.Env]],
                 seed: int = 0,
                 use_subprocesses: Optional[bool] = None,
                 name: str = 'environment'):
        self.num_envs = len(env_fns)
        if use_subprocesses is None:
            use_subprocesses = self.num_envs > 1
        if use_subprocesses:
            # copy=False: the shared-memory observation is copied into a new
            # float32 array in _observation() anyway, so one copy suffices.
            self._env = AsyncVectorEnv(env_fns, shared_memory=True, copy=False,
                                       autoreset_mode=AutoresetMode.NEXT_STEP)
        else:
            self._env = SyncVectorEnv(env_fns, copy=False, autoreset_mode=AutoresetMode.NEXT_STEP)
        try:
            self._check_spaces(name)
        except ValueError:
            self._env.close()
            raise
        self.name = name
        self._seed = seed
        self._first_reset = True
        # Which envs returned LAST at the previous step: their next step is the
        # reset observation that gymnasium's next-step autoreset produces.
        self._done = np.zeros(self.num_envs, dtype=bool)
        self._env_id = torch.arange(self.num_envs, dtype=torch.int64)
        self._closed = False
        logger.info('Created %d x %s (%s).', self.num_envs, name,
                    'subprocesses' if use_subprocesses else 'in process')

    def _check_spaces(self, name: str):
        """Set the dims and bounds from the single-env spaces, or refuse them."""
        obs_space = self._env.single_observation_space
        if not (isinstance(obs_space, spaces.Box) and len(obs_space.shape) == 1):
            raise ValueError(f"Environment '{name}' has observation space {obs_space}: only flat "
                             "1-D Box observation spaces are supported.")
        act_space = self._env.single_action_space
        if not (isinstance(act_space, spaces.Box) and len(act_space.shape) == 1
                and np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high))):
            raise ValueError(f"Environment '{name}' has action space {act_space}: SAC, DDPG and TD3 "
                             "need a continuous bounded action space (a 1-D Box with finite bounds).")
        self.observation_dim = int(obs_space.shape[0])
        self.action_dim = int(act_space.shape[0])
        self.action_low = act_space.low.astype(np.float32)
        self.action_high = act_space.high.astype(np.float32)
        self._action_half_range = 0.5 * (self.action_high - self.action_low)
        self._action_dtype = act_space.dtype

    def _observation(self, obs: np.ndarray) -> torch.Tensor:
        # np.array always copies (the vector env reuses its buffer) and casts
        # MuJoCo's float64 to float32 in the same pass.
        return torch.from_numpy(np.array(obs, dtype=np.float32))

    def reset(self, seed: Optional[int] = None) -> TimeStep:
        """Reset every env and return a batch of FIRST steps.

        Args:
            seed: seeds env ``i`` with ``seed + i``. ``None`` on the first reset
                means the constructor's seed; ``None`` later leaves the envs'
                random generators running on (no reseeding).
        Returns:
            all-FIRST ``TimeStep`` with reward 0 and discount 1.
        """
        if seed is None and self._first_reset:
            seed = self._seed
        self._first_reset = False
        seeds = None if seed is None else [seed + i for i in range(self.num_envs)]
        obs, _ = self._env.reset(seed=seeds)
        self._done[:] = False
        return TimeStep(
            step_type=torch.full((self.num_envs,), StepType.FIRST, dtype=torch.uint8),
            observation=self._observation(obs),
            reward=torch.zeros(self.num_envs, dtype=torch.float32),
            discount=torch.ones(self.num_envs, dtype=torch.float32),
            env_id=self._env_id)

    def step(self, action: torch.Tensor) -> TimeStep:
        """Apply one normalised action per env and return the next steps.

        Args:
            action: ``[N, action_dim]`` float tensor in [-1, 1]; values outside
                are clipped. Ignored for envs whose previous step was LAST
                (they reset instead).
        Returns:
            ``TimeStep``: LAST with discount 0 on termination, LAST with
            discount 1 on truncation only, FIRST (reward 0, discount 1) for the
            reset after a LAST, MID otherwise.
        """
        if tuple(action.shape) != (self.num_envs, self.action_dim):
            raise ValueError(f'Expected an action of shape {(self.num_envs, self.action_dim)}, '
                             f'got {tuple(action.shape)}.')
        a = np.clip(action.detach().cpu().numpy(), -1.0, 1.0)
        env_action = self.action_low + (a + 1.0) * self._action_half_range
        # Rounding can land a hair outside [low, high]; some envs assert bounds.
        np.clip(env_action, self.action_low, self.action_high, out=env_action)
        obs, reward, terminated, truncated, _ = self._env.step(
            env_action.astype(self._action_dtype, copy=False))

        was_done = self._done
        step_type = np.where(terminated | truncated, StepType.LAST, StepType.MID).astype(np.uint8)
        step_type[was_done] = StepType.FIRST
        reward = reward.astype(np.float32)
        reward[was_done] = 0.0
        discount = np.where(terminated & ~was_done, 0.0, 1.0).astype(np.float32)
        self._done = (terminated | truncated) & ~was_done
        return TimeStep(
            step_type=torch.from_numpy(step_type),
            observation=self._observation(obs),
            reward=torch.from_numpy(reward),
            discount=torch.from_numpy(discount),
            env_id=self._env_id)

    def render(self) -> tuple:
        """One frame per env, as the envs' render mode gives it (e.g. HxWx3 uint8 arrays)."""
        return tuple(self._env.render())

    def close(self):
        """Close the envs (and their subprocesses); calling it again does nothing."""
        if not self._closed:
            self._closed = True
            self._env.close()

    def __enter__(self) -> 'BatchedEnvironment':
        return self

    def __exit__(self, *exc_info):
        self.close()


@gin.configurable
def create_environment(env_name: str = 'Pendulum-v1',
                       num_parallel_environments: int = 1,
                       seed: int = 0,
                       use_subprocesses: Optional[bool] = None,
                       max_episode_steps: Optional[int] = None,
                       render_mode: Optional[str] = None) -> BatchedEnvironment:
    """Create ``num_parallel_environments`` copies of a registered gymnasium env.

    Args:
        env_name: a registered gymnasium id, e.g. 'HalfCheetah-v5' or
            'alf_lite/PointTarget-v0' (``module:Id`` imports ``module`` first).
        num_parallel_environments: number of envs N stepped together.
        seed: env ``i`` is seeded with ``seed + i`` on the first reset.
        use_subprocesses: step the envs in subprocesses; ``None`` means yes
            when N > 1. In-process is faster for MuJoCo (stepping is cheaper
            than the IPC); subprocesses pay off for slow envs.
        max_episode_steps: time limit of an episode (truncation); ``None``
            keeps the limit the env was registered with.
        render_mode: gymnasium's render mode, e.g. 'rgb_array' for
            ``BatchedEnvironment.render()``; None renders nothing.
    Returns:
        the ``BatchedEnvironment``; close it (or use it as a context manager).
    Raises:
        ValueError: for an unknown id (naming the closest registered ids) or
            unsupported spaces.
    """
    try:
        # A spec (rather than the id) travels with the env factory, so a
        # subprocess needs no registration of its own.
        spec = gymnasium.spec(env_name)
    except gymnasium.error.Error as e:
        close = difflib.get_close_matches(env_name, list(gymnasium.envs.registry.keys()), n=5)
        hint = ('Closest registered ids: ' + ', '.join(repr(c) for c in close) + '.') if close else (
            'No registered id is close; is the module that registers it imported?')
        raise ValueError(f"Unknown environment id '{env_name}'. {hint}") from e
    # Envs without rendering may not accept a render_mode argument at all.
    render_kwargs = {} if render_mode is None else {'render_mode': render_mode}
    env_fn = functools.partial(gymnasium.make, spec, max_episode_steps=max_episode_steps,
                               **render_kwargs)
    return BatchedEnvironment([env_fn] * num_parallel_environments, seed=seed,
                              use_subprocesses=use_subprocesses, name=env_name)
