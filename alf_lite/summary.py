"""Where training scalars go: TensorBoard (train/ and eval/), progress.csv, the console."""

import collections
import contextlib
import csv
import io
import math
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from typing import Dict, Iterator, List, Optional, Tuple

from absl import logging
from google.protobuf.message import DecodeError
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary as SummaryProto
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread
from tensorboard.summary.writer.record_writer import RecordWriter
from torch.utils.tensorboard import SummaryWriter

from alf_lite.run_dir import EVENT_FILE_MARK, SUMMARY_MODES, TRAIN, RunDir, is_scalar_name
from alf_lite.runs import ENV_STEPS, NUM_UPDATES, PROGRESS_COLUMNS, WALL_TIME, complete_rows

# The shortest time a rate divides by: two calls within one clock tick.
MIN_INTERVAL_S = 1e-9
# Characters of the console progress bar.
_BAR_WIDTH = 20
# Prefixes of event files being merged (``keep_events_until``): one being written,
# one complete. Without "tfevents" in their names, TensorBoard does not read them.
_PARTIAL_PREFIX = '.merging-'
_MERGED_PREFIX = '.merged-'
# A TFRecord's length and the length's masked CRC-32C; the data's masked CRC-32C.
_RECORD_HEADER = struct.Struct('<QI')
_RECORD_CRC = struct.Struct('<I')
# Longer than any event train writes (a few scalars: about a hundred bytes).
_MAX_RECORD_BYTES = 1 << 20
# Where each of the trainer's columns goes in progress.csv.
_COLUMN_RANK = {name: i for i, name in enumerate(PROGRESS_COLUMNS)}


class ProgressCsv:
    """``progress.csv``: one row per summary or evaluation, one column per scalar.

    A scalar seen for the first time widens the header; the file is then
    rewritten whole (it is small and this happens only in the first rows). The
    trainer's columns keep the order of ``PROGRESS_COLUMNS`` and the others
    follow in the order they first came, so the header does not depend on which
    row first had a scalar (an episode that ends before the first summary in
    one seed, after it in another).

    Args:
        path: file to append to; an existing file is continued.
        max_env_steps: rows already in the file past this env step (written
            after the checkpoint that is resumed) are dropped so none is
            duplicated; None keeps all. A row whose env step is no whole number
            (an edited file: 'ten', 'nan', '300.0') is kept, with a warning.
    Raises:
        ProgressCsvError: the existing file cannot be read (``read_progress``).
    """

    def __init__(self, path: str, max_env_steps: Optional[int] = None):
        self._path = path
        self._columns: List[str] = []
        self._rows: List[Dict[str, str]] = []
        if os.path.exists(path):
            # A row cut short by a kill mid-append is dropped.
            self._columns, rows = read_progress(path)
            steps = [_env_steps(r) for r in rows]
            self._rows = [
                r
                for r, step in zip(rows, steps)
                if max_env_steps is None or step is None or step <= max_env_steps
            ]
            if None in steps:
                logging.warning(
                    '%s: %d row(s) whose %s is no whole number (the first: %r) are kept as '
                    'they are',
                    path,
                    steps.count(None),
                    ENV_STEPS,
                    rows[steps.index(None)].get(ENV_STEPS),
                )
            self._rewrite()

    def write(self, row: Dict[str, float]) -> None:
        """Append one row, on the disk when this returns; values are written with full float
        precision."""
        row = {k: repr(float(v)) if isinstance(v, float) else str(v) for k, v in row.items()}
        self._rows.append(row)
        new = [k for k in row if k not in self._columns]
        if new:
            # A stable sort: the other columns keep the order they came in.
            self._columns = sorted(
                self._columns + new, key=lambda k: _COLUMN_RANK.get(k, len(_COLUMN_RANK))
            )
            self._rewrite()
        else:
            with open(self._path, 'a', newline='', encoding='utf-8') as f:
                csv.DictWriter(f, self._columns).writerow(row)
                # On the disk before the checkpoint of its step: after a power cut, the
                # resume from that checkpoint finds every row up to it.
                f.flush()
                os.fsync(f.fileno())

    def _rewrite(self):
        from alf_lite.config import write_text_atomically

        text = io.StringIO(newline='')
        writer = csv.DictWriter(text, self._columns)
        writer.writeheader()
        writer.writerows(self._rows)
        write_text_atomically(self._path, text.getvalue())


class ProgressCsvError(ValueError):
    """A ``progress.csv`` that cannot be read as the table train writes; the message names
    the file and what is wrong with it."""


def read_progress(path: str) -> Tuple[List[str], List[Dict[str, str]]]:
    """The columns and the complete rows (``complete_rows``) of the ``progress.csv`` at
    ``path``; none when there is no file.

    Raises:
        ProgressCsvError: it cannot be opened, is not text, or holds a line csv cannot
            read, one longer than ``MAX_LINE_CHARS`` or a complete row with another number
            of fields than the header, or its header is not train's (a column train never
            writes, one named twice, or no ``env_steps``).
    """
    if not os.path.exists(path):
        return [], []
    try:
        # A byte order mark (a spreadsheet's "CSV UTF-8") is not part of the first column.
        with open(path, newline='', encoding='utf-8-sig') as f:
            # A row with a field too many or too few (an edited file) stops a resume, which
            # would otherwise write the file again without it.
            columns, rows = complete_rows(f, strict=True)
    except OSError as e:
        raise ProgressCsvError(_damaged(f'cannot read {path}: {e}')) from None
    except ValueError as e:  # names the file
        raise ProgressCsvError(_damaged(str(e))) from None
    # Another table under the name (a plot's curves, a spreadsheet's export): a resume would
    # write its rows and columns into the run's own.
    counters = (ENV_STEPS, NUM_UPDATES, WALL_TIME)
    foreign = [c for c in columns if c not in counters and not is_scalar_name(c)]
    if foreign or (columns and ENV_STEPS not in columns):
        what = f'the column {foreign[0]!r:.80}' if foreign else f'no column {ENV_STEPS!r}'
        raise ProgressCsvError(
            _damaged(
                f'{path} has {what}, which no progress.csv of train has: it holds another table'
            )
        )
    # A column named twice (copied in a spreadsheet): its rows read by name hold the values
    # of its last place only, which a resume would write over those of the others.
    twice = next((c for c, n in collections.Counter(columns).items() if n > 1), None)
    if twice is not None:
        raise ProgressCsvError(
            _damaged(
                f'{path} has the column {twice!r:.80} twice, which no progress.csv of train has'
            )
        )
    return columns, rows


def _damaged(problem: str) -> str:
    """The message of a ``ProgressCsvError``: ``problem`` and what the user can do."""
    return (
        f'{problem.rstrip(".")}. train reads it to continue the run, so it stopped and '
        'left the run as it was: mend the file, or move it aside to go on without its rows.'
    )


def _env_steps(row: Dict[str, str]) -> Optional[int]:
    """The env step of a ``progress.csv`` row; None where it is no whole number (an edited
    file: 'ten', 'nan', '300.0')."""
    try:
        return int(row.get(ENV_STEPS, ''))
    except ValueError:
        return None


def last_env_steps(path: str) -> Optional[int]:
    """The largest env step of the complete rows of ``progress.csv`` (``path``) whose env
    step is a whole number; None without one.

    Raises:
        ProgressCsvError: it cannot be read (``read_progress``).
    """
    steps = [_env_steps(r) for r in read_progress(path)[1]]
    return max((step for step in steps if step is not None), default=None)


def unevaluated_row(path: str, env_steps: int, eval_column: str) -> Optional[Dict[str, object]]:
    """The scalars of ``progress.csv`` (``path``) at ``env_steps`` when none of its rows there
    has ``eval_column``: ``{}`` without a row there, None when one is evaluated.

    The scalars are the row's filled ``<mode>/<tag>`` columns, as ``Summary.write``
    takes them: written again, each reads as before.
    """
    rows = _rows_at(path, env_steps)
    if any(r.get(eval_column) for r in rows):
        return None
    scalars = {}
    for key, text in (rows[-1] if rows else {}).items():
        if text and '/' in key:
            # A cell that is no number (an edited file) is left out, not a failed resume.
            with contextlib.suppress(ValueError):
                scalars[key] = int(text) if text.lstrip('-').isdigit() else float(text)
    return scalars


def summarised_at(path: str, env_steps: int) -> bool:
    """Whether a complete row of ``progress.csv`` (``path``) at ``env_steps`` holds training
    scalars (a filled ``train/<tag>`` column)."""
    rows = _rows_at(path, env_steps)
    return any(text and key.startswith(TRAIN + '/') for r in rows for key, text in r.items())


def _rows_at(path: str, env_steps: int) -> List[Dict[str, str]]:
    """The complete rows of ``progress.csv`` (``path``) at ``env_steps``."""
    return [r for r in read_progress(path)[1] if r.get(ENV_STEPS, '').strip() == str(env_steps)]


def keep_events_until(events_dir: str, env_steps: int) -> List[str]:
    """Merge the TensorBoard event files in ``events_dir`` into one, without the events after
    ``env_steps``, named to come before any file written from now on.

    TensorBoard reads a directory's files in name order (creation time in
    seconds, host, process id, a counter). A resumed writer's file begins with a
    restart (a ``START`` session log at the checkpoint's step + 1), which hides
    the later steps of the files read before it; the steps of a file read after
    it hide the resumed run's instead. ``Summary`` calls this where an old file
    would come after the resumed one (``events_need_merging``): one from a
    machine whose clock was ahead, or from the same process in the same second
    (a counter of 10 sorts before 9). The old files are read in TensorBoard's
    order, restarts applied, and what is kept is written to one file named with
    the earlier of the first file's time and a second before now. Cut short at
    any point, the next call completes or redoes it: the merged file is complete
    before any old file is removed. The Python reader of a TensorBoard open on
    the directory while its files are replaced (``--load_fast=false``) needs a
    restart to read on; the default reader reads on.

    Returns:
        the tags of the points kept, sorted.
    """
    if not os.path.isdir(events_dir):
        return []
    for name in os.listdir(events_dir):
        if name.startswith(_PARTIAL_PREFIX):
            os.remove(os.path.join(events_dir, name))
    _finish_merge(events_dir)
    files = _event_files(events_dir)
    if not files:
        return []
    header, kept = None, []
    for event, record in _read_events(events_dir, files):
        if event.HasField('file_version'):
            header = header or record
        elif event.HasField('session_log') and event.session_log.status == SessionLog.START:
            kept = [(step, e, r) for step, e, r in kept if step < event.step]
        elif _hides(event):
            # What it hid is gone; kept, it could become its tags' first point.
            continue
        elif event.step <= env_steps:
            kept.append((event.step, event, record))
    if not kept:
        for name in files:
            os.remove(os.path.join(events_dir, name))
        return []
    seconds = int(time.time()) - 1
    created = _created_second(files[0])
    if created is not None:
        seconds = min(seconds, created)
    merged = f'events.out.tfevents.{seconds:010d}.{socket.gethostname()}.kept-{env_steps}'
    fd, partial = tempfile.mkstemp(prefix=_PARTIAL_PREFIX, dir=events_dir)
    # mkstemp's file is private (0600): readable by whoever could read the old one.
    shutil.copymode(os.path.join(events_dir, files[0]), partial)
    with os.fdopen(fd, 'wb') as f:
        writer = RecordWriter(f)
        if header:
            writer.write(header)
        # Python's sort is stable: the events of one step keep their order.
        for _, _, record in sorted(kept, key=lambda step_event_record: step_event_record[0]):
            writer.write(record)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, os.path.join(events_dir, _MERGED_PREFIX + _hidden(merged)))
    _finish_merge(events_dir)
    return sorted({value.tag for _, event, _ in kept for value in event.summary.value})


def tags_after(events_dir: str, env_steps: int) -> List[str]:
    """The tags of the summaries in ``events_dir``'s event files after ``env_steps``, sorted."""
    if not os.path.isdir(events_dir):
        return []
    tags = set()
    for event, _ in _read_events(events_dir, _event_files(events_dir)):
        if event.step > env_steps:
            tags.update(value.tag for value in event.summary.value)
    return sorted(tags)


def _hides(event: Event) -> bool:
    """Whether ``event`` holds only points without a value (``hide_events_after``'s)."""
    values = event.summary.value
    return bool(values) and all(value.WhichOneof('value') is None for value in values)


def hide_events_after(writer: SummaryWriter, env_steps: int, tags: List[str]) -> None:
    """Hide from both of TensorBoard's readers the points of ``tags`` after
    ``env_steps`` in the event files read before ``writer``'s.

    The writer's ``purge_step`` began its file with a restart at ``env_steps`` + 1,
    which the Python reader (``--load_fast=false``) applies to all tags. The
    default reader (the Rust data server) ignores it: it drops a tag's points
    from a step on only when it reads a point of that tag at that step, so a
    point written after the checkpoint by a killed run would stay in view until
    the resumed run writes the tag at or before its step, or forever where it
    never does. Here each tag gets a point at ``env_steps`` + 1 that holds no
    value: the Rust reader drops the tag's later points and does not show it,
    the Python reader skips it.

    Both readers take a tag's kind from the first point they read of it: one
    without a value (or metadata) there would keep the tag out of view for good.
    So ``tags`` must each have a point with a value in a file read before
    ``writer``'s, and merges (``keep_events_until``) drop these points.
    """
    if tags:
        summary = SummaryProto(value=[SummaryProto.Value(tag=tag) for tag in tags])
        writer.file_writer.add_summary(summary, env_steps + 1)
        writer.flush()


def events_need_merging(events_dir: str, seconds: int) -> bool:
    """Whether an event file in ``events_dir`` would not come before a file made at
    ``seconds`` (since the epoch) in TensorBoard's order, or a merge was cut short."""
    if not os.path.isdir(events_dir):
        return False
    for name in os.listdir(events_dir):
        if name.startswith((_PARTIAL_PREFIX, _MERGED_PREFIX)):
            return True
        if EVENT_FILE_MARK in name:
            created = _created_second(name)
            if created is None or created >= seconds:
                return True
    return False


def _created_second(name: str) -> Optional[int]:
    """The creation time in ``events.out.tfevents.<10-digit seconds>...``; None for another name."""
    parts = name.split('.')
    if name.startswith('events.out.tfevents.') and len(parts[3]) == 10 and parts[3].isdigit():
        return int(parts[3])
    return None


def _event_files(events_dir: str) -> List[str]:
    """The names of the event files in ``events_dir``, in TensorBoard's order."""
    return sorted(name for name in os.listdir(events_dir) if EVENT_FILE_MARK in name)


def _read_events(events_dir: str, names: List[str]) -> Iterator[Tuple[Event, bytes]]:
    """``(event, record)`` of each record of the files ``names`` in ``events_dir``, in order,
    up to a record in a file that holds no event (its checksums hold: a file written
    by something else), which ends that file with a warning."""
    for name in names:
        path = os.path.join(events_dir, name)
        start = 0
        for record in _records(path):
            try:
                event = Event.FromString(record)
            except DecodeError:
                logging.warning(
                    'event file %s: the record at byte %d holds no event; it and the rest of '
                    'the file are dropped',
                    path,
                    start,
                )
                break
            yield event, record
            start += _RECORD_HEADER.size + len(record) + _RECORD_CRC.size


def _records(path: str) -> Iterator[bytes]:
    """The records of TFRecord file ``path`` up to the first one cut short or damaged.

    A record is its length (8 bytes), the length's masked CRC-32C, the data and
    the data's masked CRC-32C. One cut short by a kill ends its file: it and
    what follows are dropped, as TensorBoard does. So is a damaged one, with a
    warning; and one whose length is longer than the bytes left in the file or
    than any event train writes is not read at all, so that a file whose header
    claims gigabytes costs no memory or time.
    """
    with open(path, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        while True:
            start = f.tell()
            header = f.read(_RECORD_HEADER.size)
            if len(header) < _RECORD_HEADER.size:
                return
            length, length_crc = _RECORD_HEADER.unpack(header)
            problem = None
            if masked_crc32c(header[:8]) != length_crc:
                problem = 'its length does not match its checksum'
            elif start + _RECORD_HEADER.size + length + _RECORD_CRC.size > size:
                return
            elif length > _MAX_RECORD_BYTES:
                problem = f'its length of {length} bytes is more than any event train writes'
            else:
                data = f.read(length)
                (data_crc,) = _RECORD_CRC.unpack(f.read(_RECORD_CRC.size))
                if masked_crc32c(data) == data_crc:
                    yield data
                    continue
                problem = 'its data does not match its checksum'
            logging.warning(
                'event file %s: the record at byte %d is damaged (%s); it and the rest of '
                'the file are dropped',
                path,
                start,
                problem,
            )
            return


def _hidden(name: str) -> str:
    """``name`` without "tfevents", so that TensorBoard does not read the file."""
    return name.replace(EVENT_FILE_MARK, 'tf-events')


def _finish_merge(events_dir: str) -> None:
    """Replace the old event files by a complete merged file, if there is one."""
    merged = [name for name in os.listdir(events_dir) if name.startswith(_MERGED_PREFIX)]
    if not merged:
        return
    (name,) = merged
    for old in _event_files(events_dir):
        os.remove(os.path.join(events_dir, old))
    final = name[len(_MERGED_PREFIX) :].replace('tf-events', 'tfevents')
    os.replace(os.path.join(events_dir, name), os.path.join(events_dir, final))


def leave_writer_thread_errors_to_the_run() -> None:
    """Keep TensorBoard's writer thread from printing the ``OSError`` it stops on (a full
    disk): the run's next write or flush of events raises that error, which the run
    reports (train: one line). Once a process; other errors of the thread, and every
    other thread's, print as before."""
    previous = threading.excepthook
    if getattr(previous, 'leaves_writer_thread_errors_to_the_run', False):
        return

    def excepthook(args):
        if isinstance(args.thread, _AsyncWriterThread) and isinstance(args.exc_value, OSError):
            return
        previous(args)

    excepthook.leaves_writer_thread_errors_to_the_run = True
    threading.excepthook = excepthook


class Summary:
    """Writes scalars named ``train/<name>`` or ``eval/<name>`` to all three sinks.

    Args:
        root_dir: experiment directory; events go to ``root_dir/train`` and
            ``root_dir/eval``, rows to ``root_dir/progress.csv``.
        keep_until_env_steps: TensorBoard events and CSV rows already in
            ``root_dir`` after this env step are discarded: the env step of the
            checkpoint being resumed, or -1 for a fresh start (discard all, e.g.
            what a run killed before its first checkpoint wrote). The rows are
            removed; the events are hidden by what begins the new event file
            (``hide_events_after``), or removed where that would not hide them
            (``keep_events_until``).
    """

    def __init__(self, root_dir: str, keep_until_env_steps: int = -1):
        leave_writer_thread_errors_to_the_run()
        run_dir = RunDir(root_dir)
        # The writers' files are named at this second or later.
        now = int(time.time())
        self._writers = {}
        for mode in SUMMARY_MODES:
            events_dir = run_dir.events_dir(mode)
            # Before a merge removes them: a TensorBoard open on the run still shows them.
            hidden = tags_after(events_dir, keep_until_env_steps)
            if events_need_merging(events_dir, now):
                kept = keep_events_until(events_dir, keep_until_env_steps)
                # Not a tag the merge left no point of: the hiding point would be its first.
                hidden = [tag for tag in hidden if tag in kept]
            self._writers[mode] = SummaryWriter(events_dir, purge_step=keep_until_env_steps + 1)
            hide_events_after(self._writers[mode], keep_until_env_steps, hidden)
        self._csv = ProgressCsv(run_dir.progress_file, keep_until_env_steps)

    def write(
        self, env_steps: int, num_updates: int, wall_time: float, scalars: Dict[str, float]
    ) -> None:
        """Write one set of scalars at ``env_steps`` (TensorBoard's step axis)."""
        for key, value in scalars.items():
            mode, name = key.split('/', 1)
            self._writers[mode].add_scalar(name, value, env_steps, walltime=wall_time)
        self._csv.write(
            {ENV_STEPS: env_steps, NUM_UPDATES: num_updates, WALL_TIME: wall_time, **scalars}
        )

    def sync(self) -> None:
        """Put the events written so far on the disk, as each progress.csv row is: at a
        checkpoint, so that after a power cut the resume from it finds every event up to
        it (and drops those after it)."""
        from alf_lite.config import sync_to_disk

        for writer in self._writers.values():
            writer.flush()
            events_dir = writer.get_logdir()
            for name in _event_files(events_dir):
                sync_to_disk(os.path.join(events_dir, name))
            # The names of the files this run created.
            sync_to_disk(events_dir)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


class Throughput:
    """Env steps and updates per second, each time over the interval since the previous call.

    The time spent inside ``excluded()`` (evaluations, checkpoints) is left out
    of the interval it falls in, so the rates are those of collecting and training.

    Args:
        env_steps: env steps at the start of the first interval.
        num_updates: updates at the start of the first interval.
    """

    def __init__(self, env_steps: int, num_updates: int):
        self._last = (time.monotonic(), env_steps, num_updates)
        self._excluded_s = 0.0

    @contextlib.contextmanager
    def excluded(self):
        """Context whose time does not count in the current interval."""
        start = time.monotonic()
        try:
            yield
        finally:
            self._excluded_s += time.monotonic() - start

    def rates(self, env_steps: int, num_updates: int, restart: bool = True) -> Tuple[float, float]:
        """``(env steps / s, updates / s)`` since the previous call that started an interval;
        starts the next interval unless ``restart`` is False."""
        now = time.monotonic()
        last_time, last_steps, last_updates = self._last
        seconds = max(now - last_time - self._excluded_s, MIN_INTERVAL_S)
        if restart:
            self._last = (now, env_steps, num_updates)
            self._excluded_s = 0.0
        return (env_steps - last_steps) / seconds, (num_updates - last_updates) / seconds


def print_progress(
    env_steps: int, num_env_steps: int, env_steps_per_sec: float, eval_return: float
) -> None:
    """One console line: a bar, env steps, speed and the last evaluation return; dropped where
    stderr can no longer be written (its terminal closed)."""
    frac = min(env_steps / max(num_env_steps, 1), 1.0)
    bar = '#' * int(frac * _BAR_WIDTH)
    eval_text = 'n/a' if eval_return is None or math.isnan(eval_return) else f'{eval_return:.1f}'
    line = (
        f'[{bar:<{_BAR_WIDTH}}] {env_steps}/{num_env_steps} env steps | '
        f'{env_steps_per_sec:.0f} SPS | eval return {eval_text}'
    )
    end = '\r' if sys.stderr.isatty() and frac < 1.0 else '\n'
    try:
        print(line, end=end, file=sys.stderr, flush=True)
    except OSError:
        # The run goes on to its checkpoint (the SIGHUP of a closed terminal stops it there);
        # stderr goes to /dev/null from here on, so that no later write (one at exit) fails.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stderr.fileno())
        os.close(devnull)
