"""Collection: the training envs step with the exploration policy into the replay buffer."""

from typing import List

import torch

from alf_lite.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf_lite.data import Experience
from alf_lite.environments import BatchedEnvironment
from alf_lite.episode_stats import EpisodeStats
from alf_lite.replay_buffer import ReplayBuffer


class Collector:
    """Steps the training envs one step at a time, split in ``send`` and ``receive``.

    Between the two the envs step (in subprocesses, or in ``receive`` when in
    process) while the caller may run updates: ``send`` has already stored
    every row those updates can sample.

    Args:
        env: the training envs.
        algorithm: acts with ``rollout_step`` (in eval mode).
        replay_buffer: gets one row per env per step.
        initial_collect_steps: uniform random actions until this many env
            steps were collected.
        episode_stats: counts every step the envs take.
    """

    def __init__(
        self,
        env: BatchedEnvironment,
        algorithm: OffPolicyAlgorithm,
        replay_buffer: ReplayBuffer,
        initial_collect_steps: int,
        episode_stats: EpisodeStats,
    ):
        self._env = env
        self._algorithm = algorithm
        self._replay_buffer = replay_buffer
        self._initial_collect_steps = initial_collect_steps
        self._episode_stats = episode_stats
        self._time_step = None

    def reset(self, seed: List[int]) -> None:
        """Start every env's episode afresh, seeding env ``i`` with ``seed[i]``."""
        self._time_step = self._env.reset(seed=seed)

    def send(self, env_steps: int) -> None:
        """Choose the action of the current step, store the step and start the envs stepping.

        Args:
            env_steps: env steps collected so far (before ``initial_collect_steps``:
                uniform random actions).
        """
        time_step = self._time_step
        if env_steps < self._initial_collect_steps:
            action = torch.rand(self._env.num_envs, self._env.action_dim) * 2 - 1
        else:
            if self._algorithm.training:
                self._algorithm.train(False)
            action = self._algorithm.rollout_step(time_step)
        self._replay_buffer.add_batch(
            Experience(
                time_step.step_type,
                time_step.observation,
                action,
                time_step.reward,
                time_step.discount,
            )
        )
        self._env.step_async(action)

    def receive(self) -> int:
        """Wait for the step ``send`` started; returns the env steps it took (one per env)."""
        self._time_step = self._env.step_wait()
        self._episode_stats.update(self._time_step)
        return self._env.num_envs
