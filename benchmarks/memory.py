"""Peak memory of a process and all its descendants, sampled from ``/proc`` (Linux, no psutil).

``getrusage`` gives the largest single process (``RUSAGE_CHILDREN`` is the
largest waited-for child, not a sum), so a run of several processes (the
SuperLink, the ServerApp, Ray's workers) needs the sum of their resident sets
at the same moment: :class:`TreeMemory` adds them up every ``interval``
seconds on a thread, and keeps the peak per phase the caller names.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Callable
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
GB = 2**30


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # the task ended meanwhile
            continue
    return out


def _name(pid: int) -> str:
    """A process's command line, shortened to its program and first argument."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    words = [Path(a.decode(errors="replace")).name for a in args[:2] if a]
    return " ".join(words)[:60] or f"pid {pid}"


def start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): with the id, who it is."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def tree_rss(
    root: int,
    seen: dict[int, int | None] | None = None,
    detail: list[tuple[str, int]] | None = None,
) -> int:
    """Resident bytes of ``root`` and every process below it, now (each one's id and start
    time go to ``seen``; ``detail`` gets each one's name and bytes)."""
    total, stack, seen = 0, [root], {} if seen is None else seen
    visited: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in visited:
            continue
        visited.add(pid)
        if pid not in seen:
            seen[pid] = start_time(pid)
        try:
            rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
            if detail is not None:
                detail.append((_name(pid), rss))
        except (OSError, IndexError, ValueError):  # gone, or a zombie
            continue
        total += rss
        stack += _children(pid)
    return total


class TreeMemory:
    """Samples :func:`tree_rss` of ``root`` (default: this process) until :meth:`stop`."""

    def __init__(
        self,
        root: int | None = None,
        interval: float = 0.2,
        limit_gb: float = 0.0,
        on_limit: Callable[[TreeMemory], None] | None = None,
    ) -> None:
        self.root = os.getpid() if root is None else root
        self.interval = interval
        self.limit = limit_gb * GB  # 0: no limit
        self.on_limit = on_limit
        self.phase = "start"
        self.peaks: dict[str, int] = {}
        # Every process ever sampled, with its start time (to stop what outlives its parent).
        self.seen: dict[int, int | None] = {}
        self.at_peak: list[tuple[str, int]] = []  # the processes of the largest sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TreeMemory:
        self._thread.start()
        return self

    def mark(self, phase: str) -> None:
        """Samples from now on count towards ``phase`` (sampled once at the switch)."""
        self.sample()
        self.phase = phase

    def sample(self) -> None:
        detail: list[tuple[str, int]] = []
        rss = tree_rss(self.root, self.seen, detail)
        if rss > max(self.peaks.values(), default=0):
            self.at_peak = detail
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), rss)
        if self.limit and rss > self.limit and self.on_limit is not None:
            act, self.on_limit = self.on_limit, None  # once
            act(self)  # e.g. report and stop before the machine runs out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> dict[str, float]:
        """Stop sampling; the peak of each phase in GB."""
        self._stop.set()
        self._thread.join()
        self.sample()
        return {k: round(v / GB, 3) for k, v in self.peaks.items()}

    def peak_processes(self, top: int = 8) -> list[list]:
        """The largest processes of the peak sample: [name, GB], largest first."""
        big = sorted(self.at_peak, key=lambda p: -p[1])[:top]
        return [[name, round(rss / GB, 3)] for name, rss in big]

    def still_running(self) -> list[int]:
        """The sampled processes alive now: the same id *and* start time (not a reused id)."""
        return [
            pid
            for pid, started in self.seen.items()
            if pid != os.getpid() and started is not None and start_time(pid) == started
        ]

    @property
    def peak_gb(self) -> float:
        """The largest sum seen, or this process's own high-water mark if that is larger
        (a peak between two samples; ``ru_maxrss`` is in KiB on Linux)."""
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        sampled = max(self.peaks.values(), default=0)
        return round(max(sampled, own if self.root == os.getpid() else 0) / GB, 3)
