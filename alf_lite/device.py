"""The training device: resolving ``TrainerConfig.device``, its name, free memory, determinism.

Env stepping is always on the CPU; networks, optimizer states and the update
live on the training device (see DESIGN.md, "Devices").
"""

import os
import re
from typing import List

import psutil
import torch

# cuBLAS needs a fixed workspace to give reproducible results; PyTorch refuses
# deterministic mode on CUDA without one. ':16:8' is the smaller alternative.
CUBLAS_WORKSPACE_CONFIG = ':4096:8'
_DETERMINISTIC_CUBLAS_CONFIGS = (':4096:8', ':16:8')
_DEVICE = re.compile(r'^(auto|cpu|cuda(:\d+)?)$')


class DeviceUnavailableError(RuntimeError):
    """The configured device does not exist on this machine."""


def resolve_device(device: str = 'auto') -> torch.device:
    """The ``torch.device`` that ``TrainerConfig.device`` names.

    Args:
        device: 'auto' (the first CUDA device when one is available, else the
            CPU), 'cpu', 'cuda' (the current CUDA device, normally 0) or
            'cuda:N'.

    Raises:
        ValueError: ``device`` is none of these.
        DeviceUnavailableError: CUDA was asked for and is not available, or
            device N does not exist.
    """
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    if device == 'auto':
        return (
            torch.device('cuda', torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device('cpu')
        )
    if device == 'cpu':
        return torch.device('cpu')
    if not torch.cuda.is_available():
        build = (
            'this torch build has no CUDA support'
            if torch.version.cuda is None
            else f'torch is built for CUDA {torch.version.cuda} but finds no GPU'
        )
        raise DeviceUnavailableError(
            f"device {device!r} was asked for, but {build}. Use device='cpu' or 'auto'."
        )
    index = torch.cuda.current_device() if device == 'cuda' else int(device.split(':')[1])
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceUnavailableError(
            f'device {device!r} was asked for, but only {count} CUDA device(s) are visible '
            f'(cuda:0 to cuda:{count - 1}; CUDA_VISIBLE_DEVICES='
            f'{os.environ.get("CUDA_VISIBLE_DEVICES", "unset")}).'
        )
    return torch.device('cuda', index)


def describe_device(device: torch.device) -> str:
    """A line for the log and the root_dir: ``'cuda:0 (NVIDIA H200, 139.8 GiB, CUDA 13.0)'``."""
    device = torch.device(device)
    if device.type == 'cuda':
        props = torch.cuda.get_device_properties(device)
        return (
            f'{device} ({props.name}, {props.total_memory / 2**30:.1f} GiB, '
            f'CUDA {torch.version.cuda}, torch {torch.__version__})'
        )
    if device.type == 'cpu':
        return f'cpu ({len(os.sched_getaffinity(0))} usable cores, torch {torch.__version__})'
    return str(device)


def free_memory_bytes(device: torch.device) -> int:
    """Bytes that can still be allocated on ``device``: available RAM, or free GPU memory."""
    device = torch.device(device)
    if device.type == 'cuda':
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == 'cpu':
        return int(psutil.virtual_memory().available)
    raise ValueError(f'no memory figure for device {device}')


def visible_gpu_ids() -> List[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them for a child process.

    The entries of ``CUDA_VISIBLE_DEVICES`` when it is set, else ``'0'`` to
    ``'N-1'``; none when torch sees no GPU.
    """
    count = torch.cuda.device_count()
    visible = os.environ.get('CUDA_VISIBLE_DEVICES')
    if visible is None:
        return [str(i) for i in range(count)]
    return [gpu.strip() for gpu in visible.split(',') if gpu.strip()][:count]


def use_deterministic_algorithms(device: torch.device) -> None:
    """Make torch deterministic on ``device``: same seed, same numbers.

    On CUDA this first sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (unless a
    deterministic value is already set): cuBLAS reads it when its first handle
    is created, so call this before any computation on the GPU.

    Raises:
        ValueError: ``CUBLAS_WORKSPACE_CONFIG`` is set to a value that is not
            deterministic.
    """
    if torch.device(device).type == 'cuda':
        current = os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', CUBLAS_WORKSPACE_CONFIG)
        if current not in _DETERMINISTIC_CUBLAS_CONFIGS:
            raise ValueError(
                f'CUBLAS_WORKSPACE_CONFIG={current!r} makes cuBLAS '
                f'nondeterministic; unset it or use {CUBLAS_WORKSPACE_CONFIG!r}.'
            )
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
