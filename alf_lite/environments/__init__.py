"""Environments as batched ``TimeStep`` producers; importing registers alf_lite's envs.

Registered ids: ``alf_lite/PointTarget-v0`` (toy task), ``HumanoidBullet-v0``,
``AntBullet-v0``, ``HalfCheetahBullet-v0``, ``HopperBullet-v0``,
``Walker2DBullet-v0`` (PyBullet locomotion) and ``ICubWalk-v0`` (iCub walking).
"""
from alf_lite.environments import icub_walking, point_env, suite_pybullet
from alf_lite.environments.suite_gym import (BatchedEnvironment, EnvironmentCrashedError,
                                             EnvironmentHungError, create_environment)

__all__ = ['BatchedEnvironment', 'EnvironmentCrashedError', 'EnvironmentHungError',
           'create_environment', 'icub_walking', 'point_env', 'suite_pybullet']
