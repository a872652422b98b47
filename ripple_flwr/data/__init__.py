"""Datasets (one registry, one in-memory form) and the federation's client partitions."""

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.loaders import default_data_root, read_idx
from ripple_flwr.data.partition import (
    Federation,
    build_federation,
    dirichlet_partition,
    fold_labels,
    largest_remainder_counts,
    mixture_of,
    sample_dirichlet_clients,
    server_aux_split,
    train_test_split_indices,
    true_mixtures,
)
from ripple_flwr.data.registry import available_datasets, image_shape_of, load_dataset
from ripple_flwr.data.rotated import rotate_dataset

__all__ = [
    "Federation",
    "ImageDataset",
    "available_datasets",
    "image_shape_of",
    "build_federation",
    "default_data_root",
    "dirichlet_partition",
    "fold_labels",
    "largest_remainder_counts",
    "load_dataset",
    "mixture_of",
    "read_idx",
    "rotate_dataset",
    "sample_dirichlet_clients",
    "server_aux_split",
    "train_test_split_indices",
    "true_mixtures",
]
