"""Compute precision of the networks: float32, or bfloat16 matrix products with float32 around them.

With ``'bfloat16'`` each network runs its hidden layers' matrix products in
bfloat16 (``torch.autocast``) and everything whose precision matters in float32:
the parameters themselves (master weights), their gradients (held in float32; a
hidden layer's come from its bfloat16 products in the backward pass and carry
their rounding, as do the actions' gradients through the critic) and optimizer
states, batch-norm statistics, the output layers (Q values, the policy's mean
and log-std), log-probabilities, losses, TD targets and Polyak averaging.
"""

import contextlib
from typing import List, Optional, Sequence

import torch
import torch.nn as nn
from absl import logging

PRECISIONS = ('float32', 'bfloat16')
_DTYPES = {'float32': None, 'bfloat16': torch.bfloat16}
# CPU flags of native bfloat16 matrix products (AVX512-BF16 dot products, AMX tiles).
_NATIVE_BF16_CPU_FLAGS = ('avx512_bf16', 'amx_bf16')

# The largest float32: a setting beyond it is inf in the networks' and the noise's float32.
FLOAT32_MAX = torch.finfo(torch.float32).max


def compute_dtype(precision: str) -> Optional[torch.dtype]:
    """The autocast dtype of a precision: None for float32, ``torch.bfloat16`` for bfloat16.

    Args:
        precision: one of ``PRECISIONS``.
    Raises:
        ValueError: for any other value, naming the valid ones.
    """
    if not isinstance(precision, str) or precision not in _DTYPES:
        raise ValueError(
            f'precision must be one of {", ".join(map(repr, PRECISIONS))}, got {precision!r}.'
        )
    return _DTYPES[precision]


def lower_precision(dtype: Optional[torch.dtype], device: torch.device):
    """Context in which matrix products run in ``dtype`` (no change when None).

    Args:
        dtype: the autocast dtype, or None for float32 throughout.
        device: the device of the computation (autocast is per device type).
    """
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def full_precision(device: torch.device):
    """Context that turns autocast off, for the float32 islands inside a bfloat16 network.

    No change on the ``meta`` device (where the networks' memory is estimated), which has
    no autocast: ``torch.autocast`` raises there.
    """
    if device.type == 'meta':
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, enabled=False)


def set_network_precision(module: nn.Module, precision: str) -> None:
    """Set the compute precision of every network in ``module`` that has one.

    A network takes part by having a ``compute_dtype`` attribute, which its
    forward passes to ``lower_precision``.

    Args:
        module: e.g. an algorithm holding actor and critic networks.
        precision: one of ``PRECISIONS``.
    """
    dtype = compute_dtype(precision)
    for m in module.modules():
        if hasattr(m, 'compute_dtype'):
            m.compute_dtype = dtype


def warn_if_not_applied(
    precision: str, algorithm: nn.Module, parts: Sequence[str] = ('actor', 'critic')
) -> List[str]:
    """Log a warning naming the algorithm's networks that ``precision`` does not reach.

    A network takes part by having a ``compute_dtype`` attribute, itself or in a
    submodule (``set_network_precision``); a network of one's own without one
    computes in float32 whatever the precision.

    Args:
        precision: one of ``PRECISIONS``.
        algorithm: an ``OffPolicyAlgorithm``, with its ``_actor`` and ``_critic``.
        parts: the networks that compute: ``('actor',)`` where only the policy acts.
    Returns:
        The network parameters it named, e.g. ``['SacAlgorithm.critic_network_ctor']``;
        empty for float32.
    """
    if compute_dtype(precision) is None:
        return []
    name = type(algorithm).__name__
    missing = {}
    for part in parts:
        network = getattr(algorithm, f'_{part}', None)
        if isinstance(network, nn.Module) and not any(
            hasattr(m, 'compute_dtype') for m in network.modules()
        ):
            missing[f'{name}.{part}_network_ctor'] = type(network).__name__
    if missing:
        logging.warning(
            'precision=%r does not reach %s: a network takes part by a compute_dtype '
            'attribute that its forward passes to alf_lite.precision.lower_precision (as '
            "alf_lite's networks do); without one it computes in float32.",
            precision,
            ', '.join(f'{parameter} ({cls})' for parameter, cls in missing.items()),
        )
    return list(missing)


def _cpu_flags() -> set:
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('flags'):
                    return set(line.split(':', 1)[1].split())
    except OSError:
        pass
    return set()


def native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively (else they are emulated, slowly).

    CPU: the AVX512-BF16 or AMX-BF16 flag in /proc/cpuinfo. CUDA: compute
    capability 8.0 (Ampere) or newer.
    """
    if device.type == 'cuda':
        return torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == 'cpu':
        return bool(_cpu_flags() & set(_NATIVE_BF16_CPU_FLAGS))
    return False


def warn_if_emulated(precision: str, device: torch.device) -> bool:
    """Log a warning when ``precision`` is bfloat16 on a device without native support.

    Returns:
        True when it warned.
    """
    if compute_dtype(precision) is None or native_bfloat16(device):
        return False
    what = (
        'this CPU has neither AVX512-BF16 nor AMX-BF16'
        if device.type == 'cpu'
        else f'{device} has no native bfloat16 matrix units'
    )
    logging.warning(
        "precision='bfloat16': %s, so bfloat16 matrix products are emulated and "
        'much slower than float32 (an SAC update about 20x slower on an '
        "AVX2-only CPU). Use precision='float32' here.",
        what,
    )
    return True
