"""Ripple's concept step (``class-conditional = true``): concepts from the training clients,
then every client's concept weights.

A class-conditional summary is the label-free summary (what the router reads) followed by
the per-label block (:mod:`ripple_flwr.aggregation.concepts`). :class:`ConceptStep` owns
what the server learns from the blocks: it checks every block once
(:func:`~ripple_flwr.aggregation.concepts.read_blocks`), finds the concepts from the
training clients' blocks alone (never from a client's or an image's true concept), and
unmixes any client on them. A client whose block is unusable (no label kept, a label
outside the run's classes, counts that do not add up, a NaN or out-of-range mean) gets the
concept weights ``1/G`` and its reason; its label-free routing is unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ripple_flwr.aggregation.concepts import (
    Concepts,
    LabelStacks,
    block_size,
    find_concepts,
    place,
    read_blocks,
)
from ripple_flwr.methods.ripple.client import label_mechanism
from ripple_flwr.methods.ripple.spec import CONCEPTS, MIN_LABEL_COUNT
from ripple_flwr.settings import RunSettings

log = logging.getLogger("flwr.ripple")

_SEED_KEY = 60  # SeedSequence key of the concept step's generator (k-means++ seeding)


class ConceptStep:
    """The concepts of one run and the weights of its clients over them.

    Parameters
    ----------
    settings : RunSettings
        ``min-label-count``, ``concepts``, ``min-cluster-size`` and the seed.
    label_free_dim : int
        Length of the label-free summary that leads every class-conditional summary.
    image_shape, num_classes : the run's images and classes (the block's layout).
    """

    def __init__(
        self,
        settings: RunSettings,
        label_free_dim: int,
        image_shape: tuple[int, int, int],
        num_classes: int,
    ) -> None:
        self.settings = settings
        self.label_free_dim = int(label_free_dim)
        self.num_classes = int(num_classes)
        self.d = int(np.prod(image_shape))
        self.min_count = MIN_LABEL_COUNT.of(settings)
        self.mechanism = label_mechanism(settings, image_shape)  # None: no label DP
        self.concepts: Concepts | None = None
        self.record: dict[str, Any] = {}

    @property
    def summary_dim(self) -> int:
        """Floats in one client's class-conditional summary."""
        return self.label_free_dim + block_size(self.num_classes, self.d)

    @property
    def num_concepts(self) -> int:
        return 1 if self.concepts is None else self.concepts.num_concepts

    def split(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(label-free summaries, per-label blocks) of ``(N, summary_dim)`` summaries."""
        f = np.asarray(features)
        return f[:, : self.label_free_dim], f[:, self.label_free_dim :]

    def read(self, blocks: np.ndarray, sizes: Any) -> tuple[LabelStacks, list[str | None]]:
        """The checked blocks, and why each unusable one is."""
        return read_blocks(
            blocks,
            self.num_classes,
            self.d,
            self.min_count,
            np.asarray(sizes, dtype=float),
            noise_sd=None if self.mechanism is None else self.mechanism.sigmas,
        )

    def fit(self, blocks: np.ndarray, sizes: Any) -> None:
        """The concepts from the training clients' blocks (``concepts``, or Ripple-HDB's rule)."""
        stacks, reasons = self.read(blocks, sizes)
        g = CONCEPTS.of(self.settings) or None
        seed = np.random.SeedSequence([self.settings.training.seed, _SEED_KEY])
        rng = np.random.default_rng(seed)
        usable = sum(r is None for r in reasons)
        if usable == 0:
            log.warning("class-conditional: no training client sent a usable block: G = 1")
            self.concepts = None
        else:
            self.concepts = find_concepts(stacks, g, self.settings.embedding.min_cluster_size, rng)
        kept = stacks.mask.sum(axis=1)
        self.record = {
            "concepts": self.num_concepts,
            "rule": "given" if g else "hdbscan",
            "hdbscan_clusters": None if self.concepts is None else self.concepts.hdbscan_clusters,
            "min_label_count": self.min_count,
            "labels_kept": {
                "mean": float(kept.mean()) if len(kept) else 0.0,
                "min": int(kept.min()) if len(kept) else 0,
                "max": int(kept.max()) if len(kept) else 0,
            },
            "unusable_training_clients": len(reasons) - usable,
            "summary_floats": self.summary_dim,
            "summary_bytes": 4 * self.summary_dim,
            "label_dp": None
            if self.mechanism is None
            else {
                "epsilon_per_client": self.mechanism.epsilon,
                "delta": self.mechanism.delta,
                "clip": self.mechanism.clip,
                "protects": "each label's mean and variance, one image replaced; the counts "
                "are sent exactly",
            },
        }
        log.info(
            "class-conditional: G = %d concepts (%s) from %d training clients keeping %.2f "
            "labels on average",
            self.num_concepts,
            self.record["rule"],
            usable,
            self.record["labels_kept"]["mean"],
        )

    def weights(self, blocks: np.ndarray, sizes: Any) -> tuple[np.ndarray, list[str | None]]:
        """(N, G) concept weights of these clients, and why a client got ``1/G``."""
        return place(
            blocks,
            self.concepts,
            self.num_classes,
            self.d,
            self.min_count,
            np.asarray(sizes, dtype=float),
            noise_sd=None if self.mechanism is None else self.mechanism.sigmas,
        )

    # -- saved state --------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The templates and the record (a resumed run routes newcomers on them)."""
        if self.concepts is None:
            return {"record": self.record}
        t = self.concepts.templates
        return {
            "record": self.record,
            "counts": t.counts,
            "variances": t.variances,
            "means": t.means,
            "noise": t.noise,
            "groups": self.concepts.groups,
            "rule": self.concepts.rule,
        }

    def restore(self, saved: dict[str, Any]) -> None:
        self.record = dict(saved.get("record") or {})
        if "means" not in saved:
            self.concepts = None
            return
        t = LabelStacks(*(np.asarray(saved[k], dtype=np.float64) for k in LabelStacks.FIELDS))
        self.concepts = Concepts(t, np.asarray(saved["groups"], dtype=np.int64), saved["rule"])
