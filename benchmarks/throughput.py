r"""Training speed of alf_lite vs Stable-Baselines3, side by side in one process.

    python benchmarks/throughput.py --algo sac --env HalfCheetah-v5 --steps 5000

Both get identical hyperparameters: 256x256 networks, batch 256, Adam lr 3e-4,
tau 0.005, gamma 0.99, a 1M-step buffer, ``--learning_starts`` uniform random
steps, one env and one gradient step per env step (TD3: policy delay 2 and
target smoothing 0.2 / 0.5; TD3 and DDPG: Gaussian exploration 0.1 of the half
range). Runs alternate alf_lite / SB3 for ``--pairs`` pairs; only the window
after learning starts is timed. Also prints each library's pure-update ceiling:
its update in a loop with no environment. Every ratio alf_lite / SB3 says whether it
was measured at equal resources (the same torch thread count for both, see
``--threads`` and ``--sb3_threads``, on the same device) or at unequal ones.

On a GPU both libraries train on ``--device``; ``--cuda_graph`` replays
alf_lite's update as a CUDA graph (``TrainerConfig.cuda_graph``), ``--compile``
compiles its networks (``TrainerConfig.compile``), and ``--ceiling_only`` measures the
ceilings alone (no env runs)::

    python benchmarks/throughput.py --device cuda --cuda_graph --algo sac
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import gymnasium
import numpy as np
import torch

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _CHECKOUT not in sys.path:  # run as a script: import this checkout's benchmarks
    sys.path.insert(0, _CHECKOUT)

from alf_lite.bin.cli import exit_with  # noqa: E402
from benchmarks import resources, resources_kind  # noqa: E402

EXAMPLES = os.path.join(_CHECKOUT, 'examples')

ALF_PARAMS = {
    'sac': ['actor/Adam.lr = 3e-4', 'critic/Adam.lr = 3e-4', 'alpha/Adam.lr = 3e-4'],
    'td3': ['actor/Adam.lr = 3e-4', 'critic/Adam.lr = 3e-4'],
    'ddpg': [
        'DeterministicActorNetwork.batch_norm = False',
        'DeterministicActorNetwork.paper_init = False',
        'CriticNetwork.batch_norm = False',
        'CriticNetwork.paper_init = False',
        'CriticNetwork.action_input_layer = 0',
        'DdpgAlgorithm.exploration_noise = @GaussianNoise()',
        'GaussianNoise.sigma = 0.1',
        'DdpgAlgorithm.target_update_tau = 0.005',
        'DdpgAlgorithm.critic_l2_weight_decay = 0.0',
        'actor/Adam.lr = 3e-4',
        'critic/Adam.lr = 3e-4',
    ],
}
# Windows (alf_lite) and transitions (SB3) per update.
BATCH_SIZE = 256
# Updates before SB3's pure-update ceiling is timed.
WARMUP_UPDATES = 10
# Updates before alf_lite's is timed: more, as they hold the CUDA graph's capture
# (after its side-stream warm-up) and torch.compile's compilation.
ALF_LITE_WARMUP_UPDATES = 30
NETWORKS = {
    'sac': 'TanhNormalActorNetwork',
    'td3': 'DeterministicActorNetwork',
    'ddpg': 'DeterministicActorNetwork',
}


def parse_alf_lite_config(args, seed, trainer_device=True):
    """Parse the benchmark's gin config for alf_lite (common/<algo>.gin plus the shared settings).

    ``trainer_device``: bind ``--device``, ``--cuda_graph`` and ``--compile`` for the trainer.
    """
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.config import parse_config

    total = args.learning_starts + args.steps
    params = ALF_PARAMS[args.algo] + [
        f"create_environment.env_name = '{args.env}'",
        f'{NETWORKS[args.algo]}.hidden_layers = (256, 256)',
        'CriticNetwork.hidden_layers = (256, 256)',
        f'TrainerConfig.mini_batch_size = {BATCH_SIZE}',
        'TrainerConfig.replay_buffer_length = 1000000',
        f'TrainerConfig.initial_collect_steps = {args.learning_starts}',
        f'TrainerConfig.num_env_steps = {total}',
        f'TrainerConfig.random_seed = {seed}',
        f'TrainerConfig.summary_interval = {args.learning_starts}',
        f'TrainerConfig.eval_interval = {10 * total}',
        'TrainerConfig.num_eval_episodes = 1',
        f'TrainerConfig.checkpoint_interval = {10 * total}',
        f'TrainerConfig.torch_num_threads = {args.threads}',
        'TrainerConfig.checkpoint_replay_buffer = False',
    ]
    if args.precision != 'float32':
        params.append(f"TrainerConfig.precision = '{args.precision}'")
    if trainer_device:
        # Always: the default device, 'auto', would take a GPU that SB3 is not given.
        params += [
            f"TrainerConfig.device = '{args.device}'",
            f'TrainerConfig.cuda_graph = {args.cuda_graph}',
        ]
    if trainer_device and args.compile:
        params.append('TrainerConfig.compile = True')
    parse_config([os.path.join(EXAMPLES, 'common', f'{args.algo}.gin')], params)


def alf_lite_run(args, seed):
    """Env steps/s after learning starts, and the same once warm.

    Warm: after the first ``learning_starts`` training steps, which hold the
    one-time costs (the captures of a CUDA graph, the GPU's first kernels).
    """
    import csv

    from alf_lite.run_dir import RunDir
    from alf_lite.runs import ENV_STEPS, ENV_STEPS_PER_SEC
    from alf_lite.trainer import Trainer, TrainerConfig

    parse_alf_lite_config(args, seed)
    with tempfile.TemporaryDirectory() as root_dir:
        with Trainer(TrainerConfig(), root_dir) as trainer:
            trainer.train()
        with open(RunDir(root_dir).progress_file, newline='') as f:
            rows = [r for r in csv.DictReader(f) if r.get(ENV_STEPS_PER_SEC)]

    # Each row's speed covers the env steps since the row before it (measured
    # before any evaluation); the last one may cover fewer than the interval.
    ends = [int(r[ENV_STEPS]) for r in rows]
    spans = [
        (end - start, float(r[ENV_STEPS_PER_SEC])) for start, end, r in zip([0] + ends, ends, rows)
    ]

    def rate(after):
        timed = [(steps, speed) for (steps, speed), end in zip(spans, ends) if end > after]
        seconds = sum(steps / speed for steps, speed in timed)
        return sum(steps for steps, _ in timed) / seconds if timed else None

    return rate(args.learning_starts), rate(2 * args.learning_starts)


def alf_lite_ceiling(args, env, updates):
    """Updates/s of alf_lite's update on ``--device``: a fresh algorithm, a buffer of random rows.

    The update is the trainer's (``UpdateRunner``): sampled on the device, losses
    checked as the trainer checks them there (on a GPU without a host sync), eager or
    (``--cuda_graph``) replayed as a CUDA graph.
    """
    from alf_lite.algorithms.off_policy_algorithm import loss_mask
    from alf_lite.device import resolve_device, use_deterministic_algorithms
    from alf_lite.precision import set_network_precision
    from alf_lite.trainer import TrainerConfig
    from alf_lite.update import UpdateRunner
    from benchmarks.random_buffer import random_replay_buffer

    device = resolve_device(args.device)
    use_deterministic_algorithms(device)  # as the trainer runs
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    config = TrainerConfig()
    algorithm = config.algorithm_ctor(observation_dim=obs_dim, action_dim=act_dim).to(device)
    set_network_precision(algorithm, args.precision)
    rb = random_replay_buffer(1, 10_000, obs_dim, act_dim, device)
    runner = UpdateRunner(
        algorithm,
        rb,
        256,
        2,
        loss_mask,
        cuda_graph=args.cuda_graph,
        compile=args.compile,
        defer_non_finite_checks=config.defers_non_finite_checks(device),
    )
    synchronize = torch.cuda.synchronize if device.type == 'cuda' else lambda: None
    for update in range(1, ALF_LITE_WARMUP_UPDATES + 1):
        runner.update(0, update)
    synchronize()
    start = time.perf_counter()
    for update in range(ALF_LITE_WARMUP_UPDATES + 1, ALF_LITE_WARMUP_UPDATES + 1 + updates):
        runner.update(0, update)
    synchronize()
    return updates / (time.perf_counter() - start)


def sb3_run(args, seed):
    """Env steps/s after learning starts, the same once warm (as alf_lite_run), and the model."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    from benchmarks.sb3_common import mute_logger

    class Clock(BaseCallback):
        # Read as a rollout (one env step here) starts, after the previous step's
        # update, where alf_lite's progress rows start their windows: ``_on_step``
        # comes before that update, which the window would then time as well.
        def _on_rollout_start(self):
            if self.model.num_timesteps == args.learning_starts:
                self.start = time.perf_counter()
            if self.model.num_timesteps == 2 * args.learning_starts:
                self.warm = time.perf_counter()

        def _on_step(self):
            return True

    env = gymnasium.make(args.env)
    common = dict(
        learning_rate=3e-4,
        buffer_size=1_000_000,
        learning_starts=args.learning_starts,
        batch_size=BATCH_SIZE,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        policy_kwargs=dict(net_arch=[256, 256]),
        seed=seed,
        device=args.device,
        verbose=0,
    )
    if args.algo != 'sac':
        # SB3 adds the noise to the action scaled to [-1, 1], as alf_lite does.
        dims = env.action_space.shape
        common['action_noise'] = NormalActionNoise(np.zeros(dims), 0.1 * np.ones(dims))
    model = {'sac': sb3.SAC, 'td3': sb3.TD3, 'ddpg': sb3.DDPG}[args.algo](
        'MlpPolicy', env, **common
    )
    mute_logger(model)
    clock = Clock()
    if args.ceiling_only:  # random steps only: a filled buffer for the ceiling
        model.learn(args.learning_starts + 1)
        return None, None, model
    model.learn(args.learning_starts + args.steps, callback=clock)
    end = time.perf_counter()
    warm_steps = args.steps - args.learning_starts
    warm = warm_steps / (end - clock.warm) if warm_steps > 0 else None
    return args.steps / (end - clock.start), warm, model


def as_sb3_runs(args):
    """Torch's global settings as SB3 runs on its own: its thread count, and the
    nondeterministic algorithms torch defaults to, whatever ran before in the process."""
    torch.set_num_threads(args.sb3_threads)
    torch.use_deterministic_algorithms(False)


def sb3_ceiling(model, updates):
    model.train(gradient_steps=WARMUP_UPDATES, batch_size=BATCH_SIZE)
    synchronize = torch.cuda.synchronize if model.device.type == 'cuda' else lambda: None
    synchronize()
    start = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=BATCH_SIZE)
    synchronize()
    return updates / (time.perf_counter() - start)


def build_parser() -> argparse.ArgumentParser:
    """The script's flags and their defaults."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--algo', choices=['sac', 'td3', 'ddpg'], default='sac')
    parser.add_argument('--env', default='HalfCheetah-v5')
    parser.add_argument('--steps', type=int, default=5000, help='timed env steps per run')
    parser.add_argument('--learning_starts', type=int, default=1000)
    parser.add_argument('--pairs', type=int, default=2)
    parser.add_argument('--threads', type=int, default=2, help="alf_lite's torch_num_threads")
    parser.add_argument(
        '--sb3_threads',
        type=int,
        default=1,
        help="torch threads of SB3 (torch's own default here is the core count)",
    )
    parser.add_argument('--ceiling_updates', type=int, default=300)
    parser.add_argument(
        '--device', default='cpu', help="where both libraries train: 'cpu', 'cuda' or 'cuda:N'"
    )
    parser.add_argument(
        '--cuda_graph',
        action='store_true',
        help="alf_lite's update as a CUDA graph (TrainerConfig.cuda_graph)",
    )
    parser.add_argument(
        '--compile',
        action='store_true',
        help="torch.compile alf_lite's networks (TrainerConfig.compile), in its runs and ceiling",
    )
    parser.add_argument(
        '--ceiling_only', action='store_true', help='only the pure-update ceilings: no env runs'
    )
    parser.add_argument(
        '--precision',
        choices=['float32', 'bfloat16'],
        default='float32',
        help="alf_lite's TrainerConfig.precision (SB3 trains in float32)",
    )
    return parser


def main():
    parser = build_parser()
    args = parser.parse_args()
    for flag in ('steps', 'learning_starts', 'pairs', 'threads', 'sb3_threads', 'ceiling_updates'):
        if getattr(args, flag) < 1:
            # A run needs random steps before its first update: its first progress
            # row (and SB3's first timed step) comes after them.
            parser.error(f'--{flag} must be at least 1, not {getattr(args, flag)}')
    from alf_lite.device import DeviceUnavailableError, resolve_device

    # Before any run: an unusable device would fail in the first one, as a traceback.
    try:
        device = resolve_device(args.device)
    except (DeviceUnavailableError, ValueError) as e:
        parser.error(f'--device: {e}')
    if args.cuda_graph and device.type != 'cuda':
        parser.error(f'--cuda_graph needs a CUDA --device, not {args.device!r}')
    from benchmarks import unusable_env

    # Before any run: alf_lite's first run would fail on it, as a traceback.
    problem = unusable_env(args.env)
    if problem:
        parser.error(f'--env: {problem}')
    if args.compile:
        from alf_lite import update

        # Before any run: alf_lite's first run (or ceiling) would fail on it, as a traceback.
        try:
            update.check_compiles(device)
        except ValueError as e:
            parser.error(f'--compile: {e}')
    if args.ceiling_only:
        # The ceiling line names no algorithm, env or precision: runs of several in one
        # log would be told apart by their order alone.
        print(f'{args.algo.upper()} {args.env}, alf_lite in {args.precision}')
        print_ceilings(args, *ceilings(args))
        return
    figures = {name: [] for name in ('alf', 'sb3', 'ratio', 'alf_warm', 'sb3_warm', 'ratio_warm')}
    for pair in range(args.pairs):
        a, a_warm = alf_lite_run(args, seed=pair)
        print(f'pair {pair}: alf_lite {a:.1f} env steps/s', flush=True)
        as_sb3_runs(args)
        b, b_warm, model = sb3_run(args, seed=pair)
        figures['alf'].append(a)
        figures['sb3'].append(b)
        figures['ratio'].append(a / b)
        print(
            f'pair {pair}: alf_lite {a:.1f} env steps/s, SB3 {b:.1f}, ratio {a / b:.2f} '
            + resources(args.threads, args.sb3_threads, args.device),
            flush=True,
        )
        if a_warm is not None:
            figures['alf_warm'].append(a_warm)
            figures['sb3_warm'].append(b_warm)
            figures['ratio_warm'].append(a_warm / b_warm)
    alf_ceiling, sb3_top = ceilings(args, model)

    print(
        f'\n{args.algo.upper()} {args.env} on {args.device}'
        f'{" (alf_lite: CUDA graph)" if args.cuda_graph else ""}'
        f'{" (alf_lite: compiled)" if args.compile else ""}, alf_lite in '
        f'{args.precision}, {args.steps} timed steps '
        f'after {args.learning_starts} random ones, torch threads: alf_lite {args.threads}, '
        f'SB3 {args.sb3_threads}, '
        f'{args.pairs} pair(s)'
    )
    print('ratios ' + resources(args.threads, args.sb3_threads, args.device))
    print(f'{"":24s} {"median":>8s} {"min":>8s} {"max":>8s}')
    for suffix in ('', '_warm'):
        if not figures['alf' + suffix]:
            continue
        if suffix:
            print(f'after {args.learning_starts} updates:')
        for name, key in (
            ('alf_lite env steps/s', 'alf'),
            ('SB3 env steps/s', 'sb3'),
            ('ratio alf_lite / SB3', 'ratio'),
        ):
            values = figures[key + suffix]
            print(
                f'{name:24s} {statistics.median(values):8.2f} {min(values):8.2f} {max(values):8.2f}'
            )
    print_ceilings(args, alf_ceiling, sb3_top)


def ceilings(args, model=None):
    """``(alf_lite, SB3)`` pure-update ceilings in updates/s, each at its thread count.

    Both draw each update's batch from a filled buffer, as in training.
    """
    env = gymnasium.make(args.env)
    torch.set_num_threads(args.threads)
    parse_alf_lite_config(args, seed=0, trainer_device=False)
    alf_ceiling = alf_lite_ceiling(args, env, args.ceiling_updates)
    as_sb3_runs(args)
    if model is None:
        _, _, model = sb3_run(args, seed=0)
    return alf_ceiling, sb3_ceiling(model, args.ceiling_updates)


def print_ceilings(args, alf_ceiling, sb3_top):
    options = [o for o, on in (('CUDA graph', args.cuda_graph), ('compiled', args.compile)) if on]
    print(
        f'pure-update ceiling on {args.device}'
        f'{" (alf_lite: " + ", ".join(options) + ")" if options else ""}: '
        f'alf_lite ({args.threads} torch thread{"s" if args.threads != 1 else ""}) '
        f'{alf_ceiling:.1f} updates/s, '
        f'SB3 ({args.sb3_threads}) {sb3_top:.1f} updates/s, ratio {alf_ceiling / sb3_top:.2f} '
        f'at {resources_kind(args.threads, args.sb3_threads)} resources'
    )


if __name__ == '__main__':
    exit_with(main)
