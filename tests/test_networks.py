"""Networks: batched critic replicas behave as independent MLPs."""

import math

import pytest
import torch

from alf_lite.networks import (
    BatchedLinear,
    CriticNetwork,
    DeterministicActorNetwork,
    TanhNormalActorNetwork,
    mlp,
)


def test_batched_critic_replicas_equal_independent_mlps():
    torch.manual_seed(0)
    critic = CriticNetwork(3, 2, num_replicas=2, hidden_layers=(5, 4))
    obs, act = torch.randn(7, 3), torch.randn(7, 2)
    q = critic(obs, act)
    assert q.shape == (7, 2)
    x = torch.cat([obs, act], -1)
    for r in range(2):
        h = x
        for i, layer in enumerate(critic._layers):
            h = h @ layer.weight[r] + layer.bias[r]
            if i < len(critic._layers) - 1:
                h = torch.relu(h)
        assert torch.allclose(q[:, r], h.squeeze(-1), atol=1e-6)


def test_critic_replicas_start_different_and_learn_independently():
    torch.manual_seed(0)
    critic = CriticNetwork(3, 2, num_replicas=2, hidden_layers=(8,))
    w = critic._layers[0].weight
    assert not torch.equal(w[0], w[1])
    obs, act = torch.randn(4, 3), torch.randn(4, 2)
    critic(obs, act)[:, 0].sum().backward()
    assert w.grad[0].abs().sum() > 0 and w.grad[1].abs().sum() == 0


def test_critic_computes_only_the_requested_replicas():
    torch.manual_seed(0)
    # With action_input_layer 0 batch norm normalises the observation alone.
    for batch_norm, action_input_layer in ((False, 1), (True, 1), (True, 0)):
        critic = CriticNetwork(
            3,
            2,
            num_replicas=2,
            hidden_layers=(8, 8),
            action_input_layer=action_input_layer,
            batch_norm=batch_norm,
        )
        obs, act = torch.randn(6, 3), torch.randn(6, 2)
        full = critic(obs, act)
        # The first layer's output is [R, B, 8]: without batch norm only replica 0
        # runs; with it all replicas do (their statistics are one layer).
        replicas = []
        hook = critic._layers[0].register_forward_hook(
            lambda m, i, o, seen=replicas: seen.append(o.shape[0])
        )
        try:
            first = critic(obs, act, num_replicas=1)
        finally:
            hook.remove()
        assert replicas == [2 if batch_norm else 1]
        assert first.shape == (6, 1)
        assert torch.allclose(first[:, 0], full[:, 0], atol=1e-6)
        critic.zero_grad()
        first.sum().backward()
        w = critic._layers[1].weight
        assert w.grad[0].abs().sum() > 0 and w.grad[1].abs().sum() == 0


def test_tanh_normal_sample_with_given_noise_is_that_draw():
    from alf_lite.networks import TanhNormalActorNetwork

    torch.manual_seed(0)
    actor = TanhNormalActorNetwork(3, 2, hidden_layers=(8,))
    obs = torch.randn(5, 3)
    torch.manual_seed(1)
    drawn = actor.sample(obs)
    torch.manual_seed(1)
    given = actor.sample(obs, torch.randn(5, 2))
    assert torch.equal(drawn[0], given[0]) and torch.equal(drawn[1], given[1])
    zero_noise_action, _ = actor.sample(obs, torch.zeros(5, 2))
    assert torch.allclose(zero_noise_action, actor(obs))


@pytest.mark.parametrize(
    'network', [TanhNormalActorNetwork, DeterministicActorNetwork, CriticNetwork]
)
@pytest.mark.parametrize('hidden_layers', [(0,), (64, -1), (32.5,)])
def test_hidden_layer_widths_that_are_not_positive_integers_are_refused(network, hidden_layers):
    with pytest.raises(ValueError, match='hidden_layers must be positive integer widths'):
        network(3, 2, hidden_layers=hidden_layers)


@pytest.mark.parametrize(
    'bounds',
    [(2.0, -5.0), (-math.inf, 2.0), (-5.0, math.inf), (-5.0, math.nan), (-1e300, 2.0)],
)
def test_log_std_bounds_that_are_no_finite_min_and_max_are_refused(bounds):
    # Reversed, the std would fall as the raw output rises; not finite, every std is NaN.
    # -1e300 is -inf as a float32 (it was refused as a max above 88.72, which 2.0 is not).
    with pytest.raises(ValueError, match='log_std_bounds must be .min, max., finite numbers'):
        TanhNormalActorNetwork(3, 2, hidden_layers=(8,), log_std_bounds=bounds)


@pytest.mark.parametrize('log_std_max', [89.0, 88.722836, 200.0])
def test_log_std_bounds_whose_std_overflows_float32_are_refused(log_std_max):
    # exp(log_std_max) is inf in float32 (88.722836 rounds up to a float32 above log(max)).
    with pytest.raises(ValueError, match='log_std_bounds max must be at most 88.72'):
        TanhNormalActorNetwork(3, 2, hidden_layers=(8,), log_std_bounds=(-5.0, log_std_max))


@pytest.mark.parametrize('bounds', [(-200.0, 88.72283), (-50.0, 88.722835), (-1e5, 88.7228)])
def test_log_std_bounds_whose_largest_log_std_rounds_above_float32s_limit_are_refused(bounds):
    # max alone has a finite exp, but min + (max - min), as the head computes it in float32,
    # rounds to a log-std whose exp is inf.
    with pytest.raises(ValueError, match='log_std_bounds max must be at most 88.72'):
        TanhNormalActorNetwork(3, 2, hidden_layers=(8,), log_std_bounds=bounds)


@pytest.mark.parametrize('bounds', [(-20.0, 2.0), (-200.0, 88.7228)])
def test_log_std_bounds_whose_std_is_a_finite_float32_are_kept(bounds):
    actor = TanhNormalActorNetwork(3, 2, hidden_layers=(8,), log_std_bounds=bounds)
    with torch.no_grad():
        actor._head.bias.fill_(100.0)  # tanh(raw) = 1: log_std = max
    _, log_std = actor._mean_and_log_std(torch.zeros(5, 3))
    assert torch.isfinite(log_std.exp()).all() and torch.allclose(
        log_std, torch.full_like(log_std, bounds[1])
    )


def test_equal_log_std_bounds_give_a_fixed_std():
    actor = TanhNormalActorNetwork(3, 2, hidden_layers=(8,), log_std_bounds=(-1.0, -1.0))
    _, log_std = actor._mean_and_log_std(torch.randn(5, 3))
    assert torch.equal(log_std, torch.full((5, 2), -1.0))


def test_mlp_is_linear_then_relu_for_every_hidden_layer():
    torch.manual_seed(0)
    net = mlp(3, (4, 5))
    first, second = net[0], net[2]
    x = torch.randn(6, 3)
    h = torch.clamp(x @ first.weight.T + first.bias, min=0.0)
    expected = torch.clamp(h @ second.weight.T + second.bias, min=0.0)
    assert torch.allclose(net(x), expected, atol=1e-6)
    # The ReLU is really there: some outputs are exactly 0, none negative.
    y = net(torch.randn(64, 3))
    assert (y == 0).any() and (y >= 0).all()


def batch_norm_reference(x, weight, bias, eps=1e-5):
    """Training-mode batch norm over dim 0 by hand: the batch's biased variance."""
    mean = x.mean(0)
    var = ((x - mean) ** 2).mean(0)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def randomise_batch_norms(module):
    """Scales and shifts away from (1, 0), so that a misplaced norm changes the output."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.weight.uniform_(0.5, 2.0)
                m.bias.uniform_(-1.0, 1.0)


def test_actor_batch_norm_normalises_the_input_and_each_pre_activation():
    torch.manual_seed(0)
    actor = DeterministicActorNetwork(3, 2, hidden_layers=(5, 4), batch_norm=True)
    randomise_batch_norms(actor)
    obs = torch.randn(16, 3) * 3 + 1
    norm = actor._input_norm
    x = batch_norm_reference(obs, norm.weight, norm.bias)
    for layer, norm in zip(actor._hidden, actor._hidden_norms):
        # Linear, then batch norm, then ReLU.
        x = torch.clamp(
            batch_norm_reference(x @ layer.weight.T + layer.bias, norm.weight, norm.bias), min=0.0
        )
    expected = torch.tanh(x @ actor._head.weight.T + actor._head.bias)
    assert torch.allclose(actor(obs), expected, atol=1e-5)


def test_critic_batch_norm_normalises_each_replicas_state_path_before_its_relu():
    torch.manual_seed(0)
    critic = CriticNetwork(
        3, 2, num_replicas=2, hidden_layers=(5, 4), action_input_layer=1, batch_norm=True
    )
    randomise_batch_norms(critic)
    obs, act = torch.randn(16, 3) * 3 + 1, torch.rand(16, 2) * 2 - 1
    q = critic(obs, act)
    in_norm, hidden_norm = critic._input_norm, critic._hidden_norms[0]
    w = [layer.weight for layer in critic._layers]
    b = [layer.bias for layer in critic._layers]
    for r in range(2):
        # Replica r's features are channels r * F ... r * F + F - 1 of its norm.
        x = batch_norm_reference(
            obs, in_norm.weight[3 * r : 3 * r + 3], in_norm.bias[3 * r : 3 * r + 3]
        )
        h = batch_norm_reference(
            x @ w[0][r] + b[0][r],
            hidden_norm.weight[5 * r : 5 * r + 5],
            hidden_norm.bias[5 * r : 5 * r + 5],
        )
        h = torch.clamp(h, min=0.0)
        # The action joins after the normalised state path; it is never normalised.
        h = torch.clamp(torch.cat([h, act], -1) @ w[1][r] + b[1][r], min=0.0)
        expected = (h @ w[2][r] + b[2][r]).squeeze(-1)
        assert torch.allclose(q[:, r], expected, atol=1e-5)


def assert_spans(p, bound, fraction):
    """Every entry of ``p`` within +-bound, and entries beyond +-fraction * bound on both sides."""
    assert p.abs().max().item() <= bound
    assert p.max().item() > fraction * bound and p.min().item() < -fraction * bound


def test_batched_linear_default_init_is_uniform_in_one_over_sqrt_fan_in():
    torch.manual_seed(0)
    # fan_in 400, fan_out 300: the bound is 1 / sqrt(400) = 0.05, whatever the output width.
    layer = BatchedLinear(400, 300, num_replicas=2)
    assert_spans(layer.weight, 0.05, 0.99)
    # 600 biases: each beyond +-0.9 * bound with probability 0.1, so some are.
    assert_spans(layer.bias, 0.05, 0.9)
    # Uniform: the std is bound / sqrt(3) = 0.02887.
    assert layer.weight.std().item() == pytest.approx(0.05 / math.sqrt(3), rel=0.01)


def test_paper_init_spans_both_signs_of_every_interval():
    torch.manual_seed(0)
    actor = DeterministicActorNetwork(17, 6, hidden_layers=(400, 300), paper_init=True)
    critic = CriticNetwork(
        17, 6, num_replicas=2, hidden_layers=(400, 300), action_input_layer=1, paper_init=True
    )
    # Hidden layers: weights and biases uniform in +-1/sqrt(fan_in), centred on 0.
    for layer, fan_in in [
        (actor._hidden[0], 17),
        (actor._hidden[1], 400),
        (critic._layers[0], 17),
        (critic._layers[1], 400 + 6),
    ]:
        assert_spans(layer.weight, 1 / math.sqrt(fan_in), 0.99)
        assert_spans(layer.bias, 1 / math.sqrt(fan_in), 0.9)
    # Final layers: weights uniform in +-3e-3 (1800 and 600 of them), mean about 0.
    for layer in (actor._head, critic._layers[2]):
        assert_spans(layer.weight, 3e-3, 0.99)
        assert abs(layer.weight.mean().item()) < 3e-4
        assert layer.bias.abs().max().item() <= 3e-3
