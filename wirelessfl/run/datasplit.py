"""From a run's data config to client index sets: the partitioner it names, applied.

Shared by single-task runs (:mod:`wirelessfl.run.rounds`) and the tasks of multi-task runs
(:mod:`wirelessfl.run.tasks`); it imports no algorithm, runner or task code.
"""

from __future__ import annotations

import numpy as np

from wirelessfl.data import (
    IID,
    LABEL_SET_KINDS,
    CellIIDShards,
    DatasetSplits,
    DirichletOverClients,
    DirichletPerClient,
    LabelSets,
    Partitioner,
    Shards,
    TwoGroupOverlap,
)
from wirelessfl.rng import Seeds
from wirelessfl.run.config import ConfigError, RunConfig
from wirelessfl.server.topology import Topology


def make_partitioner(cfg: RunConfig, num_classes: int) -> Partitioner:
    """The partitioner a config asks for."""
    d = cfg.data
    if d.partition == "iid":
        return IID(num_clients=d.num_clients, samples_per_client=d.samples_per_client)
    if d.partition == "shards":
        return Shards(num_clients=d.num_clients, shards_per_client=d.shards_per_client)
    if d.partition == "cell_iid_shards":
        cells = getattr(cfg.algorithm.hparams, "cells", None)
        if cells is None:
            raise ConfigError("data.partition cell_iid_shards needs a hierarchical algorithm "
                              "with algorithm.cells")
        per = Topology.even(d.num_clients, cells).clients_per_cell
        return CellIIDShards(clients_per_cell=per, shards_per_client=d.shards_per_client)
    if d.partition == "dirichlet_over_clients":
        return DirichletOverClients(num_clients=d.num_clients, alpha=d.alpha, min_size=d.min_size)
    if d.partition == "dirichlet_per_client":
        if d.samples_per_client is None:
            raise ConfigError("data.partition dirichlet_per_client needs data.samples_per_client")
        return DirichletPerClient(num_clients=d.num_clients, alpha=d.alpha,
                                  samples_per_client=d.samples_per_client, reuse=d.reuse)
    if d.partition == "two_group":
        groups = 3 if d.unseen_labels else 2
        if d.num_clients % groups:
            raise ConfigError(f"data.partition two_group needs data.num_clients divisible by "
                              f"{groups} (equal groups{', C for the unseen labels' * (groups == 3)}"
                              f"), got {d.num_clients}")
        return TwoGroupOverlap(clients_per_group=d.num_clients // groups,
                               num_classes=num_classes, overlap=d.overlap, alpha=d.alpha,
                               share_overlap=d.share_overlap, unseen_labels=d.unseen_labels)
    if d.partition in LABEL_SET_KINDS:
        return LabelSets(kind=d.partition, num_clients=d.num_clients, num_classes=num_classes)
    raise ConfigError(f"data.partition {d.partition!r} is not a partitioner")


def partition_data(cfg: RunConfig, splits: DatasetSplits, seeds: Seeds) -> tuple[np.ndarray, ...]:
    """Client index sets for the config's partition."""
    if cfg.data.partition == "natural":
        if splits.natural_partition is None:
            raise ConfigError(f"dataset {splits.name!r} has no natural clients; choose another "
                              "data.partition (e.g. iid or shards)")
        return splits.natural_partition
    n, samples = cfg.data.num_clients, len(splits.train)
    if n > samples:
        raise ConfigError(f"data.num_clients = {n} is more than the {samples} training samples "
                          f"of {splits.name}: every client needs data; use at most {samples}")
    partitioner = make_partitioner(cfg, splits.train.num_classes)
    return partitioner.partition(splits.train.labels(), seeds.generator("partition"))
