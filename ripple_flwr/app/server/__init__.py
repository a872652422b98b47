"""The server side: what the ServerApp runs.

The run (:mod:`.run`), the data the server holds for it (:mod:`.run_data`), the engine
(:mod:`.engine`, the one Flower ``Strategy``) with its collaborators, one folder each
(:mod:`.rounds`, :mod:`.roster`, :mod:`.replies`, :mod:`.evaluation`, :mod:`.resume`), and
the bases a method builds on (:mod:`.bases`). It talks to the clients only through
:mod:`ripple_flwr.app.protocol` and never imports :mod:`ripple_flwr.app.client`.
"""
