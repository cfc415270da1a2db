"""On a GPU: same seed same numbers, CUDA graph = eager, checkpoints CPU <-> GPU, short runs.

Skipped without CUDA. What can be checked on a CPU is checked there: device
resolution (test_device.py), buffer placement and device-side sampling
(test_replay_buffer.py), the guard and the work a graph captures reading
nothing back to the host (test_non_finite_guard.py, test_update.py), loading a
GPU checkpoint with map_location (test_checkpoint.py).
"""

import csv
import math
import os
import warnings

import pytest
import torch

from alf_lite import checkpoint as ckpt
from alf_lite.algorithms.off_policy_algorithm import loss_mask
from alf_lite.collector import CapturedRollout
from alf_lite.data import Experience, StepType, TimeStep
from alf_lite.device import describe_device, resolve_device, use_deterministic_algorithms
from alf_lite.precision import set_network_precision
from alf_lite.replay_buffer import ReplayBuffer
from alf_lite.transfer import time_step_to_device
from alf_lite.update import UpdateRunner, check_compiles
from test_non_finite_guard import ALGORITHMS, _tensors, assert_same_state, batch, make
from test_transfer import assert_same_time_step, time_step

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason='needs a CUDA GPU (torch.cuda.is_available() is False)'
)

CUDA = torch.device('cuda', 0)
NUM_ENVS, OBS_DIM, ACTION_DIM, BATCH = 2, 3, 2, 64
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'examples')


@pytest.fixture(autouse=True, scope='module')
def deterministic_cuda():
    """cuBLAS reads its workspace setting when first used: set it before anything runs."""
    if torch.cuda.is_available():
        use_deterministic_algorithms(CUDA)
    yield


def skip_unless_torch_compiles_on_the_gpu():
    """Skip, saying why, where this machine lacks what torch.compile needs on a GPU (Triton,
    a C compiler): what is missing is the machine's, not alf_lite's."""
    pytest.importorskip('triton', reason='torch.compile on the GPU needs triton')
    try:
        check_compiles(torch.device('cuda'))
    except ValueError as e:
        pytest.skip(str(e))


def add_rows(rb, rows, seed, nan_reward=False):
    g = torch.Generator().manual_seed(seed)
    for t in range(rows):
        step_type = (
            StepType.FIRST if t % 25 == 0 else StepType.LAST if t % 25 == 24 else StepType.MID
        )
        reward = (
            torch.full((NUM_ENVS,), math.nan) if nan_reward else torch.randn(NUM_ENVS, generator=g)
        )
        rb.add_batch(
            Experience(
                torch.full((NUM_ENVS,), step_type, dtype=torch.uint8),
                torch.randn(NUM_ENVS, OBS_DIM, generator=g),
                torch.rand(NUM_ENVS, ACTION_DIM, generator=g) * 2 - 1,
                reward,
                torch.ones(NUM_ENVS),
            )
        )


def setup(name, buffer_device=None, seed=0, algorithm_kwargs=None, **runner_kwargs):
    """An algorithm on the GPU, a filled buffer, a runner; seeded the same every time."""
    algorithm = make(name, seed, **(algorithm_kwargs or {})).to(CUDA)
    rb = ReplayBuffer(
        NUM_ENVS, 200, OBS_DIM, ACTION_DIM, device=buffer_device, training_device=CUDA
    )
    add_rows(rb, 60, seed)
    runner = UpdateRunner(algorithm, rb, BATCH, 2, loss_mask, **runner_kwargs)
    torch.manual_seed(seed + 1)
    return algorithm, rb, runner


def train(rb, runner, updates, first=1, add_every=3):
    """``updates`` updates; new rows arrive every ``add_every`` of them, as in training."""
    for update in range(first, first + updates):
        if update % add_every == 0:
            add_rows(rb, 1, seed=update)
        scalars = runner.update(env_steps=update, update=update)
    return scalars


def max_difference(a, b):
    """Largest difference of two algorithms' states, optimizer states included, on any device.

    A value that is not finite in one state must be the same in the other (TD3's
    actor_loss is NaN until its first actor update): skipped, or left to ``max``, a NaN
    or infinity of one state alone would count as no difference.
    """
    flat_a, flat_b = _tensors(ckpt.algorithm_state(a)), _tensors(ckpt.algorithm_state(b))
    assert flat_a.keys() == flat_b.keys()
    largest = 0.0
    for key, x in flat_a.items():
        if not x.is_floating_point():
            continue
        x, y = x.double().cpu(), flat_b[key].double().cpu()
        finite = torch.isfinite(x)
        assert torch.equal(finite, torch.isfinite(y)), f'{key}: not finite in one state alone'
        assert torch.equal(x[~finite].nan_to_num(), y[~finite].nan_to_num()), key
        if finite.any():
            largest = max(largest, (x[finite] - y[finite]).abs().max().item())
    return largest


def test_device_names():
    assert resolve_device('cuda') == resolve_device('auto') == CUDA
    assert torch.cuda.get_device_name(CUDA) in describe_device(CUDA)


@pytest.mark.parametrize('cuda_graph', [False, True])
@pytest.mark.parametrize('name', ['sac', 'td3'])
def test_same_seed_same_numbers_on_the_gpu(name, cuda_graph):
    runs = []
    for _ in range(2):
        algorithm, rb, runner = setup(name, cuda_graph=cuda_graph, defer_non_finite_checks=True)
        train(rb, runner, 60)
        runs.append(algorithm)
    assert_same_state(*runs)


@pytest.mark.parametrize('buffer_device', [None, 'cpu'], ids=['gpu_buffer', 'pinned_cpu_buffer'])
@pytest.mark.parametrize('name', list(ALGORITHMS))
def test_cuda_graph_matches_eager_over_many_updates(name, buffer_device):
    eager, eager_rb, eager_runner = setup(name, buffer_device, defer_non_finite_checks=True)
    eager_scalars = train(eager_rb, eager_runner, 400)
    graphed, graphed_rb, graphed_runner = setup(name, buffer_device, cuda_graph=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        graphed_scalars = train(graphed_rb, graphed_runner, 400)
    # torch's advice against capturable optimizers that step uncaptured is not for the
    # warm-up before each capture, which does so by design.
    assert not [w for w in caught if 'capturable' in str(w.message)], caught
    assert graphed_runner._graphs, 'no graph was captured'
    assert graphed.num_train_steps == eager.num_train_steps == 400
    difference = max_difference(eager, graphed)
    print(
        f'{name}, {buffer_device or "gpu"} buffer: largest difference after 400 updates '
        f'{difference:.3g}'
    )
    assert difference < 1e-4
    for key, value in eager_scalars.items():
        assert graphed_scalars[key].item() == pytest.approx(value.item(), rel=1e-3, abs=1e-5), key


def draw_noise_on_the_cpu(monkeypatch):
    """Make ``torch.randn`` and ``torch.randn_like`` draw from the CPU generator whatever the
    device, so that an update on the GPU gets the noise the same update on the CPU does."""
    randn = torch.randn

    def cpu_randn(*size, device=None, dtype=None, **kwargs):
        return randn(*size, dtype=dtype, **kwargs).to('cpu' if device is None else device)

    def cpu_randn_like(x, **kwargs):
        assert not kwargs, kwargs
        return randn(x.shape, dtype=x.dtype).to(x.device)

    monkeypatch.setattr(torch, 'randn', cpu_randn)
    monkeypatch.setattr(torch, 'randn_like', cpu_randn_like)


def updates_on(device, name, updates):
    """``make(name)`` on ``device`` after ``updates`` updates on test_non_finite_guard's
    batches, and each update's scalars."""
    algorithm = make(name).to(device)
    torch.manual_seed(1)
    scalars = []
    for update in range(1, updates + 1):
        data = Experience(*(x.to(device) for x in batch(update)))
        step = algorithm.train_step(data, loss_mask(data))
        scalars.append({k: v.item() for k, v in step.items()})
    return algorithm, scalars


@pytest.mark.parametrize('name', ['sac', 'td3'])
def test_an_update_on_the_gpu_computes_what_it_does_on_the_cpu(name, monkeypatch):
    # The same weights, batches and noise on both devices: only the kernels' rounding may
    # differ (no TF32). SAC's actor loss takes amin on CUDA where the CPU takes min. A
    # relative change of 1e-6 to the initial weights moves these states by under 2e-6 after
    # 20 updates on the CPU. (DDPG with batch norm is left out: the gradient of a bias
    # before a batch norm is rounding alone, which Adam scales up to steps of lr.) TD3's
    # actor_loss is NaN until its first actor update, on both.
    draw_noise_on_the_cpu(monkeypatch)
    on_cpu, cpu_scalars = updates_on(torch.device('cpu'), name, 20)
    on_gpu, gpu_scalars = updates_on(CUDA, name, 20)
    difference = max_difference(on_cpu, on_gpu)
    print(f'{name}: largest difference of the GPU from the CPU after 20 updates {difference:.3g}')
    assert difference < 1e-4
    for update, (cpu, gpu) in enumerate(zip(cpu_scalars, gpu_scalars), 1):
        assert gpu == pytest.approx(cpu, rel=1e-4, abs=1e-6, nan_ok=True), update


@pytest.mark.parametrize('name', list(ALGORITHMS))
def test_cuda_graph_computes_in_bfloat16_as_the_eager_update_does(name):
    # Closer to the eager bfloat16 update than a float32 update is by far: the captured
    # update runs autocast's bfloat16 products too, not float32 ones.
    runs = {}
    for label, precision, cuda_graph in (
        ('eager', 'bfloat16', False),
        ('graphed', 'bfloat16', True),
        ('float32', 'float32', False),
    ):
        algorithm, rb, runner = setup(name, cuda_graph=cuda_graph, defer_non_finite_checks=True)
        set_network_precision(algorithm, precision)
        train(rb, runner, 100)
        runs[label] = algorithm
    assert runs['graphed'].num_train_steps == 100
    to_graphed = max_difference(runs['eager'], runs['graphed'])
    to_float32 = max_difference(runs['eager'], runs['float32'])
    print(
        f'{name}: after 100 bfloat16 updates, graphed - eager {to_graphed:.3g}, '
        f'float32 - eager {to_float32:.3g}'
    )
    assert to_graphed < 0.1 * to_float32


@pytest.mark.parametrize(
    'name, periods, phases',
    [
        ('sac', dict(target_update_period=10), 2),
        ('ddpg_batch_norm', dict(policy_update_period=3, target_update_period=10), 4),
    ],
)
def test_a_long_update_cycle_is_captured_as_one_graph_per_kind_of_update(name, periods, phases):
    # A cycle of 10 (30) updates of 2 (4) kinds of work: a graph per kind, not per update of
    # the cycle, and the numbers of the eager updates.
    eager, eager_rb, eager_runner = setup(
        name, algorithm_kwargs=periods, defer_non_finite_checks=True
    )
    train(eager_rb, eager_runner, 400)
    graphed, graphed_rb, graphed_runner = setup(name, algorithm_kwargs=periods, cuda_graph=True)
    train(graphed_rb, graphed_runner, 400)
    assert len(graphed_runner._graphs) == phases
    assert max_difference(eager, graphed) < 1e-4


@pytest.mark.parametrize('cuda_graph', [False, True], ids=['eager_deferred', 'cuda_graph'])
@pytest.mark.parametrize('name', ['sac', 'td3'])
def test_updates_from_a_gpu_buffer_never_wait_for_the_gpu(name, cuda_graph):
    """No host synchronisation per update: torch raises on any (the CPU tests
    see only the reads the update's code makes, not those inside torch ops)."""
    algorithm, rb, runner = setup(name, cuda_graph=cuda_graph, defer_non_finite_checks=True)
    train(rb, runner, 30)  # warm-up and captures; rows are added (a blocking copy) here only
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try:
        for update in range(31, 61):
            runner.update(env_steps=update, update=update)
    finally:
        torch.cuda.set_sync_debug_mode('default')
    assert runner.non_finite_loss() is None


def test_compiled_cuda_graph_stays_close_to_eager():
    skip_unless_torch_compiles_on_the_gpu()
    from torch._dynamo.utils import counters

    initial = make('sac').to(CUDA)
    eager, eager_rb, eager_runner = setup('sac', defer_non_finite_checks=True)
    train(eager_rb, eager_runner, 100)
    torch._dynamo.reset()  # what other tests compiled is compiled again, and counted
    compiled, compiled_rb, compiled_runner = setup('sac', cuda_graph=True, compile=True)
    # Counted after the setup, whose check that torch.compile works compiles a graph too.
    graphs = counters['stats']['unique_graphs']
    train(compiled_rb, compiled_runner, 100)
    assert counters['stats']['unique_graphs'] > graphs, 'nothing was compiled'
    # Fused kernels round differently: the two stay far closer than either moved.
    moved = max(
        (p - q).abs().max().item() for p, q in zip(initial.parameters(), eager.parameters())
    )
    assert max_difference(eager, compiled) < 0.1 * moved


def test_nan_loss_in_a_captured_update_freezes_the_state_and_names_the_update():
    algorithm, rb, runner = setup('sac', cuda_graph=True)
    train(rb, runner, 30)
    assert runner.non_finite_loss() is None
    add_rows(rb, 20, seed=5, nan_reward=True)
    states = {}
    for update in range(31, 60):
        states[update] = _tensors(ckpt.algorithm_state(algorithm))
        runner.update(env_steps=10 * update, update=update)
    failure = runner.non_finite_loss()
    assert failure.name == 'critic' and failure.env_steps == 10 * failure.update
    after = _tensors(ckpt.algorithm_state(algorithm))
    for key, value in states[failure.update].items():
        if 'actor_loss' not in key:
            assert torch.equal(value, after[key]), key
            assert not value.is_floating_point() or torch.isfinite(value).all(), key


def test_a_captured_update_still_refuses_a_buffer_with_fewer_rows_than_a_window():
    # Replays sample on the device, where nothing can check the counter: the
    # runner checks the host's before each replay.
    algorithm, rb, runner = setup('sac', cuda_graph=True)
    train(rb, runner, 30)
    assert runner._graphs  # past the eager warm-up: replays now
    state = rb.state_dict()
    one_row = {name: [rows[:1] for rows in state[name]] for name in rb.storage}
    rb.load_state_dict(dict(one_row, total_added=1, length=state['length']))
    with pytest.raises(ValueError, match='only 1 rows stored per env, fewer than batch_length=2'):
        runner.update(env_steps=31, update=31)


def test_buffer_goes_to_the_gpu_when_it_fits_and_samples_there():
    rb = ReplayBuffer(NUM_ENVS, 100, OBS_DIM, ACTION_DIM, training_device=CUDA)
    assert rb.device == CUDA
    add_rows(rb, 50, seed=0)
    batch = rb.sample(BATCH, 2)
    assert all(x.device == CUDA for x in batch)


def test_cpu_buffer_gives_a_gpu_learner_the_cpu_samples_through_pinned_blocks():
    host = ReplayBuffer(NUM_ENVS, 100, OBS_DIM, ACTION_DIM, device='cpu', training_device=CUDA)
    plain = ReplayBuffer(NUM_ENVS, 100, OBS_DIM, ACTION_DIM)
    # Plain memory (no power-of-two rounding); batches are gathered into pinned blocks.
    assert host.device == torch.device('cpu') and not host._storage['observation'].is_pinned()
    gathered = []
    gather = host._gather_pinned

    def spy(name, rows):
        out = gather(name, rows)
        gathered.append((name, out.is_pinned()))
        return out

    host._gather_pinned = spy
    for rb in (host, plain):
        add_rows(rb, 50, seed=0)
    torch.manual_seed(3)
    on_gpu = host.sample(BATCH, 3)
    # Each field went up from its own pinned block.
    assert gathered == [(name, True) for name in Experience._fields]
    torch.manual_seed(3)
    on_cpu = plain.sample(BATCH, 3)
    for x, y in zip(on_gpu, on_cpu):
        assert x.device == CUDA and torch.equal(x.cpu(), y)


def test_time_step_goes_to_the_gpu_in_one_copy_every_field_exact():
    ts = time_step()
    on_gpu = time_step_to_device(ts, CUDA)
    assert all(x.device == CUDA for x in on_gpu)
    assert_same_time_step(on_gpu, ts)
    # One copy: the float fields are views of one device block (step types and
    # env ids are converted from it on the device).
    block = on_gpu.observation.untyped_storage().data_ptr()
    assert on_gpu.reward.untyped_storage().data_ptr() == block
    assert on_gpu.discount.untyped_storage().data_ptr() == block


@pytest.mark.parametrize('name', ['sac', 'td3'])
def test_checkpoint_round_trip_gpu_to_cpu_and_back(tmp_path, name):
    gpu, rb, runner = setup(name, defer_non_finite_checks=True)
    train(rb, runner, 20)
    ckpt.save_checkpoint(
        str(tmp_path), 20, {'algorithm': ckpt.algorithm_state(gpu)}, rb.state_dict()
    )
    state, rb_state = ckpt.load_checkpoint(str(tmp_path / 'ckpt-20'), map_location='cpu')
    cpu = make(name, seed=1)
    ckpt.load_algorithm_state(cpu, state['algorithm'])
    assert all(p.device.type == 'cpu' for p in cpu.parameters())
    assert max_difference(cpu, gpu.cpu()) == 0.0
    gpu.to(CUDA)
    cpu_rb = ReplayBuffer(NUM_ENVS, 200, OBS_DIM, ACTION_DIM)
    cpu_rb.load_state_dict(rb_state)
    # And back: a CPU checkpoint resumes on the GPU, where training goes on.
    ckpt.save_checkpoint(
        str(tmp_path), 30, {'algorithm': ckpt.algorithm_state(cpu)}, cpu_rb.state_dict()
    )
    state, rb_state = ckpt.load_checkpoint(str(tmp_path / 'ckpt-30'), map_location=CUDA)
    resumed, resumed_rb, resumed_runner = setup(name, seed=2, defer_non_finite_checks=True)
    ckpt.load_algorithm_state(resumed, state['algorithm'])
    resumed_rb.load_state_dict(rb_state)
    assert max_difference(resumed, gpu) == 0.0
    for optimizer in resumed.optimizers.values():
        for value in optimizer.state.values():
            assert all(t.device == CUDA for t in value.values() if torch.is_tensor(t))
    train(resumed_rb, resumed_runner, 5, first=21)
    assert resumed_runner.non_finite_loss() is None


# --- whole runs: the trainer with TrainerConfig.device and TrainerConfig.cuda_graph --------

SHORT_RUN = [
    'TrainerConfig.num_env_steps = 600',
    'TrainerConfig.initial_collect_steps = 200',
    'TrainerConfig.summary_interval = 100',
    'TrainerConfig.eval_interval = 300',
    'TrainerConfig.num_eval_episodes = 2',
    'TrainerConfig.checkpoint_interval = 300',
    'TrainerConfig.replay_buffer_length = 10000',
    'create_environment.max_episode_steps = 100',
]
NONDETERMINISTIC = (
    'wall_time',
    'env_steps_per_sec',
    'updates_per_sec',
    'process_rss_bytes',
    'env_processes_uss_bytes',
)


LAST_RUN = {}


def run_example(root_dir, example, *params):
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.config import parse_config
    from alf_lite.trainer import Trainer, TrainerConfig

    parse_config([os.path.join(EXAMPLES, example)], SHORT_RUN + list(params))
    with Trainer(TrainerConfig(), str(root_dir)) as trainer:
        trainer.train()
    # What the run captured: its update graphs (one per phase) and its rollout graph.
    LAST_RUN['update_graphs'] = len(trainer._runner._graphs)
    rollout = trainer._collector._captured
    LAST_RUN['rollout_graph'] = rollout is not None and rollout._graph is not None
    with open(os.path.join(root_dir, 'progress.csv'), newline='') as f:
        return [
            {k: v for k, v in row.items() if not k.endswith(NONDETERMINISTIC)}
            for row in csv.DictReader(f)
        ]


def progress_lines(root_dir):
    """The lines of ``root_dir``'s progress.csv, wall times included."""
    return (root_dir / 'progress.csv').read_text().splitlines()


def assert_resumed(root_dir, before):
    """The run in ``root_dir`` resumed: the rows written ``before`` it are still there as
    they were (a run started over would have rewritten them, with other wall times)."""
    after = progress_lines(root_dir)
    assert len(after) > len(before) and after[: len(before)] == before


def rollout_time_step(t):
    """The CPU time step of env step ``t``: episodes of 6 steps (OU noise restarts at FIRST)."""
    g = torch.Generator().manual_seed(100 + t)
    step_type = StepType.FIRST if t % 6 == 0 else StepType.LAST if t % 6 == 5 else StepType.MID
    return TimeStep(
        step_type=torch.full((NUM_ENVS,), step_type, dtype=torch.uint8),
        observation=torch.randn(NUM_ENVS, OBS_DIM, generator=g),
        reward=torch.randn(NUM_ENVS, generator=g),
        discount=torch.full((NUM_ENVS,), 0.0 if t % 6 == 5 else 1.0),
        env_id=torch.arange(NUM_ENVS),
    )


@pytest.mark.parametrize('buffer_device', [None, 'cpu'], ids=['gpu_buffer', 'cpu_buffer'])
@pytest.mark.parametrize('name', ['sac', 'td3', 'ddpg_batch_norm'])
def test_captured_rollout_acts_as_the_eager_step_and_writes_its_rows(name, buffer_device):
    steps, length = 14, 8
    host_steps = [rollout_time_step(t) for t in range(steps)]
    eager = make(name, seed=0).to(CUDA).train(False)
    torch.cuda.manual_seed(7)
    expected = [eager.rollout_step(time_step_to_device(ts, CUDA)).cpu() for ts in host_steps]

    algorithm = make(name, seed=0).to(CUDA)
    rb = ReplayBuffer(
        NUM_ENVS, length, OBS_DIM, ACTION_DIM, device=buffer_device, training_device=CUDA
    )
    captured = CapturedRollout(algorithm, rb, NUM_ENVS, OBS_DIM, CUDA)
    assert captured.writes_rows == (buffer_device is None)
    torch.cuda.manual_seed(7)
    actions = [captured.step(ts).cpu() for ts in host_steps]
    assert captured._graph is not None  # the later steps were replays
    # Same generator, same numbers: the noise (and OU's state across steps) as eager.
    for t, (action, want) in enumerate(zip(actions, expected)):
        torch.testing.assert_close(action, want, rtol=0, atol=1e-6, msg=f'env step {t}')
    if not captured.writes_rows:
        # A CPU buffer is written by the collector after the action came down.
        assert rb.total_added == 0 and int(rb._total_added_tensor) == 0
        assert not any(x.any() for x in rb.storage.values())
        return
    assert rb.total_added == steps
    state = rb.storage
    assert int(rb._total_added_tensor) == steps
    for t in range(steps - length, steps):
        ts, pos = host_steps[t], t % length
        assert torch.equal(state['step_type'][:, pos].cpu(), ts.step_type)
        assert torch.equal(state['observation'][:, pos].cpu(), ts.observation)
        assert torch.equal(state['action'][:, pos].cpu(), actions[t])
        assert torch.equal(state['reward'][:, pos].cpu(), ts.reward)
        assert torch.equal(state['discount'][:, pos].cpu(), ts.discount)


EXAMPLE_RUNS = [
    'sac_pendulum.gin',
    'td3_pendulum.gin',
    'sac_halfcheetah.gin',
    'td3_halfcheetah.gin',
]


@pytest.mark.parametrize('cuda_graph', [False, True], ids=['eager', 'cuda_graph'])
@pytest.mark.parametrize('example', EXAMPLE_RUNS)
def test_short_run_of_each_example_on_the_gpu_is_reproducible(tmp_path, example, cuda_graph):
    params = ["TrainerConfig.device = 'cuda'", f'TrainerConfig.cuda_graph = {cuda_graph}']
    first = run_example(tmp_path / 'a', example, *params)
    second = run_example(tmp_path / 'b', example, *params)
    assert first == second
    if cuda_graph:
        assert LAST_RUN['update_graphs'] >= 1 and LAST_RUN['rollout_graph'], LAST_RUN
    assert [int(r['env_steps']) for r in first][-1] == 600
    state, _ = ckpt.load_checkpoint(
        str(tmp_path / 'a' / 'checkpoints' / 'ckpt-600'), map_location='cpu'
    )
    assert all(
        torch.isfinite(v).all()
        for v in state['algorithm']['module'].values()
        if torch.is_tensor(v) and v.is_floating_point()
    )


@pytest.mark.parametrize(
    'example, cuda_graph, extra',
    [
        ('sac_pendulum.gin', False, []),
        ('ddpg_pendulum.gin', True, ['DdpgAlgorithm.exploration_noise = @OUNoise()']),
    ],
    ids=['sac_eager', 'ddpg_ou_cuda_graph'],
)
def test_a_stopped_and_resumed_gpu_run_gives_the_numbers_of_a_run_never_stopped(
    tmp_path, example, cuda_graph, extra
):
    # After the resume the update and rollout graphs are captured again, after
    # eager warm-up steps, and the OU noise (ddpg_pendulum.gin's own is Gaussian)
    # continues from the checkpoint.
    params = ["TrainerConfig.device = 'cuda'", f'TrainerConfig.cuda_graph = {cuda_graph}', *extra]
    expected = run_example(tmp_path / 'a', example, *params)
    run_example(tmp_path / 'b', example, *params, 'TrainerConfig.num_env_steps = 350')
    state, _ = ckpt.load_checkpoint(
        str(tmp_path / 'b' / 'checkpoints' / 'ckpt-350'), map_location='cpu'
    )
    rows = run_example(tmp_path / 'b', example, *params)
    # Resumed, not started over: the stopped run's last row is still there.
    assert '350' in [r['env_steps'] for r in rows]
    rows = [r for r in rows if r['env_steps'] != '350']
    if not cuda_graph:
        assert rows == expected
        return
    assert LAST_RUN['update_graphs'] >= 1 and LAST_RUN['rollout_graph'], LAST_RUN
    assert state['collection']['rollout']['exploration_noise']['state'].shape == (1, 1)
    # The never-stopped run replays its graphs where the resumed one warms up
    # eagerly: the same kernels, so the same bits are expected; rounding in
    # the last bits is tolerated, and reported.
    assert_rows_close(rows, expected)
    if rows != expected:
        warnings.warn(
            'a resumed CUDA-graph run matches the one never stopped only within 1e-4', stacklevel=1
        )


def assert_rows_close(rows, expected, rtol=1e-4):
    """Same columns and counters; each float within ``rtol`` of the expected one."""
    assert [list(r) for r in rows] == [list(r) for r in expected]
    for row, want in zip(rows, expected):
        for key, value in row.items():
            if value == want[key]:
                continue
            assert value and want[key], (row['env_steps'], key, value, want[key])
            assert math.isclose(float(value), float(want[key]), rel_tol=rtol, abs_tol=1e-6), (
                row['env_steps'],
                key,
                value,
                want[key],
            )


def test_compiled_networks_in_captured_graphs_train_and_resume_without_compile(tmp_path):
    skip_unless_torch_compiles_on_the_gpu()
    params = ["TrainerConfig.device = 'cuda'", 'TrainerConfig.cuda_graph = True']
    rows = run_example(tmp_path, 'sac_pendulum.gin', *params, 'TrainerConfig.compile = True')
    assert [int(r['env_steps']) for r in rows][-1] == 600
    assert all(math.isfinite(float(r['train/critic_loss'])) for r in rows if r['train/critic_loss'])
    # The checkpoint names the parameters as an uncompiled network does.
    before = progress_lines(tmp_path)
    rows = run_example(tmp_path, 'sac_pendulum.gin', *params, 'TrainerConfig.num_env_steps = 800')
    assert [int(r['env_steps']) for r in rows][-1] == 800
    assert_resumed(tmp_path, before)


def test_auto_device_trains_on_the_gpu_and_resumes_on_the_cpu(tmp_path):
    run_example(tmp_path, 'sac_pendulum.gin', "TrainerConfig.device = 'auto'")
    assert (tmp_path / 'device.txt').read_text().startswith('cuda')
    before = progress_lines(tmp_path)
    # The same root_dir, carried on as on a machine without a GPU.
    rows = run_example(
        tmp_path,
        'sac_pendulum.gin',
        "TrainerConfig.device = 'cpu'",
        'TrainerConfig.num_env_steps = 900',
    )
    assert [int(r['env_steps']) for r in rows][-1] == 900
    assert_resumed(tmp_path, before)


@pytest.mark.parametrize('first_device', ['cpu', 'cuda'])
def test_a_run_without_graphs_resumes_on_the_gpu_with_them(tmp_path, first_device):
    # The checkpoint's RNG state is mapped to the GPU on load, and its
    # optimizers were saved with capturable=False.
    run_example(tmp_path, 'sac_pendulum.gin', f"TrainerConfig.device = '{first_device}'")
    before = progress_lines(tmp_path)
    rows = run_example(
        tmp_path,
        'sac_pendulum.gin',
        "TrainerConfig.device = 'cuda'",
        'TrainerConfig.cuda_graph = True',
        'TrainerConfig.num_env_steps = 800',
    )
    assert [int(r['env_steps']) for r in rows][-1] == 800
    assert all(math.isfinite(float(r['train/critic_loss'])) for r in rows if r['train/critic_loss'])
    assert_resumed(tmp_path, before)
    assert LAST_RUN['update_graphs'] >= 1 and LAST_RUN['rollout_graph'], LAST_RUN


def test_checkpointed_rng_state_continues_the_gpu_generator(tmp_path):
    torch.manual_seed(3)
    torch.rand(2, device=CUDA)  # CUDA initialised: its state is part of the RNG state
    from alf_lite.seeding import global_rng_state, set_global_rng_state

    saved = global_rng_state()
    assert len(saved['cuda']) == torch.cuda.device_count()
    path = ckpt.save_checkpoint(str(tmp_path), 1, {'rng': saved})
    expected = torch.rand(5, device=CUDA)
    torch.manual_seed(9)
    state, _ = ckpt.load_checkpoint(path)
    set_global_rng_state(state['rng'])
    assert torch.equal(torch.rand(5, device=CUDA), expected)
