r"""Learning curves of alf_lite, and of Stable-Baselines3 (SB3) with matched settings.

    python benchmarks/learning.py --suite pendulum              # train (resumes, skips done runs)
    python benchmarks/learning.py --suite pendulum --report     # PNGs in docs/, markdown tables

The other suites the same way (``--suite`` repeats), e.g.
``--suite hopper --suite halfcheetah`` or ``--suite study_mask --suite study_resample
--suite study_replay``. ``--jobs N`` (default 2) trains N runs at a time,
``--seeds 0 1`` and ``--runs 'sb3_*'`` (a glob on run names) select runs,
``--steps`` shortens them (smoke runs; use another ``--out``), ``--dry_run``
prints the commands, ``--docs_dir`` moves the report's PNGs.

Suites (default seeds in brackets; seed k of alf_lite and of SB3 is the same number):

- ``pendulum`` [0-4]: Pendulum-v1, 20k env steps, eval every 1000 steps. alf_lite
  SAC, DDPG and TD3 from ``examples/{sac,ddpg,td3}_pendulum.gin``; SB3 SAC and TD3.
- ``hopper`` [0-2]: Hopper-v5, 150k env steps, eval every 5000 steps. SAC and
  TD3, alf_lite (``examples/common/{sac,td3}.gin``) and SB3.
- ``halfcheetah`` [0-2]: HalfCheetah-v5 as ``hopper``, SAC only.
- ``study_mask`` [0-2]: alf_lite SAC with ``TrainerConfig.mask_out_loss_for_last_step``
  True / False, on Hopper-v5 (the ``hopper`` settings) and ICubWalk-v0
  (``examples/sac_icub_walking.gin``: 12 envs, (256, 128), lr 2e-3, 2000 random
  steps), 100k env steps each. The replay buffer holds the whole run (for
  ICubWalk-v0 ``ceil(steps / 12)`` per env instead of the gin file's 100k per env:
  the same training at this length, in a twelfth of the memory).
- ``study_resample`` [0-2]: as ``study_mask`` with ``SacAlgorithm.resample_action_per_loss``.
- ``study_replay`` [0-2]: ICubWalk-v0, 12 envs, 300k env steps, total replay
  capacity (``TrainerConfig.replay_buffer_length`` x 12) of 10K (833 per env),
  100K (8333 per env) and the whole run (``ceil(steps / 12)`` per env, never
  full: what a 1M buffer does in a run this long). The run is 300k steps so that
  100K and the whole run differ for two thirds of it (at 100k they would differ
  only in the last iteration).

Every evaluation runs the deterministic policy for 10 episodes on 10 separate
envs (seeded with ``alf_lite.seeding.eval_env_seeds(seed, 10)``, as alf_lite's
trainer does), at 0 env steps, every eval interval and at the end.

Matched settings (alf_lite's come from its gin files; SB3 gets the same values):
256x256 actor and critics, batch 256, gamma 0.99, tau 0.005, one env, one
gradient step per env step (SB3 ``train_freq=1, gradient_steps=1``), target
networks updated every step; uniform random actions for the first
``learning_starts`` env steps, training from the step after. Pendulum: Adam lr
1e-3, replay 100k, 1000 random steps. Hopper and HalfCheetah: lr 3e-4, 10k
random steps for both algorithms (the SAC paper's value; the TD3 reference's
25k would be a sixth of these 150k-step runs), and a replay buffer that holds
the whole run, which for runs this long is what the papers' 1M buffer does.
SAC: two critics, learned temperature starting at alpha = 1, target entropy
-|A|. TD3: Gaussian exploration N(0, 0.1), target policy noise 0.2 clipped to
0.5, actor and targets updated every 2 critic updates; all noise in units of
half the action range. A ``--steps`` at or below the random-step count lowers
that count to half the run (a note says so).

Known differences that remain: alf_lite counts the reset step after an
episode's last step as an env step (Pendulum: 1 in 201), SB3 does not; SB3
stores both observation and next observation, in the env's dtype (float64 for
MuJoCo), alf_lite each observation once in float32 (see the ``replay buffer``
column of the report); at an eval interval SB3 evaluates just before, alf_lite
just after, that env step's gradient step.

Layout: each run trains in ``<out>/<suite>/<run_name>/seed<k>`` with its
output in ``<out>/<suite>/logs/<run_name>.seed<k>.log``. alf_lite runs are
``python -m alf_lite.bin.train`` processes with ``TrainerConfig.torch_num_threads=1``;
SB3 runs are processes of this script (hidden ``--_sb3_run``) with one torch
thread, writing ``config.gin`` (a description of the run with alf_lite's
binding names, which differ between seeds only in ``TrainerConfig.random_seed``)
and a ``progress.csv`` with alf_lite's columns, so ``python -m alf_lite.bin.plot``
reads and groups both. A finished run gets ``done.json`` (wall time summed over
attempts, env steps, final eval return) and is skipped when the script runs
again; an interrupted alf_lite run resumes from its last checkpoint, an
interrupted SB3 run starts again from scratch (SB3 runs are therefore started
first). ``--deadline`` (minutes, ``HH:MM`` or an ISO time) starts no run whose
estimated time would end after it: the slowest measured wall time per env step
of finished runs of the same framework, algorithm and env, times the steps left,
plus 20%. ``<out>/plan.json`` records every requested run's state (done,
deferred, started, ...). ``done.json`` also keeps the code version (git commit)
and the mean 1-minute load average while the run trained, so wall times
measured under shared load show as such.

``--report`` plots each suite's runs per task with ``alf_lite.bin.plot``
(``<docs_dir>/<suite>.png``, or ``<suite>_<task>.png`` for suites with several
tasks; ``study_mask`` also ``..._length.png``, the eval episode length) and
prints one markdown table per suite: the final eval return (each run's mean
over its last 3 evaluations; mean over runs and 95% bootstrap CI, computed as
``alf_lite.bin.plot`` computes it), seeds, env steps, median wall time per run
and replay buffer size (alf_lite logs ``train/replay_buffer_bytes``).
"""
import argparse
import concurrent.futures
import csv
import datetime
import fnmatch
import glob
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

DONE_FILE = 'done.json'
PLAN_FILE = 'plan.json'
# --deadline: a run starts only if its estimated time times this fits.
DEADLINE_MARGIN = 1.2
# How often the 1-minute load average is sampled while a run trains.
LOAD_SAMPLE_S = 30
# An attempt this long or longer measures a run's time per env step.
MIN_MEASURED_S = 300
PROGRESS_FILE = 'progress.csv'
EVAL_RETURN = 'eval/AverageReturn'
EVAL_LENGTH = 'eval/AverageEpisodeLength'
REPLAY_BYTES = 'train/replay_buffer_bytes'
NUM_EVAL_EPISODES = 10
# Final performance of a run: the mean of its last this many evaluations.
LAST_N = 3
NUM_BOOTSTRAP = 10000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
SB3_COLUMNS = ['env_steps', 'num_updates', 'wall_time', EVAL_RETURN, EVAL_LENGTH,
               'train/AverageReturn', 'train/AverageEpisodeLength', 'train/env_steps_per_sec',
               REPLAY_BYTES]
# SB3's train/AverageReturn: mean of this many most recent episodes, as alf_lite's.
TRAIN_METRIC_WINDOW = 10


@dataclass(frozen=True)
class Task:
    """An environment with its schedule and the settings both frameworks share."""
    env: str
    tag: str                       # short name in run names and file names
    learning_starts: int           # uniform random env steps before training
    eval_interval: int
    checkpoint_interval: int
    lr: float
    num_envs: int = 1
    summary_interval: int = 1000
    # Total replay capacity; None: the whole run.
    replay_capacity: Optional[int] = None
    # alf_lite gin file per algorithm, relative to the repository root.
    gin_files: Tuple[Tuple[str, str], ...] = ()
    # Whether the gin file already sets the env, the schedule and the buffer.
    complete_gin: bool = False
    # Wall seconds per env step assumed for --deadline until a run of the same
    # framework, algorithm and env has finished (then its measured rate is used).
    assumed_seconds_per_step: float = 0.012

    def gin_file(self, algo: str) -> str:
        return dict(self.gin_files)[algo]


PENDULUM = Task('Pendulum-v1', 'pendulum', learning_starts=1000, eval_interval=1000,
                checkpoint_interval=5000, lr=1e-3, replay_capacity=100_000,
                gin_files=(('sac', 'examples/sac_pendulum.gin'),
                           ('ddpg', 'examples/ddpg_pendulum.gin'),
                           ('td3', 'examples/td3_pendulum.gin')), complete_gin=True)
_MUJOCO = dict(learning_starts=10_000, eval_interval=5000, checkpoint_interval=25_000, lr=3e-4,
               gin_files=(('sac', 'examples/common/sac.gin'), ('td3', 'examples/common/td3.gin')))
HOPPER = Task('Hopper-v5', 'hopper', **_MUJOCO)
HALFCHEETAH = Task('HalfCheetah-v5', 'halfcheetah', **_MUJOCO)
# Eval and checkpoint intervals are multiples of the 12 steps an iteration collects.
ICUB = Task('ICubWalk-v0', 'icub', learning_starts=2000, eval_interval=6000,
            checkpoint_interval=24_000, lr=2e-3, num_envs=12, summary_interval=1200,
            gin_files=(('sac', 'examples/sac_icub_walking.gin'),), complete_gin=True,
            assumed_seconds_per_step=0.004)


@dataclass(frozen=True)
class Run:
    """One training run: a framework, an algorithm, a task, a seed and a length."""
    suite: str
    name: str
    framework: str                 # 'alf_lite' or 'sb3'
    algo: str                      # 'sac', 'ddpg' or 'td3'
    task: Task
    seed: int
    num_env_steps: int
    setting: str = ''              # what the run studies, for the report
    gin_params: Tuple[str, ...] = ()
    replay_capacity: Optional[int] = None

    @property
    def key(self) -> str:
        return f'{self.suite}/{self.name}/seed{self.seed}'

    def run_dir(self, out: str) -> str:
        return os.path.join(out, self.suite, self.name, f'seed{self.seed}')

    def log_path(self, out: str, suffix: str = '.log') -> str:
        return os.path.join(out, self.suite, 'logs', f'{self.name}.seed{self.seed}{suffix}')

    @property
    def learning_starts(self) -> int:
        starts = self.task.learning_starts
        return starts if starts < self.num_env_steps else self.num_env_steps // 2

    @property
    def replay_length_per_env(self) -> int:
        """Rows per env: the capacity spread over the envs, or the whole run."""
        capacity = self.replay_capacity or self.task.replay_capacity
        n = self.task.num_envs
        if capacity is None:
            return math.ceil(self.num_env_steps / n)
        return max(2, int(capacity / n + 0.5))

    @property
    def label(self) -> str:
        return self.setting or self.algo.upper()


# name -> (default env steps, default seeds, grouping key for plot.py)
SUITES = {
    'pendulum': (20_000, range(5), 'TrainerConfig.algorithm_ctor'),
    'hopper': (150_000, range(3), 'TrainerConfig.algorithm_ctor'),
    'halfcheetah': (150_000, range(3), 'TrainerConfig.algorithm_ctor'),
    'study_mask': (100_000, range(3), 'TrainerConfig.mask_out_loss_for_last_step'),
    'study_resample': (100_000, range(3), 'SacAlgorithm.resample_action_per_loss'),
    'study_replay': (300_000, range(3), 'TrainerConfig.replay_buffer_length'),
}
REPLAY_STUDY = (('10k', 10_000), ('100k', 100_000), ('full', None))


def suite_runs(suite: str, seeds: Optional[Sequence[int]] = None,
               steps: Optional[int] = None) -> List[Run]:
    """The runs of a suite, seed-major within each configuration."""
    default_steps, default_seeds, _ = SUITES[suite]
    steps = steps or default_steps
    seeds = list(default_seeds if seeds is None else seeds)
    configs = []  # (name, framework, algo, task, setting, gin params, replay capacity)
    if suite in ('pendulum', 'hopper', 'halfcheetah'):
        task = {'pendulum': PENDULUM, 'hopper': HOPPER, 'halfcheetah': HALFCHEETAH}[suite]
        alf_algos = {'pendulum': ('sac', 'ddpg', 'td3'), 'hopper': ('sac', 'td3'),
                     'halfcheetah': ('sac',)}[suite]
        sb3_algos = tuple(a for a in alf_algos if a in ('sac', 'td3'))
        configs += [(f'alf_{a}', 'alf_lite', a, task, '', (), None) for a in alf_algos]
        configs += [(f'sb3_{a}', 'sb3', a, task, '', (), None) for a in sb3_algos]
    elif suite in ('study_mask', 'study_resample'):
        param, short = {
            'study_mask': ('TrainerConfig.mask_out_loss_for_last_step', 'mask'),
            'study_resample': ('SacAlgorithm.resample_action_per_loss', 'resample')}[suite]
        for task in (HOPPER, ICUB):
            for value in (True, False):
                configs.append((f'{task.tag}_{short}_{str(value).lower()}', 'alf_lite', 'sac',
                                task, f'{param.split(".")[-1]}={value}',
                                (f'{param}={value}',), None))
    elif suite == 'study_replay':
        for name, capacity in REPLAY_STUDY:
            setting = f'replay {name}' + (' (whole run)' if capacity is None else '')
            configs.append((f'icub_replay_{name}', 'alf_lite', 'sac', ICUB, setting, (),
                            capacity))
    else:
        raise ValueError(f'unknown suite {suite!r}; the suites are: {", ".join(SUITES)}')
    return [Run(suite, name, framework, algo, task, seed, steps, setting, params, capacity)
            for name, framework, algo, task, setting, params, capacity in configs
            for seed in seeds]


# ---------------------------------------------------------------------------------------------
# alf_lite runs

def alf_gin_params(run: Run) -> List[str]:
    """The ``--gin_param`` bindings of an alf_lite run, after its gin file."""
    task = run.task
    params = [] if task.complete_gin else [
        f'create_environment.env_name="{task.env}"',
        f'create_environment.num_parallel_environments={task.num_envs}',
        f'TrainerConfig.summary_interval={task.summary_interval}']
    params += [
        f'TrainerConfig.replay_buffer_length={run.replay_length_per_env}',
        f'TrainerConfig.num_env_steps={run.num_env_steps}',
        f'TrainerConfig.initial_collect_steps={run.learning_starts}',
        f'TrainerConfig.eval_interval={task.eval_interval}',
        f'TrainerConfig.num_eval_episodes={NUM_EVAL_EPISODES}',
        f'TrainerConfig.checkpoint_interval={task.checkpoint_interval}',
        f'TrainerConfig.random_seed={run.seed}',
        'TrainerConfig.torch_num_threads=1',
    ]
    return params + list(run.gin_params)


def run_command(run: Run, out: str, steps_override: Optional[int]) -> List[str]:
    """The command that trains (or resumes) ``run``."""
    if run.framework == 'alf_lite':
        command = [sys.executable, '-m', 'alf_lite.bin.train', '--gin_file',
                   run.task.gin_file(run.algo), '--root_dir', run.run_dir(out)]
        for param in alf_gin_params(run):
            command += ['--gin_param', param]
        return command
    command = [sys.executable, os.path.relpath(os.path.abspath(__file__), REPO_ROOT),
               '--_sb3_run', '--suite', run.suite, '--runs', run.name, '--seeds', str(run.seed),
               '--out', out]
    if steps_override:
        command += ['--steps', str(steps_override)]
    return command


def subprocess_env() -> Dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
    env['PYTHONPATH'] = os.pathsep.join(
        [REPO_ROOT] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
    return env


# ---------------------------------------------------------------------------------------------
# SB3 runs

def sb3_settings(run: Run) -> Dict[str, object]:
    """Constructor arguments of the SB3 algorithm, matched to alf_lite's gin settings."""
    settings = dict(learning_rate=run.task.lr, buffer_size=run.replay_length_per_env,
                    learning_starts=run.learning_starts, batch_size=256, tau=0.005, gamma=0.99,
                    train_freq=1, gradient_steps=1, net_arch=[256, 256])
    if run.algo == 'sac':
        settings.update(ent_coef='auto', target_entropy='auto', target_update_interval=1)
    elif run.algo == 'td3':
        settings.update(exploration_noise_sigma=0.1, policy_delay=2, target_policy_noise=0.2,
                        target_noise_clip=0.5)
    else:
        raise ValueError(f'no SB3 settings for {run.algo!r}')
    return settings


def sb3_config_text(run: Run, settings: Dict[str, object]) -> str:
    """``config.gin`` of an SB3 run: alf_lite's binding names where they exist."""
    cls = f'stable_baselines3.{run.algo.upper()}'
    bindings = {
        'TrainerConfig.algorithm_ctor': f'@{cls}',
        'TrainerConfig.random_seed': run.seed,
        'TrainerConfig.num_env_steps': run.num_env_steps,
        'TrainerConfig.initial_collect_steps': run.learning_starts,
        'TrainerConfig.mini_batch_size': settings['batch_size'],
        'TrainerConfig.replay_buffer_length': settings['buffer_size'],
        'TrainerConfig.eval_interval': run.task.eval_interval,
        'TrainerConfig.num_eval_episodes': NUM_EVAL_EPISODES,
        'create_environment.env_name': repr(run.task.env),
        'create_environment.num_parallel_environments': 1,
    }
    for name, value in sorted(settings.items()):
        bindings[f'{cls}.{name}'] = repr(tuple(value) if isinstance(value, list) else value)
    lines = ['# A Stable-Baselines3 run of benchmarks/learning.py. Not an alf_lite config:',
             "# it describes the run in alf_lite's binding names so that alf_lite.bin.plot",
             '# can group it.']
    lines += [f'{name} = {value}' for name, value in bindings.items()]
    return '\n'.join(lines) + '\n'


class _EvalEnvs:
    """``NUM_EVAL_EPISODES`` envs, one deterministic episode on each per evaluation."""

    def __init__(self, env_id: str, seed: int):
        import gymnasium

        from alf_lite.seeding import eval_env_seeds
        self._envs = [gymnasium.make(env_id) for _ in range(NUM_EVAL_EPISODES)]
        self._seeds = eval_env_seeds(seed, NUM_EVAL_EPISODES)
        self._first = True

    def evaluate(self, model) -> Tuple[float, float]:
        import numpy as np
        seeds = self._seeds if self._first else [None] * len(self._envs)
        self._first = False
        obs = np.stack([env.reset(seed=s)[0] for env, s in zip(self._envs, seeds)])
        returns = np.zeros(len(self._envs))
        lengths = np.zeros(len(self._envs), dtype=np.int64)
        running = np.ones(len(self._envs), dtype=bool)
        while running.any():
            index = np.flatnonzero(running)
            actions, _ = model.predict(obs[index], deterministic=True)
            for action, i in zip(actions, index):
                obs[i], reward, terminated, truncated, _ = self._envs[i].step(action)
                returns[i] += float(reward)
                lengths[i] += 1
                running[i] = not (terminated or truncated)
        return float(returns.mean()), float(lengths.mean())

    def close(self):
        for env in self._envs:
            env.close()


def _replay_bytes(replay_buffer) -> int:
    import numpy as np
    return int(sum(v.nbytes for v in vars(replay_buffer).values() if isinstance(v, np.ndarray)))


def sb3_train(run: Run, out: str) -> None:
    """Train one SB3 run from scratch into its run directory (the ``--_sb3_run`` mode)."""
    import gymnasium
    import numpy as np
    import torch
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(1)
    if run.task.env not in gymnasium.registry:
        import alf_lite.environments  # noqa: F401  (registers alf_lite's own ids)
    run_dir = run.run_dir(out)
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    os.makedirs(run_dir)
    settings = sb3_settings(run)
    with open(os.path.join(run_dir, 'config.gin'), 'w') as f:
        f.write(sb3_config_text(run, settings))

    kwargs = dict(settings)
    kwargs['policy_kwargs'] = dict(net_arch=kwargs.pop('net_arch'))
    env = gymnasium.make(run.task.env)
    if run.algo == 'td3':
        sigma = kwargs.pop('exploration_noise_sigma')
        dim = env.action_space.shape[0]
        # SB3 adds action noise in the [-1, 1] action space, as alf_lite does.
        kwargs['action_noise'] = NormalActionNoise(np.zeros(dim), sigma * np.ones(dim))
    model = {'sac': SAC, 'td3': TD3}[run.algo]('MlpPolicy', env, seed=run.seed, device='cpu',
                                               verbose=0, **kwargs)
    eval_envs = _EvalEnvs(run.task.env, run.seed)
    progress = open(os.path.join(run_dir, PROGRESS_FILE), 'w', newline='')
    writer = csv.DictWriter(progress, SB3_COLUMNS)
    writer.writeheader()
    interval = run.task.eval_interval

    class Progress(BaseCallback):
        """Evaluates and writes a progress.csv row at 0, every ``interval`` steps and at the end."""

        def __init__(self):
            super().__init__()
            self._last_row = None
            self._last_time = self._last_steps = None

        def _write(self):
            now = time.time()
            avg_return, avg_length = eval_envs.evaluate(self.model)
            episodes = list(self.model.ep_info_buffer)[-TRAIN_METRIC_WINDOW:]
            steps = self.num_timesteps
            row = {'env_steps': steps, 'num_updates': self.model._n_updates, 'wall_time': now,
                   EVAL_RETURN: avg_return, EVAL_LENGTH: avg_length,
                   REPLAY_BYTES: _replay_bytes(self.model.replay_buffer)}
            if episodes:
                row['train/AverageReturn'] = float(np.mean([e['r'] for e in episodes]))
                row['train/AverageEpisodeLength'] = float(np.mean([e['l'] for e in episodes]))
            if self._last_time is not None and steps > self._last_steps:
                row['train/env_steps_per_sec'] = (steps - self._last_steps) / max(
                    now - self._last_time, 1e-9)
            writer.writerow(row)
            progress.flush()
            self._last_row, self._last_time, self._last_steps = steps, time.time(), steps
            print(f'env steps {steps}: eval return {avg_return:.2f}, episode length '
                  f'{avg_length:.1f}', flush=True)

        def _on_training_start(self):
            self._write()

        def _on_step(self):
            if self.num_timesteps % interval == 0:
                self._write()
            return True

        def _on_training_end(self):
            if self._last_row != self.num_timesteps:
                self._write()

    try:
        model.learn(total_timesteps=run.num_env_steps, callback=Progress())
    finally:
        progress.close()
        eval_envs.close()
        env.close()


# ---------------------------------------------------------------------------------------------
# Running the suites

def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path: str, data) -> None:
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(data, f, indent=1)
        f.write('\n')
    os.replace(tmp, path)


def _scalar(run_dir: str, y: str):
    """``(env steps, values)`` of a scalar of a run; empty arrays when it has none yet."""
    import numpy as np

    from alf_lite.runs import read_scalar
    try:
        return read_scalar(run_dir, y)
    except (OSError, ValueError):
        return np.zeros(0), np.zeros(0)


def _error_line(log_path: str, offset: int) -> str:
    with open(log_path, errors='replace') as f:
        f.seek(offset)
        lines = [line.strip() for line in f.read().replace('\r', '\n').splitlines()
                 if line.strip()]
    for line in reversed(lines):
        if line.startswith('error:') or 'Error' in line.split(':')[0] or line.startswith(
                'KeyboardInterrupt'):
            return line
    return lines[-1] if lines else 'no output'


class Launcher:
    """Runs the runs, ``jobs`` at a time; SIGINT / SIGTERM stop them (alf_lite checkpoints)."""

    def __init__(self, out: str, steps_override: Optional[int], deadline: Optional[float] = None):
        self._out = out
        self._steps_override = steps_override
        self._deadline = deadline
        self._lock = threading.Lock()
        self._processes = set()
        self.stopping = False

    def stop(self, signum, frame=None):
        with self._lock:
            self.stopping = True
            for process in self._processes:
                if process.poll() is None:
                    process.send_signal(signum)

    def execute(self, run: Run) -> dict:
        """Train ``run`` unless done; returns ``{'run', 'status', 'detail', ...}``."""
        out = self._out
        run_dir = run.run_dir(out)
        done = _read_json(os.path.join(run_dir, DONE_FILE))
        if done is not None:
            if done.get('target_env_steps') != run.num_env_steps:
                return dict(run=run, status='failed', detail=(
                    f'{run_dir} finished a run of {done.get("target_env_steps")} env steps, not '
                    f'{run.num_env_steps}: move it away or choose another --out'))
            return dict(run=run, status='skipped', detail='already done', done=done)
        if self.stopping:
            return dict(run=run, status='not started', detail='stopped')
        if self._deadline is not None:
            seconds, source = estimate_seconds(run, out)
            if time.time() + DEADLINE_MARGIN * seconds > self._deadline:
                return dict(run=run, status='deferred', detail=(
                    f'needs about {_duration(seconds)} ({source}), which would end after the '
                    f'deadline {time.strftime("%H:%M", time.localtime(self._deadline))}'))
        log_path = run.log_path(out)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        command = run_command(run, out, self._steps_override)
        attempts_path = run.log_path(out, '.attempts.json')
        attempts = _read_json(attempts_path) or []
        resumed = run.framework == 'alf_lite' and os.path.isfile(
            os.path.join(run_dir, 'config.gin'))
        start, steps_from = time.time(), _last_env_steps(run_dir) if resumed else 0
        with open(log_path, 'a') as log:
            log.write(f'\n=== {time.strftime("%Y-%m-%d %H:%M:%S")}: {shlex.join(command)}\n')
            log.flush()
            offset = log.tell()
            with self._lock:
                if self.stopping:
                    return dict(run=run, status='not started', detail='stopped')
                process = subprocess.Popen(command, cwd=REPO_ROOT, env=subprocess_env(),
                                           stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT)
                self._processes.add(process)
            loads, stopped_at_deadline = [], False
            try:
                while True:
                    timeout = LOAD_SAMPLE_S
                    if self._deadline is not None and not stopped_at_deadline:
                        timeout = min(timeout, max(1.0, self._deadline - time.time()))
                    try:
                        returncode = process.wait(timeout=timeout)
                        break
                    except subprocess.TimeoutExpired:
                        loads.append(os.getloadavg()[0])
                    # An alf_lite run still going at the deadline checkpoints and
                    # stops; the next call resumes it. SB3 runs started only if
                    # they fit, and cannot resume.
                    if (run.framework == 'alf_lite' and not stopped_at_deadline
                            and self._deadline is not None and time.time() > self._deadline):
                        process.send_signal(signal.SIGTERM)
                        stopped_at_deadline = True
            finally:
                with self._lock:
                    self._processes.discard(process)
        wall = time.time() - start
        attempts.append(dict(started=start, wall_time_s=wall, returncode=returncode,
                             env_steps_from=steps_from, env_steps_to=_last_env_steps(run_dir),
                             kind=[run.framework, run.algo, run.task.env],
                             mean_load=statistics.mean(loads) if loads else None,
                             code=code_version()))
        _write_json(attempts_path, attempts)
        if returncode != 0:
            status = 'interrupted' if returncode in (130, 143, -2, -15) else 'failed'
            if stopped_at_deadline:
                status, returncode = 'deferred', 'stopped at the deadline'
            return dict(run=run, status=status, wall_time_s=wall,
                        detail=f'exit code {returncode}: {_error_line(log_path, offset)} '
                               f'(log: {log_path})')
        steps, returns = _scalar(run_dir, EVAL_RETURN)
        if len(returns) == 0:
            return dict(run=run, status='failed', detail=f'no {EVAL_RETURN} in {run_dir}')
        done = dict(framework=run.framework, algo=run.algo, env=run.task.env, seed=run.seed,
                    setting=run.setting, target_env_steps=run.num_env_steps,
                    env_steps=int(steps[-1]), final_eval_return=float(returns[-1]),
                    final_eval_return_last3=float(returns[-LAST_N:].mean()),
                    wall_time_s=sum(a['wall_time_s'] for a in attempts),
                    attempts=len(attempts), finished=time.strftime('%Y-%m-%d %H:%M:%S'),
                    mean_load=_mean_load(attempts), cpus=os.cpu_count(),
                    code=sorted({a.get('code') or 'unknown' for a in attempts}))
        _write_json(os.path.join(run_dir, DONE_FILE), done)
        return dict(run=run, status='done', wall_time_s=wall, done=done,
                    detail='resumed' if resumed else '')


def code_version() -> str:
    """The git commit of this checkout, with ``+dirty`` when files differ from it."""
    def git(*args):
        return subprocess.run(['git', *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        commit = git('rev-parse', '--short=12', 'HEAD')
        dirty = git('status', '--porcelain', '--untracked-files=no', '--', 'alf_lite',
                    'benchmarks', 'examples')
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'
    return commit + ('+dirty' if dirty else '')


def _mean_load(attempts: List[dict]) -> Optional[float]:
    """Time-weighted mean of the attempts' 1-minute load averages."""
    weighted = [(a['mean_load'], a['wall_time_s']) for a in attempts
                if a.get('mean_load') is not None]
    total = sum(w for _, w in weighted)
    return sum(x * w for x, w in weighted) / total if total else None


def _done_runs(out: str):
    """``(run directory, done.json)`` of every finished run under ``out``."""
    for path in glob.glob(os.path.join(out, '*', '*', 'seed*', DONE_FILE)):
        done = _read_json(path)
        if done:
            yield os.path.dirname(path), done


def _last_env_steps(run_dir: str) -> int:
    """Env steps of the last row of a run's progress.csv; 0 without one."""
    try:
        with open(os.path.join(run_dir, PROGRESS_FILE), newline='') as f:
            rows = list(csv.DictReader(f))
        return int(float(rows[-1]['env_steps'])) if rows else 0
    except (OSError, ValueError, KeyError):
        return 0


def estimate_seconds(run: Run, out: str) -> Tuple[float, str]:
    """Wall seconds ``run`` still needs, and where the rate comes from.

    The rate is the slowest measured wall time per env step of the finished
    runs under ``out`` with the same framework, algorithm and env (their load
    included), else the task's assumed rate. An alf_lite run that will resume
    needs only its remaining steps.
    """
    kind = (run.framework, run.algo, run.task.env)
    rates = [done['wall_time_s'] / done['env_steps'] for _, done in _done_runs(out)
             if (done.get('framework'), done.get('algo'), done.get('env')) == kind
             and done.get('env_steps')]
    # Attempts that stopped early measure the rate too (under the load they had).
    for path in glob.glob(os.path.join(out, '*', 'logs', '*.attempts.json')):
        for attempt in _read_json(path) or []:
            steps = attempt.get('env_steps_to', 0) - attempt.get('env_steps_from', 0)
            if (tuple(attempt.get('kind') or ()) == kind and steps > 0
                    and attempt['wall_time_s'] >= MIN_MEASURED_S):
                rates.append(attempt['wall_time_s'] / steps)
    if rates:
        rate, source = max(rates), f'measured over {len(rates)} runs or attempts'
    else:
        rate, source = run.task.assumed_seconds_per_step, 'assumed rate'
    steps = run.num_env_steps
    if run.framework == 'alf_lite':
        steps -= min(_last_env_steps(run.run_dir(out)), steps)
    return rate * steps, source


def parse_deadline(text: str, now: Optional[float] = None) -> float:
    """Seconds since the epoch of ``--deadline``: minutes from now, ``HH:MM`` or an ISO time.

    ``HH:MM`` is the next such local time (tomorrow when it has passed today).
    """
    now = time.time() if now is None else now
    try:
        return now + 60 * float(text)
    except ValueError:
        pass
    try:
        clock = datetime.datetime.strptime(text, '%H:%M').time()
    except ValueError:
        clock = None
    if clock is not None:
        today = datetime.datetime.fromtimestamp(now)
        end = datetime.datetime.combine(today.date(), clock)
        if end.timestamp() <= now:
            end += datetime.timedelta(days=1)
        return end.timestamp()
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f'--deadline takes minutes from now, HH:MM or an ISO date and time, '
                         f'got {text!r}') from None


def write_plan(out: str, runs: List[Run], results: Dict[str, dict]) -> None:
    """Record every run's state in ``<out>/plan.json`` (merged with runs of other calls)."""
    path = os.path.join(out, PLAN_FILE)
    plan = _read_json(path) or {}
    for run in runs:
        run_dir = run.run_dir(out)
        done = _read_json(os.path.join(run_dir, DONE_FILE))
        result = results.get(run.key, {})
        if done:
            entry = dict(status='done', final_eval_return_last3=done['final_eval_return_last3'],
                         wall_time_s=done['wall_time_s'], mean_load=done.get('mean_load'),
                         code=done.get('code'))
        else:
            status = result.get('status') or ('started' if os.path.isfile(
                os.path.join(run_dir, PROGRESS_FILE)) else 'pending')
            entry = dict(status=status, env_steps=_last_env_steps(run_dir),
                         detail=result.get('detail', ''))
        plan[run.key] = dict(entry, target_env_steps=run.num_env_steps,
                             framework=run.framework, algo=run.algo, env=run.task.env,
                             setting=run.setting)
    os.makedirs(out, exist_ok=True)
    _write_json(path, dict(sorted(plan.items())))


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f'{seconds:.0f} s'
    if seconds < 7200:
        return f'{seconds / 60:.1f} min'
    return f'{seconds / 3600:.2f} h'


def train_suites(runs: List[Run], args) -> int:
    """Trains the runs; prints one line per run and a summary. Returns the exit code."""
    launcher = Launcher(args.out, args.steps, args.deadline)
    previous = {s: signal.signal(s, launcher.stop) for s in (signal.SIGINT, signal.SIGTERM)}
    results, total = [], len(runs)
    # SB3 runs cannot resume: they go first, so that an unplanned stop is more
    # likely to cut an alf_lite run, which resumes from its checkpoint.
    runs = sorted(runs, key=lambda r: r.framework != 'sb3')
    write_plan(args.out, runs, {})
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {}
            for run in runs:
                futures[pool.submit(launcher.execute, run)] = run
            for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
                result = future.result()
                results.append(result)
                write_plan(args.out, runs, {r['run'].key: r for r in results})
                run, done = result['run'], result.get('done') or {}
                line = f'[{i}/{total}] {result["status"]:<11} {run.key}'
                if done:
                    line += (f': final eval return {done["final_eval_return"]:.2f} at '
                             f'{done["env_steps"]} env steps, {_duration(done["wall_time_s"])}')
                if result.get('detail'):
                    line += f' ({result["detail"]})' if done else f': {result["detail"]}'
                print(line, flush=True)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    counts: Dict[str, int] = {}
    for result in results:
        counts[result['status']] = counts.get(result['status'], 0) + 1
    print('\n' + ', '.join(f'{n} {status}' for status, n in sorted(counts.items())))
    if counts.get('interrupted') or counts.get('not started') or counts.get('deferred'):
        print('run the same command again to continue (alf_lite runs resume from their last '
              'checkpoint; SB3 runs start again)')
    return 1 if counts.get('failed') or counts.get('interrupted') else 0


# ---------------------------------------------------------------------------------------------
# Report

def bootstrap_ci(values, rng) -> Tuple[float, float, float]:
    """``(mean, lower, upper)``: the 95% percentile bootstrap CI of the mean over runs."""
    import numpy as np
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if len(values) == 1:
        return mean, mean, mean
    means = values[rng.integers(0, len(values), (NUM_BOOTSTRAP, len(values)))].mean(axis=1)
    alpha = (1 - CONFIDENCE) / 2 * 100
    lower, upper = np.percentile(means, [alpha, 100 - alpha])
    return mean, float(lower), float(upper)


def _seed_dirs(out: str, suite: str, name: str) -> List[str]:
    parent = os.path.join(out, suite, name)
    if not os.path.isdir(parent):
        return []
    dirs = [os.path.join(parent, d) for d in os.listdir(parent)
            if d.startswith('seed') and d[4:].isdigit()]
    return sorted((d for d in dirs if os.path.isfile(os.path.join(d, PROGRESS_FILE))),
                  key=lambda d: int(os.path.basename(d)[4:]))


def _plot(run_dirs: List[str], group_by: str, y: str, png: str) -> None:
    command = [sys.executable, '-m', 'alf_lite.bin.plot', *run_dirs, '--x', 'env_steps',
               '--y', y, '--group_by', group_by, '--last_n', str(LAST_N), '--out', png]
    result = subprocess.run(command, cwd=REPO_ROOT, env=subprocess_env(), capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise RuntimeError(f'{shlex.join(command)} failed (exit {result.returncode}):\n'
                           f'{result.stderr.strip()}')
    print(f'wrote {png}')


def _mib(nbytes: float) -> str:
    return f'{nbytes / 2**20:.1f} MiB'


def report_suite(suite: str, out: str, docs_dir: str) -> bool:
    """Plots the suite's runs and prints its table; False when it has no runs yet."""
    import numpy as np
    specs = {}
    for run in suite_runs(suite, seeds=[0]):
        specs.setdefault(run.name, run)
    found = {name: _seed_dirs(out, suite, name) for name in specs}
    found = {name: dirs for name, dirs in found.items()
             if dirs and any(len(_scalar(d, EVAL_RETURN)[1]) for d in dirs)}
    if not found:
        print(f'\n## {suite}\n\nno runs with evaluations in {os.path.join(out, suite)}')
        return False
    group_by = SUITES[suite][2]
    tasks = list(dict.fromkeys(specs[name].task for name in found))
    all_tasks = list(dict.fromkeys(run.task for run in specs.values()))
    os.makedirs(docs_dir, exist_ok=True)
    rows, codes = [], set()
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    for task in tasks:
        names = [n for n in found if specs[n].task == task]
        dirs = [d for n in names for d in found[n] if len(_scalar(d, EVAL_RETURN)[1])]
        stem = suite if len(all_tasks) == 1 else f'{suite}_{task.tag}'
        _plot(dirs, group_by, EVAL_RETURN, os.path.join(docs_dir, f'{stem}.png'))
        if suite == 'study_mask':
            _plot(dirs, group_by, EVAL_LENGTH, os.path.join(docs_dir, f'{stem}_length.png'))
        for name in names:
            spec = specs[name]
            finals, steps, walls, replay, loads, unfinished = [], [], [], [], [], 0
            for d in found[name]:
                xs, ys = _scalar(d, EVAL_RETURN)
                if not len(ys):
                    continue
                finals.append(float(ys[-LAST_N:].mean()))
                steps.append(int(xs[-1]))
                done = _read_json(os.path.join(d, DONE_FILE))
                if done:
                    walls.append(done['wall_time_s'])
                    codes.update(done.get('code') or ['unknown'])
                    if done.get('mean_load') is not None:
                        loads.append(done['mean_load'])
                else:
                    unfinished += 1
                _, nbytes = _scalar(d, REPLAY_BYTES)
                if len(nbytes):
                    replay.append(float(nbytes[-1]))
            mean, lower, upper = bootstrap_ci(finals, rng)
            seeds = str(len(finals)) + (f' ({unfinished} unfinished)' if unfinished else '')
            env_steps = (f'{min(steps)}' if min(steps) == max(steps)
                         else f'{min(steps)}-{max(steps)}')
            rows.append((task.env, 'alf_lite' if spec.framework == 'alf_lite' else 'SB3',
                         spec.label, f'{mean:.1f} [{lower:.1f}, {upper:.1f}]', seeds, env_steps,
                         _duration(statistics.median(walls)) if walls else '-',
                         _mib(statistics.median(replay)) if replay else '-',
                         f'{statistics.median(loads):.1f}' if loads else '-'))
    header = ('task', 'framework', 'algorithm / setting',
              f'final eval return, mean [{CONFIDENCE:.0%} CI]', 'seeds', 'env steps',
              'median wall time', 'replay buffer', 'load')
    print(f'\n## {suite}\n')
    print(f'Final eval return: each run\'s mean over its last {LAST_N} evaluations '
          f'({NUM_EVAL_EPISODES} deterministic episodes each); mean over runs and '
          f'{CONFIDENCE:.0%} bootstrap CI.\n')
    print('| ' + ' | '.join(header) + ' |')
    print('|' + '|'.join('---' for _ in header) + '|')
    for row in rows:
        print('| ' + ' | '.join(row) + ' |')
    print(f'\nload: median over runs of the mean 1-minute load average while each trained '
          f'({os.cpu_count()} CPUs here; above the number of runs at a time means the wall '
          f'times were measured under shared load). Code: {", ".join(sorted(codes)) or "-"}.')
    return True


# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Learning curves of alf_lite and Stable-Baselines3 (see the module '
                    'docstring for the suites and settings).',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--suite', action='append', choices=list(SUITES), required=True,
                        help='Suite to run or report; repeat for several.')
    parser.add_argument('--out', default=os.path.join(REPO_ROOT, 'benchmarks', 'results',
                                                      'learning'),
                        help='Directory of the runs: <out>/<suite>/<run_name>/seed<k>. The '
                             "default's small files (progress.csv, config.gin, done.json, "
                             'plan.json) are kept in git, so finished runs survive a fresh '
                             'checkout.')
    parser.add_argument('--seeds', type=int, nargs='+', default=None,
                        help="Seeds to run instead of the suite's, e.g. --seeds 0 1.")
    parser.add_argument('--steps', type=int, default=None,
                        help="Env steps per run instead of the suite's (for smoke runs).")
    parser.add_argument('--runs', action='append', default=None, metavar='PATTERN',
                        help='Only the runs whose name matches this glob, e.g. alf_sac or '
                             "'sb3_*'; repeat for several.")
    parser.add_argument('--jobs', type=int, default=2, help='Runs at a time.')
    parser.add_argument('--dry_run', action='store_true',
                        help='Print the command of each run and what would be skipped.')
    parser.add_argument('--report', action='store_true',
                        help='Plot the runs into --docs_dir and print the tables; trains '
                             'nothing.')
    parser.add_argument('--docs_dir', default=os.path.join(REPO_ROOT, 'docs'),
                        help='Where --report writes its PNGs (and plot.py its curve CSVs).')
    parser.add_argument('--deadline', default=None,
                        help='Start no run that cannot finish by then (minutes from now, HH:MM '
                             'or an ISO date and time), judged by the measured time per env '
                             'step of finished runs of the same kind (the assumed rate of '
                             'the task before any), with a margin of '
                             f'{DEADLINE_MARGIN:.0%}; runs not started are "deferred".')
    parser.add_argument('--_sb3_run', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.deadline is not None:
        try:
            args.deadline = parse_deadline(args.deadline)
        except ValueError as e:
            parser.error(str(e))
    if args.jobs < 1:
        parser.error(f'--jobs must be at least 1, got {args.jobs}')
    if args.steps is not None and args.steps < 2:
        parser.error(f'--steps must be at least 2, got {args.steps}')
    if args.seeds is not None and any(s < 0 for s in args.seeds):
        parser.error(f'--seeds must be non-negative, got {args.seeds}')
    args.out = os.path.abspath(args.out)
    args.docs_dir = os.path.abspath(args.docs_dir)
    args.suite = list(dict.fromkeys(args.suite))
    runs = []
    for suite in args.suite:
        selected = suite_runs(suite, args.seeds, args.steps)
        if args.runs:
            selected = [r for r in selected if any(fnmatch.fnmatchcase(r.name, p)
                                                   for p in args.runs)]
        runs += selected
    if args.runs and not runs and not args.report:
        names = sorted({r.name for s in args.suite for r in suite_runs(s, [0])})
        parser.error(f'--runs {" ".join(args.runs)} matches no run of {", ".join(args.suite)}; '
                     f'the runs are: {", ".join(names)}')
    return parser, args, runs


def main(argv=None) -> int:
    parser, args, runs = parse_args(argv)
    if args._sb3_run:
        if len(runs) != 1 or runs[0].framework != 'sb3':
            parser.error('--_sb3_run needs --suite, --runs and --seeds that select one SB3 run')
        sb3_train(runs[0], args.out)
        return 0
    if args.report:
        found = [report_suite(suite, args.out, args.docs_dir) for suite in args.suite]
        return 0 if any(found) else 1
    for run in runs:
        if run.learning_starts != run.task.learning_starts:
            print(f'note: {run.key}: {run.num_env_steps} env steps are not more than the '
                  f'{run.task.learning_starts} random steps; using {run.learning_starts}')
            break
    if args.dry_run:
        for run in runs:
            done = os.path.isfile(os.path.join(run.run_dir(args.out), DONE_FILE))
            prefix = '# done, skipped: ' if done else ''
            print(prefix + shlex.join(run_command(run, args.out, args.steps)))
        return 0
    print(f'{len(runs)} runs, {args.jobs} at a time, into {args.out}', flush=True)
    return train_suites(runs, args)


if __name__ == '__main__':
    sys.exit(main())
