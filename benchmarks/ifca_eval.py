"""IFCA's per-client choice: K candidate models scored on one client's training split.

Each IFCA client scores all K cluster models on its own training split every
round (and before every evaluation) and trains the lowest-loss one. This
times the ways of scoring K models of the paper's CNN on one thread against
one epoch of local training, and prints ONE JSON line:

- ``loop_ms``: :func:`ripple_flwr.training.loops.evaluate_states`, one model
  after another (what the client runs);
- ``plain_order_loop_ms``: the same loop with the CNN's layers applied in
  their written order, default layout (the forward before this benchmark);
- ``vmap_ms``: ``torch.func.functional_call`` vmapped over stacked weights;
- ``grouped_ms``: one grouped convolution over all K models (CNN only);
- ``train_epoch_ms``: one epoch of ``train_local`` on the same split;
- ``round_cost_ratio``: (train + K scores) / train, the client's share of
  ``ifca_round_wall_ratio_vs_fedavg`` in ``benchmarks/federation.py``;
- ``same_choice``: every way picks the same model.

Times are the minimum over ``--repeats`` interleaved repetitions (the least
disturbed by other processes).

    python benchmarks/ifca_eval.py [--k 4] [--n 160] [--repeats 30]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.func import functional_call, vmap  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from ripple_flwr.training.loops import evaluate_states, train_local  # noqa: E402
from ripple_flwr.training.models import build_model, get_state, set_state  # noqa: E402


def grouped_losses(states: list[dict], x: torch.Tensor, y: torch.Tensor) -> list[float]:
    """The K CNNs' losses with their convs as one grouped conv and their heads as one bmm."""
    k, n = len(states), len(x)

    def stack(key: str) -> torch.Tensor:
        return torch.stack([torch.from_numpy(s[key]) for s in states])

    with torch.inference_mode():
        w1, w2 = stack("features.0.weight"), stack("features.2.weight")
        h = F.relu(F.conv2d(x, w1.flatten(0, 1), stack("features.0.bias").flatten()))
        h = F.conv2d(h, w2.flatten(0, 1), stack("features.2.bias").flatten(), groups=k)
        h = F.relu(F.max_pool2d(h, 2)).reshape(n, k, -1).transpose(0, 1)
        h = F.relu(
            torch.baddbmm(stack("classifier.0.bias")[:, None], h, stack("classifier.0.weight").mT)
        )
        logits = torch.baddbmm(
            stack("classifier.2.bias")[:, None], h, stack("classifier.2.weight").mT
        )
        loss = F.cross_entropy(logits.flatten(0, 1), y.repeat(k), reduction="none")
        return loss.reshape(k, n).mean(1).tolist()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--n", type=int, default=160, help="training images of the client")
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = build_model("cnn", (1, 28, 28), 10)
    states = [get_state(build_model("cnn", (1, 28, 28), 10)) for _ in range(args.k)]
    x = rng.random((args.n, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, args.n)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    stacked = {k: torch.stack([torch.from_numpy(s[k]) for s in states]) for k in states[0]}

    def loop() -> list[float]:
        return [r["loss"] for r in evaluate_states(model, states, x, y)]

    def plain_order() -> list[float]:
        out = []
        with torch.inference_mode():
            for s in states:
                set_state(model, s)
                out.append(float(F.cross_entropy(model.classifier(model.features(xt)), yt)))
        return out

    # vmap cannot query memory formats: the CNN's layers in their plain order, stacked weights.
    plain = torch.nn.Sequential(model.features, model.classifier)
    renamed = {"features": "0", "classifier": "1"}
    stacked = {f"{renamed[k.split('.', 1)[0]]}.{k.split('.', 1)[1]}": v for k, v in stacked.items()}

    def vmapped() -> list[float]:
        def loss(params: dict) -> torch.Tensor:
            return F.cross_entropy(functional_call(plain, params, (xt,)), yt)

        with torch.inference_mode():
            return vmap(loss)(stacked).tolist()

    def train() -> list[float]:
        set_state(model, states[0])
        model.train()
        train_local(model, x, y, epochs=1)
        model.eval()
        return []

    model.eval()
    ways: dict[str, Callable[[], list[float]]] = {
        "loop": loop,
        "plain_order_loop": plain_order,
        "vmap": vmapped,
        "grouped": lambda: grouped_losses(states, xt, yt),
        "train_epoch": train,
    }
    losses = {name: fn() for name, fn in ways.items() if name != "train_epoch"}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, fn in ways.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    best = {name: 1000 * min(t) for name, t in times.items()}
    choices = {name: int(np.argmin(v)) for name, v in losses.items()}
    line = {f"{name}_ms": round(v, 2) for name, v in best.items()}
    line.update(
        {
            "round_cost_ratio": round(1 + best["loop"] / best["train_epoch"], 3),
            "loop_speedup_vs_plain_order": round(best["plain_order_loop"] / best["loop"], 3),
            "same_choice": len(set(choices.values())) == 1,
            "max_loss_difference": float(
                max(np.abs(np.subtract(v, losses["loop"])).max() for v in losses.values())
            ),
            "k": args.k,
            "images": args.n,
            "threads": 1,
            "torch": torch.__version__,
        }
    )
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
