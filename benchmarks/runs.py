"""What the benchmarks share: one one-process run (or its finished results file), the JSON line.

Imported by the scripts beside it (each puts this folder and the project root
on ``sys.path``). The runner itself is the package's
(``ripple_flwr.experiments.runner.run_or_reuse``).
"""

from __future__ import annotations

from pathlib import Path

from ripple_flwr.experiments.runner import REUSE_IGNORES, run_or_reuse

__all__ = ["REUSE_IGNORES", "run_or_reuse", "write_json_line"]


def write_json_line(line: str, path: str | Path | None) -> None:
    """Also write the benchmark's JSON line to ``path`` (no-op for an empty path)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(line + "\n")
