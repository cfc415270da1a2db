"""A SIGINT whose exception Python drops, as it drops any exception raised in a
``__del__`` (printing it through ``sys.unraisablehook``).

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


class SignalledWhileDeleted:
    """Raises SIGINT in its ``__del__``, where Python drops the exception its handler raises."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)


def drop_sigint_after(module: str, name: str) -> None:
    """Replace ``module.name`` (a function, or ``Class.method``) by a function that calls
    it, then drops a SIGINT."""
    owner = importlib.import_module(module)
    *outer, name = name.split('.')
    for part in outer:
        owner = getattr(owner, part)
    original = getattr(owner, name)

    @functools.wraps(original)
    def dropping(*args, **kwargs):
        result = original(*args, **kwargs)
        SignalledWhileDeleted()  # deleted at once, its SIGINT with it
        return result

    setattr(owner, name, dropping)


def run_tool(tool: str, args, module: str, name: str) -> subprocess.CompletedProcess:
    """Run ``alf_lite.bin.<tool>`` with ``args`` to its end, ``module.name`` dropping a
    SIGINT; output captured."""
    from cli_helpers import REPO_ROOT, RUN_TIMEOUT_S, train_env

    env = train_env()
    env['PYTHONPATH'] = os.pathsep.join([os.path.dirname(__file__), env['PYTHONPATH']])
    return subprocess.run(
        [sys.executable, '-c', tool_script(tool, module, name), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def tool_script(tool: str, module: str, name: str) -> str:
    """Python code that runs ``alf_lite.bin.<tool>`` with ``module.name`` dropping a SIGINT."""
    return (
        'import runpy, dropped_signal\n'
        f'dropped_signal.drop_sigint_after({module!r}, {name!r})\n'
        f'runpy.run_module("alf_lite.bin.{tool}", run_name="__main__")\n'
    )
