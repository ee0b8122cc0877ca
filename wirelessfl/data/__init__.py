"""Datasets, federated splits and partitioners."""

from wirelessfl.data.arrays import (
    PLACEMENTS,
    ArrayDataset,
    DataFileError,
    DataNotFoundError,
    DatasetSplits,
)
from wirelessfl.data.datasets import (
    DATASETS,
    NORMALIZATIONS,
    load_dataset,
    read_idx,
    register_dataset,
    synthetic,
)
from wirelessfl.data.partition import (
    IID,
    LABEL_SET_KINDS,
    CellIIDShards,
    DirichletOverClients,
    DirichletPerClient,
    LabelSets,
    Partitioner,
    Shards,
    TwoGroupOverlap,
    label_sets,
    two_group_labels,
)

__all__ = [
    "DATASETS", "NORMALIZATIONS", "PLACEMENTS", "ArrayDataset", "DataFileError", "DataNotFoundError",
    "DatasetSplits",
    "load_dataset", "read_idx",
    "register_dataset", "synthetic", "IID", "CellIIDShards", "DirichletOverClients",
    "DirichletPerClient", "Partitioner", "Shards", "TwoGroupOverlap", "two_group_labels",
    "LABEL_SET_KINDS", "LabelSets", "label_sets",
]
