"""benchmarks/{learning,launcher,sb3_runner}.py: suites, matched SB3 settings, runs, report."""

import contextlib
import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import gin
import pytest

from alf_lite.run_dir import RunDirLock
from benchmarks import launcher, learning, sb3_common, sb3_runner
from cli_helpers import (
    REPO_ROOT,
    RUN_TIMEOUT_S,
    ClockSetBack,
    checkpoint_steps,
    run_python,
    run_train,
    train_env,
)

SCRIPT = REPO_ROOT / 'benchmarks' / 'learning.py'
TINY_STEPS = 1200  # above Pendulum's 1000 random steps: 200 updates


def run_script(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        cwd=REPO_ROOT,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def _ok(result):
    assert result.returncode == 0, (
        f'exit {result.returncode}\n--- stdout ---\n'
        f'{result.stdout[-3000:]}\n--- stderr ---\n'
        f'{result.stderr[-3000:]}'
    )
    return result


def _done(**fields):
    """A finished run's done.json record: ``fields`` over numbers that say little."""
    record = dict(
        finished='2026-12-01 00:00:00',
        env_steps=1000,
        final_eval_return=0.0,
        final_eval_return_last3=0.0,
        wall_time_s=1.0,
    )
    return dict(record, **fields)


def _progress(run_dir):
    with open(run_dir / 'progress.csv', newline='') as f:
        return list(csv.DictReader(f))


def test_suites_have_their_runs_seeds_and_lengths():
    pendulum = learning.suite_runs('pendulum')
    assert {r.name for r in pendulum} == {'alf_sac', 'alf_ddpg', 'alf_td3', 'sb3_sac', 'sb3_td3'}
    assert sorted({r.seed for r in pendulum}) == [0, 1, 2, 3, 4]
    assert {r.num_env_steps for r in pendulum} == {20_000}
    hopper = learning.suite_runs('hopper')
    assert {r.name for r in hopper} == {'alf_sac', 'alf_td3', 'sb3_sac', 'sb3_td3'}
    assert {(r.num_env_steps, r.task.env) for r in hopper} == {(150_000, 'Hopper-v5')}
    assert {r.name for r in learning.suite_runs('halfcheetah')} == {'alf_sac', 'sb3_sac'}
    study = learning.suite_runs('study_sac')
    # The default setting is shared by both comparisons: 3 settings x 2 tasks x 3 seeds.
    mask, resample = (
        'TrainerConfig.mask_out_loss_for_last_step',
        'SacAlgorithm.resample_action_per_loss',
    )
    assert {(r.task.env, r.name, r.gin_params) for r in study} == {
        (env, f'{tag}_{name}', (f'{mask}={m}', f'{resample}={r}'))
        for env, tag in (('Hopper-v5', 'hopper'), ('ICubWalk-v0', 'icub'))
        for name, m, r in (
            ('default', True, False),
            ('mask_false', False, False),
            ('resample_true', True, True),
        )
    }
    assert {r.framework for r in study} == {'alf_lite'} and len(study) == 18
    assert {r.num_env_steps for r in study} == {100_000}
    (walk,) = learning.suite_runs('icub_walk')
    assert (walk.seed, walk.num_env_steps, walk.replay_length_per_env) == (0, 2_000_000, 100_000)
    assert walk.task.gin_file('sac') == 'examples/sac_icub_walking.gin'
    replay = {r.name: r for r in learning.suite_runs('study_replay', seeds=[0])}
    # Total capacity over the 12 envs: 10K, 100K and the whole 300k-step run.
    assert {n: r.replay_length_per_env * 12 for n, r in replay.items()} == {
        'icub_replay_10k': 9996,
        'icub_replay_100k': 99996,
        'icub_replay_full': 300000,
    }
    for run in replay.values():
        assert f'TrainerConfig.replay_buffer_length={run.replay_length_per_env}' in (
            learning.alf_gin_params(run)
        )


def test_short_runs_lower_the_random_steps():
    (run,) = learning.suite_runs('hopper', seeds=[0], steps=1500)[:1]
    assert run.learning_starts == 750
    assert 'TrainerConfig.initial_collect_steps=750' in learning.alf_gin_params(run)


def _widths(network):
    """Output sizes of a network's linear layers, in order."""
    return [m.out_features for m in network.modules() if hasattr(m, 'out_features')]


@pytest.mark.parametrize('suite', ['pendulum', 'hopper', 'halfcheetah'])
def test_sb3_settings_match_the_alf_lite_gin_config(suite, tmp_path, monkeypatch):
    """Each SB3 run gets the values alf_lite's gin config gives its paired run."""
    pytest.importorskip('stable_baselines3')
    import stable_baselines3
    from stable_baselines3.common.noise import NormalActionNoise

    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.algorithms.noise import GaussianNoise
    from alf_lite.config import parse_config
    from alf_lite.trainer import TrainerConfig

    # The models train() builds, recorded instead of trained.
    built = []

    def learn(self, *args, **kwargs):
        built.append(self)
        return self

    for name in ('SAC', 'TD3'):
        recording = type(name, (getattr(stable_baselines3, name),), dict(learn=learn))
        monkeypatch.setattr(stable_baselines3, name, recording)
    monkeypatch.setattr(sb3_runner, 'NUM_EVAL_EPISODES', 1)
    # SB3's envs are gymnasium's own: MuJoCo appends the HalfCheetah model's warning to
    # MUJOCO_LOG.TXT in the working directory.
    monkeypatch.chdir(tmp_path)

    runs = {r.name: r for r in learning.suite_runs(suite, seeds=[3])}
    sb3_runs = [r for r in runs.values() if r.framework == 'sb3']
    assert sb3_runs
    for sb3 in sb3_runs:
        alf = runs['alf_' + sb3.algo]
        gin.clear_config()
        parse_config([str(REPO_ROOT / alf.task.gin_file(alf.algo))], learning.alf_gin_params(alf))
        q = gin.query_parameter
        algo = {'sac': 'SacAlgorithm', 'td3': 'Td3Algorithm'}[sb3.algo]
        actor = {'sac': 'TanhNormalActorNetwork', 'td3': 'DeterministicActorNetwork'}[sb3.algo]
        s = sb3_runner.sb3_settings(sb3)
        lrs = {q('actor/Adam.lr'), q('critic/Adam.lr')}
        if sb3.algo == 'sac':
            lrs.add(q('alpha/Adam.lr'))
            assert q('SacAlgorithm.target_update_period') == s['target_update_interval'] == 1
        else:
            assert q('Td3Algorithm.policy_update_period') == s['policy_delay']
            assert q('Td3Algorithm.target_policy_noise') == s['target_policy_noise']
            assert q('Td3Algorithm.target_policy_noise_clip') == s['target_noise_clip']
            assert q('GaussianNoise.sigma') == s['exploration_noise_sigma']
        assert lrs == {s['learning_rate']}
        assert (
            q(f'{actor}.hidden_layers') == q('CriticNetwork.hidden_layers') == tuple(s['net_arch'])
        )
        assert q(f'{algo}.num_critic_replicas') == 2
        assert q(f'{algo}.gamma') == s['gamma']
        assert q(f'{algo}.target_update_tau') == s['tau']
        assert q('TrainerConfig.mini_batch_size') == s['batch_size']
        assert q('TrainerConfig.replay_buffer_length') == s['buffer_size']
        assert q('TrainerConfig.initial_collect_steps') == s['learning_starts']
        assert q('TrainerConfig.num_updates_per_train_iter') == s['gradient_steps'] == 1
        assert q('TrainerConfig.unroll_length') == s['train_freq'] == 1
        assert q('TrainerConfig.random_seed') == sb3.seed == 3
        assert q('TrainerConfig.eval_interval') == sb3.task.eval_interval
        assert q('create_environment.env_name') == sb3.task.env

        # The model train() builds, against the algorithm alf_lite builds from the config.
        out = str(tmp_path / 'runs')
        os.makedirs(sb3.run_dir(out))
        built.clear()
        assert sb3_runner.train(sb3, out) == 0
        (model,) = built
        config = TrainerConfig()
        action_dim = model.action_space.shape[0]
        algorithm = config.algorithm_ctor(
            observation_dim=model.observation_space.shape[0], action_dim=action_dim
        )
        assert model.gamma == algorithm._gamma
        assert model.tau == algorithm._tau
        assert {model.learning_rate} == {
            group['lr'] for o in algorithm.optimizers.values() for group in o.param_groups
        }
        assert model.batch_size == config.mini_batch_size
        assert model.buffer_size == config.replay_buffer_length
        assert model.learning_starts == config.initial_collect_steps
        assert (model.train_freq.frequency, model.train_freq.unit.value) == (
            config.unroll_length,
            'step',
        )
        assert model.gradient_steps == config.num_updates_per_train_iter
        assert list(model.actor.net_arch) == _widths(algorithm._actor)[:-1]
        assert _widths(model.critic.q_networks[0])[:-1] == _widths(algorithm._critic)[:-1]
        assert model.critic.n_critics == algorithm._critic.num_replicas
        if sb3.algo == 'sac':
            # SB3 resolves 'auto' to the entropy target and initial temperature.
            assert model.target_entropy == algorithm._target_entropy
            assert model.log_ent_coef.exp().item() == pytest.approx(
                algorithm._log_alpha.exp().item()
            )
            assert model.target_update_interval == algorithm._target_update_period
        else:
            noise = algorithm._exploration_noise
            assert isinstance(noise, GaussianNoise)
            assert isinstance(model.action_noise, NormalActionNoise)
            assert model.action_noise._sigma.tolist() == [noise.sigma] * action_dim
            assert model.action_noise._mu.tolist() == [0.0] * action_dim
            assert model.policy_delay == algorithm._policy_update_period
            assert model.target_policy_noise == algorithm._target_policy_noise
            assert model.target_noise_clip == algorithm._target_policy_noise_clip


@pytest.mark.parametrize('suite', sorted(learning.SUITES))
def test_every_alf_lite_run_has_a_valid_config(suite):
    """The gin file and bindings of each alf_lite run parse (nothing is trained)."""
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.config import parse_config
    from alf_lite.trainer import TrainerConfig

    for run in learning.suite_runs(suite, seeds=[1]):
        if run.framework != 'alf_lite':
            continue
        gin.clear_config()
        parse_config([str(REPO_ROOT / run.task.gin_file(run.algo))], learning.alf_gin_params(run))
        config = TrainerConfig()
        assert config.random_seed == 1 and config.torch_num_threads == 1
        assert config.num_env_steps == run.num_env_steps
        assert config.eval_interval == run.task.eval_interval
        assert config.num_eval_episodes == 10
        assert gin.query_parameter('create_environment.env_name') == run.task.env
        assert gin.query_parameter('create_environment.num_parallel_environments') == (
            run.task.num_envs
        )
        # Whole-run buffers never overwrite a row.
        capacity = config.replay_buffer_length * run.task.num_envs
        assert capacity >= run.num_env_steps or (run.replay_capacity or run.task.replay_capacity)


def test_sb3_config_differs_between_seeds_only_in_the_seed():
    a, b = (r for r in learning.suite_runs('pendulum', seeds=[0, 1]) if r.name == 'sb3_td3')
    text_a = sb3_runner.sb3_config_text(a, sb3_runner.sb3_settings(a)).splitlines()
    text_b = sb3_runner.sb3_config_text(b, sb3_runner.sb3_settings(b)).splitlines()
    assert [(x, y) for x, y in zip(text_a, text_b) if x != y] == [
        ('TrainerConfig.random_seed = 0', 'TrainerConfig.random_seed = 1')
    ]
    assert 'TrainerConfig.algorithm_ctor = @stable_baselines3.TD3' in text_a


def test_dry_run_and_bad_arguments(tmp_path, capsys):
    assert learning.main(['--suite', 'pendulum', '--dry_run', '--out', str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 25
    assert sum('--gin_file examples/ddpg_pendulum.gin' in line for line in lines) == 5
    assert sum('-m benchmarks.sb3_runner' in line for line in lines) == 10
    assert any(
        'TrainerConfig.random_seed=4' in line and 'torch_num_threads=1' in line for line in lines
    )
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    for argv, message in (
        (['--suite', 'pendulm'], 'invalid choice'),
        (['--suite', 'pendulum', '--runs', 'nope'], 'the runs are: alf_ddpg'),
        (['--suite', 'pendulum', '--jobs', '0'], '--jobs must be'),
    ):
        with pytest.raises(SystemExit) as e:
            learning.main(argv)
        assert e.value.code == 2
        assert message in capsys.readouterr().err


def test_alf_lite_run_is_done_then_skipped_and_reported(tmp_path, monkeypatch, capsys):
    out = tmp_path / 'runs'
    args = [
        '--suite',
        'pendulum',
        '--runs',
        'alf_sac',
        '--seeds',
        '0',
        '--steps',
        TINY_STEPS,
        '--jobs',
        1,
        '--out',
        out,
    ]
    first = _ok(run_script(*args))
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    assert 'done' in first.stdout and 'pendulum/alf_sac/seed0' in first.stdout
    rows = _progress(run_dir)
    evals = [
        (int(r['env_steps']), float(r['eval/AverageReturn']))
        for r in rows
        if r['eval/AverageReturn']
    ]
    assert [s for s, _ in evals] == [0, 1000, TINY_STEPS]
    assert all(-2000 < v < 0 for _, v in evals)  # Pendulum's returns
    done = json.loads((run_dir / 'done.json').read_text())
    assert done['framework'] == 'alf_lite' and done['algo'] == 'sac' and done['seed'] == 0
    assert done['env_steps'] == done['target_env_steps'] == TINY_STEPS
    assert done['final_eval_return'] == evals[-1][1]
    assert math.isclose(done['final_eval_return_last3'], sum(v for _, v in evals) / 3)
    assert 0 < done['wall_time_s'] < RUN_TIMEOUT_S and done['attempts'] == 1
    config = (run_dir / 'config.gin').read_text()
    assert 'TrainerConfig.torch_num_threads = 1' in config
    assert 'TrainerConfig.random_seed = 0' in config
    assert (out / 'pendulum' / 'logs' / 'alf_sac.seed0.log').is_file()

    # The script ran as a user runs it; the calls below start no run: in this process.
    mtimes = {p: p.stat().st_mtime_ns for p in (run_dir / 'done.json', run_dir / 'progress.csv')}
    capsys.readouterr()
    assert learning.main(list(map(str, args))) == 0
    second = capsys.readouterr().out
    assert 'skipped' in second and 'already done' in second
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes

    # A finished run of another length is not taken for this one.
    other = learning.main([*map(str, args[:-4]), '--steps', str(TINY_STEPS + 1), '--out', str(out)])
    assert other == 1 and 'not 1201' in capsys.readouterr().out

    docs = tmp_path / 'docs'
    argv = ['--suite', 'pendulum', '--report', '--out', str(out), '--docs_dir', str(docs)]
    assert learning.main(argv) == 0
    report = capsys.readouterr().out
    assert (docs / 'pendulum.png').stat().st_size > 0
    # The curves are named by framework and algorithm, not by the gin binding.
    with open(docs / 'pendulum.csv', newline='') as f:
        assert {r['group'] for r in csv.DictReader(f)} == {'alf_lite SAC'}
    row = next(line for line in report.splitlines() if line.startswith('| Pendulum-v1'))
    cells = [c.strip() for c in row.strip('|').split('|')]
    assert cells[:3] == ['Pendulum-v1', 'alf_lite', 'SAC']
    assert cells[3].startswith(f'{done["final_eval_return_last3"]:.1f} [')
    assert cells[4] == '1' and cells[5] == str(TINY_STEPS)
    assert cells[7] == f'{1000 * done["wall_time_s"] / TINY_STEPS:.1f}'  # ms per env step
    assert cells[8] == '2.4 MiB'  # 100k rows of 25 bytes

    # A run still training shows as unfinished, or not at all with --finished_only: the
    # table, the figures left undrawn (checked above).
    unfinished = out / 'pendulum' / 'alf_sac' / 'seed1'
    unfinished.mkdir()
    (unfinished / 'progress.csv').write_text('env_steps,eval/AverageReturn\n0,-1500\n')
    (unfinished / 'config.gin').write_text((run_dir / 'config.gin').read_text())
    monkeypatch.setattr(learning, '_plot', lambda *args, **kwargs: None)
    for extra, seeds in (([], '2 (1 unfinished)'), (['--finished_only'], '1')):
        assert learning.main(argv + extra) == 0
        lines = capsys.readouterr().out.splitlines()
        row = next(line for line in lines if line.startswith('| Pendulum-v1'))
        assert [c.strip() for c in row.strip('|').split('|')][4] == seeds


def test_sb3_run_writes_what_plot_reads(tmp_path):
    pytest.importorskip('stable_baselines3')
    out = tmp_path / 'runs'
    _ok(
        run_script(
            '--suite',
            'pendulum',
            '--runs',
            'sb3_sac',
            '--seeds',
            2,
            '--steps',
            1100,
            '--jobs',
            1,
            '--out',
            out,
        )
    )
    run_dir = out / 'pendulum' / 'sb3_sac' / 'seed2'
    rows = _progress(run_dir)
    assert [int(r['env_steps']) for r in rows] == [0, 1000, 1100]
    assert all(-2000 < float(r['eval/AverageReturn']) < 0 for r in rows)
    assert {float(r['eval/AverageEpisodeLength']) for r in rows} == {200.0}
    assert [int(r['num_updates']) for r in rows] == [0, 0, 100]
    done = json.loads((run_dir / 'done.json').read_text())
    assert done['framework'] == 'sb3' and done['env_steps'] == 1100
    assert 'TrainerConfig.random_seed = 2' in (run_dir / 'config.gin').read_text()

    from alf_lite.run_dir import RunDir
    from alf_lite.runs import config_bindings

    assert RunDir(str(run_dir)).is_run()
    assert config_bindings(str(run_dir))['TrainerConfig.algorithm_ctor'] == (
        '@stable_baselines3.SAC'
    )


def _stopped_by_sigterm(command, line_start: str) -> str:
    """Run ``command`` until it prints a line starting with ``line_start``, then stop it with
    SIGTERM; returns what it printed after that line, having checked its exit status."""
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=train_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        for line in process.stdout:
            if line.startswith(line_start):
                process.send_signal(signal.SIGTERM)
                break
        rest = process.stdout.read()
        assert process.wait(timeout=RUN_TIMEOUT_S) == 128 + signal.SIGTERM, rest
    finally:
        process.kill()
    return rest


def test_sb3_run_stopped_by_sigterm_checkpoints_and_resumes_where_it_stopped(tmp_path, monkeypatch):
    pytest.importorskip('stable_baselines3')
    # SB3's default logger would leave an SB3-<time> folder here on each learn().
    temp = tmp_path / 'temp'
    temp.mkdir()
    monkeypatch.setenv('TMPDIR', str(temp))
    out = tmp_path / 'runs'
    command = [sys.executable, '-m', 'benchmarks.sb3_runner', '--suite', 'pendulum']
    command += ['--run', 'sb3_td3', '--seed', '1', '--out', str(out), '--steps', '1200']
    run_dir = out / 'pendulum' / 'sb3_td3' / 'seed1'
    rest = _stopped_by_sigterm(command, 'env steps 1000:')  # learning has started
    assert 'checkpoint written' in rest and 'run the same command' in rest
    stopped_at = sb3_common.checkpoint_env_steps(str(run_dir))
    assert 1000 <= stopped_at < 1200
    first = _progress(run_dir)
    assert all(int(r['env_steps']) <= stopped_at for r in first)

    resumed = run_train(command)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f'resuming from {run_dir}/checkpoints/sb3 at {stopped_at} env steps' in resumed.stdout
    rows = _progress(run_dir)
    # The rows before the stop are the first attempt's; the updates go on from the
    # checkpoint as in a run never stopped: one per step after the 1000 random ones
    # (a checkpoint counting the step it was saved in would give 199).
    assert rows[: len(first)] == first
    assert [int(r['env_steps']) for r in rows] == [0, 1000, 1200]
    assert [int(r['num_updates']) for r in rows] == [0, 0, 200]
    assert [p.name for p in temp.iterdir() if p.name.startswith('SB3-')] == []


def test_sb3_run_of_other_settings_is_not_resumed_under_new_ones(tmp_path, monkeypatch):
    pytest.importorskip('stable_baselines3')
    monkeypatch.setenv('TMPDIR', str(tmp_path))
    out = tmp_path / 'runs'
    command = [sys.executable, '-m', 'benchmarks.sb3_runner', '--suite', 'pendulum']
    command += ['--run', 'sb3_sac', '--seed', '0', '--out', str(out)]
    run_dir = out / 'pendulum' / 'sb3_sac' / 'seed0'
    _stopped_by_sigterm(command + ['--steps', '600'], 'env steps 0:')
    stopped_at = sb3_common.checkpoint_env_steps(str(run_dir))
    config = (run_dir / 'config.gin').read_text()

    # 1500 steps take 1000 random ones, not the 300 of the checkpoint's model.
    longer = run_train(command + ['--steps', '1500'])
    assert longer.returncode == 2, longer.stdout + longer.stderr
    assert 'learning_starts = 300 -> stable_baselines3.SAC.learning_starts = 1000' in longer.stderr
    assert 'move it away or choose another --out' in longer.stderr
    assert sb3_common.checkpoint_env_steps(str(run_dir)) == stopped_at
    assert (run_dir / 'config.gin').read_text() == config


def _sb3_run_stopped_in_its_first_evaluation(tmp_path, monkeypatch, sig, again=None):
    """Run an SB3 run of 2 steps that gets ``sig`` as its evaluation at 0 env steps runs (and
    ``again``, if given, as its eval envs close); returns the finished process, the
    runner's arguments and the run directory."""
    pytest.importorskip('stable_baselines3')
    temp = tmp_path / 'temp'
    temp.mkdir()
    monkeypatch.setenv('TMPDIR', str(temp))
    out = tmp_path / 'runs'
    args = ['--suite', 'pendulum', '--run', 'sb3_sac', '--seed', '0', '--out', str(out)]
    args += ['--steps', '2']
    code = (
        'import os, signal, sys\n'
        'from benchmarks import sb3_runner\n'
        'evaluate, close = sb3_runner._EvalEnvs.evaluate, sb3_runner._EvalEnvs.close\n'
        'def stopping(self, env_steps):\n'
        f'    os.kill(os.getpid(), {int(sig)})\n'
        '    return evaluate(self, env_steps)\n'
        'sb3_runner._EvalEnvs.evaluate = stopping\n'
    )
    if again is not None:
        code += (
            'def stopped_again(self):\n'
            f'    os.kill(os.getpid(), {int(again)})\n'
            '    return close(self)\n'
            'sb3_runner._EvalEnvs.close = stopped_again\n'
        )
    code += f'sys.exit(sb3_runner.main({args!r}))\n'
    stopped = run_python(code, timeout=RUN_TIMEOUT_S, cwd=REPO_ROOT)
    return stopped, args, out / 'pendulum' / 'sb3_sac' / 'seed0'


def test_sb3_run_stopped_in_its_first_evaluation_resumes_from_its_checkpoint_at_0(
    tmp_path, monkeypatch
):
    # SIGTERM while the evaluation at 0 env steps runs: the checkpoint holds 0 env steps.
    stopped, args, run_dir = _sb3_run_stopped_in_its_first_evaluation(
        tmp_path, monkeypatch, signal.SIGTERM
    )
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stdout + stopped.stderr
    assert sb3_common.checkpoint_env_steps(str(run_dir)) == 0
    assert sb3_runner.main(args) == 0
    # One header and one row a step: the row at 0 is the first attempt's.
    rows = _progress(run_dir)
    assert [r['env_steps'] for r in rows] == ['0', '2']
    from alf_lite.runs import EVAL_RETURN, read_scalar_if_any

    assert list(read_scalar_if_any(str(run_dir), EVAL_RETURN)[0]) == [0, 2]


def test_a_second_signal_as_a_stopped_sb3_run_closes_its_envs_leaves_the_first_exit_code(
    tmp_path, monkeypatch
):
    # A batch system's SIGUSR1, then its SIGTERM as the stopped run closes its envs: with the
    # default handlers back, the second ended the runner by its own signal.
    stopped, _, run_dir = _sb3_run_stopped_in_its_first_evaluation(
        tmp_path, monkeypatch, signal.SIGUSR1, again=signal.SIGTERM
    )
    assert stopped.returncode == 128 + signal.SIGUSR1, stopped.stdout + stopped.stderr
    assert 'checkpoint written' in stopped.stdout, stopped.stdout
    assert sb3_common.checkpoint_env_steps(str(run_dir)) == 0


def test_runs_another_process_trains_are_left_to_it(tmp_path):
    pytest.importorskip('stable_baselines3')
    out = tmp_path / 'runs'
    held = [out / 'pendulum' / name / 'seed0' for name in ('alf_sac', 'sb3_sac')]
    for run_dir in held:
        run_dir.mkdir(parents=True)
        (run_dir / 'progress.csv').write_text('env_steps\n0\n')
    with RunDirLock(str(held[0])), RunDirLock(str(held[1])):
        # The launcher starts neither run; the SB3 runner started by hand refuses
        # the run and leaves its files (a fresh SB3 start empties the directory).
        result = _ok(
            run_script(
                '--suite',
                'pendulum',
                '--runs',
                '*_sac',
                '--seeds',
                0,
                '--steps',
                TINY_STEPS,
                '--out',
                out,
            )
        )
        in_use = [line for line in result.stdout.splitlines() if ' in use ' in line]
        assert len(in_use) == 2 and all('another process is training in' in x for x in in_use)
        assert (
            sb3_runner.main(
                ['--suite', 'pendulum', '--run', 'sb3_sac', '--seed', '0', '--out', str(out)]
                + ['--steps', str(TINY_STEPS)]
            )
            == 2
        )
    for run_dir in held:
        assert sorted(p.name for p in run_dir.iterdir()) == ['progress.csv']
    plan = json.loads((out / 'plan.json').read_text())
    assert {k: v['status'] for k, v in plan.items()} == {
        'pendulum/alf_sac/seed0': 'in use',
        'pendulum/sb3_sac/seed0': 'in use',
    }


def test_a_run_another_launcher_takes_after_the_check_is_left_to_it(tmp_path, monkeypatch, capsys):
    # Another call of the launcher started the run between this one's check and its start:
    # this one's train refuses the run, which is in use, not failed.
    out = tmp_path / 'runs'
    run = _pendulum_run(TINY_STEPS)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    run_dir.mkdir(parents=True)
    checks = []

    def free_at_the_first_check(root):
        checks.append(root)
        return len(checks) > 1 and in_use(root)

    in_use = launcher.run_dir_in_use
    monkeypatch.setattr(launcher, 'run_dir_in_use', free_at_the_first_check)

    def command(r):
        return learning.run_command(r, str(out), None)

    with RunDirLock(str(run_dir)):
        assert launcher.train_runs([run], str(out), 1, command) == 0
    assert 'in use      pendulum/alf_sac/seed0: another process is training in' in (
        capsys.readouterr().out
    )
    with open(run.log_path(str(out))) as f:
        assert 'is in use: another process is training in it' in f.read()
    # Not an attempt of this launcher: the one training the run records its own.
    assert not os.path.exists(run.log_path(str(out), launcher.ATTEMPTS_SUFFIX))
    assert json.loads((out / 'plan.json').read_text())[run.key]['status'] == 'in use'
    assert sorted(p.name for p in run_dir.iterdir()) == []


def test_a_run_that_fails_on_its_own_while_another_process_holds_it_is_failed(
    tmp_path, monkeypatch
):
    # Only train's refusal of a run in use (exit 2) is left to the process holding it.
    out = tmp_path / 'runs'
    run = _pendulum_run(TINY_STEPS)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    run_dir.mkdir(parents=True)
    checks = []
    in_use = launcher.run_dir_in_use

    def free_at_the_first_check(root):
        checks.append(root)
        return len(checks) > 1 and in_use(root)

    monkeypatch.setattr(launcher, 'run_dir_in_use', free_at_the_first_check)
    with RunDirLock(str(run_dir)):
        assert (
            launcher.train_runs(
                [run], str(out), 1, lambda r: [sys.executable, '-c', 'raise SystemExit(1)']
            )
            == 1
        )
    assert json.loads((out / 'plan.json').read_text())[run.key]['status'] == 'failed'


def test_dry_run_commands_run_by_hand_from_another_directory_train_the_run(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / 'runs'
    monkeypatch.chdir(tmp_path)
    argv = ['--suite', 'pendulum', '--runs', 'alf_td3', '--seeds', '0', '--steps', '2']
    assert learning.main(argv + ['--out', 'runs', '--dry_run']) == 0
    printed = capsys.readouterr()
    # Stdout is the command alone: the note on the random steps goes to stderr.
    (line,) = printed.out.splitlines()
    assert printed.err.startswith('note: pendulum/alf_td3/seed0: 2 env steps are not more than')
    result = subprocess.run(
        ['bash', '-c', line],
        cwd=tmp_path,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert [r['env_steps'] for r in _progress(out / 'pendulum' / 'alf_td3' / 'seed0')][-1] == '2'


def test_dry_run_names_a_run_finished_at_another_length_as_failing_not_skipped(tmp_path, capsys):
    out = tmp_path / 'runs'
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    run_dir.mkdir(parents=True)
    (run_dir / 'done.json').write_text(json.dumps(_done(target_env_steps=TINY_STEPS)))
    argv = ['--suite', 'pendulum', '--runs', 'alf_sac', '--seeds', '0', '--out', str(out)]
    for steps, prefix in (
        (TINY_STEPS, '# done, skipped: '),
        (2 * TINY_STEPS, f'# fails (finished a run of {TINY_STEPS} env steps, not 2400): '),
    ):
        assert learning.main(argv + ['--steps', str(steps), '--dry_run']) == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert line.startswith(f'{prefix}cd {REPO_ROOT} && {sys.executable}'), line
        # What the launcher does with it.
        result = _launcher(out, ['false']).execute(_pendulum_run(steps))
        assert result['status'] == ('skipped' if steps == TINY_STEPS else 'failed')


def test_smoke_runs_into_the_kept_runs_are_refused_before_anything_is_written(
    tmp_path, monkeypatch, capsys
):
    # A checkout whose benchmarks/results/learning holds a finished pendulum run.
    monkeypatch.setattr(learning, 'REPO_ROOT', str(tmp_path))
    kept = tmp_path / 'benchmarks' / 'results' / 'learning'
    run_dir = kept / 'pendulum' / 'alf_sac' / 'seed0'
    run_dir.mkdir(parents=True)
    (run_dir / 'done.json').write_text(json.dumps(_done(target_env_steps=20_000)))
    (kept / 'plan.json').write_text('{"kept": true}')
    files = sorted((p, p.read_bytes()) for p in kept.rglob('*') if p.is_file())
    argv = ['--suite', 'pendulum', '--runs', 'alf_sac', '--seeds', '0', '--steps', '1100']
    for out in ([], ['--out', str(kept)]):
        with pytest.raises(SystemExit) as e:
            learning.main(argv + out)
        assert e.value.code == 2
        assert (
            f'--steps 1100 is not the length of pendulum: such smoke runs do not go among the '
            f'kept runs in {kept}; give them another --out'
        ) in capsys.readouterr().err
    # Printing the commands writes nothing; the suite's own length and another --out train.
    assert learning.main(argv + ['--dry_run']) == 0
    assert learning.main(argv[:-2] + ['--steps', '20000', '--dry_run']) == 0
    assert sorted((p, p.read_bytes()) for p in kept.rglob('*') if p.is_file()) == files
    monkeypatch.setattr(learning, 'train_runs', lambda runs, out, *rest: len(runs))
    assert learning.main(argv + ['--out', str(tmp_path / 'smoke')]) == 1


def test_a_report_of_other_runs_into_the_published_docs_is_refused(tmp_path, monkeypatch, capsys):
    # docs/ holds the curves of the kept runs; a report of smoke runs wrote over them.
    monkeypatch.setattr(learning, 'REPO_ROOT', str(tmp_path))
    docs = tmp_path / 'docs'
    docs.mkdir()
    (docs / 'pendulum.png').write_bytes(b'published')
    smoke = tmp_path / 'smoke'
    _write_progress(smoke / 'pendulum' / 'alf_sac' / 'seed0', [(0, -1000), (2, -900)])
    for docs_dir in ([], ['--docs_dir', str(docs)]):
        with pytest.raises(SystemExit) as e:
            learning.main(['--suite', 'pendulum', '--report', '--out', str(smoke)] + docs_dir)
        assert e.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.endswith(
            f'error: --report of the runs in {smoke} would write over the PNGs of the kept '
            f'runs in {docs}; give another --docs_dir'
        )
    assert sorted(p.name for p in docs.iterdir()) == ['pendulum.png']
    assert (docs / 'pendulum.png').read_bytes() == b'published'
    # Into another directory it is taken, and so is the report of the kept runs into docs/.
    other = ['--docs_dir', str(tmp_path / 'smoke_docs')]
    args, _ = learning.parse_args(['--suite', 'pendulum', '--report', '--out', str(smoke)] + other)
    assert args.docs_dir == str(tmp_path / 'smoke_docs')
    args, _ = learning.parse_args(['--suite', 'pendulum', '--report'])
    assert args.docs_dir == str(docs)


def test_deadline_parses_minutes_clock_times_and_iso_times():
    import datetime

    now = datetime.datetime(2026, 1, 2, 10, 30).timestamp()
    assert launcher.parse_deadline('90', now) == now + 5400
    assert launcher.parse_deadline('11:00', now) == now + 1800
    assert launcher.parse_deadline('10:00', now) == now + 23.5 * 3600  # tomorrow
    assert launcher.parse_deadline('2026-01-02T12:00', now) == now + 5400
    # A time that has passed would defer every run, call after call.
    for passed in ('0', '-5', '2026-01-02T10:00'):
        with pytest.raises(ValueError, match=f'--deadline {passed} has passed'):
            launcher.parse_deadline(passed, now)
    with pytest.raises(ValueError, match='--deadline takes minutes'):
        launcher.parse_deadline('soon', now)
    # The first line of a call says which day an HH:MM stands for.
    assert launcher.describe_deadline(launcher.parse_deadline('11:00', now), now) == (
        'deadline 2026-01-02 11:00, in 30.0 min'
    )
    assert launcher.describe_deadline(launcher.parse_deadline('10:00', now), now) == (
        'deadline tomorrow 2026-01-03 10:00, in 23.50 h'
    )


@pytest.mark.parametrize(
    'flags, error',
    [
        (['--deadline', 'nan'], '--deadline takes a finite number of minutes from now'),
        (['--deadline=-inf'], '--deadline takes a finite number of minutes from now'),
        (['--deadline', '1e300'], '--deadline takes a finite number of minutes from now'),
        (['--deadline', '60', '--partial', 'nan'], '--partial takes a positive number'),
        (['--deadline', '60', '--partial', 'inf'], '--partial takes a positive number'),
    ],
)
def test_a_deadline_or_partial_that_is_no_finite_time_is_refused(flags, error, capsys):
    # A NaN deadline would be found out only where a deferred run's line names its
    # clock time, as a traceback in the launcher's worker thread.
    with pytest.raises(SystemExit) as exit_info:
        learning.parse_args(['--suite', 'pendulum', *flags])
    assert exit_info.value.code == 2
    assert error in capsys.readouterr().err


@pytest.mark.parametrize('flag, mode', [('--out', []), ('--docs_dir', ['--report'])])
def test_an_out_or_docs_dir_that_is_a_file_is_refused_and_left_alone(tmp_path, capsys, flag, mode):
    # A finished run to report; the report would write its PNGs into --docs_dir.
    out = tmp_path / 'runs'
    _write_run(
        out / 'pendulum' / 'alf_sac' / 'seed0',
        ('env_steps', 'eval/AverageReturn'),
        [(1000, -150.0)],
        'TrainerConfig.algorithm_ctor = @SacAlgorithm\n',
        _done(wall_time_s=60.0),
    )
    path = tmp_path / 'notes.txt'
    path.write_text('mine\n')
    dirs = {'--out': str(out), '--docs_dir': str(tmp_path / 'docs'), flag: str(path)}
    argv = ['--suite', 'pendulum', '--seeds', '0', '--steps', '50', '--runs', 'alf_sac', *mode]
    with pytest.raises(SystemExit) as exit_info:
        learning.main(argv + [part for item in dirs.items() for part in item])
    assert exit_info.value.code == 2
    assert f'{flag} {path} is a file, not a directory' in capsys.readouterr().err
    assert path.read_text() == 'mine\n'


def test_estimate_uses_the_slowest_of_the_recent_measurements_of_the_same_kind(tmp_path):
    (run,) = learning.suite_runs('hopper', seeds=[2], steps=150_000)[:1]
    assert run.name == 'alf_sac'
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'assumed rate'
    assert seconds == pytest.approx(150_000 * run.task.assumed_seconds_per_step)

    def finished_run(seed, wall, finished, kind=('alf_lite', 'sac', 'Hopper-v5')):
        d = tmp_path / 'study_sac' / 'hopper_default' / f'seed{seed}'
        d.mkdir(parents=True)
        framework, algo, env = kind
        done = _done(framework=framework, algo=algo, env=env, env_steps=100_000, wall_time_s=wall)
        (d / 'done.json').write_text(json.dumps(dict(done, finished=finished)))

    finished_run(0, 1500.0, '2026-11-01 10:00:00')
    finished_run(1, 1800.0, '2026-11-02 10:00:00')
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'slowest of the 2 most recent of 2 measurements'
    assert seconds == pytest.approx(2700.0)
    # An attempt that stopped early measured a slower rate: it counts too.
    logs = tmp_path / 'hopper' / 'logs'
    logs.mkdir(parents=True)
    attempt = dict(kind=['alf_lite', 'sac', 'Hopper-v5'], env_steps_from=10_000)
    started = time.mktime(time.strptime('2026-11-03 10:00:00', '%Y-%m-%d %H:%M:%S'))
    (logs / 'alf_sac.seed1.attempts.json').write_text(
        json.dumps([dict(attempt, env_steps_to=30_000, wall_time_s=600.0, started=started)])
    )
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'slowest of the 3 most recent of 3 measurements'
    assert seconds == pytest.approx(4500.0)
    # Newer, faster measurements (and another kind's) push the slow one out.
    finished_run(3, 1200.0, '2026-11-04 10:00:00')
    finished_run(4, 1000.0, '2026-11-05 10:00:00')
    finished_run(5, 900.0, '2026-11-06 10:00:00', kind=('sb3', 'sac', 'Hopper-v5'))
    finished_run(6, 99_000.0, '2026-11-07 10:00:00', kind=('alf_lite', 'td3', 'Hopper-v5'))
    finished_run(7, 1100.0, '2026-11-08 10:00:00')
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'slowest of the 3 most recent of 6 measurements'
    assert seconds == pytest.approx(150_000 * 0.012)
    (logs / 'alf_sac.seed1.attempts.json').unlink()
    # A run that resumes needs only the steps after its checkpoint, also when its
    # progress.csv got further (it was killed before it could write one at its stop).
    run_dir = tmp_path / 'hopper' / 'alf_sac' / 'seed2'
    run_dir.mkdir(parents=True)
    (run_dir / 'progress.csv').write_text('env_steps,eval/AverageReturn\n0,1\n50000,2\n')
    assert launcher.estimate_seconds(run, str(tmp_path))[0] == pytest.approx(150_000 * 0.012)
    (run_dir / 'checkpoints' / 'ckpt-40000').mkdir(parents=True)
    assert launcher.estimate_seconds(run, str(tmp_path))[0] == pytest.approx(110_000 * 0.012)
    # An SB3 run's checkpoint gives its env steps in its state file.
    (sb3,) = [
        r for r in learning.suite_runs('hopper', seeds=[2], steps=150_000) if r.name == 'sb3_sac'
    ]
    sb3_dir = sb3.run_dir(str(tmp_path))
    assert launcher.resume_env_steps(sb3, sb3_dir) == 0
    sb3_runner._save_checkpoint(_FakeSb3Model(30_000), sb3_dir)
    assert launcher.resume_env_steps(sb3, sb3_dir) == 30_000


def test_deadline_defers_a_run_that_cannot_finish_and_records_the_plan(tmp_path, capsys):
    out = tmp_path / 'runs'
    argv = [
        '--suite',
        'pendulum',
        '--runs',
        'alf_sac',
        '--seeds',
        0,
        1,
        '--steps',
        TINY_STEPS,
        '--jobs',
        1,
        '--out',
        out,
        '--deadline',
        '0.05',
    ]
    # No run starts: the launcher, in this process.
    assert learning.main(list(map(str, argv))) == 0
    stdout = capsys.readouterr().out
    first = stdout.splitlines()[0]
    assert re.search(r'; deadline \d{4}-\d\d-\d\d \d\d:\d\d, in [0-3] s$', first), first
    deferred = [line for line in stdout.splitlines() if ' deferred ' in line]
    assert len(deferred) == 2 and all('would end after the deadline' in d for d in deferred)
    assert '2 deferred' in stdout
    assert not (out / 'pendulum' / 'alf_sac' / 'seed0').exists()
    plan = json.loads((out / 'plan.json').read_text())
    assert {k: v['status'] for k, v in plan.items()} == {
        'pendulum/alf_sac/seed0': 'deferred',
        'pendulum/alf_sac/seed1': 'deferred',
    }


def test_runs_still_going_at_the_deadline_checkpoint_and_partial_starts_runs_that_cannot_finish(
    tmp_path, capsys
):
    out = tmp_path / 'runs'
    # A finished SAC run that measured a tiny time per step makes alf_lite SAC's
    # estimate fit the deadline; the real run is slower and meets it. SB3's SAC has
    # only the assumed rate, which does not fit: it starts because of --partial.
    fake = out / 'pendulum' / 'other' / 'seed9'
    fake.mkdir(parents=True)
    (fake / 'done.json').write_text(
        json.dumps(
            _done(
                framework='alf_lite',
                algo='sac',
                env='Pendulum-v1',
                env_steps=100_000,
                wall_time_s=1.0,
            )
        )
    )
    # 30 s: time for two runs that start together on two busy cores to get past their
    # first evaluation, and far from the 50k steps of either.
    args = ['--suite', 'pendulum', '--seeds', 0, '--steps', 50_000, '--out', out]
    args += ['--runs', 'alf_sac', '--runs', 'sb3_sac', '--jobs', 2]
    with pytest.raises(SystemExit) as refused:
        learning.main([*map(str, args), '--deadline', '0.5', '--partial', '0'])
    assert refused.value.code == 2
    assert '--partial takes a positive number' in capsys.readouterr().err
    result = run_script(*args, '--deadline', '0.5', '--partial', '0.1')
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {
        line.split()[2].rstrip(':'): line
        for line in result.stdout.splitlines()
        if line.startswith('[')
    }
    plan = json.loads((out / 'plan.json').read_text())
    for name in 'alf_sac', 'sb3_sac':
        line = lines[f'pendulum/{name}/seed0']
        assert ' deferred ' in line and ('trains until' in line) == (name != 'alf_sac'), line
        run_dir = out / 'pendulum' / name / 'seed0'
        if name == 'sb3_sac':
            assert sb3_common.checkpoint_env_steps(str(run_dir)) > 0, line
        else:
            assert list((run_dir / 'checkpoints').glob('ckpt-*')), line
        attempts = out / 'pendulum' / 'logs' / f'{name}.seed0.attempts.json'
        (attempt,) = json.loads(attempts.read_text())
        framework = 'sb3' if name == 'sb3_sac' else 'alf_lite'
        assert attempt['kind'] == [framework, name[4:], 'Pendulum-v1']
        assert attempt['env_steps_from'] == 0 and 0 < attempt['env_steps_to'] < 50_000
        assert f'stopped at the deadline at {attempt["env_steps_to"]} env steps' in line
        assert plan[f'pendulum/{name}/seed0']['status'] == 'deferred'
        assert plan[f'pendulum/{name}/seed0']['env_steps'] == attempt['env_steps_to']


def test_help_prints():
    result = _ok(run_script('--help'))
    assert '--deadline' in result.stdout and '--partial' in result.stdout


def test_sac_study_report_compares_each_switch_with_the_shared_default():
    names = ['hopper_default', 'hopper_mask_false', 'hopper_resample_true']
    found = {n: [f'/runs/{n}/seed{k}' for k in range(3)] for n in names}
    figures = list(learning._figures('study_sac', 'study_sac_hopper', '', names, found))
    assert [(name, by) for name, by, _ in figures] == [
        ('study_sac_hopper_mask', 'TrainerConfig.mask_out_loss_for_last_step'),
        ('study_sac_hopper_resample', 'SacAlgorithm.resample_action_per_loss'),
    ]
    assert figures[0][2] == found['hopper_default'] + found['hopper_mask_false']
    assert figures[1][2] == found['hopper_default'] + found['hopper_resample_true']


def test_window_study_shares_samples_with_the_critic_target_at_the_defaults_transitions():
    runs = learning.suite_runs('study_window')
    assert len(runs) == 12 and {r.num_env_steps for r in runs} == {100_000}
    assert {(r.task.env, r.name) for r in runs} == {
        (env, f'{tag}_{name}')
        for env, tag in (('Hopper-v5', 'hopper'), ('ICubWalk-v0', 'icub'))
        for name in ('default', 'resample_true')
    }
    for run in runs:
        gin_params = learning.alf_gin_params(run)
        # 64 windows of 5 rows: 256 transitions per update, as the 2-row default's.
        assert 'TrainerConfig.mini_batch_length=5' in gin_params
        assert 'TrainerConfig.mini_batch_size=64' in gin_params
        assert 'TrainerConfig.mask_out_loss_for_last_step=True' in gin_params
        resample = run.name.endswith('resample_true')
        assert f'SacAlgorithm.resample_action_per_loss={resample}' in gin_params
    names = ['icub_default', 'icub_resample_true']
    found = {n: [f'/runs/{n}/seed{k}' for k in range(3)] for n in names}
    figures = list(learning._figures('study_window', 'study_window_icub', '', names, found))
    assert figures == [
        (
            'study_window_icub_resample',
            'SacAlgorithm.resample_action_per_loss',
            found['icub_default'] + found['icub_resample_true'],
        )
    ]


def test_sac_study_table_has_q_and_return_near_termination_per_setting(tmp_path):
    out, docs = tmp_path / 'runs', tmp_path / 'docs'
    header = 'env_steps,eval/AverageReturn,eval/QNearTermination,eval/ReturnNearTermination\n'
    # Each run's last 3 evaluations count; an evaluation without a termination has no Q.
    for seed, q in enumerate([(9.0, 1.0, 2.0, 3.0), (9.0, 5.0, 6.0, 7.0)]):
        run_dir = out / 'study_sac' / 'icub_default' / f'seed{seed}'
        run_dir.mkdir(parents=True)
        rows = [f'{1000 * k},{10 * k},{v},{v - 1}' for k, v in enumerate(q)]
        rows.append('4000,50,,')
        (run_dir / 'progress.csv').write_text(header + '\n'.join(rows) + '\n')
        (run_dir / 'done.json').write_text(json.dumps(_done(wall_time_s=8.0, env_steps=4000)))
        (run_dir / 'config.gin').write_text(
            'TrainerConfig.mask_out_loss_for_last_step = True\n'
            'SacAlgorithm.resample_action_per_loss = False\n'
        )
    report = _ok(run_script('--suite', 'study_sac', '--report', '--out', out, '--docs_dir', docs))
    lines = report.stdout.splitlines()
    head = next(line for line in lines if line.startswith('| task'))
    row = next(line for line in lines if line.startswith('| ICubWalk-v0'))
    cells = dict(
        zip(
            [c.strip() for c in head.strip('|').split('|')],
            [c.strip() for c in row.strip('|').split('|')],
        )
    )
    assert cells['algorithm / setting'] == 'default' and cells['seeds'] == '2'
    assert cells['final eval return, mean [95% CI]'] == '33.3 [33.3, 33.3]'  # (20+30+50)/3
    assert cells['ms per env step'] == '2.0'
    assert cells['Q near termination [95% CI]'] == '4.0 [2.0, 6.0]'
    assert cells['return near termination [95% CI]'] == '3.0 [1.0, 5.0]'
    assert cells['Q - return [95% CI]'] == '1.0 [1.0, 1.0]'
    assert (docs / 'study_sac_icub_mask_q_above_return.png').stat().st_size > 0
    assert (docs / 'study_sac_icub_mask_q_near_termination.png').stat().st_size > 0
    with open(docs / 'study_sac_icub_mask.csv', newline='') as f:
        assert {r['group'] for r in csv.DictReader(f)} == {'default'}


def test_exact_tests_count_every_split_and_every_sign_flip():
    # Groups that do not overlap: only the observed split and its mirror are as extreme.
    assert learning.permutation_p([4, 5, 6], [1, 2, 3]) == pytest.approx(2 / 20)
    assert learning.permutation_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    # Unequal groups, by hand: of the 4 splits 1 + 3, only the observed one (10 - 2 = 8)
    # is as far from zero; the others give -4, -2.67 and -1.33.
    assert learning.permutation_p([10], [1, 2, 3]) == pytest.approx(1 / 4)
    assert learning.permutation_p([1, 2], [2, 1]) == 1.0  # no difference: every split counts
    assert learning.sign_flip_p([1, 2, 3]) == pytest.approx(2 / 8)
    # Sums of +-3 +-1 +-2 as far from zero as 3 - 1 + 2 = 4: 6, 4, -4, -6.
    assert learning.sign_flip_p([3, -1, 2]) == pytest.approx(4 / 8)
    # Sums taken in another order may round differently: the observed split still counts.
    assert learning.permutation_p([0.1, 0.2], [0.3, 0.0]) == 1.0


def test_study_report_tests_each_comparison_between_the_runs_of_each_setting(
    tmp_path, monkeypatch, capsys
):
    out, docs = tmp_path / 'runs', tmp_path / 'docs'
    header = 'env_steps,eval/AverageReturn,eval/QNearTermination,eval/ReturnNearTermination\n'
    finals = {'default': (40.0, 50.0, 60.0), 'mask_false': (30.0, 35.0, 45.0)}
    for setting, values in finals.items():
        for seed, final in enumerate(values):
            run_dir = out / 'study_sac' / f'icub_{setting}' / f'seed{seed}'
            run_dir.mkdir(parents=True)
            # Q above the return received by 1 (default) or 3 (mask_false), seed 1 by 2.
            above = 2.0 if seed == 1 else 1.0 if setting == 'default' else 3.0
            rows = [f'{1000 * k},{final},{above},0' for k in range(3)]
            (run_dir / 'progress.csv').write_text(header + '\n'.join(rows) + '\n')
            (run_dir / 'config.gin').write_text(
                f'TrainerConfig.mask_out_loss_for_last_step = {setting == "default"}\n'
                'SacAlgorithm.resample_action_per_loss = False\n'
            )
    lines, _ = _report('study_sac', out, docs, monkeypatch, capsys)
    assert (
        '- ICubWalk-v0, mask, final eval return: default 50.0 (3 runs) against mask_false '
        '36.7 (3 runs); exact permutation p = 0.200 (two-sided, 20 splits); paired by seed '
        '(3 seeds, default higher in 3): sign-flip p = 0.250 (two-sided); 6 not finished yet.'
    ) in lines
    assert (
        '- ICubWalk-v0, mask, Q - return: default 1.3 (3 runs) against mask_false 2.7 '
        '(3 runs); exact permutation p = 0.200 (two-sided, 20 splits); paired by seed '
        '(3 seeds, default higher in 0): sign-flip p = 0.500 (two-sided); 6 not finished yet.'
    ) in lines
    # The resample comparison has one setting's runs only: nothing to test.
    assert not [line for line in lines if line.startswith('- ICubWalk-v0, resample')]


def test_study_report_tests_say_how_many_of_their_runs_have_not_finished(
    tmp_path, monkeypatch, capsys
):
    # mask_false's seed 1 is still training (no done.json), at 2000 of 9000 env steps.
    out, docs = tmp_path / 'runs', tmp_path / 'docs'
    for name, mask, ends in (('icub_default', True, (9, 9)), ('icub_mask_false', False, (9, 2))):
        for seed, end in enumerate(ends):
            rows = [(1000 * k, (10 if mask else 5) * k + seed) for k in range(end + 1)]
            run_dir = out / 'study_sac' / name / f'seed{seed}'
            _write_progress(run_dir, rows)
            (run_dir / 'config.gin').write_text(
                f'TrainerConfig.mask_out_loss_for_last_step = {mask}\n'
                'SacAlgorithm.resample_action_per_loss = False\n'
            )
            if end == 9:
                (run_dir / 'done.json').write_text(
                    json.dumps(_done(wall_time_s=8.0, env_steps=9000))
                )
    lines, _ = _report('study_sac', out, docs, monkeypatch, capsys)
    (test,) = [line for line in lines if 'exact permutation p' in line]
    assert test.startswith('- ICubWalk-v0, mask, final eval return: default 80.5 (2 runs)'), test
    assert test.endswith('sign-flip p = 0.500 (two-sided); 1 not finished yet.'), test


def test_report_says_whether_alf_lite_is_inside_above_or_below_sb3s_interval():
    stats = {
        ('Hopper-v5', 'SAC', 'alf_lite'): (1500.0, 1200.0, 1800.0, 3, 0),
        ('Hopper-v5', 'SAC', 'SB3'): (1000.0, 900.0, 1100.0, 3, 0),
        ('Hopper-v5', 'TD3', 'alf_lite'): (950.0, 800.0, 1000.0, 3, 0),
        ('Hopper-v5', 'TD3', 'SB3'): (1000.0, 900.0, 1100.0, 3, 0),
        ('Hopper-v5', 'DDPG', 'alf_lite'): (10.0, 5.0, 15.0, 3, 0),  # SB3 has no DDPG run
        ('HalfCheetah-v5', 'SAC', 'alf_lite'): (100.0, 100.0, 100.0, 1, 1),
        ('HalfCheetah-v5', 'SAC', 'SB3'): (500.0, 400.0, 600.0, 2, 0),
    }
    lines = learning.compare_with_sb3(stats)
    assert lines == [
        "- Hopper-v5 SAC: alf_lite 1500.0 [1200.0, 1800.0] (3 runs) is above SB3's interval, "
        '1000.0 [900.0, 1100.0] (3 runs); the intervals do not overlap.',
        "- Hopper-v5 TD3: alf_lite 950.0 [800.0, 1000.0] (3 runs) is inside SB3's interval, "
        '1000.0 [900.0, 1100.0] (3 runs); the intervals overlap.',
        "- HalfCheetah-v5 SAC: alf_lite 100.0 [100.0, 100.0] (1 run) is below SB3's interval, "
        '500.0 [400.0, 600.0] (2 runs); the intervals do not overlap (1 run not finished yet; '
        'a single run has no interval: not yet a comparison).',
    ]


def test_sac_study_cost_times_each_setting_of_a_task():
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / 'sac_study_cost.py')]
        + ['--task', 'hopper', '--updates', '3', '--rounds', '2']
        + ['--suite', 'study_sac', '--suite', 'study_window'],
        cwd=REPO_ROOT,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(
        line.startswith('Hopper-v5: 11-d observation, 3-d action, 1 torch') for line in lines
    )
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
    for setting in 'default', 'mask_out_loss_for_last_step=False', 'resample_action_per_loss=True':
        assert float(rows[setting][0]) > 0, result.stdout
    assert rows['default'][-1] == '1.00'
    for setting in 'one sample per state', 'resample_action_per_loss=True':
        (row,) = [line for line in lines if line.startswith(f'5-row windows, {setting} ')]
        assert float(row.split()[-4]) > 0, result.stdout
    assert 'ICubWalk' not in result.stdout


def test_precision_suites_train_bfloat16_and_compare_it_with_the_float32_runs(tmp_path):
    hopper = learning.suite_runs('precision_hopper')
    assert {(r.name, r.seed, r.num_env_steps, r.task.env) for r in hopper} == {
        ('alf_sac_bfloat16', seed, 100_000, 'Hopper-v5') for seed in range(3)
    }
    pendulum = learning.suite_runs('precision_pendulum', seeds=[0])
    assert [r.name for r in pendulum] == ['alf_sac_bfloat16', 'alf_td3_bfloat16']
    params = learning.alf_gin_params(hopper[0])
    # The suites pin float32 for every run; the binding after it wins.
    assert params.index("TrainerConfig.precision='bfloat16'") > params.index(
        "TrainerConfig.precision='float32'"
    )
    assert [(c.name, c.setting) for c in learning.float32_references('precision_pendulum')] == [
        ('alf_sac', 'SAC float32'),
        ('alf_td3', 'TD3 float32'),
    ]

    # The float32 runs go on past the suite's 100k env steps: their later evaluations
    # are left out of the comparison.
    out, docs = tmp_path / 'runs', tmp_path / 'docs'
    finals = {
        ('precision_hopper', 'alf_sac_bfloat16', 'bfloat16'): [(10.0, 20.0), (30.0, 40.0)],
        ('hopper', 'alf_sac', 'float32'): [(10.0, 30.0, 999.0), (20.0, 50.0, 999.0)],
    }
    for (suite, name, precision), runs in finals.items():
        for seed, returns in enumerate(runs):
            run_dir = out / suite / name / f'seed{seed}'
            run_dir.mkdir(parents=True)
            rows = [f'{50_000 * (k + 1)},{v}' for k, v in enumerate(returns)]
            (run_dir / 'progress.csv').write_text(
                'env_steps,eval/AverageReturn\n' + '\n'.join(rows) + '\n'
            )
            (run_dir / 'config.gin').write_text(
                'TrainerConfig.algorithm_ctor = @SacAlgorithm\n'
                f"TrainerConfig.precision = '{precision}'\n"
            )
    report = _ok(
        run_script('--suite', 'precision_hopper', '--report', '--out', out, '--docs_dir', docs)
    )
    # Each run's final: the mean of its last 3 evaluations up to 100k env steps.
    assert (
        '- Hopper-v5 SAC: bfloat16 25.0 [15.0, 35.0] (2 runs: 15.0, 35.0), float32 27.5 '
        '[20.0, 35.0] (2 runs: 20.0, 35.0); the intervals overlap (4 not finished yet).'
    ) in report.stdout.splitlines()
    # The float32 runs' other columns are of their whole 150k steps and their buffer of as
    # many rows, which only the comparison of returns is cut to.
    assert (
        'Their wall time, ms per env step, replay buffer and process memory are those of the '
        'whole run: 150000 env steps with a replay buffer of 150000 rows, against 100000 env '
        'steps and 100000 rows for the bfloat16 runs.'
    ) in report.stdout, report.stdout
    assert (docs / 'precision_hopper.png').stat().st_size > 0
    with open(docs / 'precision_hopper.csv', newline='') as f:
        assert {r['group'] for r in csv.DictReader(f)} == {'SAC bfloat16', 'SAC float32'}


def test_precision_report_compares_only_the_float32_seeds_that_have_a_bfloat16_run(tmp_path):
    # The hopper suite ran seeds 0-4, the bfloat16 runs seeds 0-1: float32's seeds 2-4
    # (far higher here) have no pair and stay out of the row, the line and the figure.
    out, docs = tmp_path / 'runs', tmp_path / 'docs'
    finals = {
        ('precision_hopper', 'alf_sac_bfloat16', 'bfloat16'): [10.0, 30.0],
        ('hopper', 'alf_sac', 'float32'): [20.0, 40.0, 900.0, 900.0, 900.0],
    }
    plan = {}
    for (suite, name, precision), returns in finals.items():
        for seed, value in enumerate(returns):
            _write_run(
                out / suite / name / f'seed{seed}',
                ('env_steps', 'eval/AverageReturn'),
                [(50_000, value)],
                'TrainerConfig.algorithm_ctor = @SacAlgorithm\n'
                f"TrainerConfig.precision = '{precision}'\n",
                done=_done(seed=seed),
            )
            plan[f'{suite}/{name}/seed{seed}'] = {'status': 'done'}
    (out / 'plan.json').write_text(json.dumps(plan))
    report = _ok(
        run_script('--suite', 'precision_hopper', '--report', '--out', out, '--docs_dir', docs)
    )
    lines = report.stdout.splitlines()
    assert (
        '- Hopper-v5 SAC: bfloat16 20.0 [10.0, 30.0] (2 runs: 10.0, 30.0), float32 30.0 '
        '[20.0, 40.0] (2 runs: 20.0, 40.0); the intervals overlap.'
    ) in lines, report.stdout
    # Seeds 2-4 are finished, not missing: the row counts the 2 compared runs alone.
    assert _table(lines)[('alf_lite', 'SAC float32')]['seeds'] == '2', report.stdout
    with open(docs / 'precision_hopper.csv', newline='') as f:
        float32 = [r for r in csv.DictReader(f) if r['group'] == 'SAC float32']
    assert float32 and {r['num_runs'] for r in float32} == {'2'}
    assert float(float32[0]['mean']) == 30.0


@pytest.mark.parametrize(
    'suite, reference',
    [('precision_hopper', 'hopper/alf_sac'), ('icub_orientation', 'study_replay/icub_replay_full')],
)
def test_a_report_with_only_the_runs_a_suite_is_compared_with_has_nothing_to_compare(
    tmp_path, suite, reference
):
    # The reference curves were drawn alone, and the report exited 0.
    out, docs = tmp_path / 'runs', tmp_path / 'docs'
    for seed in range(2):
        _write_run(
            out / reference / f'seed{seed}',
            ('env_steps', 'eval/AverageReturn'),
            [(1000, 10.0 + seed)],
            'TrainerConfig.algorithm_ctor = @SacAlgorithm\n',
        )
    result = run_script('--suite', suite, '--report', '--out', out, '--docs_dir', docs)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert (
        f'no runs with evaluations in {out / suite}, only the runs it is compared with '
        f'({out / reference}): nothing to compare'
    ) in result.stdout.splitlines(), result.stdout
    assert not docs.exists()


def test_a_rows_interval_depends_on_its_runs_alone(tmp_path, monkeypatch, capsys):
    out = tmp_path / 'runs'

    def write_runs(name, finals):
        for seed, final in enumerate(finals):
            run_dir = out / 'pendulum' / name / f'seed{seed}'
            run_dir.mkdir(parents=True)
            (run_dir / 'progress.csv').write_text(
                'env_steps,eval/AverageReturn\n0,-1500\n' + f'1000,{final}\n'
            )
            (run_dir / 'config.gin').write_text(f'TrainerConfig.algorithm_ctor = @{name}\n')

    def td3_row():
        lines, _ = _report('pendulum', out, tmp_path, monkeypatch, capsys)
        return next(line for line in lines if '| TD3 |' in line)

    # Enough irregular runs that the interval's bounds depend on the draws.
    write_runs(
        'alf_td3',
        [-150.0, -170.3, -140.7, -210.1, -155.9, -301.4, -133.3, -187.6, -164.2, -248.8, -121.5],
    )
    alone = td3_row()
    # With one generator for the whole table, the SAC row before it changed its interval.
    write_runs('alf_sac', [-120.0, -190.2, -160.9, -145.3, -131.7, -222.2])
    assert td3_row() == alone


def test_a_split_or_flip_a_little_closer_to_zero_is_not_as_far():
    # Pooled 2000, 1, 0, 0 in groups of 2: differences of means 1000.5 (observed), 999.5
    # (twice), -999.5 (twice) and -1000.5; only the observed split and its mirror count.
    assert learning.permutation_p([2000.0, 1.0], [0.0, 0.0]) == pytest.approx(2 / 6)
    # Sums of +-1000 +-1000 +-0.5: only 2000.5 and -2000.5 reach the observed 2000.5,
    # not 1999.5 and -1999.5.
    assert learning.sign_flip_p([1000.0, 1000.0, 0.5]) == pytest.approx(2 / 8)


def test_settings_of_two_runs_are_compared_and_paired():
    by_seed = {
        ('icub_default', 'return'): {0: 5.0, 1: 7.0},
        ('icub_mask_false', 'return'): {0: 1.0, 1: 2.0},
        # One run of a setting: nothing to test.
        ('icub_default', 'q_above'): {0: 1.0, 1: 2.0},
        ('icub_mask_false', 'q_above'): {1: 3.0},
    }
    # Splits of 5, 7, 1, 2 into 2 + 2: differences 4.5 (observed), -4.5, +-1.5, +-0.5.
    # Differences by seed, 4 and 5: their sign flips give sums 9, 1, -1 and -9.
    assert learning.compare_settings(
        'ICubWalk-v0', 'mask', ('icub_default', 'icub_mask_false'), by_seed
    ) == [
        '- ICubWalk-v0, mask, final eval return: default 6.0 (2 runs) against mask_false 1.5 '
        '(2 runs); exact permutation p = 0.333 (two-sided, 6 splits); paired by seed '
        '(2 seeds, default higher in 2): sign-flip p = 0.500 (two-sided).'
    ]
    # Of the unfinished runs, those the figures come from: seed 5 has no evaluation yet.
    (line,) = learning.compare_settings(
        'ICubWalk-v0',
        'mask',
        ('icub_default', 'icub_mask_false'),
        by_seed,
        {'icub_mask_false': {1, 5}},
    )
    assert line.endswith('sign-flip p = 0.500 (two-sided); 1 not finished yet.'), line


def test_sb3_comparison_counts_the_bounds_of_an_interval_inside_it():
    # SB3's interval [900, 1100] is closed: a mean on either bound is inside it, and an
    # interval ending where it begins overlaps it. SB3's unfinished runs count too.
    sb3 = (1000.0, 900.0, 1100.0, 3, 0)
    stats = {
        ('Hopper-v5', 'SAC', 'alf_lite'): (800.0, 700.0, 900.0, 3, 0),
        ('Hopper-v5', 'SAC', 'SB3'): sb3,
        ('Hopper-v5', 'TD3', 'alf_lite'): (1100.0, 1000.0, 1200.0, 3, 0),
        ('Hopper-v5', 'TD3', 'SB3'): sb3,
        ('Hopper-v5', 'DDPG', 'alf_lite'): (900.0, 850.0, 950.0, 3, 0),
        ('Hopper-v5', 'DDPG', 'SB3'): sb3[:4] + (2,),
    }
    assert learning.compare_with_sb3(stats) == [
        "- Hopper-v5 SAC: alf_lite 800.0 [700.0, 900.0] (3 runs) is below SB3's interval, "
        '1000.0 [900.0, 1100.0] (3 runs); the intervals overlap.',
        "- Hopper-v5 TD3: alf_lite 1100.0 [1000.0, 1200.0] (3 runs) is inside SB3's interval, "
        '1000.0 [900.0, 1100.0] (3 runs); the intervals overlap.',
        "- Hopper-v5 DDPG: alf_lite 900.0 [850.0, 950.0] (3 runs) is inside SB3's interval, "
        '1000.0 [900.0, 1100.0] (3 runs); the intervals overlap (2 runs not finished yet).',
    ]
    # Intervals that touch overlap in the precision comparison too.
    stats = {
        ('Pendulum-v1', 'SAC bfloat16', 'alf_lite'): (-150.0, -160.0, -140.0, 2, 0),
        ('Pendulum-v1', 'SAC float32', 'alf_lite'): (-170.0, -180.0, -160.0, 2, 0),
    }
    per_seed = {'SAC bfloat16': [-140.0, -160.0], 'SAC float32': [-180.0, -160.0]}
    assert learning.compare_precisions(stats, per_seed) == [
        '- Pendulum-v1 SAC: bfloat16 -150.0 [-160.0, -140.0] (2 runs: -140.0, -160.0), '
        'float32 -170.0 [-180.0, -160.0] (2 runs: -180.0, -160.0); the intervals overlap.'
    ]


def test_seed_dirs_are_the_runs_with_a_progress_file_by_seed_number(tmp_path):
    parent = tmp_path / 'study_sac' / 'icub_default'
    for name in 'seed10', 'seed2', 'seed0', 'seed1', 'seed3.old', 'seedx', 'logs':
        (parent / name).mkdir(parents=True)
        if name != 'seed1':  # not started yet
            (parent / name / 'progress.csv').write_text('env_steps\n0\n')
    assert learning._seed_dirs(str(tmp_path), 'study_sac', 'icub_default') == [
        str(parent / name) for name in ('seed0', 'seed2', 'seed10')
    ]
    assert learning._seed_dirs(str(tmp_path), 'study_sac', 'icub_mask_false') == []


def test_suites_have_the_seeds_and_lengths_docs_results_md_gives():
    # docs/results.md, "How the runs are made": default seeds in brackets, env steps.
    assert {
        s: (list(suite.seeds), suite.num_env_steps) for s, suite in learning.SUITES.items()
    } == {
        'pendulum': ([0, 1, 2, 3, 4], 20_000),
        'hopper': ([0, 1, 2], 150_000),
        'halfcheetah': ([0, 1, 2], 150_000),
        'study_sac': ([0, 1, 2], 100_000),
        'study_window': ([0, 1, 2], 100_000),
        'study_replay': ([0, 1, 2], 300_000),
        'icub_walk': ([0], 2_000_000),
        'icub_orientation': ([0, 1, 2], 300_000),
        'precision_pendulum': ([0, 1, 2, 3, 4], 20_000),
        'precision_hopper': ([0, 1, 2], 100_000),
    }


@pytest.mark.parametrize('suite', sorted(learning.SUITES))
def test_every_alf_lite_run_pins_its_schedule_device_and_precision(suite):
    import alf_lite.all_configurables  # noqa: F401
    from alf_lite.config import parse_config
    from alf_lite.trainer import TrainerConfig

    for run in learning.suite_runs(suite, seeds=[0]):
        if run.framework != 'alf_lite':
            continue
        gin.clear_config()
        parse_config([str(REPO_ROOT / run.task.gin_file(run.algo))], learning.alf_gin_params(run))
        config = TrainerConfig()
        # The task's intervals, not the gin file's or TrainerConfig's defaults.
        assert config.checkpoint_interval == run.task.checkpoint_interval
        assert config.summary_interval == run.task.summary_interval
        # A machine with an accelerator times the same CPU training.
        assert config.device == 'cpu'
        assert config.precision == ('bfloat16' if suite.startswith('precision_') else 'float32')


def test_replay_study_draws_one_curve_per_capacity_named_by_its_setting(tmp_path):
    runs = learning.suite_runs('study_replay', seeds=[0, 1])
    specs = {r.name: r for r in runs}
    per_env = {'icub_replay_10k': 833, 'icub_replay_100k': 8333, 'icub_replay_full': 25000}
    dirs = []
    for run in runs:
        run_dir = tmp_path / run.name / f'seed{run.seed}'
        run_dir.mkdir(parents=True)
        (run_dir / 'config.gin').write_text(
            f'TrainerConfig.random_seed = {run.seed}\n'
            f'TrainerConfig.replay_buffer_length = {per_env[run.name]}\n'
        )
        dirs.append(str(run_dir))
    # The figure tells the capacities apart: each capacity's seeds make one curve.
    group_by = learning.SUITES['study_replay'].group_by
    assert learning._legend_labels(dirs, group_by, specs) == [
        'replay 10k=TrainerConfig.replay_buffer_length=833',
        'replay 100k=TrainerConfig.replay_buffer_length=8333',
        'replay full (whole run)=TrainerConfig.replay_buffer_length=25000',
    ]


def _write_run(run_dir, columns, rows, config, done=None):
    run_dir.mkdir(parents=True)
    lines = [','.join(columns)] + [','.join('' if v is None else str(v) for v in r) for r in rows]
    (run_dir / 'progress.csv').write_text('\n'.join(lines) + '\n')
    (run_dir / 'config.gin').write_text(config)
    if done is not None:
        (run_dir / 'done.json').write_text(json.dumps(done))


def _report(suite, out, docs, monkeypatch, capsys):
    """report_suite's printed lines and the labels of each figure (plot.py is not run)."""
    figures = {}

    def plot(run_dirs, group_by, y, png, y_minus=None, labels=()):
        figures[png] = list(labels)

    monkeypatch.setattr(learning, '_plot', plot)
    assert learning.report_suite(suite, str(out), str(docs))
    return capsys.readouterr().out.splitlines(), figures


def _table(lines):
    """``{(framework, setting): {column: cell}}`` of the report's table."""
    head = next(line for line in lines if line.startswith('| task'))
    columns = [c.strip() for c in head.strip('|').split('|')]
    rows = {}
    for line in lines:
        if line.startswith('| ') and not line.startswith('| task'):
            cells = dict(zip(columns, (c.strip() for c in line.strip('|').split('|'))))
            rows[(cells['framework'], cells['algorithm / setting'])] = cells
    return rows


def test_study_report_pairs_runs_by_seed_number_and_takes_each_runs_last_evaluations(
    tmp_path, monkeypatch, capsys
):
    out, mib = tmp_path / 'runs', 2**20
    columns = (
        'env_steps',
        'eval/AverageReturn',
        'eval/QNearTermination',
        'eval/ReturnNearTermination',
        'train/replay_buffer_bytes',
        'train/process_rss_bytes',
    )
    # (setting, seed, final return, Q near termination, Q - return, final replay MiB,
    # final process RSS MiB, done)
    runs = [
        ('default', 0, 20, 10, 1, 2, 1024, _done(wall_time_s=100.0, env_steps=4000, mean_load=1.0)),
        ('default', 1, 50, 20, 2, 3, 1536, _done(wall_time_s=200.0, env_steps=4000, mean_load=2.0)),
        (
            'default',
            2,
            80,
            30,
            3,
            10,
            4096,
            _done(wall_time_s=900.0, env_steps=4000, mean_load=6.0),
        ),
        # Seed 0 of mask_false is missing: seeds 1 and 2 make the pairs; seed 10 is
        # still training.
        ('mask_false', 1, 45, 40, 4, 4, 900, _done(wall_time_s=300.0, env_steps=4000)),
        ('mask_false', 2, 70, 50, 5, 4, 1000, _done(wall_time_s=500.0, env_steps=4000)),
        ('mask_false', 10, 25, 60, 6, 4, 950, None),
    ]
    for setting, seed, final, q, above, replay, rss, done in runs:
        # The last 3 evaluations average to the final return; the first evaluation
        # has a Q but no return near termination (left out of Q - return), the second
        # a Q 20 above the return. RSS before the last summary is larger than at it.
        rows = [
            (0, 0, 50, None, mib, 8192 * mib),
            (1000, 0, 30, 10, mib, 8192 * mib),
            (2000, final - 1, q, q - above, mib, 8192 * mib),
            (3000, final, q, q - above, mib, 8192 * mib),
            (4000, final + 1, q, q - above, replay * mib, rss * mib),
        ]
        config = (
            f'TrainerConfig.mask_out_loss_for_last_step = {setting == "default"}\n'
            'SacAlgorithm.resample_action_per_loss = False\n'
        )
        _write_run(
            out / 'study_sac' / f'icub_{setting}' / f'seed{seed}', columns, rows, config, done
        )
    # A run without an evaluation yet counts nowhere.
    _write_run(
        out / 'study_sac' / 'icub_mask_false' / 'seed3',
        columns,
        [(0, None, None, None, 100 * mib, 100 * mib)],
        'TrainerConfig.mask_out_loss_for_last_step = False\n',
    )
    lines, figures = _report('study_sac', out, tmp_path / 'docs', monkeypatch, capsys)
    table = _table(lines)
    # Three runs: the 95% interval is the range of their values (docs/sac_study.md).
    # Wall time (200 s: 3.3 min), ms per env step, replay buffer (each run's last
    # value) and load: medians over the runs that have them.
    assert table[('alf_lite', 'default')] == {
        'task': 'ICubWalk-v0',
        'framework': 'alf_lite',
        'algorithm / setting': 'default',
        'final eval return, mean [95% CI]': '50.0 [20.0, 80.0]',
        'seeds': '3',
        'env steps': '4000',
        'median wall time': '3.3 min',
        'ms per env step': '50.0',
        'replay buffer': '3.0 MiB',
        'process RSS': '1.50 GiB',
        'load': '2.0',
        'Q near termination [95% CI]': '20.0 [10.0, 30.0]',
        'return near termination [95% CI]': '18.0 [9.0, 27.0]',
        'Q - return [95% CI]': '2.0 [1.0, 3.0]',
    }
    assert table[('alf_lite', 'mask_out_loss_for_last_step=False')] == {
        'task': 'ICubWalk-v0',
        'framework': 'alf_lite',
        'algorithm / setting': 'mask_out_loss_for_last_step=False',
        'final eval return, mean [95% CI]': '46.7 [25.0, 70.0]',
        'seeds': '3 (1 unfinished)',
        'env steps': '4000',
        'median wall time': '6.7 min',
        'ms per env step': '100.0',
        'replay buffer': '4.0 MiB',
        'process RSS': '950.0 MiB',
        'load': '-',
        'Q near termination [95% CI]': '50.0 [40.0, 60.0]',
        'return near termination [95% CI]': '45.0 [36.0, 54.0]',
        'Q - return [95% CI]': '5.0 [4.0, 6.0]',
    }
    # Splits of 20, 50, 80 | 45, 70, 25: 18 of the 20 have a difference of means at
    # least 10/3 from zero (all but the two whose first group sums to 145). Pairs:
    # seed 1 (50 - 45) and seed 2 (80 - 70); flips of 5 and 10: 15, -5, 5, -15.
    assert (
        '- ICubWalk-v0, mask, final eval return: default 50.0 (3 runs) against mask_false '
        '46.7 (3 runs); exact permutation p = 0.900 (two-sided, 20 splits); paired by seed '
        '(2 seeds, default higher in 2): sign-flip p = 0.500 (two-sided); 1 not finished yet.'
    ) in lines
    # Q - return 1, 2, 3 against 4, 5, 6; pairs 2 - 4 and 3 - 5: flips -4, 0, 0, 4.
    assert (
        '- ICubWalk-v0, mask, Q - return: default 2.0 (3 runs) against mask_false 5.0 '
        '(3 runs); exact permutation p = 0.100 (two-sided, 20 splits); paired by seed '
        '(2 seeds, default higher in 0): sign-flip p = 0.500 (two-sided); 1 not finished yet.'
    ) in lines
    docs = tmp_path / 'docs'
    assert figures[str(docs / 'study_sac_icub_mask.png')] == [
        'default=TrainerConfig.mask_out_loss_for_last_step=True',
        'mask_out_loss_for_last_step=False=TrainerConfig.mask_out_loss_for_last_step=False',
    ]


def test_soft_q_entropy_bonus_is_alpha_times_entropy_times_the_discounts_of_the_later_steps(
    tmp_path,
):
    columns = ('env_steps', 'eval/AverageEpisodeLength', 'train/alpha', 'train/entropy')
    rows = [
        (0, 3, None, None),
        (500, None, 0.3, -5.0),
        (1000, 3, 0.1, -6.0),  # the summary at an evaluation's step comes before it
        (1500, None, 0.7, -1.0),
        (2000, 20, None, None),  # the summary before it: 1500's
        (2500, None, 0.9, -9.0),  # after every evaluation: never used
    ]
    run = tmp_path / 'run'
    _write_run(run, columns, rows, 'SacAlgorithm.gamma = 0.5\n')
    # 3 steps counted: the last has no later step, the one before 1 (0.5), the first
    # 2 (0.5 + 0.25).
    assert learning.soft_q_entropy_bonus(str(run), [1000]) == pytest.approx(
        0.1 * -6.0 * (0 + 0.5 + 0.75) / 3
    )
    # 20 steps long: the last 10 count.
    tenth = sum(sum(0.5**i for i in range(1, k)) for k in range(1, 11)) / 10
    assert learning.soft_q_entropy_bonus(str(run), [1000, 2000]) == pytest.approx(
        (0.1 * -6.0 * 1.25 / 3 + 0.7 * -1.0 * tenth) / 2
    )
    # No alpha before the evaluation (not SAC, or not trained yet): no estimate.
    assert learning.soft_q_entropy_bonus(str(run), [0, 1000]) is None
    # Without a gamma binding, SacAlgorithm's default (0.99).
    (run / 'config.gin').write_text('')
    assert learning.soft_q_entropy_bonus(str(run), [1000]) == pytest.approx(
        0.1 * -6.0 * (0 + 0.99 + 0.99 + 0.99**2) / 3
    )


def test_report_gives_each_sac_settings_entropy_bonus_and_q_above_return_less_it(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / 'runs'
    columns = (
        'env_steps',
        'eval/AverageReturn',
        'eval/AverageEpisodeLength',
        'eval/QNearTermination',
        'eval/ReturnNearTermination',
        'train/alpha',
        'train/entropy',
    )
    # (setting, seed, Q - return, alpha): one evaluation, 2 steps long, gamma 1: each
    # run's bonus is alpha * -10 * (0 + 1) / 2.
    runs = [
        ('default', 0, 1.0, 0.2),
        ('default', 1, 2.0, 0.4),
        ('mask_false', 0, 5.0, 0.2),
        ('mask_false', 1, 7.0, 0.2),
    ]
    for setting, seed, above, alpha in runs:
        _write_run(
            out / 'study_sac' / f'icub_{setting}' / f'seed{seed}',
            columns,
            [
                (1000, None, None, None, None, alpha, -10.0),
                (1000, 30, 2, 10, 10 - above, None, None),
            ],
            f'TrainerConfig.mask_out_loss_for_last_step = {setting == "default"}\n'
            'SacAlgorithm.resample_action_per_loss = False\n'
            'SacAlgorithm.gamma = 1.0\n',
        )
    lines, _ = _report('study_sac', out, tmp_path / 'docs', monkeypatch, capsys)
    # Bonuses -1 and -2 (default), -1 and -1 (mask_false).
    assert (
        '- ICubWalk-v0, default: entropy bonus -1.5 [-2.0, -1.0]; Q - return - entropy bonus '
        '3.0 [2.0, 4.0] (2 runs: 2.0, 4.0)'
    ) in lines
    assert (
        '- ICubWalk-v0, mask_out_loss_for_last_step=False: entropy bonus -1.0 [-1.0, -1.0]; '
        'Q - return - entropy bonus 7.0 [6.0, 8.0] (2 runs: 6.0, 8.0)'
    ) in lines
    assert (
        '- ICubWalk-v0, mask, Q - return - entropy bonus: default 3.0 (2 runs) against '
        'mask_false 7.0 (2 runs); exact permutation p = 0.333 (two-sided, 6 splits); paired '
        'by seed (2 seeds, default higher in 0): sign-flip p = 0.500 (two-sided); 4 not '
        'finished yet.'
    ) in lines


def test_report_intervals_are_the_bootstrap_intervals_of_the_runs(tmp_path, monkeypatch, capsys):
    from alf_lite.bin.plot import band

    out = tmp_path / 'runs'
    columns = (
        'env_steps',
        'eval/AverageReturn',
        'eval/QNearTermination',
        'eval/ReturnNearTermination',
    )
    # Seven runs, one far from the others: the 95% bootstrap interval of the mean is
    # narrower than their range.
    finals = [10.0, 12.0, 11.0, 13.0, 9.0, 12.0, 80.0]
    q = [5.0, 6.0, 4.0, 7.0, 5.0, 6.0, 40.0]
    above = [1.0, 2.0, 1.0, 3.0, 2.0, 1.0, 20.0]
    for seed, (final, q_end, q_above) in enumerate(zip(finals, q, above)):
        _write_run(
            out / 'study_sac' / 'icub_default' / f'seed{seed}',
            columns,
            [(1000, final, q_end, q_end - q_above)],
            'TrainerConfig.mask_out_loss_for_last_step = True\n'
            'SacAlgorithm.resample_action_per_loss = False\n',
        )
    lines, _ = _report('study_sac', out, tmp_path / 'docs', monkeypatch, capsys)
    row = _table(lines)[('alf_lite', 'default')]
    for column, values in (
        ('final eval return, mean [95% CI]', finals),
        ('Q near termination [95% CI]', q),
        ('return near termination [95% CI]', [v - a for v, a in zip(q, above)]),
        ('Q - return [95% CI]', above),
    ):
        ci = '{:.1f} [{:.1f}, {:.1f}]'.format(*band(values, 'ci'))
        span = f'{sum(values) / len(values):.1f} [{min(values):.1f}, {max(values):.1f}]'
        assert row[column] == ci != span, column


def test_suite_of_both_frameworks_names_curves_and_rows_by_framework(tmp_path, monkeypatch, capsys):
    out = tmp_path / 'runs'
    finals = {
        ('alf_sac', '@SacAlgorithm'): (-150.0, -170.0),
        ('sb3_sac', '@stable_baselines3.SAC'): (-300.0, -200.0),
    }
    for (name, ctor), values in finals.items():
        for seed, final in enumerate(values):
            # SB3's seed 1 is still training.
            done = None if (name, seed) == ('sb3_sac', 1) else _done(wall_time_s=60.0)
            _write_run(
                out / 'pendulum' / name / f'seed{seed}',
                ('env_steps', 'eval/AverageReturn'),
                [(1000, final)],
                f'TrainerConfig.algorithm_ctor = {ctor}\n',
                done,
            )
    lines, figures = _report('pendulum', out, tmp_path / 'docs', monkeypatch, capsys)
    assert figures == {
        str(tmp_path / 'docs' / 'pendulum.png'): [
            'alf_lite SAC=TrainerConfig.algorithm_ctor=@SacAlgorithm',
            'SB3 SAC=TrainerConfig.algorithm_ctor=@stable_baselines3.SAC',
        ]
    }
    table = _table(lines)
    # Two runs: a resampling's mean is either value or their midpoint, so the 95%
    # interval runs from one value to the other.
    assert table[('alf_lite', 'SAC')]['final eval return, mean [95% CI]'] == (
        '-160.0 [-170.0, -150.0]'
    )
    assert table[('SB3', 'SAC')]['seeds'] == '2 (1 unfinished)'
    assert (
        "- Pendulum-v1 SAC: alf_lite -160.0 [-170.0, -150.0] (2 runs) is above SB3's "
        'interval, -250.0 [-300.0, -200.0] (2 runs); the intervals do not overlap '
        '(1 run not finished yet).'
    ) in lines


def test_replay_study_report_lists_each_run_and_tests_each_pair_of_capacities(
    tmp_path, monkeypatch, capsys
):
    out, gib = tmp_path / 'runs', 2**30
    columns = (
        'env_steps',
        'eval/AverageReturn',
        'eval/AverageEpisodeLength',
        'train/process_rss_bytes',
    )
    per_env = {'10k': 833, '100k': 8333, 'full': 25000}
    # (capacity, seed, final return, eval episode length at the last evaluation)
    runs = [('10k', 0, 40, 8), ('10k', 1, 45, 7.5), ('10k', 2, 50, 9)]
    runs += [('100k', s, f, 10 * s + 10) for s, f in enumerate((100, 200, 300, 400))]
    runs += [('full', s, f, 10 * s + 5) for s, f in enumerate((90, 150, 310, 350))]
    for capacity, seed, final, length in runs:
        rss = {'10k': 1.5, '100k': 1.6, 'full': 1.75}[capacity] * gib
        rows = [(0, 0, 50, 9 * gib), (6000, final, 20, 9 * gib), (12000, final, length, rss)]
        _write_run(
            out / 'study_replay' / f'icub_replay_{capacity}' / f'seed{seed}',
            columns,
            rows,
            f'TrainerConfig.replay_buffer_length = {per_env[capacity]}\n',
            _done(wall_time_s=60.0, env_steps=12000),
        )
    lines, figures = _report('study_replay', out, tmp_path / 'docs', monkeypatch, capsys)
    assert list(figures) == [str(tmp_path / 'docs' / 'study_replay.png')]
    table = _table(lines)
    assert table[('alf_lite', 'replay full (whole run)')]['process RSS'] == '1.75 GiB'
    # Each run's mean over its last 3 evaluations: returns (0, final, final), episode
    # lengths (50, 20, length).
    assert (
        '- ICubWalk-v0, replay 10k: seed 0 26.7 (26.0 steps), seed 1 30.0 (25.8 steps), '
        'seed 2 33.3 (26.3 steps)'
    ) in lines
    assert (
        '- ICubWalk-v0, replay 100k: seed 0 66.7 (26.7 steps), seed 1 133.3 (30.0 steps), '
        'seed 2 200.0 (33.3 steps), seed 3 266.7 (36.7 steps)'
    ) in lines
    # 100K against the whole run, 4 pairs: differences 2/3 of 10, 50, -10, 50; of the 16
    # sign flips, 6 have a sum as far from zero (all + or all -, or one 10 flipped).
    finals = {c: [2 * f / 3 for cc, _, f, _ in runs if cc == c] for c in per_env}
    assert (
        '- ICubWalk-v0, capacity, final eval return: replay_100k 166.7 (4 runs) against '
        f'replay_full 150.0 (4 runs); exact permutation p = '
        f'{learning.permutation_p(finals["100k"], finals["full"]):.3f} (two-sided, 70 splits); '
        'paired by seed (4 seeds, replay_100k higher in 3): sign-flip p = 0.375 (two-sided).'
    ) in lines
    # 10K's 3 runs below all 4 of 100K: of the 35 splits, only the observed one and
    # 100K's top three against the rest are as far apart; 3 pairs on one side: 2 / 8.
    assert (
        '- ICubWalk-v0, capacity, final eval return: replay_10k 30.0 (3 runs) against '
        'replay_100k 166.7 (4 runs); exact permutation p = 0.057 (two-sided, 35 splits); '
        'paired by seed (3 seeds, replay_10k higher in 0): sign-flip p = 0.250 (two-sided).'
    ) in lines
    assert (
        sum(
            line.startswith('- ICubWalk-v0, capacity, final eval return: replay_10k')
            for line in lines
        )
        == 2
    )


# The launcher and the SB3 runner's parts, run on files in tmp_path: the runs are tiny
# Python processes that write what a training run writes.


def _pendulum_run(steps, framework='alf_lite', seed=0):
    """alf_lite SAC on Pendulum of ``steps`` env steps; another framework cannot resume."""
    import dataclasses

    (run,) = [r for r in learning.suite_runs('pendulum', [seed], steps) if r.name == 'alf_sac']
    return dataclasses.replace(run, framework=framework)


def _python(script, *args):
    """A command running ``script`` in a fresh Python process; ``sys.argv[1:]`` are ``args``."""
    return [sys.executable, '-c', script, *map(str, args)]


# Waits argv[1] seconds, then appends ``env_steps,eval/AverageReturn`` rows (the
# arguments after the run directory, in pairs) to its progress.csv.
_APPEND_ROWS = """
import os, sys, time
time.sleep(float(sys.argv[1]))
run_dir, values = sys.argv[2], sys.argv[3:]
with open(os.path.join(run_dir, 'progress.csv'), 'a') as f:
    for steps, value in zip(values[::2], values[1::2]):
        f.write(f'{steps},{value}\\n')
"""

# A shell that runs until SIGTERM (at most 20 s), then appends the row ($2, $3) to
# $1/progress.csv and exits with status $4: it reacts at once, with no interpreter
# to start first.
_UNTIL_SIGTERM = (
    'trap \'echo "$2,$3" >> "$1/progress.csv"; kill $!; exit $4\' TERM; '
    'touch "$1/ready"; sleep 20 & wait'
)


def _until_sigterm(run_dir, steps, value, status):
    return ['sh', '-c', _UNTIL_SIGTERM, 'sh', str(run_dir), str(steps), str(value), str(status)]


def _launcher(out, command, *args):
    """A ``Launcher`` of the runs in ``out`` that starts every run with ``command``."""
    return launcher.Launcher(str(out), lambda run: command, *args)


def _write_progress(run_dir, rows, config=True):
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = ['env_steps,eval/AverageReturn'] + [f'{s},{v}' for s, v in rows]
    (run_dir / 'progress.csv').write_text('\n'.join(lines) + '\n')
    if config:
        (run_dir / 'config.gin').write_text('TrainerConfig.random_seed = 0\n')


def _attempts(run, out):
    with open(run.log_path(str(out), launcher.ATTEMPTS_SUFFIX)) as f:
        return json.load(f)


def test_resumed_run_is_done_with_its_attempts_wall_times_load_and_last_three_evaluations(
    tmp_path, monkeypatch
):
    out = tmp_path / 'runs'
    # A run that collects several env steps an iteration may end past its length:
    # this one of 990 env steps ends at 1000.
    run = _pendulum_run(990)
    run_dir = tmp_path / 'runs' / 'pendulum' / 'alf_sac' / 'seed0'
    # The first attempt got to 300 env steps in 40 s at a load of 2.0 and was
    # killed; its last checkpoint is of 250 env steps.
    _write_progress(run_dir, [(0, -1000), (250, -800), (300, -700)])
    (run_dir / 'checkpoints' / 'ckpt-250').mkdir(parents=True)
    logs = out / 'pendulum' / 'logs'
    logs.mkdir(parents=True)
    first = dict(started=1.0, wall_time_s=40.0, returncode=143, env_steps_from=0)
    first.update(env_steps_to=300, kind=list(run.kind), mean_load=2.0, code='abc')
    (logs / 'alf_sac.seed0.attempts.json').write_text(json.dumps([first]))
    command = _python(_APPEND_ROWS, 0, run_dir, 500, -600, 750, -400, 1000, -300)

    # The checkout as the attempt starts, not as it ends (commits made while it trains).
    def code_version():
        ended = '1000,' in (run_dir / 'progress.csv').read_text()
        return 'ghi' if ended else 'def+dirty'

    monkeypatch.setattr(launcher, 'code_version', code_version)
    result = _launcher(out, command).execute(run)
    assert result['status'] == 'done' and result['detail'] == 'resumed'
    first_again, second = _attempts(run, out)
    assert first_again == first
    assert second['returncode'] == 0 and second['kind'] == list(run.kind)
    # This attempt resumed at the checkpoint and ended at the run's end.
    assert (second['env_steps_from'], second['env_steps_to']) == (250, 1000)
    # It ended before the first load sample: its load is unknown, not zero.
    assert second['mean_load'] is None
    done = json.loads((run_dir / 'done.json').read_text())
    assert done == result['done']
    assert {k: done[k] for k in ('framework', 'algo', 'env', 'seed', 'setting')} == {
        'framework': 'alf_lite',
        'algo': 'sac',
        'env': 'Pendulum-v1',
        'seed': 0,
        'setting': run.setting,
    }
    assert (done['target_env_steps'], done['env_steps']) == (990, 1000)
    assert done['final_eval_return'] == -300
    assert done['final_eval_return_last3'] == pytest.approx((-600 - 400 - 300) / 3)
    assert done['attempts'] == 2
    assert done['wall_time_s'] == pytest.approx(40.0 + second['wall_time_s'])
    # The attempt without a load does not weigh in.
    assert done['mean_load'] == 2.0
    assert second['code'] == 'def+dirty'
    assert done['code'] == ['abc', 'def+dirty']


# A launcher that starts the run of argv[1] with the command argv[2:] and is killed
# while it runs.
_KILLED_LAUNCHER = """
import sys
from benchmarks import launcher, learning
(run,) = [r for r in learning.suite_runs('pendulum', [0], 1000) if r.name == 'alf_sac']
launcher.Launcher(sys.argv[1], lambda run: sys.argv[2:]).execute(run)
"""


def test_an_attempt_whose_launcher_was_killed_counts_in_the_runs_wall_time(tmp_path):
    # Recorded only once its launcher saw the run end, the attempt was lost with a
    # SIGKILLed launcher: done.json had 1 attempt and the last one's wall time alone.
    out = tmp_path / 'runs'
    run = _pendulum_run(1000)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    _write_progress(run_dir, [(0, -1000)])
    # The run goes on for 2 s after its launcher is gone, as a run stops at a checkpoint.
    script = (
        'import os, sys, time\n'
        'launcher = os.getppid()\n'
        'open(os.path.join(sys.argv[1], "ready"), "w").close()\n'
        'while os.getppid() == launcher: time.sleep(0.05)\n'
        'time.sleep(2)\n'
        'print("stopped at", "a checkpoint", flush=True)\n'
    )
    killed = subprocess.Popen(
        [
            sys.executable,
            '-c',
            _KILLED_LAUNCHER,
            str(out),
            sys.executable,
            '-c',
            script,
            str(run_dir),
        ],
        cwd=REPO_ROOT,
        env=train_env(),
    )
    try:
        deadline = time.time() + RUN_TIMEOUT_S
        while not (run_dir / 'ready').exists() and time.time() < deadline:
            time.sleep(0.05)
        killed.kill()
    finally:
        killed.wait()
    log = out / 'pendulum' / 'logs' / 'alf_sac.seed0.log'
    while 'stopped at a checkpoint' not in log.read_text() and time.time() < deadline:
        time.sleep(0.05)  # the orphaned run stops

    command = _python(_APPEND_ROWS, 0, run_dir, 1000, -300)
    result = _launcher(out, command).execute(run)
    assert result['status'] == 'done', result
    first, second = _attempts(run, out)
    assert first['returncode'] is None and first['env_steps_to'] == 0
    assert 2 <= first['wall_time_s'] < RUN_TIMEOUT_S
    assert second['returncode'] == 0
    done = json.loads((run_dir / 'done.json').read_text())
    assert done['attempts'] == 2
    assert done['wall_time_s'] == pytest.approx(first['wall_time_s'] + second['wall_time_s'])


def test_an_attempt_s_wall_time_is_not_changed_by_the_clock_being_set(tmp_path, monkeypatch):
    out = tmp_path / 'runs'
    run = _pendulum_run(1000)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    _write_progress(run_dir, [], config=False)
    # Set back an hour while the run trains (NTP stepping the clock, say).
    monkeypatch.setattr(launcher, 'time', ClockSetBack(3600))
    result = _launcher(out, _python(_APPEND_ROWS, 0.3, run_dir, 1000, -300)).execute(run)
    assert result['status'] == 'done', result
    (attempt,) = _attempts(run, out)
    assert 0.3 <= attempt['wall_time_s'] < RUN_TIMEOUT_S, attempt


def test_a_run_trained_where_an_earlier_one_was_moved_away_counts_only_its_own_attempts(tmp_path):
    out = tmp_path / 'runs'
    run = _pendulum_run(1000)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    # Trains the run from nothing, as train does in a directory that is not there.
    command = [
        'sh',
        '-c',
        'mkdir -p "$1" && printf "env_steps,eval/AverageReturn\\n0,-900\\n1000,$2\\n" '
        '> "$1/progress.csv"',
        'sh',
        str(run_dir),
    ]
    first = _launcher(out, [*command, '-300']).execute(run)
    assert first['status'] == 'done', first
    (earlier,) = _attempts(run, out)
    # Moved away, as the launcher advises for a run of other settings.
    shutil.move(run_dir, tmp_path / 'moved')
    second = _launcher(out, [*command, '-200']).execute(run)
    assert second['status'] == 'done', second
    (attempt,) = _attempts(run, out)
    assert attempt['started'] > earlier['started']
    done = json.loads((run_dir / 'done.json').read_text())
    assert (done['attempts'], done['wall_time_s']) == (1, attempt['wall_time_s'])
    assert done['final_eval_return'] == -200
    # The earlier run's attempts are kept, where the estimate reads them.
    (kept,) = (out / 'pendulum' / 'logs').glob('alf_sac.seed0.until-*' + launcher.ATTEMPTS_SUFFIX)
    assert json.loads(kept.read_text()) == [earlier]


def test_a_resume_train_refuses_is_failed_with_the_launchers_own_advice(tmp_path):
    out = tmp_path / 'runs'
    run = _pendulum_run(1000)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    run_dir.mkdir(parents=True)
    (run_dir / 'config.gin').write_text('TrainerConfig.num_env_steps = 2000\n')
    # Train's refusal of a resume of other settings names train's flags, not the launcher's.
    refusal = (
        "import sys; print('error: ... resume it with --root_dir alone, or --start_over', "
        'file=sys.stderr); raise SystemExit(2)'
    )
    result = _launcher(out, _python(refusal)).execute(run)
    assert result['status'] == 'failed', result
    assert result['detail'].startswith(
        'exit code 2: error: ... resume it with --root_dir alone, or --start_over; '
    )
    assert (
        f'; the launcher resumes a run only with the settings it started with: move {run_dir} '
        'away to train it afresh (log: '
    ) in result['detail']
    # A refusal with nothing to resume is train's alone.
    shutil.rmtree(run_dir)
    result = _launcher(out, _python(refusal)).execute(run)
    assert result['status'] == 'failed' and 'move' not in result['detail'], result


def test_run_ending_without_an_evaluation_or_with_an_error_or_a_signal_is_not_done(tmp_path):
    out = tmp_path / 'runs'
    run = _pendulum_run(1000)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    cases = [
        # (script, status, words of the detail)
        ('pass', 'failed', 'no eval/AverageReturn in'),
        (
            "print('ValueError: bad value'); raise SystemExit(3)",
            'failed',
            'exit code 3: ValueError',
        ),
        # Train's own exit status after SIGINT, and a process killed by SIGTERM.
        ('raise SystemExit(130)', 'interrupted', 'exit code 130'),
        (
            'import os, signal; os.kill(os.getpid(), signal.SIGTERM)',
            'interrupted',
            'killed by SIGTERM (exit code -15)',
        ),
    ]
    for script, status, words in cases:
        result = _launcher(out, _python(script)).execute(run)
        assert (result['status'], words in result['detail']) == (status, True), result
    assert not (run_dir / 'done.json').exists()
    assert [a['returncode'] for a in _attempts(run, out)] == [0, 3, 130, -15]


def test_a_run_whose_attempts_file_is_no_list_of_attempts_fails_naming_it_and_keeps_it(
    tmp_path,
):
    out = tmp_path / 'runs'
    run = _pendulum_run(1000)
    path = tmp_path / 'runs' / 'pendulum' / 'logs' / 'alf_sac.seed0.attempts.json'
    path.parent.mkdir(parents=True)
    attempt = json.dumps([dict(started=1.0, wall_time_s=40.0, returncode=-9, kind=['x'])])
    started = tmp_path / 'started'
    command = _python(f'open({str(started)!r}, "w")')
    # Cut short, edited into an object, an attempt that is not an object, one without its time.
    for text in (attempt[:30], '{"wall_time_s": 3}', '[1]', '[{"started": 1.0}]'):
        path.write_text(text)
        # With a deadline, the estimate reads the attempts files too.
        for deadline in (None, time.time() + 3600):
            result = _launcher(out, command, deadline).execute(run)
            assert result['status'] == 'failed', result
            assert result['detail'].startswith(f'{path} is not a JSON list of attempts')
            assert path.read_text() == text
    assert not started.exists()


def test_a_done_json_that_is_no_finished_runs_record_is_an_error_naming_it_and_is_kept(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(learning, '_figures', lambda *args: [])  # no figures to draw
    out = tmp_path / 'runs'
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    _write_progress(run_dir, [(0, -1000), (2, -900)])
    argv = ['--suite', 'pendulum', '--runs', 'alf_sac', '--seeds', '0', '--steps', '2']
    argv += ['--out', str(out), '--docs_dir', str(tmp_path / 'docs')]
    done = _done(env_steps=2, final_eval_return=-900.0, wall_time_s=3.0, target_env_steps=2)
    no_object = 'is not the JSON object of a finished run'
    # Cut short, and edited into a list; an object without a finished run's figures
    # (edited by hand, or of another tool).
    records = [('{"target_env_steps": 2, "wall', no_object), ('[2]', no_object)]
    for key, value in (('wall_time_s', None), ('env_steps', '2'), ('finished', 0)):
        text = json.dumps({k: v for k, v in dict(done, **{key: value}).items() if v is not None})
        records.append((text, f"lacks a finished run's {key} (or holds another kind of value)"))
    for text, what in records:
        (run_dir / 'done.json').write_text(text)
        for mode in ([], ['--dry_run'], ['--report']):
            with pytest.raises(SystemExit) as e:
                learning.main(argv + mode)
            assert e.value.code == 2
            err = capsys.readouterr().err.splitlines()[-1]
            assert err == (
                f'error: {run_dir}/done.json {what}: mend it, or move it away to train the run '
                'again'
            )
            assert (run_dir / 'done.json').read_text() == text
    # Nothing trained.
    assert not (out / 'pendulum' / 'logs').exists()
    # The whole record is a finished run.
    (run_dir / 'done.json').write_text(json.dumps(done))
    assert learning.main(argv + ['--dry_run']) == 0
    assert capsys.readouterr().out.startswith('# done, skipped: ')


def test_the_estimate_measures_a_finished_run_once_not_also_by_its_attempts(tmp_path):
    (run,) = learning.suite_runs('hopper', seeds=[2], steps=150_000)[:1]
    kind = dict(framework='alf_lite', algo='sac', env='Hopper-v5', env_steps=100_000)

    def finished_run(seed, wall, finished):
        d = tmp_path / 'hopper' / 'alf_sac' / f'seed{seed}'
        d.mkdir(parents=True)
        (d / 'done.json').write_text(json.dumps(_done(**kind, wall_time_s=wall, finished=finished)))

    finished_run(0, 3000.0, '2026-11-02 10:00:00')
    finished_run(1, 1000.0, '2026-11-03 10:00:00')
    finished_run(3, 2000.0, '2026-11-05 09:25:00')
    # Run 3 trained in one attempt, which its done.json sums: one measurement, not two
    # that would push run 0's, the slowest of the three most recent runs, out.
    logs = tmp_path / 'hopper' / 'logs'
    logs.mkdir()
    started = time.mktime(time.strptime('2026-11-05 09:00:00', '%Y-%m-%d %H:%M:%S'))
    attempt = dict(kind=['alf_lite', 'sac', 'Hopper-v5'], started=started, wall_time_s=2000.0)
    (logs / 'alf_sac.seed3.attempts.json').write_text(
        json.dumps([dict(attempt, env_steps_from=0, env_steps_to=100_000)])
    )
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'slowest of the 3 most recent of 3 measurements'
    assert seconds == pytest.approx(150_000 * 0.03)
    # The attempts of a run not finished, or of one whose directory was moved away, count.
    for name in ('alf_sac.seed4', 'alf_sac.seed3.until-2026-11-05T09:30:00'):
        (logs / f'{name}.attempts.json').write_text(
            json.dumps([dict(attempt, env_steps_from=0, env_steps_to=200_000)])
        )
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'slowest of the 3 most recent of 5 measurements'
    assert seconds == pytest.approx(150_000 * 0.02)


def test_a_done_json_without_one_of_a_finished_runs_numbers_is_refused_naming_it(tmp_path):
    done = _done()
    for key in ('env_steps', 'final_eval_return', 'final_eval_return_last3', 'wall_time_s'):
        # Missing, or a JSON true (a bool is no number of steps, return or time).
        for record in ({k: v for k, v in done.items() if k != key}, dict(done, **{key: True})):
            (tmp_path / 'done.json').write_text(json.dumps(record))
            with pytest.raises(launcher.UnreadableRecord, match=f"finished run's {key} "):
                launcher.read_done(str(tmp_path))
    (tmp_path / 'done.json').write_text(json.dumps(done))
    assert launcher.read_done(str(tmp_path)) == done


def test_the_estimate_leaves_out_a_done_json_that_is_no_json_object(tmp_path):
    # Another run's done.json edited into a list: that run is refused when trained or
    # reported, and the estimate of this one goes on without it.
    (run,) = learning.suite_runs('hopper', seeds=[2], steps=150_000)[:1]
    other = tmp_path / 'study_sac' / 'hopper_default' / 'seed0'
    other.mkdir(parents=True)
    (other / 'done.json').write_text('[2]')
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'assumed rate'
    assert seconds == pytest.approx(150_000 * run.task.assumed_seconds_per_step)


def test_the_estimate_leaves_out_a_done_json_of_its_kind_without_a_finished_runs_numbers(tmp_path):
    # A run of the same kind whose done.json lacks its wall time (edited by hand).
    (run,) = learning.suite_runs('hopper', seeds=[2], steps=150_000)[:1]
    other = tmp_path / 'hopper' / 'alf_sac' / 'seed0'
    other.mkdir(parents=True)
    done = _done(framework='alf_lite', algo='sac', env='Hopper-v5', env_steps=1000)
    del done['wall_time_s']
    (other / 'done.json').write_text(json.dumps(done))
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'assumed rate'
    assert seconds == pytest.approx(150_000 * run.task.assumed_seconds_per_step)


def test_a_stopped_launcher_starts_no_run_even_when_stopped_while_preparing_it(tmp_path):
    out = tmp_path / 'runs'
    run = _pendulum_run(1000)
    marker = tmp_path / 'started'
    command = _python('import sys; open(sys.argv[1], "w").close()', marker)
    stopped = _launcher(out, command)
    stopped.stop(signal.SIGTERM)
    assert stopped.execute(run) == dict(run=run, status='not started', detail='stopped')
    assert not (out / 'pendulum' / 'logs').exists()

    # Stopped between the checks and the start (while its command is made).
    def command_then_stop(r):
        preparing.stop(signal.SIGINT)
        return command

    preparing = launcher.Launcher(str(out), command_then_stop)
    assert preparing.execute(run)['status'] == 'not started'
    assert not marker.exists()


def test_stop_passes_its_signal_on_to_the_running_runs(tmp_path):
    import threading

    out = tmp_path / 'runs'
    run = _pendulum_run(1000)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    run_dir.mkdir(parents=True)
    command = _until_sigterm(run_dir, 10, -1, 143)
    runner = _launcher(out, command)
    results = []
    thread = threading.Thread(target=lambda: results.append(runner.execute(run)))
    thread.start()
    try:
        deadline = time.time() + RUN_TIMEOUT_S
        while not (run_dir / 'ready').exists() and time.time() < deadline:
            time.sleep(0.01)
        runner.stop(signal.SIGTERM)
    finally:
        thread.join(timeout=RUN_TIMEOUT_S)
    (result,) = results
    assert result['status'] == 'interrupted' and 'exit code 143' in result['detail']
    assert runner.stopping


# Two runs that stop on SIGHUP once both have started; then the launcher's terminal closes
# (its stdout and stderr fail with EIO) and it gets SIGHUP.
_LAUNCHER_ON_A_CLOSED_TERMINAL = """
import dataclasses, json, os, signal, sys, threading, time
out = sys.argv[1]
terminal, tty = os.openpty()
os.dup2(tty, 1)
os.dup2(tty, 2)
from benchmarks import launcher, learning
(run,) = [r for r in learning.suite_runs('pendulum', [0], 1000) if r.name == 'alf_sac']
runs = [dataclasses.replace(run, framework='custom', seed=seed) for seed in (0, 1)]
script = (
    'import os, signal, sys, time\\n'
    'signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))\\n'
    'open(sys.argv[1], "w").close()\\n'
    'time.sleep(20)'
)
ready = [os.path.join(out, f'ready{run.seed}') for run in runs]
def close_the_terminal():
    while not all(map(os.path.exists, ready)):
        time.sleep(0.01)
    os.close(terminal)
    os.kill(os.getpid(), signal.SIGHUP)
threading.Thread(target=close_the_terminal, daemon=True).start()
os.makedirs(out)
command = lambda run: [sys.executable, '-c', script, ready[run.seed]]
code = launcher.train_runs(runs, out, 2, command)
with open(os.path.join(out, 'exit_code'), 'w') as f:
    f.write(str(code))
"""


def test_a_launcher_whose_terminal_closed_records_every_interrupted_run(tmp_path):
    # Its first result line, to the closed terminal, raised: the other run stayed 'pending'
    # in plan.json, without the launcher's summary and exit code.
    out = tmp_path / 'runs'
    result = run_python(_LAUNCHER_ON_A_CLOSED_TERMINAL.replace('sys.argv[1]', repr(str(out)), 1))
    assert result.returncode == 0
    assert (out / 'exit_code').read_text() == '1'
    plan = json.loads((out / 'plan.json').read_text())
    assert [plan[key]['status'] for key in sorted(plan)] == ['interrupted', 'interrupted']


# Two runs that exit 143 on SIGTERM, else after a minute; once both have started, a
# SIGTERM reaches the launcher through a thread other than its main one (which blocks it).
_LAUNCHER_SIGNALLED_IN_ANOTHER_THREAD = """
import dataclasses, os, signal, sys, threading, time
out = sys.argv[1]
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
thread_run = threading.Thread.run
def run_unblocked(self):
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    thread_run(self)
threading.Thread.run = run_unblocked
from benchmarks import launcher, learning
(run,) = [r for r in learning.suite_runs('pendulum', [0], 1000) if r.name == 'alf_sac']
runs = [dataclasses.replace(run, framework='custom', seed=seed) for seed in (0, 1)]
script = (
    'import signal, sys, time\\n'
    'signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\\n'
    'open(sys.argv[1], "w").close()\\n'
    'time.sleep(60)'
)
ready = [os.path.join(out, f'ready{run.seed}') for run in runs]
def stop_once_both_run():
    while not all(map(os.path.exists, ready)):
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=stop_once_both_run, daemon=True).start()
os.makedirs(out)
command = lambda run: [sys.executable, '-c', script, ready[run.seed]]
started = time.monotonic()
code = launcher.train_runs(runs, out, 2, command)
print(code, round(time.monotonic() - started))
"""


def test_a_launcher_whose_signal_another_thread_got_stops_its_runs_at_once(tmp_path):
    # The main thread, waiting for the runs without a timeout, never ran the handler: the
    # runs went on to their end.
    out = tmp_path / 'runs'
    script = _LAUNCHER_SIGNALLED_IN_ANOTHER_THREAD.replace('sys.argv[1]', repr(str(out)), 1)
    result = run_python(script)
    assert result.returncode == 0, result.stderr[-3000:]
    code, seconds = map(int, result.stdout.split()[-2:])
    assert code == 1 and seconds < 30, result.stdout
    plan = json.loads((out / 'plan.json').read_text())
    assert [plan[key]['status'] for key in sorted(plan)] == ['interrupted', 'interrupted']


def test_runs_of_a_killed_launcher_stop_at_a_checkpoint(tmp_path):
    # SIGKILL (or the OOM killer) lets learning.py pass no stop on: its runs, alf_lite's
    # train and the SB3 runner, notice that it ended and stop as on SIGTERM.
    import psutil

    out = tmp_path / 'runs'
    args = ['--suite', 'pendulum', '--seeds', 0, '--steps', 100_000, '--out', out]
    args += ['--runs', 'alf_sac', '--runs', 'sb3_sac', '--jobs', 2]
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), *map(str, args)],
        cwd=REPO_ROOT,
        env=train_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run_dirs = {name: out / 'pendulum' / name / 'seed0' for name in ('alf_sac', 'sb3_sac')}
    runs = []
    try:
        deadline = time.time() + RUN_TIMEOUT_S
        # Each has trained past its first evaluation (at 1000 env steps).
        while not all(
            (d / 'progress.csv').exists() and len(_progress(d)) >= 2 for d in run_dirs.values()
        ):
            assert process.poll() is None and time.time() < deadline
            time.sleep(0.1)
        runs = psutil.Process(process.pid).children()
        assert len(runs) == 2
        process.kill()
        process.wait()
        assert psutil.wait_procs(runs, timeout=60)[1] == []
    finally:
        for p in [process, *runs]:
            with contextlib.suppress(psutil.Error, OSError):
                p.kill()
    for name, run_dir in run_dirs.items():
        log = (out / 'pendulum' / 'logs' / f'{name}.seed0.log').read_text()
        assert f'the process that started this train (pid {process.pid}) ended' in log, log
        last_row = int(_progress(run_dir)[-1]['env_steps'])
        if name == 'sb3_sac':
            assert 'stopped by signal 15' in log, log
            assert sb3_common.checkpoint_env_steps(str(run_dir)) >= last_row
        else:
            assert 'interrupted by SIGTERM: checkpoint written' in log, log
            assert checkpoint_steps(run_dir)[-1] >= last_row
        assert last_row < 100_000


def test_deadline_admits_a_run_whose_estimate_with_its_margin_fits(tmp_path):
    out = tmp_path / 'runs'
    # Pendulum's assumed 0.012 s per env step: 100_000 steps need about 1200 s,
    # 1440 s with the margin of 1.2.
    run = _pendulum_run(100_000)
    assert launcher.estimate_seconds(run, str(out)) == (pytest.approx(1200.0), 'assumed rate')
    for left, status in ((1320, 'deferred'), (1560, 'failed')):
        result = _launcher(out, _python('pass'), time.time() + left).execute(run)
        # Admitted, the run starts (and fails: it writes no evaluation).
        assert result['status'] == status, (left, result)
        if status == 'deferred':
            assert result['detail'].startswith(
                'needs about 20.0 min (assumed rate), which would end after the deadline'
            )


def test_partial_starts_only_resumable_runs_and_only_with_enough_time_left(tmp_path):
    out = tmp_path / 'runs'
    # 1200 s needed (see above), 600 s left: a resumable run starts (and fails: it
    # writes no evaluation) when --partial asks for at most 10 minutes.
    resumable, other = _pendulum_run(100_000), _pendulum_run(100_000, framework='custom')
    assert not other.resumable
    cases = [(resumable, 9.5, 'failed'), (resumable, 10.5, 'deferred'), (other, 1, 'deferred')]
    for run, partial_minutes, status in cases:
        result = _launcher(out, _python('pass'), time.time() + 600, partial_minutes).execute(run)
        assert result['status'] == status, (run.framework, partial_minutes, result)
        if status == 'deferred':
            assert 'would end after the deadline' in result['detail']


def _long_run_begun(tmp_path, monkeypatch):
    """``(out, run, run_dir)`` of a 100k-step Pendulum run with its first row written and no
    config.gin, the launcher sampling the load often."""
    monkeypatch.setattr(launcher, 'LOAD_SAMPLE_S', 0.05)
    out = tmp_path / 'runs'
    run = _pendulum_run(100_000)
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    _write_progress(run_dir, [(0, -1000)], config=False)
    return out, run, run_dir


def test_resumable_run_going_at_the_deadline_is_stopped_and_deferred_with_its_steps(
    tmp_path, monkeypatch
):
    out, run, run_dir = _long_run_begun(tmp_path, monkeypatch)
    # It needs 1200 s; with 1 s left it starts only because --partial allows
    # 0.06 s, and is stopped at the deadline after it wrote the row of 500 env steps.
    command = _until_sigterm(run_dir, 500, -100, 143)
    result = _launcher(out, command, time.time() + 1, 0.001).execute(run)
    assert result['status'] == 'deferred', result
    assert result['detail'].startswith('stopped at the deadline at 500 env steps (needs about ')
    assert 'trains until the deadline' in result['detail']
    (attempt,) = _attempts(run, out)
    assert attempt['returncode'] == 143 and attempt['env_steps_to'] == 500
    # It ran for a few load samples.
    assert attempt['mean_load'] is not None
    # A run that finishes as it is stopped is done.
    _write_progress(run_dir, [(0, -1000)], config=False)
    command = _until_sigterm(run_dir, 100_000, -50, 0)
    result = _launcher(out, command, time.time() + 1, 0.001).execute(run)
    assert result['status'] == 'done', result
    assert result['done']['env_steps'] == 100_000
    # Without a config.gin the run started afresh: it did not resume.
    assert result['detail'] == '' and _attempts(run, out)[1]['env_steps_from'] == 0


def test_run_stopped_at_the_deadline_between_two_rows_got_to_its_checkpoint(tmp_path, monkeypatch):
    out, run, run_dir = _long_run_begun(tmp_path, monkeypatch)
    # As train and the SB3 runner stop: a checkpoint where the run is, no progress.csv row.
    command = [
        'sh',
        '-c',
        'trap \'mkdir -p "$1/checkpoints/ckpt-1814"; kill $!; exit 143\' TERM; sleep 20 & wait',
        'sh',
        str(run_dir),
    ]
    result = _launcher(out, command, time.time() + 1, 0.001).execute(run)
    assert result['status'] == 'deferred', result
    assert result['detail'].startswith('stopped at the deadline at 1814 env steps')
    (attempt,) = _attempts(run, out)
    assert (attempt['env_steps_from'], attempt['env_steps_to']) == (0, 1814)


def test_run_that_fails_or_is_killed_when_stopped_at_the_deadline_is_failed_not_deferred(
    tmp_path, monkeypatch
):
    out, run, run_dir = _long_run_begun(tmp_path, monkeypatch)
    # It errs (a checkpoint it could not write) or dies of SIGKILL instead of stopping.
    for trap, words in (
        ('echo "OSError: no space left"; kill $!; exit 1', 'exit code 1: OSError: no space left'),
        ('kill $!; kill -9 $$', 'killed by SIGKILL (exit code -9)'),
    ):
        command = ['sh', '-c', f"trap '{trap}' TERM; sleep 20 & wait"]
        result = _launcher(out, command, time.time() + 1, 0.001).execute(run)
        assert (result['status'], words in result['detail']) == ('failed', True), result
    assert [a['returncode'] for a in _attempts(run, out)] == [1, -9]


def test_run_that_cannot_resume_is_not_stopped_at_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, 'LOAD_SAMPLE_S', 0.05)
    out = tmp_path / 'runs'
    # 10 env steps at 0.012 s (0.144 s with the margin) fit the 1 s left; the run
    # takes longer and finishes.
    run = _pendulum_run(10, framework='custom')
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    _write_progress(run_dir, [(0, -1000), (5, -500)])
    command = _python(_APPEND_ROWS, 1.5, run_dir, 10, -5)
    result = _launcher(out, command, time.time() + 1).execute(run)
    assert result['status'] == 'done', result
    (attempt,) = _attempts(run, out)
    # Not resumed, even with a config.gin of an earlier attempt: it started over.
    assert attempt['env_steps_from'] == 0
    # The load was sampled while it ran, also before the deadline.
    assert attempt['mean_load'] is not None


def test_estimate_counts_long_attempts_by_when_they_ended_and_only_the_steps_left(tmp_path):
    (run,) = learning.suite_runs('hopper', seeds=[2], steps=150_000)[:1]
    base = time.mktime(time.strptime('2026-11-10 10:00:00', '%Y-%m-%d %H:%M:%S'))

    def finished_run(seed, minutes, rate, env_steps=100_000):
        d = tmp_path / 'study_sac' / 'hopper_default' / f'seed{seed}'
        d.mkdir(parents=True)
        when = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(base + 60 * minutes))
        done = _done(framework='alf_lite', algo='sac', env='Hopper-v5', env_steps=env_steps)
        (d / 'done.json').write_text(
            json.dumps(dict(done, wall_time_s=rate * 100_000, finished=when))
        )

    for seed, minutes in enumerate((-100, -10, 0, 10)):
        finished_run(seed, minutes, 0.01)
    # Without env steps a done.json measures nothing.
    finished_run(9, 20, 5.0, env_steps=0)
    logs = tmp_path / 'hopper' / 'logs'
    logs.mkdir(parents=True)
    kind = ['alf_lite', 'sac', 'Hopper-v5']
    attempts = [
        # Started 20 min before the base time, ended 20 min after it: the most recent.
        dict(kind=kind, started=base - 1200, wall_time_s=2400.0, env_steps_from=0),
        # Shorter than MIN_MEASURED_S, or without env steps: they measure nothing.
        dict(kind=kind, started=base, wall_time_s=299.0, env_steps_from=0),
        dict(kind=kind, started=base, wall_time_s=900.0, env_steps_from=5000),
    ]
    to = [60_000, 100, 5000]  # the first: 0.04 s per env step
    (logs / 'alf_sac.seed1.attempts.json').write_text(
        json.dumps([dict(a, env_steps_to=t) for a, t in zip(attempts, to)])
    )
    seconds, source = launcher.estimate_seconds(run, str(tmp_path))
    assert source == 'slowest of the 3 most recent of 5 measurements'
    assert seconds == pytest.approx(150_000 * 0.04)
    # A run whose checkpoint got past its length (a longer run before) needs nothing.
    run_dir = tmp_path / 'hopper' / 'alf_sac' / 'seed2'
    _write_progress(run_dir, [(0, 1), (200_000, 2)], config=False)
    (run_dir / 'checkpoints' / 'ckpt-200000').mkdir(parents=True)
    assert launcher.estimate_seconds(run, str(tmp_path))[0] == 0
    # A run that cannot resume needs all its steps, at the assumed rate of its kind
    # (Hopper's 0.02 s per env step: no measurement is of its framework).
    import dataclasses

    other = dataclasses.replace(run, framework='custom')
    assert other.run_dir(str(tmp_path)) == str(run_dir)
    assert launcher.estimate_seconds(other, str(tmp_path))[0] == pytest.approx(150_000 * 0.02)


def test_plan_keeps_other_calls_runs_and_records_each_runs_state(tmp_path):
    out = tmp_path / 'runs'
    out.mkdir()
    (out / 'plan.json').write_text(json.dumps({'hopper/alf_sac/seed0': {'status': 'done'}}))
    runs = [_pendulum_run(1000, seed=s) for s in range(4)]
    recorded = dict(final_eval_return_last3=-150.0, wall_time_s=30.0, mean_load=1.5, code=['abc'])
    done = _done(target_env_steps=1000, **recorded)
    _write_progress(out / 'pendulum' / 'alf_sac' / 'seed0', [(0, -1), (1000, -2)])
    (out / 'pendulum' / 'alf_sac' / 'seed0' / 'done.json').write_text(json.dumps(done))
    _write_progress(out / 'pendulum' / 'alf_sac' / 'seed1', [(0, -1), (400, -2)])
    results = {runs[3].key: dict(status='deferred', detail='needs about 5 s')}
    launcher.write_plan(str(out), runs, results)
    plan = json.loads((out / 'plan.json').read_text())
    assert list(plan) == sorted(plan)
    assert plan['hopper/alf_sac/seed0'] == {'status': 'done'}
    common = dict(target_env_steps=1000, framework='alf_lite', algo='sac', env='Pendulum-v1')
    common['setting'] = runs[0].setting
    assert plan['pendulum/alf_sac/seed0'] == dict(common, status='done', **recorded)
    assert plan['pendulum/alf_sac/seed1'] == dict(
        common, status='started', env_steps=400, detail=''
    )
    assert plan['pendulum/alf_sac/seed2'] == dict(common, status='pending', env_steps=0, detail='')
    assert plan['pendulum/alf_sac/seed3'] == dict(
        common, status='deferred', env_steps=0, detail='needs about 5 s'
    )


def test_plan_records_a_run_whose_directory_finished_another_length_as_failed(tmp_path, capsys):
    out = tmp_path / 'runs'
    run_dir = out / 'pendulum' / 'alf_sac' / 'seed0'
    _write_progress(run_dir, [(0, -1), (2 * TINY_STEPS, -2)])
    (run_dir / 'done.json').write_text(json.dumps(_done(target_env_steps=2 * TINY_STEPS)))
    argv = ['--suite', 'pendulum', '--runs', 'alf_sac', '--seeds', '0', '--out', str(out)]
    assert learning.main(argv + ['--steps', str(TINY_STEPS)]) == 1
    refusal = f'{run_dir} finished a run of 2400 env steps, not 1200: move it away'
    assert f'failed      pendulum/alf_sac/seed0: {refusal}' in capsys.readouterr().out
    plan = json.loads((out / 'plan.json').read_text())['pendulum/alf_sac/seed0']
    assert (plan['status'], plan['target_env_steps'], plan['env_steps']) == ('failed', 1200, 2400)
    assert plan['detail'].startswith(refusal)
    # As listed before it was tried.
    launcher.write_plan(str(out), learning.parse_args(argv + ['--steps', '1200'])[1], {})
    plan = json.loads((out / 'plan.json').read_text())['pendulum/alf_sac/seed0']
    assert plan['status'] == 'failed'


def test_plan_is_merged_under_a_lock_that_another_launcher_holding_it_makes_wait(tmp_path):
    import fcntl
    import threading

    run = _pendulum_run(1000)
    # Another launcher in this directory, between reading plan.json and writing its own.
    lock = os.open(tmp_path / launcher.PLAN_LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    writer = threading.Thread(target=launcher.write_plan, args=(str(tmp_path), [run], {}))
    writer.start()
    writer.join(0.5)
    assert writer.is_alive() and not (tmp_path / 'plan.json').exists()
    # Its plan, written before it lets go, is merged, not written over.
    (tmp_path / 'plan.json').write_text(json.dumps({'hopper/alf_sac/seed0': {'status': 'done'}}))
    os.close(lock)
    writer.join(10)
    assert not writer.is_alive()
    plan = json.loads((tmp_path / 'plan.json').read_text())
    assert sorted(plan) == ['hopper/alf_sac/seed0', run.key]


def test_plan_cut_short_or_of_another_kind_of_json_is_written_anew(tmp_path):
    run = _pendulum_run(1000)
    for text in ('{"hopper/alf_sac/seed0": {', '[1]', '"plan"', 'null'):
        (tmp_path / 'plan.json').write_text(text)
        launcher.write_plan(str(tmp_path), [run], {})
        plan = json.loads((tmp_path / 'plan.json').read_text())
        assert list(plan) == [run.key] and plan[run.key]['status'] == 'pending', text


def test_train_runs_starts_runs_that_cannot_resume_first_and_fails_when_one_is_interrupted(
    tmp_path, capsys
):
    import signal as signals

    out = tmp_path / 'runs'
    runs = [_pendulum_run(1000, seed=0), _pendulum_run(1000, framework='custom', seed=1)]
    started, plans = [], []

    def command(run):
        started.append(run.seed)
        plans.append(json.loads((out / 'plan.json').read_text()))
        return _python('raise SystemExit(130)')

    def handler(signum, frame):
        pass

    previous = signals.signal(signals.SIGTERM, handler)
    try:
        assert launcher.train_runs(runs, str(out), 1, command) == 1
        assert signals.getsignal(signals.SIGTERM) is handler
    finally:
        signals.signal(signals.SIGTERM, previous)
    assert started == [1, 0]
    # The plan lists every run before the first one starts.
    assert {k: v['status'] for k, v in plans[0].items()} == {
        'pendulum/alf_sac/seed0': 'pending',
        'pendulum/alf_sac/seed1': 'pending',
    }
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2:] == [
        '2 interrupted',
        'run the same command again to continue (runs resume from their last checkpoint)',
    ]


def test_durations_read_in_the_unit_that_gives_at_least_two_of_it():
    assert launcher.format_duration(119.4) == '119 s'
    assert launcher.format_duration(120) == '2.0 min'
    assert launcher.format_duration(7199) == '120.0 min'
    assert launcher.format_duration(7200) == '2.00 h'


def test_deadline_at_the_current_clock_time_is_tomorrow():
    import datetime

    now = datetime.datetime(2026, 1, 2, 10, 30).timestamp()
    assert launcher.parse_deadline('10:30', now) == now + 24 * 3600


def test_load_samples_near_a_deadline_weigh_only_the_time_they_cover():
    # Ten minutes sampled every 30 s at load 1, then samples every second for the
    # last 20 s before a deadline at load 9: 20 of 600 s, not 20 of 40 samples.
    sampler = launcher.LoadSampler(start=1000.0)
    assert sampler.mean() is None
    for k in range(1, 20):
        sampler.sample(1000.0 + 30 * k, 1.0)
    for k in range(1, 21):
        sampler.sample(1570.0 + k, 9.0)
    assert sampler.mean() == pytest.approx((1.0 * 570 + 9.0 * 20) / 590)
    # A sample at the same instant as the one before it adds no time.
    sampler.sample(1590.0, 100.0)
    assert sampler.mean() == pytest.approx((1.0 * 570 + 9.0 * 20) / 590)


def test_mean_load_weighs_each_attempt_by_its_wall_time_and_counts_a_zero_load():
    attempts = [
        dict(mean_load=0.0, wall_time_s=30.0),
        dict(mean_load=4.0, wall_time_s=10.0),
        dict(mean_load=None, wall_time_s=500.0),
    ]
    assert launcher._mean_load(attempts) == pytest.approx(1.0)  # (0 * 30 + 4 * 10) / 40
    assert launcher._mean_load(attempts[2:]) is None


def test_sb3_config_gives_the_run_in_alf_lites_binding_names(tmp_path):
    from alf_lite.runs import config_bindings

    # 800 env steps: fewer than Pendulum's 1000 random steps, so half of them are random.
    (run,) = [r for r in learning.suite_runs('pendulum', [3], 800) if r.name == 'sb3_sac']
    settings = sb3_runner.sb3_settings(run)
    (tmp_path / 'config.gin').write_text(sb3_runner.sb3_config_text(run, settings))
    bindings = config_bindings(str(tmp_path))
    assert {k: v for k, v in bindings.items() if k.startswith(('Trainer', 'create'))} == {
        'TrainerConfig.algorithm_ctor': '@stable_baselines3.SAC',
        'TrainerConfig.random_seed': '3',
        'TrainerConfig.num_env_steps': '800',
        'TrainerConfig.initial_collect_steps': '400',
        'TrainerConfig.mini_batch_size': '256',
        'TrainerConfig.replay_buffer_length': str(run.replay_length_per_env),
        'TrainerConfig.eval_interval': '1000',
        'TrainerConfig.num_eval_episodes': '10',
        'create_environment.env_name': "'Pendulum-v1'",
        'create_environment.num_parallel_environments': '1',
    }
    # Every SB3 setting under the SB3 class, the network as a gin tuple.
    sb3 = {k: v for k, v in bindings.items() if k.startswith('stable_baselines3.SAC.')}
    assert len(sb3) == len(settings)
    assert sb3['stable_baselines3.SAC.net_arch'] == '(256, 256)'
    assert sb3['stable_baselines3.SAC.ent_coef'] == "'auto'"
    assert sb3['stable_baselines3.SAC.learning_starts'] == '400'


def test_sb3_settings_refuse_an_algorithm_sb3_does_not_run():
    (run,) = [r for r in learning.suite_runs('pendulum', [0]) if r.name == 'alf_ddpg']
    with pytest.raises(ValueError, match="no SB3 settings for 'ddpg'"):
        sb3_runner.sb3_settings(run)


@pytest.mark.parametrize(
    'args, message',
    [
        (['--steps', '0'], 'argument --steps: must be at least 1, got 0'),
        (['--steps', '-5'], 'argument --steps: must be at least 1, got -5'),
        (['--seed', '-1'], 'argument --seed: must be at least 0, got -1'),
        (['--out', 'a_file'], '--out: [Errno 20] Not a directory'),
    ],
)
def test_sb3_runner_given_unusable_arguments_exits_2_naming_them(tmp_path, capsys, args, message):
    """Not a run of the suite's length (--steps 0), a finished run of none (negative), or a
    traceback of numpy's seeding or of the run directory's lock."""
    (tmp_path / 'a_file').write_text('kept')
    given = dict(zip(args[::2], args[1::2]))
    argv = ['--suite', 'pendulum', '--run', 'sb3_sac', '--seed', given.get('--seed', '0')]
    argv += ['--out', str(tmp_path / given.get('--out', 'runs'))]
    argv += ['--steps', given.get('--steps', '5')]
    with pytest.raises(SystemExit) as exit_info:
        sb3_runner.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']
    assert (tmp_path / 'a_file').read_text() == 'kept'


class _FakeSb3Model:
    """What ``_save_checkpoint`` uses of an SB3 model: its env steps and two files."""

    def __init__(self, num_timesteps):
        self.num_timesteps = num_timesteps

    def save(self, path):
        open(path, 'w').write('model')

    def save_replay_buffer(self, path):
        open(path, 'w').write('buffer')


def test_sb3_checkpoint_replaces_the_previous_one_which_counts_until_the_new_one_is_complete(
    tmp_path,
):
    run_dir = str(tmp_path)
    assert sb3_common.checkpoint_env_steps(run_dir) is None
    sb3_runner._save_checkpoint(_FakeSb3Model(100), run_dir)
    assert sb3_common.checkpoint_env_steps(run_dir) == 100
    sb3_runner._save_checkpoint(_FakeSb3Model(200), run_dir)
    assert sb3_common.checkpoint_env_steps(run_dir) == 200
    # Nothing but the checkpoint is left.
    assert sorted(p.name for p in (tmp_path / 'checkpoints').iterdir()) == ['sb3']
    checkpoint = tmp_path / 'checkpoints' / 'sb3'
    assert sorted(p.name for p in checkpoint.iterdir()) == [
        'model.zip',
        'replay_buffer.pkl',
        'state.pt',
    ]
    # A stop while a new one replaced it: the old one (moved aside) is the checkpoint
    # until the new one has all its files.
    checkpoint.rename(tmp_path / 'checkpoints' / 'sb3.old')
    checkpoint.mkdir()
    (checkpoint / 'model.zip').write_text('model')
    assert sb3_common.checkpoint_env_steps(run_dir) == 200
    (tmp_path / 'checkpoints' / 'sb3.old' / 'state.pt').unlink()
    assert sb3_common.checkpoint_env_steps(run_dir) is None


def test_sb3_resume_keeps_the_progress_rows_up_to_its_checkpoint(tmp_path):
    progress = tmp_path / 'progress.csv'
    columns = sb3_runner.SB3_COLUMNS
    rows = [','.join([str(s)] + [''] * (len(columns) - 1)) for s in (0, 500, 1000, 1500)]
    progress.write_text('\n'.join([','.join(columns)] + rows) + '\n')
    sb3_runner._keep_rows_up_to(str(progress), 1000)
    assert [int(r['env_steps']) for r in _progress(tmp_path)] == [0, 500, 1000]
    assert progress.read_text().splitlines()[0] == ','.join(columns)


def test_sb3_runner_refuses_a_run_that_is_not_an_sb3_run(tmp_path, capsys):
    for name in 'alf_sac', 'sb3_ddpg':
        with pytest.raises(SystemExit) as e:
            sb3_runner.main(
                ['--suite', 'pendulum', '--run', name, '--seed', '0', '--out', str(tmp_path)]
                + ['--steps', '2']
            )
        assert e.value.code == 2
        assert 'its SB3 runs are: sb3_sac, sb3_td3' in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_sb3_evaluation_resets_its_envs_with_alf_lites_eval_seeds():
    import gymnasium
    import numpy as np

    from alf_lite.seeding import eval_env_seeds

    class Still:
        """A policy that never pushes the pendulum."""

        def predict(self, observation, deterministic):
            assert deterministic
            return np.zeros((len(observation), 1), dtype=np.float32), None

    envs = sb3_runner._EvalEnvs('Pendulum-v1', 4, Still())
    try:
        average_return, average_length = envs.evaluate(3000)
    finally:
        envs.close()
    # The same episodes, one by one: 200 steps each (Pendulum's time limit).
    returns = []
    for seed in eval_env_seeds(4, learning.NUM_EVAL_EPISODES, 3000):
        env = gymnasium.make('Pendulum-v1')
        env.reset(seed=seed)
        total = 0.0
        for _ in range(200):
            total += env.step(np.zeros(1, dtype=np.float32))[1]
        returns.append(total)
    assert average_length == 200
    assert average_return == pytest.approx(np.mean(returns))


def test_sb3_run_checkpoints_every_interval_and_resumes_from_its_checkpoint_dropping_later_rows(
    tmp_path, monkeypatch
):
    pytest.importorskip('stable_baselines3')
    import dataclasses

    # SB3's default logger would leave an SB3-<time> folder in the temp directory.
    monkeypatch.setenv('TMPDIR', str(tmp_path))
    settings = sb3_runner.sb3_settings
    # A small network and batch and one eval episode: the run's mechanics, not its
    # learning, are tested.
    monkeypatch.setattr(sb3_runner, 'NUM_EVAL_EPISODES', 1)
    monkeypatch.setattr(
        sb3_runner, 'sb3_settings', lambda run: dict(settings(run), batch_size=16, net_arch=[8])
    )
    (run,) = [r for r in learning.suite_runs('pendulum', [0], 100) if r.name == 'sb3_sac']
    task = dataclasses.replace(
        run.task, learning_starts=40, eval_interval=50, checkpoint_interval=50
    )
    run = dataclasses.replace(run, task=task)
    out, run_dir = str(tmp_path / 'runs'), tmp_path / 'runs' / 'pendulum' / 'sb3_sac' / 'seed0'
    run_dir.mkdir(parents=True)
    handler = signal.getsignal(signal.SIGTERM)
    assert sb3_runner.train(run, out) == 0
    assert signal.getsignal(signal.SIGTERM) is handler
    # A row at 0, every 50 env steps and none repeated at the end. 40 random steps,
    # then one update a step; a row is written after its env step's update, as
    # alf_lite writes it: steps 41 to 50 trained at the row of 50, 41 to 100 at the
    # row of 100.
    rows = _progress(run_dir)
    assert [(int(r['env_steps']), int(r['num_updates'])) for r in rows] == [
        (0, 0),
        (50, 10),
        (100, 60),
    ]
    # The checkpoint of step 100 holds the run after that step's update.
    assert sb3_common.checkpoint_env_steps(str(run_dir)) == 100
    # Longer now: it resumes at 100 env steps, keeps the rows up to there and goes
    # on to 150, with the updates counted on as in one run.
    longer = dataclasses.replace(run, num_env_steps=150)
    assert sb3_runner.train(longer, out) == 0
    rows = _progress(run_dir)
    assert [(int(r['env_steps']), int(r['num_updates'])) for r in rows] == [
        (0, 0),
        (50, 10),
        (100, 60),
        (150, 110),
    ]
    assert sb3_common.checkpoint_env_steps(str(run_dir)) == 150
    # A checkpoint without its progress.csv is not resumed: the run starts afresh.
    (run_dir / 'progress.csv').unlink()
    shorter = dataclasses.replace(run, num_env_steps=50)
    assert sb3_runner.train(shorter, out) == 0
    rows = _progress(run_dir)
    assert [(int(r['env_steps']), int(r['num_updates'])) for r in rows] == [(0, 0), (50, 10)]
    assert 'TrainerConfig.num_env_steps = 50' in (run_dir / 'config.gin').read_text()
    assert sb3_common.checkpoint_env_steps(str(run_dir)) == 50


def test_sb3_train_return_is_the_mean_of_alf_lites_window_of_episodes_up_to_the_rows_step(
    tmp_path, monkeypatch
):
    pytest.importorskip('stable_baselines3')
    import dataclasses

    import gymnasium

    monkeypatch.setenv('TMPDIR', str(tmp_path))
    monkeypatch.setattr(sb3_runner, 'NUM_EVAL_EPISODES', 1)
    # alf_lite's window (10 episodes with one env) shortened to 3, for a short run.
    assert sb3_runner.train_metric_window(1) == 10
    windows = []
    monkeypatch.setattr(
        sb3_runner, 'train_metric_window', lambda num_envs: windows.append(num_envs) or 3
    )

    class Returns(gymnasium.Wrapper):
        """Records the return of each finished episode."""

        def __init__(self, env):
            super().__init__(env)
            self.returns, self._sum = [], 0.0

        def reset(self, **kwargs):
            self._sum = 0.0
            return self.env.reset(**kwargs)

        def step(self, action):
            result = self.env.step(action)
            self._sum += float(result[1])
            if result[2] or result[3]:
                self.returns.append(self._sum)
            return result

    made, make = [], gymnasium.make
    monkeypatch.setattr(
        gymnasium, 'make', lambda *a, **k: made.append(Returns(make(*a, **k))) or made[-1]
    )
    (run,) = [r for r in learning.suite_runs('pendulum', [0], 1000) if r.name == 'sb3_sac']
    # Random steps (a few updates of a small network at the end): 5 Pendulum
    # episodes of 200 steps, the 5th ending at the row's step.
    settings = sb3_runner.sb3_settings
    monkeypatch.setattr(
        sb3_runner, 'sb3_settings', lambda run: dict(settings(run), batch_size=16, net_arch=[8])
    )
    task = dataclasses.replace(run.task, learning_starts=990, eval_interval=1000)
    run = dataclasses.replace(run, task=task)
    run_dir = tmp_path / 'runs' / 'pendulum' / 'sb3_sac' / 'seed0'
    run_dir.mkdir(parents=True)
    assert sb3_runner.train(run, str(tmp_path / 'runs')) == 0
    train_env = made[0]
    assert len(train_env.returns) == 5
    rows = _progress(run_dir)
    assert [int(r['env_steps']) for r in rows] == [0, 1000]
    assert rows[0]['train/AverageReturn'] == ''
    assert float(rows[1]['train/AverageReturn']) == pytest.approx(sum(train_env.returns[2:]) / 3)
    assert float(rows[1]['train/AverageEpisodeLength']) == 200
    assert set(windows) == {1}  # the run's training envs


def test_orientation_suite_compares_icubwalk_v1_with_the_v0_runs_of_the_replay_study(
    tmp_path, monkeypatch, capsys
):
    (run,) = learning.suite_runs('icub_orientation', seeds=[0])
    (reference,) = learning.suite_runs('study_replay', seeds=[0], steps=None)[-1:]
    assert reference.name == 'icub_replay_full'
    # The same command as the ICubWalk-v0 runs', with the env's name bound after it.
    v1_params = learning.alf_gin_params(run)
    assert v1_params[:-1] == learning.alf_gin_params(reference)
    assert v1_params[-1] == "create_environment.env_name='ICubWalk-v1'"
    assert run.task.env == 'ICubWalk-v1' and run.num_env_steps == reference.num_env_steps

    out = tmp_path / 'runs'
    columns = ('env_steps', 'eval/AverageReturn', 'eval/AverageEpisodeLength')
    # (suite, run name, env, seed, final return); seed 2 of v1 still trains.
    runs = [
        ('study_replay', 'icub_replay_full', 'ICubWalk-v0', s, f)
        for s, f in enumerate((30, 60, 90))
    ]
    runs += [
        ('icub_orientation', 'icub_v1', 'ICubWalk-v1', s, f) for s, f in enumerate((60, 120, 150))
    ]
    for suite, name, env, seed, final in runs:
        done = _done(wall_time_s=60.0, env_steps=12000)
        _write_run(
            out / suite / name / f'seed{seed}',
            columns,
            [(0, 0, 10), (6000, final, 20), (12000, final, 30)],
            f"create_environment.env_name = '{env}'\n",
            None if (name, seed) == ('icub_v1', 2) else done,
        )
    # Other runs of the replay study are not part of it.
    _write_run(
        out / 'study_replay' / 'icub_replay_10k' / 'seed0',
        columns,
        [(0, 0, 10)],
        "create_environment.env_name = 'ICubWalk-v0'\n",
    )
    # Seeds 3 and 4 of v1 are planned, not started.
    plan = {f'icub_orientation/icub_v1/seed{s}': {'status': 'pending'} for s in range(5)}
    (out / 'plan.json').write_text(json.dumps(plan))
    docs = tmp_path / 'docs'
    lines, figures = _report('icub_orientation', out, docs, monkeypatch, capsys)
    labels = [f"ICubWalk-{v}=create_environment.env_name='ICubWalk-{v}'" for v in ('v1', 'v0')]
    assert figures == {
        str(docs / 'icub_orientation.png'): labels,
        str(docs / 'icub_orientation_length.png'): labels,
    }
    table = _table(lines)
    assert set(table) == {('alf_lite', 'ICubWalk-v0'), ('alf_lite', 'ICubWalk-v1')}
    assert table[('alf_lite', 'ICubWalk-v0')]['task'] == 'ICubWalk-v0'
    assert table[('alf_lite', 'ICubWalk-v0')]['seeds'] == '3'
    assert table[('alf_lite', 'ICubWalk-v1')]['seeds'] == '3 (1 unfinished, 2 not evaluated yet)'
    # Each run's mean over its last 3 evaluations: 2/3 of its final; v1 higher in every seed.
    assert (
        '- ICubWalk-v0 and ICubWalk-v1, orientation, final eval return: ICubWalk-v0 40.0 '
        '(3 runs) against ICubWalk-v1 73.3 (3 runs); exact permutation p = '
        f'{learning.permutation_p([20.0, 40.0, 60.0], [40.0, 80.0, 100.0]):.3f} (two-sided, '
        '20 splits); paired by seed (3 seeds, ICubWalk-v0 higher in 0): sign-flip p = 0.250 '
        '(two-sided); 1 not finished yet.'
    ) in lines
    assert any('runs icub_replay_full of the study_replay suite' in line for line in lines)
    # Of the finished runs alone: v1's seeds 0 and 1, and 3 more not finished.
    assert learning.report_suite('icub_orientation', str(out), str(docs), finished_only=True)
    table = _table(capsys.readouterr().out.splitlines())
    assert table[('alf_lite', 'ICubWalk-v1')]['seeds'] == '2 (3 not finished)'
    # Without the ICubWalk-v0 runs, no word of them.
    shutil.rmtree(out / 'study_replay')
    lines, _ = _report('icub_orientation', out, docs, monkeypatch, capsys)
    assert set(_table(lines)) == {('alf_lite', 'ICubWalk-v1')}
    assert not any('study_replay' in line for line in lines)


def test_code_version_is_dirty_when_code_differs_not_when_results_do(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(
            ['git', '-c', 'user.name=t', '-c', 'user.email=t@t', *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    code = tmp_path / 'alf_lite' / 'x.py'
    plan = tmp_path / 'benchmarks' / 'results' / 'learning' / 'plan.json'
    for path in code, plan:
        path.parent.mkdir(parents=True)
        path.write_text('0\n')
    git('init', '-q')
    git('add', '.')
    git('commit', '-qm', 'x')
    monkeypatch.setattr(launcher, 'REPO_ROOT', str(tmp_path))
    commit = launcher.code_version()
    assert len(commit) == 12 and '+' not in commit
    # Runs write their records while others start: that is no change of the code.
    plan.write_text('1\n')
    assert launcher.code_version() == commit
    code.write_text('1\n')
    assert launcher.code_version() == commit + '+dirty'
    # The benchmarks' own code outside their results counts too.
    code.write_text('0\n')
    script = tmp_path / 'benchmarks' / 'learning.py'
    script.write_text('0\n')
    git('add', str(script))
    git('commit', '-qm', 'y')
    commit = launcher.code_version()
    script.write_text('1\n')
    assert launcher.code_version() == commit + '+dirty'
    script.write_text('0\n')
    assert launcher.code_version() == commit
    # A new module is code a run may import, though git does not track it yet.
    module = tmp_path / 'alf_lite' / 'new.py'
    module.write_text('0\n')
    assert launcher.code_version() == commit + '+dirty'
    module.unlink()
    # A new run's records are not.
    (plan.parent / 'suite').mkdir()
    (plan.parent / 'suite' / 'progress.csv').write_text('0\n')
    assert launcher.code_version() == commit


def test_report_counts_the_planned_seeds_of_each_runs_own_suite_and_reads_no_other_plan(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / 'runs'
    runs = [
        ('study_replay', 'icub_replay_full', 'ICubWalk-v0'),
        ('icub_orientation', 'icub_v1', 'ICubWalk-v1'),
    ]
    for suite, name, env in runs:
        for seed in range(2):
            _write_run(
                out / suite / name / f'seed{seed}',
                ('env_steps', 'eval/AverageReturn'),
                [(6000, 10 + seed)],
                f"create_environment.env_name = '{env}'\n",
                _done(),
            )
    # The reference runs' seed 2 is planned in their suite, and in this one for its
    # own runs; the keys of no run (another suite's name for them, no seed directory,
    # no key of a run) are not.
    plan = {
        'study_replay/icub_replay_full/seed2': {},
        'icub_orientation/icub_v1/seed2': {},
        'icub_orientation/icub_replay_full/seed4': {},
        'icub_orientation/icub_replay_full/seed5': {},
        'icub_orientation/icub_v1': {},
        'icub_orientation': {},
        'icub_orientation/icub_v1/seedx': {},
    }
    docs = tmp_path / 'docs'
    for text, seeds in (
        (json.dumps(plan), '2 (1 not evaluated yet)'),
        ('[1, 2]', '2'),
        ('{"study_replay/icub_replay_full/seed2', '2'),
    ):
        (out / 'plan.json').write_text(text)
        table = _table(_report('icub_orientation', out, docs, monkeypatch, capsys)[0])
        assert table[('alf_lite', 'ICubWalk-v0')]['seeds'] == seeds, text
        assert table[('alf_lite', 'ICubWalk-v1')]['seeds'] == seeds, text


def test_the_launcher_reads_no_benchmark_module_after_it_started(tmp_path):
    # A launcher trains for hours while its files may be edited: a module it first
    # imported at an SB3 run's resume estimate would be the edited one (a learning.py that
    # no longer defines what the launcher needs ended a launcher with an ImportError).
    code = (
        'import sys, types\n'
        'from benchmarks import launcher\n'
        'def loaded():\n'
        '    return sorted(m for m in sys.modules if m.startswith("benchmarks"))\n'
        'before = loaded()\n'
        'run = types.SimpleNamespace(framework="sb3")\n'
        f'assert launcher.resume_env_steps(run, {str(tmp_path)!r}) == 0\n'
        'assert loaded() == before, (before, loaded())\n'
    )
    subprocess.run([sys.executable, '-c', code], cwd=REPO_ROOT, check=True, timeout=120)
