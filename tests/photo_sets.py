"""Tiny copies of the paper's photo benchmarks in their published layouts, and fake weights.

- Office-Home as ``flwrlabs/office-home`` publishes it: ``data/train-*.parquet`` with
  ``image`` (Image), ``domain`` (string) and ``label`` (ClassLabel) columns.
- GLDv2-23k as TensorFlow Federated publishes it: ``mini_gld_train_split.csv``
  (``user_id,image_id,class``), ``mini_gld_test.csv`` (``image_id,class``) and
  ``images/<image_id>.jpg``.
- torchvision's ResNet-18 file name under ``$TORCH_HOME/hub/checkpoints/``, holding a
  seeded state dict of the right shapes (the real ImageNet weights are not on this machine).

Each domain tints its photos and each class draws its own stripes, so a domain or a
class can be learnt and routed on.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

DOMAINS = ("Art", "Clipart", "Product", "Real World")
RESNET18_FILE = "resnet18-f37072fd.pth"


def photo(rng: np.random.Generator, domain: int, label: int, side: int):
    """An RGB PIL image: stripes at the class's angle, tinted by the domain, with noise."""
    from PIL import Image

    yy, xx = np.mgrid[0:side, 0:side] / side
    angle = np.pi * label / 5
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * (xx * np.cos(angle) + yy * np.sin(angle)))
    tint = np.array([[1.0, 0.4, 0.4], [0.4, 1.0, 0.4], [0.4, 0.4, 1.0], [0.9, 0.9, 0.3]])
    rgb = stripes[..., None] * tint[domain % 4] + 0.15 * rng.random((side, side, 3))
    return Image.fromarray(np.clip(rgb * 255, 0, 255).astype(np.uint8), mode="RGB")


def _jpeg_bytes(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_office_home(
    root: Path, classes: int = 3, per_cell: int = 8, side: int = 48, seed: int = 0
) -> Path:
    """``root/data/train-0000{0,1}-of-00002.parquet``: 4 domains x ``classes`` x ``per_cell``."""
    from datasets import ClassLabel, Dataset, Features, Value
    from datasets import Image as ImageFeature

    rng = np.random.default_rng(seed)
    rows = {"image": [], "domain": [], "label": []}
    for d, domain in enumerate(DOMAINS):
        for c in range(classes):
            for _ in range(per_cell):
                rows["image"].append({"bytes": _jpeg_bytes(photo(rng, d, c, side)), "path": None})
                rows["domain"].append(domain)
                rows["label"].append(c)
    features = Features(
        {
            "image": ImageFeature(),
            "domain": Value("string"),
            "label": ClassLabel(names=[f"class_{c}" for c in range(classes)]),
        }
    )
    table = Dataset.from_dict(rows, features=features)
    (root / "data").mkdir(parents=True, exist_ok=True)
    half = len(table) // 2
    table.select(range(half)).to_parquet(str(root / "data" / "train-00000-of-00002.parquet"))
    table.select(range(half, len(table))).to_parquet(
        str(root / "data" / "train-00001-of-00002.parquet")
    )
    return root


def write_gldv2(
    root: Path,
    users: int = 6,
    per_user: int = 12,
    classes: int = 4,
    test_rows: int = 24,
    side: int = 80,
    seed: int = 0,
) -> Path:
    """The TFF CSVs and ``images/<id>.jpg``; user u photographs mostly class u % classes."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    n = 0

    def image(label: int) -> str:
        nonlocal n
        image_id = f"{n:016x}"
        n += 1
        photo(rng, label % 4, label, side).save(root / "images" / f"{image_id}.jpg", quality=90)
        return image_id

    with open(root / "mini_gld_train_split.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "image_id", "class"])
        for u in range(users):
            for k in range(per_user):
                label = u % classes if k % 4 else int(rng.integers(classes))
                w.writerow([u, image(label), 100 + label])
    with open(root / "mini_gld_test.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image_id", "class"])
        for k in range(test_rows):
            w.writerow([image(k % classes), 100 + k % classes])
    return root


def write_fake_resnet18_weights(torch_home: Path, seed: int = 0) -> Path:
    """A seeded torchvision ResNet-18 state dict where the real ImageNet file would be."""
    import torch
    from torchvision.models import resnet18

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        state = resnet18(weights=None).state_dict()
    path = torch_home / "hub" / "checkpoints" / RESNET18_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return path
