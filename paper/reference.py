"""Generate the method table, the configuration reference and pretrain_vae.py's ranges.

    python -m paper.reference          # rewrite the generated parts of the pages
    python -m paper.reference --check  # exit 1 if a committed page is stale

The pages keep their prose; only what stands between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->`` is generated (``methods`` in README.md and docs/methods.md,
``options`` in docs/configuration.md, ``pretrain-options`` in docs/pretraining.md, and
every results table and number of ``PAGES`` from the committed ``docs/results/``: the
``paper.evidence_*`` modules). One registry, ``SOURCES``: each source declares its
``BLOCKS`` (page -> block name -> generator).
``tests/experiments/test_reference.py`` fails when a committed page differs from what this writes.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from paper import (
    evidence_bench,
    evidence_bench_rounds,
    evidence_bench_runs,
    evidence_decision,
    evidence_docs,
    evidence_history,
    evidence_history_baselines,
    evidence_history_tables,
    evidence_history_zero_shot,
    evidence_map,
    evidence_map300,
    evidence_map_fed,
    evidence_methods,
    evidence_pages,
    evidence_privacy,
    evidence_robustness,
    evidence_router,
    evidence_speed,
    evidence_table1,
)
from ripple_flwr.methods.registry import METHODS, all_options
from ripple_flwr.settings import Option, RunSettings

ROOT = Path(__file__).resolve().parents[1]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def method_table() -> str:
    """One row per registered method, in registration order."""
    rows = [
        "| method | family | what it is | server models | exported for onboarding | client rule "
        "| options |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec in METHODS.values():
        options = ", ".join(f"`{o.key}`" for o in spec.options) or "-"
        rows.append(
            f"| `{spec.name}` | {spec.family} | {_cell(spec.summary)} | {spec.models} | "
            f"{spec.exports} | {spec.client_rule} | {options} |"
        )
    return "\n".join(rows)


def _default(opt: Option) -> str:
    if isinstance(opt.default, str):
        return f'`"{opt.default}"`'
    return f"`{str(opt.default).lower() if isinstance(opt.default, bool) else opt.default}`"


def options_table() -> str:
    """Every run-config key: the run's settings, then each method's options."""
    users: dict[str, list[str]] = {}
    for spec in METHODS.values():
        for opt in spec.options:
            users.setdefault(opt.key, []).append(spec.name)
    rows = [
        "| key | in code: `settings.` | type | default | allowed | used by | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for opt in (*RunSettings.fields_as_options(), *all_options()):
        used = ", ".join(users.get(opt.key, ["every run"]))
        rows.append(
            f"| `{opt.key}` | `{RunSettings.attribute_of(opt.key)}` | {opt.type.__name__} | "
            f"{_default(opt)} | "
            f"{_cell(opt.range_text()) or '-'} | {used} | {_cell(opt.doc)} |"
        )
    return "\n".join(rows)


def settings_groups() -> str:
    """The groups of :class:`RunSettings`, each with its keys (as the code declares them)."""
    from dataclasses import fields

    from ripple_flwr.settings import GROUPS

    lines = ["- **method** (`settings.method`): `method`, a registered method."]
    for name, cls in GROUPS.items():
        keys = ", ".join(f"`{f.name.replace('_', '-')}`" for f in fields(cls))
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        lines.append(f"- **{name}** (`settings.{name}`, `{cls.__name__}`): {doc} {keys}.")
    lines.append(
        "- **options** (`settings.option(key)`): each method's own keys, declared by its "
        "registry entry (the table's last rows)."
    )
    return "\n".join(lines)


def pretrain_options_table() -> str:
    """Every numeric flag of pretrain_vae.py: default, range and why (its ``BOUNDS``)."""
    from ripple_flwr.cli.pretrain import build_parser
    from ripple_flwr.cli.pretrain_bounds import bounds_table

    return bounds_table(build_parser())


# Every generated block, in one registry: each source declares ``BLOCKS = {page: {block
# name: generator}}``: this module the blocks read from the code, the evidence modules those
# read from the committed results (docs/results/), never typed by hand. A block name has one
# generator across every page and source.
BLOCKS = {
    "README.md": {"methods": method_table},
    "docs/methods.md": {"methods": method_table},
    "docs/configuration.md": {"settings-groups": settings_groups, "options": options_table},
    "docs/pretraining.md": {"pretrain-options": pretrain_options_table},
}
SOURCES: tuple[ModuleType, ...] = (
    sys.modules[__name__],
    evidence_table1,
    evidence_pages,
    evidence_speed,
    evidence_map,
    evidence_bench,
    evidence_bench_rounds,
    evidence_bench_runs,
    evidence_history,
    evidence_history_baselines,
    evidence_history_tables,
    evidence_history_zero_shot,
    evidence_map300,
    evidence_map_fed,
    evidence_decision,
    evidence_router,
    evidence_robustness,
    evidence_privacy,
    evidence_docs,
    evidence_methods,
)


def _registry(
    sources: tuple[ModuleType, ...],
) -> tuple[dict[str, Callable[[], str]], dict[str, tuple[str, ...]]]:
    """(every block's generator, every page's block names) from the sources' ``BLOCKS``."""
    generators: dict[str, Callable[[], str]] = {}
    pages: dict[str, tuple[str, ...]] = {}
    for source in sources:
        for page, blocks in source.BLOCKS.items():
            for block, generator in blocks.items():
                if generators.setdefault(block, generator) is not generator:
                    raise ValueError(
                        f"block {block!r} of {source.__name__} is already generated elsewhere"
                    )
                if block not in pages.get(page, ()):
                    pages[page] = (*pages.get(page, ()), block)
    return generators, pages


GENERATORS, PAGES = _registry(SOURCES)


def render(text: str, names: tuple[str, ...]) -> str:
    """``text`` with every named generated block rewritten; a missing marker is an error.

    A block whose begin marker ends its line is rewritten as lines; one whose begin marker
    is followed by text on the same line is an inline block (a phrase inside a sentence).
    """
    for name in names:
        pattern = re.compile(rf"(<!-- {name}:begin -->)(\n?).*?(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"no <!-- {name}:begin --> ... <!-- {name}:end --> markers")
        body = GENERATORS[name]()
        text = pattern.sub(
            lambda m, body=body: m.group(1) + m.group(2) + body + m.group(2) + m.group(3), text
        )
    return text


def stale_pages(root: Path = ROOT) -> list[str]:
    """The pages whose generated parts differ from what the code declares."""
    return [
        page
        for page, names in PAGES.items()
        if render((root / page).read_text(), names) != (root / page).read_text()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paper.reference",
        description="Rewrite the generated blocks of README.md and docs/ from docs/results/ "
        "(every block's generator is a paper.evidence_* module); --check only reports.",
    )
    parser.add_argument("--check", action="store_true", help="only report stale pages")
    args = parser.parse_args(argv)
    stale = stale_pages()
    if args.check:
        for page in stale:
            print(f"{page} is stale: run python -m paper.reference", file=sys.stderr)
        return 1 if stale else 0
    for page in stale:
        path = ROOT / page
        path.write_text(render(path.read_text(), PAGES[page]))
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
