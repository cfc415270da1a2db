"""How SIGINT and SIGTERM stop training: after the iteration, or inside a hung env call."""

import contextlib
import signal
import threading
from typing import Callable, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM arrived; a final checkpoint was written.

    Args:
        signum: the signal's number.
    """

    def __init__(self, signum: int):
        super().__init__(f'interrupted by {signal.Signals(signum).name}')
        self.signum = signum


class InterruptedInEnvCall(BaseException):
    """A signal arrived while the trainer waited on an env, which may never return.

    A BaseException, like KeyboardInterrupt, so that env code catching
    Exception lets it through.

    Args:
        signum: the signal's number.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def in_main_thread() -> bool:
    # Only the main thread may install signal handlers.
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def sigint_ignored():
    """Env subprocesses forked in this context ignore Ctrl-C: the trainer shuts them down."""
    if not in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class StopSignals:
    """While entered, SIGINT and SIGTERM are recorded for the training loop to act on.

    The loop reads ``received`` after each iteration. A signal that arrives
    during an env call raises ``InterruptedInEnvCall`` at once instead: a hung
    env would never return to the loop.

    Args:
        in_env_call: whether an env call is under way.
    """

    def __init__(self, in_env_call: Callable[[], bool]):
        self._in_env_call = in_env_call
        self.received: Optional[int] = None
        self._previous = {}
        self._blocked = set()

    def _handler(self, signum, frame):
        self.received = signum
        if self._in_env_call():
            raise InterruptedInEnvCall(signum)

    def __enter__(self) -> 'StopSignals':
        if in_main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in STOP_SIGNALS}
            # A process inherits its blocked signals: one started from a thread that
            # blocks them (a Ray worker's, say) would otherwise never receive them.
            self._blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        return self

    def __exit__(self, *exc_info):
        if self._previous:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._blocked)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
