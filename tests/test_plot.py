"""``python -m alf_lite.bin.plot`` on runs with known values: the aggregated CSV checked by hand."""

import ast
import csv
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tracemalloc

import numpy as np
import pytest
from PIL import Image

import dropped_signal
from cli_helpers import (
    RUN_TIMEOUT_S,
    assert_ok,
    run_python,
    run_train,
    run_with_output_reader_gone,
    signal_on_import,
    train_env,
    with_prelude,
)

LR_A, LR_B = '0.001', '0.0003'
# eval/AverageReturn per seed at env steps 0, 100, 200 (None: not reached yet).
RUNS_A = {0: [1, 2, 3], 1: [2, 4, 6], 2: [3, 6, 9]}
RUNS_B = {0: [0, 10, 5], 1: [0, 10, 6], 2: [0, 10, 7], 3: [4, 10, None]}


def write_run(root_dir, lr, seed, returns, extra=''):
    """A run as train leaves it: config.gin (plus ``extra``), progress.csv with train rows."""
    root_dir.mkdir(parents=True)
    (root_dir / 'config.gin').write_text(
        '# Parameters for actor/Adam:\n'
        '# ==============================================================================\n'
        f'actor/Adam.lr = {lr}\n\n'
        "create_environment.env_name = 'Pendulum-v1'\n"
        f'TrainerConfig.random_seed = {seed}\n'
        'TrainerConfig.replay_buffer_length = \\\n    1000\n' + extra
    )
    with open(root_dir / 'progress.csv', 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(
            ['env_steps', 'num_updates', 'wall_time', 'eval/AverageReturn', 'train/critic_loss']
        )
        for i, value in enumerate(returns):
            if value is not None:
                writer.writerow([i * 100, i * 10, 1e9 + i, float(value), 0.5 if i else ''])
                writer.writerow([i * 100 + 50, i * 10 + 5, 1e9 + i + 0.5, '', 0.25])


@pytest.fixture
def grid(tmp_path):
    """``runs/`` with 3 seeds of lr A, 4 of lr B (one unfinished), and a non-run file."""
    runs = tmp_path / 'runs'
    for lr, group in ((LR_A, RUNS_A), (LR_B, RUNS_B)):
        for seed, returns in group.items():
            write_run(runs / f'lr={lr},seed={seed}', lr, seed, returns)
    runs.joinpath('grid_summary.csv').write_text('run,status\n')
    return runs


def run_plot(args, cwd):
    return subprocess.run(
        [sys.executable, '-m', 'alf_lite.bin.plot', *args],
        cwd=cwd,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def read_curves(path):
    """``{(group, env_steps): (mean, lower, upper, num_runs)}``."""
    with open(path, newline='') as f:
        return {
            (r['group'], int(r['env_steps'])): (
                float(r['mean']),
                float(r['lower']),
                float(r['upper']),
                int(r['num_runs']),
            )
            for r in csv.DictReader(f)
        }


def final_table(stdout):
    """``{group: (runs, mean, lower, upper)}`` of the printed final-performance table."""
    rows = re.findall(
        r'^(.*?) {2,}(\d+)(?: \(.*?\))? {2,}(-?[\d.]+) {2,}\[(-?[\d.]+), (-?[\d.]+)\]$',
        stdout,
        re.M,
    )
    return {g: (int(n), float(m), float(lo), float(hi)) for g, n, m, lo, hi in rows}


def test_groups_seeds_and_writes_mean_with_bootstrap_band(grid, tmp_path):
    paths = sorted(str(p) for p in grid.iterdir())
    result = run_plot(
        paths
        + [
            '--x',
            'env_steps',
            '--y',
            'eval/AverageReturn',
            '--group_by',
            'config',
            '--out',
            'out/curves.png',
        ],
        tmp_path,
    )
    assert_ok(result)
    assert 'grid_summary.csv: no run there' in result.stderr
    assert 'one run twice?' not in result.stderr  # the seeds differ

    a, b = f'actor/Adam.lr={LR_A}', f'actor/Adam.lr={LR_B}'
    curves = read_curves(tmp_path / 'out' / 'curves.csv')
    assert set(curves) == {(g, x) for g in (a, b) for x in (0, 100, 200)}
    # Means of the seeds at each step; train-only rows (50, 150, ...) are not points.
    assert [curves[a, x][0] for x in (0, 100, 200)] == [2.0, 4.0, 6.0]
    assert [curves[b, x][0] for x in (0, 100, 200)] == [1.0, 10.0, 6.0]
    assert [curves[b, x][3] for x in (0, 100, 200)] == [4, 4, 3]
    # Bootstrap of the mean of 3 runs: all three draws equal the smallest value with
    # probability 1/27 > 2.5%, so the 95% interval is [min, max].
    assert [curves[a, x][1:3] for x in (0, 100, 200)] == [(1, 3), (2, 6), (3, 9)]
    assert curves[b, 200][1:3] == (5, 7)
    # Values (0, 0, 0, 4): the resampled mean is k (k ~ Binomial(4, 1/4) draws of the 4):
    # P(k <= 2) = 0.949 < 0.975 <= P(k <= 3) = 0.996, so the interval is [0, 3], not [0, 4].
    assert curves[b, 0][1:3] == (0, 3)
    assert curves[b, 100][1:3] == (10, 10)

    with Image.open(tmp_path / 'out' / 'curves.png') as png:
        assert png.format == 'PNG' and png.size == (800, 500)
        pixels = np.asarray(png.convert('RGB'), dtype=np.int16)
    # The first group's band: matplotlib's C0 at alpha 0.2 over the white axes.
    c0_band = 0.8 * 255 + 0.2 * np.array([0x1F, 0x77, 0xB4])
    assert (np.abs(pixels - c0_band).max(axis=-1) <= 2).sum() > 1000
    # The legend goes below the axes; one wider than the figure widens it, and a
    # long group name is shortened there (200 wide letters would take ~2600 pixels).
    long_name = 'W' * 200
    wide = run_plot([str(grid), '--label', f'{long_name}={a}', '--out', 'wide.png'], tmp_path)
    assert_ok(wide)
    with Image.open(tmp_path / 'wide.png') as png:
        assert 800 < png.size[0] < 1600 and png.size[1] == 500
    with open(tmp_path / 'wide.csv', newline='') as f:
        assert long_name in {row['group'] for row in csv.DictReader(f)}
    # Last evaluation of each run: A (3, 6, 9); B (5, 6, 7, 10): the unfinished run's last is 10.
    table = final_table(result.stdout)
    assert table[a][:2] == (3, 6.0) and table[a][2:] == (3.0, 9.0)
    assert table[b][:2] == (4, 7.0)
    # Four draws all of B's smallest (or all of its largest) come with probability
    # 1/256 < 2.5%: the interval lies strictly inside [5, 10].
    assert 5.0 < table[b][2] < 7.0 < table[b][3] < 10.0


def test_std_band_smoothing_and_last_n(grid, tmp_path):
    paths = [str(grid / f'lr={LR_A},seed={s}') for s in RUNS_A]
    result = run_plot(
        paths + ['--band', 'std', '--smoothing', '2', '--last_n', '2', '--out', 'curves.png'],
        tmp_path,
    )
    assert_ok(result)
    curves = read_curves(tmp_path / 'curves.csv')
    # Only seeds differ: one group. Smoothed over 2 points: (1, 1.5, 2.5), (2, 3, 5),
    # (3, 4.5, 7.5); mean +- sample std.
    assert curves == {
        ('all runs', 0): (2.0, 1.0, 3.0, 3),
        ('all runs', 100): (3.0, 1.5, 4.5, 3),
        ('all runs', 200): (5.0, 2.5, 7.5, 3),
    }
    # Mean of the last 2 raw values per run: 2.5, 5, 7.5.
    assert final_table(result.stdout) == {'all runs': (3, 5.0, 2.5, 7.5)}, result.stdout


def test_one_run_alone_has_a_zero_width_std_band(grid, tmp_path):
    result = run_plot([str(grid / f'lr={LR_A},seed=0'), '--band', 'std'], tmp_path)
    assert_ok(result)
    # A standard deviation of one value is undefined: the band is the run's own value.
    assert read_curves(tmp_path / 'curves.csv') == {
        ('all runs', x): (value, value, value, 1) for x, value in zip((0, 100, 200), RUNS_A[0])
    }
    assert final_table(result.stdout) == {'all runs': (1, 3.0, 3.0, 3.0)}, result.stdout


def test_num_bootstrap_sets_the_resamplings_of_the_band(grid, tmp_path):
    paths = [str(grid / f'lr={LR_A},seed={s}') for s in RUNS_A]
    result = run_plot(paths + ['--num_bootstrap', '1', '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    curves = read_curves(tmp_path / 'curves.csv')
    # One resampling gives one mean: both ends of the band are that mean, though the 3
    # runs differ (1, 2, 3 at step 0) and more resamplings give [min, max].
    assert set(curves) == {('all runs', x) for x in (0, 100, 200)}
    assert all(lower == upper for _, lower, upper, _ in curves.values()), curves


def test_the_band_is_the_same_whatever_order_the_runs_are_given_in(grid, tmp_path):
    paths = [str(grid / f'lr={LR_A},seed={s}') for s in RUNS_A]
    bands = []
    for order in (paths, paths[::-1], paths[1:] + paths[:1]):
        out = tmp_path / f'order{len(bands)}'
        out.mkdir()
        assert_ok(run_plot(order + ['--num_bootstrap', '5', '--out', 'curves.png'], out))
        bands.append(read_curves(out / 'curves.csv'))
    # A few resamplings of 3 runs: drawn by position, a band would move with the order.
    assert bands[0] == bands[1] == bands[2], bands
    assert any(lower < upper for _, lower, upper, _ in bands[0].values()), bands[0]


def test_the_band_of_groups_pooled_by_label_is_the_same_whatever_order_they_are_given_in(
    grid, tmp_path
):
    groups = [
        [str(grid / f'lr={lr},seed={s}') for s in runs]
        for lr, runs in ((LR_A, RUNS_A), (LR_B, RUNS_B))
    ]
    labels = ['--label', f'all=actor/Adam.lr={LR_A}', '--label', f'all=actor/Adam.lr={LR_B}']
    bands = []
    for order in (groups[0] + groups[1], groups[1] + groups[0]):
        out = tmp_path / f'order{len(bands)}'
        out.mkdir()
        assert_ok(run_plot(order + labels + ['--num_bootstrap', '5', '--out', 'curves.png'], out))
        bands.append(read_curves(out / 'curves.csv'))
    assert {g for g, _ in bands[0]} == {'all'}
    assert bands[0] == bands[1], bands
    assert any(lower < upper for _, lower, upper, _ in bands[0].values()), bands[0]


def write_tensorboard_run(root_dir, seed):
    """A run with TensorBoard events only: eval/AverageReturn ``step + seed`` at steps 0, 100."""
    from alf_lite.summary import Summary

    root_dir.mkdir(parents=True)
    summary = Summary(str(root_dir))
    for step in (0, 100):
        summary.write(step, 0, 1e9 + step, {'eval/AverageReturn': float(step + seed)})
    summary.close()
    (root_dir / 'progress.csv').unlink()


def test_reads_tensorboard_events_when_there_is_no_progress_csv(tmp_path):
    for seed in (0, 1):
        write_tensorboard_run(tmp_path / 'runs' / f'seed={seed}', seed)
    result = run_plot([str(tmp_path / 'runs'), '--group_by', 'none', '--out', 'tb.png'], tmp_path)
    assert_ok(result)
    curves = read_curves(tmp_path / 'tb.csv')
    assert curves == {
        ('seed=0', 0): (0.0, 0.0, 0.0, 1),
        ('seed=0', 100): (100.0, 100.0, 100.0, 1),
        ('seed=1', 0): (1.0, 1.0, 1.0, 1),
        ('seed=1', 100): (101.0, 101.0, 101.0, 1),
    }
    # tensorboard logs "No path found after <events file>" at INFO for each file read.
    assert 'No path found' not in result.stderr, result.stderr
    # Pooled into one group: without a config.gin, no seed to compare.
    labels = ['--label', 'both=seed=0', '--label', 'both=seed=1']
    result = run_plot(
        [str(tmp_path / 'runs'), '--group_by', 'none', *labels, '--out', 'tb.png'], tmp_path
    )
    assert_ok(result)
    assert final_table(result.stdout)['both'][0] == 2


def test_quiet_tensorboard_hides_only_tensorboards_info_logs(caplog):
    import logging

    from alf_lite.bin.plot import quiet_tensorboard

    logger = logging.getLogger('tensorboard')
    with caplog.at_level(logging.INFO):
        with quiet_tensorboard():
            logger.info('No path found after x')
            logger.error('Unable to get size of x')
            logging.getLogger('alf_lite').info('our own')
        logger.info('after')
    assert [r.getMessage() for r in caplog.records] == [
        'Unable to get size of x',
        'our own',
        'after',
    ]


def test_unknown_column_names_the_closest_and_the_columns_once(grid, tmp_path):
    write_tensorboard_run(grid / 'tb_only', 0)
    result = run_plot([str(grid), '--y', 'eval/AverageRetrun', '--group_by', 'none'], tmp_path)
    assert result.returncode == 2, result.stderr
    assert 'Traceback' not in result.stderr
    assert result.stderr.startswith(
        "error: --y: no column 'eval/AverageRetrun' in the 8 runs; closest: eval/AverageReturn"
    ), result.stderr
    # The columns of progress.csv and of the TensorBoard events, each named once.
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.count('train/critic_loss') == 1, result.stderr
    assert 'eval/AverageReturn' in result.stderr.partition('the columns are:')[2]
    assert not list(tmp_path.glob('curves.*'))


def test_runs_without_the_column_are_left_out_named_once(grid, tmp_path):
    write_tensorboard_run(grid / 'tb_only', 0)
    write_progress(grid / 'actor_only', [(0, 1e9, 1.0)])
    args = ['--y', 'train/critic_loss', '--group_by', 'none', '--out', 'loss.png']
    result = run_plot([str(grid), *args], tmp_path)
    assert_ok(result)
    assert (
        "warning: left out: 2 runs without column 'train/critic_loss' (--y): "
        f'{grid / "actor_only"}, {grid / "tb_only"}\n'
    ) in result.stderr
    # Their columns are not listed.
    assert 'train/actor_loss' not in result.stderr, result.stderr
    assert len(final_table(result.stdout)) == len(RUNS_A) + len(RUNS_B)


def test_runs_without_a_value_yet_are_left_out_named_and_the_rest_plotted(grid, tmp_path):
    # One run failed before its first row (its event directories only), one has
    # written the header of its progress.csv and no row.
    crashed, started = grid / f'lr={LR_A},seed=8', grid / f'lr={LR_A},seed=9'
    write_run(crashed, LR_A, 8, [])
    (crashed / 'progress.csv').unlink()
    (crashed / 'eval').mkdir()
    write_run(started, LR_A, 9, [])
    result = run_plot([str(grid), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert f'warning: left out: {crashed} has no progress.csv' in result.stderr
    assert f'warning: left out: no eval/AverageReturn value yet in {started}' in result.stderr
    a = f'actor/Adam.lr={LR_A}'
    assert final_table(result.stdout)[a][:2] == (3, 6.0)  # the 3 runs with values
    # With no run that has a value, there is nothing to plot.
    result = run_plot([str(crashed), str(started), '--out', 'none.png'], tmp_path)
    assert result.returncode == 2 and 'no eval/AverageReturn value yet' in result.stderr
    assert not (tmp_path / 'none.png').exists()


def legend_labels(args, cwd):
    """The legend's entries of the figure plot draws for ``args``, run in ``cwd``."""
    script = f"""
import runpy, sys
import matplotlib.figure

legend = matplotlib.figure.Figure.legend

def shown(self, *args, **kwargs):
    made = legend(self, *args, **kwargs)
    print('legend:', repr([text.get_text() for text in made.get_texts()]))
    return made

matplotlib.figure.Figure.legend = shown
sys.argv = ['plot', *{list(args)!r}]
runpy.run_module('alf_lite.bin.plot', run_name='__main__')
"""
    result = run_python(script, timeout=RUN_TIMEOUT_S, cwd=cwd)
    assert_ok(result)
    (line,) = [line for line in result.stdout.splitlines() if line.startswith('legend: ')]
    return ast.literal_eval(line[len('legend: ') :])


def test_the_legend_counts_the_runs_plotted_not_those_left_out(grid, tmp_path):
    write_run(grid / f'lr={LR_A},seed=9', LR_A, 9, [])  # no value yet: left out
    assert legend_labels([str(grid), '--out', 'curves.png'], tmp_path) == [
        f'actor/Adam.lr={LR_B} (4 runs, 1 ending at 100)',
        f'actor/Adam.lr={LR_A} (3 runs)',
    ]


def test_a_group_whose_name_starts_with_an_underscore_is_in_the_legend(tmp_path):
    # matplotlib leaves a line labelled '_...' out of a legend it makes of the lines' labels.
    for name in ('_baseline', 'ours'):
        write_progress(tmp_path / 'runs' / name, [(0, 1e9, 1), (100, 1e9 + 1, 2)])
    args = [str(tmp_path / 'runs'), '--group_by', 'none', '--y', 'train/actor_loss']
    assert legend_labels([*args, '--out', 'curves.png'], tmp_path) == [
        '_baseline (1 run)',
        'ours (1 run)',
    ]


def test_names_holding_dollar_signs_are_drawn_as_written_not_as_tex_math(tmp_path):
    # Between two '$' matplotlib reads TeX math: 'odd$a^$' made it fail with a traceback.
    for name in ('odd$a^$', 'cost_$x$'):
        write_progress(tmp_path / 'runs' / name, [(0, 1e9, 1), (100, 1e9 + 1, 2)])
    args = [str(tmp_path / 'runs'), '--group_by', 'none', '--y', 'train/actor_loss']
    result = run_plot([*args, '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert 'Traceback' not in result.stderr
    assert legend_labels([*args, '--out', 'again.png'], tmp_path) == [
        'cost_$x$ (1 run)',
        'odd$a^$ (1 run)',
    ]


def test_y_minus_plots_the_difference_where_a_run_has_both(grid, tmp_path):
    paths = [str(grid / f'lr={LR_A},seed={s}') for s in RUNS_A]
    args = ['--y', 'eval/AverageReturn', '--y_minus', 'train/critic_loss', '--out', 'diff.png']
    result = run_plot(paths + args, tmp_path)
    assert_ok(result)
    curves = read_curves(tmp_path / 'diff.csv')
    # critic_loss is 0.5 at the eval rows after the first and missing at step 0 (no point
    # there); at 50, 150 only critic_loss has a value.
    assert {x: v[0] for (_, x), v in curves.items()} == {100: 3.5, 200: 5.5}
    assert 'final eval/AverageReturn - train/critic_loss' in result.stdout
    assert final_table(result.stdout) == {'all runs': (3, 5.5, 2.5, 8.5)}, result.stdout
    missing = run_plot(paths + ['--y_minus', 'train/nothing', '--out', 'x.png'], tmp_path)
    assert missing.returncode == 2 and "no column 'train/nothing'" in missing.stderr


def test_y_minus_where_both_are_inf_is_no_point_without_numpys_warning(tmp_path):
    (tmp_path / 'run').mkdir()
    with open(tmp_path / 'run' / 'progress.csv', 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['env_steps', 'wall_time', 'train/critic_loss', 'train/actor_loss'])
        writer.writerows([(0, 1e9, 3, 1), (100, 1e9 + 1, 'inf', 'inf'), (200, 1e9 + 2, 5, 1)])
    args = ['--y', 'train/critic_loss', '--y_minus', 'train/actor_loss', '--group_by', 'none']
    result = run_plot([str(tmp_path / 'run'), *args, '--out', 'diff.png'], tmp_path)
    assert_ok(result)
    assert 'RuntimeWarning' not in result.stderr, result.stderr
    # inf - inf is NaN: no point there.
    curves = read_curves(tmp_path / 'diff.csv')
    assert {x: v[0] for (_, x), v in curves.items()} == {0: 2.0, 200: 4.0}


def test_label_renames_a_group_in_the_legend_csv_and_table(grid, tmp_path):
    a, b = f'actor/Adam.lr={LR_A}', f'actor/Adam.lr={LR_B}'
    # A name may hold '=' too: the label ends in the group's name.
    result = run_plot([str(grid), '--label', f'lr=fast={a}', '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert {g for g, _ in read_curves(tmp_path / 'curves.csv')} == {'lr=fast', b}
    table = final_table(result.stdout)
    assert set(table) == {'lr=fast', b} and table['lr=fast'][:2] == (3, 6.0)


@pytest.mark.parametrize(
    'label, message',
    [
        ('fast', "--label 'fast' is not NAME=GROUP"),
        (
            'fast=actor/Adam.lr=0.1',
            "--label 'fast=actor/Adam.lr=0.1' ends in no group's name; the groups are: "
            f"'actor/Adam.lr={LR_B}', 'actor/Adam.lr={LR_A}'",
        ),
        (f'actor/Adam.lr={LR_B}', f'is a group; name it as NAME=actor/Adam.lr={LR_B}'),
    ],
)
def test_label_for_no_group_names_the_groups_and_writes_nothing(grid, tmp_path, label, message):
    result = run_plot([str(grid), '--label', label, '--out', 'curves.png'], tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert 'Traceback' not in result.stderr
    assert not (tmp_path / 'curves.png').exists() and not (tmp_path / 'curves.csv').exists()


def test_one_group_given_two_names_is_refused_naming_both(grid, tmp_path):
    labels = [f'{name}=actor/Adam.lr={LR_A}' for name in ('fast', 'slow')]
    result = run_plot([str(grid), '--label', labels[0], '--label', labels[1]], tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"the group 'actor/Adam.lr={LR_A}' two names, 'fast' and 'slow'" in result.stderr
    assert not (tmp_path / 'curves.png').exists() and not (tmp_path / 'curves.csv').exists()


def test_two_groups_given_one_name_are_pooled(grid, tmp_path):
    labels = [f'same=actor/Adam.lr={lr}' for lr in (LR_A, LR_B)]
    result = run_plot([str(grid), '--label', labels[0], '--label', labels[1]], tmp_path)
    assert_ok(result)
    assert {g for g, _ in read_curves(tmp_path / 'curves.csv')} == {'same'}
    assert final_table(result.stdout)['same'][0] == len(RUNS_A) + len(RUNS_B)


def test_runs_pooled_under_one_label_whose_config_gin_is_damaged_are_plotted(grid, tmp_path):
    # --group_by none reads no config.gin: one that cannot be read leaves its run out of the
    # same-seed check only, as a run without one is.
    (grid / f'lr={LR_A},seed=1' / 'config.gin').write_bytes(b'\xff\xfe not text')
    labels = [f'both=lr={LR_A},seed={seed}' for seed in (0, 1)]
    result = run_plot(
        [str(grid), '--group_by', 'none', '--label', labels[0], '--label', labels[1]], tmp_path
    )
    assert_ok(result)
    assert 'Traceback' not in result.stderr
    assert final_table(result.stdout)['both'][0] == 2


def test_out_that_would_overwrite_a_file_plot_did_not_write_is_refused(grid, tmp_path):
    run = grid / f'lr={LR_A},seed=0'
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    # The CSV goes next to --out: here it would be the run's own progress.csv.
    result = run_plot([str(run), '--out', str(run / 'progress.png')], tmp_path)
    assert result.returncode == 2, result.stderr
    assert f'would overwrite {run / "progress.csv"}, which holds no curves' in result.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    (tmp_path / 'notes.png').write_text('not a picture')
    result = run_plot([str(run), '--out', 'notes.png'], tmp_path)
    assert result.returncode == 2 and 'notes.png exists and is not a PNG' in result.stderr
    assert (tmp_path / 'notes.png').read_text() == 'not a picture'
    # A picture of the user's own (a PNG that plot did not mark, with no curves beside it).
    photo = b'\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR' + bytes(100)
    (tmp_path / 'photo.png').write_bytes(photo)
    result = run_plot([str(run), '--out', 'photo.png'], tmp_path)
    assert result.returncode == 2, result.stderr
    assert 'photo.png exists and is not a plot that plot wrote' in result.stderr
    assert (tmp_path / 'photo.png').read_bytes() == photo
    assert not (tmp_path / 'photo.csv').exists()
    # A table of the user's own whose first column happens to be 'group'.
    table = 'group,seed,return\na,0,-120.5\n'
    (tmp_path / 'table.csv').write_text(table)
    result = run_plot([str(run), '--out', 'table.png'], tmp_path)
    assert result.returncode == 2, result.stderr
    assert 'would overwrite table.csv, which holds no curves' in result.stderr
    assert (tmp_path / 'table.csv').read_text() == table
    # Plotting again to the same --out replaces plot's own files, also when the
    # CSV was deleted: the PNG says plot wrote it.
    assert_ok(run_plot([str(run), '--out', 'again.png'], tmp_path))
    first_png = (tmp_path / 'again.png').read_bytes()
    (tmp_path / 'again.csv').unlink()
    assert_ok(run_plot([str(run), '--out', 'again.png'], tmp_path))
    other = grid / f'lr={LR_A},seed=1'
    assert_ok(run_plot([str(other), '--out', 'again.png'], tmp_path))
    assert read_curves(tmp_path / 'again.csv') == {
        ('all runs', x): (value, value, value, 1) for x, value in zip((0, 100, 200), RUNS_A[1])
    }
    assert (tmp_path / 'again.png').read_bytes() != first_png


def test_out_that_would_give_a_run_without_progress_csv_the_curves_as_its_own_is_refused(
    grid, tmp_path
):
    # A run whose progress.csv is missing (plot reads its events): the curves would become
    # the run's progress.csv, which plot and a resumed train read as the run's rows.
    run = grid / f'lr={LR_A},seed=0'
    (run / 'progress.csv').unlink()
    before = sorted(p.name for p in run.iterdir())
    data = grid / f'lr={LR_A},seed=1'
    result = run_plot([str(data), '--out', str(run / 'progress.png')], tmp_path)
    assert result.returncode == 2, result.stderr
    assert f'would write its curves to {run / "progress.csv"}, the progress file' in result.stderr
    assert sorted(p.name for p in run.iterdir()) == before


def test_plot_whose_output_reader_is_gone_writes_its_files_and_exits_0(grid, tmp_path):
    # As `plot ... | head -1` does: its lines, buffered in the pipe, met the closed reader
    # at exit, which Python ends with exit code 120.
    command = [sys.executable, '-m', 'alf_lite.bin.plot', str(grid), '--out', 'curves.png']
    returncode, err = run_with_output_reader_gone(command, cwd=tmp_path)
    assert returncode == 0 and 'BrokenPipeError' not in err, err[-3000:]
    assert (tmp_path / 'curves.png').stat().st_size > 0 and (tmp_path / 'curves.csv').exists()


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='needs /dev/full (Linux)')
def test_plot_whose_output_cannot_be_written_says_so_and_writes_its_files(grid, tmp_path):
    # stdout to a full disk: Python's OSError at exit, exit code 120.
    env = train_env()
    env.pop('PYTHONUNBUFFERED', None)
    command = [sys.executable, '-m', 'alf_lite.bin.plot', str(grid), '--out', 'curves.png']
    with open('/dev/full', 'w') as full:
        result = subprocess.run(
            command, cwd=tmp_path, env=env, stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'warning: cannot write to stdout: No space left on device' in result.stderr
    assert (tmp_path / 'curves.png').stat().st_size > 0


def test_out_that_would_make_a_directory_of_runs_one_run_is_refused(grid, tmp_path):
    # A progress.csv of curves in the directory of the runs would make it a run: plotting
    # it again would take it for one run and find none of the runs below it.
    for out in (grid / 'progress.png', tmp_path / 'progress.png'):
        result = run_plot([str(grid), '--out', str(out)], tmp_path)
        assert result.returncode == 2, result.stderr
        assert f'would write its curves to {out.with_suffix(".csv")}, the progress' in (
            result.stderr
        )
        assert not out.with_suffix('.csv').exists() and not out.exists()


def test_out_beside_a_csv_of_one_huge_line_is_refused_without_reading_it_whole(tmp_path):
    from alf_lite.bin.plot import check_outputs
    from alf_lite.runs import MAX_LINE_CHARS

    # A crafted or broken CSV at --out's path: one line, no line break, of 32 MiB.
    path = tmp_path / 'curves.csv'
    with open(path, 'w') as f:
        f.truncate(32 * MAX_LINE_CHARS)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match='which holds no curves that plot wrote'):
            check_outputs(str(tmp_path / 'curves.png'), str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MAX_LINE_CHARS, peak
    assert path.stat().st_size == 32 * MAX_LINE_CHARS


def test_out_where_nothing_can_be_written_is_a_clear_error(grid, tmp_path):
    (tmp_path / 'afile').write_text('mine')
    (tmp_path / 'adir.png').mkdir()
    for out, message in (
        ('afile/curves.png', 'cannot write --out afile/curves.png: '),
        ('adir.png', '--out adir.png: adir.png is a directory'),
    ):
        result = run_plot([str(grid), '--out', out], tmp_path)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert 'Traceback' not in result.stderr
    assert (tmp_path / 'afile').read_text() == 'mine'


def test_a_plot_that_fails_while_writing_leaves_the_last_one_whole(grid, tmp_path):
    assert_ok(run_plot([str(grid), '--out', 'curves.png'], tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    # The disk fills up once the PNG is written, halfway through the CSV.
    script = (
        'import sys, runpy, csv\n'
        'class Writer:\n'
        '    def __init__(self, f): self.f = f\n'
        '    def writerow(self, row):\n'
        '        self.f.write("group,half")\n'
        '        raise OSError(28, "No space left on device")\n'
        'csv.writer = Writer\n'
        # Another band: a PNG and a CSV that differ from the last ones.
        f'sys.argv = ["plot", {str(grid)!r}, "--out", "curves.png", "--band", "std"]\n'
        'runpy.run_module("alf_lite.bin.plot", run_name="__main__")\n'
    )
    result = run_python(script, timeout=RUN_TIMEOUT_S, cwd=tmp_path)
    assert result.returncode == 2 and 'No space left on device' in result.stderr, result.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_plot_killed_between_moving_in_its_png_and_csv_leaves_no_older_csv_beside(grid, tmp_path):
    assert_ok(run_plot([str(grid), '--out', 'curves.png'], tmp_path))
    old_png = (tmp_path / 'curves.png').read_bytes()
    # Killed once the first of the two files is moved in.
    script = (
        'import os, runpy, sys\n'
        'replace = os.replace\n'
        'def replace_then_die(src, dst):\n'
        '    replace(src, dst)\n'
        '    if dst.endswith(("curves.png", "curves.csv")):\n'
        '        os._exit(9)\n'
        'os.replace = replace_then_die\n'
        f'sys.argv = ["plot", {str(grid)!r}, "--out", "curves.png", "--band", "std"]\n'
        'runpy.run_module("alf_lite.bin.plot", run_name="__main__")\n'
    )
    result = run_python(script, timeout=RUN_TIMEOUT_S, cwd=tmp_path)
    assert result.returncode == 9, result.stderr
    # The new PNG without a CSV: not beside the curves of the last plot.
    assert (tmp_path / 'curves.png').read_bytes() != old_png
    assert not (tmp_path / 'curves.csv').exists()
    # Plotting again writes the pair.
    assert_ok(run_plot([str(grid), '--out', 'curves.png', '--band', 'std'], tmp_path))
    assert read_curves(tmp_path / 'curves.csv')


def test_a_plot_stopped_while_it_writes_leaves_no_temporary_file(grid, tmp_path):
    assert_ok(run_plot([str(grid), '--out', 'curves.png'], tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    # SIGTERM while the PNG is drawn into its temporary file beside curves.png.
    script = (
        'import os, runpy, signal, sys\n'
        'import matplotlib.figure\n'
        'savefig = matplotlib.figure.Figure.savefig\n'
        'def savefig_then_terminate(self, *args, **kwargs):\n'
        '    savefig(self, *args, **kwargs)\n'
        '    os.kill(os.getpid(), signal.SIGTERM)\n'
        'matplotlib.figure.Figure.savefig = savefig_then_terminate\n'
        f'sys.argv = ["plot", {str(grid)!r}, "--out", "curves.png", "--band", "std"]\n'
        'runpy.run_module("alf_lite.bin.plot", run_name="__main__")\n'
    )
    result = run_python(script, timeout=RUN_TIMEOUT_S, cwd=tmp_path)
    assert result.returncode == 128 + 15, result.stderr
    assert result.stderr.strip().splitlines()[-1] == 'error: interrupted by SIGTERM.'
    # The last pair as it was, and nothing beside it.
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


@pytest.mark.parametrize('how', [dropped_signal.DROPPED, dropped_signal.REPLACED])
def test_a_signal_whose_exception_never_reaches_plot_stops_it_before_the_files_are_replaced(
    grid, tmp_path, how
):
    # While the PNG is drawn, a SIGINT whose exception the drawing drops, or replaces with an
    # error of its own (matplotlib's C++ raised "ValueError: Invalid affine transformation
    # matrix" so): was a plot written as if whole (exit 0), or that error's traceback (exit 1).
    assert_ok(run_plot([str(grid), '--out', 'curves.png'], tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    args = [str(grid), '--out', 'curves.png', '--band', 'std']
    result = dropped_signal.run_tool(
        'plot', args, 'matplotlib.figure', 'Figure.savefig', how, cwd=tmp_path
    )
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == 'error: interrupted by SIGINT.'
    assert 'Traceback' not in result.stderr
    assert 'Exception ignored' not in result.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_signal_while_matplotlib_makes_its_font_module_stops_plot_with_128_plus_it(
    grid, tmp_path
):
    # SIGINT while ft2font's import makes its enum classes, which it keeps in a C++ static:
    # the tuple left in place of a class was freed by C's exit after the interpreter's end,
    # which aborted the process (exit 134, "Fatal Python error: PyThreadState_Get").
    script = (
        'import enum, os, runpy, signal, sys\n'
        'call = enum.EnumType.__call__\n'
        'def call_then_interrupt(cls, *args, **kwargs):\n'
        '    if kwargs.get("module") == "matplotlib.ft2font":\n'
        '        enum.EnumType.__call__ = call\n'
        '        os.kill(os.getpid(), signal.SIGINT)\n'
        '    return call(cls, *args, **kwargs)\n'
        'enum.EnumType.__call__ = call_then_interrupt\n'
        f'sys.argv = ["plot", {str(grid)!r}, "--out", "curves.png"]\n'
        'runpy.run_module("alf_lite.bin.plot", run_name="__main__")\n'
    )
    result = run_python(script, timeout=RUN_TIMEOUT_S, cwd=tmp_path)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == 'error: interrupted by SIGINT.'
    assert not [p for p in tmp_path.iterdir() if p.is_file()]


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_plot_imports_its_modules_stops_it_with_one_line(grid, tmp_path, sig):
    # Before main handles the signals: was a KeyboardInterrupt's traceback, or no word.
    command = [sys.executable, '-m', 'alf_lite.bin.plot', str(grid), '--out', 'curves.png']
    command = with_prelude(command, signal_on_import(sig), 'alf_lite.bin.plot', alter_sys=True)
    result = run_train(command, cwd=tmp_path)
    assert result.returncode == 128 + sig, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [f'error: interrupted by {sig.name}.']
    assert not (tmp_path / 'curves.png').exists()


def test_group_by_a_parameter_no_run_binds_names_the_closest(grid, tmp_path):
    result = run_plot([str(grid), '--group_by', 'actor/Adam.lrr'], tmp_path)
    assert result.returncode == 2, result.stderr
    assert 'no run binds actor/Adam.lrr in its config.gin; closest bound parameters: ' in (
        result.stderr
    )
    assert 'actor/Adam.lr' in result.stderr


def test_group_by_a_parameter_some_runs_leave_at_its_default(tmp_path):
    for seed, returns in RUNS_A.items():
        extra = 'critic/Adam.lr = 0.01\n' if seed < 2 else ''
        write_run(tmp_path / 'runs' / f'seed={seed}', LR_A, seed, returns, extra)
    result = run_plot([str(tmp_path / 'runs'), '--group_by', 'critic/Adam.lr'], tmp_path)
    assert_ok(result)
    table = final_table(result.stdout)
    assert table == {
        'critic/Adam.lr=0.01': (2, 4.5, 3.0, 6.0),
        'critic/Adam.lr=(default)': (1, 9.0, 9.0, 9.0),
    }, result.stdout


def test_group_by_a_parameter_given_through_a_macro_groups_by_the_macros_value(tmp_path):
    from alf_lite.bin.plot import group_runs

    # A sweep over LR, with `actor/Adam.lr = %LR` in every run's config.gin.
    runs = []
    for lr in (LR_A, LR_B):
        for seed in range(2):
            run = tmp_path / f'LR={lr},seed={seed}'
            write_run(run, '%LR', seed, [1.0], extra=f'LR = {lr}\n')
            runs.append(str(run))
    direct = tmp_path / 'direct'
    write_run(direct, LR_A, 2, [1.0])
    assert group_runs([*runs, str(direct)], 'actor/Adam.lr') == [
        (f'actor/Adam.lr={LR_A}', [*runs[:2], str(direct)]),
        (f'actor/Adam.lr={LR_B}', runs[2:]),
    ]


def test_config_grouping_compares_values_with_macros_put_in_as_train_does(tmp_path):
    from alf_lite.bin.plot import group_runs, same_seed_runs
    from alf_lite.run_dir import changed_bindings

    seed = 'TrainerConfig.random_seed'

    def one_experiment(a, b):
        # To train, seeds apart.
        a, b = ((tmp_path / run / 'config.gin').read_text() for run in (a, b))
        return not [change for change in changed_bindings(a, b) if seed not in change]

    # LR_A through a macro and as a literal, and a sweep's other LR.
    write_run(tmp_path / 'macro', '%LR', 0, RUNS_A[0], f'LR = {LR_A}\n')
    write_run(tmp_path / 'literal', LR_A, 1, RUNS_A[1])
    write_run(tmp_path / 'sweep', '%LR', 0, RUNS_A[0], f'LR = {LR_B}\n')
    macro, literal, sweep = (str(tmp_path / r) for r in ('macro', 'literal', 'sweep'))
    assert one_experiment('macro', 'literal')
    # Each group's runs in the order of their paths, whatever the order given.
    assert group_runs([macro, literal], 'config') == [('all runs', [literal, macro])]
    # Labelled by the resolved value, as --group_by actor/Adam.lr labels them.
    assert not one_experiment('macro', 'sweep')
    assert group_runs([macro, literal, sweep], 'config') == [
        (f'actor/Adam.lr={LR_A}', [literal, macro]),
        (f'actor/Adam.lr={LR_B}', [sweep]),
    ]
    # A macro nothing uses is a binding of its own, which a run that uses it binds too.
    for name, lr in (('unused', LR_A), ('unused other', LR_B)):
        write_run(tmp_path / name, LR_A, 2, RUNS_A[2], f'LR = {lr}\n')
    unused, other = str(tmp_path / 'unused'), str(tmp_path / 'unused other')
    assert one_experiment('macro', 'unused')
    assert not one_experiment('macro', 'unused other')
    assert group_runs([macro, unused, other], 'config') == [
        (f'LR={LR_A}', [macro, unused]),
        (f'LR={LR_B}', [other]),
    ]
    # Of one seed, through the macro or not, one run twice.
    write_run(tmp_path / 'literal seed=0', LR_A, 0, RUNS_A[0])
    again = str(tmp_path / 'literal seed=0')
    assert same_seed_runs([macro, again, sweep]) == [(macro, again)]
    result = run_plot([macro, literal, again, '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert final_table(result.stdout) == {'all runs': (3, 4.0, 3.0, 6.0)}, result.stdout
    assert f'{again} and {macro} have the same {seed} (0) and setting' in result.stderr


def test_config_grouping_keeps_a_macro_holding_a_reference_as_written(tmp_path):
    from alf_lite.bin.plot import group_runs

    # gin calls @GaussianNoise() in the macro's scope: no value to put in.
    noise = 'Td3Algorithm.exploration_noise'
    write_run(tmp_path / 'macro', LR_A, 0, [1.0], f'NOISE = @GaussianNoise()\n{noise} = %NOISE\n')
    write_run(tmp_path / 'direct', LR_A, 1, [1.0], f'{noise} = @GaussianNoise()\n')
    write_run(
        tmp_path / 'macro seed=1', LR_A, 1, [1.0], f'NOISE = @GaussianNoise()\n{noise} = %NOISE\n'
    )
    runs = [str(tmp_path / r) for r in ('macro', 'direct', 'macro seed=1')]
    assert group_runs(runs, 'config') == [
        (f'NOISE=@GaussianNoise(), {noise}=%NOISE', [runs[0], runs[2]]),
        (f'NOISE=(default), {noise}=@GaussianNoise()', [runs[1]]),
    ]


def test_runs_that_differ_in_any_one_grouped_parameter_are_groups_apart(tmp_path):
    from alf_lite.bin.plot import group_runs

    def run(name, lr, seed, buffer_length):
        write_run(tmp_path / name, lr, seed, [1.0])
        config = tmp_path / name / 'config.gin'
        config.write_text(config.read_text().replace('    1000\n', f'    {buffer_length}\n'))
        return str(tmp_path / name)

    # Each of the first three differs from the others in one parameter; the last is
    # the first's setting with another seed.
    runs = [
        run('a', LR_A, 0, 1000),
        run('a_long', LR_A, 0, 2000),
        run('b', LR_B, 0, 1000),
        run('a_seed1', LR_A, 1, 1000),
    ]
    both = ['TrainerConfig.replay_buffer_length', 'actor/Adam.lr']
    for group_by in ('config', ','.join(both), ','.join(reversed(both))):
        groups = group_runs(runs, group_by)
        assert [members for _, members in groups] == [
            [runs[0], runs[3]],
            [runs[1]],
            [runs[2]],
        ], group_by
        names = both if group_by == 'config' else group_by.split(',')
        setting = {'TrainerConfig.replay_buffer_length': '2000', 'actor/Adam.lr': LR_A}
        assert groups[1][0] == ', '.join(f'{n}={setting[n]}' for n in names), group_by


@pytest.mark.parametrize(
    'flag, value, message',
    [
        ('--smoothing', '0', '--smoothing, --last_n and --num_bootstrap must be positive'),
        ('--last_n', '0', '--smoothing, --last_n and --num_bootstrap must be positive'),
        ('--num_bootstrap', '0', '--smoothing, --last_n and --num_bootstrap must be positive'),
        ('--num_bootstrap', '100001', '--num_bootstrap must be at most 100000, got 100001'),
        ('--out', 'curves.jpg', "--out must end in .png, got 'curves.jpg'"),
    ],
    ids=['smoothing', 'last_n', 'num_bootstrap', 'num_bootstrap_past_its_most', 'out'],
)
def test_unusable_flags_are_refused_and_nothing_is_written(grid, tmp_path, flag, value, message):
    result = run_plot([str(grid), flag, value], tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert 'Traceback' not in result.stderr
    assert not list(tmp_path.glob('curves.*'))


def test_progress_csv_that_is_no_table_is_named_with_its_line(grid, tmp_path):
    run = grid / f'lr={LR_A},seed=0'
    progress = run / 'progress.csv'
    progress.write_text(progress.read_text() + '300,30,1e9,oops,\n')
    result = run_plot([str(run), '--out', 'x.png'], tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"{progress}, line 8: could not convert string to float: 'oops'" in result.stderr
    progress.write_bytes(b'\xff\xff\x00binary')
    result = run_plot([str(run), '--out', 'x.png'], tmp_path)
    assert result.returncode == 2, result.stderr
    assert f'{progress} is not text: utf-8 cannot decode its byte 0xff' in result.stderr
    assert 'Traceback' not in result.stderr


# Run as user nobody where the tests run as root, who may read any file: its modules
# imported first, as nobody may not read root's Python.
AS_ANOTHER_USER = (
    'import os, encodings.raw_unicode_escape, encodings.utf_8_sig, difflib\n'
    'import tensorboard.backend.event_processing.event_accumulator\n'
    'import matplotlib\n'
    "matplotlib.use('Agg')\n"
    'import matplotlib.pyplot, numpy\n'
    'import absl.app, alf_lite.bin.cli, alf_lite.config, alf_lite.runs, alf_lite.signals\n'
    'if os.geteuid() == 0:\n'
    '    os.seteuid(65534)\n'
)


def plot_as_another_user(args, cwd):
    """``plot <args>`` run in ``cwd`` as user nobody (``AS_ANOTHER_USER``)."""
    command = [sys.executable, '-m', 'alf_lite.bin.plot', *args]
    return subprocess.run(
        with_prelude(command, AS_ANOTHER_USER, 'alf_lite.bin.plot'),
        cwd=cwd,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def test_a_run_whose_files_this_user_may_not_read_is_named_not_a_traceback():
    # Another user's runs: pytest's own temp dir is closed to others.
    with tempfile.TemporaryDirectory() as base:
        os.chmod(base, 0o777)
        for seed in (1, 2):
            run = os.path.join(base, 'runs', f'seed={seed}')
            write_run(pathlib.Path(run), LR_A, seed, [1, 2, 3])
        os.chmod(os.path.join(base, 'runs', 'seed=2', 'progress.csv'), 0)
        args = ['runs', '--out', 'curves.png']
        result = plot_as_another_user(args, base)
        assert_ok(result)
        assert "warning: left out: [Errno 13] Permission denied: 'runs/seed=2/progress.csv'" in (
            result.stderr
        )
        assert final_table(result.stdout) == {'all runs': (1, 3.0, 3.0, 3.0)}
        os.chmod(os.path.join(base, 'runs', 'seed=2', 'config.gin'), 0)
        result = plot_as_another_user(args, base)
        assert result.returncode == 2, result.stderr
        assert "[Errno 13] Permission denied: 'runs/seed=2/config.gin'" in result.stderr
        assert 'Traceback' not in result.stderr


def test_a_run_whose_events_this_user_may_not_read_is_named_not_a_traceback():
    with tempfile.TemporaryDirectory() as base:
        os.chmod(base, 0o777)
        for seed in (1, 2):
            write_tensorboard_run(pathlib.Path(base, 'runs', f'seed={seed}'), seed)
        os.chmod(os.path.join(base, 'runs', 'seed=2', 'eval'), 0)
        result = plot_as_another_user(['runs', '--group_by', 'none', '--out', 'curves.png'], base)
        assert_ok(result)
        assert "warning: left out: [Errno 13] Permission denied: 'runs/seed=2/eval'" in (
            result.stderr
        )
        assert final_table(result.stdout) == {'seed=1': (1, 101.0, 101.0, 101.0)}


def test_a_directory_this_user_may_not_read_is_named_not_passed_over_in_silence():
    # A seed of another user's, among the runs: it was left out without a word.
    with tempfile.TemporaryDirectory() as base:
        os.chmod(base, 0o777)
        for seed in (1, 2):
            write_run(pathlib.Path(base, 'runs', f'seed={seed}'), LR_A, seed, [1, 2, 3])
        os.chmod(os.path.join(base, 'runs', 'seed=2'), 0)
        for paths in (['runs'], ['runs/seed=1', 'runs/seed=2']):
            result = plot_as_another_user([*paths, '--out', 'curves.png'], base)
            assert_ok(result)
            assert (
                'skipping runs/seed=2: cannot be read (Permission denied): no run in it is '
                'plotted' in result.stderr
            )
            assert final_table(result.stdout) == {'all runs': (1, 3.0, 3.0, 3.0)}


def test_out_beside_files_this_user_may_not_read_is_refused_naming_them(grid):
    with tempfile.TemporaryDirectory() as base:
        os.chmod(base, 0o777)
        for name in ('other.png', 'another.csv'):
            with open(os.path.join(base, name), 'w') as f:
                f.write('not to be replaced\n')
            os.chmod(os.path.join(base, name), 0)
        run = str(grid / f'lr={LR_A},seed=0')
        for out, unread in (('other.png', 'other.png'), ('another.png', 'another.csv')):
            result = plot_as_another_user([run, '--out', out], base)
            assert result.returncode == 2, result.stderr
            assert (
                f'error: --out {out}: cannot read {unread} (Permission denied) to tell whether '
                'plot wrote it'
            ) in result.stderr
            assert 'Traceback' not in result.stderr
        assert sorted(os.listdir(base)) == ['another.csv', 'other.png']


def write_progress(root_dir, rows):
    """A run with only a progress.csv: ``rows`` of (env_steps, wall_time, value), '' for none."""
    root_dir.mkdir(parents=True)
    with open(root_dir / 'progress.csv', 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['env_steps', 'wall_time', 'train/actor_loss'])
        writer.writerows(rows)


def test_a_legend_of_many_groups_makes_the_figure_taller_not_the_axes_hidden(tmp_path):
    # A sweep of 30 settings: the legend below the axes is taller than the whole figure.
    num_runs = 30
    for i in range(num_runs):
        write_progress(tmp_path / 'runs' / f'run-{i:02d}', [(0, 1e9, i), (100, 1e9 + 1, 2 * i)])
    args = [str(tmp_path / 'runs'), '--group_by', 'none', '--y', 'train/actor_loss']
    assert_ok(run_plot([*args, '--out', 'many.png'], tmp_path))
    with Image.open(tmp_path / 'many.png') as png:
        width, height = png.size
    # A legend line of the small font takes over 15 pixels; the axes keep their room above.
    assert width == 800 and height > num_runs * 15 + 300


def test_nan_is_no_point_and_spoils_no_later_window(tmp_path):
    # TD3 logs NaN for its actor loss before the first actor update; inf stays in its windows.
    values = ['nan', 2, 4, 'inf', 6, 8, 'nan', 10]
    write_progress(tmp_path / 'td3', [(100 * i, 1e9 + i, v) for i, v in enumerate(values)])
    args = ['--y', 'train/actor_loss', '--group_by', 'none', '--smoothing', '2', '--last_n', '2']
    result = run_plot([str(tmp_path / 'td3'), *args, '--out', 'loss.png'], tmp_path)
    assert_ok(result)
    curves = read_curves(tmp_path / 'loss.csv')
    # Points 2, 4, inf, 6, 8, 10 (the NaN rows are none), each averaged with the one before.
    means = {x: v[0] for (_, x), v in curves.items()}
    assert means == {100: 2.0, 200: 3.0, 300: float('inf'), 400: float('inf'), 500: 7.0, 700: 9.0}
    # The last 2 points: 8 and 10.
    assert final_table(result.stdout) == {'td3': (1, 9.0, 9.0, 9.0)}, result.stdout


def test_a_row_whose_env_steps_or_x_is_nan_or_inf_is_passed_over(tmp_path):
    # Edited rows: train counts no step of an env_steps of nan or inf, and a NaN or an
    # infinite x has no place along x (an inf would be the run's last point).
    rows = [(0, 1e9, 1), ('nan', 1e9 + 1, 2), ('inf', 1e9 + 2, 3)]
    rows += [(300, 'nan', 4), (400, '-inf', 5), (500, 1e9 + 5, 6)]
    write_progress(tmp_path / 'run', rows)
    args = [str(tmp_path / 'run'), '--y', 'train/actor_loss', '--group_by', 'none']
    for x, means in (('env_steps', {0: 1, 300: 4, 400: 5, 500: 6}), ('wall_time', {0: 1, 5: 6})):
        result = run_plot([*args, '--x', x, '--out', f'{x}.png'], tmp_path)
        assert_ok(result)
        with open(tmp_path / f'{x}.csv', newline='') as f:
            assert {float(r[x]): float(r['mean']) for r in csv.DictReader(f)} == means
        assert final_table(result.stdout) == {'run': (1, 6.0, 6.0, 6.0)}, result.stdout


def test_a_diverged_run_makes_its_groups_mean_inf_named_in_a_warning_without_numpys(tmp_path):
    write_run(tmp_path / 'runs' / 'a', LR_A, 0, [1, 2, 3])
    write_run(tmp_path / 'runs' / 'b', LR_A, 1, [3, 'inf', 5])
    result = run_plot([str(tmp_path / 'runs'), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    curves = read_curves(tmp_path / 'curves.csv')
    group = 'all runs'
    inf = float('inf')
    assert curves[(group, 100)] == (inf, inf, inf, 2)
    # Where both are finite the band is the usual one.
    mean, lower, upper, _ = curves[(group, 200)]
    assert (mean, lower, upper) != (4.0, 4.0, 4.0) and lower < mean < upper
    run = tmp_path / 'runs' / 'b'
    assert (
        f'warning: {run}: eval/AverageReturn is inf at 1 point(s), the first at env_steps 100'
        in result.stderr
    )
    assert 'RuntimeWarning' not in result.stderr, result.stderr


def test_inf_and_minus_inf_together_give_nan_there_without_numpys_warnings(tmp_path):
    values = [1, 'inf', '-inf', 2]
    write_progress(tmp_path / 'run', [(100 * i, 1e9 + i, v) for i, v in enumerate(values)])
    args = ['--y', 'train/actor_loss', '--group_by', 'none', '--out', 'loss.png']
    result = run_plot([str(tmp_path / 'run'), *args, '--smoothing', '2', '--last_n', '3'], tmp_path)
    assert_ok(result)
    assert 'RuntimeWarning' not in result.stderr, result.stderr
    assert (
        f'warning: {tmp_path / "run"}: train/actor_loss is inf or -inf at 2 point(s), the '
        'first at env_steps 100'
    ) in result.stderr
    curves = read_curves(tmp_path / 'loss.csv')
    inf = float('inf')
    # The window of inf and -inf is NaN: no point, but the run is still there.
    assert curves[('run', 100)] == (inf, inf, inf, 1)
    assert np.isnan(curves[('run', 200)][:3]).all() and curves[('run', 200)][3] == 1
    assert curves[('run', 300)] == (-inf, -inf, -inf, 1)
    # The last 3 points hold inf and -inf.
    assert re.search(r'^run +1 +nan +\[nan, nan\]$', result.stdout, re.M), result.stdout


def test_aggregate_bands_each_x_over_the_runs_there_as_resampled_alone():
    from alf_lite.bin.plot import BOOTSTRAP_SEED, CONFIDENCE, aggregate

    # Runs of different spans and points: 1, 2 or 3 runs at an x, one with an inf.
    curves = [
        (np.array([0.0, 10.0, 20.0, 30.0]), np.array([1.0, 5.0, 2.0, 8.0])),
        (np.array([5.0, 15.0, 25.0]), np.array([3.0, 4.0, 9.0])),
        (np.array([0.0, 12.0]), np.array([7.0, np.inf])),
    ]
    num_bootstrap = 500
    rows = aggregate(curves, 'ci', num_bootstrap)
    assert [x for x, *_ in rows] == [0, 5, 10, 12, 15, 20, 25, 30]
    alpha = (1 - CONFIDENCE) / 2 * 100
    for x, mean, lower, upper, num_runs in rows:
        values = [np.interp(x, xs, ys) for xs, ys in curves if xs[0] <= x <= xs[-1]]
        assert num_runs == len(values)
        assert mean == np.mean(values)
        if len(values) == 1 or not np.isfinite(values).all():
            assert lower == upper == mean
            continue
        draws = np.random.default_rng(BOOTSTRAP_SEED).integers(
            0, len(values), (num_bootstrap, len(values))
        )
        means = np.array(values)[draws].mean(axis=1)
        # To the bit: the band of these values alone, as each x's was drawn.
        assert [lower, upper] == np.percentile(means, [alpha, 100 - alpha]).tolist()
        assert lower < upper


def test_aggregate_of_more_x_than_a_block_of_bands_and_many_runs_bands_each_x_alone():
    from alf_lite.bin.plot import BOOTSTRAP_BLOCK_ROWS, BOOTSTRAP_SEED, CONFIDENCE, aggregate

    # More points than one block of bands (a long run's rows), and enough runs that the ends
    # depend on the draws (of 2 or 3 runs they are mostly the least and the largest value).
    num_points, num_runs, num_bootstrap = BOOTSTRAP_BLOCK_ROWS + 44, 10, 200
    xs = np.arange(num_points, dtype=np.float64)
    rng = np.random.default_rng(3)
    curves = [(xs, rng.normal(size=num_points)) for _ in range(num_runs)]
    rows = aggregate(curves, 'ci', num_bootstrap)
    assert len(rows) == num_points
    draws = np.random.default_rng(BOOTSTRAP_SEED).integers(0, num_runs, (num_bootstrap, num_runs))
    alpha = (1 - CONFIDENCE) / 2 * 100
    for (x, mean, lower, upper, n), values in zip(rows, np.stack([ys for _, ys in curves], 1)):
        assert n == num_runs and mean == np.mean(values), x
        # To the bit: the band of these values alone.
        ends = np.percentile(values[draws].mean(axis=1), [alpha, 100 - alpha]).tolist()
        assert [lower, upper] == ends, x


def test_aggregate_of_runs_at_different_x_has_as_many_x_as_the_longest_run(monkeypatch):
    from alf_lite.bin import plot

    # Runs of a group by wall time: each at its own x. Their union (all their points) would
    # give a curve as long as the runs times their points, and bands as many times costly.
    monkeypatch.setattr(plot, 'MAX_CURVE_POINTS', 10, raising=False)
    num_points, num_runs = 50, 20
    rng = np.random.default_rng(4)
    curves = [
        (np.sort(rng.uniform(0, 100, num_points)), rng.normal(size=num_points))
        for _ in range(num_runs)
    ]
    union = np.unique(np.concatenate([xs for xs, _ in curves]))
    rows = plot.aggregate(curves, 'std', 100)
    x = [x for x, *_ in rows]
    assert len(x) == num_points and x[0] == union[0] and x[-1] == union[-1]
    assert set(x) <= set(union) and x == sorted(x)
    for x, mean, _, _, n in rows:
        values = [np.interp(x, xs, ys) for xs, ys in curves if xs[0] <= x <= xs[-1]]
        assert n == len(values) and mean == pytest.approx(np.mean(values))
    # Runs at the same x keep every x.
    shared = [(curves[0][0], ys) for _, ys in curves]
    assert [x for x, *_ in plot.aggregate(shared, 'std', 100)] == curves[0][0].tolist()


def test_run_ending_early_is_named_and_the_table_says_so(grid, tmp_path):
    result = run_plot([str(grid), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    early = grid / f'lr={LR_B},seed=3'
    assert f'runs ending before its last env_steps 200: {early} (at 100);' in result.stderr
    b = f'actor/Adam.lr={LR_B}'
    (row,) = [line for line in result.stdout.splitlines() if line.startswith(b)]
    assert re.match(rf'{re.escape(b)} +4 \(1 ending at 100\) +7\.00 ', row), row
    # The final score takes each run's own last points, which the table's title says.
    assert 'a run that ends early gives its own last points' in result.stdout
    assert 'ending before' not in run_plot([str(grid / f'lr={LR_A},seed=0')], tmp_path).stderr


def test_config_grouping_ignores_the_bindings_a_resume_may_change(tmp_path):
    # A sweep resumed with another --max_workers: torch_num_threads differs between seeds.
    runs = tmp_path / 'runs'
    for lr in (LR_A, LR_B):
        for seed, threads in ((0, 2), (1, 1)):
            extra = f'TrainerConfig.torch_num_threads = {threads}\n'
            # The run length through a macro that only it uses, changed at a resume.
            extra += f'STEPS = {200 + 100 * seed}\nTrainerConfig.num_env_steps = %STEPS\n'
            write_run(runs / f'lr={lr},seed={seed}', lr, seed, RUNS_A[seed], extra)
    result = run_plot([str(runs), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    table = final_table(result.stdout)
    assert set(table) == {f'actor/Adam.lr={lr}' for lr in (LR_A, LR_B)}, result.stdout
    assert all(n == 2 for n, *_ in table.values())
    # Named explicitly, such a parameter still groups.
    by_threads = run_plot([str(runs), '--group_by', 'TrainerConfig.torch_num_threads'], tmp_path)
    assert_ok(by_threads)
    assert set(final_table(by_threads.stdout)) == {
        f'TrainerConfig.torch_num_threads={n}' for n in (1, 2)
    }


def test_a_run_whose_length_was_set_over_its_macro_at_a_resume_keeps_its_setting(tmp_path):
    from alf_lite.bin.plot import group_runs, same_seed_runs

    runs = tmp_path / 'runs'
    write_run(
        runs / 'seed=0', LR_A, 0, RUNS_A[0], 'STEPS = 200\nTrainerConfig.num_env_steps = %STEPS\n'
    )
    # Resumed with --gin_param TrainerConfig.num_env_steps=300: STEPS is left unused.
    write_run(
        runs / 'seed=1', LR_A, 1, RUNS_A[1], 'STEPS = 200\nTrainerConfig.num_env_steps = 300\n'
    )
    result = run_plot([str(runs), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert set(final_table(result.stdout)) == {'all runs'}, result.stdout
    assert final_table(result.stdout)['all runs'][0] == 2
    # Of one seed, they are one run twice.
    again = runs / 'seed=0 again'
    write_run(again, LR_A, 0, RUNS_A[0], 'STEPS = 200\nTrainerConfig.num_env_steps = 300\n')
    both = [str(runs / 'seed=0'), str(again)]
    assert group_runs(both, 'config') == [('all runs', both)]
    assert same_seed_runs(both) == [tuple(both)]


def test_config_grouping_compares_values_as_gin_reads_them_not_by_their_layout(tmp_path):
    from alf_lite.bin.plot import group_runs, same_seed_runs

    runs = tmp_path / 'runs'
    gins = 'CriticNetwork.hidden_layers = (256, 256)\nSacAlgorithm.gamma = 0.99\n'
    write_run(runs / 'seed=0', LR_A, 0, RUNS_A[0], gins)
    # A hand-edited config.gin: the tuple over several lines, a binding indented.
    edited = 'CriticNetwork.hidden_layers = (\n    256,\n    256,\n)\n  SacAlgorithm.gamma = 0.99\n'
    write_run(runs / 'seed=1', LR_A, 1, RUNS_A[1], edited)
    result = run_plot([str(runs), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert final_table(result.stdout)['all runs'][0] == 2, result.stdout
    # Another network is another group, named by its value; of one seed, one run twice.
    write_run(runs / 'narrow', LR_A, 0, RUNS_A[0], edited.replace('256,\n)', '128,\n)'))
    write_run(runs / 'seed=0 again', LR_A, 0, RUNS_A[0], edited)
    both = [str(runs / 'seed=0'), str(runs / 'seed=0 again')]
    assert same_seed_runs(both) == [tuple(both)]
    groups = group_runs([*both, str(runs / 'narrow')], 'config')
    assert groups == [
        ('CriticNetwork.hidden_layers=(256, 256)', both),
        ('CriticNetwork.hidden_layers=(256, 128,)', [str(runs / 'narrow')]),
    ]


def test_a_run_whose_experiment_changed_at_a_resume_is_named_in_a_warning(tmp_path):
    runs = tmp_path / 'runs'
    for seed in (0, 1):
        write_run(runs / f'seed={seed}', LR_B, seed, RUNS_A[seed])
    # Seed 1 trained at LR_A until step 100, then was resumed with LR_B.
    changed = runs / 'seed=1'
    (changed / 'config-until-100.gin').write_text(
        (changed / 'config.gin').read_text().replace(str(LR_B), str(LR_A))
    )
    result = run_plot([str(runs), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert final_table(result.stdout)['all runs'][0] == 2
    assert (
        f'{changed} changed its experiment at a resume, at env step(s) 100 '
        '(config-until-<step>.gin holds'
    ) in result.stderr
    assert str(runs / 'seed=0') not in result.stderr
    assert 'it is grouped by its config.gin, which holds the last setting only' in result.stderr
    # Grouped by path, it is not grouped by its config.gin.
    by_path = run_plot([str(runs), '--group_by', 'none', '--out', 'curves.png'], tmp_path)
    assert_ok(by_path)
    assert f'{changed} changed its experiment at a resume, at env step(s) 100' in by_path.stderr
    assert 'grouped by its config.gin' not in by_path.stderr, by_path.stderr


def test_a_run_moved_aside_or_named_twice_is_not_counted_twice(grid, tmp_path):
    runs = [grid / f'lr={LR_A},seed={s}' for s in RUNS_A]
    # train --start_over moved an older seed 0 aside.
    aside = grid / f'lr={LR_A},seed=0.old-20240101-120000'
    shutil.copytree(runs[0], aside)
    result = run_plot([str(grid), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert final_table(result.stdout)[f'actor/Adam.lr={LR_A}'][0] == 3
    # The same directory given twice, by two paths, is one run.
    result = run_plot([str(runs[0]), f'runs/{runs[0].name}'], tmp_path)
    assert_ok(result)
    assert final_table(result.stdout)['all runs'][0] == 1
    # Given by name (runs/grid/* names it), it is counted, with a warning.
    result = run_plot([*map(str, runs), str(aside), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert final_table(result.stdout)['all runs'][0] == 4
    assert f'{runs[0]} and {aside} have the same TrainerConfig.random_seed (0)' in result.stderr
    # A run that leaves the seed at its default is seed 0 too.
    config = aside / 'config.gin'
    config.write_text(config.read_text().replace('TrainerConfig.random_seed = 0\n', ''))
    assert 'random_seed' not in config.read_text()
    result = run_plot([*map(str, runs), str(aside), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert f'{runs[0]} and {aside} have the same TrainerConfig.random_seed (0)' in result.stderr
    # Two runs alone are as likely one run twice as two seeds.
    result = run_plot([str(runs[0]), str(aside), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert f'{runs[0]} and {aside} have the same TrainerConfig.random_seed (0)' in result.stderr


def test_a_folder_of_links_to_runs_is_searched_each_run_once(grid, tmp_path):
    links = tmp_path / 'links'
    links.mkdir()
    for seed in RUNS_A:
        (links / f'a{seed}').symlink_to(grid / f'lr={LR_A},seed={seed}')
    (links / 'all').symlink_to(grid)  # the same runs again, through the folder
    (links / 'loop').symlink_to(links)  # a link back up is not walked again
    result = run_plot([str(links), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    table = final_table(result.stdout)
    assert table[f'actor/Adam.lr={LR_A}'][0] == len(RUNS_A)
    assert table[f'actor/Adam.lr={LR_B}'][0] == len(RUNS_B)


def test_a_folder_with_a_train_folder_of_other_things_is_searched_not_taken_for_a_run(
    grid, tmp_path
):
    # A project folder whose train/ and eval/ hold data, not TensorBoard events.
    project = tmp_path / 'project'
    (project / 'train').mkdir(parents=True)
    (project / 'train' / 'episodes.txt').write_text('data')
    (project / 'eval').mkdir()
    shutil.move(str(grid), str(project / 'runs'))
    result = run_plot([str(project), '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    table = final_table(result.stdout)
    assert table[f'actor/Adam.lr={LR_A}'][0] == len(RUNS_A)
    assert table[f'actor/Adam.lr={LR_B}'][0] == len(RUNS_B)
    # Alone, it is no run.
    result = run_plot([str(project / 'train'), str(project / 'eval'), '--out', 'x.png'], tmp_path)
    assert result.returncode == 2, result.stderr
    assert f'skipping {project / "train"}: no run there\n' in result.stderr
    assert 'error: no run (a directory with progress.csv, config.gin or TensorBoard event' in (
        result.stderr
    )
    # A folder of a run given for it: the run is named, as given (relative here).
    run = next(project.glob('runs/*/'))
    result = run_plot([os.path.relpath(run / 'eval', tmp_path), '--out', 'x.png'], tmp_path)
    assert result.returncode == 2, result.stderr
    relative = os.path.relpath(run, tmp_path)
    assert (
        f'skipping {relative}/eval: no run there (it lies inside the run {relative}: give that)'
    ) in result.stderr.splitlines()


def test_group_by_none_names_runs_by_the_shortest_distinct_path(tmp_path):
    for sweep in ('A', 'B'):
        for seed in (0, 1):
            write_run(tmp_path / sweep / f's{seed}', LR_A, seed, RUNS_A[seed])
    write_run(tmp_path / 'B' / 'only', LR_A, 2, RUNS_A[2])
    result = run_plot(['A', 'B', '--group_by', 'none', '--out', 'curves.png'], tmp_path)
    assert_ok(result)
    assert set(final_table(result.stdout)) == {'A/s0', 'A/s1', 'B/s0', 'B/s1', 'only'}


def test_wall_time_is_elapsed_seconds_interpolated_where_runs_differ(tmp_path):
    # Two seeds started a day apart, with points at different elapsed times.
    day = 86400
    write_progress(
        tmp_path / 'runs' / 'r0', [(0, 1e9, 0), (100, 1e9 + 10, 10), (200, 1e9 + 20, 20)]
    )
    write_progress(
        tmp_path / 'runs' / 'r1',
        [(0, 1e9 + day, ''), (50, 1e9 + day + 5, 5), (100, 1e9 + day + 15, 25)],
    )
    for seed in (0, 1):
        (tmp_path / 'runs' / f'r{seed}' / 'config.gin').write_text(
            f'TrainerConfig.random_seed = {seed}\n'
        )
    args = [str(tmp_path / 'runs'), '--x', 'wall_time', '--y', 'train/actor_loss', '--band', 'std']
    assert_ok(run_plot([*args, '--group_by', 'none', '--out', 'each.png'], tmp_path))
    # Seconds since each run's first row (r1's has no value).
    assert read_wall_time_curves(tmp_path / 'each.csv') == {
        ('r0', 0): (0, 1),
        ('r0', 10): (10, 1),
        ('r0', 20): (20, 1),
        ('r1', 5): (5, 1),
        ('r1', 15): (25, 1),
    }
    assert_ok(run_plot([*args, '--out', 'pooled.png'], tmp_path))
    # Each run counts within its own span of x, interpolated between its points where it has
    # none: r0 at 5 and 15 gives 5 and 15, r1 at 10 gives (5 + 25) / 2.
    assert read_wall_time_curves(tmp_path / 'pooled.csv') == {
        ('all runs', 0): (0, 1),
        ('all runs', 5): (5, 2),
        ('all runs', 10): (12.5, 2),
        ('all runs', 15): (20, 2),
        ('all runs', 20): (20, 1),
    }


def test_wall_time_of_a_run_read_from_its_events_counts_from_its_first_row_too(tmp_path):
    from alf_lite.summary import Summary

    # The same run twice, one without its progress.csv: plot reads that one's events.
    for name in ('csv', 'events'):
        summary = Summary(str(tmp_path / 'runs' / name))
        summary.write(0, 0, 1e9, {'eval/AverageReturn': -10.0})
        summary.write(100, 10, 1e9 + 5, {'train/critic_loss': 3.0})
        summary.write(200, 20, 1e9 + 10, {'train/critic_loss': 2.0})
        summary.write(300, 30, 1e9 + 15, {'eval/AverageReturn': -5.0})
        summary.close()
    (tmp_path / 'runs' / 'events' / 'progress.csv').unlink()
    args = [str(tmp_path / 'runs'), '--x', 'wall_time', '--y', 'train/critic_loss']
    assert_ok(run_plot([*args, '--group_by', 'none', '--out', 'each.png'], tmp_path))
    # Seconds since the evaluation's row at 0, not since the critic loss's first point.
    assert read_wall_time_curves(tmp_path / 'each.csv') == {
        (name, t): (value, 1) for name in ('csv', 'events') for t, value in ((5, 3), (10, 2))
    }


def read_wall_time_curves(path):
    """``{(group, wall_time): (mean, num_runs)}`` of a curves CSV."""
    with open(path, newline='') as f:
        return {
            (r['group'], float(r['wall_time'])): (float(r['mean']), int(r['num_runs']))
            for r in csv.DictReader(f)
        }


def write_runs_of_values(root, lr, finals):
    """One run per value of ``finals``, each evaluated once at step 0 with that return."""
    for seed, value in enumerate(finals):
        write_run(root / f'lr={lr},seed={seed}', lr, seed, [value])


def test_a_groups_band_does_not_depend_on_the_other_groups_plotted(tmp_path):
    write_runs_of_values(tmp_path / 'a', LR_A, [0.13, 1.7, 3.1, 7.9, 20.3, 4.4])
    write_runs_of_values(tmp_path / 'b', LR_B, [1.5, 2.25, 9.0, 0.5])
    by_lr = ['--group_by', 'actor/Adam.lr']
    alone = run_plot([str(tmp_path / 'a'), *by_lr, '--out', 'a.png'], tmp_path)
    # The other group first: its bands were drawn first from a generator both shared.
    both = run_plot([str(tmp_path / 'b'), str(tmp_path / 'a'), *by_lr, '--out', 'ab.png'], tmp_path)
    assert_ok(alone)
    assert_ok(both)
    a = f'actor/Adam.lr={LR_A}'
    assert read_curves(tmp_path / 'a.csv')[a, 0] == read_curves(tmp_path / 'ab.csv')[a, 0]
    assert final_table(alone.stdout)[a] == final_table(both.stdout)[a]


def test_a_seed_given_through_a_macro_is_a_seed_not_a_setting(tmp_path):
    from alf_lite.bin.plot import group_runs, same_seed_runs, seed_of

    runs = [tmp_path / f'seed={seed}' for seed in range(3)]
    for seed, run in enumerate(runs):
        write_run(run, LR_A, seed, [1.0])
        config = run / 'config.gin'
        config.write_text(
            config.read_text().replace(
                f'TrainerConfig.random_seed = {seed}\n',
                f'SEED = {seed}\nTrainerConfig.random_seed = %SEED\n',
            )
        )
    direct = tmp_path / 'direct'
    write_run(direct, LR_A, 1, [1.0])
    other = tmp_path / 'other_lr'
    write_run(other, LR_B, 1, [1.0])
    runs = list(map(str, runs))
    assert [seed_of(run) for run in runs] == ['0', '1', '2']
    groups = group_runs([*runs, str(direct), str(other)], 'config')
    assert groups == [
        (f'actor/Adam.lr={LR_A}', [str(direct), *runs]),
        (f'actor/Adam.lr={LR_B}', [str(other)]),
    ]
    # Seed 1 through the macro and seed 1 bound directly: one run twice?
    assert same_seed_runs([*runs, str(direct), str(other)]) == [(runs[1], str(direct))]
    # A macro that something else uses too is part of the setting, shown through its user.
    for run in runs:
        with open(f'{run}/config.gin', 'a') as f:
            f.write('TrainerConfig.replay_buffer_length = %SEED\n')
    assert [label for label, _ in group_runs(runs, 'config')] == [
        f'TrainerConfig.replay_buffer_length={seed}' for seed in range(3)
    ]


def test_a_macro_that_is_one_runs_seed_stays_a_setting_of_the_runs_that_use_it_otherwise(
    tmp_path,
):
    from alf_lite.bin.plot import group_runs

    seeded = tmp_path / 'seeded'
    write_run(seeded, LR_A, 0, [1.0])
    config = seeded / 'config.gin'
    config.write_text(
        config.read_text().replace(
            'TrainerConfig.random_seed = 0\n', 'N = 5\nTrainerConfig.random_seed = %N\n'
        )
    )
    sized = [tmp_path / f'size={size}' for size in (1000, 2000)]
    for size, run in zip((1000, 2000), sized):
        write_run(run, LR_A, 0, [1.0])
        config = run / 'config.gin'
        config.write_text(
            config.read_text().replace(
                'TrainerConfig.replay_buffer_length = \\\n    1000\n',
                f'N = {size}\nTrainerConfig.replay_buffer_length = %N\n',
            )
        )
    sized = list(map(str, sized))
    # Runs of two buffer sizes are two groups, alone or beside a run whose seed is N, which
    # is one more seed of the buffer size it binds.
    buffer = 'TrainerConfig.replay_buffer_length'
    alone = group_runs(sized, 'config')
    assert alone == [(f'{buffer}=1000', [sized[0]]), (f'{buffer}=2000', [sized[1]])]
    groups = group_runs([str(seeded), *sized], 'config')
    assert groups == [(f'{buffer}=1000', [str(seeded), sized[0]]), (f'{buffer}=2000', [sized[1]])]
    # Beside a run where N is a setting of its own (bound, used nowhere), the seeded run
    # binds N, as its seed: not the default of a name it leaves unbound.
    unused = tmp_path / 'unused'
    write_run(unused, LR_A, 0, [1.0], extra='N = 1000\n')
    groups = group_runs([str(seeded), str(unused)], 'config')
    assert [label for label, _ in groups] == ['N=(seed)', 'N=1000']


@pytest.mark.timeout(10)
def test_a_seed_given_through_macros_that_name_each_other_is_read_to_an_end(tmp_path):
    from alf_lite.bin.plot import same_seed_runs, seed_of

    runs = [tmp_path / 'cycle', tmp_path / 'again']
    for run in runs:
        write_run(run, LR_A, 0, [1.0])
        config = run / 'config.gin'
        config.write_text(
            config.read_text().replace(
                'TrainerConfig.random_seed = 0\n',
                'A = %B\nB = %A\nTrainerConfig.random_seed = %A\n',
            )
        )
    # A config.gin from elsewhere whose macros name each other: its seed is read to an end.
    assert seed_of(str(runs[0])) in ('%A', '%B')
    assert same_seed_runs(list(map(str, runs))) == [(str(runs[0]), str(runs[1]))]


def test_groups_named_by_many_bindings_get_a_note_on_naming_them_shorter(tmp_path, grid):
    # Runs of two algorithms differ in every binding of either: their group names list
    # them all, dozens in real runs.
    runs = tmp_path / 'algorithms'
    sac = ''.join(f'SacAlgorithm.p{i} = {i}\n' for i in range(3))
    ddpg = ''.join(f'DdpgAlgorithm.q{i} = {i}\n' for i in range(3))
    for seed in 0, 1:
        write_run(
            runs / f'sac{seed}',
            LR_A,
            seed,
            [1, 2, 3],
            'TrainerConfig.algorithm_ctor = @SacAlgorithm\n' + sac,
        )
        write_run(
            runs / f'ddpg{seed}',
            LR_A,
            seed,
            [1, 2, 3],
            'TrainerConfig.algorithm_ctor = @DdpgAlgorithm\n' + ddpg,
        )
    result = run_plot([str(runs), '--group_by', 'config', '--out', 'a.png'], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        'note: the group names list the 7 bindings the groups differ in; name the groups by '
        'those that matter with --group_by PARAMETER[,PARAMETER] (e.g. --group_by '
        'TrainerConfig.algorithm_ctor), or rename one with --label NAME=GROUP'
    ) in result.stderr
    result = run_plot(
        [str(runs), '--group_by', 'TrainerConfig.algorithm_ctor', '--out', 'b.png'], tmp_path
    )
    assert result.returncode == 0 and 'note:' not in result.stderr, result.stderr
    assert {group for group, _ in read_curves(tmp_path / 'b.csv')} == {
        'TrainerConfig.algorithm_ctor=@SacAlgorithm',
        'TrainerConfig.algorithm_ctor=@DdpgAlgorithm',
    }
    # Groups named by one binding: no note.
    result = run_plot([str(grid), '--group_by', 'config', '--out', 'c.png'], tmp_path)
    assert result.returncode == 0 and 'note:' not in result.stderr, result.stderr
