"""Output paths checked before any work: :func:`check_output_path`.

A command that writes its results at the end should refuse an output it cannot write
(``--out notes.txt/sub``: a file on the way) at the start, in one line naming the option
and the path, not with a ``NotADirectoryError`` traceback after the work.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["OutputPathError", "check_output_path"]


class OutputPathError(ValueError):
    """An output path that cannot be written; the message names the option and the path."""


# The kind of file an option writes, for the example of its refusal.
_EXAMPLE_SUFFIX = {"--md": ".md", "--json": ".json", "--plot": ".png", "--report": ".json"}


def _takes_a_file(folder: Path) -> bool:
    """Whether a file can be made in ``folder`` (root passes ``os.access`` even on /proc):
    an unnamed temporary file, gone when closed."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def check_output_path(path: str | Path, option: str, *, folder: bool = False) -> Path:
    """Refuse an output path that cannot be written, before any work; return it expanded.

    ``path`` is a file to write (``folder``: a folder to write files into), which need not
    exist yet, nor its parents. Refused in one line naming ``option`` and the path: a
    file where a folder is needed (``--out notes.txt/sub``: ``notes.txt`` is a file), a
    folder where a file is needed, or a nearest existing folder that is not writable.
    Nothing is created.

    Raises
    ------
    OutputPathError
        ``<option>: cannot write to <path> (<why>); <fix>``.
    """
    p = Path(path).expanduser()
    if p.is_dir() and not folder:
        example = p / ("out" + _EXAMPLE_SUFFIX.get(option, ".pt"))
        raise OutputPathError(f"{option} {p} is a folder; name a file (e.g. {example})")
    if p.exists() and not p.is_dir() and folder:
        raise OutputPathError(
            f"{option} {p} is a file; name a folder (or a path that does not exist)"
        )
    start = p if folder else p.parent
    for parent in (start, *start.parents):
        if parent.is_dir():
            if not os.access(parent, os.W_OK | os.X_OK) or not _takes_a_file(parent):
                raise OutputPathError(
                    f"{option}: cannot write to {p} ({parent} is not writable); choose a "
                    "folder you can write to"
                )
            break
        if parent.exists() or parent.is_symlink():  # a file (or a broken link) on the way
            raise OutputPathError(
                f"{option}: cannot write to {p} ({parent} is a file, not a folder); choose "
                "another path"
            )
    return p
