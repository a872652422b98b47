"""FedGWC (``spec.py``: entry and options; ``server.py``: the server side; ``client.py``:
the clients report their steps' losses)."""
