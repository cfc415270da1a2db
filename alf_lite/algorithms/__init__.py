"""Off-policy algorithms and exploration noise."""

from alf_lite.algorithms.ddpg import DdpgAlgorithm
from alf_lite.algorithms.noise import GaussianNoise, OUNoise
from alf_lite.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf_lite.algorithms.sac import SacAlgorithm
from alf_lite.algorithms.td3 import Td3Algorithm

__all__ = [
    'DdpgAlgorithm',
    'GaussianNoise',
    'OUNoise',
    'OffPolicyAlgorithm',
    'SacAlgorithm',
    'Td3Algorithm',
]
