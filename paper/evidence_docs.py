"""Numbers of docs/pretraining.md and docs/design.md, from the committed results.

Every number is read from a file under ``docs/results/``: the pre-training job's report
(``pretrain_cpu.json``, ``pretrain_h200.json``) and the one-client embedding on a GPU
(``one_client_h200.json``). What those pages measured without keeping a file is not quoted.
"""

from __future__ import annotations

from paper.evidence_bench import link, one

SIZES = ("1x28x28", "3x32x32")
# The report's three routing errors, in the table's column order.
COLUMNS = ("heldout", "real_a0.1", "real_a1.0")


def _l1(report: dict, column: str, router: str = "") -> float:
    return report[f"routing_l1_{column}" + (f"_{router}" if router else "")]


def pretrain_table() -> str:
    """Mean L1 routing error of the CPU job's report: the router, its reference, the guess."""
    d = one("pretrain_cpu.json")
    rows = [
        "| router | held-out synthetic | real Dir(0.1) (100 x 200) | real Dir(1.0) (100 x 200) |",
        "|---|---|---|---|",
    ]
    best = {c: min(_l1(d, c), _l1(d, c, "mean_unmixing")) for c in COLUMNS}
    for text, router, bold in (
        ("uniform guess", "uniform", False),
        ("mean unmixing (NNLS reference)", "mean_unmixing", True),
        ("**GMM-VAE** (default router)", "", True),
    ):
        cells = []
        for c in COLUMNS:
            value = _l1(d, c, router)
            cell = f"{value:.3f}"
            cells.append(f"**{cell}**" if bold and value == best[c] else cell)
        rows.append(f"| {text} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + f"\n\n(from {link('pretrain_cpu.json')})"


def pretrain_gpu() -> str:
    """Inline: the GPU job's routing errors, in the table's order."""
    d = one("pretrain_h200.json")
    return " / ".join(f"{_l1(d, c):.3f}" for c in COLUMNS)


def pretrain_time() -> str:
    """Inline: how long the whole job took on each machine."""
    c, g = one("pretrain_cpu.json"), one("pretrain_h200.json")
    return (
        f"{c['wall_seconds']:.0f} s on the 2-core development CPU, "
        f"{g['pretrain_seconds']:.1f} s on an H200"
    )


def _ms(key: str, spec: str) -> str:
    d = one("one_client_h200.json")
    values = sorted(d[s][key] for s in SIZES)
    return f"{format(values[0], spec)}-{format(values[-1], spec)} ms on an H200"


def graph_replay() -> str:
    """Inline: a graph replay of one client, both sizes."""
    return _ms("embed_ms", ".1f")


def graph_capture() -> str:
    """Inline: the capture, paid once per client size."""
    return _ms("graph_build_ms", ".0f")


def graph_parity() -> str:
    """Inline: how close the replay is to the eager path (relative max over both sizes)."""
    d = one("one_client_h200.json")
    return f"{max(d[s]['graph_vs_eager_rel'] for s in SIZES):.0e}".replace("e-0", "e-")


BLOCKS = {
    "docs/pretraining.md": {
        "pretrain-report": pretrain_table,
        "pretrain-gpu-l1": pretrain_gpu,
        "pretrain-time": pretrain_time,
    },
    "docs/design.md": {
        "design-graph-replay": graph_replay,
        "design-graph-capture": graph_capture,
        "design-graph-parity": graph_parity,
    },
}
