"""An in-process evaluation steps only the envs whose episode runs, and gives the same results."""

import gymnasium
import numpy as np
import pytest
import torch

from alf_lite.data import StepType
from alf_lite.environments import BatchedEnvironment, create_environment
from alf_lite.evaluation import TerminationValues, evaluate
from alf_lite.seeding import eval_env_seeds

NUM_ENVS = 10


def evaluate_stepping_every_env(env, policy, on_step, seed):
    """``evaluate`` as it was: every env is stepped until the last episode ends."""
    time_step = env.reset(seed=seed)
    on_step(time_step)
    returns, lengths = np.zeros(env.num_envs), np.zeros(env.num_envs, dtype=np.int64)
    finished = np.zeros(env.num_envs, dtype=bool)
    while not finished.all():
        with torch.no_grad():
            action = policy(time_step.observation)
        time_step = env.step(action)
        on_step(time_step)
        running = ~finished
        returns[running] += np.asarray(time_step.reward)[running]
        lengths[running] += 1
        finished |= np.asarray(time_step.step_type) == StepType.LAST
    return returns, lengths


class Recorder:
    """What the policy and ``on_step`` see of each env's counted episode, row by row.

    Wraps ``TerminationValues``, as the trainer's evaluation does.
    """

    def __init__(self, act, num_envs):
        self.values = TerminationValues(act, gamma=0.99)
        self.seen = [[] for _ in range(num_envs)]
        self._ended = np.zeros(num_envs, dtype=bool)

    def policy(self, observation):
        for i in np.flatnonzero(~self._ended):
            self.seen[i].append(('observation', observation[i].numpy().tobytes()))
        return self.values.policy(observation)

    def on_step(self, time_step):
        self.values.on_step(time_step)
        for i in np.flatnonzero(~self._ended):
            row = tuple(field[i].numpy().tobytes() for field in time_step)
            self.seen[i].append(('time step', row))
        self._ended |= np.asarray(time_step.step_type) == StepType.LAST


def hopper_policy():
    """An untrained actor and critic head on Hopper-v5's 11 observations: ``(action, Q)``.

    Each env's row gets a bias of its own, so that the hoppers fall at different steps.
    """
    torch.manual_seed(0)
    network = torch.nn.Sequential(
        torch.nn.Linear(11, 64), torch.nn.Tanh(), torch.nn.Linear(64, 3 + 1)
    )
    bias = torch.linspace(-1, 1, NUM_ENVS)[:, None]

    def act(observation):
        out = network(observation)
        return torch.tanh(2 * out[:, :3] + bias), out[:, 3].numpy()

    return act


class CountingEnv(gymnasium.Env):
    """Ends its episode (terminated) after ``length`` steps and counts the steps it took."""

    observation_space = gymnasium.spaces.Box(-1e3, 1e3, shape=(1,), dtype=np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self, length):
        self.length = length
        self.steps_taken = 0
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.steps_taken += 1
        self._t += 1
        return np.array([self._t], np.float32), 1.0, self._t == self.length, False, {}


def counting_envs(lengths, use_subprocesses=False):
    envs = [CountingEnv(length) for length in lengths]
    batch = BatchedEnvironment(
        [lambda e=e: e for e in envs], use_subprocesses=use_subprocesses, name='counting'
    )
    return envs, batch


def test_leaving_finished_envs_unstepped_changes_no_result_bit_for_bit():
    """Returns, lengths, TerminationValues, and every row of a counted episode that the policy
    and on_step see are the same bytes as when every env is stepped until the last one ends."""
    seeds = eval_env_seeds(0, NUM_ENVS, 1000)
    results = {}
    with create_environment(
        'Hopper-v5', NUM_ENVS, use_subprocesses=False, max_episode_steps=150, label='eval env'
    ) as env:
        steps = np.zeros(NUM_ENVS, dtype=np.int64)
        for i, named in enumerate(env._env.envs):
            real_step = named.step

            def counted(action, real_step=real_step, i=i):
                steps[i] += 1
                return real_step(action)

            named.step = counted
        for name in ('every env', 'running envs'):
            steps[:] = 0
            recorder = Recorder(hopper_policy(), NUM_ENVS)
            if name == 'every env':
                returns, lengths = evaluate_stepping_every_env(
                    env, recorder.policy, recorder.on_step, seeds
                )
            else:
                got = evaluate(env, recorder.policy, recorder.on_step, seeds)
                returns, lengths = got.returns, got.lengths
            results[name] = (returns, lengths, recorder, steps.sum())
    (returns, lengths, before, steps_before) = results['every env']
    (new_returns, new_lengths, after, steps_after) = results['running envs']
    assert len(set(lengths.tolist())) > 3, lengths  # episodes of different lengths
    assert before.values.result() is not None  # some episodes terminated (falls)
    assert returns.tobytes() == new_returns.tobytes()
    assert lengths.tolist() == new_lengths.tolist()
    assert before.values.result() == after.values.result()
    assert before.seen == after.seen
    # Resets included, every env was stepped for as long as the longest episode.
    assert steps_after == lengths.sum() < steps_before


def test_an_env_whose_episode_ended_is_stepped_no_more():
    lengths = [2, 7, 4, 1]
    envs, batch = counting_envs(lengths)
    with batch:
        results = evaluate(batch, lambda observation: torch.zeros(len(observation), 1))
    assert results.lengths.tolist() == lengths
    assert [e.steps_taken for e in envs] == lengths


def test_the_row_of_an_env_left_out_repeats_its_last_step_and_its_next_step_goes_on():
    envs, batch = counting_envs([1, 3])
    action = torch.zeros(2, 1)
    with batch:
        batch.reset(seed=[0, 1])
        first = batch.step(action)  # env 0 terminates
        assert first.step_type.tolist() == [StepType.LAST, StepType.MID]
        left_out = batch.step(action, active=np.array([False, True]))
        assert [e.steps_taken for e in envs] == [1, 2]
        assert left_out.step_type.tolist() == [StepType.LAST, StepType.MID]
        assert left_out.observation[:, 0].tolist() == [1.0, 2.0]
        assert left_out.reward.tolist() == [1.0, 1.0] and left_out.discount.tolist() == [0, 1]
        # Env 0 goes on from its LAST: its next step is the reset of its next episode.
        after = batch.step(action)
        assert after.step_type.tolist() == [StepType.FIRST, StepType.LAST]
        assert [e.steps_taken for e in envs] == [1, 3]
        assert after.observation[:, 0].tolist() == [0.0, 3.0] and after.reward[0] == 0


@pytest.mark.parametrize('ended_by', ['termination', 'truncation'])
def test_an_env_stepped_alone_after_its_last_step_resets_once_and_goes_on(ended_by):
    # Env 0's episodes end at their 2nd step (terminated, or truncated by a time limit);
    # env 1 is left out of every step.
    first = (
        CountingEnv(2)
        if ended_by == 'termination'
        else gymnasium.wrappers.TimeLimit(CountingEnv(100), max_episode_steps=2)
    )
    envs = [first, CountingEnv(100)]
    batch = BatchedEnvironment([lambda e=e: e for e in envs], use_subprocesses=False)
    active = np.array([True, False])
    with batch:
        batch.reset(seed=[0, 1])
        steps = [batch.step(torch.zeros(2, 1), active=active) for _ in range(6)]
    F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
    assert [s.step_type[0].item() for s in steps] == [M, L, F, M, L, F]
    assert [s.observation[0, 0].item() for s in steps] == [1, 2, 0, 1, 2, 0]
    assert [s.reward[0].item() for s in steps] == [1, 1, 0, 1, 1, 0]
    end_discount = 0.0 if ended_by == 'termination' else 1.0
    assert [s.discount[0].item() for s in steps] == [1, end_discount, 1, 1, end_discount, 1]
    assert envs[0].unwrapped.steps_taken == 4 and envs[1].steps_taken == 0


def test_the_action_of_an_env_left_out_is_ignored_even_when_it_is_not_finite():
    envs, batch = counting_envs([3, 3])
    with batch:
        batch.reset()
        batch.step(torch.tensor([[0.5], [float('nan')]]), active=np.array([True, False]))
    assert [e.steps_taken for e in envs] == [1, 0]


def test_env_processes_cannot_leave_an_env_out():
    with create_environment('alf_lite/PointTarget-v0', 2, use_subprocesses=True) as env:
        env.reset()
        with pytest.raises(ValueError, match=r'step\(active=\.\.\.\) steps some envs only in'):
            env.step(torch.zeros(2, 1), active=np.array([True, False]))
