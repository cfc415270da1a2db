"""What every algorithm inherits: its optimizer steps and the ranges of its update settings."""

import pytest
import torch

from alf_lite.algorithms.off_policy_algorithm import OffPolicyAlgorithm, check_update_settings


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


@pytest.mark.parametrize('name', ['target_update_period', 'policy_update_period'])
def test_a_bool_is_no_period(name):
    periods = {'target_update_period': 1, 'policy_update_period': 1, name: True}
    with pytest.raises(ValueError, match=f'^{name} must be an integer >= 1, got True$'):
        check_update_settings(0.99, 0.005, **periods)
