"""Ends the process when a call into an in-process env never returns.

A hung call blocks the thread that made it (the trainer's main thread) for
good, so the check runs in a thread of its own: when a watched call outlives its
timeout, that thread prints what hung and the stack of every thread, and exits
with ``HUNG_ENV_EXIT_CODE``. Nothing is written on the way out, so the last
checkpoint stays as it was; the process's env subprocesses are stopped.

Time the process spends stopped (Ctrl-Z, a batch scheduler's suspend, SIGSTOP) does
not count towards a call's timeout: a check that comes late while the process used
less CPU time than it was late by found the process stopped for the difference.

Limits: a call hung in native code that keeps the GIL stops every Python
thread, this one included (``kill -ABRT`` then prints the stacks where
faulthandler is enabled, as in train and play).
"""

import faulthandler
import itertools
import multiprocessing
import os
import threading
import time
from typing import Callable, Union

# Exit status after a hung in-process env call (documented with train's other codes).
HUNG_ENV_EXIT_CODE = 3
# The watchdog looks at least this often, so it reports a hang at most this late.
_MAX_CHECK_PERIOD_S = 1.0
_STDERR_FD = 2
# How long the exit waits for each env process it stopped.
_CHILD_EXIT_S = 1.0


class _Call:
    """A watched call: its deadline on the monotonic clock, moved on by the time the
    process was found stopped while it ran (only the watchdog's thread moves it)."""

    __slots__ = ('started', 'deadline', 'description')

    def __init__(self, timeout_s: float, description: Union[str, Callable[[], str]]):
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        self.description = description


class _Watchdog:
    """One thread watching every pending call of this process."""

    def __init__(self):
        # token -> _Call. Single dict operations are atomic under the GIL, so the calls
        # take no lock.
        self._calls = {}
        self._tokens = itertools.count()
        self._period = _MAX_CHECK_PERIOD_S
        self._thread = None

    def start(self, timeout_s: float, description: Union[str, Callable[[], str]]) -> int:
        token = next(self._tokens)
        self._calls[token] = _Call(timeout_s, description)
        if timeout_s / 4 < self._period:
            self._period = timeout_s / 4
        # Not alive also in a forked child, which has only the thread that forked.
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name='alf_lite-env-watchdog', daemon=True
            )
            self._thread.start()
        return token

    def done(self, token: int) -> None:
        self._calls.pop(token, None)

    def _run(self):
        while True:
            period, before, cpu_before = self._period, time.monotonic(), time.process_time()
            time.sleep(period)
            now, cpu = time.monotonic(), time.process_time()
            # Late, and not for a thread that kept the GIL (a native call busy that long):
            # stopped. Its CPU time of the whole period counts against it, so a stop is
            # found too short by at most that.
            stopped = max(0.0, (now - before - period) - (cpu - cpu_before))
            calls = list(self._calls.values())
            for call in calls:
                # A call begun during this period ran for no more of the stop than since.
                call.deadline += min(stopped, max(0.0, now - call.started))
            if calls:
                call = min(calls, key=lambda call: call.deadline)
                if now >= call.deadline:
                    description = call.description
                    _exit_hung(description if isinstance(description, str) else description())


def _exit_hung(description: str) -> None:
    os.write(
        _STDERR_FD,
        (
            f'\n{description}; the stacks of all threads follow. Exiting with code '
            f'{HUNG_ENV_EXIT_CODE}; the last checkpoint is left as it was.\n'
        ).encode(),
    )
    faulthandler.dump_traceback(file=_STDERR_FD, all_threads=True)
    # The processes of other envs would see their pipes close and print that as
    # tracebacks after the stacks; they are stopped first (SIGKILL: no output; env
    # processes ignore SIGTERM).
    children = multiprocessing.active_children()
    for child in children:
        child.kill()
    for child in children:
        child.join(timeout=_CHILD_EXIT_S)
    os._exit(HUNG_ENV_EXIT_CODE)


_WATCHDOG = _Watchdog()


def start(timeout_s: float, description: Union[str, Callable[[], str]]) -> int:
    """Watch a call that must return within ``timeout_s``; returns the token for ``done``.

    Args:
        timeout_s: seconds after which the process ends, if ``done`` was not called.
        description: what hung, for the message, e.g.
            "Environment 'X' (in process) did not return from step() within 60 s";
            or a callable giving it, called only on a hang, so that a call
            watched at every env step formats no text.
    """
    return _WATCHDOG.start(timeout_s, description)


def done(token: int) -> None:
    """The call of ``token`` returned (or raised): stop watching it."""
    _WATCHDOG.done(token)
