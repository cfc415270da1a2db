"""Soft Actor-Critic with automatic entropy tuning.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"
(arXiv:1812.05905). Equation numbers below refer to that paper.
"""

import copy
import math
import numbers
from typing import Callable, Dict, Hashable, NamedTuple, Optional

import gin
import torch
import torch.nn as nn

from alf_lite.algorithms.off_policy_algorithm import (
    OffPolicyAlgorithm,
    check_update_settings,
    frozen,
    masked_mean,
    td_target,
    transitions,
)
from alf_lite.data import Experience, TimeStep
from alf_lite.networks import CriticNetwork, TanhNormalActorNetwork
from alf_lite.optimizers import OptimizerCtor, make_optimizer

# Adam's learning rate for actor, critics and alpha when no optimizer is given (the paper's).
DEFAULT_LEARNING_RATE = 3e-4


def _finite(value) -> bool:
    """Whether ``value`` is a finite real number (not NaN or inf, not a string)."""
    return isinstance(value, numbers.Real) and math.isfinite(value)


def _float32(value: float) -> torch.Tensor:
    """``value`` as the float32 the losses compute with (beyond 3.4e38: inf)."""
    return torch.tensor(float(value), dtype=torch.float32, device='cpu')


class PolicySamples(NamedTuple):
    """Actions sampled from the policy for one update, one row per transition."""

    action: torch.Tensor  # a ~ pi(.|s), reparameterised: the actor loss
    log_prob: torch.Tensor  # log pi(a|s), with gradient: the actor loss
    next_action: torch.Tensor  # a' ~ pi(.|s'), no gradient: the critic target
    next_log_prob: torch.Tensor  # log pi(a'|s'), no gradient: the critic target
    alpha_log_prob: torch.Tensor  # log pi(a|s), no gradient: the temperature loss


@gin.configurable(denylist=['observation_dim', 'action_dim'])
class SacAlgorithm(OffPolicyAlgorithm):
    """SAC: tanh-Gaussian actor, clipped double-Q critics, learned temperature alpha.

    Args:
        observation_dim: size of the observation vector (given by the trainer).
        action_dim: size of the action vector (given by the trainer).
        actor_network_ctor: ``ctor(observation_dim, action_dim)`` of the policy;
            its ``sample(observation, noise=None)`` returns a reparameterised
            action and its log-probability.
        critic_network_ctor: ``ctor(observation_dim, action_dim, num_replicas=R)``
            returning ``[B, R]`` Q values.
        num_critic_replicas: number of critics; the target uses their minimum.
        gamma: discount factor of the return.
        target_update_tau: Polyak factor, ``target = tau * online + (1 - tau) * target``.
        target_update_period: update the target critics every this many train steps.
        target_entropy: entropy alpha aims for; None means ``-action_dim``.
        initial_log_alpha: starting ``log(alpha)``; 0 gives alpha = 1. At most
            88.72, the log of the largest float32: alpha is a float32.
        resample_action_per_loss: False: one action sample per state of a
            window, reused by the actor loss, the alpha loss and, where the
            state is also the next state of the row before, the critic target,
            as ALF does. With 2-row windows no state is both, so only the alpha
            loss differs between the settings. True: a fresh sample for each
            loss, as tf-agents does (one more actor pass without gradient per
            update with 2-row windows, nearly two with long windows).
        actor_optimizer: optimizer ctor taking parameters; None: Adam, lr
            ``DEFAULT_LEARNING_RATE`` (3e-4).
        critic_optimizer: as ``actor_optimizer``, for the critics.
        alpha_optimizer: as ``actor_optimizer``, for ``log_alpha``.
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        actor_network_ctor: Callable = TanhNormalActorNetwork,
        critic_network_ctor: Callable = CriticNetwork,
        num_critic_replicas: int = 2,
        gamma: float = 0.99,
        target_update_tau: float = 0.005,
        target_update_period: int = 1,
        target_entropy: Optional[float] = None,
        initial_log_alpha: float = 0.0,
        resample_action_per_loss: bool = False,
        actor_optimizer: Optional[OptimizerCtor] = None,
        critic_optimizer: Optional[OptimizerCtor] = None,
        alpha_optimizer: Optional[OptimizerCtor] = None,
    ):
        super().__init__(observation_dim, action_dim)
        check_update_settings(gamma, target_update_tau, target_update_period)
        if target_entropy is not None and not _finite(target_entropy):
            raise ValueError(
                f'target_entropy must be a finite number or None, got {target_entropy!r}'
            )
        if not _finite(initial_log_alpha):
            raise ValueError(
                f'initial_log_alpha must be a finite number, got {initial_log_alpha!r}'
            )
        # Else the losses of the first update are not finite (alpha or the alpha loss is inf),
        # which is blamed on the rewards and the learning rates.
        if target_entropy is not None and not _float32(target_entropy).isfinite():
            raise ValueError(
                'target_entropy must be at most 3.4e38 in magnitude, the largest float32, '
                f'got {target_entropy!r}'
            )
        log_alpha = _float32(initial_log_alpha)
        if not (log_alpha.isfinite() and log_alpha.exp().isfinite()):
            raise ValueError(
                'initial_log_alpha must be in [-3.4e38, 88.72]: alpha = exp(initial_log_alpha) '
                f'is a float32, whose largest is exp(88.72), got {initial_log_alpha!r}'
            )
        self._build_actor_and_critic(
            actor_network_ctor, critic_network_ctor, num_critic_replicas, sampling=True
        )
        # Always in eval mode (OffPolicyAlgorithm.train).
        self._target_critic = copy.deepcopy(self._critic).requires_grad_(False).eval()
        self._frozen_critic = frozen(self._critic)  # reused: its parameter list is built once
        self._log_alpha = nn.Parameter(torch.tensor(float(initial_log_alpha)))
        self._gamma = gamma
        self._tau = target_update_tau
        self._target_update_period = target_update_period
        self._target_entropy = float(-action_dim if target_entropy is None else target_entropy)
        self._resample = resample_action_per_loss
        name = type(self).__name__
        self.optimizers = {
            'actor': make_optimizer(
                actor_optimizer,
                self._actor.parameters(),
                DEFAULT_LEARNING_RATE,
                f'{name}.actor_optimizer',
            ),
            'critic': make_optimizer(
                critic_optimizer,
                self._critic.parameters(),
                DEFAULT_LEARNING_RATE,
                f'{name}.critic_optimizer',
            ),
            'alpha': make_optimizer(
                alpha_optimizer, [self._log_alpha], DEFAULT_LEARNING_RATE, f'{name}.alpha_optimizer'
            ),
        }

    @property
    def train_step_cycle(self) -> int:
        return self._target_update_period

    def train_step_phase(self, num_train_steps: int) -> Hashable:
        if type(self).train_step_cycle is not SacAlgorithm.train_step_cycle:
            # A subclass's cycle of its own, which its train_step branches on: a phase
            # per step of it.
            return super().train_step_phase(num_train_steps)
        # Whether this step updates the target critic.
        return (num_train_steps + 1) % self._target_update_period == 0

    @torch.no_grad()
    def rollout_step(self, time_step: TimeStep) -> torch.Tensor:
        action, _ = self._actor.sample(time_step.observation)
        return action

    def _sample_actions(self, observation: torch.Tensor) -> PolicySamples:
        """Policy samples at s and s' of every transition of ``[B, T]`` windows' observations."""
        # Row i of each sample belongs to row i of ``transitions(batch)``: window-major, then t.
        b, t = observation.shape[:2]
        obs = observation[:, :-1].flatten(0, 1)
        if self._resample:
            action, log_prob = self._actor.sample(obs)
            with torch.no_grad():
                next_action, next_log_prob = self._actor.sample(observation[:, 1:].flatten(0, 1))
                _, alpha_log_prob = self._actor.sample(obs)
            return PolicySamples(action, log_prob, next_action, next_log_prob, alpha_log_prob)
        # Rows 0..T-2 start a transition and need the gradient; the last row is
        # only a next state, so it is sampled without building a graph (and
        # without a backward pass through it). The noise is drawn for all rows
        # at once, in row order.
        noise = torch.randn(b, t, self.action_dim, device=observation.device)
        action, log_prob = self._actor.sample(obs, noise[:, :-1].flatten(0, 1))
        with torch.no_grad():
            last_action, last_log_prob = self._actor.sample(observation[:, -1], noise[:, -1])
        next_action = torch.cat(
            [action.detach().reshape(b, t - 1, -1)[:, 1:], last_action.unsqueeze(1)], dim=1
        ).flatten(0, 1)
        next_log_prob = torch.cat(
            [log_prob.detach().reshape(b, t - 1)[:, 1:], last_log_prob.unsqueeze(1)], dim=1
        ).flatten()
        return PolicySamples(action, log_prob, next_action, next_log_prob, log_prob.detach())

    def train_step(self, batch: Experience, loss_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        tr = transitions(batch)
        mask = loss_mask.reshape(-1).to(tr.reward.dtype)
        alpha = self._log_alpha.detach().exp()
        pi = self._sample_actions(batch.observation)

        # Soft Q target (eq. 2-3): y = r + gamma * d * (min_i Q'_i(s', a') - alpha * log pi(a'|s')).
        with torch.no_grad():
            next_q = self._target_critic(tr.next_observation, pi.next_action).min(dim=-1).values
            target = td_target(
                tr.reward, tr.discount, self._gamma, next_q - alpha * pi.next_log_prob
            )
        # Critic loss (eq. 5), every replica regressed on the same target.
        q = self._critic(tr.observation, tr.action)
        critic_loss = masked_mean(0.5 * (q - target.unsqueeze(-1)).square().sum(-1), mask)
        self.optimizer_step('critic', critic_loss)

        # Policy loss (eq. 7): E[alpha * log pi(a|s) - min_i Q_i(s, a)], a reparameterised.
        with self._frozen_critic:
            q_pi = self._critic(tr.observation, pi.action)
        # On CUDA, amin: min(...).values's backward is a scatter, which CUDA's deterministic
        # mode (on while training) runs through index_put_, whose implementation some torch
        # versions gave a host copy that a CUDA graph's capture refuses; amin's backward is
        # elementwise. The same forward; at an exact tie amin splits the gradient between the
        # replicas where min gives it to one. The CPU keeps min, and its same-seed numbers.
        q_pi = q_pi.amin(dim=-1) if q_pi.is_cuda else q_pi.min(dim=-1).values
        actor_loss = masked_mean(alpha * pi.log_prob - q_pi, mask)
        self.optimizer_step('actor', actor_loss)

        # Temperature loss: -log(alpha) * (log pi(a|s) + target_entropy), the log-alpha
        # form of eq. 18's -alpha * (log pi(a|s) + target_entropy), as the authors'
        # softlearning code and Stable-Baselines3 use: optimising log(alpha) keeps
        # alpha positive, and the gradient has eq. 18's sign.
        alpha_loss = masked_mean(
            -self._log_alpha * (pi.alpha_log_prob + self._target_entropy), mask
        )
        self.optimizer_step('alpha', alpha_loss)

        self._num_train_steps += 1
        if self._num_train_steps % self._target_update_period == 0:
            self.soft_update(self._target_critic, self._critic, self._tau)

        return {
            'critic_loss': critic_loss.detach(),
            'actor_loss': actor_loss.detach(),
            'alpha_loss': alpha_loss.detach(),
            'alpha': alpha,
            'entropy': -masked_mean(pi.log_prob.detach(), mask),
            'q_mean': masked_mean(q.detach().mean(-1), mask),
        }
