"""The batched environment at its edges: env processes not forked, non-finite env outputs,
action ranges beyond their float type, odd entry points, timeouts and action dtypes."""

import fractions
import functools
import multiprocessing
import os
import re
import signal
import time

import gin
import gymnasium
import numpy as np
import psutil
import pytest
import torch
from gymnasium import spaces

import alf_lite.all_configurables  # noqa: F401
from alf_lite.data import StepType
from alf_lite.environments import (
    BatchedEnvironment,
    EnvironmentCrashedError,
    EnvironmentHungError,
    NonFiniteActionError,
    NonFiniteEnvOutputError,
    create_environment,
)
from alf_lite.environments.point_env import PointTargetEnv
from alf_lite.environments.suite_gym import default_use_subprocesses
from alf_lite.environments.watchdog import HUNG_ENV_EXIT_CODE
from cli_helpers import PENDULUM, TINY, run_python, run_train, train_command
from test_episode_replay import SlowEnv


@gin.configurable
class GinBoundEnv(gymnasium.Env):
    """Observes ``[value]``: what gin bound ``value`` to where the env was built (at most 9,
    so that an infinite one is observed as 9)."""

    def __init__(self, value=0.25):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._value = min(float(value), 9.0)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([self._value], dtype=np.float32), {}

    def step(self, action):
        return np.array([self._value], dtype=np.float32), 0.0, False, False, {}


class BadValueEnv(gymnasium.Env):
    """Observes ``[t, 0] * length`` and gets reward ``t`` (t: steps since reset, float64s);
    terminates at step 3.

    The env seeded ``bad_seed`` returns ``value`` as ``field``
    (each odd observation entry, or the reward) at step ``at`` (0: the reset) of
    its ``episode``-th episode.
    """

    def __init__(self, field='observation', value=np.nan, at=2, bad_seed=1, episode=1, length=1):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(2 * length,), dtype=np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._field, self._value, self._at = field, value, at
        self._bad_seed, self._bad_episode, self._length = bad_seed, episode, length
        self._bad_env = False
        self._episode = self._t = 0

    def _output(self):
        bad = self._bad_env and self._episode == self._bad_episode and self._t == self._at
        obs = np.zeros(2 * self._length)
        obs[::2] = self._t
        if bad and self._field == 'observation':
            obs[1::2] = self._value
        reward = self._value if bad and self._field == 'reward' else float(self._t)
        return obs, reward

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._bad_env = seed == self._bad_seed
        self._episode += 1
        self._t = 0
        return self._output()[0], {}

    def step(self, action):
        self._t += 1
        obs, reward = self._output()
        return obs, reward, self._t == 3, False, {}


class EchoEnv(gymnasium.Env):
    """Observes the action it received."""

    def __init__(self, low=-1.0, high=3.0, dtype=np.float32):
        self.action_space = spaces.Box(low, high, shape=(1,), dtype=dtype)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action):
        return np.asarray(action, dtype=np.float64), 0.0, False, False, {}


# A string entry point: an env process that was not forked imports this module when it
# builds the env, after the gin bindings were parsed there.
gymnasium.register(
    'alf_test/GinBound-v0', entry_point=f'{__name__}:GinBoundEnv', max_episode_steps=9
)
gymnasium.register('alf_test/BadValue-v0', entry_point=BadValueEnv, max_episode_steps=9)
gymnasium.register('alf_test/EchoEdges-v0', entry_point=EchoEnv, max_episode_steps=9)
gymnasium.register(
    'alf_test/PartialEntryPoint-v0',
    entry_point=functools.partial(BadValueEnv, length=2),
    max_episode_steps=9,
)
gymnasium.register(
    'alf_test/PartialPointTarget-v0',
    entry_point=functools.partial(PointTargetEnv),
    max_episode_steps=9,
)


def bad_value_env(num_envs=2, use_subprocesses=False, label='env', **kwargs):
    """``num_envs`` ``BadValueEnv(**kwargs)``; with seed 0, env 1 returns the bad value."""
    name = 'alf_test/BadValue-v0'
    return BatchedEnvironment(
        [functools.partial(gymnasium.make, name, **kwargs)] * num_envs,
        use_subprocesses=use_subprocesses,
        name=name,
        label=label,
    )


# --- gin bindings in env processes ---------------------------------------------------------


@pytest.fixture
def start_method(request):
    """Env processes start with ``request.param`` (spawn, forkserver, fork) in this test."""
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method(request.param, force=True)
    try:
        yield request.param
    finally:
        multiprocessing.set_start_method(before, force=True)
        if request.param == 'forkserver':
            # Its server process would outlive the test.
            multiprocessing.forkserver._forkserver._stop()


@pytest.mark.timeout(60)
@pytest.mark.parametrize('start_method', ['spawn', 'forkserver', 'fork'], indirect=True)
def test_gin_bindings_reach_env_processes_whatever_their_start_method(start_method):
    gin.parse_config(['GinBoundEnv.value = 0.5', 'TrainerConfig.num_env_steps = 7'])
    with create_environment('alf_test/GinBound-v0', 1, use_subprocesses=True) as env:
        assert env.reset().observation.tolist() == [[0.5]]
    with create_environment('alf_test/GinBound-v0', 1, use_subprocesses=False) as env:
        assert env.reset().observation.tolist() == [[0.5]]


@pytest.fixture
def parent_only_configurable():
    """``UserAlgorithm``, a configurable of a module env processes cannot import, registered
    for this test only: gin refuses to register it again in the same process."""

    def user_algorithm(size=1):
        return size

    user_algorithm.__module__ = 'alf_test_module_of_the_parent_only'
    gin.external_configurable(user_algorithm, 'UserAlgorithm')
    yield
    gin.config._REGISTRY.pop('alf_test_module_of_the_parent_only.UserAlgorithm')
    gin.config._INVERSE_REGISTRY.pop(user_algorithm)


@pytest.mark.timeout(60)
@pytest.mark.parametrize('start_method', ['spawn', 'forkserver'], indirect=True)
def test_bindings_an_env_process_cannot_import_do_not_stop_it(
    start_method, parent_only_configurable
):
    gin.parse_config(
        [
            'GinBoundEnv.value = 0.5',
            'UserAlgorithm.size = 3',
            'TrainerConfig.algorithm_ctor = @UserAlgorithm',
        ]
    )
    with create_environment('alf_test/GinBound-v0', 1, use_subprocesses=True) as env:
        assert env.reset().observation.tolist() == [[0.5]]


class UnpicklableHalf(float):
    """0.5, which neither gin can write out (its repr) nor pickle can carry."""

    def __repr__(self):
        return 'UnpicklableHalf()'

    def __deepcopy__(self, memo):  # as gin copies a bound value for each call
        return self

    def __reduce__(self):
        raise TypeError('an UnpicklableHalf stays in its process')


def bind_numpy_scalar():
    gin.bind_parameter('GinBoundEnv.value', np.float32(0.5))


def parse_infinity():
    gin.parse_config('GinBoundEnv.value = 1e999')


def parse_infinity_as_macro():
    # gin writes the macro out as 'VALUE = inf', which does not parse back.
    gin.parse_config(['VALUE = 1e999', 'GinBoundEnv.value = %VALUE'])


@pytest.mark.timeout(60)
@pytest.mark.parametrize('start_method', ['spawn', 'forkserver'], indirect=True)
@pytest.mark.parametrize(
    'bind, observed',
    [(bind_numpy_scalar, 0.5), (parse_infinity, 9.0), (parse_infinity_as_macro, 9.0)],
    ids=['numpy-scalar', 'inf', 'inf-macro'],
)
def test_bindings_gin_cannot_write_out_reach_env_processes_not_forked(
    start_method, bind, observed, caplog
):
    bind()
    with create_environment('alf_test/GinBound-v0', 1, use_subprocesses=True) as env:
        assert env.reset().observation.tolist() == [[observed]]
    assert 'gin bindings' not in caplog.text


@pytest.mark.timeout(60)
@pytest.mark.parametrize('start_method', ['spawn', 'fork'], indirect=True)
def test_a_binding_pickle_cannot_carry_either_is_named_where_env_processes_are_not_forked(
    start_method, caplog
):
    gin.bind_parameter('GinBoundEnv.value', UnpicklableHalf(0.5))
    with caplog.at_level('WARNING'):
        with create_environment('alf_test/GinBound-v0', 1, use_subprocesses=True) as env:
            observed = env.reset().observation.tolist()
    warned = re.findall('gin bindings.*', caplog.text)
    if start_method == 'fork':
        assert observed == [[0.5]] and warned == []
    else:
        assert observed == [[0.25]]  # the default
        assert warned == [
            'gin bindings, whose values gin cannot write out and pickle cannot carry: '
            'GinBoundEnv.value (TypeError: an UnpicklableHalf stays in its process).'
        ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize('start_method', ['fork'], indirect=True)
def test_a_forked_env_process_keeps_bindings_gin_cannot_write_out(start_method):
    # gin.config_str() leaves out a value it cannot write as a literal: a forked process
    # has its bindings already and must not parse them again.
    gin.bind_parameter('GinBoundEnv.value', fractions.Fraction(1, 8))
    assert 'Fraction' not in gin.config_str()
    with create_environment('alf_test/GinBound-v0', 1, use_subprocesses=True) as env:
        assert env.reset().observation.tolist() == [[0.125]]


# --- non-finite observations and rewards -------------------------------------------------


# A value beyond float32's range is reported in the error alone: no numpy warning of the cast.
@pytest.mark.filterwarnings('error::RuntimeWarning')
@pytest.mark.parametrize('use_subprocesses', [False, True])
@pytest.mark.parametrize(
    'field, value, shown',
    [
        ('observation', np.nan, 'observation[1] = nan'),
        ('observation', -np.inf, 'observation[1] = -inf'),
        (
            'observation',
            1e39,
            'observation[1] = inf (the env gave 1e+39 as float64, beyond float32)',
        ),
        ('reward', np.nan, 'reward = nan'),
        ('reward', -1e39, 'reward = -inf (the env gave -1e+39 as float64, beyond float32)'),
    ],
)
def test_a_step_that_returns_a_non_finite_value_names_the_env_step_field_and_value(
    use_subprocesses, field, value, shown
):
    with bad_value_env(use_subprocesses=use_subprocesses, field=field, value=value) as env:
        env.reset()
        assert env.step(torch.zeros(2, 1)).observation.tolist() == [[1, 0], [1, 0]]
        with pytest.raises(NonFiniteEnvOutputError) as raised:
            env.step(torch.zeros(2, 1))
        # The envs are left at that step and go on.
        after = env.step(torch.zeros(2, 1))
    assert str(raised.value) == (
        f"Environment 'alf_test/BadValue-v0' (env 1 of 2): the {field} of step 2 is not "
        f'finite: {shown}. An env must return finite ones (one whose simulation diverged '
        'can end its episode, terminated, with a finite observation).'
    )
    assert isinstance(raised.value, EnvironmentCrashedError)
    assert after.step_type.tolist() == [StepType.LAST, StepType.LAST]
    assert after.observation.tolist() == [[3, 0], [3, 0]]


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_a_reset_that_returns_a_non_finite_observation_names_the_env(use_subprocesses):
    with bad_value_env(use_subprocesses=use_subprocesses, value=np.inf, at=0) as env:
        with pytest.raises(
            NonFiniteEnvOutputError,
            match=r'^Environment .* \(env 1 of 2\): the '
            r'observation returned by reset\(\) is not finite: observation\[1\] '
            r'= inf\. ',
        ):
            env.reset()


def test_an_automatic_reset_that_returns_a_non_finite_observation_says_so():
    with bad_value_env(num_envs=3, label='eval env', at=0, episode=2) as env:
        env.reset()
        for _ in range(3):
            env.step(torch.zeros(3, 1))
        with pytest.raises(NonFiniteEnvOutputError) as raised:
            env.step(torch.zeros(3, 1))
    assert str(raised.value).startswith(
        "Environment 'alf_test/BadValue-v0' (eval env 1 of 3): the observation of step 4 "
        '(the reset after its episode ended) is not finite: observation[1] = nan.'
    )


def test_an_eval_env_names_the_step_counted_from_the_latest_reset():
    # Each evaluation resets its envs: the step is that of the evaluation, not of the run.
    with bad_value_env(label='eval env', episode=2) as env:
        env.reset()
        for _ in range(3):  # the first evaluation: episodes of 3 steps
            env.step(torch.zeros(2, 1))
        env.reset()
        env.step(torch.zeros(2, 1))
        with pytest.raises(NonFiniteEnvOutputError) as raised:
            env.step(torch.zeros(2, 1))
        env.reset()
        with pytest.raises(NonFiniteActionError) as action_raised:
            env.step(torch.tensor([[0.0], [float('nan')]]))
    assert str(raised.value).startswith(
        "Environment 'alf_test/BadValue-v0' (eval env 1 of 2): the observation of step 2 is "
        'not finite: observation[1] = nan.'
    )
    assert str(action_raised.value) == (
        "Environment 'alf_test/BadValue-v0' (eval env 1 of 2): the action of step 1 is not "
        'finite: [nan].'
    )


def test_an_observation_with_many_non_finite_values_lists_the_first_five():
    with bad_value_env(length=8) as env:
        env.reset()
        env.step(torch.zeros(2, 1))
        with pytest.raises(
            NonFiniteEnvOutputError,
            match=r'observation\[1\] = nan, observation\[3\] = nan, observation\[5\] = nan, '
            r'observation\[7\] = nan, observation\[9\] = nan, and 3 more\. ',
        ):
            env.step(torch.zeros(2, 1))


@pytest.mark.parametrize(
    'method, blown_up',
    [
        ('_torso_pose_and_velocity', lambda out: (out[0], out[1], np.array([0, 0, np.nan]))),
        ('_torso_pose_and_velocity', lambda out: (out[0], out[1], np.array([0, 0, np.inf]))),
        # Finite as float64, inf as float32 (0.3 times it in the state).
        ('_torso_pose_and_velocity', lambda out: (out[0], out[1], np.array([0, 0, 1e40]))),
        # The position: the reward's progress term becomes -6e40.
        ('_body_xy', lambda out: np.array([1e39, 0.0])),
    ],
    ids=['nan-velocity', 'infinite-velocity', 'velocity-beyond-float32', 'xy-beyond-float32'],
)
def test_a_pybullet_simulation_that_blew_up_ends_its_episode_without_an_error(method, blown_up):
    with create_environment('HalfCheetahBullet-v0', 2, use_subprocesses=False) as env:
        env.reset()
        u = env._env.envs[1].unwrapped
        original = getattr(u, method)
        setattr(u, method, lambda: blown_up(original()))
        time_step = env.step(torch.zeros(2, 6))
    assert time_step.step_type.tolist() == [StepType.MID, StepType.LAST]
    assert time_step.discount.tolist() == [1.0, 0.0] and time_step.reward[1] == 0
    assert torch.isfinite(time_step.observation).all()


@pytest.mark.timeout(240)
def test_train_stops_at_a_non_finite_observation_naming_the_env_in_one_line(tmp_path):
    (tmp_path / 'registers_nan.py').write_text(
        'import gymnasium\n'
        'import numpy as np\n'
        '\n'
        'class NanAtStep2(gymnasium.Env):\n'
        '    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float64)\n'
        '    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)\n'
        '    def reset(self, *, seed=None, options=None):\n'
        '        self.t = 0\n'
        '        return np.zeros(1), {}\n'
        '    def step(self, action):\n'
        '        self.t += 1\n'
        '        return np.array([np.nan if self.t == 2 else 0.0]), 0.0, False, False, {}\n'
        '\n'
        "gymnasium.register('alf_test/NanAtStep2-v0', entry_point=NanAtStep2,\n"
        '    max_episode_steps=50)\n'
    )
    env_name = 'registers_nan:alf_test/NanAtStep2-v0'
    root_dir = tmp_path / 'run'
    command = train_command(
        root_dir,
        [PENDULUM],
        [f"create_environment.env_name='{env_name}'", 'TrainerConfig.num_env_steps=200'] + TINY,
    )
    result = run_train(command, cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    # The evaluation at env step 0 comes first.
    assert last.startswith(
        f"error: Environment '{env_name}' (eval env 0 of 10): the observation of step 2 is "
        'not finite: observation[0] = nan.'
    ), result.stderr[-3000:]


# --- action spaces, entry points, timeouts, action dtypes --------------------------------


@pytest.mark.parametrize(
    'dtype, low, high',
    [
        (np.float32, -np.finfo(np.float32).max, np.finfo(np.float32).max),
        (np.float64, -np.finfo(np.float64).max, np.finfo(np.float64).max),
        (np.float16, -40000.0, 40000.0),
        (np.float32, -np.inf, 1.0),
        (np.float64, -1.0, np.inf),
    ],
    ids=['float32-max', 'float64-max', 'float16-80000', 'infinite-low', 'infinite-high'],
)
def test_an_action_range_its_float_type_cannot_hold_is_refused_as_unbounded(dtype, low, high):
    def make():
        return EchoEnv(low, high, dtype)

    with pytest.raises(ValueError) as raised:
        BatchedEnvironment([make], name='wide')
    assert re.fullmatch(
        r"Environment 'wide' has action space Box\(.*\): SAC, DDPG and TD3 need a continuous "
        r'bounded action space \(a 1-D float Box of at least one value, with finite bounds '
        r'whose range high - low its float type holds\)\.',
        str(raised.value),
    ), str(raised.value)


def test_an_action_range_its_float_type_holds_maps_to_its_ends_and_middle():
    def make():
        return EchoEnv(-1e38, 1e38, np.float32)

    with BatchedEnvironment([make] * 3, name='wide') as env:
        env.reset()
        received = env.step(torch.tensor([[-1.0], [0.0], [1.0]])).observation
    assert received.tolist() == [[np.float32(-1e38)], [0.0], [np.float32(1e38)]]


def test_a_partial_entry_point_counts_as_what_it_wraps():
    assert default_use_subprocesses(gymnasium.spec('alf_test/PartialEntryPoint-v0'), 2)
    assert not default_use_subprocesses(gymnasium.spec('alf_test/PartialPointTarget-v0'), 2)
    with create_environment('alf_test/PartialEntryPoint-v0', 2) as env:
        assert env.use_subprocesses
        assert env.reset().observation.shape == (2, 4)


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_an_infinite_step_timeout_waits_forever(use_subprocesses):
    with create_environment(
        'Pendulum-v1', 2, use_subprocesses=use_subprocesses, step_timeout=float('inf')
    ) as env:
        env.reset()
        assert env.step(torch.zeros(2, 1)).step_type.tolist() == [StepType.MID] * 2
        assert env._timeout(10) is None


@pytest.mark.parametrize('step_timeout', [1e300, 1e7, float('nan'), 0.0, -1.0])
def test_a_step_timeout_that_is_not_a_sensible_number_of_seconds_is_refused(step_timeout):
    with pytest.raises(ValueError) as raised:
        create_environment('Pendulum-v1', step_timeout=step_timeout)
    assert str(raised.value).startswith(
        'create_environment.step_timeout must be a positive number of seconds up to 1e+06 '
        f'(11.6 days), or None to wait forever; got {step_timeout!r}.'
    )


def test_a_replay_whose_timeout_adds_up_beyond_the_longest_wait_runs():
    # step_timeout for each of 4 env calls: 4e6 s, beyond the 24.8 days that poll() takes.
    with create_environment(
        'alf_test/BadValue-v0', 1, use_subprocesses=True, step_timeout=1e6
    ) as env:
        env.reset()
        for _ in range(2):
            env.step(torch.zeros(1, 1))
        records = env.episode_records()
        replayed = env.replay(records)
    assert replayed.observation.tolist() == [[2.0, 0.0]]


class SlowStepEnv(SlowEnv):
    seconds_per_step = 0.7


gymnasium.register('alf_test/SlowStep-v0', entry_point=SlowStepEnv, max_episode_steps=9)


def test_the_step_timeout_counts_from_step_wait():
    # The trainer trains between step_async and step_wait, and the process may be stopped
    # (Ctrl-Z) meanwhile, which no wait there would see: the timeout counts from
    # step_wait, where a stop is seen. Counted from step_async, the 0.7 s step would
    # not come in within 0.5 s.
    with create_environment(
        'alf_test/SlowStep-v0', 2, use_subprocesses=True, step_timeout=0.5
    ) as env:
        env.reset()
        env.step_async(torch.zeros(2, 1))
        time.sleep(0.4)
        assert env.step_wait().step_type.tolist() == [StepType.MID] * 2
        env.step_async(torch.zeros(2, 1))
        with pytest.raises(EnvironmentHungError, match=r'did not answer step\(\) within 0.5 s'):
            env.step_wait()


class SlowResetEnv(SlowEnv):
    """Each reset takes ``seconds_per_reset``, as a simulator that reloads its scene does."""

    seconds_per_reset = 0.7

    def reset(self, *, seed=None, options=None):
        time.sleep(self.seconds_per_reset)
        return super().reset(seed=seed, options=options)


gymnasium.register('alf_test/SlowReset-v0', entry_point=SlowResetEnv, max_episode_steps=9)


def test_the_step_timeout_watches_a_reset_of_env_processes_too():
    with create_environment(
        'alf_test/SlowReset-v0', 2, use_subprocesses=True, step_timeout=0.5
    ) as env:
        with pytest.raises(EnvironmentHungError, match=r'did not answer reset\(\) within 0.5 s'):
            env.reset()


_RESET_THAT_HANGS_IN_PROCESS = """
import time
import gymnasium
import numpy as np
from gymnasium import spaces
from alf_lite.environments import create_environment

class HangsInReset(gymnasium.Env):
    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        time.sleep(5)
        return np.zeros(1, dtype=np.float32), {}

gymnasium.register('alf_test/HangsInReset-v0', entry_point=HangsInReset, max_episode_steps=9)
env = create_environment(
    'alf_test/HangsInReset-v0', 1, use_subprocesses=False, step_timeout=0.5
)
env.reset()
print('the reset returned')
"""


def test_the_watchdog_ends_a_process_whose_in_process_reset_hangs():
    result = run_python(_RESET_THAT_HANGS_IN_PROCESS)
    assert result.returncode == HUNG_ENV_EXIT_CODE, result.stderr[-3000:]
    assert (
        "Environment 'alf_test/HangsInReset-v0' (in process) did not return from reset() "
        'within 0.5 s (create_environment.step_timeout)'
    ) in result.stderr, result.stderr[-3000:]
    assert 'the reset returned' not in result.stdout


_SLOW_ENVS_IN_PROCESS = """
import time
import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from alf_lite.environments import create_environment

class Slow(gymnasium.Env):
    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        time.sleep(0.3)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        time.sleep(0.3)
        return np.zeros(1, dtype=np.float32), 0.0, False, False, {}

gymnasium.register('alf_test/Slow-v0', entry_point=Slow, max_episode_steps=9)
with create_environment('alf_test/Slow-v0', 3, use_subprocesses=False, step_timeout=0.5) as env:
    env.reset()
    env.step(torch.zeros(3, 1))
    env.step(torch.zeros(3, 1), active=np.array([True, True, False]))
print('the calls returned')
"""


def test_in_process_envs_stepped_one_after_another_may_each_take_the_step_timeout():
    # Three envs of 0.3 s a call: 0.9 s a reset or step of all of them and 0.6 s a step of two
    # of them, each within 0.5 s.
    result = run_python(_SLOW_ENVS_IN_PROCESS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split('\n')[-2] == 'the calls returned', result.stdout[-3000:]


_ONE_OF_THREE_IN_PROCESS_HANGS = """
import time
import torch
from alf_lite.environments import create_environment

with create_environment('Pendulum-v1', 3, use_subprocesses=False, step_timeout=0.5) as env:
    env.reset()
    env._env.envs[1].unwrapped.{call} = lambda *args, **kwargs: time.sleep(30)  # env 1 hangs
    env.{call}({args})
"""


@pytest.mark.parametrize('call, args', [('step', 'torch.zeros(3, 1)'), ('reset', '')])
def test_a_hung_env_of_an_in_process_batch_is_named_after_its_own_step_timeout(call, args):
    result = run_python(_ONE_OF_THREE_IN_PROCESS_HANGS.format(call=call, args=args))
    assert result.returncode == HUNG_ENV_EXIT_CODE, result.stderr[-3000:]
    # Within its own 0.5 s, not the 1.5 s of the three envs' calls.
    assert (
        f"Environment 'Pendulum-v1' (env 1 of 3) (in process) did not return from {call}() "
        'within 0.5 s (create_environment.step_timeout)'
    ) in result.stderr, result.stderr[-3000:]


def test_a_bfloat16_action_is_mapped_as_its_float32_value():
    with create_environment('alf_test/EchoEdges-v0', 3) as env:
        env.reset()
        action = torch.tensor([[-1.0], [0.5], [0.375]])
        as_float32 = env.step(action).observation
        as_bfloat16 = env.step(action.to(torch.bfloat16)).observation
    assert as_float32.tolist() == [[-1.0], [2.0], [1.75]]
    assert torch.equal(as_bfloat16, as_float32)


class EndsOnNanReward(gymnasium.Env):
    """Terminates at its second step, with a NaN reward."""

    observation_space = spaces.Box(-1e3, 1e3, (1,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.array([100.0], np.float32), {}

    def step(self, action):
        self._t += 1
        reward = float('nan') if self._t == 2 else 1.0
        return np.array([self._t], np.float32), reward, self._t == 2, False, {}


@pytest.mark.parametrize('use_subprocesses', [False, True], ids=['in_process', 'subprocess'])
def test_an_env_whose_last_step_raises_resets_at_its_next_one(use_subprocesses):
    # The error leaves the envs running; the step after an episode's LAST is its reset
    # (FIRST), never a MID that would join two episodes.
    with BatchedEnvironment(
        [EndsOnNanReward], use_subprocesses=use_subprocesses, name='EndsOnNanReward'
    ) as env:
        env.reset(seed=0)
        env.step(torch.zeros(1, 1))
        with pytest.raises(NonFiniteEnvOutputError, match='the reward of step 2'):
            env.step(torch.zeros(1, 1))
        after = env.step(torch.zeros(1, 1))
    assert int(after.step_type[0]) == StepType.FIRST
    assert after.observation.tolist() == [[100.0]] and after.reward.tolist() == [0.0]


class ContactsInInfo(gymnasium.Wrapper):
    """PointTarget whose reset and step infos hold its contact forces: as many as its env
    index."""

    def __init__(self, index: int):
        super().__init__(PointTargetEnv())
        self._index = index

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, dict(info, contacts=np.zeros(self._index))

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return (
            observation,
            reward,
            terminated,
            truncated,
            dict(info, contacts=np.zeros(self._index)),
        )


@pytest.mark.parametrize('use_subprocesses', [False, True])
def test_envs_reset_and_step_whatever_infos_they_return(use_subprocesses):
    # The infos are not used; stacking them into one array per key failed for arrays
    # whose length differs from env to env (at a reset, and at steps in env processes).
    make = [functools.partial(ContactsInInfo, i) for i in range(3)]
    with BatchedEnvironment(make, use_subprocesses=use_subprocesses, name='ContactsInInfo') as env:
        env.reset(seed=0)
        for _ in range(3):
            time_step = env.step(torch.zeros(3, 1))
    assert time_step.step_type.tolist() == [StepType.MID] * 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize('start_method', ['forkserver'], indirect=True)
def test_env_processes_outlive_a_job_wide_sigterm_that_ends_the_fork_server(start_method):
    # A batch system's SIGTERM reaches every process of the job, multiprocessing's fork
    # server (the env processes' parent) included, which it ends; the trainer handles it
    # and needs its env processes for the checkpoint's episodes.
    with create_environment('Pendulum-v1', 1, use_subprocesses=True) as env:
        env.reset()
        worker = psutil.Process(env._env.processes[0].pid)
        fork_server = worker.parent()
        assert fork_server.pid != os.getpid()
        fork_server.send_signal(signal.SIGTERM)
        time.sleep(2)  # the env processes' watch looks every second
        # Left for the fixture to reap.
        assert fork_server.status() == psutil.STATUS_ZOMBIE
        assert env.step(torch.zeros(1, 1)).step_type.tolist() == [StepType.MID]
