"""Thread settings for small numerical work on a CPU."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import torch
from threadpoolctl import ThreadpoolController

T = TypeVar("T")
R = TypeVar("R")

_THREADS_LOCK = threading.Lock()
# [torch threads before the first holder, holders, the BLAS limiter to undo]
_THREADS_SAVED: list = []


@functools.lru_cache(maxsize=1)
def _blas_pools() -> ThreadpoolController:
    """The BLAS thread pools loaded in this process (numpy's, scipy's), found once."""
    return ThreadpoolController()


@contextmanager
def one_cpu_thread(device: torch.device | str = "cpu") -> Iterator[None]:
    """One torch thread and one BLAS thread while inside (CPU only).

    Small embedding work is latency: OpenMP barriers between threads cost
    more than they save, and worker threads that each start their own BLAS
    threads oversubscribe the cores. Holders nest and may be concurrent; the
    last to leave restores the previous settings.
    """
    if torch.device(device).type != "cpu":
        yield
        return
    with _THREADS_LOCK:
        if not _THREADS_SAVED:
            limiter = _blas_pools().limit(limits=1, user_api="blas")
            _THREADS_SAVED[:] = [torch.get_num_threads(), 0, limiter]
            torch.set_num_threads(1)
        _THREADS_SAVED[1] += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS_SAVED[1] -= 1
            if _THREADS_SAVED[1] == 0:
                torch.set_num_threads(_THREADS_SAVED[0])
                _THREADS_SAVED[2].restore_original_limits()
                _THREADS_SAVED.clear()


@contextmanager
def worker_threads(max_workers: int = 4) -> Iterator[int]:
    """How many threads the caller's own parallel numpy work may use, each on one BLAS thread.

    That is torch's thread count (``OMP_NUM_THREADS``, else the cores), at most
    ``max_workers``; inside :func:`one_cpu_thread` it is 1. BLAS stays on one
    thread meanwhile, so the workers do not oversubscribe the cores.
    """
    workers = max(1, min(max_workers, torch.get_num_threads()))
    with one_cpu_thread():
        yield workers


def map_on_cpu_threads(
    fn: Callable[[T], R], items: Iterable[T], workers: int | None = None
) -> Iterator[R]:
    """``map(fn, items)`` on worker threads with one torch and one BLAS thread each.

    Small batches of clients stay in cache and torch releases the GIL inside
    its ops, so threads, not OpenMP inside each op, keep the cores busy.
    Results come in the order of ``items``; ``workers`` defaults to the
    cores, at most 4.
    """
    workers = workers or min(4, os.cpu_count() or 1)
    with one_cpu_thread("cpu"):
        if workers == 1:
            yield from map(fn, items)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            yield from pool.map(fn, items)
