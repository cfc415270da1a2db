"""Optimizers that gin files may name, e.g. ``SacAlgorithm.actor_optimizer = @actor/Adam``.

A reference without ``()`` passes the optimizer class with its scoped bindings
(``actor/Adam.lr = 1e-3``); the algorithm calls it with its parameters.
"""
from typing import Callable, Iterable, Optional

import gin
import torch

for _cls in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.RMSprop):
    gin.external_configurable(_cls, module='torch.optim')

OptimizerCtor = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


def make_optimizer(ctor: Optional[OptimizerCtor], params, default_lr: float) -> torch.optim.Optimizer:
    """Call ``ctor(params)``, or build ``Adam(params, lr=default_lr)`` when ``ctor`` is None.

    Args:
        ctor: optimizer class or factory taking the parameters; None for Adam.
        params: the parameters to optimise.
        default_lr: learning rate of the default Adam.
    """
    params = list(params)
    if ctor is None:
        return torch.optim.Adam(params, lr=default_lr)
    return ctor(params)
