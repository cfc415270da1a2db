r"""What switching an algorithm between train and eval mode costs, on this machine.

    python benchmarks/mode_switch.py
    python benchmarks/mode_switch.py --algo td3 --rounds 5 --switches 5000

The trainer switches twice per env step once training has begun: to eval mode
to act, to train mode to update. Each algorithm is built from its example
config (``examples/common/<algo>.gin``, DDPG with its batch norm) for
HalfCheetah-v5's sizes, and timed switching with its own ``train`` and with
``nn.Module.train`` over the same module tree, the two interleaved round by
round. Prints the median microseconds per switch and the ratio.
"""

import argparse
import os
import statistics
import sys
import time

import gin
import torch

if __package__ in (None, ''):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from alf_lite.bin.cli import exit_with  # noqa: E402
from benchmarks import REPO_ROOT, at_least  # noqa: E402

ALGOS = ('sac', 'td3', 'ddpg')
# HalfCheetah-v5's observation and action sizes.
OBSERVATION_DIM, ACTION_DIM = 17, 6


def build_algorithm(algo: str) -> torch.nn.Module:
    """The algorithm of ``examples/common/<algo>.gin``, built for HalfCheetah-v5's sizes."""
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.config import parse_config
    from alf_lite.trainer import TrainerConfig

    gin.clear_config()
    parse_config([os.path.join(REPO_ROOT, 'examples', 'common', f'{algo}.gin')], [])
    return TrainerConfig().algorithm_ctor(observation_dim=OBSERVATION_DIM, action_dim=ACTION_DIM)


def us_per_switch(switch, switches: int) -> float:
    """Microseconds per call of ``switch(mode)``, alternating train and eval."""
    start = time.perf_counter()
    for _ in range(switches // 2):
        switch(True)
        switch(False)
    return (time.perf_counter() - start) / (2 * (switches // 2)) * 1e6


def measure(algo: str, rounds: int, switches: int) -> dict:
    """Per-round microseconds per switch of the algorithm's ``train`` and of ``nn.Module.train``."""
    algorithm = build_algorithm(algo)
    ways = {
        'own': algorithm.train,
        'nn.Module': lambda mode: torch.nn.Module.train(algorithm, mode),
    }
    times = {way: [] for way in ways}
    for switch in ways.values():  # warm-up
        us_per_switch(switch, 100)
    for _ in range(rounds):
        for way, switch in ways.items():
            times[way].append(us_per_switch(switch, switches))
    algorithm.train(True)
    return {'modules': sum(1 for _ in algorithm.modules()), **times}


def median_and_range(values) -> str:
    """``median (min-max)`` to one decimal."""
    return f'{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})'


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--algo', choices=ALGOS, action='append', help='default: all three')
    parser.add_argument('--rounds', type=at_least(1), default=3)
    parser.add_argument(
        '--switches', type=at_least(2), default=4000, help='switches per round (pairs of them)'
    )
    args = parser.parse_args(argv)
    print(f'us per switch, median (min-max) of {args.rounds} interleaved rounds')
    print(
        f'{"algorithm":<10} {"modules":>7} {"own train":>20} {"nn.Module.train":>20} {"ratio":>6}'
    )
    for algo in args.algo or ALGOS:
        result = measure(algo, args.rounds, args.switches)
        own, reference = result['own'], result['nn.Module']

        ratio = statistics.median(reference) / statistics.median(own)
        own_cell, reference_cell = median_and_range(own), median_and_range(reference)
        print(
            f'{algo:<10} {result["modules"]:>7} {own_cell:>20} {reference_cell:>20} {ratio:>6.1f}'
        )


if __name__ == '__main__':
    exit_with(main)
