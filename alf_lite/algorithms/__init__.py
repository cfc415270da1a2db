"""Off-policy algorithms."""
from alf_lite.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf_lite.algorithms.sac import SacAlgorithm
