"""Trains the learning benchmark's runs as subprocesses, a few at a time, and records them.

Each run trains in its run directory with its output appended to its log. A
finished run gets ``done.json`` (wall time summed over attempts, env steps,
final eval return, mean load, code version) and is skipped from then on, as is
a run another process is training (another call of the launcher); every
attempt is kept in ``<log>.attempts.json``, from its start (one whose launcher was
killed ends at its log's last write; those of a run directory moved away or deleted go to
``<log>.until-<time>.attempts.json``); ``<out>/plan.json`` holds every
requested run's state (of every launcher in ``out``: each merges its runs into it under
a lock). With a deadline, a run starts only if its estimated
time fits (or, with ``partial_minutes``, a resumable run also when at least
that long is left), and a resumable run still going at the deadline
checkpoints and stops. Runs that cannot resume start first. SIGINT and SIGTERM (and SIGHUP,
SIGUSR1 and SIGUSR2, unless ignored) are passed on to the runs (alf_lite's train and the SB3
runner write a checkpoint and stop); a line that can no longer be printed (its terminal
closed) is dropped.

A run here is a ``benchmarks.learning.BenchmarkRun``; what starts it comes
from the caller as a command.
"""

if __name__ == '__main__':  # run by mistake: it has no command line
    from alf_lite.bin.cli import fail

    fail(
        'benchmarks/launcher.py is a module of benchmarks/learning.py, not a '
        'script: run python benchmarks/learning.py --help'
    )

import concurrent.futures
import datetime
import fcntl
import glob
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

from alf_lite.bin.cli import EXIT_BAD_INPUT, EXIT_FAULT, EXIT_SIGNAL_BASE, print_out
from alf_lite.config import write_text_atomically
from alf_lite.run_dir import RunDir, run_dir_in_use
from alf_lite.runs import (
    ENV_STEPS,
    EVAL_RETURN,
    complete_rows,
    completed_waking_for_signals,
    exit_description,
    log_error_line,
    read_scalar_if_any,
    subprocess_env,
)
from alf_lite.signals import STOP_SIGNALS, started_watching_this_process
from benchmarks import REPO_ROOT
from benchmarks.sb3_common import checkpoint_env_steps

if TYPE_CHECKING:
    from benchmarks.learning import BenchmarkRun

DONE_FILE = 'done.json'
# The numbers every done.json holds (and 'finished', the time it was written).
DONE_NUMBERS = ('env_steps', 'final_eval_return', 'final_eval_return_last3', 'wall_time_s')
PLAN_FILE = 'plan.json'
PLAN_LOCK_FILE = '.plan.json.lock'
# A run's final eval return in done.json and the report: the mean of its last this many
# evaluations.
LAST_N = 3
# A deadline admits a run only if its estimated time times this fits.
DEADLINE_MARGIN = 1.2
# How often the 1-minute load average is sampled while a run trains.
LOAD_SAMPLE_S = 30
# An attempt this long or longer measures a run's time per env step.
MIN_MEASURED_S = 300
# A run's time is estimated from this many of the latest measurements of its kind.
RECENT_MEASUREMENTS = 3
_MINUTE_S = 60
_HOUR_S = 3600
ATTEMPTS_SUFFIX = '.attempts.json'
# Exit statuses of a run stopped by SIGINT or SIGTERM: train exits with 128 + the
# signal number, a process without a handler dies of the signal (a negative status).
STOPPED_STATUSES = frozenset(
    [EXIT_SIGNAL_BASE + s for s in STOP_SIGNALS] + [-s for s in STOP_SIGNALS]
)

RunCommand = Callable[['BenchmarkRun'], List[str]]


def read_json(path: str) -> Optional[dict]:
    """The JSON in ``path``, or None when it is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class UnreadableRecord(ValueError):
    """A record the launcher keeps (``done.json``, an attempts file) that holds no record."""


def read_attempts(path: str) -> List[dict]:
    """The attempts of a run recorded in ``path`` (its ``ATTEMPTS_SUFFIX`` file); none without it.

    Raises:
        UnreadableRecord: ``path`` holds no list of attempts (cut short, or edited by hand).
    """
    if not os.path.lexists(path):
        return []
    attempts = read_json(path)
    if not isinstance(attempts, list) or not all(
        isinstance(a, dict) and isinstance(a.get('wall_time_s'), (int, float)) for a in attempts
    ):
        raise UnreadableRecord(
            f'{path} is not a JSON list of attempts, each with its wall_time_s: mend it or '
            "move it away (its attempts count in the run's wall time)"
        )
    return attempts


def read_done(run_dir: str) -> Optional[dict]:
    """The ``done.json`` of a finished run, or None.

    Raises:
        UnreadableRecord: a ``done.json`` that holds no JSON object (cut short, or edited by
            hand).
    """
    path = os.path.join(run_dir, DONE_FILE)
    if not os.path.lexists(path):
        return None
    done = read_json(path)
    if not isinstance(done, dict):
        raise UnreadableRecord(
            f'{path} is not the JSON object of a finished run: mend it, or move it away to '
            'train the run again'
        )
    wrong = [
        key
        for key in DONE_NUMBERS
        if isinstance(done.get(key), bool) or not isinstance(done.get(key), (int, float))
    ]
    if not isinstance(done.get('finished'), str):
        wrong.append('finished')
    if wrong:
        raise UnreadableRecord(
            f"{path} lacks a finished run's {', '.join(wrong)} (or holds another kind of "
            'value): mend it, or move it away to train the run again'
        )
    return done


def _write_json(path: str, data) -> None:
    write_text_atomically(path, json.dumps(data, indent=1) + '\n')


def format_duration(seconds: float) -> str:
    """``'42 s'``, ``'3.1 min'`` or ``'2.05 h'``: in the unit that gives at least 2 of it."""
    if seconds < 2 * _MINUTE_S:
        return f'{seconds:.0f} s'
    if seconds < 2 * _HOUR_S:
        return f'{seconds / _MINUTE_S:.1f} min'
    return f'{seconds / _HOUR_S:.2f} h'


class Launcher:
    """Runs the runs (``execute`` from worker threads); ``stop`` passes a signal on to them.

    Args:
        out: the directory of the runs.
        command: the command that trains (or resumes) a run.
        deadline: seconds since the epoch by which every started run should end; None: no limit.
        partial_minutes: also start a resumable run that cannot finish by the
            deadline when at least this many minutes are left before it: it
            trains until the deadline, checkpoints and stops, and a later call
            resumes it (for runs longer than one sitting). None: never.
    """

    def __init__(
        self,
        out: str,
        command: RunCommand,
        deadline: Optional[float] = None,
        partial_minutes: Optional[float] = None,
    ):
        self._out = out
        self._command = command
        self._deadline = deadline
        self._partial_s = None if partial_minutes is None else _MINUTE_S * partial_minutes
        self._lock = threading.Lock()
        self._processes = set()
        self.stopping = False

    def stop(self, signum, frame=None):
        with self._lock:
            self.stopping = True
            for process in self._processes:
                if process.poll() is None:
                    process.send_signal(signum)

    def execute(self, run: 'BenchmarkRun') -> dict:
        """Train ``run`` unless done; returns ``{'run', 'status', 'detail', ...}``."""
        out = self._out
        run_dir = run.run_dir(out)
        done = read_done(run_dir)
        if done is not None:
            if done.get('target_env_steps') != run.num_env_steps:
                return dict(
                    run=run,
                    status='failed',
                    detail=(
                        f'{run_dir} finished a run of {done.get("target_env_steps")} env '
                        f'steps, not {run.num_env_steps}: move it away or choose another --out'
                    ),
                )
            return dict(run=run, status='skipped', detail='already done', done=done)
        if self.stopping:
            return dict(run=run, status='not started', detail='stopped')
        if run_dir_in_use(run_dir):
            return dict(
                run=run, status='in use', detail=f'another process is training in {run_dir}'
            )
        partial = ''
        if self._deadline is not None:
            seconds, source = estimate_seconds(run, out)
            left = self._deadline - time.time()
            if DEADLINE_MARGIN * seconds <= left:
                pass
            elif run.resumable and self._partial_s is not None and left >= self._partial_s:
                partial = (
                    f'needs about {format_duration(seconds)} ({source}); trains until the '
                    f'deadline {time.strftime("%H:%M", time.localtime(self._deadline))}'
                )
            else:
                return dict(
                    run=run,
                    status='deferred',
                    detail=(
                        f'needs about {format_duration(seconds)} ({source}), which would end after '
                        f'the deadline {time.strftime("%H:%M", time.localtime(self._deadline))}'
                    ),
                )
        log_path = run.log_path(out)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        command = self._command(run)
        attempts_path = run.log_path(out, ATTEMPTS_SUFFIX)
        try:
            # Read before the run starts: a file it cannot extend is left as it is.
            attempts = read_attempts(attempts_path)
        except UnreadableRecord as e:
            return dict(run=run, status='failed', detail=str(e))
        # Before this attempt writes to the log, whose last write ended the open one.
        if _close_open_attempts(attempts, log_path, run, run_dir):
            _write_json(attempts_path, attempts)
        if any(a.get('env_steps_to', 0) > 0 for a in attempts) and not RunDir(run_dir).is_run():
            # The run they trained was moved away or deleted (as a refusal advises): this one
            # starts a record of its own; theirs, kept, still measures the time per env step.
            until = time.strftime('%Y%m%d-%H%M%S')
            os.rename(attempts_path, run.log_path(out, f'.until-{until}{ATTEMPTS_SUFFIX}'))
            attempts = []
        resumed = run.resumable and os.path.isfile(RunDir(run_dir).config_file)
        steps_from = resume_env_steps(run, run_dir) if resumed else 0
        # When it started, recorded; how long it takes, measured with a clock no one sets.
        start, clock_start = time.time(), time.monotonic()
        # The code that trains: commits made while it runs are not in it.
        code = code_version()
        with open(log_path, 'a') as log:
            log.write(f'\n=== {time.strftime("%Y-%m-%d %H:%M:%S")}: {shlex.join(command)}\n')
            log.flush()
            offset = log.tell()
            with self._lock:
                if self.stopping:
                    return dict(run=run, status='not started', detail='stopped')
                process = subprocess.Popen(
                    command,
                    cwd=REPO_ROOT,
                    env=started_watching_this_process(subprocess_env(1)),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                self._processes.add(process)
            # Recorded as it starts, so that a launcher killed before the run ends (SIGKILL,
            # the OOM killer) leaves its attempt open for the next call to close, not lost.
            attempts.append(
                dict(
                    started=start,
                    wall_time_s=0.0,
                    env_steps_from=steps_from,
                    env_steps_to=steps_from,
                    kind=list(run.kind),
                    mean_load=None,
                    code=code,
                )
            )
            _write_json(attempts_path, attempts)
            loads, stopped_at_deadline = LoadSampler(clock_start), False
            try:
                while True:
                    timeout = LOAD_SAMPLE_S
                    if self._deadline is not None and not stopped_at_deadline:
                        timeout = min(timeout, max(1.0, self._deadline - time.time()))
                    try:
                        returncode = process.wait(timeout=timeout)
                        break
                    except subprocess.TimeoutExpired:
                        loads.sample(time.monotonic(), os.getloadavg()[0])
                    # A resumable run still going at the deadline checkpoints and
                    # stops; the next call resumes it. A run that cannot resume
                    # started only because its estimate fitted.
                    if (
                        run.resumable
                        and not stopped_at_deadline
                        and self._deadline is not None
                        and time.time() > self._deadline
                    ):
                        process.send_signal(signal.SIGTERM)
                        stopped_at_deadline = True
            finally:
                with self._lock:
                    self._processes.discard(process)
        wall = time.monotonic() - clock_start
        if returncode == EXIT_BAD_INPUT and run_dir_in_use(run_dir):
            # Another process (another call of the launcher) took the run between the check
            # above and this start, and this one refused it, starting nothing: that process
            # trains and records it.
            attempts.pop()
            if attempts:
                _write_json(attempts_path, attempts)
            else:  # no record of a run this call never trained
                os.remove(attempts_path)
            return dict(
                run=run, status='in use', detail=f'another process is training in {run_dir}'
            )
        attempts[-1].update(
            wall_time_s=wall,
            returncode=returncode,
            env_steps_to=_reached_env_steps(run, run_dir),
            mean_load=loads.mean(),
        )
        _write_json(attempts_path, attempts)
        # A run that ends otherwise once told to stop (an error, SIGKILL) failed.
        if stopped_at_deadline and returncode in STOPPED_STATUSES:
            return dict(
                run=run,
                status='deferred',
                wall_time_s=wall,
                detail=f'stopped at the deadline at {attempts[-1]["env_steps_to"]} env steps'
                + (f' ({partial})' if partial else '')
                + f', resumes on the next call (log: {log_path})',
            )
        if returncode != 0:
            status = 'interrupted' if returncode in STOPPED_STATUSES else 'failed'
            advice = ''
            if returncode == EXIT_BAD_INPUT and resumed and run.framework == 'alf_lite':
                # Train's own advice names its flags; the launcher resumes with the run's
                # settings or not at all.
                advice = (
                    f'; the launcher resumes a run only with the settings it started with: '
                    f'move {run_dir} away to train it afresh'
                )
            return dict(
                run=run,
                status=status,
                wall_time_s=wall,
                detail=f'{exit_description(returncode)}: {log_error_line(log_path, offset)}'
                f'{advice} (log: {log_path})',
            )
        steps, returns = read_scalar_if_any(run_dir, EVAL_RETURN)
        if len(returns) == 0:
            return dict(run=run, status='failed', detail=f'no {EVAL_RETURN} in {run_dir}')
        done = dict(
            framework=run.framework,
            algo=run.algo,
            env=run.task.env,
            seed=run.seed,
            setting=run.setting,
            target_env_steps=run.num_env_steps,
            env_steps=int(steps[-1]),
            final_eval_return=float(returns[-1]),
            final_eval_return_last3=float(returns[-LAST_N:].mean()),
            wall_time_s=sum(a['wall_time_s'] for a in attempts),
            attempts=len(attempts),
            finished=time.strftime('%Y-%m-%d %H:%M:%S'),
            mean_load=_mean_load(attempts),
            cpus=os.cpu_count(),
            code=sorted({a.get('code') or 'unknown' for a in attempts}),
        )
        _write_json(os.path.join(run_dir, DONE_FILE), done)
        return dict(
            run=run, status='done', wall_time_s=wall, done=done, detail='resumed' if resumed else ''
        )


def code_version() -> str:
    """The git commit of this checkout, with ``+dirty`` when its code differs from it: a
    changed or new file that git does not ignore (the results under ``benchmarks/results``,
    which runs write, do not count)."""

    def git(*args):
        return subprocess.run(
            ['git', *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git('rev-parse', '--short=12', 'HEAD')
        dirty = git(
            'status',
            '--porcelain',
            '--untracked-files=all',
            '--',
            'alf_lite',
            'benchmarks',
            'examples',
            ':(exclude)benchmarks/results',
        )
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'
    return commit + ('+dirty' if dirty else '')


class LoadSampler:
    """The time-weighted mean of load averages sampled at uneven intervals.

    Samples come every ``LOAD_SAMPLE_S`` but more often as a deadline nears;
    each counts for the time since the sample before it (the first, since
    ``start``), so the last minutes weigh no more than any others.
    """

    def __init__(self, start: float):
        self._last = start
        self._weighted_sum = 0.0
        self._seconds = 0.0

    def sample(self, now: float, load: float) -> None:
        """Add ``load``, read at ``now`` (``time.monotonic()``)."""
        seconds = max(0.0, now - self._last)
        self._weighted_sum += load * seconds
        self._seconds += seconds
        self._last = now

    def mean(self) -> Optional[float]:
        """The mean load over the time sampled; None before any time was."""
        return self._weighted_sum / self._seconds if self._seconds > 0 else None


def _mean_load(attempts: List[dict]) -> Optional[float]:
    """Time-weighted mean of the attempts' 1-minute load averages."""
    weighted = [
        (a['mean_load'], a['wall_time_s']) for a in attempts if a.get('mean_load') is not None
    ]
    total = sum(w for _, w in weighted)
    return sum(x * w for x, w in weighted) / total if total else None


def _done_runs(out: str) -> Iterable[Tuple[str, dict]]:
    """``(run directory, done.json)`` of every finished run under ``out``."""
    for path in glob.glob(os.path.join(out, '*', '*', 'seed*', DONE_FILE)):
        try:
            done = read_done(os.path.dirname(path))
        except UnreadableRecord:
            continue  # its run fails with that error when it is trained
        yield os.path.dirname(path), done


def _close_open_attempts(
    attempts: List[dict], log_path: str, run: 'BenchmarkRun', run_dir: str
) -> bool:
    """Close each attempt its launcher recorded as it started but did not live to end; whether
    there was one.

    Its run wrote to the log until it stopped (once its launcher was gone, at a checkpoint):
    the attempt ends at the log's last write, with the env steps the run had reached then,
    and without a return code (none was seen).
    """
    open_attempts = [a for a in attempts if 'returncode' not in a]
    if not open_attempts:
        return False
    try:
        ended = os.path.getmtime(log_path)
    except OSError:
        ended = None
    for attempt in open_attempts:
        started = attempt.get('started', 0.0)
        attempt.update(
            wall_time_s=max(
                attempt['wall_time_s'], (started if ended is None else ended) - started
            ),
            returncode=None,
            env_steps_to=_reached_env_steps(run, run_dir),
        )
    return True


def _finished_time(done: dict) -> float:
    """When a run finished (done.json's local time), in seconds since the epoch; 0 if unknown."""
    try:
        return time.mktime(time.strptime(done['finished'], '%Y-%m-%d %H:%M:%S'))
    except (KeyError, TypeError, ValueError):
        return 0.0


def _last_env_steps(run_dir: str) -> int:
    """Env steps of the last row of a run's progress.csv; 0 without one."""
    try:
        with open(RunDir(run_dir).progress_file, newline='') as f:
            _, rows = complete_rows(f)
        return int(float(rows[-1][ENV_STEPS])) if rows else 0
    except (OSError, ValueError, KeyError):
        return 0


def _reached_env_steps(run: 'BenchmarkRun', run_dir: str) -> int:
    """Env steps a run got to: its progress.csv's last row, or its checkpoint where that is
    later (a run stopped between two rows writes a checkpoint where it stopped, and no row)."""
    steps = _last_env_steps(run_dir)
    return max(steps, resume_env_steps(run, run_dir)) if run.resumable else steps


def resume_env_steps(run: 'BenchmarkRun', run_dir: str) -> int:
    """Env steps a resumed run continues from: those of its checkpoint; 0 without one.

    Rows of progress.csv past the checkpoint (a run killed before it could write
    one at its stop) are dropped at the resume and trained again.
    """
    if run.framework == 'sb3':
        steps = checkpoint_env_steps(run_dir)
    else:
        steps = RunDir(run_dir).latest_checkpoint_env_steps()
    return steps or 0


def estimate_seconds(run: 'BenchmarkRun', out: str) -> Tuple[float, str]:
    """Wall seconds ``run`` still needs, and where the rate comes from.

    The rate is the slowest of the ``RECENT_MEASUREMENTS`` most recent measured
    wall times per env step of the finished runs (each once, by its ``done.json``)
    and of the other runs' attempts of at
    least ``MIN_MEASURED_S`` under ``out`` with the same framework, algorithm
    and env (their load included), else the task's assumed rate: the code and
    the machine's load change, so old measurements say little. A run that will
    resume needs only the steps after its checkpoint.
    """
    kind = run.kind
    measured = []  # (when, seconds per env step)
    finished = set()  # the attempts files of the finished runs
    for run_dir, done in _done_runs(out):
        finished.add(log_path_of(run_dir, ATTEMPTS_SUFFIX))
        if (done.get('framework'), done.get('algo'), done.get('env')) == kind and done.get(
            'env_steps'
        ):
            measured.append((_finished_time(done), done['wall_time_s'] / done['env_steps']))
    for path in glob.glob(os.path.join(out, '*', 'logs', '*' + ATTEMPTS_SUFFIX)):
        if path in finished:
            continue  # measured once, by its done.json: its attempts add up to it
        try:
            attempts = read_attempts(path)
        except UnreadableRecord:
            continue  # its run fails with that error when it is trained
        for attempt in attempts:
            steps = attempt.get('env_steps_to', 0) - attempt.get('env_steps_from', 0)
            if (
                tuple(attempt.get('kind') or ()) == kind
                and steps > 0
                and attempt['wall_time_s'] >= MIN_MEASURED_S
            ):
                when = attempt.get('started', 0.0) + attempt['wall_time_s']
                measured.append((when, attempt['wall_time_s'] / steps))
    if measured:
        recent = sorted(measured, key=lambda m: m[0])[-RECENT_MEASUREMENTS:]
        rate = max(r for _, r in recent)
        source = f'slowest of the {len(recent)} most recent of {len(measured)} measurements'
    else:
        rate, source = run.task.assumed_seconds_per_step, 'assumed rate'
    steps = run.num_env_steps
    if run.resumable:
        steps -= min(resume_env_steps(run, run.run_dir(out)), steps)
    return rate * steps, source


def log_path_of(run_dir: str, suffix: str = '.log') -> str:
    """The log file (or, by ``suffix``, another file beside it) of the run in ``run_dir``,
    ``<out>/<suite>/<name>/seed<k>``: ``<out>/<suite>/logs/<name>.seed<k>`` + ``suffix``."""
    suite_dir, name = os.path.split(os.path.dirname(run_dir))
    return os.path.join(suite_dir, 'logs', f'{name}.{os.path.basename(run_dir)}{suffix}')


def parse_deadline(text: str, now: Optional[float] = None) -> float:
    """Seconds since the epoch of ``--deadline``: minutes from now, ``HH:MM`` or an ISO time.

    ``HH:MM`` is the next such local time (tomorrow when it has passed today).

    Raises:
        ValueError: ``text`` is none of these, or a time that has passed (no run could
            start, and a call again would defer them all again).
    """
    now = time.time() if now is None else now
    deadline = _deadline(text, now)
    if deadline <= now:
        raise ValueError(
            f'--deadline {text} has passed: no run could start before it; give a time to come'
        )
    return deadline


def describe_deadline(deadline: float, now: Optional[float] = None) -> str:
    """``deadline`` as the launcher's first line gives it: local date and time, and how far off.

    An ``HH:MM`` that has passed today stands for tomorrow's: the date and the hours
    left show that before any run starts.
    """
    now = time.time() if now is None else now
    when = time.strftime('%Y-%m-%d %H:%M', time.localtime(deadline))
    if (datetime.date.fromtimestamp(deadline) - datetime.date.fromtimestamp(now)).days == 1:
        when = f'tomorrow {when}'
    return f'deadline {when}, in {format_duration(max(0.0, deadline - now))}'


def _deadline(text: str, now: float) -> float:
    try:
        deadline = now + _MINUTE_S * float(text)
    except ValueError:
        deadline = None
    if deadline is not None:
        try:
            # A local time, as the deferred runs' lines say it: not NaN, inf or out of range.
            time.localtime(deadline)
        except (ValueError, OverflowError, OSError):
            raise ValueError(
                '--deadline takes a finite number of minutes from now, within the dates this '
                f'clock can tell, got {text!r}'
            ) from None
        return deadline
    try:
        clock = datetime.datetime.strptime(text, '%H:%M').time()
    except ValueError:
        clock = None
    if clock is not None:
        today = datetime.datetime.fromtimestamp(now)
        end = datetime.datetime.combine(today.date(), clock)
        if end.timestamp() <= now:
            end += datetime.timedelta(days=1)
        return end.timestamp()
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(
            f'--deadline takes minutes from now, HH:MM or an ISO date and time, got {text!r}'
        ) from None


def write_plan(out: str, runs: List['BenchmarkRun'], results: Dict[str, dict]) -> None:
    """Record every run's state in ``<out>/plan.json`` (merged with runs of other calls).

    Read, merged and written under an ``flock`` of ``<out>/.plan.json.lock``: a launcher
    training other runs in ``out`` at the same time would otherwise write its plan, read
    before this one's write, over it, and this launcher's states would be lost.
    """
    os.makedirs(out, exist_ok=True)
    fd = os.open(os.path.join(out, PLAN_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _merge_into_plan(out, runs, results)
    finally:
        os.close(fd)  # drops the lock


def _merge_into_plan(out: str, runs: List['BenchmarkRun'], results: Dict[str, dict]) -> None:
    path = os.path.join(out, PLAN_FILE)
    plan = read_json(path)
    if not isinstance(plan, dict):
        plan = {}  # none yet, or one cut short or edited into another kind of JSON
    for run in runs:
        run_dir = run.run_dir(out)
        done = read_done(run_dir)
        result = results.get(run.key, {})
        # A run finished at another length is not this one, which fails on it (``execute``).
        if done and done.get('target_env_steps') == run.num_env_steps:
            entry = dict(
                status='done',
                final_eval_return_last3=done['final_eval_return_last3'],
                wall_time_s=done['wall_time_s'],
                mean_load=done.get('mean_load'),
                code=done.get('code'),
            )
        else:
            if result.get('status'):
                status = result['status']
            elif done:
                status = 'failed'
            elif os.path.isfile(RunDir(run_dir).progress_file):
                status = 'started'
            else:
                status = 'pending'
            entry = dict(
                status=status,
                env_steps=_reached_env_steps(run, run_dir),
                detail=result.get('detail', ''),
            )
        plan[run.key] = dict(
            entry,
            target_env_steps=run.num_env_steps,
            framework=run.framework,
            algo=run.algo,
            env=run.task.env,
            setting=run.setting,
        )
    _write_json(path, dict(sorted(plan.items())))


def train_runs(
    runs: List['BenchmarkRun'],
    out: str,
    jobs: int,
    command: RunCommand,
    deadline: Optional[float] = None,
    partial_minutes: Optional[float] = None,
) -> int:
    """Trains ``runs``, ``jobs`` at a time; prints one line per run and a summary.

    Returns:
        the exit code: ``EXIT_FAULT`` when a run failed or was interrupted, else 0.
    """
    launcher = Launcher(out, command, deadline, partial_minutes)
    previous = {s: signal.signal(s, launcher.stop) for s in STOP_SIGNALS}
    results, total = [], len(runs)
    # A run that cannot resume goes first, so that an unplanned stop is more
    # likely to cut one that resumes from its checkpoint.
    runs = sorted(runs, key=lambda r: r.resumable)
    write_plan(out, runs, {})
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {}
            for run in runs:
                futures[pool.submit(launcher.execute, run)] = run
            for i, future in enumerate(completed_waking_for_signals(futures), 1):
                result = future.result()
                results.append(result)
                write_plan(out, runs, {r['run'].key: r for r in results})
                run, done = result['run'], result.get('done') or {}
                line = f'[{i}/{total}] {result["status"]:<11} {run.key}'
                if done:
                    line += (
                        f': final eval return {done["final_eval_return"]:.2f} at '
                        f'{done["env_steps"]} env steps, '
                        f'{format_duration(done["wall_time_s"])}'
                    )
                if result.get('detail'):
                    line += f' ({result["detail"]})' if done else f': {result["detail"]}'
                # Dropped where stdout can no longer be written (the SIGHUP of a closed
                # terminal): the runs' results still go into plan.json.
                print_out(line)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    counts: Dict[str, int] = {}
    for result in results:
        counts[result['status']] = counts.get(result['status'], 0) + 1
    print_out('\n' + ', '.join(f'{n} {status}' for status, n in sorted(counts.items())))
    if counts.get('interrupted') or counts.get('not started') or counts.get('deferred'):
        print_out('run the same command again to continue (runs resume from their last checkpoint)')
    return EXIT_FAULT if counts.get('failed') or counts.get('interrupted') else 0
