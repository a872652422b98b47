"""Differential privacy of the one-shot embedding: the Gaussian mechanism (:mod:`.mechanism`)
and the public mechanism a run releases with (:mod:`.release`).

Pure numpy; may import :mod:`ripple_flwr.data` (public reference clients); never Flower, the app
or runs.
"""
