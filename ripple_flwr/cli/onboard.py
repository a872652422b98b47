"""Zero-shot onboarding of a new client from a finished Ripple run (phase 4), standalone.

The client's images are summarised (WST embedding, or mean image for the
mean-unmixing router), the run's frozen router turns the summary into
cluster weights w in one forward pass, and the client's model
theta = sum_c w_c theta_c is written to a file. No training, no gradient.

Prints one JSON line: run, num_images, weights, model_weights,
top_component, model (the written file) and ms (summary + route + mix).

When the router does not recognise the images (their embedding lies outside
the domain it was trained on: e.g. inverted digits, noise, another dataset),
it routes them uniformly, w = 1/K: a warning with its reason goes to stderr
and the JSON line carries "fallback": {"reason": ...}. With --strict that is
an error instead (one line, exit status 2, no model written).

A class-conditional run (class-conditional = true) also reads the client's labels
(--labels, or the key 'labels' of an .npz) to place it among the concepts it found; a
client without labels is placed by its images alone (concept weights 1/G): the same
warning and fallback, and --strict refuses it.

example:
    python onboard.py outputs/ripple-ripple-seed0.run.pt --images client.npy \\
        --out client.model.pt --json client.onboard.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ripple_flwr.cli.common import DEVICES, OneLineParser, check_device, check_output_path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = OneLineParser(
        prog="onboard.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "run",
        metavar="RUN_FILE",
        help="saved run (written by a ripple-flwr run next to its results JSON)",
    )
    p.add_argument(
        "--images",
        required=True,
        help="the client's images: .npy, or .npz with key 'images'; float32 in [0, 1], "
        "shape (N, C, H, W) or (N, H, W); uint8 is divided by 255. Or the client's own "
        "files in any format a SuperNode reads (an ImageFolder <class>/<image>, parquet or "
        "a Hugging Face save_to_disk folder): converted to the run's channels and size",
    )
    p.add_argument(
        "--labels",
        default=None,
        help="the client's labels, one integer per image (.npy), for a class-conditional run "
        "(default: the key 'labels' of an --images .npz, else none)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="where to write the personalised model (default: <images stem>.model.pt "
        "next to the images)",
    )
    p.add_argument("--json", default=None, help="also write the JSON report to this file")
    p.add_argument("--device", default="cpu", help=f"torch device: {DEVICES} (default: cpu)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit status 2, no model written) when the router does not recognise "
        "the images and would route them uniformly (w = 1/K); without it: a warning",
    )
    return p.parse_args(argv)


def load_labels(labels: str | None, images_path: Path) -> np.ndarray | None:
    """The client's labels: ``--labels`` (.npy), else an --images .npz's ``labels``, else None."""
    if labels is None:
        if images_path.suffix.lower() != ".npz" or not images_path.is_file():
            return None
        with np.load(images_path, allow_pickle=False) as f:
            return f["labels"] if "labels" in f.files else None
    path = Path(labels).expanduser()
    if not path.is_file() or path.suffix.lower() != ".npy":
        raise ValueError(f"--labels {path} must be an existing .npy file of integer labels")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ValueError(f"--labels {path} is not a numpy array file ({err})") from None


def load_images(path: Path, image_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Images from .npy or .npz (key ``images``); uint8 scaled to [0, 1] with a note.

    A folder or parquet file is read as a SuperNode reads its own data
    (:func:`ripple_flwr.data.local.read_local_images`), at ``image_shape``.
    """
    if path.is_dir() or path.suffix.lower() == ".parquet":
        from ripple_flwr.data.images import to_unit_float
        from ripple_flwr.data.local import read_local_images

        c, h, w = image_shape or (0, 0, 0)
        local = read_local_images(path, channels=c, size=h if h == w else 0)
        return to_unit_float(local.images)
    if not path.is_file():
        raise FileNotFoundError(f"images file {path} not found")
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".npz"):
        raise ValueError(f"images file {path} must be .npy or .npz, got {suffix or 'no suffix'}")
    try:
        if suffix == ".npy":
            images = np.load(path, allow_pickle=False)
        else:
            with np.load(path, allow_pickle=False) as f:
                if "images" not in f.files:
                    raise ValueError(f"{path} has no array 'images' (it has: {', '.join(f.files)})")
                images = f["images"]
    except (ValueError, OSError, EOFError) as err:
        if "has no array 'images'" in str(err):
            raise
        raise ValueError(
            f"{path} is not a numeric numpy array file ({type(err).__name__}); save the images "
            "as a float32 or uint8 array of shape (N, C, H, W) with np.save / np.savez(images=...)"
        ) from None
    if images.dtype == np.uint8:
        print(
            f"note: {path.name} holds uint8 pixels; onboarding with float32 pixels / 255",
            file=sys.stderr,
        )
        images = images.astype(np.float32) / 255.0
    return images


def check_outputs(args: argparse.Namespace, out: Path) -> None:
    """Refuse an output that is one of the inputs (or the other output): nothing saved is lost."""
    inputs = {
        Path(args.run).expanduser().resolve(): "the saved run",
        Path(args.images).expanduser().resolve(): "the images",
    }
    outputs = [("--out", out.expanduser().resolve())]
    if args.json:
        outputs.append(("--json", Path(args.json).expanduser().resolve()))
    for flag, path in outputs:
        if path in inputs:
            raise ValueError(f"{flag} {path} is {inputs[path]}; write the output elsewhere")
        if path.is_dir():
            raise ValueError(f"{flag} {path} is a folder; name a file")
        check_output_path(path, flag)  # e.g. under a file: --out notes.txt/client.pt
    if len(outputs) == 2 and outputs[0][1] == outputs[1][1]:
        raise ValueError(f"--out and --json are the same file {out}; give them different names")


def check_exports(run: Path) -> None:
    """A missing ``<results>.run.pt`` of a run whose method saves none: that, in one line.

    A method whose registry entry exports ``none`` (PACFL, FedGWC, IFCA...) scores its new
    clients inside the run (``zero_shot`` in its results) and writes no saved run; the
    generic "a run saves it when it finishes" would send the user looking for a file that
    will never be there.
    """
    if run.exists() or not run.name.endswith(".run.pt"):
        return
    results = run.with_name(run.name[: -len(".run.pt")] + ".json")
    try:
        method = json.loads(results.read_text())["settings"]["method"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    from ripple_flwr.methods.registry import METHODS

    spec = METHODS.get(method)
    if spec is not None and spec.exports == "none":
        savers = ", ".join(m for m, s in METHODS.items() if s.exports != "none")
        raise FileNotFoundError(
            f"{run} does not exist: method={method!r} ({results.name}) saves no run for "
            "onboarding outside it (its new clients are scored in the run: zero_shot in the "
            f"results); onboard.py reads the runs of {savers}"
        )


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as stop:  # --help (0) or a usage error (2), printed in one line
        return int(stop.code or 0)
    try:
        check_device(args.device)  # before the saved run or the images are read
        images_path = Path(args.images).expanduser()
        out = Path(args.out) if args.out else images_path.with_name(f"{images_path.stem}.model.pt")
        check_outputs(args, out)
        from ripple_flwr.runs.onboarding import Onboarder, save_model  # torch: after the flags

        check_exports(Path(args.run).expanduser())  # a method that saves none: say so
        onboarder = Onboarder.from_path(args.run, device=args.device)
        images = load_images(images_path, tuple(onboarder.run.image_shape))
        labels = load_labels(args.labels, images_path)
        t0 = time.perf_counter()
        result = onboarder.onboard(images, labels)
        ms = (time.perf_counter() - t0) * 1000.0
        if result.fallback is not None and args.strict:
            raise ValueError(
                f"the router cannot place the images {images_path}: {result.fallback}; check "
                "they are like the run's training data (same dataset, background and "
                "scaling) and give their labels to a class-conditional run, or drop --strict "
                "to accept the fallback"
            )
        written = save_model(out, result, onboarder.run)
        report = {
            "run": str(args.run),
            "router": onboarder.run.router,
            "num_images": int(len(images)),
            "weights": [float(w) for w in result.weights],
            "model_weights": [float(w) for w in result.model_weights],
            "top_component": int(np.argmax(result.weights)),
            "model": str(written),
            "ms": round(ms, 3),
        }
        if result.fallback is not None:
            report["fallback"] = {"reason": result.fallback}
            print(
                f"warning: the router cannot place the images {images_path}: "
                f"{result.fallback}; check they are like the run's training data "
                "(--strict makes this an error)",
                file=sys.stderr,
            )
        line = json.dumps(report)
        if args.json:
            path = Path(args.json).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(line + "\n")
    except (FileNotFoundError, ValueError, OSError) as err:
        print("error: " + " ".join(str(err).split()), file=sys.stderr)
        return 2
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
