"""UpdateRunner on the CPU: the eager update, deferred non-finite checks, the work a graph captures.

The CUDA graph itself is tested in test_cuda.py.
"""

import copy
import functools
import math

import pytest
import torch

from alf_lite.algorithms import DdpgAlgorithm, SacAlgorithm, Td3Algorithm
from alf_lite.algorithms.off_policy_algorithm import loss_mask
from alf_lite.data import Experience, StepType
from alf_lite.replay_buffer import ReplayBuffer
from alf_lite.update import WARMUP_UPDATES_PER_PHASE, UpdateRunner, check_compiles
from test_non_finite_guard import ALGORITHMS, HostSyncs, assert_same_state, make

NUM_ENVS, OBS_DIM, ACTION_DIM = 2, 3, 2


def filled_buffer(rows=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    rb = ReplayBuffer(NUM_ENVS, 40, OBS_DIM, ACTION_DIM)
    for t in range(rows):
        step_type = torch.tensor(
            [StepType.FIRST if t % 10 == 0 else StepType.LAST if t % 10 == 9 else StepType.MID]
            * NUM_ENVS,
            dtype=torch.uint8,
        )
        rb.add_batch(
            Experience(
                step_type,
                torch.randn(NUM_ENVS, OBS_DIM, generator=g),
                torch.rand(NUM_ENVS, ACTION_DIM, generator=g) * 2 - 1,
                torch.randn(NUM_ENVS, generator=g),
                torch.ones(NUM_ENVS),
            )
        )
    return rb


def runner(algorithm, rb, **kwargs):
    return UpdateRunner(
        algorithm, rb, mini_batch_size=16, mini_batch_length=2, loss_mask_fn=loss_mask, **kwargs
    )


def update_both(plain, run, rb, updates):
    """``updates`` train steps of ``plain``, then as many by ``run``, on the same batches.

    Returns the last update's scalars.
    """
    torch.manual_seed(5)
    for _ in range(updates):
        data = rb.sample(16, 2)
        plain.train_step(data, loss_mask(data))
    torch.manual_seed(5)
    for update in range(1, updates + 1):
        scalars = run.update(env_steps=100, update=update)
    return scalars


@pytest.mark.parametrize('name', ALGORITHMS)
def test_eager_update_on_the_cpu_is_the_trainers_update(name):
    plain, algorithm = make(name), make(name)
    rb = filled_buffer()
    run = runner(algorithm, rb)
    scalars = update_both(plain, run, rb, 5)
    assert_same_state(plain, algorithm)
    assert 'critic_loss' in scalars and run.non_finite_loss() is None


def add_nan_reward_rows(rb, rows):
    """Add ``rows`` rows per env whose rewards are NaN."""
    for _ in range(rows):
        rb.add_batch(
            Experience(
                torch.full((NUM_ENVS,), StepType.MID, dtype=torch.uint8),
                torch.randn(NUM_ENVS, OBS_DIM),
                torch.zeros(NUM_ENVS, ACTION_DIM),
                torch.full((NUM_ENVS,), math.nan),
                torch.ones(NUM_ENVS),
            )
        )


def test_deferred_checks_name_the_loss_and_the_env_step_and_keep_the_state():
    rb = filled_buffer(rows=40)
    algorithm = make('sac')
    run = runner(algorithm, rb, defer_non_finite_checks=True)
    assert run.guard_enabled
    torch.manual_seed(0)
    states = {}
    for update in range(1, 21):
        if update == 6:  # rows with NaN rewards arrive
            add_nan_reward_rows(rb, 10)
        states[update] = copy.deepcopy(algorithm)
        run.update(env_steps=10 * update, update=update)
    failure = run.non_finite_loss()
    assert failure is not None and failure.name == 'critic' and math.isnan(failure.value)
    assert failure.update >= 6 and failure.env_steps == 10 * failure.update
    # The state is the one from before the failing update.
    assert_same_state(states[failure.update], algorithm)


@pytest.mark.parametrize('bad_update', [1, 4])
def test_a_skipped_first_sgd_step_leaves_the_optimizer_state_as_before_it(bad_update):
    # A fused SGD with momentum makes its momentum buffers at its first step; torch leaves
    # them uninitialised where the guard skips that step. Once the failure is read they
    # are gone, as before the step; those of a first step that was taken stay.
    rb = filled_buffer(rows=40)
    sgd = functools.partial(torch.optim.SGD, lr=1e-2, momentum=0.9, fused=True)
    algorithm = make('sac', critic_optimizer=sgd, actor_optimizer=sgd, alpha_optimizer=sgd)
    run = runner(algorithm, rb, defer_non_finite_checks=True)
    torch.manual_seed(0)
    states = {}
    for update in range(1, 7):
        if update == bad_update:  # every row's reward turns NaN
            add_nan_reward_rows(rb, 40)
        states[update] = copy.deepcopy(algorithm)
        run.update(env_steps=10 * update, update=update)
    failure = run.non_finite_loss()
    assert (failure.name, failure.update) == ('critic', bad_update)
    assert_same_state(states[bad_update], algorithm)
    critic_state = algorithm.optimizers['critic'].state_dict()['state']
    actor_state = algorithm.optimizers['actor'].state_dict()['state']
    assert (critic_state == {}) == (bad_update == 1) and (actor_state == {}) == (bad_update == 1)


def test_cuda_graph_needs_a_gpu():
    with pytest.raises(
        ValueError,
        match="cuda_graph=True needs the algorithm on a CUDA device; it is on cpu.*device='cuda'",
    ):
        runner(make('sac'), filled_buffer(), cuda_graph=True)


def test_update_refuses_a_buffer_with_too_few_rows():
    run = runner(make('sac'), filled_buffer(rows=1))
    with pytest.raises(ValueError, match='only 1 rows stored per env'):
        run.update(env_steps=1, update=1)


@pytest.mark.parametrize('name', ALGORITHMS)
def test_the_work_a_graph_captures_reads_nothing_back_to_the_host(name):
    # What a CUDA graph records: sampling on the buffer's device, the loss mask,
    # the losses, the optimizer steps, the target updates, the guard.
    algorithm = make(name)
    run = runner(algorithm, filled_buffer(), defer_non_finite_checks=True)
    for _ in range(1, 2 * algorithm.train_step_cycle + 1):
        with HostSyncs() as syncs:
            run._step(None)
        assert syncs.count == 0


def test_the_work_a_graph_captures_samples_windows_of_the_mini_batch_size_and_length():
    batches = []

    def mask(batch):
        batches.append(batch)
        return loss_mask(batch)

    rb = filled_buffer()
    run = UpdateRunner(make('sac'), rb, mini_batch_size=5, mini_batch_length=3, loss_mask_fn=mask)
    run._step(None)
    (batch,) = batches
    assert batch.observation.shape == (5, 3, OBS_DIM) and batch.action.shape == (5, 3, ACTION_DIM)
    for field in (batch.step_type, batch.reward, batch.discount):
        assert field.shape == (5, 3)


def test_a_buffer_that_delivers_batches_to_another_device_is_refused():
    rb = ReplayBuffer(
        NUM_ENVS, 40, OBS_DIM, ACTION_DIM, device='cpu', training_device=torch.device('cuda', 0)
    )
    with pytest.raises(ValueError, match='delivers batches to cuda:0, the algorithm is on cpu'):
        runner(make('sac'), rb)


def test_an_optimizer_a_graph_cannot_capture_is_refused_naming_it():
    algorithm = make('sac')
    run = runner(algorithm, filled_buffer())
    run._make_optimizers_capturable()
    assert all(
        group['capturable']
        for optimizer in algorithm.optimizers.values()
        for group in optimizer.param_groups
    )
    name = next(iter(algorithm.optimizers))
    algorithm.optimizers[name] = torch.optim.SGD(algorithm.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=f'the {name} optimizer \\(SGD\\) cannot be captured'):
        run._make_optimizers_capturable()


def test_captured_rollout_on_the_cpu_is_refused():
    from alf_lite.collector import Collector

    with pytest.raises(ValueError, match='cuda_graph=True needs a CUDA device'):
        Collector(None, None, None, 0, None, torch.device('cpu'), cuda_graph=True)


def test_a_capture_runs_with_the_cycle_collector_held_off(monkeypatch):
    import contextlib
    import gc

    from alf_lite import update

    seen = []

    @contextlib.contextmanager
    def graph(g):  # stands in for torch.cuda.graph, which needs a GPU
        seen.append(g)
        yield

    monkeypatch.setattr(torch.cuda, 'graph', graph)
    assert gc.isenabled()
    with update.capture('g'):
        inside = gc.isenabled()
    assert (seen, inside, gc.isenabled()) == (['g'], False, True)
    with pytest.raises(RuntimeError, match='capture failed'):
        with update.capture('h'):
            raise RuntimeError('capture failed')
    assert gc.isenabled()


def test_an_update_after_collection_trains_in_training_mode():
    # The collector leaves the algorithm in eval mode; batch norm trains on
    # the batch's statistics only in training mode.
    plain, algorithm = make('ddpg_batch_norm'), make('ddpg_batch_norm')
    rb = filled_buffer()
    run = runner(algorithm, rb)
    algorithm.train(False)
    update_both(plain, run, rb, 3)
    assert algorithm.training
    assert_same_state(plain, algorithm)


def test_a_capture_collects_cycles_first_and_leaves_a_disabled_collector_disabled(monkeypatch):
    import contextlib
    import gc

    from alf_lite import update

    events = []

    @contextlib.contextmanager
    def graph(g):  # stands in for torch.cuda.graph, which needs a GPU
        events.append('capture')
        yield

    monkeypatch.setattr(torch.cuda, 'graph', graph)
    monkeypatch.setattr(gc, 'collect', lambda *args: events.append('collect'))
    gc.disable()
    try:
        with update.capture('g'):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert events == ['collect', 'capture']


# torch.compile's first use imports torch.jit, which warns of its own deprecations.
@pytest.mark.filterwarnings('ignore::DeprecationWarning')
def test_compiled_updates_do_not_depend_on_the_shapes_the_networks_saw_before():
    # A run never stopped evaluates (a batch of eval envs) before its first update; one
    # resumed mid-way updates first. Both must take the same update steps, bit for bit.
    try:
        check_compiles(torch.device('cpu'))
    except ValueError as e:
        pytest.skip(str(e))
    rb = filled_buffer()
    trained = []
    for evaluate_first in (True, False):
        torch._dynamo.reset()
        algorithm = make('sac')
        run = runner(algorithm, rb, compile=True)
        if evaluate_first:
            with torch.no_grad():
                observation = torch.randn(NUM_ENVS, OBS_DIM)
                algorithm.value_step(observation, algorithm.predict_step(observation))
        torch.manual_seed(5)
        for update in range(1, 4):
            run.update(env_steps=100, update=update)
        trained.append(algorithm)
    torch._dynamo.reset()
    assert_same_state(*trained)


def test_compile_refusal_names_the_error_a_backend_failure_wraps(monkeypatch):
    # Where inductor's cache already holds the kernel, a missing C++ compiler is found
    # inside the backend: torch raises BackendCompilerFailed, whose first line says only
    # "backend='inductor' raised:", and the compiler's own error follows on the next.
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import InvalidCxxCompiler

    def compile(fn):
        def compiled(*args):
            raise BackendCompilerFailed(compile, InvalidCxxCompiler(), None)

        return compiled

    monkeypatch.setattr(torch, 'compile', compile)
    with pytest.raises(ValueError, match=r'\(InvalidCxxCompiler: No working C\+\+ compiler'):
        check_compiles(torch.device('cpu'))


@pytest.mark.parametrize(
    'ctor, kwargs, phases',
    [
        (SacAlgorithm, dict(target_update_period=5), 2),
        (DdpgAlgorithm, dict(policy_update_period=2, target_update_period=3), 4),
        (Td3Algorithm, dict(policy_update_period=4), 2),
    ],
    ids=['sac_target_period_5', 'ddpg_periods_2_and_3', 'td3_period_4'],
)
def test_steps_of_one_phase_do_the_same_work(ctor, kwargs, phases):
    # A graph is captured per phase of the train step: steps that update other networks must
    # not share a phase, and a long cycle of few kinds of work needs only those few graphs.
    torch.manual_seed(0)
    algorithm = ctor(OBS_DIM, ACTION_DIM, **kwargs)
    rb = filled_buffer()
    parts = {
        name: module
        for name, module in algorithm.named_children()
        if any(True for _ in module.parameters())
    }
    work = {}
    for _ in range(12):
        phase = algorithm.train_step_phase(algorithm.num_train_steps)
        before = {name: copy.deepcopy(module.state_dict()) for name, module in parts.items()}
        data = rb.sample(16, 2)
        algorithm.train_step(data, loss_mask(data))
        moved = frozenset(
            name
            for name, module in parts.items()
            if any(not torch.equal(v, before[name][k]) for k, v in module.state_dict().items())
        )
        assert work.setdefault(phase, moved) == moved, (phase, moved, work)
    assert len(work) == phases
    assert len({algorithm.train_step_phase(n) for n in range(1000)}) == phases


@pytest.mark.parametrize(
    'ctor, optimizer, kwargs',
    [
        (SacAlgorithm, 'alpha', dict(target_update_period=3)),
        (DdpgAlgorithm, 'critic', dict(target_update_period=3)),
        (Td3Algorithm, 'critic', dict(policy_update_period=3)),
    ],
    ids=['sac', 'ddpg', 'td3'],
)
def test_a_subclass_with_a_cycle_of_its_own_gets_a_phase_per_step_of_it(ctor, optimizer, kwargs):
    # A subclass that branches on a period of its own, covered by the train_step_cycle it
    # overrides, shared a graph between steps of different work through its base's phases.
    class EveryOtherStep(ctor):
        @property
        def train_step_cycle(self):
            return math.lcm(super().train_step_cycle, 2)

        def train_step(self, data, mask):
            lr = 1e-3 if self.num_train_steps % 2 else 0.0
            self.optimizers[optimizer].param_groups[0]['lr'] = lr
            return super().train_step(data, mask)

    torch.manual_seed(0)
    algorithm = EveryOtherStep(OBS_DIM, ACTION_DIM, **kwargs)
    params = [p for group in algorithm.optimizers[optimizer].param_groups for p in group['params']]
    rb = filled_buffer()
    work = {}
    for _ in range(12):
        phase = algorithm.train_step_phase(algorithm.num_train_steps)
        before = [p.detach().clone() for p in params]
        data = rb.sample(16, 2)
        algorithm.train_step(data, loss_mask(data))
        moved = any(not torch.equal(p, b) for p, b in zip(params, before))
        assert work.setdefault(phase, moved) == moved, (phase, moved, work)
    assert set(work.values()) == {True, False}


def test_each_phase_updates_eagerly_before_its_graph_is_captured():
    # Eager updates create a phase's optimizer states before its capture: a phase first met
    # after the others had warmed up (DDPG's step updating the actor and the targets) was
    # captured with none of its own. The capture and replay below stand in for the GPU's.
    algorithm = DdpgAlgorithm(OBS_DIM, ACTION_DIM, policy_update_period=2, target_update_period=3)
    run = runner(algorithm, filled_buffer())
    run._cuda_graph = True
    events = []

    def eager(step, batch):
        events.append(('eager', algorithm.train_step_phase(algorithm.num_train_steps)))
        return step(batch)

    class Graph:
        def replay(self):
            num_train_steps = algorithm.num_train_steps
            run._step(None)
            algorithm.num_train_steps = num_train_steps

    def capture(phase):
        events.append(('capture', phase))
        run._graphs[phase], run._graph_outputs[phase] = Graph(), {}

    run._side_stream.run, run._capture = eager, capture
    for dropped in (False, True):
        if dropped:
            # Graphs dropped (a checkpoint's optimizer states loaded) warm up again.
            run.drop_graphs()
            del events[:]
        for update in range(1, 31):
            run.update(env_steps=100, update=update)
        captured = [i for i, (kind, _) in enumerate(events) if kind == 'capture']
        assert len(captured) == 4
        for i in captured:
            phase = events[i][1]
            assert events[:i].count(('eager', phase)) == WARMUP_UPDATES_PER_PHASE, (phase, events)
