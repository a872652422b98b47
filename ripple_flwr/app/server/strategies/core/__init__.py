"""The engine (the app's one Flower ``Strategy``) and its collaborators: admission and the
roster, reply validation, evaluation, accounting, the polling grid, the round loop, resume
and zero-shot onboarding; and the bases a method may build on (Flower's strategies, one
global model, clustered models).

Methods live in ``ripple_flwr/methods/<name>/``; nothing here names a method.
"""
