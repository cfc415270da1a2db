"""Layers that evaluate several replicas of a network in one batched matmul."""
import math

import torch
import torch.nn as nn


class BatchedLinear(nn.Module):
    """``num_replicas`` independent linear layers applied with one ``baddbmm``.

    Input ``[R, B, in]``, output ``[R, B, out]``. Each replica is initialised
    like ``nn.Linear`` (uniform in +-1/sqrt(in)), independently.

    Args:
        in_features: input size.
        out_features: output size.
        num_replicas: number of independent replicas R.
    """

    def __init__(self, in_features: int, out_features: int, num_replicas: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_replicas, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(num_replicas, 1, out_features))
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)
