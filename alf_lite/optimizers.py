"""Optimizers that gin files may name, e.g. ``SacAlgorithm.actor_optimizer = @actor/Adam``.

A reference without ``()`` passes the optimizer class with its scoped bindings
(``actor/Adam.lr = 1e-3``); the algorithm calls it with its parameters.
"""

import inspect
from typing import Callable, Iterable, Optional

import gin
import torch

from alf_lite.config import without_gin_call_trace


def _fused_by_default(cls):
    """``cls`` (Adam, AdamW) that uses its fused kernel unless told otherwise.

    One fused step over all parameters costs a third of the default per-tensor
    (foreach) step on a CPU; the update rule is the same.
    """

    def ctor(params, **kwargs):
        if (
            kwargs.get('fused') is None
            and kwargs.get('foreach') is None
            and not kwargs.get('differentiable', False)
        ):
            kwargs['fused'] = True
        return cls(params, **kwargs)

    ctor.__name__ = ctor.__qualname__ = cls.__name__
    ctor.__doc__ = cls.__doc__
    ctor.__signature__ = inspect.signature(cls)
    return ctor


Adam = _fused_by_default(torch.optim.Adam)
AdamW = _fused_by_default(torch.optim.AdamW)
for _ctor in (Adam, AdamW, torch.optim.SGD, torch.optim.RMSprop):
    # The algorithm passes the parameters: a binding of them would be ignored.
    gin.external_configurable(_ctor, module='torch.optim', denylist=['params'])

OptimizerCtor = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


def make_optimizer(
    ctor: Optional[OptimizerCtor], params, default_lr: float, parameter: str = 'optimizer'
) -> torch.optim.Optimizer:
    """Call ``ctor(params)``, or build ``Adam(params, lr=default_lr)`` when ``ctor`` is None.

    Args:
        ctor: optimizer class or factory taking the parameters; None for Adam.
        params: the parameters to optimise.
        default_lr: learning rate of the default Adam.
        parameter: the parameter ``ctor`` was given to, e.g. ``'SacAlgorithm.actor_optimizer'``,
            which errors name.

    Raises:
        ValueError: ``ctor`` is a class of no optimizer (a network, a noise) or builds
            none, refuses its settings (invalid values, or ones that cannot run
            together), or it is ``differentiable``: that mode keeps the graph
            through the step, which cannot update parameters in place as training does.
        TypeError: ``ctor`` cannot be called with the parameters alone.
    """
    params = list(params)
    if ctor is None:
        return Adam(params, lr=default_lr)
    scope = parameter.rpartition('.')[2].removesuffix('_optimizer')
    example = f'@{scope}/Adam' if parameter.endswith('_optimizer') else '@Adam'
    expected = f'an optimizer constructor that takes the parameters, e.g. {example}'
    if isinstance(ctor, type) and not issubclass(ctor, torch.optim.Optimizer):
        # Called with the parameters, it would fail on them naming only its own arguments.
        raise ValueError(
            f'{parameter} is the class {ctor.__name__}, which is no optimizer: give {expected}.'
        )
    try:
        optimizer = ctor(params)
    except (ValueError, RuntimeError, TypeError) as e:
        # torch refuses settings that cannot run together (fused with foreach, fused with
        # differentiable) as a RuntimeError: they are config errors like its ValueErrors.
        # The parameter names which optimizer it is (``Invalid learning rate`` alone does
        # not say whether the actor's, the critic's or alpha's): gin's call trace of the
        # optimizer, which names only its class, is left out.
        message = f'{parameter}: {without_gin_call_trace(e)}'
        raise (TypeError if isinstance(e, TypeError) else ValueError)(message) from e
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            f'{parameter} built a {type(optimizer).__name__}, which is no optimizer: '
            f'give {expected}.'
        )
    if optimizer.defaults.get('differentiable'):
        # Else the first update fails on an in-place change of a leaf that requires grad.
        raise ValueError(
            f'{type(optimizer).__name__}: differentiable = True cannot train these '
            'parameters (it differentiates through the step, which updates them in place)'
        )
    return optimizer
