"""The collector on the CPU: the rows it stores, the actions the envs get, episode counts.

Collection with CUDA graphs is tested in test_cuda.py; its state across a
resume in test_trainer.py.
"""

import gymnasium
import numpy as np
import pytest
import torch

from alf_lite.collector import Collector
from alf_lite.data import StepType
from alf_lite.environments import EpisodeReplayError, create_environment, episode_replay
from alf_lite.episode_stats import EpisodeStats
from alf_lite.replay_buffer import ReplayBuffer
from test_environments import EchoEnv  # registers the alf_test/ envs


class ListedPolicy(torch.nn.Module):
    """Acts the given actions one after another; notes its mode and time step at each call."""

    def __init__(self, actions):
        super().__init__()
        self._actions = list(actions)
        self.calls = []  # (training, time step)

    def rollout_step(self, time_step):
        self.calls.append((self.training, time_step))
        return self._actions[len(self.calls) - 1].clone()

    def rollout_state(self):
        return {}

    def load_rollout_state(self, state, num_envs):
        pass


def make_collector(env, policy, initial_collect_steps=0):
    buffer = ReplayBuffer(env.num_envs, 100, env.observation_dim, env.action_dim)
    stats = EpisodeStats(env.num_envs)
    return Collector(env, policy, buffer, initial_collect_steps, stats), buffer, stats


def collect(collector, num_steps, env_steps=0):
    """``num_steps`` steps of collection from ``env_steps``; returns the env steps after them."""
    for _ in range(num_steps):
        collector.send(env_steps)
        env_steps += collector.receive()
    return env_steps


def rows(buffer, num_steps):
    """The first ``num_steps`` rows of each env: field -> ``[num_envs, num_steps, ...]``."""
    return {name: field[:, :num_steps] for name, field in buffer.storage.items()}


def test_each_row_is_the_step_an_env_reached_and_the_action_taken_there():
    # Pendulum truncated after 3 steps: LAST (discount 1), then its reset as
    # FIRST. Raw gymnasium envs step alongside, with the actions mapped from
    # [-1, 1] to Pendulum's [-2, 2] torque by hand.
    num_envs, num_steps = 2, 9
    generator = torch.Generator().manual_seed(0)
    actions = [torch.rand(num_envs, 1, generator=generator) * 2 - 1 for _ in range(num_steps)]
    policy = ListedPolicy(actions)
    with create_environment('Pendulum-v1', num_envs, max_episode_steps=3) as env:
        collector, buffer, _ = make_collector(env, policy)
        collector.reset([10, 11])
        assert collect(collector, num_steps) == num_steps * num_envs
    stored = rows(buffer, num_steps)
    assert [training for training, _ in policy.calls] == [False] * num_steps
    for i in range(num_envs):
        raw = gymnasium.make('Pendulum-v1', max_episode_steps=3)
        obs, _ = raw.reset(seed=10 + i)
        step_type, reward, discount = StepType.FIRST, 0.0, 1.0
        for t in range(num_steps):
            assert stored['step_type'][i, t].item() == step_type, (i, t)
            assert torch.equal(stored['observation'][i, t], torch.tensor(obs, dtype=torch.float32))
            assert torch.equal(stored['action'][i, t], actions[t][i])
            assert stored['reward'][i, t].item() == np.float32(reward)
            assert stored['discount'][i, t].item() == discount
            if step_type == StepType.LAST:
                obs, _ = raw.reset()
                step_type, reward, discount = StepType.FIRST, 0.0, 1.0
            else:
                obs, reward, terminated, truncated, _ = raw.step(2.0 * actions[t][i].numpy())
                assert not terminated
                step_type = StepType.LAST if truncated else StepType.MID
        raw.close()
    assert (stored['step_type'] == StepType.LAST).sum() == 2 * num_envs


@pytest.mark.parametrize('initial_collect_steps', [3, 4])
def test_uniform_random_actions_until_initial_collect_steps_then_the_policys(
    initial_collect_steps,
):
    # 2 envs, initial_collect_steps 4 (or 3, rounded up to a multiple of 2 envs): the
    # steps at 0 and 2 env steps act at random, those at 4 and 6 as the policy says.
    # Echo observes the action it got.
    low, high = EchoEnv().action_space.low, EchoEnv().action_space.high
    policy_action = torch.tensor([[0.5, -0.5], [-1.0, 1.0]])
    policy = ListedPolicy([policy_action] * 2)
    with create_environment('alf_test/Echo-v0', 2) as env:
        collector, buffer, _ = make_collector(env, policy, initial_collect_steps)
        collector.reset([0, 1])
        collect(collector, 4)
        last = collector._time_step
    stored = rows(buffer, 4)
    action = stored['action']
    assert torch.equal(action[:, 2], policy_action) and torch.equal(action[:, 3], policy_action)
    assert len(policy.calls) == 2
    assert torch.equal(policy.calls[0][1].observation, stored['observation'][:, 2])
    random = action[:, :2]
    assert random.min() >= -1 and random.max() <= 1
    assert not torch.equal(random[:, 0], random[:, 1])
    # Each step observes the action of the step before, mapped to the env's bounds.
    received = torch.cat([stored['observation'][:, 1:], last.observation[:, None]], dim=1)
    expected = low + (action.numpy() + 1) * (high - low) / 2
    np.testing.assert_allclose(received.numpy(), expected, rtol=1e-6)


def test_episodes_counted_after_a_reset_start_at_the_reset():
    # Episodes of 3 steps, reward 1 each. Two steps into the first episode the
    # envs are reset: the episode that then ends has return 3 and length 3.
    policy = ListedPolicy([torch.zeros(2, 1)] * 6)
    with create_environment('alf_test/Countdown3-v0', 2) as env:
        collector, _, stats = make_collector(env, policy)
        collector.reset([0, 1])
        collect(collector, 2)
        assert list(stats.recent_returns) == []
        collector.reset([2, 3])
        collect(collector, 4)
    assert list(stats.recent_returns) == [3.0, 3.0]
    assert list(stats.recent_lengths) == [3, 3]


def test_rows_keep_each_steps_discount_and_the_policy_gets_the_step_types_stored():
    # Countdown episodes of 2 to 4 steps cut at 3: the observation [t, length]
    # tells a termination (t == length: LAST, discount 0) from a truncation
    # (t == 3 < length: LAST, discount 1). The policy must get each env's real
    # step type, FIRST included (it restarts its OU noise there), both after a
    # LAST and after the reset midway, which cuts episodes short.
    num_envs, num_steps, reset_at = 2, 16, 7
    policy = ListedPolicy([torch.zeros(num_envs, 1)] * num_steps)
    countdown = dict(min_length=2, max_length=4)
    with create_environment(
        'alf_test/Countdown-v0', num_envs, max_episode_steps=3, env_kwargs=countdown
    ) as env:
        collector, buffer, _ = make_collector(env, policy)
        collector.reset([0, 1])
        collect(collector, reset_at)
        collector.reset([2, 3])
        collect(collector, num_steps - reset_at)
    stored = rows(buffer, num_steps)
    t, length = stored['observation'][..., 0], stored['observation'][..., 1]
    terminated, truncated = t == length, (t == 3) & (length > 3)
    assert terminated.any() and truncated.any()
    step_type = torch.full_like(stored['step_type'], StepType.MID)
    step_type[t == 0] = StepType.FIRST
    step_type[terminated | truncated] = StepType.LAST
    assert torch.equal(stored['step_type'], step_type)
    assert (step_type[:, reset_at - 1] == StepType.MID).any()  # a reset cut an episode short
    assert torch.equal(stored['discount'], (~terminated).float())
    given = torch.stack([time_step.step_type for _, time_step in policy.calls], dim=1)
    assert torch.equal(given, stored['step_type'])


def pendulum_collection_state(num_steps=4):
    """``Collector.state()`` after ``num_steps`` steps of 2 Pendulum envs seeded 10 and 11."""
    policy = ListedPolicy([torch.full((2, 1), 0.5)] * num_steps)
    with create_environment('Pendulum-v1', 2) as env:
        collector, _, _ = make_collector(env, policy)
        collector.reset([10, 11])
        collect(collector, num_steps)
        return collector.state()


def one_element_of_one_envs_observation(time_step):
    time_step['observation'][1, 2] += 1


def a_termination_of_env_0(time_step):
    time_step['discount'][0] = 0.0


def reward_as_float64(time_step):
    time_step['reward'] = time_step['reward'].double()


def reward_on_the_meta_device(time_step):
    time_step['reward'] = torch.empty(2, device='meta')


@pytest.mark.parametrize(
    'damage, message',
    [
        (
            one_element_of_one_envs_observation,
            r"Environment 'Pendulum-v1' \(env 1 of 2\) replayed its episode to another "
            'observation than the saved one',
        ),
        (
            a_termination_of_env_0,
            r"Environment 'Pendulum-v1' \(env 0 of 2\) replayed its episode to another discount",
        ),
        (
            reward_as_float64,
            r'the saved reward is a torch.float64 tensor of shape \(2,\), not torch.float32',
        ),
        (reward_on_the_meta_device, 'the collection state has as time_step the dict'),
    ],
    ids=['observation', 'discount', 'dtype', 'meta'],
)
def test_a_restore_to_another_time_step_than_the_saved_one_is_refused(damage, message):
    state = pendulum_collection_state()
    with create_environment('Pendulum-v1', 2) as env:
        collector, _, _ = make_collector(env, ListedPolicy([]))
        collector.restore(pendulum_collection_state())
        restored = collector.state()['time_step']
        for name, value in state['time_step'].items():
            assert torch.equal(restored[name], value), name
        damage(state['time_step'])
        with pytest.raises(EpisodeReplayError, match=message):
            make_collector(env, ListedPolicy([]))[0].restore(state)


def test_envs_closed_or_past_what_a_record_holds_leave_no_collection_state(monkeypatch):
    policy = ListedPolicy([torch.zeros(2, 1)] * 3)
    with create_environment('Pendulum-v1', 2) as env:
        collector, _, _ = make_collector(env, policy)
        collector.reset([10, 11])
        collect(collector, 2)
        assert collector.state() is not None
        monkeypatch.setattr(episode_replay, 'MAX_RECORDED_STEPS', 2)
        collect(collector, 1)
        assert collector.state() is None
        monkeypatch.undo()
        collector.reset([12, 13])
        assert collector.state() is not None
    assert collector.state() is None
