"""The one interface between the trainer and an off-policy algorithm, and shared TD helpers."""
from typing import Dict, NamedTuple

import torch
import torch.nn as nn

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
        next_observation=flat(batch.observation[:, 1:]))


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


def td_target(reward: torch.Tensor, discount: torch.Tensor, gamma: float,
              next_value: torch.Tensor) -> torch.Tensor:
    """``r[t+1] + gamma * discount[t+1] * V(s[t+1])``; discount 0 (termination): no bootstrap."""
    return reward + gamma * discount * next_value


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over entries where ``mask`` is 1; 0 when the mask is empty."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target = tau * online + (1 - tau) * target`` for every parameter, in one foreach call."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)
    for t, o in zip(target.buffers(), online.buffers()):
        t.copy_(o)


class NonFiniteLossError(FloatingPointError):
    """A loss was NaN or inf; raised before its optimizer step, so the weights stay finite.

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
    its gradients out of that backward pass (and saves computing them).
    """

    def __init__(self, module: nn.Module):
        self._params = list(module.parameters())

    def __enter__(self):
        for p in self._params:
            p.requires_grad_(False)

    def __exit__(self, *exc):
        for p in self._params:
            p.requires_grad_(True)


class OffPolicyAlgorithm(nn.Module):
    """What the trainer calls: act for evaluation, act for collection, learn from a batch.

    Subclasses create their networks and optimizers from ``observation_dim`` and
    ``action_dim`` and register the optimizers in ``self.optimizers``; actions
    are always normalised to [-1, 1]. ``self._num_train_steps`` counts
    ``train_step`` calls (for update periods) and is saved with the module.
    """

    def __init__(self, observation_dim: int, action_dim: int):
        super().__init__()
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        self.optimizers: Dict[str, torch.optim.Optimizer] = {}
        self._num_train_steps = 0

    def predict_step(self, observation: torch.Tensor) -> torch.Tensor:
        """The deterministic action for evaluation, ``[N, action_dim]``."""
        raise NotImplementedError

    def rollout_step(self, time_step: TimeStep) -> torch.Tensor:
        """The exploratory action for collection, ``[N, action_dim]``."""
        raise NotImplementedError

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

    def optimizer_step(self, name: str, loss: torch.Tensor) -> None:
        """Zero the gradients of ``self.optimizers[name]``, backpropagate ``loss``, step.

        Raises:
            NonFiniteLossError: if ``loss`` is NaN or inf (nothing is changed then).
        """
        if not torch.isfinite(loss):
            raise NonFiniteLossError(name, loss.item())
        opt = self.optimizers[name]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def get_extra_state(self) -> dict:
        return {'num_train_steps': self._num_train_steps}

    def set_extra_state(self, state: dict) -> None:
        self._num_train_steps = state['num_train_steps']
