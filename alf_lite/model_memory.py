"""The memory an algorithm's networks take, known before any of it is allocated.

The algorithm is first built on torch's ``meta`` device, where tensors have a
shape and no storage: its parameters, buffers and optimizers cost nothing and
draw no random numbers. From them, ``ModelBytes`` counts what the real build
will hold: every parameter and buffer (target networks included), and for
training a gradient and the optimizer's state tensors per optimized
parameter. A config whose networks cannot fit (``hidden_layers=(100000,
100000)`` asks for 40 GB per layer) is refused naming the sizes, instead of
failing inside torch's allocator or being killed by the kernel's OOM killer.
"""

import contextlib
import dataclasses
import logging as std_logging
from typing import Callable, Optional, Tuple

import torch
from absl import logging

from alf_lite.device import available_cpu_memory, free_memory_bytes, memory_bound_text

_GIB = float(1 << 30)
_WITH_STATE = ' with their gradients and optimizer state'


class ModelTooLargeError(MemoryError):
    """Raised before building an algorithm whose networks would not fit in available memory."""


@dataclasses.dataclass(frozen=True)
class ModelBytes:
    """Bytes of an algorithm's tensors.

    Attributes:
        parameters: bytes of the parameters and buffers of all its networks (targets too).
        training: ``parameters`` plus a gradient and the optimizer state of every
            parameter an optimizer steps (Adam: two moments); what training holds
            once every optimizer has stepped.
        num_parameters: number of parameter elements.
    """

    parameters: int
    training: int
    num_parameters: int

    def describe(self) -> str:
        return (
            f'{self.num_parameters} parameters, {self.parameters} bytes '
            f'({self.parameters / _GIB:.3f} GiB); {self.training} bytes '
            f'({self.training / _GIB:.3f} GiB){_WITH_STATE}'
        )


def _state_tensors_per_parameter(optimizer: torch.optim.Optimizer) -> int:
    """Tensors the size of a parameter that ``optimizer`` keeps for it (Adam: two moments)."""
    defaults = optimizer.defaults
    if isinstance(optimizer, torch.optim.SGD):
        return int(defaults.get('momentum', 0) != 0)
    if isinstance(optimizer, torch.optim.RMSprop):
        return 1 + int(defaults.get('momentum', 0) != 0) + int(bool(defaults.get('centered')))
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return 2 + int(bool(defaults.get('amsgrad')))
    return 2  # another optimizer: counted as Adam-like


def model_bytes(algorithm: torch.nn.Module) -> ModelBytes:
    """The bytes of ``algorithm``'s parameters and buffers, and of training them.

    ``algorithm`` may live on any device, ``meta`` included. Its optimizers are
    those registered in ``algorithm.optimizers`` (a dict), if any.
    """

    def nbytes(tensor):
        return tensor.numel() * tensor.element_size()

    parameters = list(algorithm.parameters())
    held = sum(map(nbytes, parameters)) + sum(map(nbytes, algorithm.buffers()))
    extra = 0
    with_gradient = set()
    for optimizer in getattr(algorithm, 'optimizers', {}).values():
        # Each optimizer keeps its own state of a parameter; its gradient is one.
        per_parameter = _state_tensors_per_parameter(optimizer)
        for group in optimizer.param_groups:
            for p in group['params']:
                extra += per_parameter * nbytes(p)
                if id(p) not in with_gradient:
                    with_gradient.add(id(p))
                    extra += nbytes(p)
    return ModelBytes(held, held + extra, sum(p.numel() for p in parameters))


def estimate_model_bytes(ctor: Callable[..., torch.nn.Module], **kwargs) -> Optional[ModelBytes]:
    """``model_bytes`` of ``ctor(**kwargs)`` built on the ``meta`` device, allocating nothing.

    None when the algorithm cannot be built there (one whose constructor reads a
    tensor's value, say): the real build then goes ahead unchecked (``warn_not_checked``
    says so), and raises any error of the config itself.
    """
    estimate, reason = _estimate_or_reason(ctor, **kwargs)
    if estimate is None:
        logging.info("the networks' memory is not known in advance: %s", reason)
    return estimate


def _estimate_or_reason(
    ctor: Callable[..., torch.nn.Module], **kwargs
) -> Tuple[Optional[ModelBytes], str]:
    """``estimate_model_bytes``, unlogged, and why there is none ('' when there is one)."""
    try:
        with torch.device('meta'):
            algorithm = ctor(**kwargs)
    except Exception as e:  # noqa: BLE001  (the real build raises the config's own errors)
        return None, f'{type(e).__name__}: {e}'
    return model_bytes(algorithm), ''


def warn_not_checked(reason: str, also: str = '') -> None:
    """Warn that networks built without an estimate (``estimate_model_bytes`` gave None) went
    unchecked: call it once the real build succeeded (a config error raises there instead,
    told once, by what it raises).

    Args:
        reason: why they cannot be built on the meta device.
        also: what else went without the estimate, a clause starting with '; '.
    """
    logging.warning(
        "the networks' memory was not counted before they were built, so it was not checked "
        "against the free memory: they cannot be built on torch's meta device, where it is "
        'counted (%s)%s',
        reason,
        also,
    )


class _FirstOfEachMessage(std_logging.Filter):
    """Lets a record through unless one of its level and text came through before."""

    def __init__(self):
        super().__init__()
        self._seen = set()

    def filter(self, record) -> bool:
        try:
            key = (record.levelno, record.getMessage())
        except Exception:  # noqa: BLE001  (its handler reports a message it cannot format)
            return True
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


@contextlib.contextmanager
def each_message_once():
    """Within it, the root logger's handlers drop a record whose level and text one before
    it had: an algorithm built twice, on the meta device for its estimate and then for real
    (``build_checked``), or once per combination of a sweep, would log each warning of its
    build (a network of the user's, say) once per build, each copy alike."""
    # A filter per handler: each handler is given every record.
    filters = [(handler, _FirstOfEachMessage()) for handler in std_logging.getLogger().handlers]
    for handler, first in filters:
        handler.addFilter(first)
    try:
        yield
    finally:
        for handler, first in filters:
            handler.removeFilter(first)


def build_checked(
    ctor: Callable[..., torch.nn.Module],
    device: torch.device,
    training: bool = True,
    not_checked: str = '',
    **kwargs,
) -> Tuple[torch.nn.Module, Optional[ModelBytes]]:
    """``ctor(**kwargs)`` (in CPU memory), its memory checked first and the result refused
    unless it is an algorithm; returns it and the estimate (None: ``warn_not_checked``,
    with ``not_checked``, said it went unchecked).

    Raises:
        ModelTooLargeError: as ``check_model_fits``.
        ValueError: ``ctor`` is a class that is no ``OffPolicyAlgorithm`` (refused before it
            is called), refused its settings or built no ``OffPolicyAlgorithm``.
    """
    from alf_lite.algorithms.off_policy_algorithm import check_algorithm, check_algorithm_class

    check_algorithm_class(ctor)
    with each_message_once():
        estimate, reason = _estimate_or_reason(ctor, **kwargs)
        if estimate is not None:
            _check_estimate_fits(estimate, device, training)
        algorithm = ctor(**kwargs)
    check_algorithm(algorithm)
    if estimate is None:
        warn_not_checked(reason, not_checked)
    return algorithm, estimate


def check_model_fits(
    ctor: Callable[..., torch.nn.Module],
    device: torch.device,
    training: bool = True,
    **kwargs,
) -> Optional[ModelBytes]:
    """Estimate ``ctor(**kwargs)``'s memory and raise if it cannot fit.

    The networks are built in CPU memory and then moved to ``device``: the CPU
    must hold their parameters, and ``device`` what using them holds
    (``training``: with gradients and optimizer state).

    Returns:
        The estimate, None when there is none (``estimate_model_bytes``).

    Raises:
        ModelTooLargeError: it needs more than the free memory of the CPU or ``device``.
    """
    estimate = estimate_model_bytes(ctor, **kwargs)
    if estimate is not None:
        _check_estimate_fits(estimate, device, training)
    return estimate


def _check_estimate_fits(estimate: ModelBytes, device: torch.device, training: bool) -> None:
    """``check_model_fits`` of an estimate made."""
    device = torch.device(device)
    needed = estimate.training if training else estimate.parameters
    needs = [(device, needed)]
    if device.type != 'cpu':
        needs.insert(0, (torch.device('cpu'), estimate.parameters))
    for where, nbytes in needs:
        free = free_memory_bytes(where)
        if nbytes > free:
            bound = available_cpu_memory()[1] if where.type == 'cpu' else None
            need = 'training them needs' if training else 'they need'
            raise ModelTooLargeError(
                f'the networks do not fit in {where} memory: they have '
                f'{estimate.num_parameters} parameters ({estimate.parameters} bytes); {need} '
                f'{nbytes} bytes ({nbytes / _GIB:.2f} GiB){_WITH_STATE if training else ""}, '
                f'and {free} bytes ({free / _GIB:.2f} GiB) are free.{memory_bound_text(bound)} '
                'Make the networks smaller (their hidden_layers).'
            )
