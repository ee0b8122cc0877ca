"""Float32 arithmetic on a GPU (IEEE or TF32, ``local.precision``) and forked random generators."""

from __future__ import annotations

import contextlib

import torch

#: The GPU back ends whose float32 arithmetic ``local.precision`` sets (PyTorch ≥ 2.9 names).
_FP32_BACKENDS = ("cuda.matmul", "cudnn.conv", "cudnn.rnn")


@contextlib.contextmanager
def float32_arithmetic(precision: str):
    """Within the block, float32 matmuls and convolutions on a GPU in IEEE float32, or TF32.

    ``precision`` ``tf32``: TensorFloat-32 (10-bit mantissa products, float32 accumulation)
    for both; any other: IEEE float32, also for cuDNN's convolutions, which PyTorch
    otherwise lets use TF32 by default (so ``fp32`` convolutions on a GPU give the CPU's
    numbers to float32 rounding, not to TF32's ~1e-3). The settings are restored on exit.
    Nothing changes on the CPU.
    """
    mode = "tf32" if precision == "tf32" else "ieee"
    owners = []
    for name in _FP32_BACKENDS:
        owner = torch.backends
        for part in name.split("."):
            owner = getattr(owner, part, None)
        if owner is not None and hasattr(owner, "fp32_precision"):
            owners.append(owner)
    if owners:  # PyTorch >= 2.9
        before = [o.fp32_precision for o in owners]
        for o in owners:
            o.fp32_precision = mode
    else:  # the legacy flags
        before = [torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32]
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    try:
        yield
    finally:
        if owners:
            for o, b in zip(owners, before):
                o.fp32_precision = b
        else:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def forked_rng(device: torch.device) -> contextlib.AbstractContextManager:
    """``torch.random.fork_rng`` of ``device``'s generators: the CPU's, and the GPU's on CUDA."""
    return torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else [],
                                 device_type=device.type)

