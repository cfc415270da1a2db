"""Plain MLP encoders."""

import collections.abc
from typing import Sequence

import torch.nn as nn


def check_hidden_layers(hidden_layers: Sequence[int]) -> None:
    """Raise ValueError unless ``hidden_layers`` is a sequence of positive integers."""
    if not isinstance(hidden_layers, collections.abc.Sequence) or any(
        isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in hidden_layers
    ):
        raise ValueError(
            f'hidden_layers must be positive integer widths, e.g. (256, 256), got {hidden_layers!r}'
        )


def mlp(input_dim: int, hidden_layers: Sequence[int]) -> nn.Sequential:
    """Build ``Linear -> ReLU`` for each hidden size; the output has the last hidden size.

    Args:
        input_dim: size of the input vector.
        hidden_layers: width of each hidden layer, e.g. ``(256, 256)``; empty
            gives the identity.
    """
    check_hidden_layers(hidden_layers)
    layers = []
    size = input_dim
    for width in hidden_layers:
        layers += [nn.Linear(size, width), nn.ReLU(inplace=True)]
        size = width
    return nn.Sequential(*layers)
