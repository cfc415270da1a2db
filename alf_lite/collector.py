"""Collection: the training envs step with the exploration policy into the replay buffer."""

from typing import List

import torch

from alf_lite.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf_lite.data import Experience
from alf_lite.environments import BatchedEnvironment
from alf_lite.episode_stats import EpisodeStats
from alf_lite.replay_buffer import ReplayBuffer
from alf_lite.transfer import time_step_to_device

CPU = torch.device('cpu')


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
        device: the algorithm's device: each step's observation goes there in
            one copy and its action comes back in one.
    """

    def __init__(
        self,
        env: BatchedEnvironment,
        algorithm: OffPolicyAlgorithm,
        replay_buffer: ReplayBuffer,
        initial_collect_steps: int,
        episode_stats: EpisodeStats,
        device: torch.device = CPU,
    ):
        self._env = env
        self._algorithm = algorithm
        self._replay_buffer = replay_buffer
        self._initial_collect_steps = initial_collect_steps
        self._episode_stats = episode_stats
        self._device = device
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
        on_device = time_step_to_device(time_step, self._device)  # itself on the CPU
        if env_steps < self._initial_collect_steps:
            action = torch.rand(self._env.num_envs, self._env.action_dim) * 2 - 1
        else:
            if self._algorithm.training:
                self._algorithm.train(False)
            action = self._algorithm.rollout_step(on_device)
        host_action = action.cpu()
        # Rows go to the buffer from wherever they already are on its device.
        stored = on_device if self._replay_buffer.device == self._device else time_step
        self._replay_buffer.add_batch(
            Experience(
                stored.step_type,
                stored.observation,
                action if action.device == self._replay_buffer.device else host_action,
                stored.reward,
                stored.discount,
            )
        )
        self._env.step_async(host_action)

    def receive(self) -> int:
        """Wait for the step ``send`` started; returns the env steps it took (one per env)."""
        self._time_step = self._env.step_wait()
        self._episode_stats.update(self._time_step)
        return self._env.num_envs
