r"""Train every combination of gin parameter values, each with several seeds.

    python -m alf_lite.bin.grid_search --search_config grid.json \
        --gin_file examples/sac_pendulum.gin --root_dir runs/grid

with ``grid.json``::

    {"parameters": {"actor/Adam.lr,critic/Adam.lr,alpha/Adam.lr": [0.001, 0.0003],
                    "SacAlgorithm.target_update_tau": [0.005, 0.01]},
     "repeats": 3}

``parameters`` maps a gin name to its values; a key of several comma-separated
names sets them all to the same value. A JSON string is gin text as on the
right of a ``--gin_param`` (``"'Pendulum-v1'"`` is a string, ``"@GaussianNoise()"``
a reference), a list becomes a tuple, numbers, true, false and null are
themselves. ``repeats`` is a number of seeds (0, 1, ...) or a list of seeds >= 0.
``{"parameters": {}, "repeats": 5}`` trains the config's seeds 0-4 alone, named
``seed=0`` ... ``seed=4``.

Each combination and seed trains in ``root_dir/<name>``, named after the
parameters that take several values (in the order of ``parameters``, each by
the shortest end of its name that tells it apart, where none does by the whole end
its names share, or by all its names, ``a.X.lr+b.X.lr``, where that is another
key's name too or they share none) and the seed, e.g.
``lr=0.001,target_update_tau=0.01,seed=2``, with ``TrainerConfig.random_seed``
set to the seed, as its own ``python -m alf_lite.bin.train`` process (its
output in ``root_dir/logs/<name>.log``). A parameter with one value is no
part of the names: giving it a second value renames every run, and the sweep
trains them all afresh under their new names (renaming the old directories
to the new names keeps them).
Nothing is written when the base config with the first value of every
parameter does not parse (a misspelt name; a searched macro that no binding
uses counts as one), when no run's algorithm (built on torch's ``meta``
device) would use an entry (``DdpgAlgorithm.gamma`` with ``@SacAlgorithm``),
or when a name would not fit in
a file name: use a gin macro for a long value (``big = (...)`` in a gin file,
``"%big"`` in the search config, and the run is named ``...=big``).
A run whose latest checkpoint reached ``num_env_steps`` (and the length it last
trained for) is skipped and an unfinished one resumes, so running the same command
again continues a sweep.
A run whose saved config.gin differs from the sweep's in more than what a
resume may change (train's check of a root_dir) is another experiment: it
fails, naming the differing bindings, whether it finished or not, and is not
started; rerun with the old config, use another ``--root_dir``, or move the
run's directory aside to train it afresh.
A ``--gin_param`` that binds a searched parameter (as gin compares them: the
scope counts) or ``TrainerConfig.random_seed`` is refused before anything is
written: the searched values and the seeds are bound after it and would
override it. So is a searched parameter that a binding of it in a more
specific scope overrides, from a gin file, a ``--gin_param`` or the search
config (``Adam.lr`` where ``actor/Adam.lr`` is bound: gin applies the binding
of the longest scope that the call's scope begins with), naming those
bindings: search them instead.
One sweep at a time runs in a ``root_dir``: it holds the directory's
``flock`` (as train holds its run's), and a second sweep there exits with
status 2 before writing anything, naming the holder's pid where it can.
A run that fails never stops the others; the table at the end lists each run
with its final evaluation return and env steps as its latest checkpoint keeps them
(a run killed or failed since trains the rest again), wall time and error (also written to
``root_dir/grid_summary.csv``; a run not trained in this sweep keeps the
wall time the last table gave it, and the csv keeps the last table's rows of
runs this sweep has not whose run directories are still in ``root_dir``,
another sweep's there); the exit code is 1 when a run failed.
A run whose ``config.gin`` cannot be read fails, naming it, and is not
started. A last table that cannot be read is moved aside (``.old-<time>``)
with a warning before any run starts, its wall times and rows lost to the new table;
a directory in its place ends the sweep with status 2 before any run starts.
SIGINT (Ctrl-C), SIGTERM, SIGHUP, SIGUSR1 or SIGUSR2 stops the sweep: each running run
gets the signal (on Ray, SIGINT from its task, told through a file in ``root_dir``) and stops
at a checkpoint of its own, no other run starts (a Ray task not begun is
cancelled), the table is written, and the exit code is 128
plus the signal's number; running the same command again continues the sweep.

Backends: by default a local pool of ``--max_workers`` training processes,
each with ``cores // max_workers`` torch threads (a ``--gin_param`` or the
search config that sets ``TrainerConfig.torch_num_threads`` wins); with ``--ray_address`` each
run is a Ray task (``pip install .[ray]``) that needs ``--num_cpus_per_run``
CPUs and gets as many torch threads. The code ships with the tasks and the
config is sent as text, but ``--root_dir`` must be storage that every node of
the cluster sees at the same absolute path. The sweep connects before it
writes or prints anything: an address where nothing takes a TCP connection
within 10 s (where Ray would look: this machine's node address for
localhost), or a cluster where no alive node has the CPUs and GPUs of one run
(nor a node type that its autoscaler may start, where Ray's state describes
one), exits with status 2; a signal meanwhile exits with 128 plus its number.

GPUs: locally, each run gets one of the visible GPUs through its
``CUDA_VISIBLE_DEVICES``, the one with the fewest runs on it (of those, the
first), and at most ``--runs_per_gpu`` runs share a GPU at a time (the pool
holds at most GPUs x runs_per_gpu workers); ``--runs_per_gpu 0`` assigns
none: each run sees every GPU this process sees (``TrainerConfig.device =
'cpu'`` keeps runs off the GPUs). On Ray each run requests ``--num_gpus_per_run``
GPUs, which may be a fraction of one (0.25: four runs per GPU) or a whole number;
Ray sets their ``CUDA_VISIBLE_DEVICES``, and a run of 0 GPUs (the default) sees none.
The runs' ``TrainerConfig.device`` (default 'auto') then picks the GPU they
were given.
"""

import collections
import concurrent.futures
import contextlib
import csv
import inspect
import io
import itertools
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from typing import Collection, Dict, List, NamedTuple, Optional, Sequence, Tuple

# Imports the standard library only: the handlers below are installed at once.
from alf_lite.bin.cli import (
    EXIT_FAULT,
    EXIT_SIGNAL_BASE,
    exit_if_interrupted,
    exit_on_signals_before_main,
    fail,
    fail_on_stray_arguments,
    output_root_dir,
    print_out,
    run_tool,
    user_message,
)

# What SIGINT or SIGTERM outside the sweep stops grid_search with ({signal}: its name).
_OUTSIDE_THE_SWEEP = (
    '{signal} arrived while grid_search started up or wrote its table, outside the sweep: '
    'no run was started or stopped by it; re-run the same command to start or continue the '
    'sweep.'
)

if __name__ == '__main__':
    # Before the imports below, until main handles the signals.
    exit_on_signals_before_main(_OUTSIDE_THE_SWEEP)

import psutil  # noqa: E402
from absl import flags  # noqa: E402

from alf_lite.config import pasted_character, shortened, write_text_atomically  # noqa: E402
from alf_lite.run_dir import (  # noqa: E402
    CONFIG_FILE,
    RunDir,
    RunDirInUseError,
    RunDirLock,
    config_int,
    config_statements,
    experiment_difference,
    inside_run_refusal,
    moved_aside_path,
    not_text,
    read_config_text,
    split_binding,
)
from alf_lite.runs import (  # noqa: E402
    DEFAULT_NUM_ENV_STEPS,
    EVAL_RETURN,
    MAX_SEED,
    NOT_STARTED,
    NUM_ENV_STEPS_PARAM,
    SEED_PARAM,
    complete_rows,
    completed_waking_for_signals,
    final_value,
    read_scalar_if_any,
)
from alf_lite.signals import ENV_PROCESS_IGNORED, STOP_SIGNALS, in_main_thread  # noqa: E402

flags.DEFINE_string(
    'search_config',
    None,
    'JSON file with "parameters" (gin name -> list of '
    'values) and "repeats" (number of seeds, or a list of seeds).',
)
flags.DEFINE_multi_string('gin_file', [], 'Base gin config file; repeat for several.')
flags.DEFINE_multi_string(
    'gin_param',
    [],
    'Gin binding applied to every run, after the files '
    'and before the searched values; repeat for several. One that binds a searched '
    'parameter or TrainerConfig.random_seed is refused: the sweep would override it.',
)
flags.DEFINE_string(
    'root_dir',
    None,
    'Directory of the sweep; each run trains in a '
    'subdirectory. With --ray_address: storage shared by all nodes.',
)
flags.DEFINE_integer(
    'max_workers',
    None,
    'Local backend: runs at a time (default: the number '
    'of cores); each gets cores // max_workers torch threads.',
)
flags.DEFINE_string(
    'ray_address',
    None,
    "Run on a Ray cluster: 'auto' or 'host:port' of its head. Default: local processes.",
)
flags.DEFINE_integer(
    'num_cpus_per_run', 1, 'Ray backend: CPUs reserved by each run, also its torch threads.'
)
flags.DEFINE_integer(
    'runs_per_gpu',
    1,
    'Local backend: runs that share one GPU at a time; each '
    'run sees only its GPU (CUDA_VISIBLE_DEVICES). 0: assign none, each run sees '
    "every GPU this process sees (TrainerConfig.device='cpu' keeps runs off them).",
)
flags.DEFINE_float(
    'num_gpus_per_run',
    0.0,
    'Ray backend: GPUs reserved by each run; a fraction shares a GPU (0.5: two runs per GPU), '
    'above 1 a whole number. 0: none, and the runs see no GPU.',
)
flags.mark_flags_as_required(['search_config', 'root_dir'])
FLAGS = flags.FLAGS

THREADS_PARAM = 'TrainerConfig.torch_num_threads'
SUMMARY_FILE = 'grid_summary.csv'
SKIPPED = 'skipped (finished before)'
# Written into the sweep's directory when a signal stops a Ray sweep.
STOP_FILE = '.grid_search_stop'
# In the sweep's directory, a file named after each run whose Ray task has begun.
STARTED_DIR = '.grid_search_started'
LOG_DIR = 'logs'
LOG_SUFFIX = '.log'
NAME_MAX = 255  # bytes in a file name on common file systems (ext4, xfs, btrfs, tmpfs)
# Runs in one sweep: each is a directory and a log, and all are listed before any starts.
MAX_RUNS = 100_000
# What a sweep's user can do about a run directory of another experiment
# (grid_search has no --start_over: a run is trained afresh when its directory is gone).
GRID_ADVICE = (
    'Rerun the sweep with the --gin_file and --gin_param it was started with to continue '
    "it, give the changed sweep another --root_dir, or move this run's directory aside "
    '(or delete it) and rerun to train it afresh.'
)


class SearchSpace(NamedTuple):
    """``parameters``: ``[(names, [gin value text, ...]), ...]`` in file order; ``seeds``."""

    parameters: List[tuple]
    seeds: List[int]


_GIB = float(1 << 30)


class GridRun(NamedTuple):
    """One combination with one seed, configured and ready to train."""

    name: str
    seed: int
    root_dir: str
    log_path: str
    config_text: Optional[str]  # None when the config does not parse
    num_env_steps: Optional[int]
    error: Optional[str]
    torch_num_threads: Optional[int] = None  # TrainerConfig's, as the config sets it


def gin_literal(value) -> str:
    """The gin text of a JSON value: strings verbatim, lists as tuples, the rest as Python."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        items = [gin_literal(v) for v in value]
        return '(' + ', '.join(items) + (',)' if len(items) == 1 else ')')
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    raise ValueError(
        f'cannot turn {value!r} into a gin value: use a number, true, false, null, '
        'a list, or a string of gin text'
    )


class _RepeatedKey(Exception):
    pass


def _object_without_repeated_keys(pairs) -> dict:
    keys = [key for key, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise _RepeatedKey(key)
    return dict(pairs)


_TOO_DEEP = '{path} nests its lists or objects too deeply for JSON to read'


def load_search_space(path: str) -> SearchSpace:
    """Read and check the search config JSON; raises ValueError naming what is wrong."""
    if os.path.isdir(path):
        raise ValueError(f'--search_config {path} is a directory: give its JSON file')
    # A byte order mark (Windows editors save one) is no part of the JSON.
    with open(path, encoding='utf-8-sig') as f:
        try:
            spec = json.load(f, object_pairs_hook=_object_without_repeated_keys)
        except json.JSONDecodeError as e:
            pasted = pasted_character(e.doc, 'The file', e.pos)
            raise ValueError(f'{path} is not valid JSON: {e}.{pasted}') from e
        except UnicodeDecodeError as e:
            raise ValueError(not_text(path, e)) from None
        except RecursionError:
            raise ValueError(_TOO_DEEP.format(path=path)) from None
        except _RepeatedKey as e:
            # json keeps the last of two equal keys: the first one's values would be lost.
            raise ValueError(
                f'{path} has the key {e.args[0]!r} twice in one object: '
                'give each key once (list all its values under it)'
            ) from e
    try:
        json.dumps(spec, ensure_ascii=False).encode()
    except UnicodeEncodeError as e:
        # A \u escape of half a surrogate pair: no file name, log or table can hold it.
        raise ValueError(
            f'{path} holds {e.object[e.start : e.end]!r}, which is no character (half of a '
            'surrogate pair in a \\u escape): write the character itself, or its pair'
        ) from None
    except RecursionError:
        raise ValueError(_TOO_DEEP.format(path=path)) from None
    if not isinstance(spec, dict) or set(spec) != {'parameters', 'repeats'}:
        raise ValueError(
            f'{path} must hold a JSON object with exactly the keys "parameters" '
            f'and "repeats", got {sorted(spec) if isinstance(spec, dict) else spec}'
        )
    parameters = spec['parameters']
    if not isinstance(parameters, dict):
        raise ValueError(
            f'"parameters" in {path} must map gin names to lists of values ({{}} for seeds '
            f'alone), got {parameters!r}'
        )
    space, keys = [], {}
    for key, values in parameters.items():
        names = tuple(n.strip() for n in key.split(','))
        if not all(names):
            raise ValueError(
                f'"parameters" in {path}: {key!r} names an empty parameter (a stray comma?)'
            )
        if names in keys:
            # Spelt apart only by spaces, which json keeps: the later key's values
            # would override the earlier's in every run.
            raise ValueError(
                f'{path} has the key {",".join(names)!r} twice in "parameters", as '
                f'{keys[names]!r} and {key!r}: give each key once (list all its values under it)'
            )
        keys[names] = key
        if SEED_PARAM in names:
            raise ValueError(f'{SEED_PARAM} cannot be searched: the seeds come from "repeats"')
        if not isinstance(values, list) or not values:
            raise ValueError(
                f'"parameters" in {path}: the values of {key!r} must be a '
                f'non-empty list, got {values!r}'
            )
        try:
            space.append((names, [gin_literal(v) for v in values]))
        except RecursionError:
            raise ValueError(
                f'"parameters" in {path}: a value of {key!r} nests its lists too deeply to '
                'become a gin value'
            ) from None
    repeats = spec['repeats']
    if isinstance(repeats, int) and not isinstance(repeats, bool) and 0 < repeats <= MAX_SEED:
        num_seeds = repeats
    elif (
        isinstance(repeats, list)
        and repeats
        and all(
            isinstance(s, int) and not isinstance(s, bool) and 0 <= s < MAX_SEED for s in repeats
        )
        and len(set(repeats)) == len(repeats)
    ):
        num_seeds = len(repeats)
    else:
        raise ValueError(
            f'"repeats" in {path} must be a positive number of seeds or a list of '
            f'distinct integer seeds in [0, 2**32), got {repeats!r}'
        )
    # Counted before any list of them is built: 2**32 seeds would take tens of GB.
    combinations = math.prod(len(values) for _, values in space)
    if combinations * num_seeds > MAX_RUNS:
        raise ValueError(
            f'{path} makes {combinations * num_seeds} runs ({combinations} combinations of '
            f'"parameters" x {num_seeds} seeds), more than the {MAX_RUNS} one sweep may have: '
            'search fewer values or seeds, or split the search into several sweeps'
        )
    seeds = list(range(repeats)) if isinstance(repeats, int) else repeats
    return SearchSpace(space, seeds)


def _all_names(names) -> str:
    """A key's label made of all its names, e.g. ``a.X.lr+b.X.lr``."""
    return '+'.join('.'.join(re.split(r'[/.]', name)) for name in names)


def _label_parts(names) -> List[str]:
    """Components of a key, e.g. ['actor', 'Adam', 'lr']; for tied names their common
    suffix, or all the names as one part where they have none (a name's ``/`` would
    make a directory of the run's name)."""
    split = [re.split(r'[/.]', n) for n in names]
    common = []
    for parts in zip(*(reversed(s) for s in split)):
        if len(set(parts)) > 1:
            break
        common.insert(0, parts[0])
    return common or [_all_names(names)]


def _labels(keys) -> Dict[tuple, str]:
    """The shortest suffix of each key's components that no other key shares.

    Keys whose every suffix is shared can end up with one label (tied names
    with another key's common suffix: ``a/X.lr,b/X.lr`` and ``c/X.lr,d/X.lr``
    are both ``X.lr``); each of those is labelled by all its names instead,
    ``a.X.lr+b.X.lr``, so no two keys look alike in a run's name.
    """
    parts = {k: _label_parts(k) for k in keys}
    labels = {}
    for key, own in parts.items():
        for n in range(1, len(own) + 1):
            suffix = own[-n:]
            if all(other[-n:] != suffix for k, other in parts.items() if k != key):
                break
        labels[key] = '.'.join(suffix)
    taken = collections.Counter(labels.values())
    for key, label in labels.items():
        if taken[label] > 1:
            labels[key] = _all_names(key)
    return labels


def _name_value(text: str) -> str:
    return re.sub(r'[^\w.+-]+', '_', text).strip('_') or '_'


def expand_grid(space: SearchSpace) -> List[tuple]:
    """``[(name, seed, [gin bindings])]`` of every run: each combination with each seed.

    Raises:
        ValueError: two runs would share a name, or a name (with its log's
            suffix) would not fit in a file name.
    """
    varied = [names for names, values in space.parameters if len(values) > 1]
    labels = _labels(varied)
    runs = []
    for combination in itertools.product(*(values for _, values in space.parameters)):
        bindings, name_parts = [], {}
        for (names, _), value in zip(space.parameters, combination):
            bindings += [f'{n}={value}' for n in names]
            if names in labels:
                name_parts[names] = f'{labels[names]}={_name_value(value)}'
        for seed in space.seeds:
            name = ','.join(list(name_parts.values()) + [f'seed={seed}'])
            if len((name + LOG_SUFFIX).encode()) > NAME_MAX:
                longest = max(name_parts, key=lambda names: len(name_parts[names].encode()))
                raise ValueError(
                    f'the run name {name[:40]!r}... is {len(name.encode())} bytes, more than '
                    f'the {NAME_MAX - len(LOG_SUFFIX)} a file name can hold with {LOG_SUFFIX!r}; '
                    f'its longest part comes from "parameters" entry {",".join(longest)!r}. Put '
                    'a long value in a gin macro: `big = (...)` in a gin file, "%big" in the '
                    'search config.'
                )
            runs.append((name, seed, bindings))
    counts = collections.Counter(name for name, _, _ in runs)
    duplicates = sorted(n for n, count in counts.items() if count > 1)
    if duplicates:
        raise ValueError(
            f'two runs would share the directory {duplicates[0]!r}: a parameter '
            'lists a value twice, or two values differ only in characters a '
            'directory name cannot hold'
        )
    return runs


def search_entry_message(message: str, space: SearchSpace) -> str:
    """``message`` of a config error, naming a searched binding as its entry in the search config.

    ``parse_config`` names every binding a ``--gin_param``; the user gave these
    in the search config instead.
    """
    for names, values in space.parameters:
        for name, value in itertools.product(names, values):
            # A long binding is quoted by its start (``shortened``), as is its value here.
            message = message.replace(
                f'--gin_param {shortened(repr(f"{name}={value}"))}',
                f'the search config\'s "parameters" entry {",".join(names)!r}, '
                f'value `{shortened(value)}`',
            )
    return message


def _parameter_key(name: str):
    """``name``'s parameter as gin keys it: scope, configurable and parameter.

    ``Adam.lr`` and ``torch.optim.Adam.lr`` are one parameter, ``actor/Adam.lr``
    another. A name gin does not know (a macro, a misspelling that parsing the
    config reports) is its own key.
    """
    from gin import config

    try:
        # (scope, complete selector, parameter): the key's own equality also
        # compares the selector as given.
        return config.ParsedBindingKey.parse(name).scope_selector_arg
    except (ValueError, SyntaxError):
        return name


def gin_param_conflict(gin_params: Sequence[str], space: SearchSpace) -> Optional[str]:
    """Why a ``--gin_param``, or an entry of the search config that another entry's
    parameter is also in, would be lost in the sweep, or None.

    The searched values and the seed are bound after ``--gin_param``, and gin
    keeps a parameter's last binding: such a ``--gin_param`` would be silently
    overridden in every run.

    Args:
        gin_params: the ``--gin_param`` values, each one or more gin statements.
        space: the search config.
    """
    import alf_lite.all_configurables  # noqa: F401  (gin resolves only registered names)

    swept, entries = {}, {}
    seed_key = _parameter_key(SEED_PARAM)
    for names, _ in space.parameters:
        entry = ','.join(names)
        for name in names:
            key = _parameter_key(name)
            if key == seed_key:
                # Spelt otherwise than load_search_space checks: the seed, bound after it,
                # would override it in every run.
                return (
                    f'{name} of the search config\'s "parameters" entry {entry!r} is '
                    f'{SEED_PARAM}, which cannot be searched: the seeds come from "repeats".'
                )
            if entries.get(key, entry) != entry:
                return (
                    f'{name} is searched by two entries of the search config\'s "parameters", '
                    f'{entries[key]!r} and {entry!r}: the later would override the earlier in '
                    'every run, while the run names show both values; search it in one entry.'
                )
            entries[key] = entry
            swept[key] = (
                name,
                f'the search config\'s "parameters" entry {entry!r} sweeps',
                'remove it from the grid or from --gin_param',
            )
    swept[_parameter_key(SEED_PARAM)] = (
        SEED_PARAM,
        'the sweep sets to each seed of "repeats"',
        'give the seeds in "repeats" instead',
    )
    for param in gin_params:
        for statement in config_statements(param):
            binding = split_binding(statement)
            overridden = binding and swept.get(_parameter_key(binding[0]))
            if overridden:
                name, sweeper, remedy = overridden
                return (
                    f"--gin_param {statement!r} binds {name}, which {sweeper}: the grid's "
                    f'values would override it in every run; {remedy}.'
                )
    return None


def overridden_search(space: SearchSpace) -> Optional[str]:
    """Why a searched parameter would not get its values where a binding of it in a more
    specific scope applies (one of the gin files, a ``--gin_param`` or another entry of the
    search config), or None.

    Call once the sweep's config is parsed with one combination (the values do
    not change which parameters are bound). The search config's ``Adam.lr`` would
    be overridden by ``actor/Adam.lr`` in the actor's scope: runs of different
    values of it could train the same and differ in their names only.
    """
    from alf_lite import config

    for names, _ in space.parameters:
        # The names of one entry take its values together: one of them gets them where
        # another of them is overridden.
        entry = {_parameter_key(name) for name in names}
        for name in names:
            key = _parameter_key(name)
            if not isinstance(key, tuple) or key[1] == 'gin.macro':
                continue  # a macro: no scope of a configurable
            scope, selector, param = key
            winners = [
                (other, selector, param)
                for other in config.bound_scopes(selector, param)
                if config.more_specific_scope(scope, other)
                and (other, selector, param) not in entry
            ]
            if not winners:
                continue
            short = selector.rsplit('.', 1)[-1]
            bound = [f'{other}/{short}.{param}' for other, _, _ in winners]
            places = []
            for binding, winner in zip(bound, winners):
                where = config.binding_location(winner)
                places.append(f'`{binding}`' + (f' ({where})' if where else ''))
            message = search_entry_message(
                f'{name} of the search config\'s "parameters" entry {",".join(names)!r} is '
                f'overridden by a binding of it in a more specific scope, {"; ".join(places)}: '
                'gin applies the binding of the most specific scope, so the runs would not get '
                'the searched values there and could differ in their names only. Search '
                f'{", ".join(bound)} instead of {name} (one entry "{",".join(bound)}" sets '
                'them all to one value)',
                space,
            )
            if '--gin_param' in message:  # one the user gave, not a searched value
                message += ', or leave out that --gin_param'
            return message + '.'
    return None


def unused_searched_macro(space: SearchSpace) -> Optional[str]:
    """Why an entry of the search config would not change the runs: each of its names is a
    macro that no binding uses (misspelt, or its only use overridden), or None.

    Call once the sweep's config is parsed with one combination (the values do not
    change which macros are used). The runs of such an entry would differ in their
    names only.
    """
    import gin

    bindings = gin.config._CONFIG
    macro = gin.get_configurable(gin.config.macro)
    used = {
        ref.config_key
        for params in bindings.values()
        for value in params.values()
        for ref in gin.config.iterate_references(value, to=macro)
    }
    for names, _ in space.parameters:
        macros = [name for name in names if (name, 'gin.macro') in bindings]
        if len(macros) == len(names) and all((name, 'gin.macro') not in used for name in macros):
            entry = ','.join(names)
            return (
                f'the search config\'s "parameters" entry {entry!r} sets '
                + ('a macro' if len(names) == 1 else 'macros')
                + ' that no binding uses ('
                + ', '.join(f'%{name}' for name in names)
                + '): its values would change no run (runs named apart by them would train '
                'alike). Fix the name, or use the macro in a binding of a gin file (`X.y = %'
                + names[0]
                + '`).'
            )
    return None


# Where the configurables are that only the algorithm's build calls (algorithms, their
# noises, networks, optimizers): building the algorithm tells whether a config uses one.
ALGORITHM_CONFIGURABLES = ('alf_lite.algorithms.', 'alf_lite.networks.', 'torch.optim.')


def _called_in(scope: str, selector: str) -> bool:
    """Whether something built so far called ``selector`` in ``scope`` or a scope inside it."""
    import gin

    components = scope.split('/') if scope else []
    for called_in, called in gin.config._OPERATIVE_CONFIG:
        call_components = called_in.split('/') if called_in else []
        if called == selector and call_components[: len(components)] == components:
            return True
    return False


def _referred_to(scope: str, selector: str) -> bool:
    """Whether a binding of the config as parsed refers to ``selector`` (``@Name``,
    ``@Name()``) in ``scope`` or a scope inside it."""
    import gin

    components = scope.split('/') if scope else []
    pending = [value for params in gin.config._CONFIG.values() for value in params.values()]
    while pending:
        value = pending.pop()
        if isinstance(value, gin.config.ConfigurableReference):
            _, referred = value.config_key
            if referred == selector and value.scopes[: len(components)] == components:
                return True
        elif isinstance(value, (list, tuple, set)):
            pending.extend(value)
        elif isinstance(value, dict):
            pending.extend(value.items())
    return False


def _macro_uses(name: str) -> List[tuple]:
    """The gin keys (scope, configurable, parameter) of the bindings of the config as parsed
    that take the macro ``name``, also through macros that take it (``b = %name``)."""
    import gin

    macro = gin.get_configurable(gin.config.macro)
    uses, pending, seen = [], [name], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for (scope, selector), params in gin.config._CONFIG.items():
            for param, value in params.items():
                references = gin.config.iterate_references(value, to=macro)
                if any(ref.config_key == (current, 'gin.macro') for ref in references):
                    if selector == 'gin.macro':
                        pending.append(scope)
                    elif (scope, selector, param) not in uses:  # one taking it twice: once
                        uses.append((scope, selector, param))
    return uses


def _searched_keys(names: Sequence[str]) -> List[Tuple[str, object]]:
    """Each name of a search config's entry with the gin key it sets (``_parameter_key``);
    a macro's name with the key of each binding that takes it, in the config as parsed."""
    import gin

    pairs = []
    for name in names:
        key = _parameter_key(name)
        if not isinstance(key, tuple) and (name, 'gin.macro') in gin.config._CONFIG:
            pairs.extend((name, use) for use in _macro_uses(name))
        else:
            pairs.append((name, key))
    return pairs


def searched_calls(space: SearchSpace) -> Optional[Dict[tuple, bool]]:
    """The searched names' gin keys (``_parameter_key``) whose configurable the algorithm
    of the config as parsed calls in the name's scope, each with whether a call took the
    parameter from its binding (False: every call sets it itself); None where it cannot
    tell.

    A name whose configurable a binding of the config refers to (``@SacAlgorithm``,
    ``@actor/Adam()``) counts as used as it is. Otherwise the algorithm is built on
    torch's ``meta`` device, as train's memory check builds it: nothing is allocated.
    None where it cannot be built there: the run's own build tells its error.
    """
    keys = {key for names, _ in space.parameters for _, key in _searched_keys(names)}
    judged = {
        key for key in keys if isinstance(key, tuple) and key[1].startswith(ALGORITHM_CONFIGURABLES)
    }
    if all(_referred_to(key[0], key[1]) for key in judged):
        # Each is named in the config (``@SacAlgorithm``, ``@actor/Adam()``): taken as used
        # without a build, whose first optimizer costs torch a second of imports.
        return {key: True for key in judged}
    import torch

    from alf_lite.config import binding_used
    from alf_lite.trainer import TrainerConfig

    try:
        # The sizes change which networks are built, not which configurables are called.
        with torch.device('meta'):
            TrainerConfig().algorithm_ctor(observation_dim=1, action_dim=1)
    except Exception:  # noqa: BLE001  (the run's own build raises the config's errors)
        return None
    return {
        key: binding_used(*key)
        for key in keys
        if isinstance(key, tuple) and _called_in(key[0], key[1])
    }


def unused_search(space: SearchSpace, calls: Optional[Dict[tuple, bool]]) -> Optional[str]:
    """Why an entry of the search config would change no run: the algorithm of no run
    uses any of its names (a configurable never called in that scope, such as
    ``DdpgAlgorithm.gamma`` with ``@SacAlgorithm``, or a parameter its caller always
    sets; for a macro, any of the bindings that take it), or None.

    Args:
        space: the search config.
        calls: ``searched_calls`` merged over the runs' configs (a key used by one is
            used); None where one could not tell, and nothing is judged. Only names of
            ``ALGORITHM_CONFIGURABLES`` are judged: the trainer's, the envs' and those
            of other modules are called outside the algorithm's build.
    """
    if calls is None:
        return None
    for names, _ in space.parameters:
        pairs = _searched_keys(names)
        if not all(
            isinstance(key, tuple) and key[1].startswith(ALGORITHM_CONFIGURABLES)
            for _, key in pairs
        ) or any(calls.get(key) for _, key in pairs):
            continue
        # A macro taken only by macros that no binding takes (``h = %g`` alone) has no key.
        reasons = [
            f'%{name}: no binding takes it, only macros that none takes'
            for name in names
            if all(taken != name for taken, _ in pairs)
        ]
        for name, key in pairs:
            scope, selector, param = key
            short = f'{scope + "/" if scope else ""}{selector.rsplit(".", 1)[-1]}'
            if _parameter_key(name) != key:  # a macro, taken by this binding
                name = f'%{name} in {short}.{param}'
            reasons.append(
                f'{name}: the config calls `{short}` nowhere'
                if key not in calls
                else f'{name}: every call of `{short}` sets {param} itself'
            )
        return (
            f'the search config\'s "parameters" entry {",".join(names)!r} searches what the '
            f'algorithm this config builds never uses ({"; ".join(reasons)}): its values would '
            'change no run (runs named apart by them would train alike). Search a parameter '
            'of what the config builds, or refer to the configurable in a gin file.'
        )
    return None


def configure_runs(
    space: SearchSpace,
    root_dir: str,
    gin_files,
    gin_params,
    num_threads: int,
    imports: Optional[set] = None,
    calls: Optional[dict] = None,
    memory: Optional[dict] = None,
) -> List[GridRun]:
    """Parse each run's config; a run whose config does not parse carries the error instead.
    Given, ``imports`` gets the top-level modules that the runs' configs import, ``calls``
    the ``searched_calls`` of the runs' configs merged (a key that one uses is used), with
    the key None where one could not tell, and ``memory`` each run's ``RunMemory`` (None
    where ``run_memory_bytes`` is) by name."""
    import gin

    from alf_lite.config import ConfigError, imported_modules, parse_config
    from alf_lite.replay_buffer import configured_settings
    from alf_lite.trainer import TrainerConfig

    runs = []
    built = set()  # the combinations whose calls are in ``calls``: the seed changes none
    sized = {}  # each combination's RunMemory: the seed changes no size
    env_dims = {}  # run_memory_bytes's made envs
    for name, seed, bindings in expand_grid(space):
        log_path = os.path.join(root_dir, LOG_DIR, f'{name}.log')
        params = (
            [f'{THREADS_PARAM}={num_threads}']
            + list(gin_params)
            + bindings
            + [f'{SEED_PARAM}={seed}']
        )
        run_dir = os.path.join(root_dir, name)
        try:
            parse_config(gin_files, params)
            config = TrainerConfig()
            if imports is not None:
                imports.update(imported_modules())
            runs.append(
                GridRun(
                    name,
                    seed,
                    run_dir,
                    log_path,
                    gin.config_str(),
                    config.num_env_steps,
                    None,
                    config.torch_num_threads,
                )
            )
            if memory is not None:
                if tuple(bindings) not in sized:
                    nbytes = run_memory_bytes(config, env_dims)
                    sized[tuple(bindings)] = (
                        None
                        if nbytes is None
                        else RunMemory(nbytes, configured_settings()['max_memory_fraction'])
                    )
                memory[name] = sized[tuple(bindings)]
            if calls is not None and tuple(bindings) not in built:
                built.add(tuple(bindings))
                called = searched_calls(space)
                for key, used in ({None: True} if called is None else called).items():
                    calls[key] = calls.get(key, False) or used
        except (ConfigError, ValueError, TypeError) as e:
            runs.append(
                GridRun(
                    name,
                    seed,
                    run_dir,
                    log_path,
                    None,
                    None,
                    'config: '
                    + ' '.join(user_message(search_entry_message(str(e), space)).split()),
                )
            )
    if calls is not None and not built:
        calls[None] = True  # no config parsed: nothing tells
    return runs


# The exit codes of a train stopped by a signal it acts on (at a checkpoint, once training
# began): a run that goes on when the sweep is run again.
RUN_STOP_EXIT_CODES = frozenset(EXIT_SIGNAL_BASE + s for s in ENV_PROCESS_IGNORED)


def is_finished(run: GridRun) -> bool:
    """Whether ``run`` trained to its end and wrote its final evaluation.

    Its end is the length it last trained for (its config.gin's ``num_env_steps``), where
    the sweep's is shorter: a run stopped past the sweep's length never finished (train
    refuses to shorten it, and says so).
    """
    run_dir = RunDir(run.root_dir)
    steps = run_dir.latest_checkpoint_env_steps()
    if steps is None or steps < run.num_env_steps:
        return False
    try:
        trained_for = config_int(read_config_text(run_dir.config_file), NUM_ENV_STEPS_PARAM)
    except (OSError, ValueError):  # no config.gin (a Python API run), or unreadable
        trained_for = run.num_env_steps
    if steps < (DEFAULT_NUM_ENV_STEPS if trained_for is None else trained_for):
        return False
    # A signal during the final evaluation leaves the last checkpoint without its
    # row (the checkpoint holds it as pending, for the resume to write).
    eval_steps, _ = read_scalar_if_any(run.root_dir, EVAL_RETURN)
    return steps in eval_steps


class GpuPool:
    """Hands each new run the GPU with the fewest runs on it, at most ``runs_per_gpu`` each.

    Of the GPUs with the fewest runs, the first in ``gpus`` is taken, so that a
    GPU is shared only when every other one holds as many runs.

    Args:
        gpus: the GPU ids, as ``CUDA_VISIBLE_DEVICES`` names them.
        runs_per_gpu: runs one GPU holds at a time (>= 1).
    """

    def __init__(self, gpus: Sequence[str], runs_per_gpu: int):
        self._runs = dict.fromkeys(gpus, 0)
        self._runs_per_gpu = runs_per_gpu
        self._changed = threading.Condition()

    def acquire(self) -> str:
        """The GPU for a run that starts now; waits while every GPU is full."""
        with self._changed:
            self._changed.wait_for(lambda: min(self._runs.values()) < self._runs_per_gpu)
            gpu = min(self._runs, key=self._runs.get)
            self._runs[gpu] += 1
            return gpu

    def release(self, gpu: str) -> None:
        """Hand back the GPU of a run that ended."""
        with self._changed:
            self._runs[gpu] -= 1
            self._changed.notify()


class SweepStop:
    """While entered (in the main thread), SIGINT and SIGTERM stop a sweep.

    Locally, the signal goes on to every training process ``track``ed (each in
    a session of its own, so a Ctrl-C reaches them only this way), which writes
    a checkpoint and exits; ``run_ray`` stops its tasks once ``signum`` is set.
    Runs not started by then are not started.

    SIGTSTP (Ctrl-Z) pauses the sweep: each tracked run's process group (train and
    its env processes) is stopped, then grid_search; SIGCONT (``fg``, ``bg``)
    continues the runs with it.
    """

    def __init__(self):
        self.signum: Optional[int] = None
        # Each signal passed on: a run stops with the exit code of the first it got.
        self._signums = set()
        self._processes = []
        self._paused = False
        # Reentrant: a handler may run in the main thread while it holds the lock.
        self._lock = threading.RLock()
        self._previous = {}

    def _forward(self, process) -> None:
        with contextlib.suppress(OSError):  # it ended meanwhile
            process.send_signal(self.signum)

    def _handler(self, signum, frame):
        first = self.signum is None
        self.signum = signum
        self._signums.add(signum)
        if first:
            # Not print(): the main thread may be inside a print of its own.
            with contextlib.suppress(OSError, ValueError):
                os.write(
                    sys.stderr.fileno(),
                    f'{signal.Signals(signum).name}: stopping the sweep; each running run '
                    'writes a checkpoint, no other run starts.\n'.encode(),
                )
        with self._lock:
            processes = list(self._processes)
        for process in processes:
            self._forward(process)

    def mark(self, result: dict, passed_on: Optional[int] = None) -> dict:
        """``result`` of a run that ended, marked ``stopped`` if it ended by the signal, or
        by ``passed_on``, the one its run got instead (SIGINT from a Ray task)."""
        if self.signum is not None and result['returncode'] != 0:
            # A run that failed meanwhile counts as stopped too; its error says why.
            result['stopped'] = True
            signums = self._signums | {self.signum} | ({passed_on} if passed_on else set())
            stops = {EXIT_SIGNAL_BASE + s for s in signums}
            if result['returncode'] in stops:
                result['error'] = None  # train's exit after its checkpoint
        return result

    def track(self, process) -> None:
        """``train_in_subprocess``'s ``on_start``: a run started as the signal came stops too,
        one started as the sweep paused pauses too."""
        with self._lock:
            self._processes.append(process)
            if self._paused:
                _signal_group(process, signal.SIGSTOP)
        if self.signum is not None:
            self._forward(process)

    def _set_paused(self, paused: bool) -> None:
        """Stop (SIGSTOP) or continue (SIGCONT) every tracked run's process group."""
        with self._lock:
            self._paused = paused
            for process in self._processes:
                _signal_group(process, signal.SIGSTOP if paused else signal.SIGCONT)

    def _pause(self, signum, frame):
        self._set_paused(True)
        # Not SIGTSTP, which the kernel drops for a process group no shell controls; the
        # shell sees a job stopped either way. Continued, ``_go_on`` runs next.
        os.kill(os.getpid(), signal.SIGSTOP)

    def _go_on(self, signum, frame):
        # Also after a stop of the whole sweep (a batch system's suspend): SIGCONT to a
        # process that was not stopped does nothing.
        self._set_paused(False)

    def __enter__(self) -> 'SweepStop':
        if in_main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in STOP_SIGNALS}
            # A sweep started with SIGTSTP ignored is not to be paused.
            if signal.getsignal(signal.SIGTSTP) != signal.SIG_IGN:
                self._previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self._pause)
                self._previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, self._go_on)
        return self

    def __exit__(self, *exc_info):
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}


def _signal_group(process, signum: int) -> None:
    """Send ``signum`` to the process group of ``process``, a train in a session of its own
    (its env processes are in its group), unless it has been waited for."""
    if process.returncode is None:
        with contextlib.suppress(OSError):  # it ended meanwhile
            os.killpg(process.pid, signum)


class RunMemory(NamedTuple):
    """What a run allocates up front (``run_memory_bytes``), and the share of the
    available memory its config lets its replay buffer and networks take
    (``ReplayBuffer.max_memory_fraction``)."""

    bytes: int
    fraction: float


def run_memory_bytes(config, env_dims: dict) -> Optional[int]:
    """The CPU memory a run of the config as parsed allocates up front: its replay buffer
    and its networks in training (parameters, gradients, optimizer state), as train's own
    checks count them; None where it is not known here (a run on a GPU or on a device
    this machine lacks, an env that cannot be made here, networks that cannot be built
    on torch's ``meta`` device). What its envs take is not counted.

    Args:
        config: the run's ``TrainerConfig``.
        env_dims: the observation and action sizes of the envs made so far, by their
            bindings: one env is made (in this process) per distinct env setting.
    """
    import gin

    from alf_lite.device import device_type
    from alf_lite.environments import create_environment
    from alf_lite.model_memory import estimate_model_bytes
    from alf_lite.replay_buffer import bytes_per_step, configured_settings

    buffer_device = configured_settings()['device']
    try:
        # The networks, and the buffer where no ReplayBuffer.device says otherwise. Not
        # resolve_device: it would initialise CUDA in this process, which trains nothing.
        if device_type(config.device) != 'cpu' or (
            buffer_device is not None and device_type(buffer_device) != 'cpu'
        ):
            return None
    # A misspelt device: the run's own check names it (as it names a device this
    # machine lacks).
    except ValueError:
        return None
    settings = gin.get_bindings(create_environment)
    num_envs = settings.get(
        'num_parallel_environments',
        inspect.signature(create_environment).parameters['num_parallel_environments'].default,
    )
    if not isinstance(num_envs, int) or num_envs < 1:  # the run's own check names it
        return None
    key = repr(sorted(settings.items()))
    # What the env and the networks log as they are made, each run's log has.
    with _logging_off():
        if key not in env_dims:
            try:
                with create_environment(num_parallel_environments=1, use_subprocesses=False) as env:
                    env_dims[key] = (env.observation_dim, env.action_dim)
            except Exception:  # noqa: BLE001  (the run's own start tells what is wrong)
                env_dims[key] = None
        if env_dims[key] is None:
            return None
        observation_dim, action_dim = env_dims[key]
        networks = estimate_model_bytes(
            config.algorithm_ctor, observation_dim=observation_dim, action_dim=action_dim
        )
    if networks is None:
        return None
    buffer = num_envs * config.replay_buffer_length * bytes_per_step(observation_dim, action_dim)
    return buffer + networks.training


@contextlib.contextmanager
def _logging_off():
    """Within it, nothing below an error is logged."""
    previous = logging.root.manager.disable
    logging.disable(max(previous, logging.WARNING))
    try:
        yield
    finally:
        logging.disable(previous)


class MemoryBudget:
    """Starts runs only while the memory of those under way leaves room for them.

    A run of ``need`` bytes starts when the runs under way and it take at most
    ``budget`` bytes, or when no run is under way (it then runs alone, and its own
    check refuses it where it does not fit). Runs started together would each find
    the memory free at their start and pass their own check, then together take more
    than there is.
    """

    def __init__(self, budget: int):
        self.budget = budget
        self._in_use = 0
        self._changed = threading.Condition()

    def acquire(self, need: int, stopped) -> bool:
        """Wait for room for ``need`` bytes and take it; False (nothing taken) once
        ``stopped()``."""
        with self._changed:
            while self._in_use and self._in_use + need > self.budget:
                if stopped():
                    return False
                self._changed.wait(0.5)
            self._in_use += need
            return True

    def release(self, need: int) -> None:
        with self._changed:
            self._in_use -= need
            self._changed.notify_all()


def memory_text(todo: List[GridRun], memory: Dict[str, Optional[RunMemory]], max_workers: int):
    """The sweep's memory line and its ``MemoryBudget``, for local runs on the CPU.

    The budget is the smallest ``max_memory_fraction`` of the runs to train (a sweep
    may search it) of the memory available.

    Returns:
        ``(text, budget)``: what the runs to train take and what is available, and the
        budget; ``(None, None)`` where no run's memory is known here.
    """
    from alf_lite.device import available_cpu_memory

    sized = [memory[run.name] for run in todo if memory.get(run.name)]
    if not sized:
        return None, None
    # A run not sized here counts as taking nothing, but as one of the runs at a time.
    known = sorted((m.bytes for m in sized), reverse=True) + [0] * (len(todo) - len(sized))
    fraction = min(m.fraction for m in sized)
    available = available_cpu_memory()[0]
    budget = int(fraction * available)
    at_once = sum(known[:max_workers])
    text = (
        f'memory: a run takes up to {_size(known[0])} (its replay buffer and its networks '
        f"in training; not counted: its process's Python and torch, its envs), "
        f'{min(max_workers, len(known))} at a time up '
        f'to {_size(at_once)}, of {_size(available)} available'
    )
    if at_once > budget:
        text += (
            f': more than max_memory_fraction={fraction:g} of it ({_size(budget)}), so a '
            'run starts only once those under way leave room for it'
        )
    return text + '.', budget


def _size(nbytes: int) -> str:
    """``nbytes`` in KiB below a MiB (a tiny run's is not 0.0 MiB), MiB below a GiB, else
    in GiB."""
    if nbytes < 1 << 20:
        return f'{nbytes / (1 << 10):.1f} KiB'
    if nbytes < _GIB:
        return f'{nbytes / (1 << 20):.1f} MiB'
    return f'{nbytes / _GIB:.2f} GiB'


def run_local(
    todo: List[GridRun],
    max_workers: int,
    num_threads: int,
    report,
    gpus: Sequence[str] = (),
    runs_per_gpu: int = 1,
    budget: Optional[MemoryBudget] = None,
    memory: Optional[Dict[str, Optional[RunMemory]]] = None,
) -> Optional[int]:
    """Train ``todo`` in at most ``max_workers`` subprocesses at a time.

    With ``gpus``, each run takes a GPU of ``GpuPool(gpus, runs_per_gpu)`` and
    sees that GPU alone; runs wait for one when every GPU is full. With ``budget``,
    a run also waits for room for its ``memory`` (by name; unknown: none). A run not
    started because a signal stopped the sweep is reported as ``NOT_STARTED``.

    Returns:
        the number of the signal that stopped the sweep, or None.
    """
    from alf_lite.runs import train_in_subprocess

    gpu_pool = GpuPool(gpus, runs_per_gpu) if gpus else None
    stop = SweepStop()
    # The modules the config imports were found where the sweep found them: its working
    # directory among them when it is on the sweep's path (python -m puts it there), which
    # train, whose working directory is the logs' and stays off its path, would not see.
    cwd = os.getcwd()
    on_path = any(os.path.abspath(entry or os.curdir) == cwd for entry in sys.path)
    import_dirs = [cwd] if on_path else []

    def train_one(run):
        # OpenMP's and MKL's threads as many as the run's torch threads, where its config
        # sets those itself.
        threads = run.torch_num_threads or num_threads
        if gpu_pool is None:
            return train_in_subprocess(
                run.root_dir,
                run.config_text,
                threads,
                run.log_path,
                on_start=stop.track,
                import_dirs=import_dirs,
            )
        gpu = gpu_pool.acquire()
        try:
            if stop.signum is not None:
                return dict(NOT_STARTED)
            return train_in_subprocess(
                run.root_dir,
                run.config_text,
                threads,
                run.log_path,
                extra_env={'CUDA_VISIBLE_DEVICES': gpu},
                on_start=stop.track,
                import_dirs=import_dirs,
            )
        finally:
            gpu_pool.release(gpu)

    def train(run):
        if stop.signum is not None:
            return dict(NOT_STARTED)
        sized = (memory or {}).get(run.name)
        need = sized.bytes if sized else 0
        if budget is not None and not budget.acquire(need, lambda: stop.signum is not None):
            return dict(NOT_STARTED)
        start = time.monotonic()
        try:
            return train_one(run)
        except OSError as e:
            # The run's files could not be written (a full disk, say): this run
            # fails, the sweep goes on.
            return {
                'returncode': None,
                'wall_time_s': time.monotonic() - start,
                'error': f'{type(e).__name__}: {e}',
            }
        finally:
            if budget is not None:
                budget.release(need)

    # Threads only wait on the training processes; the work is in the processes.
    with stop, concurrent.futures.ThreadPoolExecutor(max_workers) as pool:
        futures = {pool.submit(train, run): run for run in todo}
        for future in completed_waking_for_signals(futures):
            report(futures[future], stop.mark(future.result()))
    return stop.signum


def ray_task_options(num_cpus_per_run: int, num_gpus_per_run: float) -> dict:
    """The resources each Ray task requests (GPUs only when some are asked for)."""
    # max_calls=1: a fresh worker process per run, holding nothing between runs.
    options = {'num_cpus': num_cpus_per_run, 'max_calls': 1}
    if num_gpus_per_run > 0:
        options['num_gpus'] = num_gpus_per_run
    return options


# The smallest amount of a resource a Ray task may reserve (fractions are counted in these).
RAY_RESOURCE_UNIT = 1e-4
# How long a TCP connection to the Ray cluster's address may take before it counts as absent.
RAY_PROBE_TIMEOUT_S = 10.0


def ray_endpoint(address: str) -> Optional[tuple]:
    """``(host, port)`` that ray.init connects to for ``--ray_address`` (``host:port``,
    ``ray://host:port``, ``[::1]:port``, ``auto``), or None where Ray finds no cluster
    itself (ray.init then says so at once).

    Ray reaches this machine's own cluster at its node address, not at localhost,
    and ``auto`` at the cluster ``ray start`` last started here (or ``RAY_ADDRESS``).

    Raises:
        ValueError: the port is not a port number.
    """
    target = address
    if '://' not in address:
        try:
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(address) or ''
        except Exception:  # a private API of Ray's, or no cluster found for 'auto'
            pass
    host, sep, port = target.split('://', 1)[-1].rpartition(':')
    if not sep or not host:
        return None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'--ray_address {address}: {port!r} is not a port number')
    return host.strip('[]'), int(port)


def ray_address_problem(address: str, timeout_s: float = RAY_PROBE_TIMEOUT_S) -> Optional[str]:
    """Why nothing can be the Ray cluster at ``address``, found by a TCP connection to the
    host and port ray.init would try (for minutes, before it gave up), or None."""
    try:
        endpoint = ray_endpoint(address)
    except ValueError as e:
        return f"{e}: give 'auto' or the host:port of the cluster's head"
    if endpoint is None:
        return None
    try:
        with socket.create_connection(endpoint, timeout=timeout_s):
            return None
    except TimeoutError:
        reason = f'no answer within {timeout_s:g} s'
    except OSError as e:
        reason = e.strerror or str(e)
    where = f'{endpoint[0]}:{endpoint[1]}'
    return (
        f'cannot connect to the Ray cluster at {address}: nothing listens at {where}'
        + ('' if address.endswith(where) else ', where Ray looks for it')
        + f' ({reason}). Start the cluster (`ray start --head --port {endpoint[1]}` on its '
        'head) or fix --ray_address.'
    )


def _node_types_ray_may_start() -> List[dict]:
    """The resources of each node type the connected cluster's autoscaler may start; none
    when the cluster has no autoscaler config in Ray's state (a cluster of nodes started
    by hand, or an autoscaler Ray's state does not describe)."""
    try:
        # Ray's own Data library asks so too; a private API another Ray may lack.
        from ray._private.state import state

        config = state.get_cluster_config()
    except Exception:
        return []
    if config is None:
        return []
    return [dict(group.resources) for group in config.node_group_configs if group.max_count != 0]


def ray_resources_problem(address: str, num_cpus_per_run: int, num_gpus_per_run: float):
    """Why no node of the connected Ray cluster can ever run one run, or None.

    A run's task waits, however long, for a node with its CPUs and GPUs free:
    one that no alive node has in all (and no node type the autoscaler may start,
    where Ray describes one) would wait forever.
    """
    import ray

    need = {'CPU': num_cpus_per_run}
    if num_gpus_per_run > 0:
        need['GPU'] = num_gpus_per_run

    def fits(resources):
        return all(resources.get(name, 0) >= amount for name, amount in need.items())

    nodes = [node['Resources'] for node in ray.nodes() if node.get('Alive')]
    node_types = _node_types_ray_may_start()
    if any(map(fits, nodes + node_types)):
        return None
    shapes = collections.Counter((r.get('CPU', 0), r.get('GPU', 0)) for r in nodes)
    have = '; '.join(
        f'{n} with {cpu:g} CPU(s) and {gpu:g} GPU(s)' for (cpu, gpu), n in sorted(shapes.items())
    )
    return (
        f'no node of the Ray cluster at {address} can ever run a run: each asks for '
        + ' and '.join(f'{amount:g} {name}(s)' for name, amount in need.items())
        + f', and its alive nodes are: {have or "none"}'
        + (', nor may its autoscaler start such a node' if node_types else '')
        + '; the runs would wait forever. Lower --num_cpus_per_run or --num_gpus_per_run, '
        'or add a node that has them.'
    )


def modules_to_ship(names) -> List[str]:
    """The files and directories of the top-level modules ``names`` that are not installed
    packages (a config's own, in the sweep's working directory, say), which must travel
    with the Ray tasks; exits (``fail``) naming one that cannot (neither a ``.py`` file nor
    a package's directory)."""
    from alf_lite.config import module_code_outside_installed

    places = []
    for name in sorted(names):
        for place in module_code_outside_installed(name):
            if not (os.path.isdir(place) or place.endswith('.py')):
                fail(
                    f'the config imports {name}, whose code ({place}) is not an installed '
                    'package and cannot travel with the Ray tasks (only a .py file or a '
                    "package's directory can): install it as a package on every node."
                )
            places.append(place)
    return places


def connect_ray(
    address: str, num_cpus_per_run: int, num_gpus_per_run: float, py_modules: Sequence[str] = ()
) -> None:
    """Connect this process to the Ray cluster at ``address``, which must have a node that
    fits one run; otherwise exit (``fail``) naming the problem, disconnected. SIGINT or
    SIGTERM meanwhile exits with 128 plus its number. ``py_modules`` (files and
    directories of modules) travel with the tasks, as alf_lite does, onto their
    ``PYTHONPATH``."""
    import ray

    from alf_lite.signals import Interrupted, RaisingSignals

    signals = RaisingSignals()
    try:
        with signals:
            _connect_ray(address, num_cpus_per_run, num_gpus_per_run, py_modules)
    except (Interrupted, Exception) as e:
        interrupted = signals.interruption(e)
        if interrupted is None:
            raise
        ray.shutdown()
        fail(
            f'{signal.Signals(interrupted.signum).name} while connecting to the Ray cluster at '
            f'{address}: nothing was started.',
            EXIT_SIGNAL_BASE + interrupted.signum,
        )


def _connect_ray(
    address: str, num_cpus_per_run: int, num_gpus_per_run: float, py_modules: Sequence[str]
) -> None:
    import ray

    import alf_lite
    from alf_lite.signals import Interrupted

    problem = ray_address_problem(address)
    if problem:
        fail(problem)
    try:
        # The package, and the config's modules that are not installed, travel with the
        # tasks: a worker node need not have them installed.
        package = os.path.dirname(os.path.abspath(alf_lite.__file__))
        ray.init(
            address=address,
            log_to_driver=False,
            runtime_env={'py_modules': [package, *py_modules]},
        )
    except (ConnectionError, RuntimeError) as e:
        ray.shutdown()
        fail(f'cannot connect to the Ray cluster at {address}: {e}')
    except SystemExit as e:
        # ray.init's first step is a SIGTERM handler of its own, which exits so.
        if e.code == signal.SIGTERM:
            raise Interrupted(signal.SIGTERM) from None
        raise
    try:
        problem = ray_resources_problem(address, num_cpus_per_run, num_gpus_per_run)
    except BaseException:
        ray.shutdown()
        raise
    if problem:
        ray.shutdown()
        fail(problem)


def _train_on_ray(
    name, root_dir, config_text, num_threads, log_path, stop_file, num_gpus: float
) -> dict:
    """The Ray task of the run ``name``: ``train_in_subprocess``, once it has marked the
    run as begun (``STARTED_DIR``) for the driver.

    A run of ``num_gpus`` 0 sees no GPU: newer Ray leaves ``CUDA_VISIBLE_DEVICES`` as it is
    for a task that reserves none (``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO`` now defaults to
    off; older Ray emptied it), and ``TrainerConfig.device='auto'`` would take the node's
    first GPU, unreserved.
    """
    from alf_lite.runs import open_not_following_a_link, train_in_subprocess

    # Before train_in_subprocess looks for the stop file: a task whose mark the
    # driver does not find once that file is written will start no train.
    started = os.path.join(os.path.dirname(stop_file), STARTED_DIR)
    os.makedirs(started, exist_ok=True)
    # Not through a link: the mark would create or empty a file where it points.
    with open(os.path.join(started, name), 'w', opener=open_not_following_a_link):
        pass
    return train_in_subprocess(
        root_dir,
        config_text,
        num_threads,
        log_path,
        stop_file=stop_file,
        extra_env={'CUDA_VISIBLE_DEVICES': ''} if num_gpus == 0 else None,
    )


def _cancel_not_begun(pending: dict, started_dir: str) -> List:
    """Cancel the tasks among ``pending`` (Ray reference -> (run, start time)) that have not
    marked their run as begun in ``started_dir``; returns their references.

    Call once the stop file is written: such a task, if it begins after all,
    starts no train. Cancelled, it is not left to wait for room on the cluster
    (forever, where none frees).
    """
    import ray

    cancelled = [
        ref
        for ref, (run, _) in pending.items()
        if not os.path.exists(os.path.join(started_dir, run.name))
    ]
    for ref in cancelled:
        ray.cancel(ref)
    return cancelled


def run_ray(
    todo: List[GridRun], num_cpus_per_run: int, report, num_gpus_per_run: float = 0.0
) -> Optional[int]:
    """Train ``todo`` as Ray tasks of ``num_cpus_per_run`` CPUs and ``num_gpus_per_run`` GPUs
    each, on the cluster ``connect_ray`` connected to; disconnects at the end.

    ``todo``'s root_dirs must be on storage that every node sees at the same path.
    After SIGINT or SIGTERM, ``STOP_FILE`` in the sweep's directory stops the
    running tasks at a checkpoint, and the tasks that have not begun are
    cancelled and reported ``NOT_STARTED`` at once (rather than when the cluster
    has room for them).

    Returns:
        the number of the signal that stopped the sweep, or None.
    """
    import ray

    stop = SweepStop()
    stop_file = os.path.join(os.path.dirname(todo[0].root_dir), STOP_FILE)
    started_dir = os.path.join(os.path.dirname(todo[0].root_dir), STARTED_DIR)
    # Left by a sweep that was stopped and then killed, they would stop this one, or
    # mark its runs as begun.
    with contextlib.suppress(FileNotFoundError):
        os.remove(stop_file)
    _remove_marks(started_dir)
    try:
        task = ray.remote(**ray_task_options(num_cpus_per_run, num_gpus_per_run))(_train_on_ray)
        pending = {
            task.remote(
                run.name,
                run.root_dir,
                run.config_text,
                run.torch_num_threads or num_cpus_per_run,
                run.log_path,
                stop_file,
                num_gpus_per_run,
            ): (run, time.monotonic())
            for run in todo
        }
        with stop:
            while pending:
                if stop.signum is not None and not os.path.exists(stop_file):
                    # On the shared storage: each running task passes SIGINT on to
                    # its train, a task that starts after it starts none.
                    write_text_atomically(stop_file, f'{signal.Signals(stop.signum).name}\n')
                    for ref in _cancel_not_begun(pending, started_dir):
                        report(pending.pop(ref)[0], stop.mark(dict(NOT_STARTED)))
                    continue
                # In steps, so that a signal is acted on while runs go on.
                done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                if not done:
                    continue
                run, started = pending.pop(done[0])
                try:
                    result = ray.get(done[0])
                except ray.exceptions.RayError as e:
                    lines = [line for line in str(e).splitlines() if line.strip()]
                    result = {
                        'returncode': None,
                        'wall_time_s': time.monotonic() - started,
                        'error': f'Ray task failed: {lines[-1] if lines else type(e).__name__}',
                    }
                # Whatever stopped the sweep, each task passed SIGINT on to its train.
                report(run, stop.mark(result, passed_on=signal.SIGINT))
    finally:
        ray.shutdown()
        with contextlib.suppress(FileNotFoundError):
            os.remove(stop_file)
        _remove_marks(started_dir)
    return stop.signum


def _remove_marks(started_dir: str) -> None:
    """Remove the directory of the runs' marks (``STARTED_DIR``), or a link of its name: the
    tasks would make their marks where the link points, and rmtree refuses a link."""
    if os.path.islink(started_dir):
        with contextlib.suppress(FileNotFoundError):
            os.remove(started_dir)
    else:
        shutil.rmtree(started_dir, ignore_errors=True)


def summary_rows(
    runs: List[GridRun],
    results: Dict[str, dict],
    earlier_wall_times: Dict[str, float] = None,
    resumed: Collection[str] = (),
) -> List[dict]:
    """One row per run: name, status, seed, final eval return, env steps, wall time, error.

    A run that did not train in this sweep (skipped as finished before, not
    started, of another experiment) keeps the wall time it has in
    ``earlier_wall_times`` (the last summary's), if any, so that a later sweep
    that skips it still has it. A run in ``resumed`` (which went on from a
    checkpoint of an earlier sweep) adds this sweep's time to that one: its wall
    time covers all its sweeps.
    """
    earlier_wall_times = earlier_wall_times or {}
    rows = []
    for run in runs:
        result = results[run.name]
        # The return and steps on disk of another experiment, or of a run whose config.gin
        # cannot be read, are not known to be this sweep's.
        ours = not (result.get('other_experiment') or result.get('unreadable_config'))
        wall_time = result.get('wall_time_s')
        earlier = earlier_wall_times.get(run.name)
        if wall_time is None:
            wall_time = earlier
        elif run.name in resumed and earlier is not None:
            wall_time += earlier
        # Where its latest checkpoint holds it, and the return that checkpoint keeps: rows
        # of a run killed or failed since are trained again by the next sweep.
        env_steps = RunDir(run.root_dir).latest_checkpoint_env_steps() if ours else None
        rows.append(
            {
                'run': run.name,
                'status': result['status'],
                'seed': run.seed,
                'final_eval_return': (
                    None if env_steps is None else final_value(run.root_dir, up_to=env_steps)
                ),
                'env_steps': env_steps,
                'wall_time_s': wall_time,
                'error': result.get('error') or '',
            }
        )
    return rows


def _cell(value, fmt='{:.1f}'):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '-'
    return fmt.format(value) if isinstance(value, float) else str(value)


def print_summary(rows: List[dict]) -> None:
    header = ['run', 'status', 'final eval return', 'env steps', 'wall time (s)', 'error']
    table = [
        [
            r['run'],
            r['status'],
            _cell(r['final_eval_return']),
            _cell(r['env_steps']),
            _cell(r['wall_time_s']),
            r['error'],
        ]
        for r in rows
    ]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *table)]
    widths[-1] = 0  # the error is last and not padded
    for line in [header, ['-' * w for w in widths[:-1]] + ['-----']] + table:
        print_out('  '.join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())


def write_summary(path: str, rows: List[dict]) -> None:
    text = io.StringIO(newline='')
    # The columns of this sweep's rows; a kept row of an older summary may lack some or have
    # others.
    writer = csv.DictWriter(text, list(rows[0]), extrasaction='ignore')
    writer.writeheader()
    writer.writerows(rows)
    # Replaced whole: a sweep stopped while writing keeps the last summary.
    write_text_atomically(path, text.getvalue())


def read_summary(path: str) -> List[Dict[str, str]]:
    """The complete rows of the summary at ``path`` (none when there is no such file).

    Raises:
        OSError, ValueError: it cannot be read (no regular file, no text, a line that csv
            cannot read or longer than ``MAX_LINE_CHARS``); the message names it.
    """
    if os.path.exists(path) and not os.path.isfile(path):
        # Not opened: a FIFO would block the sweep.
        raise ValueError(f'{path} is not a regular file')
    try:
        # Saved again by a spreadsheet, it may start with a byte order mark.
        with open(path, newline='', encoding='utf-8-sig') as f:
            return complete_rows(f)[1]
    except FileNotFoundError:
        return []


def wall_times(rows: List[Dict[str, str]]) -> Dict[str, float]:
    """Each run's wall time in the summary ``rows``, where it is a number."""
    times = {}
    for row in rows:
        with contextlib.suppress(KeyError, ValueError):
            times[row['run']] = float(row['wall_time_s'])
    return times


def last_summary(path: str) -> List[Dict[str, str]]:
    """``read_summary`` of the last sweep's summary at ``path``, read before any run starts.

    A directory there ends the sweep (status 2): no summary could replace it. A
    summary that cannot be read is moved aside to ``moved_aside_path(path)`` with a
    warning, so that the new one does not overwrite it.
    """
    if os.path.isdir(path):
        fail(
            f'{path} is a directory: the sweep writes its summary there. Move it away, or '
            'choose another --root_dir.'
        )
    try:
        return read_summary(path)
    except (OSError, ValueError) as e:
        problem = e
    aside = moved_aside_path(path)
    try:
        os.rename(path, aside)
    except OSError as e:
        fail(f'the last summary cannot be read ({problem}) nor moved aside to {aside}: {e}')
    print(
        f'warning: the last summary cannot be read ({problem}): moved it to {aside}; the '
        'runs this sweep does not train get no wall time from it, and the runs of other '
        'sweeps are not listed in the new one.',
        file=sys.stderr,
        flush=True,
    )
    return []


def rows_of_other_runs(
    earlier: List[Dict[str, str]], runs: List[GridRun], root_dir: str
) -> List[Dict[str, str]]:
    """The rows of the last summary (``earlier``) of runs this sweep has not (an earlier
    sweep's, of other values or seeds) whose run directory is still in ``root_dir``: kept in
    the new summary as they were, so that a sweep never drops what another wrote. A run
    listed twice (an edited table) is kept once, as its last row, whose wall time
    ``wall_times`` reads."""
    names = {run.name for run in runs}
    kept = {
        row['run']: row
        for row in earlier
        if row.get('run')
        and row['run'] not in names
        # A name of a sub-directory, as grid_search makes them, not a path out of root_dir.
        and os.path.basename(row['run']) == row['run']
        and row['run'] not in (os.curdir, os.pardir)
        # isdir first: it answers False for a name that no path can hold (a NUL).
        and os.path.isdir(os.path.join(root_dir, row['run']))
        # Not the sweep's logs, nor a directory that never held a run.
        and RunDir(os.path.join(root_dir, row['run'])).is_run()
    }
    return list(kept.values())


def not_started_text(results: Dict[str, dict]) -> str:
    """``, 3 not started (2 finished before, 1 of another experiment)`` for the runs
    left out before training; empty when there are none."""
    reasons = collections.Counter(
        'finished before'
        if result['status'] == SKIPPED
        else 'of another experiment'
        if result.get('other_experiment')
        else f'with a {CONFIG_FILE} that cannot be read'
        if result.get('unreadable_config')
        else 'with a config that does not parse'
        for result in results.values()
    )
    if not reasons:
        return ''
    parts = ', '.join(f'{n} {reason}' for reason, n in reasons.items())
    return f', {sum(reasons.values())} not started ({parts})'


def main(argv):
    from alf_lite.signals import Interrupted, RaisingSignals

    # Outside the sweep (reading the configs, writing the table): at once, in one line.
    signals = RaisingSignals()
    try:
        with signals:
            _main(argv, signals)
    except (Interrupted, Exception) as e:
        exit_if_interrupted(
            signals,
            e,
            lambda interrupted: _OUTSIDE_THE_SWEEP.format(
                signal=signal.Signals(interrupted.signum).name
            ),
        )
        raise


def _main(argv, signals):
    """The sweep as the flags say; ``signals``: SIGINT and SIGTERM outside the sweep."""
    fail_on_stray_arguments(argv, FLAGS.gin_param, takes_gin_files=True)
    if not FLAGS.gin_file:
        fail('give the base config of the sweep with --gin_file')
    cores = len(os.sched_getaffinity(0))
    max_workers = cores if FLAGS.max_workers is None else FLAGS.max_workers
    if max_workers <= 0 or FLAGS.num_cpus_per_run <= 0:
        fail('--max_workers and --num_cpus_per_run must be positive')
    if FLAGS.runs_per_gpu < 0 or not FLAGS.num_gpus_per_run >= 0:  # NaN too
        fail('--runs_per_gpu and --num_gpus_per_run must be >= 0')
    if 0 < FLAGS.num_gpus_per_run < RAY_RESOURCE_UNIT:
        fail(
            f'--num_gpus_per_run {FLAGS.num_gpus_per_run:g}: Ray reserves no less than '
            f'{RAY_RESOURCE_UNIT:g} GPU for a task; give 0 (no GPU) or at least that'
        )
    if FLAGS.num_gpus_per_run > 1 and not float(FLAGS.num_gpus_per_run).is_integer():
        fail(
            f'--num_gpus_per_run {FLAGS.num_gpus_per_run:g}: Ray reserves a fraction of one '
            'GPU or whole GPUs for a task; give at most 1 or a whole number'
        )
    gpus = []
    if not FLAGS.ray_address and FLAGS.runs_per_gpu > 0:
        from alf_lite.device import visible_gpu_ids

        gpus = visible_gpu_ids()
        if gpus:
            # A worker without a free GPU slot would only wait.
            max_workers = min(max_workers, len(gpus) * FLAGS.runs_per_gpu)
    if FLAGS.ray_address:
        try:
            import ray  # noqa: F401
        except ImportError:
            fail('--ray_address needs Ray: pip install .[ray]')
        num_threads = FLAGS.num_cpus_per_run
    else:
        num_threads = max(1, cores // max_workers)
    try:
        space = load_search_space(FLAGS.search_config)
        expand_grid(space)  # fails here on a run name that is taken twice or too long
    except (OSError, ValueError) as e:
        fail(str(e))

    import alf_lite.all_configurables  # noqa: F401  (registers every configurable)
    from alf_lite.config import ConfigError, parse_config
    from alf_lite.model_memory import each_message_once
    from alf_lite.trainer import TrainerConfig

    conflict = gin_param_conflict(FLAGS.gin_param, space)
    if conflict:
        fail(conflict)
    first = [f'{n}={values[0]}' for names, values in space.parameters for n in names]
    try:
        # The base config with one combination: a mistake in either, such as
        # a misspelt searched name or a TrainerConfig value out of range
        # (num_env_steps=0), would fail every run.
        parse_config(FLAGS.gin_file, FLAGS.gin_param + first)
    except ConfigError as e:
        fail(search_entry_message(str(e), space))
    overridden = overridden_search(space) or unused_searched_macro(space)
    if overridden:
        fail(overridden)
    try:
        TrainerConfig()
    except (ValueError, TypeError) as e:
        fail(' '.join(user_message(search_entry_message(str(e), space)).split()))
    root_dir = output_root_dir(FLAGS.root_dir)
    imports, calls = set(), {}
    # What each run allocates up front, where the runs share this machine's memory.
    memory = None if FLAGS.ray_address else {}
    with each_message_once():
        runs = configure_runs(
            space, root_dir, FLAGS.gin_file, FLAGS.gin_param, num_threads, imports, calls, memory
        )
    unused = unused_search(space, None if None in calls else calls)
    if unused:
        fail(unused)
    root = RunDir(root_dir)
    if os.path.exists(root.config_file) or root.trained_in():
        # Each run would start inside it, which train refuses.
        fail(
            f'--root_dir {root_dir} holds a train run (its {CONFIG_FILE}, progress.csv, '
            'checkpoints or TensorBoard events), not a sweep: choose another directory.'
        )
    nested = inside_run_refusal(root_dir, '--root_dir')
    if nested is not None:
        fail(nested)
    # A signal whose exception Python dropped (raised in a __del__) stops grid_search here,
    # before it starts a run.
    signals.raise_if_received()
    lock = RunDirLock(root_dir)
    try:
        _sweep(runs, root_dir, lock, max_workers, num_threads, gpus, imports, memory)
    finally:
        lock.release()
        if FLAGS.ray_address:
            import ray

            ray.shutdown()


def lock_holders(path: str) -> List[int]:
    """The processes on this machine that hold a ``flock`` on ``path``, as /proc/locks
    lists them; none where it does not (another OS, a holder on another node of a shared
    file system)."""
    try:
        st = os.stat(path)
        with open('/proc/locks') as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    # e.g. '1: FLOCK  ADVISORY  WRITE 27835 fe:00:2163713 0 EOF': the pid, then the
    # device (major:minor, in hex) and inode of the file.
    where = f'{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}'
    return [
        int(fields[4])
        for fields in map(str.split, lines)
        if len(fields) > 5
        and fields[1] == 'FLOCK'
        and fields[5] == where
        and fields[4].isdigit()
        and int(fields[4]) > 0  # none: a holder this process cannot see (a pid namespace)
    ]


def _holder_kind(holders: List[int]) -> tuple:
    """``(what holds a directory, how to refer to it)`` by the command lines of the processes
    ``holders``: a grid_search sweeping in it, a train running in it, or another process."""
    commands = []
    for pid in holders:
        try:
            commands.append(' '.join(psutil.Process(pid).cmdline()))
        except psutil.Error:
            pass
    if any(re.search(r'\balf_lite\.bin\.grid_search\b|\bgrid_search\.py\b', c) for c in commands):
        return 'another grid_search is sweeping in it', 'that sweep'
    if any(re.search(r'\balf_lite\.bin\.train\b|\btrain\.py\b', c) for c in commands):
        return 'a train is running in it (a sweep needs a directory of its own)', 'that run'
    return 'another process is using it', 'it'


def lock_root_dir(lock: RunDirLock) -> None:
    """Take the sweep's lock on its root_dir, creating the directory if missing; exit
    (status 2) when another process holds it or the directory cannot be created."""
    try:
        lock.acquire()
    except RunDirInUseError:
        holders = lock_holders(lock.root)
        what, that = _holder_kind(holders)
        fail(
            f'--root_dir {lock.root} is in use: {what} ('
            + (f'pid {", ".join(map(str, holders))} holds' if holders else 'a process holds')
            + f" the directory's lock). Wait for {that} to end or stop it, or choose "
            'another --root_dir.'
        )
    except OSError as e:
        fail(f'cannot create or lock --root_dir {lock.root}: {e}')


def _sweep(runs, root_dir, lock, max_workers, num_threads, gpus, imports=(), memory=None):
    """``main`` from the runs on: train them and report; ``lock``, the root_dir's, is
    taken here and released by the caller. ``memory``: ``configure_runs``'s, for local
    runs on the CPU."""
    if os.path.isdir(root_dir):
        # Before reading the runs: a sweep running in root_dir holds the lock.
        lock_root_dir(lock)
    results = {}
    for run in runs:
        if run.error:
            results[run.name] = {'status': 'failed', 'error': run.error}
            continue
        # train's own check, which ignores the bindings a resume may change; made
        # here for unfinished runs too, so that the advice names what grid_search
        # offers rather than train's flags.
        try:
            other = experiment_difference(run.root_dir, run.config_text, advice=GRID_ADVICE)
        except (OSError, ValueError) as e:  # its config.gin cannot be read; the error names it
            results[run.name] = {
                'status': 'failed',
                'error': f"{str(e).rstrip('.')}. Mend it, or move this run's directory "
                'aside (or delete it) and rerun to train it afresh.',
                'unreadable_config': True,
            }
            continue
        if other is not None:
            results[run.name] = {'status': 'failed', 'error': other, 'other_experiment': True}
        elif is_finished(run):
            results[run.name] = {'status': SKIPPED}
    todo = [run for run in runs if run.name not in results]
    # Those that go on from an earlier sweep's checkpoint: their wall time adds up.
    resumed = {
        run.name for run in todo if RunDir(run.root_dir).latest_checkpoint_env_steps() is not None
    }
    if FLAGS.ray_address and todo:
        # Before anything is written: a cluster that is not there or cannot run a run
        # exits with status 2.
        connect_ray(
            FLAGS.ray_address,
            FLAGS.num_cpus_per_run,
            FLAGS.num_gpus_per_run,
            modules_to_ship(imports),
        )
    lock_root_dir(lock)  # creates root_dir
    summary_file = os.path.join(root_dir, SUMMARY_FILE)
    earlier = last_summary(summary_file)
    if FLAGS.ray_address:
        backend = (
            f'Ray at {FLAGS.ray_address}, {FLAGS.num_cpus_per_run} CPU(s)'
            + (f' and {FLAGS.num_gpus_per_run:g} GPU(s)' if FLAGS.num_gpus_per_run else '')
            + ' per run'
        )
    else:
        backend = f'{max_workers} local worker(s)' + (
            f', GPU(s) {",".join(gpus)} with at most {FLAGS.runs_per_gpu} run(s) each'
            if gpus
            else ''
        )
    # The sweep's count, unless a --gin_param or the search config sets the runs' own.
    threads = sorted({run.torch_num_threads for run in todo or runs if run.torch_num_threads})
    threads_text = (
        f'{threads[0]} torch thread(s) each'
        if len(threads) == 1
        else f'{threads[0]} to {threads[-1]} torch threads by run'
        if threads
        else f'{num_threads} torch thread(s) each'
    )
    print_out(
        f'{len(runs)} runs in {root_dir}: {len(todo)} to train on {backend} '
        f'({threads_text}){not_started_text(results)}.'
    )
    budget = None
    if memory is not None and todo:
        text, room = memory_text(todo, memory, max_workers)
        if text is not None:
            print_out(text)
            budget = MemoryBudget(room)

    num_done = 0

    def report(run, result):
        nonlocal num_done
        num_done += 1
        if result.get('not_started'):
            status = 'not started (sweep stopped)'
            results[run.name] = dict(result, status=status)
            print_out(f'[{num_done}/{len(todo)}] {run.name}: {status}')
            return
        if result['returncode'] == 0:
            status = 'finished'
        elif result.get('stopped') or result['returncode'] in RUN_STOP_EXIT_CODES:
            # Also by a signal sent to its train alone: its error column says where it is.
            status = 'stopped'
        else:
            status = 'failed'
        results[run.name] = dict(result, status=status)
        print_out(
            f'[{num_done}/{len(todo)}] {run.name}: {status} in '
            f'{result["wall_time_s"]:.0f} s' + (f' ({result["error"]})' if result['error'] else '')
        )

    signum = None
    if todo:
        if FLAGS.ray_address:
            signum = run_ray(todo, FLAGS.num_cpus_per_run, report, FLAGS.num_gpus_per_run)
        else:
            signum = run_local(
                todo,
                max_workers,
                num_threads,
                report,
                gpus,
                FLAGS.runs_per_gpu,
                budget=budget,
                memory=memory,
            )
    rows = summary_rows(runs, results, wall_times(earlier), resumed)
    print_out()
    print_summary(rows)
    others = rows_of_other_runs(earlier, runs, root_dir)
    if others:
        names = [row['run'] for row in others]
        shown = ', '.join(names[:5]) + (f' and {len(names) - 5} more' if len(names) > 5 else '')
        print_out(
            f'{summary_file} also keeps the row(s) of {len(names)} run(s) in {root_dir} '
            f'that this sweep does not have: {shown}'
        )
    write_summary(summary_file, rows + others)
    failed = sum(r['status'] == 'failed' for r in rows)
    stopped = sum(r['status'] == 'stopped' for r in rows)
    if signum is not None:
        not_started = sum(r['status'].startswith('not started') for r in rows)
        print_out(
            f'\n{signal.Signals(signum).name} stopped the sweep: {stopped} run(s) stopped at '
            f'their last checkpoint, {not_started} not started'
            + (f', {failed} failed' if failed else '')
            + '; re-run the same command to continue it.',
            file=sys.stderr,
        )
        sys.exit(EXIT_SIGNAL_BASE + signum)
    if failed or stopped:
        lines = [f'{failed} of {len(rows)} runs failed.'] if failed else []
        if stopped:
            lines.append(
                f'{stopped} of {len(rows)} runs were stopped by a signal sent to them; '
                're-run the same command to continue them.'
            )
        print_out('\n' + '\n'.join(lines), file=sys.stderr)
        sys.exit(EXIT_FAULT)


if __name__ == '__main__':
    run_tool(main)
