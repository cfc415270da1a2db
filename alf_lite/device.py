"""The training device: resolving ``TrainerConfig.device``, its name, free memory, determinism.

Env stepping is always on the CPU; networks, optimizer states and the update
live on the training device (see DESIGN.md, "Devices").
"""

import os
import re
import resource
from typing import List, NamedTuple, Optional, Tuple, Union

import psutil
import torch

# cuBLAS needs a fixed workspace to give reproducible results; PyTorch refuses
# deterministic mode on CUDA without one. ':16:8' is the smaller alternative.
CUBLAS_WORKSPACE_CONFIG = ':4096:8'
_DETERMINISTIC_CUBLAS_CONFIGS = (':4096:8', ':16:8')
_DEVICE = re.compile(r'auto|cpu|cuda(:\d+)?')
# cgroup v1 writes "no limit" as the largest page count in bytes, about 2^63.
_NO_CGROUP_LIMIT = 1 << 60


class DeviceUnavailableError(RuntimeError):
    """The configured device does not exist on this machine."""


def device_type(device: str = 'auto') -> str:
    """'cpu' or 'cuda': the kind of device ``TrainerConfig.device`` names, found without
    initialising CUDA in this process (``resolve_device`` does, to learn the current
    device), which would take GPU memory in a process that trains nothing. Whether
    device N exists is not checked.

    Raises:
        ValueError: ``device`` is none of 'auto', 'cpu', 'cuda', 'cuda:N'.
    """
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    if device == 'auto':
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    return 'cpu' if device == 'cpu' else 'cuda'


def resolve_device(device: str = 'auto') -> torch.device:
    """The ``torch.device`` that ``TrainerConfig.device`` names.

    Args:
        device: 'auto' (the current CUDA device, as 'cuda', when one is
            available, else the CPU), 'cpu', 'cuda' (the current CUDA device:
            0 unless ``torch.cuda.set_device`` chose another, as a trainer on
            'cuda:N' does for its process) or 'cuda:N'.

    Raises:
        ValueError: ``device`` is none of these.
        DeviceUnavailableError: CUDA was asked for and is not available, or
            device N does not exist.
    """
    if device_type(device) == 'cpu':  # 'cpu', or 'auto' without CUDA
        return torch.device('cpu')
    if device == 'auto':
        return torch.device('cuda', torch.cuda.current_device())
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
    """A line for the log and the root_dir.

    E.g. ``'cuda:0 (NVIDIA H200, 139.8 GiB, CUDA 13.0, torch 2.11.0)'``, or
    ``'cpu (AMD EPYC, 2 usable cores, torch 2.13.0+cpu)'``: the CPU's model where the
    system names it, as speed and the last bits of a result depend on it.
    """
    device = torch.device(device)
    if device.type == 'cuda':
        props = torch.cuda.get_device_properties(device)
        return (
            f'{device} ({props.name}, {props.total_memory / 2**30:.1f} GiB, '
            f'CUDA {torch.version.cuda}, torch {torch.__version__})'
        )
    if device.type == 'cpu':
        model = cpu_model()
        cores = len(os.sched_getaffinity(0))
        return (
            f'cpu ({model + ", " if model else ""}{cores} usable core{"s" if cores != 1 else ""}, '
            f'torch {torch.__version__})'
        )
    return str(device)


def cpu_model(cpuinfo: str = '/proc/cpuinfo') -> Optional[str]:
    """The CPU's model name as Linux gives it (its first ``model name`` line), or None."""
    try:
        with open(cpuinfo, errors='replace') as f:
            for line in f:
                key, _, value = line.partition(':')
                if key.strip() == 'model name' and value.strip():
                    return ' '.join(value.split())
    except OSError:
        pass
    return None


class CgroupMemoryLimit(NamedTuple):
    """A memory limit of a cgroup this process is in, and what the cgroup holds now.

    Args:
        path: the cgroup's directory, e.g. ``/sys/fs/cgroup/memory/docker/<id>``.
        limit: its limit in bytes (``memory.max`` in cgroup v2,
            ``memory.limit_in_bytes`` in v1).
        usage: bytes charged to it (``memory.current``, v1:
            ``memory.usage_in_bytes``) less its inactive file cache, which
            the kernel reclaims before it OOM-kills (the working set, as
            Kubernetes counts it).
    """

    path: str
    limit: int
    usage: int

    @property
    def room(self) -> int:
        """Bytes the cgroup's processes may still allocate before the OOM killer acts."""
        return max(self.limit - self.usage, 0)


def cgroup_memory_limit(root: str = '/') -> Optional[CgroupMemoryLimit]:
    """The memory limit that leaves this process the least room, over its cgroups; None if none.

    A container (Docker ``--memory``, a Kubernetes pod, a Slurm job) limits
    its processes' memory through its cgroup, or one above it, while the
    host's free memory, all ``psutil`` sees, may be far larger. The cgroups
    are those ``/proc/self/cgroup`` names, in cgroup v2 and in v1's memory
    hierarchy, and their parents up to the mount point; a path not found
    under the mount is the mount itself, as a container without a cgroup
    namespace sees its own cgroup there.

    Args:
        root: the directory the files are read under, ``/`` itself unless a
            test points it at a fake tree.
    """
    try:
        with open(os.path.join(root, 'proc/self/cgroup')) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    mount = os.path.join(root, 'sys/fs/cgroup')
    limits = []
    for line in lines:
        fields = line.split(':', 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == '':
            v2 = mount
            if not os.path.exists(os.path.join(mount, 'cgroup.controllers')):
                v2 = os.path.join(mount, 'unified')  # where a host with both versions mounts v2
            limits += _cgroup_limits(v2, path, 'memory.max', 'memory.current', 'inactive_file')
        elif 'memory' in controllers.split(','):
            limits += _cgroup_limits(
                os.path.join(mount, 'memory'),
                path,
                'memory.limit_in_bytes',
                'memory.usage_in_bytes',
                'total_inactive_file',
            )
    return min(limits, key=lambda limit: limit.room, default=None)


def _cgroup_limits(
    mount: str, path: str, limit_file: str, usage_file: str, inactive_key: str
) -> List[CgroupMemoryLimit]:
    """The limits set on cgroup ``path`` of the hierarchy mounted at ``mount`` and its parents."""
    mount = os.path.normpath(mount)
    directory = os.path.normpath(os.path.join(mount, path.lstrip('/')))
    if not os.path.isdir(directory) or os.path.commonpath([mount, directory]) != mount:
        directory = mount
    limits = []
    while True:
        limit = _read_bytes(os.path.join(directory, limit_file))
        usage = _read_bytes(os.path.join(directory, usage_file))
        if limit is not None and limit < _NO_CGROUP_LIMIT and usage is not None:
            inactive = _memory_stat(os.path.join(directory, 'memory.stat'), inactive_key)
            limits.append(CgroupMemoryLimit(directory, limit, max(usage - inactive, 0)))
        if directory == mount:
            return limits
        directory = os.path.dirname(directory)


def _read_bytes(path: str) -> Optional[int]:
    """The number in a cgroup file; None when it is missing, unreadable or ``max`` (no limit)."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _memory_stat(path: str, key: str) -> int:
    """Value of ``key`` in a cgroup's ``memory.stat``; 0 when it is not there."""
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(' ')
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


class ProcessMemoryLimit(NamedTuple):
    """A limit ``setrlimit`` puts on this process's memory, and what the process holds now.

    Args:
        name: the shell's option that sets it: ``ulimit -v`` (``RLIMIT_AS``, the
            address space mapped) or ``ulimit -d`` (``RLIMIT_DATA``, private writable
            memory).
        limit: its soft limit in bytes.
        usage: the bytes of the kind it limits that the process maps now.
    """

    name: str
    limit: int
    usage: int

    @property
    def room(self) -> int:
        """Bytes the process may still map before an allocation fails."""
        return max(self.limit - self.usage, 0)


def process_memory_limit() -> Optional[ProcessMemoryLimit]:
    """The ``setrlimit`` limit on this process's memory that leaves it the least room; None if none.

    An allocation past ``ulimit -v`` or ``ulimit -d`` (batch schedulers set them for a
    job's memory) fails however much memory the host and the cgroup have free.
    """
    memory = psutil.Process().memory_info()
    limits = []
    for name, which, usage in (
        ('ulimit -v', resource.RLIMIT_AS, memory.vms),
        # psutil counts private writable memory on Linux only.
        ('ulimit -d', resource.RLIMIT_DATA, getattr(memory, 'data', None)),
    ):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY and usage is not None:
            limits.append(ProcessMemoryLimit(name, soft, usage))
    return min(limits, key=lambda limit: limit.room, default=None)


def available_cpu_memory(
    root: str = '/',
) -> Tuple[int, Optional[Union[CgroupMemoryLimit, ProcessMemoryLimit]]]:
    """``(bytes, bound)``: RAM this process can still allocate, and the limit bounding it.

    The bytes are the host's available RAM (``psutil``), or the room a
    cgroup memory limit or the process's own limit (``process_memory_limit``)
    leaves when that is less; ``bound`` is the limit that leaves the least,
    None when the host's RAM is what bounds them.

    Args:
        root: as for ``cgroup_memory_limit``.
    """
    available, bound = int(psutil.virtual_memory().available), None
    for limit in (cgroup_memory_limit(root), process_memory_limit()):
        if limit is not None and limit.room < available:
            available, bound = limit.room, limit
    return available, bound


def memory_bound_text(bound: Optional[Union[CgroupMemoryLimit, ProcessMemoryLimit]]) -> str:
    """What bounds the CPU memory ``available_cpu_memory`` counts, as a sentence of an error
    message (starting with a space); empty when the host's free RAM does."""
    if isinstance(bound, CgroupMemoryLimit):
        return (
            f' The CPU figure is what the memory limit of cgroup {bound.path} '
            f'({bound.limit} bytes, {bound.usage} in use) leaves, less than the host has free.'
        )
    if bound is not None:
        return (
            f" The CPU figure is what this process's {bound.name} limit ({bound.limit} "
            f'bytes, {bound.usage} mapped) leaves, less than the host has free.'
        )
    return ''


def free_memory_bytes(device: torch.device, root: str = '/') -> int:
    """Bytes that can still be allocated on ``device``: free GPU memory, or the CPU's RAM as
    ``available_cpu_memory`` counts it (bounded by a cgroup's or the process's memory limit).

    Args:
        device: a CUDA device or the CPU.
        root: as for ``cgroup_memory_limit``.
    """
    device = torch.device(device)
    if device.type == 'cuda':
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == 'cpu':
        return available_cpu_memory(root)[0]
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
