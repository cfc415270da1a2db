"""One host-to-device copy per env step: a batched ``TimeStep`` packed into one pinned buffer.

Envs step on the CPU; with a GPU learner each env step sends the new time
step up and brings the action down. Copied field by field that is five
small copies up, each paying the fixed cost of a transfer; packed, it is one.
The action comes down with ``action.cpu()``: one copy, and the one place
where the host waits for the device in collection.
"""

import torch

from alf_lite.data import TimeStep

# Columns of the packed buffer before the observation. Step types and env ids
# are small integers: exact in float32 (up to 2^24).
_STEP_TYPE, _REWARD, _DISCOUNT, _ENV_ID, _OBSERVATION = range(5)


def packed_width(observation_dim: int) -> int:
    """Columns of a packed time step with observations of ``observation_dim``."""
    return _OBSERVATION + observation_dim


def pack_time_step(time_step: TimeStep, out: torch.Tensor = None) -> torch.Tensor:
    """``[N, 4 + obs_dim]`` float32: step type, reward, discount, env id, then the observation.

    Args:
        time_step: fields with batch dim N, on the CPU.
        out: where to write (e.g. pinned memory); None allocates.
    """
    columns = [
        time_step.step_type.float().unsqueeze(1),
        time_step.reward.float().unsqueeze(1),
        time_step.discount.float().unsqueeze(1),
        time_step.env_id.float().unsqueeze(1),
        time_step.observation.float(),
    ]
    return torch.cat(columns, dim=1, out=out)


def unpack_time_step(packed: torch.Tensor) -> TimeStep:
    """The ``TimeStep`` that ``pack_time_step`` packed, in its dtypes, on ``packed``'s device."""
    return TimeStep(
        step_type=packed[:, _STEP_TYPE].to(torch.uint8),
        observation=packed[:, _OBSERVATION:],
        reward=packed[:, _REWARD],
        discount=packed[:, _DISCOUNT],
        env_id=packed[:, _ENV_ID].to(torch.int64),
    )


def time_step_to_device(time_step: TimeStep, device: torch.device) -> TimeStep:
    """``time_step`` on ``device`` in one non-blocking copy; unchanged when that is the CPU."""
    if device.type == 'cpu':
        return time_step
    n, obs_dim = time_step.observation.shape
    pinned = torch.empty(n, packed_width(obs_dim), pin_memory=True)
    # Pinned blocks come from torch's caching host allocator, which reuses one
    # only after the copies that read it have finished.
    pack_time_step(time_step, out=pinned)
    return unpack_time_step(pinned.to(device, non_blocking=True))
