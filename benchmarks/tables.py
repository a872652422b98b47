"""The paper's Tables 1 and 2: a shim for ``ripple-tables`` (``paper.tables``).

ripple-tables table1 --rounds 300 --sweep-k --reuse --out outputs/table1
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's paper/

from paper.tables import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
