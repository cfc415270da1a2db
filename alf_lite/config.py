"""Gin helpers: parse gin files and overrides, resolve includes, explain errors.

``parse_config`` is the one entry point the binaries use. It parses the gin
files in order, then the ``--gin_param`` bindings (later ones win), starting
from a clean gin state every call. An ``include`` resolves relative to the
directory of the file that contains it, so a gin file works from any working
directory. Every failure becomes a ``ConfigError`` whose message names the
problem, where it is (file and line, or the ``--gin_param``), and the fix. A
literal value is checked against its parameter's type annotation here, before
anything is built; a reference or macro is not, as its value is known only then.
"""

import cmath
import collections.abc
import contextlib
import difflib

# gin 0.5 uses ``importlib.util`` without importing it, which crashes on
# Python 3.11 as soon as a gin file has an ``include``.
import importlib.machinery
import importlib.util  # noqa: F401
import inspect
import os
import re
import reprlib
import site
import sys
import sysconfig
import tokenize
import types
import typing
import unicodedata
import uuid
from typing import Callable, Collection, Dict, Iterator, List, Optional, Sequence, Tuple

import gin
from gin import config_parser

from alf_lite.run_dir import MAX_CONFIG_BYTES, UTF16_TEXT, oversized_config, starts_as_utf16


class ConfigError(ValueError):
    """A gin file or parameter that cannot be used; the message is one paragraph for the user."""


class UntrustedCodeError(ConfigError):
    """A gin file parsed with ``trust_imports=False`` would run code from outside the
    installed packages: an ``import`` of such a module, gin's dynamic registration, or an
    env id that names such a module."""


# The flag of train and play that parses a run's config.gin trusting its imports.
TRUST_IMPORTS_FLAG = '--trust_imports'


class _IncludeState:
    """Which gin files are being parsed, so includes resolve against their includer."""

    def __init__(self):
        # Resolved paths of the files being parsed, outermost first.
        self.open_files: List[str] = []
        # Resolved paths an exception passed through, innermost first.
        self.failed_files: List[str] = []
        # The --gin_param being parsed; None while parsing files.
        self.gin_param: Optional[str] = None
        # The last statement binding each (scope, selector, parameter), with its --gin_param.
        self.bindings: Dict[
            Tuple[str, str, str], Tuple[config_parser.BindingStatement, Optional[str]]
        ] = {}
        # The keys of ``bindings`` whose last statement is in a file another one includes.
        self.included: set = set()
        # Whether the files' imports may run code from outside the installed packages.
        self.trust_imports = True


# Set only while ``parse_config`` runs; gin parses as usual otherwise.
_include_state: Optional[_IncludeState] = None
# The last ``parse_config``'s ``_IncludeState``: where each binding was written.
_parsed: Optional[_IncludeState] = None


@contextlib.contextmanager
def _open_relative_to_includer(path):
    """Open gin file ``path`` resolved against the directory of the file including it (where
    that file really is, if it was reached through a symbolic link)."""
    if not path.strip():
        # Joined to a directory it would name that directory.
        raise ConfigError(f'Gin file {path!r} is empty: give the path of a .gin file.')
    state = _include_state
    base = os.path.dirname(state.open_files[-1]) if state.open_files else os.getcwd()
    resolved = os.path.normpath(os.path.join(base, path))
    if os.path.isdir(resolved):
        raise ConfigError(
            f'Gin file {shortened(repr(path))} is a directory ({shortened(resolved)}): give a '
            '.gin file.'
        )
    if os.path.exists(resolved) and not os.path.isfile(resolved):
        raise ConfigError(
            f'Gin file {shortened(repr(path))} is not a regular file ({shortened(resolved)} is '
            'a device, a pipe or a socket): give a .gin file.'
        )
    if not os.path.isfile(resolved):
        relative_to = (
            f'the directory of the including file, {base}'
            if state.open_files
            else f'the current directory, {base}'
        )
        raise ConfigError(
            f'Gin file {shortened(repr(path))} not found: looked for {shortened(resolved)} (a '
            f'relative path resolves against {relative_to}). Fix the path or the file name.'
        )
    size = os.path.getsize(resolved)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(oversized_config(resolved, size))
    # A link's includes resolve where the file really is, beside the files it was
    # written with; a cycle through a linked directory is still a cycle.
    resolved = os.path.realpath(resolved)
    if resolved in state.open_files:
        cycle = ' -> '.join(state.open_files[state.open_files.index(resolved) :] + [resolved])
        raise ConfigError(
            f'Gin files include each other in a cycle: {cycle}. Remove one of '
            'these include statements.'
        )
    state.open_files.append(resolved)
    try:
        # UTF-8, as gin files are; a byte order mark (Windows editors save one) is no token.
        with open(resolved, encoding='utf-8-sig') as f:
            yield f
    except Exception:
        state.failed_files.append(resolved)
        raise
    finally:
        state.open_files.pop()


# gin tries its readers in order and the first one whose check passes opens the
# file; ours must come before the default ``open``, which would resolve an
# include against the working directory. gin's public ``register_file_reader``
# can only append, so insert into its list directly.
if not any(reader is _open_relative_to_includer for reader, _ in gin.config._FILE_READERS):
    gin.config._FILE_READERS.insert(
        0, (_open_relative_to_includer, lambda path: _include_state is not None)
    )


_GinConfigParser = config_parser.ConfigParser


class _RecordingParser(_GinConfigParser):
    """gin's parser, also noting each binding statement (its value and location) in the state."""

    def parse_statement(self):
        statement = super().parse_statement()
        state = _include_state
        if (
            isinstance(statement, config_parser.ImportStatement)
            and not state.trust_imports
            and state.gin_param is None
        ):
            # Before gin imports it.
            _check_import_trusted(statement)
        if isinstance(statement, config_parser.BindingStatement) and statement.arg_name:
            configurable = gin.config._REGISTRY.get_match(statement.selector)
            selector = configurable.selector if configurable else statement.selector
            key = (statement.scope, selector, statement.arg_name)
            state.bindings.pop(key, None)  # a later binding moves to the end
            state.bindings[key] = (statement, state.gin_param)
            (state.included.add if len(state.open_files) > 1 else state.included.discard)(key)
        return statement


@contextlib.contextmanager
def _resolving_includes():
    global _include_state
    _include_state = _IncludeState()
    # gin.parse_config builds its parser as config_parser.ConfigParser(...).
    config_parser.ConfigParser = _RecordingParser
    try:
        yield _include_state
    finally:
        config_parser.ConfigParser = _GinConfigParser
        _include_state = None


def parse_config(
    gin_files: Sequence[str], gin_params: Sequence[str] = (), trust_imports: bool = True
) -> None:
    """Replace the gin config with the bindings of ``gin_files`` then ``gin_params``.

    Args:
        gin_files: gin file paths, parsed in order; a relative path resolves
            against the current directory, an ``include`` inside a file
            against that file's directory.
        gin_params: binding strings such as ``'TrainerConfig.num_env_steps=5000'``,
            parsed after the files; a later binding overrides an earlier one.
        trust_imports: False for files someone else may have written (a run
            directory's ``config.gin``): their imports may then only run code of
            the installed packages (see :func:`code_outside_installed`), gin's
            dynamic registration (which can call any function) is refused, and
            so is an ``env_name = 'module:Id'`` whose module is not installed.
            The working directory is taken off ``sys.path`` for good, so that
            the installed packages' own imports cannot run a module found there.
            The ``gin_params`` are the user's and always trusted.

    Raises:
        ConfigError: a file is missing, or a binding does not parse, names an
            unknown configurable, parameter or macro, or gives a literal value
            of a type its parameter's annotation rules out. The gin config is
            left empty.
        UntrustedCodeError: with ``trust_imports=False``, a file would run code
            from outside the installed packages; nothing of it was imported.
    """
    global _parsed
    for name, value, each in (
        ('gin_files', gin_files, 'paths'),
        ('gin_params', gin_params, 'bindings'),
    ):
        if isinstance(value, (str, bytes, os.PathLike)):
            # Iterated, its characters would be taken for the files or the bindings.
            raise TypeError(
                f'parse_config: {name} must be a list of {each}, got the {type(value).__name__} '
                f'{shortened(repr(value))}: give [{shortened(repr(value))}].'
            )
    # Bindings of an earlier parse in this process must not leak into this one;
    # clear_config also unlocks a config that gin.finalize locked.
    gin.clear_config()
    if not trust_imports:
        _untrust_working_directory()
    try:
        with _resolving_includes() as state:
            state.trust_imports = trust_imports
            for path in gin_files:
                try:
                    gin.parse_config_file(path)
                except Exception as e:
                    raise _friendly_error(e, state.failed_files, gin_param=None) from e
            for param in gin_params:
                if isinstance(param, str) and not param.strip():
                    # gin would take it for no binding at all: the one meant would be missing.
                    raise ConfigError(
                        f'The gin binding {param!r} is empty: give one, such as '
                        "'TrainerConfig.num_env_steps = 5000'. A shell variable in it may be unset."
                    )
                state.gin_param = param
                try:
                    gin.parse_config(param)
                except Exception as e:
                    raise _friendly_error(e, state.failed_files, gin_param=param) from e
        if not trust_imports:
            _check_env_modules_trusted(state.bindings)
        _check_macros_defined(state.bindings)
        _check_macros_acyclic()
        _check_scopes_opened(state.bindings)
        _check_value_types(state.bindings.values())
        _check_constructors_not_called(state.bindings.values())
        _check_values_written_back(state.bindings.values())
    except BaseException:
        gin.clear_config()
        _parsed = None
        raise
    _parsed = state


def unused_bindings(
    saved_config: Optional[str] = None, leave_out: Collection[Tuple[str, str, str]] = ()
) -> Tuple[List[str], List[str]]:
    """The bindings of the gin config that nothing built so far has used, each with where
    it was written: ``(those of --gin_file files and --gin_params, those of files they
    include)``, e.g. ``['`critic/AdamW.weight_decay` (--gin_param ...)']``.

    ``saved_config``: a run's ``config.gin``, whose bindings (its gin files' and their
    includes', in one file) count as included. ``leave_out``: keys ``(scope, selector,
    parameter)`` not to list (said otherwise, e.g. by :func:`overridden_gin_params`).

    gin applies a binding when its configurable is called in its scope without that
    parameter; a binding of a configurable that was never called there (another
    optimizer than the one referenced, say), or whose parameter the caller always
    passes, is ignored without a word. An included file's binding may be left unused
    on purpose (a shared file's OU noise settings, where an example picks Gaussian
    noise). Macros are left out: a reference uses them.
    """
    own, included = [], []
    for (scope, selector), params in gin.config._CONFIG.items():
        if selector == 'gin.macro':
            continue
        for param in params:
            key = (scope, selector, param)
            if key in leave_out or binding_used(scope, selector, param):
                continue
            name = f'{scope + "/" if scope else ""}{selector.rsplit(".", 1)[-1]}.{param}'
            recorded = None if _parsed is None else _parsed.bindings.get(key)
            location = binding_location(key)
            where = '' if location is None else f' ({location})'
            saved = (
                recorded is not None
                and saved_config is not None
                and recorded[1] is None
                # Files are opened by their real path (_open_relative_to_includer).
                and os.path.realpath(recorded[0].location.filename)
                == os.path.realpath(saved_config)
            )
            included_here = saved or (_parsed is not None and key in _parsed.included)
            (included if included_here else own).append(f'`{name}`{where}')
    return own, included


def more_specific_scope(scope: str, other: str) -> bool:
    """Whether a binding in scope ``other`` wins over one in ``scope`` wherever it applies.

    gin applies a configurable's bindings of each scope that begins the scope it
    is called in, the longest last: ``actor/Adam.lr`` wins over ``Adam.lr`` in
    ``actor`` (and ``actor/...``). A scope that ``scope`` does not begin
    (``critic/actor`` for ``actor``) applies only where ``scope`` does not.
    """
    return other != scope and (not scope or other.startswith(scope + '/'))


def overridden_gin_params() -> Dict[Tuple[str, str, str], str]:
    """The ``--gin_param`` bindings of the last :func:`parse_config` that a file's binding
    of the same parameter in a more specific scope overrides where something built so
    far took it: ``{(scope, selector, parameter): "--gin_param '...' (`Adam.lr`):
    `actor/Adam.lr` (file ...)"}``.

    gin gives a call the binding of the longest scope its scope begins with:
    ``--gin_param Adam.lr=1e-4`` does not reach the actor's optimizer of a file that
    binds ``actor/Adam.lr``, while it does reach the others.
    """
    if _parsed is None:
        return {}
    found = {}
    for (scope, selector, param), (_, gin_param) in _parsed.bindings.items():
        if gin_param is None:
            continue
        short = f'{selector.rsplit(".", 1)[-1]}.{param}'
        winners = []
        for other in bound_scopes(selector, param):
            if not more_specific_scope(scope, other):
                continue
            recorded = _parsed.bindings.get((other, selector, param))
            if recorded is None or recorded[1] is not None:
                continue  # a --gin_param's own: the user bound both
            if binding_used(other, selector, param):
                where = binding_location((other, selector, param))
                winners.append(f'`{other}/{short}` ({where})')
        if winners:
            name = f'{scope + "/" if scope else ""}{short}'
            found[(scope, selector, param)] = (
                f'--gin_param {shortened(repr(gin_param))} (`{name}`): {"; ".join(winners)}'
            )
    return found


def binding_used(scope: str, selector: str, param: str) -> bool:
    """Whether a call of ``selector`` took ``param`` from its binding in ``scope``.

    gin gives a call in scope ``a/b`` the bindings of scopes ``''``, ``a`` and ``a/b``,
    the more specific winning, and records the parameters it did not pass by hand
    under the call's whole scope: ``Adam.eps`` is used by a call of ``@actor/Adam``
    unless ``actor/Adam.eps`` is bound too.
    """
    config = gin.config._CONFIG
    components = scope.split('/') if scope else []
    for (called_in, called), used in gin.config._OPERATIVE_CONFIG.items():
        if called != selector or param not in used:
            continue
        call_components = called_in.split('/') if called_in else []
        if call_components[: len(components)] != components:
            continue
        narrower = (
            '/'.join(call_components[:i])
            for i in range(len(components) + 1, len(call_components) + 1)
        )
        if not any(param in config.get((inner, selector), {}) for inner in narrower):
            return True
    return False


def bindings_passed_by_hand(
    name: str, params: Collection[str]
) -> Dict[Tuple[str, str, str], object]:
    """The unscoped bindings of configurable ``name`` (its class or function name) for a
    parameter of ``params`` that no call took from its binding (the caller passed it), by
    their key ``(scope, selector, parameter)``, with their values."""
    return {
        (scope, selector, param): value
        for (scope, selector), bound in gin.config._CONFIG.items()
        if not scope and selector.rsplit('.', 1)[-1] == name
        for param, value in bound.items()
        if param in params and not binding_used(scope, selector, param)
    }


# Bytes a file's name may take on Linux's file systems (ext4, xfs, btrfs, tmpfs).
NAME_MAX = 255


def new_file_beside(path: str, suffix: str = '') -> str:
    """Create an empty file in ``path``'s directory, named after it and unique (hidden, then
    ``suffix``), and return its path: the temporary file of a write that ends in
    ``os.replace`` onto ``path``.

    Opened with "x", it gets the permissions of any new file (the umask's), where
    tempfile's are private (0600) and ``path`` would keep that mode. Of a name
    near the file system's limit on a name's bytes, only the start is taken.
    """
    directory, name = os.path.split(os.path.abspath(path))
    unique = f'.{os.getpid()}-{uuid.uuid4().hex}{suffix}'
    # Cut to bytes: a character cut in two is kept as its bytes (surrogate escapes).
    name = os.fsdecode(os.fsencode(name)[: NAME_MAX - 1 - len(os.fsencode(unique))])
    tmp_path = os.path.join(directory, f'.{name}{unique}')
    with open(tmp_path, 'x'):
        pass
    return tmp_path


def write_text_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never a part.

    The file and then its directory entry are flushed to the disk before this
    returns: after a power cut, too, ``path`` holds the new text.

    Args:
        path: destination file; its directory must exist.
        text: the whole content.
    """
    # UTF-8 whatever the locale, as the files train writes are read.
    write_bytes_atomically(path, text.encode('utf-8'))


def write_bytes_atomically(path: str, data: bytes) -> None:
    """``write_text_atomically`` of bytes: ``data`` is the whole content of ``path``."""
    # A sibling temp file keeps os.replace on one file system.
    tmp_path = new_file_beside(path, '.tmp')
    try:
        with open(tmp_path, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
        sync_to_disk(os.path.dirname(path) or '.')
    except BaseException:
        # An error here would hide the one that says why the write failed.
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        raise


def sync_to_disk(path: str) -> None:
    """Flush a directory's entries (files created, renamed or removed in it), or a file's
    data written through any descriptor, to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# The most of a gin line or value an error message quotes: a file of up to
# MAX_CONFIG_BYTES can hold one line of megabytes, which would flood the terminal.
MAX_QUOTED_CHARS = 500


def shortened(text: str) -> str:
    """``text`` as an error message quotes it: its start alone, saying how much is left out,
    when it is longer than ``MAX_QUOTED_CHARS``."""
    if len(text) <= MAX_QUOTED_CHARS:
        return text
    return f'{text[:MAX_QUOTED_CHARS]}... ({len(text) - MAX_QUOTED_CHARS} more characters)'


# What gin appends to an error raised in a configurable it called, once per call
# (innermost first): this, then the configurable's name in quotes.
GIN_CALL_TRACE = '\n  In call to configurable '


def without_gin_call_trace(error: BaseException) -> str:
    """``str(error)`` without the call trace gin appended to it."""
    return str(error).partition(GIN_CALL_TRACE)[0]


# gin appends '\n  In file "<path>", line <n>\n    <line text>' (or 'In bindings
# string line <n>') to an error once per enclosing statement, innermost first.
_LOCATION = re.compile(
    r'\n  In (?:file "(?P<file>.*)",|bindings string) line (?P<line>\d+)\n    (?P<text>.*)'
)
_TOKEN_ERROR = re.compile(r"\('(?P<msg>.*)', \((?P<line>\d+), \d+\)\)")
_UNKNOWN_REFERENCE = re.compile(r"No configurable matching reference '@(?P<name>[^'(]+)(?:\(\))?'")
_UNKNOWN_CONFIGURABLE = re.compile(r"No configurable matching '(?P<name>[^']+)'")
# The setting that gives a denylisted parameter its value, where there is one to name.
_SET_FROM = {
    ('create_environment', 'seed'): 'TrainerConfig.random_seed',
    ('ReplayBuffer', 'length'): 'TrainerConfig.replay_buffer_length',
    ('ReplayBuffer', 'num_envs'): 'create_environment.num_parallel_environments',
    ('ReplayBuffer', 'training_device'): 'TrainerConfig.device',
    ('CriticNetwork', 'num_replicas'): (
        "the algorithm's num_critic_replicas (e.g. SacAlgorithm.num_critic_replicas)"
    ),
}
_DENYLISTED_PARAMETER = re.compile(
    r"Configurable '(?P<name>[^']+)' has denylisted kwarg '(?P<param>[^']+)'"
)
_UNKNOWN_PARAMETER = re.compile(
    r"Configurable '(?P<name>[^']+)' doesn't "
    r"(?:have a parameter named|include kwarg) '(?P<param>[^']+)'"
)


# gin's message for a value it cannot read as a literal (a name such as ``nan`` or an
# unquoted string): ast's error, then the token on a line of its own.
_UNREAD_TOKEN = re.compile(r"(?s)(?P<why>.*)\n    Failed to parse token '(?P<token>.*)'")


def _unread_token_problem(token: str, why: str) -> str:
    """What is wrong with value token ``token`` that ast could not read (``why``), on one line
    and with a long token shortened."""
    if why.startswith('malformed node or string'):
        # A name (not True, False or None) is most often a string written without quotes.
        quotes = ' (a string is written in quotes)' if token.isidentifier() else ''
        return f'{shortened(token)} is no literal{quotes}'
    # ast's own line number is the token's, not the file's.
    why = re.sub(r'(?: on line \d+| \(<unknown>, line \d+\))', '', why.splitlines()[0])
    return f'{shortened(token)} is no literal ({why.rstrip(".")})'


# What to write in place of a typographic character that a copy from a document or a chat
# puts where gin or JSON wants plain ASCII; characters unseen, or seen as a space, are named alone.
_PASTED_CHARACTERS = {
    **dict.fromkeys('\u2018\u2019\u201a\u201b\u2032', "'"),
    **dict.fromkeys('\u201c\u201d\u201e\u201f\u2033', '"'),
    **dict.fromkeys('\u2010\u2011\u2012\u2013\u2014\u2212', '-'),
    **dict.fromkeys('\u200b\u200c\u200d\u2060\ufeff', None),
}


def pasted_character(text: Optional[str], holder: str, offset: Optional[int] = None) -> str:
    """A typographic quote, dash or minus, an unusual space or an invisible character in
    ``text`` (where a parser, gin's or json's, stopped: at index ``offset`` or just before
    it; else anywhere): a sentence naming the first and what to write instead, said of
    ``holder`` ('The line'); else ''."""
    if not text:
        return ''
    if offset is not None:
        text = text[max(offset - 1, 0) : offset + 1]
    for char in text:
        if char in _PASTED_CHARACTERS:
            instead = _PASTED_CHARACTERS[char]
        elif char != ' ' and unicodedata.category(char) == 'Zs':
            instead = ' '
        else:
            continue
        code = f'U+{ord(char):04X} {unicodedata.name(char, "")}'.rstrip()
        if instead is None:
            shown, fix = code, 'delete it'
        elif instead == ' ':
            shown, fix = code, 'write a plain space in its place'
        else:
            shown, fix = f'{char} ({code})', f'write {instead} in its place'
        return f' {holder} holds {shown}, as a copy from a document or a chat gives: {fix}.'
    return ''


def _friendly_error(
    error: Exception, failed_files: Sequence[str], gin_param: Optional[str]
) -> ConfigError:
    """Turn an exception raised by gin while parsing into a one-paragraph ``ConfigError``."""
    head = str(error).split('\n  In ', 1)[0]
    where = _where(error, failed_files, gin_param)

    # tokenize raises its own TokenError, not a SyntaxError, for a bracket left
    # open at the end of the text.
    if isinstance(error, (SyntaxError, tokenize.TokenError)):
        token_error = _TOKEN_ERROR.fullmatch(head)
        if isinstance(error, SyntaxError):
            problem = error.msg
        else:
            problem = token_error['msg'] if token_error else head
        # ast's message may end in an object's repr (': <ast.Name object at 0x...>').
        problem = re.sub(r':\s*<[^>]* at 0x[0-9a-f]+>', '', problem)
        unread = _UNREAD_TOKEN.fullmatch(problem)
        if unread:
            problem = _unread_token_problem(unread['token'], unread['why'])
        pasted = ''
        if isinstance(error, SyntaxError) and error.offset is not None:
            holder = 'The line' if gin_param is None else 'The --gin_param'
            pasted = pasted_character(error.text, holder, error.offset)
        return ConfigError(
            f'Cannot parse {where}: {problem.rstrip(".")}. A value must be a Python literal '
            "(number, 'string', list, tuple, dict, True, False, None), a @configurable "
            'reference or a %macro, with brackets and quotes closed.' + pasted
        )
    if isinstance(error, UntrustedCodeError):
        return error  # names its file and line
    if isinstance(error, UnicodeDecodeError):
        # Its position counts from the start of the piece decoded, not of the file.
        if starts_as_utf16(error):
            problem = f'it is {UTF16_TEXT}'
        else:
            byte = error.object[error.start : error.start + 1].hex()
            problem = f'it is not UTF-8 text (its byte 0x{byte} is none of UTF-8)'
        return ConfigError(
            f'Cannot read {where}: {problem}. Gin files are read as UTF-8: save it as UTF-8.'
        )
    if isinstance(error, ConfigError):
        # alf_lite's own message, whole: what it quotes that may be long, it quotes shortened.
        return ConfigError(head if where is None else f'{head} In {where}.')
    if isinstance(error, ImportError):
        return ConfigError(
            f'Cannot import a module in {where}: {shortened(head)}. Fix the module name in the '
            'import line, or install the package that provides it.'
        )
    match = _UNKNOWN_REFERENCE.search(head) or _UNKNOWN_CONFIGURABLE.search(head)
    if match:
        name = match['name']
        kind = 'configurable reference' if match.re is _UNKNOWN_REFERENCE else 'configurable'
        closest = closest_names(name, _configurable_names(name.count('.') + 1))
        hint = (
            f'Closest registered names: {quoted_names(closest)}.'
            if closest
            else 'No registered configurable has a similar name.'
        )
        return ConfigError(
            f"Unknown {kind} '{shortened(name)}' in {where}. {hint} Fix the name, or import the "
            'module that registers it (an `import` line at the top of the gin file).'
        )
    match = _DENYLISTED_PARAMETER.search(head)
    if match:
        name, param = match['name'], match['param']
        instead = _SET_FROM.get((name.rsplit('.', 1)[-1], param))
        return ConfigError(
            f"'{param}' of '{name}' in {where} is no gin parameter: alf_lite sets it when "
            'it builds the object (from the environment, TrainerConfig or another setting '
            'such as num_critic_replicas), so a binding would be ignored. '
            + (f'Set {instead} instead. ' if instead else '')
            + 'Its configurable parameters are: '
            f'{", ".join(_parameter_names(name)) or "none"}.'
        )
    match = _UNKNOWN_PARAMETER.search(head)
    if match:
        name, param = match['name'], match['param']
        valid = _parameter_names(name)
        closest = closest_names(param, valid)
        hint = f'Closest valid names: {quoted_names(closest)}. ' if closest else ''
        return ConfigError(
            f"Configurable '{name}' has no configurable parameter '{shortened(param)}' in {where}. "
            f'{hint}'
            f'Its configurable parameters are: {", ".join(valid) or "none"}.'
        )
    return ConfigError(f'Invalid gin config in {where}: {shortened(head)}')


def _where(
    error: Exception, failed_files: Sequence[str], gin_param: Optional[str]
) -> Optional[str]:
    """Describe where the failing statement is: file, line, its text, and the include chain.

    None when the error came before any file was open (a missing gin file).
    """
    innermost_file = failed_files[0] if failed_files else None
    line = text = None
    if isinstance(error, SyntaxError):
        file, line, text = error.filename, error.lineno, error.text
    elif isinstance(error, tokenize.TokenError):
        # gin adds the location of the include statement, not of the open bracket.
        file = innermost_file
        token_error = _TOKEN_ERROR.fullmatch(str(error).split('\n  In ', 1)[0])
        line = token_error['line'] if token_error else None
    else:
        location = _LOCATION.search(str(error))
        if location:
            file, line, text = location['file'], location['line'], location['text']
        else:
            file = innermost_file
    if file is None:
        return None if gin_param is None else f'--gin_param {shortened(repr(gin_param))}'
    parts = [f'file {file}']
    if line:
        parts.append(f'line {line}')
    if text and text.strip():
        parts.append(f'`{shortened(text.strip())}`')
    includers = list(failed_files[failed_files.index(file) + 1 :]) if file in failed_files else []
    where = ', '.join(parts + [f'included from {f}' for f in includers])
    if gin_param is not None:
        where += f' (from --gin_param {shortened(repr(gin_param))})'
    return where


def _check_macros_defined(recorded) -> None:
    """Fail now on a ``%macro`` that no binding defines, instead of when the object is built.

    Args:
        recorded: the parse's binding statements, as for ``_check_scopes_opened``.
    """
    bindings = gin.config._CONFIG
    macro = gin.get_configurable(gin.config.macro)
    defined = sorted(scope for scope, selector in bindings if selector == 'gin.macro')
    for (scope, selector), params in bindings.items():
        for param, value in params.items():
            for ref in gin.config.iterate_references(value, to=macro):
                if ref.config_key not in bindings:
                    name = '/'.join(ref.scopes)
                    closest = closest_names(name, defined)
                    hint = f'Closest defined macros: {quoted_names(closest)}. ' if closest else ''
                    binding = shortened(
                        f'{scope + "/" if scope else ""}{selector.rsplit(".", 1)[-1]}.{param}'
                    )
                    statement = recorded.get((scope, selector, param))
                    where = '' if statement is None else f' ({_statement_where(*statement)})'
                    name = shortened(name)
                    raise ConfigError(
                        f'Macro %{name} used in `{binding}`{where} is never defined. {hint}'
                        f'Define it with a line `{name} = <value>` in a gin file or '
                        '--gin_param, or fix the name.'
                    )


def _check_macros_acyclic() -> None:
    """Fail now on a macro that stands for itself, directly or through other macros
    (``STEPS = %STEPS``, or ``A = %B`` with ``B = [%A]``): gin would follow it until
    Python's stack runs out, a traceback of thousands of lines, when a binding uses it.
    """
    bindings = gin.config._CONFIG
    macro = gin.get_configurable(gin.config.macro)

    def used_macros(key):
        value = bindings.get(key, {}).get('value')
        return [ref.config_key for ref in gin.config.iterate_references(value, to=macro)]

    done = set()
    for start in sorted(key for key in bindings if key[1] == 'gin.macro'):
        if start in done:
            continue
        path, pending = [start], [(start, iter(used_macros(start)))]
        while pending:
            key, following = pending[-1]
            step = next(following, None)
            if step is None:
                done.add(key)
                pending.pop()
                path.pop()
            elif step in path:
                cycle = path[path.index(step) :] + [step]
                chain = shortened(' -> '.join(f'%{name}' for name, _ in cycle))
                raise ConfigError(
                    f'Macro %{shortened(step[0])} stands for itself ({chain}), so it has no '
                    'value: gin would follow it without end. Give one of these macros a value '
                    'that does not refer back to it.'
                )
            elif step not in done:
                path.append(step)
                pending.append((step, iter(used_macros(step))))


def _check_scopes_opened(recorded) -> None:
    """Fail on a binding in a scope that no ``@scope/name`` reference opens.

    alf_lite opens scopes only through references such as ``@actor/Adam``, so a
    binding like ``actr/Adam.lr`` (a misspelt scope) would silently never apply.

    Args:
        recorded: the parse's binding statements, ``(scope, selector, parameter)``
            -> ``(statement, gin_param)``, to say where the binding is.
    """
    bindings = gin.config._CONFIG
    opened = set()
    for params in bindings.values():
        for value in params.values():
            for ref in gin.config.iterate_references(value):
                opened.update(ref.scopes)
    for scope, selector in bindings:
        if not scope or selector == 'gin.macro':
            continue
        for part in scope.split('/'):
            if part not in opened:
                closest = closest_names(part, sorted(opened))
                hint = f'Closest opened scopes: {quoted_names(closest)}. ' if closest else ''
                places = [
                    _statement_where(statement, gin_param)
                    for (s, sel, _), (statement, gin_param) in recorded.items()
                    if (s, sel) == (scope, selector)
                ]
                where = f' ({"; ".join(places)})' if places else ''
                part, scope = shortened(part), shortened(scope)
                raise ConfigError(
                    f"Scope '{part}' of the bindings of `{scope}/"
                    f'{selector.rsplit(".", 1)[-1]}`{where} is opened by no reference such as '
                    f'`@{part}/{selector.rsplit(".", 1)[-1]}()`, so they would never apply. '
                    f'{hint}Fix the scope name, or refer to the scoped configurable.'
                )


def _binding_name(statement) -> str:
    """``scope/Configurable.parameter`` of a parsed binding statement, as written."""
    scope = f'{statement.scope}/' if statement.scope else ''
    return f'{scope}{statement.selector}.{statement.arg_name}'


def _check_value_types(bindings) -> None:
    """Fail now on a literal value its parameter's type annotation rules out.

    ``CriticNetwork.hidden_layers = 256`` would otherwise fail only when the
    network is built, as ``'int' object is not iterable`` and without its line.
    A ``%macro`` that stands for a literal (directly or through other macros)
    is checked as that literal. A reference is checked as what it gives where
    that is known: ``@GaussianNoise`` the class, ``@GaussianNoise()`` an
    instance of it (``Td3Algorithm.target_policy_noise = @GaussianNoise()``
    would fail on comparing it with 0, naming no parameter). A call of a
    function, a reference inside a container, or a macro inside one is left
    alone: what it gives is known only when it is called.
    """
    for statement, gin_param in bindings:
        value, macro = _through_macros(statement.value)
        reference = isinstance(value, gin.config.ConfigurableReference)
        if not reference and any(True for _ in gin.config.iterate_references(value)):
            continue
        configurable = gin.config._REGISTRY.get_match(statement.selector)
        annotation = _annotation(configurable, statement.arg_name) if configurable else None
        if annotation is None:
            continue
        if reference:
            given = _referenced_fits(value, annotation)
            if given is None:
                continue
            through = '' if macro is None else f', from %{macro}'
            raise ConfigError(
                f'`{_binding_name(statement)}` in '
                f'{_statement_where(statement, gin_param)} is {value!r} ({given}{through}), '
                f"but '{statement.arg_name}' of '{statement.selector}' takes "
                f'{_taken(statement)}. Fix the value.'
            )
        if _fits(value, annotation):
            continue
        through = '' if macro is None else f', from %{macro}'
        raise ConfigError(
            f'`{_binding_name(statement)}` in {_statement_where(statement, gin_param)} is '
            f'{shortened(repr(value))} ({type(value).__name__}{through}), but '
            f"'{statement.arg_name}' of '{statement.selector}' takes "
            f'{_taken(statement)}. Fix the value.'
        )


def _check_constructors_not_called(bindings) -> None:
    """Fail now on ``@SacAlgorithm()`` (or a network's, an optimizer's) given to a parameter
    that takes the constructor (``algorithm_ctor``, ``actor_network_ctor``,
    ``actor_optimizer``, ...): gin would call it itself, without the dimensions or
    parameters alf_lite passes it later, and fail naming only missing arguments. A
    reference to a configurable of another package (a user's factory) is left alone."""
    for statement, gin_param in bindings:
        if not statement.arg_name.endswith(('_ctor', '_optimizer')):
            _check_buildable(statement, gin_param)
            continue
        value, macro = _through_macros(statement.value)
        if not isinstance(value, gin.config.ConfigurableReference) or not value.evaluate:
            continue
        configurable = value.configurable
        if not (
            configurable.module == 'torch.optim'
            or (
                configurable.module.startswith('alf_lite.')
                and inspect.isclass(configurable.wrapped)
            )
        ):
            continue
        without = repr(value)[:-2]
        raise ConfigError(
            f'{_binding_is(statement, gin_param, repr(value), macro)}: '
            f'gin would call {without[1:]} itself, without the arguments alf_lite passes it. '
            f"'{statement.arg_name}' takes the constructor: write {without} (without the "
            'parentheses).'
        )


def _check_buildable(statement, gin_param: Optional[str]) -> None:
    """Fail now on ``@DeterministicActorNetwork()`` (or another alf_lite class that takes
    arguments only alf_lite gives) as a value: gin would build it without them and fail
    naming only the missing arguments, not the parameter it was given to (say
    ``DdpgAlgorithm.exploration_noise``)."""
    value, macro = _through_macros(statement.value)
    if not isinstance(value, gin.config.ConfigurableReference) or not value.evaluate:
        return
    configurable = value.configurable
    if not (configurable.module.startswith('alf_lite.') and inspect.isclass(configurable.wrapped)):
        return
    missing = [
        p.name
        for p in inspect.signature(configurable.wrapped).parameters.values()
        if p.name in (configurable.denylist or ())
        and p.default is inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if not missing:
        return
    raise ConfigError(
        f'{_binding_is(statement, gin_param, repr(value), macro)}, which gin cannot build: '
        f'{configurable.name} takes {" and ".join(missing)}, which only '
        f"alf_lite gives where it builds one. Fix the value: '{statement.arg_name}' of "
        f"'{statement.selector}' takes {_taken(statement)}."
    )


def _binding_is(statement, gin_param: Optional[str], value_text: str, macro) -> str:
    """```binding` in <where> is <value_text>``, with `` (from %macro)`` when a macro gave it."""
    through = '' if macro is None else f' (from %{macro})'
    where = _statement_where(statement, gin_param)
    return f'`{_binding_name(statement)}` in {where} is {value_text}{through}'


def _taken(statement) -> str:
    """What the parameter of ``statement`` takes, from its type annotation and default."""
    configurable = gin.config._REGISTRY.get_match(statement.selector)
    if configurable is None:
        return 'another value'
    annotation = _annotation(configurable, statement.arg_name)
    parameter = inspect.signature(configurable.wrapped).parameters.get(statement.arg_name)
    default = inspect.Parameter.empty if parameter is None else parameter.default
    text = 'another value' if annotation is None else _type_text(annotation)
    return text if default is inspect.Parameter.empty else f'{text} (its default is {default!r})'


def _check_values_written_back(bindings) -> None:
    """Fail now on a value that a run's ``config.gin`` cannot hold: a float that is not
    finite (``1e999``), which gin writes out as ``inf``, a name it cannot read back (or
    leaves out), so that the run's resume would fail or run without it."""
    for statement, gin_param in bindings:
        value, macro = _through_macros(statement.value)
        if not any(_not_finite(v) for v in _literals(value)):
            continue
        raise ConfigError(
            f'{_binding_is(statement, gin_param, shortened(repr(value)), macro)}, '
            "which the run's config.gin cannot hold (gin writes it out as a name it cannot "
            'read back, so a resume would fail or run without it). Give a finite number (a '
            'large one stands for no bound, e.g. 1e30), or None where the parameter takes it '
            '(create_environment.step_timeout = None waits forever).'
        )
    for (name, selector), params in gin.config._CONFIG.items():
        if selector == 'gin.macro' and any(_not_finite(v) for v in _literals(params['value'])):
            raise ConfigError(
                f"macro {name} is {shortened(repr(params['value']))}, which the run's "
                'config.gin cannot hold (gin writes it out as a name it cannot read back, so '
                'a resume would fail). Give a finite number.'
            )


def _literals(value) -> Iterator[object]:
    """The literal values in ``value``, inside lists, tuples and dicts (keys included)."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _literals(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _literals(key)
            yield from _literals(item)
    else:
        yield value


def _not_finite(value) -> bool:
    return isinstance(value, (float, complex)) and not cmath.isfinite(value)


def _through_macros(value) -> Tuple[object, Optional[str]]:
    """``(the literal, the macro's name)`` where ``value`` is a ``%macro`` that stands for
    a literal, directly or through other macros; ``(value, None)`` otherwise."""
    name, seen = None, set()
    while (
        isinstance(value, gin.config.ConfigurableReference)
        and value.config_key[1] == 'gin.macro'
        and value.config_key not in seen
    ):
        seen.add(value.config_key)
        name = name or value.config_key[0]
        defined = gin.config._CONFIG.get(value.config_key, {})
        if 'value' not in defined:
            return value, None
        value = defined['value']
    return value, name


# The sys.path entries ``_untrust_working_directory`` took off: where a module a gin file
# names would otherwise have been found.
_untrusted_path: List[str] = []


def _untrust_working_directory() -> None:
    """Take the working directory off ``sys.path``, where ``python -m`` puts it first (as
    ``python -P`` would), before parsing gin files with ``trust_imports=False``.

    The installed packages then import only installed code: an env's entry point that
    imports an optional dependency (``Box2D``, say) cannot run a ``Box2D.py`` that came
    with a run unpacked in the working directory. :func:`code_outside_installed` still
    names a module found there.
    """
    cwd = os.getcwd()
    kept = []
    for entry in sys.path:
        (_untrusted_path if os.path.abspath(entry or os.curdir) == cwd else kept).append(entry)
    sys.path[:] = kept
    sys.path_importer_cache.clear()


def _trusted_dirs() -> List[str]:
    """The directories whose code runs without a word when a gin file imports it: the
    standard library, site-packages and alf_lite's own package."""
    paths = sysconfig.get_paths()
    dirs = {paths[name] for name in ('stdlib', 'platstdlib', 'purelib', 'platlib') if name in paths}
    dirs.update(site.getsitepackages())
    dirs.add(os.path.dirname(os.path.abspath(__file__)))
    return sorted({os.path.realpath(d) for d in dirs})


def _installed_finder_locations(name: str, inside) -> List[str]:
    """Where top-level module ``name`` is (real paths), when the finder of ``sys.meta_path``
    that finds it is the code of an installed package (``inside`` its directories): a
    package installed in development mode (``pip install -e``, whose setuptools finder maps
    the package's name to where its code was written). Empty otherwise."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, 'find_spec', None)
        if find_spec is None:
            continue
        try:
            spec = find_spec(name, None)
        except (ImportError, ValueError):
            return []
        if spec is None:
            continue
        defined_in = getattr(sys.modules.get(getattr(finder, '__module__', None)), '__file__', None)
        if finder is importlib.machinery.PathFinder or defined_in is None or not inside(defined_in):
            return []
        places = [spec.origin] if spec.has_location and spec.origin else []
        places += list(spec.submodule_search_locations or [])
        return [os.path.realpath(place) for place in places]
    return []


def _inside_installed(top_level: str) -> Callable[[str], bool]:
    """A predicate: whether a path is inside the installed packages (the standard library,
    site-packages, alf_lite), or where an installed finder maps the top-level module
    ``top_level`` (a development install)."""
    trusted = _trusted_dirs()

    def inside(path):
        real = os.path.realpath(path)
        return any(real == d or real.startswith(d + os.sep) for d in trusted)

    trusted += _installed_finder_locations(top_level, inside)
    return inside


def code_outside_installed(module: str) -> Optional[str]:
    """The file or directory outside the installed packages (the standard library,
    site-packages, alf_lite) whose code importing ``module`` would run, or None when it
    would run none from there: ``module`` is imported already, built in, installed, or
    not found (the import fails). Nothing is imported to find out.

    ``import mymodule`` in a gin file runs ``mymodule.py`` from wherever Python finds
    it first, the working directory included: a run directory unpacked there could
    bring its own. A package installed in development mode (``pip install -e``) is
    installed: its code is where the installed finder that maps it says.
    """
    parts = module.split('.')
    inside = _inside_installed(parts[0])
    search = None  # where the next part is looked for: its package's __path__
    for i in range(len(parts)):
        name = '.'.join(parts[: i + 1])
        loaded = sys.modules.get(name)
        if loaded is not None:
            search = getattr(loaded, '__path__', None)
            continue
        try:
            if i == 0:
                # A top-level name: finding it runs no package's __init__.
                spec = importlib.util.find_spec(name)
                if spec is None and _untrusted_path:
                    spec = importlib.machinery.PathFinder.find_spec(name, _untrusted_path)
            elif search is None:
                return None  # an attribute of a module, not a module of its own
            else:
                spec = importlib.machinery.PathFinder.find_spec(name, list(search))
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        places = [spec.origin] if spec.has_location and spec.origin else []
        places += list(spec.submodule_search_locations or [])
        for place in places:
            if not inside(place):
                return place
        search = spec.submodule_search_locations
    return None


def imported_modules() -> List[str]:
    """The top-level modules that the gin config :func:`parse_config` parsed last imports,
    sorted: those of its ``import`` lines, and that of each env id ``module:Id`` bound to
    ``create_environment.env_name`` (in any scope, directly or through a macro)."""
    names = {statement.module.split('.')[0] for statement in gin.config._IMPORTS}
    for (_, selector), params in gin.config._CONFIG.items():
        if selector.rsplit('.', 1)[-1] != 'create_environment' or 'env_name' not in params:
            continue
        value, _ = _through_macros(params['env_name'])
        if isinstance(value, str) and ':' in value:
            names.add(value.split(':', 1)[0].split('.')[0])
    names.discard('__gin__')
    return sorted(names)


def module_code_outside_installed(name: str) -> List[str]:
    """Where the code of the top-level module ``name`` is, imported already or not, when it
    is outside the installed packages (see :func:`code_outside_installed`): a module's
    file, or a package's directories. Empty when it is installed, built in or not found.
    Nothing is imported to find out."""
    inside = _inside_installed(name)
    spec = getattr(sys.modules.get(name), '__spec__', None)
    if spec is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return []
    if spec is None:
        return []
    if spec.submodule_search_locations is not None:
        places = list(spec.submodule_search_locations)
    else:
        places = [spec.origin] if spec.has_location and spec.origin else []
    return [place for place in places if not inside(place)]


_TRUST_ADVICE = (
    "a run directory from someone else could run anything this way, so a run's "
    'config.gin may only import the installed packages. Read that code; if you trust it, '
    f'pass {TRUST_IMPORTS_FLAG} (or install it as a package).'
)


def _file_line(statement) -> str:
    return f'file {statement.location.filename}, line {statement.location.line_num}'


def _check_import_trusted(statement) -> None:
    """Raise UntrustedCodeError if the gin ``import`` ``statement`` would run code from
    outside the installed packages or turn on gin's dynamic registration."""
    if statement.module.split('.')[0] == '__gin__':
        raise UntrustedCodeError(
            f'`{statement.format()}` ({_file_line(statement)}) lets the gin file '
            'call any function of any module it imports (os.system among them): a run '
            'directory from someone else could run anything this way. If you trust this '
            f'file, pass {TRUST_IMPORTS_FLAG}.'
        )
    place = code_outside_installed(statement.module)
    if place is not None:
        raise UntrustedCodeError(
            f'`{statement.format()}` ({_file_line(statement)}) would run the code '
            f'of {place}, which is not an installed package: {_TRUST_ADVICE}'
        )


def _check_env_modules_trusted(bindings) -> None:
    """Raise UntrustedCodeError for a file's ``create_environment.env_name`` of the form
    ``module:Id`` (which imports ``module``) whose module is not installed, or that a
    reference makes (``@gin.singleton()``), whose module is known only when it runs."""
    for (scope, selector, param), (statement, gin_param) in bindings.items():
        if gin_param is not None or param != 'env_name':
            continue
        if selector.rsplit('.', 1)[-1] != 'create_environment':
            continue
        value, _ = _through_macros(gin.config._CONFIG.get((scope, selector), {}).get(param))
        if (
            isinstance(value, gin.config.ConfigurableReference)
            and value.config_key[1] != 'gin.macro'  # a macro not defined: a ConfigError
        ):
            raise UntrustedCodeError(
                f'The env id of {_statement_where(statement, None)} is what '
                f'{shortened(repr(value))} returns when it runs, so whether it imports a '
                'module from outside the installed packages (an env id `module:Id` does) '
                'cannot be checked before: give the env id as a string (directly or through '
                f'a macro). {_TRUST_ADVICE[0].upper()}{_TRUST_ADVICE[1:]}'
            )
        if not isinstance(value, str) or ':' not in value:
            continue
        module = value.split(':', 1)[0]
        place = code_outside_installed(module)
        if place is not None:
            raise UntrustedCodeError(
                f'The env id {value!r} ({_statement_where(statement, None)}) imports {module}, '
                f'which would run the code of {place}, not an installed package: '
                f'{_TRUST_ADVICE}'
            )


def binding_location(key: Tuple[str, str, str]) -> Optional[str]:
    """Where the last :func:`parse_config` wrote the binding ``key``, ``(scope,
    selector, parameter)`` with the configurable's full selector as gin keys it: its
    ``--gin_param``, or its file, line and text; None for a binding it did not write.
    """
    recorded = None if _parsed is None else _parsed.bindings.get(key)
    return None if recorded is None else _statement_where(*recorded)


def bound_scopes(selector: str, param: str) -> List[str]:
    """The scopes (``''`` for none) in which the gin config binds ``param`` of the
    configurable with full selector ``selector``."""
    return [
        scope
        for (scope, found), params in gin.config._CONFIG.items()
        if found == selector and param in params
    ]


def _statement_where(statement, gin_param: Optional[str]) -> str:
    """Where a recorded binding statement is: its ``--gin_param``, or its file, line and text."""
    if gin_param is not None:
        return f'--gin_param {shortened(repr(gin_param))}'
    location = statement.location
    where = f'file {location.filename}, line {location.line_num}'
    if location.line_content and location.line_content.strip():
        where += f', `{shortened(location.line_content.strip())}`'
    return where


def _annotation(configurable, param: str):
    """The type annotation of ``param`` of ``configurable``; None when there is none to check."""
    wrapped = configurable.wrapped
    try:
        hints = typing.get_type_hints(wrapped.__init__ if inspect.isclass(wrapped) else wrapped)
    except Exception:  # an annotation naming what its module cannot resolve
        hints = {}
    if param in hints:
        return hints[param]
    try:
        annotation = inspect.signature(wrapped).parameters[param].annotation
    except (KeyError, TypeError, ValueError):
        return None
    if annotation is inspect.Parameter.empty or isinstance(annotation, str):
        return None
    return annotation


_SEQUENCES = (
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Collection,
    collections.abc.Iterable,
    list,
)


def _fits(value, annotation) -> bool:
    """Whether a literal gin value can be of type ``annotation``; True where unsure.

    An int fits a float; a bool fits neither an int nor a float; a list or tuple
    fits a sequence or tuple of its items' type.
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if annotation is typing.Any:
        return True
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(item, args[0]) for item in value)
        if not args:
            return True
        return len(value) == len(args) and all(map(_fits, value, args))
    if origin in _SEQUENCES:
        if not isinstance(value, (list, tuple)):
            return False
        return not args or all(_fits(item, args[0]) for item in value)
    if origin in (dict, collections.abc.Mapping):
        return isinstance(value, dict)
    if origin is collections.abc.Callable:
        return callable(value)
    if origin is typing.Literal:
        return value in args
    if annotation in (list, tuple):
        return isinstance(value, (list, tuple))
    if isinstance(annotation, type) and origin is None:
        try:
            return isinstance(value, annotation)
        except TypeError:  # a Protocol that is not runtime_checkable
            return True
    return True


def _referenced_fits(reference, annotation) -> Optional[str]:
    """None where what ``reference`` gives can be of type ``annotation`` (or what it gives is
    not known: ``@f()`` of a function); else what it gives, in words."""
    wrapped = reference.configurable.wrapped
    name = getattr(wrapped, '__name__', reference.configurable.name)
    if not reference.evaluate:
        if _fits(wrapped, annotation):
            return None
        return f'the {"class" if inspect.isclass(wrapped) else "function"} {name}'
    if not inspect.isclass(wrapped) or _class_fits(wrapped, annotation):
        return None
    return f'which builds an instance of {name}'


def _class_fits(cls: type, annotation) -> bool:
    """Whether an instance of ``cls`` can be of type ``annotation``; True where unsure."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_class_fits(cls, arg) for arg in args)
    if annotation is typing.Any:
        return True
    if annotation is float and issubclass(cls, int) and not issubclass(cls, bool):
        return True
    if origin is typing.Literal:
        return False
    if origin is collections.abc.Callable:
        return issubclass(cls, collections.abc.Callable)
    target = annotation if origin is None else origin
    if not isinstance(target, type):
        return True
    try:
        return issubclass(cls, target)
    except TypeError:
        return True


def _type_text(annotation) -> str:
    """``annotation`` as a reader would write it: ``Sequence[int]``, ``float | Tensor``."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    text = re.sub(r'\b(?:typing|collections\.abc|torch)\.', '', str(annotation))
    return text.replace('NoneType', 'None')


def _configurable_names(num_components: int) -> List[str]:
    """Registered configurable names, each shortened to its last ``num_components`` parts."""
    return sorted(
        {
            '.'.join(selector.split('.')[-num_components:])
            for selector, _ in gin.config._REGISTRY.items()
        }
    )


def _parameter_names(selector: str) -> List[str]:
    """Names a gin binding may set on configurable ``selector``, in signature order."""
    configurable = gin.config._REGISTRY.get_match(selector)
    signature = inspect.signature(configurable.wrapped)
    names = [
        p.name
        for p in signature.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if configurable.allowlist:
        names = [n for n in names if n in configurable.allowlist]
    if configurable.denylist:
        names = [n for n in names if n not in configurable.denylist]
    return names


# Bounded: 6 levels of nesting, 6 items of a list, 4 of a dict.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = 80


def short_repr(value, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, made within bounds: a value read from a
    file (a list that holds itself many times over, an int of 100,000 digits) takes no time
    or memory to show, where ``f'{value!r:.80}'`` builds the whole text first."""
    try:
        text = _SHORT_REPR.repr(value)
    except Exception:  # noqa: BLE001  (a repr that refuses: an int past Python's digit limit)
        text = f'<{type(value).__name__}>'
    return text[:limit]


def closest_names(name: str, candidates: Sequence[str]) -> List[str]:
    """Up to 3 candidates closest to ``name``, ignoring case (``lr`` vs ``LR`` is a typo too)."""
    by_lower = {c.lower(): c for c in candidates}
    matches = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    return [by_lower[m] for m in matches]


def quoted_names(names: Sequence[str]) -> str:
    """``'a', 'b'``: names as the error messages list them."""
    return ', '.join(f"'{n}'" for n in names)
