"""Benchmark scripts run as a user runs them: a script path, from another directory."""

import os
import re
import subprocess
import sys

import pytest

from cli_helpers import (
    EXAMPLES,
    REPO_ROOT,
    RUN_TIMEOUT_S,
    TINY,
    assert_ok,
    run_train,
    train_command,
)


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
        r'pure-update ceiling on cpu: alf_lite \(1 torch threads\) ([\d.]+) updates/s, '
        r'SB3 \(1\) ([\d.]+) updates/s',
        result.stdout,
    )
    assert found and float(found[1]) > 0 and float(found[2]) > 0, result.stdout


def test_icub_gait_plays_the_policy_and_both_baselines_on_the_runs_eval_seeds(tmp_path):
    root_dir = tmp_path / 'icub'
    params = TINY + [
        'create_environment.num_parallel_environments=1',
        'TrainerConfig.initial_collect_steps=1',
        'TrainerConfig.num_env_steps=2',
        'TrainerConfig.num_eval_episodes=1',
    ]
    assert_ok(run_train(train_command(root_dir, [EXAMPLES / 'sac_icub_walking.gin'], params)))
    gait = [sys.executable, str(REPO_ROOT / 'benchmarks' / 'icub_gait.py')]
    result = run_train(
        gait + ['--root_dir', str(root_dir), '--num_episodes', '1', '--noise_std', '0.5'],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # (PyBullet writes 'argv[0]=' lines to stdout.)
    lines = [line for line in result.stdout.splitlines() if not line.startswith('argv')]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {'policy', 'zero', 'random', 'zero+N(0,0.5)'}, result.stdout
    # The zero action holds the standing pose until the 200-step limit (10 s at 20 Hz);
    # random actions fall.
    assert 'length  200.0 steps (10.00 s)  fell 0/1' in rows['zero'], rows['zero']
    assert 'fell 1/1' in rows['random'], rows['random']
    assert 'fell 1/1' in rows['zero+N(0,0.5)'], rows['zero+N(0,0.5)']
    assert lines[0].startswith(f'{root_dir}/checkpoints/ckpt-2, 1 episodes'), lines[0]

    other = tmp_path / 'pendulum'
    other.mkdir()
    (other / 'config.gin').write_text("create_environment.env_name = 'Pendulum-v1'\n")
    refused = run_train(gait + ['--root_dir', str(other)], cwd=tmp_path)
    assert refused.returncode == 2 and 'trained on Pendulum-v1, not ICubWalk-v0' in refused.stderr


def test_time_to_solve_runs_both_libraries_and_reports_the_ratio(tmp_path):
    pytest.importorskip('stable_baselines3')
    # A threshold any policy reaches: each run stops at its first evaluation, which
    # for alf_lite is the initial policy's and for SB3's EvalCallback the one after
    # 1000 steps.
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / 'time_to_solve.py'), '--seeds', '0']
        + ['--threshold', '-5000', '--max_steps', '1000', '--precision', 'bfloat16']
        + ['--threads', '1', '--sb3_threads', '1'],
        cwd=tmp_path,
        env={**os.environ, 'OMP_NUM_THREADS': '1'},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name, steps in (('alf_lite', 0), ('sb3', 1000)):
        assert re.search(rf'seed 0 {name} *: solved at {steps} env steps', result.stdout), (
            result.stdout
        )
    assert 'torch threads: alf_lite 1, SB3 1, alf_lite in bfloat16' in result.stdout
    assert re.search(r'ratio alf_lite / SB3 \(median seconds\): [\d.]+', result.stdout)
