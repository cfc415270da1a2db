"""Running ``python -m alf_lite.bin.train`` from tests: commands, environment, kills."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def train_command(root_dir, gin_files=(), params=()):
    command = [sys.executable, '-m', 'alf_lite.bin.train', '--root_dir', str(root_dir)]
    for gin_file in gin_files:
        command += ['--gin_file', str(gin_file)]
    for param in params:
        command += ['--gin_param', param]
    return command


def train_env():
    env = dict(os.environ, OMP_NUM_THREADS='1')
    # alf_lite may not be installed (no `pip install -e`): make this checkout importable
    # from any working directory.
    env['PYTHONPATH'] = os.pathsep.join(
        [str(REPO_ROOT)] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else [])
    )
    return env


def python_output(script: str) -> str:
    """The standard output of ``script`` run in a fresh Python process with this checkout."""
    return subprocess.run(
        [sys.executable, '-c', script], capture_output=True, text=True, check=True, env=train_env()
    ).stdout


def run_train(command, cwd=REPO_ROOT, **kwargs):
    """Run ``command`` to its end, output captured; ``kwargs`` go to ``subprocess.run``."""
    return subprocess.run(
        command,
        cwd=cwd,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        **kwargs,
    )


def assert_ok(result):
    assert result.returncode == 0, (
        f'exit {result.returncode}\n--- stderr (tail) ---\n{result.stderr[-4000:]}'
    )


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
