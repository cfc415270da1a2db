r"""One Stable-Baselines3 (SB3) run of the learning benchmark, written as alf_lite writes a run.

    python -m benchmarks.sb3_runner --suite pendulum --run sb3_sac --seed 2 --out DIR [--steps N]

(from the repository root; ``benchmarks/learning.py`` starts it so). Trains
the run in ``<out>/<suite>/<run>/seed<k>`` with one torch thread and the
settings of its alf_lite counterpart (``sb3_settings``), evaluates it as
alf_lite's trainer does, and writes ``config.gin`` (the run in alf_lite's
binding names) and a ``progress.csv`` with alf_lite's columns, so that
``alf_lite.bin.plot`` reads and groups both frameworks' runs.

Like alf_lite's train, it resumes: every ``Task.checkpoint_interval`` env steps
and when a stop signal (SIGINT, SIGTERM, ...: ``STOP_SIGNALS``) stops it (exit status
128 + the signal), it saves the model with its optimizers and entropy coefficient, the
replay buffer, the RNG states of torch, numpy and random, and the episode statistics in
``checkpoints/sb3``; the same command continues from there (progress.csv rows
after the checkpoint are dropped). What a resumed run does not repeat: the
episode under way when it stopped is cut (its steps stay in the buffer, each
with its own next observation, as SB3 stores them; the env starts a new
episode, seeded from the run's seed and the env step), so it is not the same
run as one never stopped, as an alf_lite run would be.
"""

import argparse
import csv
import io
import os
import random
import shutil
import signal
import sys
import time
from typing import Dict, Tuple

import gymnasium
import numpy as np
import torch

import alf_lite.environments  # noqa: F401  (registers alf_lite's own ids)
from alf_lite.bin.cli import EXIT_BAD_INPUT, EXIT_SIGNAL_BASE, exit_with
from alf_lite.config import write_text_atomically
from alf_lite.data import StepType, TimeStep
from alf_lite.episode_stats import train_metric_window
from alf_lite.evaluation import evaluate
from alf_lite.run_dir import RunDir, RunDirInUseError, RunDirLock, experiment_difference
from alf_lite.runs import (
    ENV_STEPS,
    ENV_STEPS_PER_SEC,
    EVAL_EPISODE_LENGTH,
    EVAL_RETURN,
    NUM_UPDATES,
    REPLAY_BUFFER_BYTES,
    TRAIN_EPISODE_LENGTH,
    TRAIN_RETURN,
    WALL_TIME,
    complete_rows,
)
from alf_lite.seeding import eval_env_seeds
from alf_lite.signals import STOP_SIGNALS, ignore_stop_signals, stop_when_starter_ends
from alf_lite.summary import MIN_INTERVAL_S
from benchmarks import at_least
from benchmarks.learning import NUM_EVAL_EPISODES, SUITES, BenchmarkRun, suite_runs
from benchmarks.memory import sb3_buffer_bytes
from benchmarks.sb3_common import (
    MODEL_FILE,
    REPLAY_FILE,
    STATE_FILE,
    checkpoint_path,
    complete_checkpoint,
    mute_logger,
)

SB3_COLUMNS = [
    ENV_STEPS,
    NUM_UPDATES,
    WALL_TIME,
    EVAL_RETURN,
    EVAL_EPISODE_LENGTH,
    TRAIN_RETURN,
    TRAIN_EPISODE_LENGTH,
    ENV_STEPS_PER_SEC,
    REPLAY_BUFFER_BYTES,
]


def sb3_settings(run: BenchmarkRun) -> Dict[str, object]:
    """Constructor arguments of the SB3 algorithm, matched to alf_lite's gin settings."""
    settings = dict(
        learning_rate=run.task.lr,
        buffer_size=run.replay_length_per_env,
        learning_starts=run.learning_starts,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        net_arch=[256, 256],
    )
    if run.algo == 'sac':
        settings.update(ent_coef='auto', target_entropy='auto', target_update_interval=1)
    elif run.algo == 'td3':
        settings.update(
            exploration_noise_sigma=0.1,
            policy_delay=2,
            target_policy_noise=0.2,
            target_noise_clip=0.5,
        )
    else:
        raise ValueError(f'no SB3 settings for {run.algo!r}')
    return settings


def sb3_config_text(run: BenchmarkRun, settings: Dict[str, object]) -> str:
    """``config.gin`` of an SB3 run: alf_lite's binding names where they exist."""
    cls = f'stable_baselines3.{run.algo.upper()}'
    bindings = {
        'TrainerConfig.algorithm_ctor': f'@{cls}',
        'TrainerConfig.random_seed': run.seed,
        'TrainerConfig.num_env_steps': run.num_env_steps,
        'TrainerConfig.initial_collect_steps': run.learning_starts,
        'TrainerConfig.mini_batch_size': settings['batch_size'],
        'TrainerConfig.replay_buffer_length': settings['buffer_size'],
        'TrainerConfig.eval_interval': run.task.eval_interval,
        'TrainerConfig.num_eval_episodes': NUM_EVAL_EPISODES,
        'create_environment.env_name': repr(run.task.env),
        'create_environment.num_parallel_environments': 1,
    }
    for name, value in sorted(settings.items()):
        bindings[f'{cls}.{name}'] = repr(tuple(value) if isinstance(value, list) else value)
    lines = [
        '# A Stable-Baselines3 run of benchmarks/learning.py. Not an alf_lite config:',
        "# it describes the run in alf_lite's binding names so that alf_lite.bin.plot",
        '# can group it.',
    ]
    lines += [f'{name} = {value}' for name, value in bindings.items()]
    return '\n'.join(lines) + '\n'


class _EvalEnvs:
    """``NUM_EVAL_EPISODES`` gymnasium envs for ``alf_lite.evaluation.evaluate``; SB3 acts.

    The first reset seeds them as alf_lite's trainer seeds its eval envs. An
    env whose episode ended is not stepped again before the next reset, and
    SB3 acts for the running envs only, in the env's action units; the
    observations are float32 (SB3 casts them so anyway), the rewards float64
    as the envs give them.

    Args:
        env_id: the registered gymnasium id.
        seed: the run's seed.
        model: the SB3 model whose deterministic policy is evaluated.
    """

    def __init__(self, env_id: str, seed: int, model):
        self._envs = [gymnasium.make(env_id) for _ in range(NUM_EVAL_EPISODES)]
        self.num_envs = len(self._envs)
        self._seed = seed
        self._model = model
        self._observation = None
        self._running = np.zeros(self.num_envs, dtype=bool)

    def _time_step(self, step_type, reward):
        return TimeStep(
            step_type=torch.from_numpy(step_type),
            observation=torch.from_numpy(self._observation.astype(np.float32)),
            reward=torch.from_numpy(reward),
            discount=torch.ones(self.num_envs),
            env_id=torch.arange(self.num_envs),
        )

    def reset(self, seed=None):
        seeds = [None] * self.num_envs if seed is None else seed
        self._observation = np.stack([env.reset(seed=s)[0] for env, s in zip(self._envs, seeds)])
        self._running[:] = True
        return self._time_step(
            np.full(self.num_envs, StepType.FIRST, dtype=np.uint8), np.zeros(self.num_envs)
        )

    def policy(self, observation):
        """SB3's deterministic actions of the running envs."""
        actions, _ = self._model.predict(observation[self._running].numpy(), deterministic=True)
        return actions

    def step(self, actions):
        reward = np.zeros(self.num_envs)
        for action, i in zip(actions, np.flatnonzero(self._running)):
            self._observation[i], reward[i], terminated, truncated, _ = self._envs[i].step(action)
            self._running[i] = not (terminated or truncated)
        step_type = np.where(self._running, StepType.MID, StepType.LAST).astype(np.uint8)
        return self._time_step(step_type, reward)

    def evaluate(self, env_steps: int) -> Tuple[float, float]:
        """Mean return and length of one deterministic episode on each env.

        The envs are reset with the seeds alf_lite's evaluation at ``env_steps`` uses.
        """
        seeds = eval_env_seeds(self._seed, self.num_envs, env_steps)
        results = evaluate(self, self.policy, seed=seeds)
        return results.average_return, results.average_length

    def close(self):
        for env in self._envs:
            env.close()


def _save_checkpoint(model, run_dir: str) -> None:
    """Saves the model after ``model.num_timesteps`` env steps; old one kept until complete."""
    path = checkpoint_path(run_dir)
    tmp, old = path + '.tmp', path + '.old'
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    model.save(os.path.join(tmp, MODEL_FILE))
    model.save_replay_buffer(os.path.join(tmp, REPLAY_FILE))
    state = dict(
        env_steps=model.num_timesteps,
        torch=torch.get_rng_state(),
        numpy=np.random.get_state(),
        random=random.getstate(),
    )
    # Written last: a directory with it is complete.
    torch.save(state, os.path.join(tmp, STATE_FILE))
    if os.path.isdir(path):
        shutil.rmtree(old, ignore_errors=True)
        os.rename(path, old)
    os.rename(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def _keep_rows_up_to(progress_file: str, env_steps: int) -> None:
    """Drops the progress.csv rows written after ``env_steps``."""
    with open(progress_file, newline='') as f:
        _, rows = complete_rows(f)
    text = io.StringIO(newline='')
    writer = csv.DictWriter(text, SB3_COLUMNS)
    writer.writeheader()
    writer.writerows(r for r in rows if int(float(r[ENV_STEPS])) <= env_steps)
    write_text_atomically(progress_file, text.getvalue())


def train(run: BenchmarkRun, out: str) -> int:
    """Train one SB3 run into its run directory, from its checkpoint when it has one.

    The caller holds the run directory's ``RunDirLock`` (``main`` does).

    Returns:
        0 when the run finished; 128 + the signal number when a stop signal
        stopped it (after saving a checkpoint: from then on every stop signal is
        ignored, so that the process exits with that code); ``EXIT_BAD_INPUT``
        when its checkpoint is of a run with other settings (nothing trained).
    """
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(1)
    run_dir = RunDir(run.run_dir(out))
    algorithm = {'sac': SAC, 'td3': TD3}[run.algo]
    env = gymnasium.make(run.task.env)
    resume_from = complete_checkpoint(run_dir.root)
    # A checkpoint may be at 0 env steps (a stop during the first evaluation): it resumes too.
    resumed = resume_from is not None and os.path.isfile(run_dir.progress_file)
    if resumed:
        # The model, its buffer and its learning_starts come from the checkpoint: a run of
        # other settings (another --steps, which changes learning_starts or the buffer) would
        # go on with the old ones under the new name, so it is refused as train refuses it.
        config = sb3_config_text(run, sb3_settings(run))
        other = experiment_difference(
            run_dir.root,
            config,
            advice='An SB3 run resumes with its own settings only: '
            'move it away or choose another --out.',
        )
        if other:
            print(f'error: {other}', file=sys.stderr)
            env.close()
            return EXIT_BAD_INPUT
        # What a resume may change (the length): config.gin says the run as it goes on.
        write_text_atomically(run_dir.config_file, config)
        state = torch.load(os.path.join(resume_from, STATE_FILE), weights_only=False)
        steps = int(state['env_steps'])
        model = algorithm.load(os.path.join(resume_from, MODEL_FILE), env=env, device='cpu')
        model.load_replay_buffer(os.path.join(resume_from, REPLAY_FILE))
        torch.set_rng_state(state['torch'])
        np.random.set_state(state['numpy'])
        random.setstate(state['random'])
        # The loaded model resets the env before it trains: a new episode,
        # seeded from the run's seed and the env step.
        model.env.seed(int(np.random.SeedSequence([run.seed, steps]).generate_state(1)[0]))
        _keep_rows_up_to(run_dir.progress_file, steps)
        print(f'resuming from {resume_from} at {steps} env steps', flush=True)
    else:
        # Emptied, not removed: the directory is the one this process holds locked.
        for name in os.listdir(run_dir.root):
            path = os.path.join(run_dir.root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        settings = sb3_settings(run)
        write_text_atomically(run_dir.config_file, sb3_config_text(run, settings))
        kwargs = dict(settings)
        kwargs['policy_kwargs'] = dict(net_arch=kwargs.pop('net_arch'))
        if run.algo == 'td3':
            sigma = kwargs.pop('exploration_noise_sigma')
            dim = env.action_space.shape[0]
            # SB3 adds action noise in the [-1, 1] action space, as alf_lite does.
            kwargs['action_noise'] = NormalActionNoise(np.zeros(dim), sigma * np.ones(dim))
        model = algorithm('MlpPolicy', env, seed=run.seed, device='cpu', verbose=0, **kwargs)
        steps = 0
    mute_logger(model)
    eval_envs = _EvalEnvs(run.task.env, run.seed, model)
    progress = open(run_dir.progress_file, 'a', newline='')
    writer = csv.DictWriter(progress, SB3_COLUMNS)
    if not resumed:
        writer.writeheader()
    interval, checkpoint_interval = run.task.eval_interval, run.task.checkpoint_interval
    stop_signal, stopped = [], []
    previous = {
        s: signal.signal(s, lambda signum, frame: stop_signal.append(signum)) for s in STOP_SIGNALS
    }
    # As train does: started by a launcher that was killed, stop at a checkpoint.
    stop_when_starter_ends()

    class Progress(BaseCallback):
        """Evaluates and writes a progress.csv row at 0, every ``interval`` steps and at the end.

        SB3 calls ``_on_step`` after an env step, before it stores that step's
        transition and trains on it; ``_on_rollout_start`` (and
        ``_on_training_end``) after the update of the step before. The rows and
        checkpoints due at a step are written there, after its update, as
        alf_lite writes them; a checkpoint saved at a stop signal in
        ``_on_step`` holds the run after the step before.
        """

        def __init__(self):
            super().__init__()
            # A resumed run has its rows up to the checkpoint.
            self._last_row = steps if resumed else None
            self._last_time = self._last_steps = None
            # A row and a checkpoint due at the last env step, written after its update.
            self._row_due = self._checkpoint_due = False

        def _write(self):
            now = time.time()
            steps = self.num_timesteps
            avg_return, avg_length = eval_envs.evaluate(steps)
            # train/AverageReturn over the same number of recent episodes as alf_lite's.
            window = train_metric_window(self.training_env.num_envs)
            episodes = list(self.model.ep_info_buffer)[-window:]
            row = {
                ENV_STEPS: steps,
                NUM_UPDATES: self.model._n_updates,
                WALL_TIME: now,
                EVAL_RETURN: avg_return,
                EVAL_EPISODE_LENGTH: avg_length,
                REPLAY_BUFFER_BYTES: sb3_buffer_bytes(self.model.replay_buffer),
            }
            if episodes:
                row[TRAIN_RETURN] = float(np.mean([e['r'] for e in episodes]))
                row[TRAIN_EPISODE_LENGTH] = float(np.mean([e['l'] for e in episodes]))
            if self._last_time is not None and steps > self._last_steps:
                row[ENV_STEPS_PER_SEC] = (steps - self._last_steps) / max(
                    now - self._last_time, MIN_INTERVAL_S
                )
            writer.writerow(row)
            progress.flush()
            self._last_row, self._last_time, self._last_steps = steps, time.time(), steps
            print(
                f'env steps {steps}: eval return {avg_return:.2f}, episode length {avg_length:.1f}',
                flush=True,
            )

        def _save_before_step(self):
            done = self.model.num_timesteps - self.training_env.num_envs
            self.model.num_timesteps = done
            try:
                _save_checkpoint(self.model, run_dir.root)
            finally:
                self.model.num_timesteps = done + self.training_env.num_envs

        def _on_training_start(self):
            if self._last_row is None:
                self._write()

        def _on_step(self):
            if stop_signal:
                self._save_before_step()
                stopped.append(self.num_timesteps - self.training_env.num_envs)
                return False
            self._row_due |= self.num_timesteps % interval == 0
            self._checkpoint_due |= self.num_timesteps % checkpoint_interval == 0
            return True

        def _write_due(self):
            if self._row_due:
                self._write()
            if self._checkpoint_due:
                _save_checkpoint(self.model, run_dir.root)
            self._row_due = self._checkpoint_due = False

        def _on_rollout_start(self):
            self._write_due()

        def _on_training_end(self):
            if stopped:
                return
            self._row_due |= self._last_row != self.num_timesteps
            self._write_due()

    try:
        model.learn(
            total_timesteps=run.num_env_steps - steps,
            callback=Progress(),
            reset_num_timesteps=not steps,
        )
    finally:
        if stop_signal:
            # Exiting because of it: another (a batch system's SIGTERM after its SIGUSR1)
            # must not end the process by its own as the envs close.
            ignore_stop_signals()
        else:
            for s, handler in previous.items():
                signal.signal(s, handler)
        progress.close()
        eval_envs.close()
        env.close()
    if stopped:
        print(
            f'stopped by signal {stop_signal[0]} at {stopped[0]} env steps: '
            f'checkpoint written to {checkpoint_path(run_dir.root)}; run the same command '
            'to continue',
            flush=True,
        )
        return EXIT_SIGNAL_BASE + stop_signal[0]
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description='Train one SB3 run of benchmarks/learning.py (resumes from its checkpoint).'
    )
    parser.add_argument('--suite', choices=list(SUITES), required=True)
    parser.add_argument('--run', required=True, help='The SB3 run of the suite, e.g. sb3_sac.')
    parser.add_argument('--seed', type=at_least(0), required=True)
    parser.add_argument(
        '--out', type=os.path.expanduser, required=True, help='Directory of the benchmark runs.'
    )
    parser.add_argument(
        '--steps', type=at_least(1), default=None, help="Env steps instead of the suite's."
    )
    args = parser.parse_args(argv)
    runs = {
        r.name: r for r in suite_runs(args.suite, [args.seed], args.steps) if r.framework == 'sb3'
    }
    if args.run not in runs:
        parser.error(
            f'{args.suite} has no SB3 run {args.run!r}; its SB3 runs are: '
            f'{", ".join(runs) or "none"}'
        )
    run, out = runs[args.run], os.path.abspath(args.out)
    try:  # a file where one of the run's directories should be: a usage error
        os.makedirs(os.path.dirname(run.run_dir(out)), exist_ok=True)
    except OSError as e:
        parser.error(f'--out: {e}')
    try:
        with RunDirLock(run.run_dir(out)):
            return train(run, out)
    except RunDirInUseError as e:
        print(f'error: {e}', file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == '__main__':
    exit_with(main)
