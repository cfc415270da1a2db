"""alf_lite.transfer: a TimeStep goes to the device in one copy, every field exact.

The copy to a GPU is tested in test_cuda.py.
"""

import torch

from alf_lite.data import StepType, TimeStep
from alf_lite.transfer import (
    pack_time_step,
    packed_width,
    time_step_to_device,
    unpack_time_step,
)


def time_step(n=3, obs_dim=4):
    torch.manual_seed(0)
    return TimeStep(
        step_type=torch.tensor([StepType.FIRST, StepType.MID, StepType.LAST], dtype=torch.uint8)[
            :n
        ],
        observation=torch.randn(n, obs_dim),
        reward=torch.randn(n),
        discount=torch.tensor([1.0, 1.0, 0.0])[:n],
        # Env ids unlike the step types' values: a swap of the two columns shows.
        env_id=torch.tensor([5, 3, 9])[:n],
    )


def assert_same_time_step(a, b):
    for name, x, y in zip(TimeStep._fields, a, b):
        assert x.dtype == y.dtype and torch.equal(x.cpu(), y.cpu()), name


def test_pack_then_unpack_gives_every_field_back_exactly():
    ts = time_step()
    packed = pack_time_step(ts)
    assert packed.shape == (3, 8) and packed.dtype == torch.float32
    assert_same_time_step(unpack_time_step(packed), ts)


def test_the_cpu_gets_the_time_step_itself():
    ts = time_step()
    assert time_step_to_device(ts, torch.device('cpu')) is ts


def test_packed_width_is_the_width_pack_time_step_writes():
    # Collection packs into a pinned block of packed_width columns.
    for obs_dim in (1, 4, 17):
        ts = time_step(obs_dim=obs_dim)
        assert packed_width(obs_dim) == 4 + obs_dim == pack_time_step(ts).shape[1]
        out = torch.full((3, packed_width(obs_dim)), float('nan'))
        pack_time_step(ts, out=out)
        assert_same_time_step(unpack_time_step(out), ts)
