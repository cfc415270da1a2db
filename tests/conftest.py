"""Shared fixtures: read back the TensorBoard event files and progress.csv that a run wrote."""

import csv
import os

import gin
import pytest


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
