"""Networks: batched critic replicas behave as independent MLPs."""

import pytest
import torch

from alf_lite.networks import CriticNetwork, DeterministicActorNetwork, TanhNormalActorNetwork


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
    for batch_norm in (False, True):
        critic = CriticNetwork(
            3, 2, num_replicas=2, hidden_layers=(8, 8), action_input_layer=1, batch_norm=batch_norm
        )
        obs, act = torch.randn(6, 3), torch.randn(6, 2)
        full = critic(obs, act)
        first = critic(obs, act, num_replicas=1)
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
