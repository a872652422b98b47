"""The Wavelet Scattering embedding of one client: prototype (eq. 5), top-M eigenpairs,
scattering, the embedder, the one-client CUDA graph, CPU threads.

Pure mathematics on arrays and tensors (numpy, torch, kymatio). Imports nothing of Flower, of
the app (:mod:`ripple_flwr.app`) or of runs (:mod:`ripple_flwr.runs`).
"""
