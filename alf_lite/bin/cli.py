"""What the command-line tools share: telling the user what went wrong."""

import contextlib
import gc
import logging
import os
import re
import shlex
import signal
import sys
from typing import Callable, List, NoReturn, Optional, Sequence

from alf_lite.signals import (
    STOP_SIGNALS,
    Interrupted,
    RaisingSignals,
    defer_stop_signals_while_torch_imports,
    ignore_stop_signals,
)

# torch's level for its loggers, which torch sets only at the end of its import: a tool that
# stops while torch imports (a signal) would otherwise print torch's exit-time INFO logs (the
# FakeTensor cache stats) after its one line. torch's import sets it again (TORCH_LOGS).
logging.getLogger('torch').setLevel(logging.WARNING)

# Exit codes of the tools.
EXIT_FAULT = 1  # something failed while running (train: training; grid_search: a run)
EXIT_BAD_INPUT = 2  # nothing was started
EXIT_SIGNAL_BASE = 128  # plus the signal number: stopped by that signal (train)


def user_message(message: str) -> str:
    """``message`` of a config error without gin's call trace, naming the configurable only.

    The configurable named is the innermost one the error was raised in, unless the message
    begins with its name, or with the name of a subclass of it the error passed through
    (``Td3Algorithm.exploration_noise ...``, raised in the constructor of
    ``DdpgAlgorithm`` that ``Td3Algorithm``'s calls).
    """
    # alf_lite.config.GIN_CALL_TRACE, not imported: config imports gin, and a stop signal may
    # have cut gin's own import short before this message is told.
    separator = '\n  In call to configurable '
    message, _, called = message.partition(separator)
    names = [c.split(' ')[0].strip(chr(39)) for c in called.split(separator)] if called else []
    if names and not any(
        message.startswith(name) and _subclass_of(name, names[0]) for name in names
    ):
        message = f'{names[0]}: {message}'
    return _LONG_NUMBER.sub(_shortened_number, message)


# A run of digits no value a user means is written with (a 700-digit gamma): shortened.
_LONG_NUMBER = re.compile(r'\d{61,}')


def _shortened_number(match: re.Match) -> str:
    digits = match[0]
    return f'{digits[:20]}... ({len(digits)} digits)'


def _subclass_of(name: str, base: str) -> bool:
    """Whether the configurable ``name`` is ``base`` or a class derived from ``base``'s class."""
    if name == base:
        return True
    import gin

    wrapped = []
    for each in (name, base):
        try:
            configurable = gin.config._REGISTRY.get_match(each)
        except Exception:  # noqa: BLE001  (an ambiguous name: not known to be one)
            return False
        wrapped.append(None if configurable is None else configurable.wrapped)
    return all(isinstance(w, type) for w in wrapped) and issubclass(*wrapped)


def print_out(*args, file=None, **kwargs) -> None:
    """``print`` (to stdout unless ``file`` is given), flushed, that goes on when the
    stream's reader is gone: a ``| head``, or a ``| tee`` that the Ctrl-C stopping the tool
    ended too.

    The stream then goes to /dev/null, so that the tool still finishes (its runs, its
    video, its table) and exits with its own status rather than a BrokenPipeError, or
    with exit code 120 where Python would meet the gone reader flushing at exit. The same
    for a stream that cannot be written (stdout to a full disk), said in a warning.
    """
    file = sys.stdout if file is None else file
    try:
        print(*args, file=file, **dict(kwargs, flush=True))
    except OSError as e:
        # Also a stream that cannot be written (stdout to a full disk): said once, on stderr.
        if not isinstance(e, BrokenPipeError) and file is not sys.stderr:
            # Where stderr cannot be written either (the terminal closed), dropped too.
            print_out(
                f'warning: cannot write to {file.name.strip("<>")}: {e.strerror}; its lines are '
                'dropped',
                file=sys.stderr,
            )
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, file.fileno())
        os.close(devnull)


# Set once a tool's main has ended (``run_tool``): from then on Python runs its exit-time
# callbacks, where ``fail`` can only be called by a stop signal's handler.
_main_ended = False


def fail(message: str, exit_code: int = EXIT_BAD_INPUT, at_once: bool = False) -> None:
    """Print ``message`` for the user and exit, by default with ``EXIT_BAD_INPUT``; also where
    stderr can no longer be written (the terminal closed).

    ``at_once``: without Python's exit-time callbacks and C's exit handlers, for a tool
    whose own code did the clean-up it needs: a stop signal may have cut short the import
    of a C extension module, whose exit handlers can then crash the process (matplotlib's
    ft2font: ``plot``)."""
    print_out(f'error: {user_message(message)}', file=sys.stderr)
    if _main_ended or at_once:
        # Once main ended, a signal comes while Python's exit-time callbacks run (torch's,
        # weakref finalizers), where a SystemExit raised in one is printed as ignored, with
        # its traceback, and the exit goes on. Either way, what the tool had to clean up,
        # its own code did.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(exit_code)
    sys.exit(exit_code)


def fail_on_stray_arguments(
    argv: List[str], gin_params: Sequence[str], takes_gin_files: bool
) -> None:
    """Exit with ``EXIT_BAD_INPUT`` where ``argv`` (a tool's main's) holds arguments past its
    flags, naming them: most often a ``--gin_param`` the shell split at its spaces (its
    pieces left in ``gin_params``), or gin files after one ``--gin_file``
    (``takes_gin_files``: the tool has that flag)."""
    stray = argv[1:]
    if not stray:
        return
    if takes_gin_files and any(arg.endswith('.gin') for arg in stray):
        hint = (
            ' Give each gin file with a --gin_file of its own: --gin_file a.gin --gin_file b.gin.'
        )
    elif any(char in arg for arg in stray for char in '=()[]{},') or any(
        '=' not in param or param.rstrip().endswith('=') for param in gin_params
    ):
        hint = (
            ' A --gin_param takes one argument: quote a binding that holds spaces whole, e.g. '
            "--gin_param 'TrainerConfig.num_env_steps = 1000'."
        )
    else:
        hint = ''
    fail(f'unexpected arguments: {shlex.join(stray)}.{hint}')


def exit_if_interrupted(
    signals: RaisingSignals,
    error: BaseException,
    message: Callable[[Interrupted], str] = lambda interrupted: f'{interrupted}.',
    at_once: bool = False,
) -> None:
    """Exit (``fail``, ``at_once`` or not) with ``EXIT_SIGNAL_BASE`` plus the signal's number,
    printing ``message`` of it, where a stop signal ended the code run in ``signals`` with
    ``error`` (``RaisingSignals.interruption``: also an error that code raised in place of
    the signal's exception); return otherwise, for the caller to raise ``error``."""
    interrupted = signals.interruption(error)
    if interrupted is not None:
        fail(message(interrupted), exit_code=EXIT_SIGNAL_BASE + interrupted.signum, at_once=at_once)


def run_tool(main) -> None:
    """absl's ``app.run`` of a tool's ``main`` with ``parse_flags``; once it ends, a stop
    signal (``exit_on_signals_before_main``'s handler, train's) ends the process at once,
    unless a stop signal ended ``main`` (exit code ``EXIT_SIGNAL_BASE`` plus its number):
    then the stop signals are ignored while the process exits.

    What is still alive then is frozen out of the cyclic garbage collector (``gc.freeze``):
    with torch imported, the collector's passes over those objects while the interpreter
    exits took 0.75 s of train's end. The exit-time callbacks (``atexit``, weakref
    finalizers) run as before, and what the tool had to write or stop, its code did
    before ``main`` returned."""
    from absl import app

    global _main_ended
    try:
        app.run(main, flags_parser=parse_flags)
    except SystemExit as e:
        if e.code in {EXIT_SIGNAL_BASE + s for s in STOP_SIGNALS}:
            # Stopped by a signal: Python's exit sets the handlers back to the default before
            # its last finalizers, and another stop signal then (a second Ctrl-C, a batch
            # system's SIGTERM after its SIGUSR1) would end the process by that signal,
            # without the exit code of the first. Ignored, as train ignores it.
            ignore_stop_signals()
        raise
    finally:
        _main_ended = True
        gc.freeze()


def exit_with(main, *args) -> NoReturn:
    """``sys.exit(main(*args))`` for a script that does not end through ``run_tool`` (the
    benchmarks), with what is alive once ``main`` ends frozen out of the cyclic garbage
    collector as ``run_tool`` does: their exits paid the same collector passes over torch's
    objects (0.3 s of ``benchmarks/learning.py --help``'s 1.5 s)."""
    try:
        status = main(*args)
    finally:
        gc.freeze()
    sys.exit(status)


def exit_on_signals_before_main(message: str = 'interrupted by {signal}.') -> None:
    """Until a tool's ``main`` handles SIGINT and SIGTERM (and the others of ``STOP_SIGNALS``)
    itself, and again once it is done, exit on any at once with ``EXIT_SIGNAL_BASE`` plus its
    number and one line: ``message``, the signal's name for ``{signal}``. Called before the
    tool's imports, which take a tenth of a second or more: a signal there would otherwise end
    it with a KeyboardInterrupt's traceback (SIGINT) or without a word (the others). And
    torch's first import defers them (``defer_stop_signals_while_torch_imports``)."""
    defer_stop_signals_while_torch_imports()

    def stop(signum, frame):
        ignore_stop_signals()
        name = signal.Signals(signum).name
        fail(message.format(signal=name), exit_code=EXIT_SIGNAL_BASE + signum)

    for s in STOP_SIGNALS:
        signal.signal(s, stop)


def output_root_dir(flag_value: str) -> str:
    """The absolute path of a ``--root_dir`` to write into; exits naming it when it is a file,
    or when its name is not UTF-8, in which TensorBoard cannot write its summaries."""
    # Its ~ was expanded with the other path flags' (parse_flags).
    root_dir = os.path.abspath(flag_value)
    try:
        root_dir.encode('utf-8')
    except UnicodeEncodeError:
        fail(
            f'--root_dir {ascii(root_dir)} is no UTF-8 name (its undecodable bytes are shown '
            'as \\udcXX), and TensorBoard writes its summaries only under UTF-8 paths: give '
            'a --root_dir whose whole path is UTF-8.'
        )
    if os.path.exists(root_dir) and not os.path.isdir(root_dir):
        fail(f'--root_dir {root_dir} is a file, not a directory.')
    return root_dir


# Asking for help is no error: usage on stdout, exit 0 (absl exits 1).
_HELP_ARGS = {'-h', '-?', '--help', '--helpshort'}
_HELP_FULL_ARGS = {'--helpfull'}


def parse_flags(argv: List[str]) -> List[str]:
    """absl's flag parsing for ``app.run(main, flags_parser=parse_flags)``.

    An unknown flag, a bad value or a missing required flag is bad input
    (``EXIT_BAD_INPUT``, one line naming it); ``-h``/``--help`` print the usage
    and exit 0. Returns the arguments left after the flags, program name first.
    """
    from absl import app, flags

    asked = set(argv[1:])
    if asked & (_HELP_ARGS | _HELP_FULL_ARGS):
        app.usage(shorthelp=not asked & _HELP_FULL_ARGS, writeto_stdout=True)
        sys.exit(0)
    fail_on_flag_as_value(argv, flags.FLAGS)
    try:
        rest = flags.FLAGS(argv)
    except flags.Error as e:
        # absl puts each missing required flag on a line of its own.
        fail(f'{"; ".join(str(e).splitlines())} (--help lists the flags)')
    except SystemExit as e:
        # absl's help flags in the other spellings it reads (-help, --help=true,
        # -helpfull, --helpxml) print their help, then exit 1.
        if e.code == 1:
            sys.exit(0)
        raise
    for name, given in EMPTY_REFUSED.items():
        value = flags.FLAGS[name].value if name in flags.FLAGS else None
        for one in value if isinstance(value, list) else [value]:
            if isinstance(one, str) and not one.strip():
                fail(empty(f'--{name}', one, given))
        if given == A_PATH and value is not None:
            # A quoted or '='-joined ~ (--out=~/c.png) reaches the tool unexpanded: plot made
            # a directory named ~ in the working directory and wrote there.
            flags.FLAGS[name].value = (
                [os.path.expanduser(v) for v in value]
                if isinstance(value, list)
                else os.path.expanduser(value)
            )
    return rest


def fail_on_flag_as_value(argv: List[str], flag_values) -> None:
    """Exit with ``EXIT_BAD_INPUT`` where a flag that takes a value (``--root_dir``) is followed
    by another of ``flag_values`` (``--gin_file``): an unquoted shell variable that is unset
    left it without one, and absl would take the next flag for its value."""
    from absl import flags

    def flag_name(arg: str) -> Optional[str]:
        name = arg.lstrip('-').split('=', 1)[0]
        if not arg.startswith('-') or arg.startswith('---') or not name:
            return None
        if name in flag_values:
            return name
        # absl's --noflag for a boolean flag.
        if name.startswith('no') and name[2:] in flag_values:
            return name[2:]
        return None

    args = argv[1:]
    for arg, after in zip(args, args[1:]):
        if arg == '--':
            return
        name = flag_name(arg)
        if (
            name is not None
            and '=' not in arg
            and not isinstance(flag_values[name], flags.BooleanFlag)
            and flag_name(after) is not None
        ):
            fail(
                f'{arg} has no value: the argument after it, {after}, is a flag. A shell '
                'variable in its value may be unset.'
            )


# The tools' flags that name a file or directory, take a binding, an address or a setting, and
# what they take: an empty one is refused. A path '' would be taken for the working directory
# (where train and grid_search would write), a binding '' for none at all (the run without the
# one meant), the others for their default.
A_PATH = 'a path'
EMPTY_REFUSED = {
    'root_dir': A_PATH,
    'gin_file': A_PATH,
    'search_config': A_PATH,
    'record_file': A_PATH,
    'out': A_PATH,
    'gin_param': 'a binding',
    # Not local runs, where a cluster was meant.
    'ray_address': "'auto' or the head's host:port (without the flag: local processes)",
    # Not the env's own size.
    'render_size': "'W,H' or one number (without the flag: the env's own size)",
    # Not all runs as one group.
    'group_by': "'config', 'none' or comma-separated gin parameters",
}


def empty(what: str, value: str = '', given: str = A_PATH) -> str:
    """The message for ``what`` (a flag, say) given as an empty ``value``, which should be
    ``given``."""
    return f'{what} is empty ({value!r}): give {given}. A shell variable in it may be unset.'
