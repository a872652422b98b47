"""Every registered method as named run-config overrides: the rows of the tables and benchmarks.

Read from the method registry, so a newly registered method is benchmarked
without touching this file. Ripple's rows are ``ripple-<strat|unif>-<router>`` and, with
FedYogi per cluster model, ``ripple-<strat|unif>-yogi``; the oracle's ``oracle``
(stratified) and ``oracle-unif``. On the map, a clustered baseline that takes
``cluster-optimizer`` (its spec declares it) also has ``<name>-yogi``: FedYogi per cluster
model, on equal terms with Ripple's ``-yogi`` rows.
"""

from __future__ import annotations

from ripple_flwr.methods.options import CLUSTER_OPTIMIZER
from ripple_flwr.methods.pacfl.spec import PACFL_BUDGET
from ripple_flwr.methods.registry import METHODS
from ripple_flwr.methods.ripple.spec import MIN_LABEL_COUNT
from ripple_flwr.methods.ripple.spec import PRESETS as RIPPLE_PRESETS
from ripple_flwr.settings import ROUTERS, SAMPLINGS

SHORT = {"stratified": "strat", "uniform": "unif"}  # a sampler's tag in a row's name

__all__ = ["ORACLE_OF", "VARIANTS", "benchmark_variants", "map_rows", "table2_rows"]


def _yogi_rows(name: str) -> dict[str, dict]:
    """Beyond the paper: the method per sampler with FedYogi per cluster model (the GMM-VAE
    router), ``<name>-<strat|unif>-yogi``; the same rows in the tables and the map."""
    return {
        f"{name}-{SHORT[s]}-yogi": {"method": name, "sampling": s, "cluster-optimizer": "fedyogi"}
        for s in SAMPLINGS
    }


# The recommended Ripple (issue 62): Ripple's ``preset = "recommended"``, key by key.
RECOMMENDED = dict(RIPPLE_PRESETS["recommended"])


def _baseline_yogi_row(name: str) -> dict[str, dict]:
    """Beyond the papers: a clustered baseline that takes ``cluster-optimizer`` (IFCA, CFL,
    PACFL, FeSEM) with FedYogi per cluster model, ``<name>-yogi`` (none for another method)."""
    spec = METHODS[name]
    if spec.family != "clustered" or CLUSTER_OPTIMIZER not in spec.options:
        return {}
    return {f"{name}-yogi": {"method": name, "cluster-optimizer": "fedyogi"}}


def _recommended_row(name: str) -> dict[str, dict]:
    """``<name>-rec``: the recommended configuration (:data:`RECOMMENDED`)."""
    return {f"{name}-rec": {"method": name, **RECOMMENDED}}


def _min_count_row(name: str) -> dict[str, dict]:
    """``<name>-rec-min10`` (the map only): the recommended configuration with
    ``min-label-count = 10``; the concept cells' clients hold about 20 images a label, at the
    default minimum (docs/concept-shift.md, "Where the minimum count bites")."""
    return {f"{name}-rec-min10": {"method": name, **RECOMMENDED, MIN_LABEL_COUNT.key: 10}}


# A rival as its authors ran it, beside the port's default (issue 62, "rivals on equal
# terms"): method -> (row suffix, {key: value}) of its own options.
OPTION_ROWS: dict[str, tuple[tuple[str, dict], ...]] = {
    # PACFL with the authors' vectors budget for Dirichlet splits (20 spread by class share).
    "pacfl": (("dirichlet", {PACFL_BUDGET.key: "dirichlet"}),),
}


def _option_rows(name: str) -> dict[str, dict]:
    """``<name>-<suffix>``: the method with some of its own options set (:data:`OPTION_ROWS`)."""
    return {f"{name}-{tag}": {"method": name, **keys} for tag, keys in OPTION_ROWS.get(name, ())}


def benchmark_variants() -> dict[str, dict]:
    """Every registered method as run-config overrides; Ripple and the oracle per sampler/router."""
    out: dict[str, dict] = {}
    for name, spec in METHODS.items():
        if spec.needs_router:
            for router in ROUTERS:
                for sampling in SAMPLINGS:
                    key = f"{name}-{SHORT[sampling]}-{router}"
                    out[key] = {"method": name, "sampling": sampling, "router": router}
            out.update(_yogi_rows(name))
            out.update(_recommended_row(name))
        elif spec.routing_weights:
            for sampling in SAMPLINGS:
                key = name if sampling == "stratified" else f"{name}-{SHORT[sampling]}"
                out[key] = {"method": name, "sampling": sampling}
        else:
            out[name] = {"method": name}
    return out


def table2_rows() -> dict[str, dict]:
    """Table 2's rows: every method that lists ``table2`` (Ripple per sampler, and with HDB)."""
    out: dict[str, dict] = {}
    for name, spec in METHODS.items():
        if "table2" not in spec.benchmarks:
            continue
        if spec.needs_router:
            out[f"{name}-strat"] = {"method": name, "sampling": "stratified"}
            out[f"{name}-unif"] = {"method": name, "sampling": "uniform"}
            out[f"{name}-hdb"] = {"method": name, "sampling": "stratified", "refine": "hdb"}
        else:
            out[name] = {"method": name}
    return out


def map_rows() -> dict[str, dict]:
    """The map's rows: every method that lists ``map``; Ripple per router x sampler
    (``-mu``: mean unmixing), and per sampler with FedYogi as its cluster optimiser
    (``-yogi``: ``cluster-optimizer = "fedyogi"``, the GMM-VAE router); a clustered
    baseline that takes ``cluster-optimizer`` also as ``<name>-yogi`` (``ifca-yogi``)."""
    out: dict[str, dict] = {}
    for name, spec in METHODS.items():
        if "map" not in spec.benchmarks:
            continue
        if not spec.needs_router:
            out[name] = {"method": name}
            out.update(_baseline_yogi_row(name))
            out.update(_option_rows(name))
            continue
        for router in ROUTERS:
            for sampling in SAMPLINGS:
                tag = "" if router == "gmm-vae" else "-mu"
                row = {"method": name, "sampling": sampling}
                out[f"{name}-{SHORT[sampling]}{tag}"] = (
                    row if router == "gmm-vae" else {**row, "router": router}
                )
        out.update(_yogi_rows(name))
        out.update(_recommended_row(name))
        out.update(_min_count_row(name))
    return out


VARIANTS = benchmark_variants()

# Each Ripple variant's perfect-routing reference: the same sampler with w = pi*.
ORACLE_OF = {
    "ripple-strat-gmm-vae": "oracle",
    "ripple-strat-mean-unmixing": "oracle",
    "ripple-unif-gmm-vae": "oracle-unif",
    "ripple-unif-mean-unmixing": "oracle-unif",
}
