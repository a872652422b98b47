"""Test helpers: an in-process Flower grid and fault injectors. Not part of the app bundle
(``fab-exclude``).

May import anything; nothing in the app imports it.
"""
