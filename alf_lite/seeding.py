"""Env seeds of a run, all drawn from one seed sequence so that no two ever coincide.

A run's ``random_seed`` is the entropy of a ``numpy.random.SeedSequence``; each
env seed is that sequence at a distinct spawn key ``(purpose, ..., env index)``,
turned into a 128-bit integer. Train envs, eval envs and the train envs
reseeded on a resume (a key per resume step) therefore get seeds that differ
from each other and from those of every other ``random_seed``, except with
probability about 2^-128 per pair.
"""
from typing import List

import numpy as np

_TRAIN = 0
_EVAL = 1
_RESUME = 2
_WORDS = 4  # 32-bit words per seed: 128 bits


def _seeds(random_seed: int, key: tuple, num_envs: int) -> List[int]:
    if isinstance(random_seed, bool) or not isinstance(random_seed, int) or random_seed < 0:
        raise ValueError(f'random_seed must be a non-negative integer, got {random_seed!r}.')
    seeds = []
    for i in range(num_envs):
        words = np.random.SeedSequence(random_seed, spawn_key=key + (i,)).generate_state(
            _WORDS, np.uint32)
        seeds.append(int.from_bytes(words.tobytes(), 'little'))
    return seeds


def train_env_seeds(random_seed: int, num_envs: int) -> List[int]:
    """Seeds of the ``num_envs`` training envs at the start of a run.

    Args:
        random_seed: the run's ``TrainerConfig.random_seed`` (>= 0).
        num_envs: number of parallel training envs.
    """
    return _seeds(random_seed, (_TRAIN,), num_envs)


def eval_env_seeds(random_seed: int, num_envs: int) -> List[int]:
    """Seeds of the ``num_envs`` evaluation envs (also used by ``play``).

    Args:
        random_seed: the run's ``TrainerConfig.random_seed`` (>= 0).
        num_envs: number of eval envs (``num_eval_episodes``).
    """
    return _seeds(random_seed, (_EVAL,), num_envs)


def resume_env_seeds(random_seed: int, env_steps: int, num_envs: int) -> List[int]:
    """Seeds of the training envs when a run resumes at ``env_steps``.

    Args:
        random_seed: the run's ``TrainerConfig.random_seed`` (>= 0).
        env_steps: env steps of the checkpoint the run resumes from.
        num_envs: number of parallel training envs.
    """
    if env_steps < 0:
        raise ValueError(f'env_steps must be non-negative, got {env_steps}.')
    return _seeds(random_seed, (_RESUME, env_steps), num_envs)
