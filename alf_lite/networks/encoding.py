"""Plain MLP encoders."""

from typing import Sequence

import torch.nn as nn


def mlp(input_dim: int, hidden_layers: Sequence[int]) -> nn.Sequential:
    """Build ``Linear -> ReLU`` for each hidden size; the output has the last hidden size.

    Args:
        input_dim: size of the input vector.
        hidden_layers: width of each hidden layer, e.g. ``(256, 256)``; empty
            gives the identity.
    """
    layers = []
    size = input_dim
    for width in hidden_layers:
        layers += [nn.Linear(size, width), nn.ReLU(inplace=True)]
        size = width
    return nn.Sequential(*layers)
