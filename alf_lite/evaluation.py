"""Deterministic evaluation: one episode of a policy on each env of a batch, side by side, or
one per seed in rounds of the batch's size."""

from typing import Any, Callable, List, NamedTuple, Optional, Sequence

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
    """Run one episode per env of ``env`` side by side until every one has ended; with more
    seeds than envs, one episode per seed, in rounds of ``env.num_envs`` episodes.

    An in-process batch (``use_subprocesses`` False, as the trainer's eval envs
    and play's env are) steps only the envs whose episode runs: the rows of an
    env whose episode ended repeat its LAST step. Env processes go on into
    their next episodes until the last one ends (gymnasium's AsyncVectorEnv
    steps every env); those steps are not counted.

    Each round resets every env with its episodes' seeds, so an episode's
    result does not depend on the envs it shares a round with. In a last round
    of fewer episodes than envs, the envs past them (reset with the round's last seed)
    are never stepped and are no part of the results: this needs an in-process
    batch.

    Args:
        env: a ``BatchedEnvironment``, or anything with its ``num_envs``,
            ``reset()`` (``reset(seed=...)`` when ``seed`` is given) and
            ``step(action)`` returning ``TimeStep``s; with
            ``use_subprocesses`` False also ``step(action, active=...)``.
        policy: ``policy(observation)``: the action of every env for the
            ``[M, obs_dim]`` observation, passed on to ``env.step``; called
            without gradients, also for the rows of envs whose episode ended
            or that take no part in the round (their actions are ignored).
        on_step: called with each ``TimeStep``, each round's reset included (a
            reset's is all FIRST; e.g. to record a video frame); the rows of an
            env whose episode ended belong to no counted episode.
        seed: one seed per episode (``seeding.eval_env_seeds``); None: one
            episode per env, reset without seeds (an env's first reset then takes
            the seeds it was made with, later ones continue its generators).
    Returns:
        the return and length of each episode, in the order of ``seed``.
    Raises:
        ValueError: a round of fewer episodes than envs, with env processes.
    """
    m = env.num_envs
    if seed is None:
        return _evaluate_round(env, policy, on_step, None)
    seed = list(seed)
    if len(seed) % m and getattr(env, 'use_subprocesses', True):
        raise ValueError(
            f'evaluate: {len(seed)} episodes in rounds of {m} env processes leave a round '
            'short, and the envs past its episodes would play episodes of their own.'
        )
    rounds = [
        _evaluate_round(env, policy, on_step, seed[start : start + m])
        for start in range(0, len(seed), m)
    ]
    return EpisodeResults(
        np.concatenate([r.returns for r in rounds]), np.concatenate([r.lengths for r in rounds])
    )


def _evaluate_round(env, policy, on_step, seed: Optional[List[int]]) -> EpisodeResults:
    """``evaluate``'s round: one episode for each seed (each env without seeds)."""
    m = env.num_envs
    n = m if seed is None else len(seed)
    in_process = not getattr(env, 'use_subprocesses', True)
    if n < m:
        seed = seed + seed[-1:] * (m - n)
    time_step = env.reset() if seed is None else env.reset(seed=seed)
    if on_step is not None:
        on_step(time_step)
    returns = np.zeros(m)
    lengths = np.zeros(m, dtype=np.int64)
    # The envs past the round's episodes are finished from the start.
    finished = np.arange(m) >= n
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
    return EpisodeResults(returns[:n], lengths[:n])


# The steps before an eval episode's termination over which TerminationValues compares Q
# with the return received.
NEAR_TERMINATION_STEPS = 10


class TerminationValues:
    """The critics' Q against the return actually received, over the last steps before a fall.

    Wraps an evaluation's policy and ``on_step``: for each eval episode that
    ends by termination (LAST with discount 0), it keeps ``Q(s_t, a_t)`` and
    the discounted return ``sum_k gamma^k r_{t+1+k}`` received from there to
    the end, for the last ``num_steps`` steps. A critic that learned the end is
    terminal predicts those returns (SAC's soft Q: plus the entropy bonus of the
    later actions); training on LAST -> FIRST pairs as if they were transitions
    lifts its Q there.

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
        # The running round's steps of each env, from its reset (None before it acts).
        self._q, self._rewards, self._done = None, None, None
        # The counted steps of the episodes that terminated, in the order they did.
        self._counted_q, self._counted_returns = [], []

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
        """Record the rewards; an episode that terminates joins the statistics. A step of
        every env FIRST is a reset: a round of ``evaluate`` starts over."""
        step_type = np.asarray(time_step.step_type)
        if self._q is None or (step_type == StepType.FIRST).all():
            self._q = None
            return
        reward = np.asarray(time_step.reward, dtype=np.float64)
        last = step_type == StepType.LAST
        discount = np.asarray(time_step.discount)
        for i in np.flatnonzero(~self._done):
            self._rewards[i].append(reward[i])
            if last[i]:
                self._done[i] = True
                if discount[i] == 0:
                    self._count(self._q[i], self._rewards[i])

    def _count(self, q: List[float], rewards: List[float]) -> None:
        """Keep the last ``num_steps`` Qs of a terminated episode and the returns received."""
        to_go, received = 0.0, []
        for r in reversed(rewards):
            to_go = r + self._gamma * to_go
            received.append(to_go)
        received.reverse()
        self._counted_q += q[-self._num_steps :]
        self._counted_returns += received[-self._num_steps :]

    def result(self):
        """``(mean Q, mean return received)`` over the counted steps; None without a termination."""
        if not self._counted_q:
            return None
        return float(np.mean(self._counted_q)), float(np.mean(self._counted_returns))
