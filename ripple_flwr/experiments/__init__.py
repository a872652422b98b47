"""Experiments: sweeps over any run-config keys, on the one-process runner (the sweep engine).

- ``one_process``: the one-process federation (a Flower Grid that hands each
  message to the ClientApp in this process), the engine of every run here.
- ``executor``: a batch of runs, serially here or each a Ray task (``--jobs``,
  ``--cpus-per-run``, ``--gpus-per-run``, ``--ray-address``).
- ``runner``: reuse of finished runs, kept summaries, planning a batch's runs.
- ``sweep`` (``ripple-sweep``): the console entry point; ``launch`` (its flags),
  ``compose`` (the merge rule and pre-run checks), ``stats``, ``stamp``.
- ``paper_entry`` (``ripple-tables``, ``ripple-map``): runs the paper's tables and map
  from a source checkout's ``paper/`` folder, which the wheel does not hold.

Not part of the app bundle (``fab-exclude``): the apps never import it.
"""
