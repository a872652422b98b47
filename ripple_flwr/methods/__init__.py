"""Federated methods, one folder each (``<name>/spec.py``, ``server.py``, ``client.py``).

The registry (:mod:`ripple_flwr.methods.registry`) finds the folders; docs/adding-a-method.md.
"""
