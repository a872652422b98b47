"""The paper's machinery, run from a source checkout only (not in the wheel).

- ``tables`` (``ripple-tables table1|table2``, ``python -m paper.tables``), with
  ``table_one``, ``table_two``, ``rows`` (their rows, runs and K sweep), ``variants``
  (every method as a row) and ``plots`` (their figures); ``hmap`` (``ripple-map``,
  ``python -m paper.hmap``); ``recover`` (kept summaries from lost runs).
- ``reference`` (``python -m paper.reference [--check]``): rewrites the pages' generated
  blocks, from the code and from the committed ``docs/results/`` (``evidence*``).

May import any layer of :mod:`ripple_flwr`; nothing in the package imports this folder.
"""
