"""alf_lite/runs.py: what the experiment tools read from a run's files and logs."""

import copy
import datetime
import fcntl
import os
import re
import struct
import subprocess
import sys
import tempfile
import tracemalloc
import types
from pathlib import Path

import gin
import pytest

import alf_lite.all_configurables  # noqa: F401
from alf_lite import run_dir as run_dir_module
from alf_lite.algorithms.noise import GaussianNoise
from alf_lite.config import parse_config
from alf_lite.run_dir import (
    MAX_CONFIG_BYTES,
    MOVED_ASIDE,
    RunDir,
    RunDirInUseError,
    RunDirLock,
    changed_bindings,
    enclosing_run,
    experiment_difference,
    inside_run_refusal,
    keep_superseded_config,
    moved_aside_path,
    read_config_text,
    run_dir_in_use,
)
from alf_lite.runs import (
    MAX_LINE_CHARS,
    complete_rows,
    config_bindings,
    final_value,
    first_wall_time,
    log_error_line,
    read_scalar,
    read_scalar_if_any,
    run_columns,
    subprocess_env,
    train_in_subprocess,
)
from alf_lite.summary import Summary, last_env_steps
from cli_helpers import RUN_TIMEOUT_S, ClockSetBack

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_error_line_is_the_exception_not_a_traceback_source_line(tmp_path):
    log = tmp_path / 'run.log'
    log.write_text('=== an earlier attempt\nValueError: old\n')
    offset = len(log.read_bytes())
    with open(log, 'a') as f:
        f.write(
            'Traceback (most recent call last):\n'
            '  File "trainer.py", line 3, in train\n'
            "    raise FloatingPointError(f'loss: {value}')\n"
            'alf_lite.algorithms.off_policy_algorithm.NonFiniteLossError: the critic loss '
            'is nan\n'
            'progress 10%\rprogress 20%\n'
        )
    assert log_error_line(str(log), offset) == (
        'alf_lite.algorithms.off_policy_algorithm.NonFiniteLossError: the critic loss is nan'
    )
    assert log_error_line(str(log)) == log_error_line(str(log), offset)


def test_error_line_of_a_usage_error_an_interrupt_or_no_error(tmp_path):
    cases = {
        'usage: train\nerror: no --root_dir\n': 'error: no --root_dir',
        'env steps 100\nKeyboardInterrupt\n': 'KeyboardInterrupt',
        'Traceback (most recent call last):\nKeyboardInterrupt\nenvs closed\n': 'KeyboardInterrupt',
        'env steps 100\nenv steps 200\n': 'env steps 200',
        '': 'no output',
    }
    for i, (text, line) in enumerate(cases.items()):
        log = tmp_path / f'{i}.log'
        log.write_text(text)
        assert log_error_line(str(log)) == line


def test_error_line_is_found_in_the_logs_tail_alone(tmp_path, monkeypatch):
    import alf_lite.runs

    log = tmp_path / 'run.log'
    with open(log, 'w') as f:
        f.write('ValueError: an early error\n' + 'env steps 100\n' * 4 * 2**20)
        f.write('error: the last\n')
    # A log of 58 MB: its last megabyte is read, not the whole.
    tracemalloc.start()
    try:
        assert log_error_line(str(log)) == 'error: the last'
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * alf_lite.runs.LOG_TAIL_BYTES, peak
    # A tail that starts within a line leaves that piece out: 'ValueError: an' would
    # read as the error.
    log.write_text('x ValueError: an early error\nenv steps 100\n')
    monkeypatch.setattr(alf_lite.runs, 'LOG_TAIL_BYTES', len('ValueError: an early error\n') + 14)
    assert log_error_line(str(log)) == 'env steps 100'
    assert log_error_line(str(log), offset=len('x ')) == 'ValueError: an early error'


def test_scalar_of_a_run_without_it_is_empty(tmp_path):
    (tmp_path / 'progress.csv').write_text('env_steps,eval/AverageReturn\n0,-5\n1000,-3\n')
    steps, values = read_scalar_if_any(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 1000] and values.tolist() == [-5, -3]
    for y in ('train/replay_buffer_bytes', 'eval/AverageEpisodeLength'):
        assert [len(a) for a in read_scalar_if_any(str(tmp_path), y)] == [0, 0]
    assert [len(a) for a in read_scalar_if_any(str(tmp_path / 'missing'), 'eval/x')] == [0, 0]


def test_a_row_with_more_fields_than_columns_is_left_out(tmp_path):
    # Edited by hand, or two rows run together by a writer that lost a line break.
    (tmp_path / 'progress.csv').write_text(
        'env_steps,num_updates,eval/AverageReturn\n0,0,-500\n1000,2,-300.5,7\n2000,3,-100\n'
    )
    with open(tmp_path / 'progress.csv', newline='') as f:
        _, rows = complete_rows(f)
    assert [r['env_steps'] for r in rows] == ['0', '2000']
    steps, _ = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 2000]


def test_a_row_of_no_step_a_blank_line_or_an_empty_cell_is_no_point(tmp_path):
    # Edited by hand: a row whose env_steps is no number (train counts no step of it), a
    # blank line, a row without all its fields; empty cells where a scalar has no value yet.
    (tmp_path / 'progress.csv').write_text(
        'env_steps,num_updates,eval/AverageReturn\n'
        '0,0,-500\nnone,1,-400\n\n1000,2\n,3,-350\n1500,4,\n2000,5,-100\n'
    )
    steps, values = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 2000] and values.tolist() == [-500, -100]
    # Along another x, an empty env_steps is no step missing; one that is no number still is.
    steps, values = read_scalar(str(tmp_path), 'eval/AverageReturn', 'num_updates')
    assert steps.tolist() == [0, 3, 5] and values.tolist() == [-500, -350, -100]


def test_a_column_named_twice_is_read_at_its_last_place(tmp_path):
    # As csv.DictReader reads it, the way plot read progress.csv before.
    (tmp_path / 'progress.csv').write_text('env_steps,eval/x,eval/x\n0,1,2\n100,3,4\n')
    steps, values = read_scalar(str(tmp_path), 'eval/x')
    assert steps.tolist() == [0, 100] and values.tolist() == [2, 4]


def test_a_value_that_is_no_number_is_named_with_its_line(tmp_path):
    path = tmp_path / 'progress.csv'
    path.write_text('env_steps,eval/AverageReturn\n0,-5\n100,-4\n200,high\n')
    message = re.escape(f"{path}, line 4: could not convert string to float: 'high'")
    with pytest.raises(ValueError, match=message):
        read_scalar(str(tmp_path), 'eval/AverageReturn')


def test_a_progress_csv_with_a_byte_order_mark_is_read_by_its_columns(tmp_path):
    # Saved by a spreadsheet as "CSV UTF-8".
    (tmp_path / 'progress.csv').write_bytes(
        'env_steps,eval/AverageReturn\r\n0,-500\r\n1000,-300.5\r\n'.encode('utf-8-sig')
    )
    assert run_columns(str(tmp_path)) == ['env_steps', 'eval/AverageReturn']
    steps, values = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 1000] and values.tolist() == [-500, -300.5]


def test_a_progress_csv_with_bare_carriage_returns_is_read_by_its_columns(tmp_path):
    # Saved by an editor that ends lines with a bare CR instead of train's CRLF.
    (tmp_path / 'progress.csv').write_bytes(b'env_steps,eval/AverageReturn\r0,-500\r1000,-300.5\r')
    assert run_columns(str(tmp_path)) == ['env_steps', 'eval/AverageReturn']
    steps, values = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 1000] and values.tolist() == [-500, -300.5]


@pytest.mark.parametrize(
    'last_line',
    ['2000,3,-14', '2000,3', '2000,'],
    ids=['inside_its_last_field', 'without_its_last_field', 'inside_its_second_field'],
)
def test_a_last_row_cut_short_is_not_read_as_a_point(tmp_path, last_line):
    # A kill or a full disk mid-append: -143.25 written as far as -14.
    (tmp_path / 'progress.csv').write_text(
        'env_steps,num_updates,eval/AverageReturn\n0,0,-500\n1000,2,-300.5\n' + last_line
    )
    steps, values = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 1000] and values.tolist() == [-500, -300.5]


def test_a_line_longer_than_any_row_is_refused_naming_it_without_reading_it_whole(tmp_path):
    # A crafted progress.csv, one line of gigabytes: only a bounded piece of it is read.
    path = tmp_path / 'progress.csv'
    with open(path, 'w') as f:
        f.write('env_steps,eval/AverageReturn\n0,-5\n')
        f.truncate(32 * MAX_LINE_CHARS)
    named = f'{path}, line 3: over {MAX_LINE_CHARS} characters long'
    message = re.escape(named)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=message) as error:
            read_scalar(str(tmp_path), 'eval/AverageReturn')
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MAX_LINE_CHARS, peak
    assert str(error.value).startswith(named), error.value  # its file and line, once
    with open(path, newline='') as f, pytest.raises(ValueError, match=message):
        complete_rows(f)
    assert [len(a) for a in read_scalar_if_any(str(tmp_path), 'eval/AverageReturn')] == [0, 0]
    with open(path, 'w') as f:  # the header too
        f.truncate(32 * MAX_LINE_CHARS)
    tracemalloc.start()
    try:
        assert run_columns(str(tmp_path)) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MAX_LINE_CHARS, peak


def test_a_line_csv_cannot_read_or_a_file_that_is_not_text_is_named_with_its_file(tmp_path):
    path = tmp_path / 'progress.csv'
    # The rows end as train writes them: the csv reader counts them as lines too.
    path.write_text('env_steps,eval/AverageReturn\r\n0,-5\r\n100,"' + 'x' * 200_000 + '"\n')
    message = re.escape(f'{path}, line 3: field larger than field limit')
    with open(path, newline='') as f, pytest.raises(ValueError, match=message):
        complete_rows(f)
    with pytest.raises(ValueError, match=message):
        read_scalar(str(tmp_path), 'eval/AverageReturn')
    path.write_bytes(b'env_steps,eval/AverageReturn\n0,\xff\n')
    message = re.escape(f'{path} is not text: utf-8 cannot decode its byte 0xff')
    with open(path, newline='') as f, pytest.raises(ValueError, match=message):
        complete_rows(f)
    with pytest.raises(ValueError, match=message):
        read_scalar(str(tmp_path), 'eval/AverageReturn')


# --- the root_dir's layout, its lock and which configs are one experiment (alf_lite.run_dir) ---

# The bindings the README lets a resume change: run length, reporting, where and how it computes.
README_RESUME_SAFE = {
    'TrainerConfig.num_env_steps': ('1000', '2000'),
    'TrainerConfig.summary_interval': ('100', '500'),
    'TrainerConfig.eval_interval': ('100', '500'),
    'TrainerConfig.checkpoint_interval': ('100', '500'),
    'TrainerConfig.max_checkpoints_to_keep': ('2', 'None'),
    'TrainerConfig.checkpoint_replay_buffer': ('False', 'True'),
    'TrainerConfig.num_eval_episodes': ('1', '10'),
    'TrainerConfig.num_eval_environments': ('2', 'None'),
    'TrainerConfig.torch_num_threads': ('1', '2'),
    'TrainerConfig.device': ("'cuda'", "'cpu'"),
    'TrainerConfig.cuda_graph': ('True', 'False'),
    'TrainerConfig.compile': ('True', 'False'),
    'TrainerConfig.defer_non_finite_checks': ('True', 'False'),
    'ReplayBuffer.device': ("'cuda'", "'cpu'"),
    'create_environment.step_timeout': ('60.0', '600.0'),
}
EXPERIMENT = (
    "create_environment.env_name = 'Pendulum-v1'\n"
    'SacAlgorithm.target_update_tau = 0.005\n'
    'TrainerConfig.random_seed = 0\n'
)


def config_text(*bindings):
    """A config.gin as gin writes it: a comment block per configurable, then its bindings."""
    lines = []
    for binding in (*EXPERIMENT.splitlines(), *bindings):
        name = binding.split('.')[0]
        lines += [f'# Parameters for {name}:', '# ' + '=' * 78, binding, '']
    return '\n'.join(lines)


def saved_run(tmp_path, config):
    root_dir = tmp_path / 'run'
    root_dir.mkdir(parents=True)
    (root_dir / 'config.gin').write_text(config)
    return str(root_dir)


@pytest.mark.parametrize('name', sorted(README_RESUME_SAFE))
def test_configs_differing_in_what_a_resume_may_change_are_one_experiment(tmp_path, name):
    old, new = README_RESUME_SAFE[name]
    trained_with = config_text(f'{name} = {old}')
    root_dir = saved_run(tmp_path, trained_with)
    for given in (config_text(f'{name} = {new}'), config_text()):
        assert experiment_difference(root_dir, given) is None, given
        assert changed_bindings(trained_with, given) == []


def test_a_reference_spelt_with_its_module_path_names_the_same_configurable(tmp_path):
    short = config_text(
        'SacAlgorithm.critic_optimizer = @critic/Adam',
        'Td3Algorithm.target_policy_noise = @GaussianNoise()',
    )
    long = config_text(
        'SacAlgorithm.critic_optimizer = @critic/torch.optim.Adam',
        'Td3Algorithm.target_policy_noise = @alf_lite.algorithms.noise.GaussianNoise()',
    )
    assert changed_bindings(short, long) == []
    assert experiment_difference(saved_run(tmp_path, short), long) is None
    # Another configurable, another scope or a call where there was none are changes.
    for changed in ('@critic/AdamW', '@actor/torch.optim.Adam', '@critic/Adam()'):
        other = config_text(
            f'SacAlgorithm.critic_optimizer = {changed}',
            'Td3Algorithm.target_policy_noise = @GaussianNoise()',
        )
        assert changed_bindings(short, other) == [
            f'SacAlgorithm.critic_optimizer = @critic/Adam -> '
            f'SacAlgorithm.critic_optimizer = {changed}'
        ]


def test_a_macro_only_resume_safe_bindings_use_may_change_too(tmp_path):
    run_length = 'TrainerConfig.num_env_steps = %STEPS'
    trained_with = config_text('STEPS = 1000', run_length)
    root_dir = saved_run(tmp_path, trained_with)
    longer = config_text('STEPS = 2000', run_length)
    assert experiment_difference(root_dir, longer) is None
    assert changed_bindings(trained_with, longer) == []
    assert changed_bindings(trained_with, longer, resume_safe=True) == [
        'STEPS = 1000 -> STEPS = 2000'
    ]
    # Through another macro that only the run length uses, too.
    chained = config_text('STEPS = %BASE', 'BASE = 2000', run_length)
    assert experiment_difference(root_dir, chained) is None
    # A macro that also sets what the run learns is part of the experiment.
    shared = 'ReplayBuffer.capacity = %STEPS'
    root_dir = saved_run(tmp_path / 'shared', config_text('STEPS = 1000', run_length, shared))
    difference = experiment_difference(root_dir, config_text('STEPS = 2000', run_length, shared))
    assert "in 1 binding(s), e.g. ['STEPS = 1000 -> STEPS = 2000']" in difference
    # So is one that nothing uses.
    root_dir = saved_run(tmp_path / 'unused', config_text('STEPS = 1000'))
    assert 'in 1 binding(s)' in experiment_difference(root_dir, config_text('STEPS = 2000'))


def test_a_macro_named_inside_a_string_is_no_use_of_it(tmp_path):
    # gin reads '%STEPS' in a string literal as text: STEPS sets the run length alone.
    run_length = 'TrainerConfig.num_env_steps = %STEPS'
    tagged = "create_environment.env_kwargs = {'tag': 'checked at %STEPS steps'}"
    trained_with = config_text('STEPS = 1000', run_length, tagged)
    root_dir = saved_run(tmp_path, trained_with)
    longer = config_text('STEPS = 2000', run_length, tagged)
    assert experiment_difference(root_dir, longer) is None
    assert changed_bindings(trained_with, longer) == []
    # Used outside the string too, it is part of the experiment.
    used = "create_environment.env_kwargs = {'tag': 'checked at %STEPS steps', 'n': %STEPS}"
    root_dir = saved_run(tmp_path / 'used', config_text('STEPS = 1000', run_length, used))
    difference = experiment_difference(root_dir, config_text('STEPS = 2000', run_length, used))
    assert "in 1 binding(s), e.g. ['STEPS = 1000 -> STEPS = 2000']" in difference


def test_a_resume_that_sets_the_run_length_its_macro_set_is_the_same_experiment(tmp_path):
    # `--gin_param TrainerConfig.num_env_steps=3000` on a run whose length was %STEPS:
    # STEPS stays bound in the new config.gin, used by nothing.
    trained_with = config_text(
        'STEPS = %BASE', 'BASE = 1000', 'TrainerConfig.num_env_steps = %STEPS'
    )
    root_dir = saved_run(tmp_path, trained_with)
    longer = config_text('STEPS = %BASE', 'BASE = 1000', 'TrainerConfig.num_env_steps = 3000')
    assert experiment_difference(root_dir, longer) is None
    assert changed_bindings(trained_with, longer) == []
    assert changed_bindings(longer, trained_with) == []
    assert changed_bindings(trained_with, longer, resume_safe=True) == [
        'TrainerConfig.num_env_steps = %STEPS -> TrainerConfig.num_env_steps = 3000'
    ]
    keep_superseded_config(RunDir(root_dir), longer, 500)
    assert os.listdir(root_dir) == ['config.gin']  # no config-until-500.gin
    # Once unused, the macro may take any value; used by what the run learns, it is
    # part of the experiment again.
    unused = config_text('STEPS = 7', 'TrainerConfig.num_env_steps = 3000')
    assert changed_bindings(trained_with, unused) == []
    shared = config_text(
        'STEPS = 7', 'TrainerConfig.num_env_steps = 3000', 'ReplayBuffer.capacity = %STEPS'
    )
    assert changed_bindings(trained_with, shared) == [
        '(not bound) -> ReplayBuffer.capacity = %STEPS',
        '(not bound) -> STEPS = 7',
    ]


def test_a_binding_written_through_a_macro_or_as_its_value_is_one_experiment(tmp_path):
    trained_with = config_text('critic/Adam.lr = 0.001', 'CriticNetwork.hidden_layers = (64, 64)')
    root_dir = saved_run(tmp_path, trained_with)
    width = 'CriticNetwork.hidden_layers = (%WIDTH, %WIDTH)'
    through_macros = config_text(
        'LR = 1e-3', 'critic/Adam.lr = %LR', 'WIDTH = %UNITS', 'UNITS = 64', width
    )
    assert experiment_difference(root_dir, through_macros) is None
    assert changed_bindings(trained_with, through_macros) == []
    assert changed_bindings(through_macros, trained_with) == []
    # Another value through the macro is another experiment, named by the binding and macro.
    faster = through_macros.replace('LR = 1e-3', 'LR = 2e-3')
    assert changed_bindings(trained_with, faster) == [
        '(not bound) -> LR = 2e-3',
        'critic/Adam.lr = 0.001 -> critic/Adam.lr = %LR',
    ]
    assert 'in 2 binding(s)' in experiment_difference(root_dir, faster)
    assert changed_bindings(through_macros, faster) == ['LR = 1e-3 -> LR = 2e-3']
    # Macros that double a value at each level are compared as written past a length.
    doubling = ['M0 = 1'] + [f'M{i} = (%M{i - 1}, %M{i - 1})' for i in range(1, 40)]
    deep = config_text(*doubling, 'X.y = %M39')
    assert changed_bindings(deep, deep.replace('%M39', '%M38')) == ['X.y = %M39 -> X.y = %M38']


def test_a_macro_the_reporting_alone_used_that_now_also_gives_a_value_it_had_is_no_change(
    tmp_path,
):
    # The run's N set only how often it reports; the gin file now also writes its initial
    # collect steps through N, the value they had.
    reporting = 'TrainerConfig.summary_interval = %N'
    trained_with = config_text('N = 1000', reporting, 'TrainerConfig.initial_collect_steps = 1000')
    root_dir = saved_run(tmp_path, trained_with)
    through_n = config_text('N = 1000', reporting, 'TrainerConfig.initial_collect_steps = %N')
    assert experiment_difference(root_dir, through_n) is None
    for old, new in ((trained_with, through_n), (through_n, trained_with)):
        assert changed_bindings(old, new) == []
        assert changed_bindings(old, new, resume_safe=True) == []
    keep_superseded_config(RunDir(root_dir), through_n, 500)
    assert os.listdir(root_dir) == ['config.gin']  # no config-until-500.gin
    # Another value of N changes the collect steps: another experiment, named by them.
    longer = through_n.replace('N = 1000', 'N = 2000')
    assert (
        'TrainerConfig.initial_collect_steps = 1000 -> TrainerConfig.initial_collect_steps = %N'
        in experiment_difference(root_dir, longer)
    )


def test_macros_are_resolved_outside_string_literals_only_and_never_round_a_cycle():
    # '%N' in a string literal is text, not the macro's value.
    in_string = config_text('N = 1', "X.y = '%N'")
    assert changed_bindings(in_string, config_text('N = 1', "X.y = '1'")) == [
        "X.y = '%N' -> X.y = '1'"
    ]
    # Macros standing for each other are compared as written.
    cycle = ['A = %B', 'B = %A']
    assert changed_bindings(config_text(*cycle, 'X.y = %A'), config_text(*cycle, 'X.y = %B')) == [
        'X.y = %A -> X.y = %B'
    ]
    # A macro not bound stays as written; the others of the value are resolved.
    written_out = config_text('A = 1', 'X.y = (1, %C)')
    assert changed_bindings(config_text('A = 1', 'X.y = (%A, %C)'), written_out) == []


def test_a_parameter_written_out_at_its_default_is_a_binding_of_its_own(tmp_path):
    # Whether a default holds depends on gin's bindings of base classes, subclasses,
    # functions and scopes (see the subclass test below): a resume does not guess.
    example = str(REPO_ROOT / 'examples' / 'sac_pendulum.gin')
    parse_config([example])
    root_dir = saved_run(tmp_path, gin.config_str())
    parse_config([example], ['SacAlgorithm.initial_log_alpha = 0.0'])
    difference = experiment_difference(root_dir, gin.config_str())
    assert "e.g. ['(not bound) -> SacAlgorithm.initial_log_alpha = 0.0']" in difference


def test_a_macro_holding_a_reference_is_not_the_reference_written_out(tmp_path):
    # gin makes a macro's call in the macro's scope alone: bindings scoped by the macro's
    # name apply to it, those of the scope the binding using the macro is called in do not.
    for scoped, called_in, sigmas in (
        ('NOISE/GaussianNoise.sigma = 0.3', None, (0.3, 0.1)),
        ('main/GaussianNoise.sigma = 0.3', 'main', (0.1, 0.3)),
    ):
        bindings = ['NOISE = @GaussianNoise()', scoped]
        through_macro = config_text(*bindings, 'Td3Algorithm.exploration_noise = %NOISE')
        written_out = config_text(*bindings, 'Td3Algorithm.exploration_noise = @GaussianNoise()')
        for config, sigma in zip((through_macro, written_out), sigmas):
            gin.clear_config()
            gin.parse_config(config)
            with gin.config_scope(called_in):
                noise = copy.deepcopy(gin.query_parameter('Td3Algorithm.exploration_noise'))
            assert noise.sigma == sigma, (scoped, config)
        root_dir = saved_run(tmp_path / scoped.split('/')[0], through_macro)
        difference = experiment_difference(root_dir, written_out)
        assert "e.g. ['Td3Algorithm.exploration_noise = %NOISE -> " in difference
    # An uncalled reference through a macro is compared as written too.
    uncalled = config_text('NOISE = @GaussianNoise', 'X.y = %NOISE')
    assert 'X.y = %NOISE -> X.y = @GaussianNoise' in changed_bindings(
        uncalled, config_text('X.y = @GaussianNoise')
    )


@gin.configurable
class WideGaussianNoise(GaussianNoise):
    """A user's noise class: its calls run the base's ``__init__``, with the base's bindings."""


def test_a_subclass_bound_to_its_default_where_the_base_is_bound_is_another_experiment(tmp_path):
    example = str(REPO_ROOT / 'examples' / 'td3_pendulum.gin')
    noise = ['Td3Algorithm.exploration_noise = @WideGaussianNoise()', 'GaussianNoise.sigma = 0.3']
    parse_config([example], noise)
    assert WideGaussianNoise().sigma == 0.3
    root_dir = saved_run(tmp_path, gin.config_str())
    # The signature's default (0.1), which the subclass passes on over the base's binding.
    parse_config([example], [*noise, 'WideGaussianNoise.sigma = 0.1'])
    assert WideGaussianNoise().sigma == 0.1
    difference = experiment_difference(root_dir, gin.config_str())
    assert "e.g. ['(not bound) -> WideGaussianNoise.sigma = 0.1']" in difference


def test_configs_differing_in_what_the_run_learns_are_other_experiments(tmp_path):
    trained_with = config_text('TrainerConfig.num_env_steps = 1000')
    root_dir = saved_run(tmp_path, trained_with)
    given = config_text('TrainerConfig.num_env_steps = 2000').replace(
        'SacAlgorithm.target_update_tau = 0.005', 'SacAlgorithm.target_update_tau = 0.5'
    ) + ('\n# Parameters for CriticNetwork:\nCriticNetwork.hidden_layers = (32,)\n')
    # Both sides of each change are named: what the run had and what it would get.
    assert changed_bindings(trained_with, given) == [
        '(not bound) -> CriticNetwork.hidden_layers = (32,)',
        'SacAlgorithm.target_update_tau = 0.005 -> SacAlgorithm.target_update_tau = 0.5',
    ]
    difference = experiment_difference(root_dir, given)
    assert difference.startswith(f'{root_dir} holds another experiment')
    assert 'in 2 binding(s)' in difference and '--start_over' in difference
    # And the other way round: a binding the run had that the config lacks.
    assert changed_bindings(given, trained_with)[0] == (
        'CriticNetwork.hidden_layers = (32,) -> (not bound)'
    )


def test_a_value_gin_writes_over_several_lines_is_compared_as_one_binding(tmp_path):
    # gin breaks a long value after '= \\' into indented lines, one element each.
    def long_value(*elements):
        return 'CriticNetwork.hidden_layers = \\\n    (' + ',\n     '.join(elements) + ')'

    first = [str(n) for n in range(100, 140)]
    swapped = first[:5] + [first[6], first[5]] + first[7:]
    trained_with = config_text(long_value(*first))
    root_dir = saved_run(tmp_path, trained_with)
    # The same lines in another order: another network, though each line is one the run had.
    given = config_text(long_value(*swapped))
    assert sorted(trained_with.splitlines()) == sorted(given.splitlines())
    assert changed_bindings(trained_with, given) == [
        f'CriticNetwork.hidden_layers = ({", ".join(first)}) -> '
        f'CriticNetwork.hidden_layers = ({", ".join(swapped)})',
    ]
    assert 'in 1 binding(s)' in experiment_difference(root_dir, given)
    assert experiment_difference(root_dir, config_text(long_value(*first))) is None


def test_a_config_is_compared_by_the_bindings_gin_applies_not_by_their_order(tmp_path):
    trained_with = config_text('TrainerConfig.num_env_steps = 1000')
    root_dir = saved_run(tmp_path, trained_with)
    # A hand-edited config.gin: the same bindings in reverse order are the same experiment.
    reordered = '\n'.join(reversed(trained_with.splitlines()))
    assert experiment_difference(root_dir, reordered) is None
    assert changed_bindings(trained_with, reordered) == []
    # Of a parameter bound twice gin applies the last binding; that one is compared.
    tau_again = 'SacAlgorithm.target_update_tau = 0.5\n'
    assert experiment_difference(root_dir, trained_with + tau_again) == (
        experiment_difference(root_dir, trained_with.replace('0.005', '0.5'))
    )
    assert changed_bindings(trained_with, trained_with + tau_again) == [
        'SacAlgorithm.target_update_tau = 0.005 -> SacAlgorithm.target_update_tau = 0.5',
    ]
    assert 'in 1 binding(s)' in experiment_difference(root_dir, trained_with + tau_again)
    assert experiment_difference(root_dir, tau_again + trained_with) is None


def test_a_comment_after_a_binding_is_no_part_of_its_value(tmp_path):
    trained_with = config_text("create_environment.env_kwargs = {'xml_file': 'a#b.xml'}")
    root_dir = saved_run(tmp_path, trained_with)
    # A hand-edited config.gin: gin reads a '#' outside a string as the start of a comment.
    commented = trained_with.replace(
        'SacAlgorithm.target_update_tau = 0.005',
        'SacAlgorithm.target_update_tau = 0.005  # as in the paper',
    )
    assert commented != trained_with
    assert changed_bindings(trained_with, commented) == []
    assert experiment_difference(root_dir, commented) is None
    # A '#' in a string is part of the value.
    other_file = trained_with.replace("'a#b.xml'", "'a#c.xml'")
    assert changed_bindings(trained_with, other_file) == [
        "create_environment.env_kwargs = {'xml_file': 'a#b.xml'} -> "
        "create_environment.env_kwargs = {'xml_file': 'a#c.xml'}"
    ]
    (tmp_path / 'config.gin').write_text(commented)
    assert config_bindings(str(tmp_path))['SacAlgorithm.target_update_tau'] == '0.005'


def test_spaces_in_a_string_are_part_of_its_value_those_around_it_are_not(tmp_path):
    trained_with = config_text("create_environment.env_kwargs = {'xml_file': 'my  hopper.xml'}")
    root_dir = saved_run(tmp_path, trained_with)
    other_file = trained_with.replace("'my  hopper.xml'", "'my hopper.xml'")
    assert changed_bindings(trained_with, other_file) == [
        "create_environment.env_kwargs = {'xml_file': 'my  hopper.xml'} -> "
        "create_environment.env_kwargs = {'xml_file': 'my hopper.xml'}"
    ]
    assert 'in 1 binding(s)' in experiment_difference(root_dir, other_file)
    spaced = trained_with.replace("{'xml_file': ", "{'xml_file':   ")
    assert experiment_difference(root_dir, spaced) is None


def test_a_binding_written_indented_is_a_statement_of_its_own_as_gin_reads_it(tmp_path):
    trained_with = config_text('TrainerConfig.mini_batch_size = 64')
    root_dir = saved_run(tmp_path, trained_with)
    # A hand-edited config.gin: gin ends a statement at the end of its line, indented or
    # not, and reads a block (`Name:` over indented `param = value` lines) as Name.param.
    binding = 'TrainerConfig.mini_batch_size = 64'
    indented = trained_with.replace(binding, '  ' + binding)
    block = trained_with.replace(binding, 'TrainerConfig:\n    mini_batch_size = 64')
    for edited in (indented, block):
        assert changed_bindings(trained_with, edited) == [], edited
        assert experiment_difference(root_dir, edited) is None
        (tmp_path / 'edited.gin').write_text(edited)
        parse_config([str(tmp_path / 'edited.gin')])
        assert changed_bindings(gin.config_str(), edited) == []
        # Another value still counts.
        assert changed_bindings(trained_with, edited.replace('= 64', '= 32')) == [
            f'{binding} -> TrainerConfig.mini_batch_size = 32'
        ]
    (tmp_path / 'config.gin').write_text(indented)
    assert config_bindings(str(tmp_path))['TrainerConfig.random_seed'] == '0'
    keep_superseded_config(RunDir(root_dir), indented, 500)
    assert os.listdir(root_dir) == ['config.gin']


def test_a_value_is_compared_as_gin_reads_it_not_by_its_layout(tmp_path):
    trained_with = config_text(
        'CriticNetwork.hidden_layers = (256, 256)',
        "create_environment.env_kwargs = {'a': 1, 'b': (2, 3)}",
        'SacAlgorithm.gamma = 0.99',
    )
    root_dir = saved_run(tmp_path, trained_with)
    # A hand-edited config.gin: values over several lines, a trailing comma, another
    # key order, another spelling of a number.
    edited = (
        trained_with.replace('(256, 256)', '(\n    256,\n    256,\n)')
        .replace("{'a': 1, 'b': (2, 3)}", "{\n    'b': (2, 3),  # kept\n    'a': 1,\n}")
        .replace('0.99', '9.9e-1')
    )
    assert changed_bindings(trained_with, edited) == []
    assert experiment_difference(root_dir, edited) is None
    (tmp_path / 'edited.gin').write_text(edited)
    parse_config([str(tmp_path / 'edited.gin')])
    assert changed_bindings(gin.config_str(), edited) == []
    keep_superseded_config(RunDir(root_dir), edited, 500)
    assert os.listdir(root_dir) == ['config.gin']
    # Another value over several lines still counts.
    narrower = edited.replace('    256,\n)', '    128,\n)')
    assert changed_bindings(trained_with, narrower) == [
        'CriticNetwork.hidden_layers = (256, 256) -> CriticNetwork.hidden_layers = (256, 128,)'
    ]
    assert 'in 1 binding(s)' in experiment_difference(root_dir, narrower)
    # Values gin reads as one, and values it reads as others (type, element, reference).
    for old, new in (('@A ()', '@A()'), ('(@A, %B)', '(\n  @A,\n  %B,\n)'), ("'a' 'b'", "'ab'")):
        assert changed_bindings(config_text(f'X.y = {old}'), config_text(f'X.y = {new}')) == []
    for old, new in (
        ('(256,)', '(256)'),
        ('(256, 256)', '[256, 256]'),
        ('1', '1.0'),
        ('1', 'True'),
        ('@A', '@A()'),
        ('%A', '%B'),
        ("'@A'", '@A'),
        ("{'a': 1}", "{'a': 2}"),
    ):
        assert len(changed_bindings(config_text(f'X.y = {old}'), config_text(f'X.y = {new}'))) == 1


def test_an_empty_or_missing_root_dir_holds_no_other_experiment(tmp_path):
    assert experiment_difference(str(tmp_path / 'missing'), EXPERIMENT) is None
    (tmp_path / 'empty').mkdir()
    assert experiment_difference(str(tmp_path / 'empty'), EXPERIMENT) is None
    (tmp_path / 'empty' / 'notes.txt').write_text('mine')
    assert 'not an alf_lite experiment' in experiment_difference(
        str(tmp_path / 'empty'), EXPERIMENT
    )


def assert_each_reader_of_the_config_refuses(root_dir, message):
    for read in (
        lambda: experiment_difference(root_dir, EXPERIMENT),
        lambda: keep_superseded_config(RunDir(root_dir), EXPERIMENT, 100),
        lambda: config_bindings(root_dir),
    ):
        with pytest.raises(ValueError, match=message):
            read()
    assert os.listdir(root_dir) == ['config.gin']  # nothing moved or written


def test_a_config_gin_larger_than_a_config_may_be_is_refused_unread(tmp_path):
    # train writes kilobytes: a crafted config.gin of gigabytes is not read into memory.
    root_dir = saved_run(tmp_path, '')
    config_file = RunDir(root_dir).config_file
    with open(config_file, 'w') as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    message = re.escape(f'{config_file} holds {MAX_CONFIG_BYTES + 1} bytes, more than the')
    assert_each_reader_of_the_config_refuses(root_dir, message)


def test_a_config_gin_that_is_not_text_is_named(tmp_path):
    root_dir = saved_run(tmp_path, '')
    config_file = RunDir(root_dir).config_file
    with open(config_file, 'wb') as f:
        f.write(b'TrainerConfig.random_seed = 0\n# \xe9t\xe9 in Latin-1\n')
    message = re.escape(f'{config_file} is not text: utf-8 cannot decode its byte 0xe9')
    assert_each_reader_of_the_config_refuses(root_dir, message)


@pytest.mark.skipif(not os.path.exists('/dev/zero'), reason='reads /dev/zero')
def test_a_config_gin_that_tells_no_size_is_read_only_as_far_as_a_config_may_hold(tmp_path):
    # A link to a device tells no size, and would give bytes without end.
    root_dir = saved_run(tmp_path, '')
    config_file = RunDir(root_dir).config_file
    os.remove(config_file)
    os.symlink('/dev/zero', config_file)
    message = re.escape(f'{config_file} holds more than the {MAX_CONFIG_BYTES} bytes')
    with pytest.raises(ValueError, match=message):
        config_bindings(root_dir)
    # As many bytes as a config may hold are read.
    largest = tmp_path / 'largest.gin'
    with open(largest, 'w') as f:
        f.truncate(MAX_CONFIG_BYTES)
    assert len(read_config_text(str(largest))) == MAX_CONFIG_BYTES


@pytest.mark.timeout(60)
def test_a_config_gin_or_events_file_that_is_a_fifo_is_named_not_waited_on(tmp_path):
    # Opened to be read, a FIFO blocks until something writes into it: plot waited forever
    # on a run someone sent.
    root_dir = saved_run(tmp_path, '')
    config_file = RunDir(root_dir).config_file
    os.remove(config_file)
    os.mkfifo(config_file)
    with pytest.raises(ValueError, match=re.escape(f'{config_file} is no regular file')):
        config_bindings(root_dir)
    events = os.path.join(root_dir, 'eval')
    os.makedirs(events)
    os.mkfifo(os.path.join(events, 'events.out.tfevents.1.host'))
    with pytest.raises(ValueError, match='events.out.tfevents.1.host is no regular file'):
        read_scalar(root_dir, 'eval/AverageReturn')
    assert run_columns(root_dir) == []


def test_an_events_record_declaring_more_bytes_than_the_memory_is_named_as_damage(tmp_path):
    # Its length and the length's masked CRC are valid; the reader allocated the length and
    # plot ended in a MemoryError traceback.
    from tensorboard.summary.writer.record_writer import masked_crc32c

    root_dir = saved_run(tmp_path, '')
    events = os.path.join(root_dir, 'eval')
    os.makedirs(events)
    header = struct.pack('Q', 2**50)
    with open(os.path.join(events, 'events.out.tfevents.1.host'), 'wb') as f:
        f.write(header + struct.pack('I', masked_crc32c(header)) + b'\0' * 64)
    with pytest.raises(ValueError, match='declares a record larger than the memory'):
        read_scalar(root_dir, 'eval/AverageReturn')
    assert run_columns(root_dir) == []


def test_a_config_gin_that_is_a_directory_is_named_as_one(tmp_path):
    root_dir = saved_run(tmp_path, '')
    config_file = RunDir(root_dir).config_file
    os.remove(config_file)
    os.mkdir(config_file)
    with pytest.raises(ValueError, match=f'^{re.escape(config_file)} is a directory, not a gin'):
        config_bindings(root_dir)


def test_run_dir_lock_excludes_a_second_holder_until_released(tmp_path):
    root_dir = str(tmp_path / 'run')
    assert not run_dir_in_use(root_dir)
    with RunDirLock(root_dir) as lock:
        assert os.path.isdir(root_dir)
        assert run_dir_in_use(root_dir)
        # The holder is in this process: the refusal says so, not "another process".
        with pytest.raises(
            RunDirInUseError, match=f'{root_dir} is in use: another Trainer of this process'
        ):
            RunDirLock(root_dir).acquire()
        lock.release()
        assert not run_dir_in_use(root_dir)
        other = RunDirLock(root_dir)
        other.acquire()  # released: another may take it
        other.release()
    assert not run_dir_in_use(root_dir)
    # The lock adds no file to the run.
    assert os.listdir(root_dir) == []


def test_run_dir_lock_held_by_another_process_is_seen_and_dropped_when_it_ends(tmp_path):
    root_dir = str(tmp_path / 'run')
    holder = subprocess.Popen(
        [
            sys.executable,
            '-c',
            'import sys; from alf_lite.run_dir import RunDirLock\n'
            f'lock = RunDirLock({root_dir!r}); lock.acquire(); print("held", flush=True)\n'
            'sys.stdin.read()',
        ],
        env=subprocess_env(1),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == 'held\n'
        assert run_dir_in_use(root_dir)
        with pytest.raises(RunDirInUseError, match=f'{root_dir} is in use: another process'):
            RunDirLock(root_dir).acquire()
    finally:
        holder.kill()
        holder.wait()
    assert not run_dir_in_use(root_dir)


@pytest.mark.parametrize('replaced', [True, False], ids=['new_root_dir', 'none_yet'])
def test_run_dir_lock_on_a_directory_moved_aside_between_its_open_and_lock_is_in_use(
    tmp_path, monkeypatch, replaced
):
    # train --start_over moves the run aside and trains in a new root_dir: a lock whose
    # open came before the move and whose flock after it took the directory moved aside,
    # and would let a second train write into the new one.
    root_dir = str(tmp_path / 'run')
    aside = root_dir + '.old-20260101-000000'
    os.mkdir(root_dir)
    flock = fcntl.flock
    mover = RunDirLock(root_dir)

    def moved_between(fd, operation):
        monkeypatch.setattr(fcntl, 'flock', flock)
        os.rename(root_dir, aside)
        if replaced:
            mover.acquire()  # creates the new root_dir
        return flock(fd, operation)

    monkeypatch.setattr(fcntl, 'flock', moved_between)
    # The mover, which holds the new root_dir, is in this process.
    holder = 'another Trainer of this process' if replaced else 'another process'
    with pytest.raises(RunDirInUseError, match=f'{root_dir} is in use: {holder}'):
        RunDirLock(root_dir).acquire()
    # Nothing is left locked or created by the one that lost.
    assert not run_dir_in_use(aside)
    assert os.path.isdir(root_dir) == replaced
    mover.release()
    with RunDirLock(root_dir):
        assert run_dir_in_use(root_dir)


def test_a_missing_root_dir_is_not_in_use_and_is_not_created(tmp_path):
    assert not run_dir_in_use(str(tmp_path / 'missing'))
    assert os.listdir(tmp_path) == []


def test_a_root_dir_that_cannot_be_opened_here_is_not_seen_in_use():
    # Another user's run directory, mode 000: it exists, yet cannot be opened to be
    # locked. Root opens anything, so as root the check runs as user nobody, in a
    # directory of the temp dir that nobody may enter (pytest's own is closed to others).
    with tempfile.TemporaryDirectory() as base:
        os.chmod(base, 0o711)
        root_dir = os.path.join(base, 'run')
        os.mkdir(root_dir)
        os.chmod(root_dir, 0)
        as_nobody = os.geteuid() == 0
        if as_nobody:
            os.seteuid(65534)
        try:
            assert not run_dir_in_use(root_dir)
        finally:
            if as_nobody:
                os.seteuid(0)


def test_a_run_is_a_directory_with_progress_csv_config_gin_or_tensorboard_events(
    tmp_path, monkeypatch
):
    events = 'events.out.tfevents.1700000000.host.1.0'
    # is_run, and trained_in: which a directory below may not start a run in.
    for name, made, is_run, trained_in in [
        ('csv', ['progress.csv'], True, True),
        # A project's own gin file may have the name.
        ('config', ['config.gin'], True, False),
        ('train', ['train/', f'train/{events}'], True, True),
        ('eval', ['eval/', f'eval/{events}'], True, True),
        ('checkpoint', ['checkpoints/', 'checkpoints/ckpt-100/'], False, True),
        # A project's folder of other models.
        ('other_checkpoints', ['checkpoints/', 'checkpoints/model.pt'], False, False),
        ('none', ['notes.txt'], False, False),
        # A folder that merely holds a train/ or eval/ of other things.
        ('empty_train', ['train/', 'eval/', 'train/notes.txt'], False, False),
        ('train_file', ['train'], False, False),
        ('checkpoints_file', ['checkpoints'], False, False),
    ]:
        # Not named as what a run holds: tmp_path would hold a run's checkpoints/.
        root = tmp_path / f'case_{name}'
        root.mkdir()
        for path in made:
            if path.endswith('/'):
                (root / path).mkdir()
            else:
                (root / path).write_text('x')
        run = RunDir(str(root))
        assert (run.is_run(), run.trained_in()) == (is_run, trained_in), name
        for inner in (root / 'sub', root / 'eval' / 'sub' / 'deeper'):
            assert enclosing_run(str(inner)) == (str(root) if trained_in else None), inner
            refusal = inside_run_refusal(str(inner), '--root_dir')
            assert (refusal is not None) == trained_in
    # The nearest of two; not the directory itself; a relative path from the working directory.
    (tmp_path / 'case_csv' / 'inner').mkdir()
    (tmp_path / 'case_csv' / 'inner' / 'progress.csv').write_text('x')
    assert enclosing_run(str(tmp_path / 'case_csv' / 'inner' / 'a')) == str(
        tmp_path / 'case_csv' / 'inner'
    )
    assert enclosing_run(str(tmp_path / 'case_csv')) is None
    monkeypatch.chdir(tmp_path / 'case_csv')
    assert enclosing_run('a') == str(tmp_path / 'case_csv') and enclosing_run('.') is None
    # A link that leads inside a run, to a folder there or to one not made yet.
    for target in (tmp_path / 'case_eval' / 'eval', tmp_path / 'case_eval' / 'new'):
        link = tmp_path / 'link'
        link.symlink_to(target)
        assert enclosing_run(str(link / 'sub')) == str(tmp_path / 'case_eval')
        assert enclosing_run(str(link)) == str(tmp_path / 'case_eval')
        link.unlink()


def test_moved_aside_path_holds_the_time_of_the_move(tmp_path):
    root_dir = str(tmp_path / 'run')
    before = datetime.datetime.now().replace(microsecond=0)
    aside = moved_aside_path(root_dir)
    after = datetime.datetime.now()
    assert aside.startswith(f'{root_dir}.old-') and MOVED_ASIDE.search(aside)
    moved_at = datetime.datetime.strptime(aside[len(f'{root_dir}.old-') :], '%Y%m%d-%H%M%S')
    assert before <= moved_at <= after
    assert not MOVED_ASIDE.search(root_dir)


def test_moved_aside_path_is_never_one_taken_within_the_same_second(tmp_path, monkeypatch):
    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 1, 1, 12, 0, 59)

    frozen = types.SimpleNamespace(datetime=Frozen, timedelta=datetime.timedelta)
    monkeypatch.setattr(run_dir_module, 'datetime', frozen)
    root_dir = tmp_path / 'run'
    moved = []
    for n in range(3):  # three --start_over within one second, each over a new run
        root_dir.mkdir()
        (root_dir / 'config.gin').write_text(f'# run {n}\n')
        aside = moved_aside_path(str(root_dir))
        os.rename(root_dir, aside)
        moved.append(os.path.basename(aside))
    assert moved == [
        'run.old-20260101-120059',
        'run.old-20260101-120100',
        'run.old-20260101-120101',
    ]
    for n, name in enumerate(moved):
        assert MOVED_ASIDE.search(name)
        assert (tmp_path / name / 'config.gin').read_text() == f'# run {n}\n'


def test_superseded_config_name_holds_the_env_step():
    assert RunDir('/r').superseded_config_file(400) == '/r/config-until-400.gin'
    assert RunDir('/r').config_file == '/r/config.gin'


def test_latest_checkpoint_env_steps_is_read_from_the_newest_complete_checkpoint(tmp_path):
    run_dir = RunDir(str(tmp_path))
    assert run_dir.latest_checkpoint_env_steps() is None
    for name in ('ckpt-900', 'ckpt-1000', 'ckpt-2000.corrupt', 'last_good-3000'):
        os.makedirs(os.path.join(run_dir.checkpoint_dir, name))
    assert run_dir.latest_checkpoint_env_steps() == 1000


# --- reading runs back (alf_lite.runs) ----------------------------------------------------------


def test_first_wall_time_of_a_run_without_a_row_is_refused(tmp_path):
    # Neither a progress.csv nor events (a run that has not written its first row yet).
    (tmp_path / 'train').mkdir()
    with pytest.raises(ValueError, match='has no row yet'):
        first_wall_time(str(tmp_path))
    summary = Summary(str(tmp_path))
    summary.write(0, 0, 1e9 + 3, {'eval/AverageReturn': -10.0})
    summary.close()
    assert first_wall_time(str(tmp_path)) == 1e9 + 3
    (tmp_path / 'progress.csv').unlink()
    assert first_wall_time(str(tmp_path)) == pytest.approx(1e9 + 3)


def test_read_scalar_keeps_the_last_value_written_at_a_step_and_skips_blank_cells(tmp_path):
    # A resume rewrote step 200; evaluations fill eval/ only in some rows.
    (tmp_path / 'progress.csv').write_text(
        'env_steps,train/critic_loss,eval/AverageReturn\n'
        '0,,-10\n'
        '100,2.5,\n'
        '200,1.5,-8\n'
        '200,1.25,-7\n'
        '300,0.5,\n'
    )
    steps, values = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 200] and values.tolist() == [-10, -7]
    steps, values = read_scalar(str(tmp_path), 'train/critic_loss')
    assert steps.tolist() == [100, 200, 300] and values.tolist() == [2.5, 1.25, 0.5]
    # Along a column that has blank cells too: the rows that have both.
    xs, values = read_scalar(str(tmp_path), 'train/critic_loss', x='eval/AverageReturn')
    assert xs.tolist() == [-8, -7] and values.tolist() == [1.5, 1.25]


def test_read_scalar_sorts_by_x_the_rows_a_resume_appended_after_later_ones(tmp_path):
    # Evaluated every 200 steps to 400, resumed at 200 with eval_interval 100: 300 comes
    # after 400 in the file. A curve's x must increase (plot interpolates along it).
    (tmp_path / 'progress.csv').write_text(
        'env_steps,eval/AverageReturn\n0,-10\n200,-8\n400,-6\n300,-5\n400,-4\n'
    )
    steps, values = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert steps.tolist() == [0, 200, 300, 400] and values.tolist() == [-10, -8, -5, -4]


def test_read_scalar_passes_over_a_row_whose_env_steps_is_no_number(tmp_path):
    # An edited row, which train keeps and counts no step of; a value that is no number
    # is still an error naming its line.
    (tmp_path / 'progress.csv').write_text(
        'env_steps,wall_time,eval/AverageReturn\n0,1,-10\nten,2,-9\n20,3,-8\n'
    )
    for x in ('env_steps', 'wall_time'):
        xs, values = read_scalar(str(tmp_path), 'eval/AverageReturn', x=x)
        assert xs.tolist() == ([0, 20] if x == 'env_steps' else [1, 3])
        assert values.tolist() == [-10, -8]
    assert final_value(str(tmp_path)) == -8
    (tmp_path / 'progress.csv').write_text('env_steps,eval/AverageReturn\n0,-10\n10,oops\n')
    with pytest.raises(ValueError, match="line 3: could not convert string to float: 'oops'"):
        read_scalar(str(tmp_path), 'eval/AverageReturn')


@pytest.mark.parametrize('value', ['nan', 'inf', '-inf', '1e999'])
def test_read_scalar_passes_over_a_row_whose_env_steps_or_x_is_not_finite(tmp_path, value):
    # Edited rows: an env_steps of nan or inf is no step to train, and a point at a NaN or an
    # infinite x has no place along x (nor is it a run's last point).
    path = tmp_path / 'progress.csv'
    path.write_text(
        f'env_steps,wall_time,eval/AverageReturn\n0,1,-10\n{value},2,-9\n20,{value},-8\n30,4,-7\n'
    )
    assert last_env_steps(str(path)) == 30
    xs, values = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert xs.tolist() == [0, 20, 30] and values.tolist() == [-10, -8, -7]
    xs, values = read_scalar(str(tmp_path), 'eval/AverageReturn', x='wall_time')
    assert xs.tolist() == [1, 4] and values.tolist() == [-10, -7]
    assert final_value(str(tmp_path)) == -7
    assert first_wall_time(str(tmp_path)) == 1


@pytest.mark.parametrize('value', ['10.0', '1e1'])
def test_read_scalar_passes_over_a_row_whose_env_steps_train_reads_as_no_step(tmp_path, value):
    # A step is a whole number: train counts no step of an edited row of another number.
    path = tmp_path / 'progress.csv'
    path.write_text(f'env_steps,eval/AverageReturn\n0,-10\n{value},-9\n20,-8\n')
    assert last_env_steps(str(path)) == 20
    xs, values = read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert xs.tolist() == [0, 20] and values.tolist() == [-10, -8]


def test_read_scalar_of_an_empty_progress_csv_says_it_is_empty(tmp_path):
    (tmp_path / 'progress.csv').write_text('')
    with pytest.raises(ValueError, match=r'progress.csv is empty: the run wrote no row yet$'):
        read_scalar(str(tmp_path), 'eval/AverageReturn')
    assert run_columns(str(tmp_path)) == []
    (tmp_path / 'progress.csv').write_text('env_steps,train/critic_loss\n')
    with pytest.raises(ValueError, match="has no column 'eval/AverageReturn'; its columns are"):
        read_scalar(str(tmp_path), 'eval/AverageReturn')


def test_read_scalar_of_a_run_without_progress_csv_reads_its_tensorboard_events(tmp_path):
    summary = Summary(str(tmp_path))
    summary.write(100, 10, 1_700_000_000.0, {'train/critic_loss': 3.0})
    summary.write(200, 20, 1_700_000_050.0, {'train/critic_loss': 2.0})
    summary.close()
    os.remove(tmp_path / 'progress.csv')
    steps, values = read_scalar(str(tmp_path), 'train/critic_loss')
    assert steps.tolist() == [100, 200] and values.tolist() == [3.0, 2.0]
    times, values = read_scalar(str(tmp_path), 'train/critic_loss', x='wall_time')
    assert times.tolist() == [1_700_000_000.0, 1_700_000_050.0] and values.tolist() == [3.0, 2.0]
    with pytest.raises(ValueError, match="x can only be 'env_steps' or 'wall_time', not 'num_up"):
        read_scalar(str(tmp_path), 'train/critic_loss', x='num_updates')


def test_read_scalar_of_tensorboard_events_keeps_every_point_of_a_long_run(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    # More points than TensorBoard keeps by default (10000, a random sample past that).
    num_points = 10_001
    writer = SummaryWriter(RunDir(str(tmp_path)).events_dir('train'))
    for step in range(num_points):
        writer.add_scalar('critic_loss', float(step), step)
    writer.close()
    steps, values = read_scalar(str(tmp_path), 'train/critic_loss')
    assert steps.tolist() == list(range(num_points)) and values.tolist() == steps.tolist()


def test_final_value_is_the_last_one_written_exactly(tmp_path):
    (tmp_path / 'progress.csv').write_text(
        'env_steps,eval/AverageReturn,train/replay_buffer_bytes\n'
        '0,-10,1000\n'
        '100,-2,\n'
        '200,-7.5,\n'
        '300,,1234567891\n'
    )
    # The last, not the best: a run that got worse ends worse.
    assert final_value(str(tmp_path)) == -7.5
    assert final_value(str(tmp_path), 'train/replay_buffer_bytes') == 1234567891
    assert final_value(str(tmp_path), 'eval/AverageEpisodeLength') is None


def test_config_bindings_of_a_config_gin_with_a_value_over_several_lines(tmp_path):
    widths = tuple(range(100, 140))  # long enough for gin to break it over lines
    parse_config([], [f'CriticNetwork.hidden_layers = {widths}', 'TrainerConfig.random_seed = 3'])
    (tmp_path / 'config.gin').write_text(gin.config_str())
    assert config_bindings(str(tmp_path)) == {
        'CriticNetwork.hidden_layers': str(widths),
        'TrainerConfig.random_seed': '3',
    }


def test_subprocess_env_puts_this_checkout_first_on_pythonpath(monkeypatch):
    monkeypatch.setenv('PYTHONPATH', '/elsewhere')
    env = subprocess_env(3)
    assert env['PYTHONPATH'].split(os.pathsep) == [str(REPO_ROOT), '/elsewhere']
    assert env['OMP_NUM_THREADS'] == env['MKL_NUM_THREADS'] == '3'


def test_error_line_of_an_attempt_is_not_that_of_an_earlier_attempt(tmp_path):
    log = tmp_path / 'run.log'
    log.write_text('=== first attempt\nValueError: old\n')
    offset = len(log.read_bytes())
    with open(log, 'a') as f:
        f.write('=== second attempt\nenv steps 100\nenv steps 200\n')
    assert log_error_line(str(log), offset) == 'env steps 200'
    assert log_error_line(str(log)) == 'ValueError: old'


def train_with(tmp_path, monkeypatch, script):
    """``train_in_subprocess`` of a run in tmp_path/run that starts ``script`` (sh) for python.

    The script gets train's arguments: ``-m alf_lite.bin.train --root_dir R --gin_file F``.
    Returns the result and the log's text.
    """
    python = tmp_path / 'python'
    python.write_text('#!/bin/sh\n' + script)
    python.chmod(0o755)
    monkeypatch.setattr(sys, 'executable', str(python))
    log = tmp_path / 'logs' / 'run.log'
    result = train_in_subprocess(str(tmp_path / 'run'), 'x = 1\n', 1, str(log))
    return result, log.read_text()


def test_a_training_subprocess_gets_its_config_in_a_file_that_is_removed_afterwards(
    tmp_path, monkeypatch
):
    (tmp_path / 'tmp').mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path / 'tmp'))
    result, log = train_with(tmp_path, monkeypatch, 'pwd\necho "$@"\ncat "$6"\n')
    assert result['returncode'] == 0 and result['error'] is None
    header, cwd, args, config = log.strip('\n').splitlines()
    assert header.startswith('=== ')
    # In the log's directory, whatever the caller's: python -m puts it first on sys.path.
    assert cwd == str(tmp_path / 'logs')
    assert args.split()[:4] == ['-m', 'alf_lite.bin.train', '--root_dir', str(tmp_path / 'run')]
    assert config == 'x = 1'  # read from the file after --gin_file
    assert os.listdir(tmp_path / 'tmp') == []


def test_a_training_subprocess_whose_stop_file_exists_is_not_started(tmp_path, monkeypatch):
    # A Ray task that begins after its sweep was stopped.
    python = tmp_path / 'python'
    python.write_text(f'#!/bin/sh\ntouch {tmp_path / "started"}\n')
    python.chmod(0o755)
    monkeypatch.setattr(sys, 'executable', str(python))
    stop_file = tmp_path / 'stop'
    stop_file.write_text('SIGINT\n')
    log = tmp_path / 'logs' / 'run.log'
    result = train_in_subprocess(
        str(tmp_path / 'run'), 'x = 1\n', 1, str(log), stop_file=str(stop_file)
    )
    assert result == {'returncode': None, 'wall_time_s': None, 'error': None, 'not_started': True}
    assert not (tmp_path / 'started').exists() and not log.exists()


def test_a_training_subprocess_killed_by_a_signal_fails_with_its_last_line(tmp_path, monkeypatch):
    # As the OOM killer ends a run: no exception line, a negative return code.
    result, _ = train_with(tmp_path, monkeypatch, 'echo env steps 100\nkill -KILL $$\n')
    assert result['returncode'] == -9
    assert result['error'] == 'killed by SIGKILL (exit code -9): env steps 100'


def test_a_training_subprocess_s_wall_time_is_not_changed_by_the_clock_being_set(
    tmp_path, monkeypatch
):
    import alf_lite.runs

    # Set back an hour while the run trains (NTP stepping the clock, say).
    monkeypatch.setattr(alf_lite.runs, 'time', ClockSetBack(3600))
    result, _ = train_with(tmp_path, monkeypatch, 'sleep 0.3\n')
    assert result['returncode'] == 0
    assert 0.3 <= result['wall_time_s'] < RUN_TIMEOUT_S, result


def test_each_training_attempt_is_appended_to_the_log_and_judged_by_its_own_lines(
    tmp_path, monkeypatch
):
    first, _ = train_with(tmp_path, monkeypatch, 'echo "ValueError: bad"\nexit 1\n')
    second, log = train_with(tmp_path, monkeypatch, 'echo env steps 200\nexit 1\n')
    assert first['error'] == 'exit code 1: ValueError: bad'
    assert second['error'] == 'exit code 1: env steps 200'
    assert log.count('=== ') == 2
    assert log.index('ValueError: bad') < log.index('env steps 200')
