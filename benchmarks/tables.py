"""The paper's Tables 1 and 2: a shim for ``ripple-tables`` (``ripple_flwr.experiments.tables``).

ripple-tables table1 --rounds 300 --sweep-k --reuse --out outputs/table1
"""

from ripple_flwr.experiments.tables import main

if __name__ == "__main__":
    raise SystemExit(main())
