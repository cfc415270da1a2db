"""Returns and lengths of the training episodes, for the train/AverageReturn summary."""

import collections
from typing import Dict, List

import numpy as np
import torch

from alf_lite.data import StepType, TimeStep
from alf_lite.runs import TRAIN_EPISODE_LENGTH, TRAIN_RETURN

# train/AverageReturn is the mean over this many most recent episodes, or over as many
# as there are training envs where there are more (``train_metric_window``).
TRAIN_METRIC_WINDOW = 10


def train_metric_window(num_envs: int) -> int:
    """The number of most recent episodes train/AverageReturn averages over with ``num_envs``
    training envs: at least ``TRAIN_METRIC_WINDOW``, and no fewer than the envs, so that the
    episodes of all the envs ending at one step (a time limit they share) count alike."""
    return max(TRAIN_METRIC_WINDOW, num_envs)


class EpisodeStats:
    """Each training env's running episode, and the latest ``train_metric_window(num_envs)``
    finished ones.

    Args:
        num_envs: number of training envs, each with one running episode.
    """

    def __init__(self, num_envs: int):
        self._episode_return = np.zeros(num_envs)
        self._episode_length = np.zeros(num_envs, dtype=np.int64)
        window = train_metric_window(num_envs)
        self.recent_returns = collections.deque(maxlen=window)
        self.recent_lengths = collections.deque(maxlen=window)

    def update(self, time_step: TimeStep) -> None:
        """Count the step every env just took; an env at LAST finishes its episode."""
        step_type = time_step.step_type.numpy()
        started = step_type != StepType.FIRST
        self._episode_return += np.where(started, time_step.reward.numpy(), 0.0)
        self._episode_length += started
        last = step_type == StepType.LAST
        for i in np.flatnonzero(last):
            self.recent_returns.append(float(self._episode_return[i]))
            self.recent_lengths.append(int(self._episode_length[i]))
        self._episode_return[last] = 0.0
        self._episode_length[last] = 0

    def scalars(self) -> Dict[str, float]:
        """Mean return and length of the recent episodes; empty before the first one ends."""
        if not self.recent_returns:
            return {}
        return {
            TRAIN_RETURN: float(np.mean(self.recent_returns)),
            TRAIN_EPISODE_LENGTH: float(np.mean(self.recent_lengths)),
        }

    def load(self, recent_returns: List[float], recent_lengths: List[int]) -> None:
        """Continue with the finished episodes a checkpoint kept (in place of any counted here)."""
        self.recent_returns.clear()
        self.recent_lengths.clear()
        self.recent_returns.extend(recent_returns)
        self.recent_lengths.extend(recent_lengths)

    def running_state(self) -> Dict[str, torch.Tensor]:
        """Return and length so far of each env's running episode."""
        return {
            'episode_return': torch.from_numpy(self._episode_return.copy()),
            'episode_length': torch.from_numpy(self._episode_length.copy()),
        }

    def load_running_state(self, state: Dict[str, torch.Tensor]) -> None:
        """Continue the running episodes of ``running_state()`` (as the envs continue them)."""
        episode_return = state['episode_return'].cpu().numpy()
        episode_length = state['episode_length'].cpu().numpy()
        shape = self._episode_return.shape
        if episode_return.shape != shape or episode_length.shape != shape:
            raise ValueError(
                f'running episodes of {episode_return.shape} and {episode_length.shape} envs '
                f'for {shape}'
            )
        # The envs' rewards are checked finite and their steps counted from 0, so
        # anything else comes from a damaged or crafted file, and would carry into
        # train/AverageReturn once the episode ends.
        for env, (ret, length) in enumerate(zip(episode_return, episode_length)):
            if not np.isfinite(ret):
                raise ValueError(f'the running episode of env {env} has the return {ret}')
            # Compared as a float too: a NaN, an inf or a count past int64 is no count.
            if not (0 <= length < 2**63 and length == np.floor(length)):
                raise ValueError(f'the running episode of env {env} has the length {length}')
        self._episode_return[:] = episode_return
        self._episode_length[:] = episode_length

    def restart_running(self) -> None:
        """The envs start new episodes: nothing of the running ones counts."""
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
