"""A run directory from someone else: resuming or playing it runs none of its code unless
``--trust_imports`` says so (its checkpoints: test_checkpoint, test_play)."""

import os
import re
import shutil
import sys

import pytest
import torch

from cli_helpers import assert_ok, checkpoint_steps, run_train, tree_digest
from test_play import tiny_pendulum_run

# A module name nothing else imports, so that no process of the tests has it already.
PAYLOAD = 'sent_payload_7f3a'


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
    """A Pendulum run of 2 env steps, one evaluation episode of 5 steps."""
    return tiny_pendulum_run(
        tmp_path_factory,
        'untrusted',
        ['TrainerConfig.num_eval_episodes=1', 'create_environment.max_episode_steps=5'],
    )


def sent_run(tiny_run, tmp_path, case):
    """``(download, run, marker)``: a copy of ``tiny_run`` unpacked in ``download`` (where
    the user works) with a config.gin changed as ``case`` says, its payload beside it or
    inside it. The payload writes ``marker`` when it runs."""
    download = tmp_path / 'download'
    run = download / 'run'
    shutil.copytree(tiny_run, run)
    marker = tmp_path / 'ran'
    payload = f'import pathlib\npathlib.Path({str(marker)!r}).write_text("ran")\n'
    (download / f'{PAYLOAD}.py').write_text(payload)
    (run / 'evil.py').write_text(payload)
    # What an installed env imports that is not installed here (gymnasium's box2d envs).
    (download / 'Box2D.py').write_text(payload)
    config = (run / 'config.gin').read_text()
    if case == 'import_beside':
        config = f'import {PAYLOAD}\n' + config
    elif case == 'import_inside':
        config = 'import run.evil\n' + config
    elif case == 'dynamic_registration':
        config = (
            'from __gin__ import dynamic_registration\nimport os\n'
            f"os.system.command = 'touch {marker}'\n" + config
        )
    elif case == 'installed_env_imports_beside':
        old = "create_environment.env_name = 'Pendulum-v1'"
        assert old in config
        config = config.replace(old, "create_environment.env_name = 'LunarLanderContinuous-v3'")
    elif case == 'env_id_through_reference':  # no string bound: gin.singleton returns it
        old = "create_environment.env_name = 'Pendulum-v1'"
        assert old in config
        config = config.replace(
            old,
            'create_environment.env_name = @env_id/gin.singleton()\n'
            'env_id/gin.singleton.constructor = @ID/gin.macro\n'
            f"ID = '{PAYLOAD}:Pendulum-v1'",
        )
    else:  # an env id naming a module to import
        old = "create_environment.env_name = 'Pendulum-v1'"
        assert old in config
        config = config.replace(old, f"create_environment.env_name = '{PAYLOAD}:Pendulum-v1'")
    (run / 'config.gin').write_text(config)
    # The run as trained with that config: its checkpoints keep it.
    for model in run.glob('checkpoints/*/model.pt'):
        state = torch.load(model, weights_only=True)
        state['config_text'] = config
        torch.save(state, model)
    return download, run, marker


def tool(name, run, download, *args):
    command = [sys.executable, '-m', f'alf_lite.bin.{name}', '--root_dir', str(run), *args]
    return run_train(command, cwd=download)


CASES = {
    'import_beside': f'`import {PAYLOAD}` (file ',
    'import_inside': '`import run.evil` (file ',
    'dynamic_registration': '`from __gin__ import dynamic_registration` (file ',
    'env_id_module': f"The env id '{PAYLOAD}:Pendulum-v1' (file ",
    'env_id_through_reference': 'is what @env_id/gin.singleton() returns when it runs',
    # The working directory is off sys.path: the import fails as if it were not there.
    'installed_env_imports_beside': 'Box2D is not installed',
}


@pytest.mark.parametrize('case', CASES)
def test_resuming_or_playing_a_config_gin_that_would_run_code_is_refused_and_runs_none(
    tiny_run, tmp_path, case
):
    download, run, marker = sent_run(tiny_run, tmp_path, case)
    progress = (run / 'progress.csv').read_text()
    for name, args in (
        ('play', []),
        ('train', ['--gin_param', 'TrainerConfig.num_env_steps=3']),
    ):
        result = tool(name, run, download, *args)
        assert CASES[case] in result.stderr, (name, result.stderr[-3000:])
        if case == 'installed_env_imports_beside':  # an env that cannot be built
            assert result.returncode == 1, (name, result.stderr[-3000:])
        else:
            assert result.returncode == 2, (name, result.stderr[-3000:])
            assert '--trust_imports' in result.stderr
        assert 'Traceback' not in result.stderr
        assert not marker.exists(), name
    if case.startswith('import'):
        where = download / f'{PAYLOAD}.py' if case == 'import_beside' else run
        assert f'would run the code of {where},' in result.stderr, result.stderr
    assert checkpoint_steps(run) == [2]
    assert (run / 'progress.csv').read_text() == progress


def test_trust_imports_lets_a_run_import_its_own_module(tiny_run, tmp_path):
    download, run, marker = sent_run(tiny_run, tmp_path, 'import_beside')
    played = tool('play', run, download, '--trust_imports')
    assert_ok(played)
    assert marker.read_text() == 'ran'
    marker.unlink()
    resumed = tool(
        'train', run, download, '--trust_imports', '--gin_param', 'TrainerConfig.num_env_steps=3'
    )
    assert_ok(resumed)
    assert marker.read_text() == 'ran'
    assert checkpoint_steps(run) == [2, 3]


def test_train_with_the_gin_file_given_trusts_its_imports(tiny_run, tmp_path):
    download, run, marker = sent_run(tiny_run, tmp_path, 'import_beside')
    # The user's own gin file: a resume that gives it imports what it says.
    gin_file = download / 'mine.gin'
    shutil.copy(run / 'config.gin', gin_file)
    result = tool(
        'train',
        run,
        download,
        '--gin_file',
        str(gin_file),
        '--gin_param',
        'TrainerConfig.num_env_steps=3',
    )
    assert_ok(result)
    assert marker.read_text() == 'ran'


def make_link(run, victim, where):
    """Put a link to ``victim`` (a directory holding a file) at ``run / where``, or a FIFO."""
    path = run / where
    if where == 'progress.csv':  # a FIFO: opening it would block
        path.unlink()
        os.mkfifo(path)
        return
    if path.is_dir():
        shutil.rmtree(path)
    path.symlink_to(victim, target_is_directory=True)


@pytest.mark.parametrize(
    'where',
    [
        'checkpoints',
        'train',
        'eval',
        'checkpoints/ckpt-1',
        'checkpoints/last_good-3',
        'progress.csv',
    ],
)
def test_train_refuses_a_run_whose_entries_are_links_and_changes_nothing(tiny_run, tmp_path, where):
    run = tmp_path / 'run'
    shutil.copytree(tiny_run, run)
    victim = tmp_path / 'victim'
    victim.mkdir()
    for name in ('replay_buffer.pt', 'model.pt', 'events.out.tfevents.1.x', '.tmp-1'):
        (victim / name).write_text('mine')
    make_link(run, victim, where)
    before = sorted(str(p.relative_to(run)) for p in run.rglob('*'))
    result = run_train(
        [sys.executable, '-m', 'alf_lite.bin.train', '--root_dir', str(run)]
        + ['--gin_param', 'TrainerConfig.num_env_steps=3']
    )
    assert result.returncode == 2, result.stderr[-3000:]
    kind = 'is not a regular file' if where == 'progress.csv' else 'is a symbolic link'
    assert f'error: {run / where} {kind}' in result.stderr, result.stderr[-3000:]
    assert sorted(str(p.relative_to(run)) for p in run.rglob('*')) == before
    assert {p.name: p.read_text() for p in victim.iterdir()} == {
        name: 'mine'
        for name in ('replay_buffer.pt', 'model.pt', 'events.out.tfevents.1.x', '.tmp-1')
    }


@pytest.mark.parametrize('name', ['config.gin', 'operative_config.gin', 'device.txt'])
def test_train_refuses_a_run_whose_replaced_file_is_a_directory_and_changes_nothing(
    tiny_run, tmp_path, name
):
    run = tmp_path / 'run'
    shutil.copytree(tiny_run, run)
    path = run / name
    if path.exists():
        path.unlink()
    path.mkdir()
    (path / 'mine').write_text('mine')
    before = tree_digest(run)
    result = run_train(
        [sys.executable, '-m', 'alf_lite.bin.train', '--root_dir', str(run)]
        + ['--gin_param', 'TrainerConfig.num_env_steps=3']
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert f'error: {path} is not a regular file' in result.stderr, result.stderr[-3000:]
    assert tree_digest(run) == before


def test_a_step_spelt_otherwise_than_train_writes_it_names_no_checkpoint_or_kept_config(
    tiny_run, tmp_path
):
    # A leading zero, other digits than ASCII's, a newline after it: read as the number,
    # such a name led to config-until-9.gin or ckpt-2, which it is not.
    run = tmp_path / 'run'
    shutil.copytree(tiny_run, run)
    odd = ['config-until-0009.gin', 'config-until-\u0669.gin', 'config-until-9.gin\n']
    for name in odd:
        (run / name).write_text('mine')
    shutil.copytree(run / 'checkpoints' / 'ckpt-2', run / 'checkpoints' / 'ckpt-\uff12')
    assert_ok(tool('play', run, tmp_path))
    assert_ok(tool('train', run, tmp_path, '--gin_param', 'TrainerConfig.num_env_steps=3'))
    assert checkpoint_steps(run) == [2, 3]
    assert all((run / name).read_text() == 'mine' for name in odd)


def test_a_left_progress_tmp_link_is_not_written_through(tiny_run, tmp_path):
    run = tmp_path / 'run'
    shutil.copytree(tiny_run, run)
    victim = tmp_path / 'victim.txt'
    victim.write_text('mine')
    (run / 'progress.csv.tmp').symlink_to(victim)
    result = run_train(
        [sys.executable, '-m', 'alf_lite.bin.train', '--root_dir', str(run)]
        + ['--gin_param', 'TrainerConfig.num_env_steps=3']
    )
    assert_ok(result)
    assert victim.read_text() == 'mine'
    assert (run / 'progress.csv').is_file() and not (run / 'progress.csv').is_symlink()


def test_a_sweep_runs_no_module_of_its_logs_and_writes_through_no_log_link(tmp_path):
    from test_grid_search import run_grid, write_inputs

    write_inputs(
        tmp_path, {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 2}
    )
    root_dir = tmp_path / 'runs'
    logs = root_dir / 'logs'
    logs.mkdir(parents=True)
    marker = tmp_path / 'ran'
    # train runs with the logs directory as its working directory.
    (logs / 'gin.py').write_text(f'import pathlib\npathlib.Path({str(marker)!r}).write_text("x")\n')
    victim = tmp_path / 'victim.txt'
    victim.write_text('mine')
    (logs / 'seed=1.log').symlink_to(victim)
    result = run_grid(tmp_path, root_dir)
    assert result.returncode == 1, result.stderr[-3000:]
    assert not marker.exists()
    assert victim.read_text() == 'mine'
    assert 'seed=0: finished' in result.stdout, result.stdout
    assert re.search(
        r'seed=1: failed in \d+ s \(OSError: .*Too many levels of symbolic links', result.stdout
    ), result.stdout
    # The log named by its whole path.
    assert f"links: '{logs / 'seed=1.log'}'" in result.stdout, result.stdout


def test_a_sweep_writes_no_log_through_a_logs_directory_that_is_a_link(tmp_path):
    from test_grid_search import run_grid, write_inputs

    write_inputs(
        tmp_path, {'parameters': {'SacAlgorithm.target_update_tau': [0.005]}, 'repeats': 1}
    )
    root_dir = tmp_path / 'runs'
    root_dir.mkdir()
    victim = tmp_path / 'victim'
    victim.mkdir()
    (victim / 'seed=0.log').write_text('mine')
    (root_dir / 'logs').symlink_to(victim, target_is_directory=True)
    result = run_grid(tmp_path, root_dir)
    assert result.returncode == 1, result.stderr[-3000:]
    assert {p.name: p.read_text() for p in victim.iterdir()} == {'seed=0.log': 'mine'}
    assert not (root_dir / 'seed=0').exists()
    assert re.search(
        r'seed=0: failed in \d+ s \(OSError: .*Too many levels of symbolic links: '
        rf"'{re.escape(str(root_dir / 'logs'))}'\)",
        result.stdout,
    ), result.stdout
