"""Exploration noise for deterministic policies, in the normalised action space.

A noise object is built once (``DdpgAlgorithm.exploration_noise = @OUNoise()``
in gin) and called at every collection step with the env batch's step types
and the policy's actions; it returns noise of the actions' shape. The
algorithm adds it and clips the sum to [-1, 1]. Units are those of the
normalised actions: ``sigma = 0.1`` is 10% of half the action range of every
dimension, whatever the env's bounds. Samples come from torch's global RNG,
so a seeded run is reproducible.
"""

import copy
import inspect
import math
import numbers
import types
from typing import Optional

import gin
import numpy as np
import torch
import torch.nn as nn

from alf_lite.config import without_gin_call_trace
from alf_lite.data import StepType
from alf_lite.precision import FLOAT32_MAX
from alf_lite.seeding import global_rng_state, set_global_rng_state


def _check_sigma(sigma: float) -> None:
    """Refuse a ``sigma`` that is negative, NaN or infinite (every action at a bound), also
    as the float32 the noise is (1e300)."""
    if not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f'sigma must be a finite number >= 0, got {sigma}')
    if sigma > FLOAT32_MAX:
        raise ValueError(
            f'sigma must be at most 3.4e38, the largest float32, got {sigma}: the noise is a '
            'float32, in which it is inf'
        )


@gin.configurable
class GaussianNoise:
    """Independent ``N(0, sigma^2)`` noise at every step (TD3 uses ``sigma = 0.1``).

    Args:
        sigma: standard deviation, in normalised action units.
    """

    def __init__(self, sigma: float = 0.1):
        _check_sigma(sigma)
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
        # Each sign checked alone: a negative theta and dt have a product in range, and
        # no sqrt(dt).
        if not (theta > 0 and dt > 0 and theta * dt <= 1.0):  # NaN too
            raise ValueError(
                f'theta and dt must be > 0 with theta * dt in (0, 1] for a mean-reverting '
                f'process, got theta={theta}, dt={dt}'
            )
        _check_sigma(sigma)
        if not math.isfinite(mu):
            # The envs would get NaN or infinite actions.
            raise ValueError(f'mu must be a finite number, got {mu}')
        if abs(mu) > FLOAT32_MAX:
            raise ValueError(
                f'mu must be at most 3.4e38 in magnitude, the largest float32, got {mu}: the '
                'noise is a float32, in which it is inf'
            )
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


_NOISE_EXAMPLES = (
    'a noise object called as noise(step_type, action), e.g. @GaussianNoise() or @OUNoise()'
)


def _builds_noise(cls: type) -> bool:
    """Whether instances of ``cls`` can be called as ``noise(step_type, action)``."""
    if issubclass(cls, (nn.Module, torch.optim.Optimizer)) or not any(
        '__call__' in vars(klass) for klass in cls.__mro__[:-1]
    ):
        return False
    try:
        inspect.signature(cls.__call__).bind(None, None, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read
        return True
    return True


def check_exploration_noise(parameter: str, noise) -> None:
    """Refuse, naming ``parameter``, what is no noise object at all: a class (``@GaussianNoise``
    where ``@GaussianNoise()`` builds one), a network or an optimizer class, or what cannot
    be called. ``try_exploration_noise`` tries what passes on the run's actions.

    Raises:
        ValueError: naming the parameter, what it was given and what it takes.
    """
    if isinstance(noise, type):
        name = noise.__name__
        if _builds_noise(noise):
            raise ValueError(
                f'{parameter} is the class {name}, not a noise object: refer to it with '
                f'parentheses, @{name}(), so that gin builds one.'
            )
        raise ValueError(
            f'{parameter} is the class {name}, which is no noise: give {_NOISE_EXAMPLES}.'
        )
    if not callable(noise):
        raise ValueError(
            f'{parameter} is {_given(noise)}, which is no noise: give {_NOISE_EXAMPLES}.'
        )


def _given(noise) -> str:
    return getattr(noise, '__name__', None) or f'a {type(noise).__name__}'


def _copied(noise):
    """A deep copy of ``noise``; of a function, a new one with copies of the values its closure
    and defaults hold (``copy.deepcopy`` gives the function itself, whose closure may hold the
    noise's state)."""
    trial = copy.deepcopy(noise)
    if not isinstance(trial, types.FunctionType):
        return trial
    cells = []
    for cell in trial.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # a variable not yet assigned
            cells.append(types.CellType())
        else:
            cells.append(types.CellType(copy.deepcopy(contents)))
    copied = types.FunctionType(
        trial.__code__,
        trial.__globals__,
        trial.__name__,
        copy.deepcopy(trial.__defaults__),
        tuple(cells) if trial.__closure__ is not None else None,
    )
    copied.__kwdefaults__ = copy.deepcopy(trial.__kwdefaults__)
    copied.__dict__.update(trial.__dict__)
    return copied


def try_exploration_noise(parameter: str, noise, num_envs: int, action_dim: int) -> None:
    """Refuse, naming ``parameter``, a noise that cannot add to the actions ``[N, A]`` of the
    run's ``num_envs`` training envs, the only batch collection calls it on.

    A noise is called as ``noise(step_type, action)`` at each collection step and
    returns noise that adds to the actions. A network, an optimizer or an environment
    given instead would fail only at the first exploring step, after the initial
    collection. A copy of ``noise`` is called once on ``num_envs`` zero actions, at
    their FIRST step, with the random number generators' states (torch's, numpy's,
    python's) restored: the noise itself (of a function, the values its closure holds) and
    the run's numbers stay as they were, and a noise made for the run's number of envs (its
    state ``[N, A]``) is taken. A noise that cannot be copied is not tried. A number it
    returns (``0.0``) is added to every action alike.

    Raises:
        ValueError: naming the parameter, what it was given and what it takes.
    """
    given = _given(noise)
    n = num_envs
    step_type = torch.full((n,), StepType.FIRST, dtype=torch.uint8)
    action = torch.zeros(n, action_dim)
    if action.is_meta:
        # Built on the meta device, where the networks' memory is counted: a noise that
        # reads a value cannot run there, and the real build tries it.
        return
    try:
        trial = _copied(noise)
    except Exception:  # noqa: BLE001  (the first collection step calls it)
        return
    # python's and numpy's generators too: a noise of one's own may draw from them.
    rng_state = global_rng_state()
    with torch.no_grad():
        try:
            out = trial(step_type, action)
        except Exception as e:
            error = without_gin_call_trace(e)
            raise ValueError(
                f'{parameter} is {given}, which fails as noise(step_type, action) on the '
                f"actions of the run's {n} env{'' if n == 1 else 's'}, of shape "
                f'{list(action.shape)} ({type(e).__name__}: {error}): '
                f'give {_NOISE_EXAMPLES}.'
            ) from e
        finally:
            set_global_rng_state(rng_state)
    if isinstance(out, numbers.Real):
        return  # added to every action alike (0.0: no noise)
    arrays = (torch.Tensor, np.ndarray)
    try:
        fits = torch.broadcast_shapes(out.shape, action.shape) == action.shape
    except (AttributeError, RuntimeError):
        fits = False
    if not isinstance(out, arrays) or not fits:
        shown = f'shape {list(out.shape)}' if isinstance(out, arrays) else type(out).__name__
        raise ValueError(
            f'{parameter} is {given}, whose noise(step_type, action) returns {shown} for '
            f'actions of shape {list(action.shape)}: give {_NOISE_EXAMPLES}, which returns '
            "noise of the actions' shape."
        )
