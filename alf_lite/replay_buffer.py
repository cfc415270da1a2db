"""Per-env ring buffer of steps: [B, T] window sampling, exact memory figure.

Storage is one preallocated tensor per ``Experience`` field, shaped
``[num_envs, length, ...]``. Every ``add_batch`` writes one row for every env at
the same position, so a single shared counter (``total_added``) describes the
write head of all envs. Windows are ``batch_length`` consecutive rows of one
env, in chronological order, and never span the write head (where the newest
row sits next to the oldest surviving one).
"""
import math
from typing import Dict, Tuple

import gin
import psutil
import torch
from absl import logging

from alf_lite.data import Experience

_GIB = float(1 << 30)


class ReplayBufferTooLargeError(MemoryError):
    """Raised before allocating when the buffer would not fit in available RAM.

    A ``MemoryError`` because that is what the allocation itself would have
    raised (or worse, the OOM killer would have done) had it been attempted.
    """


@gin.configurable
class ReplayBuffer:
    """Preallocated per-env ring buffer of ``Experience`` rows.

    Capacity is ``length * num_envs`` rows. The storage is allocated once, up
    front, after checking its exact size against available memory.

    Args:
        num_envs: number of parallel environments; every ``add_batch`` holds
            one row per env.
        length: rows kept per env (``replay_buffer_length``); older rows are
            overwritten.
        observation_dim: size of the flat float32 observation.
        action_dim: size of the flat float32 action.
        max_memory_fraction: refuse to allocate more than this fraction of the
            memory currently available (``psutil.virtual_memory().available``).
    """

    def __init__(self, num_envs: int, length: int, observation_dim: int,
                 action_dim: int, max_memory_fraction: float = 0.8):
        for name, value in (("num_envs", num_envs), ("length", length),
                            ("observation_dim", observation_dim),
                            ("action_dim", action_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"ReplayBuffer: {name} must be a positive int, got {value!r}")
        if not 0.0 < max_memory_fraction <= 1.0:
            raise ValueError("ReplayBuffer: max_memory_fraction must be in "
                             f"(0, 1], got {max_memory_fraction!r}")
        self._num_envs = num_envs
        self._length = length
        # Trailing shape and dtype of each field, in Experience field order.
        self._specs: Dict[str, Tuple[Tuple[int, ...], torch.dtype]] = {
            "step_type": ((), torch.uint8),
            "observation": ((observation_dim, ), torch.float32),
            "action": ((action_dim, ), torch.float32),
            "reward": ((), torch.float32),
            "discount": ((), torch.float32),
        }
        self._raw_bytes_per_step = sum(
            math.prod(shape) * dtype.itemsize
            for shape, dtype in self._specs.values())
        self._nbytes = num_envs * length * self._raw_bytes_per_step

        # Check before allocating: a buffer that does not fit should fail now,
        # with a useful message, not hours into training or via the OOM killer.
        available = psutil.virtual_memory().available
        allowed = max_memory_fraction * available
        if self._nbytes > allowed:
            raise ReplayBufferTooLargeError(
                f"ReplayBuffer of {num_envs} envs x {length} steps needs "
                f"{self._nbytes} bytes ({self._nbytes / _GIB:.2f} GiB, "
                f"{self._raw_bytes_per_step} bytes per step), but only "
                f"{available} bytes ({available / _GIB:.2f} GiB) are available "
                f"and at most max_memory_fraction={max_memory_fraction} of that "
                f"({int(allowed)} bytes) may be used. Lower "
                f"replay_buffer_length (at most "
                f"{int(allowed // (num_envs * self._raw_bytes_per_step))} fits "
                f"with {num_envs} envs) or use fewer parallel environments.")

        # zeros (not empty) touches every page now, so the memory is really
        # committed up front and RSS reflects the logged figure from the start.
        self._storage: Dict[str, torch.Tensor] = {
            name: torch.zeros((num_envs, length) + shape, dtype=dtype)
            for name, (shape, dtype) in self._specs.items()
        }
        # Rows added per env ever; the write head of every env is
        # total_added % length.
        self._total_added = 0
        logging.info(
            "ReplayBuffer: allocated %d bytes (%.3f GiB) for %d envs x %d "
            "steps, %d bytes per step", self._nbytes, self._nbytes / _GIB, num_envs,
            length, self._raw_bytes_per_step)

    @property
    def num_envs(self) -> int:
        """Number of environments (rows written per ``add_batch``)."""
        return self._num_envs

    @property
    def length(self) -> int:
        """Rows kept per env."""
        return self._length

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

    def add_batch(self, exp: Experience) -> None:
        """Write one row for every env at the shared write head.

        Args:
            exp: ``Experience`` whose fields have leading dim ``num_envs``
                (``observation`` ``[num_envs, obs_dim]``, ``action``
                ``[num_envs, action_dim]``, the rest ``[num_envs]``). Values
                are cast to the storage dtypes.
        """
        pos = self._total_added % self._length
        for name, value in zip(Experience._fields, exp):
            target = self._storage[name]
            # Shape checks read only metadata, so they cost no host sync.
            if tuple(value.shape) != (self._num_envs, ) + target.shape[2:]:
                raise ValueError(
                    f"ReplayBuffer.add_batch: field '{name}' has shape "
                    f"{tuple(value.shape)}, expected "
                    f"{(self._num_envs, ) + tuple(target.shape[2:])}")
            target[:, pos] = value
        self._total_added += 1

    def sample(self, batch_size: int, batch_length: int) -> Experience:
        """Sample windows of consecutive rows, each from one env.

        Each window is drawn uniformly over all valid (env, start) pairs: all
        rows written, in chronological order, never spanning the write head.
        Uses torch's global RNG, so ``torch.manual_seed`` makes it repeatable.

        Args:
            batch_size: number of windows ``B``.
            batch_length: rows per window ``T``.

        Returns:
            ``Experience`` with fields shaped ``[B, T, ...]``.
        """
        if batch_size < 1 or batch_length < 1:
            raise ValueError(
                "ReplayBuffer.sample: batch_size and batch_length must be "
                f"positive, got {batch_size} and {batch_length}")
        num_steps = self.num_steps
        if num_steps < batch_length:
            raise ValueError(
                f"ReplayBuffer.sample: only {num_steps} rows stored per env, "
                f"fewer than batch_length={batch_length}; collect more steps "
                "before sampling (or lower the mini batch length)")
        starts_per_env = num_steps - batch_length + 1
        # One draw over the flat (env, start) space is uniform over all pairs.
        flat = torch.randint(self._num_envs * starts_per_env, (batch_size, ))
        env = flat // starts_per_env
        # Chronological offset of the window start from the oldest stored row.
        offset = flat % starts_per_env
        oldest = (self._total_added - num_steps) % self._length
        steps = torch.arange(batch_length)
        pos = (oldest + offset.unsqueeze(1) + steps) % self._length
        # Index the [num_envs * length] flattened view: a single-dim gather.
        rows = env.unsqueeze(1) * self._length + pos
        return Experience(**{
            name: self._storage[name].flatten(0, 1)[rows]
            for name in Experience._fields
        })

    def state_dict(self) -> Dict[str, object]:
        """Storage tensors and counters, suitable for ``torch.save``.

        The tensors are the live storage (not copies), to avoid doubling
        memory while checkpointing.
        """
        state: Dict[str, object] = dict(self._storage)
        state["total_added"] = self._total_added
        return state

    def load_state_dict(self, state: Dict[str, object]) -> None:
        """Restore storage and counters from ``state_dict()`` output.

        Copies into the existing storage, so no second allocation happens.

        Args:
            state: a dict produced by ``state_dict()`` of a buffer with the same
                ``num_envs``, ``length``, ``observation_dim`` and ``action_dim``.
        """
        expected = set(self._storage) | {"total_added"}
        if set(state) != expected:
            raise ValueError(
                "ReplayBuffer.load_state_dict: keys "
                f"{sorted(state)} do not match expected {sorted(expected)}")
        for name, target in self._storage.items():
            value = state[name]
            if (not isinstance(value, torch.Tensor)
                    or value.shape != target.shape
                    or value.dtype != target.dtype):
                got = ((tuple(value.shape), value.dtype) if isinstance(
                    value, torch.Tensor) else type(value).__name__)
                raise ValueError(
                    f"ReplayBuffer.load_state_dict: '{name}' is {got}, "
                    f"expected {(tuple(target.shape), target.dtype)} "
                    f"({self._num_envs} envs x {self._length} steps); the "
                    "checkpoint was saved with a different num_envs, "
                    "replay_buffer_length or observation/action size")
        total_added = state["total_added"]
        if not isinstance(total_added, int) or total_added < 0:
            raise ValueError("ReplayBuffer.load_state_dict: total_added must "
                             f"be a non-negative int, got {total_added!r}")
        for name, target in self._storage.items():
            target.copy_(state[name])
        self._total_added = total_added

