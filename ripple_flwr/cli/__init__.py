"""The bodies of the command-line tools ``pretrain_vae.py`` and ``onboard.py`` (the top-level
files are thin shims), and ``ripple-status`` (:mod:`.status`: how the last run stands).

May import any layer but :mod:`ripple_flwr.testing`.
"""
