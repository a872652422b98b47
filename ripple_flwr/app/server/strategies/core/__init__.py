"""The machinery every method's strategy shares: admission and the roster, reply validation,
evaluation, accounting, the polling grid, the base classes (one round loop) and zero-shot
onboarding in a run.

Method files live one level up, one file per method; nothing here names a method.
"""
