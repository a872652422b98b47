"""``ripple-config check``: a ``--run-config`` string checked offline, as the ServerApp would.

    ripple-config check 'method="fedavg" num-server-rounds=3 cluster-optimzer="fedyogi"'

``flwr run`` refuses a key that ``pyproject.toml`` does not declare before the app starts,
with only Flower's ``[code: 15] Invalid run configuration`` (the key is in the local
SuperLink's log). This command parses the same string with Flower's own parser and checks
it with the app's rules: an unknown key gets a "did you mean", a key the method does not
read is named, a value out of range says the range. Exit status 0 when the run config
passes (one line saying what it runs), 2 with one line naming the problem. Paths
(``results-path``, ``checkpoint``, ``resume``, ``tracker-dir``) are judged against this
machine's output folder (``$RIPPLE_OUTPUT_DIR``, else ``./outputs``), as the server judges
them against its own.
"""

from __future__ import annotations

import sys

from ripple_flwr.cli.common import OneLineParser

__all__ = ["build_parser", "check_run_config", "main"]


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="ripple-config", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check a --run-config string offline")
    check.add_argument(
        "run_config",
        nargs="*",
        default=[],
        help="the string given to flwr run --run-config (KEY=VALUE words, TOML values)",
    )
    return p


def check_run_config(text: str) -> str:
    """One line on what the run config runs; :class:`ConfigError` names the first problem."""
    from click import ClickException
    from flwr.common.config import parse_config_args

    from ripple_flwr.app.run_config import parse_run_config
    from ripple_flwr.settings import ConfigError

    try:
        cfg = parse_config_args([text]) if text.strip() else {}
    except (ClickException, ValueError, TypeError) as err:  # not KEY=VALUE TOML words
        why = err.format_message() if isinstance(err, ClickException) else str(err)
        raise ConfigError(
            f"not a --run-config string: {' '.join(why.split())} (a string value needs "
            'quotes: method="fedavg")'
        ) from err
    settings = parse_run_config(cfg)
    # The paths the ServerApp confines to its output folder, judged on this machine as the
    # server would judge them on its own (results-path, checkpoint, resume, tracker-dir).
    from ripple_flwr.runs.outputs import confined_checkpoint, confined_results_path, resume_source
    from ripple_flwr.runs.tracking import tracker_folder

    results = confined_results_path(settings)
    confined_checkpoint(settings)
    resume_source(settings, results)
    tracker_folder(settings)
    set_keys = ", ".join(f"{k}={v!r}" for k, v in cfg.items()) or "every key at its default"
    return f"ok: method={settings.method!r}; {set_keys}"


def main(argv: list[str] | None = None) -> int:
    from ripple_flwr.settings import ConfigError

    args = build_parser().parse_args(argv)
    try:
        print(check_run_config(" ".join(args.run_config)))
    except ConfigError as err:
        print(f"ripple-config: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
