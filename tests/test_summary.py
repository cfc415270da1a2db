"""progress.csv and TensorBoard events, read back as a user (or TensorBoard) reads them."""

import math

import pytest

from alf_lite import summary as summary_module
from alf_lite.summary import ProgressCsv, Summary, Throughput

WALL_TIME = 1_700_000_000.0


def test_progress_csv_widens_header_when_new_scalars_appear_and_keeps_old_rows(
    tmp_path, read_progress
):
    path = tmp_path / 'progress.csv'
    csv_file = ProgressCsv(str(path))
    csv_file.write({'env_steps': 0, 'eval/AverageReturn': -1.5})
    csv_file.write({'env_steps': 100, 'train/critic_loss': 2.0})
    csv_file.write({'env_steps': 200, 'eval/AverageReturn': -1.0, 'train/critic_loss': 0.1 + 0.2})
    csv_file.write({'env_steps': 300, 'train/critic_loss': 0.5, 'train/alpha': 0.9})

    header, rows = read_progress(path)
    assert header == ['env_steps', 'eval/AverageReturn', 'train/critic_loss', 'train/alpha']
    assert [r['env_steps'] for r in rows] == ['0', '100', '200', '300']
    assert rows[0] == {
        'env_steps': '0',
        'eval/AverageReturn': '-1.5',
        'train/critic_loss': '',
        'train/alpha': '',
    }
    assert rows[1]['eval/AverageReturn'] == '' and float(rows[1]['train/critic_loss']) == 2.0
    # Full float precision, not a rounded text.
    assert float(rows[2]['train/critic_loss']) == 0.1 + 0.2
    assert float(rows[3]['train/alpha']) == 0.9


def test_progress_csv_reopened_continues_the_file(tmp_path, read_progress):
    path = tmp_path / 'progress.csv'
    first = ProgressCsv(str(path))
    first.write({'env_steps': 0, 'eval/AverageReturn': -2.0})
    first.write({'env_steps': 100, 'eval/AverageReturn': -1.0})
    second = ProgressCsv(str(path))
    second.write({'env_steps': 200, 'eval/AverageReturn': 0.5})
    second.write({'env_steps': 300, 'eval/AverageReturn': 0.25, 'train/alpha': 0.5})

    header, rows = read_progress(path)
    assert header == ['env_steps', 'eval/AverageReturn', 'train/alpha']
    assert [(r['env_steps'], r['eval/AverageReturn']) for r in rows] == [
        ('0', '-2.0'),
        ('100', '-1.0'),
        ('200', '0.5'),
        ('300', '0.25'),
    ]


def test_progress_csv_resume_drops_rows_written_after_the_checkpoint(tmp_path, read_progress):
    path = tmp_path / 'progress.csv'
    killed_run = ProgressCsv(str(path))
    for step in range(0, 600, 100):
        killed_run.write({'env_steps': step, 'train/critic_loss': float(step)})

    resumed = ProgressCsv(str(path), max_env_steps=300)
    # Dropped at once, not only when the next row comes.
    _, rows = read_progress(path)
    assert [r['env_steps'] for r in rows] == ['0', '100', '200', '300']
    resumed.write({'env_steps': 400, 'train/critic_loss': -1.0})

    header, rows = read_progress(path)
    assert header == ['env_steps', 'train/critic_loss']
    assert [(r['env_steps'], r['train/critic_loss']) for r in rows] == [
        ('0', '0.0'),
        ('100', '100.0'),
        ('200', '200.0'),
        ('300', '300.0'),
        ('400', '-1.0'),
    ]


def test_summary_writes_train_and_eval_events_that_tensorboard_reads_back(
    tmp_path, read_tensorboard, read_progress
):
    summary = Summary(str(tmp_path))
    summary.write(0, 0, WALL_TIME, {'eval/AverageReturn': -3.0, 'eval/AverageEpisodeLength': 200.0})
    summary.write(
        100,
        40,
        WALL_TIME + 1,
        {'train/critic_loss': 1.5, 'train/AverageReturn': -2.0, 'train/replay_buffer_bytes': 25000},
    )
    summary.write(200, 140, WALL_TIME + 2, {'train/critic_loss': 0.75, 'eval/AverageReturn': -1.0})
    summary.close()

    train = read_tensorboard(tmp_path / 'train')
    evaluation = read_tensorboard(tmp_path / 'eval')
    steps_values = lambda events: [(e.step, e.value) for e in events]  # noqa: E731
    assert set(train) == {'critic_loss', 'AverageReturn', 'replay_buffer_bytes'}
    assert set(evaluation) == {'AverageReturn', 'AverageEpisodeLength'}
    # The step axis is env steps.
    assert steps_values(train['critic_loss']) == [(100, 1.5), (200, 0.75)]
    assert steps_values(train['AverageReturn']) == [(100, -2.0)]
    assert steps_values(train['replay_buffer_bytes']) == [(100, 25000.0)]
    assert steps_values(evaluation['AverageReturn']) == [(0, -3.0), (200, -1.0)]
    assert steps_values(evaluation['AverageEpisodeLength']) == [(0, 200.0)]
    assert [e.wall_time for e in train['critic_loss']] == [WALL_TIME + 1, WALL_TIME + 2]

    header, rows = read_progress(tmp_path / 'progress.csv')
    assert header[:3] == ['env_steps', 'num_updates', 'wall_time']
    assert set(header[3:]) == {
        'eval/AverageReturn',
        'eval/AverageEpisodeLength',
        'train/critic_loss',
        'train/AverageReturn',
        'train/replay_buffer_bytes',
    }
    assert [(r['env_steps'], r['num_updates']) for r in rows] == [
        ('0', '0'),
        ('100', '40'),
        ('200', '140'),
    ]
    assert float(rows[2]['train/critic_loss']) == 0.75
    assert float(rows[1]['wall_time']) == WALL_TIME + 1


def test_summary_resume_keeps_events_up_to_the_checkpoint_and_replaces_later_ones(
    tmp_path, read_tensorboard, read_progress
):
    killed_run = Summary(str(tmp_path))
    for step in range(0, 500, 100):
        killed_run.write(
            step,
            step // 2,
            WALL_TIME + step,
            {'train/critic_loss': float(step), 'eval/AverageReturn': -float(step)},
        )
    killed_run.close()  # Rows 300 and 400 came after the checkpoint at 200.

    resumed = Summary(str(tmp_path), keep_until_env_steps=200)
    for step in (300, 400):
        resumed.write(
            step,
            step // 2,
            WALL_TIME + 1000 + step,
            {'train/critic_loss': step + 0.5, 'eval/AverageReturn': 0.5 - step},
        )
    resumed.close()

    expected_train = [(0, 0.0), (100, 100.0), (200, 200.0), (300, 300.5), (400, 400.5)]
    train = read_tensorboard(tmp_path / 'train')
    assert [(e.step, e.value) for e in train['critic_loss']] == expected_train
    evaluation = read_tensorboard(tmp_path / 'eval')
    assert [(e.step, e.value) for e in evaluation['AverageReturn']] == [
        (0, -0.0),
        (100, -100.0),
        (200, -200.0),
        (300, -299.5),
        (400, -399.5),
    ]
    _, rows = read_progress(tmp_path / 'progress.csv')
    assert [(int(r['env_steps']), float(r['train/critic_loss'])) for r in rows] == expected_train


def test_throughput_leaves_out_the_time_spent_in_excluded_blocks(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(summary_module.time, 'monotonic', lambda: clock[0])
    throughput = Throughput(env_steps=0, num_updates=0)
    clock[0] += 3.0  # an evaluation
    with throughput.excluded():
        clock[0] += 7.0
    clock[0] += 2.0
    # 500 steps in 5 s of collecting and training, not in 12 s.
    assert throughput.rates(500, 250) == (100.0, 50.0)
    with throughput.excluded():
        clock[0] += 1.0
    clock[0] += 4.0
    assert throughput.rates(900, 250) == (100.0, 0.0)
    # Nothing excluded: the whole interval counts.
    clock[0] += 2.0
    assert throughput.rates(1100, 350) == (100.0, 50.0)


def test_progress_csv_drops_a_row_cut_short_by_a_kill(tmp_path, read_progress):
    path = tmp_path / 'progress.csv'
    # A kill mid-append leaves the last row without its last fields.
    path.write_text('env_steps,num_updates,train/critic_loss\n100,10,0.5\n200,20,0.25\n300,3')
    resumed = ProgressCsv(str(path))
    _, rows = read_progress(path)
    assert [r['env_steps'] for r in rows] == ['100', '200']
    resumed.write({'env_steps': 300, 'num_updates': 30, 'train/critic_loss': 0.125})
    header, rows = read_progress(path)
    assert header == ['env_steps', 'num_updates', 'train/critic_loss']
    assert [(r['env_steps'], r['num_updates'], r['train/critic_loss']) for r in rows] == [
        ('100', '10', '0.5'),
        ('200', '20', '0.25'),
        ('300', '30', '0.125'),
    ]


def test_progress_csv_widened_on_a_full_disk_keeps_the_rows_written_before(
    tmp_path, monkeypatch, read_progress
):
    path = tmp_path / 'progress.csv'
    csv_file = ProgressCsv(str(path))
    csv_file.write({'env_steps': 0, 'eval/AverageReturn': -2.0})
    csv_file.write({'env_steps': 100, 'eval/AverageReturn': -1.0})
    written = path.read_text()

    def disk_full(self, rows):
        raise OSError(28, 'No space left on device')

    # A new column rewrites the whole file; the disk fills up while it does.
    monkeypatch.setattr(summary_module.csv.DictWriter, 'writerows', disk_full)
    with pytest.raises(OSError, match='No space left'):
        csv_file.write({'env_steps': 200, 'train/alpha': 0.5})
    assert path.read_text() == written
    _, rows = read_progress(path)
    assert [(r['env_steps'], r['eval/AverageReturn']) for r in rows] == [
        ('0', '-2.0'),
        ('100', '-1.0'),
    ]


def test_console_progress_line(capsys):
    summary_module.print_progress(500, 2000, 1234.4, float('nan'))
    summary_module.print_progress(1000, 2000, 99.6, -153.26)
    summary_module.print_progress(2100, 2000, 50.0, None)  # past the end: a full bar
    lines = capsys.readouterr().err.split('\n')
    # stderr is no terminal here: one line each.
    assert lines == [
        '[#####               ] 500/2000 env steps | 1234 SPS | eval return n/a',
        '[##########          ] 1000/2000 env steps | 100 SPS | eval return -153.3',
        '[####################] 2100/2000 env steps | 50 SPS | eval return n/a',
        '',
    ]


def test_throughput_of_an_interval_shorter_than_the_clock_tick_is_finite(monkeypatch):
    monkeypatch.setattr(summary_module.time, 'monotonic', lambda: 100.0)
    throughput = Throughput(env_steps=0, num_updates=0)
    # Two summaries within one tick of the clock: no time passed as far as it can tell.
    env_steps_per_sec, updates_per_sec = throughput.rates(500, 250)
    assert math.isfinite(env_steps_per_sec) and env_steps_per_sec > 1e6
    assert math.isfinite(updates_per_sec) and updates_per_sec > 1e6
    assert throughput.rates(500, 250) == (0.0, 0.0)
