"""Atomic checkpoints, and what a trainer's checkpoint holds.

A checkpoint directory exists under its final name only when complete (the
names are ``alf_lite.run_dir``'s). It holds ``model.pt``, the trainer's state
(``TrainerState``), and optionally ``replay_buffer.pt``. Files hold tensors and
plain values (numbers, strings, lists, tuples, dicts) only, and are read with
``torch.load(weights_only=True)``: a file that would need anything else to be
built, which in a pickle means running code, is refused. The replay buffer
file is mapped into memory rather than read (``torch.load(mmap=True)``), so a
resume holds no second copy of a buffer that may take most of the RAM.
"""

import contextlib
import io
import math
import os
import pickle
import pickletools
import shutil
import stat
import struct
import tarfile
import zipfile
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

import torch
from absl import logging

from alf_lite.config import short_repr, sync_to_disk
from alf_lite.device import ProcessMemoryLimit, available_cpu_memory
from alf_lite.run_dir import (
    MAX_CONFIG_BYTES,
    checkpoint_env_steps,
    checkpoint_name,
    free_aside_path,
    is_scalar_name,
    list_checkpoints,
)
from alf_lite.seeding import global_rng_state, set_global_rng_state

MODEL_FILE = 'model.pt'
REPLAY_BUFFER_FILE = 'replay_buffer.pt'
# Prefix of the directory a checkpoint is written into before its rename.
_TEMPORARY_PREFIX = '.tmp-'


class CheckpointError(RuntimeError):
    """No usable checkpoint: all are unreadable, or none fits the configured algorithm."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint's files load, but what they hold is no valid state (e.g. NaN weights)."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint file names functions or classes that loading it would call; it is not loaded."""


def save_checkpoint(
    checkpoint_dir: str,
    env_steps: int,
    state: dict,
    replay_buffer_state: Optional[dict] = None,
    name: Optional[str] = None,
    keep: Optional[int] = None,
) -> str:
    """Write ``checkpoint_dir/ckpt-<env_steps>/`` via a temporary directory and a rename.

    A regular checkpoint (no ``name``) removes the replay buffer file of the other
    regular checkpoints (not through a symbolic link of such a name), which keep their
    model file: only the one just written holds a (possibly large) replay buffer. A
    named checkpoint (e.g. ``last_good-<env_steps>``) removes no other's buffer and
    keeps its own. If writing or the rename fails (e.g. a full disk), the temporary
    directory is removed and the existing checkpoints are untouched. With ``keep``, once the
    new checkpoint is on the disk, the other regular checkpoints but the
    ``keep - 1`` of the most env steps are removed (directories only: a file or
    a link of such a name is left alone).

    Args:
        checkpoint_dir: parent directory of all checkpoints.
        env_steps: env step counter, used in the name.
        state: everything but the replay buffer (networks, optimizers, RNG, counters).
        replay_buffer_state: the replay buffer's ``state_dict()``, or None.
        name: directory name instead of ``ckpt-<env_steps>``; such a checkpoint
            is kept aside: resume never picks it, it prunes nothing and nothing
            removes it.
        keep: how many regular checkpoints to keep, the one just written
            included; None keeps all. A checkpoint that cannot be removed stays,
            with a warning.

    Returns:
        the path of the complete checkpoint.
    Raises:
        OSError: when the checkpoint could not be written, or its name is a symbolic
            link (nothing is written: saving that step again would replace the files
            where the link points).
    """
    os.makedirs(checkpoint_dir, exist_ok=True)
    regular = name is None
    final = os.path.join(checkpoint_dir, checkpoint_name(env_steps) if regular else name)
    if os.path.islink(final):
        raise OSError(
            f'{final} is a symbolic link (to {os.readlink(final)}): no checkpoint is written '
            'through it'
        )
    tmp = os.path.join(
        checkpoint_dir, f'{_TEMPORARY_PREFIX}{os.path.basename(final)}-{os.getpid()}'
    )
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(tmp)
        _save_synced(state, os.path.join(tmp, MODEL_FILE))
        if replay_buffer_state is not None:
            _save_synced(replay_buffer_state, os.path.join(tmp, REPLAY_BUFFER_FILE))
        sync_to_disk(tmp)
        if os.path.exists(final):
            _replace_files(tmp, final)
        else:
            os.rename(tmp, final)
        # The rename reaches the disk before older buffers are removed: after a
        # power cut, an unlink kept without the rename would leave the
        # checkpoint a resume falls back to without its buffer.
        sync_to_disk(checkpoint_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if regular:
        # Not by step: after a resume past a corrupt newer checkpoint, the one
        # just written is the run's newest state even though its step is lower.
        others = [path for path in list_checkpoints(checkpoint_dir) if path != final]
        if keep is not None:
            # Only a directory is a checkpoint written here: a file or a link of such a
            # name is someone else's, neither counted nor removed.
            written = [path for path in others if os.path.isdir(path) and not os.path.islink(path)]
            removed = written[: max(0, len(written) - (keep - 1))]
            for path in removed:
                _remove_checkpoint(path)
            others = [path for path in others if path not in removed]
        for path in others:
            if os.path.islink(path):
                # Someone's link to a checkpoint kept elsewhere: its buffer is not this run's
                # to remove.
                continue
            rb = os.path.join(path, REPLAY_BUFFER_FILE)
            # Not a directory of that name (no file alf_lite wrote, which a resume skipped as
            # unreadable): os.remove would fail this save, and every one after it.
            if os.path.isfile(rb):
                try:
                    os.remove(rb)
                except OSError as e:
                    # A read-only checkpoint: the new one is written all the same, and the
                    # run goes on. Only the space the old buffer takes is not freed.
                    logging.warning(
                        'could not remove the replay buffer of the older checkpoint %s (%s); '
                        'it is kept',
                        path,
                        e,
                    )
    return final


def _remove_checkpoint(path: str) -> None:
    """Remove the regular checkpoint ``path``; a warning where it cannot be.

    It is renamed out of the regular names first, so that a kill during the
    removal leaves no partial ``ckpt-<env_steps>`` (the next start removes the
    rest as a write left unfinished). One whose files cannot all be removed (a
    read-only directory) goes back under its name while its model file is
    whole: it is still a checkpoint, which under a temporary name resume and
    play would no longer see.
    """
    removing = os.path.join(
        os.path.dirname(path),
        f'{_TEMPORARY_PREFIX}{os.path.basename(path)}-removed-{os.getpid()}',
    )
    try:
        os.rename(path, removing)
    except OSError as e:
        logging.warning('could not remove the old checkpoint %s (%s); it is kept', path, e)
        return
    try:
        shutil.rmtree(removing)
    except OSError as e:
        if os.path.isfile(os.path.join(removing, MODEL_FILE)):
            with contextlib.suppress(OSError):
                os.rename(removing, path)
        if os.path.lexists(path):
            logging.warning('could not remove the old checkpoint %s (%s); it is kept', path, e)
        else:
            logging.warning(
                'could not remove all of the old checkpoint %s (%s); what is left is in %s',
                path,
                e,
                removing,
            )
        return
    logging.info('removed the old checkpoint %s', path)


def file_sizes(path: str) -> Dict[str, int]:
    """Bytes on disk of each file of checkpoint directory ``path``, by name (model first)."""
    return {
        name: os.path.getsize(os.path.join(path, name))
        for name in (MODEL_FILE, REPLAY_BUFFER_FILE)
        if os.path.exists(os.path.join(path, name))
    }


def _replace_files(new: str, final: str) -> None:
    """Make checkpoint ``final`` hold the files of ``new``, one atomic replace at a time.

    Only when the same step is saved twice (a resume that ends at once). A
    directory cannot be renamed over a full one, and removing ``final`` first
    would leave no checkpoint of this step to a kill in between; file by file,
    ``final`` is loadable after each replace (the model first: a replay buffer
    of the same step holds the same rows).
    """
    for name in (MODEL_FILE, REPLAY_BUFFER_FILE):
        if os.path.exists(os.path.join(new, name)):
            os.replace(os.path.join(new, name), os.path.join(final, name))
        elif os.path.exists(os.path.join(final, name)):
            os.remove(os.path.join(final, name))
    sync_to_disk(final)
    shutil.rmtree(new)


def remove_temporary_checkpoints(checkpoint_dir: str) -> List[str]:
    """Remove what checkpoint writes left unfinished (killed mid-save); returns the paths removed.

    They are never loaded, but one may hold a whole replay buffer. One that
    cannot be removed is left, with a warning. Call it only while holding the
    run's ``RunDirLock``: a write under way in another process would be
    removed too.
    """
    if not os.path.isdir(checkpoint_dir):
        return []
    removed = []
    for name in sorted(os.listdir(checkpoint_dir)):
        if name.startswith(_TEMPORARY_PREFIX):
            path = os.path.join(checkpoint_dir, name)
            shutil.rmtree(path, ignore_errors=True)
            if os.path.lexists(path):
                logging.warning(
                    'could not remove %s, left by a checkpoint write or removal that never '
                    'completed; remove it yourself',
                    path,
                )
            else:
                removed.append(path)
    return removed


def _save_synced(obj, path):
    with open(path, 'wb') as f:
        try:
            torch.save(obj, f)
        except RuntimeError as e:
            # torch's zip writer reports a failed write (a full disk, a file
            # size limit) as a RuntimeError without the OS error. Any other
            # RuntimeError (e.g. a CUDA error copying a tensor) is no write's.
            if not _is_write_failure(e):
                raise
            raise OSError(
                f'writing {path} failed ({e}): the disk is full or a file size limit was hit'
            ) from e
        f.flush()
        os.fsync(f.fileno())


def _is_write_failure(error: RuntimeError) -> bool:
    """Whether ``error``, raised by ``torch.save``, is its zip writer's report of a failed write."""
    message = str(error)
    return (
        isinstance(error.__context__, OSError)
        or 'file write failed' in message
        or 'unexpected pos' in message
    )


def load_file(path: str, map_location: Union[str, torch.device, None] = None, mmap: bool = False):
    """Read one checkpoint file, allowing tensors and plain values only (``weights_only=True``).

    Args:
        path: a file written by ``save_checkpoint``.
        map_location: the device its tensors are loaded to; None keeps the
            saved devices.
        mmap: map the file and let its CPU tensors point into the mapping
            (private: writes to them never reach the file), so their pages are
            read from the file only when used and belong to the page cache,
            which the kernel can reclaim, instead of being copied into new
            memory. A file in torch's legacy (not zip) format cannot be
            mapped, nor one with a compressed record (``_records_stored``);
            it is read whole.
    Raises:
        UnsafeCheckpointError: when the file names anything else to call or
            build (e.g. ``builtins.exec``) than what the user allowed
            ``weights_only`` to (``torch.serialization.add_safe_globals``);
            nothing of it is executed.
        Exception: whatever ``torch.load`` raises for a truncated or corrupt file.
    """
    try:
        return torch.load(
            path,
            weights_only=True,
            map_location=map_location,
            mmap=mmap and _is_zip_file(path) and _records_stored(path),
        )
    except pickle.UnpicklingError:
        unsafe = _unsafe_globals(path)
        if not unsafe:
            # torch's own message advises weights_only=False, which is no advice here.
            raise pickle.UnpicklingError(f'{path} is corrupt or not a checkpoint file') from None
    except (EOFError, KeyError, IndexError, ValueError):
        # A file that is not torch's zip fails in torch's legacy reader, before any global,
        # with errors that do not say so: an empty one with a bare EOFError, text with a
        # KeyError of a number.
        if _is_zip_file(path):
            raise
        raise pickle.UnpicklingError(f'{path} is corrupt or not a checkpoint file') from None
    except RuntimeError:
        # torch's oldest format, which weights_only does not read: its pickles would run.
        if not tarfile.is_tarfile(path):
            raise
        unsafe = ['the pickles of a tar archive (torch before 1.6)']
    named = [name if name != '?' else 'a global this check cannot name' for name in unsafe]
    raise UnsafeCheckpointError(
        f'{path} refers to {", ".join(named)}, which loading would have to call; alf_lite '
        'writes tensors and plain values only, so the file was not written by it (or was '
        'altered) and is not loaded. Move it away if you do not trust it.'
    )


def _is_zip_file(path: str) -> bool:
    """Whether ``path`` starts as a zip archive does, as every file ``torch.save`` writes now."""
    with open(path, 'rb') as f:
        return f.read(4) == b'PK\x03\x04'


def _records_stored(path: str) -> bool:
    """Whether each record of zip file ``path`` is stored as is, as ``torch.save`` writes them
    (one zipped again by a zip tool may be deflated): ``torch.load(mmap=True)`` maps a record's
    bytes as the file holds them, a deflated one's compressed, for the tensor's values. True
    for a file ``zipfile`` cannot read (torch's reader names the problem)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return _all_stored(archive)
    except Exception:  # noqa: BLE001  (a damaged zip: torch.load's to report)
        return True


def _all_stored(archive: zipfile.ZipFile) -> bool:
    """Whether no record of ``archive`` is compressed."""
    return all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())


def _unsafe_globals(path: str) -> List[str]:
    """Names in the pickle of ``path`` that ``weights_only`` refuses, read without unpickling
    (``'?'`` for one that cannot be named); empty for a file that is merely damaged."""
    if not _is_zip_file(path):
        # torch reads only its zip format's pickle; alf_lite never writes another.
        with open(path, 'rb') as f:
            return _unsafe_in_pickles(f, LEGACY_PICKLES)
    with contextlib.suppress(Exception):  # its scanner reads only some opcodes
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        if unsafe:
            return unsafe
    try:
        with zipfile.ZipFile(path) as archive:
            # Each record of the pickle's name: a zip may hold one name twice, and which
            # of them torch reads is its zip reader's choice.
            pickles = [
                archive.read(info)
                for info in archive.infolist()
                if info.filename.rsplit('/', 1)[-1] == 'data.pkl'
            ]
    except Exception:  # noqa: BLE001  (a damaged zip, or none of torch's: corrupt)
        return []
    unsafe = [name for data in pickles for name in _unsafe_in_pickles(io.BytesIO(data), 1)]
    return list(dict.fromkeys(unsafe))


# The pickles before the raw tensor bytes of torch's legacy format: a magic number,
# the protocol, system information, the objects, the storage keys.
LEGACY_PICKLES = 5


def _unsafe_in_pickles(f, num_pickles: int) -> List[str]:
    """``module.name`` of each global that the first ``num_pickles`` pickles of ``f``
    name (what unpickling would import and may call) and ``weights_only`` refuses (not
    in ``_weights_only_allowed_globals``, or of a module torch blocks), read op by op,
    running none; ``'?'`` for one the reading cannot name, and where the reading stops
    before their end on bytes it cannot read as ``pickletools`` does (the unpickler may
    read them otherwise). A file that is no pickle from its first byte, or ends early,
    is merely damaged. What follows them (torch's raw tensor bytes) is not read.
    """
    import _compat_pickle

    import torch._weights_only_unpickler as weights_only

    # The modules torch refuses globals of, allowed or not (a private list: these where a
    # torch has none).
    blocked_modules = getattr(weights_only, '_blocklisted_modules', ('sys', 'os', 'posix', 'nt'))
    blocked = set()

    def python3_name(module: str, name: str) -> str:
        # Protocols 0-2 name builtins as Python 2 did (``__builtin__.exec``).
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if module in blocked_modules:
            blocked.add(f'{module}.{name}')
        return f'{module}.{name}'

    names, opcodes = [], 0
    for _ in range(num_pickles):
        start = f.tell()
        if not f.read(1):
            break
        f.seek(start)
        try:
            for found in _pickle_globals(f, python3_name):
                if found is None:
                    opcodes += 1
                else:
                    names.append(found)
        except Exception:  # noqa: BLE001  (where pickletools cannot go on)
            # Past the file's first opcode, with bytes left: what follows is unknown.
            if opcodes and f.read(1):
                names.append('?')
            break
    allowed = _weights_only_allowed_globals()
    return [name for name in dict.fromkeys(names) if name in blocked or name not in allowed]


def _weights_only_allowed_globals() -> set:
    """``module.name`` of each global ``torch.load(weights_only=True)`` allows: torch's own,
    and those the user allowed (``torch.serialization.add_safe_globals`` or its
    ``safe_globals`` context), named as torch names them: an entry ``(global, name)`` by
    ``name``, any other by its module and qualified name. (Torch still refuses a global
    of the modules it blocks, ``os``, ``sys``..., allowed or not.)"""
    from torch._weights_only_unpickler import _get_allowed_globals

    allowed = set(_get_allowed_globals())
    # A torch without a user's list allows its own only.
    user_allowed = getattr(torch.serialization, 'get_safe_globals', list)
    for entry in user_allowed():
        if not isinstance(entry, tuple):
            allowed.add(f'{entry.__module__}.{entry.__qualname__}')
        elif len(entry) == 2 and isinstance(entry[1], str):
            # Torch loads nothing while an entry is malformed: such a one allows nothing.
            allowed.add(entry[1])
    return allowed


# Stands for a MARK on the stack ``_pickle_globals`` keeps; None for a value it does not track.
_MARK = object()


def _pickle_globals(f, python3_name: Callable[[str, str], str]) -> Iterator[Optional[str]]:
    """Read one pickle from ``f`` op by op: yields None for each opcode and, after it, the
    name of each global it names, found by following the pickle's stack of values as far
    as strings (a global's module and name may be pushed, memoised and fetched again
    before STACK_GLOBAL takes them); '?' where they are not plain strings. Raises where
    ``pickletools`` cannot go on."""
    stack, memo = [], {}

    def pop(count: int) -> list:
        items = stack[len(stack) - count :] if count else []
        del stack[len(stack) - count :]
        return items

    for opcode, arg, _ in pickletools.genops(f):
        yield None
        name = opcode.name
        if name in ('GLOBAL', 'INST'):
            yield python3_name(*arg.split(' ', 1))
        if name in ('EXT1', 'EXT2', 'EXT4'):  # a global by copyreg's extension registry
            yield '?'
        if name == 'STACK_GLOBAL':
            module, attribute = ([None, None] + pop(2))[-2:]
            known = isinstance(module, str) and isinstance(attribute, str)
            yield python3_name(module, attribute) if known else '?'
            stack.append(None)
            continue
        if name in ('PUT', 'BINPUT', 'LONG_BINPUT', 'MEMOIZE'):
            memo[len(memo) if name == 'MEMOIZE' else arg] = stack[-1] if stack else None
            continue
        if name in ('GET', 'BINGET', 'LONG_BINGET'):
            stack.append(memo.get(arg))
            continue
        before = opcode.stack_before
        if pickletools.markobject in before:
            # Everything down to the top MARK, the MARK, then what lies below it.
            while stack and stack[-1] is not _MARK:
                stack.pop()
            if stack:
                stack.pop()
            pop(min(before.index(pickletools.markobject), len(stack)))
        else:
            pop(min(len(before), len(stack)))
        for kind in opcode.stack_after:
            if kind is pickletools.markobject:
                stack.append(_MARK)
            else:
                stack.append(arg if name in _PUSHES_A_STRING else None)


_PUSHES_A_STRING = frozenset(
    ['STRING', 'BINSTRING', 'SHORT_BINSTRING', 'UNICODE', 'BINUNICODE', 'SHORT_BINUNICODE']
    + ['BINUNICODE8']
)


def load_state(path: str, map_location: Union[str, torch.device, None] = None) -> dict:
    """The state in checkpoint directory ``path``, without its replay buffer (as ``load_file``).

    Raises:
        zipfile.BadZipFile: a record of the file does not match its checksum (a
            flipped bit in a weight, which torch would read as a weight), or the
            file's table of its records does not match them (``_check_zip_records``).
    """
    model = os.path.join(path, MODEL_FILE)
    _check_zip_records(model)
    return load_file(model, map_location)


def _check_zip_records(path: str, mapped: bool = False) -> None:
    """Raise ``zipfile.BadZipFile`` naming the problem if zip file ``path`` is damaged: a record
    whose CRC-32 does not match its bytes, or a central directory (the table of the records at
    the file's end, which no CRC covers) that does not match them (``_central_directory_problem``).
    A file of another format is left to ``load_file``. The file is read a piece at a time
    (``_FileBytes``), never whole into memory: one sent by someone else may be of any size.

    Raise ``MemoryError`` naming the bytes needed and available where what its records unpack
    to and the objects its pickle may build (``_pickles_bytes``) take more than the memory
    available.

    ``mapped``: the file is to be mapped (``load_file``'s ``mmap``), not unpacked into memory,
    so what its records unpack to is not counted (the replay buffer it is read into already
    took that memory); unless a record of it is compressed, which ``load_file`` does not map.
    Its pickle is unpickled all the same."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        # Opened to be read, a FIFO would block until something writes into it.
        raise zipfile.BadZipFile(f'{path} is no regular file (a pipe, a device or a socket)')
    if not _is_zip_file(path):
        return
    with open(path, 'rb') as f:
        data = _FileBytes(f)
        try:
            with zipfile.ZipFile(data) as archive:
                problem = _central_directory_problem(data, archive)
                # torch.load allocates each record whole: a deflated one (which torch.save
                # never writes, a zip tool may) could unpack to more than there is room for.
                unpacked = sum(info.file_size for info in archive.infolist())
                mapped = mapped and _all_stored(archive)
                room = available_cpu_memory()[0] if problem is None else unpacked
                if unpacked > room and not mapped:
                    raise MemoryError(
                        f'{path} unpacks to {unpacked} bytes, more than the {room} bytes of '
                        'memory available'
                    )
                for info in archive.infolist() if problem is None else ():
                    try:
                        with archive.open(info) as record:
                            while record.read(1 << 20):
                                pass
                    except zipfile.BadZipFile:
                        problem = f'record {info.filename} does not match its checksum'
                        break
                # Its pickle is read whole, mapped or not, and a few bytes of it may build
                # gigabytes of objects: weighed op by op (``_unpickling_bytes``), unbuilt.
                records = 0 if mapped else unpacked
                if problem is None:
                    needed = records + _pickles_bytes(archive, room - records)
                    if needed > room:
                        raise MemoryError(
                            f'{path} could take {needed} bytes or more to load, the objects its '
                            'pickle builds counted at their largest, more than the '
                            f'{room} bytes of memory available'
                        )
        except MemoryError:
            raise
        except _ReadFailed as e:  # the disk's, not the file's
            raise e.error from None
        except Exception as e:  # noqa: BLE001  (the bytes were read: a failure to parse is theirs)
            # The exception's type is named where a BadZipFile is reported: not twice.
            problem = str(e) if isinstance(e, zipfile.BadZipFile) else f'{type(e).__name__}: {e}'
    if problem is not None:
        raise zipfile.BadZipFile(f'{path}: {problem} (damaged)')


# What unpickling builds, beyond the pickle's own bytes, measured (sys.getsizeof, and the
# RSS of 200,000 of each; CPython 3.11, 64-bit): an opcode builds at most one object, the
# largest of no argument an empty set (216 bytes, 245 with its slot on the unpickler's
# stack; a slot, a memo entry or a container's growth by one item take less); a call
# (REDUCE and the like) torch's rebuilding of a tensor (700 with its storage's wrapper);
# an argument's bytes up to 4 bytes a character (a str holding one character past U+FFFF
# holds all of them so), beside those bytes read.
_OBJECT_BYTES = 256
_CALL_BYTES = 1024
_CALLS = frozenset(['REDUCE', 'BUILD', 'NEWOBJ', 'NEWOBJ_EX', 'OBJ', 'INST', 'BINPERSID', 'PERSID'])
_BYTES_PER_ARGUMENT_BYTE = 5
# The length before an argument, by pickletools' ``ArgumentDescriptor.n``: its bytes, and
# whether it is signed.
_LENGTH_PREFIXES = {
    pickletools.TAKEN_FROM_ARGUMENT1: (1, False),
    pickletools.TAKEN_FROM_ARGUMENT4: (4, True),
    pickletools.TAKEN_FROM_ARGUMENT4U: (4, False),
    pickletools.TAKEN_FROM_ARGUMENT8U: (8, False),
}


def _opcode_reading(code: int) -> Optional[tuple]:
    """How ``_unpickling_bytes`` reads opcode ``code``: ``(bytes it builds, bytes of its
    argument of a fixed size, lines of its argument, length prefix of its argument)``;
    None for STOP and a code pickle has no opcode of."""
    opcode = pickletools.code2op.get(chr(code))
    if opcode is None or opcode.name == 'STOP':
        return None
    n = 0 if opcode.arg is None else opcode.arg.n
    lines = 2 if opcode.arg is pickletools.stringnl_noescape_pair else 1
    return (
        _CALL_BYTES if opcode.name in _CALLS else _OBJECT_BYTES,
        max(n, 0),
        lines if n == pickletools.UP_TO_NEWLINE else 0,
        _LENGTH_PREFIXES.get(n),
    )


_OPCODE_READINGS = [_opcode_reading(code) for code in range(256)]


def _pickles_bytes(archive: zipfile.ZipFile, limit: int) -> int:
    """The bytes that unpickling the ``data.pkl`` records of ``archive`` may take (each read
    whole, which is counted), at most; each counted only while the sum is ``limit`` or less.
    A record is read here as torch reads it, into one copy: a megabyte at a time."""
    taken = 0
    for info in archive.infolist():
        if info.filename.rsplit('/', 1)[-1] == 'data.pkl' and taken <= limit:
            taken += info.file_size
            if taken <= limit:
                data = bytearray(info.file_size)
                with archive.open(info) as record:
                    for start in range(0, len(data), 1 << 20):
                        record.readinto(memoryview(data)[start : start + (1 << 20)])
                taken += _unpickling_bytes(data, limit - taken)
    return taken


def _unpickling_bytes(data: bytearray, limit: int) -> int:
    """The bytes of the objects that unpickling pickle ``data`` may build, at most, read op by
    op as ``pickletools`` describes them, building nothing (an argument is skipped, never
    decoded); counted up to STOP or a code of no opcode (where the unpickler stops too), or
    until past ``limit``: a pickle of 10 million opcodes is read in seconds, where unpickling
    it takes a minute and gigabytes."""
    taken, position, end = 0, 0, len(data)
    while position < end and taken <= limit:
        reading = _OPCODE_READINGS[data[position]]
        if reading is None:
            break
        built, size, lines, prefix = reading
        start = position = position + 1
        if lines:
            position = data.find(b'\n', position) + 1 or end
            if lines == 2:
                position = data.find(b'\n', position) + 1 or end
        elif prefix:
            size, signed = prefix
            length = int.from_bytes(data[position : position + size], 'little', signed=signed)
            size += max(length, 0)
        position += size
        taken += built + _BYTES_PER_ARGUMENT_BYTE * (min(position, end) - start)
    return taken


class _ReadFailed(Exception):
    """An ``OSError`` of reading a file (``error``): the disk's or the reader's, which says
    nothing of the file's bytes, told apart from a failure to parse them."""

    def __init__(self, error: OSError):
        super().__init__(error)
        self.error = error


class _FileBytes:
    """The bytes of open file ``f``, each read when asked for, never all at once: ``len``,
    a slice (``data[start:end]``), and ``read``, ``seek`` and ``tell`` for ``zipfile``. A
    failure to read raises ``_ReadFailed``."""

    def __init__(self, f):
        self._f = f
        self._size = os.fstat(f.fileno()).st_size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, where: slice) -> bytes:
        start, stop, _ = where.indices(self._size)
        self._f.seek(start)
        return self.read(max(stop - start, 0))

    def read(self, size: int = -1) -> bytes:
        try:
            return self._f.read(size)
        except OSError as e:
            raise _ReadFailed(e) from e

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def seekable(self) -> bool:
        return True


# A zip record's local header: signature, version needed, flags, method, time, date, CRC-32,
# compressed and uncompressed sizes, lengths of the name and of the extra field that follow.
_LOCAL_HEADER = struct.Struct('<4s5H3I2H')
# Flag bits: the CRC-32 and sizes are in a descriptor after the data (as torch writes
# them); the name is UTF-8.
_DESCRIPTOR_FOLLOWS = 0x08
_UTF8_NAME = 0x800
# A data descriptor after its optional signature: the CRC-32 and sizes, of 8 bytes in zip64.
_DESCRIPTORS = (struct.Struct('<3I'), struct.Struct('<I2Q'))
# The MS-DOS attribute of a directory: torch reads such a record as empty.
_DIRECTORY_ATTRIBUTE = 0x10


def _central_directory_problem(data: _FileBytes, archive: zipfile.ZipFile) -> Optional[str]:
    """What of ``archive``'s central directory does not match the records it lists in its
    bytes ``data``; None when each entry does.

    Torch reads a record where its entry says, as many bytes as it says, and one marked as
    a directory as zeros, checking none of it against the record: a damaged entry would
    load a tensor from other bytes. So an entry must name a file, and the local header at
    its offset must repeat its name, method, CRC-32 and sizes (or leave the last three to
    the descriptor after the data); the records must lie before the directory, apart. An
    empty entry named as a directory (``archive/``, which ``zip -r`` writes for a
    checkpoint unzipped and zipped again) is no record torch reads, and is left alone.
    """
    spans = []
    for info in archive.infolist():
        name = info.filename
        if name.endswith('/') and info.file_size == 0 and info.compress_size == 0:
            continue
        if name.endswith('/') or info.external_attr & _DIRECTORY_ATTRIBUTE:
            return f'record {name} is marked as a directory'
        start = info.header_offset
        if not 0 <= start <= len(data) - _LOCAL_HEADER.size:
            return f'record {name}: its offset {start} is outside the file'
        signature, _, flags, method, _, _, crc, compressed, size, name_length, extra_length = (
            _LOCAL_HEADER.unpack(data[start : start + _LOCAL_HEADER.size])
        )
        name_end = start + _LOCAL_HEADER.size + name_length
        encoding = 'utf-8' if info.flag_bits & _UTF8_NAME else 'cp437'
        local_name = data[start + _LOCAL_HEADER.size : name_end]
        if signature != b'PK\x03\x04' or local_name != info.orig_filename.encode(encoding):
            return f'record {name}: no local header of that name at offset {start}'
        if method != info.compress_type:
            return f'record {name}: its local header names another compression method'
        expected = (info.CRC, info.compress_size, info.file_size)
        extra = data[name_end : name_end + extra_length]
        end = name_end + extra_length + info.compress_size
        if flags & _DESCRIPTOR_FOLLOWS:
            end = _descriptor_end(data, end, expected)
            if end is None:
                return f'record {name}: the descriptor after it holds another CRC-32 or size'
        elif (crc, *_zip64_sizes(extra, compressed, size)) != expected:
            return f'record {name}: its local header holds another CRC-32 or size'
        spans.append((start, end, name))
    spans.sort()
    for (_, end, name), (start, _, _) in zip(spans, spans[1:] + [(archive.start_dir, 0, '')]):
        if end > start:
            return f'record {name} overlaps what follows it'
    return None


def _descriptor_end(data: _FileBytes, at: int, expected: Tuple[int, int, int]) -> Optional[int]:
    """Where the data descriptor at ``at`` ends if it holds the ``expected`` CRC-32 and
    sizes (``_DESCRIPTORS``); None if it does not."""
    starts = (at + 4, at) if data[at : at + 4] == b'PK\x07\x08' else (at,)
    for start in starts:
        for layout in _DESCRIPTORS:
            end = start + layout.size
            if end <= len(data) and layout.unpack(data[start:end]) == expected:
                return end
    return None


def _zip64_sizes(extra: bytes, compressed: int, size: int) -> Tuple[int, int]:
    """A local header's ``(compressed, size)``, taken from the zip64 field of its ``extra``
    where the header holds 0xFFFFFFFF (zip64, for a record of 4 GiB or more)."""
    if 0xFFFFFFFF not in (compressed, size):
        return compressed, size
    position = 0
    while position + 4 <= len(extra):
        kind, length = struct.unpack_from('<2H', extra, position)
        if kind == 1 and length >= 16:
            size, compressed = struct.unpack_from('<2Q', extra, position + 4)
            break
        position += 4 + length
    return compressed, size


def load_checkpoint(
    path: str, map_location: Union[str, torch.device, None] = None
) -> Tuple[dict, Optional[dict]]:
    """Read ``(state, replay_buffer_state or None)`` from a checkpoint directory.

    An unreadable replay buffer file is reported and skipped (None): the
    networks are still worth resuming from.

    Args:
        path: the checkpoint directory.
        map_location: the device the state's tensors are loaded to (the
            training device), whatever device they were saved from; None
            keeps the saved devices. The replay buffer's tensors always load
            to the CPU, mapped from its file (``load_file``'s ``mmap``):
            ``ReplayBuffer.load_state_dict`` copies them to wherever its
            storage lives, and the mapping is gone once the returned dict is
            dropped. Kept alive, it holds the pages it was copied from in
            the process's RSS, and the disk space of the file after the next
            checkpoint deletes it.
    Raises:
        UnsafeCheckpointError: when either file would run code to load.
    """
    state = load_state(path, map_location)
    rb_path = os.path.join(path, REPLAY_BUFFER_FILE)
    rb = None
    if os.path.exists(rb_path):
        try:
            # Its records' checksums too: a flipped bit in a stored observation or reward
            # that is still a finite number would pass every other check.
            _check_zip_records(rb_path, mapped=True)
            rb = load_file(rb_path, 'cpu', mmap=True)
        except UnsafeCheckpointError:
            raise
        except Exception as e:  # noqa: BLE001  (any unpickling failure means unreadable)
            if _failed_to_read(e):
                raise
            logging.warning('replay buffer %s is unreadable (%s); resuming without it.', rb_path, e)
    return state, rb


class LatestCheckpoint(NamedTuple):
    """The newest checkpoint that loads (``load_latest_checkpoint``).

    ``unreadable``: the newer ones skipped as corrupt, for ``move_aside`` once
    the checkpoint is restored: the run then continues from the older step,
    and what it writes next must be the newest checkpoint.
    """

    path: str
    state: dict
    replay_buffer_state: Optional[dict]
    unreadable: List[str]


def _failed_to_read(error: BaseException) -> bool:
    """Whether ``error`` is the reader's failure (the disk, permissions, memory), which says
    nothing about the file; a file missing from a checkpoint is the checkpoint's fault."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    if isinstance(error, RuntimeError) and 'unable to mmap' in str(error):
        # torch.load(mmap=True) could not map the file: no address space or memory left
        # for it (a ulimit -v, a commit limit), or a file system that cannot map files.
        return True
    missing = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
    return isinstance(error, OSError) and not isinstance(error, missing)


def _mapping_failure_hint(path: str, error: BaseException) -> str:
    """What the replay buffer file of checkpoint ``path``, which ``error`` could not map,
    needs, and the ways on (a sentence starting with a space); empty for another error."""
    rb_path = os.path.join(path, REPLAY_BUFFER_FILE)
    if 'unable to mmap' not in str(error) or not os.path.exists(rb_path):
        return ''
    bound = available_cpu_memory()[1]
    short = '.'
    if isinstance(bound, ProcessMemoryLimit):
        short = (
            f": this process's {bound.name} limit ({bound.limit} bytes, {bound.usage} mapped) "
            'leaves less.'
        )
    return (
        f' Its replay buffer file ({os.path.getsize(rb_path)} bytes) is mapped into memory '
        f'whole beside the buffer the run allocated, and that much is not free{short} Raise '
        f'the limit by that much, or move {rb_path} aside to resume without its stored '
        'steps (the replay buffer starts empty).'
    )


def load_latest_checkpoint(
    checkpoint_dir: str,
    map_location: Union[str, torch.device, None] = None,
    check: Optional[Callable[[str, dict], None]] = None,
) -> Optional[LatestCheckpoint]:
    """The newest checkpoint that loads, and the newer ones that do not; None if none exist.

    A corrupt or truncated checkpoint is skipped with a warning in favour of
    the one before it; nothing is moved (``move_aside``). ``map_location`` is
    ``load_checkpoint``'s. ``check(path, state)`` is called on each loaded
    state: a ``CorruptCheckpointError`` it raises (e.g. from
    ``check_trainer_state``) counts the checkpoint as corrupt.

    Raises:
        CheckpointError: when checkpoints exist but none can be read, or when
            reading one fails for a reason outside it (an I/O error, no
            permission, no memory): the run stops rather than resume from an
            older checkpoint past one that may be intact.
        UnsafeCheckpointError: when a file would run code to load: the run
            stops rather than resume from an older checkpoint past it.
    """
    found = list_checkpoints(checkpoint_dir)
    corrupt = []
    problems = []
    for index, path in reversed(list(enumerate(found))):
        try:
            state, rb = load_checkpoint(path, map_location)
            if check is not None:
                check(path, state)
        except UnsafeCheckpointError:
            raise
        except Exception as e:  # noqa: BLE001  (any unpickling failure means unreadable)
            if _failed_to_read(e):
                raise CheckpointError(
                    f'could not read checkpoint {path} ({type(e).__name__}: {e}). That is no '
                    'fault of the checkpoint, so it was neither skipped nor moved; resume once '
                    f'it can be read.{_mapping_failure_hint(path, e)}'
                ) from e
            logging.warning(
                'checkpoint %s is unreadable (%s: %s); %s.',
                path,
                type(e).__name__,
                e,
                'trying the one before it' if index else 'there is none before it',
            )
            corrupt.append(path)
            problems.append(f'{type(e).__name__}: {e}')
            continue
        return LatestCheckpoint(path, state, rb, corrupt)
    if found:
        raise CheckpointError(
            f'none of the {len(found)} checkpoints in {checkpoint_dir} can be read (all corrupt '
            f'or truncated; the newest: {problems[0]}). To start the run over, pass '
            '--start_over to train (it moves the root_dir aside) or move the root_dir away.'
        )
    return None


def move_aside(unreadable: List[str]) -> None:
    """Move each checkpoint of ``unreadable`` aside, to ``<path>.corrupt``, with a warning.

    Raises:
        CheckpointError: when one cannot be moved (a read-only directory, say), naming it
            and the OS error; it stays where it was.
    """
    for path in unreadable:
        logging.warning('moved the unreadable checkpoint %s to %s', path, _move_aside(path))


def _move_aside(path: str) -> str:
    """Move checkpoint ``path`` to ``<path>.corrupt`` (``.corrupt-2``, ... if taken); returns it."""
    aside = free_aside_path(path, 'corrupt')
    try:
        os.rename(path, aside)
    except OSError as e:
        raise CheckpointError(
            f'could not move the unreadable checkpoint {path} aside to {aside} '
            f'({type(e).__name__}: {e}); it is left where it was. Resume once it can be moved, '
            'or move it away yourself.'
        ) from e
    return aside


class TrainerState(NamedTuple):
    """What a trainer's checkpoint holds besides the replay buffer: ``model.pt``, a dict of these.

    Args:
        algorithm: ``algorithm_state(algorithm)``.
        rng: ``alf_lite.seeding.global_rng_state()``.
        env_steps: env steps collected.
        num_updates: updates done.
        recent_returns: returns of the latest finished training episodes, oldest first.
        recent_lengths: their lengths.
        last_eval: the latest evaluation's scalars, by progress.csv column.
        pending_evaluation: the training scalars of the row at ``env_steps``
            whose evaluation a signal interrupted: on resume the evaluation is
            run again and the row written. None when every row is written
            (also in checkpoints that predate this field).
        collection: ``Collector.state()``: the training envs' running episodes
            (replayed on resume), the time step they are at, and the policy's
            rollout state. None where the envs could not be kept (a signal
            ended an env step) and in checkpoints that predate this field: a
            resume then restarts the envs.
        iteration_start: the env step at which the iteration (``unroll_length``
            env steps, the updates overlapping the last) that a signal cut short
            began: the resume finishes it. None when the checkpoint is at an
            iteration's end (also in checkpoints that predate this field).
        iteration_trained: whether that iteration's updates were done (the
            signal ended its last env step): the resume does not do them again.
        iteration_length: env steps of the run's iterations (``unroll_length``
            times its number of envs), which tell where its last one began. None
            in checkpoints that predate this field.
        train_scalars: the training scalars of a summary at ``env_steps`` (the
            summary's own where one was written there): a resume whose
            ``num_env_steps`` ends the run here writes them with its final
            evaluation. None where not kept (also in checkpoints that predate this
            field).
        update_scalars: the training scalars of the latest update (``train/<name>``), kept
            where ``iteration_trained``: the summary at the end of the cut iteration
            holds them, as the run never stopped does. None otherwise (also in
            checkpoints that predate this field).
        config_text: the run's ``config.gin`` as the ``train()`` that wrote this
            checkpoint began with it (one written again where that ``train()`` resumed,
            nothing trained since, keeps the config of the checkpoint it resumed from): a
            resume refuses a config file that since changed the experiment (edited,
            emptied). None where the run had no config.gin (also in checkpoints that
            predate this field).
    """

    algorithm: dict
    rng: dict
    env_steps: int
    num_updates: int
    recent_returns: List[float]
    recent_lengths: List[int]
    last_eval: Dict[str, float]
    pending_evaluation: Optional[Dict[str, float]] = None
    collection: Optional[dict] = None
    iteration_start: Optional[int] = None
    iteration_trained: bool = False
    iteration_length: Optional[int] = None
    train_scalars: Optional[Dict[str, float]] = None
    update_scalars: Optional[Dict[str, float]] = None
    config_text: Optional[str] = None


def save_trainer_state(
    checkpoint_dir: str,
    state: TrainerState,
    replay_buffer_state: Optional[dict] = None,
    name: Optional[str] = None,
    keep: Optional[int] = None,
) -> str:
    """``save_checkpoint`` of a trainer's state at its env steps; returns the checkpoint's path."""
    return save_checkpoint(
        checkpoint_dir, state.env_steps, state._asdict(), replay_buffer_state, name, keep
    )


def trainer_state(state: dict, path: Optional[str] = None) -> TrainerState:
    """The ``TrainerState`` in the state read by ``load_checkpoint`` or ``load_state``.

    Args:
        state: the loaded state.
        path: the checkpoint it was read from, named in the error.
    Raises:
        CheckpointError: when the state is not a trainer's.
    """
    where = '' if path is None else f'{os.path.join(path, MODEL_FILE)}: '
    if not isinstance(state, dict):
        raise CheckpointError(
            f'{where}not a trainer checkpoint: it holds a {type(state).__name__}, not a dict'
        )
    try:
        return TrainerState(**state)
    except TypeError as e:
        raise CheckpointError(
            f'{where}not a trainer checkpoint: its keys are {sorted(map(str, state))}, '
            f'expected {list(TrainerState._fields)}'
        ) from e


def check_trainer_state(path: str, state: dict) -> None:
    """Raise ``CorruptCheckpointError`` naming checkpoint ``path``'s file and the problem
    if ``state`` (as loaded from it) is no valid trainer state."""
    model = os.path.join(path, MODEL_FILE)
    try:
        state = trainer_state(state, path)
    except CheckpointError as e:
        raise CorruptCheckpointError(str(e)) from None
    expected_types = {
        'algorithm': dict,
        'rng': dict,
        'env_steps': int,
        'num_updates': int,
        'recent_returns': list,
        'recent_lengths': list,
        'last_eval': dict,
        'pending_evaluation': (dict, type(None)),
        'collection': (dict, type(None)),
        'iteration_start': (int, type(None)),
        'iteration_trained': bool,
        'iteration_length': (int, type(None)),
        'train_scalars': (dict, type(None)),
        'update_scalars': (dict, type(None)),
        'config_text': (str, type(None)),
    }
    for field, expected in expected_types.items():
        value = getattr(state, field)
        # A bool is an int to isinstance: refused where a count is expected.
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise CorruptCheckpointError(
                f'{model}: {field} is {short_repr(value)}, of the wrong type'
            )
    problem = _values_problem(state)
    if problem is not None:
        raise CorruptCheckpointError(f'{model}: {problem}')
    if state.env_steps < 0 or state.num_updates < 0:
        raise CorruptCheckpointError(
            f'{model}: negative counters {state.env_steps}, {state.num_updates}'
        )
    if state.iteration_length is not None and state.iteration_length < 1:
        raise CorruptCheckpointError(f'{model}: iteration_length {state.iteration_length} < 1')
    if state.config_text is not None and len(state.config_text) > MAX_CONFIG_BYTES:
        raise CorruptCheckpointError(
            f'{model}: its config_text holds {len(state.config_text)} characters, more than '
            f'a config may ({MAX_CONFIG_BYTES})'
        )
    named = checkpoint_env_steps(path)
    if named is not None and named != state.env_steps:
        # Picked as the newest by its name: a renamed checkpoint would hide the real newest.
        raise CorruptCheckpointError(
            f'{model}: holds the state at {state.env_steps} env steps, but its directory is '
            f'named for {named}'
        )
    if state.iteration_start is not None and not 0 <= state.iteration_start <= state.env_steps:
        raise CorruptCheckpointError(
            f'{model}: iteration_start {state.iteration_start} is not in '
            f'[0, env_steps = {state.env_steps}]'
        )
    for key in ('module', 'optimizers'):
        if not isinstance(state.algorithm.get(key), dict):
            raise CorruptCheckpointError(f'{model}: the algorithm state has no {key!r} dict')
    problem = _optimizers_problem(state.algorithm['optimizers'])
    if problem is not None:
        raise CorruptCheckpointError(f'{model}: {problem}')
    current = global_rng_state()
    try:
        set_global_rng_state(state.rng)
    except Exception as e:  # noqa: BLE001  (any malformed RNG state: python, numpy or torch)
        raise CorruptCheckpointError(
            f'{model}: its RNG state is invalid ({type(e).__name__}: {e})'
        ) from None
    finally:
        set_global_rng_state(current)
    for name, value in _state_tensors(state.algorithm):
        nbytes = value.untyped_storage().nbytes()
        if value.numel() * value.element_size() > nbytes:
            # Strides that show elements more than once (an expanded tensor): a check of
            # its values would copy them out, as many bytes as the file declares.
            raise CorruptCheckpointError(
                f'{model}: tensor {name} has {value.numel()} elements over a storage of '
                f'{nbytes} bytes; alf_lite writes each tensor whole, so the file was altered '
                'or damaged'
            )
    bad = first_non_finite(state.algorithm)
    if bad is not None:
        raise CorruptCheckpointError(
            f'{model}: parameter {bad} holds NaN or inf; alf_lite never writes a '
            'checkpoint with non-finite weights, so the file was altered or damaged'
        )
    bad = first_non_finite_optimizer_state(state.algorithm['optimizers'])
    if bad is not None:
        # The trainer writes none (``Trainer._save``): every update from them would be NaN,
        # or leave the weight they belong to where it is.
        raise CorruptCheckpointError(f'{model}: optimizer state {bad} holds NaN or inf')


def _not_a_number(value) -> Optional[Tuple[str, str]]:
    """``value`` shown briefly and why it is no summary scalar or episode figure as a trainer
    writes them (an int or float, not a bool, that a float holds: they are written as
    floats); None when it is one."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return short_repr(value), 'not a number'
    try:
        float(value)
    except OverflowError:  # an int too long for float, perhaps for repr as well
        return f'an integer of {value.bit_length()} bits', 'beyond the range of a float'
    return None


def _values_problem(state: TrainerState) -> Optional[str]:
    """What of ``state``'s episode figures and summary scalars is not as a trainer writes
    them (a number each; scalars named ``<mode>/<name>`` for a mode of ``SUMMARY_MODES``),
    which a resume would write into progress.csv and the event files, or average; None when
    all are."""
    # Of episodes of finite rewards (the envs' are checked), counted in steps: what
    # train/AverageReturn and train/AverageEpisodeLength average once a resume summarises.
    for value in state.recent_returns:
        if problem := _not_a_number(value):
            return 'recent_returns holds {}, {}'.format(*problem)
        if not math.isfinite(value):
            return f'recent_returns holds {value!r}, which no episode of finite rewards has'
    for value in state.recent_lengths:
        if problem := _not_a_number(value):
            return 'recent_lengths holds {}, {}'.format(*problem)
        if not isinstance(value, int) or value < 0:
            return f'recent_lengths holds {short_repr(value)}, no count of steps'
    for field in ('last_eval', 'pending_evaluation', 'train_scalars', 'update_scalars'):
        for key, value in (getattr(state, field) or {}).items():
            if not is_scalar_name(key):
                return f'{field} holds the key {short_repr(key)}, no summary scalar name'
            if problem := _not_a_number(value):
                return f'{field} holds {problem[0]} for {key:.80}, {problem[1]}'
    return None


def _optimizers_problem(optimizers: dict) -> Optional[str]:
    """What of ``optimizers`` (by name) is not laid out as a torch optimizer's ``state_dict()``
    is (a dict of a ``'state'`` dict of a dict per parameter, and a ``'param_groups'`` list of
    dicts, each with its ``'params'`` list), which ``load_state_dict`` would fail on with
    whatever it meets first; None when all are."""
    for name, optimizer in optimizers.items():
        if not isinstance(optimizer, dict):
            return f'optimizer {short_repr(name)} is {short_repr(optimizer)}, no optimizer state'
        per_param, groups = optimizer.get('state'), optimizer.get('param_groups')
        if not isinstance(per_param, dict) or not all(
            isinstance(values, dict) for values in per_param.values()
        ):
            return f"optimizer {short_repr(name)} has no 'state' dict of a dict per parameter"
        if not isinstance(groups, list) or not all(
            isinstance(group, dict) and isinstance(group.get('params'), list) for group in groups
        ):
            return f"optimizer {short_repr(name)} has no 'param_groups' list of dicts with 'params'"
    return None


def _optimizer_state_tensors(optimizers: dict) -> Iterator[Tuple[str, torch.Tensor]]:
    """``('<optimizer>.<param index>.<key>', tensor)`` of each optimizer state tensor of
    ``optimizers`` (those of the usual layout)."""
    for name, optimizer in optimizers.items():
        per_param = optimizer.get('state') if isinstance(optimizer, dict) else None
        for index, values in per_param.items() if isinstance(per_param, dict) else ():
            for key, value in values.items() if isinstance(values, dict) else ():
                if torch.is_tensor(value):
                    yield f'{name}.{index}.{key}', value


def _state_tensors(algorithm_state: dict) -> Iterator[Tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of each tensor of the networks and of the optimizer states in
    ``algorithm_state``."""
    for key, value in policy_state(algorithm_state).items():
        if torch.is_tensor(value):
            yield key, value
    yield from _optimizer_state_tensors(algorithm_state['optimizers'])


def first_non_finite_optimizer_state(optimizers: dict) -> Optional[str]:
    """``'<optimizer>.<param index>.<key>'`` of the first floating-point optimizer state
    tensor holding a NaN or inf; None when all are finite (or not of the usual layout)."""
    return next(
        (name for name, value in _optimizer_state_tensors(optimizers) if _non_finite(value)), None
    )


def algorithm_state(algorithm: torch.nn.Module) -> dict:
    """An off-policy algorithm's networks (with targets and buffers) and optimizer states."""
    return {
        'module': algorithm.state_dict(),
        'optimizers': {k: o.state_dict() for k, o in algorithm.optimizers.items()},
    }


# Of an optimizer's group settings, those a resume takes from the checkpoint.
_NOT_CONFIGURED_HERE = ('params', 'param_names')


def place_step_counts(optimizer: torch.optim.Optimizer) -> None:
    """Put each parameter's ``step`` count where the optimizer's settings expect it, as
    torch does when it creates the count: a float32 tensor on the parameter's device for
    a fused or capturable step, on the CPU otherwise. ``load_state_dict`` placed the
    counts by the checkpoint's settings (a CUDA-graph run's capturable Adam, resumed on
    a CPU; a run without graphs, resumed with them)."""
    for group in optimizer.param_groups:
        on_device = group.get('fused') or group.get('capturable')
        for param in group['params']:
            state = optimizer.state.get(param, {})
            step = state.get('step')
            if torch.is_tensor(step):
                state['step'] = (
                    step.to(dtype=torch.float32, device=param.device)
                    if on_device
                    else step.to(device='cpu')
                )


def load_policy_state(algorithm: torch.nn.Module, module_state: dict) -> None:
    """``algorithm.load_state_dict(module_state)``, refusing a tensor of another dtype than
    the one it is loaded into: the cast would hide what it holds (1e300 in float64 is inf
    in a float32 weight).

    Raises:
        ValueError: naming the tensor and both dtypes.
    """
    own = algorithm.state_dict()
    for key, value in module_state.items():
        mine = own.get(key)
        if torch.is_tensor(value) and torch.is_tensor(mine) and value.dtype != mine.dtype:
            raise ValueError(
                f'the network tensor {key!r} is {value.dtype}, where the networks hold {mine.dtype}'
            )
    algorithm.load_state_dict(module_state)


def load_algorithm_state(algorithm: torch.nn.Module, state: dict) -> None:
    """Restore what ``algorithm_state`` returned into ``algorithm``.

    The optimizers get their saved state (moments, step counts) and keep their
    own settings (learning rate, betas, weight decay, fused, capturable...), as
    configured.
    """
    load_policy_state(algorithm, policy_state(state))
    for name, optimizer in algorithm.optimizers.items():
        configured = [
            {k: v for k, v in group.items() if k not in _NOT_CONFIGURED_HERE}
            for group in optimizer.param_groups
        ]
        optimizer.load_state_dict(state['optimizers'][name])
        # The checkpoint's groups hold the settings it was trained with: a resume
        # with another learning rate (which it warns about) trains with the new one,
        # and one on another device steps as configured there.
        for group, settings in zip(optimizer.param_groups, configured):
            group.update(settings)
        place_step_counts(optimizer)
        # A setting that steps with more state than the checkpoint's did (Adam.amsgrad
        # turned on at a resume) would fail at its first update with a KeyError.
        index = 0
        for group in optimizer.param_groups:
            probe = None
            for param in group['params']:
                saved = optimizer.state.get(param, {})
                if saved:
                    probe = _probe_state(optimizer, group, param) if probe is None else probe
                    missing = sorted(set(probe) - set(saved))
                    if missing:
                        raise ValueError(
                            f'the {name} optimizer state of parameter {index} has no '
                            f'{missing[0]!r}, which the configured optimizer steps with: one of '
                            'its settings was changed, e.g. Adam.amsgrad'
                        )
                    # One of its parameter's shape (a moment) that is no tensor with
                    # dimensions (a number, a tensor of one value) would fail at the first
                    # update; one of other dimensions is refused below.
                    for key, value in probe.items():
                        shaped = torch.is_tensor(value) and value.dim() > 0
                        held = saved[key]
                        tensor = torch.is_tensor(held) and (held.dim() or not param.dim())
                        if shaped and not tensor:
                            raise ValueError(
                                f'the {name} optimizer state {key!r} of parameter {index} is '
                                f'{short_repr(held)}, not a tensor of its shape '
                                f'{tuple(param.shape)}'
                            )
                index += 1
        # A state tensor of another shape than its parameter (a file spliced from
        # another run) would reach the fused kernels unchecked: they do not check.
        for index, param in enumerate(p for g in optimizer.param_groups for p in g['params']):
            for key, value in optimizer.state.get(param, {}).items():
                if torch.is_tensor(value) and value.dim() > 0 and value.shape != param.shape:
                    raise ValueError(
                        f'the {name} optimizer state {key!r} of parameter {index} is of shape '
                        f'{tuple(value.shape)}, the parameter of {tuple(param.shape)}'
                    )


def _probe_state(optimizer: torch.optim.Optimizer, group: dict, param: torch.Tensor) -> dict:
    """The state ``optimizer``'s class makes for a parameter like ``param`` with the settings
    of ``group``, by key: that of one step of a one-element copy (shape ``(1,)`` where it is
    of the parameter's shape); empty where that step cannot be taken (the real step then
    reports why)."""
    settings = {k: v for k, v in group.items() if k in optimizer.defaults}
    probe = torch.zeros(1, dtype=param.dtype, device=param.device, requires_grad=True)
    probe.grad = torch.zeros_like(probe)
    try:
        stepper = type(optimizer)([probe], **settings)
        stepper.step()
    except Exception:  # noqa: BLE001  (a setting this device cannot step with: not ours to say)
        return {}
    return dict(stepper.state[probe])


def policy_state(algorithm_state: dict) -> dict:
    """The networks' ``state_dict`` in an ``algorithm_state``: all that acting needs."""
    return algorithm_state['module']


def first_non_finite(algorithm_state: dict) -> Optional[str]:
    """The first network tensor of ``algorithm_state`` holding a NaN or inf, by name; or None."""
    for key, value in policy_state(algorithm_state).items():
        if _non_finite(value):
            return key
    return None


def _non_finite(value) -> bool:
    """Whether ``value`` is a floating-point or complex tensor holding a NaN or inf.

    By reductions (the max and min carry a NaN, an inf and a -inf), which take no memory
    the size of the tensor, as ``torch.isfinite(value)`` and its intermediates do.
    """
    if not torch.is_tensor(value) or not value.numel():
        return False
    if value.is_complex():
        # No training writes one; loaded into a real weight, its real part is kept.
        value = torch.view_as_real(value)
    elif not value.is_floating_point():
        return False
    return not bool(torch.isfinite(value.max()) and torch.isfinite(value.min()))
