"""Gymnasium environments (classic control, MuJoCo, PyBullet, ...) as one batched environment."""

import atexit
import contextlib
import difflib
import functools
import importlib
import importlib.util
import inspect
import math
import multiprocessing
import multiprocessing.util  # noqa: F401  (its exit handler, registered before this module's)
import os
import sys
import time
import traceback
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import cloudpickle
import gin
import gymnasium
import numpy as np
import psutil
import torch
from absl import logging
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.async_vector_env import _async_worker
from gymnasium.vector.utils import concatenate

from alf_lite.config import closest_names, pasted_character, quoted_names, short_repr
from alf_lite.data import StepType, TimeStep
from alf_lite.environments import episode_replay, watchdog
from alf_lite.environments.episode_replay import ReplayableEnv
from alf_lite.signals import set_env_process_signals

# Envs whose step costs less than a subprocess round trip, so N of them step
# faster in one process (benchmarks/env_throughput.py measures it).
IN_PROCESS_ENTRY_POINTS = (
    'gymnasium.envs.',
    'alf_lite.environments.suite_pybullet:',
    'alf_lite.environments.point_env:',
)
# Pipe errors the parent sees when an env process died (os._exit, a signal,
# a crash in native code) instead of raising a Python exception.
_DEAD_WORKER_ERRORS = (EOFError, BrokenPipeError, ConnectionResetError)
_STDERR_FD = 2
# After a pipe closed, how long to wait for the env process's exit code, and how often to look.
_EXIT_CODE_WAIT_S = 2.0
_EXIT_CODE_POLL_S = 0.01
# How long a killed env process that is no child of multiprocessing's is waited for.
_TERMINATE_WAIT_S = 5.0
# The longest wait for the envs: the poll beneath gymnasium's waits takes at most 2**31 ms
# (24.8 days). A longer timeout (a replay's, step_timeout for each of its steps) waits this long.
_LONGEST_WAIT_S = 1e6
# The longest single wait for an env process's reply. One that ends later (this process
# was stopped meanwhile: Ctrl-Z, a batch scheduler's suspend, SIGSTOP) counts as this long.
_REPLY_WAIT_SLICE_S = 1.0
# torch dtypes that numpy holds; an action of another (bfloat16) is cast to float32.
_NUMPY_FLOAT_DTYPES = (torch.float16, torch.float32, torch.float64)
# The non-finite values of one env that an error lists.
_MAX_LISTED_VALUES = 5
# Arguments of the env's construction that create_environment sets: env_kwargs may not.
_SET_BY_CREATE_ENVIRONMENT = ('max_episode_steps', 'render_mode')


class EnvironmentCrashedError(RuntimeError):
    """An env raised or its process died; the message names the env id and its index.

    Attributes:
        env_stack: when the env itself raised, the stack of what it raised, from
            its ``reset``/``step`` down, formatted where it was raised (an
            instance attribute, so it survives the pickling from an env
            process); None otherwise.
    """

    env_stack = None


class EnvironmentSettingsError(ValueError):
    """An env's constructor refused the settings it was given (its gin bindings): bad input,
    not a fault of the env. alf_lite's own envs raise it; the message names the setting."""


# MuJoCo's OpenGL backends, which it reads from MUJOCO_GL as it is imported.
MUJOCO_GL_BACKENDS = (
    'egl (headless), osmesa (headless, in software; needs the OSMesa library) or glfw '
    '(needs a display)'
)


def mujoco_gl_problem(error: BaseException) -> Optional[str]:
    """Why an env failed to build, where it is MuJoCo failing to load the OpenGL backend
    MUJOCO_GL names (``osmesa`` without the OSMesa library, a misspelt one), which its
    error, from deep within OpenGL's import, does not say; None otherwise.

    Found by importing MuJoCo again: where that fails with the error ``error`` reports
    (an env of another kind failing with MUJOCO_GL set to no use is left alone).
    """
    backend = os.environ.get('MUJOCO_GL')
    if not backend or importlib.util.find_spec('mujoco') is None:
        return None
    try:
        importlib.import_module('mujoco')
    except Exception as e:  # noqa: BLE001  (a backend's import may raise anything)
        reason = f'{type(e).__name__}: {e}'
        # ``error`` is the import's own, or a message that quotes it.
        if reason in str(error) or (type(e) is type(error) and str(e) == str(error)):
            return (
                f'MuJoCo does not import with MUJOCO_GL={backend}, the OpenGL backend it '
                f'loads as it is imported ({reason}).'
            )
    return None


def _mujoco_gl_error(where: str, error: BaseException) -> Optional['EnvironmentSettingsError']:
    """The error naming MUJOCO_GL where ``error`` is MuJoCo failing to load its backend:
    a setting of the machine, not a fault of the env (train and play exit 2 on it)."""
    problem = mujoco_gl_problem(error)
    if problem is None:
        return None
    return EnvironmentSettingsError(
        f'{where}: {problem} Unset MUJOCO_GL (an env that renders nothing needs none) or '
        f'set it to a backend this machine has: {MUJOCO_GL_BACKENDS}.'
    )


class RenderModeError(ValueError):
    """``create_environment.render_mode`` is none of the modes the env lists.

    Attributes:
        env_name: the env id as given.
        modes: the modes its ``metadata['render_modes']`` lists (possibly none).
    """

    def __init__(self, message: str, env_name: str, modes: Sequence[str]):
        super().__init__(message)
        self.env_name = env_name
        self.modes = list(modes)


def env_traceback(error: EnvironmentCrashedError) -> Optional[str]:
    """The stack of what an env raised, from its ``reset``/``step`` down.

    None for a hang or a dead process (no env stack).
    """
    return getattr(error, 'env_stack', None)


@contextlib.contextmanager
def _env_process_errors_unlogged():
    """Turn off gymnasium's log of what an env process raised; the error raised carries its stack.

    gymnasium logs the stack with ``logger.error(f'{trace}')``, which applies
    ``%`` to it: an error message with a ``%`` in it ('torque at 120% of
    limit') became a TypeError that named no env.
    """
    level = gymnasium.logger.min_level
    gymnasium.logger.min_level = gymnasium.logger.ERROR + 1
    try:
        yield
    finally:
        gymnasium.logger.min_level = level


class EnvironmentHungError(EnvironmentCrashedError):
    """An env process did not answer within ``step_timeout``; the message names it and the time."""


class NonFiniteActionError(ValueError):
    """An action given to ``BatchedEnvironment.step`` was NaN or infinite; no env was stepped."""


class NonFiniteEnvOutputError(EnvironmentCrashedError):
    """An env returned a NaN or infinite observation or reward (after the cast to float32).

    The message names the env, its index, the step or reset, the field and the
    values. Unlike the other ``EnvironmentCrashedError``s it leaves the envs
    running, at the step that returned the value.

    Attributes:
        index: the env's index.
        values: what is not finite, as the message lists it: 'observation[1] = nan'.
    """


class EpisodeReplayError(ValueError):
    """``BatchedEnvironment.replay`` could not rebuild an env's episode; the message names the env.

    The envs are then in no defined state: ``reset`` them.
    """


def describe_env(name: str, label: str, index, num_envs: int) -> str:
    """How errors name one env (or several indices): ``Environment 'X' (env 3 of 12)``."""
    return f"Environment '{name}' ({label} {index} of {num_envs})"


# What an env's reset or step may raise, for its error to name it: SystemExit too (an env
# that calls sys.exit() would end train with its exit code and no word of the env, or kill
# its env process); not KeyboardInterrupt, which a signal raises.
_RAISED_BY_ENVS = (Exception, SystemExit)


def _is_a_number(value) -> bool:
    """Whether the vector env can store ``value`` as one float, as it stores a reward
    (a ``Fraction`` or ``Decimal`` too, not ``None`` or an array)."""
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


class _NamedEnv(gymnasium.Wrapper):
    """Re-raises what an env raises as ``EnvironmentCrashedError`` naming the env and its index.

    gymnasium's AsyncVectorEnv re-raises a worker's exception in the parent
    without saying which env it came from; this wrapper runs in the worker.

    Args:
        call_timeout: seconds its ``reset()``, ``step()`` or ``close()`` may take in
            process (as ``step_timeout``) before the watchdog ends the process; None: no
            limit.
    """

    def __init__(self, env: gymnasium.Env, where: str, call_timeout: Optional[float] = None):
        super().__init__(env)
        self._where = where  # describe_env's
        self._call_timeout = call_timeout
        space = env.observation_space
        # The shape each observation must have; None: not checked (no Box).
        self._observation_shape = space.shape if isinstance(space, spaces.Box) else None

    def _crashed(self, call: str, error: BaseException) -> EnvironmentCrashedError:
        crashed = EnvironmentCrashedError(
            f'{self._where} raised in {call}(): {type(error).__name__}: {error}'
        )
        crashed.env_stack = ''.join(traceback.format_exception(error)).rstrip()
        return crashed

    def _checked(self, call: str, result: tuple) -> tuple:
        """``result`` of ``call``, refused when its observation does not have the shape of the
        observation space, a step's reward is not one number (``np.array([r])``) nor its
        flags one bool each, or its info is not a dict: the vector env would fail to stack
        them, naming no env."""
        shape = self._observation_shape
        if shape is not None and np.shape(result[0]) != shape:
            raise EnvironmentCrashedError(
                f'{self._where} returned from {call}() an observation of shape '
                f'{np.shape(result[0])}, not {shape}, the shape of its observation space'
            )
        if call == 'step' and not isinstance(result[1], (float, int)):
            reward = result[1]
            if np.ndim(reward) != 0 or not _is_a_number(reward):
                what = 'None' if reward is None else f'a {type(reward).__name__}'
                raise EnvironmentCrashedError(
                    f'{self._where} returned from step() {what} of shape {np.shape(reward)} '
                    'as its reward, not a number'
                )
        if call == 'step':
            # Env processes stack the flags into an array of one per env: ``np.array([True])``
            # would give it another shape, failing later with an error naming no env.
            for name, flag in (('terminated', result[2]), ('truncated', result[3])):
                if not isinstance(flag, (bool, int, np.bool_)) and (
                    np.ndim(flag) != 0 or not _is_a_number(flag)
                ):
                    what = 'None' if flag is None else f'a {type(flag).__name__}'
                    if np.ndim(flag) != 0:
                        what += f' of shape {np.shape(flag)}'
                    raise EnvironmentCrashedError(
                        f'{self._where} returned from step() {what} as {name}, not a bool'
                    )
        info = result[-1]
        if not isinstance(info, dict):
            what = 'None' if info is None else f'a {type(info).__name__}'
            raise EnvironmentCrashedError(
                f'{self._where} returned from {call}() {what} as its info, not a dict'
            )
        # Passed on empty: ``BatchedEnvironment`` uses no info, and the vector envs merge
        # the infos of all envs into arrays at every call (env processes send them
        # through a pipe first), which is slow and fails for values that do not stack
        # (arrays whose length differs from env to env).
        return result[:-1] + ({},) if info else result

    def reset(self, **kwargs):
        token = self._watch('reset')
        try:
            result = self.env.reset(**kwargs)
        except _RAISED_BY_ENVS as e:
            raise self._crashed('reset', e) from e
        finally:
            if token is not None:
                watchdog.done(token)
        return self._checked('reset', result)

    def step(self, action):
        token = self._watch('step')
        try:
            result = self.env.step(action)
        except _RAISED_BY_ENVS as e:
            raise self._crashed('step', e) from e
        finally:
            if token is not None:
                watchdog.done(token)
        return self._checked('step', result)

    def render(self):
        try:
            return self.env.render()
        except _RAISED_BY_ENVS as e:
            raise self._crashed('render', e) from e

    def _watch(self, call: str) -> Optional[int]:
        """In process, the watchdog's token for a ``call`` of this env; None: not watched.

        Each env of an in-process batch is watched on its own: the batch calls
        them one after another.
        """
        if self._call_timeout is None:
            return None
        return watchdog.start(
            self._call_timeout,
            lambda: (
                f'{self._where} (in process) did not return from {call}() within '
                f'{self._call_timeout:g} s (create_environment.step_timeout)'
            ),
        )

    def close(self):
        """Close the env; what its ``close()`` raises is a warning naming it: the run's
        results are written by then, and the other envs are still to be closed."""
        token = self._watch('close')
        try:
            self.env.close()
        except _RAISED_BY_ENVS as e:
            logging.warning('%s raised in close(): %s: %s', self._where, type(e).__name__, e)
        finally:
            if token is not None:
                watchdog.done(token)


class _GinBindings:
    """The gin bindings of the process that creates env processes, to apply in each of them.

    A forked env process inherits them. One started by spawn (macOS's default)
    or forkserver (Linux's from Python 3.14) imports alf_lite afresh: without
    them it would build a gin-configurable env (``ICubWalkEnv``) with its
    defaults, unlike the in-process eval envs. The bindings travel as the text
    gin writes out, and those gin cannot write (see ``_written_config``) as
    their values, pickled; one that cannot be pickled either is left out, with
    a warning naming it.

    Args:
        name: how the warning names the env.
    """

    def __init__(self, name: str):
        self._config, unwritten = _written_config()
        config = gin.config._CONFIG
        bound = [gin.config._REGISTRY[selector] for _, selector in config]
        bound += [reference.configurable for reference in gin.config.iterate_references(config)]
        # Imported before the bindings are parsed, so that those of configurables
        # outside alf_lite (a user's env module) are not skipped as unknown.
        modules = {getattr(configurable.wrapped, '__module__', None) for configurable in bound}
        self._modules = sorted(modules - {None})
        # A forked process has them all, and nothing of this object is pickled for it.
        self._unwritten = {}
        start_method = multiprocessing.get_start_method()
        if start_method == 'fork':
            return
        left_out = []
        for key, value in unwritten.items():
            try:
                cloudpickle.dumps(value)  # as gymnasium sends the env factory to its process
            except Exception as e:  # noqa: BLE001  (whatever pickling a user's value raises)
                left_out.append(f'{_binding_name(key)} ({type(e).__name__}: {e})')
            else:
                self._unwritten[key] = value
        if left_out:
            logging.warning(
                "Environment '%s': its env processes (started by %s, which imports afresh) are "
                'built without these gin bindings, whose values gin cannot write out and '
                'pickle cannot carry: %s.',
                name,
                start_method,
                '; '.join(left_out),
            )

    def apply(self) -> None:
        """Make this process's gin bindings the creator's, unless it has them (a forked one)."""
        if _written_config()[0] == self._config:
            return
        import alf_lite.all_configurables  # noqa: F401  (registers every alf_lite configurable)

        for module in self._modules:
            try:
                importlib.import_module(module)
            except Exception as e:  # noqa: BLE001  (its bindings are skipped, as gin's unknown)
                logging.warning(
                    'An env process cannot import %s, so the gin bindings of its '
                    'configurables are not applied there: %s: %s',
                    module,
                    type(e).__name__,
                    e,
                )
        gin.clear_config()
        gin.parse_config(self._config, skip_unknown=True)
        for key, value in self._unwritten.items():
            # Skipped where its configurable is unknown, as parse_config skips the others
            # (its module could not be imported: warned above).
            with contextlib.suppress(ValueError):
                gin.bind_parameter(key, value)


def _written_config() -> Tuple[str, Dict[Tuple[str, str, str], Any]]:
    """This process's gin bindings as gin writes them out, and those it cannot write.

    ``gin.config_str()`` leaves out a binding whose value ``repr`` does not
    write as a gin literal that parses back equal: ``inf`` and ``nan`` (bound in
    Python: a gin file's ``1e999`` is refused), numpy scalars, sets, fractions, other objects, and
    containers holding any of them. A macro of such a value it writes all the
    same, in a line that does not parse back (``X = inf``): such macros are
    left out of the text too.

    Returns:
        the text (``gin.config_str()`` without those macros), and the values of
        the bindings it lacks by ``(scope, selector, parameter)``, the key
        ``gin.bind_parameter`` takes (``(name, 'gin.macro', 'value')`` for a macro).
    """
    config = gin.config._CONFIG
    unwritten = {
        (scope, selector, parameter): value
        for (scope, selector), parameters in config.items()
        for parameter, value in parameters.items()
        if not gin.config._is_literally_representable(value)
    }
    written = {
        (scope, selector): parameters
        for (scope, selector), parameters in config.items()
        if not (
            gin.config._REGISTRY[selector].wrapped is gin.config.macro
            and (scope, selector, 'value') in unwritten
        )
    }
    return gin.config._config_str(written), unwritten


def _binding_name(key: Tuple[str, str, str]) -> str:
    """How gin spells the binding of ``(scope, selector, parameter)``: ``scope/Name.parameter``."""
    scope, selector, parameter = key
    if gin.config._REGISTRY[selector].wrapped is gin.config.macro:
        return scope
    name = f'{gin.config._REGISTRY.minimal_selector(selector)}.{parameter}'
    return f'{scope}/{name}' if scope else name


class _NamedEnvFactory:
    """``env_fn`` whose env is wrapped in ``_NamedEnv`` (a class, so it pickles).

    In another process than the one that made it, the gin bindings it was
    made with (``gin_bindings``, if any) are applied before the env is built.
    """

    def __init__(
        self,
        env_fn: Callable[[], gymnasium.Env],
        name: str,
        index: int,
        num_envs: int,
        label: str,
        gin_bindings: Optional[_GinBindings] = None,
        step_timeout: Optional[float] = None,
    ):
        self._env_fn = env_fn
        self._where = describe_env(name, label, index, num_envs)
        self._creator_pid = os.getpid()
        self._gin_bindings = gin_bindings
        self._step_timeout = step_timeout

    def __call__(self) -> gymnasium.Env:
        in_env_process = os.getpid() != self._creator_pid
        if in_env_process:
            set_env_process_signals(self._creator_pid)
        try:
            if in_env_process and self._gin_bindings is not None:
                self._gin_bindings.apply()
            env = self._env_fn()
        except EnvironmentSettingsError as e:
            raise EnvironmentSettingsError(f'{self._where} refused its settings: {e}') from e
        except Exception as e:
            settings_error = _mujoco_gl_error(f'{self._where} could not be created', e)
            if settings_error is not None:
                raise settings_error from e
            raise EnvironmentCrashedError(
                f'{self._where} could not be created: {type(e).__name__}: {e}'
            ) from e
        # In an env process, the parent limits how long the env's close() may take.
        call_timeout = None if in_env_process else self._step_timeout
        return _NamedEnv(ReplayableEnv(env), self._where, call_timeout)


class _MadeAhead:
    """The factory of an env that was made ahead of the others (``BatchedEnvironment``
    reads its spaces first): its first call in this process returns that env, any other
    call, or a call in another process, makes a new one. It pickles without the env."""

    def __init__(self, env: gymnasium.Env, factory: Callable[[], gymnasium.Env]):
        self._env: Optional[gymnasium.Env] = env
        self._factory = factory
        self._creator_pid = os.getpid()

    def __call__(self) -> gymnasium.Env:
        env, self._env = self._env, None
        if env is not None and os.getpid() == self._creator_pid:
            return env
        return self._factory()

    def close_unused(self) -> None:
        """Close the env made ahead if no call took it."""
        env, self._env = self._env, None
        if env is not None:
            env.close()

    def __getstate__(self) -> dict:
        return {**self.__dict__, '_env': None}


def _env_process_worker(index, env_fn, pipe, parent_pipe, *args) -> None:
    """gymnasium's loop of an env process; once the trainer's end of its pipe is gone
    (the trainer was killed, or crashed in native code), one line instead of the
    ``EOFError`` and ``BrokenPipeError`` tracebacks of a loop that lost its trainer."""
    try:
        _async_worker(index, env_fn, pipe, parent_pipe, *args)
    except _DEAD_WORKER_ERRORS:
        os.write(
            _STDERR_FD,
            f'env process {os.getpid()}: the pipe to the process that started it closed; '
            'exiting\n'.encode(),
        )
        os._exit(1)


def _replied_within(pipes, timeout: float) -> bool:
    """Whether every env process of ``pipes`` replied (or ended) within ``timeout`` seconds
    of this process running: a wait that this process being stopped (Ctrl-Z, a batch
    scheduler's suspend, SIGSTOP; its env processes stop with it) stretched counts as
    ``_REPLY_WAIT_SLICE_S``, so that the reply in flight has all of its time once continued."""
    left = timeout
    for pipe in pipes:
        if pipe is None or pipe.closed:
            return False
        while True:
            wait = max(0.0, min(left, _REPLY_WAIT_SLICE_S))
            start = time.monotonic()
            replied = pipe.poll(wait)
            left -= min(time.monotonic() - start, wait)
            if replied:
                break
            if left <= 0:
                return False
    return True


class _AsyncVectorEnv(AsyncVectorEnv):
    """gymnasium's ``AsyncVectorEnv``, whose forced close (``close(terminate=True)``, which
    its ``__del__`` calls on one left open) kills the env processes: they ignore SIGTERM
    (``set_env_process_signals``), and gymnasium would wait for them for good."""

    def close_extras(self, timeout: Optional[float] = None, terminate: bool = False) -> None:
        if terminate:
            _stop_env_processes(self)
        else:
            super().close_extras(timeout, terminate)


# The vector envs whose processes may still run, with the process that started them. At
# the interpreter's exit, those left open (a Trainer never closed, an error while one was
# built) are killed before multiprocessing's own exit handler, which terminates them with
# SIGTERM, which they ignore, and then waits for them.
_UNCLOSED_ENV_PROCESSES: 'weakref.WeakKeyDictionary[_AsyncVectorEnv, int]' = (
    weakref.WeakKeyDictionary()
)


def _kill_unclosed_env_processes() -> None:
    for env, pid in list(_UNCLOSED_ENV_PROCESSES.items()):
        # Not those of another process (a forked copy of this one's table).
        if pid == os.getpid() and not getattr(env, 'closed', True):
            _stop_env_processes(env)


# Registered after multiprocessing's handler (imported first), so run before it.
atexit.register(_kill_unclosed_env_processes)


class _SyncVectorEnv(SyncVectorEnv):
    """gymnasium's ``SyncVectorEnv`` (next-step autoreset) that can also step some envs only."""

    def step(self, actions: np.ndarray, active: Optional[np.ndarray] = None):
        """``SyncVectorEnv.step``, returning no infos; with ``active``, only the envs where it
        is True are called.

        The infos are left out, as every env passes them on empty
        (``_NamedEnv._checked``). An env left out is not called: its results
        repeat those of its latest call, and its next step goes on from where it
        is (a reset if it ended its episode).
        """
        envs = range(self.num_envs) if active is None else np.flatnonzero(active)
        for i in envs:
            if self._autoreset_envs[i]:
                self._env_obs[i], _ = self.envs[i].reset()
                self._rewards[i] = 0.0
                self._terminations[i] = self._truncations[i] = False
            else:
                (
                    self._env_obs[i],
                    self._rewards[i],
                    self._terminations[i],
                    self._truncations[i],
                    _,
                ) = self.envs[i].step(actions[i])
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (
            self._observations,
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            {},
        )


class BatchedEnvironment:
    """N copies of a gymnasium env stepped together, speaking ``TimeStep`` tensors.

    Actions come in normalised to [-1, 1] and are mapped per dimension to the
    env's ``[low, high]``. gymnasium's next-step autoreset is turned into ALF's
    step types: the step after an env's LAST is that env's next FIRST.

    Args:
        env_fns: one callable per env, each returning a new gymnasium env with
            a flat 1-D Box observation space and a bounded Box action space.
        seed: seeds of the first ``reset``: an int seeds env ``i`` with
            ``seed + i``, a sequence gives one seed per env.
        use_subprocesses: step the envs in subprocesses (``AsyncVectorEnv``);
            ``None`` means yes when there is more than one env.
        name: how errors and logs name the env.
        step_timeout: seconds a ``reset``, ``step`` or ``close`` of the envs may
            take, up to ``1e6``; None (or inf) waits forever. Env processes that do not
            answer in time raise ``EnvironmentHungError`` (measured from
            ``step_wait``). An in-process call that does not return in time
            ends the process (``watchdog.HUNG_ENV_EXIT_CODE``) with the stacks
            of all threads. Time this process spends stopped (Ctrl-Z, SIGSTOP)
            does not count.
        label: what errors call one of these envs, before its index: 'env'
            (``(env 3 of 12)``), or e.g. 'eval env' for the envs of evaluations.
        check_dims: called with the keyword arguments ``num_envs``,
            ``observation_dim`` and ``action_dim`` once the first env is made and
            its spaces checked, before any other env or env process
            is made; what it raises ends the construction (the trainer refuses
            there a replay buffer that cannot fit, before making thousands of envs).
    Raises:
        ValueError: when the observation or action space is not supported (found
            on the first env, before the others are made).
        EnvironmentCrashedError: from any method, when an env raised, its
            process died or did not answer within ``step_timeout``; the message
            names ``name`` and the env's index, and all env processes are
            stopped.
        NonFiniteEnvOutputError: (an ``EnvironmentCrashedError``) from
            ``reset`` and ``step``, when an env returned a NaN or infinite
            observation or reward; the envs are left running.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gymnasium.Env]],
        seed: Union[int, Sequence[int]] = 0,
        use_subprocesses: Optional[bool] = None,
        name: str = 'environment',
        step_timeout: Optional[float] = None,
        label: str = 'env',
        check_dims: Optional[Callable[..., None]] = None,
    ):
        if step_timeout == math.inf:
            step_timeout = None
        if step_timeout is not None and not 0 < step_timeout <= _LONGEST_WAIT_S:
            raise ValueError(
                'create_environment.step_timeout must be a positive number of seconds up to '
                f'{_LONGEST_WAIT_S:g} ({_LONGEST_WAIT_S / 86400:.1f} days), or None to '
                f'wait forever; got {step_timeout!r}.'
            )
        self.num_envs = len(env_fns)
        if use_subprocesses is None:
            use_subprocesses = self.num_envs > 1
        self.name = name
        self.label = label
        self.use_subprocesses = use_subprocesses
        self._seed = self._env_seeds(seed)
        self._step_timeout = step_timeout
        # True while a call into the envs is under way, so a signal handler can
        # tell that the caller may be stuck in it; ``calls`` counts the calls begun,
        # so the number of the one under way tells it from every other.
        self.busy = False
        self.calls = 0
        gin_bindings = _GinBindings(name) if use_subprocesses else None
        env_fns = [
            _NamedEnvFactory(fn, name, i, self.num_envs, label, gin_bindings, step_timeout)
            for i, fn in enumerate(env_fns)
        ]
        # The first env is made alone and its spaces checked (with ``check_dims``)
        # before the others: a refusal comes before N envs or processes are made. It
        # is then the vector env's first env, or in env processes the env in this
        # process that AsyncVectorEnv reads the spaces of.
        first = env_fns[0]()
        try:
            self._check_spaces(name, first.observation_space, first.action_space)
            if check_dims is not None:
                check_dims(
                    num_envs=self.num_envs,
                    observation_dim=self.observation_dim,
                    action_dim=self.action_dim,
                )
        except BaseException:
            first.close()
            raise
        env_fns[0] = made_ahead = _MadeAhead(first, env_fns[0])
        if use_subprocesses:
            # Made before its __init__ runs, so that the processes it started
            # can be stopped when it fails half-way.
            self._env = _AsyncVectorEnv.__new__(_AsyncVectorEnv)
            _UNCLOSED_ENV_PROCESSES[self._env] = os.getpid()
            children_before = _child_pids()
            try:
                # copy=False: the shared-memory observation is copied into a new
                # float32 array in _checked_outputs() anyway, so one copy suffices.
                self._env.__init__(
                    env_fns,
                    shared_memory=True,
                    copy=False,
                    autoreset_mode=AutoresetMode.NEXT_STEP,
                    worker=_env_process_worker,
                )
            except BaseException as e:
                _stop_env_processes(self._env, children_before)
                if not isinstance(e, _DEAD_WORKER_ERRORS):
                    raise
                raise EnvironmentCrashedError(
                    f"Environment '{name}': an env process died while starting; its output "
                    'above may say why.'
                ) from e
            finally:
                made_ahead.close_unused()
            # Made once: a summary reads their memory without looking each one up again.
            self._env_processes = [_watched(p.pid) for p in self._env.processes]
        else:
            self._env_processes = []
            try:
                self._env = _SyncVectorEnv(
                    env_fns, copy=False, autoreset_mode=AutoresetMode.NEXT_STEP
                )
            finally:
                made_ahead.close_unused()
        self._closed = False
        self._first_reset = True
        # Which envs returned LAST at the previous step: their next step is the
        # reset observation that gymnasium's next-step autoreset produces.
        self._done = np.zeros(self.num_envs, dtype=bool)
        # The action of a step started by step_async and not yet waited for, and
        # which envs it steps (None: all).
        self._pending = None
        self._pending_active = None
        # The TimeStep the envs are at: an env left out of a step keeps its row.
        self._latest = None
        # Steps started since the envs' latest reset (or replay), to name one in an error:
        # an evaluation's count from its own reset.
        self._num_steps = 0
        self._env_id = torch.arange(self.num_envs, dtype=torch.int64)
        logging.info(
            'Created %d x %s (%s).',
            self.num_envs,
            name,
            'subprocesses' if use_subprocesses else 'in process',
        )

    def _check_spaces(self, name: str, obs_space: spaces.Space, act_space: spaces.Space):
        """Set the dims and bounds from one env's spaces, or refuse them."""
        if not (
            isinstance(obs_space, spaces.Box)
            and len(obs_space.shape) == 1
            and obs_space.shape[0] > 0
        ):
            raise ValueError(
                f"Environment '{name}' has observation space {obs_space}: only flat "
                '1-D Box observation spaces of at least one value are supported.'
            )
        if not (
            isinstance(act_space, spaces.Box)
            and np.issubdtype(act_space.dtype, np.floating)
            and len(act_space.shape) == 1
            and act_space.shape[0] > 0
            and _range_is_finite(act_space)
        ):
            raise ValueError(
                f"Environment '{name}' has action space {act_space}: SAC, DDPG and TD3 need a "
                'continuous bounded action space (a 1-D float Box of at least one value, with '
                'finite bounds whose range high - low its float type holds).'
            )
        self.observation_dim = int(obs_space.shape[0])
        self.action_dim = int(act_space.shape[0])
        self.action_low = act_space.low.astype(np.float32)
        self.action_high = act_space.high.astype(np.float32)
        # The mapping runs in the space's own float type against its own bounds:
        # float64 bounds rounded to float32 can lie outside the space.
        self._space_low = act_space.low
        self._space_high = act_space.high
        self._action_half_range = 0.5 * (self._space_high - self._space_low)

    def _checked_outputs(
        self,
        obs: np.ndarray,
        what: str,
        env_reward: Optional[np.ndarray] = None,
        was_reset: Optional[np.ndarray] = None,
    ) -> Tuple[torch.Tensor, Optional[np.ndarray]]:
        """The envs' observations as a float32 tensor and their rewards as float32, checked finite.

        Args:
            obs: the observations the envs returned.
            what: where they come from, for the error: 'of step 3'.
            env_reward: the rewards the envs returned; None at a reset.
            was_reset: which envs the call reset (their reward is 0), for a step.
        Returns:
            the observations, and the rewards (None without ``env_reward``).
        Raises:
            NonFiniteEnvOutputError: naming the first env with a NaN or infinite value.
        """
        # A value beyond float32's range becomes inf, which the error reports with the
        # env's value: numpy's warning of the overflow would only print ahead of it.
        with np.errstate(over='ignore'):
            # np.array always copies (the vector env reuses its buffer) and casts
            # MuJoCo's float64 to float32 in the same pass.
            observation = np.array(obs, dtype=np.float32)
            reward = None if env_reward is None else np.array(env_reward, dtype=np.float32)
        if reward is not None:
            reward[was_reset] = 0.0
        if not (np.isfinite(observation).all() and (reward is None or np.isfinite(reward).all())):
            raise self._non_finite_error(obs, env_reward, observation, reward, what, was_reset)
        return torch.from_numpy(observation), reward

    def _non_finite_error(
        self,
        obs: np.ndarray,
        env_reward: Optional[np.ndarray],
        observation: np.ndarray,
        reward: Optional[np.ndarray],
        what: str,
        was_reset: Optional[np.ndarray],
    ) -> NonFiniteEnvOutputError:
        """The error naming the first env whose float32 ``observation`` or ``reward`` is not
        finite, with the values the env returned (``obs``, ``env_reward``)."""
        width = observation.shape[1]
        # The reward, if any, as one more column.
        i, columns = _first_non_finite(
            observation if reward is None else np.column_stack((observation, reward))
        )
        obs_columns = columns[columns < width]
        fields, values = [], []
        if len(obs_columns):
            fields.append('observation')
            values += [
                f'observation[{j}] = {_value_text(obs[i][j], observation[i, j])}'
                for j in obs_columns[:_MAX_LISTED_VALUES]
            ]
            if len(obs_columns) > _MAX_LISTED_VALUES:
                values.append(f'and {len(obs_columns) - _MAX_LISTED_VALUES} more')
        if columns[-1] == width:
            fields.append('reward')
            values.append(f'reward = {_value_text(env_reward[i], reward[i])}')
        if was_reset is not None and was_reset[i]:
            what += ' (the reset after its episode ended)'
        error = NonFiniteEnvOutputError(
            f'{self.which(i)}: the {" and the ".join(fields)} {what} '
            f'{"are" if len(fields) > 1 else "is"} not finite: {", ".join(values)}. An env '
            'must return finite ones (one whose simulation diverged can end its episode, '
            'terminated, with a finite observation).'
        )
        error.index, error.values = i, ', '.join(values)
        return error

    def _env_seeds(self, seed: Union[int, Sequence[int]]) -> List[int]:
        """One seed per env: ``seed + i`` for an int, the sequence itself otherwise."""
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = [int(s) for s in seed]
        if len(seeds) != self.num_envs:
            raise ValueError(
                f"Environment '{self.name}': {len(seeds)} seeds given for {self.num_envs} envs."
            )
        return seeds

    def reset(self, seed: Optional[Union[int, Sequence[int]]] = None) -> TimeStep:
        """Reset every env and return a batch of FIRST steps.

        Args:
            seed: an int seeds env ``i`` with ``seed + i``, a sequence gives one
                seed per env. ``None`` on the first reset means the
                constructor's seed; ``None`` later leaves the envs' random
                generators running on (no reseeding).
        Returns:
            all-FIRST ``TimeStep`` with reward 0 and discount 1.
        Raises:
            NonFiniteEnvOutputError: when an observation is not finite (NaN,
                infinite, or beyond float32's range), naming the env.
            RuntimeError: while a step is pending (its action would otherwise be
                applied to the new episodes by ``step_wait``).
        """
        self._refuse_if_pending('reset')
        if seed is None and self._first_reset:
            seeds = self._seed
        else:
            seeds = None if seed is None else self._env_seeds(seed)
        self._first_reset = False
        obs = self._reset_envs(seeds)
        self._latest = TimeStep(
            step_type=torch.full((self.num_envs,), StepType.FIRST, dtype=torch.uint8),
            observation=self._checked_outputs(obs, 'returned by reset()')[0],
            reward=torch.zeros(self.num_envs, dtype=torch.float32),
            discount=torch.ones(self.num_envs, dtype=torch.float32),
            env_id=self._env_id,
        )
        return self._latest

    def _reset_envs(self, seeds: Optional[List[int]]) -> np.ndarray:
        """Reset every env (with ``seeds``, or unseeded); returns their observations."""
        if self.use_subprocesses:
            self._call(self._env.reset_async, seed=seeds)
            with _env_process_errors_unlogged():
                obs, _ = self._call(self._env.reset_wait, timeout=self._step_timeout)
        else:
            # In process the envs reset one after another.
            obs, _ = self._call(self._env.reset, seed=seeds, env_calls=self.num_envs)
        self._done[:] = False
        self._num_steps = 0
        return obs

    def step(self, action: torch.Tensor, active: Optional[np.ndarray] = None) -> TimeStep:
        """Apply one normalised action per env and return the next steps.

        Args:
            action: ``[N, action_dim]`` float tensor in [-1, 1]; values outside
                are clipped. Ignored for envs whose previous step was LAST
                (they reset instead), though it must be finite there too: the
                policy's action for a finite LAST observation.
            active: ``[N]`` bool, the envs to step (e.g. those whose evaluation
                episode runs); None: all. In process only (gymnasium's
                AsyncVectorEnv steps every env). An env left out is not called
                and its action is ignored: its row of the ``TimeStep`` repeats
                the row it is at, and its next step goes on from there.
        Raises:
            ValueError: for an action not of shape ``[N, action_dim]``; for
                ``active`` with env processes, or not of shape ``[N]``.
            RuntimeError: while a step that ``step_async`` started is pending;
                for ``active`` before the first ``reset``.
            NonFiniteActionError: when an action is not finite (NaN or
                infinite), naming the env and the step; no env is stepped.
            NonFiniteEnvOutputError: when an observation or reward the envs
                returned is not finite (NaN, infinite, or beyond float32's
                range), naming the env and the step; the envs took the step.
                (Both errors count the step from the latest ``reset``, an
                evaluation's own, or ``replay``.)
            EnvironmentCrashedError: when an env raised or its process died,
                naming the env; ``EnvironmentHungError`` when an env process
                did not answer within ``step_timeout``.
        Returns:
            ``TimeStep``: LAST with discount 0 on termination, LAST with
            discount 1 on truncation only, FIRST (reward 0, discount 1) for the
            reset after a LAST, MID otherwise.
        """
        self.step_async(action, active)
        return self.step_wait()

    def step_async(self, action: torch.Tensor, active: Optional[np.ndarray] = None) -> None:
        """Start ``step(action, active)``; ``step_wait()`` returns its ``TimeStep``.

        With subprocesses the envs step while the caller goes on (the trainer
        runs its gradient updates meanwhile); in process the step runs in
        ``step_wait``. One step may be pending at a time.
        """
        if tuple(action.shape) != (self.num_envs, self.action_dim):
            raise ValueError(
                f'Expected an action of shape {(self.num_envs, self.action_dim)}, '
                f'got {tuple(action.shape)}.'
            )
        self._refuse_if_pending('step_async')
        if active is not None:
            active = self._checked_active(active)
        if action.dtype not in _NUMPY_FLOAT_DTYPES:
            action = action.float()
        a = action.detach().cpu().numpy()
        if active is not None:
            # The actions of the envs left out are ignored, whatever they hold.
            a = np.where(active[:, None], a, 0.0).astype(a.dtype, copy=False)
        # np.clip passes NaN on, and an env given NaN torques goes on with a NaN state.
        if not np.isfinite(a).all():
            i, _ = _first_non_finite(a)
            raise NonFiniteActionError(
                f'{self.which(i)}: the action of step '
                f'{self._num_steps + 1} is not finite: {a[i].tolist()}.'
            )
        a = np.clip(a, -1.0, 1.0).astype(self._space_low.dtype, copy=False)
        env_action = self._space_low + (a + 1.0) * self._action_half_range
        # Rounding can land a hair outside [low, high]; some envs assert bounds.
        np.clip(env_action, self._space_low, self._space_high, out=env_action)
        if self.use_subprocesses:
            self._call(self._env.step_async, env_action)
        self._pending = env_action
        self._pending_active = active
        self._num_steps += 1

    def _refuse_if_pending(self, call: str) -> None:
        """Raise RuntimeError naming ``call`` while a step started by step_async is pending."""
        if self._pending is not None:
            raise RuntimeError(f'{call} called while a step is pending; call step_wait first.')

    def _checked_active(self, active) -> np.ndarray:
        """``step``'s ``active`` as a bool array; None when every env is in it."""
        if self.use_subprocesses:
            raise ValueError(
                f"Environment '{self.name}': step(active=...) steps some envs only in process "
                "(use_subprocesses=False); gymnasium's AsyncVectorEnv steps every env."
            )
        active = np.asarray(active, dtype=bool)
        if active.shape != (self.num_envs,):
            raise ValueError(
                f"Environment '{self.name}': step(active=...) needs one bool per env, shape "
                f'({self.num_envs},); got shape {active.shape}.'
            )
        if self._latest is None:
            raise RuntimeError('step(active=...) called before the first reset.')
        return None if active.all() else active

    def step_wait(self) -> TimeStep:
        """The ``TimeStep`` of the step started by ``step_async`` (see ``step``)."""
        if self._pending is None:
            raise RuntimeError('step_wait called without a pending step_async.')
        env_action, self._pending = self._pending, None
        active, self._pending_active = self._pending_active, None
        if self.use_subprocesses:
            with _env_process_errors_unlogged():
                obs, reward, terminated, truncated, _ = self._call(
                    self._env.step_wait, timeout=self._step_timeout
                )
        elif active is None:
            # In process the envs step one after another.
            obs, reward, terminated, truncated, _ = self._call(
                self._env.step, env_action, env_calls=self.num_envs
            )
        else:
            obs, reward, terminated, truncated, _ = self._call(
                self._env.step, env_action, active=active, env_calls=max(1, int(active.sum()))
            )
        return self._time_step(
            obs, reward, terminated, truncated, self._done, f'of step {self._num_steps}', active
        )

    def _time_step(
        self, obs, env_reward, terminated, truncated, was_reset, what, active=None
    ) -> TimeStep:
        """The ``TimeStep`` of what the envs returned; ``was_reset`` marks the envs whose call
        was a reset (their step is FIRST). Notes which envs reset at their next step.

        ``active``: the envs that were called (None: all); the rows of the
        others repeat the ``TimeStep`` they are at.

        Raises:
            NonFiniteEnvOutputError: when an observation or reward is not finite;
                ``what`` says where it comes from ('of step 3').
        """
        step_type = np.where(terminated | truncated, StepType.LAST, StepType.MID).astype(np.uint8)
        step_type[was_reset] = StepType.FIRST
        discount = np.where(terminated & ~was_reset, 0.0, 1.0).astype(np.float32)
        done = (terminated | truncated) & ~was_reset
        if active is not None:
            done[~active] = self._done[~active]
        # Noted before the check: an env that ended its episode in a step that raises
        # resets at its next one (FIRST), whether or not the caller goes on.
        self._done = done
        # Checks the rows of the envs left out too: their latest results, checked as they came.
        observation, reward = self._checked_outputs(obs, what, env_reward, was_reset)
        if active is not None:
            left_out, latest = ~active, self._latest
            step_type[left_out] = latest.step_type.numpy()[left_out]
            reward[left_out] = latest.reward.numpy()[left_out]
            discount[left_out] = latest.discount.numpy()[left_out]
            observation[torch.from_numpy(left_out)] = latest.observation[left_out]
        self._latest = TimeStep(
            step_type=torch.from_numpy(step_type),
            observation=observation,
            reward=torch.from_numpy(reward),
            discount=torch.from_numpy(discount),
            env_id=self._env_id,
        )
        return self._latest

    def processes_own_bytes(self) -> int:
        """The env processes' own memory in bytes, summed: each one's unique set size (USS),
        the pages no other process shares, which its end would free. 0 in process (the
        envs' memory is then the caller's) and once the envs are closed; a process that is
        gone or a zombie counts 0.

        Not their resident memory: a process forked from one that imported torch holds
        its pages too, shared until written (the two Pendulum-v1 env processes of a train
        run showed 236 MiB resident each, about 7 MiB of it their own). Reading it walks the
        process's page tables: a few milliseconds a process.
        """
        if self._closed:
            return 0
        return sum(_own_bytes(process) for process in self._env_processes)

    @property
    def closed(self) -> bool:
        """Whether the envs were closed (or stopped after a crash)."""
        return self._closed

    def episode_records(self) -> List[Optional[dict]]:
        """Each env's running episode as a record ``replay`` rebuilds it from.

        A record holds how the episode was reset (its seed, or the state of the
        env's ``np_random`` before an unseeded reset), its actions as an
        ``[steps, action_dim]`` tensor in the env's own units, and whether its
        last step was LAST (``alf_lite.environments.episode_replay``). None for
        an env whose episode cannot be replayed (reset with options, or longer
        than ``episode_replay.MAX_RECORDED_STEPS``).

        Raises:
            RuntimeError: while a step is pending.
        """
        self._refuse_if_pending('episode_records')
        records = []
        for record in self._call_envs('alf_lite_episode_record'):
            if record is not None:
                record = dict(record, actions=torch.from_numpy(record['actions']))
            records.append(record)
        return records

    def replay(self, records: Sequence[dict]) -> TimeStep:
        """Continue the episodes of ``records`` (``episode_records()``, maybe of another process).

        Each env is reset as its episode was, then steps the episode's actions.
        A deterministic env is then where the recorded one was, and the next
        ``step`` goes on from there (resetting an env whose last step was LAST).

        Args:
            records: one record per env, none of them None.
        Returns:
            the ``TimeStep`` each env is at, as ``step`` or ``reset`` returned it.
        Raises:
            EpisodeReplayError: naming the env, when a record is malformed, an
                env could not replay it, or it replayed it to a NaN or infinite
                observation or reward (not deterministic: the recorded episode was
                finite); ``reset`` the envs then.
            RuntimeError: while a step is pending.
        """
        self._refuse_if_pending('replay')
        if len(records) != self.num_envs:
            raise EpisodeReplayError(
                f"Environment '{self.name}': {len(records)} episode records for "
                f'{self.num_envs} envs.'
            )
        plain = []
        for i, record in enumerate(records):
            problem = _record_problem(record, self.action_dim)
            if problem is not None:
                raise EpisodeReplayError(f'{self.which(i)}: the episode record {problem}.')
            plain.append(dict(record, actions=record['actions'].cpu().numpy()))
        # Clears the vector env's own note of which envs reset at their next step
        # (unseeded: the replay resets each env as its record says).
        self._reset_envs(None)
        # The envs' generators are the replayed episodes' now: an unseeded reset() after
        # this lets them run on, as in the recorded envs, instead of taking the seed given
        # to this one's constructor.
        self._first_reset = False
        # Each env gets its own record only (not all of them).
        self._call(self._env.set_attr, 'alf_lite_replay_record', plain)
        longest = max(len(r['actions']) for r in plain)
        results = self._call_envs('alf_lite_replay_episode', env_calls=longest + 1)
        for i, result in enumerate(results):
            if isinstance(result, str):
                raise EpisodeReplayError(f'{self.which(i)} could not replay its episode: {result}')
        obs, reward, terminated, truncated = (np.array(column) for column in zip(*results))
        just_reset = np.array([len(r['actions']) == 0 for r in plain])
        try:
            return self._time_step(
                obs, reward, terminated, truncated, just_reset, 'at the end of its replayed episode'
            )
        except NonFiniteEnvOutputError as e:
            # Every step of the recorded episode was checked finite as it came.
            raise EpisodeReplayError(
                f'{self.which(e.index)} replayed its episode to values that are not finite '
                f'({e.values}), unlike the recorded one: the env is not deterministic given its '
                'seed and actions, or not the one the episode was recorded in (an env setting '
                'the resume changed).'
            ) from None

    def _call_envs(self, name: str, env_calls: int = 1) -> tuple:
        """Each env's ``name()`` (a method of a wrapper of it), in env order.

        Args:
            env_calls: the resets and steps the method makes in an env, for
                the timeout (summed over the envs that run one after another).
        """
        if self.use_subprocesses:
            self._call(self._env.call_async, name)
            with _env_process_errors_unlogged():
                return self._call(
                    self._env.call_wait, timeout=self._timeout(env_calls), env_calls=env_calls
                )
        return self._call(self._env.call, name, env_calls=env_calls * self.num_envs)

    @property
    def render_fps(self) -> Optional[float]:
        """The env's ``metadata['render_fps']``: its steps per simulated second; None if unset."""
        fps = (self._env.metadata or {}).get('render_fps')
        return float(fps) if fps else None

    def render(self) -> tuple:
        """One frame per env, as the envs' render mode gives it (e.g. HxWx3 uint8 arrays)."""
        return tuple(self._call(self._env.render))

    def _timeout(self, env_calls: int = 1) -> Optional[float]:
        """Seconds a call into the envs that makes ``env_calls`` resets or steps (in one env
        after another) may take: ``step_timeout`` each, at most ``_LONGEST_WAIT_S``."""
        if self._step_timeout is None:
            return None
        return min(self._step_timeout * env_calls, _LONGEST_WAIT_S)

    def _timeout_text(self, env_calls: int) -> str:
        per_call = f' for each of {env_calls} env calls' if env_calls > 1 else ''
        return f'{self._timeout(env_calls):g} s (create_environment.step_timeout{per_call})'

    def _call(self, method, *args, env_calls: int = 1, **kwargs):
        """``method(*args, **kwargs)`` of the vector env; after a crash, stop all envs and raise.

        gymnasium leaves an AsyncVectorEnv waiting for replies that will never
        come after a worker raised, died or timed out (a plain ``close()`` then
        blocks forever), so the processes are terminated here before raising.
        In process, the watchdog ends the process if the call never returns
        within ``step_timeout`` times ``env_calls``, the resets and steps it makes.
        """
        call = method.__name__.removesuffix('_wait')
        try:
            self.calls += 1
            self.busy = True
            if kwargs.get('timeout') is not None and self.use_subprocesses:
                # gymnasium's own wait would count time this process spent stopped.
                replied = _replied_within(self._env.parent_pipes, kwargs['timeout'])
                kwargs['timeout'] = None if replied else 0.0
            token = None
            if self._step_timeout is not None and not self.use_subprocesses:
                token = watchdog.start(
                    self._timeout(env_calls),
                    lambda: (
                        f"Environment '{self.name}' ({self._in_process}) did not return from "
                        f'{call}() '
                        f'within {self._timeout_text(env_calls)}'
                    ),
                )
            try:
                return method(*args, **kwargs)
            finally:
                self.busy = False
                if token is not None:
                    watchdog.done(token)
        except multiprocessing.TimeoutError as e:
            message = self._hung_workers_message(call, self._timeout_text(env_calls))
            self._terminate()
            raise EnvironmentHungError(message) from e
        except _DEAD_WORKER_ERRORS as e:
            message = self._dead_workers_message()
            self._terminate()
            raise EnvironmentCrashedError(message) from e
        except EnvironmentCrashedError as e:
            self._terminate()
            # gymnasium re-raises what an env process raised as type(error)(error).
            if len(e.args) == 1 and isinstance(e.args[0], EnvironmentCrashedError):
                raise e.args[0] from None
            raise
        except BaseException:
            self._terminate()
            raise

    def _dead_workers_message(self) -> str:
        processes = getattr(self._env, 'processes', [])
        # The pipe closed when the process ended; its exit code follows shortly.
        deadline = time.monotonic() + _EXIT_CODE_WAIT_S
        while True:
            dead = [(i, p.exitcode) for i, p in enumerate(processes) if p.exitcode is not None]
            if dead or time.monotonic() > deadline:
                break
            time.sleep(_EXIT_CODE_POLL_S)
        if not dead:
            return f"Environment '{self.name}': lost the connection to an env process."
        which = ', '.join(
            f'{self.label} {i} of {self.num_envs} (exit code {code})' for i, code in dead
        )
        return (
            f"Environment '{self.name}': the process of {which} died "
            'without raising a Python exception (killed, os._exit, or a crash in native '
            'code); its output above may say why.'
        )

    def which(self, index) -> str:
        """How errors name the env of ``index`` (or indices): ``Environment 'X' (env 3 of 12)``."""
        return describe_env(self.name, self.label, index, self.num_envs)

    @property
    def _in_process(self) -> str:
        return 'in process' if self.label == 'env' else f'{self.label}s, in process'

    def _hung_workers_message(self, call: str, within: str) -> str:
        # A process that answered has its reply waiting in the pipe.
        late = [i for i, pipe in enumerate(self._env.parent_pipes) if not pipe.poll()]
        which = ', '.join(str(i) for i in late) or 'unknown'
        return (
            f'{self.which(which)} did not answer '
            f'{call}() within {within}; all env processes were '
            'terminated.'
        )

    def _terminate(self):
        if not self._closed:
            self._closed = True
            if self.use_subprocesses:
                _stop_env_processes(self._env)
                return
            # An env that its error left broken and that fails to close as well only
            # warns (_NamedEnv.close): the error that names the env stays the one raised.
            self._env.close()

    def close(self):
        """Close the envs and end their processes; calling it again does nothing.

        An env process whose env's ``close()`` does not return within
        ``step_timeout`` is terminated, with a warning; in process, the
        watchdog ends the process, as for a hung ``step()``.
        """
        if self._closed:
            return
        try:
            if self.use_subprocesses:
                self._close_env_processes()
            else:
                self._env.close()
            self._closed = True
        except _DEAD_WORKER_ERRORS:
            # A process died since the last step: nobody answers 'close'.
            self._terminate()

    def _close_env_processes(self):
        """Close every env in its process, waiting ``step_timeout`` for the processes to end.

        An env process answers 'close' before it calls its env's ``close()``, and
        gymnasium's ``close`` then waits for the process to end without a limit.
        """
        env = self._env
        deadline = None if self._step_timeout is None else time.monotonic() + self._step_timeout

        def left() -> Optional[float]:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for pipe in env.parent_pipes:
            pipe.send(('close', None))
        for pipe in env.parent_pipes:
            if pipe.poll(left()):
                pipe.recv()
        for process in env.processes:
            process.join(left())
        late = [i for i, process in enumerate(env.processes) if process.is_alive()]
        _stop_env_processes(env)
        if late:
            logging.warning(
                '%s did not return from close() within %s; its process was terminated.',
                self.which(', '.join(str(i) for i in late)),
                self._timeout_text(1),
            )

    def __enter__(self) -> 'BatchedEnvironment':
        return self

    def __exit__(self, *exc_info):
        self.close()


def _value_text(env_value, value: np.floating) -> str:
    """A value that is not finite as float32; for one the env gave finite, that value too."""
    env_value = np.asarray(env_value)
    if np.isfinite(env_value):
        return f'{value} (the env gave {env_value.item():.6g} as {env_value.dtype}, beyond float32)'
    return str(value)


def _range_is_finite(space: spaces.Box) -> bool:
    """Whether ``high - low`` of ``space`` is finite in its own float type, where the action
    mapping computes it: infinite bounds, and the bounds -max and max (a way to write
    unbounded), give inf."""
    with np.errstate(over='ignore', invalid='ignore'):
        return bool(np.isfinite(space.high - space.low).all())


def _first_non_finite(values: np.ndarray) -> Tuple[int, np.ndarray]:
    """The first env (row) of ``[N, D]`` ``values`` with a NaN or infinite value, and the
    columns of that row that are; ``values`` must have one."""
    bad = ~np.isfinite(values)
    i = int(np.flatnonzero(bad.any(axis=1))[0])
    return i, np.flatnonzero(bad[i])


def _record_problem(record, action_dim: int) -> Optional[str]:
    """What is wrong with an episode record from a checkpoint, or None."""
    if not isinstance(record, dict) or set(record) != {'seed', 'rng', 'actions', 'ended'}:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        return f'is {short_repr(keys)}, not a dict of seed, rng, actions and ended'
    actions = record['actions']
    if not (
        torch.is_tensor(actions)
        and actions.is_floating_point()
        and actions.device.type != 'meta'
        and actions.dim() == 2
        and actions.shape[1] == action_dim
    ):
        return (
            f'has actions {getattr(actions, "dtype", type(actions).__name__)} of shape '
            f'{getattr(actions, "shape", None)}, not floats of shape [steps, {action_dim}]'
        )
    if len(actions) > episode_replay.MAX_RECORDED_STEPS:
        return (
            f'has {len(actions)} actions, more than an episode record holds '
            f'({episode_replay.MAX_RECORDED_STEPS})'
        )
    seed, rng = record['seed'], record['rng']
    if (seed is None) == (rng is None):
        return 'needs exactly one of a seed and a generator state'
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        return f'has the seed {short_repr(seed)}, not an integer >= 0'
    if rng is not None and not isinstance(rng, dict):
        return f'has the generator state {short_repr(rng)}, not a dict'
    return None


def _watched(pid: int) -> Optional[psutil.Process]:
    """The process ``pid`` as psutil reads it; None when it is gone."""
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _own_bytes(process: Optional[psutil.Process]) -> int:
    """The unique set size of ``process`` in bytes; 0 when it is None, gone or a zombie."""
    if process is None:
        return 0
    try:
        return process.memory_full_info().uss
    except psutil.Error:
        return 0


def _child_pids() -> set:
    """Process ids of this process's children, alive or not yet reaped."""
    return {child.pid for child in psutil.Process().children()}


def _unregistered_env_processes(env: AsyncVectorEnv, children_before: set) -> list:
    """Env processes of ``env`` that were forked but that ``env`` does not know of.

    A signal whose handler raises can arrive while ``Process.start`` forks: the
    child runs, but the exception leaves the ``Process`` without its pid. Such a
    child is a child of this process that was not there before ``env`` started
    its processes, and runs this same program (a forked copy) or
    ``multiprocessing``'s spawn entry point.
    """
    known = children_before | {p.pid for p in getattr(env, 'processes', []) if p.pid is not None}
    try:
        own_command = psutil.Process().cmdline()
    except psutil.Error:
        return []
    strays = []
    for child in psutil.Process().children():
        if child.pid in known:
            continue
        try:
            command = child.cmdline()
        except psutil.Error:  # Exited, or a zombie whose command line is gone.
            command = None
        spawned = command is not None and 'multiprocessing.spawn' in ' '.join(command)
        if command is None or command == own_command or spawned:
            strays.append(child)
    return strays


def _stop_env_processes(env: AsyncVectorEnv, children_before: Optional[set] = None) -> None:
    """Kill (SIGKILL) and reap the env processes of ``env`` and close its pipes, in any state.

    gymnasium's ``close(terminate=True)`` first waits for the pending call,
    which raises again on the pipe of a process that died, before it
    terminates anything; nothing is waited for here. The ``Process`` objects
    of the reaped processes are closed: their pipes, and those of gymnasium's
    error queue, would otherwise stay open until ``env`` is collected, which
    after a crash waits for the garbage collector (the error raised holds
    ``env`` in a reference cycle through its traceback).

    Args:
        env: the vector env, possibly one whose ``__init__`` failed half-way,
            with processes it never started.
        children_before: this process's children before ``env`` started its
            processes; given, a process forked for ``env`` whose start was cut
            short (see ``_unregistered_env_processes``) is killed too.
    """
    # Never started when the exception came between creating and starting it.
    processes = [p for p in getattr(env, 'processes', []) if p.pid is not None]
    strays = [] if children_before is None else _unregistered_env_processes(env, children_before)
    for process in processes:
        if process.is_alive():
            process.kill()  # Env processes ignore SIGTERM (set_env_process_signals).
    for pipe in getattr(env, 'parent_pipes', []):
        if pipe is not None:
            pipe.close()
    for process in processes:
        process.join()
    for process in processes:
        # Not one that something else reaped (multiprocessing never learns its exit code):
        # closing it would raise.
        if process.exitcode is not None:
            process.close()
    error_queue = getattr(env, 'error_queue', None)
    if error_queue is not None:
        # Queue.close() closes only the pipe of a queue this process wrote to.
        error_queue._reader.close()
        error_queue._writer.close()
    for stray in strays:
        # Not a multiprocessing child any more: killed and reaped here.
        with contextlib.suppress(psutil.Error):
            stray.kill()
            stray.wait(_TERMINATE_WAIT_S)
    # gymnasium's __del__ would otherwise try to close it again.
    env.closed = True


# ``seed`` is the trainer's (train_env_seeds of TrainerConfig.random_seed): a gin
# binding would be overridden at the first reset. ``label`` tells its two kinds apart.
@gin.configurable(denylist=['seed', 'label', 'check_dims'])
def create_environment(
    env_name: str = 'Pendulum-v1',
    num_parallel_environments: int = 1,
    seed: Union[int, Sequence[int]] = 0,
    use_subprocesses: Optional[bool] = None,
    max_episode_steps: Optional[int] = None,
    render_mode: Optional[str] = None,
    env_kwargs: Optional[Dict[str, Any]] = None,
    step_timeout: Optional[float] = 60.0,
    label: str = 'env',
    check_dims: Optional[Callable[..., None]] = None,
) -> BatchedEnvironment:
    """Create ``num_parallel_environments`` copies of a registered gymnasium env.

    Args:
        env_name: a registered gymnasium id, e.g. 'HalfCheetah-v5' or
            'alf_lite/PointTarget-v0'; ``module:Id`` imports ``module`` (which
            registers ``Id``) first, e.g. 'my_envs:MyEnv-v0'.
        num_parallel_environments: number of envs N stepped together.
        seed: seeds of the first reset: an int seeds env ``i`` with
            ``seed + i``, a sequence gives one seed per env.
        use_subprocesses: step each env in its own process. ``None`` picks
            the faster way measured for the env (README, Environments): in
            process for gymnasium's own envs (classic control, MuJoCo) and
            alf_lite's PyBullet locomotion suite, whose steps are cheaper than
            a subprocess round trip; subprocesses for any other env (e.g.
            ``ICubWalk-v0``) when N > 1.
        max_episode_steps: time limit of an episode (truncation); ``None``
            keeps the limit the env was registered with, and is refused for
            an env registered without one.
        render_mode: gymnasium's render mode, e.g. 'rgb_array' for
            ``BatchedEnvironment.render()``, one the env's
            ``metadata['render_modes']`` lists; None renders nothing.
        env_kwargs: arguments of the env's constructor by name, as
            ``gymnasium.make(id, **env_kwargs)`` takes them, e.g.
            ``{'terminate_when_unhealthy': False}`` for 'Hopper-v5'; every env
            (training, evaluation, play, env processes) is built with them.
            None: none. A key is refused before any env is built when no
            constructor argument of the env takes it, when the id's
            registration sets it (the robot of a PyBullet id: the id stands
            for it), or when it is ``max_episode_steps`` or ``render_mode``
            (set those of create_environment).
        step_timeout: seconds a ``reset``, ``step`` or ``close`` may take, far above any
            simulator's step time. Env processes that take longer are stopped
            with ``EnvironmentHungError`` naming the env, its index and the
            timeout; an in-process env that takes longer ends the process with
            exit code 3 after printing every thread's stack. At most ``1e6``
            (11.6 days); None (or inf) waits forever (e.g. to debug an env in pdb).
            Time the process spends stopped (Ctrl-Z, SIGSTOP) does not count.
        label: what errors call one of these envs (``BatchedEnvironment``);
            the trainer's evaluation envs are 'eval env'.
        check_dims: called with ``num_envs``, ``observation_dim`` and
            ``action_dim`` once the first env is made, before the others
            (``BatchedEnvironment``).
    Returns:
        the ``BatchedEnvironment``; close it (or use it as a context manager).
    Raises:
        ValueError: for an unknown id (naming the closest registered ids), the
            ``module`` of ``module:Id`` raising on import (whatever it raises), an
            env without a time limit, unsupported spaces, a count that is not a
            positive integer, or a key of ``env_kwargs`` the env does not take
            (naming the closest ones); ``RenderModeError`` for a ``render_mode``
            the env does not list.
        EnvironmentCrashedError: when an env cannot be created.
    """
    sizes = {'num_parallel_environments': num_parallel_environments}
    if max_episode_steps is not None:
        sizes['max_episode_steps'] = max_episode_steps
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(
                f'create_environment.{name} must be a positive integer, got {value!r}.'
            )
    if max_episode_steps is not None:
        # gymnasium's TimeLimit takes a Python int only, not a numpy one.
        max_episode_steps = int(max_episode_steps)
    env_id = env_name
    if ':' in env_name:
        module, env_id = env_name.split(':', 1)
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001  (an import may raise anything, e.g. a missing extra)
            raise ValueError(
                f"Environment '{env_name}': cannot import module '{module}', which "
                f'should register {env_id!r}: {type(e).__name__}: {e}'
            ) from e
    try:
        # A spec (rather than the id) travels with the env factory, so a
        # subprocess needs no registration of its own.
        spec = gymnasium.spec(env_id)
    except gymnasium.error.Error as e:
        close = difflib.get_close_matches(env_id, list(gymnasium.envs.registry.keys()), n=5)
        if env_id != env_name:
            # Written as given: without its module, the id is unknown to a new process.
            close = [f'{module}:{c}' for c in close]
        hint = (
            ('Closest registered ids: ' + ', '.join(repr(c) for c in close) + '.')
            if close
            else ('No registered id is close; is the module that registers it imported?')
        )
        # An id pasted from a document can look the same as the one it was meant to be.
        pasted = pasted_character(env_name, 'It')
        raise ValueError(f"Unknown environment id '{env_name}'.{pasted} {hint}") from e
    if max_episode_steps is None and spec.max_episode_steps is None:
        # An episode that never terminates would never end: an evaluation,
        # which runs each episode to its end, would wait for it forever.
        raise ValueError(
            f"Environment '{env_name}' has no time limit (it was registered without "
            'max_episode_steps); set create_environment.max_episode_steps, e.g. to 1000.'
        )
    env_kwargs = _checked_env_kwargs(env_name, spec, env_kwargs)
    if render_mode is not None:
        _check_render_mode(env_name, spec, render_mode)
    if use_subprocesses is None:
        use_subprocesses = default_use_subprocesses(spec, num_parallel_environments)
    # Envs without rendering may not accept a render_mode argument at all.
    render_kwargs = {} if render_mode is None else {'render_mode': render_mode}
    # A partial of picklable values: env processes get the same arguments.
    env_fn = functools.partial(
        _make, spec, max_episode_steps=max_episode_steps, **render_kwargs, **env_kwargs
    )
    try:
        env_fns = [env_fn] * num_parallel_environments
    except (OverflowError, MemoryError):
        raise ValueError(
            f'create_environment.num_parallel_environments = {num_parallel_environments}: '
            'more envs than the memory can hold.'
        ) from None
    return BatchedEnvironment(
        env_fns,
        seed=seed,
        use_subprocesses=use_subprocesses,
        name=env_name,
        step_timeout=step_timeout,
        label=label,
        check_dims=check_dims,
    )


def _make(spec: gymnasium.envs.registration.EnvSpec, **kwargs) -> gymnasium.Env:
    """``gymnasium.make(spec, **kwargs)``; where the env's module uses MuJoCo, MuJoCo's
    warnings go to the log first (``_log_mujoco_warnings``)."""
    if isinstance(spec.entry_point, str):
        # Imports the env's module (gymnasium.make would); what it raises, make raises too.
        with contextlib.suppress(Exception):
            gymnasium.envs.registration.load_env_creator(spec.entry_point)
    if 'mujoco' in sys.modules:
        _log_mujoco_warnings()
    env = gymnasium.make(spec, **kwargs)
    if 'mujoco' in sys.modules:
        # An entry point that imports MuJoCo only when called: from the next env on.
        _log_mujoco_warnings()
    return env


# The MuJoCo warnings this process logged (``_log_mujoco_warning``).
_mujoco_warnings_logged = set()


def _log_mujoco_warnings() -> None:
    """Send MuJoCo's warnings to the log, each text once per process, unless the process
    already handles them (``mujoco.set_mju_user_warning``).

    MuJoCo otherwise prints each to stdout and appends it to ``MUJOCO_LOG.TXT`` in the
    working directory: gymnasium's HalfCheetah model, for one, warns of a deprecated
    attribute at every env made.
    """
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_log_mujoco_warning)


def _log_mujoco_warning(message: str) -> None:
    if message not in _mujoco_warnings_logged:
        _mujoco_warnings_logged.add(message)
        logging.warning('MuJoCo: %s', message)


@functools.cache
def _taken_by_gymnasium_make() -> Tuple[str, ...]:
    """The arguments ``gymnasium.make`` takes by name, which it keeps from the env."""
    return tuple(
        name
        for name, parameter in inspect.signature(gymnasium.make).parameters.items()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        and name != 'id'
    )


def _checked_env_kwargs(
    env_name: str, spec: gymnasium.envs.registration.EnvSpec, env_kwargs: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    """``create_environment.env_kwargs`` as a dict, its keys checked against the env's constructor.

    Raises:
        ValueError: naming ``create_environment.env_kwargs``, the key and
            ``env_name``, for a key that create_environment sets, that
            ``gymnasium.make`` takes itself, that the id's registration sets, or
            that no constructor argument of the env takes (with the closest ones).
    """
    if env_kwargs is None:
        return {}
    if not isinstance(env_kwargs, dict) or not all(isinstance(k, str) for k in env_kwargs):
        raise ValueError(
            "create_environment.env_kwargs must be a dict of the env constructor's arguments "
            f'by name, e.g. {{"ctrl_cost_weight": 0.05}}; got {env_kwargs!r:.200}.'
        )
    for key in env_kwargs:
        if key in _SET_BY_CREATE_ENVIRONMENT:
            raise ValueError(
                f"create_environment.env_kwargs sets '{key}' of '{env_name}', which "
                f'create_environment sets itself: set create_environment.{key} instead.'
            )
        if key in _taken_by_gymnasium_make():
            raise ValueError(
                f"create_environment.env_kwargs sets '{key}' of '{env_name}', which "
                "gymnasium.make takes itself: it would never reach the env's constructor."
            )
        if key in spec.kwargs:
            raise ValueError(
                f"create_environment.env_kwargs sets '{key}' of '{env_name}', which the id's "
                f'registration sets ({key}={spec.kwargs[key]!r}): the id stands for that '
                'value. Use the id registered with the value you want, or register one.'
            )
    accepted = _keyword_arguments(_entry_point(env_name, spec, 'create_environment.env_kwargs'))
    if accepted is not None:
        kept = _SET_BY_CREATE_ENVIRONMENT + _taken_by_gymnasium_make() + tuple(spec.kwargs)
        settable = [a for a in accepted if a not in kept]
        for key in env_kwargs:
            if key not in accepted:
                closest = closest_names(key, settable)
                hint = f'Closest valid keys: {quoted_names(closest)}. ' if closest else ''
                raise ValueError(
                    f"create_environment.env_kwargs has the key '{key}', which no constructor "
                    f"argument of '{env_name}' ({spec.entry_point}) takes. {hint}Its keys "
                    f'env_kwargs may set are: {", ".join(settable) or "none"}.'
                )
    return dict(env_kwargs)


def _check_render_mode(
    env_name: str, spec: gymnasium.envs.registration.EnvSpec, render_mode: str
) -> None:
    """Refuse a ``render_mode`` that the env's ``metadata['render_modes']`` does not list.

    gymnasium only warns when the env is made: the env then renders nothing, or its
    constructor or first render fails, after the run began. An entry point
    without metadata (a function) is left to what it builds.

    Raises:
        RenderModeError: naming ``create_environment.render_mode``, ``env_name`` and
            the modes the env lists (the closest first).
    """
    creator = _entry_point(env_name, spec, 'create_environment.render_mode')
    while isinstance(creator, functools.partial):
        creator = creator.func
    metadata = getattr(creator, 'metadata', None)
    modes = metadata.get('render_modes') if isinstance(metadata, dict) else None
    if modes is None or render_mode in modes:
        return
    named = [m for m in modes if isinstance(m, str)]
    closest = closest_names(render_mode, named) if isinstance(render_mode, str) else []
    hint = f'Closest valid modes: {quoted_names(closest)}. ' if closest else ''
    listed = (
        f'Its render modes are: {", ".join(map(repr, modes))}.'
        if modes
        else "It lists no render mode (its metadata['render_modes'] is empty)."
    )
    raise RenderModeError(
        f"create_environment.render_mode is {render_mode!r}, which '{env_name}' does not "
        f'render in. {hint}{listed}',
        env_name,
        modes,
    )


def _entry_point(
    env_name: str, spec: gymnasium.envs.registration.EnvSpec, checking: str
) -> Callable:
    """What ``gymnasium.make`` calls to build the env of ``spec`` (its module imported).

    Args:
        env_name: the id as given, which the error names.
        spec: the env's registration.
        checking: the setting it is loaded to check, which the error names.
    Raises:
        ValueError: when it cannot be loaded, naming ``env_name`` and the entry point.
    """
    if callable(spec.entry_point):
        return spec.entry_point
    try:
        return gymnasium.envs.registration.load_env_creator(spec.entry_point)
    except Exception as e:  # noqa: BLE001  (an import may raise anything, e.g. a missing extra)
        settings_error = _mujoco_gl_error(f"Environment '{env_name}'", e)
        if settings_error is not None:
            raise settings_error from e
        raise ValueError(
            f"Environment '{env_name}': cannot load its entry point {spec.entry_point!r} to "
            f'check {checking}: {type(e).__name__}: {e}'
        ) from e


def _keyword_arguments(creator: Callable) -> Optional[List[str]]:
    """The arguments an env's entry point takes by name, in signature order; None for any name.

    An ``__init__`` taking ``**kwargs`` is taken to hand them to its base
    class's (gymnasium's MuJoCo envs hand them to ``MujocoEnv``), whose
    arguments with a default then count too, and so on down to an ``__init__``
    without ``**kwargs``. Where that never comes (a function taking
    ``**kwargs``, ``object.__init__`` reached), any name is taken. A class with no
    ``__init__`` (nor ``__new__``) but ``object``'s takes none.
    """
    names = []
    while isinstance(creator, functools.partial):
        names += list(creator.keywords)
        creator = creator.func
    is_class = inspect.isclass(creator)
    functions = (
        [vars(c)['__init__'] for c in creator.__mro__ if '__init__' in vars(c)]
        if is_class
        else [creator]
    )
    if is_class and functions[0] is object.__init__ and creator.__new__ is object.__new__:
        # No __init__ or __new__ below object's: the class takes no argument (object's
        # **kwargs only raise).
        return list(dict.fromkeys(names))
    for depth, function in enumerate(functions):
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature
            return None
        if is_class:
            parameters = parameters[1:]  # self
        names += [
            p.name
            for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            # A base's arguments without a default are the subclass's to give.
            and (depth == 0 or p.default is not p.empty)
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return list(dict.fromkeys(names))
    return None


def default_use_subprocesses(spec: gymnasium.envs.registration.EnvSpec, num_envs: int) -> bool:
    """Whether ``num_envs`` copies of the env ``spec`` step faster in subprocesses.

    Args:
        spec: the registered env; an entry point that is a ``functools.partial``
            counts as the callable it wraps.
        num_envs: number of parallel envs.
    Returns:
        False for one env and for the envs of ``IN_PROCESS_ENTRY_POINTS``
        (cheap steps), True otherwise.
    """
    if num_envs <= 1:
        return False
    entry_point = spec.entry_point
    while isinstance(entry_point, functools.partial):
        entry_point = entry_point.func
    if not isinstance(entry_point, str):
        # A callable object (not a function or class) is named by its class.
        named = entry_point if hasattr(entry_point, '__qualname__') else type(entry_point)
        entry_point = f'{getattr(named, "__module__", None)}:{named.__qualname__}'
    return not entry_point.startswith(IN_PROCESS_ENTRY_POINTS)
