"""A run's randomness: the global generators, and env seeds that never coincide.

``seed_everything`` seeds python, numpy and torch (its CPU and CUDA generators);
``global_rng_state`` and ``set_global_rng_state`` carry their states through a
checkpoint, and ``global_rng_kept`` puts them back after code that is not the run's.

A run's ``random_seed`` is the entropy of a ``numpy.random.SeedSequence``; each
env seed is that sequence at a distinct spawn key ``(purpose, ..., env index)``,
turned into a 128-bit integer. Train envs, eval envs (a key per evaluation's
env step) and the train envs reseeded on a resume (a key per resume step)
therefore get seeds that differ from each other and from those of every other
``random_seed``, except with probability about 2^-128 per pair.
"""

import contextlib
import random
from typing import Iterator, List

import numpy as np
import torch

_TRAIN = 0
_EVAL = 1
_RESUME = 2
_WORDS = 4  # 32-bit words per seed: 128 bits


def seed_everything(seed: int, num_threads: int) -> None:
    """Seed python, numpy and torch; torch runs deterministic algorithms on ``num_threads`` threads.

    Args:
        seed: the run's ``TrainerConfig.random_seed``.
        num_threads: torch's intra-op threads (``TrainerConfig.torch_num_threads``).
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(num_threads)
    torch.use_deterministic_algorithms(True)


def global_rng_state() -> dict:
    """The states of python's, numpy's and torch's global generators (CUDA's too, once used).

    As tensors and plain values only, which a checkpoint loads with
    ``weights_only=True``. ``'cuda'`` holds one state per visible GPU, and only
    when this process has initialised CUDA.
    """
    numpy_state = np.random.get_state(legacy=False)
    state = {
        'python': random.getstate(),
        'numpy': {
            'key': torch.from_numpy(numpy_state['state']['key'].astype(np.int64)),
            'pos': numpy_state['state']['pos'],
            'has_gauss': numpy_state['has_gauss'],
            'gauss': numpy_state['gauss'],
        },
        'torch': torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def set_global_rng_state(state: dict) -> None:
    """Continue every global generator from ``global_rng_state()``'s ``state``.

    A state saved on GPUs restores CUDA's generators on the GPUs there are here
    (as many as both have); on a machine without CUDA it restores the rest, so a
    GPU run's checkpoint resumes on a CPU. Its tensors may have been mapped to
    any device by the checkpoint's load; they are read on the host.
    """
    cuda = state.get('cuda') or []
    if cuda and torch.cuda.is_available():
        for index in range(min(len(cuda), torch.cuda.device_count())):
            torch.cuda.set_rng_state(cuda[index].cpu(), index)
    numpy_state = state['numpy']
    random.setstate(state['python'])
    np.random.set_state(
        (
            'MT19937',
            numpy_state['key'].cpu().numpy().astype(np.uint32),
            numpy_state['pos'],
            numpy_state['has_gauss'],
            numpy_state['gauss'],
        )
    )
    torch.set_rng_state(state['torch'].cpu())


@contextlib.contextmanager
def global_rng_kept() -> Iterator[None]:
    """Every global generator continues after the block from where it was before it.

    For the callers' code a run calls (``Trainer.train``'s ``stop_when`` and
    ``before_writing``): what it draws (a look at the stochastic policy, another
    trainer seeded and trained there) changes none of the run's numbers. Also
    when the block raises.
    """
    state = global_rng_state()
    try:
        yield
    finally:
        set_global_rng_state(state)


def _seeds(random_seed: int, key: tuple, num_envs: int, first: int = 0) -> List[int]:
    if isinstance(random_seed, bool) or not isinstance(random_seed, int) or random_seed < 0:
        raise ValueError(f'random_seed must be a non-negative integer, got {random_seed!r}.')
    seeds = []
    for i in range(first, first + num_envs):
        words = np.random.SeedSequence(random_seed, spawn_key=key + (i,)).generate_state(
            _WORDS, np.uint32
        )
        seeds.append(int.from_bytes(words.tobytes(), 'little'))
    return seeds


def train_env_seeds(random_seed: int, num_envs: int) -> List[int]:
    """Seeds of the ``num_envs`` training envs at the start of a run.

    Args:
        random_seed: the run's ``TrainerConfig.random_seed`` (>= 0).
        num_envs: number of parallel training envs.
    """
    return _seeds(random_seed, (_TRAIN,), num_envs)


def eval_env_seeds(
    random_seed: int, num_envs: int, env_steps: int = 0, first: int = 0
) -> List[int]:
    """Seeds of the ``num_envs`` episodes of the evaluation at ``env_steps``, one each.

    Every evaluation resets its envs with these seeds, so an evaluation depends
    only on the policy, ``random_seed``, ``env_steps`` and ``num_envs``: not on
    the evaluations before it, and not on whether the run was resumed. A run's
    first evaluation uses ``env_steps=0``; ``play`` its checkpoint's env step.

    Args:
        random_seed: the run's ``TrainerConfig.random_seed`` (>= 0).
        num_envs: number of eval episodes (``num_eval_episodes``), one seed each.
        env_steps: env steps of the run when it evaluates (>= 0).
        first: the first episode's index (>= 0): the seeds of episodes ``first`` to
            ``first + num_envs - 1``, the same whatever the number of episodes
            asked for at once.
    """
    if env_steps < 0:
        raise ValueError(f'env_steps must be non-negative, got {env_steps}.')
    if first < 0:
        raise ValueError(f'first must be non-negative, got {first}.')
    return _seeds(random_seed, (_EVAL, env_steps), num_envs, first)


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
