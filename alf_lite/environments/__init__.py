"""Environments as batched ``TimeStep`` producers; importing registers alf_lite's envs.

Registered ids: ``alf_lite/PointTarget-v0`` (toy task), ``HumanoidBullet-v0``,
``AntBullet-v0``, ``HalfCheetahBullet-v0``, ``HopperBullet-v0``,
``Walker2DBullet-v0`` (PyBullet locomotion), ``ICubWalk-v0`` and ``ICubWalk-v1``
(iCub walking).
The PyBullet and iCub tasks are registered only where pybullet (and
icub-models) are installed, so alf_lite also runs where they are not.
"""

import importlib.util

from alf_lite.environments import point_env
from alf_lite.environments.suite_gym import (
    BatchedEnvironment,
    EnvironmentCrashedError,
    EnvironmentHungError,
    EpisodeReplayError,
    NonFiniteActionError,
    NonFiniteEnvOutputError,
    RenderModeError,
    create_environment,
)

__all__ = [
    'BatchedEnvironment',
    'EnvironmentCrashedError',
    'EnvironmentHungError',
    'EpisodeReplayError',
    'NonFiniteActionError',
    'NonFiniteEnvOutputError',
    'RenderModeError',
    'create_environment',
    'point_env',
]

if importlib.util.find_spec('pybullet') is not None:
    from alf_lite.environments import suite_pybullet  # noqa: F401  (registers its ids)

    __all__.append('suite_pybullet')
    if importlib.util.find_spec('icub_models') is not None:
        from alf_lite.environments import icub_walking  # noqa: F401  (registers its id)

        __all__.append('icub_walking')
