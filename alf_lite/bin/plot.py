r"""Plot runs grouped over seeds: mean curve with a 95% bootstrap confidence band per group.

    python -m alf_lite.bin.plot runs/grid --x env_steps --y eval/AverageReturn \
        --group_by config --out curves.png

Each argument is a run's root_dir, or a directory searched for runs (other
paths are skipped with a note); a directory is one run however many paths name
it. A run is a directory with ``progress.csv``, ``config.gin`` or TensorBoard
event files in ``train/`` or ``eval/`` (an empty ``train/`` is no run's). The
search skips ``<root_dir>.old-<time>``, where ``train --start_over`` moves an
old run. A run is read from its ``progress.csv``, or from its TensorBoard
events when it has none; a NaN is no point, as an empty cell is (TD3's actor
loss before its first actor update). An inf (a run that diverged) is kept and
named in a warning: its group's mean there is inf, with no band (NaN, no
point, where +inf and -inf meet). A row whose ``env_steps`` is nan or inf (an
edited file: train counts no step of it) is no point, nor is one whose x is
(``read_scalar``). ``--x wall_time`` plots the seconds since the run's first
row (a pause before a resume included). A run without a column asked for
(``--x``, ``--y``, ``--y_minus``) is left out, named in one warning per column;
when no run has it, plot exits naming the closest columns there are.

``--group_by config`` puts runs whose ``config.gin`` differ only in
``TrainerConfig.random_seed`` (or a macro only it uses, ``seed_names``) and in
the bindings a resume may change (``resume_safe_names``) in one group and names
each group by the gin parameters that differ between them. Each binding is compared
by its value with its macros put in, as train compares configs
(``settings_as_compared``): ``actor/Adam.lr = %LR`` with ``LR = 0.001`` is
``actor/Adam.lr=0.001``, one setting with ``actor/Adam.lr = 0.001``; ``--group_by none``
names each run by the shortest end of its path that no other run's path shares. ``--label
NAME=GROUP`` gives a group a name of your own (e.g. ``--label
10K=TrainerConfig.replay_buffer_length=833``), used in the legend, the CSV and
the table. A group holding two runs of one seed and setting is warned about
(a run that binds no seed has the default one, 0).
The legend goes below the axes, the figure widened if it is wider (made taller
if it leaves the axes too little room); a group name longer than
``LEGEND_NAME_CHARS`` is shortened there (not in the CSV and the table).

Aggregation, per group, at each x where one of its runs has a point: each run
whose x values span that x gives a value, its own point or else the linear
interpolation between its points on either side; their mean and band: ``ci``,
the 2.5 and 97.5 percentiles of the mean over ``--num_bootstrap`` resamplings
(at most ``MAX_NUM_BOOTSTRAP``) of those runs (with replacement; taken in the
order of their paths, so that the band does not change with the order the runs
are given in), or ``std``,
mean +- their standard deviation (ddof 1). A run that ends before the group's
last x is named in a warning, and the legend and the table count it (``3 runs,
1 ending at 2000``): past its end the mean is over fewer runs.
``--smoothing N`` first replaces each run's value by the mean of its last N
points. Writes the PNG, the aggregated curves as a CSV next to it (``curves.csv`` for
``curves.png``: group, x, mean, lower, upper, num_runs), and prints the final
performance of each group: the mean over runs of each run's own last
``--last_n`` points (a run that ends early gives those), with the same band.
"""

import contextlib
import csv
import difflib
import functools
import logging
import os
import sys
from typing import Collection, Dict, List, Set, Tuple

# Imports the standard library only: the handlers below are installed at once.
from alf_lite.bin.cli import (
    empty,
    exit_if_interrupted,
    exit_on_signals_before_main,
    fail,
    print_out,
    run_tool,
)

if __name__ == '__main__':
    # Before the imports below, until main handles the signals.
    exit_on_signals_before_main()

from absl import flags  # noqa: E402

from alf_lite.config import new_file_beside, sync_to_disk  # noqa: E402
from alf_lite.run_dir import (  # noqa: E402
    CONFIG_FILE,
    EVAL,
    MOVED_ASIDE,
    PROGRESS_FILE,
    TRAIN,
    RunDir,
    enclosing_run,
    macro_users,
    macro_value,
    macros_resolved,
    names_and_their_macros,
    resume_safe_names,
    value_as_read,
)
from alf_lite.runs import (  # noqa: E402
    DEFAULT_SEED,
    ENV_STEPS,
    EVAL_RETURN,
    SEED_PARAM,
    WALL_TIME,
    LineTooLongError,
    bounded_lines,
    config_bindings,
    first_wall_time,
    read_scalar,
    run_columns,
)
from alf_lite.signals import Interrupted, RaisingSignals  # noqa: E402

CONFIDENCE = 0.95
NUM_BOOTSTRAP = 10_000
# The most --num_bootstrap: a band's ends move by little past the default, and a block of
# bands holds all their resampled means (200 MB at this many, twice that for their ends).
MAX_NUM_BOOTSTRAP = 100_000
# The bands whose resampled means are held at once (each num_bootstrap numbers).
BOOTSTRAP_BLOCK_ROWS = 256
# The x of a group's curve where its runs have points at different x (wall_time): the
# union of their points, thinned to as many as the longest run has, or to this many.
MAX_CURVE_POINTS = 10_000
# Each band draws from a generator of its own with this seed: the same values give the
# same band every time, whatever else is plotted.
BOOTSTRAP_SEED = 0
FIGURE_SIZE_INCHES = (8, 5)
FIGURE_DPI = 100
# Opacity of the bands and of the grid lines.
BAND_ALPHA = 0.2
GRID_ALPHA = 0.3
# Scalar names longer than this go on a title line of their own.
TITLE_NAME_CHARS = 40
# The curves CSV: group, the x column, then these.
CURVE_COLUMNS = ('mean', 'lower', 'upper', 'num_runs')
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
# The PNG's 'Software' text, by which plot knows a PNG it wrote (the chunk comes
# before the image data, in the file's first bytes).
PNG_SOFTWARE = 'alf_lite.bin.plot'
_PNG_MARK = b'Software\x00' + PNG_SOFTWARE.encode()
_PNG_MARK_WITHIN = 4096
# A warning names at most this many of the runs it is about, then counts the rest.
NAMED_RUNS = 10
# A group's name in the legend is shortened to this many characters.
LEGEND_NAME_CHARS = 100
# Past this many differing bindings in the group names of --group_by config, a note says
# how to name the groups shorter; the parameter of the example it gives is the first of
# PARAMETERS_THAT_TELL_APART that differs.
NAMING_BINDINGS = 5
PARAMETERS_THAT_TELL_APART = ('TrainerConfig.algorithm_ctor', 'create_environment.env_name')
# Room beside a legend wider than the figure, which the figure widens to hold.
LEGEND_MARGIN_INCHES = 0.2
# Height left above the legend for the axes, their title and labels: a legend of more
# groups than leave it makes the figure taller.
AXES_MIN_HEIGHT_INCHES = 3.5

flags.DEFINE_string(
    'x',
    ENV_STEPS,
    f'Column along x ({PROGRESS_FILE} column; from TensorBoard events: {ENV_STEPS} or '
    f"{WALL_TIME}). {WALL_TIME}: seconds elapsed since the run's first row (a pause "
    'before a resume included); where runs of a group have points at different x, each '
    'is interpolated linearly between its own points.',
)
flags.DEFINE_string('y', EVAL_RETURN, f'Scalar along y, e.g. {EVAL_RETURN} or train/critic_loss.')
flags.DEFINE_string(
    'y_minus',
    None,
    'Plot y minus this scalar, at the x where a run has both: e.g. --y '
    'eval/QNearTermination --y_minus eval/ReturnNearTermination for how far the '
    "critics' Q lies above the return received.",
)
flags.DEFINE_string(
    'group_by',
    'config',
    "'config': runs that differ only by seed and by bindings a resume may change (e.g. "
    "TrainerConfig.torch_num_threads, num_env_steps); 'none': each run alone, named by "
    'the shortest end of its path that tells it apart; or comma-separated gin parameters, '
    'e.g. actor/Adam.lr.',
)
flags.DEFINE_multi_string(
    'label',
    [],
    "A group's name in the legend, the CSV and the table, as NAME=GROUP, GROUP "
    'being the name the group has without it (e.g. '
    '10K=TrainerConfig.replay_buffer_length=833); repeat it for each group to rename.',
)
flags.DEFINE_enum(
    'band',
    'ci',
    ['ci', 'std'],
    'Band around the mean: 95% bootstrap confidence '
    'interval of the mean, or +- one standard deviation.',
)
flags.DEFINE_integer(
    'smoothing',
    1,
    "Moving-average window over each run's last N points; 1: none. A NaN is no point "
    '(e.g. an actor loss before the first actor update), as an empty cell is.',
)
flags.DEFINE_integer(
    'last_n',
    1,
    "Final performance: mean of the last N points of each run, a run's own last points "
    'when it ends before the others.',
)
flags.DEFINE_integer(
    'num_bootstrap',
    NUM_BOOTSTRAP,
    f'Bootstrap resamplings of the runs, at most {MAX_NUM_BOOTSTRAP}.',
)
flags.DEFINE_string(
    'out', 'curves.png', 'PNG to write; the aggregated curves go to the same path with .csv.'
)
FLAGS = flags.FLAGS


def check_outputs(png: str, csv_path: str) -> None:
    """Refuse outputs that would replace what plot did not write; raises ValueError.

    The CSV's path is derived from ``--out``: without this check ``--out
    run/progress.png`` would overwrite the run's ``progress.csv``.
    """
    if os.path.isdir(png) or os.path.isdir(csv_path):
        raise ValueError(f'--out {png}: {png if os.path.isdir(png) else csv_path} is a directory')
    curves_csv = False
    if os.path.exists(csv_path):
        try:
            with open(csv_path, newline='', encoding='utf-8', errors='replace') as f:
                header = next(csv.reader(bounded_lines(f)), [])
        except (csv.Error, LineTooLongError):  # a first line far longer than plot's header
            header = []
        if header[:1] != ['group'] or header[2:] != list(CURVE_COLUMNS):
            raise ValueError(
                f'--out {png} would overwrite {csv_path}, which holds no curves that plot '
                'wrote: choose another --out'
            )
        curves_csv = True
    # A directory with a progress.csv is a run (RunDir.is_run): a run without its own (plot
    # reads its events) would get the curves as its rows, which plot and a resumed train then
    # read as the run's, and a directory of runs would become one run, hiding those below it.
    if os.path.basename(csv_path) == PROGRESS_FILE:
        raise ValueError(
            f'--out {png} would write its curves to {csv_path}, the progress file by which '
            f'plot and train take {os.path.dirname(csv_path) or os.curdir} for a run: choose '
            'another --out'
        )
    if os.path.exists(png):
        with open(png, 'rb') as f:
            start = f.read(_PNG_MARK_WITHIN)
        if not start.startswith(PNG_SIGNATURE):
            raise ValueError(f'--out {png} exists and is not a PNG: choose another --out')
        # Marked by plot, or (written before plot marked its PNGs) beside plot's CSV.
        if _PNG_MARK not in start and not curves_csv:
            raise ValueError(
                f'--out {png} exists and is not a plot that plot wrote (no {csv_path} of '
                'its curves beside it): choose another --out'
            )


def inside_a_run(path: str) -> str:
    """Where ``path``, in which there is no run, lies inside one (a folder of the run given for
    it, its eval/ say): the words that name the run to give; '' where it does not."""
    outer = enclosing_run(path)
    if outer is None or not RunDir(outer).is_run():
        return ''
    # As the user gave the path: a relative one names the run relative to here.
    outer = outer if os.path.isabs(path) else os.path.relpath(outer)
    return f' (it lies inside the run {outer}: give that)'


def find_runs(paths: List[str]) -> Tuple[List[str], List[Tuple[str, str]]]:
    """``(run dirs, [(skipped path, why)])``: each path that is a run (``RunDir.is_run``), and
    the runs below each directory.

    The search below a directory skips the runs that ``train --start_over`` moved
    aside (``MOVED_ASIDE``) and follows links to directories (a folder of links to
    runs), each directory once. A directory named by two paths is one run. A directory
    that cannot be read (another user's) is skipped, named with why: no run in it is
    plotted.
    """
    found, skipped = [], []
    for path in paths:
        below, unreadable = [], []
        if RunDir(path).is_run():
            below = [path]
        elif os.path.isdir(path):
            seen = set()  # real paths walked: a link back up is not followed again
            for parent, dirs, _ in os.walk(path, onerror=unreadable.append, followlinks=True):
                real = os.path.realpath(parent)
                if real in seen:
                    dirs.clear()
                    continue
                seen.add(real)
                if RunDir(parent).is_run():
                    below.append(parent)
                    dirs.clear()
                dirs[:] = sorted(d for d in dirs if not MOVED_ASIDE.search(d))
        skipped += [
            (e.filename, f'cannot be read ({e.strerror}): no run in it is plotted')
            for e in unreadable
        ]
        found.extend(below)
        if not below and not unreadable:
            skipped.append((path, f'no run there{inside_a_run(path)}'))
    unique: Dict[str, str] = {}
    for run in found:
        unique.setdefault(os.path.realpath(run), os.path.normpath(run))
    return list(unique.values()), skipped


def setting(run_dir: str, safe_elsewhere: Collection[str] = ()) -> Dict[str, str]:
    """The bindings of the run's ``config.gin`` that decide what it learns, seed included.

    That is all but those a resume may change (``resume_safe_names``), counting
    among them each of ``safe_elsewhere`` (``resume_safe_elsewhere``) that this
    config does not use. Raises FileNotFoundError without config.gin.
    """
    bindings = config_bindings(run_dir)
    safe = resume_safe_names(bindings, safe_elsewhere)
    return {k: v for k, v in bindings.items() if k not in safe}


def resume_safe_elsewhere(run_dirs: List[str]) -> Set[str]:
    """The names a resume may change in the config.gin of any of ``run_dirs``.

    A run whose ``num_env_steps = %STEPS`` was set to a number at a resume keeps
    ``STEPS`` bound and unused: it is no setting, as it is not in the runs that
    still use it for their length.
    """
    safe = set()
    for run in run_dirs:
        try:
            safe |= resume_safe_names(config_bindings(run))
        except (FileNotFoundError, ValueError):  # setting() names the problem
            continue
    return safe


def distinct_names(run_dirs: List[str]) -> List[str]:
    """Each run's name: the fewest last components of its path that no other run ends in."""
    parts = [os.path.normpath(r).split(os.sep) for r in run_dirs]
    names = []
    for i, own in enumerate(parts):
        others = [p for j, p in enumerate(parts) if j != i]
        k = next(
            (k for k in range(1, len(own)) if all(p[-k:] != own[-k:] for p in others)),
            len(own),
        )
        names.append(os.sep.join(own[-k:]))
    return names


def group_runs(run_dirs: List[str], group_by: str) -> List[Tuple[str, List[str]]]:
    """``[(label, run dirs)]`` in the order the groups first appear, each group's runs in
    the order of their real paths; raises ValueError."""
    return grouped_runs(run_dirs, group_by)[1]


def grouped_runs(
    run_dirs: List[str], group_by: str
) -> Tuple[List[str], List[Tuple[str, List[str]]]]:
    """``group_runs``' groups, after the gin parameters that name them (none for
    ``--group_by none``); raises ValueError."""
    if group_by == 'none':
        return [], [(name, [r]) for name, r in zip(distinct_names(run_dirs), run_dirs)]
    bindings, seeds = {}, {}
    safe = resume_safe_elsewhere(run_dirs) if group_by == 'config' else set()
    for run in run_dirs:
        try:
            bindings[run] = setting(run, safe) if group_by == 'config' else config_bindings(run)
        except FileNotFoundError:
            raise ValueError(
                f'{run} has no {CONFIG_FILE} to group by; use --group_by none'
            ) from None
    if group_by == 'config':
        # Each run's own seed names: a macro that is one run's seed may be another's setting.
        seeds = {run: seed_names(b) for run, b in bindings.items()}
        bindings = settings_as_compared(
            {
                run: {k: v for k, v in b.items() if k not in seeds[run]}
                for run, b in bindings.items()
            }
        )
        names = sorted({k for b in bindings.values() for k in b})
        # Values compared as gin reads them: `(256, 256)` and the same tuple over lines are one.
        names = [
            n
            for n in names
            if len({value_as_read(b[n]) if n in b else None for b in bindings.values()}) > 1
        ]
    else:
        names = [n.strip() for n in group_by.split(',') if n.strip()]
        if not names:
            # Not all runs as one group.
            raise ValueError(
                f"--group_by {group_by!r} names no gin parameter: give 'config', 'none' or "
                'comma-separated gin parameters'
            )
        unbound = [n for n in names if all(n not in b for b in bindings.values())]
        if unbound:
            bound = sorted({k for b in bindings.values() for k in b})
            closest = difflib.get_close_matches(unbound[0], bound, n=3)
            hint = f'; closest bound parameters: {", ".join(closest)}' if closest else ''
            raise ValueError(f'no run binds {", ".join(unbound)} in its {CONFIG_FILE}{hint}')
    # Each group by the values as gin reads them, in the order the groups first appear. A
    # group's runs in one order however they were given (its band resamples them by
    # position), and it is named by the values of the first of them.
    groups: Dict[tuple, Dict[str, tuple]] = {}
    for run in run_dirs:
        values = bindings[run]
        if group_by != 'config':
            # A parameter given by its value, its macros put in: the runs of a sweep over LR
            # all bind `actor/Adam.lr = %LR`, which their own LR tells apart.
            values = {n: macros_resolved(values, n) for n in names if n in values}
        # A name that is this run's seed is bound, to no setting.
        shown = tuple(
            values.get(n, '(seed)' if n in seeds.get(run, ()) else '(default)') for n in names
        )
        key = tuple(value_as_read(v) if n in values else v for n, v in zip(names, shown))
        groups.setdefault(key, {})[run] = shown
    named = []
    for shown_of in groups.values():
        runs = sorted(shown_of, key=os.path.realpath)
        shown = shown_of[runs[0]]
        named.append((', '.join(f'{n}={v}' for n, v in zip(names, shown)) or 'all runs', runs))
    return names, named


def long_names_note(names: List[str]) -> str:
    """What to do where ``--group_by config`` names each group by many differing bindings
    (``names``): runs of two algorithms differ in every binding of either."""
    example = next((n for n in PARAMETERS_THAT_TELL_APART if n in names), names[0])
    return (
        f'note: the group names list the {len(names)} bindings the groups differ in; name '
        f'the groups by those that matter with --group_by PARAMETER[,PARAMETER] (e.g. '
        f'--group_by {example}), or rename one with --label NAME=GROUP'
    )


def settings_as_compared(bindings: Dict[str, Dict[str, str]]) -> Dict[str, Dict[str, str]]:
    """``bindings`` (``{run: {name: value text}}``, seeds left out) as ``--group_by config``
    compares them: each value with its macros put in (``macros_resolved``), as train
    compares two configs, so ``actor/Adam.lr = %LR`` with ``LR = 0.001`` and
    ``actor/Adam.lr = 0.001`` are one setting.

    A macro is left out where each run that binds it uses it and puts it in wherever it
    does: its value is in those of its users. One a run leaves unused, or uses in a value
    kept as written (``NOISE = @GaussianNoise()``), is a binding of its own there, as it is
    to train, and so compared in every run that binds it.
    """
    resolved = {run: {n: macros_resolved(b, n) for n in b} for run, b in bindings.items()}
    compared = set()
    for run, b in bindings.items():
        users = macro_users(b)
        # A value kept as written is the one macros_resolved leaves as it was.
        compared |= {
            n for n in b if n not in users or any(resolved[run][u] == b[u] for u in users[n])
        }
    return {run: {n: v for n, v in r.items() if n in compared} for run, r in resolved.items()}


def seed_names(bindings: Dict[str, str]) -> set:
    """``SEED_PARAM`` and each macro of ``bindings`` that only it uses (``SEED = 3`` with
    ``TrainerConfig.random_seed = %SEED``): they tell seeds apart, not settings."""
    return names_and_their_macros(bindings, {SEED_PARAM})


def seed_of(run_dir: str) -> str:
    """The seed of the run: its config.gin's ``SEED_PARAM`` (a macro's value where it names
    one), or the default it does not bind."""
    value = macro_value(setting(run_dir), SEED_PARAM)
    return str(DEFAULT_SEED) if value is None else value


def same_seed_runs(runs: List[str]) -> List[Tuple[str, str]]:
    """The pairs of ``runs`` of one seed and one ``setting``; a run without a config.gin
    (a copy of its events alone, say) or whose config.gin cannot be read has no setting to
    compare and is left out."""
    not_seed = {}
    safe = resume_safe_elsewhere(runs)
    for run in runs:
        if not os.path.isfile(RunDir(run).config_file):
            continue
        try:
            bindings = setting(run, safe)
        except (OSError, ValueError):  # not needed to plot it (--group_by none)
            continue
        not_seed[run] = {k: v for k, v in bindings.items() if k not in seed_names(bindings)}
    first, pairs = {}, []
    for run, values in settings_as_compared(not_seed).items():
        # An unbound seed is the default one: `random_seed = 0` is the same run.
        key = tuple(
            sorted((k, value_as_read(v)) for k, v in {**values, SEED_PARAM: seed_of(run)}.items())
        )
        if key in first:
            pairs.append((first[key], run))
        else:
            first[key] = run
    return pairs


def rename_groups(
    groups: List[Tuple[str, List[str]]], labels: List[str]
) -> List[Tuple[str, List[str]]]:
    """``groups`` with each ``NAME=GROUP`` of ``labels`` applied; raises ValueError.

    Group names hold ``=`` (``parameter=value``) and so may names, so a label is
    read as the name of the longest group it ends with, after a ``=``. Groups
    given one name are pooled into one, where the first of them was, with their runs in
    the order of their paths.
    """
    known = [label for label, _ in groups]
    names, unknown = {}, []
    for label in labels:
        if label in known:
            raise ValueError(f'--label {label!r} is a group; name it as NAME={label}')
        if '=' not in label.strip('='):
            raise ValueError(f'--label {label!r} is not NAME=GROUP')
        ends = [g for g in known if label.endswith('=' + g) and label[: -len(g) - 1].strip()]
        if not ends:
            unknown.append(label)
            continue
        group = max(ends, key=len)
        name = label[: -len(group) - 1].strip()
        if names.setdefault(group, name) != name:
            raise ValueError(
                f'--label gives the group {group!r} two names, {names[group]!r} and {name!r}'
            )
    if unknown:
        raise ValueError(
            f"--label {', '.join(map(repr, unknown))} ends in no group's name; the groups "
            'are: ' + ', '.join(map(repr, known))
        )
    pooled: Dict[str, List[str]] = {}
    for label, runs in groups:
        pooled.setdefault(names.get(label, label), []).extend(runs)
    # In the order of their paths, as each group's own: a band drawn over runs by position
    # would otherwise move with the order the pooled groups' runs were given in.
    return [(name, sorted(runs, key=os.path.realpath)) for name, runs in pooled.items()]


def read_difference(run_dir: str, y: str, y_minus, x: str):
    """``read_scalar(run_dir, y, x)``, minus ``y_minus`` at the x where both have a value.

    A NaN is no value. With ``x`` ``wall_time``, x is the seconds since the run's
    first row (``first_wall_time``).
    """
    import numpy as np

    xs, ys = read_scalar(run_dir, y, x)
    if y_minus is not None:
        other = dict(zip(*read_scalar(run_dir, y_minus, x)))
        keep = [i for i, v in enumerate(xs) if v in other]
        # inf minus inf is NaN, no value, as the docstring says: not numpy's warning.
        with np.errstate(invalid='ignore'):
            xs, ys = xs[keep], ys[keep] - [other[xs[i]] for i in keep]
    if x == WALL_TIME and len(xs):
        xs = xs - first_wall_time(run_dir)
    keep = ~np.isnan(ys)
    return xs[keep], ys[keep]


@contextlib.contextmanager
def quiet_tensorboard():
    """Within it, tensorboard logs only its warnings and errors.

    Reading each events file makes tensorboard log ``No path found after
    <file>`` at INFO, which the absl handler prints among plot's own lines.
    """
    logger = logging.getLogger('tensorboard')
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def name_runs(runs: List[str]) -> str:
    """``runs`` comma-separated, the first ``NAMED_RUNS`` of them and a count of the rest."""
    rest = len(runs) - NAMED_RUNS
    return ', '.join(runs[:NAMED_RUNS]) + (f' and {rest} more' if rest > 0 else '')


def unknown_column_message(flag: str, name: str, columns: Dict[str, List[str]]) -> str:
    """The error for a ``flag`` column ``name`` that none of the runs of ``columns`` has.

    Args:
        flag: the flag that named the column, e.g. ``'--y'``.
        name: the column.
        columns: ``{run: run_columns(run)}``.
    """
    known = list(dict.fromkeys(c for cs in columns.values() for c in cs))
    closest = difflib.get_close_matches(name, known, n=3)
    hint = f'; closest: {", ".join(closest)}' if closest else ''
    runs = f'the {len(columns)} runs' if len(columns) > 1 else 'the run'
    return f'{flag}: no column {name!r} in {runs}{hint}; the columns are: {", ".join(known)}'


def smooth(values, window: int):
    """Each value replaced by the mean of it and up to ``window - 1`` values before it.

    A non-finite value (inf) makes only the means of the windows it is in non-finite
    (NaN where a window holds both inf and -inf).
    """
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    # A sum per window, not differences of a running sum: one inf would make all later ones NaN.
    padded = np.concatenate([np.zeros(window - 1), values])
    with np.errstate(invalid='ignore'):  # inf - inf: NaN, no point
        sums = np.lib.stride_tricks.sliding_window_view(padded, window).sum(axis=1)
    return sums / np.minimum(np.arange(1, len(values) + 1), window)


def band(
    values, kind: str, rng=None, num_bootstrap: int = NUM_BOOTSTRAP
) -> Tuple[float, float, float]:
    """``(mean, lower, upper)`` of ``values`` (one per run); one value gives a zero-width band,
    and so does an inf among them, whose mean is inf (or NaN for +inf and -inf).

    Args:
        values: one number per run.
        kind: ``'ci'``: the ``CONFIDENCE`` percentile bootstrap interval of the
            mean; ``'std'``: mean +- the standard deviation (ddof 1).
        rng: ``numpy.random.Generator`` that draws the resamplings; None: one of
            its own seeded with ``BOOTSTRAP_SEED``, so that the band depends on
            ``values`` alone.
        num_bootstrap: number of resamplings of the runs (``'ci'``).
    """
    mean, lower, upper = bands([values], kind, rng, num_bootstrap)
    return float(mean[0]), float(lower[0]), float(upper[0])


def bands(values, kind: str, rng=None, num_bootstrap: int = NUM_BOOTSTRAP):
    """``band`` of each row of ``values`` (rows of one number per run, as many runs in each):
    three arrays, the means, the lower and the upper ends.

    Each row is resampled alike: the draws of ``rng``, or without one those of a
    generator seeded with ``BOOTSTRAP_SEED`` (``resample_draws``). Each row's
    band is the one ``band`` of that row alone gives, to the bit.
    """
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    num_values = values.shape[1]
    with np.errstate(invalid='ignore'):
        mean = values.mean(axis=1)  # inf - inf: NaN, no point
    lower, upper = mean.copy(), mean.copy()
    # A diverged run: its inf is the mean's, and no spread around an inf is a number.
    spread = np.isfinite(values).all(axis=1) & (num_values > 1)
    if not spread.any():
        return mean, lower, upper
    finite = values[spread]
    if kind == 'std':
        std = finite.std(axis=1, ddof=1)
        lower[spread], upper[spread] = mean[spread] - std, mean[spread] + std
        return mean, lower, upper
    if rng is None:
        draws = resample_draws(num_values, num_bootstrap)
    else:
        draws = rng.integers(0, num_values, (num_bootstrap, num_values))
    alpha = (1 - CONFIDENCE) / 2 * 100
    ends = []
    # The resampled means of a block of rows at a time: of all rows at once they
    # would take rows x num_bootstrap numbers. Each row's own: numpy would sum a
    # row's resampled values in another order within a block's gather, which would
    # move the ends in their last digits.
    for start in range(0, len(finite), BOOTSTRAP_BLOCK_ROWS):
        block = finite[start : start + BOOTSTRAP_BLOCK_ROWS]
        means = np.stack([row[draws].mean(axis=1) for row in block])
        ends.append(np.percentile(means, [alpha, 100 - alpha], axis=1))
    lower[spread], upper[spread] = np.concatenate(ends, axis=1)
    return mean, lower, upper


@functools.cache
def resample_draws(num_values: int, num_bootstrap: int):
    """``(num_bootstrap, num_values)``: the indices of the values each resampling draws, by a
    generator seeded with ``BOOTSTRAP_SEED``.

    The same for every band of as many runs: drawn once, not again at each x.
    """
    import numpy as np

    draws = np.random.default_rng(BOOTSTRAP_SEED).integers(
        0, num_values, (num_bootstrap, num_values)
    )
    draws.flags.writeable = False
    return draws


def aggregate(curves: List[tuple], kind: str, num_bootstrap: int) -> List[tuple]:
    """``[(x, mean, lower, upper, num_runs)]`` at each x where a run of ``curves`` has a point
    (thinned where they are many, below).

    Where the runs have points at different x, their union would hold as many x as
    all their points together, and the bands would cost that many times the runs: it
    is thinned evenly, its first and last x kept, to as many x as the longest run has
    points, or ``MAX_CURVE_POINTS`` if more.

    Args:
        curves: ``(xs, ys)`` of each run, xs increasing. A run gives a value at
            each x within ``[xs[0], xs[-1]]``: its point there, or the linear
            interpolation between its points on either side.
        kind, num_bootstrap: as for ``band``.
    """
    import numpy as np

    grid = np.unique(np.concatenate([xs for xs, _ in curves]))
    most = max(MAX_CURVE_POINTS, *(len(xs) for xs, _ in curves))
    if len(grid) > most:
        grid = grid[np.linspace(0, len(grid) - 1, most).round().astype(int)]
    at_grid = np.zeros((len(grid), len(curves)))
    # Where each run gives a value: a NaN (inf - inf) is a value too, the mean's there.
    spanned = np.zeros((len(grid), len(curves)), dtype=bool)
    for run, (xs, ys) in enumerate(curves):
        spanned[:, run] = within = (grid >= xs[0]) & (grid <= xs[-1])
        at_grid[within, run] = np.interp(grid[within], xs, ys)
    num_runs = spanned.sum(axis=1)
    mean, lower, upper = (np.zeros(len(grid)) for _ in range(3))
    # The x of as many runs together: their bands share the resamplings.
    for n in np.unique(num_runs):
        rows = num_runs == n
        values = at_grid[rows][spanned[rows]].reshape(-1, n)
        mean[rows], lower[rows], upper[rows] = bands(values, kind, None, num_bootstrap)
    return [
        (float(x), float(m), float(lo), float(hi), int(n))
        for x, m, lo, hi, n in zip(grid, mean, lower, upper, num_runs)
    ]


def ending_early(curves: Dict[str, tuple]) -> Dict[str, float]:
    """``{run: its last x}`` of the runs of ``curves`` (``{run: (xs, ys)}``) that end first."""
    last = max(float(xs[-1]) for xs, _ in curves.values())
    return {run: float(xs[-1]) for run, (xs, _) in curves.items() if xs[-1] < last}


def early_note(early: Dict[str, float]) -> str:
    """``'1 ending at 2000'`` (``'2 ending at 1000-2000'``) for the runs ``ending_early``."""
    ends = sorted(early.values())
    span = _short(ends[0]) + (f'-{_short(ends[-1])}' if ends[-1] > ends[0] else '')
    return f'{len(early)} ending at {span}'


def _number(value: float) -> str:
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def _short(value: float) -> str:
    return _number(round(value, 1))


def main(argv):
    # A stop while the files are written removes their temporary files on the way out.
    signals = RaisingSignals()
    try:
        with signals:
            plot(argv, signals)
    except (Interrupted, Exception) as e:
        # At once: the signal may have cut short the import of matplotlib's ft2font, which
        # keeps Python objects in a C++ static that C's exit frees after the interpreter's
        # end, aborting the process. The temporary files are gone by now.
        exit_if_interrupted(signals, e, at_once=True)
        raise


def plot(argv, signals):
    """Plot as the flags say; ``signals``: SIGINT and SIGTERM raise ``Interrupted``."""
    # A quoted ~ reaches plot unexpanded, as one in --out does (parse_flags expands that).
    paths = [os.path.expanduser(path) for path in argv[1:]]
    if not paths:
        fail(
            "give the runs to plot, e.g. runs/grid (a run's root_dir, or a directory "
            'with runs below it)'
        )
    for path in paths:
        if not path.strip():
            fail(empty('a run to plot', path))
    if FLAGS.smoothing <= 0 or FLAGS.last_n <= 0 or FLAGS.num_bootstrap <= 0:
        fail('--smoothing, --last_n and --num_bootstrap must be positive')
    if FLAGS.num_bootstrap > MAX_NUM_BOOTSTRAP:
        fail(
            f'--num_bootstrap must be at most {MAX_NUM_BOOTSTRAP}, got {FLAGS.num_bootstrap}: '
            'the resampled means are held in memory, and past the default '
            f'{NUM_BOOTSTRAP} the band barely moves'
        )
    if not FLAGS.out.lower().endswith('.png'):
        fail(f'--out must end in .png, got {FLAGS.out!r}')
    csv_path = os.path.splitext(FLAGS.out)[0] + '.csv'
    try:
        check_outputs(FLAGS.out, csv_path)
    except ValueError as e:
        fail(str(e))
    except OSError as e:  # another user's file, say: not to be replaced unread
        fail(
            f'--out {FLAGS.out}: cannot read {e.filename} ({e.strerror}) to tell whether plot '
            'wrote it, which it would replace: choose another --out'
        )
    run_dirs, skipped = find_runs(paths)
    for path, why in skipped:
        print_out(f'skipping {path}: {why}', file=sys.stderr)
    if not run_dirs:
        fail(
            f'no run (a directory with {PROGRESS_FILE}, {CONFIG_FILE} or TensorBoard event '
            f'files in {TRAIN}/ or {EVAL}/) in {" ".join(paths)}'
        )

    import numpy as np

    try:
        names, groups = grouped_runs(run_dirs, FLAGS.group_by)
        groups = rename_groups(groups, FLAGS.label)
    except (OSError, ValueError) as e:  # a config.gin this user may not read, say
        fail(str(e))
    if FLAGS.group_by == 'config' and len(names) > NAMING_BINDINGS and not FLAGS.label:
        print_out(long_names_note(names), file=sys.stderr)
    y_name = FLAGS.y if FLAGS.y_minus is None else f'{FLAGS.y} - {FLAGS.y_minus}'
    # A run with no value of y yet (one that failed before its first row, say) is
    # left out, named, as is a run without a column asked for (one of another
    # algorithm, say); only when no run has a value is there nothing to plot.
    wanted = [('--x', FLAGS.x), ('--y', FLAGS.y)]
    wanted += [('--y_minus', FLAGS.y_minus)] if FLAGS.y_minus is not None else []
    raw, missing, columns = {}, {}, {}
    with quiet_tensorboard():
        for _, runs in groups:
            for run in runs:
                try:
                    xs, ys = read_difference(run, FLAGS.y, FLAGS.y_minus, FLAGS.x)
                except (OSError, ValueError) as e:  # OSError: another user's, say
                    # The run's columns tell a column it lacks from a file it cannot read.
                    columns[run] = run_columns(run)
                    if not columns[run] or all(n in columns[run] for _, n in wanted):
                        missing[run] = str(e)
                    continue
                if len(xs):
                    raw[run] = (xs, ys)
                else:
                    missing[run] = f'no {y_name} value yet in {run}'
    columns = {run: names for run, names in columns.items() if names}
    lacking = []
    for flag, name in wanted:
        runs = [run for run, names in columns.items() if name not in names]
        if runs and not raw and len(runs) == len(columns):
            fail(unknown_column_message(flag, name, columns))
        if runs:
            count = f'{len(runs)} run{"s" * (len(runs) > 1)}'
            lacking.append(f'{count} without column {name!r} ({flag}): {name_runs(runs)}')
    if not raw:
        fail('; '.join([*lacking, *missing.values()]))
    for why in [*lacking, *missing.values()]:
        print_out(f'warning: left out: {why}', file=sys.stderr)
    for run, (xs, ys) in raw.items():
        infinite = ~np.isfinite(ys)
        if infinite.any():
            # 'inf', '-inf' or 'inf or -inf'.
            signs = ' or '.join(sorted({repr(float(v)) for v in ys[infinite]}, key=len))
            print_out(
                f'warning: {run}: {y_name} is {signs} at {infinite.sum()} point(s), the first at '
                f"{FLAGS.x} {_short(xs[infinite][0])}; its group's mean there is inf or NaN "
                '(no point), and so is each smoothing window holding one',
                file=sys.stderr,
            )
    groups = [(label, [r for r in runs if r in raw]) for label, runs in groups]
    groups = [(label, runs) for label, runs in groups if runs]
    early = {label: ending_early({r: raw[r] for r in runs}) for label, runs in groups}
    for label, runs in groups:
        if early[label]:
            ends = ', '.join(f'{r} (at {_short(x)})' for r, x in early[label].items())
            last = max(raw[r][0][-1] for r in runs)
            print_out(
                f'warning: {label}: runs ending before its last {FLAGS.x} {_short(last)}: '
                f"{ends}; past a run's end the mean is over fewer runs",
                file=sys.stderr,
            )
        for run in runs:
            changed_at = RunDir(run).superseded_config_steps()
            if changed_at:
                print_out(
                    f'warning: {label}: {run} changed its experiment at a resume, at env '
                    f'step(s) {", ".join(map(str, changed_at))} (config-until-<step>.gin '
                    'holds what it trained with before): '
                    + (
                        'its curve is of every setting it had'
                        if FLAGS.group_by == 'none'
                        else 'it is grouped by its config.gin, which holds the last setting only'
                    ),
                    file=sys.stderr,
                )
        if len(runs) > 1:
            for run, again in same_seed_runs(runs):
                print_out(
                    f'warning: {label}: {run} and {again} have the same {SEED_PARAM} '
                    f'({seed_of(run)}) and setting: one run twice? '
                    '(train --start_over moves an old run to <root_dir>.old-<time>)',
                    file=sys.stderr,
                )
    curves = {
        label: aggregate(
            [(raw[r][0], smooth(raw[r][1], FLAGS.smoothing)) for r in runs],
            FLAGS.band,
            FLAGS.num_bootstrap,
        )
        for label, runs in groups
    }

    import matplotlib

    matplotlib.use('Agg')  # headless: no display needed
    import matplotlib.pyplot as plt

    band_name = f'{CONFIDENCE:.0%} bootstrap CI' if FLAGS.band == 'ci' else '1 std'
    fig, ax = plt.subplots(figsize=FIGURE_SIZE_INCHES, dpi=FIGURE_DPI, layout='constrained')
    lines, entries = [], []
    for label, runs in groups:
        x, mean, lower, upper, _ = np.array(curves[label]).T
        note = f'{len(runs)} run{"s" * (len(runs) > 1)}'
        note += f', {early_note(early[label])}' if early[label] else ''
        # The CSV and the table give a long name whole.
        name = label if len(label) <= LEGEND_NAME_CHARS else label[: LEGEND_NAME_CHARS - 3] + '...'
        (line,) = ax.plot(x, mean)
        ax.fill_between(x, lower, upper, color=line.get_color(), alpha=BAND_ALPHA, linewidth=0)
        lines.append(line)
        entries.append(f'{name} ({note})')
    # Names as written: a '$' in one is no TeX math (an odd one made matplotlib fail).
    ax.set_xlabel(FLAGS.x, parse_math=False)
    ax.set_ylabel(y_name, parse_math=False)
    # A long scalar name (e.g. a difference) gets a line of its own.
    ax.set_title(
        f'{y_name}:{chr(10) if len(y_name) > TITLE_NAME_CHARS else " "}mean and {band_name} '
        'over runs' + (f', smoothing {FLAGS.smoothing}' if FLAGS.smoothing > 1 else ''),
        parse_math=False,
    )
    ax.grid(alpha=GRID_ALPHA)
    # Below the axes, where it hides no curve and no axis label however long the
    # group names and however many the groups; the axes shrink to make room, down to
    # AXES_MIN_HEIGHT_INCHES, below which the figure grows instead. Given by hand: a
    # line's own label that starts with '_' (a run named _baseline) keeps it out of one.
    legend = fig.legend(lines, entries, loc='outside lower center', fontsize='small')
    for text in legend.get_texts():
        text.set_parse_math(False)
    extent = legend.get_window_extent(fig.canvas.get_renderer())
    legend_width = extent.width / fig.dpi + LEGEND_MARGIN_INCHES
    if legend_width > fig.get_figwidth():
        fig.set_figwidth(legend_width)
    legend_height = extent.height / fig.dpi + LEGEND_MARGIN_INCHES
    if legend_height + AXES_MIN_HEIGHT_INCHES > fig.get_figheight():
        fig.set_figheight(legend_height + AXES_MIN_HEIGHT_INCHES)
    try:
        directory = os.path.dirname(os.path.abspath(FLAGS.out))
        os.makedirs(directory, exist_ok=True)
        # Both files written beside first, then moved in: a plot stopped or failing
        # while writing leaves the last pair as it was. The old CSV goes before the new
        # PNG comes, and the new CSV last: one stopped between leaves a PNG without a
        # CSV, never a CSV beside the PNG of other curves.
        png = new_file_beside(FLAGS.out, '.tmp')
        table = new_file_beside(csv_path, '.tmp')
        try:
            fig.savefig(png, format='png', metadata={'Software': PNG_SOFTWARE})
            with open(table, 'w', newline='', encoding='utf-8') as f:
                writer = csv.writer(f)
                writer.writerow(['group', FLAGS.x, *CURVE_COLUMNS])
                for label, _ in groups:
                    for x, mean, lower, upper, n in curves[label]:
                        writer.writerow(
                            [label, _number(x), repr(mean), repr(lower), repr(upper), n]
                        )
            for path in (png, table):
                with open(path, 'rb') as f:
                    os.fsync(f.fileno())
            # A signal whose exception the drawing dropped: the PNG may lack what it
            # was drawing then.
            signals.raise_if_received()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(csv_path)
            sync_to_disk(directory)
            os.replace(png, FLAGS.out)
            sync_to_disk(directory)
            os.replace(table, csv_path)
            sync_to_disk(directory)
        finally:
            for path in (png, table):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
    except OSError as e:
        fail(f'cannot write --out {FLAGS.out}: {e}')
    plt.close(fig)
    print_out(f'plot written to {FLAGS.out}, curves to {csv_path}')

    print_out(
        f'\nfinal {y_name}: mean over runs of the last {FLAGS.last_n} point(s) of each run '
        f'(a run that ends early gives its own last points), {band_name}'
    )
    rows = [('group', 'runs', 'mean', band_name)]
    for label, runs in groups:
        with np.errstate(invalid='ignore'):  # inf - inf: NaN
            finals = [float(np.mean(raw[r][1][-FLAGS.last_n :])) for r in runs]
        mean, lower, upper = band(finals, FLAGS.band, None, FLAGS.num_bootstrap)
        count = str(len(runs)) + (f' ({early_note(early[label])})' if early[label] else '')
        rows.append((label, count, f'{mean:.2f}', f'[{lower:.2f}, {upper:.2f}]'))
    widths = [max(len(cell) for cell in column) for column in zip(*rows)]
    for row in rows:
        print_out('  '.join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


if __name__ == '__main__':
    run_tool(main)
