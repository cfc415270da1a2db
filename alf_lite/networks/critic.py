"""Critic networks: Q(s, a) for several replicas evaluated as one batched network."""
from typing import Sequence

import gin
import torch
import torch.nn as nn

from alf_lite.networks.layers import BatchedLinear


@gin.configurable
class CriticNetwork(nn.Module):
    """``num_replicas`` independent MLP critics ``Q_i(s, a)``, computed in one pass.

    Observation and action are concatenated at the input. Output ``[B, R]``.

    Args:
        observation_dim: size of the observation vector.
        action_dim: size of the action vector.
        num_replicas: number of independent critics R (SAC and TD3 use 2).
        hidden_layers: widths of the hidden layers of every replica.
    """

    def __init__(self, observation_dim: int, action_dim: int, num_replicas: int = 1,
                 hidden_layers: Sequence[int] = (256, 256)):
        super().__init__()
        self.num_replicas = num_replicas
        sizes = [observation_dim + action_dim] + list(hidden_layers) + [1]
        self._layers = nn.ModuleList(
            BatchedLinear(i, o, num_replicas) for i, o in zip(sizes[:-1], sizes[1:]))

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([observation, action], dim=-1)
        x = x.unsqueeze(0).expand(self.num_replicas, *x.shape)
        for layer in self._layers[:-1]:
            x = torch.relu(layer(x))
        return self._layers[-1](x).squeeze(-1).transpose(0, 1)
