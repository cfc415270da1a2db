"""Deterministic evaluation: one episode of a policy on each env of a batch, side by side."""

from typing import Any, Callable, NamedTuple, Optional, Sequence

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
    env,
    policy: Callable[[torch.Tensor], Any],
    on_step: Optional[Callable[[TimeStep], None]] = None,
    seed: Optional[Sequence[int]] = None,
) -> EpisodeResults:
    """Run one episode on each env of ``env``, side by side, until every one has ended.

    An in-process batch (``use_subprocesses`` False, as the trainer's eval envs
    and play's env are) steps only the envs whose episode runs: the rows of an
    env whose episode ended repeat its LAST step. Env processes go on into
    their next episodes until the last one ends (gymnasium's AsyncVectorEnv
    steps every env); those steps are not counted.

    Args:
        env: a ``BatchedEnvironment``, or anything with its ``num_envs``,
            ``reset()`` (``reset(seed=...)`` when ``seed`` is given) and
            ``step(action)`` returning ``TimeStep``s; with
            ``use_subprocesses`` False also ``step(action, active=...)``.
        policy: ``policy(observation)``: the action of every env for the
            ``[M, obs_dim]`` observation, passed on to ``env.step``; called
            without gradients, also for the rows of envs whose episode ended
            (their actions are ignored).
        on_step: called with each ``TimeStep``, the reset's included (e.g. to
            record a video frame); the rows of an env whose episode ended
            belong to no counted episode.
        seed: one seed per env for the reset (``seeding.eval_env_seeds``);
            None: reset without seeds (an env's first reset then takes the
            seeds it was made with, later ones continue its generators).
    Returns:
        the return and length of each env's episode.
    """
    time_step = env.reset() if seed is None else env.reset(seed=seed)
    if on_step is not None:
        on_step(time_step)
    m = env.num_envs
    returns = np.zeros(m)
    lengths = np.zeros(m, dtype=np.int64)
    finished = np.zeros(m, dtype=bool)
    in_process = not getattr(env, 'use_subprocesses', True)
    while not finished.all():
        with torch.no_grad():
            action = policy(time_step.observation)
        time_step = env.step(action, active=~finished) if in_process else env.step(action)
        if on_step is not None:
            on_step(time_step)
        running = ~finished
        returns[running] += np.asarray(time_step.reward)[running]
        lengths[running] += 1
        finished |= np.asarray(time_step.step_type) == StepType.LAST
    return EpisodeResults(returns, lengths)


# The steps before an eval episode's termination over which TerminationValues compares Q
# with the return received.
NEAR_TERMINATION_STEPS = 10


class TerminationValues:
    """The critics' Q against the return actually received, over the last steps before a fall.

    Wraps an evaluation's policy and ``on_step``: for each eval episode that
    ends by termination (LAST with discount 0), it keeps ``Q(s_t, a_t)`` and
    the discounted return ``sum_k gamma^k r_{t+1+k}`` received from there to
    the end, for the last ``num_steps`` steps. A critic that learned the end is
    terminal predicts those returns; training on LAST -> FIRST pairs as if they
    were transitions lifts its Q there.

    Args:
        act: ``act(observation) -> (action, q)``: the evaluation policy's action
            and the critics' ``[M]`` estimate of its Q, on the host (computed
            together, so that a GPU run copies both back at once).
        gamma: the discount factor of the critics' return.
        num_steps: steps before the end that count.
    """

    def __init__(self, act, gamma: float, num_steps: int = NEAR_TERMINATION_STEPS):
        self._act = act
        self._gamma, self._num_steps = gamma, num_steps
        self._q, self._rewards, self._done = None, None, None
        self._terminated = []

    def policy(self, observation: torch.Tensor):
        """The wrapped policy's action; records each running env's Q of it."""
        action, q = self._act(observation)
        q = np.asarray(q, dtype=np.float64)
        if self._q is None:
            m = len(q)
            self._q, self._rewards = [[] for _ in range(m)], [[] for _ in range(m)]
            self._done = np.zeros(m, dtype=bool)
        for i in np.flatnonzero(~self._done):
            self._q[i].append(q[i])
        return action

    def on_step(self, time_step: TimeStep) -> None:
        """Record the rewards; an episode that terminates joins the statistics."""
        if self._q is None:  # the reset
            return
        reward = np.asarray(time_step.reward, dtype=np.float64)
        last = np.asarray(time_step.step_type) == StepType.LAST
        discount = np.asarray(time_step.discount)
        for i in np.flatnonzero(~self._done):
            self._rewards[i].append(reward[i])
            if last[i]:
                self._done[i] = True
                if discount[i] == 0:
                    self._terminated.append(i)

    def result(self):
        """``(mean Q, mean return received)`` over the counted steps; None without a termination."""
        qs, returns = [], []
        for i in self._terminated:
            rewards, to_go = self._rewards[i], 0.0
            received = []
            for r in reversed(rewards):
                to_go = r + self._gamma * to_go
                received.append(to_go)
            received.reverse()
            qs += self._q[i][-self._num_steps :]
            returns += received[-self._num_steps :]
        if not qs:
            return None
        return float(np.mean(qs)), float(np.mean(returns))
