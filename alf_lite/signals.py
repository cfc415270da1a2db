"""How SIGINT and SIGTERM (and SIGHUP, SIGUSR1 and SIGUSR2, unless ignored) stop training:
after the iteration, inside a hung env call, or at once outside the training loop (train
starting up or shutting down, play)."""

import contextlib
import ctypes
import importlib.util
import math
import os
import signal
import sys
import threading
import time
from typing import Callable, Dict, Hashable, Optional, Type

import psutil

# SIGHUP (the terminal closed) stops as SIGTERM does, and so do SIGUSR1 and SIGUSR2, which batch
# systems send as a warning before a time limit (Slurm's ``--signal=USR1@60``, Grid Engine's
# soft limit and ``-notify``) and whose default action would end the process without a
# checkpoint; each unless this process started with it ignored (``nohup`` for SIGHUP): then it
# stays ignored, here and in the processes started from here.
_STOP_UNLESS_IGNORED = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM) + tuple(
    s for s in _STOP_UNLESS_IGNORED if signal.getsignal(s) != signal.SIG_IGN
)
# What an env process ignores: every signal that stops training, which the trainer acts on.
ENV_PROCESS_IGNORED = (signal.SIGINT, signal.SIGTERM) + _STOP_UNLESS_IGNORED

# Set by ``started_watching_this_process`` (grid_search's and the learning benchmark's runs)
# to the starter's process id: the run stops as on SIGTERM once that process ends
# (``stop_when_starter_ends``).
PARENT_PID_VARIABLE = 'ALF_LITE_STOP_WITH_PARENT'
_STDERR_FD = 2
# A signal that repeats the first within this many seconds is the same stop sent twice, not
# a second one (``StopSignals``): a batch system (Slurm) signals every process of a job, and
# grid_search, which a run's signal also reached, passes it on to the run.
SAME_STOP_WITHIN_S = 1.0


def ignore_stop_signals() -> None:
    """Ignore every stop signal from here on: a process that is exiting because of one keeps
    the exit code of the first (another, a second Ctrl-C or a batch system's SIGTERM after
    its SIGUSR1, would otherwise end it by that signal)."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)


class TrainingInterrupted(Exception):
    """A stop signal arrived; a final checkpoint was written, or the one the run resumed from
    holds its state.

    Args:
        signum: the signal's number.
        checkpoint_written: False where the checkpoint resumed from was left as it was.
    """

    def __init__(self, signum: int, checkpoint_written: bool = True):
        super().__init__(f'interrupted by {signal.Signals(signum).name}')
        self.signum = signum
        self.checkpoint_written = checkpoint_written


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived, raised at once where it arrived (``RaisingSignals``, and
    ``StopSignals`` during an env call).

    A BaseException, like KeyboardInterrupt: code that catches Exception lets it through.

    Args:
        signum: the signal's number.
    """

    def __init__(self, signum: int):
        super().__init__(f'interrupted by {signal.Signals(signum).name}')
        self.signum = signum


class InterruptedInEnvCall(Interrupted):
    """A signal arrived while the trainer waited on an env, which may never return."""


class InterruptedEvaluation(InterruptedInEnvCall):
    """A stop signal came before or during an evaluation, which it ends at its next step:
    the checkpoint holds the evaluation as pending, and the resume evaluates again."""


class InterruptedOutsideTraining(Interrupted):
    """SIGINT or SIGTERM arrived while train started up or shut down, outside the loop.

    No checkpoint is written for it; every file already in root_dir is complete.
    """

    def __str__(self) -> str:
        return (
            f'{signal.Signals(self.signum).name} arrived outside the training loop (while '
            'starting up or shutting down): no checkpoint was written for it, and the files '
            'in the root_dir are complete; re-run the same command to start or resume the run.'
        )


def in_main_thread() -> bool:
    # Only the main thread may install signal handlers.
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def stop_signals_deferred():
    """While entered (in the main thread), a stop signal is noted, not acted on: its handler
    runs once the block ends, as the signal is sent again. Elsewhere, nothing changes."""
    if not in_main_thread():
        yield
        return
    received = []

    def note(signum, frame):
        received.append(signum)

    previous = {s: signal.signal(s, note) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        _restore(previous)
        for signum in dict.fromkeys(received):
            os.kill(os.getpid(), signum)


class _SignalsDeferredImport:
    """A ``sys.meta_path`` finder that runs the first import of ``name`` (found by the
    finders after it) with the stop signals deferred (``stop_signals_deferred``)."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # once, and not again in the search below
        spec = importlib.util.find_spec(name)
        exec_module = getattr(spec and spec.loader, 'exec_module', None)
        if exec_module is not None:

            def exec_module_deferring_signals(module):
                with stop_signals_deferred():
                    exec_module(module)

            spec.loader.exec_module = exec_module_deferring_signals
        return spec


def defer_stop_signals_while_torch_imports() -> None:
    """Make torch's first import in this process run with the stop signals deferred: the
    exception of a signal handler that runs inside torch's C++ initialisation (which calls
    importlib's Python code as ``torch._C._c10d_init`` registers its classes) becomes a C++
    exception there that ends the process at once (``std::terminate``: SIGABRT, exit code
    134, a core dump), with no word of the signal. Deferred, the signal stops the tool as
    anywhere else, once torch is imported (1.3-1.5 s on a 2-core machine)."""
    if 'torch' not in sys.modules and not any(
        isinstance(finder, _SignalsDeferredImport) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _SignalsDeferredImport('torch'))


def started_watching_this_process(env: Dict[str, str]) -> Dict[str, str]:
    """``env`` for a run that stops at a checkpoint once this process ends, however it
    ends (SIGKILL, the OOM killer, which let it pass no stop on): see
    ``stop_when_starter_ends``."""
    return dict(env, **{PARENT_PID_VARIABLE: str(os.getpid())})


def stop_when_starter_ends() -> None:
    """``stop_when_parent_ends`` of the process that started this one, if it asked for it
    (``started_watching_this_process``)."""
    parent_pid = os.environ.get(PARENT_PID_VARIABLE)
    if parent_pid:
        stop_when_parent_ends(int(parent_pid))


def stop_when_parent_ends(parent_pid: int, interval_s: float = 1.0) -> None:
    """Send this process SIGTERM once its parent is no longer ``parent_pid`` (checked every
    ``interval_s`` seconds by a daemon thread): a run whose sweep was killed (SIGKILL, the
    OOM killer) stops at a checkpoint, as if the sweep had passed its stop on, instead of
    training on unseen. Also a run the sweep had paused (SIGSTOP, with its env processes:
    Ctrl-Z) when it was killed: on Linux the kernel continues it as its parent dies, and
    it continues its process group.
    """
    _continue_when_parent_dies()

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        # Its env processes, which a paused sweep stopped with it.
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), signal.SIGCONT)
        print(
            f'the process that started this train (pid {parent_pid}) ended: stopping as on SIGTERM',
            file=sys.stderr,
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name='parent watch', daemon=True).start()


# prctl's option that names the signal this process gets as its parent dies.
_PR_SET_PDEATHSIG = 1


def _continue_when_parent_dies() -> None:
    """Have the kernel send this process SIGCONT as its parent dies (Linux): stopped then,
    nothing else would continue it. Where it cannot, a process stopped then stays so."""
    if not sys.platform.startswith('linux'):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGCONT, 0, 0, 0)


def _restore(handlers: dict) -> None:
    for s, h in handlers.items():
        if h is not None:  # None: not installed from Python, nothing to put back
            signal.signal(s, h)


@contextlib.contextmanager
def dropped_silently(dropped: Callable[[BaseException], bool]):
    """While entered, an exception for which ``dropped`` is True is not printed when
    Python drops it (``sys.unraisablehook``): it is acted on elsewhere."""
    previous = sys.unraisablehook

    def hook(unraisable):
        if not dropped(unraisable.exc_value):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


class _HandledSignals:
    """While entered, SIGINT and SIGTERM go to ``_handler`` and are unblocked; an exception
    of ``dropped_type`` that Python drops (raised in a ``__del__`` or an at-fork callback)
    is not printed, since ``received`` keeps the signal for the code that acts on it.
    """

    dropped_type = Interrupted

    def __init__(self):
        self.received: Optional[int] = None
        self._previous = {}
        self._blocked = set()
        self._quiet = None

    def _handler(self, signum, frame):
        raise NotImplementedError

    def __enter__(self):
        # A signal of an earlier entry (a trainer's train() called again) is not this one's.
        self.received = None
        if in_main_thread():
            self._quiet = dropped_silently(lambda e: isinstance(e, self.dropped_type))
            self._quiet.__enter__()
            self._previous = {s: signal.signal(s, self._handler) for s in STOP_SIGNALS}
            self._blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            try:
                # A process inherits its blocked signals: one started from a thread that
                # blocks them (a Ray worker's, say) would otherwise never receive them.
                # One held back until now arrives here; should its handler raise, the
                # exception leaves __enter__ and no __exit__ follows: undone here.
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            except BaseException:
                self.__exit__(None, None, None)
                raise
        return self

    def __exit__(self, *exc_info):
        if self._previous:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._blocked)
            _restore(self._previous)
            self._previous = {}
            self._quiet.__exit__(*exc_info)


class RaisingSignals(_HandledSignals):
    """While entered, SIGINT and SIGTERM raise ``exception_type(signum)`` at once.

    Train's CLI uses it outside the training loop, whose ``StopSignals`` takes them over
    while it runs, and grid_search outside its sweep; play and plot use it throughout.
    Where Python drops the exception, ``raise_if_received`` raises it at the next point
    that checks; where the code it interrupted raised an error of its own in its place,
    ``interruption`` finds the signal behind that error.

    Args:
        exception_type: ``Interrupted`` or a subclass, called with the signal's number.
    """

    def __init__(self, exception_type: Type[Interrupted] = Interrupted):
        super().__init__()
        self._exception_type = exception_type

    def _handler(self, signum, frame):
        self.received = signum
        raise self._exception_type(signum)

    def raise_if_received(self) -> None:
        """Raise the exception if a signal arrived while entered."""
        if self.received is not None:
            raise self._exception_type(self.received)

    def interruption(self, error: BaseException) -> Optional[Interrupted]:
        """The signal that stopped the code run while entered, given the ``error`` that ended
        it: the exception of ``exception_type`` it is, or arrived while handling; else, where
        a signal arrived, its exception. Code a signal interrupts may raise an error of its
        own in place of the exception its handler raised: Python's ``__set_name__`` wraps
        it, and a C extension calling back into Python may replace it without a trace
        (matplotlib's drawing raised ``ValueError: Invalid affine transformation matrix``).
        None for an ``error`` with no signal behind it, and for a ``SystemExit``, the tool's
        own exit.
        """
        if not isinstance(error, (Exception, Interrupted)):
            return None
        interrupted = arrived_while(error, self._exception_type)
        if interrupted is None and self.received is not None:
            interrupted = self._exception_type(self.received)
        return interrupted


def arrived_while(error: BaseException, kind: type) -> Optional[BaseException]:
    """The exception of ``kind`` that ``error`` is, or arrived while handling; or None."""
    while error is not None:
        if isinstance(error, kind):
            return error
        error = error.__context__
    return None


def set_env_process_signals(creator_pid: Optional[int] = None) -> None:
    """In an env process: ignore the stop signals (``ENV_PROCESS_IGNORED``), and end when the
    process that started it has ended.

    Ctrl-C and the SIGHUP of a closed terminal reach the whole process group, and a batch
    system (Slurm cancelling or preempting a job, ``systemctl stop``, ``kill -- -PGID``)
    sends its SIGTERM to every process of the job: the trainer, not each env, acts on them,
    and shuts the envs down after its checkpoint, which keeps their episodes. The trainer
    ends an env process with SIGKILL, which also ends one hung in native code.

    Args:
        creator_pid: the process that asked for this env process (the trainer's); None:
            this process's parent.
    """
    for signum in ENV_PROCESS_IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    _exit_when_creator_ends(os.getppid() if creator_pid is None else creator_pid)


def _exit_when_creator_ends(creator_pid: int, interval_s: float = 1.0) -> None:
    """Exit this process once ``creator_pid`` has ended (checked every ``interval_s``
    seconds by a daemon thread): an env process whose trainer was killed (SIGKILL, the OOM
    killer) while its env hung, which no signal of the user's but SIGKILL would otherwise
    end, does not stay behind.

    The creator is watched itself, not this process's parent: under forkserver the parent
    is ``multiprocessing``'s fork server, which ends of the SIGTERM a batch system sends
    every process of the job, while the creator outlives it to checkpoint this process's
    episode.
    """
    try:
        creator = psutil.Process(creator_pid)
    except psutil.Error:  # ended before this process started
        creator = None

    def creator_alive() -> bool:
        try:
            return (
                creator is not None
                and creator.is_running()  # False for a later process given its id
                and creator.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False

    def watch():
        while creator_alive():
            time.sleep(interval_s)
        os.write(
            _STDERR_FD,
            f'env process {os.getpid()}: the process that started it (pid {creator_pid}) '
            'ended; exiting\n'.encode(),
        )
        os._exit(1)

    threading.Thread(target=watch, name='creator watch', daemon=True).start()


@contextlib.contextmanager
def env_processes_starting():
    """While env processes are forked: this process acts on SIGINT and SIGTERM at once, as
    before; a process forked here ignores them until it sets its own dispositions
    (``set_env_process_signals``, first thing in an env process), which ignore them too.

    Ignoring SIGINT here instead would lose a Ctrl-C (or grid_search's SIGINT) that
    arrives while the envs start.
    """
    if not in_main_thread():
        yield
        return
    pid = os.getpid()
    previous = {}
    raised = []

    def handler(signum, frame):
        if os.getpid() != pid:  # a forked env process, before set_env_process_signals
            return
        act = previous[signum]
        if callable(act):
            try:
                act(signum, frame)
            except BaseException as e:
                raised.append((signum, e))
                raise
        elif act == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    previous.update({s: signal.signal(s, handler) for s in STOP_SIGNALS})
    try:
        with dropped_silently(lambda e: any(e is r for _, r in raised)):
            yield
    finally:
        _restore(previous)
    if raised:
        # The block ended without the exception the handler raised: Python dropped it
        # (raised in os.fork's at-fork callbacks, as a signal during a fork is). Raised again.
        signum = raised[0][0]
        previous[signum](signum, None)


class StopSignals(_HandledSignals):
    """While entered, SIGINT and SIGTERM are recorded for the training loop to act on.

    The loop reads ``received`` after each iteration, so a signal that comes during
    the iteration lets it finish: its checkpoint then holds the envs' episodes, and the
    resume goes on as if the run had never stopped. A signal during an env call (the
    training envs' or the evaluation's) is handled so that a hung env cannot keep the
    run from stopping, while one that is not hung is left whole: once a signal came,
    each env call (the one under way, and every one begun later: the rest of the
    iteration, its evaluation, the checkpoint's) is given ``patience_s`` seconds to end,
    the time a step takes and no more than a person waits; a call still under way then
    gets the signal again, and a signal that comes while a signal is recorded (that
    one, or a second from outside: Ctrl-C twice) raises ``InterruptedInEnvCall`` in it.
    The same signal again within ``SAME_STOP_WITHIN_S`` of the first is no second one:
    it is the first stop, sent twice (to every process of a job, and passed on by
    grid_search), and is ignored.

    Where Python drops that exception (raised in a ``__del__`` run by the env's
    code), it is not printed: the loop still stops after the iteration.

    Args:
        env_call: a key telling the env call under way from every other one, or None
            while there is none.
        patience_s: seconds an env call under way as the first signal came, or begun
            after it, has to end.
        announce: say on stderr, as the first signal comes, what the stop waits for (train
            does: an iteration, or a hung env's patience, may take a while).

    Attributes:
        resuming: set while the training envs of a run resumed from a checkpoint start
            (their episodes replayed, or new ones begun): a stop that ends one of their calls
            leaves that checkpoint as it was (nothing was trained since), and the
            announcement says so.
    """

    dropped_type = InterruptedInEnvCall

    def __init__(
        self,
        env_call: Callable[[], Optional[Hashable]],
        patience_s: float = 10.0,
        announce: bool = False,
    ):
        super().__init__()
        self._env_call = env_call
        self._patience_s = patience_s
        self._announce = announce
        self.resuming = False
        # The call a signal was sent again for, while that signal is on its way.
        self._sent_again_for: Optional[Hashable] = None
        self._lock = threading.Lock()
        # Set to stop the watch of the env calls (``_watch_env_calls``), the first signal's.
        self._watch: Optional[threading.Event] = None
        # True from the start of ``__exit__``: no env call is left to watch, and a signal
        # whose handler runs while ``__exit__`` holds the lock must not wait for it.
        self._leaving = False
        # time.monotonic() when the first signal came.
        self._first_at = -math.inf

    def _handler(self, signum, frame):
        sent_again_for, self._sent_again_for = self._sent_again_for, None
        call = self._env_call()
        if sent_again_for is not None and sent_again_for != call:
            return  # sent again for a call that ended meanwhile: nothing to end
        first = self.received is None
        now = time.monotonic()
        if first:
            self._first_at = now
        elif (
            sent_again_for is None
            and signum == self.received
            and now - self._first_at < SAME_STOP_WITHIN_S
        ):
            return
        self.received = signum
        if call is not None and not first:
            raise InterruptedInEnvCall(signum)
        if first and not self._leaving:
            if self._announce:
                self._say_stopping(signum)
            self._watch_env_calls(signum)

    def _say_stopping(self, signum: int) -> None:
        # Not print(): the main thread may be inside a print of its own. On a terminal the
        # progress line ends in a carriage return: the text goes below it.
        with contextlib.suppress(OSError, ValueError):
            start = '\n' if os.isatty(_STDERR_FD) else ''
            if self.resuming:
                ended = (
                    'the training envs start from the checkpoint this run resumed from: a call '
                    f'of theirs still running {self._patience_s:g} s after this signal is '
                    'ended, leaving that checkpoint as it was'
                )
            else:
                ended = (
                    f'an env call still running {self._patience_s:g} s after this signal is ended'
                )
            os.write(
                _STDERR_FD,
                f'{start}{signal.Signals(signum).name}: stopping once the iteration under way '
                f'ends, with a checkpoint ({ended}; another signal ends it at once)\n'.encode(),
            )

    def _watch_env_calls(self, signum: int) -> None:
        """Until the block is left, send ``signum`` again to an env call under way for
        ``patience_s`` (once each): a thread that looks at the call under way ten times a
        second or more."""
        stop = threading.Event()
        period = min(0.1, self._patience_s / 4)

        def watch():
            watched, since = self._env_call(), time.monotonic()
            while not stop.wait(period):
                call, now = self._env_call(), time.monotonic()
                if call != watched:
                    watched, since = call, now
                elif call is not None and now - since >= self._patience_s:
                    since = math.inf  # sent once
                    with self._lock:
                        # Not once the block is left (``stop`` set under the lock): the
                        # signal would find this handler gone.
                        if not stop.is_set() and self._env_call() == call:
                            self._sent_again_for = call
                            signal.pthread_kill(threading.main_thread().ident, signum)

        with self._lock:
            self._watch = stop
        threading.Thread(target=watch, name='env call patience', daemon=True).start()

    def __enter__(self):
        self._leaving = False
        return super().__enter__()

    def __exit__(self, *exc_info):
        # Set before the lock is taken: a signal's handler runs in this thread, which holds
        # the lock below, and would wait for it for good to start a watch.
        self._leaving = True
        with self._lock:
            if self._watch is not None:
                self._watch.set()
                self._watch = None
        self._sent_again_for = None
        super().__exit__(*exc_info)
