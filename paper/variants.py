"""Every registered method as named run-config overrides: the rows of the tables and benchmarks.

Read from the method registry, so a newly registered method is benchmarked
without touching this file. Ripple's rows are ``ripple-<strat|unif>-<router>``;
the oracle's ``oracle`` (stratified) and ``oracle-unif``.
"""

from __future__ import annotations

from ripple_flwr.methods.registry import METHODS
from ripple_flwr.settings import ROUTERS, SAMPLINGS

__all__ = ["ORACLE_OF", "VARIANTS", "benchmark_variants"]


def benchmark_variants() -> dict[str, dict]:
    """Every registered method as run-config overrides; Ripple and the oracle per sampler/router."""
    out: dict[str, dict] = {}
    short = {"stratified": "strat", "uniform": "unif"}
    for name, spec in METHODS.items():
        if spec.needs_router:
            for router in ROUTERS:
                for sampling in SAMPLINGS:
                    key = f"{name}-{short[sampling]}-{router}"
                    out[key] = {"method": name, "sampling": sampling, "router": router}
        elif spec.routing_weights:
            for sampling in SAMPLINGS:
                key = name if sampling == "stratified" else f"{name}-{short[sampling]}"
                out[key] = {"method": name, "sampling": sampling}
        else:
            out[name] = {"method": name}
    return out


VARIANTS = benchmark_variants()

# Each Ripple variant's perfect-routing reference: the same sampler with w = pi*.
ORACLE_OF = {
    "ripple-strat-gmm-vae": "oracle",
    "ripple-strat-mean-unmixing": "oracle",
    "ripple-unif-gmm-vae": "oracle-unif",
    "ripple-unif-mean-unmixing": "oracle-unif",
}
