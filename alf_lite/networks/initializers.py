"""Initialisation schemes for linear layers (``nn.Linear`` and ``BatchedLinear``)."""

import math
from typing import Iterable

import torch.nn as nn

# DDPG paper (Lillicrap et al. 2016, "Experiment details"): final layers of actor and critic
# uniform in +-3e-3 (low-dimensional observations), so that the first policy
# outputs and value estimates are near zero.
DDPG_FINAL_LAYER_BOUND = 3e-3


def uniform_(layer: nn.Module, bound: float) -> None:
    """Weights and biases of ``layer`` uniform in ``[-bound, bound]``.

    Args:
        layer: a module with ``weight`` and ``bias`` parameters.
        bound: half-width of the interval.
    """
    nn.init.uniform_(layer.weight, -bound, bound)
    nn.init.uniform_(layer.bias, -bound, bound)


def fan_in_uniform_(layer: nn.Module) -> None:
    """Weights and biases uniform in ``+-1/sqrt(fan_in)``; fan_in is ``layer.in_features``."""
    uniform_(layer, 1.0 / math.sqrt(layer.in_features))


def ddpg_paper_init_(hidden_layers: Iterable[nn.Module], final_layer: nn.Module) -> None:
    """DDPG's initialisation: hidden layers ``+-1/sqrt(fan_in)``, final layer ``+-3e-3``.

    Args:
        hidden_layers: the linear layers followed by an activation.
        final_layer: the output layer.
    """
    for layer in hidden_layers:
        fan_in_uniform_(layer)
    uniform_(final_layer, DDPG_FINAL_LAYER_BOUND)
