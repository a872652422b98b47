"""The speed blocks of docs/sweeps.md, from the committed benchmark line (never typed by hand)."""

from __future__ import annotations

from statistics import mean

from paper import evidence as ev

SWEEP = "sweep_throughput.json"


def sweep_speed() -> str:
    """docs/sweeps.md: serial against --jobs N on the same 8 runs, and Table 1's estimate."""
    if not (ev.RESULTS / SWEEP).is_file():
        return "Not measured yet: no `docs/results/sweep_throughput.json`."
    d = ev.load(SWEEP)
    m, t1 = d["machine"], d["table1_at_jobs"]
    gib = 2**30
    first_task = sorted(d["to_first_round_parallel"])[-d["jobs"] :]
    return "\n".join(
        [
            f"On {m['cpus']} CPU cores (`{m['processor']}`, commit `{m['commit']}`; "
            f"[docs/results/{SWEEP}](results/{SWEEP})), {d['runs']} runs:",
            "",
            "| | serial (`--jobs 1`) | `--jobs " + str(d["jobs"]) + "` (local Ray) |",
            "|---|---|---|",
            f"| sweep wall (s) | {d['serial_wall_seconds']:.0f} | "
            f"{d['parallel_wall_seconds']:.0f} |",
            f"| mean run (s) | {mean(d['run_seconds_serial']):.1f} | "
            f"{mean(d['run_seconds_parallel']):.1f} |",
            f"| task start to round 1 (s): mean / slowest | "
            f"{mean(d['to_first_round_serial']):.2f} / {max(d['to_first_round_serial']):.2f} | "
            f"{mean(d['to_first_round_parallel']):.2f} / {max(first_task):.2f} |",
            f"| peak memory, all processes (GiB) | {d['peak_rss_bytes_serial'] / gib:.1f} | "
            f"{d['peak_rss_bytes_parallel'] / gib:.1f} |",
            "",
            f"`sweep_throughput_ratio` (serial wall / parallel wall): "
            f"**{d['sweep_throughput_ratio']:.2f}**. "
            + (
                f"GPUs: `--gpus-per-run {d['gpus_per_run']}`."
                if d["gpus_per_run"]
                else "No GPU was lent to this measurement: the GPU sweep is not measured."
            ),
            f"Table 1 ({t1['runs_with_a_wall']} kept runs, {t1['serial_hours']:.1f} h one "
            f"after another by their kept wall times, which mix machines and loads) at "
            f"`--jobs {t1['jobs']}`, each run {t1['per_run_slowdown_when_parallel']:.2f} "
            f"times slower beside another as measured here: about "
            f"{t1['estimated_hours']:.1f} h.",
        ]
    )


INSTALL = "install_cpu.json"


def install_size() -> str:
    """README: the size and time of ``pip install -e .`` in a fresh venv on a CPU-only machine."""
    d = ev.load(INSTALL)
    gib = 2**30
    return (
        f"`{d['command']}` in a fresh venv gave a {d['venv_bytes'] / gib:.1f} GiB venv "
        f"(`du`), {d['cuda_torch_bytes'] / gib:.1f} GiB of it torch, `nvidia-*` and `triton`, "
        f"in {d['seconds'] / 60:.1f} min (`{d['commit']}`, {d['machine']['cpus']} CPU cores, "
        f"no GPU, wheels from this machine's local mirror; from PyPI add their download; "
        f"[docs/results/{INSTALL}](docs/results/{INSTALL}))."
    )


BLOCKS = {
    "README.md": {"install-size": install_size},
    "docs/sweeps.md": {"sweep-speed": sweep_speed},
}
