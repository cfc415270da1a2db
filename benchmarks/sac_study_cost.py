r"""What each setting of the SAC study costs per update and per env step, on this machine.

    python benchmarks/sac_study_cost.py                  # both tasks, 5 interleaved rounds
    python benchmarks/sac_study_cost.py --task hopper --updates 500
    python benchmarks/sac_study_cost.py --suite study_sac --suite study_window   # 5-row windows too

The study's learning runs report wall times too, but they train two at a time
beside other work, so their times carry the machine's load. Here each
setting's update (the trainer's ``UpdateRunner`` with the study run's own gin
config and one torch thread, as the runs have) is timed alone, the settings
interleaved round by round, on a replay buffer of random rows in which one
row in ten ends an episode (so the LAST -> FIRST mask has pairs to act on).
Env steps cost the same in every setting; an update's share of an env step is
``num_updates_per_train_iter / (unroll_length * num_envs)`` (1 for Hopper-v5,
1/12 for ICubWalk-v0).
"""

import argparse
import functools
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
from benchmarks.learning import alf_gin_params, suite_runs  # noqa: E402
from benchmarks.random_buffer import random_replay_buffer  # noqa: E402

# One row in this many of the random buffer is LAST (and the next FIRST).
EPISODE_LENGTH = 10
BUFFER_ROWS = 10_000


def _setting_runner(run, obs_dim: int, act_dim: int):
    """The trainer's update for ``run``'s gin config, and its updates per env step."""
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.algorithms.off_policy_algorithm import loss_mask
    from alf_lite.config import parse_config
    from alf_lite.device import resolve_device
    from alf_lite.trainer import TrainerConfig
    from alf_lite.update import UpdateRunner

    gin.clear_config()
    parse_config([os.path.join(REPO_ROOT, run.task.gin_file(run.algo))], alf_gin_params(run))
    config = TrainerConfig()
    num_envs = gin.query_parameter('create_environment.num_parallel_environments')
    device = resolve_device(config.device)
    torch.manual_seed(0)
    algorithm = config.algorithm_ctor(observation_dim=obs_dim, action_dim=act_dim).to(device)
    rb = random_replay_buffer(
        num_envs, BUFFER_ROWS // num_envs, obs_dim, act_dim, device, EPISODE_LENGTH
    )
    mask = config.mask_out_loss_for_last_step
    runner = UpdateRunner(
        algorithm,
        rb,
        config.mini_batch_size,
        config.mini_batch_length,
        functools.partial(loss_mask, mask_out_loss_for_last_step=mask),
        defer_non_finite_checks=config.defers_non_finite_checks(device),
    )
    share = config.num_updates_per_train_iter / (config.unroll_length * num_envs)
    return runner, share, config.torch_num_threads


def _dims(env_name: str):
    from alf_lite.environments import create_environment

    with create_environment(env_name, 1) as env:
        return env.observation_dim, env.action_dim


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--task', action='append', choices=['hopper', 'icub'], help='default: both')
    parser.add_argument('--updates', type=at_least(1), default=300, help='timed updates per round')
    parser.add_argument('--rounds', type=at_least(1), default=5, help='interleaved rounds')
    parser.add_argument(
        '--suite',
        action='append',
        choices=['study_sac', 'study_window'],
        help="the settings of these learning.py suites, the first one's first setting being "
        'the baseline (default: study_sac)',
    )
    args = parser.parse_args(argv)
    tasks = args.task or ['hopper', 'icub']
    runs = [
        r
        for suite in args.suite or ['study_sac']
        for r in suite_runs(suite, seeds=[0])
        if r.task.tag in tasks
    ]
    print(
        f'{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, torch {torch.__version__}'
    )
    for tag in tasks:
        task_runs = [r for r in runs if r.task.tag == tag]
        obs_dim, act_dim = _dims(task_runs[0].task.env)
        runners = {}
        for run in task_runs:
            runner, share, threads = _setting_runner(run, obs_dim, act_dim)
            runners[run.label] = runner
        torch.set_num_threads(threads)
        update = 0
        for runner in runners.values():  # warm-up
            for _ in range(20):
                update += 1
                runner.update(0, update)
        times = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, runner in runners.items():
                start = time.perf_counter()
                for _ in range(args.updates):
                    update += 1
                    runner.update(0, update)
                times[name].append(1000 * (time.perf_counter() - start) / args.updates)
        env = task_runs[0].task.env
        print(
            f'\n{env}: {obs_dim}-d observation, {act_dim}-d action, {threads} torch thread(s), '
            f'{args.rounds} rounds of {args.updates} updates; an update is '
            f'{share:.3g} of an env step'
        )
        base = statistics.median(next(iter(times.values())))
        print(f'{"setting":48s} {"ms/update":>10s} {"min":>7s} {"max":>7s} {"vs default":>10s}')
        for name, values in times.items():
            median = statistics.median(values)
            print(
                f'{name:48s} {median:10.2f} {min(values):7.2f} {max(values):7.2f} '
                f'{median / base:10.2f}'
            )
        print(
            'update ms per env step: '
            + ', '.join(f'{n} {share * statistics.median(v):.2f}' for n, v in times.items())
        )
    return 0


if __name__ == '__main__':
    exit_with(main)
