"""A non-finite loss caught on the device, with no host synchronisation per update.

Checking ``bool(torch.isfinite(loss))`` before each optimizer step makes the
host wait for the device at every loss: on a GPU that stall costs more than
the update and forbids capturing it as a CUDA graph. The guard keeps the check
on the device instead:

- ``check(name, loss)`` sets a flag tensor once a loss is NaN or inf and
  records, the first time only, which loss, its value, and the env step and
  update it happened at;
- the optimizers take the flag as their ``found_inf`` (the mechanism AMP's
  gradient scaler uses): a fused Adam, AdamW or SGD step is then skipped on the
  device, parameters, moments and step count unchanged (SGD's momentum buffers,
  which torch makes at its first step and leaves uninitialised where that step
  is skipped, are removed once the failure is read: ``failure``);
- target network updates are skipped with it (``polyak_update(skip=...)``).

The flag stays set (until ``reset``), so every later update is a no-op too: the state
stays the one before the failing optimizer step (but for batch norm's running
statistics, which follow every batch the networks see, and the update
counters and random draws, which go on). The losses of an update are checked
in turn, before each one's step: the steps of those before the failing one
(the critic's, for an actor or alpha loss) were taken. The trainer reads the guard
(``failure()``, one host sync) at each summary and before each checkpoint,
and stops there, naming the loss and the env step at which it failed.

Timing of the stop: with the guard a run stops at the first summary or
checkpoint after the failure (at most ``min(summary_interval,
checkpoint_interval)`` env steps later), not at the failing update; the env
steps in between are collected with the last good policy and no checkpoint
holds the non-finite state.
"""

from typing import NamedTuple, Optional, Sequence

import torch


class NonFiniteLoss(NamedTuple):
    """The first non-finite loss the guard saw.

    Args:
        name: the loss, e.g. 'critic'.
        value: its value (nan, inf or -inf).
        env_steps: env steps of the trainer when it was computed.
        update: the trainer's update count when it was computed (1 for the
            first update).
    """

    name: str
    value: float
    env_steps: int
    update: int

    def __str__(self):
        return (
            f'the {self.name} loss is {self.value} at env step {self.env_steps} '
            f'(update {self.update})'
        )


class NonFiniteGuard:
    """Device-side record of the first non-finite loss; skips all optimizer steps after it.

    Args:
        loss_names: the names ``check`` may be called with (the algorithm's
            optimizers).
        device: where the flag and the record live (the parameters' device).
    """

    def __init__(self, loss_names: Sequence[str], device: torch.device):
        self._names = list(loss_names)
        self._indices = {
            name: torch.tensor([i], device=device) for i, name in enumerate(self._names)
        }
        # float32, as optimizers read found_inf: 1.0 skips their step.
        self.tripped = torch.zeros((), dtype=torch.float32, device=device)
        # The current update's (env steps, update), set before each update.
        self._now = torch.zeros(2, dtype=torch.int64, device=device)
        # (loss index, env steps, update) of the first failure; index -1: none.
        self._record = torch.tensor([-1, 0, 0], dtype=torch.int64, device=device)
        self._value = torch.zeros((), dtype=torch.float32, device=device)
        # (optimizer, parameters, skipped) of each step that made momentum buffers;
        # skipped: the flag right after that step, on the device.
        self._first_steps = []

    def attach(self, optimizer: torch.optim.Optimizer, name: str) -> None:
        """Make ``optimizer`` (the algorithm's ``name`` optimizer) skip its steps while the
        guard is tripped.

        Raises:
            ValueError: the optimizer cannot skip a step on the device (only
                fused ones can: Adam, AdamW and SGD with ``fused=True``).
        """
        if not getattr(optimizer, '_step_supports_amp_scaling', False):
            raise ValueError(
                f'the {name} optimizer, {type(optimizer).__name__}, cannot skip a step '
                'without a host sync; the '
                'non-finite guard needs a fused optimizer (Adam, AdamW or SGD with '
                'fused=True; alf_lite.optimizers.Adam and AdamW are fused by default). '
                'Without a CUDA graph, TrainerConfig.defer_non_finite_checks = False checks '
                'each loss on the host instead, at a sync per loss.'
            )
        optimizer.found_inf = self.tripped

    def begin_update(self, env_steps: int, update: int) -> None:
        """Tell the guard which env step and update the next checks belong to.

        Called on the host before each update (outside any CUDA graph); it
        launches two fills and reads nothing back.

        Args:
            env_steps: the trainer's env steps.
            update: the number of this update (1 for the first).
        """
        self._now[0].fill_(env_steps)
        self._now[1].fill_(update)

    def check(self, name: str, loss: torch.Tensor) -> None:
        """Trip the guard if ``loss`` is not finite; record the first failure. No host sync."""
        with torch.no_grad():
            bad = ~torch.isfinite(loss.detach())
            first = bad & (self.tripped == 0)
            failure = torch.cat([self._indices[name], self._now])
            self._record.copy_(torch.where(first, failure, self._record))
            self._value.copy_(torch.where(first, loss.detach().float(), self._value))
            self.tripped.copy_(torch.maximum(self.tripped, bad.float()))

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``, skipped on the device while the guard is tripped. No host sync.

        A step that makes momentum buffers (SGD's first) is noted with whether it was
        skipped: torch leaves the buffers of a skipped one uninitialised.
        """
        unborn = [
            p
            for group in optimizer.param_groups
            if group.get('momentum')
            for p in group['params']
            if p.grad is not None and 'momentum_buffer' not in optimizer.state.get(p, {})
        ]
        optimizer.step()
        if unborn:
            self._first_steps.append((optimizer, unborn, self.tripped.clone()))

    def _drop_skipped_first_steps(self) -> None:
        """Remove the momentum buffers that a skipped first step made: the optimizer
        state is then the one from before it, as of every other skipped step."""
        for optimizer, params, skipped in self._first_steps:
            if skipped.item():
                for p in params:
                    state = optimizer.state[p]
                    state.pop('momentum_buffer', None)
                    if not state:
                        del optimizer.state[p]
        self._first_steps.clear()

    def reset(self) -> None:
        """Forget the failure, if any: the optimizer steps are taken again. No host sync.

        For a state restored from before the failure (the trainer's next ``train()``); the
        tensors stay the same ones, so a captured CUDA graph reads the reset values.
        """
        # They belong to the optimizer state that the caller replaced.
        self._first_steps.clear()
        with torch.no_grad():
            self.tripped.zero_()
            self._record.fill_(0)
            self._record[0].fill_(-1)
            self._value.zero_()

    def failure(self) -> Optional[NonFiniteLoss]:
        """The first non-finite loss, or None. Reads the device: call it at summary time.

        With one, the momentum buffers that a skipped first step made are removed: the
        state is then the one from before the failing step, for a checkpoint to keep.
        """
        index, env_steps, update = self._record.tolist()
        if index < 0:
            self._first_steps.clear()  # none was skipped: the guard never tripped
            return None
        self._drop_skipped_first_steps()
        return NonFiniteLoss(self._names[index], self._value.item(), env_steps, update)
