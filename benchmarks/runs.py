"""What the benchmarks share: one in-process run (or its finished results file), the JSON line.

Imported by the scripts beside it (each puts this folder and the project root
on ``sys.path``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ripple_flwr.app.server import run_server
from ripple_flwr.runs.results import finished_results
from ripple_flwr.testing.inprocess import InProcessGrid

# Paths, and when the final state is saved: neither changes the numbers, so --reuse ignores them.
REUSE_IGNORES = ("results-path", "checkpoint", "resume", "checkpoint-every")


def run_or_reuse(
    cfg: dict[str, Any], reuse: bool, node_configs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The results of one in-process run of ``cfg`` (real client handlers, no Ray).

    With ``reuse``, the results file at ``cfg["results-path"]`` is read instead
    when it exists and holds the same settings; otherwise the run goes ahead and
    replaces any stale file there.
    """
    if reuse:
        res = finished_results(cfg["results-path"], cfg, REUSE_IGNORES)
        if res is not None:
            print(f"reusing {cfg['results-path']}", file=sys.stderr, flush=True)
            return res
    print(f"running {Path(cfg['results-path']).name}", file=sys.stderr, flush=True)
    cfg = {**cfg, "overwrite-results": True}
    grid = InProcessGrid(cfg, node_configs=node_configs, keep_traffic=False)
    return json.loads(run_server(grid, cfg).read_text())


def write_json_line(line: str, path: str | Path | None) -> None:
    """Also write the benchmark's JSON line to ``path`` (no-op for an empty path)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(line + "\n")
