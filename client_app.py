"""Ripple's ClientApp: thin registration of the handlers in :mod:`ripple_flwr.app.client`."""

import os

# Many client processes share few cores: spinning OpenMP threads slow them all down.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from flwr.app import Context, Message  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from ripple_flwr.app.client import handle_evaluate, handle_query, handle_train  # noqa: E402
from ripple_flwr.app.describe import handle_describe  # noqa: E402

app = ClientApp()


@app.query("embed")
def query(msg: Message, context: Context) -> Message:
    """One-shot round: the client's embedding (or mean image), sent once."""
    return handle_query(msg, context)


@app.query("describe")
def describe(msg: Message, context: Context) -> Message:
    """FLUX: the descriptor of the client's data under the model it is sent."""
    return handle_describe(msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """E local epochs from the received (personalised) model."""
    return handle_train(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The received model on the client's own test split."""
    return handle_evaluate(msg, context)
