"""docs/benchmarks.md's generated blocks: one machine's speed, from the committed results.

Every number here is read from a file under ``docs/results/`` (see
:mod:`paper.evidence`); a comparison (faster, within a target) is computed from
those numbers. The commits in ``RECORDED`` are those the page names for files that do
not record their own (``git log -- docs/results/<file>`` gives the commit that added each).
The rounds' costs (bytes, IFCA, the simulation's overhead, threads, PFLlib) are
:mod:`paper.evidence_bench_rounds`; own data, the ten-thousand-client runs, the
long runs and docs/baselines.md are :mod:`paper.evidence_bench_runs`.
"""

from __future__ import annotations

import json
from typing import Any

from paper import evidence as ev

# The commit each file's figures were measured at, as the page names it (the file has none).
RECORDED = {
    "embedding_cpu.json": "ffc72ff",
    "embedding_h200.json": "b454ec6",
    "one_client_cpu.json": "79755c1",
    "one_client_h200.json": "b454ec6",
    "pretrain_cpu.json": "ffc72ff",
    "pretrain_h200.json": "b454ec6",
    "ifca_eval.json": "ead803e",
    "local_data.json": "b6b2b28",
    "embedding_dp.json": "9cc2a2b",
}


def records(name: str) -> list[dict[str, Any]]:
    """Every record of ``docs/results/<name>``: one JSON document or one per line."""
    text = (ev.RESULTS / name).read_text()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def one(name: str) -> dict[str, Any]:
    """The last record of ``docs/results/<name>``."""
    return records(name)[-1]


def link(name: str) -> str:
    return f"[results/{name}](results/{name})"


def at(name: str) -> str:
    """`` `commit` `` of a file: its own ``commit`` field, else the page's."""
    return f"`{one(name).get('commit') or RECORDED[name]}`"


def model_name(model: str) -> str:
    return "the paper's CNN" if model == "cnn" else f"`{model}`"


def best_marks(values: list[float], lower: bool) -> list[bool]:
    """Which of ``values`` is the best one (lowest time or highest rate)."""
    top = min(values) if lower else max(values)
    return [v == top for v in values]


def bold(text: str, best: bool) -> str:
    return f"**{text}**" if best else text


def machines() -> str:
    """The two machines of the page, as their embedding files record them."""
    cpu, gpu = one("embedding_cpu.json"), one("embedding_h200.json")
    return "\n".join(
        [
            f"- **{cpu['cpus']}-core CPU**: the development machine (`cpus: {cpu['cpus']}`, "
            f"torch {cpu['torch']} in {link('embedding_cpu.json')}). Other tenants of the "
            'host can slow a run; "quiet" means nothing else of ours was running, "loaded" '
            "that other benchmarks were.",
            f"- **H200**: one {gpu['device_name']} with {gpu['cpus']} CPU cores (torch "
            f"{gpu['torch']} in {link('embedding_h200.json')}).",
        ]
    )


def _embedding_row(name: str, label: str, best: list[list[bool]], col: int) -> str:
    d = one(name)
    cells = [
        f"{d['ms_per_client_1x28x28']:.2f} ms",
        f"{d['ms_per_client_3x32x32']:.2f} ms",
        f"{d['synthetic_clients_per_s']:,.0f}/s",
        f"{d['synthetic_clients_per_s_3x32x32']:,.0f}/s",
        f"{d['embed_many_clients_per_s']:,.0f} clients/s",
    ]
    marked = [bold(c, best[i][col]) for i, c in enumerate(cells)]
    return f"| {label} | " + " | ".join(marked) + " |"


def embedding() -> str:
    """The embedding table (the faster machine bold per column) and the CPU/CUDA parity."""
    cpu, gpu = one("embedding_cpu.json"), one("embedding_h200.json")
    keys = (
        ("ms_per_client_1x28x28", True),
        ("ms_per_client_3x32x32", True),
        ("synthetic_clients_per_s", False),
        ("synthetic_clients_per_s_3x32x32", False),
        ("embed_many_clients_per_s", False),
    )
    best = [best_marks([cpu[k], gpu[k]], lower) for k, lower in keys]
    parity = max(gpu[k]["max"] for k in ("parity_rel_1x28x28", "parity_rel_3x32x32"))
    return "\n".join(
        [
            "| machine, commit | one client 1x28x28 | one client 3x32x32 | bank 1x28x28 "
            "| bank 3x32x32 | `embed_many` |",
            "|---|---|---|---|---|---|",
            _embedding_row(
                "embedding_cpu.json",
                f"{cpu['cpus']}-core CPU, {cpu['torch_threads']} torch threads, quiet, "
                f"{at('embedding_cpu.json')} ({link('embedding_cpu.json')})",
                best,
                0,
            ),
            _embedding_row(
                "embedding_h200.json",
                f"{gpu['device_name']}, `--device cuda`, {at('embedding_h200.json')} "
                f"({link('embedding_h200.json')}; before the scattering was regrouped by "
                "resolution in `f121fea`)",
                best,
                1,
            ),
            "",
            f"CPU/CUDA embeddings agree within {parity:.1e} (relative max over both sizes; "
            f"the {gpu['device_name']} run at {at('embedding_h200.json')}).",
        ]
    )


def eager_gpu() -> str:
    """Inline: the eager time of a first client of each size on the GPU."""
    d = one("one_client_h200.json")
    eager = [d[s]["eager_ms"] for s in ("1x28x28", "3x32x32")]
    return (
        f"{min(eager):.1f}-{max(eager):.1f} ms on the {d['device']} at "
        f"{at('one_client_h200.json')}, {link('one_client_h200.json')}"
    )


def _pair(d: dict[str, Any], *path: str, spec: str = ".2f") -> str:
    """``a / b``: one value for 1x28x28, then for 3x32x32."""
    out = []
    for size in ("1x28x28", "3x32x32"):
        value = d[size]
        for key in path:
            value = value[key]
        out.append(format(value, spec))
    return " / ".join(out)


def one_client() -> str:
    """The stage-by-stage bullets of ``one_client.py`` on the CPU and the GPU."""
    c, g = one("one_client_cpu.json"), one("one_client_h200.json")
    st, gs = "eager_stages_ms", "graph_stages_ms"
    return "\n".join(
        [
            f"- **{c['cpus']}-core CPU, {at('one_client_cpu.json')}** "
            f"({link('one_client_cpu.json')}, {c['torch_threads']} torch threads):",
            f"  one client {_pair(c, 'embed_ms')}, of which check and order "
            f"{_pair(c, st, 'rows')}, centring and Gram {_pair(c, st, 'centre_gram')}, "
            f"top-20 eigenpairs {_pair(c, st, 'top_eigenpairs')}, rest of the prototype "
            f"{_pair(c, st, 'prototype_rest')}, scattering {_pair(c, st, 'scatter')}.",
            f"- **{g['device']}, {g['cpus']} CPU cores, {at('one_client_h200.json')}** "
            f"({link('one_client_h200.json')}):",
            f"  replay {_pair(g, 'embed_ms')} ms (first stage with the copy in "
            f"{_pair(g, gs, 'copy_in_and_graph_a')}, host eigen-solve "
            f"{_pair(g, gs, 'host_eigen_solve')}, second stage with the copy out "
            f"{_pair(g, gs, 'graph_b_and_copy_out')}), eager {_pair(g, 'eager_ms', spec='.1f')}"
            f" ms, capture {_pair(g, 'graph_build_ms', spec='.0f')} ms once per client size, "
            f"replay vs eager {_pair(g, 'graph_vs_eager_rel', spec='.0e')} (relative max).",
        ]
    )


def pretrain() -> str:
    """The full pre-training job on the CPU and the GPU; the faster job bold."""
    c, g = one("pretrain_cpu.json"), one("pretrain_h200.json")
    fast = best_marks([c["pretrain_seconds"], g["pretrain_seconds"]], lower=True)
    wall, gpu_s = f"{c['wall_seconds']:.0f} s", f"{g['pretrain_seconds']:.1f} s"
    cpu_job = f"{bold(wall, fast[0])} wall (`pretrain_seconds` {c['pretrain_seconds']:.0f})"
    gpu_job = f"{bold(gpu_s, fast[1])} (`pretrain_seconds`; no wall time kept)"
    return "\n".join(
        [
            "| machine, commit | job | bank | training | peak memory |",
            "|---|---|---|---|---|",
            f"| 2-core CPU, quiet, {at('pretrain_cpu.json')} ({link('pretrain_cpu.json')}) "
            f"| {cpu_job} | {c['bank_seconds']:.0f} s | "
            f"{c['train_seconds']:.0f} s ({c['train_steps']:,} steps) | "
            f"{c['peak_rss_mb'] / 1000:.2f} GB |",
            f"| H200, `--device {g['device']}`, {at('pretrain_h200.json')} "
            f"({link('pretrain_h200.json')}) | {gpu_job} | "
            f"{g['bank_seconds']:.1f} s ({g['bank_clients']:,} synthetic clients) | "
            f"{g['train_seconds']:.1f} s ({g['train_steps']:,} steps at batch "
            f"{g['train_batch_size']}) | {g['peak_rss_mb'] / 1000:.2f} GB |",
        ]
    )


def default_run() -> str:
    """The default ``flwr run .``: its settings, wall time and pre-training time."""
    name = "default_run_mnist5k.json"
    d = one(name)
    s, m = d["results"]["settings"], d["made_on"]
    return (
        f"`flwr run .` with the defaults ({s['dataset']}, {s['num-partitions']} clients, "
        f"Dir({s['alpha']}), K={s['num-components']}, {s['num-server-rounds']} rounds, "
        f"{model_name(s['model'])}), {m['cpus']} CPU cores ({m['load']}): "
        f"{d['flwr_run_wall_seconds']:.0f} s, of which "
        f"{d['results']['timings']['pretrain_or_load']:.0f} s pre-training its router "
        f"({s['pretrain-bank-size']:,} synthetic clients, {s['pretrain-steps']:,} steps; cached "
        f"for the next run), at `{m['commit']}` ({link(name)}). The same command with the "
        "router cached, and the run's memory, were measured before but not kept in "
        "`docs/results/`, so they are not quoted."
    )


def floor_table(rows: list[dict[str, Any]], categories: dict[str, str]) -> str:
    """A map run's time by kind of work, its compute floor and wall / floor, one column a row."""
    names = [r["row"] for r in rows]
    lines = [
        "| where the time goes | " + " | ".join(f"{n} (s)" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for key, what in categories.items():
        cells = [f"{r['breakdown_seconds'][key]:.1f}" for r in rows]
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    lines.append("| **run wall** | " + " | ".join(f"**{r['wall_seconds']:.1f}**" for r in rows))
    lines[-1] += " |"
    lines.append(
        "| floor: training + averaging | "
        + " | ".join(
            f"{r['floor']['train_seconds'] + r['floor']['average_seconds']:.1f}" for r in rows
        )
        + " |"
    )
    lines.append(
        "| floor: evaluations | "
        + " | ".join(f"{r['floor']['eval_seconds']:.1f}" for r in rows)
        + " |"
    )
    lines.append(
        "| **floor** | " + " | ".join(f"**{r['floor']['seconds']:.1f}**" for r in rows) + " |"
    )
    lines.append(
        "| **wall / floor** | " + " | ".join(f"**{r['wall_over_floor']:.2f}**" for r in rows) + " |"
    )
    return "\n".join(lines)


def map_floor() -> str:
    """Where one map run's time goes, against the same client work in a plain torch loop."""
    name = "map_run_floor.json"
    d = one(name)
    loads = "; ".join(
        f"{r['row']}: load {'/'.join(f'{x:.1f}' for x in r['load_before'])} before"
        for r in d["rows"]
    )
    return (
        f"One map run of the `{d['cell']}` cell (seed {d['seed']}, {d['rounds']} rounds, one "
        f"torch thread, {d['machine']['cpus']} CPU cores; {loads}: the 1, 5 and 15 minute "
        "load averages, as the map's own runs shared the cores) against its floor, the same "
        "local trainings and evaluations replayed through the same training functions in "
        f"one process without Flower ({link(name)}):\n\n" + floor_table(d["rows"], d["categories"])
    )


BLOCKS = {
    "docs/benchmarks.md": {
        "bench-map-floor": map_floor,
        "bench-machines": machines,
        "bench-embedding": embedding,
        "bench-eager-gpu": eager_gpu,
        "bench-one-client": one_client,
        "bench-pretrain": pretrain,
        "bench-default-run": default_run,
    },
}
