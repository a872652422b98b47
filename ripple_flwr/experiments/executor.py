"""Running a batch of federations: one after another in this process, or each job a Ray task.

A :class:`Job` is one run, or a chain of runs that go in order in one task
(Table 2's later alpha_test resumes the final state of the first). Every job
is executed by :func:`run_job`, in this process (``--jobs 1``, no Ray) or in
a Ray worker on any node of the cluster Ray is given; a run's results file
is the same either way (timings and the machine stamp aside). A failed run
is reported with its settings and error and the others go on; Ctrl-C
cancels every task and leaves finished results in place.
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ripple_flwr.runs.outputs import CHECKPOINT_DIR_ENV, OUTPUT_DIR_ENV
from ripple_flwr.settings import CACHE_DIR_ENV

__all__ = ["Execution", "Job", "Link", "Outcome", "run_job"]

# What a task's process must see as the invoking process does (a node may have started
# with another environment): where the server writes, reads checkpoints and caches.
TASK_ENV = (OUTPUT_DIR_ENV, CHECKPOINT_DIR_ENV, CACHE_DIR_ENV, "OMP_WAIT_POLICY")

Train = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Link:
    """One run of a job: its run config, and the resume file of the run before it, if any."""

    cfg: dict[str, Any]
    resume_from: str | None = None

    @property
    def path(self) -> str:
        return str(self.cfg["results-path"])


@dataclass(frozen=True)
class Job:
    """Runs executed in order in one task (one run, or a chain that resumes)."""

    links: tuple[Link, ...]


@dataclass
class Outcome:
    """What became of one run: its results (or the error), where and when it ran."""

    path: str
    cfg: dict[str, Any]
    results: dict[str, Any] | None = None
    text: str | None = None  # the results file's text, as the server wrote it
    error: str | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    ray_node: str | None = None
    task_start: float = 0.0  # time.time() when its task began
    run_start: float = 0.0
    run_end: float = 0.0


def _limit_threads(threads: int) -> None:
    """Give torch, OpenMP and BLAS this many threads in this process."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(max(1, threads))
    threadpool_limits(max(1, threads))


def _ray_node() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # not in a Ray worker
        return None


def _resumed(link: Link) -> dict[str, Any]:
    """The run config of ``link``: it resumes the run before it when that one left its state."""
    if link.resume_from and Path(link.resume_from).is_file():
        cfg = {k: v for k, v in link.cfg.items() if k != "checkpoint-every"}
        return {**cfg, "resume": link.resume_from}
    return dict(link.cfg)


def run_job(
    job: Job,
    env: Mapping[str, str] | None = None,
    threads: int = 1,
    train: Train | None = None,
    quiet: bool = False,
) -> list[Outcome]:
    """Run every link of ``job`` in order in this process; one :class:`Outcome` per link.

    Parameters
    ----------
    job
        The runs.
    env
        Environment variables to set first (the invoking process's ``TASK_ENV``).
    threads
        Torch / BLAS threads of this process.
    train
        Replaces the one-process run of a run config (tests); returns its results dict.
    quiet
        Do not log each run's start to stderr.
    """
    task_start = time.time()
    os.environ.update(env or {})
    from ripple_flwr.experiments.stamp import machine_stamp

    if train is None:
        _limit_threads(threads)
        from ripple_flwr.experiments.one_process import run_one_process

        def train(cfg):
            return run_one_process(cfg)

    node = _ray_node()
    machine = machine_stamp() if node else {}  # a Ray task names its own node
    outcomes: list[Outcome] = []
    failed = False
    for link in job.links:
        out = Outcome(link.path, link.cfg, machine=machine, ray_node=node, task_start=task_start)
        outcomes.append(out)
        if failed:
            out.error = "not run: the run before it in its chain failed"
            continue
        if not quiet:
            print(f"running {Path(link.path).name}", file=sys.stderr, flush=True)
        out.run_start = time.time()
        try:
            out.results = train(_resumed(link))
            path = Path(link.path)
            out.text = path.read_text() if path.is_file() else None
        except Exception as err:  # reported with its settings; the other runs go on
            failed = True
            tail = "".join(traceback.format_exception(err)[-3:]).strip()
            out.error = f"{type(err).__name__}: {err}\n{tail}"
        out.run_end = time.time()
    return outcomes


class _Progress:
    """Runs done, running and left, with tqdm's ETA, on stderr."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="run", desc="runs", file=sys.stderr, disable=not enabled)
        self.total, self.done, self.running, self.failed = total, 0, 0, 0
        self.show()

    def show(self) -> None:
        left = self.total - self.done - self.running
        self.bar.set_postfix_str(
            f"{self.running} running, {left} left, {self.failed} failed", refresh=True
        )

    def finished(self, outcome: Outcome) -> None:
        self.done += 1
        self.failed += outcome.error is not None
        self.bar.update(1)

    def close(self) -> None:
        self.show()
        self.bar.close()


@dataclass
class Execution:
    """How a batch of jobs runs: serially here, or as Ray tasks.

    Parameters
    ----------
    jobs
        Tasks at once; ``None``: the cores (or the cluster's CPUs) over ``cpus_per_run``.
        ``1`` without ``ray_address`` or GPUs runs serially in this process, no Ray.
    cpus_per_run
        CPUs each task reserves; also its torch thread budget.
    gpus_per_run
        GPUs each task reserves (fractional, e.g. 0.25, to share one).
    ray_address
        ``auto`` (or an address) attaches to a running cluster; ``None`` starts a local
        Ray for the batch and stops it at the end.
    progress
        Show the progress bar.
    """

    jobs: int | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    ray_address: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if self.jobs is not None and self.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {self.jobs}")
        if self.cpus_per_run <= 0:
            raise ValueError(f"--cpus-per-run must be > 0, got {self.cpus_per_run}")
        if self.gpus_per_run < 0:
            raise ValueError(f"--gpus-per-run must be >= 0, got {self.gpus_per_run}")

    @property
    def threads(self) -> int:
        return max(1, int(self.cpus_per_run))

    def local_jobs(self) -> int:
        """Tasks at once on this machine alone."""
        if self.jobs is not None:
            return self.jobs
        return max(1, int((os.cpu_count() or 1) // self.cpus_per_run))

    def serial(self) -> bool:
        """Whether the batch runs in this process, without Ray."""
        return not self.ray_address and not self.gpus_per_run and self.local_jobs() == 1

    def run(
        self,
        jobs: Iterable[Job],
        on_done: Callable[[Outcome], None],
        train: Train | None = None,
    ) -> None:
        """Run ``jobs``; ``on_done`` gets each run's outcome as soon as its job ends."""
        jobs = list(jobs)
        progress = _Progress(sum(len(j.links) for j in jobs), self.progress)
        try:
            if train is not None or self.serial():
                self._run_here(jobs, on_done, progress, train)
            else:
                self._run_ray(jobs, on_done, progress)
        finally:
            progress.close()

    def _run_here(self, jobs, on_done, progress, train) -> None:
        env = {k: os.environ[k] for k in TASK_ENV if k in os.environ}
        for job in jobs:
            progress.running = len(job.links)
            progress.show()
            for outcome in run_job(job, env, self.threads, train, quiet=self.progress):
                progress.running -= 1
                progress.finished(outcome)
                on_done(outcome)

    def _start_ray(self):
        import ray

        if ray.is_initialized():
            return ray, False
        if self.ray_address:
            ray.init(address=self.ray_address, log_to_driver=False)
        else:
            cpus = math.ceil(self.local_jobs() * self.cpus_per_run)
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        return ray, True

    def _limit(self, ray) -> int:
        if self.jobs is not None:
            return self.jobs
        if not self.ray_address:
            return self.local_jobs()
        cpus = float(ray.cluster_resources().get("CPU", 1))
        return max(1, int(cpus // self.cpus_per_run))

    def _run_ray(self, jobs, on_done, progress) -> None:
        ray, started = self._start_ray()
        env = {k: os.environ[k] for k in TASK_ENV if k in os.environ}
        task = ray.remote(run_job).options(
            num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run, max_retries=0
        )
        limit, waiting, inflight = self._limit(ray), list(jobs), {}
        try:
            while waiting or inflight:
                while waiting and len(inflight) < limit:
                    job = waiting.pop(0)
                    inflight[task.remote(job, env, self.threads, None, True)] = job
                    progress.running += len(job.links)
                progress.show()
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    job = inflight.pop(ref)
                    for outcome in _collect(ray, ref, job):
                        progress.running -= 1
                        progress.finished(outcome)
                        on_done(outcome)
        except KeyboardInterrupt:
            for ref in inflight:
                ray.cancel(ref, force=True)
            print(
                f"\ninterrupted: {progress.done} runs finished and kept, "
                f"{len(inflight)} tasks cancelled",
                file=sys.stderr,
            )
            raise
        finally:
            if started:
                ray.shutdown()


def _collect(ray, ref, job: Job) -> list[Outcome]:
    """A task's outcomes; every run of the job failed when the task itself died."""
    try:
        return ray.get(ref)
    except Exception as err:  # the worker died (killed, out of memory) or Ray failed
        return [Outcome(link.path, link.cfg, error=f"task failed: {err}") for link in job.links]
