"""Shared fixtures: read back the TensorBoard event files and progress.csv that a run wrote.

Also the order of the test files: ``make test`` hands whole files to its workers in
collection order (pytest-xdist ``--dist loadfile --no-loadscope-reorder``), and
collection puts the files that took longest first (``durations.json``, which
``make test-durations`` rewrites), so that no long file starts when the other
worker has little left to do. A file not in ``durations.json`` goes first.
"""

import collections
import csv
import json
import math
import os
import signal

# A test run started with SIGHUP ignored (under nohup; SIGUSR1 and SIGUSR2 likewise) would
# pass that on to every tool it starts, which then keeps ignoring it
# (alf_lite.signals.STOP_SIGNALS), and the tests of a closed terminal would see no stop. A
# handler of this process's own is not passed on through exec: the tools start with the
# default, and this process still outlives a hangup. Before alf_lite's first import here,
# which reads what these signals do.
for _signum in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    if signal.getsignal(_signum) == signal.SIG_IGN:
        signal.signal(_signum, lambda signum, frame: None)

import gin  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

# The tests' own tensor work on one thread: the suite's two workers share two cores (a
# Trainer runs on its torch_num_threads and puts this count back when it returns).
torch.set_num_threads(1)

DURATIONS_FILE = os.path.join(os.path.dirname(__file__), 'durations.json')


@pytest.fixture(autouse=True)
def _no_session_outlives_its_test():
    """A tool a test started in a session of its own ends with the test, failed or not."""
    yield
    from cli_helpers import kill_leftover_sessions

    kill_leftover_sessions()


def pytest_addoption(parser):
    parser.addoption(
        '--store-durations',
        action='store_true',
        help=f'write the seconds each test file took to {DURATIONS_FILE}',
    )


def _file_of(nodeid):
    return nodeid.split('::', 1)[0]


def pytest_collection_modifyitems(config, items):
    """The files longest first by ``durations.json``; the tests of a file in their order."""
    try:
        with open(DURATIONS_FILE) as f:
            seconds = json.load(f)
    except FileNotFoundError:
        return
    position = {}
    for item in items:
        position.setdefault(_file_of(item.nodeid), len(position))
    # Stable: each file's tests keep their order, and files of equal time theirs.
    items.sort(
        key=lambda item: (
            -seconds.get(_file_of(item.nodeid), math.inf),
            position[_file_of(item.nodeid)],
        )
    )


def pytest_configure(config):
    # The controller (not an xdist worker) adds up the reports of every worker.
    if config.getoption('--store-durations') and not hasattr(config, 'workerinput'):
        config.pluginmanager.register(_DurationRecorder(), 'alf_lite_durations')


class _DurationRecorder:
    """Adds up each test file's setup, call and teardown seconds; writes them at the end."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[_file_of(report.nodeid)] += report.duration

    def pytest_terminal_summary(self, terminalreporter, exitstatus):
        if exitstatus != 0:
            terminalreporter.write_line(f'tests failed: {DURATIONS_FILE} is left as it was')
            return
        ordered = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        with open(DURATIONS_FILE, 'w') as f:
            json.dump({name: round(s, 1) for name, s in ordered}, f, indent=1)
            f.write('\n')
        terminalreporter.write_line(f'wrote {DURATIONS_FILE}')


@pytest.fixture(autouse=True)
def no_gin_bindings():
    """Each test starts without the bindings an earlier test parsed."""
    gin.clear_config()
    yield
    gin.clear_config()


def _read_tensorboard(log_dir):
    """``{tag: [ScalarEvent(wall_time, step, value), ...]}`` of every event file in ``log_dir``.

    The files are read as TensorBoard reads them (all files of the run, in
    order, with purges after a restart applied), keeping every event.
    """
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    assert os.path.isdir(log_dir), f'no TensorBoard directory {log_dir}'
    accumulator = EventAccumulator(str(log_dir), size_guidance={SCALARS: 0})
    accumulator.Reload()
    return {tag: list(accumulator.Scalars(tag)) for tag in accumulator.Tags()['scalars']}


def _read_progress(path):
    """``(header, rows)`` of a progress.csv, rows as dicts of strings."""
    with open(path, newline='') as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


@pytest.fixture
def read_tensorboard():
    return _read_tensorboard


@pytest.fixture
def read_progress():
    return _read_progress
