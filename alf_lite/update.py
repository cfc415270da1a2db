"""The trainer's update: sample a batch, compute the losses, step the optimizers and targets.

``UpdateRunner.update`` runs one such update, either eagerly or, on a GPU,
from a CUDA graph: the first calls run eagerly (they initialise the
optimizer states), then the whole update, sampling included when the replay
buffer is on the GPU, is captured once and replayed on every later call. A
256x256 SAC update is over a hundred small kernels; replayed as one graph it
costs one launch.

A captured update is replayed exactly, so ``train_step`` may not read values
back to the host (losses are checked on the device by the non-finite guard,
which graph mode turns on) and its Python branches may depend only on
``num_train_steps`` modulo ``train_step_cycle``: one graph is captured per
phase (``train_step_phase``: the kind of work a step does, e.g. whether it
updates the actor and the targets; TD3's delayed actor update gives two, and
a target update every 1000th step two, not 1000).
"""

import contextlib
import gc
import re
import warnings
from typing import Callable, Dict, Hashable, Iterator, Optional

import torch

from alf_lite.algorithms.non_finite_guard import NonFiniteLoss
from alf_lite.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf_lite.checkpoint import place_step_counts
from alf_lite.data import Experience
from alf_lite.replay_buffer import ReplayBuffer

# Eager updates per phase of the train step before its graph is captured: they
# create the optimizer states and let autograd and cuBLAS set up.
WARMUP_UPDATES_PER_PHASE = 3
# The start of the warning torch gives once per optimizer made capturable whose step runs
# outside a CUDA graph's capture.
_CAPTURABLE_STEPPED_UNCAPTURED = re.escape('This instance was constructed with capturable=True')


def check_cuda_graph_device(device: torch.device) -> None:
    """Refuse CUDA graphs on ``device`` where it is no CUDA device.

    Raises:
        ValueError: naming the device and the settings to change.
    """
    if device.type != 'cuda':
        raise ValueError(
            f'cuda_graph=True needs the algorithm on a CUDA device; it is on '
            f"{device}. Set TrainerConfig.device='cuda' (on a machine with a "
            'GPU) or cuda_graph=False.'
        )


class UpdateRunner:
    """Runs ``algorithm.train_step`` on batches sampled from ``replay_buffer``.

    Args:
        algorithm: the algorithm, already on its device.
        replay_buffer: the buffer; its ``training_device`` must be the
            algorithm's device.
        mini_batch_size: windows per update.
        mini_batch_length: rows per window.
        loss_mask_fn: ``fn(batch) -> [B, T - 1]`` float mask of the transitions
            to train on; it runs inside the captured update, so it must be
            made of tensor operations on the batch's device.
        cuda_graph: capture the update as CUDA graphs and replay them (GPU only).
        compile: ``torch.compile`` the algorithm's networks (their ``forward``
            and, where they have one, ``sample``).
        defer_non_finite_checks: check losses on the device
            (``OffPolicyAlgorithm.defer_non_finite_checks``) instead of raising
            ``NonFiniteLossError`` at once; always on with ``cuda_graph``.

    Raises:
        ValueError: ``cuda_graph`` on a device that is not a GPU, a buffer
            that delivers batches to another device, or ``compile`` where
            ``torch.compile`` cannot compile (``check_compiles``).
    """

    def __init__(
        self,
        algorithm: OffPolicyAlgorithm,
        replay_buffer: ReplayBuffer,
        mini_batch_size: int,
        mini_batch_length: int,
        loss_mask_fn: Callable[[Experience], torch.Tensor],
        cuda_graph: bool = False,
        compile: bool = False,
        defer_non_finite_checks: bool = False,
    ):
        device = next(algorithm.parameters()).device
        if cuda_graph:
            check_cuda_graph_device(device)
        if replay_buffer.training_device != device:
            raise ValueError(
                f'the replay buffer delivers batches to '
                f'{replay_buffer.training_device}, the algorithm is on {device}.'
            )
        self._algorithm = algorithm
        self._buffer = replay_buffer
        self._batch_size = mini_batch_size
        self._batch_length = mini_batch_length
        self._loss_mask_fn = loss_mask_fn
        self._cuda_graph = cuda_graph
        self._guard = (
            algorithm.defer_non_finite_checks() if cuda_graph or defer_non_finite_checks else None
        )
        if cuda_graph:
            self._make_optimizers_capturable()
        if compile:
            check_compiles(device)
            # Static shapes: a shape's kernels are the same whatever shapes came before it
            # (dynamic ones follow from the shapes seen first, which differ between a run
            # resumed mid-way and one never stopped, and round otherwise).
            for module in algorithm.children():
                module.compile(dynamic=False)
                if hasattr(module, 'sample'):  # SAC's actor samples outside forward
                    module.sample = torch.compile(module.sample, dynamic=False)
        # Graph mode: the buffer is sampled inside the graph when it lives on
        # the GPU; a CPU buffer is sampled on the host into these inputs.
        self._sample_in_graph = replay_buffer.device == device
        self._static_batch: Optional[Experience] = None
        self._graphs: Dict[Hashable, torch.cuda.CUDAGraph] = {}
        self._graph_outputs: Dict[Hashable, Dict[str, torch.Tensor]] = {}
        self._eager_updates: Dict[Hashable, int] = {}
        self._side_stream = SideStream()

    @property
    def guard_enabled(self) -> bool:
        """Whether losses are checked on the device (read them with ``non_finite_loss``)."""
        return self._guard is not None

    def update(self, env_steps: int, update: int) -> Dict[str, torch.Tensor]:
        """One update.

        Args:
            env_steps: the trainer's env steps (recorded with a non-finite loss).
            update: the number of this update, 1 for the first of the run.

        Returns:
            the algorithm's scalars as tensors on its device; read them only
            at summary time (in graph mode they are overwritten by the next
            replay of the same phase).
        Raises:
            NonFiniteLossError: a loss was NaN or inf, unless checks are deferred.
            ValueError: the buffer holds fewer rows per env than a window.
        """
        # Checked here, on host counters: a captured update cannot check it.
        self._buffer.check_sample_size(self._batch_size, self._batch_length)
        if not self._algorithm.training:
            self._algorithm.train(True)
        if self._guard is not None:
            self._guard.begin_update(env_steps, update)
        if not self._cuda_graph:
            return self._step(self._buffer.sample(self._batch_size, self._batch_length))
        phase = self._algorithm.train_step_phase(self._algorithm.num_train_steps)
        eager_updates = self._eager_updates.get(phase, 0)
        if eager_updates < WARMUP_UPDATES_PER_PHASE:
            self._eager_updates[phase] = eager_updates + 1
            with warnings.catch_warnings():
                # torch's advice to drop capturable=True from an optimizer that steps
                # outside a capture: this warm-up before each capture does so by design.
                warnings.filterwarnings('ignore', message=_CAPTURABLE_STEPPED_UNCAPTURED)
                return self._side_stream.run(self._step, self._host_batch())
        if not self._sample_in_graph:
            for static, value in zip(self._static_batch, self._host_batch()):
                static.copy_(value)
        if phase not in self._graphs:
            self._capture(phase)
        self._graphs[phase].replay()
        self._algorithm.num_train_steps += 1
        return self._graph_outputs[phase]

    def drop_graphs(self) -> None:
        """Forget the captured graphs: the next updates warm up and capture anew.

        For when tensors a graph reads were replaced rather than copied into:
        an optimizer's ``load_state_dict`` replaces its state tensors, which a
        graph captured before would go on reading from freed memory.
        """
        self._graphs.clear()
        self._graph_outputs.clear()
        self._eager_updates.clear()

    def reset_non_finite_loss(self) -> None:
        """Forget the non-finite loss of deferred checks, if any (``NonFiniteGuard.reset``)."""
        if self._guard is not None:
            self._guard.reset()

    def non_finite_loss(self) -> Optional[NonFiniteLoss]:
        """The first non-finite loss of deferred checks, or None. Syncs with the device.

        With one, the optimizer state is the one from before the failing step
        (``NonFiniteGuard.failure``), for a checkpoint to keep.
        """
        return None if self._guard is None else self._guard.failure()

    def _host_batch(self) -> Optional[Experience]:
        """A batch sampled outside the graph (CPU buffer), or None when the graph samples."""
        if self._sample_in_graph:
            return None
        batch = self._buffer.sample(self._batch_size, self._batch_length)
        if self._static_batch is None:
            self._static_batch = Experience(*(torch.empty_like(x) for x in batch))
        return batch

    def _step(self, batch: Optional[Experience]) -> Dict[str, torch.Tensor]:
        """Sample (unless given a batch), mask, train: the work a graph captures."""
        if batch is None:
            batch = self._buffer.sample_on_device(self._batch_size, self._batch_length)
        return self._algorithm.train_step(batch, self._loss_mask_fn(batch))

    def _make_optimizers_capturable(self) -> None:
        """Set ``capturable`` on every optimizer, refusing one that has no such setting.

        Raises:
            ValueError: an optimizer that cannot be captured.
        """
        for name, optimizer in self._algorithm.optimizers.items():
            for group in optimizer.param_groups:
                if 'capturable' not in group:
                    raise ValueError(
                        f'the {name} optimizer ({type(optimizer).__name__}) '
                        'cannot be captured in a CUDA graph; use Adam or AdamW.'
                    )
                group['capturable'] = True
            # A count a non-capturable step kept on the CPU (a checkpoint's) goes to the device.
            place_step_counts(optimizer)

    def _capture(self, phase: Hashable) -> None:
        """Capture the update of ``phase``; capturing records the work without doing it."""
        # Again: restoring a checkpoint written without graphs loads its
        # optimizers' settings, capturable=False included.
        self._make_optimizers_capturable()
        num_train_steps = self._algorithm.num_train_steps
        graph = torch.cuda.CUDAGraph()
        with capture(graph):
            self._graph_outputs[phase] = self._step(self._static_batch)
        self._algorithm.num_train_steps = num_train_steps
        self._graphs[phase] = graph


def check_compiles(device: torch.device) -> None:
    """Compile and run one addition on ``device``, as ``compile`` will the networks.

    ``torch.compile`` compiles at a function's first call, mid-run; what it needs
    there (a C++ compiler for the CPU, Triton and a C compiler for a GPU) is
    checked here, before anything is written.

    Raises:
        ValueError: naming what failed.
    """
    try:
        torch.compile(lambda x: x + 1)(torch.zeros(1, device=device))
    except Exception as e:  # noqa: BLE001  (whatever the compiler stack raises)
        # BackendCompilerFailed's first line only says that the backend raised: what
        # failed is the error it wraps (e.g. InvalidCxxCompiler).
        cause = getattr(e, 'inner_exception', None) or e
        problem = (str(cause).strip().splitlines() or [''])[0]
        raise ValueError(
            f'TrainerConfig.compile = True, but torch.compile cannot compile on {device} '
            f'here ({type(cause).__name__}: {problem}); install what it needs or set '
            'TrainerConfig.compile = False.'
        ) from e


@contextlib.contextmanager
def capture(graph: 'torch.cuda.CUDAGraph') -> Iterator[None]:
    """``torch.cuda.graph(graph)`` with Python's cycle collector held off.

    Freeing another CUDA graph while a stream captures is an error that breaks
    the capture, and since torch 2.9 ``torch.cuda.graph`` no longer collects
    first: a cycle holding an old run's graphs could be collected mid-capture.
    """
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(graph):
            yield
    finally:
        if enabled:
            gc.enable()


class SideStream:
    """Runs the eager calls before a CUDA graph's capture off the default stream,
    as ``torch.cuda.graph`` captures on a side stream of its own. The stream is
    made at the first call, so holding one costs nothing on the CPU."""

    def __init__(self):
        self._stream: Optional[torch.cuda.Stream] = None

    def run(self, fn: Callable, *args):
        """``fn(*args)`` on the side stream, ordered after and before the current stream's work."""
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        self._stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._stream):
            out = fn(*args)
        torch.cuda.current_stream().wait_stream(self._stream)
        return out
