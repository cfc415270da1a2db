"""Collection: the training envs step with the exploration policy into the replay buffer.

On a GPU with ``cuda_graph`` the policy's step (and, when the replay buffer
is on the GPU too, the write of the row into it) is captured as one CUDA
graph and replayed at every env step: a step of collection then costs one
copy up, one graph launch and one copy down, instead of some forty small
kernel launches.
"""

from typing import List, Optional

import torch

from alf_lite.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf_lite.config import short_repr
from alf_lite.data import Experience
from alf_lite.environments import BatchedEnvironment, EpisodeReplayError
from alf_lite.episode_stats import EpisodeStats
from alf_lite.replay_buffer import ReplayBuffer
from alf_lite.transfer import pack_time_step, packed_width, time_step_to_device, unpack_time_step
from alf_lite.update import SideStream, capture

CPU = torch.device('cpu')
# Eager rollout steps before the policy's step is captured.
WARMUP_ROLLOUT_STEPS = 3
# The fields of a time step that a checkpoint keeps (env_id is always 0..N-1).
_TIME_STEP_FIELDS = ('step_type', 'observation', 'reward', 'discount')
# What ``Collector.state`` holds.
_STATE_KEYS = ('episodes', 'time_step', 'episode_stats', 'rollout')


class Collector:
    """Steps the training envs one step at a time, split in ``send`` and ``receive``.

    Between the two the envs step (in subprocesses, or in ``receive`` when in
    process) while the caller may run updates: ``send`` has already stored
    every row those updates can sample.

    Args:
        env: the training envs.
        algorithm: acts with ``rollout_step`` (in eval mode).
        replay_buffer: gets one row per env per step.
        initial_collect_steps: uniform random actions until at least this
            many env steps were collected (checked per step of all envs, so
            rounded up to a multiple of their number).
        episode_stats: counts every step the envs take.
        device: the algorithm's device: each step's observation goes there in
            one copy and its action comes back in one.
        cuda_graph: replay the policy's step (and the row's write into a
            buffer on the GPU) as a CUDA graph (GPU only).

    Raises:
        ValueError: ``cuda_graph`` on a device that is not a GPU.
    """

    def __init__(
        self,
        env: BatchedEnvironment,
        algorithm: OffPolicyAlgorithm,
        replay_buffer: ReplayBuffer,
        initial_collect_steps: int,
        episode_stats: EpisodeStats,
        device: torch.device = CPU,
        cuda_graph: bool = False,
    ):
        if cuda_graph and device.type != 'cuda':
            raise ValueError(f'Collector: cuda_graph=True needs a CUDA device, got {device}')
        self._env = env
        self._algorithm = algorithm
        self._replay_buffer = replay_buffer
        self._initial_collect_steps = initial_collect_steps
        self._episode_stats = episode_stats
        self._device = device
        self._time_step = None
        # The state ``restore`` was given: still the state while no step is known.
        self._restoring: Optional[dict] = None
        self._captured = (
            CapturedRollout(algorithm, replay_buffer, env.num_envs, env.observation_dim, device)
            if cuda_graph
            else None
        )

    def reset(self, seed: List[int]) -> None:
        """Start every env's episode afresh, seeding env ``i`` with ``seed[i]``."""
        self._time_step = self._env.reset(seed=seed)
        self._episode_stats.restart_running()

    def state(self) -> Optional[dict]:
        """What collection goes on from, for a checkpoint; None where it cannot be continued.

        That is each env's running episode as a replay record
        (``BatchedEnvironment.episode_records``), the time step the envs are at
        (not yet stored), the running episodes' returns and lengths, and the
        policy's rollout state (e.g. OU noise). None once the envs were stopped
        (a signal that ends an env call stops them: their state is unknown) and
        when an env's episode cannot be replayed. Before the envs are at a step, the state
        being restored, if any (a signal ended the replay, say).
        """
        if self._time_step is None:
            return self._restoring
        if self._env.closed:
            return None
        episodes = self._env.episode_records()
        if any(record is None for record in episodes):
            return None
        time_step = self._time_step
        return {
            'episodes': episodes,
            'time_step': {name: getattr(time_step, name) for name in _TIME_STEP_FIELDS},
            'episode_stats': self._episode_stats.running_state(),
            'rollout': self._algorithm.rollout_state(),
        }

    def restore(self, state: dict) -> None:
        """Continue collection from ``state()``'s ``state``, saved by another process maybe.

        The envs replay their episodes, and must arrive at the saved time step.

        Raises:
            EpisodeReplayError: when an env could not replay its episode or
                arrived elsewhere (an env that is not deterministic); the envs
                are then in no defined state: ``reset`` them.
        """
        self._restoring = state
        problem = _state_problem(state)
        if problem is not None:
            raise EpisodeReplayError(f'the collection state {problem}')
        time_step = self._env.replay(state['episodes'])
        saved = state['time_step']
        num_envs = self._env.num_envs
        for name in _TIME_STEP_FIELDS:
            replayed, kept = getattr(time_step, name), saved[name].cpu()
            if replayed.shape != kept.shape or replayed.dtype != kept.dtype:
                raise EpisodeReplayError(
                    f'the saved {name} is a {kept.dtype} tensor of shape {tuple(kept.shape)}, '
                    f'not {replayed.dtype} {tuple(replayed.shape)}'
                )
            differs = (replayed != kept).reshape(num_envs, -1).any(-1).nonzero()
            if len(differs):
                raise EpisodeReplayError(
                    f'{self._env.which(int(differs[0, 0]))} '
                    f'replayed its episode to another {name} than the saved one: the env is not '
                    'deterministic given its seed and actions, or not the one the episode was '
                    'recorded in (an env setting the resume changed).'
                )
        self._episode_stats.load_running_state(state['episode_stats'])
        self._algorithm.load_rollout_state(state['rollout'], num_envs)
        self._time_step = time_step

    def send(self, env_steps: int) -> None:
        """Choose the action of the current step, store the step and start the envs stepping.

        Args:
            env_steps: env steps collected so far (before ``initial_collect_steps``:
                uniform random actions).
        """
        time_step = self._time_step
        captured = self._captured is not None and env_steps >= self._initial_collect_steps
        if captured:
            action = self._captured.step(time_step)  # the row is written if writes_rows
            # Only a CPU buffer is left to fill, from the host's time step.
            on_device = time_step
        else:
            on_device = time_step_to_device(time_step, self._device)  # itself on the CPU
            if env_steps < self._initial_collect_steps:
                action = torch.rand(self._env.num_envs, self._env.action_dim) * 2 - 1
            else:
                if self._algorithm.training:
                    self._algorithm.train(False)
                action = self._algorithm.rollout_step(on_device)
        host_action = action.cpu()
        if not (captured and self._captured.writes_rows):
            # Rows go to the buffer from wherever they already are on its device.
            stored = on_device if self._replay_buffer.device == self._device else time_step
            self._replay_buffer.add_batch(
                Experience(
                    stored.step_type,
                    stored.observation,
                    action if action.device == self._replay_buffer.device else host_action,
                    stored.reward,
                    stored.discount,
                )
            )
        self._env.step_async(host_action)

    def receive(self) -> int:
        """Wait for the step ``send`` started; returns the env steps it took (one per env)."""
        self._time_step = self._env.step_wait()
        self._episode_stats.update(self._time_step)
        return self._env.num_envs


def _state_problem(state) -> Optional[str]:
    """What is wrong with the layout of a ``Collector.state()`` from a checkpoint, or None."""
    if not isinstance(state, dict) or set(state) != set(_STATE_KEYS):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        return f'holds {keys}, not {sorted(_STATE_KEYS)}'
    parts = {
        'time_step': _TIME_STEP_FIELDS,
        'episode_stats': ('episode_return', 'episode_length'),
    }
    for part, fields in parts.items():
        value = state[part]
        if not (
            isinstance(value, dict)
            and set(value) == set(fields)
            and all(torch.is_tensor(v) and v.device.type != 'meta' for v in value.values())
        ):
            return (
                f'has as {part} the {type(value).__name__} {short_repr(value)}, not a dict of '
                f'tensors {fields}'
            )
    if not isinstance(state['episodes'], (list, tuple)) or not isinstance(state['rollout'], dict):
        return 'has episodes that are no list or a rollout state that is no dict'
    return None


class CapturedRollout:
    """The policy's step on a GPU, replayed from a CUDA graph.

    Its input is a packed time step (``alf_lite.transfer``) copied into a
    static device tensor; the graph unpacks it, runs ``rollout_step`` (in eval
    mode, as captured) and, when the replay buffer lives on the same GPU,
    writes the row with ``ReplayBuffer.add_batch_on_device``. The first
    ``WARMUP_ROLLOUT_STEPS`` calls run eagerly on a side stream (they create
    the state the graph reuses, e.g. the OU noise's), then the graph is
    captured once. The policy's randomness comes from the GPU's global
    generator, which a replayed graph advances as an eager step would.

    Args:
        algorithm: on ``device``.
        replay_buffer: the run's buffer.
        num_envs: rows per step.
        observation_dim: size of an observation.
        device: the CUDA device.
    """

    def __init__(
        self,
        algorithm: OffPolicyAlgorithm,
        replay_buffer: ReplayBuffer,
        num_envs: int,
        observation_dim: int,
        device: torch.device,
    ):
        self._algorithm = algorithm
        self._buffer = replay_buffer
        self.writes_rows = replay_buffer.device == device
        width = packed_width(observation_dim)
        self._pinned = torch.empty(num_envs, width, pin_memory=True)
        self._packed = torch.zeros(num_envs, width, device=device)
        self._copied = torch.cuda.Event()
        self._eager_steps = 0
        self._graph: Optional[torch.cuda.CUDAGraph] = None
        self._action: Optional[torch.Tensor] = None
        self._side_stream = SideStream()

    def step(self, time_step) -> torch.Tensor:
        """The action for ``time_step`` (on the CPU), on the device; the row is written if
        ``writes_rows``. The returned tensor is overwritten by the next call."""
        # The pinned block is rewritten only once the last copy from it is done
        # (waiting for that copy alone, not for the update queued after it).
        self._copied.synchronize()
        pack_time_step(time_step, out=self._pinned)
        self._packed.copy_(self._pinned, non_blocking=True)
        self._copied.record()
        if self._graph is None:
            if self._algorithm.training:
                self._algorithm.train(False)
            if self._eager_steps < WARMUP_ROLLOUT_STEPS:
                self._eager_steps += 1
                action = self._side_stream.run(self._step)
            else:
                graph = torch.cuda.CUDAGraph()
                with capture(graph):
                    self._action = self._step()
                self._graph = graph
                graph.replay()
                action = self._action
        else:
            self._graph.replay()
            action = self._action
        if self.writes_rows:
            self._buffer.count_row_added()
        return action

    @torch.no_grad()
    def _step(self) -> torch.Tensor:
        """Unpack, act, write the row: the work the graph captures."""
        time_step = unpack_time_step(self._packed)
        action = self._algorithm.rollout_step(time_step)
        if self.writes_rows:
            self._buffer.add_batch_on_device(
                Experience(
                    time_step.step_type,
                    time_step.observation,
                    action,
                    time_step.reward,
                    time_step.discount,
                )
            )
        return action
