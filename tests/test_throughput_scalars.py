"""train/updates_per_sec against train/env_steps_per_sec, and train/process_rss_bytes in bytes,
as a short training run writes them to progress.csv."""

import psutil
import pytest

from alf_lite.runs import (
    ENV_STEPS,
    ENV_STEPS_PER_SEC,
    NUM_UPDATES,
    PROCESS_RSS_BYTES,
    UPDATES_PER_SEC,
)
from test_trainer import read_csv, train

NUM_ENVS = 2
UNROLL_LENGTH = 2
NUM_UPDATES_PER_TRAIN_ITER = 3


@pytest.fixture(scope='module')
def progress(tmp_path_factory):
    """progress.csv's rows, each column as a float, of 240 env steps on the point task."""
    root_dir = tmp_path_factory.mktemp('throughput') / 'run'
    train(
        root_dir,
        'TanhNormalActorNetwork.hidden_layers = (16,)',
        'CriticNetwork.hidden_layers = (16,)',
        'TrainerConfig.mini_batch_size = 16',
        f'create_environment.num_parallel_environments = {NUM_ENVS}',
        'create_environment.use_subprocesses = False',
        f'TrainerConfig.unroll_length = {UNROLL_LENGTH}',
        f'TrainerConfig.num_updates_per_train_iter = {NUM_UPDATES_PER_TRAIN_ITER}',
        'TrainerConfig.initial_collect_steps = 40',
        'TrainerConfig.summary_interval = 40',
        'TrainerConfig.eval_interval = 1000',
        'TrainerConfig.checkpoint_interval = 1000',
        'TrainerConfig.num_eval_episodes = 1',
        'TrainerConfig.num_env_steps = 240',
    )
    rows = read_csv(root_dir / 'progress.csv', drop=())
    return [{k: float(v) for k, v in row.items() if v != ''} for row in rows]


def test_updates_per_sec_is_env_steps_per_sec_times_the_updates_per_env_step(progress):
    # Each iteration collects UNROLL_LENGTH steps of each env, then updates
    # NUM_UPDATES_PER_TRAIN_ITER times; both rates are over the same seconds.
    updates_per_env_step = NUM_UPDATES_PER_TRAIN_ITER / (UNROLL_LENGTH * NUM_ENVS)
    # A row's rates cover the env steps since the row before: from a row written
    # after the first update on, every iteration of that interval trained.
    training = [row for before, row in zip(progress, progress[1:]) if before[NUM_UPDATES] > 0]
    assert len(training) >= 3, progress
    for row in training:
        ratio = row[UPDATES_PER_SEC] / row[ENV_STEPS_PER_SEC]
        assert ratio == pytest.approx(updates_per_env_step, rel=1e-9), row[ENV_STEPS]


def test_process_rss_is_in_bytes(progress):
    # The process holds torch: hundreds of MB, below the machine's memory. In KiB
    # or MiB the number would be under 10**8.
    total = psutil.virtual_memory().total
    # The row at 0 env steps, the evaluation before training, has no training scalars.
    summarised = [row for row in progress if row[ENV_STEPS] > 0]
    assert len(summarised) >= 3, progress
    for row in summarised:
        assert 10**8 < row[PROCESS_RSS_BYTES] < total, row[ENV_STEPS]
