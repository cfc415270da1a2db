"""Exploration noise: the OU process's statistics and its per-env restarts, Gaussian noise."""

import math
import re

import pytest
import torch

from alf_lite.algorithms import GaussianNoise, OUNoise
from alf_lite.data import StepType

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def steps(noise, num_steps, num_envs, action_dim=1):
    """Run ``noise`` for ``num_steps`` MID steps (the first one FIRST); return the last value."""
    action = torch.zeros(num_envs, action_dim)
    x = noise(torch.full((num_envs,), F, dtype=torch.uint8), action)
    for _ in range(num_steps - 1):
        x = noise(torch.full((num_envs,), M, dtype=torch.uint8), action)
    return x


def test_ou_stationary_std_hand_computed():
    # sigma * sqrt(dt) / sqrt(1 - (1 - theta * dt)^2):
    # dt = 1:    0.2 / sqrt(1 - 0.85^2) = 0.2 / 0.52678 = 0.37967;
    # dt = 1e-2: 0.02 / sqrt(1 - 0.9985^2) = 0.02 / 0.054751 = 0.36529,
    # close to the continuous-time sigma / sqrt(2 theta) = 0.36515.
    assert OUNoise(0.15, 0.2, dt=1.0).stationary_std() == pytest.approx(0.37967, abs=1e-5)
    assert OUNoise(0.15, 0.2, dt=1e-2).stationary_std() == pytest.approx(0.36529, abs=1e-5)


@pytest.mark.parametrize('dt', [1.0, 0.1])
def test_ou_sample_std_matches_exact_stationary_std(dt):
    torch.manual_seed(0)
    noise = OUNoise(theta=0.15, sigma=0.2, dt=dt)
    # 10 correlation times 1 / (theta * dt): the start at mu is forgotten (its share
    # of the variance, (1 - theta * dt)^(2 * steps), is below 1e-8).
    x = steps(noise, int(10 / (0.15 * dt)), num_envs=40000)
    # The std of 40000 samples is within about 0.35% (one standard error) of the
    # truth: 1.5% is 4 standard errors, and tells the exact 0.3797 at dt = 1 from
    # the continuous-time sigma / sqrt(2 theta) = 0.3651 (3.8% below it).
    assert x.std().item() == pytest.approx(noise.stationary_std(), rel=0.015)
    assert abs(x.mean().item()) < 4 * noise.stationary_std() / math.sqrt(40000)


def test_ou_reverts_to_its_mean_by_factor_one_minus_theta_dt_per_step():
    torch.manual_seed(0)
    noise = OUNoise(theta=0.15, sigma=0.2, dt=1.0, mu=0.3)
    x0 = steps(noise, 100, num_envs=20000)
    x5 = x0
    for _ in range(5):
        x5 = noise(torch.full((20000,), M, dtype=torch.uint8), torch.zeros(20000, 1))
    # E[x5 - mu | x0] = (1 - theta * dt)^5 (x0 - mu) = 0.85^5 (x0 - mu) = 0.44371 (x0 - mu).
    d0, d5 = x0 - 0.3, x5 - 0.3
    slope = (d0 * d5).sum() / d0.square().sum()
    assert slope.item() == pytest.approx(0.85**5, abs=0.02)
    assert x5.mean().item() == pytest.approx(0.3, abs=0.01)


def test_ou_step_is_the_euler_maruyama_recurrence():
    noise = OUNoise(theta=0.5, sigma=0.4, dt=0.25, mu=0.1)
    step_type = torch.tensor([F], dtype=torch.uint8)
    torch.manual_seed(3)
    z1, z2 = torch.randn(1, 1), torch.randn(1, 1)
    torch.manual_seed(3)
    x1 = noise(step_type, torch.zeros(1, 1))
    x2 = noise(torch.tensor([M], dtype=torch.uint8), torch.zeros(1, 1))
    # From mu: x1 = mu + sigma * sqrt(dt) * z1 = 0.1 + 0.2 * z1;
    # x2 = x1 + 0.5 * (0.1 - x1) * 0.25 + 0.2 * z2 = 0.875 * x1 + 0.0125 + 0.2 * z2.
    assert torch.allclose(x1, 0.1 + 0.2 * z1)
    assert torch.allclose(x2, 0.875 * x1 + 0.0125 + 0.2 * z2)


def test_ou_process_starts_at_mu_also_without_a_first_step():
    # A first call at a MID step (e.g. a resumed run without saved noise state)
    # steps from mu, not from 0: x1 = mu + 0 + sigma * sqrt(dt) * z1 = 0.3 + 0.2 * z1.
    noise = OUNoise(theta=0.5, sigma=0.4, dt=0.25, mu=0.3)
    torch.manual_seed(3)
    z1 = torch.randn(2, 1)
    torch.manual_seed(3)
    x1 = noise(torch.tensor([M, M], dtype=torch.uint8), torch.zeros(2, 1))
    assert torch.allclose(x1, 0.3 + 0.2 * z1)


def test_ou_with_theta_dt_one_is_white_noise_around_mu():
    # theta * dt = 1, the edge of the allowed range: x[t+1] = mu + sigma * N, no memory.
    noise = OUNoise(theta=2.0, sigma=0.4, dt=0.5, mu=0.1)
    torch.manual_seed(0)
    z1, z2 = torch.randn(3, 2), torch.randn(3, 2)
    torch.manual_seed(0)
    x1 = noise(torch.full((3,), F, dtype=torch.uint8), torch.zeros(3, 2))
    x2 = noise(torch.full((3,), M, dtype=torch.uint8), torch.zeros(3, 2))
    # sigma * sqrt(dt) = 0.4 * 0.70711 = 0.28284.
    assert torch.allclose(x1, 0.1 + 0.28284 * z1, atol=1e-5)
    assert torch.allclose(x2, 0.1 + 0.28284 * z2, atol=1e-5)
    assert noise.stationary_std() == pytest.approx(0.28284, abs=1e-5)


def test_ou_restarts_only_the_envs_at_a_first_step():
    noise = OUNoise(theta=0.15, sigma=0.2, dt=1.0)
    torch.manual_seed(0)
    before = steps(noise, 10, num_envs=3, action_dim=2).clone()
    torch.manual_seed(1)
    z = torch.randn(3, 2)
    torch.manual_seed(1)
    # Env 1 starts an episode; env 2 ends one (its next step will be FIRST).
    x = noise(torch.tensor([M, F, L], dtype=torch.uint8), torch.zeros(3, 2))
    continued = 0.85 * before + 0.2 * z
    assert torch.allclose(x[0], continued[0]) and torch.allclose(x[2], continued[2])
    assert torch.allclose(x[1], 0.2 * z[1])


def test_ou_state_is_sized_on_first_call_one_process_per_env():
    torch.manual_seed(0)
    noise = OUNoise(theta=0.15, sigma=0.2, dt=1.0)
    x = steps(noise, 50, num_envs=2, action_dim=3)
    assert x.shape == (2, 3)
    assert not torch.allclose(x[0], x[1])


def test_noise_is_reproducible_from_torch_seed():
    def draw():
        torch.manual_seed(5)
        return steps(OUNoise(), 20, num_envs=2), GaussianNoise(0.1)(None, torch.zeros(2, 1))

    (ou_a, g_a), (ou_b, g_b) = draw(), draw()
    assert torch.equal(ou_a, ou_b) and torch.equal(g_a, g_b)


def test_gaussian_noise_has_std_sigma_and_no_memory():
    torch.manual_seed(0)
    noise = GaussianNoise(sigma=0.3)
    first = noise(torch.full((20000,), M, dtype=torch.uint8), torch.zeros(20000, 1))
    second = noise(torch.full((20000,), M, dtype=torch.uint8), torch.zeros(20000, 1))
    assert first.std().item() == pytest.approx(0.3, rel=0.03)
    assert abs((first * second).mean().item()) < 0.005


def test_gaussian_noise_draws_every_env_and_dimension_independently():
    torch.manual_seed(0)
    z = torch.randn(4, 3)
    torch.manual_seed(0)
    assert torch.equal(GaussianNoise(sigma=0.3)(None, torch.zeros(4, 3)), 0.3 * z)


def test_zero_sigma_is_allowed_and_adds_nothing():
    action = torch.zeros(5, 2)
    assert torch.equal(GaussianNoise(sigma=0.0)(None, action), action)
    torch.manual_seed(0)
    x = steps(OUNoise(theta=0.15, sigma=0.0, dt=1.0, mu=0.0), 10, num_envs=5, action_dim=2)
    assert torch.equal(x, action)


@pytest.mark.parametrize(
    'sigma, shown', [(-0.1, '-0.1'), (float('nan'), 'nan'), (float('inf'), 'inf')]
)
def test_gaussian_noise_refuses_a_negative_or_non_finite_sigma(sigma, shown):
    # An infinite sigma would put every action at a bound once clipped.
    with pytest.raises(ValueError, match=f'sigma must be a finite number >= 0, got {shown}'):
        GaussianNoise(sigma=sigma)


def test_noise_refuses_a_sigma_or_mu_that_is_inf_as_a_float32():
    # GaussianNoise(sigma=1e300) put every action at a bound without a word; OUNoise's
    # state went inf, then NaN (inf - inf) at its second step: the envs' NaN action ended
    # the run after the initial collection, blamed on the policy's weights. mu=1e300 was
    # refused as no noise object at all.
    message = 'sigma must be at most 3.4e38, the largest float32, got 1e+300'
    with pytest.raises(ValueError, match=re.escape(message)):
        GaussianNoise(sigma=1e300)
    with pytest.raises(ValueError, match=re.escape(message)):
        OUNoise(sigma=1e300)
    message = 'mu must be at most 3.4e38 in magnitude, the largest float32, got -1e+300'
    with pytest.raises(ValueError, match=re.escape(message)):
        OUNoise(mu=-1e300)
    # The largest float32 is no overflow.
    largest = torch.finfo(torch.float32).max
    assert GaussianNoise(sigma=largest).sigma == largest
    assert OUNoise(sigma=0.0, mu=largest).mu == largest


@pytest.mark.parametrize(
    'bad, message',
    [
        (dict(theta=0.0), 'mean-reverting process, got theta=0.0, dt=0.01'),
        (dict(dt=0.0), 'mean-reverting process, got theta=0.15, dt=0.0'),
        (dict(theta=2.0, dt=1.0), 'mean-reverting process, got theta=2.0, dt=1.0'),
        (dict(sigma=-0.1), 'sigma must be a finite number >= 0, got -0.1'),
        (dict(sigma=float('nan')), 'sigma must be a finite number >= 0, got nan'),
    ],
)
def test_ou_refuses_parameters_that_do_not_revert(bad, message):
    # Each by its own check: a ValueError of another (a check refusing everything) is not it.
    with pytest.raises(ValueError, match=re.escape(message)):
        OUNoise(**bad)


@pytest.mark.parametrize(
    'bad, message',
    [
        # theta * dt = 0.0015 is in range, but sqrt(dt) is not a number.
        (dict(theta=-0.15, dt=-0.01), 'theta and dt must be > 0'),
        (dict(sigma=float('inf')), 'sigma must be a finite number >= 0, got inf'),
        (dict(mu=float('nan')), 'mu must be a finite number, got nan'),
        (dict(mu=float('inf')), 'mu must be a finite number, got inf'),
    ],
)
def test_ou_refuses_settings_each_of_its_checks_must_catch_alone(bad, message):
    with pytest.raises(ValueError, match=message):
        OUNoise(**bad)


def test_ou_state_is_updated_in_place():
    """A CUDA graph captures the state's address: every step must read and write the same tensor."""
    torch.manual_seed(0)
    noise = OUNoise(theta=0.15, sigma=0.2, dt=1.0)
    action = torch.zeros(2, 3)
    first = noise(torch.full((2,), F, dtype=torch.uint8), action)
    state = noise._state
    second = noise(torch.full((2,), M, dtype=torch.uint8), action)
    assert noise._state is state
    assert torch.equal(state, second)
    # The returned noise is not the state itself: the next step does not change it.
    kept = second.clone()
    noise(torch.full((2,), M, dtype=torch.uint8), action)
    assert torch.equal(second, kept)
    assert not torch.equal(first, second)


def test_ou_state_saved_and_loaded_continues_the_process_in_place():
    torch.manual_seed(0)
    noise = OUNoise(theta=0.15, sigma=0.2, dt=1.0)
    action = torch.zeros(2, 3)
    noise(torch.full((2,), F, dtype=torch.uint8), action)
    saved = {'state': noise.state_dict()['state'].clone()}
    rng = torch.get_rng_state()
    expected = noise(torch.full((2,), M, dtype=torch.uint8), action).clone()

    fresh = OUNoise(theta=0.15, sigma=0.2, dt=1.0)
    assert fresh.state_dict() == {'state': None}
    fresh.load_state_dict(saved)
    torch.set_rng_state(rng)
    assert torch.equal(fresh(torch.full((2,), M, dtype=torch.uint8), action), expected)
    # Loaded into a state of its shape in place, as a captured CUDA graph needs.
    state = fresh._state
    fresh.load_state_dict(saved)
    assert fresh._state is state and torch.equal(state, saved['state'])


@pytest.mark.parametrize('shape', [(3, 2), (2, 3), (2,), (2, 2, 1)])
def test_ou_state_of_another_shape_is_refused(shape):
    noise = OUNoise(theta=0.15, sigma=0.2, dt=1.0)
    with pytest.raises(ValueError, match='not a float tensor of shape'):
        noise.load_state_dict({'state': torch.zeros(2, 2)}, shape=shape)
    assert noise.state_dict() == {'state': None}
    noise.load_state_dict({'state': torch.ones(2, 2)}, shape=(2, 2))
    assert torch.equal(noise.state_dict()['state'], torch.ones(2, 2))
