"""TD3: clipped double-Q target, target policy smoothing, delayed actor and target updates."""

import functools
import math
import os

import pytest
import torch

import alf_lite.all_configurables  # noqa: F401
from alf_lite import checkpoint as ckpt
from alf_lite.algorithms import GaussianNoise, Td3Algorithm
from alf_lite.algorithms.off_policy_algorithm import loss_mask
from alf_lite.config import parse_config
from alf_lite.networks import BatchedLinear, CriticNetwork
from alf_lite.trainer import TrainerConfig
from test_ddpg import (
    EXAMPLES,
    FROZEN,
    GAMMA,
    HAND_BATCH,
    SGD,
    THREE_ROW_A,
    THREE_ROW_BATCH,
    THREE_ROW_S,
    THREE_ROW_Y,
    ConstantActor,
    LinearCritic,
    TanhActor,
    random_batch,
    train_point_task,
)


def hand_td3(**kwargs):
    args = dict(
        observation_dim=1,
        action_dim=1,
        actor_network_ctor=TanhActor,
        critic_network_ctor=LinearCritic,
        gamma=GAMMA,
        actor_optimizer=FROZEN,
        critic_optimizer=FROZEN,
    )
    args.update(kwargs)
    return Td3Algorithm(**args)


def test_smoothing_noise_is_clipped_and_target_actions_stay_in_range():
    # From -0.9 the lower action bound cuts; the last value, 0.9, is counted below.
    for value in (0.0, -0.9, 0.9):
        td3 = hand_td3(
            actor_network_ctor=functools.partial(ConstantActor, value=value),
            target_policy_noise=1.0,
            target_policy_noise_clip=0.5,
        )
        obs = torch.zeros(10000, 1)
        torch.manual_seed(0)
        z = torch.randn(10000, 1)
        torch.manual_seed(0)
        action = td3._target_action(obs)
        assert torch.equal(action, (value + z.clamp(-0.5, 0.5)).clamp(-1.0, 1.0))
        assert action.min() >= value - 0.5 - 1e-6 and action.max() <= min(value + 0.5, 1.0) + 1e-6
    # From 0.9: P(z < -0.5) = 0.31 of the noise is cut at -0.5; P(z > 0.1) = 0.46 of
    # the actions at the upper action bound.
    assert (action < 0.4 + 1e-6).float().mean().item() == pytest.approx(0.31, abs=0.02)
    assert (action == 1.0).float().mean().item() == pytest.approx(0.46, abs=0.02)


def test_critic_target_is_the_minimum_over_replicas_at_the_smoothed_action():
    td3 = hand_td3(
        actor_network_ctor=ConstantActor, target_policy_noise=0.4, target_policy_noise_clip=0.5
    )
    torch.manual_seed(0)
    batch = random_batch(b=64, obs_dim=1, act_dim=1)
    torch.manual_seed(1)
    a_next = (0.4 * torch.randn(64)).clamp(-0.5, 0.5)
    torch.manual_seed(1)
    out = td3.train_step(batch, loss_mask(batch))
    s, a = batch.observation[:, 0, 0], batch.action[:, 0, 0]
    s_next, r, d = batch.observation[:, 1, 0], batch.reward[:, 1], batch.discount[:, 1]
    # Q'_0 = 0.5 + s' + 2 a', Q'_1 = 0.7 + s' + 3 a': the second is smaller when a' < -0.2.
    y = r + GAMMA * d * torch.minimum(0.5 + s_next + 2 * a_next, 0.7 + s_next + 3 * a_next)
    assert (a_next < -0.2).any() and (a_next > -0.2).any()
    loss = ((0.5 + s + 2 * a - y) ** 2 + (0.7 + s + 3 * a - y) ** 2).mean()
    assert out['critic_loss'].item() == pytest.approx(loss.item(), rel=1e-5)


def test_smoothing_noise_is_drawn_independently_per_action_dimension():
    td3 = hand_td3(
        action_dim=2,
        actor_network_ctor=functools.partial(ConstantActor, value=0.1),
        target_policy_noise=0.3,
        target_policy_noise_clip=0.5,
    )
    torch.manual_seed(0)
    z = torch.randn(1000, 2)
    torch.manual_seed(0)
    action = td3._target_action(torch.zeros(1000, 1))
    assert torch.equal(action, (0.1 + (0.3 * z).clamp(-0.5, 0.5)).clamp(-1.0, 1.0))
    # Independent dimensions: the two columns' noise is uncorrelated (|r| < 0.1 here).
    eps = action - 0.1
    assert not torch.equal(eps[:, 0], eps[:, 1])
    assert abs(torch.corrcoef(eps.T)[0, 1].item()) < 0.1


def test_critic_target_uses_the_target_actor_and_target_critics():
    # No smoothing noise, so the target action is mu'(s') exactly.
    td3 = hand_td3(target_policy_noise=0.0)
    with torch.no_grad():  # online networks move away from their targets
        td3._actor.w.fill_(2.0)
        td3._critic.c.copy_(torch.tensor([1.5, 1.7]))
    out = td3.train_step(HAND_BATCH, loss_mask(HAND_BATCH))
    # Targets: w' = 1, c' = (0.5, 0.7), k = (2, 3). Row 0: s' = 1, a' = tanh(1);
    # min(0.5 + 1 + 2 tanh 1, 0.7 + 1 + 3 tanh 1) is the first. Row 1 terminates.
    y = [1.0 + GAMMA * (0.5 + 1.0 + 2.0 * math.tanh(1.0)), 3.0]
    # Online Q_i = c_i + s + k_i * a: row 0 (s 0.5, a 0.2), row 1 (s 1.0, a -0.4).
    q = [(1.5 + 0.5 + 0.4, 1.7 + 0.5 + 0.6), (1.5 + 1.0 - 0.8, 1.7 + 1.0 - 1.2)]
    # Summed over the replicas, averaged over the two unmasked rows.
    expected = sum((qi - yr) ** 2 for qr, yr in zip(q, y) for qi in qr) / 2
    assert out['critic_loss'].item() == pytest.approx(expected, rel=1e-6)
    # q_mean: the mean over both replicas and rows, (2.4 + 2.8 + 1.7 + 1.5) / 4.
    assert out['q_mean'].item() == pytest.approx(2.1, rel=1e-6)


def test_actor_follows_the_online_critic_replica_zero():
    td3 = hand_td3(actor_optimizer=SGD, policy_update_period=1)
    with torch.no_grad():  # the online critics move away from their targets
        td3._critic.c.copy_(torch.tensor([1.5, -1.0]))
        td3._critic.k.copy_(torch.tensor([4.0, 3.0]))
    out = td3.train_step(HAND_BATCH, loss_mask(HAND_BATCH))
    s = torch.tensor([0.5, 1.0])
    # Online Q_0 = 1.5 + s + 4 a, Q_1 = -1 + s + 3 a: at a = tanh(s) replica 1 is
    # the smaller, yet the actor takes replica 0: -Q_0(s, tanh(w s)). The target
    # critics (c' = (0.5, 0.7), k' = (2, 3)) play no part.
    assert out['actor_loss'].item() == pytest.approx(
        -(1.5 + s + 4 * torch.tanh(s)).mean().item(), rel=1e-6
    )
    grad = -(4 * (1 - torch.tanh(s) ** 2) * s).mean().item()
    assert td3._actor.w.item() == pytest.approx(1.0 - 0.1 * grad, rel=1e-6)


def test_the_actor_loss_runs_critic_replica_zero_alone():
    # The actor follows Q_0 only, so its pass through the critics computes replica 0
    # alone (saving replica 1's forward and backward passes): the first critic layer
    # sees 2 replicas for the critic loss, then 1 for the actor loss.
    torch.manual_seed(0)
    td3 = Td3Algorithm(
        observation_dim=3,
        action_dim=2,
        policy_update_period=1,
        critic_network_ctor=functools.partial(CriticNetwork, hidden_layers=(8,)),
    )
    replicas = []
    td3._critic._layers[0].register_forward_hook(lambda m, i, o: replicas.append(o.shape[0]))
    batch = random_batch()
    out = td3.train_step(batch, loss_mask(batch))
    assert replicas == [2, 1]
    assert math.isfinite(out['actor_loss'].item())


def test_the_loss_mask_is_read_window_by_window():
    td3 = hand_td3(target_policy_noise=0.0, policy_update_period=1)
    out = td3.train_step(THREE_ROW_BATCH, loss_mask(THREE_ROW_BATCH))
    # Q_i = c_i + s + k_i * a with c = (0.5, 0.7), k = (2, 3), summed over the
    # replicas; the actor loss is -Q_0(s, tanh(s)), all at the kept rows alone.
    s, a = THREE_ROW_S, THREE_ROW_A
    errors = [(c + s + k * a - THREE_ROW_Y).square() for c, k in ((0.5, 2.0), (0.7, 3.0))]
    assert out['critic_loss'].item() == pytest.approx(sum(errors).mean().item(), rel=1e-6)
    assert out['actor_loss'].item() == pytest.approx(
        -(0.5 + s + 2 * torch.tanh(s)).mean().item(), rel=1e-6
    )


def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_actor_updated_every_second_step_only():
    torch.manual_seed(0)
    td3 = Td3Algorithm(observation_dim=3, action_dim=2)
    batch = random_batch()
    losses = []
    for step in range(1, 5):
        actor, critic = snapshot(td3._actor), snapshot(td3._critic)
        losses.append(td3.train_step(batch, loss_mask(batch))['actor_loss'].item())
        assert not same(critic, snapshot(td3._critic))
        assert same(actor, snapshot(td3._actor)) == (step % 2 == 1)
    # Reported: nothing before the first update, then the last update's loss.
    assert math.isnan(losses[0]) and losses[1] == losses[2] != losses[3]


def test_target_networks_unchanged_between_delayed_updates():
    torch.manual_seed(0)
    td3 = Td3Algorithm(observation_dim=3, action_dim=2, target_update_tau=0.25)
    batch = random_batch()
    for step in range(1, 5):
        old_actor, old_critic = snapshot(td3._target_actor), snapshot(td3._target_critic)
        td3.train_step(batch, loss_mask(batch))
        new_actor, new_critic = snapshot(td3._target_actor), snapshot(td3._target_critic)
        if step % 2 == 1:
            assert same(old_actor, new_actor) and same(old_critic, new_critic)
        else:
            for old, new, online in [
                (old_actor, new_actor, td3._actor.parameters()),
                (old_critic, new_critic, td3._critic.parameters()),
            ]:
                for o, n, p in zip(old, new, online):
                    assert torch.allclose(n, 0.25 * p + 0.75 * o, atol=1e-7)


def test_update_schedule_survives_a_checkpoint():
    torch.manual_seed(0)
    td3 = Td3Algorithm(observation_dim=3, action_dim=2)
    batch = random_batch()
    td3.train_step(batch, loss_mask(batch))
    resumed = Td3Algorithm(observation_dim=3, action_dim=2)
    ckpt.load_algorithm_state(resumed, ckpt.algorithm_state(td3))
    actor = snapshot(resumed._actor)
    resumed.train_step(batch, loss_mask(batch))
    assert not same(actor, snapshot(resumed._actor))


def test_two_critics_are_one_batched_network_and_defaults_are_td3s():
    td3 = Td3Algorithm(observation_dim=3, action_dim=2)
    assert isinstance(td3._critic, CriticNetwork) and td3._critic.num_replicas == 2
    assert all(
        isinstance(layer, BatchedLinear) and layer.weight.shape[0] == 2
        for layer in td3._critic._layers
    )
    assert td3._critic(torch.zeros(5, 3), torch.zeros(5, 2)).shape == (5, 2)
    assert isinstance(td3._exploration_noise, GaussianNoise)
    assert td3._exploration_noise.sigma == 0.1
    assert (td3._tau, td3._policy_update_period, td3._target_update_period) == (0.005, 2, 2)
    assert (td3._target_policy_noise, td3._target_policy_noise_clip) == (0.2, 0.5)
    assert td3._critic_l2_weight_decay == 0.0
    for o in td3.optimizers.values():  # Adam itself, not a subclass such as AdamW
        assert type(o) is torch.optim.Adam
        assert o.defaults['lr'] == 3e-4 and o.defaults['weight_decay'] == 0


def test_default_networks_are_the_reference_256_by_256():
    # Without gin: the reference implementation's 256-256 actor and critics, the
    # action entering each critic with the observation.
    td3 = Td3Algorithm(observation_dim=3, action_dim=2)
    actor = [
        (m.in_features, m.out_features)
        for m in td3._actor.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    assert actor == [(3, 256), (256, 256), (256, 2)]
    critic = [(m.in_features, m.out_features) for m in td3._critic._layers]
    assert critic == [(3 + 2, 256), (256, 256), (256, 1)]


def test_default_exploration_noise_takes_the_gaussian_noise_bindings():
    import gin

    gin.clear_config()
    try:
        gin.bind_parameter('GaussianNoise.sigma', 0.3)
        td3 = Td3Algorithm(observation_dim=3, action_dim=2)
    finally:
        gin.clear_config()
    assert isinstance(td3._exploration_noise, GaussianNoise)
    assert td3._exploration_noise.sigma == 0.3


def test_td3_solves_point_task(tmp_path):
    # Random actions score about -11, the optimal controller about -0.6; with
    # the actor loss's sign flipped (+Q) this run ends at -34 (seeds 0-3 end
    # between -0.66 and -1.05).
    result = train_point_task(tmp_path, 'td3.gin')
    assert result['eval/AverageReturn'] > -2.0


def test_halfcheetah_example_builds_the_reference_td3():
    parse_config([os.path.join(EXAMPLES, 'td3_halfcheetah.gin')], [])
    config = TrainerConfig()
    assert (config.mini_batch_size, config.initial_collect_steps) == (256, 25000)
    td3 = config.algorithm_ctor(observation_dim=17, action_dim=6)
    assert isinstance(td3, Td3Algorithm)
    assert td3._critic._layers[0].weight.shape == (2, 17 + 6, 256)
    batch = random_batch(b=256, obs_dim=17, act_dim=6)
    assert torch.isfinite(td3.train_step(batch, loss_mask(batch))['critic_loss'])


def test_halfcheetah_examples_paper_block_gives_the_papers_settings(tmp_path):
    # The commented block at the end of the file, uncommented, replaces the
    # reference implementation's settings.
    text = open(os.path.join(EXAMPLES, 'td3_halfcheetah.gin')).read()
    head, block = text.split("# The paper's settings instead of the reference implementation's:\n")
    gin_file = tmp_path / 'td3_paper.gin'
    gin_file.write_text(head + ''.join(line[2:] + '\n' for line in block.splitlines()))
    (tmp_path / 'common').symlink_to(os.path.join(EXAMPLES, 'common'))
    parse_config([str(gin_file)], [])
    config = TrainerConfig()
    assert (config.mini_batch_size, config.initial_collect_steps) == (100, 10000)
    td3 = config.algorithm_ctor(observation_dim=17, action_dim=6)
    assert [layer.weight.shape[-1] for layer in td3._critic._layers] == [400, 300, 1]
    assert [o.defaults['lr'] for o in td3.optimizers.values()] == [1e-3, 1e-3]


@pytest.mark.parametrize(
    'kwargs',
    [
        dict(target_policy_noise=-0.1),
        dict(target_policy_noise_clip=-0.5),
        dict(target_policy_noise=float('nan')),
        dict(target_policy_noise_clip=float('nan')),
        dict(target_policy_noise=float('inf')),
        dict(critic_l2_weight_decay=float('nan')),
    ],
)
def test_a_negative_smoothing_noise_or_clip_is_refused(kwargs):
    with pytest.raises(ValueError, match='target_policy_noise|critic_l2_weight_decay'):
        Td3Algorithm(observation_dim=3, action_dim=2, **kwargs)


def test_an_infinite_smoothing_noise_is_refused_and_an_infinite_clip_means_no_clip():
    # An infinite std would put every target action at mu'(s') -c or +c.
    with pytest.raises(ValueError, match='target_policy_noise must be a finite number >= 0'):
        Td3Algorithm(observation_dim=3, action_dim=2, target_policy_noise=float('inf'))
    td3 = Td3Algorithm(
        observation_dim=3,
        action_dim=2,
        actor_network_ctor=ConstantActor,
        target_policy_noise=0.2,
        target_policy_noise_clip=float('inf'),
    )
    torch.manual_seed(0)
    z = torch.randn(500, 2)
    torch.manual_seed(0)
    assert torch.equal(td3._target_action(torch.zeros(500, 3)), (0.2 * z).clamp(-1.0, 1.0))


def test_a_clip_beyond_the_largest_float32_means_no_clip_as_an_infinite_one():
    # The target action's clamp of float32 noise refused 1e300: a RuntimeError traceback
    # ("value cannot be converted to type float without overflow") at the first update.
    td3 = Td3Algorithm(
        observation_dim=3,
        action_dim=2,
        actor_network_ctor=ConstantActor,
        target_policy_noise=0.2,
        target_policy_noise_clip=1e300,
    )
    torch.manual_seed(0)
    z = torch.randn(500, 2)
    torch.manual_seed(0)
    assert torch.equal(td3._target_action(torch.zeros(500, 3)), (0.2 * z).clamp(-1.0, 1.0))
