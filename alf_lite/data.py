"""The tensors that flow between environments, algorithms and the replay buffer.

Conventions (ALF's):
- ``reward[t]`` and ``discount[t]`` are received on *arriving* at step ``t``.
  A FIRST step has reward 0 and discount 1.
- A LAST step reached by termination has discount 0; a LAST step reached by a
  time limit (truncation) has discount 1, so its value still bootstraps.
- The TD target for a transition from row ``t`` to row ``t + 1`` is
  ``reward[t + 1] + gamma * discount[t + 1] * V(observation[t + 1])``. A row
  ``t`` that is LAST is followed by the next episode's FIRST: that pair is not
  a transition. A FIRST after any other row is where a resumed run restarted
  its envs mid-episode: not a transition either.
"""

from typing import NamedTuple

import torch


class StepType:
    """Position of a step inside its episode (stored as ``torch.uint8``)."""

    FIRST = 0
    MID = 1
    LAST = 2


class TimeStep(NamedTuple):
    """What a batched environment returns: every field has batch dim N.

    Args:
        step_type: ``[N]`` uint8, one of ``StepType``.
        observation: ``[N, obs_dim]`` float32.
        reward: ``[N]`` float32, received on arriving at this step.
        discount: ``[N]`` float32, 0 after termination, otherwise 1.
        env_id: ``[N]`` int64, index of the environment in the batch.
    """

    step_type: torch.Tensor
    observation: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    env_id: torch.Tensor


class Experience(NamedTuple):
    """One stored row per env per step; the next observation is row ``t + 1``.

    Args:
        step_type: uint8 step type of this row.
        observation: float32 observation at this row.
        action: float32 action taken at this row, normalised to [-1, 1].
        reward: float32 reward received on arriving at this row.
        discount: float32 discount received on arriving at this row.
    """

    step_type: torch.Tensor
    observation: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
