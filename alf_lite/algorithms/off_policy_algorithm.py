"""The one interface between the trainer and an off-policy algorithm, and shared TD helpers."""

import functools
import inspect
import numbers
from typing import Dict, Hashable, NamedTuple, Optional

import torch
import torch.nn as nn

from alf_lite.algorithms.non_finite_guard import NonFiniteGuard
from alf_lite.data import Experience, StepType, TimeStep


class Transitions(NamedTuple):
    """Consecutive row pairs ``(t, t + 1)`` of ``[B, T]`` windows, flattened to ``[B * (T - 1)]``.

    ``reward`` and ``discount`` are those received on arriving at ``t + 1``.
    """

    observation: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    next_observation: torch.Tensor


def transitions(batch: Experience) -> Transitions:
    """Split ``[B, T]`` windows into the ``B * (T - 1)`` transitions they hold."""

    def flat(x):
        return x.reshape(-1, *x.shape[2:])

    return Transitions(
        observation=flat(batch.observation[:, :-1]),
        action=flat(batch.action[:, :-1]),
        reward=flat(batch.reward[:, 1:]),
        discount=flat(batch.discount[:, 1:]),
        next_observation=flat(batch.observation[:, 1:]),
    )


def loss_mask(batch: Experience, mask_out_loss_for_last_step: bool = True) -> torch.Tensor:
    """``[B, T - 1]``: 1 for each transition ``(t, t + 1)`` that may be trained on.

    Row ``t + 1`` being FIRST means it starts an episode: ``(t, t + 1)`` is not a
    transition. Where row ``t`` is LAST that is an episode boundary, which
    ``mask_out_loss_for_last_step=False`` trains on anyway (tf-agents' behaviour).
    A FIRST after any other row is where a resumed run restarted its envs
    mid-episode; that pair is never trained on.
    """
    first_rows, next_rows = batch.step_type[:, :-1], batch.step_type[:, 1:]
    into_first = next_rows == StepType.FIRST
    if mask_out_loss_for_last_step:
        return (~(into_first | (first_rows == StepType.LAST))).float()
    return (~(into_first & (first_rows != StepType.LAST))).float()


def check_update_settings(
    gamma: float, target_update_tau: float, target_update_period: int, **periods: int
) -> None:
    """Refuse, naming it, a ``gamma`` outside [0, 1], a ``target_update_tau`` outside (0, 1],
    or a ``target_update_period`` (or other ``periods``) that is not an integer >= 1.

    Raises:
        ValueError: also for a value that is no number at all, e.g. a string.
    """

    def real(value):
        return isinstance(value, numbers.Real) and not isinstance(value, bool)

    if not (real(gamma) and 0.0 <= gamma <= 1.0):
        raise ValueError(f'gamma must be in [0, 1], got {gamma!r}')
    if not (real(target_update_tau) and 0.0 < target_update_tau <= 1.0):
        raise ValueError(f'target_update_tau must be in (0, 1], got {target_update_tau!r}')
    for name, period in dict(target_update_period=target_update_period, **periods).items():
        if (
            not (isinstance(period, numbers.Integral) and not isinstance(period, bool))
            or period < 1
        ):
            raise ValueError(f'{name} must be an integer >= 1, got {period!r}')


def check_num_critic_replicas(num_critic_replicas: int) -> None:
    """Refuse, naming it, a ``num_critic_replicas`` that is not an integer >= 1 (a numpy
    integer is one, as for the update periods; a bool is not).

    Checked by the algorithm, as the critic's ``num_replicas`` is set from it
    and is no gin parameter.
    """
    if (
        isinstance(num_critic_replicas, bool)
        or not isinstance(num_critic_replicas, numbers.Integral)
        or num_critic_replicas < 1
    ):
        raise ValueError(
            f'num_critic_replicas must be an integer >= 1, got {num_critic_replicas!r}'
        )


def build_network(parameter: str, ctor, *args, **kwargs) -> nn.Module:
    """``ctor(*args, **kwargs)``; a ``TypeError`` it raises names ``parameter``
    (e.g. ``'Td3Algorithm.critic_network_ctor'``), which gin's message would not."""
    try:
        return ctor(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f'{parameter}: {e}') from e


def _takes_keyword(ctor, keyword: str) -> bool:
    """Whether ``ctor`` can be called with ``keyword=...`` (True where its signature cannot
    be read: the call decides)."""
    try:
        parameters = inspect.signature(ctor).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind == p.VAR_KEYWORD or (p.name == keyword and p.kind != p.POSITIONAL_ONLY)
        for p in parameters
    )


def _takes(fn, num_args: int) -> bool:
    """Whether ``fn`` (a module: its ``forward``) can be called with ``num_args`` arguments."""
    # A module's own signature is ``__call__``'s, which takes anything.
    method = fn.forward if isinstance(fn, nn.Module) else fn
    try:
        inspect.signature(method).bind(*[None] * num_args)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): let the call decide
        return True
    return True


def check_networks(algorithm: str, actor: nn.Module, critic: nn.Module, sampling: bool) -> None:
    """Refuse networks that cannot play their part, naming the parameter that built them.

    An actor is called as ``actor(observation)``, and a ``sampling`` one (SAC's)
    also as ``actor.sample(observation)``; a critic as ``critic(observation,
    action)``. Read from their signatures, before anything runs: a wrong
    ``@reference`` in gin would otherwise fail only at the first update, after
    the initial collection.

    Args:
        algorithm: the algorithm's configurable name, e.g. ``'SacAlgorithm'``.
        actor: what ``actor_network_ctor`` built.
        critic: what ``critic_network_ctor`` built.
        sampling: the algorithm samples actions from the actor.

    Raises:
        ValueError: naming the parameter, the class it built and what is missing.
    """
    problems = []
    if not callable(actor) or not _takes(actor, 1):
        problems.append(
            f'{algorithm}.actor_network_ctor built a {type(actor).__name__}, which cannot '
            'be called with an observation alone: an actor maps observations to actions'
        )
    elif sampling and not (callable(getattr(actor, 'sample', None)) and _takes(actor.sample, 1)):
        problems.append(
            f'{algorithm}.actor_network_ctor built a {type(actor).__name__}, which has no '
            'sample(observation): this algorithm samples actions and their log-probabilities '
            'from its actor (as TanhNormalActorNetwork does)'
        )
    if not callable(critic) or not _takes(critic, 2):
        problems.append(
            f'{algorithm}.critic_network_ctor built a {type(critic).__name__}, which cannot '
            'be called with an observation and an action: a critic maps them to Q values '
            '(as CriticNetwork does)'
        )
    if problems:
        raise ValueError('; '.join(problems) + '.')


def _shape_of(value) -> str:
    return f'shape {list(value.shape)}' if isinstance(value, torch.Tensor) else type(value).__name__


def check_network_outputs(
    algorithm: str,
    actor: nn.Module,
    critic: nn.Module,
    observation_dim: int,
    action_dim: int,
    num_replicas: int,
    sampling: bool,
    first_replica_only: bool = False,
) -> None:
    """Refuse networks whose outputs have the wrong shape, naming the parameter that built them.

    Each is called once on a batch of a few zero observations (and actions), in
    eval mode and without gradients; the random number generator's state is
    restored, so the run's numbers are those it would have had without the
    check. A critic that returns ``[B]`` rather than ``[B, R]`` would
    otherwise be broadcast against its ``[B]`` target into a ``[B, B]`` loss
    and train on wrong values without an error. With ``first_replica_only``
    the critic is also called as ``critic(observation, action, num_replicas=1)``,
    which must give ``[B, 1]``.

    On torch's ``meta`` device (where ``model_memory`` counts the networks' bytes before
    they are built) nothing is called: a network whose forward reads a value (a check of
    its output) cannot run there, and the real build makes the calls.

    Raises:
        ValueError: naming the parameter, the class it built, the shape it
            returned and the shape expected.
    """
    # A batch size that is neither R nor A: [R, B] Q values or [A, B] actions would
    # otherwise have the shape expected.
    b = min({2, 3, 4} - {num_replicas, action_dim})
    observation = torch.zeros(b, observation_dim)
    if observation.is_meta:
        return
    action = torch.zeros(b, action_dim)
    # (parameter part, network, the call, how to make it, the shapes expected)
    calls = [
        ('actor', actor, 'actor(observation)', lambda: (actor(observation),), [(b, action_dim)])
    ]
    if sampling:
        calls.append(
            (
                'actor',
                actor,
                'actor.sample(observation)',
                lambda: actor.sample(observation),
                [(b, action_dim), (b,)],
            )
        )
    calls.append(
        (
            'critic',
            critic,
            'critic(observation, action)',
            lambda: (critic(observation, action),),
            [(b, num_replicas)],
        )
    )
    if first_replica_only:
        calls.append(
            (
                'critic',
                critic,
                'critic(observation, action, num_replicas=1)',
                lambda: (critic(observation, action, num_replicas=1),),
                [(b, 1)],
            )
        )
    modes = [(m, m.training) for net in (actor, critic) for m in net.modules()]
    problems = []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            actor.eval()
            critic.eval()
            for part, net, call, make, expected in calls:
                built = (
                    f'{algorithm}.{part}_network_ctor built a {type(net).__name__}, whose {call}'
                )
                try:
                    out = make()
                except Exception as e:
                    raise ValueError(
                        f'{built} fails on a batch of {b} observations of size {observation_dim}: '
                        f'{type(e).__name__}: {e}'
                    ) from e
                outs = out if isinstance(out, (tuple, list)) else (out,)
                if [tuple(o.shape) if isinstance(o, torch.Tensor) else None for o in outs] != (
                    expected
                ):
                    shown = ', '.join(_shape_of(o) for o in outs)
                    want = ' and '.join(f'shape {list(e)}' for e in expected)
                    problems.append(
                        f'{built} returns {shown} for a batch of {b} observations; expected {want}'
                    )
    finally:
        for m, training in modes:
            m.training = training
    if problems:
        raise ValueError('; '.join(problems) + '.')


def td_target(
    reward: torch.Tensor, discount: torch.Tensor, gamma: float, next_value: torch.Tensor
) -> torch.Tensor:
    """``r[t+1] + gamma * discount[t+1] * V(s[t+1])``; discount 0 (termination): no bootstrap."""
    return reward + gamma * discount * next_value


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over entries where ``mask`` is 1; 0 when the mask is empty."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


@torch.no_grad()
def polyak_update(
    target: nn.Module, online: nn.Module, tau: float, skip: Optional[torch.Tensor] = None
) -> None:
    """``target = tau * online + (1 - tau) * target`` for every parameter, in one foreach call.

    Buffers (batch norm's running statistics) are copied, not averaged, as SB3 does.

    Args:
        skip: a 0-d tensor; where it is 1 the targets stay as they are. Read
            on the device, so it costs no host sync.
    """
    targets, onlines = list(target.parameters()), list(online.parameters())
    if skip is None:
        torch._foreach_lerp_(targets, onlines, tau)
        for t, o in zip(target.buffers(), online.buffers()):
            t.copy_(o)
        return
    # A tensor weight per parameter: a single tensor would be read back as a number.
    weight = tau * (1 - skip)
    torch._foreach_lerp_(targets, onlines, [weight] * len(targets))
    keep = skip.bool()
    for t, o in zip(target.buffers(), online.buffers()):
        t.copy_(torch.where(keep, t, o))


class NonFiniteLossError(FloatingPointError):
    """A loss was NaN or inf; raised before its optimizer step, so the weights stay finite.

    Raised by ``optimizer_step`` unless the algorithm checks on the device
    (``defer_non_finite_checks``).

    Args:
        name: the loss, e.g. 'critic'.
        value: its value.
    """

    def __init__(self, name: str, value: float):
        super().__init__(f'the {name} loss is {value}')
        self.name = name


class frozen:
    """Context in which a module's parameters collect no gradient.

    An actor loss differentiates through the critic; freezing the critic keeps
    its gradients out of that backward pass (and saves computing them). Only the
    parameters that require a gradient when it is built are switched: one the
    module's ctor froze stays frozen.
    """

    def __init__(self, module: nn.Module):
        self._params = [p for p in module.parameters() if p.requires_grad]

    def __enter__(self):
        for p in self._params:
            p.requires_grad_(False)

    def __exit__(self, *exc):
        for p in self._params:
            p.requires_grad_(True)


@functools.cache
def _plain_training_flag(cls: type) -> bool:
    """Whether ``training`` of a ``cls`` is a plain attribute: setting it through
    ``nn.Module.__setattr__`` then only stores it in the instance dict."""
    # torch.compile's OptimizedModule, for one, makes it a property.
    return cls.__setattr__ is nn.Module.__setattr__ and not hasattr(cls, 'training')


def set_training(module: nn.Module, mode: bool) -> None:
    """What ``module.train(mode)`` does when ``module`` keeps ``nn.Module.train``: set
    ``training`` on it and on every submodule, calling the ``train`` of those that
    override it, which then set their own submodules."""
    if _plain_training_flag(type(module)):
        module.__dict__['training'] = mode
    else:
        module.training = mode
    for child in module._modules.values():
        if child is None:
            continue
        if type(child).train is nn.Module.train:
            set_training(child, mode)
        else:
            child.train(mode)


def check_algorithm(algorithm, parameter: str = 'TrainerConfig.algorithm_ctor') -> None:
    """Refuse what ``parameter`` built unless it is an ``OffPolicyAlgorithm``.

    A network or an optimizer given as the algorithm would otherwise build and
    fail only at its first use, with an AttributeError.

    Raises:
        ValueError: naming the parameter and the class it built.
    """
    if not isinstance(algorithm, OffPolicyAlgorithm):
        raise ValueError(
            f'{parameter} built a {type(algorithm).__name__}, which is no algorithm: it must '
            'build an OffPolicyAlgorithm (@SacAlgorithm, @Td3Algorithm, @DdpgAlgorithm or a '
            'subclass of your own).'
        )


def check_algorithm_class(ctor, parameter: str = 'TrainerConfig.algorithm_ctor') -> None:
    """Refuse ``ctor``, before it is called, when it is a class and no ``OffPolicyAlgorithm``;
    a factory (a function) is left to ``check_algorithm`` once it has built.

    A class of another kind (``@GaussianNoise``) would otherwise fail on the arguments
    alf_lite passes it, naming neither the parameter nor the class.

    Raises:
        ValueError: naming the parameter and the class.
    """
    if isinstance(ctor, type) and not issubclass(ctor, OffPolicyAlgorithm):
        raise ValueError(
            f'{parameter} is the class {ctor.__name__}, which is no algorithm: it must be an '
            'OffPolicyAlgorithm (@SacAlgorithm, @Td3Algorithm, @DdpgAlgorithm or a subclass of '
            'your own).'
        )


class OffPolicyAlgorithm(nn.Module):
    """What the trainer calls: act for evaluation, act for collection, learn from a batch.

    Subclasses create their networks and optimizers from ``observation_dim`` and
    ``action_dim`` and register the optimizers in ``self.optimizers``; actions
    are always normalised to [-1, 1]. ``self._num_train_steps`` counts
    ``train_step`` calls (for update periods) and is saved with the module.
    The actor-critic algorithms here keep their policy in ``self._actor``
    (``forward`` is the deterministic action) and their critics in
    ``self._critic`` (``[N, replicas]`` Q values), which the default
    ``predict_step`` and ``value_step`` use.

    ``train_step`` may branch in Python on ``_num_train_steps`` only through
    periods that ``train_step_cycle`` covers (and ``train_step_phase`` names),
    and must read nothing back from the device: then a CUDA graph captured per
    phase replays it exactly (``alf_lite.update``).
    """

    def __init__(self, observation_dim: int, action_dim: int):
        super().__init__()
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        self.optimizers: Dict[str, torch.optim.Optimizer] = {}
        self._num_train_steps = 0
        self._guard: Optional[NonFiniteGuard] = None

    def _build_actor_and_critic(
        self,
        actor_network_ctor,
        critic_network_ctor,
        num_critic_replicas: int,
        sampling: bool,
        first_replica_only: bool = False,
    ) -> None:
        """Build ``self._actor`` and ``self._critic`` by the algorithm's ctors, each checked
        for its part (errors name the parameter, e.g. ``SacAlgorithm.actor_network_ctor``).

        Args:
            actor_network_ctor: ``ctor(observation_dim, action_dim)``.
            critic_network_ctor: ``ctor(observation_dim, action_dim, num_replicas=R)``.
            num_critic_replicas: R, an integer >= 1.
            sampling: the algorithm samples actions from the actor (``check_networks``).
            first_replica_only: the algorithm needs replica 0 alone at times: it is
                computed alone (``self._first_replica_only``, the keyword arguments of
                that call) where the critic's ``forward`` takes ``num_replicas``.
        """
        check_num_critic_replicas(num_critic_replicas)
        num_critic_replicas = int(num_critic_replicas)
        name, dims = type(self).__name__, (self.observation_dim, self.action_dim)
        self._actor = build_network(f'{name}.actor_network_ctor', actor_network_ctor, *dims)
        if not _takes_keyword(critic_network_ctor, 'num_replicas'):
            # An actor given as the critic: refused before its constructor fails on num_replicas.
            raise ValueError(
                f'{name}.critic_network_ctor is '
                f'{getattr(critic_network_ctor, "__name__", critic_network_ctor)}, which takes '
                'no num_replicas and so cannot build a critic: a critic is built as '
                'ctor(observation_dim, action_dim, num_replicas=R) and maps an observation '
                'and an action to Q values (as CriticNetwork does).'
            )
        self._critic = build_network(
            f'{name}.critic_network_ctor',
            critic_network_ctor,
            *dims,
            num_replicas=num_critic_replicas,
        )
        check_networks(name, self._actor, self._critic, sampling)
        self._first_replica_only = (
            {'num_replicas': 1}
            if first_replica_only and _takes_keyword(self._critic.forward, 'num_replicas')
            else {}
        )
        check_network_outputs(
            name,
            self._actor,
            self._critic,
            *dims,
            num_critic_replicas,
            sampling,
            first_replica_only=bool(self._first_replica_only),
        )

    @property
    def num_train_steps(self) -> int:
        """``train_step`` calls so far (replays of a captured update included)."""
        return self._num_train_steps

    @num_train_steps.setter
    def num_train_steps(self, value: int) -> None:
        self._num_train_steps = value

    def train(self, mode: bool = True) -> 'OffPolicyAlgorithm':
        """``nn.Module.train``: set the mode of this module and every submodule, faster.

        The trainer switches modes twice per env step (eval to act, train to
        update). ``nn.Module.train`` sets each module's flag through
        ``nn.Module.__setattr__``, which checks the parameter, buffer and module
        tables first: 62 us a switch for TD3's 33 modules, 14 us here
        (``benchmarks/mode_switch.py``). This sets the same flags directly; a
        submodule with its own ``train`` still gets it called.

        Target networks (submodules named ``_target_*``) stay in eval mode: their
        batch norms use the running statistics that ``polyak_update`` copies
        from the online networks, so a row's target does not depend on the
        other rows of its batch.
        """
        if not isinstance(mode, bool):
            raise ValueError(f'training mode is expected to be a bool, got {mode!r}')
        set_training(self, mode)
        if mode:
            for name, child in self._modules.items():
                if name.startswith('_target_'):
                    set_training(child, False)
        return self

    @property
    def train_step_cycle(self) -> int:
        """``train_step`` does the same work whenever ``num_train_steps`` is equal modulo this."""
        return 1

    def train_step_phase(self, num_train_steps: int) -> Hashable:
        """What the ``train_step`` after ``num_train_steps`` others does, as a key: two calls
        with one key do the same work (one CUDA graph replays both).

        ``num_train_steps`` modulo ``train_step_cycle`` by default; an algorithm
        whose cycle is long but whose steps do few kinds of work (a target
        update every 1000th) names the kinds, so that a few graphs cover it.
        """
        return num_train_steps % self.train_step_cycle

    @torch.no_grad()
    def predict_step(self, observation: torch.Tensor) -> torch.Tensor:
        """The deterministic action for evaluation, ``[N, action_dim]``."""
        return self._actor(observation)

    def rollout_step(self, time_step: TimeStep) -> torch.Tensor:
        """The exploratory action for collection, ``[N, action_dim]``."""
        raise NotImplementedError

    def check_rollout(self, num_envs: int) -> None:
        """Refuse a setting with which ``rollout_step`` cannot act for ``num_envs`` envs (an
        exploration noise that does not fit their actions), drawing no random number.

        Raises:
            ValueError: naming the setting.
        """

    def rollout_state(self) -> dict:
        """What ``rollout_step`` carries from one step to the next (e.g. OU noise), for a
        checkpoint: tensors and plain values. Empty for a policy without such state."""
        return {}

    def load_rollout_state(self, state: dict, num_envs: int) -> None:
        """Continue collection of ``num_envs`` envs from ``rollout_state()``'s ``state``.

        Raises:
            ValueError: when ``state`` does not fit.
        """

    @torch.no_grad()
    def value_step(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The critics' estimate of ``Q(s, a)``, mean over replicas, ``[N]`` (for summaries)."""
        return self._critic(observation, action).mean(-1)

    @property
    def gamma(self) -> float:
        """The discount factor of the return the critics estimate."""
        return self._gamma

    def train_step(self, batch: Experience, loss_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        """One update from ``[B, T]`` windows.

        Args:
            batch: windows of consecutive rows of one env each.
            loss_mask: ``[B, T - 1]`` float, 1 where the transition ``(t, t + 1)``
                may be trained on (0 where row ``t + 1`` is FIRST, unless row
                ``t`` is LAST and the trainer keeps those pairs for study).

        Returns:
            detached scalar tensors for summaries, e.g. ``{'critic_loss': ...}``.
        """
        raise NotImplementedError

    def defer_non_finite_checks(self) -> NonFiniteGuard:
        """Check losses on the device from now on, without a host sync; returns the guard.

        Afterwards ``optimizer_step`` no longer raises: a non-finite loss trips
        the guard, which skips that optimizer step and every later one and
        the target updates (``soft_update``); read ``guard.failure()`` at
        summary time. Call it once the module is on its device.

        Raises:
            ValueError: an optimizer cannot skip a step on the device.
        """
        device = next(self.parameters()).device
        guard = NonFiniteGuard(list(self.optimizers), device)
        for name, optimizer in self.optimizers.items():
            guard.attach(optimizer, name)
        self._guard = guard
        return guard

    def soft_update(self, target: nn.Module, online: nn.Module, tau: float) -> None:
        """``polyak_update``, skipped once the non-finite guard (if any) has tripped."""
        polyak_update(target, online, tau, None if self._guard is None else self._guard.tripped)

    def optimizer_step(self, name: str, loss: torch.Tensor) -> None:
        """Zero the gradients of ``self.optimizers[name]``, backpropagate ``loss``, step.

        Raises:
            NonFiniteLossError: if ``loss`` is NaN or inf (nothing is changed
                then); with deferred checks the guard records it instead.
        """
        if self._guard is not None:
            self._guard.check(name, loss)
        elif not torch.isfinite(loss):
            raise NonFiniteLossError(name, loss.item())
        opt = self.optimizers[name]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self._guard is not None:
            self._guard.step(opt)
        else:
            opt.step()

    def get_extra_state(self) -> dict:
        return {'num_train_steps': self._num_train_steps}

    def set_extra_state(self, state: dict) -> None:
        self._num_train_steps = state['num_train_steps']
