"""What every algorithm inherits: its optimizer steps, its mode switch and the ranges of its
update settings."""

import functools
import math

import pytest
import torch

from alf_lite.algorithms.ddpg import DdpgAlgorithm
from alf_lite.algorithms.off_policy_algorithm import (
    NonFiniteLossError,
    OffPolicyAlgorithm,
    check_update_settings,
    loss_mask,
)
from alf_lite.algorithms.sac import SacAlgorithm
from alf_lite.algorithms.td3 import Td3Algorithm
from alf_lite.data import Experience, StepType, TimeStep
from alf_lite.networks import CriticNetwork, DeterministicActorNetwork, TanhNormalActorNetwork
from test_ddpg import random_batch


class OneWeight(OffPolicyAlgorithm):
    """A single weight ``w``, starting at 0, stepped by plain SGD at learning rate 1."""

    def __init__(self):
        super().__init__(observation_dim=1, action_dim=1)
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.optimizers['w'] = torch.optim.SGD([self.w], lr=1.0)


def test_an_optimizer_step_follows_the_gradient_of_its_own_loss_alone():
    algorithm = OneWeight()
    algorithm.optimizer_step('w', 3.0 * algorithm.w)  # gradient 3: w = 0 - 3
    algorithm.optimizer_step('w', algorithm.w)  # gradient 1: w = -3 - 1
    # With the first step's gradient still in, the second would step by 3 + 1.
    assert algorithm.w.item() == -4.0


@pytest.mark.parametrize('gamma, target_update_tau', [(0.0, 1.0), (1.0, 0.5)])
def test_the_ends_of_the_ranges_are_accepted(gamma, target_update_tau):
    # gamma 0 learns the immediate reward, gamma 1 the undiscounted return;
    # tau 1 makes each target update a copy.
    check_update_settings(gamma, target_update_tau, target_update_period=1, policy_update_period=1)


@pytest.mark.parametrize(
    'gamma, target_update_tau, message',
    [
        (-0.01, 0.5, 'gamma must be in [0, 1], got -0.01'),
        (1.01, 0.5, 'gamma must be in [0, 1], got 1.01'),
        (0.99, 0.0, 'target_update_tau must be in (0, 1], got 0.0'),
        (0.99, 1.01, 'target_update_tau must be in (0, 1], got 1.01'),
    ],
)
def test_values_just_past_the_ends_of_the_ranges_are_refused(gamma, target_update_tau, message):
    # tau 0 would leave the targets at their initial values for ever.
    with pytest.raises(ValueError) as raised:
        check_update_settings(gamma, target_update_tau, target_update_period=1)
    assert str(raised.value) == message


def test_an_infinite_loss_raises_before_its_step():
    algorithm = OneWeight()
    with pytest.raises(NonFiniteLossError, match='the w loss is inf'):
        algorithm.optimizer_step('w', algorithm.w + math.inf)
    assert algorithm.w.item() == 0.0 and algorithm.w.grad is None


@pytest.mark.parametrize('mask_out_loss_for_last_step', [True, False])
def test_a_first_row_after_any_row_but_last_is_never_trained_into(mask_out_loss_for_last_step):
    # MID -> FIRST is where a resumed run restarted its envs mid-episode: no
    # transition, whatever the setting. LAST -> FIRST is the episode boundary the
    # setting is about.
    F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
    step_type = torch.tensor([[F, M, F, M, L, F, M]], dtype=torch.uint8)
    batch = Experience(
        step_type, torch.zeros(1, 7, 1), torch.zeros(1, 7, 1), torch.zeros(1, 7), torch.ones(1, 7)
    )
    boundary = 0.0 if mask_out_loss_for_last_step else 1.0
    assert loss_mask(batch, mask_out_loss_for_last_step).tolist() == [
        [1.0, 0.0, 1.0, 1.0, boundary, 1.0]
    ]


@pytest.mark.parametrize('name', ['target_update_period', 'policy_update_period'])
def test_a_bool_is_no_period(name):
    periods = {'target_update_period': 1, 'policy_update_period': 1, name: True}
    with pytest.raises(ValueError, match=f'^{name} must be an integer >= 1, got True$'):
        check_update_settings(0.99, 0.005, **periods)


ALGORITHMS = {
    'sac': SacAlgorithm,
    'td3': Td3Algorithm,
    # With batch norm: the mode decides which statistics normalise.
    'ddpg': functools.partial(
        DdpgAlgorithm,
        actor_network_ctor=functools.partial(DeterministicActorNetwork, batch_norm=True),
        critic_network_ctor=functools.partial(CriticNetwork, batch_norm=True),
    ),
}


def modes(algorithm):
    return {name: module.training for name, module in algorithm.named_modules()}


@pytest.mark.parametrize('name', sorted(ALGORITHMS))
def test_train_and_eval_set_every_module_as_nn_module_does(name):
    algorithm = ALGORITHMS[name](observation_dim=3, action_dim=2)
    # Every algorithm keeps its targets in eval mode (running statistics) in both modes.
    targets = tuple(n for n in dict(algorithm.named_children()) if n.startswith('_target_'))
    assert targets == (
        ('_target_critic',) if name == 'sac' else ('_target_actor', '_target_critic')
    )
    for mode in (False, True, False):
        assert algorithm.train(mode) is algorithm
        expected = {module: mode and not module.startswith(targets) for module in modes(algorithm)}
        assert modes(algorithm) == expected
    # nn.Module.train over the same tree, then the targets put back in eval mode.
    for mode in (False, True):
        algorithm.train(not mode)
        torch.nn.Module.train(algorithm, mode)
        for target in targets:
            torch.nn.Module.train(getattr(algorithm, target), False)
        reference = modes(algorithm)
        algorithm.train(not mode)
        algorithm.train(mode)
        assert modes(algorithm) == reference
    assert algorithm.eval() is algorithm and not any(modes(algorithm).values())


class KeepsChildInEval(torch.nn.Module):
    """A submodule whose own ``train`` keeps its child in eval mode."""

    def __init__(self):
        super().__init__()
        self.child = torch.nn.BatchNorm1d(2)
        self.calls = []

    def train(self, mode=True):
        self.calls.append(mode)
        super().train(mode)
        self.child.train(False)
        return self


class Holder(OneWeight):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(2, 2), KeepsChildInEval())


def test_a_submodule_with_its_own_train_gets_it_called():
    algorithm = Holder()
    algorithm.train(True)
    keeper = algorithm.inner[1]
    assert keeper.calls == [True]
    assert algorithm.training and algorithm.inner.training and algorithm.inner[0].training
    assert keeper.training and not keeper.child.training
    algorithm.train(False)
    assert keeper.calls == [True, False] and not any(modes(algorithm).values())


class MirroredFlag(torch.nn.Module):
    """Keeps its mode elsewhere, behind a ``training`` property (as torch.compile's wrapper)."""

    @property
    def training(self):
        return self.__dict__['_mode']

    @training.setter
    def training(self, mode):
        self.__dict__['_mode'] = mode


# torch.compile's first use imports torch.jit, which warns of its own deprecations.
@pytest.mark.filterwarnings('ignore::DeprecationWarning')
def test_a_training_property_is_set_through_its_setter():
    algorithm = OneWeight()
    algorithm.mirrored = MirroredFlag()
    algorithm.compiled = torch.compile(torch.nn.Sequential(torch.nn.BatchNorm1d(2)))
    for mode in (False, True):
        algorithm.train(mode)
        assert algorithm.mirrored.training is mode and algorithm.mirrored._mode is mode
        assert (
            algorithm.compiled.training is mode and algorithm.compiled._orig_mod[0].training is mode
        )


def test_a_mode_that_is_no_bool_is_refused():
    with pytest.raises(ValueError, match='expected to be a bool, got 1'):
        OneWeight().train(1)


class ObservationOnlyCritic(torch.nn.Module):
    """Built as a critic is (it takes ``num_replicas``), but called with an observation alone."""

    def __init__(self, observation_dim, action_dim, num_replicas):
        super().__init__()
        self.layer = torch.nn.Linear(observation_dim, num_replicas)

    def forward(self, observation):
        return self.layer(observation)


@pytest.mark.parametrize(
    'algorithm, networks, error, message',
    [
        (
            SacAlgorithm,
            dict(actor_network_ctor=DeterministicActorNetwork),
            ValueError,
            'SacAlgorithm.actor_network_ctor built a DeterministicActorNetwork, which has no '
            'sample(observation)',
        ),
        (
            SacAlgorithm,
            dict(actor_network_ctor=CriticNetwork),
            ValueError,
            'SacAlgorithm.actor_network_ctor built a CriticNetwork, which cannot be called with '
            'an observation alone',
        ),
        (
            Td3Algorithm,
            dict(actor_network_ctor=CriticNetwork),
            ValueError,
            'Td3Algorithm.actor_network_ctor built a CriticNetwork',
        ),
        (
            DdpgAlgorithm,
            dict(critic_network_ctor=ObservationOnlyCritic),
            ValueError,
            'DdpgAlgorithm.critic_network_ctor built a ObservationOnlyCritic, which cannot be '
            'called with an observation and an action',
        ),
        (
            Td3Algorithm,
            dict(critic_network_ctor=TanhNormalActorNetwork),
            ValueError,
            'Td3Algorithm.critic_network_ctor is TanhNormalActorNetwork, which takes no '
            'num_replicas and so cannot build a critic',
        ),
        (
            SacAlgorithm,
            dict(critic_network_ctor=DeterministicActorNetwork),
            ValueError,
            'SacAlgorithm.critic_network_ctor is DeterministicActorNetwork, which takes no '
            'num_replicas',
        ),
    ],
    ids=[
        'sac_actor_without_sample',
        'sac_critic_as_actor',
        'td3_critic_as_actor',
        'ddpg_critic_without_action',
        'td3_actor_as_critic',
        'sac_actor_as_critic',
    ],
)
def test_networks_that_cannot_play_their_part_are_refused_naming_the_parameter(
    algorithm, networks, error, message
):
    with pytest.raises(error) as raised:
        algorithm(observation_dim=3, action_dim=2, **networks)
    assert message in str(raised.value)


class OneQCritic(torch.nn.Module):
    """Q values ``[B]``: one per row, whatever ``num_replicas`` asks for."""

    def __init__(self, observation_dim, action_dim, num_replicas):
        super().__init__()
        self.layer = torch.nn.Linear(observation_dim + action_dim, 1)

    def forward(self, observation, action):
        return self.layer(torch.cat([observation, action], -1)).squeeze(-1)


class ReplicaFirstCritic(OneQCritic):
    """Q values ``[R, B]`` (replicas first) instead of ``[B, R]``."""

    def __init__(self, observation_dim, action_dim, num_replicas):
        super().__init__(observation_dim, action_dim, num_replicas)
        self.num_replicas = num_replicas

    def forward(self, observation, action):
        return super().forward(observation, action).expand(self.num_replicas, -1)


class ReplicaFirstWhenOneCritic(CriticNetwork):
    """``[B, R]`` Q values, but ``[1, B]`` when asked for replica 0 alone."""

    def forward(self, observation, action, num_replicas=None):
        q = super().forward(observation, action, num_replicas)
        return q.T if num_replicas == 1 else q


class FlatActionActor(DeterministicActorNetwork):
    """Actions ``[B]`` instead of ``[B, A]``."""

    def forward(self, observation):
        return super().forward(observation)[:, 0]


class TransposedActionActor(DeterministicActorNetwork):
    """Actions ``[A, B]`` instead of ``[B, A]``."""

    def forward(self, observation):
        return super().forward(observation).T


class WiderInputActor(DeterministicActorNetwork):
    """Built for one observation value more than the env gives."""

    def __init__(self, observation_dim, action_dim, **kwargs):
        super().__init__(observation_dim + 1, action_dim, **kwargs)


class ScalarLogProbActor(TanhNormalActorNetwork):
    """``sample`` gives one log-probability for the whole batch."""

    def sample(self, observation, noise=None):
        action, log_prob = super().sample(observation, noise)
        return action, log_prob.sum()


@pytest.mark.parametrize(
    'algorithm, networks, message',
    [
        (
            SacAlgorithm,
            dict(critic_network_ctor=OneQCritic),
            'SacAlgorithm.critic_network_ctor built a OneQCritic, whose critic(observation, '
            'action) returns shape [3] for a batch of 3 observations; expected shape [3, 2]',
        ),
        (
            Td3Algorithm,
            dict(critic_network_ctor=ReplicaFirstCritic, num_critic_replicas=3),
            'Td3Algorithm.critic_network_ctor built a ReplicaFirstCritic, whose '
            'critic(observation, action) returns shape [3, 4] for a batch of 4 observations; '
            'expected shape [4, 3]',
        ),
        (
            DdpgAlgorithm,
            dict(actor_network_ctor=FlatActionActor),
            'DdpgAlgorithm.actor_network_ctor built a FlatActionActor, whose actor(observation) '
            'returns shape [3] for a batch of 3 observations; expected shape [3, 2]',
        ),
        (
            SacAlgorithm,
            dict(actor_network_ctor=ScalarLogProbActor),
            'whose actor.sample(observation) returns shape [3, 2], shape [] for a batch of 3 '
            'observations; expected shape [3, 2] and shape [3]',
        ),
        # As many replicas or action values as the check's batch has rows would pass
        # where the batch size is their number.
        (
            SacAlgorithm,
            dict(critic_network_ctor=ReplicaFirstCritic),
            'whose critic(observation, action) returns shape [2, 3] for a batch of 3 '
            'observations; expected shape [3, 2]',
        ),
        (
            Td3Algorithm,
            dict(actor_network_ctor=TransposedActionActor),
            'whose actor(observation) returns shape [2, 3] for a batch of 3 observations; '
            'expected shape [3, 2]',
        ),
        # The actor loss of TD3 and DDPG asks for replica 0 alone: [1, B] there would
        # train the actor on the first row's Q value only.
        (
            Td3Algorithm,
            dict(critic_network_ctor=ReplicaFirstWhenOneCritic),
            'Td3Algorithm.critic_network_ctor built a ReplicaFirstWhenOneCritic, whose '
            'critic(observation, action, num_replicas=1) returns shape [1, 3] for a batch of 3 '
            'observations; expected shape [3, 1]',
        ),
        # A network that fails on the batch is named as one with the wrong shape is.
        (
            DdpgAlgorithm,
            dict(actor_network_ctor=WiderInputActor),
            'DdpgAlgorithm.actor_network_ctor built a WiderInputActor, whose actor(observation) '
            'fails on a batch of 3 observations of size 3: RuntimeError',
        ),
    ],
    ids=[
        'sac_one_q',
        'td3_replicas_first',
        'ddpg_flat_action',
        'sac_scalar_log_prob',
        'sac_replicas_first_as_many_as_the_batch',
        'td3_actions_first_as_many_as_the_batch',
        'td3_replica_zero_alone_transposed',
        'ddpg_actor_failing_on_the_batch',
    ],
)
def test_networks_whose_outputs_have_the_wrong_shape_are_refused(algorithm, networks, message):
    # A [B] critic would be broadcast against its [B] target into a [B, B] loss.
    with pytest.raises(ValueError) as raised:
        algorithm(observation_dim=3, action_dim=2, **networks)
    assert message in str(raised.value)


def test_checking_the_outputs_draws_no_random_numbers_and_keeps_the_modes():
    # The check calls actor.sample, which draws; the run's random numbers stay as they were.
    torch.manual_seed(0)
    SacAlgorithm(observation_dim=3, action_dim=2)
    after_sac = torch.rand(3)
    torch.manual_seed(0)
    TanhNormalActorNetwork(3, 2)
    CriticNetwork(3, 2, num_replicas=2)
    assert torch.equal(after_sac, torch.rand(3))

    class HalfEvalCritic(CriticNetwork):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._layers[0].eval()

    ddpg = DdpgAlgorithm(observation_dim=3, action_dim=2, critic_network_ctor=HalfEvalCritic)
    modes = {name: m.training for name, m in ddpg._critic.named_modules()}
    assert modes[''] and not modes['_layers.0'], modes


def test_checking_the_outputs_leaves_batch_norm_statistics_as_they_were():
    # Called in training mode, batch norm layers would take the check's zero batch into
    # their running statistics, which evaluation then uses.
    norm = dict(hidden_layers=(8,), batch_norm=True)
    ddpg = DdpgAlgorithm(
        observation_dim=3,
        action_dim=2,
        actor_network_ctor=functools.partial(DeterministicActorNetwork, **norm),
        critic_network_ctor=functools.partial(CriticNetwork, action_input_layer=1, **norm),
    )
    for network in (ddpg._actor, ddpg._critic):
        buffers = dict(network.named_buffers())
        tracked = [b for name, b in buffers.items() if name.endswith('num_batches_tracked')]
        variances = [b for name, b in buffers.items() if name.endswith('running_var')]
        assert tracked and variances, sorted(buffers)
        assert all(int(b) == 0 for b in tracked), tracked
        assert all(torch.equal(v, torch.ones_like(v)) for v in variances), variances


@pytest.mark.parametrize(
    'algorithm, networks',
    [
        (SacAlgorithm, {}),
        (Td3Algorithm, {}),
        (DdpgAlgorithm, {}),
        # A tanh-Gaussian actor's forward is its deterministic action: it serves DDPG too.
        (DdpgAlgorithm, dict(actor_network_ctor=TanhNormalActorNetwork)),
    ],
    ids=['sac', 'td3', 'ddpg', 'ddpg_with_tanh_normal_actor'],
)
def test_networks_that_play_their_part_are_accepted(algorithm, networks):
    torch.manual_seed(0)
    algorithm = algorithm(observation_dim=3, action_dim=2, **networks)
    before = {name: p.detach().clone() for name, p in algorithm.named_parameters()}
    batch = random_batch()
    # One cycle of train steps: TD3 updates its actor only at the second.
    for _ in range(algorithm.train_step_cycle):
        out = algorithm.train_step(batch, loss_mask(batch))
    assert all(torch.isfinite(value) for value in out.values()), out
    # Both networks are trained, every tensor of them.
    for network in ('_actor', '_critic'):
        for name, p in getattr(algorithm, network).named_parameters():
            assert not torch.equal(before[f'{network}.{name}'], p), f'{network}.{name}'
    observation = torch.randn(4, 3)
    step = TimeStep(
        torch.full((4,), StepType.FIRST, dtype=torch.uint8),
        observation,
        torch.zeros(4),
        torch.ones(4),
        torch.arange(4),
    )
    for action in (algorithm.rollout_step(step), algorithm.predict_step(observation)):
        assert action.shape == (4, 2) and action.abs().max() <= 1


@pytest.mark.parametrize('algorithm', [SacAlgorithm, DdpgAlgorithm])
def test_a_critic_parameter_its_ctor_froze_stays_frozen_through_the_actor_loss(algorithm):
    # The actor loss freezes the critic while it runs; leaving that must not make every
    # critic parameter trainable, or a layer the ctor froze (a fixed encoder, say) is
    # trained from the second update on.
    def critic(observation_dim, action_dim, num_replicas):
        net = CriticNetwork(observation_dim, action_dim, num_replicas, hidden_layers=(8, 8))
        net._layers[0].requires_grad_(False)
        return net

    torch.manual_seed(0)
    algo = algorithm(observation_dim=3, action_dim=2, critic_network_ctor=critic)
    fixed = [p.clone() for p in algo._critic._layers[0].parameters()]
    trained = algo._critic._layers[1].weight.clone()
    batch = random_batch()
    algo.train(True)
    for _ in range(3):
        algo.train_step(batch, loss_mask(batch))
    assert not any(p.requires_grad for p in algo._critic._layers[0].parameters())
    assert all(torch.equal(p, q) for p, q in zip(algo._critic._layers[0].parameters(), fixed))
    assert algo._critic._layers[1].weight.requires_grad
    assert not torch.equal(algo._critic._layers[1].weight, trained)
