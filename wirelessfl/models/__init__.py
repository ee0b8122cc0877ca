"""Model registry: ``build_model(name, sample_shape, num_classes, seed=..., **options)``."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from channels.validation import as_float, as_int, check_memory, short
from wirelessfl.errors import plugin_hint
from wirelessfl.models.base import FLModel, Params, UnitGroup, UnitSlice, linear_group
from wirelessfl.models.text import FastText, GPT2LoRA, gpt2_size
from wirelessfl.models.zoo import (
    FCNN,
    MLP,
    CharLSTM,
    CifarCNN,
    FedDynCNN,
    LeNet5,
    Linear,
    ResNet18,
    ResNet18BN,
    ResNetProjection,
    SVHNEfficient,
)

MODELS: dict[str, type[FLModel]] = {
    "fcnn": FCNN,
    "lenet5": LeNet5,
    "cifar_cnn": CifarCNN,
    "feddyn_cnn": FedDynCNN,
    "char_lstm": CharLSTM,
    "mlp": MLP,
    "resnet18": ResNet18,
    "resnet18_bn": ResNet18BN,
    "linear": Linear,
    "svhn_cnn": SVHNEfficient,
    "resnet_proj": ResNetProjection,
    "fasttext": FastText,
    "gpt2_lora": GPT2LoRA,
}

#: GPT2Config fields a ``gpt2_lora`` ``config`` option may set (a small model for tests).
GPT2_CONFIG_KEYS = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner",
                    "eos_token_id", "bos_token_id", "resid_pdrop", "embd_pdrop", "attn_pdrop")


def register_model(name: str, cls: type[FLModel]) -> None:
    """Add a model under ``name``, from a user's own code; configs then name it.

    ``cls`` subclasses :class:`FLModel` and is built as ``cls(sample_shape, num_classes,
    **options)`` (``model.options`` of a config). A name taken is refused.

    Examples
    --------
    >>> register_model("my_fcnn", FCNN)
    >>> type(build_model("my_fcnn", (1, 28, 28), 10, seed=0)).__name__
    'FCNN'
    >>> del MODELS["my_fcnn"]
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"`name` must be an identifier such as 'my_cnn', got {short(name)}")
    if name in MODELS:
        raise ValueError(f"`name` {name!r} is a model already; choose another name")
    if not (isinstance(cls, type) and issubclass(cls, FLModel)):
        raise TypeError(f"`cls` must be a subclass of wirelessfl.models.FLModel, got {short(cls)}")
    MODELS[name] = cls


def build_model(name: str, sample_shape: tuple[int, ...], num_classes: int, *, seed: int,
                **options: Any) -> FLModel:
    """Build model ``name`` for inputs of ``sample_shape``, initialised from ``seed``.

    Initialisation is PyTorch's default for each layer, drawn from a private RNG seeded
    with ``seed`` (the global torch RNG is left as it was).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {short(name)}{plugin_hint('model')}; choose one of "
                         f"{', '.join(MODELS)}")
    seed = as_int("seed", seed, lo=0, hi=2**63 - 1)
    num_classes = as_int("num_classes", num_classes, lo=1, hi=10**7)
    if not isinstance(sample_shape, (tuple, list)) or not 1 <= len(sample_shape) <= 4:
        raise ValueError(f"`sample_shape` must be a tuple of 1 to 4 sizes, got {short(sample_shape)}")
    sample_shape = tuple(as_int("sample_shape", s, lo=1, hi=10**7) for s in sample_shape)
    needs_image = name in ("lenet5", "cifar_cnn", "feddyn_cnn", "resnet18", "resnet18_bn",
                           "svhn_cnn", "resnet_proj")
    if needs_image and len(sample_shape) != 3:
        raise ValueError(f"model {name!r} needs image inputs (C, H, W), got samples of shape "
                         f"{tuple(sample_shape)}; use 'fcnn', 'mlp' or 'linear' for this dataset")
    _check_options(name, options)
    if name == "gpt2_lora":   # sized from its config (its frozen base is one copy)
        size = gpt2_size(options.get("config"), options.get("model_dir"))
    else:
        try:
            with torch.device("meta"):  # sizes only: nothing is allocated
                probe = MODELS[name](tuple(sample_shape), num_classes, **options)
                size = sum(p.numel() for p in probe.parameters())
                if needs_image:  # an image too small for the layers fails here, not in round 1
                    probe.eval()(torch.empty(1, *sample_shape))
        except (TypeError, RuntimeError, ValueError) as exc:
            raise ValueError(f"model {name!r}: options {short(options)} do not fit inputs of "
                             f"shape {tuple(sample_shape)}: {str(exc).splitlines()[0][:100]}") from None
    copies = 2 if name == "gpt2_lora" else 16  # a frozen base is never stacked per client
    check_memory(4.0 * size * copies, f"model {name!r} with {size:,} parameters",
                 "choose smaller model options (e.g. model.options.hidden)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MODELS[name](tuple(sample_shape), num_classes, **options)
    if options.get("pretrained"):
        model.load_backbone(options["pretrained"])
    return model


def _check_options(name: str, options: dict[str, Any]) -> None:
    """Every model option known and in range, judged by the constructor's default.

    Integers (widths, groups) must be 1..10^6, ``dropout`` in [0, 1), tuples of widths
    positive integers, flags booleans.
    """
    params = inspect.signature(MODELS[name].__init__).parameters
    known = [k for k in params if k not in ("self", "sample_shape", "num_classes")]
    for key, value in options.items():
        if key not in known:
            raise ValueError(f"model {name!r} has no option {str(key)[:40]!r}; its options: "
                             f"{', '.join(known) or 'none'}")
        default = params[key].default
        where = f"model.options.{key}"
        if key in ("pretrained", "model_dir"):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{where} must be the path of a local weights file or "
                                 f"folder, got {short(value)}")
        elif key == "config":
            if not isinstance(value, dict) or not value:
                raise ValueError(f"{where} must be a mapping of GPT2Config fields, got {short(value)}")
            for k, v in value.items():
                if k not in GPT2_CONFIG_KEYS:
                    raise ValueError(f"{where}.{str(k)[:40]} is not allowed; use "
                                     f"{', '.join(GPT2_CONFIG_KEYS)}")
                if k.endswith("pdrop"):
                    as_float(f"{where}.{k}", v, lo=0, hi=1, hi_open=True)
                else:
                    as_int(f"{where}.{k}", v, lo=0 if k.endswith("token_id") else 1, hi=10**6)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"{where} must be true or false, got {short(value)}")
        elif isinstance(default, int):
            as_int(where, value, lo=1, hi=10**6)
        elif isinstance(default, float):
            as_float(where, value, lo=0, hi=1, hi_open=True)
        elif isinstance(default, tuple):
            if not isinstance(value, (list, tuple)) or len(value) != len(default):
                raise ValueError(f"{where} must be a list of {len(default)} integers, got "
                                 f"{short(value)}")
            for v in value:
                as_int(where, v, lo=1, hi=10**6)


__all__ = ["FLModel", "Params", "UnitGroup", "UnitSlice", "linear_group", "MODELS", "register_model",
           "build_model", "FCNN", "MLP", "CharLSTM", "CifarCNN", "FedDynCNN", "LeNet5", "Linear", "ResNet18",
           "ResNet18BN", "ResNetProjection", "SVHNEfficient", "FastText", "GPT2LoRA"]
