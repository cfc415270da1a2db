"""Optimizers named from gin: Adam and AdamW use their fused step unless told otherwise."""

import pytest
import torch

import alf_lite.all_configurables  # noqa: F401  (registers the gin names)
from alf_lite import config
from alf_lite.algorithms.sac import SacAlgorithm
from alf_lite.bin.cli import user_message
from alf_lite.optimizers import Adam, make_optimizer


def _params():
    return [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.tensor(0.5))]


def test_default_and_gin_adam_are_fused_and_keep_their_type():
    assert make_optimizer(None, _params(), 1e-3).defaults['fused'] is True
    config.parse_config(
        [],
        [
            'actor/Adam.lr = 1e-2',
            'critic/AdamW.weight_decay = 0.1',
            # The references open the scopes, as an algorithm's optimizer bindings do.
            'SacAlgorithm.actor_optimizer = @actor/Adam',
            'SacAlgorithm.critic_optimizer = @critic/AdamW',
        ],
    )
    import gin

    with gin.config_scope('actor'):
        opt = gin.get_configurable('torch.optim.Adam')(_params())
    with gin.config_scope('critic'):
        opt_w = gin.get_configurable('torch.optim.AdamW')(_params())
    assert type(opt) is torch.optim.Adam and opt.defaults['fused'] and opt.defaults['lr'] == 1e-2
    assert type(opt_w) is torch.optim.AdamW and opt_w.defaults['weight_decay'] == 0.1
    assert opt_w.defaults['fused'] is True


def test_explicit_foreach_is_respected():
    opt = Adam(_params(), lr=1e-3, foreach=True)
    assert not opt.defaults['fused'] and opt.defaults['foreach']


def test_fused_none_means_unspecified_and_differentiable_is_not_fused():
    # None is torch's own default for fused: it still means 'use the fused step'.
    assert Adam(_params(), lr=1e-3, fused=None).defaults['fused'] is True
    # The fused kernel cannot differentiate through the step; torch refuses that pair.
    opt = Adam(_params(), lr=1e-3, differentiable=True)
    assert opt.defaults['differentiable'] and not opt.defaults['fused']


@pytest.mark.parametrize('name', ['Adam', 'AdamW'])
def test_fused_step_matches_the_foreach_step(name):
    torch.manual_seed(0)
    fused = _params()
    plain = [torch.nn.Parameter(p.detach().clone()) for p in fused]
    start = [p.detach().clone() for p in fused]
    cls = getattr(alf_lite.optimizers, name)
    opts = [
        cls(fused, lr=1e-2, weight_decay=0.01),
        cls(plain, lr=1e-2, weight_decay=0.01, foreach=True),
    ]
    assert opts[0].defaults['fused'] is True and not opts[1].defaults['fused']
    for _ in range(5):
        grads = [torch.randn_like(p) for p in fused]
        for ps, opt in zip((fused, plain), opts):
            for p, g in zip(ps, grads):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(fused, plain):
        assert torch.allclose(a, b, atol=1e-6)
    assert all((a - s).abs().max() > 1e-3 for a, s in zip(fused, start))


def test_misspelt_adam_parameter_is_named():
    with pytest.raises(config.ConfigError, match="'lrr'.*Closest valid names: 'lr'"):
        config.parse_config([], ['actor/Adam.lrr = 1e-2'])


@pytest.mark.parametrize('name', ['Adam', 'AdamW', 'SGD', 'RMSprop'])
def test_every_optimizer_the_readme_lists_can_be_named_in_gin(name):
    config.parse_config(
        [], [f'SacAlgorithm.actor_optimizer = @actor/{name}', f'actor/{name}.lr = 0.05']
    )
    import gin

    with gin.config_scope('actor'):
        opt = gin.get_configurable(f'torch.optim.{name}')(_params())
    assert type(opt).__name__ == name and opt.defaults['lr'] == 0.05


@pytest.mark.parametrize('name', ['Adam', 'SGD'])
def test_settings_torch_cannot_run_together_are_a_config_error_naming_them(name):
    # torch raises a RuntimeError for this pair, where it raises ValueError for a bad value:
    # the train command exits 2 on the latter only.
    config.parse_config(
        [],
        [
            f'SacAlgorithm.critic_optimizer = @critic/{name}',
            f'critic/{name}.fused = True',
            f'critic/{name}.foreach = True',
        ],
    )
    with pytest.raises(ValueError, match='`fused` and `foreach` cannot be `True` together'):
        SacAlgorithm(observation_dim=3, action_dim=1)


def test_a_differentiable_optimizer_is_a_config_error_not_a_crash_at_the_first_update():
    config.parse_config(
        [], ['SacAlgorithm.critic_optimizer = @critic/Adam', 'critic/Adam.differentiable = True']
    )
    with pytest.raises(ValueError, match='Adam: differentiable = True cannot train'):
        SacAlgorithm(observation_dim=3, action_dim=1)


@pytest.mark.parametrize(
    'optimizer, refusal',
    [
        # Classes of another role: their own missing-argument error named no parameter.
        ('@critic/CriticNetwork', 'is the class CriticNetwork, which is no optimizer'),
        ('@critic/GaussianNoise', 'is the class GaussianNoise, which is no optimizer'),
    ],
)
def test_an_optimizer_of_another_kind_is_refused_naming_the_parameter(optimizer, refusal):
    config.parse_config([], [f'SacAlgorithm.critic_optimizer = {optimizer}'])
    with pytest.raises(ValueError) as refused:
        SacAlgorithm(observation_dim=3, action_dim=1)
    message = str(refused.value)
    assert f'SacAlgorithm.critic_optimizer {refusal}' in message and '@critic/Adam' in message


def test_a_factory_that_builds_no_optimizer_or_cannot_take_the_parameters_is_refused():
    # An object without the optimizer's defaults failed with an AttributeError, a traceback.
    with pytest.raises(ValueError, match=r'actor_optimizer built a list, which is no optimizer'):
        make_optimizer(lambda params: list(params), _params(), 1e-3, 'SacAlgorithm.actor_optimizer')
    with pytest.raises(TypeError, match=r'^SacAlgorithm.actor_optimizer: .*positional argument'):
        make_optimizer(lambda: None, _params(), 1e-3, 'SacAlgorithm.actor_optimizer')


@pytest.mark.parametrize(
    'binding, refusal',
    [
        ('critic/Adam.lr = -1', 'SacAlgorithm.critic_optimizer: Invalid learning rate: -1'),
        ('alpha/Adam.betas = (2.0, 0.9)', 'SacAlgorithm.alpha_optimizer: Invalid beta parameter'),
    ],
)
def test_a_setting_the_optimizer_refuses_is_told_with_the_parameter_of_its_optimizer(
    binding, refusal
):
    # torch's message names no optimizer, gin's call trace only its class: "Adam: Invalid
    # learning rate" left the actor's, the critic's and alpha's Adam to guess between.
    config.parse_config(
        [],
        [
            'SacAlgorithm.critic_optimizer = @critic/Adam',
            'SacAlgorithm.alpha_optimizer = @alpha/Adam',
            binding,
        ],
    )
    with pytest.raises(ValueError) as refused:
        SacAlgorithm(observation_dim=3, action_dim=1)
    assert user_message(str(refused.value)).startswith(refusal), str(refused.value)
