"""README and docs: speed claims name their resources; every relative link exists; the
Layout names every module, and only paths that exist; the Results table, and the returns
the examples' comments quote, are what their kept runs give."""

import csv
import re
from pathlib import Path

import pytest

from alf_lite.runs import NONDETERMINISTIC_COLUMNS, WALL_TIME
from cli_helpers import EXAMPLES, REPO_ROOT

README = (REPO_ROOT / 'README.md').read_text()


def section(title):
    """The text of the README section ``## title``, up to the next ``## ``."""
    start = README.index(f'\n## {title}\n')
    end = README.find('\n## ', start + 1)
    return README[start : end if end > 0 else len(README)]


def speed_rows(gpu=False):
    """``(threads alf_lite, threads SB3, ratio)`` of every env-steps/s row comparing the two,
    on the CPU (the Performance section up to ``### On a GPU``) or on the GPU (after it)."""
    cpu_part, gpu_part = section('Performance').split('\n### On a GPU\n')
    rows = []
    for line in (gpu_part if gpu else cpu_part).splitlines():
        match = re.match(r'\| [^|]+ \| (\d+) / (\d+) \| [\d.]+ \| [\d.]+ \| \**([\d.]+)\**', line)
        if match:
            rows.append((int(match[1]), int(match[2]), float(match[3])))
    return rows


def test_headline_speed_is_the_ratio_measured_at_equal_resources():
    headline = re.search(r'- \*\*Speed\.\*\* (.*?)(?:\n- |\n\n)', README, re.S)[1]
    assert 'equal resources' in headline, headline
    ratio = float(re.search(r'([\d.]+)x', headline)[1])
    equal = [r for alf_lite, sb3, r in speed_rows() if alf_lite == sb3]
    # The first row at equal resources is the comparison to quote; the others
    # (other machines, algorithms, precisions) come after it.
    assert equal and equal[0] == ratio, (equal, ratio)


def test_the_reproducibility_claim_names_the_columns_a_seed_does_not_fix():
    # Two runs of one seed differ in progress.csv's clock and machine columns (the
    # trainer's tests compare runs without them); a claim of "the same progress.csv"
    # has to say so, or a reader's diff of two runs contradicts it.
    claim = re.search(r'- \*\*Reproducibility\.\*\* (.*?)(?:\n- |\n\n)', README, re.S)[1]
    assert 'alf_lite.runs.NONDETERMINISTIC_COLUMNS' in claim, claim
    assert f'`{WALL_TIME}`' in claim, claim
    assert WALL_TIME in NONDETERMINISTIC_COLUMNS


def test_every_speed_ratio_against_sb3_names_the_thread_counts_of_both():
    performance = section('Performance')
    compared = [line for line in performance.splitlines() if re.match(r'\| (SAC|TD3|DDPG), ', line)]
    assert len(compared) == len(speed_rows()) + len(speed_rows(gpu=True))
    assert len(speed_rows()) >= 5 and len(speed_rows(gpu=True)) >= 3
    # Time to solve: each library's row says its thread count.
    assert re.search(r'\| alf_lite \(\d+ threads?\) \|', performance)
    assert re.search(r'\| SB3 \(\d+ threads?\) \|', performance)
    assert re.search(r'Ratio [\d.]+ at these unequal resources', performance)


def test_every_relative_link_and_image_of_the_docs_exists():
    documents = [REPO_ROOT / 'README.md', *sorted((REPO_ROOT / 'docs').glob('*.md'))]
    checked = 0
    for document in documents:
        for target in re.findall(r'\]\(([^)\s]+)\)', document.read_text()):
            path = target.split('#')[0]
            if not path or re.match(r'[a-z]+://', path):
                continue
            assert (document.parent / path).exists(), f'{document.name} links to missing {target}'
            checked += 1
    assert checked >= 10


def layout_paths():
    """The paths the Layout block names in its first column: ``a/b.py, c.py`` names
    ``a/b.py`` and ``a/c.py``."""
    block = section('Layout').split('```')[1]
    paths = []
    for line in block.strip().splitlines():
        words = line.split()
        first = words[0].rstrip(',')
        paths.append(first)
        for previous, word in zip(words, words[1:]):
            if not previous.endswith(','):
                break
            paths.append(str(Path(first).parent / word.rstrip(',')))
    return block, paths


def test_layout_names_only_paths_that_exist_and_every_module_and_script():
    block, paths = layout_paths()
    for path in paths:
        assert (REPO_ROOT / path).exists(), f'Layout names {path}, which does not exist'
    # Named in the first column, or by file name in another entry's description
    # (``launcher.py trains them``); a package's modules are its directory's entry.
    expected = [
        *(REPO_ROOT / 'alf_lite').glob('*.py'),
        *(p for p in (REPO_ROOT / 'alf_lite').glob('*/') if (p / '__init__.py').is_file()),
        *(REPO_ROOT / 'benchmarks').glob('*.py'),
        *(REPO_ROOT / 'benchmarks').glob('*.sh'),
        *(REPO_ROOT / 'docker').iterdir(),
        *(REPO_ROOT / '.ci').iterdir(),
        *REPO_ROOT.glob('*.py'),
        *REPO_ROOT.glob('*.ini'),
        *REPO_ROOT.glob('*.toml'),
        REPO_ROOT / 'Makefile',
    ]
    named = {path.rstrip('/') for path in paths}
    missing = []
    for file in expected:
        relative = file.relative_to(REPO_ROOT).as_posix()
        if file.name == '__init__.py' or relative in named:
            continue
        if not re.search(rf'(?<![\w/.]){re.escape(file.name)}\b', block):
            missing.append(relative)
    assert not missing, f'README Layout does not name {missing}'


def test_every_plot_command_writes_where_plot_may_write_from_the_repository_root():
    from alf_lite.bin.plot import check_outputs

    outs = re.findall(r'python -m alf_lite\.bin\.plot .*?--out (\S+)', README)
    assert len(outs) >= 2
    for out in outs:
        png = REPO_ROOT / out
        # A PNG of the repository that plot did not write would stop the command (exit 2).
        check_outputs(str(png), str(png.with_suffix('.csv')))


def example_knobs(gin_file):
    """The learning rates, tau, batch size and hidden layers that ``gin_file`` builds."""
    import torch

    from alf_lite.config import parse_config
    from alf_lite.trainer import TrainerConfig

    parse_config([str(gin_file)], [])
    config = TrainerConfig()
    algorithm = config.algorithm_ctor(observation_dim=3, action_dim=1)
    linears = [m for m in algorithm._actor.modules() if isinstance(m, torch.nn.Linear)]
    return {
        'lr': {o.defaults['lr'] for o in algorithm.optimizers.values()},
        'tau': algorithm._tau,
        'batch': config.mini_batch_size,
        'hidden': {
            tuple(m.out_features for m in linears[:-1]),
            tuple(layer.weight.shape[-1] for layer in algorithm._critic._layers[:-1]),
        },
    }


def test_examples_table_lists_every_example_and_what_it_sets_apart_from_its_fragment():
    # A row that named none of these would pass off its fragment's values as the example's.
    rows = dict(re.findall(r'^\| `examples/([^`]+\.gin)` \| (.*) \|$', README, re.M))
    assert sorted(rows) == sorted(p.name for p in EXAMPLES.glob('*.gin'))
    for name, row in rows.items():
        fragment = re.search(r"^include '(common/[^']+)'", (EXAMPLES / name).read_text(), re.M)[1]
        knobs, shared = example_knobs(EXAMPLES / name), example_knobs(EXAMPLES / fragment)
        claims = []  # each a list of ways to write it
        if knobs['lr'] != shared['lr']:
            claims += [[f'lr {lr:.0e}'.replace('e-0', 'e-')] for lr in sorted(knobs['lr'])]
        if knobs['tau'] != shared['tau']:
            claims.append([f'tau {knobs["tau"]:g}'])
        if knobs['batch'] != shared['batch']:
            claims.append([f'batch {knobs["batch"]}'])
        if knobs['hidden'] != shared['hidden']:
            (sizes,) = knobs['hidden']  # the actor's and the critics' are the same here
            claims.append([str(sizes), 'x'.join(map(str, sizes))])
        for ways in claims:
            assert any(way in row for way in ways), f'README row of {name} lacks {ways}: {row}'


def test_the_scalars_table_names_every_scalar_runs_write_and_runs_write_each_one(tmp_path):
    import csv

    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.config import parse_config
    from alf_lite.trainer import Trainer, TrainerConfig

    table = section('TensorBoard scalars').split('\n| scalar | meaning |')[1]
    documented = {
        name
        for line in table.splitlines()
        if line.startswith('| `')
        for name in re.findall(r'`((?:train|eval)/\w+)`', line)
    }
    short = [
        'TrainerConfig.num_env_steps = 300',
        'TrainerConfig.initial_collect_steps = 100',
        'TrainerConfig.mini_batch_size = 32',
        'TrainerConfig.summary_interval = 100',
        'TrainerConfig.eval_interval = 300',
        'TrainerConfig.num_eval_episodes = 2',
        'TrainerConfig.checkpoint_interval = 300',
    ]
    runs = {
        # Hopper's episodes end by termination: the near-termination scalars.
        'sac': ['sac', "create_environment.env_name = 'Hopper-v5'"],
        'ddpg': ['ddpg', 'DdpgAlgorithm.critic_l2_weight_decay = 1e-2'],
        'td3': ['td3'],
    }
    written = set()
    for name, (fragment, *params) in runs.items():
        parse_config(
            [str(EXAMPLES / 'common' / f'{fragment}.gin')],
            [
                "create_environment.env_name = 'Pendulum-v1'",
                *params,
                *short,
                'actor/Adam.lr = 1e-3',
                'critic/Adam.lr = 1e-3',
            ],
        )
        with Trainer(TrainerConfig(), str(tmp_path / name)) as trainer:
            trainer.train()
        with open(tmp_path / name / 'progress.csv', newline='') as f:
            rows = list(csv.DictReader(f))
        columns = set(rows[0]) - {'env_steps', 'num_updates', 'wall_time'}
        assert columns <= documented, f'{name} writes {columns - documented}, not in README'
        written |= {c for c in columns if any(row[c] != '' for row in rows)}
    assert documented == written, f'README names {documented - written}, which no run wrote'


def test_the_examples_results_table_is_what_its_kept_runs_give():
    import csv

    results = REPO_ROOT / 'benchmarks' / 'results' / 'examples' / 'pendulum'
    cells = r' \| '.join([r'(-?[\d.]+)'] * 4)  # seeds 0, 1, 2 and their mean
    rows = re.findall(
        rf'^\| `(\w+)_pendulum\.gin` \| {cells} \| (\d+)-(\d+) s \| (\d+)-(\d+) \|$',
        section('Results'),
        re.M,
    )
    assert sorted(row[0] for row in rows) == ['ddpg', 'sac', 'td3']
    for example, *returns, mean, wall_min, wall_max, speed_min, speed_max in rows:
        sweep = results / f'{example}_pendulum'
        with open(sweep / 'grid_summary.csv', newline='') as f:
            summary = {row['run']: row for row in csv.DictReader(f)}
        finals = [float(summary[f'seed={seed}']['final_eval_return']) for seed in range(3)]
        assert returns == [f'{r:.1f}' for r in finals], example
        assert mean == f'{sum(finals) / 3:.1f}', example
        walls = [float(row['wall_time_s']) for row in summary.values()]
        assert (int(wall_min), int(wall_max)) == (round(min(walls)), round(max(walls))), example
        speeds = []
        for seed in range(3):
            with open(sweep / f'seed={seed}' / 'progress.csv', newline='') as f:
                summaries = [r for r in csv.DictReader(f) if r['train/env_steps_per_sec']]
            # The table's speed is that of the last summary, once training.
            speeds.append(float(summaries[-1]['train/env_steps_per_sec']))
        assert (int(speed_min), int(speed_max)) == (round(min(speeds)), round(max(speeds))), (
            example,
            speeds,
        )


KEPT_EXAMPLE_RUNS = REPO_ROOT / 'benchmarks' / 'results' / 'examples'


def kept_final_returns(sweep):
    """``{run name: final eval return}`` of a sweep kept under ``benchmarks/results/examples``."""
    with open(KEPT_EXAMPLE_RUNS / sweep / 'grid_summary.csv', newline='') as f:
        return {row['run']: float(row['final_eval_return']) for row in csv.DictReader(f)}


def comment_text(gin_file):
    """The comments of ``gin_file`` as one line of words."""
    lines = [line[1:] for line in gin_file.read_text().splitlines() if line.startswith('#')]
    return ' '.join(' '.join(lines).split())


@pytest.mark.parametrize('example', ['sac', 'ddpg', 'td3'])
def test_a_pendulum_examples_quoted_returns_are_its_kept_runs(example):
    claimed = re.search(
        r'seeds 0-2: (-\d+), (-\d+), (-\d+)\)', comment_text(EXAMPLES / f'{example}_pendulum.gin')
    )
    finals = kept_final_returns(f'pendulum/{example}_pendulum')
    assert [int(c) for c in claimed.groups()] == [round(finals[f'seed={s}']) for s in range(3)]


def test_the_learning_rate_comparison_is_what_its_kept_runs_give():
    # README's plot example and sac_pendulum.gin's comment quote one sweep of 5k env steps.
    from alf_lite.bin.plot import band

    finals = kept_final_returns('grid_lr')
    assert sorted(finals) == sorted(
        f'lr={lr},seed={s}' for lr in ('0.001', '0.0003') for s in range(3)
    )
    bands = {
        lr: [f'{x:.1f}' for x in band([finals[f'lr={lr},seed={s}'] for s in range(3)], 'ci')]
        for lr in ('0.001', '0.0003')
    }
    number = r'(-?[\d.]+)'
    readme = re.search(
        rf'lr 1e-3 {number} \[{number}, {number}\]; lr 3e-4 {number} \[{number}, {number}\]',
        ' '.join(README.split()),
    )
    assert list(readme.groups()) == bands['0.001'] + bands['0.0003']
    comment = re.search(
        rf'ended higher \({number} against {number}\)', comment_text(EXAMPLES / 'sac_pendulum.gin')
    )
    assert list(comment.groups()) == [bands['0.001'][0], bands['0.0003'][0]]
    # Each kept run trained with its name's step size, for the 5k env steps quoted.
    for name in finals:
        config = (KEPT_EXAMPLE_RUNS / 'grid_lr' / name / 'config.gin').read_text()
        lr = name.split(',')[0].split('=')[1]
        for optimizer in ('actor', 'critic', 'alpha'):
            assert f'{optimizer}/Adam.lr = {lr}\n' in config, name
        assert 'TrainerConfig.num_env_steps = 5000\n' in config, name
