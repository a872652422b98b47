"""Experiments: the paper's tables and sweeps over any run-config keys, on the one-process runner.

- ``one_process``: the one-process federation (a Flower Grid that hands each
  message to the ClientApp in this process), the engine of every run here.
- ``executor``: a batch of runs, serially here or each a Ray task (``--jobs``,
  ``--cpus-per-run``, ``--gpus-per-run``, ``--ray-address``).
- ``runner``: reuse of finished runs, kept summaries, planning a table's runs.
- ``tables`` (``ripple-tables table1|table2``), ``sweep`` (``ripple-sweep``):
  the console entry points; ``table_one``, ``table_two``, ``stats``, ``plots``.

Not part of the app bundle (``fab-exclude``): the apps never import it.
"""
