r"""What an ICubWalk-v0 (or -v1) policy does: how long it stays up, how far and how fast it goes.

    python benchmarks/icub_gait.py --root_dir benchmarks/results/learning/icub_walk/icub_walk/seed0

Plays the deterministic policy of a run's checkpoint (the latest, or
``--checkpoint_step``; before a resume that changed the experiment, in the env of
the ``config-until-<step>.gin`` it was trained with) for ``--num_episodes`` episodes, seeded as the
trainer's eval envs of its first evaluation (env step 0: the same episodes whatever the
checkpoint, so not those of the checkpoint's own evaluation, which ``play`` replays) of the
run's ``TrainerConfig.random_seed`` (or ``--random_seed``), and two baselines on the same
seeds: the zero action (with the default 'position_residual' control it holds the standing
pose) and uniform random actions, and with ``--noise_std`` the zero action plus Gaussian
noise of each given standard deviation (how robust standing is to exploration noise such as
SAC's). Prints, for each, the mean return, the episode length
in steps and seconds, how many episodes ended in a fall (termination) rather
than the time limit, the forward distance covered (the env's
``forward_velocity`` times the control period, summed) and the mean forward
speed. One env in this process, one torch thread.
"""

import argparse
import importlib
import os
import statistics
import sys

import numpy as np

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _CHECKOUT not in sys.path:  # run as a script: import this checkout's alf_lite
    sys.path.insert(0, _CHECKOUT)

from alf_lite.bin.cli import exit_with  # noqa: E402
from benchmarks import at_least  # noqa: E402


def play(env, act, seeds):
    """Per episode ``(return, steps, fell, distance)`` of ``act(observation) -> action``."""
    episodes = []
    for seed in seeds:
        observation, _ = env.reset(seed=seed)
        total, steps, distance = 0.0, 0, 0.0
        while True:
            observation, reward, terminated, truncated, info = env.step(act(observation))
            total += reward
            steps += 1
            distance += info['forward_velocity'] * env.unwrapped.control_dt
            if terminated or truncated:
                episodes.append((total, steps, terminated, distance))
                break
    return episodes


def summary(name, episodes, control_dt, width=8):
    returns, steps, fell, distance = zip(*episodes)
    seconds = [n * control_dt for n in steps]
    speed = sum(distance) / sum(seconds)
    return (
        f'{name:<{width}} return {statistics.mean(returns):7.1f}  '
        f'length {statistics.mean(steps):6.1f} steps ({statistics.mean(seconds):5.2f} s)  '
        f'fell {sum(fell)}/{len(episodes)}  '
        f'forward {statistics.mean(distance):+.2f} m  speed {speed:+.2f} m/s'
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    parser.add_argument(
        '--root_dir',
        type=os.path.expanduser,
        required=True,
        help='A train run of ICubWalk-v0 or ICubWalk-v1.',
    )
    parser.add_argument('--checkpoint_step', type=int, default=None)
    parser.add_argument('--num_episodes', type=at_least(1), default=10)
    parser.add_argument(
        '--random_seed',
        type=int,
        default=None,
        help="Seeds the episodes as the run's first evaluation for this random_seed. "
        "Default: the run's own TrainerConfig.random_seed.",
    )
    parser.add_argument(
        '--noise_std',
        type=at_least(0.0, float),
        nargs='*',
        default=[],
        help='Also play the zero action plus Gaussian noise of these standard deviations '
        '(in the [-1, 1] action units, clipped there).',
    )
    parser.add_argument(
        '--trust_imports',
        action='store_true',
        help="Let the run's config.gin import code from outside the installed packages "
        "(a module beside the run, say) and use gin's dynamic registration. Off: such a "
        'config.gin is refused, as one from someone else could run anything.',
    )
    args = parser.parse_args(argv)

    import gin
    import gymnasium
    import torch

    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.bin.cli import fail
    from alf_lite.bin.policy import checkpoint_path, load_policy
    from alf_lite.checkpoint import CheckpointError
    from alf_lite.config import ConfigError, UntrustedCodeError, parse_config
    from alf_lite.model_memory import ModelTooLargeError
    from alf_lite.run_dir import RunDir
    from alf_lite.seeding import eval_env_seeds
    from alf_lite.trainer import TrainerConfig

    torch.set_num_threads(1)
    root_dir = os.path.abspath(args.root_dir)
    run_dir = RunDir(root_dir)
    if not os.path.isfile(run_dir.config_file):
        parser.error(f'{root_dir} holds no config.gin: it is not the root_dir of a train run')
    # The config the checkpoint was trained with: before a resume that changed the
    # experiment, its config-until-<step>.gin.
    step = args.checkpoint_step
    step = run_dir.latest_checkpoint_env_steps() if step is None else step
    config_file = run_dir.config_file if step is None else run_dir.config_file_of(step)
    try:
        parse_config([config_file], [], trust_imports=args.trust_imports)
    except UntrustedCodeError as e:
        parser.error(str(e))
    env_name = gin.query_parameter('create_environment.env_name')
    # ``module:Id``: the module registers the id, as create_environment imports it.
    module, env_id = env_name.split(':', 1) if ':' in env_name else ('', env_name)
    if env_id not in ('ICubWalk-v0', 'ICubWalk-v1'):
        parser.error(f'{root_dir} trained on {env_name}, not ICubWalk-v0 or ICubWalk-v1')
    if module:
        importlib.import_module(module)
    # Built as the run built its envs: its time limit and constructor arguments.
    bindings = gin.get_bindings('create_environment')
    kwargs = dict(bindings.get('env_kwargs') or {})
    if bindings.get('max_episode_steps') is not None:
        kwargs['max_episode_steps'] = bindings['max_episode_steps']
    # Made from its spec, as create_environment makes it: by id, gymnasium would warn that
    # v0 is out of date beside v1.
    env = gymnasium.make(gymnasium.spec(env_id), **kwargs)
    low, high = env.action_space.low, env.action_space.high
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    try:
        config = TrainerConfig()
        path = checkpoint_path(root_dir, args.checkpoint_step)
        algorithm = load_policy(path, config, obs_dim, act_dim)
    except (CheckpointError, ConfigError, ModelTooLargeError) as e:
        fail(str(e))
    seed = config.random_seed if args.random_seed is None else args.random_seed
    seeds = eval_env_seeds(seed, args.num_episodes)
    rng = np.random.default_rng(seed)

    def policy(observation):
        with torch.no_grad():
            action = algorithm.predict_step(torch.as_tensor(observation[None], dtype=torch.float32))
        return low + (action[0].numpy().astype(np.float64) + 1) / 2 * (high - low)

    dt = env.unwrapped.control_dt
    print(f'{path}, {args.num_episodes} episodes, control period {dt:.3f} s, random_seed {seed}')

    def noisy_zero(std):
        def act(observation):
            noise = np.clip(rng.normal(0.0, std, act_dim), -1.0, 1.0)
            return low + (noise + 1) / 2 * (high - low)

        return act

    players = [
        ('policy', policy),
        ('zero', lambda observation: np.zeros(act_dim)),
        ('random', lambda observation: rng.uniform(low, high)),
    ]
    players += [(f'zero+N(0,{std:g})', noisy_zero(std)) for std in args.noise_std]
    width = max(len(name) for name, _ in players)
    try:
        for name, act in players:
            print(summary(name, play(env, act, seeds), dt, width), flush=True)
    finally:
        env.close()
    return 0


if __name__ == '__main__':
    exit_with(main)
