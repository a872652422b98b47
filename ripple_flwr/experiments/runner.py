"""The runs of a batch: reuse of finished runs, kept summaries, planning and running them.

The engine under ``ripple-sweep`` (and the paper's tables, ``paper/``): a command
plans the runs it needs, reads those already finished with the same settings
(``--reuse``) and runs the rest. ``--reuse-only`` reads what is there and
trains nothing: a missing run is listed, and its cell is marked.

The tables read each run's *summary* (``stats.summarise``). With ``--keep DIR``
every summary is also written to ``DIR/<results name>``, and ``--reuse`` finds
a run there when its results file is gone: commit DIR and the table carries
over to a machine that never held the results files.

A table is built by :func:`build`: it calls the table once with the
:class:`Runner` planning (every run it needs and cannot read is recorded),
runs those in one batch (serially or as Ray tasks, ``executor.Execution``),
and calls it again until nothing is left to run (the K sweep first, then the
rows at the best K); the last call draws the table from the summaries.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ripple_flwr.experiments.compose import PlanError, check_runs
from ripple_flwr.experiments.executor import Execution, Job, Link, Outcome
from ripple_flwr.experiments.stats import summarise
from ripple_flwr.runs.results import finished_results

# Paths, and when the final state is saved: neither changes the numbers, so --reuse ignores them.
REUSE_IGNORES = ("results-path", "checkpoint", "resume", "checkpoint-every")

Results = dict[str, Any]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def summary_text(summary: Results) -> str:
    """A kept summary file's text: its settings without paths (``REUSE_IGNORES``), sorted."""
    settings = {k: v for k, v in summary["settings"].items() if k not in REUSE_IGNORES}
    return json.dumps({**summary, "settings": settings}, indent=1, sort_keys=True) + "\n"


def run_or_reuse(
    cfg: dict[str, Any], reuse: bool, node_configs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The results of one one-process run of ``cfg`` (real client handlers, no Ray).

    With ``reuse``, the results file at ``cfg["results-path"]`` is read instead
    when it exists and holds the same settings; otherwise the run goes ahead and
    replaces any stale file there.
    """
    from ripple_flwr.experiments.one_process import run_one_process

    if reuse:
        res = finished_results(cfg["results-path"], cfg, REUSE_IGNORES)
        if res is not None:
            log(f"reusing {cfg['results-path']}")
            return res
    log(f"running {Path(cfg['results-path']).name}")
    return run_one_process(cfg, node_configs)


def write_json_line(line: str, path: str | Path | None) -> None:
    """Also write a JSON line to ``path`` (no-op for an empty path)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(line + "\n")


def chains(links: Iterable[Link]) -> list[Job]:
    """Group runs into jobs: a run that resumes another pending run goes after it, in its job."""
    links = list(links)
    by_resume = {str(Path(link.path).with_suffix(".resume.npz")): link for link in links}
    follows = {
        link.path: by_resume[link.resume_from].path
        for link in links
        if link.resume_from in by_resume and by_resume[link.resume_from] is not link
    }
    jobs: dict[str, list[tuple[int, Link]]] = {}
    for link in links:
        head, depth = link.path, 0
        while head in follows:
            head, depth = follows[head], depth + 1
        jobs.setdefault(head, []).append((depth, link))
    return [
        Job(tuple(link for _, link in sorted(chain, key=lambda d: d[0]))) for chain in jobs.values()
    ]


def build(
    table: Callable[..., dict[str, Any]],
    args: argparse.Namespace,
    out: Path,
    runner: Runner,
    stamp: Mapping[str, Any],
) -> dict[str, Any]:
    """Plan, run what is missing (in batches), then draw ``table`` from the summaries."""
    if not runner.reuse_only:
        while True:
            runner.planning = True
            try:
                table(args, out, runner, None)
            finally:
                runner.planning = False
            if not runner.pending:
                break
            check_runs((link.cfg for link in runner.pending.values()), runner.flag_of)
            runner.run_pending()
    result = table(args, out, runner, stamp)
    # A run missing under --reuse-only may be one no command could run: say so, not "missing".
    check_runs(runner.missing_configs, runner.flag_of)
    return result


def build_or_exit(
    prog: str,
    table: Callable[..., Any],
    args: argparse.Namespace,
    out: Path,
    runner: Runner,
    stamp: Mapping[str, Any],
) -> tuple[Any, int | None]:
    """:func:`build`, with the two ways a command stops early as its exit status: a problem
    found before any run (one line each, 2) and Ctrl-C (finished runs kept, 130)."""
    try:
        return build(table, args, out, runner, stamp), None
    except PlanError as err:
        for line in err.lines:
            print(f"{prog}: {line}", file=sys.stderr)
        return None, 2
    except KeyboardInterrupt:
        log("interrupted: finished runs are kept; run the same command with --reuse to go on")
        return None, 130


class Runner:
    """Each run trained or read once per invocation; with ``reuse_only`` nothing trains.

    ``get`` reads a finished run with the same settings (``--reuse``): its
    results file, the earlier names given as ``legacy`` (``<row>-seed<s>.json``),
    then its summary in ``keep``; otherwise it trains, or under ``reuse_only``
    records the run as missing and returns ``None``. It returns the run's
    summary, and writes it to ``keep`` (when given). A run it trains carries
    ``made_on`` (the machine and commit it was made on) into its kept summary.

    While ``planning``, ``get`` trains nothing: it records the run in
    ``pending`` and returns ``None``; :meth:`run_pending` then runs them all
    through ``execution`` (serially or as Ray tasks) and :func:`build` calls the
    table again, until nothing is pending. A failed run is reported, listed in
    ``failed`` and ``missing``, and its cell marked; the others go on.
    """

    def __init__(
        self,
        reuse: bool = False,
        reuse_only: bool = False,
        train: Callable[[dict[str, Any]], Results] | None = None,
        keep: str | Path | None = None,
        made_on: Mapping[str, Any] | None = None,
        execution: Execution | None = None,
        on_result: Callable[[Results], None] | None = None,
        flag_of: Mapping[str, str] | None = None,
    ) -> None:
        self.reuse = reuse or reuse_only
        self.made_on = dict(made_on) if made_on is not None else None
        self.reuse_only = reuse_only
        self.train = train
        self.keep = Path(keep) if keep else None
        self.execution = execution or Execution(jobs=1)
        self.on_result = on_result
        self.flag_of = dict(flag_of or {})  # run-config key -> the command's flag, for refusals
        self.missing: list[str] = []
        self.missing_configs: list[dict[str, Any]] = []  # under reuse_only: checked at the end
        self.trained: list[str] = []
        self.failed: dict[str, str] = {}
        self.outcomes: list[Outcome] = []
        self.planning = False
        self.pending: dict[str, Link] = {}
        self._seen: dict[str, tuple[Results | None, Path]] = {}

    def get(
        self,
        cfg: dict[str, Any],
        legacy: Iterable[str | Path] = (),
        after: str | None = None,
        train: bool = True,
    ) -> tuple[Results | None, Path]:
        """(the run's summary or None, its results file) of the run ``cfg``.

        ``after``: the resume file of the run this one continues (Table 2's later
        alpha_test); a run planned with it goes in the same task, after that run.
        ``train`` = False: this run is read where finished (or kept), else missing, as
        under ``reuse_only`` (``ripple-map --train-only``: the other rows wait).
        """
        path = str(cfg["results-path"])
        if path in self._seen:
            return self._seen[path]
        kept = [self.keep / Path(path).name] if self.keep else []
        found = self._read(cfg, [path, *legacy, *kept]) if self.reuse or not train else None
        if found is None and path in self.failed:
            return None, Path(path)
        if found is None and (self.reuse_only or not train):
            why = "--reuse-only" if self.reuse_only else "not among the rows trained now"
            log(f"missing {Path(path).name} ({why}: not run)")
            self.missing.append(path)
            self.missing_configs.append(dict(cfg))
            found = (None, Path(path))
        elif found is None:
            self.pending[path] = Link(dict(cfg), after)
            if self.planning:
                return None, Path(path)
            self.run_pending()
            return self._seen.get(path, (None, Path(path)))
        self._remember(path, found)
        return found

    def missing_markdown(self) -> list[str]:
        """The table's closing lines on its missing runs: read-only, or failed (none: [])."""
        if not self.missing:
            return []
        return ["", f"Missing runs: {len(self.missing)}"] + [
            f"- {Path(p).name}: "
            + (f"failed ({self.failed[p]})" if p in self.failed else "not run yet")
            for p in self.missing
        ]

    def run_pending(self) -> None:
        """Run every pending run (chains in order, in one task), recording each as it ends."""
        jobs = chains(self.pending.values())
        self.pending = {}
        self.execution.run(jobs, self._finished, train=self.train)

    def _finished(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        path = outcome.path
        if outcome.error is not None:
            settings = json.dumps(outcome.cfg, sort_keys=True)
            log(f"FAILED {Path(path).name}: {outcome.error}\n  settings: {settings}")
            self.failed[path] = outcome.error
            self.missing.append(path)
            return
        target = Path(path)
        if outcome.text is not None and (
            not target.is_file() or target.read_text() != outcome.text
        ):  # it ran on another node: its results file comes here too
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(outcome.text)
        results = outcome.results
        if results is None:  # a task returns the file's text, not the parsed dict twice
            results = json.loads(outcome.text or "{}")
        summary = summarise(results)
        if self.made_on is not None:  # where and at which commit this run was made
            summary["made_on"] = {**self.made_on, **outcome.machine}  # a Ray node: its own
        self.trained.append(path)
        if self.on_result is not None:
            self.on_result(results)
        self._remember(path, (summary, target))

    def _remember(self, path: str, found: tuple[Results | None, Path]) -> None:
        if found[0] is not None and self.keep:
            self._write_kept(Path(path).name, found[0])
        self._seen[path] = found

    def _write_kept(self, name: str, summary: Results) -> None:
        assert self.keep is not None
        self.keep.mkdir(parents=True, exist_ok=True)
        target = self.keep / name
        kept = target.read_text() if target.is_file() else None
        if kept is not None and "made_on" not in summary:
            # Read back from a results file, which records no machine: keep the stamp kept.
            made_on = json.loads(kept).get("made_on")
            if made_on is not None:
                summary = {**summary, "made_on": made_on}
        text = summary_text(summary)
        if kept != text:
            target.write_text(text)

    @staticmethod
    def _read(cfg: dict[str, Any], paths: Iterable[str | Path]) -> tuple[Results, Path] | None:
        for path in paths:
            res = finished_results(path, cfg, REUSE_IGNORES)
            if res is not None:
                log(f"reusing {path}")
                return summarise(res), Path(path)
        return None
