"""Plain MLP encoders."""
import functools
from typing import Sequence

import torch.nn as nn


def mlp(input_dim: int, hidden_layers: Sequence[int], output_dim: int = 0,
        activation=None) -> nn.Sequential:
    """Build ``Linear -> activation`` for each hidden size, then an optional final ``Linear``.

    Args:
        input_dim: size of the input vector.
        hidden_layers: width of each hidden layer, e.g. ``(256, 256)``.
        output_dim: size of a final linear layer without activation; 0 for none.
        activation: module class applied after each hidden layer (ReLU in place).
    """
    if activation is None:
        activation = functools.partial(nn.ReLU, inplace=True)
    layers = []
    size = input_dim
    for width in hidden_layers:
        layers += [nn.Linear(size, width), activation()]
        size = width
    if output_dim:
        layers.append(nn.Linear(size, output_dim))
    return nn.Sequential(*layers)
