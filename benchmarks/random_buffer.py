"""A replay buffer of random rows, for timing updates without collecting experience."""

if __name__ == '__main__':  # run by mistake: it has no command line
    from alf_lite.bin.cli import fail

    fail(
        'benchmarks/random_buffer.py is a module of benchmarks/throughput.py and '
        'benchmarks/sac_study_cost.py, not a script: run python benchmarks/throughput.py --help'
    )

from typing import Optional

import torch


def random_replay_buffer(
    num_envs: int,
    rows: int,
    observation_dim: int,
    action_dim: int,
    device,
    episode_length: Optional[int] = None,
):
    """An ``alf_lite.replay_buffer.ReplayBuffer`` full of random rows on ``device``.

    Observations and rewards are standard normal, actions uniform in [-1, 1].

    Args:
        num_envs: the buffer's envs.
        rows: rows per env (all of them filled).
        observation_dim: observation size.
        action_dim: action size.
        device: the training device, where the buffer samples.
        episode_length: None: every row is MID with discount 1 (no episode
            ends). Else every this many rows per env an episode ends in a
            termination (LAST with discount 0), the next row being FIRST, so a
            LAST -> FIRST mask has pairs to act on.
    """
    from alf_lite.data import StepType
    from alf_lite.replay_buffer import ReplayBuffer

    step_type = torch.full((num_envs, rows), int(StepType.MID), dtype=torch.uint8)
    discount = torch.ones(num_envs, rows)
    if episode_length is not None:
        step_type[:, ::episode_length] = int(StepType.FIRST)
        step_type[:, episode_length - 1 :: episode_length] = int(StepType.LAST)
        discount[:, episode_length - 1 :: episode_length] = 0.0
    buffer = ReplayBuffer(num_envs, rows, observation_dim, action_dim, training_device=device)
    buffer.load_state_dict(
        {
            'step_type': step_type,
            'observation': torch.randn(num_envs, rows, observation_dim),
            'action': torch.rand(num_envs, rows, action_dim) * 2 - 1,
            'reward': torch.randn(num_envs, rows),
            'discount': discount,
            # Steps added, each a row of every env.
            'total_added': rows,
        }
    )
    return buffer
