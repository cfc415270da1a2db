"""TrainerConfig and the generic off-policy trainer: the loop that collects, trains, evaluates,
summarises and checkpoints, each done by its own module."""

import ast
import contextlib
import functools
import inspect
import os
import signal
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import gin
import numpy as np
import psutil
import torch
from absl import logging

from alf_lite import checkpoint as ckpt
from alf_lite.algorithms import SacAlgorithm
from alf_lite.algorithms.off_policy_algorithm import NonFiniteLossError, loss_mask
from alf_lite.collector import Collector
from alf_lite.config import (
    bindings_passed_by_hand,
    overridden_gin_params,
    shortened,
    unused_bindings,
    write_bytes_atomically,
    write_text_atomically,
)
from alf_lite.device import (
    DeviceUnavailableError,
    available_cpu_memory,
    describe_device,
    device_type,
    free_memory_bytes,
    memory_bound_text,
    resolve_device,
    use_deterministic_algorithms,
)
from alf_lite.environments import (
    EnvironmentCrashedError,
    EpisodeReplayError,
    NonFiniteActionError,
    create_environment,
)
from alf_lite.episode_stats import EpisodeStats
from alf_lite.evaluation import TerminationValues, evaluate
from alf_lite.model_memory import build_checked
from alf_lite.networks import BatchedLinear
from alf_lite.precision import (
    compute_dtype,
    set_network_precision,
    warn_if_emulated,
    warn_if_not_applied,
)
from alf_lite.replay_buffer import (
    ReplayBuffer,
    ReplayBufferMismatchError,
    check_replay_buffer_fits,
)
from alf_lite.run_dir import (
    RunDir,
    RunDirLock,
    bound_values,
    changed_bindings,
    config_changed_since,
    config_int,
    inside_run_refusal,
    keep_superseded_config,
    last_good_name,
    read_config_text,
)
from alf_lite.runs import (
    DEFAULT_NUM_ENV_STEPS,
    DEFAULT_SEED,
    ENV_PROCESSES_USS_BYTES,
    ENV_STEPS_PER_SEC,
    EVAL_EPISODE_LENGTH,
    EVAL_Q_NEAR_TERMINATION,
    EVAL_RETURN,
    EVAL_RETURN_NEAR_TERMINATION,
    MAX_SEED,
    PROCESS_RSS_BYTES,
    REPLAY_BUFFER_BYTES,
    UPDATES_PER_SEC,
    train_column,
)
from alf_lite.seeding import (
    eval_env_seeds,
    global_rng_kept,
    global_rng_state,
    resume_env_seeds,
    seed_everything,
    set_global_rng_state,
    train_env_seeds,
)
from alf_lite.signals import (
    InterruptedEvaluation,
    InterruptedInEnvCall,
    StopSignals,
    TrainingInterrupted,
    env_processes_starting,
)
from alf_lite.summary import (
    Summary,
    Throughput,
    last_env_steps,
    print_progress,
    read_progress,
    summarised_at,
    unevaluated_row,
)
from alf_lite.update import UpdateRunner, check_cuda_graph_device


def _optimizer_overflow(state_name: str) -> str:
    """Why an optimizer's state named ``<optimizer>.<index>.<key>`` is not finite while
    the weights are: a squared gradient (Adam's second moment, RMSprop's average,
    Adagrad's sum) overflows with a gradient above ~6e20 in float32, a sum of gradients
    (a momentum) only with an overflowed gradient, which the non-finite guard skips."""
    key = state_name.rsplit('.', 1)[-1]
    if key == 'exp_avg_sq':
        return 'Adam: a gradient overflowed its second moment, and its weight can no longer move'
    return f'{key}: a gradient overflowed it while the weights stayed finite'


@gin.configurable
class TrainerConfig:
    """Everything the off-policy trainer needs; names follow ALF's where they exist.

    All intervals and step counts are in env steps, summed over parallel envs.

    Args:
        algorithm_ctor: ``ctor(observation_dim, action_dim)`` of an
            ``OffPolicyAlgorithm``.
        random_seed: seeds python, numpy and torch; the train and eval envs
            get distinct seeds derived from it (``alf_lite.seeding``). In [0, 2**32).
        num_env_steps: stop after this many env steps: at the end of the first
            iteration (``unroll_length`` steps of every env) that reaches it, so
            past it by less than an iteration where that does not divide it.
        initial_collect_steps: uniform random actions for this many env steps,
            rounded up to a multiple of the number of training envs (they step
            together: 1000 with 3 envs gives 1002); training starts once more
            steps than this were collected (a run that ends first only
            collects, with a warning).
        unroll_length: steps collected from every env per iteration.
        mini_batch_size: windows per update.
        mini_batch_length: rows per window; 2 gives one transition per window.
        num_updates_per_train_iter: updates after each collection.
        replay_buffer_length: rows kept per env; capacity is this times the
            number of parallel envs.
        summary_interval: write training scalars every this many env steps.
        eval_interval: evaluate the deterministic policy every this many env steps.
        num_eval_episodes: episodes per evaluation, each on its own seed.
        num_eval_environments: eval envs, which play the episodes side by side
            in rounds (the last one may be shorter); None: ``num_eval_episodes``,
            one round. The episodes (their seeds) do not depend on it, but the
            policy's float32 products round with the size of its batch: the
            figures agree to about 7 digits on Pendulum, not bit for bit, and an
            env whose falls that rounding can change (the iCub) plays other
            episodes. Fewer envs hold less memory (an ICubWalk-v0 env takes about
            130 MB) and take longer.
        checkpoint_interval: write a checkpoint every this many env steps
            (and always at the end).
        max_checkpoints_to_keep: keep only this many of the newest
            checkpoints, removing older ones as each new one is written (the
            state kept aside at a fault, ``last_good-<env_steps>``, always
            stays); None keeps every one. A resume falls back to an older
            checkpoint only where one is kept.
        torch_num_threads: torch intra-op threads; 1 is usually fastest for
            small networks when anything else runs on the machine. At most
            ``MAX_TORCH_THREADS``; more than the cores the process may use is
            warned about (the threads wait for each other).
        mask_out_loss_for_last_step: drop the loss of each transition from a
            LAST row (its next row is another episode's FIRST). False trains on them, as
            tf-agents does; for study only. Either way, the pair across the
            restart of a resumed run is never trained on.
        checkpoint_replay_buffer: save the replay buffer with the checkpoint so
            a resumed run continues with the same data.
        device: where the networks, their optimizer states and the update
            live: 'auto' (a GPU when there is one, else the CPU), 'cpu', 'cuda'
            or 'cuda:N'. The envs always step on the CPU.
        cuda_graph: capture the whole update (sampling, losses, optimizer
            steps, target update) and the policy's step of collection (with
            its row's write into a GPU buffer) as CUDA graphs and replay
            them; GPU only.
        compile: ``torch.compile`` the algorithm's networks. On an H200 it took
            the SAC update as a CUDA graph from 1369 to 1614 updates/s; on a
            CPU it made the update slower (82 against 96 updates/s), and it
            adds seconds of compilation at the start either way. Compiled code
            draws its own random numbers (the policy's exploration samples) and
            rounds differently: a run is as reproducible either way, but one
            that switches it at a resume goes on otherwise than it would have.
            Where ``torch.compile`` cannot compile (no C++ compiler for the CPU,
            say), the trainer is refused at its construction (``ValueError``).
        precision: 'float32', or 'bfloat16' for the networks' hidden-layer
            products (``alf_lite.precision``; slow where the CPU or GPU has no
            native bfloat16).
        defer_non_finite_checks: check the losses for NaN/inf on the device and
            stop at the next summary or checkpoint (updates after a bad loss
            are skipped) instead of at once, which reads each loss back to the
            host. None: deferred on a GPU, immediate on the CPU.
    """

    def __init__(
        self,
        algorithm_ctor: Callable = SacAlgorithm,
        random_seed: int = DEFAULT_SEED,
        num_env_steps: int = DEFAULT_NUM_ENV_STEPS,
        initial_collect_steps: int = 1000,
        unroll_length: int = 1,
        mini_batch_size: int = 256,
        mini_batch_length: int = 2,
        num_updates_per_train_iter: int = 1,
        replay_buffer_length: int = 100_000,
        summary_interval: int = 1000,
        eval_interval: int = 5000,
        num_eval_episodes: int = 10,
        num_eval_environments: Optional[int] = None,
        checkpoint_interval: int = 10_000,
        max_checkpoints_to_keep: Optional[int] = None,
        torch_num_threads: int = 1,
        mask_out_loss_for_last_step: bool = True,
        checkpoint_replay_buffer: bool = True,
        device: str = 'auto',
        cuda_graph: bool = False,
        compile: bool = False,
        precision: str = 'float32',
        defer_non_finite_checks: Optional[bool] = None,
    ):
        positive = (
            'num_env_steps',
            'unroll_length',
            'mini_batch_size',
            'num_updates_per_train_iter',
            'replay_buffer_length',
            'summary_interval',
            'eval_interval',
            'num_eval_episodes',
            'checkpoint_interval',
            'torch_num_threads',
            'mini_batch_length',
        )
        values = locals()
        for name in positive + ('random_seed', 'initial_collect_steps'):
            value = values[name]
            if not _is_integer(value):
                raise ValueError(
                    f'TrainerConfig.{name} must be an integer, got {value!r} '
                    f'({type(value).__name__}).'
                )
        for name in positive:
            if values[name] <= 0:
                raise ValueError(f'TrainerConfig.{name} must be positive, got {values[name]}.')
        if torch_num_threads > MAX_TORCH_THREADS:
            raise ValueError(
                f'TrainerConfig.torch_num_threads must be at most {MAX_TORCH_THREADS}, got '
                f'{torch_num_threads}: OpenMP cannot start that many threads (it aborts '
                'the process); at most as many as the cores is fastest, 1 where other '
                'processes share them.'
            )
        if mini_batch_length < 2:
            raise ValueError(
                'TrainerConfig.mini_batch_length must be >= 2: a TD update needs '
                f'a row and its next row, got {mini_batch_length}.'
            )
        if not 0 <= random_seed < MAX_SEED:
            raise ValueError(f'TrainerConfig.random_seed must be in [0, 2**32), got {random_seed}.')
        if not 0 <= initial_collect_steps <= num_env_steps:
            raise ValueError(
                f'TrainerConfig.initial_collect_steps must be in [0, num_env_steps '
                f'= {num_env_steps}], got {initial_collect_steps}: the run would '
                'end before training starts.'
            )
        if replay_buffer_length < mini_batch_length:
            raise ValueError(
                f'TrainerConfig.replay_buffer_length ({replay_buffer_length}) must '
                f'be >= mini_batch_length ({mini_batch_length}).'
            )
        for name in _FLAGS:
            if not isinstance(values[name], (bool, np.bool_)):
                raise ValueError(
                    f'TrainerConfig.{name} must be True or False, got {values[name]!r}.'
                )
        for name in ('num_eval_environments', 'max_checkpoints_to_keep'):
            value = values[name]
            if value is not None and (not _is_integer(value) or value <= 0):
                raise ValueError(
                    f'TrainerConfig.{name} must be a positive integer or None, got {value!r}.'
                )
        if defer_non_finite_checks is not None and not isinstance(
            defer_non_finite_checks, (bool, np.bool_)
        ):
            raise ValueError(
                'TrainerConfig.defer_non_finite_checks must be True, False or None, got '
                f'{defer_non_finite_checks!r}.'
            )
        if not isinstance(device, str):
            raise ValueError(
                f"TrainerConfig.device must be a string such as 'auto', 'cpu' or 'cuda:0', "
                f'got {device!r}.'
            )
        try:
            # Its form only: whether the device is on this machine is the Trainer's to
            # find, as play runs on the CPU whatever the run trained on.
            device_type(device)
            compute_dtype(precision)
        except ValueError as e:
            raise ValueError(f'TrainerConfig.{e}') from None
        if not callable(algorithm_ctor):
            raise ValueError(
                'TrainerConfig.algorithm_ctor must be an algorithm class, e.g. '
                f'@SacAlgorithm, got {algorithm_ctor!r}.'
            )
        self.algorithm_ctor = algorithm_ctor
        self.random_seed = random_seed
        self.num_env_steps = num_env_steps
        self.initial_collect_steps = initial_collect_steps
        self.unroll_length = unroll_length
        self.mini_batch_size = mini_batch_size
        self.mini_batch_length = mini_batch_length
        self.num_updates_per_train_iter = num_updates_per_train_iter
        self.replay_buffer_length = replay_buffer_length
        self.summary_interval = summary_interval
        self.eval_interval = eval_interval
        self.num_eval_episodes = num_eval_episodes
        self.num_eval_environments = min(
            num_eval_environments or num_eval_episodes, num_eval_episodes
        )
        self.checkpoint_interval = checkpoint_interval
        self.max_checkpoints_to_keep = (
            None if max_checkpoints_to_keep is None else int(max_checkpoints_to_keep)
        )
        self.torch_num_threads = torch_num_threads
        self.mask_out_loss_for_last_step = mask_out_loss_for_last_step
        self.checkpoint_replay_buffer = checkpoint_replay_buffer
        self.device = device
        self.cuda_graph = cuda_graph
        self.compile = compile
        self.precision = precision
        self.defer_non_finite_checks = defer_non_finite_checks
        # A numpy integer (``np.arange``'s seeds) is kept as a Python int, as gin gives them.
        for name in positive + ('random_seed', 'initial_collect_steps', 'num_eval_environments'):
            setattr(self, name, int(getattr(self, name)))
        # A numpy bool (a sweep's ``np.array([True, False])``) is kept as a Python bool.
        for name in _FLAGS:
            setattr(self, name, bool(getattr(self, name)))
        if defer_non_finite_checks is not None:
            self.defer_non_finite_checks = bool(defer_non_finite_checks)
        # The arguments as given (numpy scalars as Python's), before one is derived from
        # others: what the operative config records of them.
        self._arguments = {name: getattr(self, name) for name in _defaults(TrainerConfig)}
        self._arguments['num_eval_environments'] = (
            None if num_eval_environments is None else int(num_eval_environments)
        )

    def defers_non_finite_checks(self, device: torch.device) -> bool:
        """Whether the run on ``device`` checks its losses on the device
        (``defer_non_finite_checks``; None: on a GPU, not on the CPU)."""
        defer = self.defer_non_finite_checks
        return device.type != 'cpu' if defer is None else defer


# The most TrainerConfig.torch_num_threads: past some thousands OpenMP fails to start its
# threads and aborts the process (or it crashes), and no machine has this many cores.
MAX_TORCH_THREADS = 1024
# Seconds each env call under way once a stop signal came, training or evaluating, has to
# end (from the signal, or from its start for one begun later: the rest of the iteration,
# the checkpoint's) before it is abandoned as hung: ample for a step, short for a person.
SIGNALLED_STEP_PATIENCE_S = 10.0

# Seconds between two readings of the env processes' own memory for the summaries: one
# walks their page tables: 4-7 ms a process measured (0.1 s for 16), in the training loop.
ENV_MEMORY_PERIOD_S = 60.0

# TrainerConfig's parameters that take True or False.
_FLAGS = ('mask_out_loss_for_last_step', 'checkpoint_replay_buffer', 'cuda_graph', 'compile')


def _state_problem(error: BaseException) -> str:
    """What loading a checkpoint's algorithm state found wrong, on one line."""
    if isinstance(error, KeyError) and error.args:
        # A KeyError's text is the bare key: "('actor_loss')" for another algorithm's
        # state, which lacks the configured one's.
        return f'its state has no {error.args[0]!r}'
    # torch's load_state_dict puts each problem on a line of its own, after a heading
    # (ten for critic networks of another width): the first is named, the others
    # counted.
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith('Error(s) in loading state_dict'):
        lines = lines[1:]
    if not lines:
        return type(error).__name__
    more = f'; and {len(lines) - 1} more' if len(lines) > 1 else ''
    return shortened(lines[0].rstrip('.')) + more


def _is_integer(value) -> bool:
    """Whether ``value`` is an integer: a Python or numpy one, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@torch.no_grad()
def act_and_value(algorithm, device: torch.device, observation: torch.Tensor):
    """The deterministic action for ``observation`` and the critics' Q of it, on the host.

    One copy to ``device`` and one back, whatever the device: the action and
    its Q travel back together, as float32.
    """
    observation = observation.to(device)
    action = algorithm.predict_step(observation)
    q = algorithm.value_step(observation, action)
    both = torch.cat([action.float(), q.float().unsqueeze(-1)], dim=-1).cpu()
    return both[:, :-1], both[:, -1]


def _check_batch_norm_batch(algorithm, mini_batch_size: int, mini_batch_length: int) -> None:
    """Refuse updates whose batch norms would see one transition: training mode
    normalises with the batch's statistics, which one value per channel does not have.

    Raises:
        ValueError: naming the settings, when a network has batch norm and a
            mini-batch holds fewer than 2 transitions.
    """
    num_transitions = mini_batch_size * (mini_batch_length - 1)
    if num_transitions >= 2:
        return
    if any(isinstance(m, torch.nn.BatchNorm1d) for m in algorithm.modules()):
        raise ValueError(
            f'TrainerConfig.mini_batch_size = {mini_batch_size} with mini_batch_length = '
            f'{mini_batch_length} gives {num_transitions} transition per update, and the '
            "algorithm's networks have batch norm, which needs at least 2 to normalise "
            "with the batch's statistics: raise mini_batch_size or turn batch_norm off."
        )


def _widest_layer_bytes(algorithm, precision: str) -> int:
    """Bytes of the widest output of the algorithm's linear layers for one input row (of a
    ``BatchedLinear``, all its replicas'), in the dtype of the hidden layers' products: every
    network runs on every transition of a mini-batch, so an update holds at least this
    much per transition."""
    widest = 0
    for module in algorithm.modules():
        if isinstance(module, torch.nn.Linear):
            widest = max(widest, module.out_features)
        elif isinstance(module, BatchedLinear):
            widest = max(widest, module.weight.shape[0] * module.out_features)
    return widest * (compute_dtype(precision) or torch.float32).itemsize


def _check_batch_fits(
    buffer: ReplayBuffer, mini_batch_size: int, mini_batch_length: int, layer_bytes: int = 0
) -> None:
    """Refuse a mini-batch larger than the free memory of the device it is sampled to: its
    rows (the stored bytes of its steps), and ``layer_bytes`` per transition (the output of
    the networks' widest layer, ``_widest_layer_bytes``), must fit there, next to the replay
    buffer.

    Raises:
        ValueError: naming the settings, the bytes a batch takes and the bytes free.
    """
    device = buffer.training_device
    rows = mini_batch_size * mini_batch_length * buffer.raw_bytes_per_step
    nbytes = rows + mini_batch_size * (mini_batch_length - 1) * layer_bytes
    if device.type == 'cpu':
        free, bound = available_cpu_memory()
    else:
        free, bound = free_memory_bytes(device), None
    if nbytes > free:
        layer = (
            f", and {layer_bytes} bytes per transition for the output of the networks' widest layer"
            if layer_bytes
            else ''
        )
        raise ValueError(
            f'TrainerConfig.mini_batch_size = {mini_batch_size} with mini_batch_length = '
            f'{mini_batch_length}: a mini-batch of their steps takes at least {nbytes} bytes '
            f'({buffer.raw_bytes_per_step} bytes per step{layer}), more than the {free} bytes '
            f'free on {device}: lower mini_batch_size.{memory_bound_text(bound)}'
        )


# The trainer whose networks were compiled last in this process (``TrainerConfig.compile``).
_compiled_last: Optional[weakref.ref] = None


@contextlib.contextmanager
def _torch_settings(num_threads: int, device: torch.device):
    """torch computes on ``num_threads`` threads, deterministically, while entered; its
    thread count and deterministic mode are as they were again once left."""
    previous = (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    )
    try:
        torch.set_num_threads(num_threads)
        use_deterministic_algorithms(device)
        yield
    finally:
        threads, deterministic, warn_only, benchmark = previous
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.backends.cudnn.benchmark = benchmark


def _crossed(before: int, after: int, interval: int) -> bool:
    return after // interval > before // interval


class TrainingError(RuntimeError):
    """Training stopped on a fault (non-finite numbers, a checkpoint that could not be written)."""


class TrainerInUseError(RuntimeError):
    """Another thread of this process is building or training a ``Trainer``."""


# Held by the thread that builds or trains a Trainer, once for each such call under way.
_process_state = threading.RLock()
# That thread's name, for another thread's error.
_holder_name = ''


@contextlib.contextmanager
def _process_state_held():
    """The process's global random generators and torch's settings are this thread's while
    entered: a Trainer of another thread that is built or trains meanwhile raises
    ``TrainerInUseError``. Reentrant: a ``stop_when`` may build and train another."""
    global _holder_name
    if not _process_state.acquire(blocking=False):
        raise TrainerInUseError(
            f'another thread of this process ({_holder_name!r}) is building or training a '
            "Trainer: trainers share the process's global random generators and torch's "
            'thread count and deterministic mode, so two at once would change each '
            "other's numbers. Train them one after another, or each in a process of its "
            'own (python -m alf_lite.bin.train, or grid_search for many runs); nothing '
            'was written.'
        )
    _holder_name = threading.current_thread().name
    try:
        yield
    finally:
        _process_state.release()


# Where the operative config's bindings of TrainerConfig(...)'s keyword arguments begin.
_KEYWORD_ARGUMENTS_HEADER = '# Passed to TrainerConfig(...), over any binding of theirs:'


def _trainer_config_bindings(config_text: str) -> Dict[str, str]:
    """The value text of each unscoped binding of TrainerConfig in ``config_text``, by the
    parameter's name (whole-value macros followed)."""
    prefix = f'{TrainerConfig.__name__}.'
    return {
        name[len(prefix) :]: value
        for name, value in bound_values(config_text).items()
        if name.startswith(prefix)
    }


def _unseen_trainer_config(config: TrainerConfig, config_text: str) -> str:
    """Bindings of the arguments of ``config`` that gin's ``config_text`` (its operative
    config) does not give (listed or by default), to add to it: keyword arguments of
    ``TrainerConfig(...)``, which gin does not see (and which win over its bindings). A
    value gin cannot read back (a class) is left out."""
    # gin's operative config lists the values of every TrainerConfig() made since the last
    # parse, in this process: those of another may stand where this one's are left out.
    listed = _trainer_config_bindings(config_text)
    defaults = _defaults(TrainerConfig)
    lines = []
    for name, value in config._arguments.items():
        try:
            literal = ast.literal_eval(repr(value)) == value
        except (ValueError, SyntaxError):
            literal = False
        if name in listed:
            given = _is_value(listed[name], value)
        else:
            given = _same_value(defaults[name], value)
        if literal and not given:
            lines.append(f'TrainerConfig.{name} = {value!r}\n')
    if not lines:
        return ''
    return f'\n{_KEYWORD_ARGUMENTS_HEADER}\n' + ''.join(lines)


def _keyword_arguments_dropped(config: TrainerConfig, operative_file: str) -> List[str]:
    """The changes of the experiment, ``'old -> new'``, between the keyword arguments of
    ``TrainerConfig(...)`` that the run's operative config file says it was given and the
    arguments of ``config``; none where the file cannot be read or says of none."""
    try:
        text = read_config_text(operative_file)
    except (OSError, ValueError):
        return []
    if _KEYWORD_ARGUMENTS_HEADER not in text:
        return []
    given = text.split(_KEYWORD_ARGUMENTS_HEADER, 1)[1]
    now = ''.join(
        f'TrainerConfig.{name} = {config._arguments[name]!r}\n'
        for name in _trainer_config_bindings(given)
        if name in config._arguments
    )
    return changed_bindings(given, now)


def _defaults(cls) -> Dict[str, Any]:
    """The default of each parameter of ``cls``'s constructor, by its name."""
    parameters = inspect.signature(cls.__init__).parameters
    return {name: p.default for name, p in parameters.items() if name != 'self'}


def _read_bytes_if_any(path: str) -> Optional[bytes]:
    """The bytes of file ``path``; None where there is none or it cannot be read."""
    try:
        with open(path, 'rb') as f:
            return f.read()
    except OSError:
        return None


def _is_value(text: str, value) -> bool:
    """Whether ``text``, the value of a line of a gin config, is ``value``; one that goes on
    over more lines, or is no literal (a macro, a reference), is not."""
    try:
        read = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return _same_value(read, value)


def _same_value(a, b) -> bool:
    """``a == b``, where a bool is no number."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


class Trainer:
    """Runs one experiment in ``root_dir``, resuming from its latest checkpoint if any.

    The constructor builds everything (envs, algorithm, replay buffer) and
    writes nothing, so a bad setting fails before ``root_dir`` is touched;
    ``train()`` then resumes or starts and owns the files: it holds the
    directory's ``RunDirLock`` while it trains, so a second trainer (in this
    process or another) cannot write into the same run. Close the trainer
    (or use it as a context manager) to stop the env processes.

    The constructor and ``train()`` run torch on ``torch_num_threads`` threads with
    deterministic algorithms, and leave its thread count and deterministic mode as they
    found them when they return or raise. They seed python's, numpy's and torch's global
    random generators from ``random_seed``; those go on from where the run left them.
    ``train()``'s callbacks run with those generators put back after them: what they
    draw changes none of the run's numbers. While one trainer builds or trains, another
    thread's trainer raises ``TrainerInUseError`` as it is built or trains (a callback
    may build and train one in the same thread).

    Args:
        config: the trainer's settings.
        root_dir: experiment directory (created by ``train()`` if missing).
        announce_stops: say on stderr, as a stop signal first comes during ``train()``,
            what the stop waits for (the train command does).
    """

    def __init__(self, config: TrainerConfig, root_dir: str, announce_stops: bool = False):
        if not isinstance(config, TrainerConfig):
            raise TypeError(
                f'Trainer: config must be a TrainerConfig, got {config!r} '
                f'({type(config).__name__}).'
            )
        if not isinstance(root_dir, (str, os.PathLike)):
            raise TypeError(
                f'Trainer: root_dir must be a path (a str or an os.PathLike), got {root_dir!r} '
                f'({type(root_dir).__name__}).'
            )
        if not os.fspath(root_dir).strip():
            # Blank: an unset variable or a slip; '' is no directory to make.
            raise ValueError(
                f"Trainer: root_dir is empty ({os.fspath(root_dir)!r}): give the run's directory "
                "('.' for the working directory)."
            )
        if not RunDir(root_dir).trained_in():
            nested = inside_run_refusal(os.fspath(root_dir), 'root_dir')
            if nested is not None:
                raise ValueError(f'Trainer: {nested}')
        self._config = cfg = config
        self._run_dir = RunDir(root_dir)
        self._lock = RunDirLock(root_dir)
        self._env = self._eval_env = None
        # From here on the process's state is this trainer's (the current GPU, the
        # generators seeded, torch's settings).
        with _process_state_held():
            try:
                self._device = device = resolve_device(cfg.device)
            except (ValueError, DeviceUnavailableError) as e:
                raise type(e)(f'TrainerConfig.{e}') from None
            if cfg.cuda_graph:
                # Before the envs and the replay buffer, which may take long to make.
                check_cuda_graph_device(device)
            if device.type == 'cuda':
                # Streams, events and graphs are made on the current GPU.
                torch.cuda.set_device(device)
            self._announce_stops = announce_stops
            cores = len(os.sched_getaffinity(0))
            if cfg.torch_num_threads > cores:
                logging.warning(
                    'TrainerConfig.torch_num_threads = %d is more than the %d core%s this '
                    'process may use: its threads wait for each other (at most as many as the '
                    'cores; 1 where other processes share them)',
                    cfg.torch_num_threads,
                    cores,
                    '' if cores == 1 else 's',
                )
            with _torch_settings(cfg.torch_num_threads, device):
                seed_everything(cfg.random_seed, cfg.torch_num_threads)
                self._build()

    def _build(self) -> None:
        cfg, device = self._config, self._device
        try:
            with env_processes_starting():
                # The buffer's size is checked once the first env tells the sizes,
                # before the others are made: thousands of envs can take minutes.
                self._env = env = create_environment(
                    check_dims=functools.partial(
                        check_replay_buffer_fits,
                        length=cfg.replay_buffer_length,
                        training_device=device,
                    )
                )
            # Unseeded here: every evaluation resets it with the seeds of its env step.
            self._eval_env = eval_env = create_environment(
                num_parallel_environments=cfg.num_eval_environments,
                use_subprocesses=False,
                label='eval env',
            )
            dims = dict(observation_dim=env.observation_dim, action_dim=env.action_dim)
            self._algorithm, estimate = build_checked(
                cfg.algorithm_ctor,
                device,
                not_checked='; the replay buffer is placed without reserving the memory of '
                'their gradients and optimizer state',
                **dims,
            )
            if estimate is not None:
                logging.info('networks: %s', estimate.describe())
            self._algorithm.check_rollout(env.num_envs)
            self._algorithm.to(device)
            _check_batch_norm_batch(self._algorithm, cfg.mini_batch_size, cfg.mini_batch_length)
            set_network_precision(self._algorithm, cfg.precision)
            # Predicting as an evaluation does until training switches it (a module starts in
            # training mode, in which batch norm uses and moves the batch's statistics).
            self._algorithm.train(False)
            warn_if_emulated(cfg.precision, device)
            warn_if_not_applied(cfg.precision, self._algorithm)
            self._replay_buffer = ReplayBuffer(
                num_envs=env.num_envs,
                length=cfg.replay_buffer_length,
                observation_dim=env.observation_dim,
                action_dim=env.action_dim,
                training_device=device,
                # Allocated at the first update, after the buffer.
                reserved_bytes=0 if estimate is None else estimate.training - estimate.parameters,
            )
            _check_batch_fits(
                self._replay_buffer,
                cfg.mini_batch_size,
                cfg.mini_batch_length,
                _widest_layer_bytes(self._algorithm, cfg.precision),
            )
            self._runner = UpdateRunner(
                self._algorithm,
                self._replay_buffer,
                cfg.mini_batch_size,
                cfg.mini_batch_length,
                functools.partial(
                    loss_mask, mask_out_loss_for_last_step=cfg.mask_out_loss_for_last_step
                ),
                cuda_graph=cfg.cuda_graph,
                compile=cfg.compile,
                defer_non_finite_checks=cfg.defers_non_finite_checks(device),
            )
        except BaseException:
            self.close()
            raise
        self._episode_stats = EpisodeStats(env.num_envs)
        self._collector = Collector(
            env,
            self._algorithm,
            self._replay_buffer,
            cfg.initial_collect_steps,
            self._episode_stats,
            device,
            cuda_graph=cfg.cuda_graph,
        )
        # Bound to the envs, not to self: a cycle through the trainer would keep a
        # finished run's buffer and CUDA graphs alive until the cycle collector ran.
        # The two counts of calls begun tell each call of either from every other one.
        self._stop_signals = StopSignals(
            lambda: (env.calls, eval_env.calls) if env.busy or eval_env.busy else None,
            SIGNALLED_STEP_PATIENCE_S,
            announce=self._announce_stops,
        )
        self._env_steps = 0
        self._num_updates = 0
        self._last_eval = {}
        self._config_text: Optional[str] = None
        # The training scalars of the row at ``_env_steps`` that waits for its
        # evaluation; at a fresh start, the evaluation of the initial policy.
        self._pending_evaluation: Optional[dict] = {}
        # The training scalars a checkpoint of the step of the pending evaluation keeps
        # (``_save``'s ``train_scalars``), also one a signal in that evaluation writes.
        self._evaluation_train_scalars: Optional[dict] = None
        # The env step where the iteration under way began; None between iterations.
        self._iteration_start: Optional[int] = None
        # Env steps of an iteration: unroll_length steps of every env.
        self._iteration_length = cfg.unroll_length * self._env.num_envs
        # Env steps of the iteration under way, or of the last one: the configured
        # length, except for one a signal cut short, finished in its own length.
        self._current_iteration_length = self._iteration_length
        # Whether the updates of the iteration under way were done.
        self._iteration_trained = False
        self._latest_train_scalars = {}
        # (when, bytes) of the latest reading of the env processes' own memory.
        self._env_memory = None
        self._wrote_operative_config = False
        # Whether a train() of this trainer went into the training loop: its state is then
        # no fresh start's, and a checkpoint alone holds one to go on from.
        self._entered_training = False
        # The checkpoint this train() resumed from, until its training envs have started
        # (their episodes replayed or new ones begun): until then it holds the whole state.
        self._resumed_untouched: Optional[str] = None
        # The checkpoint the latest train() resumed from, and its env steps, updates and the
        # config it was trained with: a save where nothing was trained since keeps that one.
        self._restored: Optional[Tuple[str, int, int, Optional[str]]] = None
        self._closed = False
        # The summary of the train() under way: its events are synced at each checkpoint.
        self._summary: Optional[Summary] = None
        # Everything configurable was built: the bindings it used, taken now,
        # before another config parsed in this process replaces gin's.
        # The config it was built from, to which a run's config.gin must hold.
        self._built_config = gin.config_str()
        operative = gin.operative_config_str()
        self._operative_config = operative + _unseen_trainer_config(self._config, operative)
        # A --gin_param that a file's more specific scope overrides is said so, not unused.
        overridden = overridden_gin_params()
        # Bindings of TrainerConfig that its caller passed by keyword: not unused, overridden.
        by_keyword = bindings_passed_by_hand(TrainerConfig.__name__, self._config._arguments)
        own, included = unused_bindings(
            saved_config=self._run_dir.config_file, leave_out=set(overridden) | set(by_keyword)
        )
        if by_keyword:
            logging.info(
                'keyword arguments of TrainerConfig(...) win over these bindings: %s',
                '; '.join(
                    f'TrainerConfig.{param} = {value!r} -> {self._config._arguments[param]!r}'
                    for (_, _, param), value in by_keyword.items()
                ),
            )
        if own:
            logging.warning(
                'these bindings are used by nothing this run builds, so they change nothing: '
                '%s. Is the configurable they bind referenced (e.g. the optimizer the '
                'algorithm is given), or is its parameter one its caller always sets?',
                '; '.join(own),
            )
        if included:
            logging.info(
                'bindings of included files this config leaves unused: %s', '; '.join(included)
            )
        if overridden:
            logging.warning(
                'a binding of a gin file in a more specific scope overrides these --gin_param '
                'bindings where it applies (gin applies the binding of the longest scope a call '
                "is made in), so the calls there keep the file's value: %s. Bind those names "
                'with --gin_param too where that is meant.',
                '; '.join(overridden.values()),
            )
        # Where a fresh start's generators begin: what the process draws
        # between building and training cannot change the run's numbers.
        self._initial_rng_state = global_rng_state()

    def close(self) -> None:
        """Stop the env processes and unlock root_dir; the trainer cannot train afterwards."""
        self._closed = True
        self._lock.release()
        for env in (self._env, self._eval_env):
            if env is not None:
                env.close()

    def lock_root_dir(self) -> None:
        """Create root_dir if missing and lock it for this trainer (``train`` does it too).

        Held until ``train`` returns, ``unlock_root_dir``, ``close`` or the trainer is
        garbage collected; a caller locks first to write into root_dir before training
        (train's CLI writes config.gin).

        Raises:
            RunDirInUseError: another trainer holds the lock; nothing was written.
        """
        self._lock.acquire()

    def unlock_root_dir(self) -> None:
        """Release root_dir's lock (nothing when not held)."""
        self._lock.release()

    def __enter__(self) -> 'Trainer':
        return self

    @property
    def env_steps(self) -> int:
        """Env steps collected so far, over all envs (restored ones included)."""
        return self._env_steps

    @property
    def num_updates(self) -> int:
        """Gradient updates made so far."""
        return self._num_updates

    @property
    def resumed_from(self) -> Optional[str]:
        """The checkpoint the latest ``train()`` resumed from; None where it started afresh
        (or before the first ``train()``)."""
        return None if self._restored is None else self._restored[0]

    @property
    def resumed_config(self) -> Optional[str]:
        """The config text that the checkpoint the latest ``train()`` resumed from keeps as
        the one it was trained with; None where it started afresh, or that checkpoint keeps
        none."""
        return None if self._restored is None else self._restored[3]

    @property
    def algorithm(self):
        """The algorithm being trained (its networks live on the training device), in eval
        mode outside ``train()``: its ``predict_step`` acts as the evaluations do."""
        return self._algorithm

    @property
    def last_eval(self) -> dict:
        """The scalars of the latest evaluation (``eval/...`` names); empty before the first."""
        return dict(self._last_eval)

    def __exit__(self, *exc_info):
        self.close()

    def train(
        self,
        stop_when: Optional[Callable[[dict], bool]] = None,
        before_writing: Optional[Callable[[], None]] = None,
    ) -> dict:
        """Train until ``num_env_steps``; returns the last evaluation's scalars.

        Args:
            stop_when: called with the scalars of each evaluation (as
                ``last_eval``); when it returns True, training stops there as at
                ``num_env_steps``: a checkpoint is written and ``train`` returns.
            before_writing: called once the latest checkpoint (if any) is
                restored and before the trainer writes anything, with root_dir
                locked: files written there (train's CLI writes config.gin)
                stay as they were when the checkpoint does not fit.
            Both run with the global random generators put back after them, so
            what they draw changes none of the run's numbers.

        Raises:
            TrainingInterrupted: after SIGINT / SIGTERM, once a checkpoint is written;
                an env call under way once the signal came that does not end within
                ``SIGNALLED_STEP_PATIENCE_S``, or as a second signal comes, is ended
                (and its envs stopped), so a hung env cannot hold the run.
            TrainingError: on a non-finite loss or parameter, or a failed checkpoint write;
                also, with nothing written, when an earlier ``train()`` of this trainer
                stopped (on an error) before any checkpoint was written, or the trainer
                was closed, or its envs were stopped (a signal that ended an env call, an
                env that crashed or hung).
            CheckpointError: when checkpoints exist but none of them can be loaded.
            ProgressCsvError: root_dir's progress.csv cannot be read; nothing was written.
            RunDirInUseError: another trainer trains in root_dir; nothing was written.
            TrainerInUseError: a trainer of another thread builds or trains; nothing was
                written.
            TypeError: ``stop_when`` or ``before_writing`` is not callable; nothing was written.
        """
        for name, value in (('stop_when', stop_when), ('before_writing', before_writing)):
            # Checked before anything is written: each is called only once training is under way.
            if value is not None and not callable(value):
                raise TypeError(
                    f'Trainer.train: {name} must be a function or None, got {value!r} '
                    f'({type(value).__name__}).'
                )
        if self._closed or self._env.closed or self._eval_env.closed:
            # Its envs are stopped (by close(), or by an env call that a signal ended or that
            # failed): training would fail at the first step, after the files.
            stopped = (
                f'this trainer of {self._run_dir.root} was closed, which stopped its envs'
                if self._closed
                else f'the envs of this trainer of {self._run_dir.root} were stopped (a signal '
                'ended an env step that hung or was signalled twice, or an env crashed or hung)'
            )
            raise TrainingError(
                f'{stopped}: build a new Trainer to go on (it resumes from the latest checkpoint).'
            )
        with _process_state_held():
            self.lock_root_dir()
            try:
                with _torch_settings(self._config.torch_num_threads, self._device):
                    return self._train(stop_when, before_writing)
            finally:
                # Whatever train() did last (an update, an error in one, or nothing: a
                # finished run): ``algorithm`` predicts as the evaluations did.
                self._algorithm.train(False)
                self.unlock_root_dir()

    def _train(
        self,
        stop_when: Optional[Callable[[dict], bool]],
        before_writing: Optional[Callable[[], None]],
    ) -> dict:
        # As train refuses it: the files written, replaced and deleted below would be
        # those where a link points, outside the run (an archived checkpoint's, say).
        unsafe = self._run_dir.unsafe_entry()
        if unsafe is not None:
            raise TrainingError(unsafe)
        # Read before anything is written: a damaged one leaves root_dir as it was.
        read_progress(self._run_dir.progress_file)
        # Restored before anything is written: a checkpoint that does not fit
        # the config leaves root_dir as it was.
        latest = ckpt.load_latest_checkpoint(
            self._run_dir.checkpoint_dir, self._device, check=ckpt.check_trainer_state
        )
        global _compiled_last
        if self._config.compile:
            if _compiled_last is None or _compiled_last() is not self:
                # torch.compile keeps at most 8 versions of a function (one per shape and
                # grad mode) for the whole process, those compiled for other networks
                # included, and runs it eagerly past them: with other numbers.
                torch._dynamo.reset()
            _compiled_last = weakref.ref(self)
        resumed = latest is not None
        collection = None
        self._resumed_untouched = None
        self._restored = None
        unreadable = []
        if resumed:
            collection = self._restore(latest.path, latest.state, latest.replay_buffer_state)
            dropped = _keyword_arguments_dropped(self._config, self._run_dir.operative_config_file)
            if dropped:
                logging.warning(
                    '%s says the run was given keyword arguments of TrainerConfig(...) that '
                    'this Trainer does not take: it goes on with %s (config.gin holds the '
                    "bindings alone: give a run's settings as bindings where train is to "
                    'resume it)',
                    self._run_dir.operative_config_file,
                    '; '.join(dropped),
                )
            self._resumed_untouched = latest.path
            unreadable = latest.unreadable
            if collection is None and not self._finished():
                logging.info(
                    'the checkpoint holds no episodes to continue (a signal ended an env step, '
                    'an episode was not recorded, or the checkpoint predates them): the '
                    'training envs start new ones'
                )
            # Dropped now: the loaded replay buffer is as big as the one it was copied into.
            latest = None
            reset_seed = resume_env_seeds(
                self._config.random_seed, self._env_steps, self._env.num_envs
            )
        else:
            if self._entered_training:
                raise TrainingError(
                    f'this trainer trained before (to env step {self._env_steps}) and stopped '
                    f'without a checkpoint in {self._run_dir.checkpoint_dir}: training again '
                    'would neither start afresh nor go on from where it stopped. Build a new '
                    'Trainer to start the run over.'
                )
            self._refuse_history_without_checkpoints()
            set_global_rng_state(self._initial_rng_state)
            reset_seed = train_env_seeds(self._config.random_seed, self._env.num_envs)
        # A non-finite loss an earlier train() of this trainer stopped for belongs to the
        # state it left, not to the one training goes on from: updates are taken again.
        self._runner.reset_non_finite_loss()
        # What a refusal puts back, where before_writing wrote config.gin.
        config_before = _read_bytes_if_any(self._run_dir.config_file)
        if before_writing is not None:
            # The run's generators are set: the caller's draws must not move them.
            with global_rng_kept():
                before_writing()
        # As this train() begins with it: kept in each checkpoint, for a resume to check.
        self._config_text = self._config_file_text()
        try:
            self._refuse_another_experiment()
        except TrainingError:
            if _read_bytes_if_any(self._run_dir.config_file) != config_before:
                if config_before is None:
                    os.remove(self._run_dir.config_file)
                else:
                    write_bytes_atomically(self._run_dir.config_file, config_before)
            raise
        # Only now: a resume refused above leaves them where they were.
        ckpt.move_aside(unreadable)
        for path in ckpt.remove_temporary_checkpoints(self._run_dir.checkpoint_dir):
            logging.warning(
                'removed %s, left by a checkpoint write or removal that never completed', path
            )
        description = describe_device(self._device)
        logging.info('device: %s', description)
        no_update = self._why_no_update()
        if no_update is not None:
            logging.warning('%s', no_update)
        write_text_atomically(self._run_dir.device_file, description + '\n')
        keep_until = -1
        if resumed:
            # The row of an evaluation the checkpoint holds as pending is written by
            # this resume: one an earlier resume from it wrote goes too.
            keep_until = self._env_steps - (self._pending_evaluation is not None)
        summary = self._summary = Summary(self._run_dir.root, keep_until)
        try:
            with self._stop_signals:
                try:
                    self._entered_training = True
                    self._loop(summary, reset_seed, collection, stop_when)
                    signum = self._stop_signals.received
                    if signum is not None:
                        # It came after the loop's last read of it, as the run wrote its
                        # final checkpoint: the run is complete, and stops as at any signal.
                        logging.warning(
                            '%s came as the run wrote its final checkpoint: the run is complete',
                            signal.Signals(signum).name,
                        )
                        raise TrainingInterrupted(signum)
                except InterruptedInEnvCall as e:
                    if self._resumed_untouched is not None:
                        # It ended a call of the training envs as they started (their replay
                        # of the checkpoint's episodes, or their reset; Ctrl-C twice, or a call
                        # hung past its patience): nothing has changed since the
                        # checkpoint. Written again, it would take the time to write its
                        # replay buffer, which the second signal asked not to wait for, and
                        # lose the training scalars it may keep for a resume that ends there.
                        logging.warning(
                            '%s ended the training envs as they started: '
                            '%s, which this run resumed from, is left as it was',
                            signal.Signals(e.signum).name,
                            self._resumed_untouched,
                        )
                        raise TrainingInterrupted(e.signum, checkpoint_written=False) from None
                    # As at any stop: a loss found non-finite on the device is reported,
                    # not checkpointed as a good state.
                    self._stop_on_deferred_non_finite_loss()
                    pending = self._pending_evaluation is not None
                    train_scalars = self._evaluation_train_scalars if pending else None
                    try:
                        self._save(train_scalars=train_scalars)
                    except InterruptedInEnvCall:
                        # Another signal, as the training envs gave their episodes (the first
                        # came in an evaluation): those envs were stopped, the checkpoint
                        # holds no episodes.
                        self._save(train_scalars=train_scalars)
                    raise TrainingInterrupted(e.signum) from None
                except NonFiniteLossError as e:
                    self._stop_on_non_finite_loss(e)
                except NonFiniteActionError as e:
                    # The envs' observations were checked finite: the policy's weights went
                    # non-finite since the last check, or its arithmetic overflowed.
                    raise TrainingError(
                        f"{e} The observations it acted on were finite: the policy's weights "
                        'may have turned NaN or inf since the last checkpoint (a non-finite '
                        'gradient of a finite loss), or observations this large overflow the '
                        'network. The checkpoints were left as they were.'
                    ) from e
        finally:
            self._summary = None
            summary.close()
        return self._last_eval

    def _loop(
        self,
        summary: Summary,
        reset_seed: List[int],
        collection: Optional[dict],
        stop_when: Optional[Callable[[dict], bool]] = None,
    ) -> None:
        cfg = self._config
        self._start_collection(reset_seed, collection)
        throughput = Throughput(self._env_steps, self._num_updates)

        def stop_here() -> bool:
            if stop_when is None:
                return False
            with global_rng_kept():
                return stop_when(self.last_eval)

        stopped = False
        if self._pending_evaluation is not None:
            with throughput.excluded():
                self._evaluate_and_write(summary, dict(self._pending_evaluation))
            stopped = stop_here()
            if stopped or self._env_steps >= cfg.num_env_steps:
                # Its row is written: the checkpoint no longer holds it as pending, and
                # keeps the training scalars it held.
                self._save(train_scalars=self._evaluation_train_scalars)
        # An iteration a signal cut short is finished first, also one that ends past
        # num_env_steps, as one begun where it began: the summaries, evaluations and
        # checkpoints due in it come at its end.
        while not stopped and not self._finished():
            before = self._env_steps if self._iteration_start is None else self._iteration_start
            self._collect_and_train()
            after = self._env_steps
            if self._num_updates > 0 and not self._wrote_operative_config:
                self._write_operative_config()
            done = after >= cfg.num_env_steps
            summarising = _crossed(before, after, cfg.summary_interval) or done
            stopping = self._stop_signals.received is not None
            saving = _crossed(before, after, cfg.checkpoint_interval) or done or stopping
            if summarising or saving:
                self._stop_on_deferred_non_finite_loss()
            scalars = {}
            if summarising:
                scalars = self._train_scalars(*throughput.rates(after, self._num_updates))
            # Kept with a checkpoint of this step, for a resume that ends the run here.
            train_scalars = dict(scalars)
            if _crossed(before, after, cfg.eval_interval) or done:
                # Those of the checkpoint below, as a signal in the evaluation may write it.
                self._evaluation_train_scalars = (
                    train_scalars
                    if summarising
                    else self._train_scalars(
                        *throughput.rates(after, self._num_updates, restart=False)
                    )
                )
                with throughput.excluded():
                    self._evaluate_and_write(summary, scalars)
                stopped = stop_here()
                if stopped and not (summarising or saving):
                    # Checked before any checkpoint, as at the intervals.
                    self._stop_on_deferred_non_finite_loss()
            elif summarising:
                summary.write(after, self._num_updates, time.time(), scalars)
            if summarising:
                print_progress(
                    after,
                    cfg.num_env_steps,
                    scalars[ENV_STEPS_PER_SEC],
                    self._last_eval.get(EVAL_RETURN),
                )
            # Read once: a signal seen here stops the run after the checkpoint below,
            # one that comes later is seen after the next iteration.
            signum = self._stop_signals.received
            if signum is not None and not (saving or stopped):
                # It arrived after ``stopping`` was read (once the evaluation's
                # last step was taken, say): the stop still comes with a checkpoint.
                self._stop_on_deferred_non_finite_loss()
                saving = True
            if saving or stopped:
                if not summarising:
                    # What a summary here would write, the interval's rates so far included.
                    train_scalars = self._train_scalars(
                        *throughput.rates(after, self._num_updates, restart=False)
                    )
                with throughput.excluded():
                    self._save(train_scalars=train_scalars)
            if signum is not None:
                raise TrainingInterrupted(signum)

    def _start_collection(self, reset_seed: List[int], collection: Optional[dict]) -> None:
        """Continue the checkpoint's episodes where it kept them, else start new ones.

        Until the training envs have started, the checkpoint a resume restored holds the
        whole state: a stop that ends one of their calls leaves it as it was, and says so.
        """
        self._stop_signals.resuming = self._resumed_untouched is not None
        try:
            self._start_envs(reset_seed, collection)
        finally:
            self._stop_signals.resuming = False
        self._resumed_untouched = None

    def _start_envs(self, reset_seed: List[int], collection: Optional[dict]) -> None:
        if collection is not None:
            try:
                self._collector.restore(collection)
                if not self._finished():  # else they are kept for the checkpoint alone
                    logging.info('the training envs continue their episodes from the checkpoint')
                return
            except EnvironmentCrashedError:
                raise
            except Exception as e:  # noqa: BLE001  (any damage to the optional state: restart)
                reason = str(e) if isinstance(e, EpisodeReplayError) else f'{type(e).__name__}: {e}'
                logging.warning(
                    'the training envs cannot continue their episodes (%s); they start new '
                    'ones, and the pair across the restart is never trained on',
                    reason,
                )
        self._collector.reset(reset_seed)

    def _collect_and_train(self) -> None:
        """``unroll_length`` env steps; the iteration's updates overlap the last one.

        An iteration that a signal cut short (``_iteration_start`` restored from
        its checkpoint) collects only the env steps it had left, up to the length
        it was begun with, whatever ``unroll_length`` and env count the resume has.
        """
        if self._iteration_start is None:
            self._iteration_start = self._env_steps
            self._current_iteration_length = self._iteration_length
        end = self._iteration_start + self._current_iteration_length
        try:
            while self._env_steps < end:
                self._collector.send(self._env_steps)
                try:
                    if self._env_steps + self._env.num_envs >= end and not self._iteration_trained:
                        # The updates need no row that this env step produces, so
                        # they run while it is pending: envs in subprocesses step
                        # meanwhile, and the numbers are those of step-then-train.
                        self._train_iteration()
                        self._iteration_trained = True
                finally:
                    # Also after a failed update, which stops training once the
                    # envs are done with the step. One that hangs after a stop signal is
                    # ended once its patience is over (``StopSignals``).
                    self._env_steps += self._collector.receive()
        finally:
            # Kept while env steps are left: a checkpoint written now (a signal
            # ended an env step) has the resume finish the iteration.
            if self._env_steps >= end:
                self._iteration_start = None
                self._iteration_trained = False

    def _train_iteration(self) -> None:
        """The iteration's updates, once enough steps were collected.

        Raises:
            NonFiniteLossError: before the optimizer step of a non-finite loss.
        """
        cfg, algorithm, replay_buffer = self._config, self._algorithm, self._replay_buffer
        # Counted from the buffer, not the env steps, so that a run resumed
        # without its replay buffer first refills it.
        if not (
            replay_buffer.total_added * self._env.num_envs > cfg.initial_collect_steps
            and replay_buffer.num_steps >= cfg.mini_batch_length
        ):
            return
        if not algorithm.training:
            algorithm.train(True)
        # The updates run while the iteration's last env step is pending and count
        # as after it (step, then train): a non-finite loss names that env step,
        # as ``_stop_on_non_finite_loss`` does once the step is received.
        env_steps = self._env_steps + self._env.num_envs
        for _ in range(cfg.num_updates_per_train_iter):
            self._latest_train_scalars = self._runner.update(env_steps, self._num_updates + 1)
            self._num_updates += 1

    def _write_operative_config(self) -> None:
        """The bindings the run uses, defaults included, as taken when its objects were built."""
        write_text_atomically(self._run_dir.operative_config_file, self._operative_config)
        self._wrote_operative_config = True

    def _stop_on_non_finite_loss(self, error: NonFiniteLossError) -> None:
        """Keep the (still finite) state under its own name and stop, naming the loss and step."""
        found = f'{error} at env step {self._env_steps} (update {self._num_updates + 1})'
        path = self._save_last_good(found, error)
        raise TrainingError(
            f'{found}; the optimizer step was not taken. The state before it is saved in '
            f'{path}; the regular checkpoints were left as they were. Check the rewards and '
            'observations for NaN/inf, or lower the learning rates.'
        ) from error

    def _stop_on_deferred_non_finite_loss(self) -> None:
        """Stop, naming the loss and step, if a deferred check found a non-finite loss.

        Its optimizer step and every later one were skipped, so the weights are
        still those from before that step.
        """
        failure = self._runner.non_finite_loss()
        if failure is None:
            return
        path = self._save_last_good(str(failure))
        raise TrainingError(
            f'{failure}; its optimizer step and every later one were skipped, so {path} '
            'holds the weights from before that step (an update steps its losses in turn, '
            'the critic first: for an actor or alpha loss, the steps before it in that '
            'update were taken). The regular checkpoints were left as they were. Check the '
            'rewards and observations for NaN/inf, or lower the learning rates.'
        )

    def _save_last_good(self, found: str, cause: Optional[BaseException] = None) -> str:
        """Save the state as ``last_good-<env_steps>``; returns its path.

        Raises:
            TrainingError: naming what was ``found`` first, when the state cannot be kept
                (a non-finite weight or optimizer state, a failed write).
        """
        try:
            try:
                return self._save(name=last_good_name(self._env_steps))
            except InterruptedInEnvCall:
                # A signal as the training envs gave their episodes: those envs were
                # stopped, and the state is kept without them.
                return self._save(name=last_good_name(self._env_steps))
        except TrainingError as e:
            raise TrainingError(f'{found}; no last-good state was kept: {e}') from (cause or e)

    def _train_scalars(self, env_steps_per_sec: float, updates_per_sec: float) -> dict:
        scalars = {train_column(k): float(v) for k, v in self._latest_train_scalars.items()}
        scalars.update(self._episode_stats.scalars())
        scalars[ENV_STEPS_PER_SEC] = env_steps_per_sec
        scalars[UPDATES_PER_SEC] = updates_per_sec
        scalars[REPLAY_BUFFER_BYTES] = self._replay_buffer.nbytes
        scalars[PROCESS_RSS_BYTES] = psutil.Process().memory_info().rss
        scalars[ENV_PROCESSES_USS_BYTES] = self._env_processes_own_bytes()
        return scalars

    def _env_processes_own_bytes(self) -> int:
        """The training env processes' own memory (the eval envs run in process), read at
        most once every ``ENV_MEMORY_PERIOD_S``: the summaries between repeat it."""
        now = time.monotonic()
        if self._env_memory is None or now - self._env_memory[0] >= ENV_MEMORY_PERIOD_S:
            self._env_memory = (now, self._env.processes_own_bytes())
        return self._env_memory[1]

    def _evaluate_and_write(self, summary: Summary, scalars: dict) -> None:
        # Checkpointed if a signal interrupts the evaluation, so that a resume
        # writes this row rather than skip it.
        self._pending_evaluation = dict(scalars)
        algorithm, device = self._algorithm, self._device
        algorithm.train(False)
        near_end = TerminationValues(
            functools.partial(act_and_value, algorithm, device), algorithm.gamma
        )
        # Seeded by the env step: the same evaluation whether or not the run was resumed.
        seeds = eval_env_seeds(
            self._config.random_seed, self._config.num_eval_episodes, self._env_steps
        )
        stop_signals = self._stop_signals

        def on_step(time_step) -> None:
            near_end.on_step(time_step)
            # A stop never waits for an evaluation, which a resume plays again (one
            # signalled in an eval env call ends with that call, or after its patience).
            if stop_signals.received is not None:
                raise InterruptedEvaluation(stop_signals.received)

        results = evaluate(self._eval_env, near_end.policy, on_step, seeds)
        self._last_eval = {
            EVAL_RETURN: results.average_return,
            EVAL_EPISODE_LENGTH: results.average_length,
        }
        near_termination = near_end.result()
        if near_termination is not None:
            q, received = near_termination
            self._last_eval.update(
                {EVAL_Q_NEAR_TERMINATION: q, EVAL_RETURN_NEAR_TERMINATION: received}
            )
        scalars.update(self._last_eval)
        summary.write(self._env_steps, self._num_updates, time.time(), scalars)
        self._pending_evaluation = None
        logging.info(
            'env steps %d: eval return %.2f, episode length %.1f',
            self._env_steps,
            results.average_return,
            results.average_length,
        )

    def _save(self, name: Optional[str] = None, train_scalars: Optional[dict] = None) -> str:
        """Write a checkpoint (``ckpt-<env_steps>`` unless named); refuse non-finite weights
        or optimizer state, which a resume would refuse as damaged.

        Args:
            name: the checkpoint's directory name; None: ``ckpt-<env_steps>``.
            train_scalars: the training scalars of a summary at this step, for a resume
                that ends the run here to write with its final evaluation.
        """
        algorithm_state = ckpt.algorithm_state(self._algorithm)
        bad = ckpt.first_non_finite(algorithm_state)
        if bad is not None:
            # A buffer: statistics a forward pass keeps, such as batch norm's running mean.
            kind = 'buffer' if bad in dict(self._algorithm.named_buffers()) else 'parameter'
            raise TrainingError(
                f'{kind} {bad} is not finite at env step {self._env_steps}, so no '
                'checkpoint was written (those written before hold finite weights). Lower '
                'the learning rates or check the rewards and observations for NaN/inf.'
            )
        bad = ckpt.first_non_finite_optimizer_state(algorithm_state['optimizers'])
        if bad is not None:
            raise TrainingError(
                f'optimizer state {bad} is not finite at env step {self._env_steps} '
                f'({_optimizer_overflow(bad)}), so no checkpoint was written (those written '
                'before hold finite state). Lower the learning rates or check the scale of the '
                'rewards and observations.'
            )
        try:
            collection = self._collector.state()
        except EnvironmentCrashedError as e:
            logging.warning(
                'the training envs cannot be checkpointed (%s); a resume restarts them', e
            )
            collection = None
        state = ckpt.TrainerState(
            algorithm=algorithm_state,
            rng=global_rng_state(),
            env_steps=self._env_steps,
            num_updates=self._num_updates,
            recent_returns=list(self._episode_stats.recent_returns),
            recent_lengths=list(self._episode_stats.recent_lengths),
            last_eval=self._last_eval,
            pending_evaluation=self._pending_evaluation,
            collection=collection,
            iteration_start=self._iteration_start,
            iteration_trained=self._iteration_trained,
            iteration_length=self._current_iteration_length,
            train_scalars=train_scalars,
            update_scalars=(
                {train_column(k): float(v) for k, v in self._latest_train_scalars.items()}
                if self._iteration_trained
                else None
            ),
            config_text=self._config_text,
        )
        if self._restored is not None:
            _, env_steps, num_updates, config_text = self._restored
            if config_text is not None and (env_steps, num_updates) == (
                self._env_steps,
                self._num_updates,
            ):
                # Written again where this train() resumed, nothing trained since (a resume
                # that ends there): under the config it was trained with, not the new one.
                state = state._replace(config_text=config_text)
        rb = self._replay_buffer.state_dict() if self._config.checkpoint_replay_buffer else None
        try:
            if self._summary is not None:
                # On the disk before the checkpoint, as the progress.csv rows are.
                self._summary.sync()
            path = ckpt.save_trainer_state(
                self._run_dir.checkpoint_dir, state, rb, name, self._config.max_checkpoints_to_keep
            )
        except OSError as e:
            if self._run_dir.latest_checkpoint_env_steps() is None:
                kept = (
                    'No checkpoint was written before it: re-run the same command, once this '
                    'is fixed, to start the run again.'
                )
            else:
                kept = (
                    'The previous checkpoints are intact: re-run the same command, once this '
                    'is fixed, to resume from its latest checkpoint.'
                )
            raise TrainingError(
                f'could not write the checkpoint at env step {self._env_steps}: {e}. {kept}'
            ) from e
        sizes = ', '.join(f'{name} {n} bytes' for name, n in ckpt.file_sizes(path).items())
        logging.info('checkpoint written: %s (%s)', path, sizes)
        return path

    def _why_no_update(self) -> Optional[str]:
        """Why a run of this config makes no update at all, or None where it updates: the
        updates of its last iteration (which ends at num_env_steps or past it) run while
        that iteration's last env step is pending, its row (observation and action) already
        in the buffer (``_train_iteration``)."""
        cfg, length, num_envs = self._config, self._iteration_length, self._env.num_envs
        rows = -(-cfg.num_env_steps // length) * length
        if rows <= cfg.initial_collect_steps:
            return (
                f'TrainerConfig.initial_collect_steps = {cfg.initial_collect_steps} with '
                f'num_env_steps = {cfg.num_env_steps}: this run only collects, with uniform '
                'random actions, and makes no update (updates start once more steps than '
                'initial_collect_steps were collected, by the end of the iteration that '
                'reaches num_env_steps)'
            )
        if rows < cfg.mini_batch_length * num_envs:
            return (
                f'TrainerConfig.mini_batch_length = {cfg.mini_batch_length} with '
                f'num_env_steps = {cfg.num_env_steps} over '
                f'create_environment.num_parallel_environments = {num_envs}: this run only '
                'collects and makes no update (updates start once every env has collected '
                f'mini_batch_length steps, {cfg.mini_batch_length * num_envs} env steps in '
                'all, by the end of the iteration that reaches num_env_steps)'
            )
        return None

    def _refuse_history_without_checkpoints(self) -> None:
        """Raise CheckpointError when ``progress.csv`` goes past the first checkpoint a run
        writes, yet there is no checkpoint: a fresh start would write over its rows.

        A run killed before its first checkpoint leaves rows up to that checkpoint's step
        at most, the end of the iteration that crosses ``checkpoint_interval``.
        """
        first_checkpoint = max(
            self._config.checkpoint_interval + self._iteration_length - 1,
            self._earlier_first_checkpoint(),
        )
        last = last_env_steps(self._run_dir.progress_file)
        if last is not None and last > first_checkpoint:
            raise ckpt.CheckpointError(
                f'{self._run_dir.progress_file} has rows up to {last} env steps, but there is no '
                f'checkpoint in {self._run_dir.checkpoint_dir}: were the checkpoints deleted, or '
                'not copied with the run? Starting over would write over its rows. Bring the '
                'checkpoints back to resume, or pass --start_over to train afresh (it moves '
                'the root_dir aside).'
            )

    def _earlier_first_checkpoint(self) -> int:
        """The step of the first checkpoint of the run that root_dir's ``config.gin`` was
        written for (-1 without one): a restart may change ``checkpoint_interval``,
        ``unroll_length`` or the number of envs, which the rows were written under."""
        try:
            earlier = read_config_text(self._run_dir.config_file)
        except (OSError, ValueError):
            return -1

        def value(name: str, function) -> int:
            bound = config_int(earlier, name)
            parameter = name.rsplit('.', 1)[1]
            return (
                inspect.signature(function).parameters[parameter].default
                if bound is None
                else bound
            )

        interval = value('TrainerConfig.checkpoint_interval', TrainerConfig.__init__)
        unroll_length = value('TrainerConfig.unroll_length', TrainerConfig.__init__)
        num_envs = value('create_environment.num_parallel_environments', create_environment)
        return interval + unroll_length * num_envs - 1

    def _config_file_text(self) -> Optional[str]:
        """The text of the run's ``config.gin``, or None where there is none or it cannot be
        read (train names that problem where it parses it)."""
        try:
            return read_config_text(self._run_dir.config_file)
        except (OSError, ValueError):
            return None

    def _refuse_another_experiment(self) -> None:
        """Raise TrainingError where the run's config.gin, which each checkpoint keeps as the
        config it was trained with, would name another experiment than the one this trainer
        was built from and trains: a Python resume under other bindings (written into
        config.gin by ``before_writing`` or not), or a config parsed after building written
        by ``before_writing``. A resume that changes the experiment is one where
        ``config-until-<step>.gin`` keeps the config trained with until the checkpoint's step
        (train's ``--gin_param``). At a start afresh, the run goes on with the config it was
        built from, written into config.gin in place of the one there."""
        if self._config_text is None:
            return
        differing = changed_bindings(self._config_text, self._built_config)
        if differing and self._restored is None:
            # A start afresh (the run stopped before its first checkpoint): nothing trained
            # with that config goes on. As train does, the config.gin of that attempt gives way.
            keep_superseded_config(self._run_dir, self._built_config, 0, restored=False)
            write_text_atomically(self._run_dir.config_file, self._built_config)
            logging.warning(
                'the run starts afresh with the config this Trainer was built with, written to %s',
                self._run_dir.config_file,
            )
            self._config_text = self._built_config
            return
        advice = (
            "Build the Trainer from the run's config.gin, change the experiment with train "
            '--root_dir and --gin_param (which keeps the old config as '
            'config-until-<N>.gin), or train in another root_dir.'
        )
        if differing:
            raise TrainingError(
                f'{self._run_dir.config_file} is not the config this Trainer was built with: '
                f'it differs in {len(differing)} binding(s), e.g. {differing[:4]}, and its '
                f'checkpoints would name it as the config they were trained with. {advice}'
            )
        path, env_steps, _, trained_with = self._restored or (None, None, None, None)
        if trained_with is None:
            return
        differing = changed_bindings(trained_with, self._built_config)
        if differing and not os.path.exists(self._run_dir.superseded_config_file(env_steps)):
            raise TrainingError(
                f'{path} was trained with another experiment than this Trainer was built '
                f'with: it differs in {len(differing)} binding(s), e.g. {differing[:4]}, and '
                f'no config-until-{env_steps}.gin keeps the config trained with until then: '
                f'the run would go on with another experiment than its files say. {advice}'
            )

    def _check_config_unchanged(self, path: str, state: ckpt.TrainerState) -> None:
        """Refuse to resume from checkpoint ``path`` where the run's config file for its step
        changed the experiment since the checkpoint was written (edited, emptied)."""
        if state.config_text is None:
            return
        config_file = self._run_dir.config_file_of(state.env_steps)
        change = config_changed_since(config_file, state.config_text, path)
        if change is None:
            return
        if config_file != self._run_dir.config_file and os.path.exists(self._run_dir.config_file):
            # Written again at its own step by the resume that kept config_file (one whose
            # num_env_steps ends the run there) under the config that resume wrote, as
            # alf_lite did before such a checkpoint kept the config it was trained with.
            if config_changed_since(self._run_dir.config_file, state.config_text, path) is None:
                return
        raise ckpt.CheckpointError(
            f'{change}. It was changed (or damaged) after that checkpoint was written; a '
            'resume changes the experiment with --gin_param, which keeps the config trained '
            "with so far as config-until-<N>.gin. Put the run's config back, or pass "
            '--start_over to train afresh.'
        )

    def _finished(self) -> bool:
        """Whether the run is at its end: its last iteration is done, at or past
        ``num_env_steps``."""
        return self._iteration_start is None and self._env_steps >= self._config.num_env_steps

    def _restore(self, path: str, state: dict, rb: Optional[dict]) -> Optional[dict]:
        """Restore the checkpoint at ``path``; returns its collection state (or None)."""
        state = ckpt.trainer_state(state, path)
        self._check_config_unchanged(path, state)
        # A checkpoint belongs to a run of this length if the iteration it ends, or that a
        # signal cut short in, began before the run's end: the last iteration may end past
        # it. The run's own iterations count: a resume that changes their length (another
        # experiment, warned about) changes them from here on.
        cfg = self._config
        iteration_length = state.iteration_length or self._iteration_length
        iteration_start = (
            state.env_steps - iteration_length
            if state.iteration_start is None
            else state.iteration_start
        )
        if iteration_start >= cfg.num_env_steps:
            raise ckpt.CheckpointError(
                f'{path} is at {state.env_steps} env steps, past '
                f'TrainerConfig.num_env_steps = {cfg.num_env_steps}: a run cannot be '
                'shortened below its checkpoint. Give num_env_steps >= '
                f'{iteration_start + 1}.'
            )
        try:
            ckpt.load_algorithm_state(self._algorithm, state.algorithm)
        except (KeyError, RuntimeError, ValueError) as e:
            raise ckpt.CheckpointError(
                f'checkpoint {path} does not fit the configured algorithm '
                f'({_state_problem(e)}). Was the config changed? Resume with the config '
                'the run started with.'
            ) from e
        # The optimizers' states are new tensors now, which no captured graph reads.
        self._runner.drop_graphs()
        set_global_rng_state(state.rng)
        self._env_steps = state.env_steps
        self._num_updates = state.num_updates
        self._episode_stats.load(state.recent_returns, state.recent_lengths)
        self._last_eval = state.last_eval
        self._pending_evaluation = state.pending_evaluation
        self._evaluation_train_scalars = state.train_scalars
        self._iteration_start = state.iteration_start
        self._iteration_trained = state.iteration_trained
        self._current_iteration_length = iteration_length
        # Not those of the updates this trainer made before (a train() again after
        # stop_when): a run resumed in a new process has none.
        self._latest_train_scalars = {}
        if state.iteration_trained and state.update_scalars:
            # The summary at the end of the cut iteration holds its updates' losses.
            self._latest_train_scalars = {
                k.split('/', 1)[1]: v for k, v in state.update_scalars.items()
            }
        if rb is not None:
            try:
                self._replay_buffer.load_state_dict(rb)
            except ReplayBufferMismatchError as e:
                raise ckpt.CheckpointError(
                    f'the replay buffer of {path} does not fit the configured one ({e}). '
                    'Resume with the config the run started with, or train afresh with the '
                    'new one: in another root_dir, or with --start_over, which moves this run '
                    'aside.'
                ) from e
            except ValueError as e:
                # Checked before anything is copied; emptied below.
                logging.warning(
                    'the replay buffer of %s is damaged (%s); resuming without it.', path, e
                )
                rb = None
            # Envs that cannot continue their episodes restart with a FIRST row
            # after the last stored one; the loss mask never trains on that pair.
        at_iteration_end = self._iteration_start is None
        finished = self._finished()
        if rb is None:
            if self._replay_buffer.total_added:
                # Rows this trainer collected before (a train() again after stop_when or
                # an error), which a run resumed in a new process does not have.
                self._replay_buffer.clear()
            if not finished:  # a finished run trains no more: nothing to refill
                logging.warning(
                    '%s holds no replay buffer: training continues after %d steps of '
                    'the current policy refill it.',
                    path,
                    self._config.initial_collect_steps,
                )
        logging.info('resumed from %s at %d env steps', path, self._env_steps)
        # An evaluation due at the checkpoint's step may be missing: the run was shortened
        # to a checkpoint that was not its last, or eval_interval changed so that the
        # iteration the checkpoint ends now holds one.
        due = finished or (
            at_iteration_end
            and _crossed(self._env_steps - iteration_length, self._env_steps, cfg.eval_interval)
        )
        if self._pending_evaluation is None and due:
            # Written as the run would have written it, in the row of that step's
            # training scalars where there is one (replaced, so not written twice).
            self._pending_evaluation = unevaluated_row(
                self._run_dir.progress_file, self._env_steps, EVAL_RETURN
            )
        if finished and self._pending_evaluation == {} and state.train_scalars:
            # No summary was due here (also where a signal interrupted the evaluation), but
            # a run of this length summarises at its end.
            self._pending_evaluation = dict(state.train_scalars)
        elif (
            finished
            and self._pending_evaluation is None
            and state.train_scalars
            and not summarised_at(self._run_dir.progress_file, self._env_steps)
        ):
            # Evaluated there by a run that went on without a summary: a run of this length
            # writes its final evaluation with the training scalars, so that row is written
            # again in full (the evaluation is seeded by the step: the same numbers).
            self._pending_evaluation = dict(state.train_scalars)
        if finished:
            logging.info(
                'nothing left to train: the checkpoint is at %s%s',
                f'TrainerConfig.num_env_steps = {self._env_steps}'
                if self._env_steps == self._config.num_env_steps
                else f'{self._env_steps} env steps, the end of the last iteration of a run of '
                f'TrainerConfig.num_env_steps = {self._config.num_env_steps}',
                '' if self._pending_evaluation is None else ' (its evaluation is written now)',
            )
        self._restored = (path, state.env_steps, state.num_updates, state.config_text)
        return state.collection
