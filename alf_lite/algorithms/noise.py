"""Exploration noise for deterministic policies, in the normalised action space.

A noise object is built once (``DdpgAlgorithm.exploration_noise = @OUNoise()``
in gin) and called at every collection step with the env batch's step types
and the policy's actions; it returns noise of the actions' shape. The
algorithm adds it and clips the sum to [-1, 1]. Units are those of the
normalised actions: ``sigma = 0.1`` is 10% of half the action range of every
dimension, whatever the env's bounds. Samples come from torch's global RNG,
so a seeded run is reproducible.
"""

import math
from typing import Optional

import gin
import torch

from alf_lite.data import StepType


@gin.configurable
class GaussianNoise:
    """Independent ``N(0, sigma^2)`` noise at every step (TD3 uses ``sigma = 0.1``).

    Args:
        sigma: standard deviation, in normalised action units.
    """

    def __init__(self, sigma: float = 0.1):
        if not sigma >= 0:  # NaN too
            raise ValueError(f'sigma must be >= 0, got {sigma}')
        self.sigma = sigma

    def __call__(self, step_type: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Noise for ``action`` ``[N, A]``; ``step_type`` ``[N]`` is unused (no state)."""
        return self.sigma * torch.randn_like(action)


@gin.configurable
class OUNoise:
    """Ornstein-Uhlenbeck process, one per parallel env, restarted at each episode's FIRST step.

    Euler-Maruyama discretisation with time step ``dt``::

        x[t+1] = x[t] + theta * (mu - x[t]) * dt + sigma * sqrt(dt) * N(0, 1)

    Its stationary standard deviation is exactly
    ``sigma * sqrt(dt) / sqrt(1 - (1 - theta * dt)^2)``, about
    ``sigma / sqrt(2 * theta)`` when ``theta * dt`` is small (0.365 for the
    defaults), and its correlation time is ``1 / (theta * dt)`` steps.

    The DDPG paper gives no ``dt``; the default ``1e-2`` is Stable-Baselines3's, so
    that DDPG runs compare with it. ``dt = 1`` gives ``x += theta * (mu - x) + sigma * N``.

    Where ``step_type`` is FIRST the process restarts from ``mu`` before it
    steps, so each episode's noise is independent of the last one. The state
    is sized lazily on the first call (``[N, A]``); ``state_dict`` carries it
    through a checkpoint, so a resumed run continues each env's process.

    Args:
        theta: rate of mean reversion, per unit time.
        sigma: diffusion scale, per sqrt(unit time), in normalised action units.
        dt: time step of the discretisation (see above).
        mu: the mean the process reverts to.
    """

    def __init__(self, theta: float = 0.15, sigma: float = 0.2, dt: float = 1e-2, mu: float = 0.0):
        if not 0.0 < theta * dt <= 1.0:
            raise ValueError(
                f'theta * dt must be in (0, 1] for a mean-reverting process, '
                f'got theta={theta}, dt={dt}'
            )
        if not sigma >= 0:  # NaN too
            raise ValueError(f'sigma must be >= 0, got {sigma}')
        self.theta, self.sigma, self.dt, self.mu = theta, sigma, dt, mu
        self._state: Optional[torch.Tensor] = None

    def state_dict(self) -> dict:
        """The process's state ``[N, A]`` (None before the first call)."""
        return {'state': self._state}

    def load_state_dict(self, state: dict, shape: Optional[tuple] = None) -> None:
        """Continue from ``state_dict()``'s state, written in place where one of its shape exists
        (a captured CUDA graph reads that tensor).

        Args:
            state: what ``state_dict()`` returned.
            shape: ``(N, A)`` the state must have, if known.
        Raises:
            ValueError: when the state is no float tensor (of ``shape``).
        """
        value = state['state']
        if value is not None and not (
            torch.is_tensor(value)
            and value.is_floating_point()
            and value.device.type != 'meta'
            and (shape is None or tuple(value.shape) == tuple(shape))
        ):
            raise ValueError(
                f'OUNoise: the saved state is {getattr(value, "dtype", type(value).__name__)} '
                f'of shape {getattr(value, "shape", None)}, not a float tensor of shape {shape}'
            )
        if value is None or self._state is None or self._state.shape != value.shape:
            self._state = None if value is None else value.clone()
        else:
            self._state.copy_(value)

    def stationary_std(self) -> float:
        """The exact stationary standard deviation of the discrete process."""
        decay = 1.0 - self.theta * self.dt
        return self.sigma * math.sqrt(self.dt) / math.sqrt(1.0 - decay**2)

    def __call__(self, step_type: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Step every env's process once and return the new state ``[N, A]``.

        Args:
            step_type: ``[N]``; envs at a FIRST step restart from ``mu`` first.
            action: ``[N, A]``, gives the shape (and dtype) of the noise.
        """
        if self._state is None:
            self._state = torch.full_like(action, self.mu)
        x = torch.where(
            (step_type == StepType.FIRST).unsqueeze(-1),
            torch.full_like(action, self.mu),
            self._state,
        )
        new = (
            x
            + self.theta * (self.mu - x) * self.dt
            + self.sigma * math.sqrt(self.dt) * torch.randn_like(action)
        )
        # In place: a CUDA graph that captured this call reads and writes the
        # same state tensor at every replay.
        self._state.copy_(new)
        return new
