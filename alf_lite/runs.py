"""progress.csv's columns, a run's results as the experiment tools read them, and one
training run in a subprocess.

A run is what ``python -m alf_lite.bin.train`` leaves in one root_dir (its
layout: ``alf_lite.run_dir``). The trainer writes progress.csv's columns under
the names below; ``plot``, ``grid_search`` and the learning benchmark read runs
through this module; ``grid_search`` also starts them with
``train_in_subprocess``, which runs on a Ray worker as well as locally.
"""

import concurrent.futures
import contextlib
import csv
import errno
import itertools
import math
import os
import re
import signal
import stat
import subprocess
import sys
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from alf_lite.run_dir import (
    PROGRESS_FILE,
    SUMMARY_MODES,
    RunDir,
    config_statements,
    not_text,
    read_config_text,
    split_binding,
)
from alf_lite.signals import started_watching_this_process

# progress.csv's columns. Its step axis; TensorBoard's step is the same number.
ENV_STEPS = 'env_steps'
NUM_UPDATES = 'num_updates'
WALL_TIME = 'wall_time'
# Scalars, named '<mode>/<tag>' (the TensorBoard event directory and tag).
EVAL_RETURN = 'eval/AverageReturn'
EVAL_EPISODE_LENGTH = 'eval/AverageEpisodeLength'
# The critics' mean Q over the last steps of eval episodes that terminated, and the
# discounted return actually received from those steps (evaluation.TerminationValues).
EVAL_Q_NEAR_TERMINATION = 'eval/QNearTermination'
EVAL_RETURN_NEAR_TERMINATION = 'eval/ReturnNearTermination'
TRAIN_RETURN = 'train/AverageReturn'
TRAIN_EPISODE_LENGTH = 'train/AverageEpisodeLength'
ENV_STEPS_PER_SEC = 'train/env_steps_per_sec'
UPDATES_PER_SEC = 'train/updates_per_sec'
REPLAY_BUFFER_BYTES = 'train/replay_buffer_bytes'
PROCESS_RSS_BYTES = 'train/process_rss_bytes'
ENV_PROCESSES_USS_BYTES = 'train/env_processes_uss_bytes'
# Columns that depend on the machine and the clock, not on the seed.
NONDETERMINISTIC_COLUMNS = (
    WALL_TIME,
    ENV_STEPS_PER_SEC,
    UPDATES_PER_SEC,
    PROCESS_RSS_BYTES,
    ENV_PROCESSES_USS_BYTES,
)
# The trainer's columns of progress.csv, in their order; the algorithm's scalars follow.
PROGRESS_COLUMNS = (
    ENV_STEPS,
    NUM_UPDATES,
    WALL_TIME,
    EVAL_RETURN,
    EVAL_EPISODE_LENGTH,
    EVAL_Q_NEAR_TERMINATION,
    EVAL_RETURN_NEAR_TERMINATION,
    TRAIN_RETURN,
    TRAIN_EPISODE_LENGTH,
    ENV_STEPS_PER_SEC,
    UPDATES_PER_SEC,
    REPLAY_BUFFER_BYTES,
    PROCESS_RSS_BYTES,
    ENV_PROCESSES_USS_BYTES,
)
# The binding of a run's config.gin that only picks its seed, and the seed of a run
# that does not bind it.
SEED_PARAM = 'TrainerConfig.random_seed'
DEFAULT_SEED = 0
# The run length TrainerConfig has where a config does not bind it.
NUM_ENV_STEPS_PARAM = 'TrainerConfig.num_env_steps'
DEFAULT_NUM_ENV_STEPS = 100_000
# A run's seed is below this: numpy's global generator takes no larger one.
MAX_SEED = 2**32
# The longest line of a csv file read (progress.csv, grid_search's summary): a row of
# theirs takes a few hundred characters, and csv refuses a field over 128 KiB anyway
# (``csv.field_size_limit``). A longer line is refused before it is read whole.
MAX_LINE_CHARS = 2**20
# The line of a log that says why train failed: its usage error or the exception.
_ERROR_LINE = re.compile(r'^(error: |[\w.]*(Error|Exception|Interrupt)\b)')
# absl's prefix of a logged line: severity, date, time, thread and source line.
_LOG_PREFIX = re.compile(r'^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^ \]]+:\d+\] ')
# The end of a run's log that ``log_error_line`` reads: its error is among its last lines.
LOG_TAIL_BYTES = 2**20


def train_column(name: str) -> str:
    """The column of training scalar ``name``, e.g. an algorithm's ``'critic_loss'``."""
    return f'train/{name}'


class LineTooLongError(ValueError):
    """A line of a csv file longer than ``MAX_LINE_CHARS``; the message names the file and
    the line."""


def bounded_lines(f) -> Iterator[str]:
    """The lines of csv file ``f`` (opened with ``newline=''``), the last one without its line
    break where it has none.

    Raises:
        LineTooLongError: a line is longer than ``MAX_LINE_CHARS``; it is read only that far.
    """
    for number in itertools.count(1):
        line = f.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS:
            raise LineTooLongError(
                f'{getattr(f, "name", "the file")}, line {number}: over {MAX_LINE_CHARS} '
                'characters long, far more than a row alf_lite writes (not read further)'
            )
        yield line


def complete_lines(f) -> Iterator[str]:
    """The lines of ``progress.csv`` (``f``, opened with ``newline=''``) that end in a line
    break: ``\r\n`` as train writes it, ``\n``, or a bare ``\r`` (a file saved by an editor
    that ends lines so). A kill or a full disk mid-append can cut the last row short
    anywhere, even inside its last field, where no field is missing: only its line break
    tells. A line longer than ``MAX_LINE_CHARS`` raises ``LineTooLongError``
    (``bounded_lines``)."""
    for line in bounded_lines(f):
        if line.endswith(('\n', '\r')):
            yield line


def complete_rows(f, strict: bool = False) -> Tuple[List[str], List[Dict[str, str]]]:
    """The columns and the complete rows of ``progress.csv`` (``f``, opened with
    ``newline=''``): a row cut short (``complete_lines``) is left out, and so is one
    without all its fields or with more fields than columns (an edited file), unless
    ``strict``.

    Raises:
        ValueError: naming the file: it is not text (``not_text``), a line is longer than
            ``MAX_LINE_CHARS`` (``LineTooLongError``) or csv cannot read one (a field over
            ``csv.field_size_limit``; the message names the line); with ``strict``, a
            complete row has another number of fields than the header (naming the line).
    """
    reader = csv.DictReader(complete_lines(f))
    name = getattr(f, 'name', 'the file')
    try:
        rows = []
        for r in reader:
            if has_its_fields(r):
                rows.append(r)
            elif strict:
                fields = sum(v is not None for k, v in r.items() if k is not None)
                fields += len(r.get(None, ()))
                raise ValueError(
                    f'{name}, line {reader.reader.line_num} has {fields} field(s) where the '
                    f'header has {len(reader.fieldnames)}'
                )
    except UnicodeDecodeError as e:
        raise ValueError(not_text(name, e)) from None
    except csv.Error as e:
        # The csv reader's count: the DictReader's own is that of the last row it returned.
        raise ValueError(f'{name}, line {reader.reader.line_num}: {e}') from None
    return list(reader.fieldnames or []), rows


def has_its_fields(row: Dict[str, Optional[str]]) -> bool:
    """Whether a ``csv.DictReader`` row has one field per column: csv gives a missing
    field as None, and the extra ones under the key None."""
    return None not in row.values() and None not in row


def _progress_points(
    reader: Iterator[List[str]], columns: List[str], x: str, y: str
) -> List[Tuple[float, float]]:
    """``(x, y)`` of each row of ``reader`` (progress.csv's rows after its header ``columns``)
    that has all its fields, a value of both and an ``env_steps`` that is a whole number, as
    train reads it, or empty.

    The rows are lists, not ``csv.DictReader``'s dicts, which would take most of the time of
    reading a long run. A column named twice is read where a dict would have it, at its last
    place.

    Raises:
        ValueError: the value of ``x`` or ``y`` in a row is not a number.
    """
    place = {name: i for i, name in enumerate(columns)}
    at_x, at_y, at_step = place[x], place[y], place.get(ENV_STEPS)
    points = []
    for row in reader:
        # A blank line, which csv.DictReader passes over, is a row without its fields.
        if len(row) != len(columns) or not row[at_x] or not row[at_y]:
            continue
        if at_step is not None:
            # An edited row ('ten', 'nan', '1e3', '300.0'), of no step: train keeps it and
            # counts no step of it (a step is a whole number, as train reads it).
            try:
                int(row[at_step] or 0)
            except ValueError:
                continue
        points.append((float(row[at_x]), float(row[at_y])))
    return points


def read_scalar(root_dir: str, y: str, x: str = ENV_STEPS) -> Tuple[np.ndarray, np.ndarray]:
    """The points ``(x, y)`` of one scalar of a run, sorted by x, one per x (the last written).

    Reads ``progress.csv``, passing over a row whose ``env_steps`` is no whole number (an
    edited file: train keeps it and counts no step of it); a run without one is read
    from its TensorBoard events, where x can only be ``env_steps`` (the event step) or
    ``wall_time``. A point whose x is no finite number (``nan``, ``inf``) is passed over
    too; one whose y is (a NaN loss, a diverged return) is kept.

    Args:
        root_dir: the run's directory.
        y: a progress.csv column, e.g. ``'eval/AverageReturn'`` (for TensorBoard,
            ``<train|eval>/<tag>``).
        x: the column plotted along x, e.g. ``'env_steps'``.
    Raises:
        ValueError: the run has no such scalar (the message lists the ones it has).
    """
    path = RunDir(root_dir).progress_file
    if os.path.isfile(path):
        # As train reads it: a byte order mark is not part of the first column.
        with open(path, newline='', encoding='utf-8-sig') as f:
            reader = csv.reader(complete_lines(f))
            try:
                columns = next(reader, [])
                missing = [name for name in (x, y) if name not in columns]
                points = [] if missing else _progress_points(reader, columns, x, y)
            except LineTooLongError:
                raise  # names its file and line
            except UnicodeDecodeError as e:
                raise ValueError(not_text(path, e)) from None
            except (csv.Error, ValueError) as e:
                raise ValueError(f'{path}, line {reader.line_num}: {e}') from None
        if not columns:
            raise ValueError(f'{path} is empty: the run wrote no row yet')
        if missing:
            raise ValueError(
                f'{path} has no column {missing[0]!r}; its columns are: {", ".join(columns)}'
            )
    else:
        points = _read_tensorboard_scalar(root_dir, y, x)
    # A point at a NaN or an infinite x (an edited row) has no place along x.
    by_x = {a: b for a, b in points if math.isfinite(a)}
    xs = np.array(sorted(by_x), dtype=np.float64)
    return xs, np.array([by_x[v] for v in xs], dtype=np.float64)


def first_wall_time(root_dir: str) -> float:
    """The wall time of the run's first row: read from its ``progress.csv``, or without one
    the earliest first point of its TensorBoard scalars (train writes a row's events with it).

    Raises:
        ValueError: the run has no row yet.
    """
    if os.path.isfile(RunDir(root_dir).progress_file):
        times, _ = read_scalar(root_dir, WALL_TIME, WALL_TIME)
        if not len(times):
            raise ValueError(f'{root_dir} has no row yet')
        return float(times[0])
    firsts = []
    for mode in SUMMARY_MODES:
        log_dir = RunDir(root_dir).events_dir(mode)
        if os.path.isdir(log_dir):
            accumulator = _event_accumulator(log_dir)
            for tag in accumulator.Tags()['scalars']:
                points = accumulator.Scalars(tag)
                firsts += [min(e.wall_time for e in points)] if points else []
    if not firsts:
        raise ValueError(f'{root_dir} has no row yet')
    return min(firsts)


def _read_tensorboard_scalar(root_dir, y, x):
    if x not in (ENV_STEPS, WALL_TIME):
        raise ValueError(
            f'{root_dir} has no {PROGRESS_FILE}; from TensorBoard events x can '
            f'only be {ENV_STEPS!r} or {WALL_TIME!r}, not {x!r}'
        )
    mode, _, tag = y.partition('/')
    log_dir = RunDir(root_dir).events_dir(mode)
    if not os.path.isdir(log_dir):
        raise ValueError(
            f'{root_dir} has neither {PROGRESS_FILE} nor TensorBoard events in {log_dir}'
        )
    accumulator = _event_accumulator(log_dir)
    tags = accumulator.Tags()['scalars']
    if tag not in tags:
        raise ValueError(
            f'{root_dir} has no {PROGRESS_FILE} and no TensorBoard scalar {tag!r} '
            f'in {log_dir}; it has: {", ".join(tags) or "none"}'
        )
    return [(e.step if x == ENV_STEPS else e.wall_time, e.value) for e in accumulator.Scalars(tag)]


def _event_accumulator(log_dir: str):
    """TensorBoard's reader of ``log_dir``'s events, loaded, keeping every scalar point."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    for name in os.listdir(log_dir) if os.path.isdir(log_dir) else ():
        path = os.path.join(log_dir, name)
        try:
            mode = os.stat(path).st_mode
        except OSError:  # a link to nothing: the reader passes over it
            continue
        if 'tfevents' in name and not stat.S_ISREG(mode):
            # Opened to be read, a FIFO would block until something writes into it.
            raise ValueError(f'{path} is no regular file (a pipe, a device or a socket)')
    accumulator = EventAccumulator(log_dir, size_guidance={SCALARS: 0})
    try:
        accumulator.Reload()
    except MemoryError:
        # A record's header declares its length, which the reader allocates before its
        # checksum can tell a damaged one.
        raise ValueError(
            f'an events file in {log_dir} declares a record larger than the memory: it is damaged'
        ) from None
    return accumulator


def run_columns(root_dir: str) -> List[str]:
    """The columns ``read_scalar`` can read of a run; [] when it wrote none yet or is unreadable.

    Those are the header of its ``progress.csv``, or without one ``env_steps``,
    ``wall_time`` and the ``<mode>/<tag>`` of each TensorBoard scalar.
    """
    path = RunDir(root_dir).progress_file
    if os.path.isfile(path):
        try:
            with open(path, newline='', encoding='utf-8-sig') as f:
                return next(csv.reader(bounded_lines(f)), [])
        except (OSError, csv.Error, ValueError):  # a UnicodeDecodeError is a ValueError
            return []
    scalars = []
    for mode in SUMMARY_MODES:
        log_dir = RunDir(root_dir).events_dir(mode)
        if os.path.isdir(log_dir):
            try:
                tags = _event_accumulator(log_dir).Tags()['scalars']
            except (OSError, ValueError):  # unreadable: a FIFO, a damaged record, another user's
                continue
            scalars += [f'{mode}/{tag}' for tag in tags]
    return [ENV_STEPS, WALL_TIME, *scalars] if scalars else []


def read_scalar_if_any(root_dir: str, y: str) -> Tuple[np.ndarray, np.ndarray]:
    """``read_scalar(root_dir, y)``, or two empty arrays when the run has no ``y`` (yet)."""
    try:
        return read_scalar(root_dir, y)
    except (OSError, ValueError):
        return np.zeros(0), np.zeros(0)


def config_bindings(root_dir: str) -> Dict[str, str]:
    """``{'scope/Name.param': 'value text'}`` of the run's ``config.gin``, whitespace normalised.

    Raises:
        FileNotFoundError: the run has no config.gin.
        ValueError: it is no text, or holds more than ``MAX_CONFIG_BYTES``.
    """
    statements = config_statements(read_config_text(RunDir(root_dir).config_file))
    return dict(filter(None, map(split_binding, statements)))


def final_value(
    root_dir: str, y: str = EVAL_RETURN, up_to: Optional[int] = None
) -> Optional[float]:
    """The last value of scalar ``y`` the run wrote (at an env step ``up_to`` at most, where
    given), or None when it wrote none (there)."""
    steps, values = read_scalar_if_any(root_dir, y)
    if up_to is not None:
        values = values[steps <= up_to]
    return float(values[-1]) if len(values) else None


def subprocess_env(num_threads: int) -> Dict[str, str]:
    """Environment variables for a subprocess that runs this copy of alf_lite.

    Args:
        num_threads: OpenMP / MKL threads of the subprocess.
    Returns:
        this process's environment with ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``
        set and the directory holding this ``alf_lite`` first on ``PYTHONPATH``.
    """
    import alf_lite

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(alf_lite.__file__)))
    env = dict(os.environ, OMP_NUM_THREADS=str(num_threads), MKL_NUM_THREADS=str(num_threads))
    env['PYTHONPATH'] = os.pathsep.join(
        [package_parent] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else [])
    )
    return env


def open_not_following_a_link(path: str, flags: int) -> int:
    """``os.open`` of ``path`` where neither it nor its directory is a link: OSError (ELOOP)
    for either."""
    directory, name = os.path.split(path)
    if os.path.islink(directory):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), directory)
    directory_fd = os.open(directory or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        return os.open(name, flags | os.O_NOFOLLOW, 0o666, dir_fd=directory_fd)
    except OSError as e:
        # Named by the whole path, not the name within its directory.
        raise OSError(e.errno, e.strerror, path) from None
    finally:
        os.close(directory_fd)


def exit_description(returncode: int) -> str:
    """How a process ended, for a message: ``'exit code 1'``, or the signal that killed it
    (``'killed by SIGKILL (exit code -9)'``, as the OOM killer ends a run)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f'signal {-returncode}'
        return f'killed by {name} (exit code {returncode})'
    return f'exit code {returncode}'


def log_error_line(log_path: str, offset: int = 0) -> str:
    """The line of a log, from ``offset`` on, that says why a process failed.

    That is the last line that is a usage error (``error: ...``) or names an
    exception (``ValueError: ...``, ``KeyboardInterrupt``); else the last line
    (a logged line without absl's prefix of severity, time, thread and source line).
    Only the log's last ``LOG_TAIL_BYTES`` are read: a run may have printed much.
    """
    with open(log_path, 'rb') as f:
        start = max(offset, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES)
        f.seek(start)
        text = f.read().decode(errors='replace')
    lines = [_LOG_PREFIX.sub('', line.strip()) for line in text.splitlines() if line.strip()]
    if start > offset and lines:
        lines.pop(0)  # a line cut at the tail's start
    for line in reversed(lines):
        if _ERROR_LINE.match(line):
            return line
    return lines[-1] if lines else 'no output'


# The result of a run that a stopped sweep did not start.
NOT_STARTED = {'returncode': None, 'wall_time_s': None, 'error': None, 'not_started': True}


# How often a main thread waiting on other threads wakes to run the handlers of signals.
SIGNAL_CHECK_S = 0.5


def completed_waking_for_signals(
    futures: Iterable[concurrent.futures.Future],
) -> Iterator[concurrent.futures.Future]:
    """``futures`` as they complete (those completing together in their order), waking the
    main thread every ``SIGNAL_CHECK_S``: the kernel gives a signal to any thread, and one
    that a worker thread got runs its Python handler in the main thread only once that
    wakes, which a wait without a timeout never does while the runs it waits for are
    stopped (Ctrl-Z) or train on (Ctrl-C)."""
    order = list(futures)
    pending = set(order)
    while pending:
        done, pending = concurrent.futures.wait(
            pending, timeout=SIGNAL_CHECK_S, return_when=concurrent.futures.FIRST_COMPLETED
        )
        yield from (future for future in order if future in done)


def wait_stopping_on_request(process: subprocess.Popen, stop_file: Optional[str] = None) -> int:
    """``process.wait()``; once ``stop_file`` exists, or on a KeyboardInterrupt meanwhile,
    train gets SIGINT (it writes a checkpoint and exits) and its exit is waited for."""
    signalled = False
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return process.wait(timeout=1.0)
            if stop_file is not None and not signalled and os.path.exists(stop_file):
                process.send_signal(signal.SIGINT)
                signalled = True
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGINT)
        return process.wait()


def train_in_subprocess(
    root_dir: str,
    config_text: str,
    num_threads: int,
    log_path: str,
    extra_env: Optional[Dict[str, str]] = None,
    on_start: Optional[Callable[[subprocess.Popen], None]] = None,
    stop_file: Optional[str] = None,
    import_dirs: Sequence[str] = (),
) -> dict:
    """Train (or resume) the run in ``root_dir`` with ``python -m alf_lite.bin.train``.

    Self-contained so that it runs on a Ray worker, which shares neither the
    driver's working directory nor its environment variables: the config comes
    as text (includes and overrides already applied), ``root_dir`` is absolute,
    and the subprocess finds this copy of alf_lite through ``PYTHONPATH``.

    Args:
        root_dir: absolute path of the run's directory.
        config_text: the whole gin config of the run.
        num_threads: OpenMP / MKL threads of the subprocess (torch's own count
            comes from ``TrainerConfig.torch_num_threads`` in the config).
        log_path: absolute path of the file that gets train's output, appended
            on each attempt (outside ``root_dir``: train refuses a non-empty
            root_dir without its config.gin). The config is written beside it
            while train runs, as ``<log_path without its extension>.gin``.
        extra_env: environment variables set for the subprocess, e.g. its
            ``CUDA_VISIBLE_DEVICES``.
        on_start: given, the process starts in a session of its own, so that
            signals reach it only as the caller forwards them, and is passed to
            ``on_start`` once started.
        stop_file: a path that, once it exists, stops the run: train gets SIGINT
            (checked each second), or does not start (``not_started`` is True).
            How a Ray driver reaches its runs on other nodes.
        import_dirs: directories put on the subprocess's ``PYTHONPATH`` after this
            alf_lite's, where the config's own modules are found (a local sweep's
            working directory, as ``python -m`` puts it on the sweep's path).
    Returns:
        ``{'returncode', 'wall_time_s', 'error'}``; ``error`` is None on success,
        else the line of the log that says why, with the exit code.
    """
    if stop_file is not None and os.path.exists(stop_file):
        return dict(NOT_STARTED)
    env = started_watching_this_process(dict(subprocess_env(num_threads), **(extra_env or {})))
    if import_dirs:
        alf_lite_dir, *others = env['PYTHONPATH'].split(os.pathsep)
        env['PYTHONPATH'] = os.pathsep.join([alf_lite_dir, *import_dirs, *others])
    # train's working directory (the logs') stays off its sys.path, as with python -P.
    env['PYTHONSAFEPATH'] = '1'
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    # Beside the log, on the storage the run's node sees, named for the run: one left by a
    # sweep that was killed (no ``finally`` ran) is replaced as the same run starts again.
    # Not through a link, as the log.
    config_path = os.path.splitext(log_path)[0] + '.gin'
    with open(config_path, 'w', encoding='utf-8', opener=open_not_following_a_link) as config_file:
        config_file.write(config_text)
    # Not the wall clock, which NTP or a user may set while the run trains.
    start = time.monotonic()
    try:
        # Not through a link (a sweep's root from elsewhere could hold one).
        with open(log_path, 'a', opener=open_not_following_a_link) as log:
            log.write(f'\n=== {time.strftime("%Y-%m-%d %H:%M:%S")} on {os.uname().nodename}\n')
            log.flush()
            offset = log.tell()
            with subprocess.Popen(
                [
                    sys.executable,
                    '-m',
                    'alf_lite.bin.train',
                    '--root_dir',
                    root_dir,
                    '--gin_file',
                    config_path,
                ],
                cwd=os.path.dirname(log_path),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=on_start is not None,
            ) as process:
                if on_start is not None:
                    on_start(process)
                returncode = wait_stopping_on_request(process, stop_file)
    finally:
        os.remove(config_path)
    error = None
    if returncode != 0:
        error = f'{exit_description(returncode)}: {log_error_line(log_path, offset)}'
    return {'returncode': returncode, 'wall_time_s': time.monotonic() - start, 'error': error}
