"""Server strategies of the app: Ripple (and its oracle), FedAvg and local-only training."""

from ripple_flwr.strategies.common import FederationRun, NotEnoughClientsError, QueryResult
from ripple_flwr.strategies.fedavg import FedAvgBaseline
from ripple_flwr.strategies.local import LocalOnly
from ripple_flwr.strategies.ripple import RippleStrategy

__all__ = [
    "FedAvgBaseline",
    "FederationRun",
    "LocalOnly",
    "NotEnoughClientsError",
    "QueryResult",
    "RippleStrategy",
]
