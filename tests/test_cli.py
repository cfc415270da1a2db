"""What the command-line tools promise about bad input: a flag, or a config value of train."""

import signal
import sys

import pytest

from alf_lite.bin.cli import user_message
from cli_helpers import (
    EXAMPLES,
    PENDULUM,
    run_python,
    run_train,
    train_command,
    train_env,
    with_prelude,
)

TOOLS = ['train', 'play', 'plot', 'grid_search']


def run_tool(tool, args, cwd):
    return run_train([sys.executable, '-m', f'alf_lite.bin.{tool}', *args], cwd=cwd)


def assert_refused(tool, args, cwd, line):
    """``tool`` with ``args`` exits 2 with ``line`` alone on stderr, writing nothing in ``cwd``."""
    result = run_tool(tool, args, cwd)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [line], result.stderr[-3000:]
    assert list(cwd.iterdir()) == []


# A flag of each tool given a value of the wrong type, and the message's start.
BAD_VALUE = {
    'train': (['--start_over=maybe'], 'error: flag --start_over=maybe: '),
    'play': (['--num_episodes', 'abc'], 'error: flag --num_episodes=abc: '),
    'plot': (['--last_n', 'abc'], 'error: flag --last_n=abc: '),
    'grid_search': (['--max_workers', 'abc'], 'error: flag --max_workers=abc: '),
}


@pytest.mark.parametrize('tool', TOOLS)
def test_bad_flag_exits_2_naming_it_and_writes_nothing(tool, tmp_path):
    for args, message in (
        (['--bogus'], "error: Unknown command line flag 'bogus'"),
        BAD_VALUE[tool],
    ):
        result = run_tool(tool, args, tmp_path)
        assert result.returncode == 2, result.stderr[-3000:]
        assert message in result.stderr and '--help lists the flags' in result.stderr
        assert 'Traceback' not in result.stderr
    assert list(tmp_path.iterdir()) == []


# The flags each tool requires, and where it would write.
REQUIRED = {
    'train': ['--root_dir', 'run'],
    'play': ['--root_dir', 'run'],
    'grid_search': ['--root_dir', 'run', '--search_config', 'grid.json'],
}
GIN_PARAM_HINT = (
    ' A --gin_param takes one argument: quote a binding that holds spaces whole, e.g. '
    "--gin_param 'TrainerConfig.num_env_steps = 1000'."
)


@pytest.mark.parametrize('tool', sorted(REQUIRED))
@pytest.mark.parametrize(
    'args, stray',
    [
        (['--gin_param', 'TrainerConfig.num_env_steps', '=', '1000'], '= 1000'),
        (['--gin_param', 'TrainerConfig.num_env_steps=', '1000'], '1000'),
        (['--gin_param', 'CriticNetwork.hidden_layers=(64,', '64)'], "'64)'"),
    ],
    ids=['spaces around =', 'space after =', 'space in a tuple'],
)
def test_a_gin_param_split_by_the_shell_is_named_with_how_to_quote_it(tool, args, stray, tmp_path):
    result = run_tool(tool, REQUIRED[tool] + args, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f'error: unexpected arguments: {stray}.{GIN_PARAM_HINT}'
    ), result.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('tool', ['train', 'grid_search'])
def test_gin_files_after_one_gin_file_flag_are_named_with_how_to_give_them(tool, tmp_path):
    args = REQUIRED[tool] + ['--gin_file', 'a.gin', 'b.gin', 'c.gin']
    result = run_tool(tool, args, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        'error: unexpected arguments: b.gin c.gin. Give each gin file with a --gin_file of its '
        'own: --gin_file a.gin --gin_file b.gin.'
    ), result.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []


# A path flag given as '' (a quoted shell variable that is unset), the rest of the arguments.
EMPTY_PATHS = {
    'train --root_dir': ('train', ['--root_dir', '', '--gin_file', str(PENDULUM)]),
    'train --gin_file': ('train', ['--root_dir', 'run', '--gin_file', '']),
    'grid_search --root_dir': (
        'grid_search',
        ['--root_dir', '', '--search_config', 'grid.json', '--gin_file', str(PENDULUM)],
    ),
    'grid_search --search_config': ('grid_search', ['--root_dir', 'run', '--search_config', '']),
    'play --root_dir': ('play', ['--root_dir', '']),
    'play --record_file': ('play', ['--root_dir', 'run', '--record_file', '']),
    'plot --out': ('plot', ['run', '--out', '']),
}


@pytest.mark.parametrize('case', sorted(EMPTY_PATHS))
def test_an_empty_path_flag_is_named_before_anything_is_read_or_written(case, tmp_path):
    # Before, train and grid_search took '' for the working directory and trained there.
    tool, args = EMPTY_PATHS[case]
    flag = case.split()[1]
    line = f"error: {flag} is empty (''): give a path. A shell variable in it may be unset."
    assert_refused(tool, args, tmp_path, line)


@pytest.mark.parametrize('path', ['', '  '])
def test_an_empty_path_among_plots_runs_is_named(path, tmp_path):
    line = (
        f'error: a run to plot is empty ({path!r}): give a path. A shell variable in it may be '
        'unset.'
    )
    assert_refused('plot', ['run', path], tmp_path, line)


@pytest.mark.parametrize('tool', sorted(REQUIRED))
@pytest.mark.parametrize('binding', ['', '  '])
def test_an_empty_gin_param_is_named_before_anything_is_read_or_written(tool, binding, tmp_path):
    # Before, gin took it for no binding at all: the run trained without the one meant.
    args = REQUIRED[tool] + ['--gin_param', 'TrainerConfig.num_env_steps=9', '--gin_param', binding]
    line = (
        f'error: --gin_param is empty ({binding!r}): give a binding. A shell variable in it '
        'may be unset.'
    )
    assert_refused(tool, args, tmp_path, line)


# A setting given as '', which the tool took for its default: what the line asks for.
EMPTY_SETTINGS = {
    # The sweep ran as local processes, where a cluster was meant.
    'grid_search --ray_address': (
        ['--root_dir', 'run', '--search_config', 'grid.json'],
        "'auto' or the head's host:port (without the flag: local processes)",
    ),
    # The video was recorded at the env's own size.
    'play --render_size': (
        ['--root_dir', 'run', '--record_file', 'a.mp4'],
        "'W,H' or one number (without the flag: the env's own size)",
    ),
    # All runs were drawn as one group.
    'plot --group_by': (['run'], "'config', 'none' or comma-separated gin parameters"),
}


@pytest.mark.parametrize('case', sorted(EMPTY_SETTINGS))
def test_an_empty_setting_is_refused_not_taken_for_its_default(case, tmp_path):
    tool, flag = case.split()
    args, given = EMPTY_SETTINGS[case]
    line = f"error: {flag} is empty (''): give {given}. A shell variable in it may be unset."
    assert_refused(tool, args + [flag, ''], tmp_path, line)


def test_a_group_by_of_commas_alone_is_refused_not_taken_for_one_group(tmp_path):
    for seed in (0, 1):
        run = tmp_path / f'run{seed}'
        run.mkdir()
        (run / 'progress.csv').write_text('env_steps,eval/AverageReturn\n100,-5\n200,-4\n')
        (run / 'config.gin').write_text(f'TrainerConfig.random_seed = {seed}\n')
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_tool('plot', ['run0', 'run1', '--group_by', ' , ', '--out', 'c.png'], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        "error: --group_by ' , ' names no gin parameter: give 'config', 'none' or "
        'comma-separated gin parameters'
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# A path flag joined to its ~ by '=' (the shell leaves that ~ as it is), what HOME holds for it,
# and the line that shows the tool read the file there.
TILDE_PATHS = {
    'train --gin_file': (
        ['--root_dir', 'run', '--gin_file=~/bad.gin'],
        ('bad.gin', f"include '{PENDULUM}'\nTrainerConfig.mini_batch_size = -1\n"),
        'mini_batch_size must be positive',
    ),
    'grid_search --search_config': (
        ['--root_dir', 'run', '--search_config=~/grid.json', '--gin_file', str(PENDULUM)],
        ('grid.json', '{"parameters": {}}'),
        'must hold a JSON object with exactly the keys "parameters" and "repeats"',
    ),
    'plot --out': (['--out=~/c.png', 'runs'], None, None),
}


@pytest.mark.parametrize('case', sorted(TILDE_PATHS))
def test_a_path_flag_joined_to_a_tilde_is_taken_in_home_not_in_a_directory_named_tilde(
    case, tmp_path
):
    # Before, plot made a directory named ~ in the working directory (which an rm -rf ~
    # meant for it would take for the home) and wrote there; train and grid_search looked
    # for ./~/<file>.
    tool = case.split()[0]
    args, home_file, line = TILDE_PATHS[case]
    home, cwd = tmp_path / 'home', tmp_path / 'cwd'
    home.mkdir()
    cwd.mkdir()
    if home_file is not None:
        (home / home_file[0]).write_text(home_file[1])
    else:
        run = cwd / 'runs' / 'a'
        run.mkdir(parents=True)
        (run / 'progress.csv').write_text('env_steps,eval/AverageReturn\n100,-5\n200,-4\n')
        (run / 'config.gin').write_text('TrainerConfig.random_seed = 0\n')
    result = run_train(
        [sys.executable, '-m', f'alf_lite.bin.{tool}', *args],
        cwd=cwd,
        env=dict(train_env(), HOME=str(home)),
    )
    assert not (cwd / '~').exists(), result.stderr[-3000:]
    if line is None:
        assert result.returncode == 0, result.stderr[-3000:]
        assert (home / 'c.png').is_file() and (home / 'c.csv').is_file()
    else:
        assert result.returncode == 2, result.stderr[-3000:]
        assert line in result.stderr.splitlines()[-1], result.stderr[-3000:]
    assert sorted(p.name for p in cwd.iterdir()) == (['runs'] if line is None else [])


def test_a_quoted_tilde_in_a_run_to_plot_is_taken_in_home(tmp_path):
    home, cwd = tmp_path / 'home', tmp_path / 'cwd'
    run = home / 'runs' / 'a'
    run.mkdir(parents=True)
    cwd.mkdir()
    (run / 'progress.csv').write_text('env_steps,eval/AverageReturn\n100,-5\n200,-4\n')
    (run / 'config.gin').write_text('TrainerConfig.random_seed = 0\n')
    result = run_train(
        [sys.executable, '-m', 'alf_lite.bin.plot', '~/runs', '--out', 'c.png'],
        cwd=cwd,
        env=dict(train_env(), HOME=str(home)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in cwd.iterdir()) == ['c.csv', 'c.png']


# A flag whose value is missing (an unquoted shell variable that is unset), so that the flag
# after it would be taken for its value.
VALUE_MISSING = {
    'train --root_dir --gin_file': ('train', ['--root_dir', '--gin_file', str(PENDULUM)]),
    'train --gin_file --root_dir': ('train', ['--gin_file', '--root_dir', 'run']),
    'play --record_file -root_dir': ('play', ['--record_file', '-root_dir', 'run']),
    'grid_search --search_config --gin_param': (
        'grid_search',
        ['--root_dir', 'run', '--search_config', '--gin_param', 'TrainerConfig.num_env_steps=9'],
    ),
}


@pytest.mark.parametrize('case', sorted(VALUE_MISSING))
def test_a_flag_followed_by_a_flag_is_named_as_missing_its_value(case, tmp_path):
    # Before: '--gin_file' became the root_dir, and the gin file an unexpected argument.
    tool, args = VALUE_MISSING[case]
    _, flag, after = case.split()
    line = (
        f'error: {flag} has no value: the argument after it, {after}, is a flag. A shell '
        'variable in its value may be unset.'
    )
    assert_refused(tool, args, tmp_path, line)


def test_a_value_that_only_starts_with_a_dash_is_taken(tmp_path):
    # -1 is no flag: --smoothing takes it (and refuses it).
    line = 'error: --smoothing, --last_n and --num_bootstrap must be positive'
    assert_refused('plot', ['run', '--smoothing', '-1'], tmp_path, line)


def test_two_missing_required_flags_are_named_on_one_line(tmp_path):
    # grid_search requires two flags; absl names each missing one on a line of its own.
    result = run_tool('grid_search', [], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        'error: flag --search_config=None: Flag --search_config must have a value other than '
        'None.; flag --root_dir=None: Flag --root_dir must have a value other than None. '
        '(--help lists the flags)'
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('tool', TOOLS)
@pytest.mark.parametrize('flag', ['--help', '-h'])
def test_help_prints_the_usage_and_exits_0(tool, flag, tmp_path):
    result = run_tool(tool, [flag], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f'python -m alf_lite.bin.{tool}' in result.stdout
    assert 'flags:' in result.stdout.lower()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('flag', ['-?', '--helpshort', '--helpfull'])
def test_every_help_flag_prints_the_usage_and_exits_0(flag, tmp_path):
    result = run_tool('train', [flag], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'python -m alf_lite.bin.train' in result.stdout and '--root_dir' in result.stdout
    # The flags of absl's own modules too, for --helpfull only.
    assert ('absl.logging:' in result.stdout) == (flag == '--helpfull'), result.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('tool', TOOLS)
@pytest.mark.parametrize('flag', ['-help', '--help=true', '-helpfull', '--helpxml'])
def test_help_in_any_spelling_absl_reads_exits_0(tool, flag, tmp_path):
    # absl takes one dash or two, and a boolean's value: each asks for the help as --help.
    result = run_tool(tool, [flag], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert '--root_dir' in result.stdout or tool == 'plot', result.stdout[-3000:]
    assert '--out' in result.stdout or tool != 'plot', result.stdout[-3000:]
    assert 'error' not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_root_dir_starting_with_a_tilde_is_in_the_home_directory(tmp_path, monkeypatch):
    # The shell leaves `--root_dir=~/...` as it is: the tools expand it.
    home = tmp_path / 'home'
    home.mkdir()
    (home / 'afile').write_text('mine')
    monkeypatch.setenv('HOME', str(home))
    # A bad binding: a train that missed the file would stop at once all the same.
    bad = ['--gin_file', str(PENDULUM), '--gin_param', 'TrainerConfig.mini_batch_size=-1']
    train = run_tool('train', ['--root_dir=~/afile', *bad], tmp_path)
    assert train.returncode == 2, train.stderr[-3000:]
    assert f'error: --root_dir {home / "afile"} is a file' in train.stderr, train.stderr[-3000:]
    play = run_tool('play', ['--root_dir=~/run'], tmp_path)
    assert play.returncode == 2, play.stderr[-3000:]
    assert f'error: root_dir {home / "run"} does not exist.' in play.stderr, play.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ['home']


def test_a_message_is_told_without_importing_gin():
    # A stop signal can cut gin's import short, and the tool then tells its message: a
    # user_message that imported alf_lite.config (which reads gin.config at import) failed
    # with an AttributeError instead of the signal's exit code.
    script = (
        'import sys\n'
        'from alf_lite.bin.cli import user_message\n'
        'message = user_message("bad\\n  In call to configurable \'SacAlgorithm\' (<class>)")\n'
        "print(message, 'gin' in sys.modules, 'alf_lite.config' in sys.modules)\n"
    )
    result = run_python(script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == 'SacAlgorithm: bad False False\n'


def test_an_error_that_names_its_configurable_names_it_once(tmp_path):
    root_dir = tmp_path / 'run'
    params = ['TrainerConfig.mini_batch_size = -1']
    result = run_train(train_command(root_dir, [PENDULUM], params))
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'error: TrainerConfig.mini_batch_size must be positive, got -1.' in (
        result.stderr.splitlines()
    ), result.stderr[-3000:]
    assert not root_dir.exists()


# A binding of the wrong type, and what the message says of it besides the --gin_param.
WRONG_TYPE = {
    'CriticNetwork.hidden_layers = 256': "is 256 (int), but 'hidden_layers' of "
    "'CriticNetwork' takes Sequence[int] (its default is (256, 256))",
    "actor/Adam.lr = 'fast'": "is 'fast' (str), but 'lr' of 'Adam' takes float | Tensor",
    # Found before any env process starts, not when one builds the env.
    "ICubWalkEnv.control_mode = 'bogus'": "is 'bogus' (str), but 'control_mode' of "
    "'ICubWalkEnv' takes Literal['position_residual', 'velocity', 'torque']",
}


@pytest.mark.parametrize('binding', WRONG_TYPE)
def test_train_names_a_value_of_the_wrong_type_and_its_binding_before_writing(binding, tmp_path):
    root_dir = tmp_path / 'run'
    result = run_train(train_command(root_dir, [EXAMPLES / 'sac_pendulum.gin'], [binding]))
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith('error: ')]
    assert f'--gin_param {binding!r}' in line and WRONG_TYPE[binding] in line
    assert 'Traceback' not in result.stderr
    assert not root_dir.exists()


@pytest.mark.parametrize(
    'example, algorithm',
    [('sac', 'SacAlgorithm'), ('td3', 'Td3Algorithm'), ('ddpg', 'DdpgAlgorithm')],
)
def test_train_refuses_num_critic_replicas_below_1_naming_it(example, algorithm, tmp_path):
    root_dir = tmp_path / 'run'
    binding = f'{algorithm}.num_critic_replicas = 0'
    result = run_train(train_command(root_dir, [EXAMPLES / f'{example}_pendulum.gin'], [binding]))
    assert result.returncode == 2, result.stderr[-3000:]
    assert f'error: {algorithm}: num_critic_replicas must be an integer >= 1, got 0' in (
        result.stderr
    )
    assert 'num_replicas must' not in result.stderr
    assert not root_dir.exists()


@pytest.mark.parametrize(
    'binding, message',
    [
        ('policy_update_period = 0', 'policy_update_period must be an integer >= 1, got 0'),
        ('gamma = 1.5', 'gamma must be in [0, 1], got 1.5'),
        (
            'critic_l2_weight_decay = -1.0',
            'critic_l2_weight_decay must be a finite number >= 0, got -1.0',
        ),
    ],
)
def test_td3_names_itself_and_the_parameter_given_in_its_errors(binding, message, tmp_path):
    # TD3 builds on DDPG's constructor, which sets target_update_period from
    # policy_update_period: an error from there would name DDPG and the wrong parameter.
    root_dir = tmp_path / 'run'
    command = train_command(root_dir, [EXAMPLES / 'td3_pendulum.gin'], [f'Td3Algorithm.{binding}'])
    result = run_train(command)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f'error: Td3Algorithm: {message}' in result.stderr, result.stderr[-3000:]
    assert not root_dir.exists()


@pytest.mark.parametrize(
    'binding, message',
    [
        (
            'exploration_noise = @GaussianNoise',
            'Td3Algorithm.exploration_noise is the class GaussianNoise, not a noise object',
        ),
        (
            'actor_optimizer = @actor/CriticNetwork',
            'Td3Algorithm.actor_optimizer is the class CriticNetwork, which is no optimizer',
        ),
    ],
)
def test_td3s_noise_and_optimizer_refusals_name_td3_alone(binding, message, tmp_path):
    # Raised in DDPG's constructor, which TD3's calls: gin's trace names DdpgAlgorithm
    # innermost, which the message, naming Td3Algorithm's parameter, needs not be prefixed by.
    root_dir = tmp_path / 'run'
    command = train_command(root_dir, [EXAMPLES / 'td3_pendulum.gin'], [f'Td3Algorithm.{binding}'])
    result = run_train(command)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f'error: {message}' in result.stderr.splitlines()[-1], result.stderr[-3000:]
    assert 'DdpgAlgorithm' not in result.stderr.splitlines()[-1], result.stderr[-3000:]
    assert not root_dir.exists()


@pytest.mark.parametrize('modules', [['user_policies'], ['user_policies', 'other_policies']])
def test_an_error_naming_a_word_that_begins_with_an_outer_configurable_names_where_it_was_raised(
    modules, tmp_path
):
    # A user's configurable 'policy' builds TD3, whose refusal begins with policy_update_period:
    # 'policy' is no subclass of Td3Algorithm (nor known to be one where two modules have a
    # 'policy'), so the message still names Td3Algorithm.
    for module in modules:
        (tmp_path / f'{module}.py').write_text(
            'import gin\n\nfrom alf_lite.algorithms.td3 import Td3Algorithm\n\n\n'
            '@gin.configurable\ndef policy(**kwargs):\n    return Td3Algorithm(**kwargs)\n'
        )
    root_dir = tmp_path / 'run'
    params = [f'import {module}' for module in modules] + [
        'TrainerConfig.algorithm_ctor = @user_policies.policy',
        'Td3Algorithm.policy_update_period = 0',
    ]
    result = run_train(
        train_command(root_dir, [EXAMPLES / 'td3_pendulum.gin'], params), cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        'error: Td3Algorithm: policy_update_period must be an integer >= 1, got 0'
    ), result.stderr[-3000:]
    assert not root_dir.exists()


def test_train_names_hidden_layers_of_the_wrong_type_given_through_a_macro_in_a_tuple(tmp_path):
    # Known only when the network is built (a macro standing alone is checked at parse).
    root_dir = tmp_path / 'run'
    params = ['WIDTH = 2.5', 'CriticNetwork.hidden_layers = (%WIDTH, 256)']
    result = run_train(train_command(root_dir, [EXAMPLES / 'sac_pendulum.gin'], params))
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        'error: CriticNetwork: hidden_layers must be positive integer widths, e.g. (256, 256), '
        'got (2.5, 256)'
    ) in result.stderr
    assert not root_dir.exists()


_FAIL_ON_A_CLOSED_TERMINAL = """
import os
terminal, stderr = os.openpty()
os.dup2(stderr, 2)
os.close(terminal)  # writes to stderr fail (EIO) from here on
from alf_lite.bin.cli import EXIT_SIGNAL_BASE, fail
fail('SIGHUP arrived outside the training loop', exit_code=EXIT_SIGNAL_BASE + 1)
"""


def test_a_tool_failing_on_a_closed_terminal_exits_with_its_exit_code():
    # The SIGHUP of a closed terminal: the message cannot be written, the exit code still is.
    assert run_python(_FAIL_ON_A_CLOSED_TERMINAL).returncode == 129


_PRINT_ON_A_CLOSED_TERMINAL = """
import os
terminal, tty = os.openpty()
os.dup2(tty, 1)
os.dup2(tty, 2)
os.close(terminal)  # writes to stdout and stderr fail (EIO) from here on
from alf_lite.bin.cli import print_out
print_out('a line for the closed terminal')
print_out('and the next')
"""


def test_output_to_a_closed_terminal_is_dropped_where_its_warning_cannot_be_written_either():
    # stdout's failed write is said on stderr, which fails too: both are dropped, no traceback.
    assert run_python(_PRINT_ON_A_CLOSED_TERMINAL).returncode == 0


# Sends SIGTERM while Python runs its exit-time callbacks, after the tool's main ended.
_SIGNAL_AT_EXIT = """import atexit, os, signal, time
def signal_at_exit():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
atexit.register(signal_at_exit)
"""


@pytest.mark.parametrize('tool', TOOLS)
def test_a_signal_while_a_tool_exits_ends_it_at_once_with_one_line(tool, tmp_path):
    # The handler of before main is back in place once main ended; the SystemExit it raised
    # in an exit-time callback (torch's, a weakref finalizer's) was printed as ignored, with
    # its traceback, and the tool exited with its own code.
    command = [sys.executable, '-m', f'alf_lite.bin.{tool}', '--root_dir', str(tmp_path / 'no')]
    result = run_train(with_prelude(command, _SIGNAL_AT_EXIT, f'alf_lite.bin.{tool}'))
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr and 'ignored' not in result.stderr, result.stderr
    assert 'SIGTERM' in result.stderr.strip().splitlines()[-1]


# A tool (ended by run_tool) or a benchmark script (by exit_with) whose main leaves an object
# in a reference cycle, with a weakref finalizer.
_OBJECT_LEFT_AT_EXIT = """import atexit, gc, sys, weakref
from alf_lite.bin.cli import exit_with, run_tool
class Left:
    pass
def main(*argv):
    global left
    left = Left()
    left.itself = left
    weakref.finalize(left, print, 'finalized')
atexit.register(lambda: print('in the passes:', any(o is left for o in gc.get_objects())))
sys.argv = ['tool']
{end}(main)
"""


@pytest.mark.parametrize('end', ['run_tool', 'exit_with'])
def test_what_a_tools_main_leaves_is_out_of_the_collectors_passes_and_still_finalized(end):
    # The collector's passes over torch's objects took most of a second of every exit.
    result = run_python(_OBJECT_LEFT_AT_EXIT.replace('{end}', end))
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(result.stdout.splitlines()) == ['finalized', 'in the passes: False'], (
        result.stdout
    )


def test_a_value_of_hundreds_of_digits_is_shortened_in_the_message(tmp_path):
    digits = '9' * 700
    result = run_train(
        train_command(tmp_path / 'run', [PENDULUM], [f'SacAlgorithm.gamma={digits}'])
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        'error: SacAlgorithm: gamma must be in [0, 1], got 99999999999999999999... (700 digits)'
    )
    # Runs of digits a message means are left whole.
    assert user_message('needs 25000000000 bytes') == 'needs 25000000000 bytes'
