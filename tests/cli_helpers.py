"""Running ``python -m alf_lite.bin.train`` from tests: commands, environment, kills."""

import atexit
import contextlib
import hashlib
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest
import torch

from alf_lite.run_dir import RunDir, checkpoint_env_steps, list_checkpoints

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / 'examples'
PENDULUM = EXAMPLES / 'sac_pendulum.gin'
RUN_TIMEOUT_S = 240

# Small enough for a few seconds a run on one CPU thread.
TINY = [
    'TanhNormalActorNetwork.hidden_layers=(32,)',
    'CriticNetwork.hidden_layers=(32,)',
    'TrainerConfig.mini_batch_size=32',
    'TrainerConfig.replay_buffer_length=1000',
    'TrainerConfig.initial_collect_steps=100',
]


@contextlib.contextmanager
def fails_after(seconds: int):
    """Within it, code that would hang raises TimeoutError after ``seconds`` (main thread)."""

    def timed_out(signum, frame):
        raise TimeoutError(f'still running after {seconds} s')

    previous = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def train_command(root_dir, gin_files=(), params=()):
    command = [sys.executable, '-m', 'alf_lite.bin.train', '--root_dir', str(root_dir)]
    for gin_file in gin_files:
        command += ['--gin_file', str(gin_file)]
    for param in params:
        command += ['--gin_param', param]
    return command


def with_prelude(command, prelude: str, module: str = 'alf_lite.bin.train', alter_sys=False):
    """``command`` (``python -m <module> <args>``) run as ``python -c``: ``prelude`` first
    (it may patch what ``module`` uses; ``runpy`` is imported), then ``module`` as
    ``__main__`` with the same arguments."""
    run = f'runpy.run_module({module!r}, run_name="__main__"'
    run += ', alter_sys=True)\n' if alter_sys else ')\n'
    return [command[0], '-c', 'import runpy\n' + prelude + run, *command[3:]]


def signal_on_import(sig, module: str = 'absl') -> str:
    """A ``with_prelude`` prelude that sends ``sig`` to the process as it first imports
    ``module``: while a tool imports its modules, before its ``main`` runs."""
    return (
        'import os, sys\n'
        'class SignalOnImport:\n'
        '    def find_spec(self, name, path=None, target=None):\n'
        f'        if name == {module!r}:\n'
        '            sys.meta_path.remove(self)\n'
        f'            os.kill(os.getpid(), {int(sig)})\n'
        'sys.meta_path.insert(0, SignalOnImport())\n'
    )


def with_read_only_rename(command, target_part: str):
    """``command`` (a ``train_command``) run so that ``os.rename`` to a path holding
    ``target_part`` fails with EROFS, as on a read-only file system."""
    prelude = (
        'import errno, os\n'
        'rename = os.rename\n'
        'def read_only(src, dst, **kwargs):\n'
        f'    if {target_part!r} in str(dst):\n'
        '        raise OSError(errno.EROFS, os.strerror(errno.EROFS), src)\n'
        '    rename(src, dst, **kwargs)\n'
        'os.rename = read_only\n'
    )
    return with_prelude(command, prelude, alter_sys=True)


def train_env():
    env = dict(os.environ, OMP_NUM_THREADS='1')
    # alf_lite may not be installed (no `pip install -e`): make this checkout importable
    # from any working directory.
    env['PYTHONPATH'] = os.pathsep.join(
        [str(REPO_ROOT)] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else [])
    )
    return env


def run_python(script: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    """``script`` run to its end in a fresh Python process with this checkout, output captured."""
    return subprocess.run(
        [sys.executable, '-c', script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=train_env(),
        **kwargs,
    )


def python_output(script: str) -> str:
    """The standard output of ``script`` run in a fresh Python process with this checkout."""
    return run_python(script, timeout=None, check=True).stdout


# Set to run every command in a fresh interpreter instead of a child of train_server.py.
FRESH_INTERPRETERS_VARIABLE = 'ALF_LITE_TESTS_FRESH_INTERPRETERS'


class TrainServer:
    """This test process's ``train_server.py``: started at its first use, one run at a time."""

    def __init__(self):
        self._process = None
        self._pending = b''
        self._lock = threading.Lock()
        # Closing its standard input ends the server.
        atexit.register(self._stop)

    def _stop(self):
        if self._process is not None:
            self._process.stdin.close()
            self._log.close()
            os.close(self._answers)
            self._process = None

    def _start(self):
        self._log = tempfile.TemporaryFile()
        read_end, write_end = os.pipe()
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name('train_server.py')), str(write_end)],
            cwd=REPO_ROOT,
            env=train_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            pass_fds=(write_end,),
            bufsize=0,
        )
        os.close(write_end)
        self._answers = read_end
        self._pending = b''

    def _answer(self, word, timeout):
        """The value of the server's next line, which starts with ``word``; None on timeout."""
        deadline = time.monotonic() + timeout
        fd = self._answers
        while b'\n' not in self._pending:
            left = max(deadline - time.monotonic(), 0)
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                self._log.seek(0)
                raise RuntimeError(
                    f'train_server.py ended (exit {self._process.wait()}):\n'
                    + self._log.read().decode(errors='replace')[-4000:]
                )
            self._pending += chunk
        line, self._pending = self._pending.split(b'\n', 1)
        key, value = line.decode().split()
        assert key == word, line
        return int(value)

    def start(self, command, stderr, cwd=REPO_ROOT, new_session=False, env=None):
        """``command`` (``python -m alf_lite.bin.<tool> ...``, or ``python -c <code> ...``
        whose code imports nothing the server imported that it needs to see imported)
        started in a forked child with ``env`` (``train_env()`` by default), its standard
        output discarded and its standard error written to the file ``stderr``; a
        ``ServedProcess``. No other command runs before it ended. With ``new_session``,
        the child is in a session of its own, as ``start_in_own_session`` starts one."""
        self._lock.acquire()
        try:
            if self._process is None or self._process.poll() is not None:
                self._stop()
                self._start()
            request = dict(
                args=command[3:],
                cwd=os.path.abspath(cwd),
                env=env or train_env(),
                stdout=os.devnull,
                stderr=os.path.abspath(stderr),
                new_session=new_session,
            )
            request['code' if command[1] == '-c' else 'module'] = command[2]
            self._process.stdin.write((json.dumps(request) + '\n').encode())
            pid = self._answer('pid', RUN_TIMEOUT_S)
        except BaseException:
            self._lock.release()
            raise
        process = ServedProcess(self, pid, stderr)
        if new_session:
            _SESSIONS.append(process)  # killed with its test by kill_leftover_sessions
        return process

    def run(self, command, cwd, timeout):
        """``subprocess.run(command, capture_output=True, text=True)`` in a forked child."""
        with self._lock, tempfile.TemporaryDirectory() as tmp:
            if self._process is None or self._process.poll() is not None:
                self._stop()
                self._start()
            out, err = os.path.join(tmp, 'stdout'), os.path.join(tmp, 'stderr')
            request = dict(
                module=command[2],
                args=command[3:],
                cwd=os.path.abspath(cwd),
                env=train_env(),
                stdout=out,
                stderr=err,
            )
            self._process.stdin.write((json.dumps(request) + '\n').encode())
            pid = self._answer('pid', RUN_TIMEOUT_S)
            returncode = self._answer('exit', timeout)
            if returncode is None:
                os.kill(pid, signal.SIGKILL)
                self._answer('exit', RUN_TIMEOUT_S)
            with open(out) as f_out, open(err) as f_err:
                stdout, stderr = f_out.read(), f_err.read()
            if returncode is None:
                raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
            return subprocess.CompletedProcess(command, returncode, stdout, stderr)


class ServedProcess:
    """A child that ``TrainServer.start`` forked, with the part of ``subprocess.Popen``'s
    interface the tests use: ``pid``, ``returncode``, ``poll``, ``wait``, ``kill``,
    ``send_signal`` and ``communicate`` (its standard error from the file it went to)."""

    def __init__(self, server, pid, stderr):
        self._server = server
        self._stderr = stderr
        self.pid = pid
        self.returncode = None

    def _ended(self, returncode):
        if returncode is not None and self.returncode is None:
            self.returncode = returncode
            self._server._lock.release()
        return self.returncode

    def poll(self):
        if self.returncode is None:
            return self._ended(self._server._answer('exit', 0))
        return self.returncode

    def wait(self, timeout=RUN_TIMEOUT_S):
        if self.returncode is None and self._ended(self._server._answer('exit', timeout)) is None:
            raise subprocess.TimeoutExpired(f'train_server child {self.pid}', timeout)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout=RUN_TIMEOUT_S):
        self.wait(timeout)
        with open(self._stderr) as f:
            return None, f.read()


train_server = TrainServer()


def run_with_file_size_limit(command, limit_bytes):
    """``run_train(command)`` with no file of the process (or its children) growing past
    ``limit_bytes``: a write past it fails with EFBIG, as on a full disk."""

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
        # Python ignores SIGXFSZ too, but only once it runs; this covers the exec.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    return run_train(command, preexec_fn=limit_file_size)


def run_train(command, cwd=REPO_ROOT, fresh_interpreter=False, **kwargs):
    """Run ``command`` to its end, output captured; ``kwargs`` go to ``subprocess.run``.

    ``python -m alf_lite.bin.<tool>`` runs as a child forked by ``train_server.py``,
    which imported the dependencies once (see there), unless ``fresh_interpreter``
    (for a test comparing the numbers of two runs: children share the hash seed),
    ``kwargs`` are given, ``ALF_LITE_TESTS_FRESH_INTERPRETERS`` is set or the machine
    has CUDA (a process that asked the CUDA driver anything before forking leaves
    its children a driver they cannot use; nothing checks that the imports never do).
    """
    if (
        command[:2] == [sys.executable, '-m']
        and command[2].startswith('alf_lite.bin.')
        and not (fresh_interpreter or kwargs or os.environ.get(FRESH_INTERPRETERS_VARIABLE))
        and not torch.cuda.is_available()
    ):
        return train_server.run(command, cwd, RUN_TIMEOUT_S)
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        **{'env': train_env(), 'timeout': RUN_TIMEOUT_S, **kwargs},
    )


class _FreshProcess(subprocess.Popen):
    """A fresh interpreter whose standard error goes to a file, which ``communicate`` reads."""

    def __init__(self, command, stderr, **kwargs):
        self._stderr_path = stderr
        with open(stderr, 'w') as f:
            super().__init__(command, stdout=subprocess.DEVNULL, stderr=f, text=True, **kwargs)

    def communicate(self, input=None, timeout=None):
        self.wait(timeout)
        with open(self._stderr_path) as f:
            return None, f.read()


def start_train(command, stderr, env=None, new_session=False):
    """Start ``command`` (``python -m alf_lite.bin.<tool> ...``, or ``python -c`` code that
    runs one, see ``TrainServer.start``) with ``env`` (``train_env()`` by default), its
    standard output discarded and its standard error written to the file ``stderr``; with
    ``new_session``, in a session of its own, as ``start_in_own_session`` starts one.

    A child forked by ``train_server.py``, which imported the dependencies once, under the
    conditions ``run_train`` serves a tool (a fresh interpreter otherwise); no other served
    command runs before it ended. The process has the part of ``subprocess.Popen``'s
    interface the tests use; its ``communicate`` gives ``(None, <standard error>)``.
    """
    if not (os.environ.get(FRESH_INTERPRETERS_VARIABLE) or torch.cuda.is_available()):
        return train_server.start(command, stderr, env=env, new_session=new_session)
    process = _FreshProcess(
        command, stderr, cwd=REPO_ROOT, env=env or train_env(), start_new_session=new_session
    )
    if new_session:
        _SESSIONS.append(process)
    return process


def run_with_output_reader_gone(command, cwd=REPO_ROOT, timeout=RUN_TIMEOUT_S):
    """Run ``command`` with its stdout a pipe whose reader is gone at once (as ``| head``
    leaves it), not unbuffered (as where a user runs it); ``(returncode, stderr)``."""
    env = train_env()
    env.pop('PYTHONUNBUFFERED', None)
    with subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        process.stdout.close()
        _, err = process.communicate(timeout=timeout)
    return process.returncode, err


def assert_ok(result):
    assert result.returncode == 0, (
        f'exit {result.returncode}\n--- stderr (tail) ---\n{result.stderr[-4000:]}'
    )


def tree_digest(root):
    """``{relative path: sha1}`` of every file under ``root``."""
    digest = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, 'rb') as f:
                digest[os.path.relpath(path, root)] = hashlib.sha1(f.read()).hexdigest()
    return digest


def copy_run(root_dir, tmp_path):
    """A copy of the experiment in ``root_dir`` at ``tmp_path / 'run'``, to resume or damage."""
    copy = tmp_path / 'run'
    shutil.copytree(root_dir, copy)
    return copy


def checkpoint_steps(root_dir):
    """Env steps of the complete checkpoints (``ckpt-<N>``), ascending."""
    return [
        checkpoint_env_steps(path)
        for path in list_checkpoints(RunDir(str(root_dir)).checkpoint_dir)
    ]


def start_and_kill(command, tmp_path, until, name):
    """Start ``command``; SIGKILL it as soon as ``until()`` is true. Returns the kill time."""
    with open(tmp_path / f'{name}.log', 'w') as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=train_env(), stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.time() + RUN_TIMEOUT_S
            while not until():
                if process.poll() is not None:
                    pytest.fail(
                        f'{name} ended (exit {process.returncode}) before it could be '
                        f'killed:\n{(tmp_path / f"{name}.log").read_text()[-4000:]}'
                    )
                if time.time() > deadline:
                    pytest.fail(f'{name}: condition not reached in {RUN_TIMEOUT_S} s')
                time.sleep(0.01)
            process.send_signal(signal.SIGKILL)
            killed_at = time.time()
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL, f'{name} ended by itself before the kill'
    return killed_at


# The processes ``start_in_own_session`` started, for ``kill_leftover_sessions``.
_SESSIONS = []


def start_in_own_session(command, env=None, stdout=subprocess.DEVNULL, cwd=REPO_ROOT):
    """Start ``command`` (stderr piped, text) in a session of its own, so that
    ``send_as_user`` can send SIGINT to its whole process group, as Ctrl-C does."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env or train_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _SESSIONS.append(process)
    return process


def kill_leftover_sessions():
    """Kill the process group of each ``start_in_own_session`` process still running: one
    of a test that failed before it ended (a play of 100000 episodes that a signal did not
    stop) would otherwise run on beside the rest of the suite."""
    while _SESSIONS:
        process = _SESSIONS.pop()
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def send_as_user(process, sig):
    """SIGINT as Ctrl-C sends it (to the process group), SIGHUP as a shell whose terminal
    closed sends it to its jobs (to the process group too), SIGTERM as ``kill <pid>`` does."""
    if sig in (signal.SIGINT, signal.SIGHUP):
        os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)


def sigterm_as_the_training_envs_give_episodes(monkeypatch, when=lambda made: True):
    """Make the training envs (the first ``alf_lite.trainer.create_environment`` builds) get a
    SIGTERM as they are asked for their episodes, whenever ``when(made)`` holds (``made``:
    the envs built so far); a checkpoint asks, in process as with env processes."""
    from alf_lite import trainer as trainer_module

    real_create = trainer_module.create_environment
    made = []

    def create_signalling(*args, **kwargs):
        env = real_create(*args, **kwargs)
        made.append(env)
        if len(made) == 1:
            real_call = env._env.call

            def call(name, *call_args, **call_kwargs):
                if name == 'alf_lite_episode_record' and when(made):
                    os.kill(os.getpid(), signal.SIGTERM)
                return real_call(name, *call_args, **call_kwargs)

            monkeypatch.setattr(env._env, 'call', call)
        return env

    monkeypatch.setattr(trainer_module, 'create_environment', create_signalling)


class ClockSetBack(types.ModuleType):
    """The ``time`` module, but with a wall clock set back ``seconds`` once first read, as NTP
    stepping it or someone setting it would: for a module's ``time``, to see that it measures
    durations with a clock no one sets."""

    def __init__(self, seconds: float):
        super().__init__('time')
        self.__dict__.update({k: v for k, v in vars(time).items() if k != 'time'})
        self._set_back = 0.0
        self._seconds = seconds

    def time(self) -> float:
        now = time.time() - self._set_back
        self._set_back = self._seconds
        return now
