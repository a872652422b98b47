"""Everything that knows Flower: client handlers, the server, records, node state, evaluation
candidates, the method registry and the strategies.

Sits on the mathematics (:mod:`~ripple_flwr.wst`, :mod:`~ripple_flwr.router`,
:mod:`~ripple_flwr.aggregation`, :mod:`~ripple_flwr.privacy`), :mod:`~ripple_flwr.training`,
:mod:`~ripple_flwr.data` and :mod:`~ripple_flwr.runs`; nothing below imports it.
"""
