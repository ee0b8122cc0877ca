"""Text models: GPT-2 with LoRA (FAdamGC's language tasks) and FastText (AG News).

Inputs are token ids stored as floats with padding marked −1 (:mod:`wirelessfl.data.text`).

- :class:`GPT2LoRA` (``docs/papers/fadamgc.md`` §4.2): Hugging Face ``GPT2ForSequenceClassification``
  from a local model folder (``model_dir``: ``config.json`` and ``model.safetensors``; nothing
  is downloaded, and only safetensors weights are read, so no file can run code) or, for
  tests and smoke runs, built from ``config`` (a dict of ``GPT2Config`` fields) with random
  weights. ``peft`` puts LoRA (r = 16, α = 32, dropout 0.05 by default) on ``c_attn``,
  ``attn.c_proj``, ``mlp.c_fc`` and ``mlp.c_proj`` of every block and keeps the
  classification head (``score``) trainable; pad = EOS. Everything else is frozen
  (``requires_grad=False``), so :meth:`~wirelessfl.models.base.FLModel.params` — what clients
  train, send, correct and what the cost model counts — holds only the adapters and the head.
  Attention is the eager implementation: it runs under ``vmap`` (the batched engine).
- :class:`FastText` (``docs/papers/dynamic_clients.md`` §4.1): a 300-d embedding averaged over the
  non-pad tokens, then linear → classes; the vocabulary is BERT-base-uncased's 30,522 by default.

Both need the ``[text]`` extra (``transformers``, ``peft``) only for GPT-2.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from typing_extensions import override

from wirelessfl.errors import parse_json
from wirelessfl.models import layers
from wirelessfl.models.base import FLModel

LORA_TARGETS = ("c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


@contextlib.contextmanager
def _quiet_hf(what: str):
    """Hugging Face loading without its log reports; any failure one ValueError: ``what``."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    except ValueError as exc:
        raise ValueError(f"gpt2_lora: {what}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
                         ) from None
    except Exception as exc:  # noqa: BLE001 - any failure of a user's file is one message
        raise ValueError(f"gpt2_lora: {what} ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def gpt2_size(config: dict[str, Any] | None, model_dir: str | None) -> int:
    """Parameters of a GPT-2 before it is built: from ``config`` or the folder's config.json."""
    if model_dir is not None:
        try:
            config = parse_json((Path(model_dir).expanduser() / "config.json").read_text(),
                                "config.json")
        except (OSError, ValueError, UnicodeDecodeError):
            return 0  # the constructor says what is missing
    c = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, **(config or {})}
    e = int(c["n_embd"])
    inner = int(c.get("n_inner") or 4 * e)
    block = 4 * e * e + 2 * e * inner + 9 * e + inner
    return int(c["n_layer"]) * block + (int(c["vocab_size"]) + int(c["n_positions"])) * e


def _ids(x: torch.Tensor, pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (padding → ``pad``) and the attention mask from the stored floats."""
    mask = x >= 0
    return torch.where(mask, x, torch.full_like(x, pad)).long(), mask


class FastText(FLModel):
    """Mean of 300-d token embeddings over non-pad tokens, then linear (AG News, §4.1)."""

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, vocab: int = 30522,
                 dim: int = 300) -> None:
        super().__init__()
        if len(sample_shape) != 1:
            raise ValueError(f"fasttext reads token-id sequences, got samples of shape {sample_shape}")
        self.embed = nn.Embedding(vocab, dim)
        self.fc = layers.Linear(dim, num_classes)
        self.vocab_size = vocab

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        ids, mask = _ids(x)
        w = mask.to(self.fc.weight.dtype)
        z = (self.embed(ids) * w.unsqueeze(-1)).sum(-2) / w.sum(-1, keepdim=True).clamp(min=1)
        if features == "only":
            return z
        out = self.fc(z)
        return (out, z) if features else out


class GPT2LoRA(FLModel):
    """GPT-2 for sequence classification with LoRA adapters (module docstring).

    ``engine: auto`` trains it on the loop engine on a CPU (``loop_on_cpu``): there stacked
    clients measured 0.35–0.78× the loop (``benchmarks/lora.py``); ``engine: batched`` still
    stacks them, with the same numbers.

    Parameters
    ----------
    model_dir : str or None
        Local Hugging Face GPT-2 folder (absolute, or relative to ``--data-dir`` through the
        runner). Its ``model.safetensors`` is loaded; the head is new.
    config : dict or None
        ``GPT2Config`` fields for a randomly initialised model (e.g. a tiny one in tests).
    r, alpha, lora_dropout : LoRA rank, scaling α and dropout (16, 32, 0.05: §4.2 [D]).
    """

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int,
                 model_dir: str | None = None, config: dict[str, Any] | None = None,
                 r: int = 16, alpha: int = 32, lora_dropout: float = 0.05) -> None:
        super().__init__()
        try:
            from peft import LoraConfig, get_peft_model
            from transformers import GPT2Config, GPT2ForSequenceClassification
        except ImportError:
            raise ValueError("model gpt2_lora needs Hugging Face transformers and peft: "
                             "pip install 'wirelessfl[text]'") from None
        if len(sample_shape) != 1:
            raise ValueError(f"gpt2_lora reads token-id sequences, got samples of shape {sample_shape}")
        if (model_dir is None) == (config is None):
            raise ValueError("gpt2_lora needs exactly one of model_dir (a local GPT-2 folder) "
                             "and config (GPT2Config fields for a random model)")
        if model_dir is not None:
            path = Path(model_dir).expanduser()
            if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
                raise ValueError(f"model_dir {path} must hold config.json and model.safetensors "
                                 "(a local GPT-2; .bin weights are not read)")
            with _quiet_hf(f"{path / 'config.json'} is not a GPT-2 config"):
                cfg = GPT2Config.from_pretrained(str(path), local_files_only=True)
        else:
            cfg = GPT2Config(**{"bos_token_id": config.get("eos_token_id"), **config})
        cfg.num_labels = num_classes
        if cfg.eos_token_id is None or not 0 <= cfg.eos_token_id < cfg.vocab_size:
            raise ValueError(f"gpt2_lora: eos_token_id {cfg.eos_token_id} must lie in the "
                             f"vocabulary [0, {cfg.vocab_size}) (it is the pad token)")
        cfg.pad_token_id = cfg.eos_token_id
        cfg._attn_implementation = "eager"   # the SDPA mask path does not run under vmap
        if model_dir is not None:
            with _quiet_hf(f"{path / 'model.safetensors'} cannot be loaded with its config.json "
                           "(damaged, or the weights of another model)"):
                net = GPT2ForSequenceClassification.from_pretrained(
                    str(path), config=cfg, local_files_only=True, use_safetensors=True)
        else:
            net = GPT2ForSequenceClassification(cfg)
        lora = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=lora_dropout, fan_in_fan_out=True,
                          target_modules=list(LORA_TARGETS), modules_to_save=["score"],
                          task_type="SEQ_CLS")
        self.net = get_peft_model(net, lora)
        self.loop_on_cpu = True
        self.pad_id = cfg.pad_token_id
        self.lora_rank = r
        self.vocab_size = cfg.vocab_size

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids, mask = _ids(x, self.pad_id)
        return self.net(input_ids=ids, attention_mask=mask.long()).logits

    def activation_bytes(self, batch_size: int, sample_bytes: int) -> int:
        """One client's saved activations: per token and block ~24 d + 3 h T floats.

        About 24 d floats per token and block (layer norms, q/k/v, the MLP's 4d twice, the
        LoRA inputs and residuals) and 3 h T attention scores (scores, probabilities, their
        dropout), float32: 4.2 GiB for GPT-2 small at batch 32 × 128 (the loop's measured
        peak on an H100 was 5.7 GiB with the weights).
        """
        cfg = self.net.base_model.model.config
        tokens = batch_size * (sample_bytes // 4)
        length = sample_bytes // 4
        per_token = cfg.n_layer * (24 * cfg.n_embd + 3 * cfg.n_head * length)
        return 4 * tokens * per_token

    def lora_parameter_count(self) -> int:
        """R · Σ (d_in + d_out) over the adapted projections, plus the head: the LoRA formula."""
        total = 0
        for name, module in self.net.named_modules():
            if name.endswith(LORA_TARGETS) and hasattr(module, "base_layer"):
                w = module.base_layer.weight  # GPT-2's Conv1D: (d_in, d_out)
                total += self.lora_rank * (w.shape[0] + w.shape[1])
        head = self.net.base_model.model.score.modules_to_save["default"]
        return total + sum(p.numel() for p in head.parameters())
