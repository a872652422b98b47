"""The bodies of the command-line tools ``pretrain_vae.py`` and ``onboard.py`` (the top-level
files are thin shims), and ``ripple-status`` (:mod:`.status`: how the last run stands).

The generators of the pages' generated blocks (``python -m paper.reference``) are not
here: they read the checkout's ``docs/`` and live in its ``paper/`` folder, outside the wheel.

May import any layer but :mod:`ripple_flwr.testing`.
"""
