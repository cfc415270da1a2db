"""benchmarks/throughput.py in process: the matched settings, the timed windows, the table."""

import contextlib
import csv
import statistics
import sys
import types

import gin
import gymnasium
import pytest
import torch

from alf_lite import device, update
from alf_lite.run_dir import RunDir
from alf_lite.runs import ENV_STEPS, ENV_STEPS_PER_SEC
from benchmarks import throughput
from fake_clock import Clock


def make_args(**overrides):
    """The script's arguments, at its defaults unless overridden; on Pendulum-v1."""
    args = vars(throughput.build_parser().parse_args([]))
    args.update(env='Pendulum-v1', **overrides)
    return types.SimpleNamespace(**args)


@pytest.fixture(autouse=True)
def torch_globals():
    """The script sets torch's thread count and deterministic mode for the process."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


@pytest.mark.parametrize('algo', ['sac', 'td3', 'ddpg'])
def test_alf_lite_and_sb3_train_with_the_same_hyperparameters(algo):
    pytest.importorskip('stable_baselines3')
    from stable_baselines3.common.noise import NormalActionNoise

    from alf_lite.algorithms.noise import GaussianNoise
    from alf_lite.trainer import TrainerConfig

    args = make_args(algo=algo, learning_starts=20, steps=30, ceiling_only=True)
    throughput.parse_alf_lite_config(args, seed=3)
    prefix = {'sac': 'SacAlgorithm', 'td3': 'Td3Algorithm', 'ddpg': 'DdpgAlgorithm'}[algo]
    actor = 'TanhNormalActorNetwork' if algo == 'sac' else 'DeterministicActorNetwork'
    alf = {
        name: gin.query_parameter(name)
        for name in (
            'TrainerConfig.mini_batch_size',
            'TrainerConfig.replay_buffer_length',
            'TrainerConfig.initial_collect_steps',
            'TrainerConfig.random_seed',
            f'{prefix}.gamma',
            f'{prefix}.target_update_tau',
            f'{actor}.hidden_layers',
            'CriticNetwork.hidden_layers',
            'actor/Adam.lr',
            'critic/Adam.lr',
        )
    }
    # ceiling_only: the model after its random steps, without the timed training.
    _, _, model = throughput.sb3_run(args, seed=3)

    assert alf['TrainerConfig.mini_batch_size'] == model.batch_size == 256
    assert alf['TrainerConfig.replay_buffer_length'] == model.buffer_size == 1_000_000
    assert alf['TrainerConfig.initial_collect_steps'] == model.learning_starts == 20
    assert alf['TrainerConfig.random_seed'] == model.seed == 3
    assert alf[f'{prefix}.gamma'] == model.gamma == 0.99
    assert alf[f'{prefix}.target_update_tau'] == model.tau == 0.005
    assert alf['actor/Adam.lr'] == alf['critic/Adam.lr'] == model.learning_rate == 3e-4
    net_arch = list(model.policy_kwargs['net_arch'])
    assert list(alf[f'{actor}.hidden_layers']) == net_arch == [256, 256]
    assert list(alf['CriticNetwork.hidden_layers']) == net_arch
    # One gradient step per env step on both sides (alf_lite: one env).
    config = TrainerConfig()
    assert (model.train_freq.frequency, model.train_freq.unit.value) == (1, 'step')
    assert model.gradient_steps == 1
    assert config.num_updates_per_train_iter / config.unroll_length == 1
    # The algorithm alf_lite builds from the config.
    algorithm = config.algorithm_ctor(
        observation_dim=model.observation_space.shape[0], action_dim=model.action_space.shape[0]
    )
    assert model.critic.n_critics == algorithm._critic.num_replicas
    if algo == 'sac':
        assert gin.query_parameter('alpha/Adam.lr') == 3e-4
        assert model.action_noise is None
        # SB3's 'auto' entropy target and initial temperature are alf_lite's (each of
        # its Adam updates, one here, moves log alpha by at most the learning rate).
        assert model.target_entropy == algorithm._target_entropy
        assert model.log_ent_coef.item() == pytest.approx(
            algorithm._log_alpha.item(), abs=model.learning_rate * model._n_updates
        )
        return
    # SB3's noise is in the action scaled to [-1, 1], as alf_lite's GaussianNoise.
    assert isinstance(model.action_noise, NormalActionNoise)
    assert isinstance(algorithm._exploration_noise, GaussianNoise)
    assert gin.query_parameter('GaussianNoise.sigma') == algorithm._exploration_noise.sigma == 0.1
    assert model.action_noise._sigma.tolist() == [0.1]
    assert model.action_noise._mu.tolist() == [0.0]
    # SB3's critics take the action at their input, as CriticNetwork with action_input_layer 0.
    assert gin.query_parameter('CriticNetwork.action_input_layer') == 0
    assert gin.query_parameter(f'{prefix}.policy_update_period') == model.policy_delay
    assert gin.query_parameter(f'{prefix}.num_critic_replicas') == model.policy.critic.n_critics
    if algo == 'td3':
        assert gin.query_parameter('Td3Algorithm.target_policy_noise') == 0.2
        assert model.target_policy_noise == 0.2
        assert gin.query_parameter('Td3Algorithm.target_policy_noise_clip') == 0.5
        assert model.target_noise_clip == 0.5
    else:  # SB3's DDPG is its TD3 with the target smoothing clipped to nothing.
        assert model.target_noise_clip == 0.0
        assert gin.query_parameter('DdpgAlgorithm.critic_l2_weight_decay') == 0.0
        for network in ('DeterministicActorNetwork', 'CriticNetwork'):
            assert gin.query_parameter(f'{network}.batch_norm') is False
            assert gin.query_parameter(f'{network}.paper_init') is False


def test_alf_lite_config_runs_the_random_steps_then_the_timed_ones_in_rows_at_their_ends():
    args = make_args(learning_starts=300, steps=500, threads=3, sb3_threads=1)
    throughput.parse_alf_lite_config(args, seed=0)
    assert gin.query_parameter('TrainerConfig.initial_collect_steps') == 300
    assert gin.query_parameter('TrainerConfig.num_env_steps') == 800
    # A progress row every learning_starts env steps: rows end where the random
    # steps end and where the warm window starts.
    assert gin.query_parameter('TrainerConfig.summary_interval') == 300
    # No evaluation or checkpoint inside the run (the last of each comes after it).
    assert gin.query_parameter('TrainerConfig.eval_interval') > 800
    assert gin.query_parameter('TrainerConfig.checkpoint_interval') > 800
    assert gin.query_parameter('TrainerConfig.checkpoint_replay_buffer') is False
    assert gin.query_parameter('TrainerConfig.torch_num_threads') == 3
    with pytest.raises(ValueError):  # float32 is TrainerConfig's own default
        gin.query_parameter('TrainerConfig.precision')

    throughput.parse_alf_lite_config(make_args(precision='bfloat16'), seed=0)
    assert gin.query_parameter('TrainerConfig.precision') == 'bfloat16'


def test_device_flags_bind_the_trainer_only_where_it_trains():
    def bound(name):
        try:
            return gin.query_parameter(name)
        except ValueError:
            return None

    def trainer_bindings(trainer_device, **flags):
        throughput.parse_alf_lite_config(make_args(**flags), seed=0, trainer_device=trainer_device)
        return tuple(bound(f'TrainerConfig.{name}') for name in ('device', 'cuda_graph', 'compile'))

    # The CPU too: the trainer's default, 'auto', would train on a GPU that SB3 is not given.
    assert trainer_bindings(True) == ('cpu', False, None)
    assert trainer_bindings(True, device='cuda') == ('cuda', False, None)
    assert trainer_bindings(True, device='cuda:1', cuda_graph=True) == ('cuda:1', True, None)
    # The trainer then refuses the CUDA graph on the CPU rather than ignore it.
    assert trainer_bindings(True, cuda_graph=True) == ('cpu', True, None)
    assert trainer_bindings(True, compile=True) == ('cpu', False, True)
    # The ceiling builds the algorithm from the config and places it itself.
    assert trainer_bindings(False, device='cuda', cuda_graph=True, compile=True) == (
        None,
        None,
        None,
    )


class FakeTrainer:
    """Writes the progress rows ``ROWS`` as the trainer would, ``(env steps, env steps/s)``;
    an empty speed is an evaluation's row."""

    ROWS = []

    def __init__(self, config, root_dir):
        self.root_dir = root_dir

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def train(self):
        with open(RunDir(self.root_dir).progress_file, 'w', newline='') as f:
            writer = csv.writer(f)
            writer.writerow([ENV_STEPS, ENV_STEPS_PER_SEC, 'eval/average_return'])
            for steps, speed in self.ROWS:
                writer.writerow([steps, speed, '' if speed else '-1000.0'])


def test_alf_lite_run_weighs_each_row_after_learning_starts_by_its_env_steps(monkeypatch):
    monkeypatch.setattr('alf_lite.trainer.Trainer', FakeTrainer)
    # learning_starts 100, 250 timed steps: rows every 100 steps and at the end.
    rows = [
        (0, ''),  # the untrained policy's evaluation
        (100, 1000.0),  # the random steps: not timed
        (200, 50.0),  # 100 steps in 2 s
        (300, 100.0),  # 100 steps in 1 s
        (350, 50.0),  # 50 steps in 1 s
        (350, ''),  # the last evaluation
    ]
    monkeypatch.setattr(FakeTrainer, 'ROWS', rows)
    whole, warm = throughput.alf_lite_run(make_args(learning_starts=100, steps=250), seed=0)
    assert whole == pytest.approx(250 / (2 + 1 + 1))
    # Once warm: after the first 100 updates, i.e. from env step 200.
    assert warm == pytest.approx(150 / (1 + 1))


def test_alf_lite_run_has_no_warm_rate_when_the_timed_steps_end_at_twice_learning_starts(
    monkeypatch,
):
    monkeypatch.setattr('alf_lite.trainer.Trainer', FakeTrainer)
    monkeypatch.setattr(FakeTrainer, 'ROWS', [(100, 1000.0), (200, 40.0)])
    assert throughput.alf_lite_run(make_args(learning_starts=100, steps=100), seed=0) == (
        pytest.approx(40.0),
        None,
    )


def test_alf_lite_run_trains_and_times_the_rows_of_its_progress_file(monkeypatch, tmp_path):
    # The run's directory is kept, to read the rows its rates came from.
    monkeypatch.setattr(
        throughput.tempfile, 'TemporaryDirectory', lambda: contextlib.nullcontext(str(tmp_path))
    )
    args = make_args(learning_starts=30, steps=60, threads=1)
    whole, warm = throughput.alf_lite_run(args, seed=0)
    with open(RunDir(str(tmp_path)).progress_file, newline='') as f:
        speeds = {
            int(r[ENV_STEPS]): float(r[ENV_STEPS_PER_SEC])
            for r in csv.DictReader(f)
            if r[ENV_STEPS_PER_SEC]
        }
    assert sorted(speeds) == [30, 60, 90]
    assert whole == pytest.approx(60 / (30 / speeds[60] + 30 / speeds[90]))
    assert warm == pytest.approx(speeds[90])


class CountingEnv(gymnasium.Wrapper):
    """Advances ``clock`` by one second per env step."""

    def __init__(self, env, clock):
        super().__init__(env)
        self.clock = clock

    def step(self, action):
        self.clock.now += 1.0
        return super().step(action)


def test_sb3_run_times_the_steps_after_learning_starts_and_after_twice_that(monkeypatch):
    stable_baselines3 = pytest.importorskip('stable_baselines3')
    clock = Clock()
    monkeypatch.setattr(throughput, 'time', clock)
    monkeypatch.setattr(
        throughput,
        'gymnasium',
        types.SimpleNamespace(make=lambda name: CountingEnv(gymnasium.make(name), clock)),
    )
    train = stable_baselines3.SAC.train

    def timed_train(model, gradient_steps, batch_size):
        clock.now += gradient_steps
        return train(model, gradient_steps, batch_size)

    monkeypatch.setattr(stable_baselines3.SAC, 'train', timed_train)
    args = make_args(learning_starts=40, steps=70)
    whole, warm, model = throughput.sb3_run(args, seed=0)
    assert model.num_timesteps == 110
    # One second per env step and one per update: a window of the right steps with
    # their updates, no more (as alf_lite's rows: the warm one from the 41st update
    # on), runs at half a step per second.
    assert whole == 0.5
    assert warm == 0.5


class FakeUpdateRunner:
    """Records how it was made and each update; an update takes one second of ``clock``."""

    clock = None
    made = []

    def __init__(
        self, algorithm, replay_buffer, mini_batch_size, mini_batch_length, loss_mask_fn, **kwargs
    ):
        self.algorithm, self.replay_buffer = algorithm, replay_buffer
        self.batch = (mini_batch_size, mini_batch_length)
        self.kwargs = kwargs
        self.updates = []
        self.deterministic = []
        FakeUpdateRunner.made.append(self)

    def update(self, env_steps, update):
        self.updates.append(update)
        self.deterministic.append(torch.are_deterministic_algorithms_enabled())
        self.clock.now += 1.0


@pytest.mark.parametrize(
    'cuda_graph, compile, precision',
    [(False, False, 'float32'), (True, True, 'bfloat16')],
)
def test_alf_lite_ceiling_times_the_updates_after_its_warm_up(
    monkeypatch, cuda_graph, compile, precision
):
    clock = Clock()
    monkeypatch.setattr(throughput, 'time', clock)
    monkeypatch.setattr('alf_lite.update.UpdateRunner', FakeUpdateRunner)
    monkeypatch.setattr(FakeUpdateRunner, 'clock', clock)
    monkeypatch.setattr(FakeUpdateRunner, 'made', [])
    torch.use_deterministic_algorithms(False)
    args = make_args(cuda_graph=cuda_graph, compile=compile, precision=precision)
    throughput.parse_alf_lite_config(args, seed=0, trainer_device=False)
    # One second per update: timing the right updates gives 1 update/s.
    assert throughput.alf_lite_ceiling(args, gymnasium.make('Pendulum-v1'), updates=7) == 1.0

    (runner,) = FakeUpdateRunner.made
    # The updates are numbered on from the warm-up's, as in training.
    assert runner.updates == list(range(1, len(runner.updates) + 1))
    assert len(runner.updates) == throughput.ALF_LITE_WARMUP_UPDATES + 7
    assert all(runner.deterministic)  # as the trainer runs
    assert runner.batch == (256, gin.query_parameter('TrainerConfig.mini_batch_length'))
    assert runner.kwargs['cuda_graph'] is cuda_graph
    assert runner.kwargs['compile'] is compile
    dtypes = {m.compute_dtype for m in runner.algorithm.modules() if hasattr(m, 'compute_dtype')}
    # (None: the networks compute in float32.)
    assert dtypes == {torch.bfloat16 if precision == 'bfloat16' else None}
    assert runner.replay_buffer.num_steps == runner.replay_buffer.length


def test_alf_lite_ceiling_checks_each_loss_as_the_trainer_does_on_the_cpu(monkeypatch):
    import alf_lite.update

    made = []

    class Recorded(alf_lite.update.UpdateRunner):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(alf_lite.update, 'UpdateRunner', Recorded)
    args = make_args(threads=1)
    throughput.parse_alf_lite_config(args, seed=0, trainer_device=False)
    assert throughput.alf_lite_ceiling(args, gymnasium.make('Pendulum-v1'), updates=1) > 0
    # TrainerConfig.defer_non_finite_checks's default: on the CPU each loss is read back
    # before its step; the guard on the device costs a CPU update more.
    assert [runner.guard_enabled for runner in made] == [False]


@pytest.mark.parametrize('algo', ['sac', 'td3', 'ddpg'])
def test_sb3_trains_on_the_device_given(monkeypatch, algo):
    sb3 = pytest.importorskip('stable_baselines3')
    made = []

    class Model:
        def __init__(self, policy, env, **kwargs):
            made.append(kwargs)

        def set_logger(self, logger):
            pass

        def learn(self, total_timesteps, callback=None):
            pass

    monkeypatch.setattr(sb3, algo.upper(), Model)
    args = make_args(algo=algo, device='cuda:1', ceiling_only=True)
    throughput.sb3_run(args, seed=0)
    assert [kwargs['device'] for kwargs in made] == ['cuda:1']


def test_sb3_ceiling_on_a_gpu_waits_for_the_warm_up_before_its_timer_and_for_its_updates(
    monkeypatch,
):
    # A GPU runs the updates after train() returns: only a synchronize waits for them.
    clock = Clock()
    monkeypatch.setattr(throughput, 'time', clock)
    pending = []

    def synchronize():
        clock.now += sum(pending)
        pending.clear()

    monkeypatch.setattr(torch.cuda, 'synchronize', synchronize)

    class Model:
        device = torch.device('cuda')

        def train(self, gradient_steps, batch_size):
            pending.append(gradient_steps)  # one second an update, on the GPU

    # Timing the 7 updates alone, not the warm-up's: 1 update/s.
    assert throughput.sb3_ceiling(Model(), 7) == 1.0


def test_sb3_ceiling_times_the_updates_after_its_warm_up(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(throughput, 'time', clock)
    calls = []

    class Model:
        device = torch.device('cpu')

        def train(self, gradient_steps, batch_size):
            calls.append((gradient_steps, batch_size))
            clock.now += gradient_steps

    # One second per update: timing the right updates gives 1 update/s.
    assert throughput.sb3_ceiling(Model(), 7) == 1.0
    assert calls == [(throughput.WARMUP_UPDATES, 256), (7, 256)]


def test_ceilings_time_each_library_at_its_own_thread_count(monkeypatch):
    seen = {}

    def alf_lite_ceiling(args, env, updates):
        seen['alf'] = (torch.get_num_threads(), updates, env.spec.id)
        torch.use_deterministic_algorithms(True)  # as alf_lite's update sets it
        return 200.0

    def sb3_ceiling(model, updates):
        seen['sb3'] = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
        seen['model'] = model
        return 80.0

    def sb3_run(args, seed):
        seen['sb3_run'] = (seed, args.ceiling_only)
        return None, None, 'fresh model'

    monkeypatch.setattr(throughput, 'alf_lite_ceiling', alf_lite_ceiling)
    monkeypatch.setattr(throughput, 'sb3_ceiling', sb3_ceiling)
    monkeypatch.setattr(throughput, 'sb3_run', sb3_run)
    torch.set_num_threads(3)
    args = make_args(threads=2, sb3_threads=1, ceiling_updates=5, ceiling_only=True)
    assert throughput.ceilings(args, model='trained model') == (200.0, 80.0)
    assert seen == {'alf': (2, 5, 'Pendulum-v1'), 'sb3': (1, False), 'model': 'trained model'}

    assert throughput.ceilings(args) == (200.0, 80.0)
    assert seen['sb3_run'] == (0, True)
    assert seen['model'] == 'fresh model'


def run_main(monkeypatch, capsys, argv):
    monkeypatch.setattr(sys, 'argv', ['throughput.py'] + argv)
    throughput.main()
    return capsys.readouterr().out


def table(text):
    """``{row name: (median, min, max)}`` of the lines of the printed table."""
    rows = {}
    for line in text.splitlines():
        *name, median, low, high = line.split()
        rows[' '.join(name)] = (float(median), float(low), float(high))
    return rows


def test_main_reports_median_min_max_of_each_library_and_of_the_ratio_per_pair(monkeypatch, capsys):
    # Per pair: alf_lite (whole window, warm), SB3 (whole window, warm).
    alf = [(100.0, 150.0), (300.0, 330.0), (120.0, 200.0)]
    sb3 = [(50.0, 60.0), (100.0, 110.0), (80.0, 100.0)]
    calls = []

    def alf_lite_run(args, seed):
        calls.append(('alf', seed))
        torch.use_deterministic_algorithms(True)  # as alf_lite's trainer sets it
        return alf[seed]

    def sb3_run(args, seed):
        calls.append(
            ('sb3', seed, torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
        )
        return sb3[seed] + (f'model {seed}',)

    def ceilings(args, model=None):
        calls.append(('ceilings', model))
        return 200.0, 80.0

    monkeypatch.setattr(throughput, 'alf_lite_run', alf_lite_run)
    monkeypatch.setattr(throughput, 'sb3_run', sb3_run)
    monkeypatch.setattr(throughput, 'ceilings', ceilings)
    out = run_main(
        monkeypatch,
        capsys,
        ['--pairs', '3', '--threads', '2', '--sb3_threads', '1']
        + ['--learning_starts', '500', '--steps', '2000'],
    )

    assert calls == [
        ('alf', 0),
        ('sb3', 0, 1, False),
        ('alf', 1),
        ('sb3', 1, 1, False),
        ('alf', 2),
        ('sb3', 2, 1, False),
        ('ceilings', 'model 2'),
    ]
    lines = out.splitlines()
    assert (
        'pair 1: alf_lite 300.0 env steps/s, SB3 100.0, ratio 3.00 at unequal resources '
        '(torch threads: alf_lite 2, SB3 1; cpu)'
    ) in lines
    assert (
        'SAC HalfCheetah-v5 on cpu, alf_lite in float32, 2000 timed steps after 500 random '
        'ones, torch threads: alf_lite 2, SB3 1, 3 pair(s)'
    ) in lines
    header = lines.index(f'{"":24s} {"median":>8s} {"min":>8s} {"max":>8s}')
    warm_title = lines.index('after 500 updates:')
    ceiling_line = lines[-1]
    whole_rows = table('\n'.join(lines[header + 1 : warm_title]))
    warm_rows = table('\n'.join(lines[warm_title + 1 : -1]))

    def figures(values):
        return pytest.approx((statistics.median(values), min(values), max(values)), abs=0.005)

    for rows, i in ((whole_rows, 0), (warm_rows, 1)):
        assert rows == {
            'alf_lite env steps/s': figures([a[i] for a in alf]),
            'SB3 env steps/s': figures([b[i] for b in sb3]),
            'ratio alf_lite / SB3': figures([a[i] / b[i] for a, b in zip(alf, sb3)]),
        }
    assert ceiling_line == (
        'pure-update ceiling on cpu: alf_lite (2 torch threads) 200.0 updates/s, '
        'SB3 (1) 80.0 updates/s, ratio 2.50 at unequal resources'
    )


def test_defaults_are_the_settings_the_performance_section_quotes(monkeypatch, capsys):
    # README: 1000 uniform random steps, then 5000 timed ones; float32 on the CPU.
    monkeypatch.setattr(throughput, 'alf_lite_run', lambda args, seed: (100.0, None))
    monkeypatch.setattr(throughput, 'sb3_run', lambda args, seed: (50.0, None, 'model'))
    monkeypatch.setattr(throughput, 'ceilings', lambda args, model=None: (200.0, 80.0))
    out = run_main(monkeypatch, capsys, []).splitlines()
    assert (
        'SAC HalfCheetah-v5 on cpu, alf_lite in float32, 5000 timed steps after 1000 random '
        'ones, torch threads: alf_lite 2, SB3 1, 2 pair(s)'
    ) in out
    # No warm figures: the run has none.
    assert not any(line.startswith('after ') for line in out)


def test_ceiling_only_runs_no_training_and_names_what_it_measured(monkeypatch, capsys):
    def no_run(args, seed):
        raise AssertionError('--ceiling_only trains no run')

    seen = []

    def ceilings(args, model=None):
        seen.append((model, args.ceiling_only, args.cuda_graph, args.compile))
        return 300.0, 60.0

    monkeypatch.setattr(throughput, 'alf_lite_run', no_run)
    monkeypatch.setattr(throughput, 'sb3_run', no_run)
    monkeypatch.setattr(throughput, 'ceilings', ceilings)
    # As on a machine with a GPU, where torch.compile compiles.
    monkeypatch.setattr(device, 'resolve_device', lambda name: torch.device('cuda', 0))
    monkeypatch.setattr(update, 'check_compiles', lambda device: None)
    out = run_main(
        monkeypatch,
        capsys,
        ['--ceiling_only', '--device', 'cuda', '--cuda_graph', '--compile']
        + ['--threads', '3', '--sb3_threads', '2', '--algo', 'td3', '--precision', 'bfloat16'],
    )
    assert seen == [(None, True, True, True)]
    # The algorithm, env and precision, which the ceiling line leaves out.
    assert out == (
        'TD3 HalfCheetah-v5, alf_lite in bfloat16\n'
        'pure-update ceiling on cuda (alf_lite: CUDA graph, compiled): alf_lite (3 torch threads) '
        '300.0 updates/s, SB3 (2) 60.0 updates/s, ratio 5.00 at unequal resources\n'
    )


@pytest.mark.parametrize(
    'threads, sb3_threads, device_name, resources',
    [
        (2, 1, 'cpu', 'unequal'),
        (1, 2, 'cpu', 'unequal'),
        (2, 2, 'cpu', 'equal'),
        (1, 1, 'cuda', 'equal'),
    ],
)
def test_every_ratio_names_both_thread_counts_the_device_and_whether_they_were_equal(
    monkeypatch, capsys, threads, sb3_threads, device_name, resources
):
    monkeypatch.setattr(throughput, 'alf_lite_run', lambda args, seed: (120.0, 150.0))
    monkeypatch.setattr(throughput, 'sb3_run', lambda args, seed: (60.0, 50.0, 'model'))
    monkeypatch.setattr(throughput, 'ceilings', lambda args, model=None: (200.0, 80.0))
    # As on a machine with a GPU, where one is asked for.
    monkeypatch.setattr(device, 'resolve_device', lambda name: torch.device(name))
    flags = ['--threads', str(threads), '--sb3_threads', str(sb3_threads)]
    flags += ['--device', device_name, '--pairs', '2', '--steps', '3000']
    lines = run_main(monkeypatch, capsys, flags).splitlines()

    measured_at = (
        f'at {resources} resources (torch threads: alf_lite {threads}, SB3 {sb3_threads}; '
        f'{device_name})'
    )
    # Each pair's ratio, and the table's (which its lines follow).
    assert [line for line in lines if 'ratio 2.00' in line] == [
        f'pair {pair}: alf_lite 120.0 env steps/s, SB3 60.0, ratio 2.00 {measured_at}'
        for pair in (0, 1)
    ]
    title = next(i for i, line in enumerate(lines) if line.startswith('SAC HalfCheetah-v5 on'))
    assert lines[title + 1] == f'ratios {measured_at}'
    assert lines[title + 5].startswith('ratio alf_lite / SB3')
    # The ceiling line names the threads and the device itself.
    ceiling = (
        f'pure-update ceiling on {device_name}: alf_lite ({threads} torch '
        f'thread{"s" if threads > 1 else ""}) 200.0 updates/s, SB3 ({sb3_threads}) 80.0 '
        f'updates/s, ratio 2.50 at {resources} resources'
    )
    assert lines[-1] == ceiling
    assert run_main(monkeypatch, capsys, flags + ['--ceiling_only']).splitlines()[-1] == ceiling


@pytest.mark.parametrize(
    'args, message',
    [
        (['--device', 'tpu'], "--device: device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"),
        (['--cuda_graph'], "--cuda_graph needs a CUDA --device, not 'cpu'"),
        (['--env', 'Nope-v0'], "--env: Unknown environment id 'Nope-v0'"),
        (['--env', 'CartPole-v1'], "--env: Environment 'CartPole-v1' has action space Discrete(2)"),
        (['--env', 'CartPole-v1', '--ceiling_only'], "--env: Environment 'CartPole-v1' has"),
    ],
)
def test_an_unusable_device_or_env_is_refused_before_any_run(monkeypatch, capsys, args, message):
    def no_run(*args, **kwargs):
        raise AssertionError('a refused call trains nothing')

    for name in ('alf_lite_run', 'sb3_run', 'ceilings'):
        monkeypatch.setattr(throughput, name, no_run)
    with pytest.raises(SystemExit) as e:
        run_main(monkeypatch, capsys, args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and 'Traceback' not in err


def test_compile_where_torch_compile_cannot_compile_is_refused_before_any_run(monkeypatch, capsys):
    def no_run(*args, **kwargs):
        raise AssertionError('a refused call trains nothing')

    for name in ('alf_lite_run', 'sb3_run', 'ceilings'):
        monkeypatch.setattr(throughput, name, no_run)
    # As on a machine without a C++ compiler (the Docker image); what this process compiled
    # before would otherwise be reused.
    monkeypatch.setattr('torch._inductor.config.cpp.cxx', (None, '/nonexistent/g++'))
    torch._dynamo.reset()
    for argv in (['--compile'], ['--compile', '--ceiling_only']):
        with pytest.raises(SystemExit) as e:
            run_main(monkeypatch, capsys, argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert '--compile: ' in err and 'InvalidCxxCompiler' in err, err
        assert 'Traceback' not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the refusal without CUDA')
def test_cuda_on_a_machine_without_it_is_refused_before_any_run(monkeypatch, capsys):
    def no_run(*args, **kwargs):
        raise AssertionError('a refused call trains nothing')

    for name in ('alf_lite_run', 'sb3_run', 'ceilings'):
        monkeypatch.setattr(throughput, name, no_run)
    with pytest.raises(SystemExit) as e:
        run_main(monkeypatch, capsys, ['--device', 'cuda', '--cuda_graph'])
    assert e.value.code == 2
    assert "--device: device 'cuda' was asked for" in capsys.readouterr().err


@pytest.mark.parametrize(
    'flag',
    ['--steps', '--learning_starts', '--pairs', '--threads', '--sb3_threads', '--ceiling_updates'],
)
def test_a_count_below_one_is_refused_naming_its_flag(monkeypatch, capsys, flag):
    def no_run(*args, **kwargs):
        raise AssertionError('a refused call trains nothing')

    for name in ('alf_lite_run', 'sb3_run', 'ceilings'):
        monkeypatch.setattr(throughput, name, no_run)
    with pytest.raises(SystemExit) as e:
        run_main(monkeypatch, capsys, [flag, '0'])
    assert e.value.code == 2
    assert f'{flag} must be at least 1, not 0' in capsys.readouterr().err


def test_the_ceiling_line_says_thread_for_one(capsys):
    args = throughput.build_parser().parse_args(['--threads', '1'])
    throughput.print_ceilings(args, 90.0, 60.0)
    assert 'alf_lite (1 torch thread) 90.0 updates/s' in capsys.readouterr().out
