"""Layers that evaluate several replicas of a network in one batched call."""

import math
from typing import Optional

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
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(num_replicas, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(num_replicas, 1, out_features))
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, num_replicas: Optional[int] = None) -> torch.Tensor:
        """``x @ W_r + b_r`` for replicas ``r < num_replicas`` (None: all); x is ``[R', B, in]``."""
        if num_replicas is None:
            return torch.baddbmm(self.bias, x, self.weight)
        return torch.baddbmm(self.bias[:num_replicas], x, self.weight[:num_replicas])


class BatchedBatchNorm1d(nn.BatchNorm1d):
    """``num_replicas`` independent batch norms over ``[R, B, F]``, as one ``BatchNorm1d``.

    Replica r's feature f is channel ``r * F + f`` of a ``BatchNorm1d(R * F)``:
    each replica has its own statistics and affine parameters. In training mode
    it normalises with the batch's statistics and updates the running ones; in
    eval mode it uses the running ones.

    Args:
        num_features: F, features per replica.
        num_replicas: number of independent replicas R.
    """

    def __init__(self, num_features: int, num_replicas: int):
        super().__init__(num_replicas * num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, b, f = x.shape
        y = super().forward(x.transpose(0, 1).reshape(b, r * f))
        return y.reshape(b, r, f).transpose(0, 1)
