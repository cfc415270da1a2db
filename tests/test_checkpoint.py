"""Atomic checkpoints: save / load round trip, which checkpoint is picked, what each one keeps."""

import contextlib
import errno
import io
import logging
import os
import pickle
import pickletools
import random
import re
import shutil
import stat
import struct
import subprocess
import tarfile
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest
import torch

from alf_lite import checkpoint as ckpt
from alf_lite.run_dir import MAX_CONFIG_BYTES, latest_checkpoint, list_checkpoints
from alf_lite.seeding import global_rng_state
from cli_helpers import python_output


def make_state(seed):
    """A trainer-like state: network weights, optimizer state, RNG states, counters."""
    torch.manual_seed(seed)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    random.seed(seed)
    np.random.seed(seed)
    return {
        'algorithm': {'net': net.state_dict(), 'opt': opt.state_dict()},
        'rng': global_rng_state(),
        'env_steps': 100 * seed,
        'num_updates': 7 * seed,
        'recent_returns': [-1.5 * seed, 2.0],
        'last_eval': {'eval/AverageReturn': -3.25},
    }


def make_replay_buffer_state(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        'observation': torch.randn(2, 5, 3, generator=g),
        'step_type': torch.randint(0, 3, (2, 5), dtype=torch.uint8, generator=g),
        'num_steps': 5,
    }


def assert_same(a, b):
    """Deep equality of nested containers of tensors, arrays and plain values."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


def test_save_then_load_round_trips_state_and_replay_buffer(tmp_path):
    state, rb = make_state(1), make_replay_buffer_state(1)
    path = ckpt.save_checkpoint(str(tmp_path), 100, state, rb)
    assert path == os.path.join(str(tmp_path), 'ckpt-100')
    assert os.path.isfile(os.path.join(path, ckpt.MODEL_FILE))
    assert os.path.isfile(os.path.join(path, ckpt.REPLAY_BUFFER_FILE))
    loaded_state, loaded_rb = ckpt.load_checkpoint(path)
    assert_same(loaded_state, state)
    assert_same(loaded_rb, rb)


def test_checkpoint_is_on_disk_before_the_rename_and_the_rename_before_old_buffers_go(
    tmp_path, monkeypatch
):
    # After a power cut the renamed directory must hold whole files, and the
    # checkpoint a resume falls back to must not have lost its buffer while the
    # new one's rename was lost.
    older = ckpt.save_checkpoint(str(tmp_path), 50, make_state(1), make_replay_buffer_state(1))
    events = []
    real_fsync, real_rename, real_remove = os.fsync, os.rename, os.remove

    def fsync(fd):
        info = os.fstat(fd)
        events.append(('fsync', info.st_ino, None if stat.S_ISDIR(info.st_mode) else info.st_size))
        real_fsync(fd)

    def rename(src, dst):
        events.append(('rename', dst))
        real_rename(src, dst)

    def remove(path):
        events.append(('remove', path))
        real_remove(path)

    monkeypatch.setattr(os, 'fsync', fsync)
    monkeypatch.setattr(os, 'rename', rename)
    monkeypatch.setattr(os, 'remove', remove)
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    model, rb = (os.stat(os.path.join(path, f)) for f in (ckpt.MODEL_FILE, ckpt.REPLAY_BUFFER_FILE))
    assert events == [
        ('fsync', model.st_ino, model.st_size),
        ('fsync', rb.st_ino, rb.st_size),
        ('fsync', os.stat(path).st_ino, None),  # the files' entries
        ('rename', path),
        ('fsync', os.stat(tmp_path).st_ino, None),  # the rename
        ('remove', os.path.join(older, ckpt.REPLAY_BUFFER_FILE)),
    ]


def test_saving_a_step_again_is_on_disk_before_it_returns(tmp_path, monkeypatch):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, 'fsync', fsync)
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(2), None)
    # The replaces and the removal of the old buffer are in the directory's entries.
    assert synced[-2:] == [os.stat(path).st_ino, os.stat(tmp_path).st_ino]
    assert os.listdir(path) == [ckpt.MODEL_FILE]


def test_checkpoint_without_replay_buffer_loads_none_for_it(tmp_path):
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    assert not os.path.exists(os.path.join(path, ckpt.REPLAY_BUFFER_FILE))
    state, rb = ckpt.load_checkpoint(path)
    assert rb is None
    assert state['env_steps'] == 100


@pytest.mark.skipif(not os.path.exists('/proc/self/status'), reason='reads RssAnon of Linux')
def test_resumed_replay_buffer_is_copied_from_its_file_without_a_second_copy_in_memory(tmp_path):
    # A fresh process: in this one, memory freed by earlier tests could be reused.
    script = f"""
import torch
from alf_lite import checkpoint as ckpt
from alf_lite.replay_buffer import ReplayBuffer

def anonymous_bytes():
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'):
            return int(line.split()[1]) * 1024

saved = ReplayBuffer(1, 2_000_000, observation_dim=3, action_dim=1)
saved.storage['observation'].uniform_()
# Every row counted as written (a whole-tensor state, as older checkpoints hold).
saved.load_state_dict(dict(saved.storage, total_added=2_000_000))
path = ckpt.save_checkpoint({str(tmp_path)!r}, 100, {{}}, saved.state_dict())
restored = ReplayBuffer(1, 2_000_000, observation_dim=3, action_dim=1)
before = anonymous_bytes()
_, state = ckpt.load_checkpoint(path)
restored.load_state_dict(state)
grown = anonymous_bytes() - before
assert torch.equal(restored.storage['observation'], saved.storage['observation'])
print(grown, saved.nbytes)
"""
    grown, nbytes = map(int, python_output(script).split()[-2:])
    assert nbytes == 50_000_000
    # Measured while the loaded dict is still alive: its tensors are the
    # file's pages, not memory of its own.
    assert grown < nbytes // 10


def test_a_replay_buffer_file_that_cannot_be_mapped_for_lack_of_memory_is_no_damage(tmp_path):
    # A fresh process: the limit stays with the process that sets it. The buffer's file
    # is intact; with too little address space left to map it, the checkpoint is not
    # resumed without it (its rows lost) but not read at all.
    script = f"""
import psutil, resource
from alf_lite import checkpoint as ckpt
from alf_lite.replay_buffer import ReplayBuffer

saved = ReplayBuffer(1, 1_600_000, observation_dim=3, action_dim=1)
saved.load_state_dict(dict(saved.storage, total_added=1_600_000))
ckpt.save_checkpoint({str(tmp_path)!r}, 100, {{}}, saved.state_dict())
used = psutil.Process().memory_info().vms
resource.setrlimit(resource.RLIMIT_AS, (used + 20_000_000, resource.RLIM_INFINITY))
try:
    latest = ckpt.load_latest_checkpoint({str(tmp_path)!r})
    print('resumed, replay buffer:', latest.replay_buffer_state is not None)
except ckpt.CheckpointError as e:
    print(e)
"""
    output = python_output(script)
    assert f'could not read checkpoint {tmp_path / "ckpt-100"}' in output
    assert 'Cannot allocate memory' in output
    # What it needs and what to do: the limit it was given, or a resume without the steps.
    rb_path = tmp_path / 'ckpt-100' / ckpt.REPLAY_BUFFER_FILE
    assert (
        f'Its replay buffer file ({rb_path.stat().st_size} bytes) is mapped into memory whole '
        'beside the buffer the run allocated, and that much is not free: this '
        "process's ulimit -v limit ("
    ) in output, output
    assert f'Raise the limit by that much, or move {rb_path} aside to resume' in output
    assert sorted(os.listdir(tmp_path / 'ckpt-100')) == [ckpt.MODEL_FILE, ckpt.REPLAY_BUFFER_FILE]


@pytest.mark.parametrize(
    'values, non_finite',
    [
        ([1.0, 2.0], False),
        ([1.0, float('nan')], True),
        ([float('inf'), 1.0], True),
        ([0.0, float('-inf')], True),
        ([], False),
    ],
)
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_a_nan_or_inf_anywhere_in_a_network_is_found(values, non_finite, dtype):
    module = {'actor.weight': torch.ones(3), 'critic.weight': torch.tensor(values, dtype=dtype)}
    found = ckpt.first_non_finite({'module': module})
    assert found == ('critic.weight' if non_finite else None)


def test_the_finite_check_of_a_network_takes_no_memory_the_size_of_its_tensors():
    # It runs at every checkpoint and resume: a torch.isfinite mask and its intermediates
    # took 1.25 bytes and more per byte of the largest weight, and where the memory is
    # bounded (ulimit -v) networks that fit crashed at the first checkpoint.
    script = """
import psutil, resource, torch
from alf_lite import checkpoint as ckpt

weight = torch.zeros(100_000_000)
used = psutil.Process().memory_info().vms
resource.setrlimit(resource.RLIMIT_AS, (used + 150_000_000, resource.RLIM_INFINITY))
print(ckpt.first_non_finite({'module': {'critic.weight': weight}}))
weight[-1] = float('nan')
print(ckpt.first_non_finite({'module': {'critic.weight': weight}}))
"""
    assert python_output(script).split()[-2:] == ['None', 'critic.weight']


@pytest.mark.timeout(60)
@pytest.mark.parametrize('kind', ['fifo', 'device'])
def test_a_checkpoint_file_that_is_a_pipe_or_a_device_is_damage_not_a_wait(tmp_path, kind):
    # Opened to be read, a FIFO blocks until something writes into it: train, play and a
    # sweep waited forever on a run someone sent.
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    newest = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), make_replay_buffer_state(2))

    def put(name):
        path = os.path.join(newest, name)
        os.remove(path)
        os.mkfifo(path) if kind == 'fifo' else os.symlink('/dev/zero', path)

    put(ckpt.REPLAY_BUFFER_FILE)
    state, rb = ckpt.load_checkpoint(newest)
    assert rb is None and state is not None
    put(ckpt.MODEL_FILE)
    latest = ckpt.load_latest_checkpoint(str(tmp_path))
    assert latest.path == os.path.join(str(tmp_path), 'ckpt-100'), latest.path
    assert latest.unreadable == [newest]


def test_replay_buffer_in_torchs_legacy_format_still_loads(tmp_path):
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    rb = make_replay_buffer_state(1)
    torch.save(
        rb, os.path.join(path, ckpt.REPLAY_BUFFER_FILE), _use_new_zipfile_serialization=False
    )
    _, loaded_rb = ckpt.load_checkpoint(path)
    assert_same(loaded_rb, rb)


def test_latest_checkpoint_of_missing_or_empty_directory_is_none(tmp_path):
    assert latest_checkpoint(str(tmp_path / 'missing')) is None
    assert latest_checkpoint(str(tmp_path)) is None


def test_latest_checkpoint_picks_highest_complete_one_never_a_temporary_directory(tmp_path):
    # Out of order, and 1000 sorts before 900 as text.
    for step in (900, 1000, 200):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(step // 100), None)
    # What a writer killed mid-save leaves: a temporary directory with a partial
    # model file, at a higher step than any complete checkpoint.
    killed = tmp_path / '.tmp-ckpt-999-123'
    killed.mkdir()
    (killed / ckpt.MODEL_FILE).write_bytes(b'PK\x03\x04 truncated')
    killed_higher = tmp_path / '.tmp-ckpt-5000-123'
    killed_higher.mkdir()

    latest = latest_checkpoint(str(tmp_path))
    assert latest == os.path.join(str(tmp_path), 'ckpt-1000')
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == [
        'ckpt-200',
        'ckpt-900',
        'ckpt-1000',
    ]
    state, _ = ckpt.load_checkpoint(latest)
    assert state['env_steps'] == 1000


def test_only_newest_checkpoint_keeps_replay_buffer(tmp_path):
    for step in (100, 200, 300):
        ckpt.save_checkpoint(
            str(tmp_path), step, make_state(step // 100), make_replay_buffer_state(step)
        )
    for step in (100, 200, 300):
        path = tmp_path / f'ckpt-{step}'
        assert (path / ckpt.MODEL_FILE).is_file(), f'{path} lost its model file'
        assert (path / ckpt.REPLAY_BUFFER_FILE).exists() == (step == 300), path
    state, rb = ckpt.load_checkpoint(str(tmp_path / 'ckpt-300'))
    assert_same(rb, make_replay_buffer_state(300))
    old_state, old_rb = ckpt.load_checkpoint(str(tmp_path / 'ckpt-100'))
    assert old_rb is None
    assert old_state['env_steps'] == 100


def test_saving_same_step_twice_leaves_one_loadable_checkpoint_with_newest_content(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(2), make_replay_buffer_state(2))
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100']
    state, rb = ckpt.load_checkpoint(latest_checkpoint(str(tmp_path)))
    assert_same(state, make_state(2))
    assert_same(rb, make_replay_buffer_state(2))


def test_saving_same_step_again_keeps_a_loadable_checkpoint_at_every_moment(tmp_path, monkeypatch):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    real_replace = os.replace

    def replace_then_die(src, dst):  # as a kill right after the model file is replaced
        real_replace(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, 'replace', replace_then_die)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(str(tmp_path), 100, make_state(2), make_replay_buffer_state(2))
    monkeypatch.setattr(os, 'replace', real_replace)
    assert os.listdir(tmp_path) == ['ckpt-100']  # the interrupted write left nothing behind
    state, rb = ckpt.load_checkpoint(latest_checkpoint(str(tmp_path)))
    assert_same(state, make_state(2))
    assert rb is not None
    # Saved again without a replay buffer: the old one goes, none is left stale.
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(3))
    assert ckpt.load_checkpoint(latest_checkpoint(str(tmp_path)))[1] is None


def test_a_save_that_fails_to_move_its_replay_buffer_in_place_leaves_no_checkpoint_of_its_step(
    tmp_path, monkeypatch
):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))

    def fails_moving_the_replay_buffer(move):  # as a disk error, or a kill, at that moment
        def moving(src, dst):
            if os.path.basename(src) == ckpt.REPLAY_BUFFER_FILE or os.path.exists(
                os.path.join(src, ckpt.REPLAY_BUFFER_FILE)
            ):
                raise OSError('cannot move the replay buffer')
            move(src, dst)

        return moving

    monkeypatch.setattr(os, 'rename', fails_moving_the_replay_buffer(os.rename))
    monkeypatch.setattr(os, 'replace', fails_moving_the_replay_buffer(os.replace))
    with pytest.raises(OSError, match='cannot move the replay buffer'):
        ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), make_replay_buffer_state(2))
    monkeypatch.undo()
    # No ckpt-200, not even one holding the model alone, which would load as
    # the newest without its buffer.
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ['ckpt-100']
    # Nor the temporary directory, with its replay buffer.
    assert os.listdir(tmp_path) == ['ckpt-100']
    path, state, rb, _ = ckpt.load_latest_checkpoint(str(tmp_path))
    assert path.endswith('ckpt-100')
    assert_same(state, make_state(1))
    assert_same(rb, make_replay_buffer_state(1))


class _FailsToSerialize:
    """A value whose serialization fails the way a CUDA error copying a tensor does."""

    def __reduce__(self):
        raise RuntimeError('CUDA error: an illegal memory access was encountered')


def test_a_save_failing_for_no_write_is_not_called_a_full_disk(tmp_path):
    with pytest.raises(RuntimeError, match='illegal memory access') as error:
        ckpt.save_checkpoint(str(tmp_path), 100, {'x': _FailsToSerialize()})
    assert not isinstance(error.value, OSError)
    assert 'disk is full' not in str(error.value)
    assert os.listdir(tmp_path) == []


def test_save_succeeds_over_leftover_temporary_directory_of_same_name(tmp_path):
    # A writer killed mid-save by a process that had the same pid (pids are reused).
    leftover = tmp_path / f'.tmp-ckpt-100-{os.getpid()}'
    leftover.mkdir()
    (leftover / ckpt.MODEL_FILE).write_bytes(b'partial')
    (leftover / 'stray').write_bytes(b'junk')
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(3), None)
    assert sorted(os.listdir(path)) == [ckpt.MODEL_FILE]
    state, _ = ckpt.load_checkpoint(path)
    assert_same(state, make_state(3))
    assert not leftover.exists()


def test_save_leaves_no_temporary_directory_behind(tmp_path):
    for step in (100, 200):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(1), make_replay_buffer_state(1))
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100', 'ckpt-200']


def test_resuming_past_a_corrupt_checkpoint_moves_it_aside_and_new_ones_keep_their_buffer(tmp_path):
    for step in (50, 100):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(step), make_replay_buffer_state(step))
    (tmp_path / 'ckpt-100' / ckpt.MODEL_FILE).write_bytes(b'garbage')
    latest = ckpt.load_latest_checkpoint(str(tmp_path))
    assert latest.path.endswith('ckpt-50') and latest.state['env_steps'] == 5000
    # Moved only when the caller says so (once the resume is sure to go on from ckpt-50).
    assert latest.unreadable == [str(tmp_path / 'ckpt-100')]
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100', 'ckpt-50']
    ckpt.move_aside(latest.unreadable)
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100.corrupt', 'ckpt-50']
    # The run goes on from ckpt-50: what it writes next keeps its replay buffer.
    ckpt.save_checkpoint(str(tmp_path), 60, make_state(6), make_replay_buffer_state(6))
    assert (tmp_path / 'ckpt-60' / ckpt.REPLAY_BUFFER_FILE).is_file()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ['ckpt-50', 'ckpt-60']
    # A second corrupt checkpoint of the same step does not overwrite the first one set aside.
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    (tmp_path / 'ckpt-100' / ckpt.MODEL_FILE).write_bytes(b'garbage')
    latest = ckpt.load_latest_checkpoint(str(tmp_path))
    assert latest.path.endswith('ckpt-60')
    ckpt.move_aside(latest.unreadable)
    assert sorted(n for n in os.listdir(tmp_path) if 'corrupt' in n) == [
        'ckpt-100.corrupt',
        'ckpt-100.corrupt-2',
    ]


def test_all_checkpoints_corrupt_moves_none_aside(tmp_path, caplog):
    for step in (50, 100):
        path = ckpt.save_checkpoint(str(tmp_path), step, make_state(1), None)
        with open(os.path.join(path, ckpt.MODEL_FILE), 'wb') as f:
            f.write(b'garbage')
    with caplog.at_level(logging.WARNING):
        with pytest.raises(ckpt.CheckpointError, match='none of the 2 checkpoints') as error:
            ckpt.load_latest_checkpoint(str(tmp_path))
    # The problem named is that of the newest, the one a resume would have used.
    newest = os.path.join(str(tmp_path), 'ckpt-100', ckpt.MODEL_FILE)
    assert f'the newest: UnpicklingError: {newest} is corrupt' in str(error.value)
    assert 'pass --start_over to train' in str(error.value)
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100', 'ckpt-50']
    # Each warning says whether an older checkpoint is left to try.
    warnings = [r.getMessage() for r in caplog.records if 'is unreadable' in r.getMessage()]
    assert len(warnings) == 2
    assert 'ckpt-100' in warnings[0] and warnings[0].endswith('trying the one before it.')
    assert 'ckpt-50' in warnings[1] and warnings[1].endswith('there is none before it.')


def test_every_corrupt_checkpoint_newer_than_the_one_resumed_is_moved_aside(tmp_path):
    for step in (50, 100, 150):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(1), None)
    for step in (100, 150):
        (tmp_path / f'ckpt-{step}' / ckpt.MODEL_FILE).write_bytes(b'garbage')
    latest = ckpt.load_latest_checkpoint(str(tmp_path))
    assert latest.path.endswith('ckpt-50')
    ckpt.move_aside(latest.unreadable)
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100.corrupt', 'ckpt-150.corrupt', 'ckpt-50']


def test_a_corrupt_checkpoint_that_cannot_be_moved_aside_is_named_and_left(tmp_path, monkeypatch):
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)

    def rename(source, target):
        raise PermissionError(errno.EACCES, 'Permission denied', source)

    monkeypatch.setattr(os, 'rename', rename)
    with pytest.raises(ckpt.CheckpointError) as error:
        ckpt.move_aside([path])
    assert str(error.value).startswith(
        f'could not move the unreadable checkpoint {path} aside to {path}.corrupt '
        '(PermissionError: [Errno 13] Permission denied'
    )
    assert os.listdir(tmp_path) == ['ckpt-100']


@pytest.mark.parametrize('content', [b'', b'junk\n'], ids=['empty', 'text'])
def test_a_model_file_torchs_legacy_reader_fails_on_is_named_corrupt(tmp_path, content):
    # torch raises a bare EOFError for the empty file, a KeyError of a number for the text.
    path = ckpt.save_checkpoint(str(tmp_path), 50, make_state(1), None)
    model = os.path.join(path, ckpt.MODEL_FILE)
    with open(model, 'wb') as f:
        f.write(content)
    with pytest.raises(ckpt.CheckpointError) as error:
        ckpt.load_latest_checkpoint(str(tmp_path))
    assert f'the newest: UnpicklingError: {model} is corrupt' in str(error.value)


def test_a_truncated_model_file_is_named_once_as_a_damaged_zip(tmp_path):
    path = ckpt.save_checkpoint(str(tmp_path), 50, make_state(1), None)
    model = os.path.join(path, ckpt.MODEL_FILE)
    with open(model, 'rb') as f:
        start = f.read(1000)
    with open(model, 'wb') as f:
        f.write(start)
    with pytest.raises(ckpt.CheckpointError) as error:
        ckpt.load_latest_checkpoint(str(tmp_path))
    assert f'BadZipFile: {model}: File is not a zip file (damaged)' in str(error.value)
    assert str(error.value).count('BadZipFile') == 1, str(error.value)


@pytest.mark.parametrize(
    'failure',
    [
        OSError(errno.EIO, 'Input/output error'),
        PermissionError(errno.EACCES, 'denied'),
        MemoryError(),
    ],
    ids=['io_error', 'no_permission', 'no_memory'],
)
@pytest.mark.parametrize('file', [ckpt.MODEL_FILE, ckpt.REPLAY_BUFFER_FILE])
def test_a_checkpoint_that_fails_to_be_read_is_neither_skipped_nor_moved(
    tmp_path, monkeypatch, failure, file
):
    for step in (50, 100):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(step), make_replay_buffer_state(step))
    unreadable = str(tmp_path / 'ckpt-100' / file)
    real_load = torch.load

    def load(path, *args, **kwargs):
        if str(path) == unreadable:
            raise failure
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(torch, 'load', load)
    # Not corrupt: resuming from ckpt-50 would drop an intact ckpt-100 (and its buffer).
    with pytest.raises(ckpt.CheckpointError, match='could not read checkpoint .*ckpt-100') as e:
        ckpt.load_latest_checkpoint(str(tmp_path))
    assert type(failure).__name__ in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100', 'ckpt-50']


def test_save_never_prunes_the_replay_buffer_of_the_checkpoint_it_writes(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    ckpt.save_checkpoint(str(tmp_path), 60, make_state(2), make_replay_buffer_state(2))
    assert (tmp_path / 'ckpt-60' / ckpt.REPLAY_BUFFER_FILE).is_file()
    assert not (tmp_path / 'ckpt-100' / ckpt.REPLAY_BUFFER_FILE).exists()


def test_a_last_good_save_keeps_the_replay_buffer_of_the_regular_checkpoints(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    ckpt.save_checkpoint(str(tmp_path), 150, make_state(2), None, name='last_good-150')
    assert (tmp_path / 'last_good-150' / ckpt.MODEL_FILE).is_file()
    assert (tmp_path / 'ckpt-100' / ckpt.REPLAY_BUFFER_FILE).is_file()
    # Resume still picks ckpt-100, with its buffer.
    _, rb = ckpt.load_checkpoint(latest_checkpoint(str(tmp_path)))
    assert_same(rb, make_replay_buffer_state(1))


def test_keep_removes_the_oldest_regular_checkpoints_never_the_one_written_or_kept_aside(
    tmp_path,
):
    ckpt.save_checkpoint(str(tmp_path), 50, make_state(5), None, name='last_good-50')
    for step in (100, 200, 300, 400):
        ckpt.save_checkpoint(
            str(tmp_path), step, make_state(step // 100), make_replay_buffer_state(step), keep=2
        )
    assert sorted(os.listdir(tmp_path)) == ['ckpt-300', 'ckpt-400', 'last_good-50']
    assert not (tmp_path / 'ckpt-300' / ckpt.REPLAY_BUFFER_FILE).exists()
    _, rb = ckpt.load_checkpoint(str(tmp_path / 'ckpt-400'))
    assert_same(rb, make_replay_buffer_state(400))
    # After a resume past a newer checkpoint, the one written is kept though its step is lower.
    ckpt.save_checkpoint(str(tmp_path), 350, make_state(3), make_replay_buffer_state(3), keep=1)
    assert sorted(os.listdir(tmp_path)) == ['ckpt-350', 'last_good-50']
    # None keeps every one.
    for step in (500, 600):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(6), None)
    assert len(list_checkpoints(str(tmp_path))) == 3


def test_a_removal_is_never_half_done_under_a_regular_name(tmp_path, monkeypatch, caplog):
    for step in (100, 200):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(1), None)
    # Killed while removing ckpt-100: the directory it was renamed to is half removed.
    removed = []
    real_rmtree = shutil.rmtree

    def killed(path, **kwargs):
        if '-removed-' not in path:
            return real_rmtree(path, **kwargs)
        removed.append(path)
        os.remove(os.path.join(path, ckpt.MODEL_FILE))
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.shutil, 'rmtree', killed)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(str(tmp_path), 300, make_state(3), None, keep=2)
    monkeypatch.undo()
    assert [os.path.basename(p) for p in removed] == [f'.tmp-ckpt-100-removed-{os.getpid()}']
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == [
        'ckpt-200',
        'ckpt-300',
    ]
    assert ckpt.remove_temporary_checkpoints(str(tmp_path)) == removed
    assert sorted(os.listdir(tmp_path)) == ['ckpt-200', 'ckpt-300']
    # One that cannot be renamed stays, with a warning, and the save succeeds.
    real_rename = os.rename

    def refused(src, dst):
        if os.path.basename(src) == 'ckpt-200':
            raise PermissionError(errno.EACCES, 'Permission denied')
        real_rename(src, dst)

    monkeypatch.setattr(ckpt.os, 'rename', refused)
    with caplog.at_level(logging.WARNING):
        path = ckpt.save_checkpoint(str(tmp_path), 400, make_state(4), None, keep=1)
    assert path == str(tmp_path / 'ckpt-400')
    assert sorted(os.listdir(tmp_path)) == ['ckpt-200', 'ckpt-400']
    assert f'could not remove the old checkpoint {tmp_path / "ckpt-200"}' in caplog.text


@contextlib.contextmanager
def undeletable(path, root):
    """Make file ``path`` impossible to delete for this process, as a read-only checkpoint
    directory makes its files for a user: root deletes from one, so there the file is made
    immutable (``chattr +i``), where the file system lets it be. Undone under ``root``
    wherever the file was moved to."""
    if os.geteuid() != 0:
        os.chmod(os.path.dirname(path), 0o555)
        try:
            yield
        finally:
            for directory, _, _ in os.walk(root):
                os.chmod(directory, 0o755)
        return
    if subprocess.run(['chattr', '+i', path], capture_output=True).returncode != 0:
        pytest.skip('root deletes from a read-only directory, and chattr +i is not available')
    try:
        yield
    finally:
        subprocess.run(['chattr', '-R', '-i', str(root)], check=True)


def test_an_old_checkpoint_that_cannot_be_removed_stays_a_checkpoint(tmp_path, caplog):
    for step in (100, 200):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(step // 100), None)
    with undeletable(str(tmp_path / 'ckpt-100' / ckpt.MODEL_FILE), tmp_path):
        with caplog.at_level(logging.INFO):
            ckpt.save_checkpoint(str(tmp_path), 300, make_state(3), None, keep=1)
            # Nothing half removed is left for the next start to report as removed.
            assert ckpt.remove_temporary_checkpoints(str(tmp_path)) == []
    # Neither hidden under a temporary name nor reported as removed: resume and play see it.
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100', 'ckpt-300']
    assert f'could not remove the old checkpoint {tmp_path / "ckpt-100"}' in caplog.text
    assert f'removed the old checkpoint {tmp_path / "ckpt-100"}' not in caplog.text
    state, _ = ckpt.load_checkpoint(str(tmp_path / 'ckpt-100'))
    assert_same(state, make_state(1))
    # Once it can be, the next save removes it.
    ckpt.save_checkpoint(str(tmp_path), 400, make_state(4), None, keep=1)
    assert sorted(os.listdir(tmp_path)) == ['ckpt-400']


def test_a_replay_buffer_that_cannot_be_removed_fails_no_save(tmp_path, caplog):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    buffer = tmp_path / 'ckpt-100' / ckpt.REPLAY_BUFFER_FILE
    with undeletable(str(buffer), tmp_path), caplog.at_level(logging.WARNING):
        path = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), make_replay_buffer_state(2))
    assert path == str(tmp_path / 'ckpt-200')
    assert f'could not remove the replay buffer of the older checkpoint {buffer.parent}' in (
        caplog.text
    )
    for step in (1, 2):
        state, rb = ckpt.load_checkpoint(str(tmp_path / f'ckpt-{step}00'))
        assert_same(state, make_state(step))
        assert_same(rb, make_replay_buffer_state(step))


def test_keep_removes_no_file_or_link_that_has_a_checkpoint_name(tmp_path, caplog):
    (tmp_path / 'ckpt-50').write_text('notes')
    archived = tmp_path / 'archive' / 'ckpt-60'
    ckpt.save_checkpoint(str(tmp_path / 'archive'), 60, make_state(6), None)
    os.symlink(archived, tmp_path / 'ckpt-60')
    with caplog.at_level(logging.INFO):
        for step in (100, 200, 300):
            ckpt.save_checkpoint(str(tmp_path), step, make_state(step // 100), None, keep=1)
    assert sorted(os.listdir(tmp_path)) == ['archive', 'ckpt-300', 'ckpt-50', 'ckpt-60']
    assert (tmp_path / 'ckpt-50').read_text() == 'notes'
    assert_same(ckpt.load_checkpoint(str(tmp_path / 'ckpt-60'))[0], make_state(6))
    assert 'ckpt-50' not in caplog.text and 'ckpt-60' not in caplog.text


@pytest.mark.parametrize('keep', [None, 2])
def test_the_replay_buffer_of_a_linked_older_checkpoint_stays_where_the_link_points(tmp_path, keep):
    archived = tmp_path / 'archive' / 'ckpt-60'
    ckpt.save_checkpoint(str(tmp_path / 'archive'), 60, make_state(6), make_replay_buffer_state(6))
    run = tmp_path / 'run'
    run.mkdir()
    os.symlink(archived, run / 'ckpt-60')
    for step in (100, 200):
        ckpt.save_checkpoint(
            str(run), step, make_state(step), make_replay_buffer_state(step), keep=keep
        )
    assert_same(ckpt.load_checkpoint(str(archived))[1], make_replay_buffer_state(6))
    # The run's own older checkpoint gives its buffer up, as ever.
    assert not (run / 'ckpt-100' / ckpt.REPLAY_BUFFER_FILE).exists()


def test_a_temporary_checkpoint_that_cannot_be_removed_is_not_reported_removed(tmp_path, caplog):
    left = tmp_path / '.tmp-ckpt-100-removed-1'
    left.mkdir()
    (left / 'notes.txt').write_text('kept')
    with undeletable(str(left / 'notes.txt'), tmp_path), caplog.at_level(logging.WARNING):
        assert ckpt.remove_temporary_checkpoints(str(tmp_path)) == []
    assert f'could not remove {left}' in caplog.text
    assert ckpt.remove_temporary_checkpoints(str(tmp_path)) == [str(left)]
    assert os.listdir(tmp_path) == []


def test_corrupt_replay_buffer_of_the_newest_checkpoint_resumes_it_without_the_buffer(tmp_path):
    for step in (50, 100):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(step), make_replay_buffer_state(step))
    (tmp_path / 'ckpt-100' / ckpt.REPLAY_BUFFER_FILE).write_bytes(b'garbage')
    path, state, rb, _ = ckpt.load_latest_checkpoint(str(tmp_path))
    # Its networks are still worth resuming from; ckpt-50 has no buffer either.
    assert path.endswith('ckpt-100')
    assert_same(state, make_state(100))
    assert rb is None
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100', 'ckpt-50']  # nothing moved aside


@pytest.mark.parametrize('kept', [0.5, 0.99])
def test_a_truncated_small_replay_buffer_resumes_its_checkpoint_without_it(tmp_path, kept):
    # A buffer file of some kilobytes cut short (a copy of the run that stopped midway):
    # torch's zip reader then seeks before the file's start and raises an OSError, which
    # says nothing of the disk.
    for step in (50, 100):
        rb = {'observation': torch.randn(2, 500, 3), 'num_steps': 500}
        ckpt.save_checkpoint(str(tmp_path), step, make_state(step), rb)
    buffer = tmp_path / 'ckpt-100' / ckpt.REPLAY_BUFFER_FILE
    saved = buffer.read_bytes()
    assert 4096 < len(saved) < 65536
    buffer.write_bytes(saved[: int(len(saved) * kept)])
    path, state, rb, unreadable = ckpt.load_latest_checkpoint(str(tmp_path))
    assert path.endswith('ckpt-100') and rb is None and unreadable == []
    assert_same(state, make_state(100))
    assert sorted(os.listdir(tmp_path)) == ['ckpt-100', 'ckpt-50']


def test_a_directory_in_place_of_a_replay_buffer_file_does_not_fail_the_next_save(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    buffer = tmp_path / 'ckpt-100' / ckpt.REPLAY_BUFFER_FILE
    buffer.unlink()
    buffer.mkdir()
    _, _, rb, _ = ckpt.load_latest_checkpoint(str(tmp_path))
    assert rb is None  # unreadable: resumed without it
    # The save after that resume: it was written, then its pruning raised IsADirectoryError.
    path = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), make_replay_buffer_state(2))
    assert_same(ckpt.load_checkpoint(path)[1], make_replay_buffer_state(2))
    assert buffer.is_dir()  # no file alf_lite wrote: left as it is


class WritesAFile:
    """Unpickling this runs ``exec``, which writes ``path``: what a crafted checkpoint does."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return exec, (f'open({str(self.path)!r}, "w").write("ran")',)


def test_checkpoint_that_would_run_code_is_refused_naming_the_file_and_runs_nothing(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    crafted = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), None)
    marker = tmp_path / 'ran'
    torch.save(
        {'env_steps': 200, 'payload': WritesAFile(marker)}, os.path.join(crafted, ckpt.MODEL_FILE)
    )
    with pytest.raises(ckpt.UnsafeCheckpointError) as error:
        ckpt.load_latest_checkpoint(str(tmp_path))
    assert os.path.join(crafted, ckpt.MODEL_FILE) in str(error.value)
    assert 'builtins.exec' in str(error.value)
    assert not marker.exists()
    # Refused, not skipped: resuming from the one before it would hide the file.
    assert os.path.isdir(crafted)


def test_replay_buffer_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    marker = tmp_path / 'ran'
    rb_file = os.path.join(path, ckpt.REPLAY_BUFFER_FILE)
    torch.save({'observation': WritesAFile(marker)}, rb_file)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=rb_file):
        ckpt.load_checkpoint(path)
    assert not marker.exists()


# torch warns that the plain pickle's protocol is not its own: that file is the point here.
@pytest.mark.filterwarnings('ignore:Detected pickle protocol:UserWarning')
@pytest.mark.parametrize('protocol', [0, 2, pickle.HIGHEST_PROTOCOL, 'torch_legacy'])
def test_plain_pickle_that_would_run_code_is_refused_as_a_zip_one_is(tmp_path, protocol):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    crafted = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), None)
    marker = tmp_path / 'ran'
    model = os.path.join(crafted, ckpt.MODEL_FILE)
    if protocol == 'torch_legacy':
        # Several pickles, the harmless magic number first, then the objects.
        payload = {'env_steps': 200, 'weights': torch.ones(3), 'payload': WritesAFile(marker)}
        torch.save(payload, model, _use_new_zipfile_serialization=False)
    else:
        with open(model, 'wb') as f:
            pickle.dump(WritesAFile(marker), f, protocol=protocol)
    # Protocols 0-2 name the module as Python 2 did.
    with pytest.raises(ckpt.UnsafeCheckpointError, match=r'(builtins|__builtin__)\.exec'):
        ckpt.load_latest_checkpoint(str(tmp_path))
    assert not marker.exists()
    assert os.path.isdir(crafted)  # not skipped for ckpt-100, which would hide it


@pytest.mark.filterwarnings('ignore:Detected pickle protocol:UserWarning')
def test_a_global_whose_name_comes_through_the_memo_is_named(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    crafted = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), None)
    # builtins.exec('print(1)'), its name memoised under a decoy: push 'exec', push 'set',
    # pop, memoise 'exec', pop, push 'builtins', fetch 'exec', STACK_GLOBAL, call.
    crafted_pickle = (
        b'\x80\x04\x8c\x04exec\x8c\x03set0\x940\x8c\x08builtinsh\x00\x93\x8c\x08print(1)\x85R.'
    )
    assert [op.name for op, _, _ in pickletools.genops(crafted_pickle)][-3:] == [
        'TUPLE1',
        'REDUCE',
        'STOP',
    ]
    with open(os.path.join(crafted, ckpt.MODEL_FILE), 'wb') as f:
        f.write(crafted_pickle)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=r'refers to builtins\.exec,'):
        ckpt.load_latest_checkpoint(str(tmp_path))


def replace_pickle(model, obj):
    """Make zip file ``model`` hold ``obj`` pickled with protocol 4, whose opcodes (``FRAME``,
    ``STACK_GLOBAL``) ``weights_only`` does not read: it refuses the file whatever it names."""
    with zipfile.ZipFile(model) as archive:
        records = {n: archive.read(n) for n in archive.namelist()}
    (name,) = [n for n in records if n.endswith('/data.pkl')]
    records[name] = pickle.dumps(obj, protocol=4)
    with zipfile.ZipFile(model, 'w') as archive:
        for n, data in records.items():
            archive.writestr(n, data)


@pytest.mark.filterwarnings('ignore:Detected pickle protocol:UserWarning')
@pytest.mark.parametrize(
    'form',
    ['zip_protocol_4', 'hex_int_before_a_global', 'tar'],
)
def test_a_crafted_file_its_scanners_read_only_in_part_is_refused_as_unsafe(tmp_path, form):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    crafted = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), None)
    model = os.path.join(crafted, ckpt.MODEL_FILE)
    payload = pickle.dumps(WritesAFile(tmp_path / 'ran'), protocol=4)
    if form == 'zip_protocol_4':
        # torch's own scan of a zip's pickle reads GLOBAL only, not STACK_GLOBAL.
        replace_pickle(model, WritesAFile(tmp_path / 'ran'))
    elif form == 'hex_int_before_a_global':
        # The unpickler reads 0x10 as an int; pickletools stops there, before the global.
        with open(model, 'wb') as f:
            f.write(b'(I0x10\n0cbuiltins\nexec\nX\x03\x00\x00\x00abc\x85R.')
    else:
        with tarfile.open(model, 'w') as archive:
            info = tarfile.TarInfo('pickle')
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    with pytest.raises(ckpt.UnsafeCheckpointError, match='which loading would have to call'):
        ckpt.load_latest_checkpoint(str(tmp_path))
    assert not (tmp_path / 'ran').exists()


@pytest.mark.filterwarnings('ignore:Duplicate name:UserWarning')
@pytest.mark.filterwarnings('ignore:Detected pickle protocol:UserWarning')
def test_a_zip_holding_its_pickle_twice_is_refused_as_unsafe_not_skipped_as_corrupt(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    crafted = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), None)
    model = os.path.join(crafted, ckpt.MODEL_FILE)
    replace_pickle(model, WritesAFile(tmp_path / 'ran'))
    with zipfile.ZipFile(model) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith('/data.pkl')]
        data = archive.read(name)
    with zipfile.ZipFile(model, 'a') as archive:
        archive.writestr(name, data)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=r'refers to builtins\.exec,'):
        ckpt.load_latest_checkpoint(str(tmp_path))
    assert os.path.isdir(crafted)  # not skipped for ckpt-100, which would hide it
    assert not (tmp_path / 'ran').exists()


class AllowedByTheUser:
    """A class of the user's, which ``weights_only`` builds once ``add_safe_globals`` allows it."""

    def __init__(self, value):
        self.value = value


@pytest.mark.filterwarnings('ignore:Detected pickle protocol:UserWarning')
@pytest.mark.parametrize('entry', ['class', 'class_and_its_name'])
def test_a_class_the_user_allowed_loads_and_makes_no_file_unsafe(tmp_path, entry):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    state = dict(make_state(2), kept=AllowedByTheUser(7))
    path = ckpt.save_checkpoint(str(tmp_path), 200, state, None)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=r'refers to \S*AllowedByTheUser,'):
        ckpt.load_state(path)
    name = f'{AllowedByTheUser.__module__}.{AllowedByTheUser.__qualname__}'
    allowed = AllowedByTheUser if entry == 'class' else (AllowedByTheUser, name)
    with torch.serialization.safe_globals([allowed]):
        assert ckpt.load_state(path)['kept'].value == 7
        # Refused by torch for how it is written, not for what it names: corrupt, not unsafe.
        replace_pickle(os.path.join(path, ckpt.MODEL_FILE), {'kept': AllowedByTheUser(7)})
        latest = ckpt.load_latest_checkpoint(str(tmp_path))
        assert latest.path.endswith('ckpt-100') and latest.unreadable == [path]
    with pytest.raises(ckpt.UnsafeCheckpointError, match=r'refers to \S*AllowedByTheUser,'):
        ckpt.load_latest_checkpoint(str(tmp_path))


class RunsACommand:
    """Unpickling this calls ``os.system``, of a module ``weights_only`` never loads from."""

    def __reduce__(self):
        return os.system, ('true',)


@pytest.mark.filterwarnings('ignore:Detected pickle protocol:UserWarning')
def test_a_global_of_a_module_torch_blocks_is_unsafe_even_when_the_user_allowed_it(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    path = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), None)
    replace_pickle(os.path.join(path, ckpt.MODEL_FILE), {'payload': RunsACommand()})
    with torch.serialization.safe_globals([os.system]):
        with pytest.raises(ckpt.UnsafeCheckpointError, match=rf'refers to {os.name}\.system,'):
            ckpt.load_latest_checkpoint(str(tmp_path))


def test_a_checkpoint_in_torchs_legacy_format_of_tensors_and_values_loads(tmp_path):
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    torch.save(
        make_state(1), os.path.join(path, ckpt.MODEL_FILE), _use_new_zipfile_serialization=False
    )
    assert_same(ckpt.load_latest_checkpoint(str(tmp_path)).state, make_state(1))


def test_a_file_that_is_no_pickle_at_all_counts_as_corrupt(tmp_path):
    ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    damaged = ckpt.save_checkpoint(str(tmp_path), 200, make_state(2), None)
    with open(os.path.join(damaged, ckpt.MODEL_FILE), 'wb') as f:
        f.write(bytes(range(256)) * 4)
    latest = ckpt.load_latest_checkpoint(str(tmp_path))
    assert latest.path.endswith('ckpt-100') and latest.unreadable == [damaged]


@contextlib.contextmanager
def saved_as_if_on(location, tensors=None):
    """``torch.save`` records CPU tensors (all, or those given) as on ``location``, as a GPU run."""
    pointers = None if tensors is None else {t.untyped_storage().data_ptr() for t in tensors}

    def tagger(storage):
        if storage.device.type == 'cpu' and (pointers is None or storage.data_ptr() in pointers):
            return location
        return None

    def deserializer(obj, saved_location):
        return None  # loading is left to torch's own rules

    torch.serialization.register_package(0, tagger, deserializer)
    try:
        yield
    finally:
        registry = torch.serialization._package_registry
        registry[:] = [entry for entry in registry if entry[1] is not tagger]


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks loading on a machine without CUDA')
def test_gpu_checkpoint_loads_on_the_cpu_with_map_location(tmp_path):
    state, rb = make_state(1), make_replay_buffer_state(1)
    with saved_as_if_on('cuda:0'):
        ckpt.save_checkpoint(str(tmp_path), 100, state, rb)
    path = latest_checkpoint(str(tmp_path))
    with pytest.raises(RuntimeError, match='deserialize object on a CUDA device'):
        ckpt.load_checkpoint(path)  # the file really names the GPU
    loaded_state, loaded_rb = ckpt.load_checkpoint(path, map_location=torch.device('cpu'))
    assert_same(loaded_state, state)
    assert_same(loaded_rb, rb)
    found, loaded_state, _, _ = ckpt.load_latest_checkpoint(str(tmp_path), map_location='cpu')
    assert found == path and loaded_state['algorithm']['net']['weight'].device.type == 'cpu'


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks loading on a machine without CUDA')
def test_replay_buffer_of_a_gpu_run_always_loads_to_the_cpu(tmp_path):
    state, rb = make_state(2), make_replay_buffer_state(2)
    with saved_as_if_on('cuda:0', [v for v in rb.values() if torch.is_tensor(v)]):
        path = ckpt.save_checkpoint(str(tmp_path), 200, state, rb)
    loaded_state, loaded_rb = ckpt.load_checkpoint(path)
    assert_same(loaded_state, state)
    assert_same(loaded_rb, rb)


def test_a_restored_optimizer_keeps_its_moments_from_the_checkpoint_and_its_configured_settings():
    def net_with(lr, weight_decay, fused):
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        adam = torch.optim.Adam(net.parameters(), lr, weight_decay=weight_decay, fused=fused)
        net.optimizers = {'net': adam}
        return net

    trained = net_with(0.1, 0.0, fused=False)
    trained(torch.ones(4, 3)).square().sum().backward()
    trained.optimizers['net'].step()
    saved = ckpt.algorithm_state(trained)
    resumed = net_with(0.5, 0.01, fused=True)
    ckpt.load_algorithm_state(resumed, saved)
    (group,) = resumed.optimizers['net'].param_groups
    assert (group['lr'], group['weight_decay']) == (0.5, 0.01)
    # It steps as configured (fused), its counts placed for that as torch places them.
    assert group['fused'] is True
    assert resumed.optimizers['net'].state[resumed.weight]['step'].dtype == torch.float32
    # The moments and step counts are the checkpoint's.
    assert_same(
        resumed.optimizers['net'].state_dict()['state'], saved['optimizers']['net']['state']
    )
    assert group['params'] == list(resumed.parameters())


@pytest.mark.parametrize('saved_fused, resumed_fused', [(False, True), (True, False)])
def test_a_resume_that_steps_otherwise_than_its_checkpoint_steps_as_a_fresh_run(
    saved_fused, resumed_fused
):
    def trained(fused, steps):
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        net.optimizers = {'net': torch.optim.Adam(net.parameters(), 0.1, fused=fused)}
        for _ in range(steps):
            net.optimizers['net'].zero_grad()
            net(torch.ones(4, 3)).square().sum().backward()
            net.optimizers['net'].step()
        return net

    # Fused and per-tensor Adam keep the step count in different places (a CUDA-graph
    # run's capturable one likewise): the resumed optimizer must find it where it looks.
    resumed = trained(resumed_fused, 0)
    ckpt.load_algorithm_state(resumed, ckpt.algorithm_state(trained(saved_fused, 2)))
    resumed.optimizers['net'].zero_grad()
    resumed(torch.ones(4, 3)).square().sum().backward()
    resumed.optimizers['net'].step()
    uninterrupted = trained(resumed_fused, 3)
    for a, b in zip(resumed.parameters(), uninterrupted.parameters()):
        torch.testing.assert_close(a, b)
    assert resumed.optimizers['net'].state[resumed.weight]['step'].item() == 3


def test_step_counts_are_placed_where_the_optimizers_settings_look_for_them():
    # A device other than the CPU, without a GPU: the meta device.
    param = torch.nn.Parameter(torch.empty(3, device='meta'))
    adam = torch.optim.Adam([param], foreach=False)
    adam.state[param]['step'] = torch.tensor(2.0, dtype=torch.float64)  # as a CPU run keeps it
    adam.param_groups[0]['capturable'] = True  # as a CUDA-graph run steps
    ckpt.place_step_counts(adam)
    step = adam.state[param]['step']
    assert (step.device.type, step.dtype) == ('meta', torch.float32)
    # Otherwise on the CPU, as torch keeps it (a meta tensor has no data to move back).
    adam.state[param]['step'] = torch.tensor(2.0, dtype=torch.float64)
    adam.param_groups[0]['capturable'] = False
    ckpt.place_step_counts(adam)
    step = adam.state[param]['step']
    assert (step.device.type, step.dtype) == ('cpu', torch.float64)


def test_optimizer_state_of_another_shape_than_its_parameter_is_refused():
    net = torch.nn.Linear(3, 2)
    net.optimizers = {'net': torch.optim.Adam(net.parameters())}
    net(torch.ones(4, 3)).sum().backward()
    net.optimizers['net'].step()
    saved = ckpt.algorithm_state(net)
    moments = saved['optimizers']['net']['state']
    moments[0], moments[1] = moments[1], moments[0]  # the bias's moments for the weight's
    with pytest.raises(ValueError, match=r"state 'exp_avg' of parameter 0 is of shape \(2,\)"):
        ckpt.load_algorithm_state(net, saved)


def test_optimizer_settings_that_step_with_state_the_checkpoint_lacks_are_refused():
    def net_with(amsgrad):
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        net.optimizers = {'net': torch.optim.Adam(net.parameters(), amsgrad=amsgrad)}
        return net

    trained = net_with(amsgrad=False)
    trained(torch.ones(4, 3)).sum().backward()
    trained.optimizers['net'].step()
    saved = ckpt.algorithm_state(trained)
    # Its first step would fail with KeyError: 'max_exp_avg_sq'.
    with pytest.raises(ValueError, match=r"parameter 0 has no 'max_exp_avg_sq'.*Adam.amsgrad"):
        ckpt.load_algorithm_state(net_with(amsgrad=True), saved)
    # Settings that step with less state resume, and step.
    amsgrad = net_with(amsgrad=True)
    amsgrad(torch.ones(4, 3)).sum().backward()
    amsgrad.optimizers['net'].step()
    resumed = net_with(amsgrad=False)
    ckpt.load_algorithm_state(resumed, ckpt.algorithm_state(amsgrad))
    resumed(torch.ones(4, 3)).sum().backward()
    resumed.optimizers['net'].step()
    assert resumed.optimizers['net'].state[resumed.weight]['step'].item() == 2


def test_optimizer_moments_that_are_no_tensors_of_their_parameters_shape_are_refused():
    net = torch.nn.Linear(3, 2)
    net.optimizers = {'net': torch.optim.Adam(net.parameters())}
    net(torch.ones(4, 3)).sum().backward()
    net.optimizers['net'].step()
    for moment in (3, torch.tensor(3.0)):
        saved = ckpt.algorithm_state(net)
        saved['optimizers']['net']['state'][0]['exp_avg'] = moment
        # Its first update would fail inside torch (a TypeError, a size mismatch).
        with pytest.raises(ValueError, match=r"'exp_avg' of parameter 0 is .*its shape \(2, 3\)"):
            ckpt.load_algorithm_state(net, saved)
    # A parameter of no dimensions has moments of none.
    scalar = torch.nn.Module()
    scalar.weight = torch.nn.Parameter(torch.tensor(1.0))
    scalar.optimizers = {'net': torch.optim.Adam(scalar.parameters())}
    scalar.weight.sum().backward()
    scalar.optimizers['net'].step()
    ckpt.load_algorithm_state(scalar, ckpt.algorithm_state(scalar))


def test_trainer_state_round_trips_and_a_foreign_state_is_refused(tmp_path):
    net = torch.nn.Linear(3, 2)
    net.optimizers = {'net': torch.optim.Adam(net.parameters())}
    state = ckpt.TrainerState(
        algorithm=ckpt.algorithm_state(net),
        rng={},
        env_steps=40,
        num_updates=3,
        recent_returns=[1.5],
        recent_lengths=[7],
        last_eval={},
    )
    path = ckpt.save_trainer_state(str(tmp_path), state)
    assert os.path.basename(path) == 'ckpt-40'
    loaded = ckpt.trainer_state(ckpt.load_state(path))
    assert_same(ckpt.policy_state(loaded.algorithm), net.state_dict())
    assert loaded.env_steps == 40 and loaded.recent_lengths == [7]
    with pytest.raises(ckpt.CheckpointError, match='not a trainer checkpoint'):
        ckpt.trainer_state(make_state(1))
    with pytest.raises(ckpt.CheckpointError, match='it holds a list, not a dict'):
        ckpt.trainer_state([state])


def valid_trainer_state():
    """A ``TrainerState`` that ``check_trainer_state`` accepts, at 40 env steps and 0 updates."""
    net = torch.nn.Linear(3, 2)
    net.optimizers = {'net': torch.optim.Adam(net.parameters())}
    return ckpt.TrainerState(
        algorithm=ckpt.algorithm_state(net),
        rng=global_rng_state(),
        env_steps=40,
        num_updates=0,
        recent_returns=[],
        recent_lengths=[],
        last_eval={},
    )


def test_check_trainer_state_refuses_a_negative_num_updates(tmp_path):
    state = valid_trainer_state()
    ckpt.check_trainer_state(str(tmp_path), state._asdict())  # valid as it is
    # As a trainer writes them: byte counts are ints, a figure of no episode NaN.
    scalars = {'train/replay_buffer_bytes': 2500000, 'train/AverageReturn': float('nan')}
    written = state._replace(
        recent_returns=[-3.5, 2], recent_lengths=[200], last_eval={'eval/AverageReturn': -1.0}
    )
    for field in ('pending_evaluation', 'train_scalars'):
        ckpt.check_trainer_state(str(tmp_path), written._replace(**{field: scalars})._asdict())
    with pytest.raises(ckpt.CorruptCheckpointError, match='negative counters 40, -1'):
        ckpt.check_trainer_state(str(tmp_path), state._replace(num_updates=-1)._asdict())


@pytest.mark.parametrize(
    'damage, problem',
    [
        ({'env_steps': -1}, 'negative counters -1, 0'),
        ({'env_steps': True}, 'env_steps is True, of the wrong type'),
        ({'pending_evaluation': [1.0]}, 'pending_evaluation is [1.0], of the wrong type'),
        ({'algorithm': {'module': {}}}, "the algorithm state has no 'optimizers' dict"),
        ({'iteration_start': 41}, 'iteration_start 41 is not in [0, env_steps = 40]'),
        ({'iteration_start': 1.5}, 'iteration_start is 1.5, of the wrong type'),
        ({'iteration_trained': 1}, 'iteration_trained is 1, of the wrong type'),
        ({'iteration_length': 0}, 'iteration_length 0 < 1'),
        ({'train_scalars': [1.0]}, 'train_scalars is [1.0], of the wrong type'),
        ({'update_scalars': [1.0]}, 'update_scalars is [1.0], of the wrong type'),
        ({'recent_returns': [1.0, 'a']}, "recent_returns holds 'a', not a number"),
        ({'recent_lengths': [True]}, 'recent_lengths holds True, not a number'),
        (
            {'recent_returns': [1.0, float('nan')]},
            'recent_returns holds nan, which no episode of finite rewards has',
        ),
        (
            {'recent_returns': [float('-inf')]},
            'recent_returns holds -inf, which no episode of finite rewards has',
        ),
        ({'recent_lengths': [20, 2.5]}, 'recent_lengths holds 2.5, no count of steps'),
        ({'recent_lengths': [-20]}, 'recent_lengths holds -20, no count of steps'),
        (
            {'train_scalars': {'train/critic_loss': 'abc'}},
            "train_scalars holds 'abc' for train/critic_loss, not a number",
        ),
        (
            {'pending_evaluation': {'env_steps': 7}},
            "pending_evaluation holds the key 'env_steps', no summary scalar name",
        ),
        ({'last_eval': {3: 1.0}}, 'last_eval holds the key 3, no summary scalar name'),
        ({'last_eval': {'eval/': 1.0}}, "last_eval holds the key 'eval/', no summary scalar name"),
        ({'iteration_start': -1}, 'iteration_start -1 is not in [0, env_steps = 40]'),
        ({'algorithm': {'optimizers': {}}}, "the algorithm state has no 'module' dict"),
        ({'recent_lengths': [-1]}, 'recent_lengths holds -1, no count of steps'),
        (
            {'last_eval': {'test/AverageReturn': 1.0}},
            "last_eval holds the key 'test/AverageReturn', no summary scalar name",
        ),
        (
            {'update_scalars': {'critic_loss': 1.0}},
            "update_scalars holds the key 'critic_loss', no summary scalar name",
        ),
        ({'rng': {}}, "its RNG state is invalid (KeyError: 'numpy')"),
        (
            {'algorithm': {'module': {'weight': torch.tensor([float('nan')])}, 'optimizers': {}}},
            'parameter weight holds NaN or inf; alf_lite never writes a checkpoint with '
            'non-finite weights, so the file was altered or damaged',
        ),
        # Ints too large for a float: float() and math.isfinite raise OverflowError on them,
        # and repr does beyond 4300 digits.
        (
            {'recent_returns': [10**400]},
            'recent_returns holds an integer of 1329 bits, beyond the range of a float',
        ),
        (
            {'recent_lengths': [10**5000]},
            'recent_lengths holds an integer of 16610 bits, beyond the range of a float',
        ),
        (
            {'last_eval': {'eval/AverageReturn': -(2**1024)}},
            'last_eval holds an integer of 1025 bits for eval/AverageReturn, beyond the range '
            'of a float',
        ),
    ],
    ids=[
        'negative_env_steps',
        'bool_env_steps',
        'pending_evaluation',
        'no_optimizers',
        'iteration_start_past_env_steps',
        'float_iteration_start',
        'int_iteration_trained',
        'zero_iteration_length',
        'train_scalars',
        'update_scalars',
        'text_return',
        'bool_length',
        'nan_return',
        'inf_return',
        'fractional_length',
        'negative_length',
        'text_scalar',
        'column_of_its_own',
        'int_key',
        'empty_name',
        'negative_iteration_start',
        'no_module',
        'length_of_minus_one',
        'unknown_mode',
        'update_scalar_without_mode',
        'rng_without_numpy',
        'nan_weight',
        'huge_int_return',
        'huge_int_length',
        'huge_int_scalar',
    ],
)
def test_check_trainer_state_names_the_file_and_its_problem(tmp_path, damage, problem):
    state = valid_trainer_state()._replace(**damage)
    with pytest.raises(ckpt.CorruptCheckpointError) as error:
        ckpt.check_trainer_state(str(tmp_path), state._asdict())
    assert str(error.value) == f'{tmp_path / ckpt.MODEL_FILE}: {problem}'


@pytest.mark.timeout(60)
@pytest.mark.parametrize('field', ['env_steps', 'recent_lengths', 'last_eval'])
def test_a_value_that_holds_itself_many_times_over_is_refused_at_once(tmp_path, field):
    # A 40 kB file: pickle stores a list shared by both halves of the one above it once.
    # Shown with repr, it was 2**40 items long: the check ran on for minutes, taking GBs.
    nested = [0]
    for _ in range(40):
        nested = [nested, nested]
    value = {'eval/AverageReturn': nested} if field == 'last_eval' else nested
    state = valid_trainer_state()._replace(**{field: value})
    with pytest.raises(ckpt.CorruptCheckpointError) as info:
        ckpt.check_trainer_state(str(tmp_path), state._asdict())
    assert len(str(info.value)) < 400, str(info.value)[:400]


@pytest.mark.parametrize(
    'tensor, problem',
    [
        # One element shown as a million: a check of its values copied all of them first,
        # as many GBs as the file asked for.
        (torch.zeros(1).expand(1_000_000), 'has 1000000 elements over a storage of 4 bytes'),
        # Not floating point, so not checked, then cast to a NaN weight as it was loaded.
        (torch.tensor([complex(float('nan'), 0.0), 0j]), 'holds NaN or inf'),
    ],
    ids=['expanded', 'complex_nan'],
)
@pytest.mark.parametrize('where', ['module', 'optimizer'])
def test_a_network_or_optimizer_tensor_no_training_writes_counts_as_corrupt(
    tmp_path, tensor, problem, where
):
    state = valid_trainer_state()
    if where == 'module':
        state.algorithm['module']['bias'] = tensor
    else:
        state.algorithm['optimizers']['net']['state'] = {0: {'exp_avg': tensor}}
    with pytest.raises(ckpt.CorruptCheckpointError, match=re.escape(problem)):
        ckpt.check_trainer_state(str(tmp_path), state._asdict())


def test_a_network_tensor_of_another_dtype_is_refused_as_it_is_loaded():
    # 1e300 is finite in float64 and inf in the float32 weight it was cast into.
    net = torch.nn.Linear(3, 2)
    net.optimizers = {'net': torch.optim.Adam(net.parameters())}
    state = ckpt.algorithm_state(net)
    state['module']['bias'] = torch.full((2,), 1e300, dtype=torch.float64)
    with pytest.raises(
        ValueError, match=r"'bias' is torch.float64, where the networks hold torch.float32"
    ):
        ckpt.load_algorithm_state(net, state)
    assert torch.isfinite(net.bias).all()


def test_non_finite_optimizer_state_counts_as_corrupt(tmp_path):
    state = valid_trainer_state()
    net = torch.nn.Linear(3, 2)
    net.optimizers = {'net': torch.optim.Adam(net.parameters())}
    net(torch.ones(4, 3)).sum().backward()
    net.optimizers['net'].step()
    algorithm = ckpt.algorithm_state(net)
    ckpt.check_trainer_state(str(tmp_path), state._replace(algorithm=algorithm)._asdict())
    algorithm['optimizers']['net']['state'][1]['exp_avg_sq'][0] = float('nan')
    with pytest.raises(ckpt.CorruptCheckpointError, match=r'optimizer state net\.1\.exp_avg_sq'):
        ckpt.check_trainer_state(str(tmp_path), state._replace(algorithm=algorithm)._asdict())


@pytest.mark.parametrize(
    'damage, problem',
    [
        (lambda adam: 5, "optimizer 'net' is 5, no optimizer state"),
        (lambda adam: {**adam, 'state': [1]}, "'net' has no 'state' dict of a dict per parameter"),
        (lambda adam: {**adam, 'state': {0: 1}}, "'net' has no 'state' dict of a dict per"),
        (lambda adam: {**adam, 'param_groups': 5}, "'net' has no 'param_groups' list of dicts"),
        (lambda adam: {**adam, 'param_groups': [{}]}, "'param_groups' list of dicts with 'params'"),
    ],
    ids=['not_a_dict', 'state_list', 'state_of_numbers', 'groups_int', 'group_without_params'],
)
def test_optimizer_state_not_laid_out_as_torch_writes_it_counts_as_corrupt(
    tmp_path, damage, problem
):
    state = valid_trainer_state()
    for step in (20, 40):
        ckpt.save_trainer_state(str(tmp_path), state._replace(env_steps=step))
    newest = ckpt.trainer_state(ckpt.load_state(str(tmp_path / 'ckpt-40')))
    optimizers = newest.algorithm['optimizers']
    optimizers['net'] = damage(optimizers['net'])
    torch.save(newest._asdict(), tmp_path / 'ckpt-40' / ckpt.MODEL_FILE)
    # Skipped for the one before it: restoring it would fail inside torch's load_state_dict.
    latest = ckpt.load_latest_checkpoint(str(tmp_path), check=ckpt.check_trainer_state)
    assert latest.path == str(tmp_path / 'ckpt-20')
    assert latest.unreadable == [str(tmp_path / 'ckpt-40')]
    with pytest.raises(ckpt.CorruptCheckpointError, match=re.escape(problem)):
        ckpt.check_trainer_state(str(tmp_path / 'ckpt-40'), newest._asdict())


def test_a_bit_flipped_in_a_weight_is_caught_by_its_checksum(tmp_path):
    for step in (50, 100):
        ckpt.save_checkpoint(str(tmp_path), step, make_state(step), None)
    model = tmp_path / 'ckpt-100' / ckpt.MODEL_FILE
    with zipfile.ZipFile(model) as archive:
        record = next(i for i in archive.infolist() if '/data/' in i.filename)
    data = bytearray(model.read_bytes())
    # Past the record's local header (30 bytes, then its name and its extra field, whose
    # lengths the header ends with): a byte of a tensor.
    start = record.header_offset
    name_length, extra_length = struct.unpack('<HH', data[start + 26 : start + 30])
    data[start + 30 + name_length + extra_length] ^= 0x40
    model.write_bytes(bytes(data))
    latest = ckpt.load_latest_checkpoint(str(tmp_path))
    assert latest.path.endswith('ckpt-50') and latest.unreadable == [str(model.parent)]
    with pytest.raises(zipfile.BadZipFile, match='does not match its checksum'):
        ckpt.load_state(str(model.parent))


def test_a_bit_flipped_in_the_replay_buffer_is_caught_by_its_checksum(tmp_path, caplog):
    # The lowest bit of a stored reward: still a finite number, which every other check of
    # the buffer passes. The checkpoint resumes without it, as without any unreadable one.
    from alf_lite.replay_buffer import ReplayBuffer

    saved = ReplayBuffer(1, 100, observation_dim=3, action_dim=1)
    saved.storage['reward'].uniform_()
    saved.load_state_dict(dict(saved.storage, total_added=100))
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), saved.state_dict())
    rb_file = os.path.join(path, ckpt.REPLAY_BUFFER_FILE)
    assert ckpt.load_checkpoint(path)[1] is not None
    with zipfile.ZipFile(rb_file) as archive:
        records = [i for i in archive.infolist() if '/data/' in i.filename]
    data = bytearray(open(rb_file, 'rb').read())
    for record in records:  # one holds the rewards, the first of them 4 bytes in little-endian
        start = record.header_offset
        name_length, extra_length = struct.unpack('<HH', data[start + 26 : start + 30])
        data[start + 30 + name_length + extra_length] ^= 0x01
    with open(rb_file, 'wb') as f:
        f.write(bytes(data))
    caplog.set_level(logging.WARNING)
    state, rb = ckpt.load_checkpoint(path)
    assert rb is None and state['env_steps'] == 100
    assert f'replay buffer {rb_file} is unreadable' in caplog.text
    assert 'does not match its checksum (damaged)); resuming without it' in caplog.text


def test_each_bit_flipped_in_the_central_directory_is_refused_or_harmless(tmp_path):
    # The table of records at a zip file's end, which no CRC covers: torch reads a record
    # where and as long as it says, and one marked there as a directory as zeros.
    net = torch.nn.Linear(2, 1, bias=False)
    optimizer = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    state = {'algorithm': {'net': net.state_dict(), 'opt': optimizer.state_dict()}}
    path = ckpt.save_checkpoint(str(tmp_path), 100, state, None)
    model = os.path.join(path, ckpt.MODEL_FILE)
    with open(model, 'rb') as f:
        saved = f.read()
    with zipfile.ZipFile(model) as archive:
        directory = archive.start_dir
    loaded_otherwise, not_counted_as_corrupt, harmless = [], [], 0
    for position in range(directory, len(saved)):
        for bit in range(8):
            damaged = bytearray(saved)
            damaged[position] ^= 1 << bit
            with open(model, 'wb') as f:
                f.write(damaged)
            damage = (position - directory, 1 << bit)
            try:
                loaded = ckpt.load_state(path)
            except Exception as e:  # noqa: BLE001  (what load_latest_checkpoint skips as corrupt)
                if isinstance(e, ckpt.UnsafeCheckpointError) or ckpt._failed_to_read(e):
                    not_counted_as_corrupt.append((*damage, repr(e)))
                continue
            try:
                assert_same(loaded, state)
                harmless += 1
            except AssertionError:
                loaded_otherwise.append(damage)
    # Each damage as (byte of the directory, bit flipped).
    assert (loaded_otherwise, not_counted_as_corrupt) == ([], [])
    assert harmless > 0  # e.g. a record's time stamp, which no reader uses


def test_a_checkpoint_whose_name_is_not_its_step_counts_as_corrupt(tmp_path):
    state = valid_trainer_state()._asdict()  # at 40 env steps
    ckpt.check_trainer_state(str(tmp_path / 'ckpt-40'), state)
    ckpt.check_trainer_state(str(tmp_path / 'last_good-41'), state)  # not picked by its name
    with pytest.raises(ckpt.CorruptCheckpointError, match='at 40 env steps, but its directory'):
        ckpt.check_trainer_state(str(tmp_path / 'ckpt-900'), state)


def test_check_trainer_state_leaves_the_global_rng_as_it_was(tmp_path):
    state = valid_trainer_state()  # holds the generators' states of now
    # Draws since then moved every generator away from the state checked.
    random.random()
    np.random.rand()
    torch.rand(1)
    before = global_rng_state()
    ckpt.check_trainer_state(str(tmp_path), state._asdict())
    assert_same(global_rng_state(), before)


def test_a_checkpoint_zipped_again_with_directory_entries_loads(tmp_path):
    # Unzipped and zipped again (``zip -r`` writes an empty entry for each directory):
    # torch reads it as before, so it is no damaged file.
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    model = os.path.join(path, ckpt.MODEL_FILE)
    with zipfile.ZipFile(model) as archive:
        records = [(info, archive.read(info)) for info in archive.infolist()]
    os.remove(model)
    with zipfile.ZipFile(model, 'w', zipfile.ZIP_STORED) as archive:
        written = set()
        for info, data in records:
            parts = info.filename.split('/')[:-1]
            for depth in range(1, len(parts) + 1):
                directory = '/'.join(parts[:depth]) + '/'
                if directory not in written:
                    archive.writestr(directory, b'')
                    written.add(directory)
            archive.writestr(info.filename, data)
    with zipfile.ZipFile(model) as archive:
        assert 'archive/' in archive.namelist()
    assert_same(ckpt.load_state(path), torch.load(model, weights_only=True))
    assert_same(ckpt.load_state(path)['algorithm'], make_state(1)['algorithm'])


def zipped_again(model):
    """Write zip file ``model`` again as zipfile does: each record's CRC-32 and sizes in its
    local header, where torch writes them to a descriptor after its data."""
    with zipfile.ZipFile(model) as archive:
        records = [(info.filename, archive.read(info)) for info in archive.infolist()]
    os.remove(model)
    with zipfile.ZipFile(model, 'w', zipfile.ZIP_STORED) as archive:
        for name, data in records:
            archive.writestr(name, data)


def descriptor_crc(data, info):
    """Where the CRC-32 of the descriptor after the data of ``info``'s record is."""
    start = info.header_offset
    name_length, extra_length = struct.unpack('<HH', data[start + 26 : start + 30])
    end = start + 30 + name_length + extra_length + info.compress_size
    assert data[end : end + 4] == b'PK\x07\x08'
    return end + 4


@pytest.mark.parametrize(
    'rewrite, damage, problem',
    [
        (True, lambda data, info: info.header_offset + 30, 'no local header of that name'),
        (True, lambda data, info: info.header_offset + 8, 'names another compression method'),
        (True, lambda data, info: info.header_offset + 14, 'holds another CRC-32 or size'),
        (False, descriptor_crc, 'the descriptor after it holds another CRC-32 or size'),
    ],
    ids=['name', 'method', 'crc', 'descriptor_crc'],
)
def test_a_record_whose_local_header_does_not_repeat_its_directory_entry_is_refused(
    tmp_path, rewrite, damage, problem
):
    # Torch reads a record by its central directory entry: its local header and the
    # descriptor after its data must say the same (zipfile checks only the name).
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    model = os.path.join(path, ckpt.MODEL_FILE)
    if rewrite:
        zipped_again(model)
        ckpt.load_state(path)  # as written, it loads
    with zipfile.ZipFile(model) as archive:
        info = archive.infolist()[0]
    with open(model, 'rb') as f:
        data = bytearray(f.read())
    data[damage(data, info)] ^= 0x01
    with open(model, 'wb') as f:
        f.write(data)
    with pytest.raises(zipfile.BadZipFile, match=re.escape(f'record {info.filename}: ')) as error:
        ckpt.load_state(path)
    assert problem in str(error.value)


def test_a_record_that_runs_into_the_next_one_is_refused(tmp_path):
    # Its local header and directory entry agree, and its CRC-32 is that of the bytes its
    # sizes span: the first 4 bytes of the next record's local header among them.
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    model = os.path.join(path, ckpt.MODEL_FILE)
    zipped_again(model)
    with zipfile.ZipFile(model) as archive:
        first, directory = archive.infolist()[0], archive.start_dir
    with open(model, 'rb') as f:
        data = bytearray(f.read())
    start = first.header_offset
    name_length, extra_length = struct.unpack('<HH', data[start + 26 : start + 30])
    data_start = start + 30 + name_length + extra_length
    size = first.compress_size + 4
    assert data[data_start + first.compress_size : data_start + size] == b'PK\x03\x04'
    fields = struct.pack('<3I', zlib.crc32(data[data_start : data_start + size]), size, size)
    data[start + 14 : start + 26] = fields
    # The first entry of the central directory: its CRC-32 and sizes at byte 16.
    assert data[directory : directory + 4] == b'PK\x01\x02'
    data[directory + 16 : directory + 28] = fields
    with open(model, 'wb') as f:
        f.write(data)
    with zipfile.ZipFile(model) as archive:
        assert archive.testzip() is None  # each record matches its CRC-32
    with pytest.raises(zipfile.BadZipFile, match='overlaps what follows it'):
        ckpt.load_state(path)


def test_a_record_whose_directory_entry_points_past_the_file_is_named(tmp_path):
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    model = os.path.join(path, ckpt.MODEL_FILE)
    with zipfile.ZipFile(model) as archive:
        first, directory = archive.infolist()[0], archive.start_dir
    with open(model, 'rb') as f:
        data = bytearray(f.read())
    # The first entry of the central directory: its local header's offset at byte 42.
    assert data[directory : directory + 4] == b'PK\x01\x02'
    data[directory + 42 : directory + 46] = struct.pack('<I', len(data))
    with open(model, 'wb') as f:
        f.write(data)
    message = f'record {first.filename}: its offset {len(data)} is outside the file'
    with pytest.raises(zipfile.BadZipFile, match=re.escape(message)):
        ckpt.load_state(path)


def deflated_again(path):
    """Write zip file ``path`` again with deflate, as a zip tool may; returns the bytes its
    records unpack to."""
    with zipfile.ZipFile(path) as archive:
        records = [(info.filename, archive.read(info)) for info in archive.infolist()]
    os.remove(path)
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as archive:
        for name, data in records:
            archive.writestr(name, data)
    unpacked = sum(len(data) for _, data in records)
    assert os.path.getsize(path) < unpacked  # deflated
    return unpacked


def test_a_model_file_that_unpacks_past_the_memory_left_is_refused_before_loading(
    tmp_path, monkeypatch
):
    # Zipped again with deflate: torch.load would unpack each record whole, so the sizes
    # its records declare are weighed against the room left first.
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    unpacked = deflated_again(os.path.join(path, ckpt.MODEL_FILE))
    assert_same(ckpt.load_state(path)['algorithm'], make_state(1)['algorithm'])
    monkeypatch.setattr(ckpt, 'available_cpu_memory', lambda: (unpacked - 1, None))
    with pytest.raises(MemoryError, match=f'unpacks to {unpacked} bytes, more than the'):
        ckpt.load_state(path)


def test_a_replay_buffer_zipped_again_with_deflate_loads_its_values(tmp_path, monkeypatch):
    # torch.load(mmap=True) maps a record's bytes as the file holds them: a deflated
    # record's are compressed, not the tensor's. Such a file is read whole, and weighed
    # against the memory left as a model file is.
    buffer = {**make_replay_buffer_state(1), 'reward': torch.randn(2, 100_000)}
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), buffer)
    unpacked = deflated_again(os.path.join(path, ckpt.REPLAY_BUFFER_FILE))
    assert_same(ckpt.load_checkpoint(path)[1], buffer)
    monkeypatch.setattr(ckpt, 'available_cpu_memory', lambda: (unpacked - 1, None))
    with pytest.raises(MemoryError, match=f'unpacks to {unpacked} bytes, more than the'):
        ckpt.load_checkpoint(path)


def with_pickle(path, data, compress_type=zipfile.ZIP_DEFLATED):
    """Write zip file ``path`` again with ``data`` as its pickle (``data.pkl``), compressed with
    ``compress_type``; returns the bytes its records unpack to."""
    with zipfile.ZipFile(path) as archive:
        records = [(info.filename, archive.read(info)) for info in archive.infolist()]
    records = [(name, data if name.endswith('/data.pkl') else held) for name, held in records]
    os.remove(path)
    with zipfile.ZipFile(path, 'w') as archive:
        for name, held in records:
            compressed = compress_type if name.endswith('/data.pkl') else zipfile.ZIP_STORED
            archive.writestr(name, held, compress_type=compressed)
    return sum(len(held) for _, held in records)


# 100,000 empty sets (one byte each, 216 bytes each unpickled), or a str of 1 MiB holding
# a character past U+FFFF (4 bytes a character unpickled): a few KiB deflated, 20 MiB and
# 4 MiB in memory.
AMPLIFYING_PICKLES = {
    'sets': b'\x80\x02' + b'\x8f' * 100_000 + b'.',
    'wide str': b'\x80\x02X'
    + struct.pack('<I', 2**20)
    + '\U0001f600'.encode()
    + b'a' * (2**20 - 4)
    + b'.',
}


@pytest.mark.parametrize('kind', AMPLIFYING_PICKLES)
def test_a_model_file_whose_pickle_builds_more_than_the_memory_left_is_refused_unbuilt(
    tmp_path, monkeypatch, kind
):
    # A few bytes of a pickle may build hundreds of bytes of objects: the file that fits
    # the memory unpacked would be killed for its lack unpickling. Its opcodes are weighed,
    # unbuilt, before torch.load runs.
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    model = os.path.join(path, ckpt.MODEL_FILE)
    unpacked = with_pickle(model, AMPLIFYING_PICKLES[kind])
    assert os.path.getsize(model) < 2**16
    room = unpacked + 2 * 2**20
    monkeypatch.setattr(ckpt, 'available_cpu_memory', lambda: (room, None))
    monkeypatch.setattr(torch, 'load', lambda *args, **kwargs: pytest.fail('torch.load ran'))
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError) as raised:
            ckpt.load_state(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert re.fullmatch(
        f'{re.escape(model)} could take [0-9]+ bytes or more to load, the objects its pickle '
        f'builds counted at their largest, more than the {room} bytes of memory available',
        str(raised.value),
    )
    assert peak < 4 * 2**20  # what either builds takes more
    # Where there is room for what it builds, it loads (into no trainer state).
    monkeypatch.undo()
    assert ckpt.load_state(path) in (set(), '\U0001f600' + 'a' * (2**20 - 4))


def test_a_replay_buffer_whose_pickle_builds_more_than_the_memory_left_is_refused(
    tmp_path, monkeypatch
):
    # Mapped, its records take no memory; its pickle is read and unpickled all the same.
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), make_replay_buffer_state(1))
    rb = os.path.join(path, ckpt.REPLAY_BUFFER_FILE)
    with_pickle(rb, AMPLIFYING_PICKLES['sets'], zipfile.ZIP_STORED)
    monkeypatch.setattr(ckpt, 'available_cpu_memory', lambda: (2**20, None))
    with pytest.raises(MemoryError, match=f'{re.escape(rb)} could take [0-9]+ bytes or more'):
        ckpt.load_checkpoint(path)


def test_a_model_file_of_the_largest_config_is_weighed_at_a_few_times_its_size(
    tmp_path, monkeypatch
):
    # Each character of the config may take 4 bytes unpickled, beside the bytes read: the
    # largest config a checkpoint holds still loads where 8 times its size is free, and is
    # weighed in well under a second.
    config_text = '\U0001f600' + 'a' * (MAX_CONFIG_BYTES - 1)
    state = valid_trainer_state()._replace(config_text=config_text)._asdict()
    path = ckpt.save_checkpoint(str(tmp_path), 40, state, None)
    monkeypatch.setattr(ckpt, 'available_cpu_memory', lambda: (8 * MAX_CONFIG_BYTES, None))
    assert ckpt.load_state(path)['config_text'] == config_text


def write_zip_of_zeros(path, size, crc_error=0):
    """A zip file of one stored record of ``size`` zero bytes, left as a hole in the file (no
    disk space, written at once); ``crc_error`` is xor-ed into the CRC-32 it states."""
    name = b'archive/data/0'
    crc, zeros = 0, bytes(1 << 20)
    for start in range(0, size, len(zeros)):
        crc = zlib.crc32(zeros[: size - start], crc)
    crc ^= crc_error
    header = struct.pack('<4s5H3I2H', b'PK\x03\x04', 20, 0, 0, 0, 0, crc, size, size, len(name), 0)
    entry = struct.pack(
        '<4s6H3I5H2I', b'PK\x01\x02', 20, 20, 0, 0, 0, 0, crc, size, size, len(name), *[0] * 6
    )
    directory_start = len(header) + len(name) + size
    end = struct.pack(
        '<4s4H2IH', b'PK\x05\x06', 0, 0, 1, 1, len(entry) + len(name), directory_start, 0
    )
    with open(path, 'wb') as f:
        f.write(header + name)
        f.seek(directory_start)
        f.write(entry + name + end)


def test_a_large_model_file_is_checked_without_holding_it_in_memory(tmp_path):
    # Someone else's model.pt may be of any size: its records are read a piece at a time.
    model = str(tmp_path / ckpt.MODEL_FILE)
    size = 64 * 2**20
    damaged = pytest.raises(zipfile.BadZipFile, match='archive/data/0 does not match its checksum')
    for crc_error in (0, 1):
        write_zip_of_zeros(model, size, crc_error)
        tracemalloc.start()
        try:
            with damaged if crc_error else contextlib.nullcontext():
                ckpt._check_zip_records(model)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < size / 8, (crc_error, peak)


def failing_reads(fails):
    """An ``open`` of files whose reads of bytes ``[start, end)`` fail with EIO where
    ``fails(start, end)``."""

    class FailingReads(io.FileIO):
        def read(self, size=-1):
            start = self.tell()
            if fails(start, float('inf') if size < 0 else start + size):
                raise OSError(errno.EIO, 'Input/output error')
            return super().read(size)

    return lambda file, mode='r': FailingReads(file)


def test_an_io_error_while_checking_the_model_file_is_no_damage(tmp_path, monkeypatch):
    # Told apart from a damaged file: a checkpoint is not skipped for the disk's failure.
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)

    # Reads past the first bytes fail as a failing disk's do.
    monkeypatch.setattr(ckpt, 'open', failing_reads(lambda start, end: start >= 4), raising=False)
    with pytest.raises(OSError) as error:
        ckpt.load_state(path)
    assert error.value.errno == errno.EIO and not isinstance(error.value, zipfile.BadZipFile)
    assert ckpt._failed_to_read(error.value)


def test_an_io_error_reading_a_record_header_is_no_damage(tmp_path, monkeypatch):
    # The disk fails under the first record's local header, which only the check of the
    # central directory against the records reads before the records themselves.
    path = ckpt.save_checkpoint(str(tmp_path), 100, make_state(1), None)
    model = os.path.join(path, ckpt.MODEL_FILE)

    # Reads of bytes 4 to 30 (past the zip signature) fail.
    header = failing_reads(lambda start, end: start < 30 and end > 4)
    monkeypatch.setattr(ckpt, 'open', header, raising=False)
    with pytest.raises(OSError) as error:
        ckpt._check_zip_records(model)
    assert error.value.errno == errno.EIO and not isinstance(error.value, zipfile.BadZipFile)


@pytest.mark.parametrize('name', [None, 'last_good-60'])
def test_a_link_of_the_name_being_saved_is_not_written_through(tmp_path, name):
    archived = tmp_path / 'archive' / 'ckpt-60'
    ckpt.save_checkpoint(str(tmp_path / 'archive'), 60, make_state(6), make_replay_buffer_state(6))
    run = tmp_path / 'run'
    run.mkdir()
    os.symlink(archived, run / (name or 'ckpt-60'))
    with pytest.raises(OSError, match='is a symbolic link'):
        ckpt.save_checkpoint(str(run), 60, make_state(7), make_replay_buffer_state(7), name=name)
    state, rb = ckpt.load_checkpoint(str(archived))
    assert_same(state, make_state(6))
    assert_same(rb, make_replay_buffer_state(6))
    assert sorted(os.listdir(run)) == [name or 'ckpt-60']
