"""Files that check themselves: SHA-256 seals, safe loading (``weights_only``,
``allow_pickle=False``) and JSON conversion.

The lowest layer beside :mod:`ripple_flwr.settings`: every other layer may use it; it imports
none of them.
"""
