r"""Train an off-policy algorithm from gin files.

    python -m alf_lite.bin.train --gin_file examples/sac_pendulum.gin --root_dir runs/p1 \
        --gin_param 'TrainerConfig.num_env_steps=5000'

Re-running with the same ``--root_dir`` resumes from its latest complete
checkpoint; without ``--gin_file`` the config is read from ``root_dir/config.gin``.
"""
import os
import sys

from absl import app, flags, logging

flags.DEFINE_multi_string('gin_file', [], 'Gin config file; repeat for several.')
flags.DEFINE_multi_string('gin_param', [], "Gin binding, e.g. 'TrainerConfig.random_seed=3'; "
                          'repeat for several; applied after the files.')
flags.DEFINE_string('root_dir', None, 'Directory of the experiment: config, summaries, '
                    'checkpoints.')
flags.mark_flag_as_required('root_dir')
FLAGS = flags.FLAGS

CONFIG_FILE = 'config.gin'


def usage_error(message: str) -> None:
    """Print ``message`` for the user and exit with code 2 (bad input)."""
    # gin appends where a configurable was called; the message itself is enough.
    message = message.split('\n  In call to configurable')[0]
    print(f'error: {message}', file=sys.stderr)
    sys.exit(2)


def build_trainer_config(gin_files, gin_params):
    """Parse the config, build ``TrainerConfig`` and check the env, before anything is written."""
    import alf_lite.all_configurables  # noqa: F401  (registers every configurable)
    from alf_lite.config import ConfigError, parse_config
    from alf_lite.environments import create_environment
    from alf_lite.trainer import TrainerConfig
    try:
        parse_config(gin_files, gin_params)
        trainer_config = TrainerConfig()
        # One in-process env catches an unknown id or unsupported spaces now.
        create_environment(num_parallel_environments=1, use_subprocesses=False).close()
        return trainer_config
    except (ConfigError, ValueError, TypeError) as e:
        usage_error(str(e))


def main(argv):
    if len(argv) > 1:
        usage_error(f'unexpected arguments: {" ".join(argv[1:])}')
    root_dir = os.path.abspath(os.path.expanduser(FLAGS.root_dir))
    config_file = os.path.join(root_dir, CONFIG_FILE)
    gin_files = FLAGS.gin_file
    if not gin_files:
        if not os.path.exists(config_file):
            usage_error(f'no --gin_file given and {config_file} does not exist: '
                        'give the gin file of the experiment to start.')
        gin_files = [config_file]
    trainer_config = build_trainer_config(gin_files, FLAGS.gin_param)

    from alf_lite.config import config_str, write_text_atomically
    from alf_lite.trainer import Trainer
    os.makedirs(root_dir, exist_ok=True)
    write_text_atomically(config_file, config_str())
    logging.info('config written to %s', config_file)
    Trainer(trainer_config, root_dir).train()


if __name__ == '__main__':
    app.run(main)
