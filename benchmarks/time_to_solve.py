r"""Wall-clock time until SAC solves Pendulum-v1: alf_lite vs Stable-Baselines3.

    python benchmarks/time_to_solve.py --seeds 0 1 2

Both run SAC with the hyperparameters of ``examples/sac_pendulum.gin``: 256x256
networks, batch 256, Adam lr 1e-3 (actor, critics, temperature), tau 0.005,
gamma 0.99, automatic temperature starting at alpha = 1 with target entropy -1,
a 100k buffer, 1000 uniform random steps before learning, one gradient step per
env step. Every 1000 env steps each evaluates its deterministic policy on 10
episodes; the clock (started before the agent and its environments are built)
stops at the first evaluation whose mean return reaches ``--threshold``.
alf_lite also evaluates the untrained policy at 0 env steps, SB3 does not; with
a threshold that policy misses, this evaluation only adds its time. Evaluation
time is part of the wall-clock for both (alf_lite runs its 10 episodes side by
side, SB3's ``EvalCallback`` one after another). A run that does not get there
within ``--max_steps`` counts as unsolved. Runs alternate alf_lite / SB3 per
seed, each in its own process, both on the CPU; the ratio says whether they had
equal resources (``--threads`` and ``--sb3_threads`` the same) or unequal ones.
"""

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ''):  # run as a script: import this checkout's benchmarks
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from alf_lite.bin.cli import EXIT_FAULT, exit_with, fail  # noqa: E402
from alf_lite.runs import exit_description  # noqa: E402
from benchmarks import at_least, finite_number, resources  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run as a script: import this checkout's benchmarks
    sys.path.insert(0, REPO)
GIN_FILE = os.path.join(REPO, 'examples', 'sac_pendulum.gin')
# Uniform random env steps before learning: the gin file's TrainerConfig.initial_collect_steps.
LEARNING_STARTS = 1000


def run_alf_lite(
    seed: int, threshold: float, max_steps: int, threads: int, precision: str = 'float32'
) -> dict:
    """Train until the eval return reaches ``threshold``; time and env steps at that point."""
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.config import parse_config
    from alf_lite.runs import EVAL_RETURN
    from alf_lite.trainer import Trainer, TrainerConfig

    solved_at = []

    def solved(last_eval: dict) -> bool:
        if last_eval[EVAL_RETURN] >= threshold:
            solved_at.append(time.perf_counter())
        return bool(solved_at)

    start = time.perf_counter()
    parse_config(
        [GIN_FILE],
        [
            f'TrainerConfig.random_seed = {seed}',
            f'TrainerConfig.num_env_steps = {max_steps}',
            'TrainerConfig.eval_interval = 1000',
            'TrainerConfig.num_eval_episodes = 10',
            f'TrainerConfig.checkpoint_interval = {10 * max_steps}',
            'TrainerConfig.checkpoint_replay_buffer = False',
            f'TrainerConfig.torch_num_threads = {threads}',
            f"TrainerConfig.precision = '{precision}'",
            # SB3 runs on the CPU here; the default device, 'auto', would take a GPU.
            "TrainerConfig.device = 'cpu'",
        ],
    )
    with tempfile.TemporaryDirectory() as root_dir:
        with Trainer(TrainerConfig(), root_dir) as trainer:
            last_eval = trainer.train(stop_when=solved)
            # The time until the evaluation that reached the threshold.
            end = solved_at[0] if solved_at else time.perf_counter()
            return dict(
                seconds=end - start,
                env_steps=trainer.env_steps,
                solved=bool(solved_at),
                eval_return=last_eval[EVAL_RETURN],
            )


def run_sb3(seed: int, threshold: float, max_steps: int, threads: int) -> dict:
    """SB3 SAC with the same settings; its EvalCallback stops it at the threshold."""
    import gymnasium
    import stable_baselines3 as sb3
    import torch
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

    from benchmarks.sb3_common import mute_logger

    torch.set_num_threads(threads)
    start = time.perf_counter()
    env = gymnasium.make('Pendulum-v1')
    eval_env = gymnasium.make('Pendulum-v1')
    model = sb3.SAC(
        'MlpPolicy',
        env,
        learning_rate=1e-3,
        buffer_size=100_000,
        learning_starts=LEARNING_STARTS,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef='auto_1.0',
        target_entropy=-1.0,
        policy_kwargs=dict(net_arch=[256, 256]),
        seed=seed,
        device='cpu',
        verbose=0,
    )
    stop = StopTrainingOnRewardThreshold(reward_threshold=threshold, verbose=0)
    evaluation = EvalCallback(
        eval_env,
        callback_on_new_best=stop,
        n_eval_episodes=10,
        eval_freq=1000,
        deterministic=True,
        verbose=0,
    )
    mute_logger(model)
    model.learn(max_steps, callback=evaluation)
    seconds = time.perf_counter() - start
    solved = evaluation.best_mean_reward >= threshold
    return dict(
        seconds=seconds,
        env_steps=model.num_timesteps,
        solved=bool(solved),
        eval_return=float(evaluation.last_mean_reward),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seeds', type=at_least(0), nargs='+', default=[0, 1, 2])
    parser.add_argument(
        '--threshold',
        type=finite_number,
        default=-200.0,
        help='the mean eval return that counts as solved',
    )
    parser.add_argument(
        '--max_steps',
        type=at_least(LEARNING_STARTS),
        default=20000,
        help=f'env steps per run at most, the {LEARNING_STARTS} random ones included',
    )
    parser.add_argument(
        '--threads', type=at_least(1), default=2, help="alf_lite's torch_num_threads"
    )
    parser.add_argument('--sb3_threads', type=at_least(1), default=1, help='torch threads of SB3')
    parser.add_argument(
        '--precision',
        choices=['float32', 'bfloat16'],
        default='float32',
        help="alf_lite's TrainerConfig.precision (SB3 trains in float32)",
    )
    parser.add_argument('--_run', choices=['alf_lite', 'sb3'], help=argparse.SUPPRESS)
    parser.add_argument('--_seed', type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args._run:
        if args._run == 'alf_lite':
            result = run_alf_lite(
                args._seed, args.threshold, args.max_steps, args.threads, args.precision
            )
        else:
            result = run_sb3(args._seed, args.threshold, args.max_steps, args.sb3_threads)
        print(json.dumps(result))
        return
    # Found before the first alf_lite run, minutes before the first SB3 one would fail.
    if importlib.util.find_spec('stable_baselines3') is None:
        parser.error('stable-baselines3 is not installed (pip install .[bench]): it is run too')

    results = {'alf_lite': [], 'sb3': []}
    for seed in args.seeds:
        for name in ('alf_lite', 'sb3'):
            run = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    '--_run',
                    name,
                    '--_seed',
                    str(seed),
                    '--threshold',
                    str(args.threshold),
                    '--max_steps',
                    str(args.max_steps),
                    '--threads',
                    str(args.threads),
                    '--sb3_threads',
                    str(args.sb3_threads),
                    '--precision',
                    args.precision,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            if run.returncode != 0:
                # What went wrong the run printed above, on stderr, which is not captured.
                fail(
                    f'the {name} run of seed {seed} failed ({exit_description(run.returncode)}); '
                    'its error is printed above',
                    exit_code=EXIT_FAULT,
                )
            r = json.loads(run.stdout.strip().splitlines()[-1])
            results[name].append(r)
            print(
                f'seed {seed} {name:8s}: {"solved" if r["solved"] else "NOT solved"} at '
                f'{r["env_steps"]} env steps, {r["seconds"]:.1f} s '
                f'(eval return {r["eval_return"]:.1f})',
                flush=True,
            )

    def median_seconds(rs):
        # An unsolved run counts as infinitely slow.
        return statistics.median(r['seconds'] if r['solved'] else float('inf') for r in rs)

    print(
        f'\nSAC Pendulum-v1, eval return >= {args.threshold}, seeds {args.seeds}, '
        f'torch threads: alf_lite {args.threads}, SB3 {args.sb3_threads}, '
        f'alf_lite in {args.precision}, on cpu'
    )
    print(f'{"":10s} {"median s":>9s} {"median steps":>13s} {"solved":>7s}')
    for name, rs in results.items():
        print(
            f'{name:10s} {median_seconds(rs):9.1f} '
            f'{statistics.median(r["env_steps"] for r in rs):13.0f} '
            f'{sum(r["solved"] for r in rs):4d}/{len(rs)}'
        )
    print(
        'ratio alf_lite / SB3 (median seconds): '
        + ratio_text(
            median_seconds(results['alf_lite']),
            median_seconds(results['sb3']),
            resources(args.threads, args.sb3_threads, 'cpu'),
        )
    )


def ratio_text(alf_lite_seconds: float, sb3_seconds: float, measured_at: str = '') -> str:
    """The ratio of two median times to solve followed by ``measured_at`` (the resources,
    see ``benchmarks.resources``), or one that is infinite (at least half the runs
    unsolved) said in words."""
    unsolved = [
        name
        for name, seconds in (('alf_lite', alf_lite_seconds), ('SB3', sb3_seconds))
        if math.isinf(seconds)
    ]
    if not unsolved:
        return f'{alf_lite_seconds / sb3_seconds:.2f} {measured_at}'.rstrip()
    whose = 'its' if len(unsolved) == 1 else 'their'
    return f'none ({" and ".join(unsolved)} left at least half {whose} runs unsolved)'


if __name__ == '__main__':
    exit_with(main)
