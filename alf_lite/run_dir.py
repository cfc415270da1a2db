"""The layout of a run's root_dir: every file and directory that train writes there.

    config.gin                   the parsed config, written at the start
    device.txt                   the training device as resolved at the start
    operative_config.gin         the bindings actually used, written after the first update
    progress.csv                 one row per summary or evaluation (columns: alf_lite.runs)
    train/  eval/                TensorBoard events of the scalars named train/... and eval/...
    checkpoints/ckpt-<env_steps>/    complete checkpoints (their files: alf_lite.checkpoint)
    checkpoints/last_good-<env_steps>/  the state kept aside when training hit a non-finite loss

Code reaches these paths through ``RunDir`` and the checkpoint names through
``checkpoint_name`` and ``list_checkpoints``; nothing else spells them.

One process at a time trains in a root_dir: it holds ``RunDirLock``, an
advisory lock on the directory itself (no file is added to the run).

Which configs are one experiment (``experiment_difference``, ignoring
``RESUME_SAFE_PARAMETERS``) and where ``train --start_over`` moves an old run
(``moved_aside_path``, recognised by ``MOVED_ASIDE``) are decided here too.
"""

import ast
import datetime
import fcntl
import os
import pprint
import re
import stat
import sys
from typing import Collection, Dict, List, Optional, Set, Tuple

from absl import logging

CONFIG_FILE = 'config.gin'
OPERATIVE_CONFIG_FILE = 'operative_config.gin'
# The most bytes a gin config file may hold: the config.gin train writes takes kilobytes,
# so a larger file is none of its, and is refused before it is read into memory.
MAX_CONFIG_BYTES = 16 * 2**20
# The training device, as the trainer described it at start.
DEVICE_FILE = 'device.txt'
PROGRESS_FILE = 'progress.csv'
CHECKPOINT_DIR = 'checkpoints'
# TensorBoard event directories, one per summary mode: a scalar named
# '<mode>/<tag>' goes to '<root_dir>/<mode>' as <tag>.
TRAIN = 'train'
EVAL = 'eval'
SUMMARY_MODES = (TRAIN, EVAL)


def is_scalar_name(key) -> bool:
    """Whether ``key`` names a summary scalar as train writes them: ``<mode>/<name>`` of a mode
    of ``SUMMARY_MODES`` (its column in progress.csv, its tag's directory)."""
    mode, _, name = key.partition('/') if isinstance(key, str) else ('', '', '')
    return mode in SUMMARY_MODES and name != ''


# In the name of each TensorBoard event file: TensorBoard reads no other file.
EVENT_FILE_MARK = 'tfevents'

# Bindings that may change when a run is resumed: they set how long it runs, how
# often it reports, and where and how fast it computes (a checkpoint loads on any
# device), not what it learns.
RESUME_SAFE_PARAMETERS = (
    'TrainerConfig.num_env_steps',
    'TrainerConfig.summary_interval',
    'TrainerConfig.eval_interval',
    'TrainerConfig.checkpoint_interval',
    'TrainerConfig.max_checkpoints_to_keep',
    # What a checkpoint holds, not what the run learns: turned off when the disk fills up.
    'TrainerConfig.checkpoint_replay_buffer',
    'TrainerConfig.num_eval_episodes',
    'TrainerConfig.num_eval_environments',
    'TrainerConfig.torch_num_threads',
    'TrainerConfig.device',
    'TrainerConfig.cuda_graph',
    'TrainerConfig.compile',
    'TrainerConfig.defer_non_finite_checks',
    'ReplayBuffer.device',
    # How long an env may take to answer: raised after a run stopped on a slow step.
    'create_environment.step_timeout',
)
# Where ``train --start_over`` moves an old run: ``<root_dir>.old-<%Y%m%d-%H%M%S>``.
MOVED_ASIDE = re.compile(r'\.old-\d{8}-\d{6}$')

# The env steps in a name train writes, spelt as ``str`` spells the number (no leading zero,
# ASCII digits, nothing after them): the name made from the number read is the name read.
_STEPS = r'(0|[1-9][0-9]*)'
_SUPERSEDED_CONFIG = re.compile(rf'^config-until-{_STEPS}\.gin\Z')
_CHECKPOINT_PREFIX = 'ckpt-'
_CHECKPOINT_NAME = re.compile(rf'^{_CHECKPOINT_PREFIX}{_STEPS}\Z')
_LAST_GOOD_PREFIX = 'last_good-'
_LAST_GOOD_NAME = re.compile(rf'^{_LAST_GOOD_PREFIX}{_STEPS}\Z')


def checkpoint_name(env_steps: int) -> str:
    """Directory name of the regular checkpoint written at ``env_steps``."""
    return f'{_CHECKPOINT_PREFIX}{env_steps}'


def last_good_name(env_steps: int) -> str:
    """Directory name of the state kept aside at ``env_steps`` when training stopped on a fault."""
    return f'{_LAST_GOOD_PREFIX}{env_steps}'


def list_last_good(checkpoint_dir: str) -> List[str]:
    """The names of the states kept aside in ``checkpoint_dir`` (``last_good_name``), by
    env steps; none where it holds none or cannot be read."""
    try:
        names = os.listdir(checkpoint_dir)
    except OSError:
        return []
    found = [(int(m.group(1)), m.group(0)) for m in map(_LAST_GOOD_NAME.match, names) if m]
    return [name for _, name in sorted(found)]


def checkpoint_env_steps(path: str) -> Optional[int]:
    """Env steps of the regular checkpoint directory ``path``; None for any other name."""
    match = _CHECKPOINT_NAME.match(os.path.basename(path))
    return int(match.group(1)) if match else None


def list_checkpoints(checkpoint_dir: str) -> List[str]:
    """Complete regular checkpoint directories in ``checkpoint_dir``, oldest first.

    A checkpoint is written under another name and renamed when complete, so
    every directory named ``ckpt-<env_steps>`` is complete.
    """
    if not os.path.isdir(checkpoint_dir):
        return []
    found = []
    for name in os.listdir(checkpoint_dir):
        steps = checkpoint_env_steps(name)
        if steps is not None:
            found.append((steps, name))
    return [os.path.join(checkpoint_dir, name) for _, name in sorted(found)]


def latest_checkpoint(checkpoint_dir: str) -> Optional[str]:
    """The newest complete regular checkpoint in ``checkpoint_dir``, or None."""
    found = list_checkpoints(checkpoint_dir)
    return found[-1] if found else None


class RunDir:
    """The paths of one run.

    Args:
        root: the run's root_dir.
    """

    def __init__(self, root: str):
        self.root = root

    @property
    def config_file(self) -> str:
        return os.path.join(self.root, CONFIG_FILE)

    def superseded_config_file(self, env_steps: int) -> str:
        """Where a resume that changed the experiment keeps the config the run had until then."""
        return os.path.join(self.root, f'config-until-{env_steps}.gin')

    def superseded_config_steps(self) -> List[int]:
        """The env steps of the ``superseded_config_file``s there are, in order."""
        if not os.path.isdir(self.root):
            return []
        return sorted(
            int(match.group(1))
            for match in map(_SUPERSEDED_CONFIG.match, os.listdir(self.root))
            if match
        )

    def config_file_of(self, env_steps: int) -> str:
        """The config the checkpoint of ``env_steps`` was trained with.

        A resume that changed the experiment kept the config the run had until its
        step: the checkpoints up to that step were trained and evaluated with it. The
        ``superseded_config_file`` of the smallest such step at or after ``env_steps``,
        or ``config_file`` when there is none.
        """
        kept_until = [n for n in self.superseded_config_steps() if n >= env_steps]
        return self.superseded_config_file(kept_until[0]) if kept_until else self.config_file

    @property
    def operative_config_file(self) -> str:
        return os.path.join(self.root, OPERATIVE_CONFIG_FILE)

    @property
    def device_file(self) -> str:
        return os.path.join(self.root, DEVICE_FILE)

    @property
    def progress_file(self) -> str:
        return os.path.join(self.root, PROGRESS_FILE)

    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.root, CHECKPOINT_DIR)

    def events_dir(self, mode: str) -> str:
        """TensorBoard events of the scalars named ``<mode>/...``, ``mode`` in ``SUMMARY_MODES``."""
        return os.path.join(self.root, mode)

    def checkpoint(self, env_steps: int) -> str:
        """The regular checkpoint written at ``env_steps`` (whether or not it exists)."""
        return os.path.join(self.checkpoint_dir, checkpoint_name(env_steps))

    def unsafe_entry(self) -> Optional[str]:
        """Why train may not write into this run, or None: a path it writes, replaces or
        deletes in is a symbolic link, which would take that to where the link points
        (outside the run, for a run from someone else), or is not of its kind (a FIFO
        for progress.csv, which would block; a directory for a file it replaces, such as
        config.gin). The root_dir itself may be a link."""
        expected = [(self.progress_file, stat.S_ISREG), (self.checkpoint_dir, stat.S_ISDIR)]
        expected += [(self.events_dir(mode), stat.S_ISDIR) for mode in SUMMARY_MODES]
        # Replaced whole (by a rename): a link there is replaced, not written through.
        for path in (self.config_file, self.operative_config_file, self.device_file):
            if os.path.lexists(path) and not os.path.isfile(path):
                return f'{path} is not a regular file. Remove it, or train in another --root_dir.'
        for path, is_kind in expected:
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                return (
                    f'{path} is a symbolic link (to {os.readlink(path)}): train writes, '
                    'replaces and deletes files there, and would do so where it points. '
                    'Replace it with what it points to, or train in another --root_dir.'
                )
            if not is_kind(mode):
                kind = 'regular file' if is_kind is stat.S_ISREG else 'directory'
                return f'{path} is not a {kind}. Remove it, or train in another --root_dir.'
            if is_kind is stat.S_ISDIR:
                for name in sorted(os.listdir(path)):
                    entry = os.path.join(path, name)
                    if os.path.islink(entry):
                        return (
                            f'{entry} is a symbolic link (to {os.readlink(entry)}): train '
                            'writes, replaces and deletes files in this directory, and would '
                            'do so where it points. Remove it, or train in another --root_dir.'
                        )
        return None

    def latest_checkpoint_env_steps(self) -> Optional[int]:
        """Env steps of the latest complete checkpoint, read from its name; None without one."""
        latest = latest_checkpoint(self.checkpoint_dir)
        return None if latest is None else checkpoint_env_steps(latest)

    def is_run(self) -> bool:
        """Whether the directory holds a run: its progress.csv, its config.gin (train writes
        it first) or TensorBoard event files in an ``events_dir``. A ``train/`` or
        ``eval/`` folder alone, without event files, is no run's."""
        return (
            os.path.isfile(self.progress_file)
            or os.path.isfile(self.config_file)
            or any(self.has_events(mode) for mode in SUMMARY_MODES)
        )

    def trained_in(self) -> bool:
        """Whether a trainer wrote in the directory: its progress.csv, a checkpoint
        (``ckpt-<N>`` in its checkpoints folder) or TensorBoard event files. A config.gin
        or a checkpoints folder alone is no sign (a project may keep its gin file, or other
        models, under those names)."""
        return (
            os.path.isfile(self.progress_file)
            or latest_checkpoint(self.checkpoint_dir) is not None
            or any(self.has_events(mode) for mode in SUMMARY_MODES)
        )

    def has_events(self, mode: str) -> bool:
        """Whether ``events_dir(mode)`` holds TensorBoard event files (named ``*tfevents*``)."""
        try:
            return any(EVENT_FILE_MARK in name for name in os.listdir(self.events_dir(mode)))
        except OSError:  # none there, or not a directory
            return False


def enclosing_run(root: str) -> Optional[str]:
    """The nearest directory above ``root`` that a trainer wrote in (``RunDir.trained_in``),
    as an absolute path; None where there is none. Above ``root`` as written, then above
    where its symbolic links lead (a link to a folder inside a run)."""
    for start in dict.fromkeys((os.path.abspath(root), os.path.realpath(root))):
        here = start
        while os.path.dirname(here) != here:
            here = os.path.dirname(here)
            if RunDir(here).trained_in():
                return here
    return None


def inside_run_refusal(root: str, what: str) -> Optional[str]:
    """Why a new run may not start in ``root`` (named ``what``: the flag or the argument) for
    the run of a directory above it, or None. TensorBoard reads the outer run's folders down
    to the inner run's and shows the two as one; plot's search for runs stops at the outer
    one; a ``--start_over`` of the outer run would move the inner one aside with it."""
    outer = enclosing_run(root)
    if outer is None:
        return None
    return (
        f'{what} {root} is inside the run {outer} (a trainer wrote there: progress.csv, '
        'checkpoints or TensorBoard events): TensorBoard would show both runs as one, plot '
        'would not find this one below that one, and its --start_over would move this one '
        f'aside with it. Choose a {what} outside {outer}.'
    )


class RunDirInUseError(RuntimeError):
    """Another process, or another trainer of this one, trains in the root_dir (it holds
    the directory's ``RunDirLock``)."""


# (process id, st_dev, st_ino) of the directories this process's RunDirLocks hold: a
# refusal names a holder in this process (a notebook's first Trainer) as such. The process
# id keeps a forked child from taking its parent's locks for its own.
_held_here: Set[Tuple[int, int, int]] = set()


def _held_key(st: os.stat_result) -> Tuple[int, int, int]:
    return os.getpid(), st.st_dev, st.st_ino


def _holder_text(root: str) -> str:
    """Who holds ``root``'s lock, as the refusal names it."""
    try:
        held_here = _held_key(os.stat(root)) in _held_here
    except OSError:
        held_here = False
    if held_here:
        return (
            'another Trainer of this process holds it (it is training, or it was locked with '
            'lock_root_dir()). Close that trainer or wait for its train() to return, or '
            'choose another root_dir.'
        )
    return 'another process is training in it. Wait for it to end, or choose another root_dir.'


class RunDirLock:
    """An exclusive lock on a run's root_dir, held by the one process that trains in it.

    It is ``flock`` on the directory: the kernel drops it when its holder
    ends, however it ends (a kill included), so no stale lock is ever left.
    Two holders in one process exclude each other as two processes do.

    Args:
        root: the run's root_dir; ``acquire`` creates it when missing.
    """

    def __init__(self, root: str):
        self.root = root
        self._fd: Optional[int] = None
        self._key: Optional[Tuple[int, int, int]] = None

    def acquire(self) -> None:
        """Create root if missing and lock it; raises ``RunDirInUseError`` if another holds it."""
        if self._fd is not None:
            return
        os.makedirs(self.root, exist_ok=True)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The directory locked is still root: one that ``train --start_over`` moved
            # aside between the open and the lock is no longer the run at root, which
            # the process that moved it trains in.
            locked, now = os.fstat(fd), os.stat(self.root)
            if (locked.st_dev, locked.st_ino) != (now.st_dev, now.st_ino):
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            raise RunDirInUseError(f'{self.root} is in use: {_holder_text(self.root)}') from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._key = _held_key(locked)
        _held_here.add(self._key)

    def release(self) -> None:
        """Unlock (closing the descriptor drops the lock); nothing when not held."""
        if self._fd is not None:
            _held_here.discard(self._key)
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        # A holder dropped without releasing (a Trainer locked with lock_root_dir(), never
        # closed) would keep root_dir locked, and its descriptor open, until the process ends.
        self.release()

    def __enter__(self) -> 'RunDirLock':
        self.acquire()
        return self

    def __exit__(self, *exc_info):
        self.release()


def run_dir_in_use(root: str) -> bool:
    """Whether a process holds ``root``'s ``RunDirLock`` now (False when root does not exist
    or cannot be opened here)."""
    if not os.path.isdir(root):
        return False
    try:
        with RunDirLock(root):
            return False
    except RunDirInUseError:
        return True
    except OSError:  # not to be opened here (no permission): no holder can be seen
        return False


def free_aside_path(path: str, suffix: str) -> str:
    """``<path>.<suffix>``, or ``<path>.<suffix>-2``, ... where that name is taken: where
    ``path`` is moved aside without replacing what an earlier move left there."""
    aside, n = f'{path}.{suffix}', 1
    while os.path.lexists(aside):
        n += 1
        aside = f'{path}.{suffix}-{n}'
    return aside


def moved_aside_path(root_dir: str) -> str:
    """Where ``train --start_over`` moves the experiment in ``root_dir`` now.

    Named after the time of the move, or the first later second whose name is free
    (a second move within one second, or after the clock went back): a rename onto a
    taken name would fail for a directory and replace what was moved aside for a file.
    """
    when = datetime.datetime.now()
    while True:
        path = f'{root_dir}.old-{when:%Y%m%d-%H%M%S}'
        if not os.path.lexists(path):
            return path
        when += datetime.timedelta(seconds=1)


def oversized_config(path: str, size: Optional[int]) -> str:
    """Why gin config file ``path`` is not read: it holds ``size`` bytes (None where it tells
    no size, a device), more than ``MAX_CONFIG_BYTES``."""
    held = '' if size is None else f'{size} bytes, '
    return (
        f'{path} holds {held}more than the {MAX_CONFIG_BYTES} bytes a gin config may hold '
        f'(the {CONFIG_FILE} train writes takes kilobytes): it is not read.'
    )


# The byte order marks of UTF-16, little and big endian.
_UTF16_MARKS = (b'\xff\xfe', b'\xfe\xff')
# What a file that ``starts_as_utf16`` is.
UTF16_TEXT = 'UTF-16 text, not UTF-8 (it starts with a UTF-16 byte order mark)'


def starts_as_utf16(error: UnicodeDecodeError) -> bool:
    """Whether what failed to decode as UTF-8 starts with a UTF-16 byte order mark (as
    Windows PowerShell 5's ``>`` and ``Out-File`` write)."""
    return error.start == 0 and error.object[:2] in _UTF16_MARKS


def not_text(path: str, error: UnicodeDecodeError) -> str:
    """Why file ``path`` cannot be read, where decoding it raised ``error``: that names no
    file, and a position within the piece decoded rather than within the file."""
    if starts_as_utf16(error):
        return f'{path} is {UTF16_TEXT}: save it as UTF-8'
    byte = error.object[error.start : error.start + 1].hex()
    return f'{path} is not text: {error.encoding} cannot decode its byte 0x{byte}'


def read_config_text(path: str) -> str:
    """The text of gin config file ``path`` (a run's ``config.gin``).

    Raises:
        ValueError: it holds more than ``MAX_CONFIG_BYTES`` (``oversized_config``); it is
            not read into memory. Or it is not text (``not_text``), or a directory.
    """
    mode = os.stat(path).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        # Opened to be read, a FIFO would block until something writes into it.
        raise ValueError(f'{path} is no regular file (a pipe or a socket), not a gin config file')
    try:
        # As parse_config reads a gin file: a byte order mark is no part of its text.
        f = open(path, encoding='utf-8-sig')
    except IsADirectoryError:
        raise ValueError(f'{path} is a directory, not a gin config file') from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_CONFIG_BYTES:
            raise ValueError(oversized_config(path, size))
        try:
            # One character past the bound: a file that is no regular one tells no size.
            text = f.read(MAX_CONFIG_BYTES + 1)
        except UnicodeDecodeError as e:
            raise ValueError(not_text(path, e)) from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ValueError(oversized_config(path, None))
    return text


def config_statements(config_text: str) -> List[str]:
    """The statements of a gin config text (bindings, imports, includes), one string each.

    As gin reads them: a statement goes on over the next lines while a bracket
    of its value is open or a line ends in a backslash, and ends at the end of
    its line otherwise, indented or not. Each binding of a block (``Name:``
    over indented ``param = value`` lines) is ``Name.param = value``.
    Whitespace outside string literals is normalised; comments (also one after
    a binding, as gin reads them) and blank lines are left out.
    """
    statements: List[str] = []
    depth, continued, block = 0, False, None
    for line in config_text.splitlines():
        code = _without_comment(line)
        stripped = code.strip()
        if not stripped:
            continue
        if stripped.endswith('\\'):
            stripped = stripped[:-1].rstrip()
        if (depth or continued) and statements:
            joint = (
                '' if statements[-1].endswith(_OPENING) or stripped.startswith(_CLOSING) else ' '
            )
            statements[-1] += joint + stripped
        elif line[0] in ' \t' and block is not None:
            statements.append(f'{block}.{stripped}')
        else:
            header = _BLOCK.match(stripped)
            block = header and header['name']
            if not header:
                statements.append(stripped)
        depth = max(0, depth + _bracket_change(code))
        continued = code.rstrip().endswith('\\')
    return [_normalised(statement) for statement in statements]


_OPENING, _CLOSING = tuple('([{'), tuple(')]}')
# The line that opens a block of gin bindings: ``[scope/]Name:``.
_BLOCK = re.compile(r'^(?P<name>[A-Za-z_][\w./]*)\s*:$')


def _bracket_change(code: str) -> int:
    """How many more brackets ``code`` (a line without its comment) opens than it closes,
    outside its string literals."""
    parts = _STRING_LITERAL.split(code)[::2]
    return sum(part.count(c) for part in parts for c in _OPENING) - sum(
        part.count(c) for part in parts for c in _CLOSING
    )


# A string literal of a gin value (Python's, on one line; one left open runs to the end).
_STRING_LITERAL = re.compile(r"""('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?)""")


def _without_comment(line: str) -> str:
    """``line`` up to the ``#`` that begins its comment, if any: one outside a string literal."""
    if '#' not in line:
        return line
    # Split around the string literals: the code is at the even indices.
    parts = _STRING_LITERAL.split(line)
    for i in range(0, len(parts), 2):
        if '#' in parts[i]:
            return ''.join(parts[:i]) + parts[i].split('#', 1)[0]
    return line


def _normalised(statement: str) -> str:
    """``statement`` with each run of whitespace outside its string literals one space."""
    parts = _STRING_LITERAL.split(statement)
    parts[::2] = [re.sub(r'\s+', ' ', code) for code in parts[::2]]
    return ''.join(parts).strip()


# A binding statement: ``[scope/]Name.param = value``, or a macro ``NAME = value``.
_BINDING = re.compile(r'^(?P<name>[A-Za-z_][\w./]*)\s*=\s*(?P<value>.*)$')


def split_binding(statement: str) -> Optional[Tuple[str, str]]:
    """``(name, value text)`` of a binding statement of ``config_statements``; None for others."""
    if statement.startswith(('import ', 'include ')):
        return None
    match = _BINDING.match(statement)
    return (match['name'], match['value']) if match else None


# A configurable reference (``@[scope/]Name`` or, called, ``@[scope/]Name()``) or a macro
# (``%[scope/]NAME``) in a binding's value, outside its string literals.
_REFERENCE = re.compile(r'([@%])\s*([A-Za-z_][\w./]*)(\s*\(\s*\))?')


def _configurable_as_read(name: str) -> str:
    """``[scope/]Name`` of a configurable reference with ``Name`` completed to the one
    registered configurable it matches (``@critic/Adam`` and ``@critic/torch.optim.Adam``
    are one); as written where none or several match (what a config's imports register
    is not registered yet)."""
    import gin

    scope, slash, selector = name.rpartition('/')
    matches = gin.config._REGISTRY.matching_selectors(selector)
    return f'{scope}{slash}{matches[0]}' if len(matches) == 1 else name


def value_as_read(value: str) -> str:
    """A form of binding value text ``value`` that two values gin reads as one share.

    Where it is a literal (references and macros in it standing for themselves)
    that is the value as written out by ``pprint`` on one line, as gin writes
    values: ``(\\n 256,\\n 256,\\n)`` and ``(256, 256)``, ``1e-3`` and ``0.001``
    are one, dicts in any key order too; ``1`` and ``1.0`` are not. A configurable
    reference stands for the configurable it names, however much of its module path
    it spells. Otherwise (no literal gin reads) the text, whitespace normalised.
    """
    parts = _STRING_LITERAL.split(value)

    def marked(m: re.Match) -> str:
        # A character no config holds marks a reference or macro, which stands for itself.
        name = _configurable_as_read(m[2]) if m[1] == '@' else m[2]
        return repr(f'\0{m[1]}{name}{"()" if m[3] else ""}')

    parts[::2] = [_REFERENCE.sub(marked, code) for code in parts[::2]]
    try:
        return pprint.pformat(ast.literal_eval(''.join(parts).strip()), width=sys.maxsize)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _normalised(value)


# A macro reference in a binding's value: ``%NAME`` (gin's macros may be scoped).
_MACRO_REFERENCE = re.compile(r'%([A-Za-z_][\w./]*)')


def _macro_references(value: str) -> List[str]:
    """The macros that binding value text ``value`` references: outside its string literals
    (``'at %STEPS steps'`` is a string to gin, no macro)."""
    parts = _STRING_LITERAL.split(value)
    return [macro for code in parts[::2] for macro in _MACRO_REFERENCE.findall(code)]


def resume_safe_names(bindings: Dict[str, str], safe_elsewhere: Collection[str] = ()) -> Set[str]:
    """The names among ``bindings`` (``{name: value text}``) that a resume may change.

    Those of ``RESUME_SAFE_PARAMETERS``, and each macro that only they use,
    directly or through other such macros: ``STEPS = 5000`` with
    ``TrainerConfig.num_env_steps = %STEPS`` sets how long the run is, as the
    parameter does. A macro no binding uses, or one any other binding uses
    (``ReplayBuffer.capacity = %STEPS``), is part of the experiment, unless
    it is among ``safe_elsewhere`` (names a resume may change in another config)
    and unused here: where ``STEPS`` set ``num_env_steps = %STEPS``, a resume's
    ``--gin_param`` of ``num_env_steps`` itself leaves ``STEPS`` bound and unused.
    """
    also = set(safe_elsewhere) & unused_names(bindings)
    return names_and_their_macros(bindings, {*RESUME_SAFE_PARAMETERS, *also})


def names_and_their_macros(bindings: Dict[str, str], names) -> Set[str]:
    """The names among ``bindings`` (``{name: value text}``) that are in ``names``, and each
    macro that only they use, directly or through other such macros (``SEED = 3`` with
    ``TrainerConfig.random_seed = %SEED`` for ``names`` of the seed's parameter).
    """
    found = {name for name in bindings if name in names}
    users = macro_users(bindings)
    changed = True
    while changed:
        changed = False
        for macro, used_by in users.items():
            if macro in bindings and macro not in found and used_by <= found:
                found.add(macro)
                changed = True
    return found


def macro_users(bindings: Dict[str, str]) -> Dict[str, Set[str]]:
    """``{macro: the names of the bindings that reference it}`` of ``bindings`` (``{name: value
    text}``), for each macro some binding references."""
    users: Dict[str, Set[str]] = {}
    for name, value in bindings.items():
        for macro in _macro_references(value):
            users.setdefault(macro, set()).add(name)
    return users


def unused_names(bindings: Dict[str, str]) -> Set[str]:
    """The names among ``bindings`` (``{name: value text}``) that no binding's value
    references: each parameter, and each macro that nothing uses."""
    return set(bindings) - set(macro_users(bindings))


def macro_value(bindings: Dict[str, str], name: str) -> Optional[str]:
    """The value text of binding ``name`` with each whole-value macro reference followed
    (``%SEED`` -> ``SEED``'s value); None where it is not bound."""
    value, seen = bindings.get(name), set()
    while value is not None:
        match = re.fullmatch(r'%([A-Za-z_][\w./]*)', value.strip())
        if match is None or match[1] in seen:
            break
        seen.add(match[1])
        value = bindings.get(match[1])
    return value


def bound_values(config_text: str) -> Dict[str, str]:
    """The value text of each binding of a config text by its name (``scope/Name.param``),
    whole-value macro references followed."""
    values = _statements_and_values(config_text)[1]
    return {name: macro_value(values, name) for name in values}


def config_int(config_text: str, name: str) -> Optional[int]:
    """The int a config text binds ``name`` to (through whole-value macros); None where it
    is not bound, or not to an int literal."""
    value = macro_value(_statements_and_values(config_text)[1], name)
    try:
        return None if value is None else int(value.strip())
    except ValueError:
        return None


def _statements_and_values(config_text: str) -> Tuple[Dict[str, str], Dict[str, str]]:
    """The statements of a config text by what they bind, and the value text of each binding.

    A binding is keyed by its parameter (of one bound more than once, the last
    binding is kept: the one gin applies), an import or include by itself. So
    two configs holding the same bindings in another order (e.g. a hand-edited
    config.gin) give the same.
    """
    statements, values = {}, {}
    for statement in config_statements(config_text):
        binding = split_binding(statement)
        key = statement if binding is None else binding[0]
        statements[key] = statement
        if binding is not None:
            values[key] = binding[1]
    return statements, values


# How ``changed_bindings`` shows the side of a change where a parameter is not bound.
NOT_BOUND = '(not bound)'


def changed_bindings(old_config: str, new_config: str, resume_safe: bool = False) -> List[str]:
    """Each change of the experiment between two config texts, as ``'old -> new'``, sorted
    (with ``resume_safe``: each change of the settings a resume may change instead).

    Both sides are whole statements, so a change names what the run had and
    what it would get; ``NOT_BOUND`` stands for a side without the parameter. A
    value written through macros on one side and as their values on the other is no
    change of the experiment (``macros_resolved`` says which macros are put in).
    """
    old, old_values = _statements_and_values(old_config)
    new, new_values = _statements_and_values(new_config)
    # What a resume may change on either side (``resume_safe_names``) is left out (with
    # ``resume_safe``: only it is kept).
    old_safe, new_safe = resume_safe_names(old_values), resume_safe_names(new_values)
    old_safe, new_safe = (
        resume_safe_names(old_values, new_safe),
        resume_safe_names(new_values, old_safe),
    )
    old = {key: s for key, s in old.items() if (key in old_safe) == resume_safe}
    new = {key: s for key, s in new.items() if (key in new_safe) == resume_safe}
    if resume_safe:
        # A macro only such settings use on one side and the experiment uses on the other
        # is compared with the experiment, through the bindings that use it there.
        old = {key: s for key, s in old.items() if key not in new_values or key in new_safe}
        new = {key: s for key, s in new.items() if key not in old_values or key in old_safe}

    def as_read(
        statement: Optional[str], values: Dict[str, str], key: str, resolved: bool = False
    ) -> Optional[str]:
        # A binding by its value as gin reads it (``resolved``: each macro it references
        # replaced by the macro's value); an import or include by its text.
        if not statement or key not in values:
            return statement
        return value_as_read(macros_resolved(values, key) if resolved else values[key])

    differing = {
        key
        for key in old.keys() | new.keys()
        if as_read(old.get(key), old_values, key) != as_read(new.get(key), new_values, key)
    }
    if not resume_safe:
        # A binding written through a macro on one side and as its value on the other
        # (``critic/Adam.lr = %LR`` with ``LR = 0.001``, and ``critic/Adam.lr = 0.001``) is
        # the same setting; a macro bound on one side only and used there differs through
        # the bindings that use it, and is named where one of them differs. So does one the
        # other side binds only for what a resume may change (``N = 1000`` used by
        # ``summary_interval = %N`` there, also by ``initial_collect_steps = %N`` here).
        differing = {
            key
            for key in differing
            if as_read(old.get(key), old_values, key, resolved=True)
            != as_read(new.get(key), new_values, key, resolved=True)
        }
        for values, other in ((old_values, new), (new_values, old)):
            users = macro_users(values)
            one_sided = {key for key in differing if key in users and key not in other}
            named = differing - one_sided
            added = True
            while added:
                found = {macro for macro in one_sided - named if users[macro] & named}
                named |= found
                added = bool(found)
            differing -= one_sided - named
    return sorted(f'{old.get(key, NOT_BOUND)} -> {new.get(key, NOT_BOUND)}' for key in differing)


def macros_resolved(bindings: Dict[str, str], name: str) -> str:
    """The value text of binding ``name`` of ``bindings`` (``{name: value text}``) with each
    macro it references, outside its string literals, replaced by that macro's value text,
    in turn resolved; a macro not bound stays as written.

    Only values are put in: the value stays as written whole where one of its macros
    holds a reference (``NOISE = @GaussianNoise()``: gin makes that call in the macro's
    scope, where other bindings apply than where the value is written out), where its
    macros stand for each other (a cycle, which gin refuses), or where the value would take
    more than ``_MAX_RESOLVED_CHARS``.
    """
    done: Dict[str, str] = {}

    def resolved(value: str, seen: Tuple[str, ...]) -> str:
        def macro(match) -> str:
            if match[1] not in bindings:
                return match[0]
            if match[1] in seen:
                raise _Unresolved
            if match[1] not in done:
                text = resolved(bindings[match[1]], (*seen, match[1]))
                if _holds_a_reference(text):
                    raise _Unresolved
                done[match[1]] = text
            return done[match[1]]

        parts = _STRING_LITERAL.split(value)
        parts[::2] = [_MACRO_REFERENCE.sub(macro, code) for code in parts[::2]]
        text = ''.join(parts)
        if len(text) > _MAX_RESOLVED_CHARS:
            raise _Unresolved
        return text

    try:
        return resolved(bindings[name], (name,))
    except _Unresolved:
        return bindings[name]


def _holds_a_reference(value: str) -> bool:
    """Whether binding value text ``value`` holds a configurable reference (``@Name`` or
    ``@Name()``) outside its string literals."""
    parts = _STRING_LITERAL.split(value)
    return any(m[1] == '@' for code in parts[::2] for m in _REFERENCE.finditer(code))


# The most characters a value with its macros resolved may take to be compared so: a value
# a config gives through macros takes far fewer (``(%W, %W)``).
_MAX_RESOLVED_CHARS = 2**16


class _Unresolved(Exception):
    """A value that is compared as written (``macros_resolved``)."""


# What a train user can do about a root_dir that holds another experiment.
TRAIN_ADVICE = (
    'Resume it with --root_dir alone (plus --gin_param overrides), pick another --root_dir, '
    'or pass --start_over to move the old one aside and start afresh.'
)


def experiment_difference(
    root_dir: str, new_config: str, advice: str = TRAIN_ADVICE
) -> Optional[str]:
    """Why ``root_dir`` holds another experiment than the config text ``new_config``, or None.

    None also for a missing or empty root_dir. The bindings of
    ``RESUME_SAFE_PARAMETERS`` may differ.

    Args:
        root_dir: the run's root_dir.
        new_config: the gin config text to train there.
        advice: the sentence that ends the answer when the configs differ: what
            the caller's user can do, in the caller's flags (``TRAIN_ADVICE``
            names train's).
    Raises:
        ValueError: its config.gin is no text, or holds more than ``MAX_CONFIG_BYTES``.
    """
    if not os.path.isdir(root_dir) or not os.listdir(root_dir):
        return None
    config_file = RunDir(root_dir).config_file
    if not os.path.exists(config_file):
        return (
            f'{root_dir} is not empty and holds no {CONFIG_FILE}: it is not an alf_lite '
            'experiment. Choose another --root_dir.'
        )
    old = read_config_text(config_file)
    differing = changed_bindings(old, new_config)
    if not differing:
        return None
    return (
        f'{root_dir} holds another experiment: its {CONFIG_FILE} differs from the given '
        f'config in {len(differing)} binding(s), e.g. {differing[:4]}. {advice}'
    )


def config_changed_since(config_file: str, trained_with: str, checkpoint: str) -> Optional[str]:
    """What a resume or play says where the config file ``config_file`` differs in the
    experiment from ``trained_with``, the config text checkpoint ``checkpoint`` keeps; None
    where they agree, or where the file cannot be read (its reader names that)."""
    try:
        differing = changed_bindings(trained_with, read_config_text(config_file))
    except (OSError, ValueError):
        return None
    if not differing:
        return None
    return (
        f'{config_file} is not the config that {checkpoint} was trained with: it differs in '
        f'{len(differing)} binding(s), e.g. {differing[:4]}'
    )


def keep_superseded_config(
    run_dir: RunDir,
    new_config: str,
    env_steps: int,
    restored: bool = True,
    trained_with: Optional[str] = None,
) -> None:
    """Before a resume's overrides change the experiment, keep its config until ``env_steps``.

    The config trained with until ``env_steps`` is copied to ``config-until-<env_steps>.gin``
    and a warning names each binding that changed, old -> new: the log's record of what
    the run goes on with. A config that differs only in what a resume may change
    (``RESUME_SAFE_PARAMETERS``) keeps nothing; those changes are logged. A config of more
    than ``MAX_CONFIG_BYTES``, or one that is no text, raises ValueError, nothing written;
    a symbolic link where the copy goes raises FileExistsError.

    The config trained with until ``env_steps`` is the run's file for the checkpoint of
    that step (``run_dir.config_file_of``), or, where a later one cannot be read,
    ``trained_with``: the config text the checkpoint keeps. A resume from before an
    earlier change (``config-until-<N>.gin`` with N past ``env_steps``: the checkpoints
    after ``env_steps`` lost, or corrupt and skipped) trains the steps up to N again:
    each such ``config-until-<N>.gin`` is moved aside to ``config-until-<N>.gin.abandoned``
    (``.abandoned-2``, ... where taken), which the lookup of a checkpoint's config and plot
    no longer take for a change of this run. So is ``config-until-<env_steps>.gin`` where
    the resume goes on with the experiment it holds: the experiment no longer changes there.
    Without a checkpoint ``restored`` (a run stopped before its first, started again),
    nothing trained with the old config goes on: it is not kept (the warning names the
    changes), and every ``config-until-<N>.gin`` is moved aside.
    """
    if not os.path.exists(run_dir.config_file):
        return
    if restored:
        steps = run_dir.superseded_config_steps()
        later = [n for n in steps if n > env_steps]
        source = run_dir.config_file_of(env_steps)
        try:
            old_config = read_config_text(source)
        except (OSError, ValueError) as e:
            if trained_with is None or env_steps in steps or not later:
                # The run's own record of that config, not one moved aside: named, nothing
                # written.
                raise ValueError(
                    f'{e}. It holds the config the run was trained with until env step '
                    f'{env_steps}, from which this resume goes on: put it back, or resume '
                    "with that checkpoint's config"
                ) from None
            old_config = trained_with
        if not _keep_config_if_changed(run_dir, old_config, new_config, env_steps):
            later = [n for n in steps if n >= env_steps]
        why = f'of the training after env step {env_steps}, which this resume trains again'
    else:
        later = run_dir.superseded_config_steps()
        changed = changed_bindings(read_config_text(run_dir.config_file), new_config)
        if changed:
            logging.warning(
                'no checkpoint to resume from: the run starts afresh with a config that '
                'differs from its %s in %d binding(s): %s',
                CONFIG_FILE,
                len(changed),
                '; '.join(changed),
            )
        why = 'of training that this run, started afresh, trains again'
    for n in later:
        path = run_dir.superseded_config_file(n)
        aside = free_aside_path(path, 'abandoned')
        os.rename(path, aside)
        if n == env_steps:
            logging.warning(
                'moved %s to %s: this resume goes on from env step %d with the experiment '
                'trained with until then, which no longer changes there',
                path,
                aside,
                n,
            )
        else:
            logging.warning('moved %s to %s: the config until env step %d %s', path, aside, n, why)


def _keep_config_if_changed(
    run_dir: RunDir, old_config: str, new_config: str, env_steps: int
) -> bool:
    """``keep_superseded_config``'s copy of ``old_config`` and its warning, where
    ``new_config`` changes the experiment; returns whether it does."""
    from alf_lite.config import write_text_atomically  # config imports gin: only when needed

    settings = changed_bindings(old_config, new_config, resume_safe=True)
    if settings:
        logging.info('the resume changes %s', '; '.join(settings))
    changed = changed_bindings(old_config, new_config)
    if not changed:
        return False
    kept = run_dir.superseded_config_file(env_steps)
    if os.path.islink(kept):
        # Its target holds something else: the warning below would claim a copy that the
        # replaced config.gin then no longer has anywhere.
        raise FileExistsError(
            f'{kept} is a symbolic link (to {os.readlink(kept)}), not the config trained with '
            f'until env step {env_steps}, which a resume that changes the experiment keeps '
            'there. Remove the link, or resume without the changing --gin_param.'
        )
    if not os.path.exists(kept):
        write_text_atomically(kept, old_config)
    logging.warning(
        'the experiment changes at env step %d: %s differs from the config it was '
        'trained with until now in %d binding(s): %s; that config is kept in %s',
        env_steps,
        CONFIG_FILE,
        len(changed),
        '; '.join(changed),
        kept,
    )
    return True
