"""What every benchmark that trains a Stable-Baselines3 model needs, and where an SB3 run
of benchmarks/learning.py keeps its checkpoint.

Nothing here imports another benchmark module: the launcher reads an SB3 run's checkpoint
with what it imported at its start, whatever is edited while its runs train.
"""

if __name__ == '__main__':  # run by mistake: it has no command line
    from alf_lite.bin.cli import fail

    fail(
        'benchmarks/sb3_common.py is a module of the benchmarks that train '
        'Stable-Baselines3, not a script: run python benchmarks/learning.py --help'
    )

import os
from typing import Optional

# Where an SB3 run keeps its checkpoint, under its run directory.
CHECKPOINT_SUBDIR = os.path.join('checkpoints', 'sb3')
MODEL_FILE = 'model.zip'
REPLAY_FILE = 'replay_buffer.pkl'
STATE_FILE = 'state.pt'


def mute_logger(model):
    """Give ``model`` a logger that writes nothing.

    Without one, each ``learn`` call makes a fresh ``SB3-<time>`` folder in
    the system's temporary directory and leaves it there.
    """
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))


def checkpoint_path(run_dir: str) -> str:
    """The directory of an SB3 run's checkpoint (it may not exist)."""
    return os.path.join(run_dir, CHECKPOINT_SUBDIR)


def complete_checkpoint(run_dir: str) -> Optional[str]:
    """The checkpoint directory with all its files, or the one it was replacing."""
    path = checkpoint_path(run_dir)
    names = (MODEL_FILE, REPLAY_FILE, STATE_FILE)
    for candidate in (path, path + '.old'):
        if all(os.path.isfile(os.path.join(candidate, n)) for n in names):
            return candidate
    return None


def checkpoint_env_steps(run_dir: str) -> Optional[int]:
    """Env steps of an SB3 run's checkpoint; None without a complete one."""
    import torch

    path = complete_checkpoint(run_dir)
    if path is None:
        return None
    return int(torch.load(os.path.join(path, STATE_FILE), weights_only=False)['env_steps'])
