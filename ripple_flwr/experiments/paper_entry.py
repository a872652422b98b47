"""``ripple-tables`` and ``ripple-map``: the paper's commands, run from a source checkout.

The paper's tables and heterogeneity map live in the checkout's ``paper/`` folder, which
the wheel does not hold (it reads and writes the checkout's ``docs/``). These two entry
points look for ``paper/`` in the current directory or one above it, put that directory on
``sys.path``
and run ``paper.tables`` / ``paper.hmap``; elsewhere they say so in one line and exit 2.
The package never imports ``paper`` itself (``tests/experiments/test_layers.py``): only this lookup,
by name, at run time.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

__all__ = ["hmap", "tables"]


def _checkout(module: str) -> Path | None:
    """The checkout holding ``paper/<module>.py``: the current folder or one above it."""
    here = Path.cwd().resolve()
    for root in (here, *here.parents):
        if (root / "paper" / f"{module}.py").is_file():
            return root
    return None


def _run(command: str, module: str) -> int:
    root = _checkout(module)
    if root is None:
        print(
            f"{command} runs from a source checkout of ripple-flwr (cd into it, or into a "
            "folder under it); the installed package holds the sweep engine (ripple-sweep)",
            file=sys.stderr,
        )
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(f"paper.{module}").main()


def tables() -> int:
    """``ripple-tables``: ``python -m paper.tables`` of the checkout in the current directory."""
    return _run("ripple-tables", "tables")


def hmap() -> int:
    """``ripple-map``: ``python -m paper.hmap`` of the checkout in the current directory."""
    return _run("ripple-map", "hmap")
