r"""Env steps per second, in process vs one subprocess per env, and the default's pick.

    python benchmarks/env_throughput.py     # HalfCheetah-v5, ICubWalk-v0 (PYTHONPATH=. if
                                            # alf_lite is not pip-installed)
    python benchmarks/env_throughput.py --env_names Pendulum-v1,HalfCheetahBullet-v0 \
        --num_envs 1,2,4 --seconds 3

Random actions through ``create_environment`` (the trainer's path: action
mapping, TimeStep tensors, float32 observations), after a warm-up. Prints one
markdown row per (env, N): steps/s of both ways (summed over the N envs), the
ratio subprocesses / in process, and which way ``create_environment`` takes by
default. Each figure is the best of ``--repeats`` runs, the two ways taking
turns, so that a burst of other load on the machine hits both ways alike;
quote the figures with the load averages printed.
"""

import argparse
import os
import sys
import time

import gymnasium
import torch

from alf_lite.bin.cli import exit_with
from alf_lite.environments import create_environment
from alf_lite.environments.suite_gym import default_use_subprocesses

if __package__ in (None, ''):  # run as a script: import this checkout's benchmarks
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import at_least, int_list_at_least, unusable_env  # noqa: E402


def steps_per_second(
    env_name: str, num_envs: int, use_subprocesses: bool, seconds: float, warmup_steps: int = 20
) -> float:
    """Env steps per second (summed over envs) of random actions for about ``seconds``."""
    with create_environment(env_name, num_envs, seed=0, use_subprocesses=use_subprocesses) as env:
        generator = torch.Generator().manual_seed(0)
        actions = torch.rand(256, num_envs, env.action_dim, generator=generator) * 2 - 1
        env.reset()
        for i in range(warmup_steps):
            env.step(actions[i % len(actions)])
        steps = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            env.step(actions[steps % len(actions)])
            steps += 1
        return steps * num_envs / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--env_names', default='HalfCheetah-v5,ICubWalk-v0')
    parser.add_argument('--num_envs', type=int_list_at_least(1), default=[1, 2, 4, 12])
    parser.add_argument(
        '--seconds', type=at_least(0.1, float), default=3.0, help='timed run per case'
    )
    parser.add_argument(
        '--repeats', type=at_least(1), default=3, help='runs per case; the best counts'
    )
    args = parser.parse_args()
    for env_name in args.env_names.split(','):
        # Before any timing: a later env's error would end the table, as a traceback.
        problem = unusable_env(env_name)
        if problem:
            parser.error(f'--env_names: {problem}')
    # One torch thread, as the trainer runs: the benchmark measures the envs.
    torch.set_num_threads(1)

    print(
        f'cores: {os.cpu_count()}, load average at start: '
        + ', '.join(f'{x:.2f}' for x in os.getloadavg())
    )
    # The columns of README's table.
    print('| env | N | in process | subprocesses | ratio | default |')
    print('|---|---|---|---|---|---|')
    for env_name in args.env_names.split(','):
        spec = gymnasium.spec(env_name)
        for n in args.num_envs:
            ways = (False,) if n == 1 else (False, True)
            best = {way: 0.0 for way in ways}
            for _ in range(args.repeats):
                for way in ways:
                    best[way] = max(best[way], steps_per_second(env_name, n, way, args.seconds))
            sync = best[False]
            if n == 1:
                print(f'| {env_name} | 1 | {sync:.0f} | - | - | in process |', flush=True)
                continue
            subprocess = best[True]
            default = 'subprocesses' if default_use_subprocesses(spec, n) else 'in process'
            faster = 'subprocesses' if subprocess > sync else 'in process'
            mark = '' if default == faster else ' (slower!)'
            print(
                f'| {env_name} | {n} | {sync:.0f} | {subprocess:.0f} | '
                f'{subprocess / sync:.2f} | {default}{mark} |',
                flush=True,
            )
    print('load average at end: ' + ', '.join(f'{x:.2f}' for x in os.getloadavg()))


if __name__ == '__main__':
    exit_with(main)
