"""docs/benchmarks.md's generated blocks: one machine's speed, from the committed results.

Every number here is read from a file under ``docs/results/`` (see
:mod:`ripple_flwr.cli.evidence`); a comparison (faster, within a target) is computed from
those numbers. The commits in ``RECORDED`` are those the page names for files that do
not record their own (``git log -- docs/results/<file>`` gives the commit that added each).
Own data, the ten-thousand-client runs, the long runs and docs/baselines.md are
:mod:`ripple_flwr.cli.evidence_bench_runs`.
"""

from __future__ import annotations

import json
from statistics import median
from typing import Any

from ripple_flwr.cli import evidence as ev

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


def _best(values: list[float], lower: bool) -> list[bool]:
    """Which of ``values`` is the best one (lowest time or highest rate)."""
    top = min(values) if lower else max(values)
    return [v == top for v in values]


def _bold(text: str, best: bool) -> str:
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
    marked = [_bold(c, best[i][col]) for i, c in enumerate(cells)]
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
    best = [_best([cpu[k], gpu[k]], lower) for k, lower in keys]
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
    fast = _best([c["pretrain_seconds"], g["pretrain_seconds"]], lower=True)
    wall, gpu_s = f"{c['wall_seconds']:.0f} s", f"{g['pretrain_seconds']:.1f} s"
    cpu_job = f"{_bold(wall, fast[0])} wall (`pretrain_seconds` {c['pretrain_seconds']:.0f})"
    gpu_job = f"{_bold(gpu_s, fast[1])} (`pretrain_seconds`; no wall time kept)"
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


def federation() -> str:
    """Bytes per round of every method and the server's work against FedAvg's."""
    d = one("federation.json")
    mb = 1e6
    vs = d["bytes_per_round_vs_fedavg"]
    others = ", ".join(
        f"{ev.label(m)} {r:.3f}" for m, r in vs.items() if m != "scaffold" and r == 1.0
    )
    server = d["server_seconds_ratio_vs_fedavg"]
    target = "misses" if server > 1.5 else "meets"
    return "\n".join(
        [
            f"`benchmarks/federation.py` (grid: {d['grid']}; {d['rounds']} rounds, "
            f"K = {d['num_components']}, {d['clients_per_round']} clients per round, "
            f"{model_name(d['model'])}, default `--methods`; {link('federation.json')}: one of "
            "three quiet runs at `94cd74c` on a 2-core AMD EPYC, the other two not kept):",
            "",
            f"- bytes per round: Ripple {d['bytes_per_round_ratio_vs_fedavg']:.3f} against "
            f"FedAvg ({d['fedavg_bytes_per_round'] / mb:.1f} MB); the embedding is "
            f"{d['embedding_bytes_per_client']:,} B per client, once. SCAFFOLD "
            f"{vs['scaffold']:.3f} ({d['bytes_per_round']['scaffold'] / mb:.1f} MB against "
            f"{d['bytes_per_round']['fedavg'] / mb:.1f} MB per round: the control variate goes "
            f"both ways beside the model), {others}. These do not depend on the machine.",
            f"- server-side work per round: Ripple **"
            f"{1000 * d['ripple_server_seconds_per_round']:.1f} ms vs FedAvg's "
            f"{1000 * d['fedavg_server_seconds_per_round']:.1f} ms (ratio {server:.2f})**, "
            f"which {target} the issue's 1.5; whole round {d['round_wall_ratio_vs_fedavg']:.3f} "
            f"({d['ripple_round_wall_seconds']:.2f} s vs {d['fedavg_round_wall_seconds']:.2f} s); "
            f"IFCA at K = {d['ifca_num_components']} {d['ifca_round_wall_ratio_vs_fedavg']:.2f} x "
            f"FedAvg's round ({d['ifca_round_wall_seconds']:.2f} s).",
        ]
    )


IFCA_ROWS = (
    ("loop_ms", "one after another, the CNN's eval forward (what the client runs)"),
    ("plain_order_loop_ms", "one after another, the layers in their written order (before)"),
    ("vmap_ms", "`torch.func.functional_call` vmapped over stacked weights"),
    ("grouped_ms", "one grouped convolution over all four"),
    ("train_epoch_ms", "one epoch of training (for scale)"),
)


def ifca() -> str:
    """IFCA's K candidate scores four ways, against one epoch; the fastest way bold."""
    name = "ifca_eval.json"
    d = one(name)
    fastest = min((k for k, _ in IFCA_ROWS[:-1]), key=lambda k: d[k])
    threads = "one thread" if d["threads"] == 1 else f"{d['threads']} threads"
    return "\n".join(
        [
            f"`benchmarks/ifca_eval.py`, {d['images']} images, the paper's CNN, {threads}, "
            f"minimum of 30 interleaved repetitions, loaded 2-core CPU, {at(name)} "
            f"({link(name)}):",
            "",
            f"| K = {d['k']} candidates | ms |",
            "|---|---|",
            *(f"| {text} | {_bold(f'{d[key]:.0f}', key == fastest)} |" for key, text in IFCA_ROWS),
        ]
    )


def ifca_same() -> str:
    """Inline: whether the four ways choose alike, and the eval forward against the written one."""
    d = one("ifca_eval.json")
    same = "All four ways choose" if d["same_choice"] else "The four ways do not all choose"
    faster = "faster" if d["loop_ms"] < d["plain_order_loop_ms"] else "not faster"
    return (
        f"{same} the same model (losses within {d['max_loss_difference']:.0e}). The eval "
        f"forward is {faster} than the layers in their written order "
        f"({d['plain_order_loop_ms'] / d['loop_ms']:.2f} x)"
    )


def ifca_batched() -> str:
    """Inline: whether one batched call (vmap, grouped conv) beat the loop."""
    d = one("ifca_eval.json")
    return "was slower" if min(d["vmap_ms"], d["grouped_ms"]) > d["loop_ms"] else "was faster"


def ifca_floor() -> str:
    """Inline: what IFCA's client round and whole round cost against training, measured."""
    e, f = one("ifca_eval.json"), one("federation.json")
    return (
        f"{e['round_cost_ratio']:.2f} x ({link('ifca_eval.json')}; inference needs no "
        f"autograd and runs channels-last), and the whole round at "
        f"{f['ifca_round_wall_ratio_vs_fedavg']:.2f} x FedAvg's ({link('federation.json')})"
    )


def onboarding() -> str:
    """Inline: one Ripple client's onboarding time, as its file holds it."""
    d = one("zero_shot.json")
    return (
        f"{d['onboard_ms_per_client']:.1f} ms with another benchmark on the other core "
        f"({link('zero_shot.json')}; a quiet run's figure was not kept)"
    )


def sim_overhead() -> str:
    """Flower's simulation against the plain processes: the ratio, its target, its parts."""
    name = "sim_overhead.json"
    d = one(name)
    ratio = d["sim_round_overhead_ratio"]
    target = "within" if ratio <= 1.3 else "above"
    return (
        f"Quiet, at `{d['commit']}`, {d['rounds']} rounds ({d['cpus']} CPUs, {d['workers']} "
        f"workers, `client-threads = {d['client_threads']}`, `OMP_WAIT_POLICY="
        f"{d['omp_wait_policy']}`, SuperLink state in {d['superlink_state']}): "
        f"**`sim_round_overhead_ratio` {ratio:.2f}** (median simulated round "
        f"{d['sim_round_s']:.2f} s against {d['plain_round_s']:.2f} s for the plain "
        f"processes; the server's share {1000 * d['sim_server_s']:.0f} ms; {link(name)}), "
        f"{target} the 1.3 target. Runs on a loaded machine (another session's "
        "10,000-client benchmark on the cores, `0ba7e7c`) moved the ratio and the plain "
        "floor itself far more than that, and were not kept: such runs cannot separate "
        "Flower's cost from the neighbour's. The profile: the app's own per-message work in "
        "a ClientApp is small (parsing the run config, reading the node's data, decoding the "
        "model and encoding the reply; the model, data and embedder are built once per "
        f"process); the rest of the {100 * (ratio - 1):.0f}% is Flower's message path "
        "(ServerApp -> SuperLink -> Ray actor and back, the model each way per client)."
    )


def _thread_runs() -> dict[tuple[int, int, str], list[float]]:
    runs: dict[tuple[int, int, str], list[float]] = {}
    for r in one("threads.json")["runs"]:
        runs.setdefault((r["workers"], r["threads"], r["policy"]), []).append(r["median_round_s"])
    return dict(sorted(runs.items(), key=lambda kv: min(kv[1])))


def _span(values: list[float], spec: str = ".2f") -> str:
    lo, hi = min(values), max(values)
    return format(lo, spec) if lo == hi else f"{lo:{spec}}-{hi:{spec}}"


def threads() -> str:
    """Processes x torch threads x OpenMP wait policy: the table and what it shows."""
    d, runs = one("threads.json"), _thread_runs()
    rows = []
    for (w, t, policy), values in runs.items():
        default = " (the default)" if (w, t, policy) == (2, 1, "PASSIVE") else ""
        count = f" ({len(values)} runs)" if len(values) > 1 else ""
        rows.append(f"| {w} x {t}{default} | {policy} | {_span(values)} s{count} |")
    one_two = runs[(2, 1, "PASSIVE")], runs[(2, 2, "PASSIVE")]
    single, active = runs[(1, 2, "PASSIVE")], runs[(1, 2, "ACTIVE")]
    overlap = min(one_two[1]) <= max(one_two[0]) and min(one_two[0]) <= max(one_two[1])
    second = (
        "gains nothing one can read over the noise (the ranges overlap)"
        if overlap
        else f"changes the round from {_span(one_two[0])} s to {_span(one_two[1])} s"
    )
    return "\n".join(
        [
            f"On the {d['machine']}, at `{d['commit']}` ({link('threads.json')}):",
            "",
            "| processes x torch threads | `OMP_WAIT_POLICY` | median round |",
            "|---|---|---|",
            *rows,
            "",
            f"Two clients side by side beat one client on two threads by "
            f"{median(single) / median(one_two[0]):.1f}x (the runs' medians; a batch of 32 "
            "small images leaves OpenMP's threads waiting on each other); a second thread "
            f"per process {second} and oversubscribes the cores; spinning OpenMP threads "
            f"(ACTIVE, the OpenMP default) cost {min(active) / max(single):.1f}-"
            f"{max(active) / min(single):.1f}x on this virtual machine, where a spinning "
            "thread takes the core its partner needs.",
        ]
    )


def pfllib() -> str:
    """ripple-flwr's simulation beside PFLlib on one federation; the faster bold."""
    name = "peer_pfllib.json"
    d = one(name)
    ratio = d["peer_train_round_ratio_vs_pfllib"]
    cols = (("train_round_s", True), ("eval_s", True), ("final_accuracy", False))
    best = {k: _best([d[f"ripple_flwr_{k}"], d[f"pfllib_{k}"]], lower) for k, lower in cols}

    def row(who: str, label: str, i: int) -> str:
        t, e, a = (d[f"{who}_{k}"] for k, _ in cols)
        return (
            f"| {label} | {_bold(f'{t:.2f} s', best['train_round_s'][i])} | "
            f"{_bold(f'{e:.2f} s', best['eval_s'][i])} | {a:.3f} |"
        )

    return "\n".join(
        [
            f"Quiet, {d['rounds']} rounds, {d['cpus']} CPUs, at `{d['commit']}` ({link(name)}; "
            f"PFLlib's commit as the file records it: {d['pfllib_commit']}):",
            "",
            "| | training round (median) | one evaluation of every client | final accuracy |",
            "|---|---|---|---|",
            row("ripple_flwr", "ripple-flwr, simulation", 0),
            row("pfllib", "PFLlib", 1),
            "",
            f"**{ratio:.2f}x PFLlib's training round** (target 0.8x: "
            f"{'met' if ratio <= 0.8 else 'missed'}). Two earlier 16-round runs of the same "
            "code, with a neighbour's test run on the machine, were not kept.",
        ]
    )


BLOCKS = {
    "docs/benchmarks.md": {
        "bench-machines": machines,
        "bench-embedding": embedding,
        "bench-eager-gpu": eager_gpu,
        "bench-one-client": one_client,
        "bench-pretrain": pretrain,
        "bench-default-run": default_run,
        "bench-federation": federation,
        "bench-onboarding": onboarding,
        "bench-ifca": ifca,
        "bench-ifca-same": ifca_same,
        "bench-ifca-batched": ifca_batched,
        "bench-ifca-floor": ifca_floor,
        "bench-sim-overhead": sim_overhead,
        "bench-threads": threads,
        "bench-pfllib": pfllib,
    },
}
