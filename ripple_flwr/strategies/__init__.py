"""Server strategies of the app, one file per method, over shared admission and accounting.

Which strategy a run uses is decided by :mod:`ripple_flwr.methods` alone.
"""

from ripple_flwr.strategies.admission import NotEnoughClientsError, QueryResult
from ripple_flwr.strategies.base import AppStrategy, ServerModels
from ripple_flwr.strategies.fedavg import FedAvgMethod
from ripple_flwr.strategies.flower import FlowerModel
from ripple_flwr.strategies.local import LocalOnly
from ripple_flwr.strategies.ripple import RippleStrategy

__all__ = [
    "AppStrategy",
    "FedAvgMethod",
    "FlowerModel",
    "LocalOnly",
    "NotEnoughClientsError",
    "QueryResult",
    "RippleStrategy",
    "ServerModels",
]
