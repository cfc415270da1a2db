"""One deterministic episode per env, side by side: returns and lengths counted until each ends."""

import numpy as np
import pytest
import torch

from alf_lite.data import StepType, TimeStep
from alf_lite.evaluation import TerminationValues, evaluate

M, L, F = StepType.MID, StepType.LAST, StepType.FIRST


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


def test_the_averages_are_means_over_the_episodes_not_medians():
    # Returns 0.5, 0.5, 2.0 and lengths 1, 1, 4: means 1.0 and 2.0, medians 0.5 and 1.
    results = evaluate(CountdownEnvs([1, 1, 4]), lambda observation: torch.full((3, 1), 0.5))
    assert results.average_return == pytest.approx((0.5 + 0.5 + 2.0) / 3)
    assert results.average_length == pytest.approx((1 + 1 + 4) / 3)


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


class FakeEnvs:
    """Env 0 terminates after 3 steps (reward 1 each), env 1 is truncated after 2 (reward 5)."""

    num_envs = 2
    terminates_at, truncated_at = 3, 2
    # Env 0's reward once its episode is over (the next episode's, were it stepped on).
    reward_after_termination = 1.0

    def reset(self):
        self._t = 0
        return self._step(StepType.FIRST, [0.0, 0.0], [1.0, 1.0])

    def step(self, action):
        self._t += 1
        t = self._t
        step_type = [
            StepType.LAST if t == self.terminates_at else StepType.MID,
            StepType.LAST if t == self.truncated_at else StepType.MID,
        ]
        discount = [0.0 if t == self.terminates_at else 1.0, 1.0]
        reward = 1.0 if t <= self.terminates_at else self.reward_after_termination
        return self._step(step_type, [reward, 5.0], discount)

    def _step(self, step_type, reward, discount):
        return TimeStep(
            step_type=torch.tensor(step_type, dtype=torch.uint8),
            observation=torch.full((2, 1), float(self._t)),
            reward=torch.tensor(reward),
            discount=torch.tensor(discount),
            env_id=torch.arange(2),
        )


def test_q_and_received_return_over_the_last_steps_of_terminated_episodes_only():
    # Q(s_t, a) = 10 + t; env 0 is at t = 0, 1, 2 before its termination.
    values = TerminationValues(
        lambda obs: (torch.zeros(2, 1), 10 + obs[:, 0]), gamma=0.5, num_steps=2
    )
    results = evaluate(FakeEnvs(), values.policy, values.on_step)
    assert results.returns.tolist() == [3.0, 10.0] and results.lengths.tolist() == [3, 2]
    q, received = values.result()
    # Last 2 steps of env 0: t = 1, 2 with Q 11, 12 and returns 1 + 0.5 * 1 = 1.5 and 1.
    assert q == pytest.approx(11.5) and received == pytest.approx(1.25)


def test_no_termination_gives_no_figure():
    class Truncated(FakeEnvs):
        """Both envs end by a time limit (discount 1)."""

        def _step(self, step_type, reward, discount):
            return super()._step(step_type, reward, [1.0, 1.0])

    values = TerminationValues(lambda obs: (torch.zeros(2, 1), np.zeros(2)), 0.99)
    evaluate(Truncated(), values.policy, values.on_step)
    assert values.result() is None


def test_an_evaluation_with_seeds_does_not_depend_on_the_evaluations_before_it():
    from alf_lite.environments import create_environment
    from alf_lite.seeding import eval_env_seeds

    env = create_environment(
        'Pendulum-v1', num_parallel_environments=3, seed=[1, 2, 3], use_subprocesses=False
    )
    policy = lambda observation: torch.full((3, 1), 0.5)  # noqa: E731
    try:
        at_1000 = evaluate(env, policy, seed=eval_env_seeds(0, 3, 1000))
        at_2000 = evaluate(env, policy, seed=eval_env_seeds(0, 3, 2000))
        again = evaluate(env, policy, seed=eval_env_seeds(0, 3, 1000))
        unseeded = evaluate(env, policy)  # continues the envs' generators
    finally:
        env.close()
    assert np.array_equal(again.returns, at_1000.returns)
    assert not np.array_equal(at_2000.returns, at_1000.returns)
    assert not np.array_equal(unseeded.returns, at_1000.returns)


class TerminatesFirstEnvs(FakeEnvs):
    """Env 0 terminates after 12 steps (reward 1 each), then is stepped on with reward 100
    (its next episode) while env 1 runs until it is truncated after 14."""

    terminates_at, truncated_at = 12, 14
    reward_after_termination = 100.0


def test_default_counts_the_last_10_steps_of_a_terminated_episode_and_nothing_after_its_end():
    # Q(s_t, a) = 10 + t, env 0 acts at t = 0 .. 11 before its termination.
    values = TerminationValues(lambda obs: (torch.zeros(2, 1), 10 + obs[:, 0]), gamma=1.0)
    results = evaluate(TerminatesFirstEnvs(), values.policy, values.on_step)
    assert results.lengths.tolist() == [12, 14]
    q, received = values.result()
    # The last 10 steps, t = 2 .. 11: Q 12 .. 21, mean 16.5; with gamma 1 the return
    # received from there is 10, 9, .., 1 (reward 1 a step until the end), mean 5.5.
    # Env 0's Q or reward at t = 12, 13 would shift them (to Q 14 .. 23, returns with 100s).
    assert q == pytest.approx(16.5) and received == pytest.approx(5.5)


def test_act_and_value_gives_the_q_of_the_action_it_gives():
    from alf_lite.trainer import act_and_value

    class Doubler:
        """The action is twice the observation; Q is the sum of observation and action."""

        def predict_step(self, observation):
            return 2 * observation

        def value_step(self, observation, action):
            return (observation + action).sum(-1)

    observation = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    action, q = act_and_value(Doubler(), torch.device('cpu'), observation)
    assert action.tolist() == [[2.0, 4.0], [6.0, 8.0]]
    # 1 + 2 + 2 + 4 and 3 + 4 + 6 + 8; the Q of a zero action would be 3 and 7.
    assert q.tolist() == [9.0, 21.0]


class ScriptedEnvs:
    """Env ``i`` plays ``script[i]``, one ``(step_type, reward, discount)`` per step, then
    goes on with MID steps of reward 100 (a next episode) until the evaluation ends.

    The observation is the step count ``t``, so a critic ``Q = 10 + t`` tells the steps apart.
    """

    def __init__(self, *script):
        self.num_envs = len(script)
        self._script = script

    def reset(self):
        self._t = 0
        first = [(StepType.FIRST, 0.0, 1.0)] * self.num_envs
        return self._time_step(first)

    def step(self, action):
        self._t += 1
        return self._time_step(
            [
                s[self._t - 1] if self._t <= len(s) else (StepType.MID, 100.0, 1.0)
                for s in self._script
            ]
        )

    def _time_step(self, steps):
        step_type, reward, discount = zip(*steps)
        return TimeStep(
            torch.tensor(step_type, dtype=torch.uint8),
            torch.full((self.num_envs, 1), float(self._t)),
            torch.tensor(reward),
            torch.tensor(discount),
            torch.arange(self.num_envs),
        )


def q_of_step_count(observation):
    return torch.zeros(len(observation), 1), 10 + observation[:, 0]


def test_the_means_pool_the_counted_steps_of_every_terminated_episode():
    # Env 0 terminates after 3 steps with rewards 1, 2, 8; env 1 after 1 step with reward 3.
    values = TerminationValues(q_of_step_count, gamma=0.5, num_steps=2)
    evaluate(
        ScriptedEnvs([(M, 1.0, 1.0), (M, 2.0, 1.0), (L, 8.0, 0.0)], [(L, 3.0, 0.0)]),
        values.policy,
        values.on_step,
    )
    q, received = values.result()
    # Env 0, t = 1, 2: Q 11, 12; returns 2 + 0.5 * 8 = 6 and 8. Env 1, t = 0: Q 10, return 3.
    # The mean is over these 3 steps, not over the 2 episodes' means (10.75 and 5).
    assert q == pytest.approx((11 + 12 + 10) / 3)
    assert received == pytest.approx((6 + 8 + 3) / 3)


def test_an_env_truncated_earlier_is_not_counted_when_its_next_episode_terminates():
    # Env 1 is truncated at its first step, then (auto-reset) plays a next
    # episode that terminates at step 4 while env 0 still runs: that episode is
    # no part of this evaluation. Env 0 terminates after 5 steps of reward 1.
    values = TerminationValues(q_of_step_count, gamma=1.0, num_steps=2)
    results = evaluate(
        ScriptedEnvs(
            [(M, 1.0, 1.0)] * 4 + [(L, 1.0, 0.0)],
            [(L, 5.0, 1.0), (F, 0.0, 1.0), (M, 50.0, 1.0), (L, 50.0, 0.0)],
        ),
        values.policy,
        values.on_step,
    )
    assert results.lengths.tolist() == [5, 1]
    q, received = values.result()
    # Env 0 only, t = 3, 4: Q 13, 14; with gamma 1 the returns received are 2 and 1.
    assert q == pytest.approx(13.5) and received == pytest.approx(1.5)


class SeededEnvs:
    """In-process envs whose episode, reset with seed ``s``, lasts ``s`` steps of reward 1
    and ends by termination when ``s`` is even (else by a time limit); the observation is
    the step count. Records each reset's seeds and each step's active envs."""

    use_subprocesses = False

    def __init__(self, num_envs):
        self.num_envs = num_envs
        self.resets, self.steps = [], []

    def reset(self, seed):
        assert len(seed) == self.num_envs
        self.resets.append(list(seed))
        self._length, self._t = np.array(seed), np.zeros(self.num_envs, dtype=np.int64)
        self._step_type = np.full(self.num_envs, StepType.FIRST, np.uint8)
        return self._time_step(np.zeros(self.num_envs))

    def step(self, action, active):
        self.steps.append(active.copy())
        self._t[active] += 1
        ends = active & (self._t == self._length)
        self._step_type[active] = np.where(ends[active], StepType.LAST, StepType.MID)
        return self._time_step(np.where(active, 1.0, 0.0))

    def _time_step(self, reward):
        last = self._step_type == StepType.LAST
        return TimeStep(
            torch.from_numpy(self._step_type.copy()),
            torch.from_numpy(self._t.astype(np.float32)[:, None]),
            torch.tensor(reward, dtype=torch.float32),
            torch.tensor(np.where(last & (self._length % 2 == 0), 0.0, 1.0), dtype=torch.float32),
            torch.arange(self.num_envs),
        )


def test_more_seeds_than_envs_play_one_episode_per_seed_in_rounds():
    seeds = [3, 6, 4, 1, 2]
    figures = []
    for num_envs in (5, 2):
        envs = SeededEnvs(num_envs)
        values = TerminationValues(q_of_step_count, gamma=0.5, num_steps=2)
        results = evaluate(envs, values.policy, values.on_step, seeds)
        # Each seed's episode, in the order of the seeds, whatever the envs it shared a round with.
        assert results.lengths.tolist() == seeds and results.returns.tolist() == seeds
        figures.append(values.result())
    # Rounds of 2: the last one's second env is reset (with the last seed) but never stepped.
    assert envs.resets == [[3, 6], [4, 1], [2, 2]]
    assert not any(active[1] for active in envs.steps[-2:]) and envs.steps[-2][0]
    # The terminated episodes (seeds 6, 4, 2) count in every round, and only they.
    q, received = figures[0]
    assert figures[1] == (q, received)
    # Their last 2 steps: t = 4, 5; 2, 3; 0, 1; returns 1 + 0.5 and 1.
    assert q == pytest.approx(10 + (4 + 5 + 2 + 3 + 0 + 1) / 6) and received == 1.25


def test_a_round_of_fewer_episodes_than_env_processes_is_refused():
    class Processes(SeededEnvs):
        use_subprocesses = True

    envs = Processes(2)
    with pytest.raises(ValueError, match='3 episodes in rounds of 2 env processes'):
        evaluate(envs, lambda observation: torch.zeros(2, 1), seed=[2, 2, 2])
    assert envs.resets == []  # refused before any round


def test_a_batch_that_does_not_say_it_steps_in_process_is_taken_for_env_processes():
    class Envs:
        """``num_envs``, ``reset`` and ``step`` only: its envs may be stepped all together, and
        one past a short round's episodes would play the round's last episode again."""

        num_envs = 2

        def reset(self, seed):
            raise AssertionError('reset')

        def step(self, action):
            raise AssertionError('step')

    with pytest.raises(ValueError, match='3 episodes in rounds of 2 env processes'):
        evaluate(Envs(), lambda observation: torch.zeros(2, 1), seed=[2, 2, 2])
