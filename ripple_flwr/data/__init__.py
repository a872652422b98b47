"""Datasets (one registry, one in-memory form) and the federation's client partitions."""

from ripple_flwr.data.base import ImageDataset
from ripple_flwr.data.federation import Federation, build_federation, natural_federation
from ripple_flwr.data.gldv2 import load_gldv2
from ripple_flwr.data.loaders import default_data_root, read_idx
from ripple_flwr.data.office_home import load_office_home
from ripple_flwr.data.partition import (
    dirichlet_partition,
    fold_labels,
    largest_remainder_counts,
    mixture_of,
    sample_dirichlet_clients,
    server_aux_split,
    train_test_split_indices,
    true_mixtures,
)
from ripple_flwr.data.registry import (
    DATASETS,
    DatasetSpec,
    available_datasets,
    embed_size_of,
    has_natural_split,
    image_shape_of,
    load_dataset,
    register_dataset,
)
from ripple_flwr.data.rotated import rotate_dataset

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "Federation",
    "ImageDataset",
    "available_datasets",
    "embed_size_of",
    "has_natural_split",
    "image_shape_of",
    "build_federation",
    "default_data_root",
    "dirichlet_partition",
    "fold_labels",
    "largest_remainder_counts",
    "load_dataset",
    "load_gldv2",
    "load_office_home",
    "mixture_of",
    "natural_federation",
    "read_idx",
    "register_dataset",
    "rotate_dataset",
    "sample_dirichlet_clients",
    "server_aux_split",
    "train_test_split_indices",
    "true_mixtures",
]
