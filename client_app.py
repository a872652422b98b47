"""Ripple's ClientApp: Flower's ``ClientApp`` with the one handler table of the app."""

import os

# Many client processes share few cores: spinning OpenMP threads slow them all down.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from flwr.clientapp import ClientApp  # noqa: E402

from ripple_flwr.app.client.handlers import HANDLERS  # noqa: E402
from ripple_flwr.app.protocol.messages import EVALUATE, QUERY, TRAIN  # noqa: E402

app = ClientApp()

for _kind, _handler in HANDLERS.items():
    if _kind == TRAIN:
        app.train()(_handler)
    elif _kind == EVALUATE:
        app.evaluate()(_handler)
    elif _kind.startswith(QUERY.split(".")[0] + "."):
        app.query(_kind.split(".", 1)[1])(_handler)
    else:
        raise ValueError(f"client_app: no Flower decorator for message type {_kind!r}")
