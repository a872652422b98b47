"""ripple-flwr: Ripple (zero-shot clustered federated learning by the Wavelet Scattering
Transform) and its baselines on Flower.

The package is layered; imports point down only (``tests/experiments/test_layers.py`` enforces it):

- :mod:`.settings`, :mod:`.io`: run settings (parsing, types, ranges) and self-checking files;
- :mod:`.wst`, :mod:`.router`, :mod:`.aggregation`, :mod:`.privacy`: the mathematics;
  :mod:`.training`: models and local loops; :mod:`.data`: datasets and partitions. None of
  these knows Flower or runs;
- :mod:`.runs`: what a run leaves behind (results, plots, resume, saved runs, output folder);
- :mod:`.app`: everything that knows Flower (handlers, server, registry, strategies);
- :mod:`.cli`: the bodies of ``pretrain_vae.py`` and ``onboard.py``;
  :mod:`.testing`: in-process grid and fault injectors (not in the app bundle).
"""
