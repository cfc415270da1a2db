r"""Replay memory per stored step: alf_lite vs Stable-Baselines3, against the raw minimum.

    python benchmarks/memory.py --env Humanoid-v5 --buffer 100000

The raw minimum of one step is one float32 observation, one float32 action, a
float32 reward, a float32 discount and a one-byte step type. alf_lite stores
exactly that (the next observation is the next row). SB3's ReplayBuffer keeps
the observation space's dtype (float64 for MuJoCo) and, by default, a second
copy of every observation as ``next_observations``; ``optimize_memory_usage=True``
drops that copy. Buffers are allocated for real and their arrays' bytes summed.
"""

import argparse
import os
import sys

import gymnasium
import numpy as np

if __package__ in (None, ''):  # run as a script: import this checkout's benchmarks
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from alf_lite.bin.cli import exit_with  # noqa: E402
from benchmarks import at_least, unusable_env  # noqa: E402


def alf_lite_buffer_bytes(buffer) -> int:
    """Bytes of the storage tensors of an alf_lite replay buffer."""
    return int(sum(t.numel() * t.element_size() for t in buffer.storage.values()))


def alf_lite_bytes(obs_dim: int, action_dim: int, length: int) -> int:
    from alf_lite.replay_buffer import ReplayBuffer

    return alf_lite_buffer_bytes(
        ReplayBuffer(num_envs=1, length=length, observation_dim=obs_dim, action_dim=action_dim)
    )


def sb3_buffer_bytes(buffer) -> int:
    """Bytes of the arrays of an SB3 replay buffer."""
    return int(sum(v.nbytes for v in vars(buffer).values() if isinstance(v, np.ndarray)))


def sb3_bytes(env, length: int, optimize_memory_usage: bool) -> int:
    from stable_baselines3.common.buffers import ReplayBuffer

    buffer = ReplayBuffer(
        length,
        env.observation_space,
        env.action_space,
        device='cpu',
        optimize_memory_usage=optimize_memory_usage,
        handle_timeout_termination=not optimize_memory_usage,
    )
    return sb3_buffer_bytes(buffer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--env', default='Humanoid-v5')
    parser.add_argument('--buffer', type=at_least(1), default=100_000, help='stored steps')
    args = parser.parse_args()

    # An env alf_lite cannot train (an unknown id, discrete actions) has no alf_lite buffer.
    problem = unusable_env(args.env)
    if problem:
        parser.error(f'--env: {problem}')
    env = gymnasium.make(args.env)
    obs_dim = int(np.prod(env.observation_space.shape))
    action_dim = int(np.prod(env.action_space.shape))
    raw = obs_dim * 4 + action_dim * 4 + 4 + 4 + 1
    rows = [('raw minimum', raw * args.buffer)]
    buffers = [
        ('alf_lite', lambda: alf_lite_bytes(obs_dim, action_dim, args.buffer)),
        ('SB3 ReplayBuffer (defaults)', lambda: sb3_bytes(env, args.buffer, False)),
        ('SB3 optimize_memory_usage=True', lambda: sb3_bytes(env, args.buffer, True)),
    ]
    from alf_lite.replay_buffer import ReplayBufferTooLargeError

    for name, nbytes in buffers:
        try:
            rows.append((name, nbytes()))
        except ImportError:
            print('stable-baselines3 is not installed (pip install .[bench]): SB3 rows skipped')
            break
        except ReplayBufferTooLargeError as e:
            # alf_lite's buffer refuses one that cannot fit before allocating it.
            parser.error(
                f'--buffer: {args.buffer} steps do not fit in memory ({name}): {e.problem} '
                f'At most {e.max_length} steps fit: lower --buffer.'
            )
        except MemoryError as e:
            # The buffers are allocated for real: numpy (SB3's) fails the allocation.
            why = str(e) or type(e).__name__
            parser.error(f'--buffer: {args.buffer} steps do not fit in memory ({name}): {why}')

    print(
        f'{args.env}: observation {obs_dim} x {env.observation_space.dtype}, '
        f'action {action_dim}; {args.buffer} steps'
    )
    print(f'{"buffer":34s} {"bytes/step":>10s} {"total MiB":>10s} {"x raw":>7s}')
    for name, nbytes in rows:
        per_step = nbytes / args.buffer
        print(f'{name:34s} {per_step:10.1f} {nbytes / 2**20:10.1f} {per_step / raw:7.2f}')


if __name__ == '__main__':
    exit_with(main)
