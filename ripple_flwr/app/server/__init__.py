"""The server side: what the ServerApp runs.

The run (:mod:`.run`), the data the server holds for it (:mod:`.run_data`) and the
strategies (:mod:`.strategies`). It talks to the clients only through
:mod:`ripple_flwr.app.protocol` and never imports :mod:`ripple_flwr.app.client`.
"""
