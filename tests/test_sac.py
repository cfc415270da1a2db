"""SAC's losses against hand computations on tiny batches."""

import functools
import math
import os

import pytest
import torch
import torch.nn as nn

import alf_lite.all_configurables  # noqa: F401
from alf_lite.algorithms import SacAlgorithm
from alf_lite.algorithms.off_policy_algorithm import loss_mask, td_target
from alf_lite.config import parse_config
from alf_lite.data import Experience, StepType, TimeStep
from alf_lite.networks import CriticNetwork
from alf_lite.trainer import TrainerConfig

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'examples')
F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
GAMMA = 0.9


class FixedActor(nn.Module):
    """Always samples action 0 with log-probability -1 (so alpha * log pi = -alpha)."""

    def __init__(self, observation_dim, action_dim):
        super().__init__()
        self.action_dim = action_dim
        self.bias = nn.Parameter(torch.zeros(action_dim))

    def forward(self, observation):
        return torch.zeros(observation.shape[0], self.action_dim) + 0 * self.bias

    def sample(self, observation, noise=None):
        action = self.forward(observation)
        return action, torch.full((observation.shape[0],), -1.0) + 0 * self.bias.sum()


class SumCritic(nn.Module):
    """``Q_i(s, a) = c_i + sum(s)`` with ``c = (1, 2)``: easy to compute by hand."""

    def __init__(self, observation_dim, action_dim, num_replicas):
        super().__init__()
        self.c = nn.Parameter(torch.tensor([1.0, 2.0])[:num_replicas])

    def forward(self, observation, action):
        return self.c + observation.sum(-1, keepdim=True) + 0 * action.sum(-1, keepdim=True)


class StateActor(nn.Module):
    """Samples the action ``a`` (a parameter, 0.5 at first) with log-probability ``-sum(s)``."""

    def __init__(self, observation_dim, action_dim):
        super().__init__()
        self.a = nn.Parameter(torch.full((action_dim,), 0.5))

    def forward(self, observation):
        return self.a.expand(observation.shape[0], -1)

    def sample(self, observation, noise=None):
        return self.forward(observation), -observation.sum(-1) + 0 * self.a.sum()


class LogProbActor(FixedActor):
    """Always samples action 0, with log-probability ``b``: a parameter, 0 at first."""

    def sample(self, observation, noise=None):
        return self.forward(observation), self.bias.sum().expand(observation.shape[0])


class ActionCritic(SumCritic):
    """``Q_i(s, a) = c_i + sum(s) + w_i * sum(a)`` with ``c = (1, 2)`` and fixed ``w = (1, 3)``."""

    def __init__(self, observation_dim, action_dim, num_replicas):
        super().__init__(observation_dim, action_dim, num_replicas)
        self.register_buffer('w', torch.tensor([1.0, 3.0])[:num_replicas])

    def forward(self, observation, action):
        return self.c + observation.sum(-1, keepdim=True) + self.w * action.sum(-1, keepdim=True)


def make_sac(**kwargs):
    args = dict(
        observation_dim=1,
        action_dim=1,
        actor_network_ctor=FixedActor,
        critic_network_ctor=SumCritic,
        gamma=GAMMA,
    )
    args.update(kwargs)
    return SacAlgorithm(**args)


def windows(rows, action_dim=1):
    """``[B, 2]`` windows from ``[(step_type, obs, reward, discount), ...]`` pairs."""
    st = torch.tensor([[r[0] for r in w] for w in rows], dtype=torch.uint8)
    obs = torch.tensor([[[r[1]] for r in w] for w in rows])
    reward = torch.tensor([[r[2] for r in w] for w in rows])
    discount = torch.tensor([[r[3] for r in w] for w in rows])
    return Experience(st, obs, torch.zeros(*st.shape, action_dim), reward, discount)


def test_td_target_matches_hand_computation():
    # 1 + 0.9 * 1 * 10 = 10; 2 + 0.9 * 0 * 10 = 2 (terminated); 3 + 0.9 * 1 * 10 = 12.
    target = td_target(
        torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 0.0, 1.0]), GAMMA, torch.full((3,), 10.0)
    )
    assert torch.allclose(target, torch.tensor([10.0, 2.0, 12.0]))


def test_critic_loss_on_hand_computed_three_step_batch():
    # Three windows: a MID step, a terminated LAST (discount 0), a truncated LAST (discount 1).
    batch = windows(
        [
            [(F, 0.5, 0.0, 1.0), (M, 1.0, 1.0, 1.0)],
            [(M, 1.0, 1.0, 1.0), (L, 2.0, 3.0, 0.0)],
            [(M, 2.0, 0.5, 1.0), (L, 4.0, -1.0, 1.0)],
        ]
    )
    sac = make_sac()
    out = sac.train_step(batch, loss_mask(batch))
    # alpha = 1; V(s') = min_i(c_i + s') - alpha * log pi = 1 + s' + 1 = 2 + s'.
    # y = r + 0.9 * d * (2 + s'):   y0 = 1 + 0.9 * 3 = 3.7;  y1 = 3 (no bootstrap);
    # y2 = -1 + 0.9 * 6 = 4.4.   Q_i(s) = c_i + s.
    ys, ss = [3.7, 3.0, 4.4], [0.5, 1.0, 2.0]
    expected = sum(0.5 * ((1 + s - y) ** 2 + (2 + s - y) ** 2) for s, y in zip(ss, ys)) / 3
    assert out['critic_loss'].item() == pytest.approx(expected, rel=1e-6)


def test_every_loss_on_a_hand_computed_batch_at_alpha_two():
    # alpha = 2 (initial_log_alpha = log 2) and a 2-d action: the default target
    # entropy is -2. The online critics are c = (12, 11) and the target critics
    # c' = (2, 1): a target computed from the online critics would show, and the
    # minimum is replica 1 in both, so taking replica 0 instead would show too.
    batch = windows([[(F, 0.5, 0.0, 1.0), (M, 1.0, 1.0, 1.0)]], action_dim=2)
    sac = make_sac(
        action_dim=2,
        initial_log_alpha=math.log(2.0),
        alpha_optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
    )
    with torch.no_grad():
        sac._critic.c.copy_(torch.tensor([12.0, 11.0]))
        sac._target_critic.c.copy_(torch.tensor([2.0, 1.0]))
    out = sac.train_step(batch, loss_mask(batch))
    assert out['alpha'].item() == pytest.approx(2.0)
    # y = r + 0.9 * (min_i c'_i + s' - alpha * log pi) = 1 + 0.9 * (1 + 1 + 2) = 4.6;
    # Q = (12.5, 11.5).
    expected_critic = 0.5 * ((12.5 - 4.6) ** 2 + (11.5 - 4.6) ** 2)
    assert out['critic_loss'].item() == pytest.approx(expected_critic, rel=1e-6)
    # Actor: alpha * log pi - min_i Q_i(s, a), with the critics the critic step left
    # (about (12, 11): the minimum is replica 1).
    assert (sac._critic.c != torch.tensor([12.0, 11.0])).all()  # the critic step came first
    q_pi = sac._critic.c[1].item() + 0.5
    assert out['actor_loss'].item() == pytest.approx(2.0 * -1.0 - q_pi, rel=1e-6)
    # Alpha: -log(alpha) * (log pi + target entropy) = -log 2 * (-1 - 2) = 3 log 2.
    assert out['alpha_loss'].item() == pytest.approx(3.0 * math.log(2.0), rel=1e-6)
    assert out['entropy'].item() == pytest.approx(1.0)
    # d(alpha loss)/d(log alpha) = -(log pi + target entropy) = 3: one SGD step at
    # lr 0.1 moves log(alpha) from log 2 to log 2 - 0.3.
    assert sac._log_alpha.item() == pytest.approx(math.log(2.0) - 0.3, rel=1e-6)


def test_default_target_entropy_is_minus_the_action_dimension():
    assert SacAlgorithm(observation_dim=3, action_dim=4)._target_entropy == -4.0
    assert (
        SacAlgorithm(observation_dim=3, action_dim=4, target_entropy=-1.5)._target_entropy == -1.5
    )


def test_truncated_episode_still_bootstraps():
    truncated = windows([[(M, 1.0, 0.0, 1.0), (L, 2.0, 1.0, 1.0)]])
    terminated = windows([[(M, 1.0, 0.0, 1.0), (L, 2.0, 1.0, 0.0)]])
    loss_trunc = make_sac().train_step(truncated, loss_mask(truncated))['critic_loss'].item()
    loss_term = make_sac().train_step(terminated, loss_mask(terminated))['critic_loss'].item()
    # Truncated: y = 1 + 0.9 * (2 + 2) = 4.6; terminated: y = 1.  Q = (2, 3).
    assert loss_trunc == pytest.approx(0.5 * ((2 - 4.6) ** 2 + (3 - 4.6) ** 2), rel=1e-6)
    assert loss_term == pytest.approx(0.5 * ((2 - 1) ** 2 + (3 - 1) ** 2), rel=1e-6)


def test_last_to_first_window_gives_zero_loss():
    # The next episode's FIRST carries a huge reward: training on it would show.
    batch = windows([[(L, 1.0, 0.0, 0.0), (F, -3.0, 1000.0, 1.0)]])
    sac = make_sac()
    before = [p.clone() for p in sac.parameters()]
    out = sac.train_step(batch, loss_mask(batch))
    for name in ('critic_loss', 'actor_loss', 'alpha_loss'):
        assert out[name].item() == 0.0
    for b, p in zip(before, sac.parameters()):
        assert torch.equal(b, p)


def test_last_to_first_window_is_trained_on_when_masking_is_off():
    batch = windows([[(L, 1.0, 0.0, 0.0), (F, -3.0, 1000.0, 1.0)]])
    out = make_sac().train_step(batch, loss_mask(batch, mask_out_loss_for_last_step=False))
    assert out['critic_loss'].item() > 1e5


def test_mask_removes_only_the_last_to_first_window():
    good = [[(M, 1.0, 0.0, 1.0), (M, 2.0, 1.0, 1.0)]]
    bad = [[(L, 1.0, 0.0, 0.0), (F, -3.0, 1000.0, 1.0)]]
    both, alone = windows(good + bad), windows(good)
    torch.manual_seed(0)
    loss_both = SacAlgorithm(observation_dim=1, action_dim=1, gamma=GAMMA).train_step(
        both, loss_mask(both)
    )
    torch.manual_seed(0)
    loss_alone = SacAlgorithm(observation_dim=1, action_dim=1, gamma=GAMMA).train_step(
        alone, loss_mask(alone)
    )
    assert loss_both['critic_loss'].item() == pytest.approx(
        loss_alone['critic_loss'].item(), rel=1e-5
    )


def test_the_loss_mask_is_read_window_by_window():
    # Two 3-row windows, transitions in window order: the first window's second
    # transition crosses an episode boundary (L -> F, a huge reward), the second
    # window has none. The mask [[1, 0], [1, 1]] drops that transition and no other.
    batch = windows(
        [
            [(M, 0.5, 0.0, 1.0), (L, 1.0, 2.0, 0.0), (F, -3.0, 1000.0, 1.0)],
            [(M, 1.0, 0.0, 1.0), (M, 2.0, 1.0, 1.0), (M, 3.0, -1.0, 1.0)],
        ]
    )
    mask = loss_mask(batch)
    assert mask.tolist() == [[1.0, 0.0], [1.0, 1.0]]
    out = make_sac().train_step(batch, mask)
    # y = r + 0.9 * d * (2 + s') as in the three-step batch: 2 (terminated),
    # 1 + 0.9 * 4 = 4.6 and -1 + 0.9 * 5 = 3.5; Q_i(s) = c_i + s.
    ys, ss = [2.0, 4.6, 3.5], [0.5, 1.0, 2.0]
    expected = sum(0.5 * ((1 + s - y) ** 2 + (2 + s - y) ** 2) for s, y in zip(ss, ys)) / 3
    assert out['critic_loss'].item() == pytest.approx(expected, rel=1e-6)


def test_the_actor_gradient_flows_through_the_sampled_action_into_the_smaller_critic():
    # The buffer's action is 0, the policy's -1: the actor loss must take the
    # critics' Q of the policy's action, and its gradient flows through it.
    # min_i Q_i(s, a) is replica 1 there (1 + s - 1 against 2 + s - 3), dQ_1/da = 3;
    # log pi = -s has no gradient, so with SGD at lr 1 the action rises by 3.
    batch = windows([[(F, 0.5, 0.0, 1.0), (M, 1.0, 1.0, 1.0)]])
    sac = make_sac(
        actor_network_ctor=StateActor,
        critic_network_ctor=ActionCritic,
        actor_optimizer=lambda params: torch.optim.SGD(params, lr=1.0),
    )
    with torch.no_grad():
        sac._actor.a.fill_(-1.0)
    out = sac.train_step(batch, loss_mask(batch))
    # alpha * log pi - Q_1(s, a) = -0.5 - (c_1 + 0.5 - 3), with c_1 after the critic step.
    c1 = sac._critic.c[1].item()
    assert out['actor_loss'].item() == pytest.approx(-0.5 - (c1 - 2.5), abs=1e-6)
    assert sac._actor.a.item() == pytest.approx(2.0)


@pytest.mark.parametrize('resample', [False, True])
def test_the_actor_loss_descends_the_entropy_term_through_the_log_probability(resample):
    # alpha * log pi - min_i Q_i with log pi = b and critics that ignore the action:
    # d(actor loss)/db = alpha = 2, so one SGD step at lr 1 moves b from 0 to -2.
    batch = windows([[(F, 0.5, 0.0, 1.0), (M, 1.0, 1.0, 1.0)]])
    sac = make_sac(
        actor_network_ctor=LogProbActor,
        initial_log_alpha=math.log(2.0),
        resample_action_per_loss=resample,
        actor_optimizer=lambda params: torch.optim.SGD(params, lr=1.0),
    )
    sac.train_step(batch, loss_mask(batch))
    assert sac._actor.bias.item() == pytest.approx(-2.0)


def test_summaries_cover_only_the_transitions_trained_on():
    # A kept window at s = 1 and a LAST -> FIRST window at s = 5: log pi = -s, so
    # the entropy is 1 (5 if the masked one counted, 3 for both); Q is the mean of
    # the replicas, c_i + s with c = (1, 2) before the critic step: 2.5 (2 for the
    # minimum, 4.5 for both windows).
    good = [(M, 1.0, 0.0, 1.0), (M, 2.0, 1.0, 1.0)]
    bad = [(L, 5.0, 0.0, 0.0), (F, -3.0, 1000.0, 1.0)]
    batch = windows([good, bad])
    out = make_sac(actor_network_ctor=StateActor).train_step(batch, loss_mask(batch))
    assert out['entropy'].item() == pytest.approx(1.0)
    assert out['q_mean'].item() == pytest.approx(2.5)
    assert out['alpha'].item() == 1.0
    # Scalars for the summaries: no graph kept alive through them.
    for name, value in out.items():
        assert value.dim() == 0 and not value.requires_grad, name


def test_defaults_are_the_papers_hyperparameters():
    # The paper's hyperparameters: Adam at lr 3e-4 for every loss, gamma 0.99,
    # tau 0.005, a target update every step, two critics; alpha starts at 1.
    sac = SacAlgorithm(observation_dim=3, action_dim=2)
    assert sac.gamma == 0.99 and sac._tau == 0.005 and sac._target_update_period == 1
    assert sac._critic(torch.zeros(1, 3), torch.zeros(1, 2)).shape == (1, 2)
    assert sac._log_alpha.item() == 0.0
    for name in ('actor', 'critic', 'alpha'):
        optimizer = sac.optimizers[name]
        assert type(optimizer) is torch.optim.Adam  # not a subclass such as AdamW
        assert optimizer.defaults['weight_decay'] == 0
        assert [group['lr'] for group in optimizer.param_groups] == [3e-4]


@pytest.mark.parametrize(
    'example, dims', [('sac_halfcheetah.gin', (17, 6)), ('sac_humanoid.gin', (348, 17))]
)
def test_mujoco_examples_build_the_papers_sac(example, dims):
    # Haarnoja et al. 2018 (v2), table 1, as the examples' comments claim.
    parse_config([os.path.join(EXAMPLES, example)], [])
    config = TrainerConfig()
    assert (config.mini_batch_size, config.replay_buffer_length) == (256, 1_000_000)
    assert config.initial_collect_steps == 10000
    sac = config.algorithm_ctor(observation_dim=dims[0], action_dim=dims[1])
    assert (sac._gamma, sac._tau, sac._target_update_period) == (0.99, 0.005, 1)
    assert sac._target_entropy == -dims[1] and sac._log_alpha.item() == 0.0
    assert sac._critic.num_replicas == 2
    assert [layer.weight.shape[-1] for layer in sac._critic._layers] == [256, 256, 1]
    assert sac._critic._layers[0].weight.shape[1] == sum(dims)
    for optimizer in sac.optimizers.values():
        assert type(optimizer) is torch.optim.Adam
        assert (optimizer.defaults['lr'], optimizer.defaults['weight_decay']) == (3e-4, 0)
    pairs = zip(sac._target_critic.state_dict().values(), sac._critic.state_dict().values())
    assert all(torch.equal(t, o) for t, o in pairs)


def test_default_networks_are_the_papers_256_by_256():
    # Without gin the networks are the paper's: two hidden layers of 256 units for
    # the actor (then a head of mean and log-std per action dim) and each critic.
    sac = SacAlgorithm(observation_dim=3, action_dim=2)
    actor_linears = [m for m in sac._actor.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in actor_linears] == [
        (3, 256),
        (256, 256),
        (256, 4),
    ]
    critic = [(m.in_features, m.out_features) for m in sac._critic._layers]
    assert critic == [(3 + 2, 256), (256, 256), (256, 1)]


def test_the_train_step_cycle_is_the_target_update_period():
    # A captured update is replayed per phase of this cycle: the target update
    # happens at one phase in three here.
    assert (
        SacAlgorithm(observation_dim=3, action_dim=2, target_update_period=3).train_step_cycle == 3
    )


def test_rollout_actions_are_policy_samples_without_gradient():
    torch.manual_seed(0)
    sac = SacAlgorithm(observation_dim=3, action_dim=2)
    observation = torch.randn(4, 3)
    time_step = TimeStep(
        torch.full((4,), M, dtype=torch.uint8),
        observation,
        torch.zeros(4),
        torch.ones(4),
        torch.arange(4),
    )
    torch.manual_seed(1)
    action = sac.rollout_step(time_step)
    torch.manual_seed(1)
    expected, _ = sac._actor.sample(observation)
    assert torch.equal(action, expected) and not action.requires_grad
    # Exploration: not the deterministic action evaluation takes.
    assert not torch.allclose(action, sac.predict_step(observation))


def test_the_evaluation_action_is_the_policys_mode_and_draws_no_random_numbers():
    torch.manual_seed(0)
    sac = SacAlgorithm(observation_dim=3, action_dim=2)
    observation = torch.randn(4, 3)
    generator_state = torch.get_rng_state()
    action = sac.predict_step(observation)
    assert torch.equal(torch.get_rng_state(), generator_state)
    # tanh of the mean: the sample of a zero draw.
    assert torch.allclose(action, sac._actor.sample(observation, torch.zeros(4, 2))[0])


def random_batch(b=8, obs_dim=3, act_dim=2, length=2):
    return Experience(
        torch.full((b, length), M, dtype=torch.uint8),
        torch.randn(b, length, obs_dim),
        torch.rand(b, length, act_dim) * 2 - 1,
        torch.randn(b, length),
        torch.ones(b, length),
    )


def test_target_starts_as_copy_and_follows_polyak_exactly():
    torch.manual_seed(0)
    sac = SacAlgorithm(observation_dim=3, action_dim=2, target_update_tau=0.25)
    for t, o in zip(sac._target_critic.parameters(), sac._critic.parameters()):
        assert torch.equal(t, o) and t.data_ptr() != o.data_ptr()
    old_target = [p.clone() for p in sac._target_critic.parameters()]
    batch = random_batch()
    sac.train_step(batch, loss_mask(batch))
    for old, t, o in zip(old_target, sac._target_critic.parameters(), sac._critic.parameters()):
        assert not torch.equal(o, old)
        assert torch.allclose(t, 0.25 * o + 0.75 * old, atol=1e-7)


def test_a_batch_norm_target_critic_scores_each_row_alone():
    # The target critic runs in eval mode whatever the algorithm's mode: its
    # batch norms use running statistics, not those of the batch.
    torch.manual_seed(0)
    critic = functools.partial(CriticNetwork, hidden_layers=(16, 8), batch_norm=True)
    sac = SacAlgorithm(observation_dim=3, action_dim=2, critic_network_ctor=critic)
    batch = random_batch()
    sac.train(True)
    sac.train_step(batch, loss_mask(batch))
    assert sac._critic.training and not sac._target_critic.training
    observation, action = torch.randn(6, 3), torch.rand(6, 2) * 2 - 1
    with torch.no_grad():
        alone = sac._target_critic(observation[:3], action[:3])
        in_batch = sac._target_critic(observation, action)[:3]
    torch.testing.assert_close(alone, in_batch, rtol=0, atol=1e-6)  # batch statistics: ~0.1 off


def test_target_update_period_skips_updates():
    torch.manual_seed(0)
    sac = SacAlgorithm(observation_dim=3, action_dim=2, target_update_period=2)
    initial = [p.clone() for p in sac._target_critic.parameters()]
    batch = random_batch()
    sac.train_step(batch, loss_mask(batch))
    assert all(torch.equal(a, b) for a, b in zip(initial, sac._target_critic.parameters()))
    sac.train_step(batch, loss_mask(batch))
    assert not all(torch.equal(a, b) for a, b in zip(initial, sac._target_critic.parameters()))


@pytest.mark.parametrize('length', [2, 3])
def test_actor_loss_leaves_critic_gradients_alone(length):
    import copy

    torch.manual_seed(0)
    sac = SacAlgorithm(observation_dim=3, action_dim=2, gamma=GAMMA)
    reference = copy.deepcopy(sac)
    batch = random_batch(length=length)
    torch.manual_seed(1)
    sac.train_step(batch, loss_mask(batch))
    # The critic gradient of the critic loss alone, computed from the same samples:
    # one per row, the one at row t + 1 also serving the target of transition t.
    torch.manual_seed(1)
    action, log_prob = reference._actor.sample(batch.observation.reshape(8 * length, 3))
    next_a = action.reshape(8, length, 2)[:, 1:].reshape(-1, 2)
    next_lp = log_prob.reshape(8, length)[:, 1:].reshape(-1)
    with torch.no_grad():
        next_obs = batch.observation[:, 1:].reshape(-1, 3)
        next_q = reference._target_critic(next_obs, next_a).min(-1).values
        y = batch.reward[:, 1:].reshape(-1) + GAMMA * batch.discount[:, 1:].reshape(-1) * (
            next_q - next_lp
        )
    q = reference._critic(
        batch.observation[:, :-1].reshape(-1, 3), batch.action[:, :-1].reshape(-1, 2)
    )
    (0.5 * (q - y.unsqueeze(-1)).square().sum(-1)).mean().backward()
    for p, r in zip(sac._critic.parameters(), reference._critic.parameters()):
        assert torch.allclose(p.grad, r.grad, atol=1e-6)


@pytest.mark.parametrize('resample', [False, True])
def test_resample_action_per_loss_draws_fresh_samples(resample):
    torch.manual_seed(0)
    sac = SacAlgorithm(observation_dim=3, action_dim=2, resample_action_per_loss=resample)
    calls = []
    sample = sac._actor.sample
    sac._actor.sample = lambda obs, noise=None: (
        calls.append((obs.shape[0], torch.is_grad_enabled())) or sample(obs, noise)
    )
    batch = random_batch(b=8)
    sac.train_step(batch, loss_mask(batch))
    # False: one sample per row: the 8 first rows with a graph (actor loss), the
    # 8 next rows without (target only). True: three passes of 8 (actor, target, alpha).
    assert calls == ([(8, True), (8, False), (8, False)] if resample else [(8, True), (8, False)])


@pytest.mark.parametrize('resample', [False, True])
def test_each_sample_is_drawn_at_its_own_states_and_the_alpha_loss_uses_its_own(resample):
    torch.manual_seed(0)
    sac = SacAlgorithm(
        observation_dim=3, action_dim=2, initial_log_alpha=0.5, resample_action_per_loss=resample
    )
    calls = []
    sample = sac._actor.sample

    def recorded_sample(obs, noise=None):
        action, log_prob = sample(obs, noise)
        calls.append((obs.clone(), log_prob.detach().clone()))
        return action, log_prob

    sac._actor.sample = recorded_sample
    batch = random_batch(b=8)
    out = sac.train_step(batch, loss_mask(batch))
    states, next_states = batch.observation[:, 0], batch.observation[:, 1]
    assert torch.equal(calls[0][0], states) and torch.equal(calls[1][0], next_states)
    # The alpha loss: -log(alpha) * (log pi + target entropy), log(alpha) = 0.5, entropy -2.
    alpha_log_prob = calls[2][1] if resample else calls[0][1]
    expected = (-0.5 * (alpha_log_prob + -2.0)).mean()
    assert out['alpha_loss'].item() == pytest.approx(expected.item(), rel=1e-6)
    if resample:  # a fresh draw at the same states
        assert torch.equal(calls[2][0], states)
        assert not torch.allclose(calls[2][1], calls[0][1])


def test_the_deterministic_action_is_tanh_of_the_mean():
    from alf_lite.networks import TanhNormalActorNetwork

    torch.manual_seed(0)
    actor = TanhNormalActorNetwork(3, 2, hidden_layers=(8,))
    obs = torch.randn(5, 3)
    mean, _ = actor._mean_and_log_std(obs)
    assert torch.equal(actor(obs), torch.tanh(mean))
    assert torch.equal(actor(obs), actor(obs))
    assert torch.allclose(actor.sample(obs, torch.zeros(5, 2))[0], actor(obs))


def test_log_std_maps_the_heads_output_into_its_bounds():
    from alf_lite.networks import TanhNormalActorNetwork

    actor = TanhNormalActorNetwork(3, 2, hidden_layers=(8,), log_std_bounds=(-5.0, 2.0))
    obs = torch.randn(4, 3)
    with torch.no_grad():
        actor._head.weight.zero_()
        for raw, expected in ((0.0, -1.5), (100.0, 2.0), (-100.0, -5.0)):
            actor._head.bias[2:] = raw  # the log-std half of the head
            _, log_std = actor._mean_and_log_std(obs)
            assert torch.allclose(log_std, torch.full((4, 2), expected))


@pytest.mark.parametrize('action_dim', [1, 3])
def test_tanh_normal_log_prob_matches_change_of_variables(action_dim):
    from alf_lite.networks import TanhNormalActorNetwork

    torch.manual_seed(0)
    actor = TanhNormalActorNetwork(2, action_dim, hidden_layers=(8,))
    obs = torch.randn(4000, 2)
    obs[:] = obs[0]
    action, log_prob = actor.sample(obs)
    mean, log_std = actor._mean_and_log_std(obs[:1])
    u = torch.atanh(action.clamp(-0.999999, 0.999999))
    normal = torch.distributions.Normal(mean, log_std.exp())
    expected = normal.log_prob(u).sum(-1) - torch.log(1 - action.square()).sum(-1)
    ok = action.abs().amax(-1) < 0.999
    assert torch.allclose(log_prob[ok], expected[ok], atol=1e-3)
    assert math.isfinite(log_prob.sum().item())


def test_tanh_normal_log_prob_stays_exact_where_tanh_saturates():
    from alf_lite.networks import TanhNormalActorNetwork

    torch.manual_seed(0)
    actor = TanhNormalActorNetwork(2, 1, hidden_layers=(8,))
    obs = torch.randn(1, 2).expand(9, 2)
    mean, log_std = actor._mean_and_log_std(obs[:1])
    # Pre-tanh values up to +-18, where tanh(u) rounds to +-1 in float32, and +-50,
    # where exp(2 |u|) overflows it.
    u = torch.tensor([-50.0, -18.0, -6.0, -1.0, 0.0, 1.0, 6.0, 18.0, 50.0]).unsqueeze(1)
    noise = (u - mean) / log_std.exp()
    _, log_prob = actor.sample(obs, noise=noise)
    # In float64: log(1 - tanh(u)^2) = log 4 - 2 log(e^u + e^-u).
    u64, mean64, std64 = u.double(), mean.double(), log_std.double().exp()
    log_det = math.log(4.0) - 2.0 * torch.logaddexp(u64, -u64)
    expected = torch.distributions.Normal(mean64, std64).log_prob(u64) - log_det
    torch.testing.assert_close(log_prob.double(), expected.squeeze(1), rtol=1e-5, atol=1e-4)


def test_the_tanh_normal_log_prob_differentiates_through_the_tanh_correction():
    # The actor loss descends alpha * log pi(a|s) through the sample: its gradient
    # must include that of -log(1 - tanh(u)^2), u = mean + std * noise (reference in float64).
    from alf_lite.networks import TanhNormalActorNetwork

    torch.manual_seed(0)
    actor = TanhNormalActorNetwork(2, 3, hidden_layers=(8,))
    obs, noise = torch.randn(16, 2), torch.randn(16, 3)
    params = list(actor.parameters())
    grads = torch.autograd.grad(actor.sample(obs, noise)[1].sum(), params)
    mean, log_std = actor._mean_and_log_std(obs)
    mean64, std64 = mean.double(), log_std.double().exp()
    u = mean64 + std64 * noise.double()
    expected = torch.distributions.Normal(mean64, std64).log_prob(u) - torch.log(
        1 - torch.tanh(u).square()
    )
    for grad, reference in zip(grads, torch.autograd.grad(expected.sum(), params)):
        torch.testing.assert_close(grad, reference, rtol=1e-4, atol=1e-5)


def test_value_step_is_the_mean_of_the_critic_replicas():
    sac = make_sac()
    # Q_i = c_i + sum(s) with c = (1, 2): the mean over replicas is 1.5 + s.
    values = sac.value_step(torch.tensor([[1.0], [-2.0]]), torch.zeros(2, 1))
    assert torch.allclose(values, torch.tensor([2.5, -0.5])) and not values.requires_grad
    assert sac.gamma == GAMMA


@pytest.mark.parametrize(
    'kwargs, message',
    [
        (dict(gamma=5.0), 'gamma must be in [0, 1], got 5.0'),
        (dict(gamma='0.99'), "gamma must be in [0, 1], got '0.99'"),
        (dict(target_update_tau='abc'), "target_update_tau must be in (0, 1], got 'abc'"),
        (dict(target_update_period=0), 'target_update_period must be an integer >= 1, got 0'),
        (dict(target_update_period=1.5), 'target_update_period must be an integer >= 1'),
        (dict(num_critic_replicas=0), 'num_critic_replicas must be an integer >= 1, got 0'),
        (dict(num_critic_replicas=True), 'num_critic_replicas must be an integer >= 1, got True'),
        (dict(num_critic_replicas=2.0), 'num_critic_replicas must be an integer >= 1, got 2.0'),
        (dict(target_entropy=float('nan')), 'target_entropy must be a finite number or None'),
        (dict(initial_log_alpha=float('nan')), 'initial_log_alpha must be a finite number'),
        (dict(initial_log_alpha=float('-inf')), 'initial_log_alpha must be a finite number'),
        (dict(initial_log_alpha='0'), "initial_log_alpha must be a finite number, got '0'"),
    ],
)
def test_settings_no_paper_uses_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError) as raised:
        SacAlgorithm(observation_dim=3, action_dim=2, **kwargs)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize('algorithm', ['SacAlgorithm', 'Td3Algorithm', 'DdpgAlgorithm'])
def test_a_numpy_integer_is_a_number_of_critic_replicas(algorithm):
    # As for the update periods: a count worked out with numpy (a sweep of one's own) is one.
    import numpy as np

    from alf_lite import algorithms

    built = getattr(algorithms, algorithm)(
        observation_dim=3, action_dim=2, num_critic_replicas=np.int64(3)
    )
    assert built._critic(torch.zeros(4, 3), torch.zeros(4, 2)).shape == (4, 3)
