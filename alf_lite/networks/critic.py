"""Critic networks: Q(s, a) for several replicas evaluated as one batched network."""

from typing import Optional, Sequence

import gin
import torch
import torch.nn as nn

from alf_lite.networks.encoding import check_hidden_layers
from alf_lite.networks.initializers import ddpg_paper_init_
from alf_lite.networks.layers import BatchedBatchNorm1d, BatchedLinear
from alf_lite.precision import full_precision, lower_precision


@gin.configurable(denylist=['observation_dim', 'action_dim', 'num_replicas'])
class CriticNetwork(nn.Module):
    """``num_replicas`` independent MLP critics ``Q_i(s, a)``, computed in one pass.

    The observation runs through the first ``action_input_layer`` hidden layers
    (the state path) before the action is concatenated to it. Output ``[B, R]``.

    Args:
        observation_dim: size of the observation vector.
        action_dim: size of the action vector.
        num_replicas: number of independent critics R (SAC and TD3 use 2).
        hidden_layers: widths of the hidden layers of every replica.
        action_input_layer: index of the layer whose input gets the action
            appended: 0 concatenates it with the observation at the input (SAC,
            TD3); 1 appends it to the first hidden layer's output, so it enters
            the second hidden layer (DDPG paper). At most ``len(hidden_layers)``
            (the action then enters only the output layer).
        batch_norm: batch-normalise the state path: the observation and the
            outputs (before ReLU) of the hidden layers before the action enters,
            as the DDPG paper does with low-dimensional observations. Each
            replica has its own statistics; running ones are used in eval mode.
        paper_init: DDPG's initialisation: hidden layers uniform in
            +-1/sqrt(fan_in), output layer uniform in +-3e-3. False: the
            ``BatchedLinear`` default (+-1/sqrt(fan_in) everywhere).
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        num_replicas: int = 1,
        hidden_layers: Sequence[int] = (256, 256),
        action_input_layer: int = 0,
        batch_norm: bool = False,
        paper_init: bool = False,
    ):
        super().__init__()
        check_hidden_layers(hidden_layers)
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f'num_replicas must be an integer >= 1, got {num_replicas!r}')
        if not 0 <= action_input_layer <= len(hidden_layers):
            raise ValueError(
                f'action_input_layer must be in [0, {len(hidden_layers)}] '
                f'for {len(hidden_layers)} hidden layers, got {action_input_layer}'
            )
        self.num_replicas = num_replicas
        self._action_input_layer = action_input_layer
        outputs = list(hidden_layers) + [1]
        inputs = [observation_dim] + list(hidden_layers)
        inputs[action_input_layer] += action_dim
        self._layers = nn.ModuleList(
            BatchedLinear(i, o, num_replicas) for i, o in zip(inputs, outputs)
        )
        state_path = hidden_layers[:action_input_layer] if batch_norm else []
        self._input_norm = (
            BatchedBatchNorm1d(observation_dim, num_replicas) if batch_norm else nn.Identity()
        )
        self._hidden_norms = nn.ModuleList(
            BatchedBatchNorm1d(width, num_replicas) for width in state_path
        )
        if paper_init:
            ddpg_paper_init_(self._layers[:-1], self._layers[-1])
        # None: float32 throughout; torch.bfloat16: the hidden layers' products
        # in bfloat16 (set by alf_lite.precision.set_network_precision).
        self.compute_dtype = None

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, num_replicas: Optional[int] = None
    ) -> torch.Tensor:
        """Q values ``[B, R]``; only the first ``num_replicas`` replicas when given.

        Computing fewer replicas saves their forward and backward passes (TD3's
        and DDPG's actor follows replica 0 only). With batch norm all replicas
        run (their statistics are one layer) and the result is sliced.
        """
        if num_replicas is not None and (
            self._hidden_norms or not isinstance(self._input_norm, nn.Identity)
        ):
            return self.forward(observation, action)[:, :num_replicas]
        r = self.num_replicas if num_replicas is None else num_replicas
        device = observation.device
        x = self._input_norm(observation.unsqueeze(0).expand(r, *observation.shape))
        last = len(self._layers) - 1
        with lower_precision(self.compute_dtype, device):
            for i, layer in enumerate(self._layers):
                if i == self._action_input_layer:
                    x = torch.cat([x, action.unsqueeze(0).expand(r, *action.shape)], dim=-1)
                if i == last:
                    break
                x = layer(x, num_replicas)
                if i < len(self._hidden_norms):
                    # Batch statistics in float32.
                    with full_precision(device):
                        x = self._hidden_norms[i](x.float())
                x = torch.relu_(x)
        # Q values in float32: a TD error is a small difference of large values.
        x = self._layers[last](x.float(), num_replicas)
        return x.squeeze(-1).transpose(0, 1)
