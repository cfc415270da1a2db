"""Speed benchmark scripts run as a user runs them: a script path, from another directory."""

import os
import re
import subprocess
import sys

import pytest

from cli_helpers import REPO_ROOT, RUN_TIMEOUT_S


def test_throughput_ceilings_run_as_a_script_from_another_directory(tmp_path):
    pytest.importorskip('stable_baselines3')
    # As installed (`pip install -e .`): alf_lite imports from anywhere, the
    # benchmarks package only through the script's own path setup.
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['OMP_NUM_THREADS'] = '1'
    probe = [sys.executable, '-c', 'import alf_lite']
    if subprocess.run(probe, cwd=tmp_path, env=env, capture_output=True).returncode != 0:
        pytest.skip('alf_lite is not installed (pip install -e .), so a script cannot import it')
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / 'throughput.py'), '--ceiling_only']
        + ['--ceiling_updates', '3', '--learning_starts', '300', '--env', 'Pendulum-v1']
        + ['--threads', '1', '--sb3_threads', '1'],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.search(
        r'pure-update ceiling on cpu: alf_lite ([\d.]+) updates/s, SB3 ([\d.]+) updates/s',
        result.stdout,
    )
    assert found and float(found[1]) > 0 and float(found[2]) > 0, result.stdout
