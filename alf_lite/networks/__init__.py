"""Networks: MLP encoders, actors, batched critics and initialisation schemes."""

from alf_lite.networks.actor import DeterministicActorNetwork, TanhNormalActorNetwork
from alf_lite.networks.critic import CriticNetwork
from alf_lite.networks.encoding import mlp
from alf_lite.networks.layers import BatchedBatchNorm1d, BatchedLinear

__all__ = [
    'BatchedBatchNorm1d',
    'BatchedLinear',
    'CriticNetwork',
    'DeterministicActorNetwork',
    'TanhNormalActorNetwork',
    'mlp',
]
