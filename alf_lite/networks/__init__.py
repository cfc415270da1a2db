"""Networks: MLP encoders, actors and batched critics."""
from alf_lite.networks.actor import TanhNormalActorNetwork
from alf_lite.networks.critic import CriticNetwork
from alf_lite.networks.encoding import mlp
from alf_lite.networks.layers import BatchedLinear
