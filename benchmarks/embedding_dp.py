"""What differential privacy on the one-shot embedding costs in routing L1 (no Flower).

Real clients (default: Fashion-MNIST, 100 clients x 200 images drawn outside
D_aux with Dir(0.1), as the pre-training report draws them) are embedded as
a client would, privatised with ``ripple_flwr.privacy.mechanism.privatize_embedding``
(one release per client) and routed unchanged by the GMM-VAE. Ways to spend
the budget, all with public parameters (the checkpoint's normalisation and
synthetic clients of the server's own D_aux, never the clients measured):

- ``raw``: clip and noise the raw embedding (P = 1,953 coordinates);
- ``model``: the same in the GMM-VAE's input space (signed log1p, the
  checkpoint's feature mean and std);
- ``model-pca-<r>``: model space projected on the reference's top r principal
  directions;
- ``model-ridge``: model space projected on the K-1 ridge directions that
  predict the reference clients' mixtures, mapped back by the conditional mean
  (``reference_projection``).

The clip bound of each is the ``--clip-quantile`` of the reference clients'
norms in that space. Prints one JSON line: routing L1 without privacy, with
the clip/projection only, and for each epsilon (mean and std over
``--repeats`` noise draws), with the uniform guess as the floor.

    python benchmarks/embedding_dp.py --checkpoint outputs/fashion_gmm_vae.pt
    python benchmarks/embedding_dp.py              # pre-trains a small router first
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ripple_flwr.data import (  # noqa: E402
    fold_labels,
    load_dataset,
    mixture_of,
    sample_dirichlet_clients,
    server_aux_split,
)
from ripple_flwr.privacy.mechanism import (  # noqa: E402
    clip_l2,
    gaussian_sigma,
    privatize_embedding,
    reference_projection,
)
from ripple_flwr.router.checkpoint import load_checkpoint  # noqa: E402
from ripple_flwr.router.pretrain import (  # noqa: E402
    PretrainSettings,
    pretrain,
)
from ripple_flwr.router.routers import UniformRouter, routing_l1  # noqa: E402
from ripple_flwr.router.synthetic import BankSettings  # noqa: E402
from ripple_flwr.router.training import TrainSettings  # noqa: E402
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder  # noqa: E402


def get_checkpoint(args) -> tuple[object, str]:
    if args.checkpoint:
        return load_checkpoint(args.checkpoint), args.checkpoint
    out = Path(args.out or tempfile.mkdtemp(prefix="ripple-dp-")) / f"{args.dataset}-vae.pt"
    settings = PretrainSettings(
        dataset=args.dataset,
        aux_size=args.aux_size,
        bank=BankSettings(num_clients=args.bank_size, client_size=args.client_size),
        train=TrainSettings(steps=args.steps),
        real_clients=10,
        device="cpu",
    )
    ckpt, _ = pretrain(settings, out, progress=False)
    return ckpt, str(out)


def squash(x: np.ndarray) -> np.ndarray:
    """The GMM-VAE's signed log1p."""
    return np.sign(x) * np.log1p(np.abs(x))


def to_space(x: np.ndarray, public: dict) -> np.ndarray:
    """Where ``privatize_embedding`` clips and noises, for the given public parameters."""
    u = squash(x) if public.get("log_space") else np.asarray(x, dtype=np.float64)
    u = (u - public.get("center", 0.0)) / public.get("scale", 1.0)
    basis = public.get("basis")
    return u if basis is None else u @ basis


def from_space(z: np.ndarray, public: dict) -> np.ndarray:
    basis = public.get("basis")
    lift = public.get("lift", basis)
    u = z if lift is None else z @ lift.T
    y = public.get("center", 0.0) + public.get("scale", 1.0) * u
    return np.sign(y) * np.expm1(np.minimum(np.abs(y), 80.0)) if public.get("log_space") else y


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", default=None, help="GMM-VAE checkpoint (else pre-train one)")
    p.add_argument("--dataset", default="fashion-mnist", help="when pre-training here")
    p.add_argument("--aux-size", type=int, default=1000, help="when pre-training here")
    p.add_argument("--bank-size", type=int, default=6000, help="when pre-training here")
    p.add_argument("--steps", type=int, default=3000, help="when pre-training here")
    p.add_argument("--out", default=None, help="keep the pre-trained checkpoint here")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--client-size", type=int, default=200)
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0, 16.0])
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--repeats", type=int, default=3, help="noise draws per setting")
    p.add_argument("--reference-clients", type=int, default=1000, help="public, from D_aux")
    p.add_argument("--reference-alpha", type=float, default=0.3, help="their Dirichlet alpha")
    p.add_argument("--ranks", type=int, nargs="+", default=[4, 16], help="r of the pca variants")
    p.add_argument("--clip-quantile", type=float, default=0.9)
    p.add_argument("--ridge", type=float, default=10.0, help="of the model-ridge projection")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    ckpt, ckpt_path = get_checkpoint(args)
    s = ckpt.settings
    k = int(s["num_components"])
    dataset = load_dataset(s["dataset"])
    cluster, _ = dataset.cluster_labels(s.get("label_kind", "class"))
    aux, pool = server_aux_split(cluster, int(s["aux_size"]), int(s["data_seed"]))
    embedder = SpectralEmbedder(
        dataset.image_shape,
        J=int(s["J"]),
        L=int(s["L"]),
        prototype=PrototypeSettings(int(s["svd_rank"]), s.get("explained_variance")),
        device="cpu",
    )
    router = ckpt.router("gmm-vae")

    # Real clients, drawn outside D_aux as the pre-training report draws them.
    rng = np.random.default_rng([args.seed, 7919, int(round(args.alpha * 1000))])
    pool_images, pool_labels = dataset.images[pool], cluster[pool]
    clients = sample_dirichlet_clients(
        pool_labels, args.clients, args.client_size, args.alpha, rng, num_components=k
    )
    truth = np.stack([mixture_of(pool_labels[c], k) for c in clients])
    phis = embedder.embed_many([pool_images[c] for c in clients]).astype(np.float64)

    # The server's public reference: synthetic clients of its own D_aux, and the
    # checkpoint's own normalisation (feature mean and std of the squashed bank).
    ref_rng = np.random.default_rng([args.seed, 104729])
    aux_comp = fold_labels(cluster[aux], k)
    ref_clients = sample_dirichlet_clients(
        aux_comp,
        args.reference_clients,
        args.client_size,
        args.reference_alpha,
        ref_rng,
        num_components=k,
    )
    ref = embedder.embed_many([dataset.images[aux][c] for c in ref_clients]).astype(np.float64)
    ref_targets = np.stack([mixture_of(aux_comp[c], k) for c in ref_clients])
    model_space = {
        "center": ckpt.model.feature_mean.double().numpy(),
        "scale": ckpt.model.feature_std.double().numpy(),
        "log_space": True,
    }
    t_ref = to_space(ref, model_space)
    _, _, vt = np.linalg.svd(t_ref - t_ref.mean(axis=0), full_matrices=False)
    variants = {"raw": {}, "model": model_space}
    for r in args.ranks:
        variants[f"model-pca-{r}"] = {**model_space, "basis": vt[:r].T.copy()}
    mean_t, basis, lift = reference_projection(t_ref, ref_targets, ridge=args.ridge)
    variants["model-ridge"] = {
        **model_space,
        # Centre at the reference mean of the model's input: t - mean_t.
        "center": model_space["center"] + model_space["scale"] * mean_t,
        "basis": basis,
        "lift": lift,
    }
    report: dict = {
        "dataset": s["dataset"],
        "checkpoint": ckpt_path,
        "clients": args.clients,
        "client_size": args.client_size,
        "alpha": args.alpha,
        "delta": args.delta,
        "repeats": args.repeats,
        "embedding_dim": int(phis.shape[1]),
        "clip_quantile": args.clip_quantile,
        "reference_clients": args.reference_clients,
        "reference_alpha": args.reference_alpha,
        "l1_clean": routing_l1(router.route(phis), truth),
        "l1_uniform": routing_l1(UniformRouter(k).route(phis), truth),
        "variants": {},
    }
    for name, public in variants.items():
        clip = float(np.quantile(np.linalg.norm(to_space(ref, public), axis=1), args.clip_quantile))
        clipped = from_space(clip_l2(to_space(phis, public), clip), public)
        basis = public.get("basis")
        entry = {
            "clip": clip,
            "dims_noised": int(phis.shape[1] if basis is None else basis.shape[1]),
            "l1_no_noise": routing_l1(router.route(clipped), truth),
            "sigma": {},
            "l1": {},
            "l1_std": {},
        }
        for eps in args.epsilons:
            l1s = []
            for r in range(args.repeats):
                noise_rng = np.random.default_rng([args.seed, r, int(eps * 1000)])
                # One release per client (row).
                noisy = privatize_embedding(phis, eps, args.delta, clip, noise_rng, **public)
                l1s.append(routing_l1(router.route(noisy), truth))
            key = f"{eps:g}"
            entry["sigma"][key] = gaussian_sigma(eps, args.delta, 2 * clip)
            entry["l1"][key] = float(np.mean(l1s))
            entry["l1_std"][key] = float(np.std(l1s))
        report["variants"][name] = entry
    report["seconds"] = time.perf_counter() - t0
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
