"""Every message type of the app's wire protocol and its handler, for in-process use.

``client_app.py`` registers the same handlers with Flower's ``ClientApp``;
:func:`dispatch` routes a message to its handler by type, as that app does, for
the in-process grid (:mod:`ripple_flwr.testing.inprocess`).
"""

from __future__ import annotations

from flwr.app import Context, Message

from ripple_flwr.app.client import handle_evaluate, handle_query, handle_train
from ripple_flwr.app.describe import handle_describe

HANDLERS = {
    "query.embed": handle_query,
    "query.describe": handle_describe,  # FLUX's descriptor round
    "train": handle_train,
    "evaluate": handle_evaluate,
}


def dispatch(msg: Message, context: Context) -> Message:
    """Route a message to its handler by type, as ``client_app.app`` does."""
    kind = msg.metadata.message_type
    if kind not in HANDLERS:
        raise ValueError(f"no handler for message type {kind!r}")
    return HANDLERS[kind](msg, context)
