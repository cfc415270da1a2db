"""progress.csv and TensorBoard events, read back as a user (or TensorBoard) reads them."""

import math
import os
import re
import stat
import struct
import threading

import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from alf_lite import summary as summary_module
from alf_lite.summary import ProgressCsv, Summary, Throughput
from tensorboard_server import READERS, TensorBoard

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


def test_progress_csv_header_does_not_depend_on_which_row_first_had_a_scalar(
    tmp_path, read_progress
):
    # Seed a: an episode ended before the first summary; seed b: only before the second.
    rates = {'train/env_steps_per_sec': 100.0, 'train/critic_loss': 0.5, 'train/alpha': 0.9}
    episode = {'train/AverageReturn': -3.0, 'train/AverageEpisodeLength': 20}
    rows = {'a': [{**episode, **rates}, {**episode, **rates}], 'b': [rates, {**episode, **rates}]}
    headers = {}
    for seed, (first, second) in rows.items():
        path = tmp_path / f'{seed}.csv'
        csv_file = ProgressCsv(str(path))
        csv_file.write({'env_steps': 100, 'num_updates': 1, 'wall_time': 1.0, **first})
        csv_file.write({'env_steps': 200, 'num_updates': 2, 'wall_time': 2.0, **second})
        headers[seed], written = read_progress(path)
        assert written[1]['train/AverageReturn'] == '-3.0'
    assert (
        headers['a']
        == headers['b']
        == [
            'env_steps',
            'num_updates',
            'wall_time',
            'train/AverageReturn',
            'train/AverageEpisodeLength',
            'train/env_steps_per_sec',
            # The algorithm's scalars after the trainer's, in the order they came.
            'train/critic_loss',
            'train/alpha',
        ]
    )


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


def test_an_appended_row_goes_under_its_own_columns_whatever_the_order_of_its_scalars(
    tmp_path, read_progress
):
    # The trainer's rows come with the columns of its summary, its evaluation or both, in
    # the order it gathered them; appended to the header, each value goes under its name.
    path = tmp_path / 'progress.csv'
    csv_file = ProgressCsv(str(path))
    csv_file.write({'env_steps': 0, 'train/alpha': 1.0, 'eval/AverageReturn': -2.0})
    csv_file.write({'eval/AverageReturn': -1.0, 'env_steps': 100})
    csv_file.write({'train/alpha': 0.5, 'env_steps': 200})

    header, rows = read_progress(path)
    assert header == ['env_steps', 'eval/AverageReturn', 'train/alpha']
    assert rows[1:] == [
        {'env_steps': '100', 'train/alpha': '', 'eval/AverageReturn': '-1.0'},
        {'env_steps': '200', 'train/alpha': '0.5', 'eval/AverageReturn': ''},
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


def write_killed_run(root_dir, last_step=400):
    """Summaries every 100 env steps up to ``last_step``, as a run killed there left them."""
    killed_run = Summary(str(root_dir))
    for step in range(0, last_step + 1, 100):
        scalars = {'train/critic_loss': float(step), 'eval/AverageReturn': -float(step)}
        killed_run.write(step, step // 2, WALL_TIME + step, scalars)
    killed_run.close()


def event_files(log_dir):
    return sorted(p.name for p in log_dir.iterdir())


def resume(root_dir, keep_until, last_step=400):
    """A run resumed at ``keep_until`` writing again up to ``last_step``, values ``step + 0.5``."""
    resumed = Summary(str(root_dir), keep_until_env_steps=keep_until)
    for step in range(keep_until + 100, last_step + 1, 100):
        resumed.write(step, step // 2, WALL_TIME + 1000 + step, {'train/critic_loss': step + 0.5})
    resumed.close()


# The killed run's critic losses up to its checkpoint at 200, then the resumed run's.
RESUMED_AT_200 = [(0, 0.0), (100, 100.0), (200, 200.0), (300, 300.5), (400, 400.5)]


def critic_losses(read_tensorboard, root_dir):
    return [(e.step, e.value) for e in read_tensorboard(root_dir / 'train')['critic_loss']]


def test_resume_replaces_later_events_also_when_the_old_file_sorts_after_the_new_one(
    tmp_path, monkeypatch, read_tensorboard
):
    # The killed run's files were made on a machine whose clock was an hour
    # ahead: TensorBoard reads files in name (creation time) order, so it would
    # read them after the resumed run's, and their steps 0-400 after the new 300
    # and 400 would hide those.
    from tensorboard.summary.writer import event_file_writer

    now = summary_module.time.time
    monkeypatch.setattr(event_file_writer.time, 'time', lambda: now() + 3600)
    write_killed_run(tmp_path)
    monkeypatch.undo()
    resume(tmp_path, keep_until=200)

    assert critic_losses(read_tensorboard, tmp_path) == RESUMED_AT_200
    # In each directory: what was kept, merged into one file, then the resumed run's.
    for mode in ('train', 'eval'):
        kept, _ = event_files(tmp_path / mode)
        assert kept.endswith('.kept-200')


def test_files_of_earlier_seconds_are_left_as_they_are_and_the_restart_hides_their_later_steps(
    tmp_path, monkeypatch, read_tensorboard
):
    # The usual resume: the killed run's files were made before this second, so
    # they come first and the resumed file's restart hides their steps past 200.
    from tensorboard.summary.writer import event_file_writer

    now = summary_module.time.time
    monkeypatch.setattr(event_file_writer.time, 'time', lambda: now() - 3600)
    write_killed_run(tmp_path)
    monkeypatch.undo()
    before = {
        m: {n: (tmp_path / m / n).read_bytes() for n in event_files(tmp_path / m)}
        for m in ('train', 'eval')
    }
    resume(tmp_path, keep_until=200)
    for mode, files in before.items():
        (old,) = files
        assert event_files(tmp_path / mode)[0] == old
        assert (tmp_path / mode / old).read_bytes() == files[old]
    assert critic_losses(read_tensorboard, tmp_path) == RESUMED_AT_200


def test_a_second_resume_keeps_what_the_first_one_wrote_up_to_its_checkpoint(
    tmp_path, read_tensorboard
):
    write_killed_run(tmp_path)
    resume(tmp_path, keep_until=100, last_step=300)
    resume(tmp_path, keep_until=200)
    assert critic_losses(read_tensorboard, tmp_path) == [
        (0, 0.0),
        (100, 100.0),
        (200, 200.5),
        (300, 300.5),
        (400, 400.5),
    ]


def test_files_of_an_earlier_layout_are_merged_with_their_restarts_purges_applied(
    tmp_path, read_tensorboard
):
    # As a resume left them before merging: the killed run's file with steps
    # 0-400, then the resumed run's: a START at 201 (TensorBoard drops the
    # steps from 201 read before it), 300.5 and 400.5.
    from torch.utils.tensorboard import SummaryWriter

    write_killed_run(tmp_path)
    later = SummaryWriter(str(tmp_path / 'train'), purge_step=201)
    for step in (300, 400):
        later.add_scalar('critic_loss', step + 0.5, step, walltime=WALL_TIME + 1000 + step)
    later.close()
    before = critic_losses(read_tensorboard, tmp_path)
    assert before == RESUMED_AT_200

    summary_module.keep_events_until(str(tmp_path / 'train'), 300)
    assert critic_losses(read_tensorboard, tmp_path) == before[:4]
    (name,) = event_files(tmp_path / 'train')
    assert name.startswith('events.out.tfevents.') and name.endswith('.kept-300')


def test_keeping_events_drops_a_record_cut_short_and_a_fresh_start_removes_the_files(
    tmp_path, read_tensorboard
):
    write_killed_run(tmp_path)
    log_dir = tmp_path / 'train'
    (name,) = event_files(log_dir)
    # A kill while writing: half a record at the end of the file.
    with open(log_dir / name, 'ab') as f:
        f.write(b'\x30\x00\x00\x00\x00\x00\x00\x00\x01\x02')
    (log_dir / '.merging-x1').write_bytes(b'a merge cut short')

    (log_dir / name).chmod(0o640)
    summary_module.keep_events_until(str(log_dir), 200)
    (merged,) = event_files(log_dir)
    assert (log_dir / merged).stat().st_mode & 0o777 == 0o640  # as the old file's
    assert critic_losses(read_tensorboard, tmp_path) == [(0, 0.0), (100, 100.0), (200, 200.0)]
    content = (log_dir / merged).read_bytes()
    summary_module.keep_events_until(str(log_dir), 200)  # nothing to drop
    assert event_files(log_dir) == [merged] and (log_dir / merged).read_bytes() == content

    summary_module.keep_events_until(str(log_dir), -1)  # a fresh start
    assert event_files(log_dir) == []
    summary_module.keep_events_until(str(tmp_path / 'missing'), 0)


def record_header(length, length_crc=None):
    """A TFRecord's length and its masked CRC-32C (``length_crc`` when given)."""
    header = struct.pack('<Q', length)
    crc = masked_crc32c(header) if length_crc is None else length_crc
    return header + struct.pack('<I', crc)


def checksummed_bytes(monkeypatch):
    """The lengths of the data ``summary`` computes a CRC-32C of, from now on."""
    lengths = []

    def counting(data):
        lengths.append(len(data))
        assert len(data) < 1 << 20, 'a checksum of more than any event train writes'
        return masked_crc32c(data)

    monkeypatch.setattr(summary_module, 'masked_crc32c', counting)
    return lengths


@pytest.mark.parametrize(
    'length, tail, warned',
    [(100, 50, False), (2 << 30, 0, False), (2 << 30, (2 << 30) + 4, True)],
    ids=['cut_short', 'cut_short_claiming_gigabytes', 'claiming_gigabytes_of_holes'],
)
def test_a_record_cut_short_or_claiming_gigabytes_is_not_read(
    tmp_path, monkeypatch, caplog, read_tensorboard, length, tail, warned
):
    write_killed_run(tmp_path)
    log_dir = tmp_path / 'train'
    (name,) = event_files(log_dir)
    # A record header, its own checksum valid, and ``tail`` bytes after it: fewer than it
    # claims, a kill's truncation; or 2 GiB of holes (no disk space), not a record train
    # writes.
    with open(log_dir / name, 'ab') as f:
        f.write(record_header(length))
        f.truncate(f.tell() + tail)
    lengths = checksummed_bytes(monkeypatch)
    with caplog.at_level('WARNING'):
        assert summary_module.tags_after(str(log_dir), 300) == ['critic_loss']
        summary_module.keep_events_until(str(log_dir), 400)
    assert max(lengths) < 1000
    assert critic_losses(read_tensorboard, tmp_path) == [(s, float(s)) for s in range(0, 401, 100)]
    assert ('more than any event train writes' in caplog.text) == warned, caplog.text


def killed_runs_records(tmp_path):
    """A killed run's train event file: its directory, path and bytes, where each record
    starts and the step of its event."""
    write_killed_run(tmp_path)
    log_dir = tmp_path / 'train'
    (name,) = event_files(log_dir)
    path = log_dir / name
    content = path.read_bytes()
    starts, steps, at = [], [], 0
    while at < len(content):
        length = struct.unpack_from('<Q', content, at)[0]
        starts.append(at)
        steps.append(Event.FromString(content[at + 12 : at + 12 + length]).step)
        at += 16 + length
    assert at == len(content) and steps[-5:] == [0, 100, 200, 300, 400], steps
    return log_dir, path, content, starts, steps


@pytest.mark.parametrize('damage', ['length', 'data'])
def test_a_damaged_record_and_the_rest_of_its_file_are_dropped_with_a_warning(
    tmp_path, caplog, read_tensorboard, damage
):
    log_dir, path, content, starts, steps = killed_runs_records(tmp_path)
    at_200 = starts[steps.index(200)]
    damaged = bytearray(content)
    # A bit of the length, or of the data, of the record at step 200.
    damaged[at_200 + (0 if damage == 'length' else 20)] ^= 1
    path.write_bytes(bytes(damaged))
    with caplog.at_level('WARNING'):
        summary_module.keep_events_until(str(log_dir), 400)
    assert critic_losses(read_tensorboard, tmp_path) == [(0, 0.0), (100, 100.0)]
    problem = 'length does not match' if damage == 'length' else 'data does not match'
    message = f'the record at byte {at_200} is damaged (its {problem} its checksum)'
    assert message in caplog.text and str(path) in caplog.text


def test_a_record_of_no_event_and_the_rest_of_its_file_are_dropped_with_a_warning(
    tmp_path, caplog, read_tensorboard
):
    log_dir, path, content, starts, steps = killed_runs_records(tmp_path)
    at_200 = starts[steps.index(200)]
    # In place of the record at step 200, one whose checksums hold but whose data no
    # event parses from (a field of wire type 7).
    data = b'\x07'
    header = struct.pack('<Q', len(data))
    record = (
        header
        + struct.pack('<I', summary_module.masked_crc32c(header))
        + data
        + struct.pack('<I', summary_module.masked_crc32c(data))
    )
    path.write_bytes(content[:at_200] + record + content[starts[steps.index(200) + 1] :])
    with caplog.at_level('WARNING'):
        # What a resume reads first, on every resume: the tags written after its step.
        assert summary_module.tags_after(str(log_dir), 0) == ['critic_loss']
        summary_module.keep_events_until(str(log_dir), 400)
    assert critic_losses(read_tensorboard, tmp_path) == [(0, 0.0), (100, 100.0)]
    message = f'event file {path}: the record at byte {at_200} holds no event'
    assert message in caplog.text, caplog.text


def test_a_merge_cut_short_after_its_file_was_complete_is_finished(
    tmp_path, monkeypatch, read_tensorboard
):
    # Two old files: the killed run's (steps 0-400), then a restart's (a START at
    # 201, steps 300 and 400); the file name counter starts at 0 to keep that order.
    from tensorboard.summary.writer import event_file_writer
    from torch.utils.tensorboard import SummaryWriter

    monkeypatch.setattr(event_file_writer, '_global_uid', event_file_writer.AtomicCounter(0))
    write_killed_run(tmp_path)
    log_dir = tmp_path / 'train'
    later = SummaryWriter(str(log_dir), purge_step=201)
    for step in (300, 400):
        later.add_scalar('critic_loss', step + 0.5, step, walltime=WALL_TIME + 1000 + step)
    later.close()
    first, second = event_files(log_dir)
    # The merged file of a resume at 100, complete, and the merge cut short after
    # it removed the first old file: the steps up to 100 are now only in it.
    other = tmp_path / 'other'
    write_killed_run(other, last_step=100)
    (kept,) = event_files(other / 'train')
    hidden = '.merged-' + kept.replace('tfevents', 'tf-events')
    os.rename(other / 'train' / kept, log_dir / hidden)
    os.remove(log_dir / first)

    summary_module.keep_events_until(str(log_dir), 100)
    (name,) = event_files(log_dir)  # the other old file is gone
    assert name not in (first, second) and name.startswith('events.out.tfevents.')
    assert critic_losses(read_tensorboard, tmp_path) == [(0, 0.0), (100, 100.0)]


def test_a_restarts_purge_drops_the_old_events_at_its_own_step(tmp_path, read_tensorboard):
    # As a resume at 299 left them before merging: the restart's START at 300
    # hides the killed run's 300 and 400, not only those after 300.
    from torch.utils.tensorboard import SummaryWriter

    write_killed_run(tmp_path)
    later = SummaryWriter(str(tmp_path / 'train'), purge_step=300)
    for step in (300, 400):
        later.add_scalar('critic_loss', step + 0.5, step, walltime=WALL_TIME + 1000 + step)
    later.close()
    expected = RESUMED_AT_200
    assert critic_losses(read_tensorboard, tmp_path) == expected

    summary_module.keep_events_until(str(tmp_path / 'train'), 400)
    assert critic_losses(read_tensorboard, tmp_path) == expected


def test_events_read_out_of_step_order_are_merged_in_step_order_those_of_a_step_as_read(
    tmp_path, monkeypatch, read_tensorboard
):
    # The first file was written on a clock an hour ahead: TensorBoard reads the
    # second one, with steps 300 (twice) and 400, first.
    from tensorboard.summary.writer import event_file_writer
    from torch.utils.tensorboard import SummaryWriter

    log_dir = tmp_path / 'train'
    now = summary_module.time.time
    monkeypatch.setattr(event_file_writer.time, 'time', lambda: now() + 3600)
    first = SummaryWriter(str(log_dir))
    for step in (0, 100, 200):
        first.add_scalar('critic_loss', float(step), step, walltime=WALL_TIME)
    first.close()
    monkeypatch.undo()
    second = SummaryWriter(str(log_dir))
    for step, value in ((300, 1.0), (300, 2.0), (400, 400.0)):
        second.add_scalar('critic_loss', value, step, walltime=WALL_TIME)
    second.close()
    assert [step for step, _ in critic_losses(read_tensorboard, tmp_path)] == [
        300,
        300,
        400,
        0,
        100,
        200,
    ]

    summary_module.keep_events_until(str(log_dir), 400)
    assert critic_losses(read_tensorboard, tmp_path) == [
        (0, 0.0),
        (100, 100.0),
        (200, 200.0),
        (300, 1.0),
        (300, 2.0),
        (400, 400.0),
    ]


def first_event_time(log_dir):
    """The run's start as TensorBoard shows it: the time of the first event it reads."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return accumulator.FirstEventTimestamp()


def test_the_merged_file_keeps_the_header_and_creation_time_of_the_runs_first_file(
    tmp_path, monkeypatch, read_tensorboard
):
    # The killed run two hours ago, a first resume an hour ago; its merge left
    # the events kept under the killed run's time, before the resumed run's file.
    from tensorboard.summary.writer import event_file_writer

    now = summary_module.time.time
    log_dir = tmp_path / 'train'
    monkeypatch.setattr(event_file_writer.time, 'time', lambda: now() - 7200)
    write_killed_run(tmp_path)
    monkeypatch.setattr(event_file_writer.time, 'time', lambda: now() - 3600)
    (killed,) = event_files(log_dir)
    started = first_event_time(log_dir)
    assert abs(started - (now() - 7200)) < 60  # the file's header, not a scalar's time
    resume(tmp_path, keep_until=200)
    monkeypatch.undo()
    assert len(event_files(log_dir)) == 2

    summary_module.keep_events_until(str(log_dir), 300)
    (name,) = event_files(log_dir)
    assert name.split('.')[3] == killed.split('.')[3]
    assert first_event_time(log_dir) == started
    assert critic_losses(read_tensorboard, tmp_path) == [
        (0, 0.0),
        (100, 100.0),
        (200, 200.0),
        (300, 300.5),
    ]


def test_a_resume_in_the_same_second_as_the_killed_runs_files_is_read_last(
    tmp_path, monkeypatch, read_tensorboard
):
    # Every file made in one second: the merged file must still sort before the
    # resumed run's, whose name then differs only after the host. The file name
    # counter (process-wide) starts at 8: the killed run's files get 8 and 9, the
    # resumed run's 10 and 11, and "10" sorts before "8".
    from tensorboard.summary.writer import event_file_writer

    monkeypatch.setattr(event_file_writer, '_global_uid', event_file_writer.AtomicCounter(8))
    frozen = summary_module.time.time()
    monkeypatch.setattr(summary_module.time, 'time', lambda: frozen)
    write_killed_run(tmp_path)
    assert [event_files(tmp_path / m)[0].split('.')[-1] for m in ('train', 'eval')] == ['8', '9']
    resume(tmp_path, keep_until=200)
    assert critic_losses(read_tensorboard, tmp_path) == RESUMED_AT_200
    for mode in ('train', 'eval'):
        kept, _ = event_files(tmp_path / mode)
        assert kept.endswith('.kept-200')


def test_files_that_are_not_event_files_are_left_alone(tmp_path, read_tensorboard):
    write_killed_run(tmp_path)
    log_dir = tmp_path / 'train'
    (log_dir / 'projector_config.pbtxt').write_text('embeddings {}\n')
    (log_dir / 'plugins').mkdir()

    summary_module.keep_events_until(str(log_dir), 200)
    assert critic_losses(read_tensorboard, tmp_path) == [(0, 0.0), (100, 100.0), (200, 200.0)]
    summary_module.keep_events_until(str(log_dir), -1)  # a fresh start
    assert event_files(log_dir) == ['plugins', 'projector_config.pbtxt']
    assert (log_dir / 'projector_config.pbtxt').read_text() == 'embeddings {}\n'


@pytest.mark.parametrize('load_fast', READERS)
@pytest.mark.parametrize('clock_s', [-3600, 3600], ids=['files-left-alone', 'files-merged'])
def test_both_tensorboard_readers_hide_what_a_killed_run_wrote_after_its_checkpoint(
    tmp_path, monkeypatch, load_fast, clock_s
):
    # The killed run wrote critic losses up to 400 and Q values from 300 on,
    # after its checkpoint at 200. The resumed run writes its first critic loss
    # at 400 and no Q value: neither of the killed run's 300s nor its Q values
    # may show, in a TensorBoard open during the resume or one started after it.
    # The Rust reader drops a tag's points only from a point of that tag read
    # later, so it needs more than the restart the Python reader applies. The
    # killed run's files were made by a clock an hour behind (the usual resume)
    # or ahead (merged into one, which an open Python reader does not read on and
    # from which the merge dropped every Q value: the Rust reader open then shows
    # them until it restarts, as README says, for a point that hid them would be
    # the first of its tag in the files a TensorBoard started later reads).
    from tensorboard.summary.writer import event_file_writer

    now = summary_module.time.time
    monkeypatch.setattr(event_file_writer.time, 'time', lambda: now() + clock_s)
    killed_run = Summary(str(tmp_path))
    for step in range(0, 401, 100):
        scalars = {'train/critic_loss': float(step)}
        if step > 200:
            scalars['train/q_value'] = -float(step)
        killed_run.write(step, step // 2, WALL_TIME + step, scalars)
    killed_run.close()
    monkeypatch.undo()
    killed = {
        'critic_loss': [(s, float(s)) for s in range(0, 401, 100)],
        'q_value': [(300, -300.0), (400, -400.0)],
    }
    resumed = {'critic_loss': [(0, 0.0), (100, 100.0), (200, 200.0), (400, 400.5)], 'q_value': []}

    if clock_s < 0:
        shown_while_open = resumed
    elif load_fast == 'true':
        shown_while_open = dict(resumed, q_value=killed['q_value'])
    else:
        shown_while_open = None
    with TensorBoard(tmp_path, load_fast, tmp_path / 'tensorboard_open.log') as open_before:
        assert open_before.wait_for('train', killed) == killed
        resumed_run = Summary(str(tmp_path), keep_until_env_steps=200)
        resumed_run.write(400, 200, WALL_TIME + 1400, {'train/critic_loss': 400.5})
        resumed_run.close()
        assert event_files(tmp_path / 'train')[0].endswith('.kept-200') == (clock_s > 0)
        if shown_while_open is not None:
            shown = open_before.wait_for('train', shown_while_open)
            assert shown == shown_while_open
    with TensorBoard(tmp_path, load_fast, tmp_path / 'tensorboard_after.log') as started_after:
        assert started_after.wait_for('train', resumed) == resumed


@pytest.mark.parametrize('load_fast', READERS)
@pytest.mark.parametrize(
    'clock_s, merged',
    [(-60, False), (-60, True), (60, False)],
    ids=['files-left-alone', 'merged-at-a-later-resume', 'removed-at-the-fresh-start'],
)
def test_tags_a_fresh_start_hid_stay_in_view_after_the_hidden_points_are_merged_away(
    tmp_path, monkeypatch, load_fast, clock_s, merged, read_tensorboard
):
    # A run killed after its first evaluation, before any checkpoint; the fresh
    # start hides that point (a valueless point at step 0 for each tag it wrote)
    # and evaluates again. A later resume merges the files, dropping the killed
    # run's point: the hiding point is then the tag's first, and a reader that
    # takes a tag's kind from its first point must still see a scalar.
    from tensorboard.summary.writer import event_file_writer

    now = summary_module.time.time
    # Its files made a minute ago, and left as they are by the fresh start; or by a
    # clock a minute ahead, and removed by it (they would sort after its own).
    monkeypatch.setattr(event_file_writer.time, 'time', lambda: now() + clock_s)
    killed_run = Summary(str(tmp_path))
    killed_run.write(0, 0, WALL_TIME, {'eval/AverageReturn': -1.0})
    killed_run.close()
    monkeypatch.undo()
    fresh = Summary(str(tmp_path), keep_until_env_steps=-1)
    for step in (0, 100, 200):
        fresh.write(step, step, WALL_TIME + 10 + step, {'eval/AverageReturn': step + 0.5})
    fresh.close()
    expected = {'AverageReturn': [(0, 0.5), (100, 100.5), (200, 200.5)]}
    if merged:  # As a resume at 200 does when the old files would sort after its own.
        summary_module.keep_events_until(str(tmp_path / 'eval'), 200)
        (name,) = event_files(tmp_path / 'eval')
        assert name.endswith('.kept-200')
    else:
        assert len(event_files(tmp_path / 'eval')) == (2 if clock_s < 0 else 1)
    evaluation = read_tensorboard(tmp_path / 'eval')
    assert [(e.step, e.value) for e in evaluation['AverageReturn']] == expected['AverageReturn']
    with TensorBoard(tmp_path, load_fast, tmp_path / 'tensorboard.log') as tensorboard:
        assert tensorboard.wait_for('eval', expected) == expected


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
    # The rates so far, read without starting the next interval (a checkpoint keeps them).
    clock[0] += 1.0
    assert throughput.rates(1200, 400, restart=False) == (100.0, 50.0)
    clock[0] += 1.0
    assert throughput.rates(1300, 400) == (100.0, 25.0)


@pytest.mark.parametrize('cut', ['300,3', '300,30,0.12'], ids=['fields_missing', 'in_last_field'])
def test_progress_csv_drops_a_row_cut_short_by_a_kill(tmp_path, read_progress, cut):
    path = tmp_path / 'progress.csv'
    # A kill mid-append leaves the last row without its last fields, or its last
    # field without its last digits.
    path.write_text('env_steps,num_updates,train/critic_loss\n100,10,0.5\n200,20,0.25\n' + cut)
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


def test_a_row_whose_env_steps_is_no_number_is_kept_by_a_resume_and_counts_no_step(
    tmp_path, read_progress, caplog
):
    path = tmp_path / 'progress.csv'
    path.write_text(
        'env_steps,num_updates\n100,10\nedited,by hand\n200,20\n300,30\nnote,\n',
        newline='',
    )
    assert summary_module.last_env_steps(str(path)) == 300
    # Resumed from the checkpoint at 200: the rows after it go, an edited one stays.
    ProgressCsv(str(path), max_env_steps=200).write({'env_steps': 300, 'num_updates': 31})
    _, rows = read_progress(path)
    assert [(r['env_steps'], r['num_updates']) for r in rows] == [
        ('100', '10'),
        ('edited', 'by hand'),
        ('200', '20'),
        ('note', ''),
        ('300', '31'),
    ]
    assert "2 row(s) whose env_steps is no whole number (the first: 'edited') are kept" in (
        caplog.text
    )


@pytest.mark.parametrize('edited', ['300.0', 'nan', 'inf'])
def test_the_warning_of_an_env_steps_that_is_a_number_but_no_count_calls_it_no_whole_number(
    tmp_path, caplog, edited
):
    # A float, however it is spelt, counts no step: the warning does not call it no number.
    path = tmp_path / 'progress.csv'
    path.write_text(f'env_steps,num_updates\n100,10\n{edited},20\n', newline='')
    ProgressCsv(str(path), max_env_steps=100)
    assert f"1 row(s) whose env_steps is no whole number (the first: '{edited}')" in caplog.text


@pytest.mark.parametrize(
    'data',
    [
        # "CSV UTF-8" of a spreadsheet: a byte order mark, CRLF line breaks, a blank line.
        'env_steps,num_updates\r\n100,10\r\n\r\n200,20\r\n300,30\r\n'.encode('utf-8-sig'),
        # Saved by an editor that ends lines with a bare CR, or LF, instead of train's CRLF.
        b'env_steps,num_updates\r100,10\r200,20\r300,30\r',
        b'env_steps,num_updates\n100,10\n200,20\n300,30\n',
    ],
    ids=['spreadsheet', 'bare_cr', 'lf'],
)
def test_a_progress_csv_saved_by_a_spreadsheet_or_an_editor_is_resumed_as_the_table_train_wrote(
    tmp_path, read_progress, caplog, data
):
    path = tmp_path / 'progress.csv'
    path.write_bytes(data)
    assert summary_module.last_env_steps(str(path)) == 300
    assert summary_module.unevaluated_row(str(path), 200, 'num_updates') is None
    # Resumed from the checkpoint at 200: the row after it goes, those before it stay.
    ProgressCsv(str(path), max_env_steps=200).write({'env_steps': 300, 'num_updates': 31})
    header, rows = read_progress(path)
    assert header == ['env_steps', 'num_updates']
    assert [(r['env_steps'], r['num_updates']) for r in rows] == [
        ('100', '10'),
        ('200', '20'),
        ('300', '31'),
    ]
    assert 'no number' not in caplog.text


def test_a_progress_csv_that_cannot_be_read_is_named_and_left_as_it_is(tmp_path):
    path = tmp_path / 'progress.csv'
    text = 'env_steps,num_updates\n100,10\n200,"' + 'x' * 200_000 + '"\n'
    path.write_text(text)
    message = f'{path}, line 3: field larger than field limit (131072). train reads it'
    with pytest.raises(summary_module.ProgressCsvError, match=re.escape(message)):
        summary_module.last_env_steps(str(path))
    with pytest.raises(summary_module.ProgressCsvError, match=re.escape(message)):
        ProgressCsv(str(path), max_env_steps=100)
    assert path.read_text() == text


ANOTHER = 'which no progress.csv of train has: it holds another table'


@pytest.mark.parametrize(
    'text, problem',
    [
        # Complete lines: no kill cut them. A resume would write the file again without them.
        (
            'env_steps,num_updates\n100,10\n200,20,a note\n300,30\n',
            'line 3 has 3 field(s) where the header has 2',
        ),
        (
            'env_steps,num_updates\n100,10\n200\n300,30\n',
            'line 3 has 1 field(s) where the header has 2',
        ),
        # plot's curves written under the name: train appended its rows under their header.
        ('group,env_steps,mean,low,high\nx,0,1.0,0.5,1.5\n', f"has the column 'group', {ANOTHER}"),
        ('step,eval/AverageReturn\n100,-3.5\n', f"has the column 'step', {ANOTHER}"),
        ('env_steps,train/\n100,1\n', f"has the column 'train/', {ANOTHER}"),
        (
            'env_steps,test/AverageReturn\n100,1\n',
            f"has the column 'test/AverageReturn', {ANOTHER}",
        ),
        ('eval/AverageReturn\n-3.5\n', f"has no column 'env_steps', {ANOTHER}"),
        # A column copied in a spreadsheet: a resume would write its last values over the first.
        (
            'env_steps,eval/AverageReturn,eval/AverageReturn\n100,-3.5,-1\n',
            "has the column 'eval/AverageReturn' twice, which no progress.csv of train has",
        ),
    ],
    ids=[
        'one_field_too_many',
        'one_field_missing',
        'plot_curves',
        'step_column',
        'scalar_without_name',
        'scalar_of_another_mode',
        'no_env_steps',
        'column_named_twice',
    ],
)
def test_an_edited_row_or_another_table_stops_a_resume_and_is_kept(tmp_path, text, problem):
    path = tmp_path / 'progress.csv'
    path.write_text(text)
    message = f'{path}{"," if problem.startswith("line") else ""} {problem}'
    with pytest.raises(summary_module.ProgressCsvError, match=re.escape(message)):
        ProgressCsv(str(path), max_env_steps=300)
    with pytest.raises(summary_module.ProgressCsvError, match=re.escape(message)):
        summary_module.last_env_steps(str(path))
    assert path.read_text() == text


def test_a_progress_csv_that_cannot_be_opened_is_named_and_left_as_it_is(tmp_path):
    path = tmp_path / 'progress.csv'
    path.mkdir()
    with pytest.raises(summary_module.ProgressCsvError) as error:
        summary_module.last_env_steps(str(path))
    assert str(error.value).startswith(f'cannot read {path}: [Errno 21] Is a directory')
    assert 'train reads it to continue the run' in str(error.value)
    with pytest.raises(summary_module.ProgressCsvError, match='Is a directory'):
        ProgressCsv(str(path), max_env_steps=100)
    assert path.is_dir() and not os.listdir(path)


def test_last_env_steps_counts_a_row_at_step_0_and_none_without_a_row(tmp_path):
    path = tmp_path / 'progress.csv'
    path.write_text('env_steps,eval/AverageReturn\n0,-3.5\n')
    assert summary_module.last_env_steps(str(path)) == 0
    path.write_text('env_steps,eval/AverageReturn\n')
    assert summary_module.last_env_steps(str(path)) is None


def recorded_fsyncs(monkeypatch) -> list:
    """From now on, each ``os.fsync`` as ``(inode, size)`` of its file (size None for a
    directory), in order."""
    synced = []
    fsync = os.fsync

    def recording_fsync(fd):
        info = os.fstat(fd)
        synced.append((info.st_ino, None if stat.S_ISDIR(info.st_mode) else info.st_size))
        fsync(fd)

    monkeypatch.setattr(os, 'fsync', recording_fsync)
    return synced


@pytest.mark.parametrize('widened', [False, True], ids=['appended', 'new_column'])
def test_progress_csv_rows_are_on_the_disk_when_written(tmp_path, monkeypatch, widened):
    # Before the checkpoint of their step is: after a power cut, a resume from it finds
    # every row up to it. A new column rewrites the file under a new header: the
    # rewritten file, then the directory entry that names it, are synced.
    path = tmp_path / 'progress.csv'
    csv_file = ProgressCsv(str(path))
    csv_file.write({'env_steps': 100, 'train/critic_loss': 0.5})
    synced = recorded_fsyncs(monkeypatch)
    row = {'env_steps': 200, 'train/critic_loss': 0.25}
    csv_file.write({**row, 'train/alpha': 0.5} if widened else row)
    expected = [(path.stat().st_ino, path.stat().st_size)]
    if widened:
        assert 'train/alpha' in path.read_text().splitlines()[0]
        expected.append((tmp_path.stat().st_ino, None))
    assert synced == expected


def test_sync_puts_every_event_written_so_far_on_the_disk(tmp_path, monkeypatch):
    # Called at each checkpoint: after a power cut, the resume from it finds every event
    # up to it, as it finds every progress.csv row.
    summary = Summary(str(tmp_path))
    summary.write(100, 10, 1.0, {'train/critic_loss': 0.5, 'eval/AverageReturn': -1.0})
    synced = recorded_fsyncs(monkeypatch)
    summary.sync()
    for mode in ('train', 'eval'):
        events_dir = tmp_path / mode
        (name,) = [n for n in os.listdir(events_dir) if 'tfevents' in n]
        info = (events_dir / name).stat()
        # The file as it is once every event written so far is in it.
        assert (info.st_ino, info.st_size) in synced
        tag = b'critic_loss' if mode == 'train' else b'AverageReturn'
        assert tag in (events_dir / name).read_bytes()
        assert (events_dir.stat().st_ino, None) in synced
    summary.close()


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


def test_only_the_tensorboard_writer_threads_os_errors_are_left_to_the_run(monkeypatch):
    printed = []
    monkeypatch.setattr(threading, 'excepthook', lambda args: printed.append(args.exc_value))
    summary_module.leave_writer_thread_errors_to_the_run()
    summary_module.leave_writer_thread_errors_to_the_run()  # once: not a hook around a hook
    hook = threading.excepthook
    assert hook.leaves_writer_thread_errors_to_the_run

    class FailingWriterThread(summary_module._AsyncWriterThread):
        def __init__(self, error):
            threading.Thread.__init__(self)
            self.error = error

        def run(self):
            raise self.error

    class OtherThread(threading.Thread):
        def run(self):
            raise OSError(28, 'No space left on device')

    disk_full, bug = OSError(28, 'No space left on device'), KeyError('bug')
    for thread in [FailingWriterThread(disk_full), FailingWriterThread(bug), OtherThread()]:
        thread.start()
        thread.join()
    assert [type(e) for e in printed] == [KeyError, OSError]
    assert printed[0] is bug


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


def test_unevaluated_row_gives_the_training_scalars_of_a_step_without_an_evaluation(tmp_path):
    progress = tmp_path / 'progress.csv'
    assert summary_module.unevaluated_row(str(progress), 100, 'eval/AverageReturn') == {}
    progress.write_text(
        'env_steps,num_updates,wall_time,eval/AverageReturn,train/critic_loss,train/bytes\n'
        '0,0,1.5,-3.25,,\n'
        '100,10,2.5,,0.125,4096\n'
        'edited,by,hand,,,\n'
        '200,20,3.5,-1.0,0.25,4096\n'
        '300,30,4.5,,oops,4096\n'
    )

    def row(env_steps):
        return summary_module.unevaluated_row(str(progress), env_steps, 'eval/AverageReturn')

    # Written again, each value reads as before: an int stays one.
    assert row(100) == {'train/critic_loss': 0.125, 'train/bytes': 4096}
    assert row(200) is None and row(0) is None  # evaluated
    assert row(400) == {}  # no row there
    assert row(300) == {'train/bytes': 4096}  # a cell that is no number is left out
