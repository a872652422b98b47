"""``ripple-status``: how the last run stands, in full, from its ``<results>.status``.

``flwr run`` exits 0 whether or not the run failed, and ``flwr ls`` cuts the status to the
terminal's width; the ServerApp keeps ``<results>.status`` beside the results file
(:func:`ripple_flwr.runs.results.write_status`), also for a run whose config it refused.
This prints it: the state, the stage, the error line, the resume file and the folders.

    ripple-status                 # the newest .status in the output folder
    ripple-status PATH            # a .status file, a results .json, or a folder
    ripple-status --all [FOLDER]  # every .status there, newest first

The output folder is ``$RIPPLE_OUTPUT_DIR``, else ``./outputs``, read in this shell: the
local SuperLink writes where *it* was started (docs/deployment.md, "The local SuperLink"),
so give that folder if it is another. Exit status: 0 completed, 1 failed, 3 running or an
unknown state, 2 no status file found (or unreadable, or a bad option). With ``--all``, that
of the newest run. Imports neither torch nor Flower.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ripple_flwr.cli.common import OneLineParser
from ripple_flwr.runs.outputs import output_root
from ripple_flwr.runs.results import status_path

EXIT_COMPLETED, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_RUNNING_OR_UNKNOWN = 0, 1, 2, 3
EXIT_CODES = {"completed": EXIT_COMPLETED, "failed": EXIT_FAILED}
SUFFIX = ".status"


class StatusNotFound(LookupError):  # noqa: N818 - read as "ripple-status: <message>"
    """No status file where the user pointed (the message says where it looked)."""


def exit_code(status: Mapping[str, Any]) -> int:
    """0 for ``completed``, 1 for ``failed`` (or ``running`` whose server process on this
    host is gone: it will never finish), 3 for ``running`` or anything else."""
    if status.get("status") == "running" and _process_gone(status):
        return EXIT_FAILED
    return EXIT_CODES.get(str(status.get("status")), EXIT_RUNNING_OR_UNKNOWN)


def status_files(folder: Path) -> list[Path]:
    """Every ``*.status`` file under ``folder``, newest (last written) first."""
    found = [p for p in folder.rglob(f"*{SUFFIX}") if p.is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def find_status(target: str | Path | None = None) -> Path:
    """The status file ``target`` means: itself (a ``.status``), the one beside a results
    file, the newest in a folder; by default the newest in the output folder."""
    path = output_root() if target is None else Path(target).expanduser()
    if target is None and not path.is_dir():
        raise StatusNotFound(
            f"no output folder {path} ($RIPPLE_OUTPUT_DIR, else ./outputs): give the folder "
            "(or the .status file) of the server's runs"
        )
    if path.is_dir():
        files = status_files(path)
        if not files:
            raise StatusNotFound(
                f"no *{SUFFIX} file in {path.resolve()}: no run has written there (a run "
                "writes <results>.status in the server's output folder, $RIPPLE_OUTPUT_DIR "
                "or ./outputs of the process that started the SuperLink; give that folder)"
            )
        return files[0].resolve()
    if path.is_symlink() and not path.exists():
        raise StatusNotFound(
            f"{path} is a symbolic link that leads nowhere (a loop, or its target is gone): "
            "give the .status, .json or folder itself"
        )
    if path.suffix not in (SUFFIX, ".json") and not path.exists():
        raise StatusNotFound(f"{path}: no such file or folder (give a .status, .json or folder)")
    if path.is_file() and path.suffix not in (SUFFIX, ".json"):
        raise StatusNotFound(f"{path} is neither a .status file nor a results .json (nor a folder)")
    candidate = path if path.suffix == SUFFIX else status_path(path)
    if not candidate.is_file():
        if path.suffix == ".json" and path.is_file():
            return path.resolve()  # a finished results file says how its run ended (read next)
        raise StatusNotFound(f"{candidate} does not exist (no run wrote a status there)")
    return candidate.resolve()


def status_at(path: Path) -> dict[str, Any]:
    """The status :func:`find_status` found: the ``.status`` file's, or the one a results
    ``.json`` without its ``.status`` records (:func:`results_status`)."""
    if path.suffix != ".json":
        return read_status(path)
    status = results_status(path)
    if status is None:
        raise StatusNotFound(f"{status_path(path)} does not exist (no run wrote a status there)")
    return status


def results_status(path: Path) -> dict[str, Any] | None:
    """The status a results ``.json`` records of its run (a finished run writes one), with
    where it came from; ``None`` if ``path`` is not a readable results file."""
    try:
        results = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(results, dict) or "status" not in results or "settings" not in results:
        return None
    return {
        "status": results["status"],
        "stage": f"done (read from the results file: no {status_path(path).name} beside it)",
        "results": str(path),
    }


def read_status(path: Path) -> dict[str, Any]:
    """The status file's JSON object; :class:`StatusNotFound` if it cannot be read as one."""
    try:
        status = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StatusNotFound(
            f"{path} is damaged ({type(err).__name__}); delete it: the run's next start "
            "rewrites it, and its results file says whether it finished"
        ) from err
    if not isinstance(status, dict) or "status" not in status:
        raise StatusNotFound(f"{path} is not a run's status file (no 'status' field)")
    return status


def _process_gone(status: Mapping[str, Any]) -> bool:
    """A ``running`` status whose server process (on this host) no longer exists."""
    pid = status.get("pid")
    if status.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # someone else's process: it exists
        return False
    return False


def describe(status: Mapping[str, Any], path: Path) -> list[str]:
    """The status as ``name: value`` lines, for a person."""
    state = str(status.get("status", "unknown"))
    if state == "running" and _process_gone(status):
        state += (
            f" (but its server process {status['pid']} is gone: it stopped without writing "
            "how it ended; `flwr ls` and `flwr log RUN_ID --show` say more)"
        )
    lines = [f"status file: {path}", f"state:       {state}"]
    if status.get("stage"):
        lines.append(f"stage:       {status['stage']}")
    if status.get("error"):
        lines.append(f"error:       {status['error']}")
    results = status.get("results")
    if results:
        written = "" if Path(results).is_file() else " (not written)"
        lines.append(f"results:     {results}{written}")
    if status.get("resume_file"):
        lines.append(f"resume file: {status['resume_file']} (resume=auto continues from it)")
    who = " ".join(
        part
        for part in (
            str(status.get("updated") or ""),
            f"on {status['host']}" if status.get("host") else "",
            f"(pid {status['pid']})" if status.get("pid") else "",
        )
        if part
    )
    if who:
        lines.append(f"updated:     {who}")
    folders = status.get("folders")
    if isinstance(folders, Mapping) and folders:
        lines.append("folders:")
        lines.extend(f"  {key}: {value}" for key, value in folders.items())
    return lines


def summary_line(status: Mapping[str, Any], path: Path) -> str:
    """One line per run for ``--all``: state, when, stage, file (and the error, cut)."""
    state = str(status.get("status", "unknown"))
    when = status.get("updated") or time.strftime(
        "%Y-%m-%dT%H:%M:%S%z", time.localtime(path.stat().st_mtime)
    )
    line = f"{state:<9} {when}  {status.get('stage') or '-'}  {path}"
    error = status.get("error")
    if error:
        line += f"\n          {error if len(error) <= 200 else error[:199] + '…'}"
    return line


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog="ripple-status",
        description=(
            "Show how the last Ripple run stands, from its <results>.status (flwr run exits 0 "
            "even when the run failed). Exit status: 0 completed, 1 failed, 3 running or "
            "unknown, 2 no status file found."
        ),
    )
    p.add_argument(
        "path",
        nargs="?",
        help="a .status file, a results .json (its .status beside it) or a folder (its newest "
        ".status); default: the output folder ($RIPPLE_OUTPUT_DIR, else ./outputs)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="list every .status in the folder, newest first (exit status: the newest's)",
    )
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Print the status; the exit status says completed (0), failed (1), running (3)."""
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        if args.all:
            folder = output_root() if args.path is None else Path(args.path).expanduser()
            if not folder.is_dir():
                raise StatusNotFound(
                    f"--all lists the status files of a folder; {folder} is not a folder "
                    "(give its folder, or drop --all)"
                )
            files = status_files(folder)
            if not files:
                find_status(folder)  # raises, saying where it looked
            codes = []
            for f in files:
                try:
                    status = read_status(f)
                except StatusNotFound as err:
                    print(f"{'unreadable':<9} {err}", file=out)
                    codes.append(EXIT_NOT_FOUND)
                    continue
                print(summary_line(status, f), file=out)
                codes.append(exit_code(status))
            return codes[0]
        path = find_status(args.path)
        status = status_at(path)
    except StatusNotFound as err:
        print(f"ripple-status: {err}", file=sys.stderr)
        return EXIT_NOT_FOUND
    print("\n".join(describe(status, path)), file=out)
    return exit_code(status)


if __name__ == "__main__":
    raise SystemExit(main())
