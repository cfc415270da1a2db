"""One deterministic episode per env, side by side: returns and lengths counted until each ends."""

import numpy as np
import torch

from alf_lite.data import StepType, TimeStep
from alf_lite.evaluation import evaluate


class CountdownEnvs:
    """Env ``i`` ends its episode after ``lengths[i]`` steps; each step's reward is the action."""

    def __init__(self, lengths):
        self.num_envs = len(lengths)
        self._lengths = np.array(lengths)
        self._steps = np.zeros(self.num_envs, dtype=np.int64)

    def _time_step(self, step_type, reward):
        return TimeStep(
            torch.from_numpy(step_type),
            torch.zeros(self.num_envs, 1),
            reward,
            torch.ones(self.num_envs),
            torch.arange(self.num_envs),
        )

    def reset(self):
        self._steps[:] = 0
        return self._time_step(
            np.full(self.num_envs, StepType.FIRST, np.uint8), torch.zeros(self.num_envs)
        )

    def step(self, action):
        self._steps += 1
        # Past its end an env goes on returning steps (as an auto-reset env does).
        step_type = np.where(self._steps == self._lengths, StepType.LAST, StepType.MID)
        return self._time_step(step_type.astype(np.uint8), action[:, 0])


def test_each_env_counts_its_own_episode_only():
    envs = CountdownEnvs([1, 3, 2])
    results = evaluate(envs, lambda observation: torch.full((3, 1), 0.5))
    assert results.lengths.tolist() == [1, 3, 2]
    assert results.returns.tolist() == [0.5, 1.5, 1.0]
    assert results.average_return == 1.0 and results.average_length == 2.0


def test_on_step_sees_the_reset_and_every_step():
    seen = []
    evaluate(
        CountdownEnvs([2]),
        lambda observation: torch.ones(1, 1),
        on_step=lambda time_step: seen.append(int(time_step.step_type[0])),
    )
    assert seen == [StepType.FIRST, StepType.MID, StepType.LAST]


def test_policy_runs_without_gradients():
    weight = torch.ones(1, requires_grad=True)

    def policy(observation):
        action = observation + weight
        assert not action.requires_grad
        return action

    evaluate(CountdownEnvs([2]), policy)
