"""Per-env ring buffer of steps: [B, T] window sampling, exact memory figure.

Storage is one preallocated tensor per ``Experience`` field, shaped
``[num_envs, length, ...]``. Every ``add_batch`` writes one row for every env at
the same position, so a single shared counter (``total_added``) describes the
write head of all envs. Windows are ``batch_length`` consecutive rows of one
env, in chronological order, and never span the write head (where the newest
row sits next to the oldest surviving one).

The storage lives on the training device when it fits there, else in CPU
memory. A GPU learner's batches are gathered from there into small pinned
blocks and go up with non-blocking copies; the storage itself is not pinned
(torch's pinned allocator would round each field up to a power of two, and
nothing copies from it to the GPU directly). Windows are drawn where the
data lives: a CPU buffer draws its indices from torch's global CPU
generator, a GPU buffer from the GPU's generator and from counters kept on
the GPU, so sampling it reads nothing back to the host and can be captured
in a CUDA graph.
"""

import inspect
import math
from typing import Dict, Optional, Tuple, Union

import gin
import torch
from absl import logging

from alf_lite.config import GIN_CALL_TRACE
from alf_lite.data import Experience, StepType
from alf_lite.device import (
    available_cpu_memory,
    free_memory_bytes,
    memory_bound_text,
    resolve_device,
)

_GIB = float(1 << 30)
# Indices on the device are ``randint(_INDEX_RANGE) % n``: n varies inside a
# CUDA graph, so it cannot be randint's bound; the modulo bias is at most n / 2^62
# (below 2^-40 for n, the window starts of all envs, under 2^22).
_INDEX_RANGE = 1 << 62
# The largest row count the int64 device counter holds.
_MAX_TOTAL_ADDED = torch.iinfo(torch.int64).max


def _gib(nbytes: int) -> str:
    """``nbytes`` in GiB with two decimals; in whole GiB for a size no float holds."""
    try:
        return f'{nbytes / _GIB:.2f}'
    except OverflowError:
        return str(nbytes >> 30)


def _field_specs(
    observation_dim: int, action_dim: int
) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
    """Trailing shape and dtype of each stored field, in ``Experience`` field order."""
    return {
        'step_type': ((), torch.uint8),
        'observation': ((observation_dim,), torch.float32),
        'action': ((action_dim,), torch.float32),
        'reward': ((), torch.float32),
        'discount': ((), torch.float32),
    }


def bytes_per_step(observation_dim: int, action_dim: int) -> int:
    """The bytes one stored step of one env takes (``ReplayBuffer.raw_bytes_per_step``)."""
    return sum(
        math.prod(shape) * dtype.itemsize
        for shape, dtype in _field_specs(observation_dim, action_dim).values()
    )


class ReplayBufferTooLargeError(MemoryError):
    """Raised before allocating when the buffer would not fit in available memory.

    A ``MemoryError`` because that is what the allocation itself would have
    raised (or worse, the OOM killer would have done) had it been attempted.

    Attributes:
        problem: the message less its remedy (what does not fit where), for a tool that
            words its own remedy.
        max_length: the most steps per env that would fit.
    """

    def __init__(self, message: str, problem: str = '', max_length: int = 0):
        super().__init__(message)
        self.problem = problem or message
        self.max_length = max_length


class ReplayBufferMismatchError(ValueError):
    """A saved replay buffer is of another size (envs or steps per env) than the configured one:
    the checkpoint belongs to another config, not a damaged file."""


def storage_device(
    nbytes: int,
    training_device: torch.device,
    device: Optional[str] = None,
    max_memory_fraction: float = 0.8,
    reserved_bytes: int = 0,
    log: bool = True,
) -> Tuple[Optional[torch.device], Dict[torch.device, int]]:
    """Where a buffer of ``nbytes`` goes, and the free memory of each device considered.

    The candidates are ``device`` alone when given, else the training device
    and then the CPU; the first one where ``nbytes`` is at most
    ``max_memory_fraction`` of its free memory wins.

    Args:
        nbytes: size of the storage.
        training_device: the learner's device.
        device: 'cpu', 'cuda' or 'cuda:N' to allow only that device; None for
            the rule above.
        max_memory_fraction: share of a device's free memory the buffer may take.
        reserved_bytes: memory of the training device that is not free for the buffer
            although free now (the optimizer state the first update allocates).
        log: log where the buffer goes when it is not the first candidate.

    Returns:
        ``(device, {candidate: free bytes})``; device is None when none fits.
    """
    training_device = torch.device(training_device)
    if device is not None:
        candidates = [resolve_device(str(device))]
    elif training_device.type == 'cpu':
        candidates = [training_device]
    else:
        candidates = [training_device, torch.device('cpu')]
    available = {}
    for candidate in candidates:
        reserved = reserved_bytes if candidate == training_device else 0
        available[candidate] = max(free_memory_bytes(candidate) - reserved, 0)
        if nbytes <= max_memory_fraction * available[candidate]:
            if log and candidate != candidates[0]:
                logging.info(
                    'ReplayBuffer: %d bytes do not fit in %s (%d bytes free); it goes to %s.',
                    nbytes,
                    candidates[0],
                    available[candidates[0]],
                    candidate,
                )
            return candidate, available
    return None, available


@gin.configurable(
    denylist=[
        'num_envs',
        'length',
        'observation_dim',
        'action_dim',
        'training_device',
        'reserved_bytes',
    ]
)
class ReplayBuffer:
    """Preallocated per-env ring buffer of ``Experience`` rows.

    Capacity is ``length * num_envs`` rows. The storage is allocated once, up
    front, after checking its exact size against the free memory of the
    device it goes to.

    Args:
        num_envs: number of parallel environments; every ``add_batch`` holds
            one row per env.
        length: rows kept per env (``replay_buffer_length``); older rows are
            overwritten.
        observation_dim: size of the flat float32 observation.
        action_dim: size of the flat float32 action.
        max_memory_fraction: refuse to allocate more than this fraction of the
            memory currently available on a device (RAM: ``psutil``'s
            ``available``, or the room left under the process's cgroup
            memory limit or its ``ulimit -v``/``-d`` when less, see
            ``available_cpu_memory``; GPU: free
            memory, less ``reserved_bytes`` on the training device); the rest
            is the margin left for the update's own tensors and other
            processes.
        device: where the storage lives: 'cpu', 'cuda', 'cuda:N' or 'auto' (as
            ``TrainerConfig.device``: the current CUDA device when there is one,
            else the CPU) puts it there alone, refused when it does not fit. None: the
            training device when the buffer fits there, else the CPU.
        training_device: where ``sample`` delivers batches (the trainer's
            device).
        reserved_bytes: free memory of the training device that the buffer may not
            count on: the gradients and optimizer state of the networks, which
            their first update allocates (``model_memory.ModelBytes``).
    """

    def __init__(
        self,
        num_envs: int,
        length: int,
        observation_dim: int,
        action_dim: int,
        max_memory_fraction: float = 0.8,
        device: Optional[str] = None,
        training_device: Union[str, torch.device] = 'cpu',
        reserved_bytes: int = 0,
    ):
        self._plan(
            num_envs,
            length,
            observation_dim,
            action_dim,
            max_memory_fraction,
            device,
            training_device,
            reserved_bytes,
        )
        # zeros (not empty) touches every page now, so the memory is really
        # committed up front and RSS reflects the logged figure from the start.
        self._storage: Dict[str, torch.Tensor] = {
            name: torch.zeros((num_envs, length) + shape, dtype=dtype, device=self._device)
            for name, (shape, dtype) in self._specs.items()
        }
        # Rows added per env ever; the write head of every env is
        # total_added % length. The tensor copy is what device-side sampling
        # reads.
        self._total_added = 0
        self._total_added_tensor = torch.zeros((), dtype=torch.int64, device=self._device)
        logging.info(
            'ReplayBuffer: allocated %d bytes (%.3f GiB) on %s for %d envs x %d '
            'steps, %d bytes per step',
            self._nbytes,
            self._nbytes / _GIB,
            self._device,
            num_envs,
            length,
            self._raw_bytes_per_step,
        )

    def _plan(
        self,
        num_envs: int,
        length: int,
        observation_dim: int,
        action_dim: int,
        max_memory_fraction: float,
        device: Optional[str],
        training_device: Union[str, torch.device],
        reserved_bytes: int,
        log: bool = True,
        networks_built: bool = True,
    ) -> None:
        """Check the arguments, size the fields and choose the device, allocating nothing.

        ``networks_built`` False: ``reserved_bytes`` cannot count the networks' gradients
        and optimizer state yet, and a refusal says that fewer steps will fit than it finds.

        Raises:
            ValueError: for an argument out of its range.
            ReplayBufferTooLargeError: when the buffer fits on no allowed device.
        """
        for name, value in (
            ('num_envs', num_envs),
            ('length', length),
            ('observation_dim', observation_dim),
            ('action_dim', action_dim),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f'ReplayBuffer: {name} must be a positive int, got {value!r}')
        if not 0.0 < max_memory_fraction <= 1.0:
            raise ValueError(
                f'ReplayBuffer: max_memory_fraction must be in (0, 1], got {max_memory_fraction!r}'
            )
        self._num_envs = num_envs
        self._length = length
        self._specs = _field_specs(observation_dim, action_dim)
        self._raw_bytes_per_step = bytes_per_step(observation_dim, action_dim)
        self._nbytes = num_envs * length * self._raw_bytes_per_step

        # Check before allocating: a buffer that does not fit should fail now,
        # with a useful message, not hours into training or via the OOM killer.
        self._training_device = torch.device(training_device)
        self._reserved_bytes = reserved_bytes
        self._device = self._place(device, max_memory_fraction, log, networks_built)

    def _place(
        self,
        device: Optional[str],
        max_memory_fraction: float,
        log: bool,
        networks_built: bool = True,
    ) -> torch.device:
        """Where the storage goes; a clear error when it fits nowhere (``_plan``'s
        ``networks_built``)."""
        chosen, available = storage_device(
            self._nbytes,
            self._training_device,
            device,
            max_memory_fraction,
            self._reserved_bytes,
            log,
        )
        if chosen is not None:
            return chosen
        where = ' and '.join(
            f'{free} bytes ({free / _GIB:.2f} GiB) on {d}' for d, free in available.items()
        )
        allowed = max_memory_fraction * max(available.values())
        bound = available_cpu_memory()[1] if torch.device('cpu') in available else None
        notes = memory_bound_text(bound)
        reserved = self._reserved_bytes if self._training_device in available else 0
        if reserved:
            notes += (
                f' The {self._training_device} figure is its free memory less the {reserved} '
                'bytes of gradients and optimizer state the networks take at their first update.'
            )
        problem = (
            f'ReplayBuffer of {self._num_envs} envs x {self._length} steps needs '
            f'{self._nbytes} bytes ({_gib(self._nbytes)} GiB, '
            f'{self._raw_bytes_per_step} bytes per step), but only {where} '
            f'are available and at most max_memory_fraction={max_memory_fraction} of '
            f'that ({int(allowed)} bytes) may be used.'
        )
        max_length = int(allowed // (self._num_envs * self._raw_bytes_per_step))
        fewer = (
            ''
            if networks_built
            else ", fewer once the networks' gradients and optimizer state, built later, take "
            'their share'
        )
        raise ReplayBufferTooLargeError(
            f'{problem} Lower replay_buffer_length (at most {max_length} fits with '
            f'{self._num_envs} envs{fewer}) or use fewer parallel environments.{notes}',
            problem=problem + notes,
            max_length=max_length,
        )

    @property
    def num_envs(self) -> int:
        """Number of environments (rows written per ``add_batch``)."""
        return self._num_envs

    @property
    def length(self) -> int:
        """Rows kept per env."""
        return self._length

    @property
    def device(self) -> torch.device:
        """Where the storage lives."""
        return self._device

    @property
    def training_device(self) -> torch.device:
        """Where ``sample`` delivers batches."""
        return self._training_device

    @property
    def nbytes(self) -> int:
        """Exact sum of the storage tensors' bytes."""
        return self._nbytes

    @property
    def raw_bytes_per_step(self) -> int:
        """Bytes a stored step takes: its fields', ``obs_dim*4 + action_dim*4 + 4 + 4 + 1``."""
        return self._raw_bytes_per_step

    @property
    def num_steps(self) -> int:
        """Rows currently stored per env (capped at ``length``)."""
        return min(self._total_added, self._length)

    @property
    def total_added(self) -> int:
        """Rows added per env since creation (not capped)."""
        return self._total_added

    def clear(self) -> None:
        """Forget every row: the buffer is as allocated, all zeros and nothing added."""
        for tensor in self._storage.values():
            tensor.zero_()
        self._total_added = 0
        # In place: a captured CUDA graph reads this tensor.
        self._total_added_tensor.zero_()

    def add_batch(self, exp: Experience) -> None:
        """Write one row for every env at the shared write head.

        Args:
            exp: ``Experience`` whose fields have leading dim ``num_envs``
                (``observation`` ``[num_envs, obs_dim]``, ``action``
                ``[num_envs, action_dim]``, the rest ``[num_envs]``). Values
                are cast to the storage dtypes.
        """
        self._check_row(exp)
        pos = self._total_added % self._length
        for name, value in zip(Experience._fields, exp):
            self._storage[name][:, pos] = value
        self._total_added += 1
        self._total_added_tensor.fill_(self._total_added)

    def _check_row(self, exp: Experience) -> None:
        """Raise ValueError for a field of ``exp`` that ``add_batch`` cannot store, before
        any is written: a row is stored whole or not at all. Reads only metadata, so
        it costs no host sync."""
        for name, value in zip(Experience._fields, exp):
            target = self._storage[name]
            if tuple(value.shape) != (self._num_envs,) + target.shape[2:]:
                raise ValueError(
                    f"ReplayBuffer.add_batch: field '{name}' has shape "
                    f'{tuple(value.shape)}, expected '
                    f'{(self._num_envs,) + tuple(target.shape[2:])}'
                )
        if exp.step_type.dtype != torch.uint8:
            # A cast would store -1 as 255 and 1.7 as MID: rows the loss mask
            # trains on and a resume refuses.
            raise ValueError(
                f"ReplayBuffer.add_batch: field 'step_type' is {exp.step_type.dtype}, "
                'expected torch.uint8 (StepType values)'
            )

    def add_batch_on_device(self, exp: Experience) -> None:
        """``add_batch``'s writes, at the write head the device counter gives.

        Reads no host counter, so a CUDA graph can capture it: every replay
        writes the next row. It advances the device counter only; call
        ``count_row_added`` once after each call or replay.

        Args:
            exp: as for ``add_batch``, on the buffer's device.
        """
        self._check_row(exp)
        head = (self._total_added_tensor % self._length).view(1)
        for name, value in zip(Experience._fields, exp):
            target = self._storage[name]
            target.index_copy_(1, head, value.unsqueeze(1).to(target.dtype))
        self._total_added_tensor.add_(1)

    def count_row_added(self) -> None:
        """Advance the host counter for a row ``add_batch_on_device`` wrote."""
        self._total_added += 1

    def sample(self, batch_size: int, batch_length: int) -> Experience:
        """Sample windows of consecutive rows, each from one env, on the training device.

        Each window is drawn uniformly over all valid (env, start) pairs: all
        rows written, in chronological order, never spanning the write head.
        A CPU buffer uses torch's global RNG (``torch.manual_seed`` makes it
        repeatable) and, for a GPU learner, copies the batch up without
        blocking; a GPU buffer samples as ``sample_on_device``.

        Args:
            batch_size: number of windows ``B``.
            batch_length: rows per window ``T``.

        Returns:
            ``Experience`` with fields shaped ``[B, T, ...]``.
        """
        self.check_sample_size(batch_size, batch_length)
        if self._device.type != 'cpu':
            batch = self.sample_on_device(batch_size, batch_length)
            if self._device == self._training_device:
                return batch
            return Experience(*(x.to(self._training_device) for x in batch))
        num_steps = self.num_steps
        starts_per_env = num_steps - batch_length + 1
        # One draw over the flat (env, start) space is uniform over all pairs.
        flat = torch.randint(self._num_envs * starts_per_env, (batch_size,))
        env = flat // starts_per_env
        # Chronological offset of the window start from the oldest stored row.
        offset = flat % starts_per_env
        oldest = (self._total_added - num_steps) % self._length
        steps = torch.arange(batch_length)
        pos = (oldest + offset.unsqueeze(1) + steps) % self._length
        # Index the [num_envs * length] flattened view: a single-dim gather.
        rows = env.unsqueeze(1) * self._length + pos
        if self._training_device.type == 'cpu':
            return Experience(
                **{name: self._storage[name].flatten(0, 1)[rows] for name in Experience._fields}
            )
        return Experience(
            **{
                name: self._gather_pinned(name, rows).to(self._training_device, non_blocking=True)
                for name in Experience._fields
            }
        )

    def check_sample_size(self, batch_size: int, batch_length: int) -> None:
        """Raise ValueError unless windows of ``batch_length`` rows can be sampled now."""
        if batch_size < 1 or batch_length < 1:
            raise ValueError(
                'ReplayBuffer.sample: batch_size and batch_length must be '
                f'positive, got {batch_size} and {batch_length}'
            )
        if self.num_steps < batch_length:
            raise ValueError(
                f'ReplayBuffer.sample: only {self.num_steps} rows stored per env, '
                f'fewer than batch_length={batch_length}; collect more steps '
                'before sampling (or lower the mini batch length)'
            )

    def _gather_pinned(self, name: str, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``[B, T]`` of one field into pinned memory, ready for a non-blocking copy.

        Pinned blocks come from torch's caching host allocator, which reuses a
        block only after the copies that read it have finished.
        """
        storage = self._storage[name]
        out = torch.empty(rows.shape + storage.shape[2:], dtype=storage.dtype, pin_memory=True)
        torch.index_select(
            storage.flatten(0, 1), 0, rows.reshape(-1), out=out.view((-1,) + storage.shape[2:])
        )
        return out

    def sample_on_device(self, batch_size: int, batch_length: int) -> Experience:
        """Sample like ``sample``, from tensors on the storage device only; batches stay there.

        The indices come from the generator of the storage device and the
        write head from a counter kept there, so nothing is read back to the
        host and a CUDA graph can capture this call: each replay samples
        anew. The caller makes sure ``num_steps >= batch_length`` (this call
        cannot check it without reading the counter back).

        Args:
            batch_size: number of windows ``B``.
            batch_length: rows per window ``T``.
        """
        device = self._device
        total = self._total_added_tensor
        num_steps = total.clamp(max=self._length)
        starts_per_env = (num_steps - (batch_length - 1)).clamp(min=1)
        flat = torch.randint(_INDEX_RANGE, (batch_size,), device=device) % (
            self._num_envs * starts_per_env
        )
        env = flat // starts_per_env
        offset = flat % starts_per_env
        oldest = (total - num_steps) % self._length
        steps = torch.arange(batch_length, device=device)
        pos = (oldest + offset.unsqueeze(1) + steps) % self._length
        rows = (env.unsqueeze(1) * self._length + pos).reshape(-1)
        return Experience(
            **{
                name: self._storage[name]
                .flatten(0, 1)
                .index_select(0, rows)
                .view((batch_size, batch_length) + self._storage[name].shape[2:])
                for name in Experience._fields
            }
        )

    @property
    def storage(self) -> Dict[str, torch.Tensor]:
        """The live storage, one ``[num_envs, length, ...]`` tensor per ``Experience`` field.

        Rows not yet written hold zeros. For inspection: writing to these
        tensors changes the buffer.
        """
        return dict(self._storage)

    def state_dict(self) -> Dict[str, object]:
        """The rows written so far and the counter, suitable for ``torch.save``.

        Each field is a list of one tensor per env, holding that env's
        ``num_steps`` written rows at their ring positions (from 0): views of
        the live storage that own only those bytes, so ``torch.save`` writes
        what was collected rather than the whole allocation, and nothing is
        copied. A full buffer's lists hold all of it. ``length`` is the
        buffer's, which the rows alone do not tell before it is full.
        """
        rows = self.num_steps
        state: Dict[str, object] = {
            name: [_row_prefix(tensor, env, rows) for env in range(self._num_envs)]
            for name, tensor in self._storage.items()
        }
        state['total_added'] = self._total_added
        state['length'] = self._length
        return state

    def load_state_dict(self, state: Dict[str, object]) -> None:
        """Restore storage and counters from ``state_dict()`` output.

        Copies into the existing storage, so no second allocation happens;
        ``state`` may be mapped from a file (as ``load_checkpoint`` returns
        it): its pages are read by the checks (reductions, which allocate
        nothing of a field's size) and by the copy, no copy of them held. Rows
        not in ``state`` are zeroed.

        Args:
            state: a dict produced by ``state_dict()`` of a buffer with the same
                ``num_envs``, ``length``, ``observation_dim`` and ``action_dim``.
                Each field is a list of ``num_envs`` tensors of the written
                rows, or (as checkpoints before this format hold it) one
                ``[num_envs, length, ...]`` tensor.
        """
        if not isinstance(state, dict):
            raise ValueError(
                f'ReplayBuffer.load_state_dict: got a {type(state).__name__}, not a state dict'
            )
        expected = set(self._storage) | {'total_added', 'length'}
        # Checkpoints before the per-env lists hold whole tensors and no length.
        if set(state) not in (expected, expected - {'length'}):
            raise ValueError(
                'ReplayBuffer.load_state_dict: keys '
                f'{sorted(state)} do not match expected {sorted(expected)}'
            )
        length = state.get('length', self._length)
        if not isinstance(length, int) or isinstance(length, bool) or length < 1:
            # No length a buffer is saved with: a damaged file, not a changed config.
            raise ValueError(
                f'ReplayBuffer.load_state_dict: length must be a positive int, got {length!r}'
            )
        if length != self._length:
            raise ReplayBufferMismatchError(
                f'ReplayBuffer.load_state_dict: the state is of a buffer of {length!r} steps per '
                f'env, this one has {self._length}; the checkpoint was saved with a different '
                'TrainerConfig.replay_buffer_length'
            )
        total_added = state['total_added']
        if not isinstance(total_added, int) or isinstance(total_added, bool) or total_added < 0:
            raise ValueError(
                'ReplayBuffer.load_state_dict: total_added must '
                f'be a non-negative int, got {total_added!r}'
            )
        if total_added > _MAX_TOTAL_ADDED:
            # The device counter is an int64: a count past it is no count the buffer reached.
            raise ValueError(
                'ReplayBuffer.load_state_dict: total_added must be at most '
                f'{_MAX_TOTAL_ADDED}, got {total_added!r}'
            )
        saved = state['step_type']
        num_envs = len(saved) if isinstance(saved, (list, tuple, torch.Tensor)) else None
        if num_envs is not None and num_envs != self._num_envs:
            raise ReplayBufferMismatchError(
                f'ReplayBuffer.load_state_dict: the state is of a buffer of {num_envs} envs, '
                f'this one has {self._num_envs}; the checkpoint was saved with a different '
                'create_environment.num_parallel_environments'
            )
        rows = min(total_added, self._length)
        # Per field, one tensor per env and the rows each holds from position 0.
        copies = {}
        for name, target in self._storage.items():
            value = state[name]
            if isinstance(value, torch.Tensor):
                self._check_field(name, value, (self._num_envs, self._length), target)
                copies[name] = (value.unbind(0), self._length)
            elif isinstance(value, (list, tuple)) and len(value) == self._num_envs:
                for env_rows in value:
                    self._check_field(name, env_rows, (rows,), target)
                copies[name] = (value, rows)
            else:
                got = f'a {type(value).__name__}' + (
                    f' of {len(value)}' if isinstance(value, (list, tuple)) else ''
                )
                raise ValueError(
                    f"ReplayBuffer.load_state_dict: '{name}' is {got}, expected a list of "
                    f'{self._num_envs} tensors, one per env'
                )
        # A reduction, not a comparison: that would allocate a mask as large
        # as the field before the copy.
        if any(
            source.numel() and int(source.max()) > StepType.LAST
            for source in copies['step_type'][0]
        ):
            raise ValueError(
                "ReplayBuffer.load_state_dict: 'step_type' holds values other than "
                f'FIRST ({StepType.FIRST}), MID ({StepType.MID}) and LAST ({StepType.LAST})'
            )
        # The trainer stores no NaN or inf (the envs' outputs and the actions are checked
        # finite): one in a loaded buffer would make the losses non-finite. Reductions again.
        for name, (sources, _) in copies.items():
            floating = self._storage[name].is_floating_point()  # the sources' dtype, checked
            for env, source in enumerate(sources if floating else ()):
                if source.numel() and not (
                    torch.isfinite(source.max()) and torch.isfinite(source.min())
                ):
                    raise ValueError(
                        f"ReplayBuffer.load_state_dict: '{name}' of env {env} holds NaN or "
                        'inf, which no collected step has'
                    )
        for name, target in self._storage.items():
            sources, n = copies[name]
            for env, source in enumerate(sources):
                target[env, :n].copy_(source)
                target[env, n:].zero_()
        self._total_added = total_added
        self._total_added_tensor.fill_(total_added)

    def _check_field(
        self, name: str, value: object, leading: Tuple[int, ...], target: torch.Tensor
    ) -> None:
        """Raise ValueError unless ``value`` is a tensor of ``target``'s dtype and row shape."""
        shape = leading + tuple(target.shape[2:])
        # A meta tensor has a shape and dtype but no values to check or copy.
        if (
            isinstance(value, torch.Tensor)
            and value.shape == shape
            and value.dtype == target.dtype
            and value.device.type != 'meta'
        ):
            return
        got = (
            (tuple(value.shape), value.dtype, value.device.type)
            if isinstance(value, torch.Tensor)
            else type(value).__name__
        )
        raise ValueError(
            f"ReplayBuffer.load_state_dict: '{name}' is {got}, expected "
            f'{(shape, target.dtype)} ({self._num_envs} envs x {self._length} steps'
            + (f', {shape[0]} written' if len(leading) == 1 else '')
            + '); the checkpoint was saved with a different num_envs, replay_buffer_length '
            'or observation/action size, or its counter does not match its rows'
        )


def configured_settings() -> Dict[str, object]:
    """``max_memory_fraction`` and ``device`` as a ``ReplayBuffer`` built now would take
    them: the config's bindings, else the defaults."""
    parameters = inspect.signature(ReplayBuffer.__init__).parameters
    settings = {name: parameters[name].default for name in ('max_memory_fraction', 'device')}
    settings.update(gin.get_bindings(ReplayBuffer))
    return settings


def check_replay_buffer_fits(
    num_envs: int,
    length: int,
    observation_dim: int,
    action_dim: int,
    training_device: Union[str, torch.device],
) -> None:
    """Refuse, as ``ReplayBuffer`` of the config's bindings would, a buffer that fits on
    no allowed device, allocating nothing.

    The trainer asks it once the first env is made, before the others: a buffer
    that cannot fit is refused before thousands of envs or env processes are made.
    The gradients and optimizer state are not counted yet (the networks are built
    later); the buffer itself checks again with them.

    Raises:
        ValueError: for a ``ReplayBuffer`` binding or argument out of its range.
        ReplayBufferTooLargeError: as ``ReplayBuffer`` would.
    """
    settings = configured_settings()
    try:
        ReplayBuffer.__new__(ReplayBuffer)._plan(
            num_envs,
            length,
            observation_dim,
            action_dim,
            settings['max_memory_fraction'],
            settings['device'],
            training_device,
            reserved_bytes=0,
            log=False,
            networks_built=False,
        )
    except Exception as e:
        # As gin marks an error raised in ReplayBuffer's constructor: called from the
        # env's construction, the error would otherwise read as create_environment's (a
        # device or max_memory_fraction that create_environment does not have).
        gin.utils.augment_exception_message_and_reraise(
            e, f"{GIN_CALL_TRACE}'ReplayBuffer' ({ReplayBuffer})"
        )


def _row_prefix(tensor: torch.Tensor, env: int, rows: int) -> torch.Tensor:
    """Rows ``[0, rows)`` of env ``env`` of a ``[num_envs, length, ...]`` storage tensor.

    A view on a slice of its memory, not of the whole: ``torch.save`` writes a
    tensor's entire storage, so a plain ``tensor[env, :rows]`` would write the
    full allocation.
    """
    row_bytes = math.prod(tensor.shape[2:]) * tensor.element_size()
    start = (env * tensor.shape[1]) * row_bytes
    memory = tensor.untyped_storage()[start : start + rows * row_bytes]
    return torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
        memory, 0, (rows,) + tuple(tensor.shape[2:])
    )
