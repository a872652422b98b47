"""The router: the GMM-VAE, the routers built on it, the synthetic client bank, pre-training and
its checkpoints.

May import :mod:`ripple_flwr.wst`, :mod:`ripple_flwr.data` and :mod:`ripple_flwr.io`; never
Flower, the app or runs.
"""
