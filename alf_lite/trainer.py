"""TrainerConfig and the generic off-policy trainer: collect, train, evaluate, summarise, checkpoint."""
import collections
import os
import random
import time
from typing import Callable, Optional

import gin
import numpy as np
import psutil
import torch
from absl import logging

from alf_lite import checkpoint as ckpt
from alf_lite.algorithms import SacAlgorithm
from alf_lite.config import operative_config_str, write_text_atomically
from alf_lite.data import Experience, StepType
from alf_lite.environments import create_environment
from alf_lite.replay_buffer import ReplayBuffer
from alf_lite.summary import Summary, print_progress

# Train-time AverageReturn is the mean over this many most recent episodes.
TRAIN_METRIC_WINDOW = 10
# Eval envs get seeds far from the training envs' ``seed + i``; each random seed
# gets its own block of num_eval_episodes seeds, so runs with neighbouring seeds
# do not evaluate on the same initial states.
EVAL_SEED_OFFSET = 1_000_000


@gin.configurable
class TrainerConfig:
    """Everything the off-policy trainer needs; names follow ALF's where they exist.

    All intervals and step counts are in env steps, summed over parallel envs.

    Args:
        algorithm_ctor: ``ctor(observation_dim, action_dim)`` of an
            ``OffPolicyAlgorithm``.
        random_seed: seeds python, numpy, torch and env ``i`` with ``seed + i``.
        num_env_steps: stop after this many env steps.
        initial_collect_steps: uniform random actions for this many env steps;
            training starts once more steps than this were collected.
        unroll_length: steps collected from every env per iteration.
        mini_batch_size: windows per update.
        mini_batch_length: rows per window; 2 gives one transition per window.
        num_updates_per_train_iter: updates after each collection.
        replay_buffer_length: rows kept per env; capacity is this times the
            number of parallel envs.
        summary_interval: write training scalars every this many env steps.
        eval_interval: evaluate the deterministic policy every this many env steps.
        num_eval_episodes: episodes per evaluation, run side by side on
            separate envs.
        checkpoint_interval: write a checkpoint every this many env steps
            (and always at the end).
        torch_num_threads: torch intra-op threads; 1 is usually fastest for
            small networks when anything else runs on the machine.
        mask_out_loss_for_last_step: drop windows whose first row is LAST (their
            next row is another episode's FIRST). False trains on them, as
            tf-agents does; for study only.
        checkpoint_replay_buffer: save the replay buffer with the checkpoint so
            a resumed run continues with the same data.
    """

    def __init__(self,
                 algorithm_ctor: Callable = SacAlgorithm,
                 random_seed: int = 0,
                 num_env_steps: int = 100_000,
                 initial_collect_steps: int = 1000,
                 unroll_length: int = 1,
                 mini_batch_size: int = 256,
                 mini_batch_length: int = 2,
                 num_updates_per_train_iter: int = 1,
                 replay_buffer_length: int = 100_000,
                 summary_interval: int = 1000,
                 eval_interval: int = 5000,
                 num_eval_episodes: int = 10,
                 checkpoint_interval: int = 10_000,
                 torch_num_threads: int = 1,
                 mask_out_loss_for_last_step: bool = True,
                 checkpoint_replay_buffer: bool = True):
        for name in ('num_env_steps', 'unroll_length', 'mini_batch_size',
                     'num_updates_per_train_iter', 'replay_buffer_length', 'summary_interval',
                     'eval_interval', 'num_eval_episodes', 'checkpoint_interval',
                     'torch_num_threads'):
            if locals()[name] <= 0:
                raise ValueError(f'TrainerConfig.{name} must be positive, got {locals()[name]}')
        if initial_collect_steps < 0:
            raise ValueError('TrainerConfig.initial_collect_steps must be >= 0, '
                             f'got {initial_collect_steps}')
        if mini_batch_length < 2:
            raise ValueError('TrainerConfig.mini_batch_length must be >= 2: a TD update needs '
                             f'a row and its next row, got {mini_batch_length}')
        if replay_buffer_length < mini_batch_length:
            raise ValueError('TrainerConfig.replay_buffer_length must be >= mini_batch_length')
        self.algorithm_ctor = algorithm_ctor
        self.random_seed = random_seed
        self.num_env_steps = num_env_steps
        self.initial_collect_steps = initial_collect_steps
        self.unroll_length = unroll_length
        self.mini_batch_size = mini_batch_size
        self.mini_batch_length = mini_batch_length
        self.num_updates_per_train_iter = num_updates_per_train_iter
        self.replay_buffer_length = replay_buffer_length
        self.summary_interval = summary_interval
        self.eval_interval = eval_interval
        self.num_eval_episodes = num_eval_episodes
        self.checkpoint_interval = checkpoint_interval
        self.torch_num_threads = torch_num_threads
        self.mask_out_loss_for_last_step = mask_out_loss_for_last_step
        self.checkpoint_replay_buffer = checkpoint_replay_buffer


def _seed_everything(seed: int, num_threads: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(num_threads)
    torch.use_deterministic_algorithms(True)


def _rng_state() -> dict:
    return {'python': random.getstate(), 'numpy': np.random.get_state(),
            'torch': torch.get_rng_state()}


def _set_rng_state(state: dict) -> None:
    random.setstate(state['python'])
    np.random.set_state(state['numpy'])
    torch.set_rng_state(state['torch'])


def loss_mask(batch: Experience, mask_out_loss_for_last_step: bool = True) -> torch.Tensor:
    """``[B, T - 1]``: 1 for each transition ``(t, t + 1)`` that may be trained on.

    Row ``t`` being LAST means row ``t + 1`` is the next episode's FIRST: not a
    transition, unless ``mask_out_loss_for_last_step`` is False (tf-agents' behaviour).
    """
    first_rows = batch.step_type[:, :-1]
    if mask_out_loss_for_last_step:
        return (first_rows != StepType.LAST).float()
    return torch.ones(first_rows.shape)


def _crossed(before: int, after: int, interval: int) -> bool:
    return after // interval > before // interval


class Trainer:
    """Runs one experiment in ``root_dir``, resuming from its latest checkpoint if any.

    Args:
        config: the trainer's settings.
        root_dir: experiment directory (created if missing).
    """

    def __init__(self, config: TrainerConfig, root_dir: str):
        self._config = config
        self._root_dir = root_dir
        self._checkpoint_dir = os.path.join(root_dir, 'checkpoints')

    def train(self) -> dict:
        """Train until ``num_env_steps``; returns the last evaluation's scalars."""
        cfg = self._config
        _seed_everything(cfg.random_seed, cfg.torch_num_threads)
        env = create_environment(seed=cfg.random_seed)
        eval_env = None
        try:
            eval_env = create_environment(num_parallel_environments=cfg.num_eval_episodes,
                                          seed=EVAL_SEED_OFFSET
                                          + cfg.random_seed * cfg.num_eval_episodes,
                                          use_subprocesses=False)
            return self._train(env, eval_env)
        finally:
            env.close()
            if eval_env is not None:
                eval_env.close()

    def _train(self, env, eval_env) -> dict:
        cfg = self._config
        self._algorithm = algorithm = cfg.algorithm_ctor(
            observation_dim=env.observation_dim, action_dim=env.action_dim)
        self._replay_buffer = replay_buffer = ReplayBuffer(
            num_envs=env.num_envs, length=cfg.replay_buffer_length,
            observation_dim=env.observation_dim, action_dim=env.action_dim)
        self._eval_env = eval_env
        self._env_steps = 0
        self._num_updates = 0
        self._recent_returns = collections.deque(maxlen=TRAIN_METRIC_WINDOW)
        self._recent_lengths = collections.deque(maxlen=TRAIN_METRIC_WINDOW)
        self._last_eval = {}

        latest = ckpt.latest_checkpoint(self._checkpoint_dir)
        reset_seed = None
        if latest is not None:
            self._restore(latest)
            reset_seed = cfg.random_seed + self._env_steps
        summary = Summary(self._root_dir, self._env_steps if latest else -1)
        try:
            self._loop(env, summary, reset_seed)
        finally:
            summary.close()
        return self._last_eval

    def _loop(self, env, summary: Summary, reset_seed: Optional[int]) -> None:
        cfg = self._config
        algorithm, replay_buffer = self._algorithm, self._replay_buffer
        n = env.num_envs
        time_step = env.reset(seed=reset_seed)
        episode_return = np.zeros(n)
        episode_length = np.zeros(n, dtype=np.int64)
        train_scalars = {}
        last_time, last_steps, last_updates = time.time(), self._env_steps, self._num_updates
        wrote_operative_config = False
        if self._env_steps == 0:
            self._evaluate_and_write(summary, {})

        while self._env_steps < cfg.num_env_steps:
            before = self._env_steps
            algorithm.train(False)
            for _ in range(cfg.unroll_length):
                if self._env_steps < cfg.initial_collect_steps:
                    action = torch.rand(n, env.action_dim) * 2 - 1
                else:
                    action = algorithm.rollout_step(time_step)
                replay_buffer.add_batch(Experience(
                    time_step.step_type, time_step.observation, action,
                    time_step.reward, time_step.discount))
                time_step = env.step(action)
                self._env_steps += n
                self._track_episodes(time_step, episode_return, episode_length)

            if (self._env_steps > cfg.initial_collect_steps
                    and replay_buffer.num_steps >= cfg.mini_batch_length):
                algorithm.train(True)
                for _ in range(cfg.num_updates_per_train_iter):
                    batch = replay_buffer.sample(cfg.mini_batch_size, cfg.mini_batch_length)
                    mask = loss_mask(batch, cfg.mask_out_loss_for_last_step)
                    train_scalars = algorithm.train_step(batch, mask)
                    self._num_updates += 1
                if not wrote_operative_config:
                    write_text_atomically(os.path.join(self._root_dir, 'operative_config.gin'),
                                          operative_config_str())
                    wrote_operative_config = True

            after = self._env_steps
            done = after >= cfg.num_env_steps
            scalars = {}
            if _crossed(before, after, cfg.summary_interval) or done:
                now = time.time()
                scalars.update(self._train_scalars(
                    train_scalars, (after - last_steps) / max(now - last_time, 1e-9),
                    (self._num_updates - last_updates) / max(now - last_time, 1e-9)))
                last_time, last_steps, last_updates = now, after, self._num_updates
            if _crossed(before, after, cfg.eval_interval) or done:
                self._evaluate_and_write(summary, scalars)
            elif scalars:
                summary.write(after, self._num_updates, time.time(), scalars)
            if scalars:
                print_progress(after, cfg.num_env_steps, scalars['train/env_steps_per_sec'],
                               self._last_eval.get('eval/AverageReturn'))
            if _crossed(before, after, cfg.checkpoint_interval) or done:
                self._save()

    def _track_episodes(self, time_step, episode_return, episode_length) -> None:
        step_type = time_step.step_type.numpy()
        started = step_type != StepType.FIRST
        episode_return += np.where(started, time_step.reward.numpy(), 0.0)
        episode_length += started
        for i in np.flatnonzero(step_type == StepType.LAST):
            self._recent_returns.append(float(episode_return[i]))
            self._recent_lengths.append(int(episode_length[i]))
        episode_return[step_type == StepType.LAST] = 0.0
        episode_length[step_type == StepType.LAST] = 0

    def _train_scalars(self, train_scalars, env_steps_per_sec, updates_per_sec) -> dict:
        scalars = {f'train/{k}': float(v) for k, v in train_scalars.items()}
        if self._recent_returns:
            scalars['train/AverageReturn'] = float(np.mean(self._recent_returns))
            scalars['train/AverageEpisodeLength'] = float(np.mean(self._recent_lengths))
        scalars['train/env_steps_per_sec'] = env_steps_per_sec
        scalars['train/updates_per_sec'] = updates_per_sec
        scalars['train/replay_buffer_bytes'] = self._replay_buffer.nbytes
        scalars['train/process_rss_bytes'] = psutil.Process().memory_info().rss
        return scalars

    def _evaluate_and_write(self, summary: Summary, scalars: dict) -> None:
        avg_return, avg_length = self._evaluate()
        self._last_eval = {'eval/AverageReturn': avg_return,
                           'eval/AverageEpisodeLength': avg_length}
        scalars.update(self._last_eval)
        summary.write(self._env_steps, self._num_updates, time.time(), scalars)
        logging.info('env steps %d: eval return %.2f, episode length %.1f',
                     self._env_steps, avg_return, avg_length)

    def _evaluate(self):
        """Run one episode of the deterministic policy on each eval env."""
        env, algorithm = self._eval_env, self._algorithm
        algorithm.train(False)
        m = env.num_envs
        time_step = env.reset()
        returns = np.zeros(m)
        lengths = np.zeros(m, dtype=np.int64)
        finished = np.zeros(m, dtype=bool)
        while not finished.all():
            time_step = env.step(algorithm.predict_step(time_step.observation))
            running = ~finished
            returns[running] += time_step.reward.numpy()[running]
            lengths[running] += 1
            finished |= time_step.step_type.numpy() == StepType.LAST
        return float(returns.mean()), float(lengths.mean())

    def _save(self) -> None:
        state = {
            'algorithm': self._algorithm.checkpoint_state(),
            'rng': _rng_state(),
            'env_steps': self._env_steps,
            'num_updates': self._num_updates,
            'recent_returns': list(self._recent_returns),
            'recent_lengths': list(self._recent_lengths),
            'last_eval': self._last_eval,
        }
        rb = self._replay_buffer.state_dict() if self._config.checkpoint_replay_buffer else None
        path = ckpt.save_checkpoint(self._checkpoint_dir, self._env_steps, state, rb)
        logging.info('checkpoint written: %s', path)

    def _restore(self, path: str) -> None:
        state, rb = ckpt.load_checkpoint(path)
        self._algorithm.load_checkpoint_state(state['algorithm'])
        _set_rng_state(state['rng'])
        self._env_steps = state['env_steps']
        self._num_updates = state['num_updates']
        self._recent_returns.extend(state['recent_returns'])
        self._recent_lengths.extend(state['recent_lengths'])
        self._last_eval = state['last_eval']
        if rb is not None:
            self._replay_buffer.load_state_dict(rb)
            # The env restarts with a FIRST step: the last stored row must not
            # be paired with it as a transition.
            self._replay_buffer.mark_last_steps_as_last()
        logging.info('resumed from %s at %d env steps', path, self._env_steps)
