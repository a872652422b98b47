"""Ripple and its oracle (``spec.py``: entry and options; ``server.py``: the server side)."""
