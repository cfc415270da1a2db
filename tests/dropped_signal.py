"""A SIGINT whose exception never reaches the tool: Python drops it, as it drops any
exception raised in a ``__del__`` (printing it through ``sys.unraisablehook``), or the
code it interrupted replaces it with an error of its own, as a C extension calling back
into Python does (matplotlib's drawing raised ``ValueError: Invalid affine
transformation matrix`` so).

Importable by a tool's subprocess (with this directory on PYTHONPATH), which
then runs the tool with ``runpy``: ``drop_sigint_after('alf_lite.bin.policy',
'load_policy')`` makes every later call of that function end with such a signal.
"""

import functools
import importlib
import os
import signal
import subprocess
import sys
import time

# What ``drop_sigint_after`` does with the signal's exception.
DROPPED = 'dropped'  # Python drops it; the function returns as usual
REPLACED = 'replaced'  # the function raises this error instead, without it as its context
REPLACING_ERROR = 'a library error raised in place of the signal'


class SignalledWhileDeleted:
    """Raises SIGINT in its ``__del__``, where Python drops the exception its handler raises."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)


def _signal_replaced_by_an_error() -> None:
    """Raise SIGINT, and a ``RuntimeError`` in place of the exception its handler raises."""
    interrupted = False
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
    except BaseException:
        interrupted = True
    if interrupted:  # raised here, outside the handler: the error has no context
        raise RuntimeError(REPLACING_ERROR)


def drop_sigint_after(module: str, name: str, how: str = DROPPED) -> None:
    """Replace ``module.name`` (a function, or ``Class.method``) by a function that calls
    it, then raises SIGINT, whose exception it drops or replaces (``how``)."""
    owner = importlib.import_module(module)
    *outer, name = name.split('.')
    for part in outer:
        owner = getattr(owner, part)
    original = getattr(owner, name)

    @functools.wraps(original)
    def dropping(*args, **kwargs):
        result = original(*args, **kwargs)
        if how == REPLACED:
            _signal_replaced_by_an_error()
        else:
            SignalledWhileDeleted()  # deleted at once, its SIGINT with it
        return result

    setattr(owner, name, dropping)


def run_tool(
    tool: str, args, module: str, name: str, how: str = DROPPED, cwd=None
) -> subprocess.CompletedProcess:
    """Run ``alf_lite.bin.<tool>`` with ``args`` in ``cwd`` (the repository's root: None) to
    its end, ``module.name`` dropping or replacing a SIGINT (``how``); output captured."""
    from cli_helpers import REPO_ROOT, RUN_TIMEOUT_S, train_env

    env = train_env()
    env['PYTHONPATH'] = os.pathsep.join([os.path.dirname(__file__), env['PYTHONPATH']])
    return subprocess.run(
        [sys.executable, '-c', tool_script(tool, module, name, how), *args],
        cwd=REPO_ROOT if cwd is None else cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def tool_script(tool: str, module: str, name: str, how: str = DROPPED) -> str:
    """Python code that runs ``alf_lite.bin.<tool>`` with ``module.name`` dropping or
    replacing a SIGINT (``how``)."""
    return (
        'import runpy, dropped_signal\n'
        f'dropped_signal.drop_sigint_after({module!r}, {name!r}, {how!r})\n'
        f'runpy.run_module("alf_lite.bin.{tool}", run_name="__main__")\n'
    )
