"""Model registry: ``build_model(name, sample_shape, num_classes, seed=..., **options)``."""

from __future__ import annotations

from typing import Any

import torch

from wirelessfl.models.base import FLModel, Params, UnitGroup, UnitSlice, linear_group
from wirelessfl.models.zoo import (
    FCNN,
    MLP,
    CharLSTM,
    CifarCNN,
    FedDynCNN,
    LeNet5,
    Linear,
    ResNet18,
)

MODELS: dict[str, type[FLModel]] = {
    "fcnn": FCNN,
    "lenet5": LeNet5,
    "cifar_cnn": CifarCNN,
    "feddyn_cnn": FedDynCNN,
    "char_lstm": CharLSTM,
    "mlp": MLP,
    "resnet18": ResNet18,
    "linear": Linear,
}


def build_model(name: str, sample_shape: tuple[int, ...], num_classes: int, *, seed: int,
                **options: Any) -> FLModel:
    """Build model ``name`` for inputs of ``sample_shape``, initialised from ``seed``.

    Initialisation is PyTorch's default for each layer, drawn from a private RNG seeded
    with ``seed`` (the global torch RNG is left as it was).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    needs_image = name in ("lenet5", "cifar_cnn", "feddyn_cnn", "resnet18")
    if needs_image and len(sample_shape) != 3:
        raise ValueError(f"model {name!r} needs image inputs (C, H, W), got samples of shape "
                         f"{tuple(sample_shape)}; use 'fcnn', 'mlp' or 'linear' for this dataset")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return MODELS[name](tuple(sample_shape), num_classes, **options)
        except TypeError as exc:
            raise ValueError(f"model {name!r}: bad options {options}: {exc}") from exc


__all__ = ["FLModel", "Params", "UnitGroup", "UnitSlice", "linear_group", "MODELS",
           "build_model", "FCNN", "MLP", "CharLSTM", "CifarCNN", "FedDynCNN", "LeNet5", "Linear", "ResNet18"]
