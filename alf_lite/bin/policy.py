"""Loading a trained policy, for the tools that play one (``play``, ``benchmarks/icub_gait.py``).

It defines no flags, so that any tool can import it beside its own.
"""

from alf_lite.bin.cli import fail, user_message
from alf_lite.run_dir import CONFIG_FILE, RunDir, checkpoint_env_steps, list_checkpoints


def checkpoint_path(root_dir: str, step) -> str:
    """The checkpoint of ``step`` env steps in ``root_dir``, or its latest; fails when missing."""
    run_dir = RunDir(root_dir)
    found = list_checkpoints(run_dir.checkpoint_dir)
    if not found:
        fail(
            f'no checkpoint in {run_dir.checkpoint_dir}: train writes one every '
            'TrainerConfig.checkpoint_interval env steps and at the end.'
        )
    if step is None:
        return found[-1]
    path = run_dir.checkpoint(step)
    if path not in found:
        steps = ', '.join(str(checkpoint_env_steps(p)) for p in found)
        fail(f'no checkpoint at {step} env steps in {run_dir.checkpoint_dir}; there are: {steps}')
    return path


def load_policy(path: str, config, observation_dim: int, action_dim: int):
    """The algorithm of ``config`` (a ``TrainerConfig``) with the networks of checkpoint ``path``.

    In eval mode, at the run's compute precision, as the trainer evaluates it.
    Reads only the trainer's state, and of it only the networks: no optimizer
    state, no replay buffer.
    """
    import torch

    from alf_lite import checkpoint as ckpt
    from alf_lite.model_memory import ModelTooLargeError, build_checked
    from alf_lite.precision import set_network_precision, warn_if_emulated, warn_if_not_applied

    dims = dict(observation_dim=observation_dim, action_dim=action_dim)
    try:
        algorithm, _ = build_checked(
            config.algorithm_ctor, torch.device('cpu'), training=False, **dims
        )
    except ModelTooLargeError as e:
        fail(str(e))
    except (ValueError, TypeError) as e:
        # A --gin_param that only the algorithm's constructor refuses.
        fail(f'the config of {path} no longer builds its algorithm: {user_message(str(e))}')
    set_network_precision(algorithm, config.precision)
    warn_if_emulated(config.precision, torch.device('cpu'))
    warn_if_not_applied(config.precision, algorithm, parts=('actor',))
    try:
        # play runs on the CPU, wherever the checkpoint was trained.
        raw = ckpt.load_state(path, map_location='cpu')
        # What a resume checks: NaN weights, keys and counters of the wrong kind.
        ckpt.check_trainer_state(path, raw)
        state = ckpt.trainer_state(raw)
    except ckpt.UnsafeCheckpointError as e:
        fail(str(e))
    except Exception as e:  # noqa: BLE001  (any unpickling failure means unreadable)
        fail(
            f'cannot read the checkpoint {path} ({type(e).__name__}: {e}); pick another with '
            '--checkpoint_step.'
        )
    try:
        algorithm.load_state_dict(ckpt.policy_state(state.algorithm))
    except (KeyError, RuntimeError, TypeError, ValueError) as e:
        # A KeyError: the checkpoint lacks a state the algorithm keeps (another algorithm's).
        fail(
            f'the checkpoint {path} does not fit the networks {CONFIG_FILE} builds (was the '
            f'config changed, or a --gin_param given that changes them?): '
            f'{f"it holds no {e}" if isinstance(e, KeyError) else e}'
        )
    algorithm.train(False)
    return algorithm
