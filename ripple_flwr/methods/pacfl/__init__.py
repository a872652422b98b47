"""PACFL (``spec.py``: entry and options; ``server.py``: the server side)."""
