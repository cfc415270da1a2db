"""Train, eval and resume env seeds come from one seed sequence and never coincide."""

import os
import random
import re

import numpy as np
import pytest
import torch

import alf_lite.all_configurables  # noqa: F401
from alf_lite import checkpoint as ckpt
from alf_lite.config import parse_config
from alf_lite.environments.point_env import PointTargetEnv
from alf_lite.seeding import (
    eval_env_seeds,
    global_rng_state,
    resume_env_seeds,
    seed_everything,
    set_global_rng_state,
    train_env_seeds,
)
from alf_lite.trainer import Trainer, TrainerConfig
from tests.test_trainer import EXAMPLES, POINT_PARAMS, drop_collection


def test_seed_everything_seeds_python_numpy_and_torch_with_the_seed():
    threads = torch.get_num_threads()
    draws = {}
    try:
        for seed in (1, 2, 1):
            seed_everything(seed, threads)
            draws.setdefault(seed, []).append((random.random(), np.random.rand(), torch.rand(1)))
    finally:
        torch.set_num_threads(threads)
    assert draws[1][0] == draws[1][1]
    assert all(one != two for one, two in zip(draws[1][0], draws[2][0]))


def test_resume_at_a_million_steps_does_not_reuse_an_eval_seed():
    # With seeds ``seed + i`` (train), ``1e6 + 10 * seed + i`` (eval) and
    # ``seed + env_steps + i`` (resume), this resume reseeded train env 0 with
    # eval env 0's seed.
    assert not set(resume_env_seeds(0, 1_000_000, 12)) & set(eval_env_seeds(0, 10))


def test_seeds_of_all_purposes_runs_and_resumes_are_distinct():
    seeds = []
    for random_seed in range(20):
        seeds += train_env_seeds(random_seed, 12)
        seeds += eval_env_seeds(random_seed, 10)
        for env_steps in (0, 1, 12, 1000, 999_988, 1_000_000):
            seeds += resume_env_seeds(random_seed, env_steps, 12)
    assert len(set(seeds)) == len(seeds)


def test_seeds_are_128_bit_integers():
    # Collisions between any two seeds have probability about 2^-128 only if the seeds
    # span 128 bits: of 64 uniform 128-bit seeds, all are below 2^120 with probability
    # 2^-512.
    seeds = train_env_seeds(0, 32) + eval_env_seeds(0, 16, 100) + resume_env_seeds(0, 100, 16)
    assert all(0 <= seed < 2**128 for seed in seeds)
    assert max(seeds) >= 2**120


def test_seeds_are_a_pure_function_of_the_random_seed():
    # Whatever state python's, numpy's and torch's generators are in, the same seeds; and
    # the generators are left as they were (a resume's reseeding must not move the run's).
    def seed_globals(seed):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def draws():
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    seeds, after, untouched = {}, {}, {}
    for global_seed in (0, 1):
        seed_globals(global_seed)
        seeds[global_seed] = (
            train_env_seeds(3, 4) + eval_env_seeds(3, 2, 100) + resume_env_seeds(3, 100, 4)
        )
        after[global_seed] = draws()
        seed_globals(global_seed)
        untouched[global_seed] = draws()
    assert seeds[0] == seeds[1]
    assert after == untouched and untouched[0] != untouched[1]
    assert train_env_seeds(3, 4) == train_env_seeds(3, 4)
    assert eval_env_seeds(3, 2) == eval_env_seeds(3, 10)[:2]
    assert train_env_seeds(3, 4) != train_env_seeds(4, 4)


def test_random_seed_out_of_numpys_range_is_refused_naming_it():
    for seed in (-1, 2**32):
        with pytest.raises(ValueError, match=re.escape('random_seed must be in [0, 2**32)')):
            TrainerConfig(random_seed=seed)
    assert TrainerConfig(random_seed=2**32 - 1).random_seed == 2**32 - 1
    with pytest.raises(ValueError, match='non-negative'):
        train_env_seeds(-1, 1)


def test_trainer_seeds_train_eval_and_resumed_envs_from_the_seed_sequence(tmp_path, monkeypatch):
    received = []
    reset = PointTargetEnv.reset

    def recording_reset(self, *, seed=None, options=None):
        if seed is not None:
            received.append(seed)
        return reset(self, seed=seed, options=options)

    monkeypatch.setattr(PointTargetEnv, 'reset', recording_reset)
    params = POINT_PARAMS + [
        'TrainerConfig.random_seed = 5',
        'TrainerConfig.num_eval_episodes = 3',
        'TrainerConfig.eval_interval = 100',
        'create_environment.num_parallel_environments = 2',
        'create_environment.use_subprocesses = False',
        'TrainerConfig.initial_collect_steps = 100',
    ]
    for steps in (300, 500, 700):
        parse_config(
            [os.path.join(EXAMPLES, 'common', 'sac.gin')],
            params + [f'TrainerConfig.num_env_steps = {steps}'],
        )
        with Trainer(TrainerConfig(), str(tmp_path)) as trainer:
            trainer.train()
        if steps == 300:
            # The resume at 300 continues the envs' episodes (no new seeds); the
            # one at 500 has to restart them.
            seeds_at_300 = list(received)
        if steps == 500:
            drop_collection(tmp_path)
    # Each evaluation reseeds the eval envs by its env step, also after the resumes.
    evaluations = [seed for k in range(0, 800, 100) for seed in eval_env_seeds(5, 3, k)]
    expected = evaluations + train_env_seeds(5, 2) + resume_env_seeds(5, 500, 2)
    assert sorted(received) == sorted(expected)
    assert len(set(expected)) == len(expected) == 8 * 3 + 2 + 2
    assert sorted(seeds_at_300) == sorted(evaluations[:12] + train_env_seeds(5, 2))


def test_eval_seeds_differ_between_evaluations_and_from_every_other_purpose():
    first = eval_env_seeds(0, 10)
    assert first == eval_env_seeds(0, 10, env_steps=0)
    later = eval_env_seeds(0, 10, env_steps=5000)
    assert not set(first) & set(later)
    assert not set(later) & set(resume_env_seeds(0, 5000, 10) + train_env_seeds(0, 10))
    with pytest.raises(ValueError, match='non-negative'):
        eval_env_seeds(0, 10, env_steps=-1)


def test_eval_seeds_from_a_later_episode_on_are_those_of_the_whole_evaluation():
    # play resets its k-th episode with the k-th seed alone, as many episodes as it plays.
    whole = eval_env_seeds(4, 6, 300)
    assert eval_env_seeds(4, 2, 300, first=3) == whole[3:5]
    assert [eval_env_seeds(4, 1, 300, first=k)[0] for k in range(6)] == whole
    assert eval_env_seeds(4, 2, 300, first=0) == whole[:2]
    with pytest.raises(ValueError, match='first must be non-negative, got -1'):
        eval_env_seeds(4, 2, 300, first=-1)


def test_rng_states_saved_in_a_checkpoint_continue_every_generator(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.normal()  # numpy then holds a cached Gaussian, which is state too
    path = ckpt.save_checkpoint(str(tmp_path), 1, {'rng': global_rng_state()})
    expected = (random.random(), np.random.normal(), np.random.rand(3), torch.rand(3))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    state, _ = ckpt.load_checkpoint(path)
    set_global_rng_state(state['rng'])
    got = (random.random(), np.random.normal(), np.random.rand(3), torch.rand(3))
    assert got[:2] == expected[:2]
    assert np.array_equal(got[2], expected[2]) and torch.equal(got[3], expected[3])


def test_a_gpu_runs_rng_state_restores_the_rest_where_there_is_no_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip('checks a machine without CUDA (tests/test_cuda.py checks the GPU side)')
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    saved = global_rng_state()
    assert 'cuda' not in saved  # CUDA never initialised here
    # As a GPU run's checkpoint holds it: one state per GPU, loaded back to the CPU.
    saved['cuda'] = [torch.zeros(16, dtype=torch.uint8), torch.ones(16, dtype=torch.uint8)]
    path = ckpt.save_checkpoint(str(tmp_path), 1, {'rng': saved})
    expected = random.random(), np.random.rand(), torch.rand(3)
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    state, _ = ckpt.load_checkpoint(path)
    set_global_rng_state(state['rng'])
    assert random.random() == expected[0] and np.random.rand() == expected[1]
    assert torch.equal(torch.rand(3), expected[2])


class OnAnotherDevice:
    """A saved tensor as a checkpoint mapped to a GPU returns it: numpy() refuses, cpu() copies."""

    def __init__(self, tensor: torch.Tensor):
        self._tensor = tensor

    def numpy(self):
        raise TypeError("can't convert cuda:0 device type tensor to numpy")

    def cpu(self) -> torch.Tensor:
        return self._tensor


def test_rng_state_mapped_to_a_gpu_restores_on_the_host(tmp_path):
    np.random.seed(2)
    torch.manual_seed(3)
    path = ckpt.save_checkpoint(str(tmp_path), 1, {'rng': global_rng_state()})
    expected = (np.random.rand(3), torch.rand(3))
    state, _ = ckpt.load_checkpoint(path)
    # What loading with map_location='cuda' gives: every tensor of the state on the GPU.
    state['rng']['numpy']['key'] = OnAnotherDevice(state['rng']['numpy']['key'])
    state['rng']['torch'] = OnAnotherDevice(state['rng']['torch'])
    np.random.seed(9)
    torch.manual_seed(9)
    set_global_rng_state(state['rng'])
    assert np.array_equal(np.random.rand(3), expected[0]) and torch.equal(
        torch.rand(3), expected[1]
    )


def test_seed_everything_gives_each_generator_exactly_the_seed():
    threads = torch.get_num_threads()
    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(3)
        seed_everything(7, 2)
        drawn = (random.random(), np.random.rand(), torch.rand(2))
        assert torch.get_num_threads() == 2
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(was)
    # What generators seeded with 7 on their own give.
    assert drawn[0] == random.Random(7).random()
    assert drawn[1] == np.random.RandomState(7).rand()
    assert torch.equal(drawn[2], torch.rand(2, generator=torch.Generator().manual_seed(7)))


def test_a_gpu_runs_rng_state_restores_each_gpu_it_has_on_that_gpu(monkeypatch):
    # A checkpoint of a 3-GPU run resumed where 2 GPUs are visible.
    saved = global_rng_state()
    saved['cuda'] = [torch.full((16,), i, dtype=torch.uint8) for i in range(3)]
    restored = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    monkeypatch.setattr(
        torch.cuda,
        'set_rng_state',
        lambda state, device='cuda': restored.append((int(state[0]), device)),
    )
    set_global_rng_state(saved)
    assert restored == [(0, 0), (1, 1)]
