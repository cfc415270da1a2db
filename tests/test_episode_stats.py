"""train/AverageReturn and train/AverageEpisodeLength: the last 10 training episodes (or
one per env, with more envs), by hand, and what a resume restores of them."""

import pytest
import torch

from alf_lite.data import StepType, TimeStep
from alf_lite.episode_stats import EpisodeStats
from alf_lite.runs import TRAIN_EPISODE_LENGTH, TRAIN_RETURN

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def time_step(step_types, rewards):
    """The ``TimeStep`` of one step of ``len(step_types)`` envs."""
    num_envs = len(step_types)
    return TimeStep(
        step_type=torch.tensor(step_types, dtype=torch.uint8),
        observation=torch.zeros(num_envs, 1),
        reward=torch.tensor(rewards),
        discount=torch.ones(num_envs),
        env_id=torch.arange(num_envs),
    )


def test_scalars_are_the_mean_return_and_length_of_the_last_10_episodes():
    # As the collector gives them: the steps after the reset (not the reset itself);
    # an auto-reset env's step after LAST is FIRST, with reward 0.
    # Env 0: episodes of 1 step (LAST), each followed by its FIRST: 12 of them, the
    # k-th of reward k.
    # Env 1: episodes of 3 steps (MID, MID, LAST) and a FIRST: 6 of them, the j-th of
    # reward 10 * j each step.
    # Every episode's return differs from the others': a window of another size
    # than 10 gives another mean.
    env0 = [step for k in range(1, 13) for step in [(L, float(k)), (F, 0.0)]]
    env1 = [
        step
        for j in range(1, 7)
        for step in [(M, 10.0 * j), (M, 10.0 * j), (L, 10.0 * j), (F, 0.0)]
    ]
    stats = EpisodeStats(num_envs=2)
    for (type0, reward0), (type1, reward1) in zip(env0, env1):
        stats.update(time_step([type0, type1], [reward0, reward1]))
    # Env 0 ends at steps 1, 3, ..., 23; env 1 at steps 3, 7, ..., 23 (after env 0's at
    # the same step). The last 10: env 0's at 13, 15, ..., 23 (its 7th to 12th, length 1)
    # and env 1's at 11, 15, 19, 23 (its 3rd to 6th, returns 90 to 180, length 3).
    # The last 9 or 11 would leave out env 1's at 11 or add env 0's 6th; the last 5
    # give 363 / 5.
    assert stats.scalars() == {
        TRAIN_RETURN: (7 + 8 + 9 + 10 + 11 + 12 + 90 + 120 + 150 + 180) / 10,
        TRAIN_EPISODE_LENGTH: (6 * 1 + 4 * 3) / 10,
    }


@pytest.mark.parametrize('num_envs', [11, 16])
def test_with_more_envs_than_10_the_window_holds_an_episode_of_each(num_envs):
    # Every env's episode ends at one step (a time limit they share), env i's of
    # return i: a window of 10 would average those of the last 10 envs alone.
    stats = EpisodeStats(num_envs=num_envs)
    for step_type in [M, M, L]:
        stats.update(time_step([step_type] * num_envs, [float(i) for i in range(num_envs)]))
    assert stats.scalars() == {
        TRAIN_RETURN: 3 * sum(range(num_envs)) / num_envs,
        TRAIN_EPISODE_LENGTH: 3.0,
    }
    # Then the window is the last num_envs episodes, whichever envs ended them.
    stats.update(time_step([F] * num_envs, [0.0] * num_envs))
    stats.update(time_step([L] + [M] * (num_envs - 1), [100.0] + [0.0] * (num_envs - 1)))
    assert stats.scalars()[TRAIN_RETURN] == (100 + 3 * sum(range(1, num_envs))) / num_envs


def test_a_checkpoints_episodes_replace_those_counted_before():
    stats = EpisodeStats(num_envs=1)
    stats.update(time_step([L], [5.0]))  # an episode of return 5, length 1
    stats.load(recent_returns=[1.0, 2.0], recent_lengths=[3, 4])
    assert stats.scalars() == {TRAIN_RETURN: 1.5, TRAIN_EPISODE_LENGTH: 3.5}


@pytest.mark.parametrize(
    'returns, lengths, message',
    [
        # One env's length would be spread over both by numpy's broadcasting.
        ([7.0], [3], r'running episodes of \(1,\) and \(1,\) envs for \(2,\)'),
        ([7.0, 8.0], [3], r'running episodes of \(2,\) and \(1,\) envs for \(2,\)'),
        # Values no env could have counted (rewards are checked finite).
        ([1.0, float('nan')], [1, 1], 'the running episode of env 1 has the return nan$'),
        ([float('-inf'), 2.0], [1, 1], 'the running episode of env 0 has the return -inf$'),
        ([1.0, 2.0], [1, -1], 'the running episode of env 1 has the length -1$'),
        ([1.0, 2.0], [1.5, 1.0], 'the running episode of env 0 has the length 1.5$'),
        ([1.0, 2.0], [1.0, float('inf')], 'the running episode of env 1 has the length inf$'),
        ([1.0, 2.0], [float('nan'), 1.0], 'the running episode of env 0 has the length nan$'),
        (
            [1.0, 2.0],
            [2.0**64, 1.0],
            r'the running episode of env 0 has the length 1.8446744073709552e\+19$',
        ),
    ],
    ids=[
        'both_of_another_number_of_envs',
        'lengths_of_another_number_of_envs',
        'nan_return',
        'inf_return',
        'negative_length',
        'fractional_length',
        'inf_length',
        'nan_length',
        'length_past_int64',
    ],
)
def test_running_episodes_that_do_not_fit_the_envs_are_refused(returns, lengths, message):
    stats = EpisodeStats(num_envs=2)
    stats.update(time_step([M, M], [1.0, 2.0]))
    other = {'episode_return': torch.tensor(returns), 'episode_length': torch.tensor(lengths)}
    with pytest.raises(ValueError, match=message):
        stats.load_running_state(other)
    # Nothing of it was taken: each env goes on with its own running episode.
    state = stats.running_state()
    assert state['episode_return'].tolist() == [1.0, 2.0]
    assert state['episode_length'].tolist() == [1, 1]


def test_no_scalars_before_the_first_episode_ends():
    # A mean over no episode would be NaN in the summaries.
    stats = EpisodeStats(num_envs=2)
    assert stats.scalars() == {}
    stats.update(time_step([F, F], [0.0, 0.0]))
    stats.update(time_step([M, M], [1.0, 2.0]))
    assert stats.scalars() == {}


def test_running_state_is_a_copy_that_later_steps_leave_as_it_was():
    stats = EpisodeStats(num_envs=1)
    stats.update(time_step([M], [1.0]))
    state = stats.running_state()
    stats.update(time_step([M], [2.0]))
    stats.update(time_step([L], [4.0]))
    assert state['episode_return'].tolist() == [1.0]
    assert state['episode_length'].tolist() == [1]
