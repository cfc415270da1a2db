r"""Learning curves of alf_lite, and of Stable-Baselines3 (SB3) with matched settings.

    python benchmarks/learning.py --suite pendulum              # train (resumes, skips done runs)
    python benchmarks/learning.py --suite pendulum --report     # PNGs in docs/, markdown tables

``--suite`` repeats (pendulum, hopper, halfcheetah, study_sac, study_window,
study_replay, icub_walk, icub_orientation, precision_pendulum, precision_hopper). ``--jobs N``
(default 2) trains N runs at a time, ``--seeds 0 1`` and ``--runs 'sb3_*'`` (a
glob on run names) select runs, ``--steps`` shortens them (smoke runs, which
need another ``--out`` than the kept runs'), ``--deadline`` starts only runs that
can finish in time, ``--dry_run`` prints the commands, ``--docs_dir`` moves the
report's PNGs (docs/, the default, takes only the report of the kept runs).
docs/results.md ("How the runs are made") describes the suites, the matched
settings, the files each run leaves and the report.

This module defines the suites and the report; ``benchmarks/launcher.py`` runs
them as subprocesses, an SB3 run being ``python -m benchmarks.sb3_runner``.
"""

import argparse
import fnmatch
import functools
import itertools
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass, replace
from typing import List, NamedTuple, Optional, Sequence, Tuple

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _CHECKOUT not in sys.path:  # run as a script: import this checkout's alf_lite and benchmarks
    sys.path.insert(0, _CHECKOUT)

from alf_lite.bin.cli import EXIT_FAULT, exit_with, fail
from alf_lite.evaluation import NEAR_TERMINATION_STEPS
from alf_lite.run_dir import RunDir
from alf_lite.runs import (
    ENV_STEPS,
    EVAL_EPISODE_LENGTH,
    EVAL_Q_NEAR_TERMINATION,
    EVAL_RETURN,
    EVAL_RETURN_NEAR_TERMINATION,
    PROCESS_RSS_BYTES,
    REPLAY_BUFFER_BYTES,
    config_bindings,
    read_scalar_if_any,
    subprocess_env,
    train_column,
)
from benchmarks import REPO_ROOT, at_least
from benchmarks.launcher import (
    DEADLINE_MARGIN,
    LAST_N,
    PLAN_FILE,
    RECENT_MEASUREMENTS,
    UnreadableRecord,
    describe_deadline,
    format_duration,
    log_path_of,
    parse_deadline,
    read_done,
    read_json,
    train_runs,
)

# Episodes per evaluation, in both frameworks.
NUM_EVAL_EPISODES = 10
_SEED_DIR = re.compile(r'^seed(\d+)$')  # a run directory, BenchmarkRun.run_dir


@dataclass(frozen=True)
class Task:
    """An environment with its schedule and the settings both frameworks share."""

    env: str
    tag: str  # short name in run names and file names
    learning_starts: int  # uniform random env steps before training
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


PENDULUM = Task(
    'Pendulum-v1',
    'pendulum',
    learning_starts=1000,
    eval_interval=1000,
    checkpoint_interval=5000,
    lr=1e-3,
    replay_capacity=100_000,
    gin_files=(
        ('sac', 'examples/sac_pendulum.gin'),
        ('ddpg', 'examples/ddpg_pendulum.gin'),
        ('td3', 'examples/td3_pendulum.gin'),
    ),
    complete_gin=True,
)
_MUJOCO = dict(
    learning_starts=10_000,
    eval_interval=5000,
    checkpoint_interval=25_000,
    lr=3e-4,
    gin_files=(('sac', 'examples/common/sac.gin'), ('td3', 'examples/common/td3.gin')),
    # alf_lite SAC on Hopper-v5 measured 0.018-0.021 s with two runs at a time and
    # other work on the 2 cores.
    assumed_seconds_per_step=0.02,
)
HOPPER = Task('Hopper-v5', 'hopper', **_MUJOCO)
HALFCHEETAH = Task('HalfCheetah-v5', 'halfcheetah', **_MUJOCO)
# Eval and checkpoint intervals are multiples of the 12 steps an iteration collects.
ICUB = Task(
    'ICubWalk-v0',
    'icub',
    learning_starts=2000,
    eval_interval=6000,
    checkpoint_interval=24_000,
    lr=2e-3,
    num_envs=12,
    summary_interval=1200,
    gin_files=(('sac', 'examples/sac_icub_walking.gin'),),
    complete_gin=True,
    assumed_seconds_per_step=0.004,
)
# ICUB on ICubWalk-v1 (link orientations from the standing pose), for icub_orientation.
ICUB_V1 = replace(ICUB, env='ICubWalk-v1', assumed_seconds_per_step=0.008)
# examples/sac_icub_walking.gin as it is: its intervals and its 100k rows per env, but for
# checkpoint_interval (96k, the file's is 100k), which changes when checkpoints are written,
# not the numbers.
ICUB_WALK = Task(
    'ICubWalk-v0',
    'icub_walk',
    learning_starts=2000,
    eval_interval=24_000,
    checkpoint_interval=96_000,
    lr=2e-3,
    num_envs=12,
    summary_interval=1200,
    replay_capacity=1_200_000,
    gin_files=(('sac', 'examples/sac_icub_walking.gin'),),
    complete_gin=True,
    assumed_seconds_per_step=0.004,
)


class RunConfig(NamedTuple):
    """One configuration of a suite, trained once per seed."""

    name: str
    framework: str  # 'alf_lite' or 'sb3'
    algo: str  # 'sac', 'ddpg' or 'td3'
    task: Task
    setting: str = ''  # what the run studies, for the report
    gin_params: Tuple[str, ...] = ()
    replay_capacity: Optional[int] = None


@dataclass(frozen=True)
class BenchmarkRun:
    """One training run: a framework, an algorithm, a task, a seed and a length."""

    suite: str
    name: str
    framework: str  # 'alf_lite' or 'sb3'
    algo: str  # 'sac', 'ddpg' or 'td3'
    task: Task
    seed: int
    num_env_steps: int
    setting: str = ''  # what the run studies, for the report
    gin_params: Tuple[str, ...] = ()
    replay_capacity: Optional[int] = None

    @property
    def key(self) -> str:
        return f'{self.suite}/{self.name}/seed{self.seed}'

    def run_dir(self, out: str) -> str:
        return os.path.join(out, self.suite, self.name, f'seed{self.seed}')

    def log_path(self, out: str, suffix: str = '.log') -> str:
        return log_path_of(self.run_dir(out), suffix)

    @property
    def kind(self) -> Tuple[str, str, str]:
        """``(framework, algo, env)``: runs of one kind take about as long per env step."""
        return (self.framework, self.algo, self.task.env)

    @property
    def resumable(self) -> bool:
        """Whether an interrupted run continues from its checkpoint (alf_lite's and SB3's do)."""
        return self.framework in ('alf_lite', 'sb3')

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


PRECISION = 'TrainerConfig.precision'
PRECISION_GROUP_BY = f'TrainerConfig.algorithm_ctor,{PRECISION}'
# The precision suites: the suite whose float32 runs they are compared with, and its algorithms.
PRECISION_SUITES = {
    'precision_pendulum': ('pendulum', ('sac', 'td3')),
    'precision_hopper': ('hopper', ('sac',)),
}


class Suite(NamedTuple):
    """A suite's defaults, and how its report tells the runs apart."""

    num_env_steps: int  # per run, unless --steps
    seeds: Sequence[int]  # unless --seeds
    group_by: str  # plot.py's --group_by: what tells the curves apart


SUITES = {
    'pendulum': Suite(20_000, range(5), 'TrainerConfig.algorithm_ctor'),
    'hopper': Suite(150_000, range(3), 'TrainerConfig.algorithm_ctor'),
    'halfcheetah': Suite(150_000, range(3), 'TrainerConfig.algorithm_ctor'),
    'study_sac': Suite(100_000, range(3), ''),
    'study_window': Suite(100_000, range(3), ''),
    'study_replay': Suite(300_000, range(3), 'TrainerConfig.replay_buffer_length'),
    'icub_walk': Suite(2_000_000, range(1), 'TrainerConfig.random_seed'),
    # ICubWalk-v1 against the ICubWalk-v0 runs of study_replay with the same settings.
    'icub_orientation': Suite(300_000, range(3), 'create_environment.env_name'),
    # bfloat16 against the float32 runs of the pendulum and hopper suites (up to this length).
    'precision_pendulum': Suite(20_000, range(5), PRECISION_GROUP_BY),
    'precision_hopper': Suite(100_000, range(3), PRECISION_GROUP_BY),
}
REPLAY_STUDY = (('10k', 10_000), ('100k', 100_000), ('full', None))
MASK = 'TrainerConfig.mask_out_loss_for_last_step'
RESAMPLE = 'SacAlgorithm.resample_action_per_loss'
# study_sac: the default and one switch changed at a time; every run binds both.
SAC_STUDY = (('default', True, False), ('mask_false', False, False), ('resample_true', True, True))
# study_sac's two comparisons: (name, the binding it varies, the runs it compares).
SAC_STUDY_COMPARISONS = (
    ('mask', MASK, ('default', 'mask_false')),
    ('resample', RESAMPLE, ('default', 'resample_true')),
)
# study_window: resampling again, on windows of WINDOW_LENGTH rows, where every row
# but the first and the last is both a transition's state and the one before's next
# state, so that the default shares that sample with the critic target. Fewer windows
# per update keep the transitions per update at the default's 256.
WINDOW_LENGTH = 5
WINDOW_BATCH = 256 // (WINDOW_LENGTH - 1)
WINDOW_STUDY = (('default', False), ('resample_true', True))
# The comparisons of each suite whose runs vary one binding at a time.
STUDY_COMPARISONS = {
    'study_sac': SAC_STUDY_COMPARISONS,
    'study_window': (('resample', RESAMPLE, ('default', 'resample_true')),),
}
# The settings each study's report tests against each other: (name, (setting, setting)).
SETTING_TESTS = {
    suite: tuple((name, compared) for name, _, compared in comparisons)
    for suite, comparisons in STUDY_COMPARISONS.items()
}
# icub_orientation's ICubWalk-v1 runs against study_replay's ICubWalk-v0 runs with the
# same settings: ``(suite, run name)``.
ORIENTATION_REFERENCE = ('study_replay', 'icub_replay_full')
SETTING_TESTS['icub_orientation'] = (
    ('orientation', (ORIENTATION_REFERENCE[1].split('_', 1)[1], 'v1')),
)
SETTING_TESTS['study_replay'] = tuple(
    ('capacity', (f'replay_{first}', f'replay_{second}'))
    for first, second in (('100k', 'full'), ('10k', '100k'), ('10k', 'full'))
)


def _alf_sac(task: Task, name: str, setting: str, gin_params: Tuple[str, ...]) -> RunConfig:
    """A study's alf_lite SAC configuration ``<task tag>_<name>``."""
    return RunConfig(
        f'{task.tag}_{name}', 'alf_lite', 'sac', task, setting=setting, gin_params=gin_params
    )


def suite_configs(suite: str) -> List[RunConfig]:
    """The configurations of a suite, each trained once per seed."""
    configs = []
    if suite in ('pendulum', 'hopper', 'halfcheetah'):
        task = {'pendulum': PENDULUM, 'hopper': HOPPER, 'halfcheetah': HALFCHEETAH}[suite]
        alf_algos = {
            'pendulum': ('sac', 'ddpg', 'td3'),
            'hopper': ('sac', 'td3'),
            'halfcheetah': ('sac',),
        }[suite]
        sb3_algos = tuple(a for a in alf_algos if a in ('sac', 'td3'))
        configs += [RunConfig(f'alf_{a}', 'alf_lite', a, task) for a in alf_algos]
        configs += [RunConfig(f'sb3_{a}', 'sb3', a, task) for a in sb3_algos]
    elif suite == 'study_sac':
        for task in (HOPPER, ICUB):
            for name, mask, resample in SAC_STUDY:
                setting = (
                    'default'
                    if name == 'default'
                    else (
                        f'{MASK.split(".")[-1]}={mask}'
                        if not mask
                        else f'{RESAMPLE.split(".")[-1]}={resample}'
                    )
                )
                gin_params = (f'{MASK}={mask}', f'{RESAMPLE}={resample}')
                configs.append(_alf_sac(task, name, setting, gin_params))
    elif suite == 'study_window':
        for task in (ICUB, HOPPER):
            for name, resample in WINDOW_STUDY:
                what = 'resample_action_per_loss=True' if resample else 'one sample per state'
                gin_params = (
                    f'TrainerConfig.mini_batch_length={WINDOW_LENGTH}',
                    f'TrainerConfig.mini_batch_size={WINDOW_BATCH}',
                    f'{MASK}=True',
                    f'{RESAMPLE}={resample}',
                )
                setting = f'{WINDOW_LENGTH}-row windows, {what}'
                configs.append(_alf_sac(task, name, setting, gin_params))
    elif suite == 'icub_walk':
        configs.append(
            RunConfig(
                'icub_walk', 'alf_lite', 'sac', ICUB_WALK, setting='examples/sac_icub_walking.gin'
            )
        )
    elif suite == 'study_replay':
        for name, capacity in REPLAY_STUDY:
            setting = f'replay {name}' + (' (whole run)' if capacity is None else '')
            configs.append(
                RunConfig(
                    f'icub_replay_{name}',
                    'alf_lite',
                    'sac',
                    ICUB,
                    setting=setting,
                    replay_capacity=capacity,
                )
            )
    elif suite == 'icub_orientation':
        configs.append(
            RunConfig(
                'icub_v1',
                'alf_lite',
                'sac',
                ICUB_V1,
                setting='ICubWalk-v1',
                gin_params=(f"create_environment.env_name='{ICUB_V1.env}'",),
            )
        )
    elif suite in PRECISION_SUITES:
        reference, algos = PRECISION_SUITES[suite]
        task = {'pendulum': PENDULUM, 'hopper': HOPPER}[reference]
        configs += [
            RunConfig(
                f'alf_{a}_bfloat16',
                'alf_lite',
                a,
                task,
                setting=f'{a.upper()} bfloat16',
                gin_params=(f"{PRECISION}='bfloat16'",),
            )
            for a in algos
        ]
    else:
        raise ValueError(f'unknown suite {suite!r}; the suites are: {", ".join(SUITES)}')
    return configs


def reference_configs(suite: str) -> List[Tuple[str, RunConfig]]:
    """The runs of other suites that a suite's report compares with: ``(their suite, config)``."""
    if suite in PRECISION_SUITES:
        return [(PRECISION_SUITES[suite][0], config) for config in float32_references(suite)]
    if suite == 'icub_orientation':
        reference, name = ORIENTATION_REFERENCE
        return [
            (reference, config._replace(setting=config.task.env))
            for config in suite_configs(reference)
            if config.name == name
        ]
    return []


def _whole_float32_runs(suite: str) -> str:
    """What a precision suite's report says of the float32 runs' columns other than the
    returns: those of the whole runs, which may be longer, with a larger replay buffer."""
    reference = PRECISION_SUITES[suite][0]
    length, whole = SUITES[suite].num_env_steps, SUITES[reference].num_env_steps

    def rows(runs):
        return ', '.join(
            map(str, sorted({r.replay_length_per_env * r.task.num_envs for r in runs}))
        )

    own = rows(suite_runs(suite, seeds=[0]))
    theirs = rows(
        BenchmarkRun(reference, seed=0, num_env_steps=whole, **config._asdict())
        for config in float32_references(suite)
    )
    if (length, own) == (whole, theirs):
        return ''
    return (
        ' Their wall time, ms per env step, replay buffer and process memory are those of '
        f'the whole run: {whole} env steps with a replay buffer of {theirs} rows, against '
        f'{length} env steps and {own} rows for the bfloat16 runs.'
    )


def float32_references(suite: str) -> List[RunConfig]:
    """A precision suite's float32 counterparts: the ``alf_<algo>`` runs of its reference suite."""
    if suite not in PRECISION_SUITES:
        return []
    reference, algos = PRECISION_SUITES[suite]
    return [
        config._replace(setting=f'{config.algo.upper()} float32')
        for config in suite_configs(reference)
        if config.framework == 'alf_lite' and config.algo in algos
    ]


def suite_runs(
    suite: str, seeds: Optional[Sequence[int]] = None, steps: Optional[int] = None
) -> List[BenchmarkRun]:
    """The runs of a suite, seed-major within each configuration."""
    configs = suite_configs(suite)
    steps = steps or SUITES[suite].num_env_steps
    seeds = list(SUITES[suite].seeds if seeds is None else seeds)
    return [
        BenchmarkRun(suite, seed=seed, num_env_steps=steps, **config._asdict())
        for config in configs
        for seed in seeds
    ]


def alf_gin_params(run: BenchmarkRun) -> List[str]:
    """The ``--gin_param`` bindings of an alf_lite run, after its gin file."""
    task = run.task
    params = (
        []
        if task.complete_gin
        else [
            f'create_environment.env_name="{task.env}"',
            f'create_environment.num_parallel_environments={task.num_envs}',
            f'TrainerConfig.summary_interval={task.summary_interval}',
        ]
    )
    params += [
        f'TrainerConfig.replay_buffer_length={run.replay_length_per_env}',
        f'TrainerConfig.num_env_steps={run.num_env_steps}',
        f'TrainerConfig.initial_collect_steps={run.learning_starts}',
        f'TrainerConfig.eval_interval={task.eval_interval}',
        f'TrainerConfig.num_eval_episodes={NUM_EVAL_EPISODES}',
        f'TrainerConfig.checkpoint_interval={task.checkpoint_interval}',
        f'TrainerConfig.random_seed={run.seed}',
        # Pinned, so that a change of defaults never mixes into one table.
        'TrainerConfig.torch_num_threads=1',
        "TrainerConfig.device='cpu'",
        "TrainerConfig.precision='float32'",
    ]
    return params + list(run.gin_params)


def run_command(run: BenchmarkRun, out: str, steps_override: Optional[int]) -> List[str]:
    """The command that trains (or resumes) ``run``, from the repository root."""
    if run.framework == 'alf_lite':
        command = [
            sys.executable,
            '-m',
            'alf_lite.bin.train',
            '--gin_file',
            run.task.gin_file(run.algo),
            '--root_dir',
            run.run_dir(out),
        ]
        for param in alf_gin_params(run):
            command += ['--gin_param', param]
        return command
    command = [
        sys.executable,
        '-m',
        'benchmarks.sb3_runner',
        '--suite',
        run.suite,
        '--run',
        run.name,
        '--seed',
        str(run.seed),
        '--out',
        out,
    ]
    if steps_override:
        command += ['--steps', str(steps_override)]
    return command


# ---------------------------------------------------------------------------------------------
# Report


def _seed_dirs(out: str, suite: str, name: str) -> List[str]:
    """The ``seed<k>`` directories of a configuration that hold a progress.csv, by seed."""
    parent = os.path.join(out, suite, name)
    if not os.path.isdir(parent):
        return []
    dirs = [
        (int(m[1]), os.path.join(parent, d))
        for d in os.listdir(parent)
        if (m := _SEED_DIR.match(d))
    ]
    return [d for _, d in sorted(dirs) if os.path.isfile(RunDir(d).progress_file)]


def _seed_of(run_dir: str) -> int:
    """The seed of a ``seed<k>`` run directory."""
    return int(_SEED_DIR.match(os.path.basename(run_dir))[1])


def _legend_labels(run_dirs: List[str], group_by: str, specs: dict) -> List[str]:
    """plot.py's ``--label NAME=GROUP`` for each group of ``run_dirs``: the runs' settings.

    A run's directory is ``<suite>/<config name>/seed<k>``; a suite run by both
    frameworks names each curve by framework and algorithm (``SB3 SAC``).
    """
    from alf_lite.bin.plot import group_runs

    both = any(spec.framework == 'sb3' for spec in specs.values())
    labels = []
    for group, dirs in group_runs(run_dirs, group_by):
        names = dict.fromkeys(os.path.basename(os.path.dirname(d)) for d in dirs)
        legend = ' / '.join(
            f'{_framework(specs[n])} {specs[n].label}' if both else specs[n].label for n in names
        )
        labels.append(f'{legend}={group}')
    return labels


def _framework(spec: RunConfig) -> str:
    return 'alf_lite' if spec.framework == 'alf_lite' else 'SB3'


def _plot(
    run_dirs: List[str],
    group_by: str,
    y: str,
    png: str,
    y_minus: Optional[str] = None,
    labels: Sequence[str] = (),
) -> None:
    command = [
        sys.executable,
        '-m',
        'alf_lite.bin.plot',
        *run_dirs,
        '--x',
        ENV_STEPS,
        '--y',
        y,
        '--group_by',
        group_by,
        '--last_n',
        str(LAST_N),
        '--out',
        png,
    ] + (['--y_minus', y_minus] if y_minus else [])
    command += [f'--label={label}' for label in labels]
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=subprocess_env(1), capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(
            f'{shlex.join(command)} failed (exit {result.returncode}):\n{result.stderr.strip()}'
        )
    print(f'wrote {png}')


# The scalars each suite's report draws, with the suffix of their PNG's name (and a
# scalar to subtract).
_STUDY_FIGURES = (
    (EVAL_RETURN, ''),
    (EVAL_EPISODE_LENGTH, '_length'),
    (EVAL_Q_NEAR_TERMINATION, '_q_near_termination'),
    (EVAL_RETURN_NEAR_TERMINATION, '_return_near_termination'),
    (EVAL_Q_NEAR_TERMINATION, '_q_above_return', EVAL_RETURN_NEAR_TERMINATION),
)
FIGURE_SCALARS = {
    'study_sac': _STUDY_FIGURES,
    'study_window': _STUDY_FIGURES,
    'icub_walk': ((EVAL_RETURN, ''), (EVAL_EPISODE_LENGTH, '_length')),
    'icub_orientation': ((EVAL_RETURN, ''), (EVAL_EPISODE_LENGTH, '_length')),
}


def _figures(suite: str, stem: str, group_by: str, names: List[str], found: dict):
    """``(png stem, group_by, run dirs)`` of each figure of one task of a suite."""
    if suite not in STUDY_COMPARISONS:
        yield stem, group_by, [d for n in names for d in found[n]]
        return
    for comparison, by, compared in STUDY_COMPARISONS[suite]:
        dirs = [d for n in names if n.split('_', 1)[1] in compared for d in found[n]]
        if dirs:
            yield f'{stem}_{comparison}', by, dirs


def compare_with_sb3(stats: dict) -> List[str]:
    """One line per task and algorithm run by both frameworks: alf_lite's mean against SB3's CI.

    Args:
        stats: ``{(env, algorithm label, framework): (mean, lower, upper, runs,
            unfinished runs)}`` of the final eval returns, framework ``'alf_lite'``
            or ``'SB3'``.
    """

    def runs(n):
        return f'{n} run' + ('' if n == 1 else 's')

    lines = []
    for (env, label, framework), (mean, lower, upper, n, unfinished) in stats.items():
        sb3 = stats.get((env, label, 'SB3'))
        if framework != 'alf_lite' or sb3 is None:
            continue
        sb3_mean, sb3_lower, sb3_upper, sb3_n, sb3_unfinished = sb3
        where = 'below' if mean < sb3_lower else 'above' if mean > sb3_upper else 'inside'
        overlap = lower <= sb3_upper and sb3_lower <= upper
        line = (
            f'- {env} {label}: alf_lite {mean:.1f} [{lower:.1f}, {upper:.1f}] ({runs(n)}) is '
            f"{where} SB3's interval, {sb3_mean:.1f} [{sb3_lower:.1f}, {sb3_upper:.1f}] "
            f'({runs(sb3_n)}); the intervals {"overlap" if overlap else "do not overlap"}'
        )
        notes = []
        if unfinished or sb3_unfinished:
            notes.append(f'{runs(unfinished + sb3_unfinished)} not finished yet')
        if min(n, sb3_n) < 2:
            notes.append('a single run has no interval: not yet a comparison')
        lines.append(line + (f' ({"; ".join(notes)})' if notes else '') + '.')
    return lines


def compare_precisions(stats: dict, per_seed: dict) -> List[str]:
    """One line per task and algorithm: bfloat16's mean and CI against float32's, and each seed.

    Args:
        stats: as for ``compare_with_sb3``, the labels being ``'<ALGO> bfloat16'``
            and ``'<ALGO> float32'``.
        per_seed: ``{label: [final eval return of each run, by seed]}``.
    """

    def seeds(label):
        return ', '.join(f'{v:.1f}' for v in per_seed.get(label, []))

    lines = []
    for (env, label, framework), (mean, lower, upper, n, unfinished) in stats.items():
        algo, _, precision = label.partition(' ')
        other = stats.get((env, f'{algo} float32', framework))
        if precision != 'bfloat16' or other is None:
            continue
        f_mean, f_lower, f_upper, f_n, f_unfinished = other
        overlap = 'overlap' if lower <= f_upper and f_lower <= upper else 'do not overlap'
        line = (
            f'- {env} {algo}: bfloat16 {mean:.1f} [{lower:.1f}, {upper:.1f}] ({n} runs: '
            f'{seeds(label)}), float32 {f_mean:.1f} [{f_lower:.1f}, {f_upper:.1f}] ({f_n} runs: '
            f'{seeds(f"{algo} float32")}); the intervals {overlap}'
        )
        if unfinished or f_unfinished:
            line += f' ({unfinished + f_unfinished} not finished yet)'
        lines.append(line + '.')
    return lines


def _as_far(value: float, observed: float) -> bool:
    """``|value| >= |observed|``, allowing for the rounding of sums taken in another order."""
    return abs(value) >= abs(observed) - 1e-9 * max(1.0, abs(observed))


def permutation_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided exact permutation p-value of the difference of the means of ``a`` and ``b``.

    The share of all ways to split the pooled values into groups of ``len(a)`` and
    ``len(b)`` whose difference of means is at least as far from zero as the
    observed one (the observed split included, so never below
    ``1 / C(len(a) + len(b), len(a))`` times the splits' symmetry).
    """
    pooled = list(a) + list(b)
    n, total = len(a), sum(pooled)
    observed = sum(a) / n - sum(b) / len(b)
    splits = as_far = 0
    for group in itertools.combinations(pooled, n):
        splits += 1
        as_far += _as_far(sum(group) / n - (total - sum(group)) / len(b), observed)
    return as_far / splits


def sign_flip_p(differences: Sequence[float]) -> float:
    """Two-sided exact sign-flip p-value of the mean of paired ``differences``.

    The share of the ``2**n`` ways to flip the differences' signs whose mean is at
    least as far from zero as the observed one: with every pair on one side, ``2 / 2**n``.
    """
    observed = sum(differences)
    signs = itertools.product((1, -1), repeat=len(differences))
    flips = [sum(s * d for s, d in zip(sign, differences)) for sign in signs]
    return sum(_as_far(f, observed) for f in flips) / len(flips)


def soft_q_entropy_bonus(run_dir: str, xs: Sequence[float]) -> Optional[float]:
    """The entropy bonus in SAC's Q near termination, estimated: the run's mean over
    the evaluations at ``xs``; None where the run logged no alpha before one of them
    (not SAC).

    SAC's critics learn a soft Q: ``Q(s_t, a_t) = E[r_t + sum_{i>=1} gamma^i (r_{t+i} +
    alpha H_{t+i})]`` to the end of the episode, ``H = -log pi`` of each later step's
    action. A critic exact for its policy therefore lies above the return received
    (``eval/ReturnNearTermination``) by the discounted bonus of the steps left, and below
    it where ``H`` is negative (SAC's target entropy ``-|A|`` keeps it near ``-|A|``).
    Estimated at each evaluation with the alpha and ``H`` of the summary before it
    (``train/alpha``, ``train/entropy``: the batch's mean, not the states near the end)
    and the evaluation's mean episode length: ``alpha * H`` times the mean of
    ``sum_{i=1}^{k-1} gamma^i`` over the counted steps, the last ``k = 1 ..
    min(NEAR_TERMINATION_STEPS, length)`` before the end.
    """
    import numpy as np

    alpha_xs, alphas = read_scalar_if_any(run_dir, train_column('alpha'))
    entropy_xs, entropies = read_scalar_if_any(run_dir, train_column('entropy'))
    length_xs, lengths = read_scalar_if_any(run_dir, EVAL_EPISODE_LENGTH)
    entropy_at = dict(zip(entropy_xs, entropies))
    length_at = dict(zip(length_xs, lengths))
    gamma = _sac_gamma(run_dir)
    bonuses = []
    for x in xs:
        before = np.flatnonzero(alpha_xs <= x)
        if not len(before) or x not in length_at:
            return None
        summary = alpha_xs[before[-1]]
        if summary not in entropy_at:
            return None
        counted = int(min(NEAR_TERMINATION_STEPS, max(1, round(length_at[x]))))
        # sum_{i=1}^{k-1} gamma^i for k = 1 .. counted: 0, gamma, gamma + gamma^2, ...
        weight = np.concatenate([[0.0], np.cumsum(gamma ** np.arange(1, counted))]).mean()
        bonuses.append(alphas[before[-1]] * entropy_at[summary] * weight)
    return float(np.mean(bonuses)) if bonuses else None


def _sac_gamma(run_dir: str) -> float:
    """The run's SAC discount: its config's binding, else SacAlgorithm's default."""
    import inspect

    from alf_lite.algorithms.sac import SacAlgorithm

    try:
        bindings = config_bindings(run_dir)
    except (OSError, ValueError):
        bindings = {}
    for name, value in bindings.items():
        if name.split('/')[-1] == 'SacAlgorithm.gamma':
            return float(value)
    return inspect.signature(SacAlgorithm.__init__).parameters['gamma'].default


def compare_settings(
    task_env: str,
    comparison: str,
    settings,
    by_seed: dict,
    unfinished: Optional[dict] = None,
    labels: Optional[Sequence[str]] = None,
) -> List[str]:
    """Lines testing one study comparison of one task: each figure, setting against setting.

    Args:
        settings: ``(name of the first setting's runs, of the second's)``.
        by_seed: ``{(run name, figure): {seed: value}}``, figure ``'return'``
            (final eval return), ``'q_above'`` (Q - return near termination) or
            ``'q_above_soft'`` (that less the entropy bonus, ``soft_q_entropy_bonus``).
        unfinished: ``{run name: seeds of its runs that have not finished}``.
        labels: what the lines call the two settings; by default the run names
            without their task's tag (``mask_false``).
    """
    unfinished = unfinished or {}
    lines = []
    for figure, what in (
        ('return', 'final eval return'),
        ('q_above', 'Q - return'),
        ('q_above_soft', 'Q - return - entropy bonus'),
    ):
        first, second = (by_seed.get((name, figure), {}) for name in settings)
        if len(first) < 2 or len(second) < 2:
            continue
        a, b = list(first.values()), list(second.values())
        names = labels or [name.split('_', 1)[1] for name in settings]
        line = (
            f'- {task_env}, {comparison}, {what}: {names[0]} {statistics.mean(a):.1f} '
            f'({len(a)} runs) against {names[1]} {statistics.mean(b):.1f} ({len(b)} runs); '
            f'exact permutation p = {permutation_p(a, b):.3f} (two-sided, '
            f'{math.comb(len(a) + len(b), len(a))} splits)'
        )
        paired = sorted(set(first) & set(second))
        if len(paired) >= 2:
            differences = [first[s] - second[s] for s in paired]
            above = sum(d > 0 for d in differences)
            line += (
                f'; paired by seed ({len(paired)} seeds, {names[0]} higher in {above}): '
                f'sign-flip p = {sign_flip_p(differences):.3f} (two-sided)'
            )
        n = sum(
            len(set(v) & unfinished.get(name, set())) for name, v in zip(settings, (first, second))
        )
        lines.append(line + (f'; {n} not finished yet' if n else '') + '.')
    return lines


def _mean_and_ci(values: Sequence[float]) -> str:
    """``'mean [lower, upper]'`` of ``values``: their bootstrap interval (``plot.band``)."""
    from alf_lite.bin.plot import band

    return '{:.1f} [{:.1f}, {:.1f}]'.format(*band(values, 'ci'))


def _mib(nbytes: float) -> str:
    return f'{nbytes / 2**20:.1f} MiB'


def _size(nbytes: float) -> str:
    """``nbytes`` in GiB from 1 GiB up, else in MiB."""
    return f'{nbytes / 2**30:.2f} GiB' if nbytes >= 2**30 else _mib(nbytes)


def report_suite(suite: str, out: str, docs_dir: str, finished_only: bool = False) -> bool:
    """Plots the suite's runs and prints its table; False when it has no runs yet (the
    runs it is compared with alone are nothing to compare).

    Args:
        finished_only: leave out the runs without ``done.json`` (still training).
    """
    import numpy as np

    from alf_lite.bin.plot import CONFIDENCE, band

    specs = {}
    for run in suite_runs(suite, seeds=[0]):
        specs.setdefault(run.name, run)
    # Runs of other suites it is compared with; a precision suite's float32 runs are
    # cut at its length.
    limit = SUITES[suite].num_env_steps if suite in PRECISION_SUITES else None
    for reference, config in reference_configs(suite):
        specs[config.name] = BenchmarkRun(
            reference, seed=0, num_env_steps=limit, **config._asdict()
        )
    found = {name: _seed_dirs(out, spec.suite, name) for name, spec in specs.items()}
    if finished_only:
        found = {name: [d for d in dirs if read_done(d)] for name, dirs in found.items()}
    found = {
        name: dirs
        for name, dirs in found.items()
        if dirs and any(len(read_scalar_if_any(d, EVAL_RETURN)[1]) for d in dirs)
    }
    if not any(specs[name].suite == suite for name in found):
        # The runs of other suites alone (a precision suite's float32 runs): nothing to compare.
        others = sorted({os.path.join(out, specs[name].suite, name) for name in found})
        compared = f', only the runs it is compared with ({", ".join(others)}): nothing to compare'
        print(
            f'\n## {suite}\n\nno runs with evaluations in {os.path.join(out, suite)}'
            + (compared if others else '')
        )
        return False
    group_by = SUITES[suite].group_by
    planned = {}  # {(suite, run name): seeds in plan.json}
    plan = read_json(os.path.join(out, PLAN_FILE))
    for key in plan if isinstance(plan, dict) else ():
        run_suite, name, seed_dir = (key.split('/') + ['', ''])[:3]
        if m := _SEED_DIR.match(seed_dir):
            planned.setdefault((run_suite, name), set()).add(int(m[1]))
    # The runs of other suites are compared seed for seed: only the seeds the suite's own
    # runs of the same algorithm have (and, as still to come, those planned for them),
    # however many more their suite has run since.
    own_seeds, own_planned = {}, {}
    for name, spec in specs.items():
        if spec.suite == suite:
            seeds = set(map(_seed_of, found.get(name, ())))
            own_seeds.setdefault(spec.algo, set()).update(seeds)
            own_planned.setdefault(spec.algo, set()).update(seeds, planned.get((suite, name), ()))
    for name, spec in specs.items():
        if spec.suite != suite:
            paired = own_seeds.get(spec.algo, set())
            found[name] = [d for d in found.get(name, ()) if _seed_of(d) in paired]
            if (spec.suite, name) in planned:
                planned[(spec.suite, name)] &= own_planned.get(spec.algo, set())
    found = {name: dirs for name, dirs in found.items() if dirs}
    # A task and its variants (ICubWalk-v0 and -v1) share a tag: one figure, one comparison.
    tags = list(dict.fromkeys(specs[name].task.tag for name in found))
    all_tags = set(run.task.tag for run in specs.values())
    os.makedirs(docs_dir, exist_ok=True)
    rows, codes, stats, per_seed = [], set(), {}, {}
    by_seed, tests = {}, []  # the study comparisons' figures by seed, and their tests
    unfinished_seeds = {}  # {run name: seeds of its runs without done.json}
    runs_by_seed = []  # a study's lines of each setting's runs, by seed
    soft_q_lines = []  # the entropy bonus in each SAC setting's Q near termination
    for tag in tags:
        names = [n for n in found if specs[n].task.tag == tag]
        envs = ' and '.join(sorted({specs[n].task.env for n in names}))
        stem = suite if len(all_tags) == 1 else f'{suite}_{tag}'
        evaluated = {
            n: [d for d in found[n] if len(read_scalar_if_any(d, EVAL_RETURN)[1])] for n in names
        }
        for name, by, plotted in _figures(suite, stem, group_by, names, evaluated):
            for y, suffix, *minus in FIGURE_SCALARS.get(suite, ((EVAL_RETURN, ''),)):
                # A scalar only some runs log (e.g. from before it existed) is drawn for those.
                having = [d for d in plotted if len(read_scalar_if_any(d, y)[1])]
                if having:
                    png = os.path.join(docs_dir, f'{name}{suffix}.png')
                    labels = _legend_labels(having, by, specs)
                    _plot(having, by, y, png, *minus, labels=labels)
        for name in names:
            spec = specs[name]
            task = spec.task
            finals, steps, walls, replay, loads, unfinished = [], [], [], [], [], 0
            rss, ended = [], {}  # each run's last process RSS; final return, episode length
            per_step, q_end, return_end, q_above = [], [], [], []
            bonus, q_above_soft = [], []  # the entropy bonus in SAC's Q, and Q - return less it
            for d in found[name]:
                xs, ys = read_scalar_if_any(d, EVAL_RETURN)
                if limit is not None:
                    xs, ys = xs[xs <= limit], ys[xs <= limit]
                if not len(ys):
                    continue
                finals.append(float(ys[-LAST_N:].mean()))
                per_seed.setdefault(spec.label, []).append(finals[-1])
                seed = _seed_of(d)
                by_seed.setdefault((name, 'return'), {})[seed] = finals[-1]
                _, lengths = read_scalar_if_any(d, EVAL_EPISODE_LENGTH)
                # The episode length over the same evaluations as the return.
                ended[seed] = (
                    finals[-1],
                    float(lengths[-LAST_N:].mean()) if len(lengths) else None,
                )
                steps.append(int(xs[-1]))
                done = read_done(d)
                if done:
                    walls.append(done['wall_time_s'])
                    if done.get('env_steps'):
                        per_step.append(done['wall_time_s'] / done['env_steps'])
                    codes.update(done.get('code') or ['unknown'])
                    if done.get('mean_load') is not None:
                        loads.append(done['mean_load'])
                else:
                    unfinished += 1
                    unfinished_seeds.setdefault(name, set()).add(seed)
                q_xs, q_ys = read_scalar_if_any(d, EVAL_Q_NEAR_TERMINATION)
                r_xs, r_ys = read_scalar_if_any(d, EVAL_RETURN_NEAR_TERMINATION)
                if len(q_ys) and len(r_ys):
                    q_end.append(float(q_ys[-LAST_N:].mean()))
                    return_end.append(float(r_ys[-LAST_N:].mean()))
                    received = dict(zip(r_xs, r_ys))
                    both = [(x, q - received[x]) for x, q in zip(q_xs, q_ys) if x in received]
                    q_above.append(float(np.mean([above for _, above in both[-LAST_N:]])))
                    by_seed.setdefault((name, 'q_above'), {})[seed] = q_above[-1]
                    estimate = soft_q_entropy_bonus(d, [x for x, _ in both[-LAST_N:]])
                    if estimate is not None:
                        bonus.append(estimate)
                        q_above_soft.append(q_above[-1] - estimate)
                        by_seed.setdefault((name, 'q_above_soft'), {})[seed] = q_above_soft[-1]
                _, nbytes = read_scalar_if_any(d, REPLAY_BUFFER_BYTES)
                if len(nbytes):
                    replay.append(float(nbytes[-1]))
                _, nbytes = read_scalar_if_any(d, PROCESS_RSS_BYTES)
                if len(nbytes):
                    rss.append(float(nbytes[-1]))
            # Each interval draws from a generator of its own: it depends on its runs alone.
            mean, lower, upper = band(finals, 'ci')
            framework = _framework(spec)
            stats[(task.env, spec.label, framework)] = (
                mean,
                lower,
                upper,
                len(finals),
                unfinished,
            )
            # Seeds the launcher was asked to train that have no evaluation to show here.
            others = len(planned.get((spec.suite, name), set()) - set(ended))
            notes = [f'{unfinished} unfinished'] if unfinished else []
            if others:
                notes.append(f'{others} not ' + ('finished' if finished_only else 'evaluated yet'))
            seeds = str(len(finals)) + (f' ({", ".join(notes)})' if notes else '')
            env_steps = (
                f'{min(steps)}' if min(steps) == max(steps) else f'{min(steps)}-{max(steps)}'
            )
            rows.append(
                (
                    task.env,
                    framework,
                    spec.label,
                    f'{mean:.1f} [{lower:.1f}, {upper:.1f}]',
                    seeds,
                    env_steps,
                    format_duration(statistics.median(walls)) if walls else '-',
                    f'{1000 * statistics.median(per_step):.1f}' if per_step else '-',
                    _mib(statistics.median(replay)) if replay else '-',
                    _size(statistics.median(rss)) if rss else '-',
                    f'{statistics.median(loads):.1f}' if loads else '-',
                )
            )
            if suite in SETTING_TESTS:
                runs_by_seed.append(
                    f'- {task.env}, {spec.label}: '
                    + ', '.join(
                        f'seed {seed} {final:.1f}'
                        + (f' ({length:.1f} steps)' if length is not None else '')
                        for seed, (final, length) in sorted(ended.items())
                    )
                )
            if suite in STUDY_COMPARISONS:
                rows[-1] += tuple(
                    _mean_and_ci(v) if v else '-' for v in (q_end, return_end, q_above)
                )
                if bonus:
                    soft_q_lines.append(
                        f'- {task.env}, {spec.label}: entropy bonus {_mean_and_ci(bonus)}; '
                        f'Q - return - entropy bonus {_mean_and_ci(q_above_soft)}'
                        + f' ({len(bonus)} runs: '
                        + ', '.join(f'{v:.1f}' for v in q_above_soft)
                        + ')'
                    )
        for comparison, compared in SETTING_TESTS.get(suite, ()):
            settings = tuple(f'{tag}_{setting}' for setting in compared)
            # Runs of another suite are named by their setting.
            labels = (
                [specs[n].label for n in settings]
                if any(n in specs and specs[n].suite != suite for n in settings)
                else None
            )
            tests += compare_settings(envs, comparison, settings, by_seed, unfinished_seeds, labels)
    header = (
        'task',
        'framework',
        'algorithm / setting',
        f'final eval return, mean [{CONFIDENCE:.0%} CI]',
        'seeds',
        'env steps',
        'median wall time',
        'ms per env step',
        'replay buffer',
        'process RSS',
        'load',
    )
    if suite in STUDY_COMPARISONS:
        header += (
            f'Q near termination [{CONFIDENCE:.0%} CI]',
            f'return near termination [{CONFIDENCE:.0%} CI]',
            f'Q - return [{CONFIDENCE:.0%} CI]',
        )
    print(f'\n## {suite}\n')
    print(
        f"Final eval return: each run's mean over its last {LAST_N} evaluations "
        f'({NUM_EVAL_EPISODES} deterministic episodes each); mean over runs and '
        f'{CONFIDENCE:.0%} bootstrap CI.\n'
    )
    print('| ' + ' | '.join(header) + ' |')
    print('|' + '|'.join('---' for _ in header) + '|')
    for row in rows:
        print('| ' + ' | '.join(row) + ' |')
    if suite in STUDY_COMPARISONS:
        print(
            f"\nQ near termination: the critics' mean Q over the last "
            f"{NEAR_TERMINATION_STEPS} steps before each eval episode's termination; "
            'return near termination: the discounted return received from those steps; '
            'Q - return: their difference at each evaluation; '
            f"each run's mean over its last {LAST_N} evaluations that have an episode "
            'ending in termination, then mean over runs and CI as above.'
        )
    if soft_q_lines:
        print(
            "\nEntropy bonus: SAC's critics learn a soft Q, which counts alpha * -log pi of "
            'every later action to the end, so that a critic exact for its policy lies above '
            'the return received near termination by that bonus (below, where -log pi is '
            'negative). Estimated for each run at the same evaluations as Q - return, from the '
            'alpha and -log pi of the summary before each (train/alpha, train/entropy: the '
            "batch's, not the states near the end) and the eval episodes' mean length; mean "
            "over runs and CI as above, and each run's Q - return less it:\n\n"
            + '\n'.join(soft_q_lines)
        )
    if runs_by_seed:
        print(
            "\nEach run's final eval return by seed, and in brackets its eval episode "
            f'length, both the mean over its last {LAST_N} evaluations:\n\n'
            + '\n'.join(runs_by_seed)
        )
    if tests:
        print(
            '\nEach comparison of two settings: an exact permutation test of the two '
            'groups of runs, and a sign-flip test of the differences between the runs of '
            'one seed (a seed gives both runs the same initial networks and the same '
            'random steps):\n\n' + '\n'.join(tests)
        )
    if suite == 'icub_orientation' and ORIENTATION_REFERENCE[1] in found:
        reference, name = ORIENTATION_REFERENCE
        print(
            f'\nThe ICubWalk-v0 rows are the runs {name} of the {reference} suite: the same '
            'settings, seeds and length on ICubWalk-v0.'
        )
    if suite in PRECISION_SUITES:
        print(
            f'\nThe float32 rows are the runs of the {PRECISION_SUITES[suite][0]} suite with the '
            f'same seeds, their evaluations up to {limit} env steps.{_whole_float32_runs(suite)} '
            "bfloat16 against float32, each run's final eval return by seed:\n\n"
            + '\n'.join(compare_precisions(stats, per_seed))
        )
    comparisons = compare_with_sb3(stats)
    if comparisons:
        print(
            f"\nalf_lite's mean final eval return against SB3's {CONFIDENCE:.0%} CI:\n\n"
            + '\n'.join(comparisons)
        )
    print(
        "\nprocess RSS: median over runs of the trainer process's resident memory at its "
        'last summary (torch, the networks, the replay buffer; env processes come on top).'
    )
    print(
        f'\nload: median over runs of the mean 1-minute load average while each trained '
        f'({os.cpu_count()} CPUs here; above the number of runs at a time means the wall '
        f'times were measured under shared load). Code: {", ".join(sorted(codes)) or "-"}.'
    )
    return True


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Learning curves of alf_lite and Stable-Baselines3 (the suites and '
        'settings are in docs/results.md).',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        '--suite',
        action='append',
        choices=list(SUITES),
        required=True,
        help='Suite to run or report; repeat for several.',
    )
    parser.add_argument(
        '--out',
        type=os.path.expanduser,
        default=os.path.join(REPO_ROOT, 'benchmarks', 'results', 'learning'),
        help='Directory of the runs: <out>/<suite>/<run_name>/seed<k>. The '
        "default's small files (progress.csv, config.gin, done.json, "
        'plan.json) are kept in git, so finished runs survive a fresh '
        'checkout.',
    )
    parser.add_argument(
        '--seeds',
        type=at_least(0),
        nargs='+',
        default=None,
        help="Seeds to run instead of the suite's, e.g. --seeds 0 1.",
    )
    parser.add_argument(
        '--steps',
        type=int,
        default=None,
        help="Env steps per run instead of the suite's (for smoke runs; they need another "
        "--out than the default, which keeps the runs of the suites' own lengths).",
    )
    parser.add_argument(
        '--runs',
        action='append',
        default=None,
        metavar='PATTERN',
        help='Only the runs whose name matches this glob, e.g. alf_sac or '
        "'sb3_*'; repeat for several.",
    )
    parser.add_argument('--jobs', type=int, default=2, help='Runs at a time.')
    parser.add_argument(
        '--dry_run',
        action='store_true',
        help='Print the command of each run (from the repository root) and what would be skipped.',
    )
    parser.add_argument(
        '--report',
        action='store_true',
        help='Plot the runs into --docs_dir and print the tables; trains nothing.',
    )
    parser.add_argument(
        '--finished_only',
        action='store_true',
        help='With --report: only the runs that finished (the ones still training are left out).',
    )
    parser.add_argument(
        '--docs_dir',
        type=os.path.expanduser,
        default=os.path.join(REPO_ROOT, 'docs'),
        help='Where --report writes its PNGs (and plot.py its curve CSVs); the default, '
        'docs/, takes only the report of the kept runs (the default --out).',
    )
    parser.add_argument(
        '--deadline',
        default=None,
        help='Start no run that cannot finish by then (minutes from now, HH:MM '
        'or an ISO date and time), judged by the slowest of the latest '
        f'{RECENT_MEASUREMENTS} measured times per env step of runs of the same kind '
        '(the assumed rate of the task before any), with a margin of '
        f'{(DEADLINE_MARGIN - 1) * 100:.0f}%% on that estimate; runs not started are "deferred".',
    )
    parser.add_argument(
        '--partial',
        type=float,
        default=None,
        metavar='MINUTES',
        help='With --deadline: also start a run that cannot finish by then when '
        'at least MINUTES are left; it trains until the deadline, checkpoints '
        'and stops, and the next call resumes it (for runs longer than one '
        'sitting, such as icub_walk).',
    )
    args = parser.parse_args(argv)
    if args.partial is not None and (args.deadline is None or not 0 < args.partial < math.inf):
        parser.error('--partial takes a positive number of minutes and needs --deadline')
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
    # The directory this call writes into: the report's PNGs, or the runs.
    flag, written = ('--docs_dir', args.docs_dir) if args.report else ('--out', args.out)
    if os.path.exists(written) and not os.path.isdir(written):
        parser.error(f'{flag} {written} is a file, not a directory')
    args.suite = list(dict.fromkeys(args.suite))
    runs = []
    for suite in args.suite:
        selected = suite_runs(suite, args.seeds, args.steps)
        if args.runs:
            selected = [
                r for r in selected if any(fnmatch.fnmatchcase(r.name, p) for p in args.runs)
            ]
        runs += selected
    if args.runs and not runs and not args.report:
        names = sorted({r.name for s in args.suite for r in suite_runs(s, [0])})
        parser.error(
            f'--runs {" ".join(args.runs)} matches no run of {", ".join(args.suite)}; '
            f'the runs are: {", ".join(names)}'
        )
    kept = os.path.join(REPO_ROOT, 'benchmarks', 'results', 'learning')
    out_is_kept = os.path.realpath(args.out) == os.path.realpath(kept)
    shortened = [s for s in args.suite if args.steps not in (None, SUITES[s].num_env_steps)]
    training = not (args.dry_run or args.report)
    if shortened and training and out_is_kept:
        # Its runs and plan.json are the published ones, each of its suite's length.
        parser.error(
            f'--steps {args.steps} is not the length of {", ".join(shortened)}: such smoke runs '
            f'do not go among the kept runs in {kept}; give them another --out'
        )
    published = os.path.join(REPO_ROOT, 'docs')
    if (
        args.report
        and not out_is_kept
        and os.path.realpath(args.docs_dir) == os.path.realpath(published)
    ):
        # docs/'s PNGs are the published curves of the kept runs.
        parser.error(
            f'--report of the runs in {args.out} would write over the PNGs of the kept runs '
            f'in {published}; give another --docs_dir'
        )
    return args, runs


def main(argv=None) -> int:
    args, runs = parse_args(argv)
    try:
        return _train_or_report(args, runs)
    except UnreadableRecord as e:
        fail(str(e))


def _train_or_report(args, runs: List[BenchmarkRun]) -> int:
    if args.report:
        found = [
            report_suite(suite, args.out, args.docs_dir, args.finished_only) for suite in args.suite
        ]
        return 0 if any(found) else EXIT_FAULT
    for run in runs:
        if run.learning_starts != run.task.learning_starts:
            print(
                f'note: {run.key}: {run.num_env_steps} env steps are not more than the '
                f'{run.task.learning_starts} random steps; using {run.learning_starts}',
                # Not on stdout, which --dry_run keeps to commands a shell can run.
                file=sys.stderr,
            )
            break
    if args.dry_run:
        for run in runs:
            done = read_done(run.run_dir(args.out))
            prefix = ''
            if done is not None:
                target, steps = done.get('target_env_steps'), run.num_env_steps
                prefix = (
                    '# done, skipped: '
                    if target == steps
                    else f'# fails (finished a run of {target} env steps, not {steps}): '
                )
            # From the repository root, where the launcher starts it (its gin file is relative).
            command = shlex.join(run_command(run, args.out, args.steps))
            print(f'{prefix}cd {shlex.quote(REPO_ROOT)} && {command}')
        return 0
    deadline = '' if args.deadline is None else f'; {describe_deadline(args.deadline)}'
    print(f'{len(runs)} runs, {args.jobs} at a time, into {args.out}{deadline}', flush=True)
    command = functools.partial(run_command, out=args.out, steps_override=args.steps)
    return train_runs(runs, args.out, args.jobs, command, args.deadline, args.partial)


if __name__ == '__main__':
    exit_with(main)
