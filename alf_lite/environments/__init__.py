"""Environments as batched ``TimeStep`` producers; importing registers alf_lite's toy envs."""
from alf_lite.environments import point_env
from alf_lite.environments.suite_gym import BatchedEnvironment, create_environment

__all__ = ['BatchedEnvironment', 'create_environment', 'point_env']
