"""train_server.py's children against fresh interpreters: what the other tests rely on."""

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import cli_helpers
from cli_helpers import train_env, train_server

PROBE = """
import atexit
import os
import sys

atexit.register(lambda: print('atexit ran'))
print('name', __name__)
print('argv', sys.argv[1:], os.path.basename(sys.argv[0]))
print('path0', sys.path[0])
print('cwd', os.getcwd())
print('environment', sorted(os.environ.items()))
print('variable', os.environ.get('ALF_LITE_PROBE'))
print('stdin', repr(sys.stdin.read()))
print('to stderr', file=sys.stderr)
if sys.argv[1:] == ['sleep']:
    import time

    sys.stdout.flush()
    time.sleep(60)
sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
"""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A module ``train_server_probe`` in ``tmp_path``, which is the working directory."""
    (tmp_path / 'train_server_probe.py').write_text(PROBE)
    monkeypatch.setenv('ALF_LITE_PROBE', 'from the test')
    return [sys.executable, '-m', 'train_server_probe']


def test_a_served_child_runs_the_module_as_python_m_would(tmp_path, probe):
    fresh = subprocess.run(
        probe + ['3', '--flag'], cwd=tmp_path, env=train_env(), capture_output=True, text=True
    )
    served = train_server.run(probe + ['3', '--flag'], tmp_path, timeout=60)
    assert served.returncode == fresh.returncode == 3
    # The environment too: the request's, without what the server's imports set in theirs.
    assert served.stdout == fresh.stdout
    assert served.stderr == fresh.stderr == 'to stderr\n'
    assert f"argv ['3', '--flag'] train_server_probe.py\npath0 {tmp_path}\n" in served.stdout
    assert "variable from the test\nstdin ''\n" in served.stdout
    assert served.stdout.startswith('name __main__\n')
    assert served.stdout.endswith('atexit ran\n')


def test_a_served_child_past_its_timeout_is_killed_and_the_server_goes_on(tmp_path, probe):
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        train_server.run(probe + ['sleep'], tmp_path, timeout=3)
    # Killed at its timeout, not waited for to the end of its 60 s sleep.
    assert time.monotonic() - start < 30
    assert 'cwd' in raised.value.output  # what it printed before
    assert train_server.run(probe, tmp_path, timeout=60).returncode == 0


def test_a_served_child_ended_by_a_signal_returns_minus_the_signal(tmp_path):
    (tmp_path / 'killed_probe.py').write_text('import os, signal\nos.kill(os.getpid(), 9)\n')
    result = train_server.run([sys.executable, '-m', 'killed_probe'], tmp_path, timeout=60)
    assert result.returncode == -9
    # The server itself is unharmed: each run is a child of its own.
    assert train_server.run([sys.executable, '-m', 'killed_probe'], tmp_path, 60).returncode == -9
    assert os.path.exists(tmp_path / 'killed_probe.py')


def test_a_served_childs_relative_working_directory_is_taken_from_the_tests(
    tmp_path, monkeypatch, probe
):
    monkeypatch.chdir(tmp_path)  # not the server's working directory
    served = train_server.run(probe, '.', timeout=60)
    assert served.returncode == 0, served.stderr
    assert f'cwd {tmp_path}\n' in served.stdout


# Ends without the interpreter's shutdown, which takes a second in a child of the server.
QUICK_PROBE = 'import os, sys\nprint(sys.argv[1:], flush=True)\nos._exit(5)\n'


def test_answers_read_together_are_each_taken_in_turn(tmp_path, monkeypatch):
    (tmp_path / 'quick_probe.py').write_text(QUICK_PROBE)
    real_read = os.read

    def late_read(fd, size):
        time.sleep(0.3)  # the child ended meanwhile: its pid and exit status come in one read
        return real_read(fd, size)

    monkeypatch.setattr(os, 'read', late_read)
    result = train_server.run([sys.executable, '-m', 'quick_probe'], tmp_path, timeout=10)
    assert result.returncode == 5


def test_runs_from_two_threads_take_turns(tmp_path):
    (tmp_path / 'quick_probe.py').write_text('import time\ntime.sleep(0.2)\n' + QUICK_PROBE)
    results = {}

    def run(word):
        command = [sys.executable, '-m', 'quick_probe', word]
        results[word] = train_server.run(command, tmp_path, timeout=10)

    threads = [threading.Thread(target=run, args=(word,)) for word in ('one', 'two')]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {word: (r.returncode, r.stdout) for word, r in results.items()} == {
        'one': (5, "['one']\n"),
        'two': (5, "['two']\n"),
    }


def test_a_server_that_died_is_reported_and_the_next_run_starts_another(tmp_path):
    (tmp_path / 'server_killer.py').write_text('import os\nos.kill(os.getppid(), 9)\nos._exit(0)\n')
    (tmp_path / 'quick_probe.py').write_text(QUICK_PROBE)
    open_files = []
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r'train_server.py ended \(exit -9\)'):
            train_server.run([sys.executable, '-m', 'server_killer'], tmp_path, timeout=10)
        result = train_server.run([sys.executable, '-m', 'quick_probe'], tmp_path, timeout=60)
        assert result.returncode == 5
        open_files.append(len(os.listdir('/proc/self/fd')))
    # The dead server's pipes and log were closed: a restart leaves none open.
    assert open_files[0] == open_files[1]


@pytest.mark.parametrize(
    'command, kwargs, variable, served',
    [
        (['-m', 'alf_lite.bin.train', '--root_dir', 'r'], {}, None, True),
        (['-m', 'alf_lite.bin.play'], {}, None, True),
        (['-m', 'alf_lite.bin.train'], {'fresh_interpreter': True}, None, False),
        (['-m', 'alf_lite.bin.train'], {'preexec_fn': print}, None, False),
        (['-m', 'alf_lite.bin.train'], {}, '1', False),
        (['-m', 'benchmarks.throughput'], {}, None, False),
        (['-c', 'alf_lite.bin.train'], {}, None, False),
    ],
)
def test_run_train_serves_the_tools_unless_told_to_start_them_afresh(
    monkeypatch, command, kwargs, variable, served
):
    calls = []
    monkeypatch.setattr(train_server, 'run', lambda *args: calls.append(('served', args)))
    monkeypatch.setattr(subprocess, 'run', lambda *args, **kw: calls.append(('fresh', kw)))
    if variable:
        monkeypatch.setenv(cli_helpers.FRESH_INTERPRETERS_VARIABLE, variable)
    else:
        monkeypatch.delenv(cli_helpers.FRESH_INTERPRETERS_VARIABLE, raising=False)
    cli_helpers.run_train([sys.executable, *command], cwd='somewhere', **kwargs)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    cli_helpers.run_train([sys.executable, *command], cwd='somewhere', **kwargs)
    ((how, args), (on_cuda, _)) = calls
    assert how == ('served' if served else 'fresh')
    assert on_cuda == 'fresh'
    if served:
        assert args == ([sys.executable, *command], 'somewhere', cli_helpers.RUN_TIMEOUT_S)
    else:
        assert args['cwd'] == 'somewhere' and args['timeout'] == cli_helpers.RUN_TIMEOUT_S
        assert ('preexec_fn' in args) == ('preexec_fn' in kwargs)


def test_a_started_python_c_child_runs_its_code_as_python_c_would(tmp_path):
    # Its standard output is discarded: the probe writes all to standard error.
    code = 'import sys\nsys.stdout = sys.stderr\nprint("path1", sys.path[1])\n' + PROBE
    env = train_env()
    env['PYTHONPATH'] = os.pathsep.join([str(tmp_path / 'lib'), env['PYTHONPATH']])
    command = [sys.executable, '-c', code, '3', '--flag']
    fresh = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    process = train_server.start(command, tmp_path / 'stderr', cwd=tmp_path, env=env)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == fresh.returncode == 3
    assert stderr == fresh.stderr
    assert f"path1 {tmp_path / 'lib'}\nname __main__\nargv ['3', '--flag'] -c\npath0 \n" in stderr
    assert stderr.endswith('atexit ran\n')


def test_a_child_started_in_a_session_of_its_own_is_signalled_and_waited_for(tmp_path):
    (tmp_path / 'sleeping_probe.py').write_text('import time\ntime.sleep(60)\n')
    command = [sys.executable, '-m', 'sleeping_probe']
    process = train_server.start(command, tmp_path / 'stderr', cwd=tmp_path, new_session=True)
    assert process.poll() is None and os.getsid(process.pid) == process.pid
    process.send_signal(15)
    assert process.wait(timeout=30) == -15 and process.poll() == -15
    # The server goes on with the next request.
    (tmp_path / 'quick_probe.py').write_text(QUICK_PROBE)
    quick = [sys.executable, '-m', 'quick_probe']
    assert train_server.run(quick, tmp_path, timeout=60).returncode == 5
