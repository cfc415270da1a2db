"""Twin Delayed DDPG (TD3).

Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods" (arXiv:1802.09477). TD3 is DDPG with three changes, each a section of
the paper: clipped double-Q (sec. 4.2), delayed policy and target updates
(sec. 5.2) and target policy smoothing (sec. 5.3). The first two are
``DdpgAlgorithm`` settings (``num_critic_replicas=2``; ``policy_update_period``
and ``target_update_period``, both d here); only the target action differs.
"""

import functools
import math
from typing import Callable, Optional

import gin
import torch

from alf_lite.algorithms.ddpg import DdpgAlgorithm, check_critic_l2_weight_decay
from alf_lite.algorithms.noise import GaussianNoise
from alf_lite.algorithms.off_policy_algorithm import (
    check_num_critic_replicas,
    check_update_settings,
)
from alf_lite.networks import CriticNetwork, DeterministicActorNetwork
from alf_lite.optimizers import Adam, OptimizerCtor
from alf_lite.precision import FLOAT32_MAX


@gin.configurable(denylist=['observation_dim', 'action_dim'])
class Td3Algorithm(DdpgAlgorithm):
    """TD3: two critic replicas (batched), smoothed target actions, delayed actor and targets.

    The critic target is ``y = r + gamma * d * min_i Q'_i(s', a~)`` over the two
    target replicas; the actor maximises replica 0, ``Q_0(s, mu(s))``, as in the
    paper's Algorithm 1 (``Q_theta1``). The defaults follow the authors'
    reference implementation (github.com/sfujimoto/TD3), which updated the
    paper's settings from lr 1e-3 and batch 100 to lr 3e-4 and batch 256.
    Arguments not listed here mean what they mean for ``DdpgAlgorithm``.

    Args:
        num_critic_replicas: critics the target takes the minimum of (2).
        exploration_noise: built noise object; None: ``GaussianNoise()``, whose
            sigma is 0.1 unless ``GaussianNoise.sigma`` is bound.
        target_update_tau: Polyak factor of the target networks (0.005).
        policy_update_period: d: the actor and both target networks update
            every d train steps, the critics every step (2).
        target_policy_noise: std sigma of the Gaussian added to the target
            action, in normalised action units (0.2).
        target_policy_noise_clip: c: that noise is clipped to [-c, c] (0.5; inf: no clip).
        critic_l2_weight_decay: L2 penalty on the critics' weights (TD3: none).
        actor_optimizer: None: Adam, lr 3e-4.
        critic_optimizer: None: Adam, lr 3e-4.
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        actor_network_ctor: Callable = DeterministicActorNetwork,
        critic_network_ctor: Callable = CriticNetwork,
        num_critic_replicas: int = 2,
        exploration_noise: Optional[Callable] = None,
        gamma: float = 0.99,
        target_update_tau: float = 0.005,
        policy_update_period: int = 2,
        target_policy_noise: float = 0.2,
        target_policy_noise_clip: float = 0.5,
        critic_l2_weight_decay: float = 0.0,
        actor_optimizer: Optional[OptimizerCtor] = None,
        critic_optimizer: Optional[OptimizerCtor] = None,
    ):
        # Checked here too, not only by DdpgAlgorithm's constructor: an error raised
        # there would name DdpgAlgorithm, and policy_update_period as target_update_period.
        check_update_settings(
            gamma, target_update_tau, 1, policy_update_period=policy_update_period
        )
        check_num_critic_replicas(num_critic_replicas)
        check_critic_l2_weight_decay(critic_l2_weight_decay)
        # NaN too. An infinite clip leaves the noise unclipped; an infinite std would
        # put every target action at -c or +c from mu'(s').
        if not (
            target_policy_noise >= 0
            and math.isfinite(target_policy_noise)
            and target_policy_noise_clip >= 0
        ):
            raise ValueError(
                'target_policy_noise must be a finite number >= 0 and target_policy_noise_clip '
                f'a number >= 0 (inf: no clip), got {target_policy_noise} and '
                f'{target_policy_noise_clip}'
            )
        default_adam = functools.partial(Adam, lr=3e-4)
        super().__init__(
            observation_dim,
            action_dim,
            actor_network_ctor=actor_network_ctor,
            critic_network_ctor=critic_network_ctor,
            num_critic_replicas=num_critic_replicas,
            exploration_noise=(GaussianNoise() if exploration_noise is None else exploration_noise),
            gamma=gamma,
            target_update_tau=target_update_tau,
            target_update_period=policy_update_period,
            policy_update_period=policy_update_period,
            critic_l2_weight_decay=critic_l2_weight_decay,
            actor_optimizer=actor_optimizer or default_adam,
            critic_optimizer=critic_optimizer or default_adam,
        )
        self._target_policy_noise = target_policy_noise
        if target_policy_noise_clip > FLOAT32_MAX:
            # It clips no float32 noise, as inf does, and torch's clamp of the float32 noise
            # refuses it (1e300: a RuntimeError at the first update).
            target_policy_noise_clip = math.inf
        self._target_policy_noise_clip = target_policy_noise_clip

    def _target_action(self, next_observation: torch.Tensor) -> torch.Tensor:
        """Target policy smoothing (sec. 5.3): ``a~ = clip(mu'(s') + eps, -1, 1)``.

        ``eps ~ clip(N(0, sigma), -c, c)``, independently per sample and action
        dimension; the clip to the action range is the reference implementation's.
        """
        action = self._target_actor(next_observation)
        eps = (self._target_policy_noise * torch.randn_like(action)).clamp(
            -self._target_policy_noise_clip, self._target_policy_noise_clip
        )
        return (action + eps).clamp(-1.0, 1.0)
