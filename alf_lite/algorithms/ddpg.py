"""Deep Deterministic Policy Gradient.

Lillicrap et al. 2016, "Continuous control with deep reinforcement learning"
(arXiv:1509.02971). Equation numbers below refer to that paper; ``train_step``
is its Algorithm 1 after the minibatch is sampled.
"""

import copy
import math
from typing import Callable, Dict, Hashable, Optional

import gin
import torch
import torch.nn as nn

from alf_lite.algorithms.noise import OUNoise, check_exploration_noise, try_exploration_noise
from alf_lite.algorithms.off_policy_algorithm import (
    OffPolicyAlgorithm,
    check_update_settings,
    frozen,
    masked_mean,
    td_target,
    transitions,
)
from alf_lite.data import Experience, TimeStep
from alf_lite.networks import BatchedLinear, CriticNetwork, DeterministicActorNetwork
from alf_lite.optimizers import OptimizerCtor, make_optimizer


def sum_of_squared_weights(module: nn.Module) -> torch.Tensor:
    """``sum(w^2)`` over the weight matrices of ``module``'s linear layers (no biases, no norms)."""
    return sum(
        m.weight.square().sum()
        for m in module.modules()
        if isinstance(m, (nn.Linear, BatchedLinear))
    )


def check_critic_l2_weight_decay(critic_l2_weight_decay: float) -> None:
    """Refuse, naming it, a ``critic_l2_weight_decay`` that is negative, NaN (the penalty would
    silently be left out) or infinite (the first critic loss would be inf)."""
    if not (critic_l2_weight_decay >= 0 and math.isfinite(critic_l2_weight_decay)):
        raise ValueError(
            f'critic_l2_weight_decay must be a finite number >= 0, got {critic_l2_weight_decay}'
        )


@gin.configurable(denylist=['observation_dim', 'action_dim'])
class DdpgAlgorithm(OffPolicyAlgorithm):
    """DDPG: deterministic actor mu(s), critic Q(s, a), exploration noise, slowly tracking targets.

    The defaults are the paper's algorithm settings; the paper's networks (400-300,
    action into the critic's second layer, batch norm, final layers +-3e-3) are
    switches of the network ctors: ``examples/common/ddpg.gin`` sets them all.

    Args:
        observation_dim: size of the observation vector (given by the trainer).
        action_dim: size of the action vector (given by the trainer).
        actor_network_ctor: ``ctor(observation_dim, action_dim)`` of the policy,
            returning actions in [-1, 1].
        critic_network_ctor: ``ctor(observation_dim, action_dim, num_replicas=R)``
            whose ``forward(observation, action)`` returns ``[B, R]`` Q values.
            Where ``forward`` also takes ``num_replicas`` (``CriticNetwork``),
            the actor loss computes replica 0 alone with ``num_replicas=1``.
        num_critic_replicas: 1 for DDPG. With R > 1 every replica regresses on
            one target that uses the minimum over the target replicas (TD3's
            clipped double-Q), and the actor follows replica 0.
        exploration_noise: a built noise object (``@OUNoise()`` or
            ``@GaussianNoise()`` in gin; see ``alf_lite/algorithms/noise.py``),
            called as ``noise(step_type, action)``. It is added in the
            normalised action space and the sum clipped to [-1, 1]. A noise
            with state goes through checkpoints by its ``state_dict`` and
            ``load_state_dict(state, shape)`` (as ``OUNoise``); one without them
            restarts its state on resume. It is called on the actions of the run's
            training envs alone (``check_rollout`` tries it there). None: the paper's
            ``OUNoise(theta=0.15, sigma=0.2)`` (with ``dt=1e-2``).
        gamma: discount factor of the return.
        target_update_tau: Polyak factor, ``target = tau * online + (1 - tau) * target``,
            for the target actor and critic (paper: 0.001).
        target_update_period: update both target networks every this many train steps.
        policy_update_period: update the actor every this many train steps
            (the critic updates every step); 1 for DDPG, 2 for TD3.
        critic_l2_weight_decay: ``c``, the paper's "L2 weight decay" (0.01):
            adds ``(c / 2) * sum(w^2)`` over the critic's weight matrices (no
            biases or batch-norm parameters) to the critic loss, so each weight
            gets the gradient ``c * w`` before Adam's per-parameter scaling. The
            actor has no penalty. For decay of every parameter set
            ``critic/Adam.weight_decay``; for decay outside Adam's scaling use
            ``critic_optimizer = @critic/AdamW``.
        actor_optimizer: optimizer ctor taking parameters; None: Adam, lr 1e-4 (paper).
        critic_optimizer: as ``actor_optimizer``, for the critic; None: Adam, lr 1e-3 (paper).
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        actor_network_ctor: Callable = DeterministicActorNetwork,
        critic_network_ctor: Callable = CriticNetwork,
        num_critic_replicas: int = 1,
        exploration_noise: Optional[Callable] = None,
        gamma: float = 0.99,
        target_update_tau: float = 0.001,
        target_update_period: int = 1,
        policy_update_period: int = 1,
        critic_l2_weight_decay: float = 1e-2,
        actor_optimizer: Optional[OptimizerCtor] = None,
        critic_optimizer: Optional[OptimizerCtor] = None,
    ):
        super().__init__(observation_dim, action_dim)
        check_update_settings(
            gamma,
            target_update_tau,
            target_update_period,
            policy_update_period=policy_update_period,
        )
        check_critic_l2_weight_decay(critic_l2_weight_decay)
        if exploration_noise is not None:
            check_exploration_noise(f'{type(self).__name__}.exploration_noise', exploration_noise)
        self._build_actor_and_critic(
            actor_network_ctor,
            critic_network_ctor,
            num_critic_replicas,
            sampling=False,
            first_replica_only=True,
        )
        if critic_l2_weight_decay > 0 and not any(
            isinstance(m, (nn.Linear, BatchedLinear)) for m in self._critic.modules()
        ):
            name = type(self).__name__
            raise ValueError(
                f'{name}.critic_l2_weight_decay = {critic_l2_weight_decay} penalises the weights '
                "of the critic's nn.Linear and BatchedLinear layers, and the "
                f'{type(self._critic).__name__} that {name}.critic_network_ctor built has none: '
                f'set {name}.critic_l2_weight_decay = 0.0 (critic/Adam.weight_decay decays '
                'every parameter).'
            )
        # Targets start as exact copies (Algorithm 1) and always run in eval
        # mode (OffPolicyAlgorithm.train).
        self._target_actor = copy.deepcopy(self._actor).requires_grad_(False).eval()
        self._target_critic = copy.deepcopy(self._critic).requires_grad_(False).eval()
        self._frozen_critic = frozen(self._critic)  # reused: its parameter list is built once
        # The actor loss needs replica 0 only: computed alone where the critic can
        # (self._first_replica_only).
        self._exploration_noise = OUNoise() if exploration_noise is None else exploration_noise
        self._gamma = gamma
        self._tau = target_update_tau
        self._target_update_period = target_update_period
        self._policy_update_period = policy_update_period
        self._critic_l2_weight_decay = critic_l2_weight_decay
        # Reported on train steps that skip the actor update; updated in place,
        # so a captured update that skips it still reports the latest one.
        self.register_buffer('_actor_loss', torch.tensor(float('nan')), persistent=False)
        name = type(self).__name__
        self.optimizers = {
            'actor': make_optimizer(
                actor_optimizer, self._actor.parameters(), 1e-4, f'{name}.actor_optimizer'
            ),
            'critic': make_optimizer(
                critic_optimizer, self._critic.parameters(), 1e-3, f'{name}.critic_optimizer'
            ),
        }

    @property
    def train_step_cycle(self) -> int:
        return math.lcm(self._policy_update_period, self._target_update_period)

    def train_step_phase(self, num_train_steps: int) -> Hashable:
        if type(self).train_step_cycle is not DdpgAlgorithm.train_step_cycle:
            # A subclass's cycle of its own, which its train_step branches on: a phase
            # per step of it.
            return super().train_step_phase(num_train_steps)
        # Whether this step updates the actor, and the targets.
        step = num_train_steps + 1
        return step % self._policy_update_period == 0, step % self._target_update_period == 0

    @torch.no_grad()
    def rollout_step(self, time_step: TimeStep) -> torch.Tensor:
        # Exploration policy (eq. 7): mu(s) + N, then clipped to the action range.
        action = self._actor(time_step.observation)
        noise = self._exploration_noise(time_step.step_type, action)
        return (action + noise).clamp(-1.0, 1.0)

    def check_rollout(self, num_envs: int) -> None:
        # Tried on the run's own number of envs: a noise of one's own may keep a state of
        # that many rows.
        try_exploration_noise(
            f'{type(self).__name__}.exploration_noise',
            self._exploration_noise,
            num_envs,
            self.action_dim,
        )

    def rollout_state(self) -> dict:
        noise = self._exploration_noise
        return {'exploration_noise': noise.state_dict()} if hasattr(noise, 'state_dict') else {}

    def load_rollout_state(self, state: dict, num_envs: int) -> None:
        # A noise without state (a resume that changed the noise to @GaussianNoise())
        # has nothing to continue: the envs go on with it.
        if 'exploration_noise' in state and hasattr(self._exploration_noise, 'load_state_dict'):
            self._exploration_noise.load_state_dict(
                state['exploration_noise'], shape=(num_envs, self.action_dim)
            )

    def _target_action(self, next_observation: torch.Tensor) -> torch.Tensor:
        """The action the critic target evaluates at s': ``mu'(s')`` of the target actor."""
        return self._target_actor(next_observation)

    def train_step(self, batch: Experience, loss_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        tr = transitions(batch)
        mask = loss_mask.reshape(-1).to(tr.reward.dtype)

        # Critic target (eq. 5): y = r + gamma * d * Q'(s', mu'(s')), target actor
        # and target critic; the minimum over target replicas when R > 1.
        with torch.no_grad():
            next_action = self._target_action(tr.next_observation)
            next_q = self._target_critic(tr.next_observation, next_action).min(dim=-1).values
            target = td_target(tr.reward, tr.discount, self._gamma, next_q)
        # Critic loss (eq. 4): (Q_i(s, a) - y)^2 summed over replicas, without the
        # 1/2 of sac.py, as eq. 4 writes it; plus the L2 penalty, whose 1/2 makes
        # c the decay rate of the gradient c * w.
        q = self._critic(tr.observation, tr.action)
        critic_loss = masked_mean((q - target.unsqueeze(-1)).square().sum(-1), mask)
        l2_loss = None
        if self._critic_l2_weight_decay > 0:
            l2_loss = 0.5 * self._critic_l2_weight_decay * sum_of_squared_weights(self._critic)
            critic_loss = critic_loss + l2_loss
        self.optimizer_step('critic', critic_loss)

        # Counted once the whole step is taken, as SacAlgorithm does: an actor loss that
        # raises leaves the count at the updates done, which the trainer's equals.
        step = self._num_train_steps + 1
        if step % self._policy_update_period == 0:
            # Actor loss -Q_0(s, mu(s)): its gradient is the deterministic policy
            # gradient (eq. 6), grad_a Q * grad_theta mu. The frozen critic passes
            # the gradient to the actor without collecting any itself. (With batch
            # norm this pass, like the critic loss's, normalises s with the batch's
            # statistics and updates the running ones: each batch counts twice.)
            with self._frozen_critic:
                q_mu = self._critic(
                    tr.observation, self._actor(tr.observation), **self._first_replica_only
                )[:, 0]
            actor_loss = masked_mean(-q_mu, mask)
            self.optimizer_step('actor', actor_loss)
            self._actor_loss.copy_(actor_loss.detach())
        if step % self._target_update_period == 0:
            # Soft target updates (Algorithm 1): theta' = tau * theta + (1 - tau) * theta'.
            self.soft_update(self._target_actor, self._actor, self._tau)
            self.soft_update(self._target_critic, self._critic, self._tau)
        self._num_train_steps = step

        scalars = {
            'critic_loss': critic_loss.detach(),
            'actor_loss': self._actor_loss,
            'q_mean': masked_mean(q.detach().mean(-1), mask),
        }
        if l2_loss is not None:
            # Its share of critic_loss, which is then no TD error alone: the penalty
            # puts a floor under it whatever the errors.
            scalars['critic_l2_loss'] = l2_loss.detach()
        return scalars

    def get_extra_state(self):
        return {**super().get_extra_state(), 'actor_loss': self._actor_loss}

    def set_extra_state(self, state):
        super().set_extra_state(state)
        self._actor_loss.copy_(state['actor_loss'])
