"""One merge rule for the runs of the tables, the map and sweeps, and the checks made before any.

A run's config is put together from what the command defines (a row's method
and sampler, a cell's shift, the keys its own flags set: rounds, seeds, alpha,
...) and the user's ``--set KEY=VALUE``. ``--set`` only adds keys: a key the
command defines is refused in one line that names the key, who sets it and the
flag to use instead, so ``--set method=local`` can never run local-only under
the label ``fedavg``, and a table's title always says what its runs used.
Protocol defaults (the map's 100 clients, say) are not defining: ``--set``
changes them, and the title and JSON record the value the runs used.

:func:`check_runs` then checks every run a command is about to launch (the
run config as the ServerApp parses it, the checkpoint file, the dataset's
files) and raises :class:`PlanError` with one line per distinct problem, before
Ray or any training starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "Defined",
    "PlanError",
    "applied",
    "check_runs",
    "checkpoint_problem",
    "compose",
    "defined_by",
    "merge_defined",
    "unapplied_note",
]

# key -> (value, who defines it and how to change it instead)
Defined = dict[str, tuple[Any, str]]

# Keys a command sets for bookkeeping, never part of the parsed run config's meaning here.
NOT_RUN_CONFIG = ("results-path",)


class PlanError(ValueError):
    """What is wrong with a command's runs, found before any of them starts: one line each."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines = list(dict.fromkeys(lines))  # distinct, in order
        super().__init__("; ".join(self.lines))


def defined_by(values: Mapping[str, Any], owner: str) -> Defined:
    """Every key of ``values`` as defined by ``owner`` (e.g. ``"row 'fedavg' (--methods)"``)."""
    return {key: (value, owner) for key, value in values.items()}


def merge_defined(*parts: Defined) -> Defined:
    """The keys several owners define, merged; a key two owners define is refused.

    One rule for every command: no owner ever silently overrides another (a ``seed`` in a
    sweep's ``--grid`` against ``--seeds``, say), so a run is always labelled by what it ran.
    """
    merged: Defined = {}
    refused = []
    for part in parts:
        for key, (value, owner) in part.items():
            if key in merged and merged[key][1] != owner:
                refused.append(
                    f"{key} is set by {merged[key][1]} ({merged[key][0]!r}) and by {owner} "
                    f"({value!r}); set it in one place"
                )
                continue
            merged[key] = (value, owner)
    if refused:
        raise PlanError(refused)
    return merged


def applied(cfg: Mapping[str, Any], keys: Iterable[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``cfg`` without those of ``keys`` its method does not read, and why each was left out.

    The tables, the map and sweeps set a ``--set`` key (``cluster-optimizer``, say) on every
    row; a row whose method does not read it runs without it (a run refuses such a key) and
    the table's title says so (:func:`unapplied_note`).
    """
    from ripple_flwr.app.run_config import unread_keys_of

    unread = unread_keys_of(cfg)
    left_out = {key: unread[key] for key in keys if key in unread}
    return {k: v for k, v in cfg.items() if k not in left_out}, left_out


def unapplied_note(user: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any]]) -> str:
    """One sentence for a table's title: each key the command set and the rows that do not
    read it (so run without it).

    ``user`` maps a key to its value (``None``: a key with several values, a sweep's grid);
    ``configs`` maps a row's name to one of its run configs (after :func:`compose`).
    """
    parts = []
    for key, value in user.items():
        skipped = [row for row, cfg in configs.items() if key not in cfg]
        if skipped:
            label = key if value is None else f"{key}={value}"
            parts.append(
                f"{label} applies only to the rows that read it (not {', '.join(skipped)})"
            )
    return "; ".join(parts)


def compose(
    defined: Mapping[str, tuple[Any, str]],
    user: Mapping[str, Any],
    protocol: Mapping[str, Any] | None = None,
    *,
    shared: Iterable[str] = (),
) -> dict[str, Any]:
    """The run config: ``protocol`` defaults, then ``user`` (``--set``), then ``defined``.

    A ``user`` key that ``defined`` holds is refused (:class:`PlanError`), naming the key,
    its owner and the value it keeps. A ``user`` key the row's method does not read
    (another method's option, say) is left out of that row (:func:`applied`), and so is a
    ``shared`` key the command sets on every row (a table's ``--checkpoint``).
    """
    refused = [
        f"--set {key}={user[key]!r} is refused: {key} is set by {owner} ({value!r}); "
        "--set only adds keys the command does not set"
        for key, (value, owner) in defined.items()
        if key in user
    ]
    if refused:
        raise PlanError(refused)
    cfg = {**(protocol or {}), **user, **{key: value for key, (value, _) in defined.items()}}
    return applied(cfg, [*user, *shared])[0]


def _problem_of(cfg: Mapping[str, Any], loaded: dict[tuple, str | None]) -> str | None:
    """What is wrong with one run's config, or None (checks each dataset and checkpoint once)."""
    from ripple_flwr.app.run_config import parse_run_config
    from ripple_flwr.settings import ConfigError

    try:
        settings = parse_run_config({k: v for k, v in cfg.items() if k not in NOT_RUN_CONFIG})
    except ConfigError as err:
        return str(err)
    if not settings.data.num_partitions and settings.data.client_data != "local":
        return "every run needs its number of clients (num-partitions > 0 / --clients N)"
    data = settings.data
    key = ("data", data.base_dataset, data.data_root, data.image_size)
    if key not in loaded and data.client_data != "local":
        loaded[key] = _dataset_problem(data.base_dataset, data.data_root, data.image_size)
    if loaded.get(key):
        return loaded[key]
    checkpoint = settings.pretraining.checkpoint
    if checkpoint:
        ckey = ("checkpoint", checkpoint)
        if ckey not in loaded:
            loaded[ckey] = checkpoint_problem(checkpoint)
        return loaded[ckey]
    return None


def _dataset_problem(name: str, root: str, image_size: int) -> str | None:
    from ripple_flwr.data.registry import load_dataset

    try:
        load_dataset(name, root or None, image_size=image_size)
    except Exception as err:  # every loader's own error names the files and the fix
        return f"dataset {name!r}: {' '.join(str(err).split())}"
    return None


def checkpoint_problem(path: str) -> str | None:
    """What is wrong with a router checkpoint file (missing, corrupt), or None."""
    from ripple_flwr.router.checkpoint import load_checkpoint

    try:
        load_checkpoint(path)
    except (FileNotFoundError, ValueError) as err:
        return f"checkpoint: {' '.join(str(err).split())}"
    return None


def _named_flag(problem: str, flag_of: Mapping[str, str]) -> str:
    """A problem that starts with a run-config key a flag sets also names that flag."""
    key = next((k for k in sorted(flag_of, key=len, reverse=True) if problem.startswith(k)), None)
    if key is None or problem[len(key) : len(key) + 1] not in ("", " ", "=", ":"):
        return problem
    return f"{problem} (set by {flag_of[key]})"


def check_runs(
    configs: Iterable[Mapping[str, Any]], flag_of: Mapping[str, str] | None = None
) -> None:
    """Check every run before any starts; :class:`PlanError` lists each distinct problem once.

    ``flag_of`` (run-config key -> the command's flag) makes a problem with a key that a
    flag sets name the flag the user typed too.
    """
    loaded: dict[tuple, str | None] = {}
    problems = [p for cfg in configs if (p := _problem_of(cfg, loaded)) is not None]
    if problems:
        raise PlanError(_named_flag(p, flag_of or {}) for p in problems)
