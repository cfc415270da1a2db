"""Loading a trained policy, for the tools that play one (``play``, ``benchmarks/icub_gait.py``).

It defines no flags, so that any tool can import it beside its own. Its functions raise
ordinary exceptions on bad input, which a script or notebook can catch; the tools turn
them into their one-line errors.
"""

from typing import Optional

from alf_lite.bin.cli import user_message
from alf_lite.run_dir import (
    CONFIG_FILE,
    RunDir,
    checkpoint_env_steps,
    config_changed_since,
    list_checkpoints,
    list_last_good,
)


def _last_good_note(checkpoint_dir: str) -> str:
    """What a tool that plays ``ckpt-*`` says of the ``last_good-*`` states beside them."""
    names = list_last_good(checkpoint_dir)
    if not names:
        return ''
    return (
        f' ({", ".join(names)} there {"is the state" if len(names) == 1 else "are the states"} '
        'kept aside when training hit a NaN or inf loss, which is not played; its '
        'model.pt loads with torch.load(path, weights_only=True))'
    )


def checkpoint_path(root_dir: str, step) -> str:
    """The checkpoint of ``step`` env steps in ``root_dir``, or its latest.

    Raises:
        CheckpointError: ``root_dir`` holds no checkpoint, or none of ``step`` env steps.
    """
    # Here, not at the top: it imports torch, which a tool importing this module may not
    # need yet.
    from alf_lite.checkpoint import CheckpointError

    run_dir = RunDir(root_dir)
    found = list_checkpoints(run_dir.checkpoint_dir)
    if not found:
        raise CheckpointError(
            f'no checkpoint in {run_dir.checkpoint_dir}: train writes one every '
            'TrainerConfig.checkpoint_interval env steps and at the end'
            f'{_last_good_note(run_dir.checkpoint_dir)}.'
        )
    if step is None:
        return found[-1]
    path = run_dir.checkpoint(step)
    if path not in found:
        steps = ', '.join(str(checkpoint_env_steps(p)) for p in found)
        raise CheckpointError(
            f'no checkpoint at {step} env steps in {run_dir.checkpoint_dir}; there are: {steps}'
            f'{_last_good_note(run_dir.checkpoint_dir)}'
        )
    return path


def load_policy(
    path: str, config, observation_dim: int, action_dim: int, config_file: Optional[str] = None
):
    """The algorithm of ``config`` (a ``TrainerConfig``) with the networks of checkpoint ``path``.

    In eval mode, at the run's compute precision, as the trainer evaluates it.
    Reads only the trainer's state, and of it only the networks: no optimizer
    state, no replay buffer. Where ``config_file`` (the run's config file ``config``
    was read from) changed the experiment since the checkpoint was written (edited,
    emptied), a warning names the bindings that differ.

    Raises:
        ModelTooLargeError: the networks do not fit in the CPU's memory, or the checkpoint
            (``model.pt``, read whole) does not fit next to them.
        ConfigError: ``config``'s algorithm constructor refuses its parameters.
        UnsafeCheckpointError: the checkpoint names code that loading it would run.
        CheckpointError: the checkpoint cannot be read or holds no valid state, or its
            networks do not fit those ``config`` builds.
    """
    import torch

    from alf_lite import checkpoint as ckpt
    from alf_lite.config import ConfigError
    from alf_lite.device import available_cpu_memory, memory_bound_text
    from alf_lite.model_memory import ModelTooLargeError, build_checked
    from alf_lite.precision import set_network_precision, warn_if_emulated, warn_if_not_applied

    dims = dict(observation_dim=observation_dim, action_dim=action_dim)
    try:
        algorithm, estimate = build_checked(
            config.algorithm_ctor, torch.device('cpu'), training=False, **dims
        )
    except (ValueError, TypeError) as e:
        # A --gin_param that only the algorithm's constructor refuses.
        raise ConfigError(
            f'the config of {path} no longer builds its algorithm: {user_message(str(e))}'
        ) from e
    set_network_precision(algorithm, config.precision)
    warn_if_emulated(config.precision, torch.device('cpu'))
    warn_if_not_applied(config.precision, algorithm, parts=('actor',))
    try:
        # play runs on the CPU, wherever the checkpoint was trained.
        raw = ckpt.load_state(path, map_location='cpu')
        # What a resume checks: NaN weights, keys and counters of the wrong kind.
        ckpt.check_trainer_state(path, raw)
        state = ckpt.trainer_state(raw)
    except ckpt.UnsafeCheckpointError:
        raise
    except MemoryError as e:
        # The file holds the optimizer state too, and every checkpoint of a run is of one
        # size: another one would not fit either.
        networks = f' ({estimate.parameters} bytes)' if estimate is not None else ''
        raise ModelTooLargeError(
            f'the networks{networks} fit in cpu memory, but not the checkpoint they are read '
            f'from next to them: {e}.{memory_bound_text(available_cpu_memory()[1])}'
        ) from e
    except Exception as e:  # noqa: BLE001  (any unpickling failure means unreadable)
        raise ckpt.CheckpointError(
            f'cannot read the checkpoint {path} ({type(e).__name__}: {e}); pick another with '
            '--checkpoint_step.'
        ) from e
    try:
        ckpt.load_policy_state(algorithm, ckpt.policy_state(state.algorithm))
    except (KeyError, RuntimeError, TypeError, ValueError) as e:
        # A KeyError: the checkpoint lacks a state the algorithm keeps (another algorithm's).
        raise ckpt.CheckpointError(
            f'the checkpoint {path} does not fit the networks {CONFIG_FILE} builds (was the '
            f'config changed, or a --gin_param given that changes them?): '
            f'{f"it holds no {e}" if isinstance(e, KeyError) else e}'
        ) from e
    algorithm.train(False)
    if config_file is not None and state.config_text is not None:
        change = config_changed_since(config_file, state.config_text, path)
        if change is not None:
            from absl import logging

            logging.warning(
                '%s. It was changed after that checkpoint was written; playing with it.', change
            )
    return algorithm
