"""Atomic checkpoints: a checkpoint directory exists under its final name only when complete."""
import os
import re
import shutil
from typing import Optional, Tuple

import torch

_NAME = re.compile(r'^ckpt-(\d+)$')
MODEL_FILE = 'model.pt'
REPLAY_BUFFER_FILE = 'replay_buffer.pt'


def save_checkpoint(checkpoint_dir: str, env_steps: int, state: dict,
                    replay_buffer_state: Optional[dict] = None) -> str:
    """Write ``checkpoint_dir/ckpt-<env_steps>/`` via a temporary directory and a rename.

    Older checkpoints keep their model file but lose their replay buffer file,
    so only the newest checkpoint holds a (possibly large) replay buffer.

    Args:
        checkpoint_dir: parent directory of all checkpoints.
        env_steps: env step counter, used in the name.
        state: everything but the replay buffer (networks, optimizers, RNG, counters).
        replay_buffer_state: the replay buffer's ``state_dict()``, or None.

    Returns:
        the path of the complete checkpoint.
    """
    os.makedirs(checkpoint_dir, exist_ok=True)
    final = os.path.join(checkpoint_dir, f'ckpt-{env_steps}')
    tmp = os.path.join(checkpoint_dir, f'.tmp-ckpt-{env_steps}-{os.getpid()}')
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    _save_synced(state, os.path.join(tmp, MODEL_FILE))
    if replay_buffer_state is not None:
        _save_synced(replay_buffer_state, os.path.join(tmp, REPLAY_BUFFER_FILE))
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    for path in list_checkpoints(checkpoint_dir)[:-1]:
        rb = os.path.join(path, REPLAY_BUFFER_FILE)
        if os.path.exists(rb):
            os.remove(rb)
    return final


def _save_synced(obj, path):
    with open(path, 'wb') as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def list_checkpoints(checkpoint_dir: str):
    """Complete checkpoint directories, oldest first."""
    if not os.path.isdir(checkpoint_dir):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(checkpoint_dir)
             if (m := _NAME.match(name))]
    return [os.path.join(checkpoint_dir, name) for _, name in sorted(found)]


def latest_checkpoint(checkpoint_dir: str) -> Optional[str]:
    """The newest complete checkpoint, or None."""
    found = list_checkpoints(checkpoint_dir)
    return found[-1] if found else None


def load_checkpoint(path: str) -> Tuple[dict, Optional[dict]]:
    """Read ``(state, replay_buffer_state or None)`` from a checkpoint directory."""
    state = torch.load(os.path.join(path, MODEL_FILE), weights_only=False)
    rb_path = os.path.join(path, REPLAY_BUFFER_FILE)
    rb = torch.load(rb_path, weights_only=False) if os.path.exists(rb_path) else None
    return state, rb
