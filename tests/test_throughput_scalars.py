"""train/updates_per_sec against train/env_steps_per_sec, train/process_rss_bytes and
train/env_processes_uss_bytes in bytes, as a short training run writes them to progress.csv."""

import csv

import psutil
import pytest

from alf_lite.environments.suite_gym import BatchedEnvironment
from alf_lite.runs import (
    ENV_PROCESSES_USS_BYTES,
    ENV_STEPS,
    ENV_STEPS_PER_SEC,
    NUM_UPDATES,
    PROCESS_RSS_BYTES,
    UPDATES_PER_SEC,
)
from test_trainer import build, read_csv, train

NUM_ENVS = 2
UNROLL_LENGTH = 2
NUM_UPDATES_PER_TRAIN_ITER = 3
SHORT_RUN = (
    'TanhNormalActorNetwork.hidden_layers = (16,)',
    'CriticNetwork.hidden_layers = (16,)',
    'TrainerConfig.mini_batch_size = 16',
    f'create_environment.num_parallel_environments = {NUM_ENVS}',
    f'TrainerConfig.unroll_length = {UNROLL_LENGTH}',
    f'TrainerConfig.num_updates_per_train_iter = {NUM_UPDATES_PER_TRAIN_ITER}',
    'TrainerConfig.initial_collect_steps = 40',
    'TrainerConfig.summary_interval = 40',
    'TrainerConfig.eval_interval = 1000',
    'TrainerConfig.checkpoint_interval = 1000',
    'TrainerConfig.num_eval_episodes = 1',
    'TrainerConfig.num_env_steps = 240',
)


@pytest.fixture(scope='module')
def progress(tmp_path_factory):
    """progress.csv's rows, each column as a float, of 240 env steps on the point task."""
    root_dir = tmp_path_factory.mktemp('throughput') / 'run'
    train(root_dir, *SHORT_RUN, 'create_environment.use_subprocesses = False')
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


def test_env_processes_uss_is_0_with_every_env_in_process(progress):
    # The envs' memory is then the training process's own, in process_rss_bytes.
    summarised = [row for row in progress if row[ENV_STEPS] > 0]
    assert len(summarised) >= 3, progress
    assert all(row[ENV_PROCESSES_USS_BYTES] == 0 for row in summarised), progress


@pytest.mark.parametrize('period', [0.0, None])
def test_env_processes_uss_sums_the_env_processes_in_progress_csv_and_tensorboard(
    tmp_path, read_tensorboard, monkeypatch, period
):
    # Read at every summary (period 0), or once in this run of seconds (the default).
    import alf_lite.trainer as trainer_module

    if period is not None:
        monkeypatch.setattr(trainer_module, 'ENV_MEMORY_PERIOD_S', period)
    readings = []
    own_bytes = BatchedEnvironment.processes_own_bytes

    def counted(env):
        readings.append(own_bytes(env))
        return readings[-1]

    monkeypatch.setattr(BatchedEnvironment, 'processes_own_bytes', counted)
    before = {child.pid for child in psutil.Process().children()}
    with build(tmp_path, *SHORT_RUN, 'create_environment.use_subprocesses = True') as trainer:
        trainer.train()
        env_processes = [c for c in psutil.Process().children() if c.pid not in before]
        assert len(env_processes) == NUM_ENVS
        own = sum(p.memory_full_info().uss for p in env_processes)
        resident = sum(p.memory_info().rss for p in env_processes)
    rows = read_csv(tmp_path / 'progress.csv', drop=())
    written = {
        int(r[ENV_STEPS]): float(r[ENV_PROCESSES_USS_BYTES]) for r in rows if r[ENV_STEPS] != '0'
    }
    assert sorted(written) == [40, 80, 120, 160, 200, 240]
    if period is None:
        # Each reading walks the processes' page tables: one for the 6 summaries.
        assert len(readings) == 1 and set(written.values()) == set(readings), written
    else:
        assert len(readings) == 6
        # Once the envs stepped their memory hardly changes: the last summary, at the end
        # of the run, holds about what they hold now.
        assert written[240] == pytest.approx(own, rel=0.1)
    # Their own pages only, not those shared with this process that they were forked from.
    assert 0 < written[240] < resident / 4
    events = read_tensorboard(tmp_path / 'train')['env_processes_uss_bytes']
    assert {e.step: e.value for e in events} == pytest.approx(written, rel=1e-6)


def test_a_resumed_run_whose_progress_csv_lacks_env_processes_uss_keeps_its_rows(tmp_path):
    # A run written before the column existed: the column is taken out of its file.
    train(tmp_path, *SHORT_RUN, 'create_environment.use_subprocesses = True')
    path = tmp_path / 'progress.csv'
    with open(path, newline='') as f:
        reader = csv.DictReader(f)
        old_columns = [c for c in reader.fieldnames if c != ENV_PROCESSES_USS_BYTES]
        old_rows = [{k: v for k, v in r.items() if k != ENV_PROCESSES_USS_BYTES} for r in reader]
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, old_columns)
        writer.writeheader()
        writer.writerows(old_rows)

    train(
        tmp_path,
        *SHORT_RUN,
        'create_environment.use_subprocesses = True',
        'TrainerConfig.num_env_steps = 320',
    )
    with open(path, newline='') as f:
        reader = csv.DictReader(f)
        columns, rows = reader.fieldnames, list(reader)
    # The new column goes right after process_rss_bytes, the others keep their places.
    place = columns.index(PROCESS_RSS_BYTES) + 1
    assert columns == old_columns[:place] + [ENV_PROCESSES_USS_BYTES] + old_columns[place:]
    assert rows[: len(old_rows)] == [dict(r, **{ENV_PROCESSES_USS_BYTES: ''}) for r in old_rows]
    new_rows = rows[len(old_rows) :]
    assert [int(r[ENV_STEPS]) for r in new_rows] == [280, 320]
    assert all(int(r[ENV_PROCESSES_USS_BYTES]) > 2**16 for r in new_rows), new_rows
