"""The strategies of the app: one file per federated method, over :mod:`.core` (shared machinery).

Which strategy a run uses is decided by :mod:`ripple_flwr.methods.registry` alone; this package
imports nothing on its own, so importing one method's file never loads the others.
"""
