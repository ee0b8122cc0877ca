"""Test-set evaluation of a model's parameters (loss and accuracy)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call

from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine.precision import float32_arithmetic
from wirelessfl.models.base import FLModel, Params


@torch.no_grad()
def evaluate(model: FLModel, params: Params, data: ArrayDataset, *, batch_size: int = 2000,
             device: torch.device | str = "cpu",
             buffers: Params | None = None) -> tuple[float, float]:
    """Test accuracy in [0, 1] and mean cross-entropy of ``params`` on ``data`` (eval mode).

    ``buffers`` (BatchNorm running statistics) default to the module's own. The sums stay on
    the device (the loss in float64) and are read once, after the last batch. Always in IEEE
    float32 (:func:`float32_arithmetic`), whatever the local training's precision.
    """
    params = {**params, **(buffers or {})}
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    with float32_arithmetic("fp32"):  # IEEE float32 on a GPU too: the CPU's numbers
        for i in range(0, len(data), batch_size):
            x, y = data.batch(slice(i, i + batch_size), device)
            out = functional_call(model, params, (x,))
            loss_sum += F.cross_entropy(out, y, reduction="sum").double()
            correct += (out.argmax(1) == y).sum()
    model.train(was_training)
    return int(correct) / len(data), float(loss_sum) / len(data)

