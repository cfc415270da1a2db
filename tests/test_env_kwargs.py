"""``create_environment.env_kwargs``: an env's constructor arguments from gin, checked first."""

import multiprocessing
import re

import gin
import gymnasium
import numpy as np
import pytest
import torch

from alf_lite.config import parse_config
from alf_lite.data import StepType
from alf_lite.environments import create_environment
from alf_lite.run_dir import experiment_difference
from cli_helpers import PENDULUM, TINY, assert_ok, run_train, train_command


class ScaledEnv(gymnasium.Env):
    """Its observation is ``scale``; counts the instances made (in this process)."""

    observation_space = gymnasium.spaces.Box(-1e3, 1e3, shape=(1,), dtype=np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    made = 0

    def __init__(self, scale=1.0, offset=0.0):
        ScaledEnv.made += 1
        self._value = np.array([scale + offset], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._value, {}

    def step(self, action):
        return self._value, 0.0, False, False, {}


class ConstantEnv(gymnasium.Env):
    """Its observation is 1; it has no ``__init__`` of its own, so it takes no argument."""

    observation_space = ScaledEnv.observation_space
    action_space = ScaledEnv.action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.ones(1, np.float32), {}

    def step(self, action):
        return np.ones(1, np.float32), 0.0, False, False, {}


def scaled_env_of_any_kwargs(**kwargs):
    return ScaledEnv(**kwargs)


gymnasium.register('alf_test/Scaled-v0', entry_point=ScaledEnv, max_episode_steps=10)
gymnasium.register('alf_test/Constant-v0', entry_point=ConstantEnv, max_episode_steps=10)
gymnasium.register(
    'alf_test/ScaledAnyKwargs-v0', entry_point=scaled_env_of_any_kwargs, max_episode_steps=10
)
gymnasium.register(
    'alf_test/ScaledBy3-v0', entry_point=ScaledEnv, kwargs={'scale': 3.0}, max_episode_steps=10
)


def steps_until_the_end(env, num_steps):
    """The step types of ``num_steps`` steps of env 0 under a full-power action."""
    env.reset(seed=0)
    action = torch.ones(env.num_envs, env.action_dim)
    return [int(env.step(action).step_type[0]) for _ in range(num_steps)]


def test_a_hopper_that_may_be_unhealthy_does_not_end_its_episode_when_it_falls():
    with create_environment('Hopper-v5', max_episode_steps=60) as env:
        falls = steps_until_the_end(env, 60)
    assert StepType.LAST in falls[:40]  # terminated: it fell
    with create_environment(
        'Hopper-v5', max_episode_steps=60, env_kwargs={'terminate_when_unhealthy': False}
    ) as env:
        kept = steps_until_the_end(env, 60)
    assert kept == [StepType.MID] * 59 + [StepType.LAST]  # the time limit only


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_no_reset_noise_gives_every_seed_the_same_first_observation(use_subprocesses):
    def first_observations(**env_kwargs):
        with create_environment(
            'Hopper-v5', 3, seed=[1, 2, 3], use_subprocesses=use_subprocesses, **env_kwargs
        ) as env:
            return env.reset().observation

    noisy = first_observations()
    assert not torch.equal(noisy[0], noisy[1])
    still = first_observations(env_kwargs={'reset_noise_scale': 0.0})
    assert torch.equal(still[0], still[1]) and torch.equal(still[0], still[2])


def test_env_processes_started_by_spawn_get_the_kwargs():
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method('spawn', force=True)
    try:
        with create_environment(
            'alf_test/Scaled-v0', 2, use_subprocesses=True, env_kwargs={'scale': 4.0}
        ) as env:
            assert env.reset().observation.tolist() == [[4.0], [4.0]]
    finally:
        multiprocessing.set_start_method(before, force=True)


def test_the_train_and_eval_envs_of_the_trainer_get_the_gin_bound_kwargs(tmp_path):
    from alf_lite.trainer import Trainer, TrainerConfig

    parse_config(
        [str(PENDULUM)],
        TINY
        + [
            "create_environment.env_name = 'alf_test/Scaled-v0'",
            "create_environment.env_kwargs = {'scale': 2.0, 'offset': 0.5}",
            'TrainerConfig.num_eval_episodes = 2',
        ],
    )
    try:
        with Trainer(TrainerConfig(), str(tmp_path / 'run')) as trainer:
            assert trainer._env.reset().observation.tolist() == [[2.5]]
            assert trainer._eval_env.reset().observation.tolist() == [[2.5], [2.5]]
    finally:
        gin.clear_config()


@pytest.mark.parametrize(
    'env_name, key, closest',
    [
        ('Hopper-v5', 'terminate_when_unhealty', "Closest valid keys: 'terminate_when_unhealthy'"),
        ('alf_test/Scaled-v0', 'Scale', "Closest valid keys: 'scale'"),
        # A base class's argument that the subclass gives itself (MuJoCo's model file).
        ('Hopper-v5', 'model_path', None),
        ('HopperBullet-v0', 'power', 'may set are: none.'),
        ('alf_test/Constant-v0', 'scale', 'may set are: none.'),
    ],
)
def test_a_key_the_env_does_not_take_is_refused_naming_it_and_the_closest(env_name, key, closest):
    made = ScaledEnv.made
    with pytest.raises(ValueError) as refused:
        create_environment(env_name, env_kwargs={key: 1.0})
    message = str(refused.value)
    assert message.startswith(
        f"create_environment.env_kwargs has the key '{key}', which no constructor argument of "
        f"'{env_name}' ("
    ), message
    if closest is not None:
        assert closest in message
    assert ScaledEnv.made == made  # refused before any env was built


def test_an_entry_point_that_takes_any_keyword_gets_any_key():
    with create_environment('alf_test/ScaledAnyKwargs-v0', env_kwargs={'offset': 1.0}) as env:
        assert env.reset().observation.tolist() == [[2.0]]


def test_arguments_mujoco_envs_hand_to_their_base_class_are_taken():
    with create_environment('Hopper-v5', 2, env_kwargs={'width': 64}) as env:
        assert env._env.get_attr('width') == (64, 64)


@pytest.mark.parametrize('key', ['max_episode_steps', 'render_mode'])
def test_a_key_create_environment_sets_itself_is_refused_naming_its_parameter(key):
    with pytest.raises(ValueError, match=f'set create_environment.{key} instead'):
        create_environment('alf_test/ScaledAnyKwargs-v0', env_kwargs={key: 5})


@pytest.mark.parametrize('env_name', ['alf_test/ScaledAnyKwargs-v0', 'Pendulum-v1'])
def test_a_key_gymnasium_make_takes_itself_is_refused_also_where_any_key_is_taken(env_name):
    # gymnasium.make would keep it: an env of any keyword would never see it.
    made = ScaledEnv.made
    with pytest.raises(ValueError) as refused:
        create_environment(env_name, env_kwargs={'disable_env_checker': True})
    assert str(refused.value).startswith(
        f"create_environment.env_kwargs sets 'disable_env_checker' of '{env_name}', which "
        "gymnasium.make takes itself: it would never reach the env's constructor."
    )
    assert ScaledEnv.made == made


@pytest.mark.parametrize(
    'env_name, key, value',
    [('alf_test/ScaledBy3-v0', 'scale', 3.0), ('HopperBullet-v0', 'robot', "'hopper'")],
)
def test_a_key_the_id_is_registered_with_is_refused(env_name, key, value):
    with pytest.raises(ValueError) as refused:
        create_environment(env_name, env_kwargs={key: 1.0})
    assert str(refused.value).startswith(
        f"create_environment.env_kwargs sets '{key}' of '{env_name}', which the id's "
        f'registration sets ({key}={value})'
    )


@pytest.mark.parametrize('env_kwargs', [[('scale', 2.0)], {1: 2.0}])
def test_env_kwargs_must_be_a_dict_of_names(env_kwargs):
    with pytest.raises(ValueError, match='create_environment.env_kwargs must be a dict'):
        create_environment('alf_test/Scaled-v0', env_kwargs=env_kwargs)


def test_a_resume_with_other_env_kwargs_is_another_experiment(tmp_path):
    def config(env_kwargs):
        parse_config([str(PENDULUM)], [f'create_environment.env_kwargs = {env_kwargs}'])
        try:
            return gin.config_str()
        finally:
            gin.clear_config()

    (tmp_path / 'config.gin').write_text(config({'g': 9.0}))
    assert experiment_difference(str(tmp_path), config({'g': 9.0})) is None
    difference = experiment_difference(str(tmp_path), config({'g': 12.0}))
    assert difference is not None and 'create_environment.env_kwargs' in difference


# --- through the train command ------------------------------------------------------------

HOPPER_RUN = TINY + [
    "create_environment.env_name = 'Hopper-v5'",
    'create_environment.max_episode_steps = 150',
    'TrainerConfig.num_env_steps = 300',
    'TrainerConfig.summary_interval = 300',
    'TrainerConfig.eval_interval = 300',
    'TrainerConfig.num_eval_episodes = 2',
]


def test_train_builds_its_envs_with_the_kwargs(tmp_path, read_progress):
    root_dir = tmp_path / 'run'
    kwargs = "create_environment.env_kwargs = {'terminate_when_unhealthy': False}"
    assert_ok(run_train(train_command(root_dir, [PENDULUM], HOPPER_RUN + [kwargs])))
    _, rows = read_progress(root_dir / 'progress.csv')
    # Random actions (the first 100 steps) and the untrained policy make a hopper fall
    # within tens of steps; none of these episodes ends before the time limit.
    assert [r['train/AverageEpisodeLength'] for r in rows] == ['', '150.0']
    assert [r['eval/AverageEpisodeLength'] for r in rows] == ['150.0', '150.0']
    assert kwargs.replace(' ', '') in (root_dir / 'config.gin').read_text().replace(' ', '')


def test_train_refuses_a_key_the_env_does_not_take_in_one_line_and_writes_nothing(tmp_path):
    root_dir = tmp_path / 'experiments' / 'run'
    kwargs = "create_environment.env_kwargs = {'ctrl_cost_wieght': 0.05}"
    result = run_train(train_command(root_dir, [PENDULUM], HOPPER_RUN + [kwargs]))
    assert result.returncode == 2, result.stderr[-4000:]
    assert 'Traceback' not in result.stderr, result.stderr[-4000:]
    errors = [line for line in result.stderr.splitlines() if 'error' in line.lower()]
    assert len(errors) == 1, result.stderr[-4000:]
    assert re.fullmatch(
        r"error: create_environment\.env_kwargs has the key 'ctrl_cost_wieght', which no "
        r"constructor argument of 'Hopper-v5' \(.*\) takes\. Closest valid keys: "
        r"'ctrl_cost_weight'\. .*",
        errors[0],
    ), errors[0]
    assert not (tmp_path / 'experiments').exists()


def test_an_entry_point_whose_module_fails_to_import_is_named(tmp_path, monkeypatch):
    # Not only an ImportError: gymnasium raises its own DependencyNotInstalled, say.
    (tmp_path / 'alf_test_broken_env_module.py').write_text(
        "raise RuntimeError('a simulator extra is not installed')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    gymnasium.register(
        'alf_test/BrokenModule-v0',
        entry_point='alf_test_broken_env_module:Env',
        max_episode_steps=5,
    )
    try:
        with pytest.raises(
            ValueError,
            match=r"'alf_test/BrokenModule-v0': cannot load its entry point "
            r"'alf_test_broken_env_module:Env' to check create_environment\.env_kwargs: "
            r'RuntimeError: a simulator extra is not installed',
        ):
            create_environment('alf_test/BrokenModule-v0', env_kwargs={'x': 1})
    finally:
        del gymnasium.registry['alf_test/BrokenModule-v0']
