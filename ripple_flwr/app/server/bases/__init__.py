"""The bases a method may build on: Flower's one-model strategies (:mod:`.flower`), one global
model kept by the method (:mod:`.global_model`), K cluster models with hard assignments
(:mod:`.clustered`). Nothing here names a method; the methods are in
``ripple_flwr/methods/<name>/``."""
