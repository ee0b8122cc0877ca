"""Tasks trained side by side on one client pool (FedAST, ``docs/papers/fedast.md`` §4.4–4.6).

A *task* is a dataset, a model, local hyperparameters, a target accuracy and a latency
constant c_m (§4.2). :data:`TASKS` is the paper's registry; :func:`build_tasks` turns task
configs into :class:`TaskEnv` objects sharing one client pool of N clients. Identical copies
of a task share the client partition but start from different initialisations (§4.5
[code]): the partition comes from the ``partition`` stream keyed by the task's data config,
the initial model from the ``init`` stream keyed by the task's position.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wirelessfl.algorithms.fedast.tasks import TaskEnv
from wirelessfl.data import DatasetSplits, load_dataset
from wirelessfl.engine.client import LocalHParams, LocalSGD
from wirelessfl.models import build_model
from wirelessfl.rng import Seeds
from wirelessfl.run.config import (
    ConfigError,
    DataConfig,
    ModelConfig,
    RunConfig,
    check_name,
    checked,
    key_view,
)
from wirelessfl.run.datasplit import partition_data


@dataclass(frozen=True)
class TaskConfig:
    """One task.

    Attributes
    ----------
    name : str
        Label in records and figures (e.g. ``fmnist-1``).
    data, model, local
        Dataset and partition, architecture, local training (FedAST's values).
    target : float
        Target test accuracy (Table 1).
    latency_constant : float
        c_m of §4.2 (time per stochastic gradient, GTX TITAN X).
    sync_local : LocalHParams or None
        Local training of the synchronous baselines when it differs (§3.1 learning rates).
    """

    name: str
    data: DataConfig
    model: ModelConfig
    local: LocalHParams
    target: float
    latency_constant: float
    sync_local: LocalHParams | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "a task's name")
        checked(f"task {self.name}: ", target=(self.target, 0, 1, "open"),
                latency_constant=(self.latency_constant, 0, 1e9, "open"))


def _image_task(dataset: str, model: str, lr: float, wd: float, target: float, c: float,
                sync_lr: float, sync_wd: float, alpha: float = 0.1, epochs: int | None = 3,
                steps: int | None = None, **model_options: Any) -> dict[str, Any]:
    data = {"dataset": dataset, "partition": "dirichlet_per_client", "num_clients": 1000,
            "samples_per_client": 300, "alpha": alpha, "reuse": True}
    local = {"lr": lr, "batch_size": 32, "epochs": epochs, "drop_last": True,
             "weight_decay": wd, **({} if steps is None else {"steps": steps})}
    return {"data": data, "model": {"name": model, "options": model_options},
            "local": local, "sync_local": {**local, "lr": sync_lr, "weight_decay": sync_wd},
            "target": target, "latency_constant": c}


#: The paper's tasks (§2.7, §3.1, §4.4, Table 1). FedAST's normalisation (0.1307, 0.3081)
#: for MNIST/FMNIST; each client holds 300 samples from Dir(α) label proportions, the
#: training set reused when it runs out (§4.5 [code]); 3 epochs of batch 32, last batch
#: dropped = 27 steps. CIFAR-100: Dir(1), τ = 5 steps, random crop + flip (App. D.4).
TASKS: dict[str, dict[str, Any]] = {
    "mnist_mlp": _image_task("mnist", "mlp", 0.1, 3e-4, 0.93, 0.148, 0.2, 3e-4),
    "fmnist_lenet5": _image_task("fashion_mnist", "lenet5", 0.06, 3e-4, 0.82, 0.240, 0.06, 3e-4,
                                 dropout=0.0, output_relu=True),
    "cifar10_cnn": _image_task("cifar10", "feddyn_cnn", 0.1, 7e-4, 0.63, 0.228, 0.1, 3e-4),
    "cifar100_resnet18": _image_task("cifar100", "resnet18", 0.06, 3e-4, 0.50, 2.071, 0.06, 3e-4,
                                     alpha=1.0, epochs=None, steps=5, augment=True),
    "shakespeare_lstm": {
        "data": {"dataset": "shakespeare", "partition": "natural", "num_clients": 1000},
        "model": {"name": "char_lstm"},
        "local": {"lr": 7.0, "batch_size": 64, "steps": 27, "weight_decay": 7e-5},
        "sync_local": {"lr": 7.0, "batch_size": 64, "steps": 27, "weight_decay": 7e-5},
        "target": 0.42, "latency_constant": 0.555},
    "synthetic_linear": {
        "data": {"dataset": "synthetic", "partition": "natural", "num_clients": 100},
        "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 20},
        "target": 0.6, "latency_constant": 0.148},
}


def task_from_registry(entry: Any, index: int) -> dict[str, Any]:
    """A task mapping from a registry name, ``{task: name, ...overrides}`` or a full mapping."""
    if isinstance(entry, str):
        entry = {"task": entry}
    if isinstance(entry, dict) and "task" not in entry and "name" in entry:
        return dict(entry)  # a fully written-out task (as a run folder's config.yaml stores it)
    if not isinstance(entry, dict) or "task" not in entry:
        raise ConfigError(f"tasks[{index}] must be a task name or a mapping with 'task'; known "
                          f"tasks: {', '.join(TASKS)}")
    entry = dict(entry)
    name = entry.pop("task")
    if name not in TASKS:
        raise ConfigError(f"tasks[{index}]: unknown task {name!r}; choose one of {', '.join(TASKS)}")
    out = json.loads(json.dumps(TASKS[name]))
    for section, value in entry.items():
        if isinstance(value, dict) and isinstance(out.get(section), dict):
            out[section] = {**out[section], **value}
        else:
            out[section] = value
    out.setdefault("name", f"{name}-{index}")
    return out


def _data_key(data: DataConfig) -> int:
    """Seed key of a task's data: its config's key view less placement.

    Placement changes where the samples live, not which they are.
    """
    fields = key_view(data)
    fields.pop("placement", None)
    blob = json.dumps(fields, sort_keys=True).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "little")


def build_tasks(tasks: tuple[TaskConfig, ...], num_clients: int, seeds: Seeds,
                device: torch.device, sync: bool = False,
                test_samples: int | None = None) -> list[TaskEnv]:
    """Build every task on a pool of ``num_clients`` (each task's ``data.num_clients``).

    ``sync`` selects each task's ``sync_local`` hyperparameters where given;
    ``test_samples`` keeps a fixed random subset of each test set (same for every method).
    """
    cache: dict[int, tuple[DatasetSplits, tuple[np.ndarray, ...]]] = {}
    out = []
    for m, t in enumerate(tasks):
        data = dataclasses.replace(t.data, num_clients=num_clients)
        key = _data_key(data)
        if key not in cache:
            task_seeds = Seeds(int(seeds.sequence("partition", key).generate_state(1)[0]))
            splits = load_dataset(data.dataset, data_dir=data.data_dir,
                                  normalization=data.normalization,
                                  rng=task_seeds.generator("data"), num_clients=num_clients,
                                  synthetic_alpha=data.synthetic_alpha,
                                  synthetic_beta=data.synthetic_beta,
                                  synthetic_dim=data.synthetic_dim,
                                  samples_per_client=data.samples_per_client,
                                  tokenizer=data.tokenizer, max_length=data.max_length)
            cfg = RunConfig(data=data)
            indices = tuple(partition_data(cfg, splits, task_seeds))
            if test_samples is not None and test_samples < len(splits.test):
                keep = torch.as_tensor(np.sort(task_seeds.generator("data", 1).choice(
                    len(splits.test), test_samples, replace=False)))
                splits = dataclasses.replace(splits, test=type(splits.test)(
                    splits.test.x[keep], splits.test.y[keep], splits.test.num_classes))
            # tasks on the same data share one placed copy (the first such task's placement)
            splits = splits.placed(device, data.placement)
            cache[key] = splits, indices
        splits, indices = cache[key]
        if len(indices) != num_clients:
            raise ConfigError(f"task {t.name}: the dataset gives {len(indices)} clients, the pool "
                              f"has {num_clients}; set clients to {len(indices)}")
        model = build_model(t.model.name, splits.train.sample_shape, splits.train.num_classes,
                            seed=seeds.int_seed("init", m), **t.model.options).to(device)
        local = t.sync_local if sync and t.sync_local is not None else t.local
        out.append(TaskEnv(m, t, splits, indices, model, model.params(), LocalSGD(model, local),
                           local, device))
    return out
