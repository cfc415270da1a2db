"""Actor networks: the policy maps an observation to a normalised action in [-1, 1]."""

import math
from typing import Optional, Sequence, Tuple

import gin
import torch
import torch.nn as nn
import torch.nn.functional as F

from alf_lite.networks.encoding import check_hidden_layers, mlp
from alf_lite.networks.initializers import ddpg_paper_init_
from alf_lite.precision import FLOAT32_MAX, full_precision, lower_precision


@gin.configurable(denylist=['observation_dim', 'action_dim'])
class TanhNormalActorNetwork(nn.Module):
    """Gaussian policy squashed by tanh (SAC): ``a = tanh(u)``, ``u ~ N(mean, std)``.

    Args:
        observation_dim: size of the observation vector.
        action_dim: size of the action vector.
        hidden_layers: widths of the MLP hidden layers.
        log_std_bounds: ``(min, max)``; the raw output is mapped into this range
            with a tanh, so the bound never cuts the gradient. Finite, with
            ``min <= max`` (equal: a fixed std), and ``max`` at most
            88.72, the log of the largest float32: the std is a float32.
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_layers: Sequence[int] = (256, 256),
        log_std_bounds: Tuple[float, float] = (-5.0, 2.0),
    ):
        super().__init__()
        self._encoder = mlp(observation_dim, hidden_layers)
        self._head = nn.Linear(
            hidden_layers[-1] if hidden_layers else observation_dim, 2 * action_dim
        )
        self._log_std_min, self._log_std_max = log_std_bounds
        # Finite as the float32s the head computes with: a min of -1e300 is -inf there, and
        # its log-stds NaN.
        if not (
            all(math.isfinite(b) and abs(b) <= FLOAT32_MAX for b in log_std_bounds)
            and self._log_std_min <= self._log_std_max
        ):
            raise ValueError(
                'log_std_bounds must be (min, max), finite numbers (float32s: at most 3.4e38 '
                f'in magnitude) with min <= max, e.g. (-5.0, 2.0), got {log_std_bounds!r}'
            )
        # The head computes the log-std, and its exp, in float32: its largest log-std (tanh at
        # 1), as the head computes it, is max rounded there, which can lie above max itself.
        log_std_top = self._log_std_min + 0.5 * (self._log_std_max - self._log_std_min) * (
            torch.ones((), dtype=torch.float32, device='cpu') + 1
        )
        if not log_std_top.exp().isfinite():
            raise ValueError(
                'log_std_bounds max must be at most 88.72, the log of the largest float32: '
                f'the largest std, exp({log_std_top.item()!r}) in float32, overflows to inf, '
                f'got {log_std_bounds!r}'
            )
        # None: float32 throughout; torch.bfloat16: the encoder's products in
        # bfloat16 (set by alf_lite.precision.set_network_precision).
        self.compute_dtype = None

    def _mean_and_log_std(self, observation):
        with lower_precision(self.compute_dtype, observation.device):
            hidden = self._encoder(observation)
        # The head, and with it the log-probability, in float32.
        mean, raw = self._head(hidden.float()).chunk(2, dim=-1)
        log_std = self._log_std_min + 0.5 * (self._log_std_max - self._log_std_min) * (
            torch.tanh(raw) + 1
        )
        return mean, log_std

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``tanh(mean)``."""
        mean, _ = self._mean_and_log_std(observation)
        return torch.tanh(mean)

    def sample(
        self, observation: torch.Tensor, noise: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample and its log-probability (summed over action dims).

        Args:
            observation: ``[B, observation_dim]``.
            noise: the standard normal draw ``[B, action_dim]``; None draws it here.
        """
        mean, log_std = self._mean_and_log_std(observation)
        std = log_std.exp()
        if noise is None:
            noise = torch.randn_like(mean)
        u = mean + std * noise
        action = torch.tanh(u)
        log_prob_u = (-0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # log|d tanh(u)/du| = log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)),
        # the form that stays finite when |u| is large.
        log_det = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
        return action, log_prob_u - log_det


@gin.configurable(denylist=['observation_dim', 'action_dim'])
class DeterministicActorNetwork(nn.Module):
    """Deterministic policy (DDPG, TD3): ``a = tanh(MLP(s))`` in [-1, 1].

    Args:
        observation_dim: size of the observation vector.
        action_dim: size of the action vector.
        hidden_layers: widths of the hidden layers (DDPG paper: (400, 300)).
        batch_norm: normalise the observation and every hidden layer's output
            (before its ReLU) with ``BatchNorm1d``, as the DDPG paper does with
            low-dimensional observations. Batch statistics in training mode,
            running statistics in eval mode (rollout, evaluation).
        paper_init: DDPG's initialisation: hidden layers uniform in
            +-1/sqrt(fan_in), final layer uniform in +-3e-3. False: PyTorch's
            default (+-1/sqrt(fan_in) everywhere).
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_layers: Sequence[int] = (256, 256),
        batch_norm: bool = False,
        paper_init: bool = False,
    ):
        super().__init__()
        check_hidden_layers(hidden_layers)
        sizes = [observation_dim] + list(hidden_layers)
        self._input_norm = nn.BatchNorm1d(observation_dim) if batch_norm else nn.Identity()
        self._hidden = nn.ModuleList(nn.Linear(i, o) for i, o in zip(sizes[:-1], sizes[1:]))
        self._hidden_norms = nn.ModuleList(
            nn.BatchNorm1d(o) if batch_norm else nn.Identity() for o in hidden_layers
        )
        self._head = nn.Linear(sizes[-1], action_dim)
        if paper_init:
            ddpg_paper_init_(self._hidden, self._head)
        # None: float32 throughout; torch.bfloat16: the hidden layers' products
        # in bfloat16 (set by alf_lite.precision.set_network_precision).
        self.compute_dtype = None

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        device = observation.device
        x = self._input_norm(observation)
        with lower_precision(self.compute_dtype, device):
            for layer, norm in zip(self._hidden, self._hidden_norms):
                x = layer(x)
                if not isinstance(norm, nn.Identity):
                    # Batch statistics in float32.
                    with full_precision(device):
                        x = norm(x.float())
                x = torch.relu(x)
        # The action in float32: it is the critic's input and the env's command.
        return torch.tanh(self._head(x.float()))
