"""train_server.py's children against fresh interpreters: what the other tests rely on."""

import os
import subprocess
import sys

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
    assert served.stdout == fresh.stdout
    assert served.stderr == fresh.stderr == 'to stderr\n'
    assert f"argv ['3', '--flag'] train_server_probe.py\npath0 {tmp_path}\n" in served.stdout
    assert "variable from the test\nstdin ''\n" in served.stdout
    assert served.stdout.startswith('name __main__\n')
    assert served.stdout.endswith('atexit ran\n')


def test_a_served_child_past_its_timeout_is_killed_and_the_server_goes_on(tmp_path, probe):
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        train_server.run(probe + ['sleep'], tmp_path, timeout=3)
    assert 'cwd' in raised.value.output  # what it printed before
    assert train_server.run(probe, tmp_path, timeout=60).returncode == 0


def test_a_served_child_ended_by_a_signal_returns_minus_the_signal(tmp_path):
    (tmp_path / 'killed_probe.py').write_text('import os, signal\nos.kill(os.getpid(), 9)\n')
    result = train_server.run([sys.executable, '-m', 'killed_probe'], tmp_path, timeout=60)
    assert result.returncode == -9
    # The server itself is unharmed: each run is a child of its own.
    assert train_server.run([sys.executable, '-m', 'killed_probe'], tmp_path, 60).returncode == -9
    assert os.path.exists(tmp_path / 'killed_probe.py')


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
