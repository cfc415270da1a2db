"""bfloat16 compute: products in bfloat16, everything whose precision matters in float32."""

import copy
import functools

import pytest
import torch

from alf_lite import checkpoint as ckpt
from alf_lite import precision
from alf_lite.algorithms import DdpgAlgorithm, SacAlgorithm, Td3Algorithm
from alf_lite.data import Experience, StepType
from alf_lite.networks import CriticNetwork, DeterministicActorNetwork, TanhNormalActorNetwork

OBS, ACT, B = 5, 2, 64


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    step_type = torch.full((B, 2), StepType.MID, dtype=torch.uint8)
    return Experience(
        step_type,
        torch.randn(B, 2, OBS, generator=g),
        torch.rand(B, 2, ACT, generator=g) * 2 - 1,
        torch.randn(B, 2, generator=g),
        torch.ones(B, 2),
    )


def hidden_output_dtypes(network, call):
    """Dtypes of the outputs of every linear layer of ``network`` during ``call()``."""
    dtypes = []
    handles = [
        m.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
        for m in network.modules()
        if isinstance(m, torch.nn.Linear) or type(m).__name__ == 'BatchedLinear'
    ]
    try:
        result = call()
    finally:
        for h in handles:
            h.remove()
    return dtypes, result


@pytest.mark.parametrize('batch_norm', [False, True])
def test_hidden_products_run_in_bfloat16_and_outputs_stay_float32(batch_norm):
    torch.manual_seed(0)
    obs, act = torch.randn(B, OBS), torch.rand(B, ACT) * 2 - 1
    critic = CriticNetwork(
        OBS,
        ACT,
        num_replicas=2,
        hidden_layers=(32, 32),
        action_input_layer=1,
        batch_norm=batch_norm,
    )
    deterministic = DeterministicActorNetwork(
        OBS, ACT, hidden_layers=(32, 32), batch_norm=batch_norm
    )
    tanh_normal = TanhNormalActorNetwork(OBS, ACT, hidden_layers=(32, 32))
    for net in (critic, deterministic, tanh_normal):
        precision.set_network_precision(net, 'bfloat16')
    calls = (
        (critic, lambda: (critic(obs, act),)),
        (deterministic, lambda: (deterministic(obs),)),
        (tanh_normal, lambda: tanh_normal.sample(obs)),
    )
    for net, call in calls:
        dtypes, outputs = hidden_output_dtypes(net, call)
        # Every hidden layer's product in bfloat16, the output layer in float32.
        assert dtypes[:-1] == [torch.bfloat16] * (len(dtypes) - 1) and len(dtypes) == 3
        assert dtypes[-1] == torch.float32
        assert all(o.dtype == torch.float32 for o in outputs)


def make(algorithm_class, optimizer=None):
    """``optimizer``: the ctor of every optimizer of the algorithm; None: its defaults."""
    torch.manual_seed(0)
    actor = TanhNormalActorNetwork if algorithm_class is SacAlgorithm else DeterministicActorNetwork
    optimizers = {}
    if optimizer is not None:
        names = ['actor', 'critic'] + (['alpha'] if algorithm_class is SacAlgorithm else [])
        optimizers = {f'{name}_optimizer': optimizer for name in names}
    return algorithm_class(
        OBS,
        ACT,
        actor_network_ctor=lambda o, a: actor(o, a, hidden_layers=(32, 32)),
        critic_network_ctor=lambda o, a, num_replicas: CriticNetwork(
            o, a, num_replicas=num_replicas, hidden_layers=(32, 32)
        ),
        **optimizers,
    )


@pytest.mark.parametrize('algorithm_class', [SacAlgorithm, Td3Algorithm])
def test_the_precision_of_an_algorithm_reaches_each_of_its_networks_targets_included(
    algorithm_class,
):
    algorithm = make(algorithm_class)
    networks = [m for m in algorithm.modules() if hasattr(m, 'compute_dtype')]
    # The actor, the critic and its target; TD3's target actor too.
    assert len(networks) == (3 if algorithm_class is SacAlgorithm else 4)
    precision.set_network_precision(algorithm, 'bfloat16')
    assert all(m.compute_dtype == torch.bfloat16 for m in networks)
    precision.set_network_precision(algorithm, 'float32')
    assert all(m.compute_dtype is None for m in networks)


@pytest.mark.parametrize('algorithm_class', [SacAlgorithm, DdpgAlgorithm, Td3Algorithm])
def test_weights_targets_optimizer_states_and_losses_stay_float32(algorithm_class):
    algorithm = make(algorithm_class)
    precision.set_network_precision(algorithm, 'bfloat16')
    mask = torch.ones(B, 1)
    for i in range(3):
        scalars = algorithm.train_step(batch(i), mask)
    assert all(v.dtype == torch.float32 for v in scalars.values())
    state = ckpt.algorithm_state(algorithm)
    tensors = list(state['module'].values())
    for opt in state['optimizers'].values():
        for per_param in opt['state'].values():
            tensors += [v for v in per_param.values() if v.is_floating_point()]
    floats = [t for t in tensors if torch.is_tensor(t) and t.is_floating_point()]
    assert floats and all(t.dtype == torch.float32 for t in floats)
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in algorithm.parameters())


@pytest.mark.parametrize('algorithm_class', [SacAlgorithm, Td3Algorithm])
def test_bfloat16_update_is_close_to_the_float32_update(algorithm_class):
    # SGD: each parameter moves by -lr * its gradient (Adam's first step would be
    # +-lr whatever the gradient's size).
    sgd = functools.partial(torch.optim.SGD, lr=0.1)
    full, low = make(algorithm_class, sgd), make(algorithm_class, sgd)
    precision.set_network_precision(low, 'bfloat16')
    start = [p.detach().clone() for p in full.parameters()]
    mask = torch.ones(B, 1)
    # Two train steps: TD3 updates its actor and targets on the second.
    for i in range(2):
        torch.manual_seed(1 + i)
        full_scalars = full.train_step(batch(i), mask)
        torch.manual_seed(1 + i)
        low_scalars = low.train_step(batch(i), mask)
        # bfloat16 keeps 8 bits of mantissa: about 0.4% per product.
        for name in ('critic_loss', 'q_mean'):
            assert low_scalars[name] == pytest.approx(full_scalars[name].item(), rel=0.05, abs=1e-3)
    # Every parameter tensor (targets included) moved, and by the float32 update
    # to within 25% of its norm (bfloat16 rounding moves some by up to about
    # 14%); an update of the opposite sign would be 200% off.
    for (name, f), low_p, s in zip(full.named_parameters(), low.parameters(), start):
        full_delta, low_delta = f - s, low_p - s
        assert full_delta.norm() > 0, name
        assert (low_delta - full_delta).norm() < 0.25 * full_delta.norm(), name


def test_float32_is_unchanged_by_the_precision_switch():
    a, b = make(SacAlgorithm), make(SacAlgorithm)
    precision.set_network_precision(b, 'float32')
    torch.manual_seed(1)
    sa = a.train_step(batch(), torch.ones(B, 1))
    torch.manual_seed(1)
    sb = b.train_step(batch(), torch.ones(B, 1))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_unknown_precision_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="'float32', 'bfloat16'.*got 'float16'"):
        precision.compute_dtype('float16')


@pytest.mark.parametrize('value', [['bfloat16'], {'bfloat16': 1}], ids=['list', 'dict'])
def test_a_precision_that_is_no_string_is_refused_as_an_unknown_one(value):
    # Built from Python, a TrainerConfig's precision may be anything: an unhashable one
    # raised a TypeError (unhashable type) that TrainerConfig passed on unexplained.
    from alf_lite.trainer import TrainerConfig

    with pytest.raises(ValueError, match=r'TrainerConfig\.precision must be one of .*got'):
        TrainerConfig(precision=value)


def test_warns_when_the_cpu_would_emulate_bfloat16(monkeypatch):
    cpu = torch.device('cpu')
    monkeypatch.setattr(precision, '_cpu_flags', lambda: {'avx2', 'fma'})
    assert precision.warn_if_emulated('bfloat16', cpu)
    assert not precision.warn_if_emulated('float32', cpu)
    monkeypatch.setattr(precision, '_cpu_flags', lambda: {'avx2', 'avx512_bf16'})
    assert not precision.warn_if_emulated('bfloat16', cpu)
    assert precision.native_bfloat16(cpu)


def test_native_bfloat16_on_amx_cpus_and_on_ampere_or_newer_gpus(monkeypatch):
    monkeypatch.setattr(precision, '_cpu_flags', lambda: {'avx2', 'amx_bf16'})
    assert precision.native_bfloat16(torch.device('cpu'))
    monkeypatch.setattr(precision, '_cpu_flags', lambda: {'avx2', 'avx512f'})
    assert not precision.native_bfloat16(torch.device('cpu'))
    # CUDA compute capability: 8.0 (A100) is the first with bfloat16 units; 7.5 (T4) has none.
    cuda = torch.device('cuda', 0)
    for major, native in [(7, False), (8, True), (9, True)]:
        monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda d, m=major: (m, 0))
        assert precision.native_bfloat16(cuda) is native


def test_copied_networks_keep_their_precision():
    # Target networks are deep copies of the online ones.
    critic = CriticNetwork(OBS, ACT, hidden_layers=(8,))
    precision.set_network_precision(critic, 'bfloat16')
    assert copy.deepcopy(critic).compute_dtype == torch.bfloat16


def test_batch_norm_networks_run_on_the_meta_device():
    # Their batch statistics are computed outside autocast, which raises on the meta device,
    # where the networks' memory is estimated.
    with torch.device('meta'):
        actor = DeterministicActorNetwork(OBS, ACT, batch_norm=True)
        critic = CriticNetwork(OBS, ACT, num_replicas=2, batch_norm=True)
        observation, action = torch.zeros(B, OBS), torch.zeros(B, ACT)
        assert actor(observation).shape == (B, ACT)
        assert critic(observation, action).shape == (B, 2)
