"""Deterministic evaluation: one episode of a policy on each env of a batch, side by side."""

from typing import Any, Callable, NamedTuple, Optional

import numpy as np
import torch

from alf_lite.data import StepType, TimeStep


class EpisodeResults(NamedTuple):
    """One finished episode per env.

    Args:
        returns: ``[M]`` float64, the sum of the episode's rewards.
        lengths: ``[M]`` int64, the episode's steps.
    """

    returns: np.ndarray
    lengths: np.ndarray

    @property
    def average_return(self) -> float:
        return float(self.returns.mean())

    @property
    def average_length(self) -> float:
        return float(self.lengths.mean())


def evaluate(
    env, policy: Callable[[torch.Tensor], Any], on_step: Optional[Callable[[TimeStep], None]] = None
) -> EpisodeResults:
    """Run one episode on each env of ``env``, side by side, until every one has ended.

    An env whose episode ended may go on being stepped until the others end;
    those steps are not counted.

    Args:
        env: a ``BatchedEnvironment``, or anything with its ``num_envs``,
            ``reset()`` and ``step(action)`` returning ``TimeStep``s. It is reset
            without a seed: its first reset takes the seeds it was made with,
            later ones continue its envs' generators.
        policy: ``policy(observation)``: the action of every env for the
            ``[M, obs_dim]`` observation, passed on to ``env.step``; called
            without gradients.
        on_step: called with each ``TimeStep``, the reset's included (e.g. to
            record a video frame).
    Returns:
        the return and length of each env's episode.
    """
    time_step = env.reset()
    if on_step is not None:
        on_step(time_step)
    m = env.num_envs
    returns = np.zeros(m)
    lengths = np.zeros(m, dtype=np.int64)
    finished = np.zeros(m, dtype=bool)
    while not finished.all():
        with torch.no_grad():
            action = policy(time_step.observation)
        time_step = env.step(action)
        if on_step is not None:
            on_step(time_step)
        running = ~finished
        returns[running] += np.asarray(time_step.reward)[running]
        lengths[running] += 1
        finished |= np.asarray(time_step.step_type) == StepType.LAST
    return EpisodeResults(returns, lengths)
