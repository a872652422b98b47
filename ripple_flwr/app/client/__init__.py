"""The client side: what a SuperNode's ClientApp runs.

Its handlers (:mod:`.handlers`), the node's data (:mod:`.data`), the one-shot summary,
training and evaluation (:mod:`.work`), candidate choice (:mod:`.candidates`), FLUX's
descriptor (:mod:`.describe`) and what the node keeps between messages
(:mod:`.node_state`, :mod:`.node_release`). It talks to the server only through
:mod:`ripple_flwr.app.protocol` and never imports :mod:`ripple_flwr.app.server` or a
strategy (``tests/experiments/test_layers.py``).
"""
