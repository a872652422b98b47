"""Where a run or a figure was made: the machine and the git commit of the code."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def machine_stamp(root: str | Path = ROOT) -> dict[str, Any]:
    """The machine (node, processor, CPU count) and the short git commit of ``root``."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "node": platform.node(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "commit": commit or "unknown",
    }


def stamp_text(stamp: Mapping[str, Any]) -> str:
    """One line: ``made on <node> (<processor>, <n> CPUs) at commit <commit>``."""
    return (
        f"made on {stamp['node']} ({stamp['processor']}, {stamp['cpus']} CPUs) "
        f"at commit {stamp['commit']}"
    )
