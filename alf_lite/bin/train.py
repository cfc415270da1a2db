r"""Train an off-policy algorithm from gin files.

    python -m alf_lite.bin.train --gin_file examples/sac_pendulum.gin --root_dir runs/p1 \
        --gin_param 'TrainerConfig.num_env_steps=5000'

Re-running with the same ``--root_dir`` resumes from its latest complete
checkpoint; without ``--gin_file`` the config is read from ``root_dir/config.gin``.

Only one train at a time runs in a root_dir: a second one exits with code 2
before writing anything (``alf_lite.run_dir.RunDirLock``).

Exit codes: 0 done; 2 bad input (nothing was written); 1 a fault during
training (the message says what was kept), an env process that did not answer
within ``create_environment.step_timeout`` included; 3 an in-process env call
that did not return within it (every thread's stack is printed, the last
checkpoint is left as it was); 128 + signal number after SIGINT, SIGTERM, SIGHUP, SIGUSR1 or
SIGUSR2 (a final checkpoint was written), also while an env call hangs, and when the signal
came while train started up or shut down (no checkpoint is written for it).
"""

import contextlib
import errno
import os
import signal
import sys
from typing import Optional

# These two import the standard library only: the handlers below are installed at once.
from alf_lite.bin.cli import (
    EXIT_FAULT,
    EXIT_SIGNAL_BASE,
    fail,
    fail_on_stray_arguments,
    output_root_dir,
    run_tool,
)
from alf_lite.signals import (
    STOP_SIGNALS,
    InterruptedOutsideTraining,
    RaisingSignals,
    TrainingInterrupted,
    arrived_while,
    defer_stop_signals_while_torch_imports,
    ignore_stop_signals,
    stop_when_starter_ends,
)


def _stop_before_main(signum, frame):
    """SIGINT or SIGTERM before ``main`` handles them (imports, flag parsing) or after: train
    stops as on one outside the training loop, nothing written for it."""
    ignore_stop_signals()
    fail(str(InterruptedOutsideTraining(signum)), exit_code=EXIT_SIGNAL_BASE + signum)


if __name__ == '__main__':
    # Before the imports below, which take a tenth of a second or more: a signal then would
    # end train with a KeyboardInterrupt's traceback (SIGINT) or no message (SIGTERM).
    for _s in STOP_SIGNALS:
        signal.signal(_s, _stop_before_main)
    defer_stop_signals_while_torch_imports()

from absl import flags, logging  # noqa: E402

from alf_lite.run_dir import (  # noqa: E402
    CONFIG_FILE,
    RunDir,
    RunDirInUseError,
    RunDirLock,
    experiment_difference,
    inside_run_refusal,
    keep_superseded_config,
    moved_aside_path,
)

flags.DEFINE_multi_string('gin_file', [], 'Gin config file; repeat for several.')
flags.DEFINE_multi_string(
    'gin_param',
    [],
    "Gin binding, e.g. 'TrainerConfig.random_seed=3'; repeat for several; applied after the files.",
)
flags.DEFINE_string(
    'root_dir', None, 'Directory of the experiment: config, summaries, checkpoints.'
)
flags.DEFINE_bool(
    'start_over',
    False,
    'If root_dir holds an experiment, move it aside to '
    '<root_dir>.old-<time> and start afresh in root_dir.',
)
flags.DEFINE_bool(
    'trust_imports',
    False,
    "Resuming from root_dir's config.gin (no --gin_file), let its imports run code from "
    "outside the installed packages (a module beside the run, say) and use gin's dynamic "
    'registration. Off: such a config.gin is refused, as one from someone else could run '
    'anything.',
)
flags.mark_flag_as_required('root_dir')
FLAGS = flags.FLAGS


def check_same_experiment(root_dir: str, new_config: str) -> None:
    """Refuse a root_dir that holds a different experiment than ``new_config``."""
    difference = experiment_difference(root_dir, new_config)
    if difference is not None:
        fail(difference)


def build_trainer(gin_files, gin_params, root_dir, check_experiment, trust_imports=True):
    """Parse the config and build the trainer (envs, algorithm, buffer) before writing anything.

    ``check_experiment``: refuse a root_dir whose saved config differs (for
    user-given gin files; a resume from ``config.gin`` may override anything).
    ``trust_imports``: ``parse_config``'s (False for a run's config.gin).
    """
    import gin

    import alf_lite.all_configurables  # noqa: F401  (registers every configurable)
    from alf_lite.config import ConfigError, parse_config
    from alf_lite.device import DeviceUnavailableError
    from alf_lite.environments import EnvironmentCrashedError
    from alf_lite.trainer import Trainer, TrainerConfig

    try:
        parse_config(gin_files, gin_params, trust_imports=trust_imports)
        if check_experiment:
            check_same_experiment(root_dir, gin.config_str())
        return Trainer(TrainerConfig(), root_dir, announce_stops=True)
    except (ConfigError, ValueError, TypeError, MemoryError, DeviceUnavailableError) as e:
        fail(str(e))
    except EnvironmentCrashedError as e:
        fail_on_env_error(e)


def fail_on_env_error(error: Exception, root_dir: Optional[str] = None) -> None:
    """Exit with ``EXIT_FAULT`` on an env's error: what the env raised with its stack, then the
    message naming the env; not the trainer's frames above the env, which say nothing of it.
    With the ``root_dir`` of a run under way, the message says what a re-run does."""
    from alf_lite.environments.suite_gym import env_traceback

    stack = env_traceback(error)
    if stack:
        print(f'{stack}\n', file=sys.stderr)
    message = str(error)
    if root_dir is not None:
        steps = RunDir(root_dir).latest_checkpoint_env_steps()
        message += '' if message.endswith('.') else '.'
        if steps is None:
            message += (
                ' The run stopped before its first checkpoint: once the env is fixed, '
                f'{rerun()} to start it again.'
            )
        else:
            message += (
                ' The run stopped; its checkpoints are left as they were: once the env is '
                f'fixed, {rerun()} to resume from the latest (at {steps} env steps).'
            )
    fail(message, exit_code=EXIT_FAULT)


def rerun() -> str:
    """How to go on with this run: the same command, but for ``--start_over``, which would
    move it aside too and start afresh."""
    return 're-run the same command' + (' without --start_over' if FLAGS.start_over else '')


def lock_or_fail(trainer) -> None:
    """Lock the trainer's root_dir; exit with ``EXIT_BAD_INPUT`` if another train holds it."""
    try:
        trainer.lock_root_dir()
    except RunDirInUseError as e:
        fail(str(e))
    except OSError as e:
        fail(f'cannot create or lock the root_dir: {e}')


def fail_if_in_use(root_dir: str) -> None:
    """Exit with ``EXIT_BAD_INPUT`` at once if another train holds ``root_dir``: before the
    envs and the replay buffer are built (gigabytes for a large buffer). The lock taken
    after the build still decides (``lock_or_fail``)."""
    if os.path.isdir(root_dir):
        try:
            with RunDirLock(root_dir):
                pass
        except RunDirInUseError as e:
            fail(str(e))
        except OSError:
            pass  # not lockable here: lock_or_fail says why once the trainer is built


def main(argv):
    fail_on_stray_arguments(argv, FLAGS.gin_param, takes_gin_files=True)
    root_dir = output_root_dir(FLAGS.root_dir)
    root_dir_existed = os.path.exists(root_dir)
    signals = RaisingSignals(InterruptedOutsideTraining)
    try:
        with signals:
            stop_when_starter_ends()
            train(root_dir, signals)
    except (TrainingInterrupted, InterruptedOutsideTraining) as e:
        _stop_for_signal(e, root_dir, root_dir_existed)
    except Exception as e:
        # A signal at start-up can cut a module's first import short (torch imports its
        # compiler inside torch.use_deterministic_algorithms), and the clean-up that runs on
        # the way out can then fail on the half-imported module: the signal ended the run.
        # Or the code it interrupted raised an error of its own in its place.
        interrupted = signals.interruption(e)
        if interrupted is None:
            raise
        logging.warning(
            'while stopping for %s: %s: %s',
            signal.Signals(interrupted.signum).name,
            type(e).__name__,
            e,
        )
        _stop_for_signal(interrupted, root_dir, root_dir_existed)


def _stop_for_signal(e, root_dir: str, root_dir_existed: bool) -> None:
    """Exit with ``EXIT_SIGNAL_BASE`` plus the number of the signal that stopped train."""
    # The run stops for this signal: another one while the process exits (a second
    # Ctrl-C, each of which grid_search passes on) would end it by that signal, with
    # no exit code of its own.
    ignore_stop_signals()
    interrupted = arrived_while(e, TrainingInterrupted)
    if interrupted is not None:
        # Also when the other signal came while the trainer closed, outside the loop.
        logging.warning(
            '%s: %s, env processes closed; %s to continue.',
            interrupted,
            'checkpoint written'
            if interrupted.checkpoint_written
            else 'the checkpoint resumed from holds the run',
            rerun(),
        )
        sys.exit(EXIT_SIGNAL_BASE + interrupted.signum)
    # The trainer, if built, closed its env processes on the way here.
    if not root_dir_existed:
        # Left empty by the lock if the signal came before the config was written.
        with contextlib.suppress(OSError):
            os.rmdir(root_dir)
    fail(str(e), exit_code=EXIT_SIGNAL_BASE + e.signum)


# The errors of a write that fails for want of room or of a writable disk.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)


def train(root_dir: str, signals) -> None:
    """Train in ``root_dir`` as the flags say; ``signals``: SIGINT and SIGTERM outside the
    training loop."""
    fail_if_in_use(root_dir)
    config_file = RunDir(root_dir).config_file
    if FLAGS.start_over or not RunDir(root_dir).trained_in():
        # A run starts here: one already inside another (made before this check) resumes.
        nested = inside_run_refusal(root_dir, '--root_dir')
        if nested is not None:
            fail(nested)
    if os.path.isdir(root_dir) and not FLAGS.start_over:
        unsafe = RunDir(root_dir).unsafe_entry()
        if unsafe is not None:
            fail(unsafe)
    gin_files = FLAGS.gin_file
    if FLAGS.start_over and os.path.isdir(root_dir) and os.listdir(root_dir):
        if not os.path.exists(config_file):
            fail(
                f'{root_dir} is not empty and holds no {CONFIG_FILE}: it is not an alf_lite '
                'experiment, and --start_over moves aside only an experiment. Choose '
                'another --root_dir.'
            )
    if not gin_files:
        if FLAGS.start_over:
            fail('--start_over needs the --gin_file of the experiment to start.')
        if not os.path.exists(config_file):
            fail(
                f'no --gin_file given and {config_file} does not exist: give the gin file '
                'of the experiment to start.'
            )
    trainer = build_trainer(
        gin_files or [config_file],
        FLAGS.gin_param,
        root_dir,
        check_experiment=bool(gin_files) and not FLAGS.start_over,
        # The user's own gin files are trusted; a root_dir may come from anyone.
        trust_imports=bool(gin_files) or FLAGS.trust_imports,
    )

    import gin

    from alf_lite.checkpoint import CheckpointError
    from alf_lite.config import write_text_atomically
    from alf_lite.environments import EnvironmentCrashedError
    from alf_lite.summary import ProgressCsvError
    from alf_lite.trainer import TrainingError

    with trainer:
        existed = os.path.exists(root_dir)
        # Before anything is written or moved: another train may be in root_dir.
        lock_or_fail(trainer)
        if FLAGS.start_over and existed:
            aside = moved_aside_path(root_dir)
            try:
                os.rename(root_dir, aside)
            except OSError as e:
                fail(f'--start_over could not move {root_dir} aside to {aside}: {e}')
            logging.warning('moved the previous experiment to %s', aside)
            trainer.unlock_root_dir()
            lock_or_fail(trainer)

        def write_config():
            # A signal whose exception Python dropped stops the run here, before any write.
            signals.raise_if_received()
            config = gin.config_str()
            try:
                keep_superseded_config(
                    RunDir(root_dir),
                    config,
                    trainer.env_steps,
                    restored=trainer.resumed_from is not None,
                    trained_with=trainer.resumed_config,
                )
                write_text_atomically(config_file, config)
            except ValueError as e:  # the run's record of the config it goes on from
                fail(str(e))
            except OSError as e:
                if not existed:
                    # Left empty by the lock: the failed run leaves nothing behind.
                    with contextlib.suppress(OSError):
                        os.rmdir(root_dir)
                fail(f'cannot write {config_file}: {e}')
            logging.info('config written to %s', config_file)

        try:
            # Only once the checkpoint was restored: a resume refused for a
            # config that does not fit it leaves the old config.gin to resume with.
            trainer.train(before_writing=write_config)
        except (CheckpointError, ProgressCsvError) as e:
            fail(str(e))
        except TrainingError as e:
            fail(str(e).replace('re-run the same command', rerun()), exit_code=EXIT_FAULT)
        except EnvironmentCrashedError as e:
            # The message names the env that raised, died or hung; leaving the
            # ``with`` block terminates every env process.
            fail_on_env_error(e, root_dir)
        except OSError as e:
            # A file of the run that cannot be written (a full disk): each is replaced
            # whole or appended to, so what was written before stays readable. A write
            # (not an open) that fails names no file.
            if e.filename is None and e.errno not in WRITE_ERRNOS:
                raise
            where = '' if e.filename is not None else f', writing in {root_dir}'
            if RunDir(root_dir).latest_checkpoint_env_steps() is None:
                then = 'to start the run again (it stopped before its first checkpoint)'
            else:
                then = 'to resume from its latest checkpoint'
            fail(
                f'{e}{where}. The run stopped; what it wrote before is kept: {rerun()}, '
                f'once this is fixed, {then}.',
                exit_code=EXIT_FAULT,
            )


if __name__ == '__main__':
    run_tool(main)
