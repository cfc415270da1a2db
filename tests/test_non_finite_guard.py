"""The non-finite guard: losses checked on the device, failing updates skipped, no host sync."""

import copy
import functools
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from alf_lite import checkpoint as ckpt
from alf_lite.algorithms import DdpgAlgorithm, SacAlgorithm, Td3Algorithm
from alf_lite.algorithms.non_finite_guard import NonFiniteGuard
from alf_lite.algorithms.off_policy_algorithm import NonFiniteLossError, loss_mask, polyak_update
from alf_lite.data import Experience, StepType
from alf_lite.networks import CriticNetwork, DeterministicActorNetwork, TanhNormalActorNetwork

SMALL_CRITIC = functools.partial(CriticNetwork, hidden_layers=(16,))
ALGORITHMS = {
    'sac': functools.partial(
        SacAlgorithm,
        actor_network_ctor=functools.partial(TanhNormalActorNetwork, hidden_layers=(16,)),
        critic_network_ctor=SMALL_CRITIC,
    ),
    'td3': functools.partial(
        Td3Algorithm,
        actor_network_ctor=functools.partial(DeterministicActorNetwork, hidden_layers=(16,)),
        critic_network_ctor=SMALL_CRITIC,
    ),
    'ddpg_batch_norm': functools.partial(
        DdpgAlgorithm,
        actor_network_ctor=functools.partial(
            DeterministicActorNetwork, hidden_layers=(16,), batch_norm=True
        ),
        critic_network_ctor=functools.partial(SMALL_CRITIC, batch_norm=True, action_input_layer=1),
    ),
}


def make(name, seed=0, **kwargs):
    torch.manual_seed(seed)
    return ALGORITHMS[name](observation_dim=3, action_dim=2, **kwargs)


def batch(seed, reward=None):
    g = torch.Generator().manual_seed(seed)
    b = 32
    rewards = torch.randn(b, 2, generator=g) if reward is None else torch.full((b, 2), reward)
    return Experience(
        torch.full((b, 2), StepType.MID, dtype=torch.uint8),
        torch.randn(b, 2, 3, generator=g),
        torch.rand(b, 2, 2, generator=g) * 2 - 1,
        rewards,
        torch.ones(b, 2),
    )


def train(algorithm, seed, guard=None, update=1, reward=None):
    if guard is not None:
        guard.begin_update(env_steps=10 * update, update=update)
    data = batch(seed, reward)
    torch.manual_seed(1000 + seed)  # the algorithm's own noise
    return algorithm.train_step(data, loss_mask(data))


def assert_same_state(a, b, ignore=()):
    """Parameters, buffers and optimizer states equal bit for bit, except keys with ``ignore``.

    The train step counter is a Python int, and the actor loss a reported value.
    """
    flat_a, flat_b = _tensors(ckpt.algorithm_state(a)), _tensors(ckpt.algorithm_state(b))
    assert flat_a.keys() == flat_b.keys()
    for key in flat_a:
        if key != '/module/_extra_state/actor_loss' and not any(i in key for i in ignore):
            assert torch.equal(flat_a[key], flat_b[key]), key


def _tensors(tree, prefix=''):
    if torch.is_tensor(tree):
        return {prefix: tree.detach().clone()}
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = enumerate(tree)
    else:
        return {}
    out = {}
    for key, value in items:
        out.update(_tensors(value, f'{prefix}/{key}'))
    return out


@pytest.mark.parametrize('name', ALGORITHMS)
def test_deferred_checks_change_no_number_of_a_finite_run(name):
    plain, guarded = make(name), make(name)
    guard = guarded.defer_non_finite_checks()
    for update in range(1, 7):
        train(plain, update)
        train(guarded, update, guard, update)
    assert_same_state(plain, guarded)
    assert guard.failure() is None


@pytest.mark.parametrize('name', ALGORITHMS)
def test_a_nan_loss_and_every_update_after_it_change_nothing(name):
    algorithm = make(name)
    guard = algorithm.defer_non_finite_checks()
    for update in range(1, 4):
        train(algorithm, update, guard, update)
    before = copy.deepcopy(algorithm)
    # A NaN reward makes the critic loss NaN; the updates after it are finite.
    train(algorithm, 4, guard, update=4, reward=math.nan)
    for update in range(5, 9):
        train(algorithm, update, guard, update)
    # Batch norm's running statistics follow every batch the networks see: not
    # an optimizer step, so not skipped.
    assert_same_state(before, algorithm, ignore=('running_', 'num_batches_tracked'))
    failure = guard.failure()
    assert (failure.name, failure.env_steps, failure.update) == ('critic', 40, 4)
    assert math.isnan(failure.value)
    assert str(failure) == 'the critic loss is nan at env step 40 (update 4)'


def test_the_first_failure_is_the_one_recorded():
    guard = NonFiniteGuard(['critic', 'actor'], torch.device('cpu'))
    guard.begin_update(5, 1)
    guard.check('critic', torch.tensor(1.0))
    assert guard.failure() is None and guard.tripped.item() == 0
    guard.begin_update(7, 2)
    guard.check('critic', torch.tensor(2.0))
    guard.check('actor', torch.tensor(-math.inf))
    guard.begin_update(9, 3)
    guard.check('critic', torch.tensor(math.nan))
    assert tuple(guard.failure()) == ('actor', -math.inf, 7, 2)
    assert guard.tripped.item() == 1


def test_a_failure_of_the_first_named_loss_is_recorded():
    guard = NonFiniteGuard(['critic', 'actor'], torch.device('cpu'))
    guard.begin_update(12, 3)
    guard.check('critic', torch.tensor(math.inf))
    assert tuple(guard.failure()) == ('critic', math.inf, 12, 3)


def test_without_the_guard_a_nan_loss_raises_at_once():
    algorithm = make('sac')
    with pytest.raises(NonFiniteLossError, match='the critic loss is nan'):
        train(algorithm, 1, reward=math.nan)


@pytest.mark.parametrize('name', ['td3', 'ddpg_batch_norm'])
def test_an_actor_loss_that_raises_leaves_the_train_step_count_at_the_updates_done(name):
    # TD3 steps its actor and targets on every second update, DDPG on each.
    algorithm = make(name)
    for update in (1, 2, 3):
        train(algorithm, update)
    assert algorithm.num_train_steps == 3
    # The target actor, which the critic's target takes, stays finite: the critic loss is
    # finite and stepped, the actor's is NaN.
    with torch.no_grad():
        for p in algorithm._actor.parameters():
            p.fill_(math.nan)
    with pytest.raises(NonFiniteLossError, match='the actor loss is nan'):
        train(algorithm, 4)
    assert algorithm.num_train_steps == 3
    # The next update is again the 4th: TD3's actor and its targets step on it.
    assert algorithm.train_step_phase(algorithm.num_train_steps) == (True, True)


class HostSyncs(TorchDispatchMode):
    """Counts the operations that read a tensor's value back to Python (item, bool, ...)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (
            torch.ops.aten._local_scalar_dense.default,
            torch.ops.aten.is_nonzero.default,
            torch.ops.aten.equal.default,
        ):
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize('name', ALGORITHMS)
def test_a_guarded_update_reads_nothing_back_to_the_host(name):
    algorithm = make(name)
    guard = algorithm.defer_non_finite_checks()
    data = batch(0)
    mask = loss_mask(data)
    for update in range(1, 2 * algorithm.train_step_cycle + 1):
        guard.begin_update(update, update)
        with HostSyncs() as syncs:
            algorithm.train_step(data, mask)
        assert syncs.count == 0
    plain = make(name)
    with HostSyncs() as syncs:
        plain.train_step(data, mask)
    assert syncs.count > 0  # the immediate check: one per loss


def test_guard_refuses_an_optimizer_that_cannot_skip_a_step():
    algorithm = ALGORITHMS['sac'](
        observation_dim=3,
        action_dim=2,
        actor_optimizer=functools.partial(torch.optim.RMSprop, lr=0.1),
    )
    # Named by the algorithm's name for it, which its gin scope (actor/...) is in the examples.
    with pytest.raises(
        ValueError,
        match='the actor optimizer, RMSprop, cannot skip a step.*fused.*'
        'defer_non_finite_checks = False',
    ):
        algorithm.defer_non_finite_checks()


def test_polyak_update_skipped_by_the_flag_and_exact_without_it():
    torch.manual_seed(0)
    online, target, reference = (torch.nn.BatchNorm1d(3) for _ in range(3))
    with torch.no_grad():
        for m in (online, target, reference):
            m.weight.normal_()
        online.running_mean.fill_(2.0)
        reference.load_state_dict(target.state_dict())
    polyak_update(target, online, 0.1, skip=torch.tensor(1.0))
    for a, b in zip(target.state_dict().values(), reference.state_dict().values()):
        assert torch.equal(a, b)
    polyak_update(target, online, 0.1, skip=torch.tensor(0.0))
    polyak_update(reference, online, 0.1)
    for a, b in zip(target.state_dict().values(), reference.state_dict().values()):
        assert torch.equal(a, b)
