"""The networks' memory known before it is spent: estimated on the meta device, checked, logged."""

import functools
import re
import sys

import gin
import pytest
import torch

import alf_lite.all_configurables  # noqa: F401  (registers every configurable)
from alf_lite import model_memory
from alf_lite.algorithms.ddpg import DdpgAlgorithm
from alf_lite.algorithms.noise import GaussianNoise
from alf_lite.algorithms.sac import SacAlgorithm
from alf_lite.algorithms.td3 import Td3Algorithm
from alf_lite.config import parse_config
from alf_lite.model_memory import (
    ModelTooLargeError,
    check_model_fits,
    estimate_model_bytes,
    model_bytes,
)
from alf_lite.networks import CriticNetwork, DeterministicActorNetwork
from cli_helpers import PENDULUM, REPO_ROOT, TINY, python_output, run_train, train_command

DIMS = dict(observation_dim=5, action_dim=3)


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def bytes_after_a_step(algorithm):
    """What ``algorithm`` holds once every optimizer stepped: parameters, buffers, gradients and
    the optimizer's state tensors the size of a parameter (not Adam's scalar step count)."""
    for optimizer in algorithm.optimizers.values():
        params = [p for group in optimizer.param_groups for p in group['params']]
        optimizer.zero_grad()
        sum((p * p).sum() for p in params).backward()
        optimizer.step()
    state = [
        value
        for optimizer in algorithm.optimizers.values()
        for per_param in optimizer.state.values()
        for key, value in per_param.items()
        if torch.is_tensor(value) and key != 'step'
    ]
    grads = [p.grad for p in algorithm.parameters() if p.grad is not None]
    return nbytes(algorithm.parameters()) + nbytes(algorithm.buffers()) + nbytes(grads + state)


@pytest.mark.parametrize('ctor', [SacAlgorithm, DdpgAlgorithm, Td3Algorithm])
def test_the_estimate_is_what_the_built_algorithm_holds_once_trained(ctor):
    estimate = estimate_model_bytes(ctor, **DIMS)
    algorithm = ctor(**DIMS)
    parameters = nbytes(algorithm.parameters()) + nbytes(algorithm.buffers())
    assert estimate.parameters == parameters
    assert estimate.num_parameters == sum(p.numel() for p in algorithm.parameters())
    assert estimate.training == bytes_after_a_step(algorithm) > 2 * parameters
    assert model_bytes(algorithm) == estimate


@pytest.mark.parametrize(
    'optimizer, per_parameter',
    [
        ('@torch.optim.SGD', 1),
        ('@torch.optim.RMSprop', 2),
        ('@torch.optim.Adam', 3),
    ],
)
def test_the_estimate_counts_the_state_each_optimizer_keeps(optimizer, per_parameter):
    gin.parse_config(
        [
            f'SacAlgorithm.actor_optimizer = {optimizer}',
            f'SacAlgorithm.critic_optimizer = {optimizer}',
            f'SacAlgorithm.alpha_optimizer = {optimizer}',
            'torch.optim.SGD.lr = 0.1',
            'torch.optim.RMSprop.lr = 0.1',
        ]
    )
    estimate = estimate_model_bytes(SacAlgorithm, **DIMS)
    algorithm = SacAlgorithm(**DIMS)
    assert estimate.training == bytes_after_a_step(algorithm)
    trained = nbytes(
        p for o in algorithm.optimizers.values() for g in o.param_groups for p in g['params']
    )
    assert estimate.training - estimate.parameters == per_parameter * trained


class OneLayer(torch.nn.Module):
    """A linear layer and one optimizer of it, in ``optimizers`` as an algorithm keeps them."""

    def __init__(self, make_optimizer):
        super().__init__()
        self.layer = torch.nn.Linear(5, 3)
        self.optimizers = {'layer': make_optimizer(self.parameters())}


@pytest.mark.parametrize(
    'make_optimizer, per_parameter',
    [
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 2),
        (lambda p: torch.optim.RMSprop(p, momentum=0.9, centered=True), 4),
        (lambda p: torch.optim.Adam(p, amsgrad=True), 4),
        (lambda p: torch.optim.AdamW(p, amsgrad=True), 4),
        # Another optimizer is counted as Adam-like, which Adamax is: two state tensors.
        (lambda p: torch.optim.Adamax(p), 3),
    ],
    ids=['SGD momentum', 'RMSprop momentum centered', 'Adam amsgrad', 'AdamW amsgrad', 'Adamax'],
)
def test_the_estimate_counts_the_state_each_optimizer_setting_adds(make_optimizer, per_parameter):
    # A gradient and the state tensors per parameter: 3 x 5 weights and 3 biases of float32.
    estimate = model_bytes(OneLayer(make_optimizer))
    assert estimate.parameters == 18 * 4
    assert estimate.training == (1 + per_parameter) * 18 * 4
    assert estimate.training == bytes_after_a_step(OneLayer(make_optimizer))


def test_a_parameter_two_optimizers_step_has_one_gradient_and_the_state_of_each():
    module = OneLayer(torch.optim.Adam)
    module.optimizers['again'] = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    estimate = model_bytes(module)
    assert estimate.training == (1 + 1 + 2 + 1) * 18 * 4 == bytes_after_a_step(module)


def test_the_estimate_describes_itself_in_bytes_and_gib():
    gib = model_memory.ModelBytes(parameters=1 << 30, training=3 << 30, num_parameters=5)
    assert gib.describe() == (
        '5 parameters, 1073741824 bytes (1.000 GiB); 3221225472 bytes (3.000 GiB) with their '
        'gradients and optimizer state'
    )


@pytest.mark.parametrize('ctor', [DdpgAlgorithm, Td3Algorithm])
def test_networks_with_batch_norm_have_an_estimate(ctor):
    # The DDPG paper's networks (examples/common/ddpg.gin): batch norm on the actor's layers
    # and on the critic's layers before the action enters.
    build = functools.partial(
        ctor,
        actor_network_ctor=functools.partial(DeterministicActorNetwork, batch_norm=True),
        critic_network_ctor=functools.partial(CriticNetwork, action_input_layer=1, batch_norm=True),
    )
    estimate = estimate_model_bytes(build, **DIMS)
    assert estimate is not None
    assert model_bytes(build(**DIMS)) == estimate


def test_building_on_the_meta_device_draws_no_random_numbers():
    torch.manual_seed(3)
    before = torch.random.get_rng_state()
    estimate_model_bytes(SacAlgorithm, **DIMS)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_an_algorithm_that_cannot_be_built_on_the_meta_device_has_no_estimate():
    def reads_a_value(observation_dim, action_dim):
        torch.zeros(observation_dim).sum().item()
        return SacAlgorithm(observation_dim=observation_dim, action_dim=action_dim)

    assert estimate_model_bytes(reads_a_value, **DIMS) is None
    assert check_model_fits(reads_a_value, torch.device('cpu'), **DIMS) is None


class CheckedCritic(CriticNetwork):
    """A network of one's own whose forward reads a value: it refuses a non-finite Q."""

    def forward(self, observation, action, num_replicas=None):
        q = super().forward(observation, action, num_replicas=num_replicas)
        if not torch.isfinite(q).all():
            raise FloatingPointError('a non-finite Q')
        return q


@pytest.mark.parametrize('ctor', [SacAlgorithm, DdpgAlgorithm, Td3Algorithm])
def test_networks_whose_forward_reads_a_value_have_an_estimate_and_are_checked(ctor, monkeypatch):
    # The networks' outputs are checked by the real build; on the meta device their
    # forward cannot read a value, and the memory check was left out.
    build = functools.partial(ctor, critic_network_ctor=CheckedCritic)
    estimate = estimate_model_bytes(build, **DIMS)
    assert estimate is not None
    assert model_bytes(build(**DIMS)) == estimate
    fake_free_memory(monkeypatch, {'cpu': estimate.training - 1})
    with pytest.raises(ModelTooLargeError, match='training them needs'):
        check_model_fits(build, torch.device('cpu'), **DIMS)


def reads_a_value(observation_dim, action_dim):
    torch.zeros(observation_dim).sum().item()
    return SacAlgorithm(observation_dim=observation_dim, action_dim=action_dim)


NOT_CHECKED = (
    "the networks' memory was not counted before they were built, so it was not checked "
    'against the free memory'
)


def warnings_logged(caplog):
    return [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']


def test_networks_built_without_an_estimate_are_named_in_a_warning(tmp_path, caplog):
    from alf_lite.trainer import Trainer, TrainerConfig

    parse_config([str(PENDULUM)], TINY)
    with caplog.at_level('WARNING'):
        with Trainer(TrainerConfig(algorithm_ctor=reads_a_value), str(tmp_path / 'run')):
            pass
    warnings = warnings_logged(caplog)
    assert any(NOT_CHECKED in w and 'the replay buffer' in w for w in warnings), warnings


def test_a_setting_the_algorithm_refuses_is_told_once_by_its_error(caplog):
    # The meta-device build refuses it too: that refusal is no reason to log, the error says it.
    build = functools.partial(SacAlgorithm, gamma=1.5)
    with caplog.at_level('INFO'):
        with pytest.raises(ValueError, match=r'gamma must be in \[0, 1\], got 1.5'):
            model_memory.build_checked(build, torch.device('cpu'), **DIMS)
    assert not [r.getMessage() for r in caplog.records if 'gamma' in r.getMessage()]


class _LoudCritic(CriticNetwork):
    """A critic of one's own that warns when built."""

    def __init__(self, observation_dim, action_dim, **kwargs):
        from absl import logging

        logging.warning('this critic is experimental')
        logging.warning('critic of %d observations', observation_dim)
        super().__init__(observation_dim, action_dim, **kwargs)


def test_a_warning_of_the_algorithms_build_is_logged_once_though_the_estimate_builds_it_too(
    caplog,
):
    build = functools.partial(SacAlgorithm, critic_network_ctor=_LoudCritic)
    with caplog.at_level('WARNING'):
        _, estimate = model_memory.build_checked(build, torch.device('cpu'), **DIMS)
    assert estimate is not None
    warnings = warnings_logged(caplog)
    assert warnings.count('this critic is experimental') == 1, warnings
    assert warnings.count('critic of 5 observations') == 1, warnings
    # Only while it builds: the same warning afterwards is logged again.
    build(**DIMS)
    assert warnings_logged(caplog).count('this critic is experimental') == 2


def test_the_warning_of_networks_built_without_an_estimate_gives_the_reason(caplog):
    with caplog.at_level('WARNING'):
        model_memory.build_checked(reads_a_value, torch.device('cpu'), **DIMS)
    (warning,) = warnings_logged(caplog)
    assert NOT_CHECKED in warning and 'meta device, where it is counted (RuntimeError: ' in warning


def test_play_names_networks_built_without_an_estimate_in_a_warning(tmp_path, caplog):
    from alf_lite.bin.policy import checkpoint_path, load_policy
    from alf_lite.trainer import TrainerConfig

    root_dir = tmp_path / 'run'
    params = TINY + ['TrainerConfig.num_env_steps=2', 'TrainerConfig.initial_collect_steps=1']
    assert run_train(train_command(root_dir, [PENDULUM], params)).returncode == 0
    parse_config([str(PENDULUM)], TINY)
    config = TrainerConfig(algorithm_ctor=reads_a_value)
    with caplog.at_level('WARNING'):
        load_policy(checkpoint_path(str(root_dir), None), config, 3, 1)
    assert any(NOT_CHECKED in w for w in warnings_logged(caplog)), warnings_logged(caplog)


def fake_free_memory(monkeypatch, free):
    asked = []

    def free_memory_bytes(device):
        asked.append(device)
        return free[device.type]

    monkeypatch.setattr(model_memory, 'free_memory_bytes', free_memory_bytes)
    return asked


def test_training_on_the_cpu_needs_room_for_gradients_and_optimizer_state(monkeypatch):
    estimate = estimate_model_bytes(SacAlgorithm, **DIMS)
    fake_free_memory(monkeypatch, {'cpu': estimate.training})
    assert check_model_fits(SacAlgorithm, torch.device('cpu'), **DIMS) == estimate
    fake_free_memory(monkeypatch, {'cpu': estimate.training - 1})
    with pytest.raises(ModelTooLargeError, match='training them needs'):
        check_model_fits(SacAlgorithm, torch.device('cpu'), **DIMS)
    # Playing holds the parameters only.
    check_model_fits(SacAlgorithm, torch.device('cpu'), training=False, **DIMS)
    fake_free_memory(monkeypatch, {'cpu': estimate.parameters - 1})
    with pytest.raises(ModelTooLargeError, match='they need'):
        check_model_fits(SacAlgorithm, torch.device('cpu'), training=False, **DIMS)


def test_a_gpu_learner_needs_the_parameters_in_cpu_memory_and_the_rest_on_the_gpu(monkeypatch):
    estimate = estimate_model_bytes(SacAlgorithm, **DIMS)
    gpu = torch.device('cuda:0')
    asked = fake_free_memory(monkeypatch, {'cpu': estimate.parameters, 'cuda': estimate.training})
    assert check_model_fits(SacAlgorithm, gpu, **DIMS) == estimate
    assert asked == [torch.device('cpu'), gpu]
    fake_free_memory(monkeypatch, {'cpu': estimate.parameters - 1, 'cuda': 1 << 50})
    with pytest.raises(ModelTooLargeError, match='in cpu memory'):
        check_model_fits(SacAlgorithm, gpu, **DIMS)
    fake_free_memory(monkeypatch, {'cpu': 1 << 50, 'cuda': estimate.training - 1})
    with pytest.raises(ModelTooLargeError, match='in cuda:0 memory'):
        check_model_fits(SacAlgorithm, gpu, **DIMS)


def test_networks_too_large_under_the_processs_ulimit_are_refused_naming_it():
    # A fresh process: the limit stays with the process that sets it.
    script = """
import psutil, resource
from alf_lite.algorithms.sac import SacAlgorithm
from alf_lite.model_memory import ModelTooLargeError, check_model_fits, estimate_model_bytes

dims = dict(observation_dim=17, action_dim=6)
used = psutil.Process().memory_info().vms
needed = estimate_model_bytes(SacAlgorithm, **dims).training
resource.setrlimit(resource.RLIMIT_AS, (used + needed // 2, resource.RLIM_INFINITY))
try:
    check_model_fits(SacAlgorithm, 'cpu', **dims)
except ModelTooLargeError as e:
    print(e)
"""
    output = python_output(script)
    assert 'the networks do not fit in cpu memory' in output
    assert "The CPU figure is what this process's ulimit -v limit" in output


def test_train_refuses_networks_that_cannot_fit_before_writing_anything(tmp_path):
    root_dir = tmp_path / 'run'
    huge = 'CriticNetwork.hidden_layers=(100000, 100000)'
    result = run_train(train_command(root_dir, [PENDULUM], TINY + [huge]))
    assert result.returncode == 2, result.stderr
    # 2 replicas x 1e10 weights, and as many in the target: 160 GB of float32.
    assert re.search(
        r'the networks do not fit in cpu memory: they have 4000\d{7} param', result.stderr
    )
    assert 'Make the networks smaller (their hidden_layers).' in result.stderr
    assert 'Traceback' not in result.stderr
    assert not root_dir.exists()


def test_train_refuses_networks_with_batch_norm_that_cannot_fit(tmp_path):
    root_dir = tmp_path / 'run'
    huge = [
        'CriticNetwork.hidden_layers=(100000, 100000)',
        'CriticNetwork.action_input_layer=1',
        'CriticNetwork.batch_norm=True',
    ]
    result = run_train(train_command(root_dir, [PENDULUM], TINY + huge))
    assert result.returncode == 2, result.stderr
    assert 'the networks do not fit in cpu memory' in result.stderr
    assert 'Traceback' not in result.stderr
    assert not root_dir.exists()


def test_train_logs_the_networks_bytes_at_start(tmp_path):
    root_dir = tmp_path / 'run'
    params = TINY + ['TrainerConfig.num_env_steps=2', 'TrainerConfig.initial_collect_steps=1']
    result = run_train(train_command(root_dir, [PENDULUM], params))
    assert result.returncode == 0, result.stderr
    parse_config([str(PENDULUM)], TINY)
    estimate = estimate_model_bytes(SacAlgorithm, observation_dim=3, action_dim=1)
    assert f'networks: {estimate.describe()}' in result.stderr


def test_the_buffer_may_not_count_on_the_memory_the_first_update_allocates(tmp_path, monkeypatch):
    import alf_lite.trainer as trainer_module
    from alf_lite.trainer import Trainer, TrainerConfig

    given = {}
    real = trainer_module.ReplayBuffer

    def recording(**kwargs):
        given.update(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(trainer_module, 'ReplayBuffer', recording)
    parse_config([str(PENDULUM)], TINY)
    with Trainer(TrainerConfig(), str(tmp_path / 'run')):
        pass
    estimate = estimate_model_bytes(SacAlgorithm, observation_dim=3, action_dim=1)
    assert given['reserved_bytes'] == estimate.training - estimate.parameters > 0


def test_play_refuses_networks_that_cannot_fit(tmp_path):
    root_dir = tmp_path / 'run'
    params = TINY + ['TrainerConfig.num_env_steps=2', 'TrainerConfig.initial_collect_steps=1']
    assert run_train(train_command(root_dir, [PENDULUM], params)).returncode == 0
    huge = 'TanhNormalActorNetwork.hidden_layers=(200000, 200000)'
    play = [sys.executable, '-m', 'alf_lite.bin.play', '--root_dir', str(root_dir)]
    result = run_train(play + ['--gin_param', huge])
    assert result.returncode == 2, result.stderr
    assert 'the networks do not fit in cpu memory' in result.stderr
    assert 'they need' in result.stderr and 'Traceback' not in result.stderr


def test_play_refuses_a_checkpoint_that_does_not_fit_next_to_its_networks_as_too_large(
    tmp_path, monkeypatch
):
    # play reads the whole model.pt, its optimizer state too: a run's checkpoints are all
    # of one size, so another --checkpoint_step would not fit either.
    from alf_lite import checkpoint as ckpt
    from alf_lite.bin.policy import checkpoint_path, load_policy
    from alf_lite.trainer import TrainerConfig

    root_dir = tmp_path / 'run'
    params = TINY + ['TrainerConfig.num_env_steps=2', 'TrainerConfig.initial_collect_steps=1']
    assert run_train(train_command(root_dir, [PENDULUM], params)).returncode == 0
    path = checkpoint_path(str(root_dir), None)
    parse_config([str(PENDULUM)], TINY)
    config = TrainerConfig()
    parameters = estimate_model_bytes(config.algorithm_ctor, observation_dim=3, action_dim=1)
    monkeypatch.setattr(ckpt, 'available_cpu_memory', lambda: (1000, None))
    with pytest.raises(ModelTooLargeError) as raised:
        load_policy(path, config, 3, 1)
    message = str(raised.value)
    assert f'the networks ({parameters.parameters} bytes) fit in cpu memory' in message
    assert 'model.pt unpacks to' in message and 'more than the 1000 bytes' in message
    assert 'pick another' not in message


@pytest.mark.parametrize(
    'gin_file', sorted(p.name for p in (REPO_ROOT / 'examples').glob('*.gin')), ids=str
)
def test_every_example_has_an_estimate(gin_file):
    # An estimate that fails on the meta device leaves the memory check out silently.
    from alf_lite.trainer import TrainerConfig

    parse_config([str(REPO_ROOT / 'examples' / gin_file)])
    assert estimate_model_bytes(TrainerConfig().algorithm_ctor, **DIMS) is not None


class CheckedNoise(GaussianNoise):
    """A noise of one's own that reads a value: it refuses non-finite actions."""

    def __call__(self, step_type, action):
        if not torch.isfinite(action).all():
            raise FloatingPointError('a non-finite action')
        return super().__call__(step_type, action)


@pytest.mark.parametrize('ctor', [DdpgAlgorithm, Td3Algorithm])
def test_a_noise_that_reads_a_value_leaves_the_estimate(ctor):
    # The noise is tried by the trainer on the run's envs, not by the build, which on the meta
    # device could not read a value.
    build = functools.partial(ctor, exploration_noise=CheckedNoise())
    estimate = estimate_model_bytes(build, **DIMS)
    assert estimate is not None
    assert model_bytes(build(**DIMS)) == estimate


def test_a_class_that_is_no_algorithm_is_refused_before_it_is_called():
    made = []

    class Recorded(GaussianNoise):
        def __init__(self, **kwargs):
            made.append(kwargs)

    with pytest.raises(
        ValueError,
        match='TrainerConfig.algorithm_ctor is the class Recorded, which is no algorithm',
    ):
        model_memory.build_checked(Recorded, torch.device('cpu'), **DIMS)
    assert made == []


def test_a_factory_is_called_and_what_it_builds_checked():
    algorithm, estimate = model_memory.build_checked(
        functools.partial(SacAlgorithm), torch.device('cpu'), **DIMS
    )
    assert isinstance(algorithm, SacAlgorithm) and estimate is not None
    with pytest.raises(
        ValueError,
        match='TrainerConfig.algorithm_ctor built a CriticNetwork, which is no algorithm',
    ):
        model_memory.build_checked(functools.partial(CriticNetwork), torch.device('cpu'), **DIMS)


def test_an_estimate_that_cannot_be_made_logs_why(caplog):
    with caplog.at_level('INFO'):
        assert model_memory.estimate_model_bytes(reads_a_value, **DIMS) is None
    assert any(
        "the networks' memory is not known in advance: RuntimeError: " in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
