"""The models of the five papers.

- :class:`FCNN` — HIST's 784-300-10 fully connected net with dropout 0.5 (``docs/papers/hist.md`` §6.2);
  input size follows the dataset.
- :class:`LeNet5` — HIST's LeNet-5 (unpadded, 44,426 parameters, default; or conv1 padded,
  61,706 parameters, ``docs/papers/hist.md`` §6.2 and §8 item 15); FedAST's variant has no dropout
  and a ReLU on the logits (``docs/papers/fedast.md`` §4.4).
- :class:`CifarCNN` — HIST's CIFAR CNN (541,094 parameters).
- :class:`MLP` — FedAST's MNIST MLP 784-200-200-10 (FedDyn).
- :class:`ResNet18` — CIFAR-style ResNet-18 with GroupNorm (2 groups), FedAST §4.4.
- :class:`Linear` — multinomial logistic regression (dynamic clients' "MLP" for MNIST).
- :class:`FedDynCNN`, :class:`CharLSTM` — FedAST's CIFAR-10 CNN and Shakespeare LSTM.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import override

from wirelessfl.models import layers, noise
from wirelessfl.models.base import FLModel, UnitGroup, UnitSlice, linear_group


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as ``F.dropout``, with the keep mask from :func:`noise.keep_mask`.

    During local training the mask comes from the client's own stream, the same in the
    loop and the batched engine (:mod:`wirelessfl.models.noise`).
    """
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    if x.dtype == torch.float32:
        return x * noise.keep_mask(tuple(x.shape), p, x.device)
    return x * (noise.uniform(tuple(x.shape), x.device) >= p).to(x.dtype).mul_(1.0 / (1.0 - p))


def random_crop_flip(x: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """Random crop after zero padding by ``pad``, and a horizontal flip with probability 1/2.

    The CIFAR augmentation of FedAST's CIFAR-100 task (§4.4 [code]). ``x`` has shape
    (B, C, H, W); offsets and flips are drawn per image from :func:`noise.uniform` (each
    client its own, the same in both engines).
    """
    b, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    draws = noise.uniform((b, 3), x.device)  # the client's own stream in local training
    offset = (draws[:, :2] * (2 * pad + 1)).long()  # < 1: ≤ 2·pad
    flip = draws[:, 2:] < 0.5
    cols = torch.arange(w, device=x.device)
    rows = offset[:, :1] + torch.arange(h, device=x.device)  # (B, H)
    cols = offset[:, 1:] + torch.where(flip, w - 1 - cols, cols)  # (B, W)
    picked = padded[torch.arange(b, device=x.device)[:, None, None], :, rows[:, :, None],
                    cols[:, None, :]]  # (B, H, W, C)
    return picked.permute(0, 3, 1, 2)


def _flat(sample_shape: tuple[int, ...]) -> int:
    return int(math.prod(sample_shape))


class Linear(FLModel):
    """Multinomial logistic regression; nothing to partition.

    It has no hidden layer, so its MOON representation (``features=True``) is its output,
    the logits **[default]**: the dynamic-clients paper runs MOON on its MNIST/FMNIST
    linear model (``docs/papers/dynamic_clients.md`` Table 5) without saying which vector it
    contrasts.
    """

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.fc = layers.Linear(_flat(sample_shape), num_classes)

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        out = self.fc(x.flatten(1))
        return out if features == "only" else (out, out) if features else out


class FCNN(FLModel):
    """HIST FCNN: in → hidden (ReLU, dropout) → classes; the hidden units are split."""

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, hidden: int = 300,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.fc1 = layers.Linear(_flat(sample_shape), hidden)
        self.fc2 = layers.Linear(hidden, num_classes)
        self.dropout = dropout
        self.unit_groups = (linear_group("fc1", hidden, "fc2"),)
        self.hist_groups = ("fc1",)

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        z = F.relu(self.fc1(x.flatten(1)))  # ReLU before dropout: they commute
        if features == "only":
            return z
        out = self.fc2(dropout(z, self.dropout, self.training))
        return (out, z) if features else out


class MLP(FLModel):
    """FedAST's MNIST MLP in → 200 → 200 → classes (ReLU).

    HIST splits ``fc1`` only (every second hidden layer, ``docs/papers/hist.md`` §1.3(c)).
    """

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int,
                 hidden: tuple[int, int] = (200, 200)) -> None:
        super().__init__()
        self.fc1 = layers.Linear(_flat(sample_shape), hidden[0])
        self.fc2 = layers.Linear(hidden[0], hidden[1])
        self.fc3 = layers.Linear(hidden[1], num_classes)
        self.unit_groups = (linear_group("fc1", hidden[0], "fc2"),
                            linear_group("fc2", hidden[1], "fc3"))
        self.hist_groups = ("fc1",)

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        z = F.relu(self.fc2(F.relu(self.fc1(x.flatten(1)))))
        if features == "only":
            return z
        return (self.fc3(z), z) if features else self.fc3(z)


class LeNet5(FLModel):
    """LeNet-5: conv 6 → conv 16 → fc1 120 → fc2 84 → fc3.

    ``padded=False`` (default, HIST's 0.169 MB model) gives fc1 an input of 256 on 28×28
    images; ``padded=True`` pads conv1 by 2 (fc1 input 400). HIST splits the 120 units of
    ``fc1`` (``docs/papers/hist.md`` §1.3(d)); conv layers and ``fc3`` are shared. The conv
    channels are declared too, for RA-Fed. The paper's accounting uses 0.169 MB with 2,572
    conv and 59,134 FC parameters (§6.6, §8 item 15), for either variant.
    """

    paper_volumes = (0.169, 2572, 59134)

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, padded: bool = False,
                 dropout: float = 0.3, output_relu: bool = False) -> None:
        super().__init__()
        c, h, w = sample_shape
        self.conv1 = layers.Conv2d(c, 6, 5, padding=2 if padded else 0)
        self.conv2 = layers.Conv2d(6, 16, 5)
        h1, w1 = (h + (4 if padded else 0) - 4) // 2, (w + (4 if padded else 0) - 4) // 2
        h2, w2 = (h1 - 4) // 2, (w1 - 4) // 2
        self.fc1 = layers.Linear(16 * h2 * w2, 120)
        self.fc2 = layers.Linear(120, 84)
        self.fc3 = layers.Linear(84, num_classes)
        self.dropout, self.output_relu = dropout, output_relu
        self.unit_groups = (
            linear_group("conv1", 6, "conv2"),
            linear_group("conv2", 16, "fc1", width=h2 * w2),
            linear_group("fc1", 120, "fc2"),
            linear_group("fc2", 84, "fc3"),
        )
        self.hist_groups = ("fc1",)

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        x = F.relu(layers.max_pool2d(self.conv1(x), 2))  # ReLU after pooling: they commute
        x = F.relu(layers.max_pool2d(self.conv2(x), 2)).flatten(1)
        x = F.relu(dropout(self.fc1(x), self.dropout, self.training))
        z = F.relu(self.fc2(x))  # ReLU before dropout: they commute
        if features == "only":
            return z
        x = self.fc3(dropout(z, self.dropout, self.training))
        x = F.relu(x) if self.output_relu else x
        return (x, z) if features else x


class CifarCNN(FLModel):
    """HIST's CIFAR CNN: three 3×3 conv blocks (16, 32, 64), fc1 1024 → 500, fc2 500 → classes.

    Accounting (§7.2): 2.064 MB, 23,584 conv and 517,510 FC parameters.
    """

    paper_volumes = (2.064, 23584, 517510)

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, dropout: float = 0.3):
        super().__init__()
        c, h, w = sample_shape
        self.conv1 = layers.Conv2d(c, 16, 3, padding=1)
        self.conv2 = layers.Conv2d(16, 32, 3, padding=1)
        self.conv3 = layers.Conv2d(32, 64, 3, padding=1)
        self.fc1 = layers.Linear(64 * (h // 8) * (w // 8), 500)
        self.fc2 = layers.Linear(500, num_classes)
        self.dropout = dropout
        self.unit_groups = (linear_group("conv1", 16, "conv2"), linear_group("conv2", 32, "conv3"),
                            linear_group("conv3", 64, "fc1", width=(h // 8) * (w // 8)),
                            linear_group("fc1", 500, "fc2"))
        self.hist_groups = ("fc1",)

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in (self.conv1, self.conv2, self.conv3):
            x = F.relu(layers.max_pool2d(conv(x), 2))  # ReLU after pooling: they commute
        x = dropout(x.flatten(1), self.dropout, self.training)
        x = dropout(F.relu(self.fc1(x)), self.dropout, self.training)
        return self.fc2(x)


class FedDynCNN(FLModel):
    """FedAST's CIFAR-10 CNN (FedDyn): conv5×5 3→64, pool, conv5×5 64→64, pool, FC 1600-384-192.

    797,962 parameters on 32 × 32 inputs (``docs/papers/fedast.md`` §4.4, ≈798k).
    """

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = sample_shape
        self.conv1 = layers.Conv2d(c, 64, 5)
        self.conv2 = layers.Conv2d(64, 64, 5)
        self.fc1 = layers.Linear(64 * ((h - 4) // 2 - 4) // 2 * (((w - 4) // 2 - 4) // 2), 384)
        self.fc2 = layers.Linear(384, 192)
        self.fc3 = layers.Linear(192, num_classes)
        h2, w2 = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
        self.unit_groups = (linear_group("conv1", 64, "conv2"),
                            linear_group("conv2", 64, "fc1", width=h2 * w2),
                            linear_group("fc1", 384, "fc2"), linear_group("fc2", 192, "fc3"))
        self.hist_groups = ("fc1",)

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(layers.max_pool2d(self.conv1(x), 2))  # ReLU after pooling: they commute
        x = F.relu(layers.max_pool2d(self.conv2(x), 2)).flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CharLSTM(FLModel):
    """FedAST's Shakespeare LSTM: embedding 8, one LSTM layer of 100 units, FC on the last step.

    ``docs/papers/fedast.md`` §4.4 [code]: vocabulary 80, sequence length 80; 52,720 parameters
    (two gate biases, as ``nn.LSTM``). The cell is written out with :mod:`layers` so stacked
    clients batch through ``vmap``; the state starts at zero for every batch (§7 item 22).
    Inputs are character indices (stored as floats by the dataset).
    """

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, vocab: int = 80,
                 embed: int = 8, hidden: int = 100) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.ih = layers.Linear(embed, 4 * hidden)
        self.hh = layers.Linear(hidden, 4 * hidden)
        self.fc = layers.Linear(hidden, num_classes)
        gate = (UnitSlice("ih.weight", 0, blocks=4), UnitSlice("ih.bias", 0, blocks=4),
                UnitSlice("hh.weight", 0, blocks=4), UnitSlice("hh.bias", 0, blocks=4))
        # a hidden unit owns its row in every gate block and its column of hh and fc
        self.unit_groups = (UnitGroup("hidden", hidden, (*gate, UnitSlice("hh.weight", 1),
                                                         UnitSlice("fc.weight", 1))),)

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gates_x = self.ih(self.embed(x.long()))
        # the width comes from the (possibly sliced) recurrent weights
        h = gates_x.new_zeros(gates_x.shape[0], self.hh.weight.shape[-1])
        c = torch.zeros_like(h)
        for t in range(gates_x.shape[1]):
            i, f, g, o = (gates_x[:, t] + self.hh(h)).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return self.fc(h)


def _norm(kind: str, channels: int, groups: int) -> nn.Module:
    """GroupNorm(groups) (``gn``) or BatchNorm (``bn``) over ``channels``."""
    return layers.GroupNorm(groups, channels) if kind == "gn" else nn.BatchNorm2d(channels)


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int, kind: str = "gn") -> None:
        super().__init__()
        self.kind = kind
        cl = kind != "bn"  # a convolution feeding BatchNorm stacks in NCHW (layers.Conv2d)
        self.conv1 = layers.Conv2d(cin, cout, 3, stride, 1, bias=False, channels_last=cl)
        setattr(self, f"{kind}1", _norm(kind, cout, groups))
        self.conv2 = layers.Conv2d(cout, cout, 3, 1, 1, bias=False, channels_last=cl)
        setattr(self, f"{kind}2", _norm(kind, cout, groups))
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(layers.Conv2d(cin, cout, 1, stride, bias=False,
                                                        channels_last=cl),
                                          _norm(kind, cout, groups))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n1, n2 = getattr(self, f"{self.kind}1"), getattr(self, f"{self.kind}2")
        out = F.relu(n1(self.conv1(x)))
        return F.relu(n2(self.conv2(out)) + self.shortcut(x))


class SVHNEfficient(FLModel):
    """The dynamic-clients paper's SVHN CNN (``docs/papers/dynamic_clients.md`` §4.1, [CODE]).

    [conv 32, BN, ReLU, conv 32, BN, ReLU, max-pool] → [conv 64, BN, ReLU, conv 64, BN, ReLU,
    max-pool] → [conv 128, BN, ReLU, max-pool] → fc1 2048 → 256, ReLU, dropout 0.4 → fc2 256 →
    classes; 3×3 convolutions with padding 1. MOON's features are ReLU(fc1) (before dropout).
    BatchNorm statistics are buffers, trained per client and averaged by the server.
    """

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int,
                 dropout: float = 0.4) -> None:
        super().__init__()
        c, h, w = sample_shape
        widths = ((c, 32), (32, 32), (32, 64), (64, 64), (64, 128))
        for i, (cin, cout) in enumerate(widths, 1):
            setattr(self, f"conv{i}", layers.Conv2d(cin, cout, 3, 1, 1, channels_last=False))
            setattr(self, f"bn{i}", nn.BatchNorm2d(cout))
        self.fc1 = layers.Linear(128 * (h // 8) * (w // 8), 256)
        self.fc2 = layers.Linear(256, num_classes)
        self.dropout = dropout

    def _conv(self, i: int, x: torch.Tensor) -> torch.Tensor:
        return F.relu(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x)))

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        x = layers.max_pool2d(self._conv(2, self._conv(1, x)), 2)
        x = layers.max_pool2d(self._conv(4, self._conv(3, x)), 2)
        x = layers.max_pool2d(self._conv(5, x), 2).flatten(1)
        z = F.relu(self.fc1(x))
        if features == "only":
            return z
        out = self.fc2(dropout(z, self.dropout, self.training))
        return (out, z) if features else out


def _resnet_forward(model: nn.Module, stem_norm: nn.Module, x: torch.Tensor,
                    features: bool | str):
    """The CIFAR ResNet-18 pass shared by :class:`ResNet18` and :class:`ResNet18BN`."""
    if model.augment and model.training:
        x = random_crop_flip(x)
    x = F.relu(stem_norm(model.conv1(x)))
    x = model.layer4(model.layer3(model.layer2(model.layer1(x))))
    z = x.mean(dim=(-2, -1))   # global average pool (vmap has no adaptive_avg_pool2d rule)
    if features == "only":
        return z
    return (model.fc(z), z) if features else model.fc(z)


class ResNet18(FLModel):
    """CIFAR ResNet-18 (3×3 stem, no max-pool) with GroupNorm(2) instead of BatchNorm.

    Partitionable units are the inner channels of every basic block (conv1's outputs, their
    GroupNorm affine pair, conv2's inputs): slicing them keeps the residual streams intact
    (``docs/papers/rafed.md`` §2.1.1). A sliced block must keep a channel count divisible by the
    2 GroupNorm groups. ``augment`` applies :func:`random_crop_flip` to training inputs
    (FedAST's CIFAR-100 task).
    """

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, gn_groups: int = 2,
                 augment: bool = False):
        super().__init__()
        self.augment = augment
        self.conv1 = layers.Conv2d(sample_shape[0], 64, 3, 1, 1, bias=False)
        self.gn1 = layers.GroupNorm(gn_groups, 64)
        stages, groups, cin = [], [], 64
        for stage, (cout, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), 1):
            blocks = [_Block(cin, cout, stride, gn_groups), _Block(cout, cout, 1, gn_groups)]
            for b in range(2):
                p = f"layer{stage}.{b}"
                groups.append(UnitGroup(f"{p}.inner", cout, (
                    UnitSlice(f"{p}.conv1.weight", 0), UnitSlice(f"{p}.gn1.weight", 0),
                    UnitSlice(f"{p}.gn1.bias", 0), UnitSlice(f"{p}.conv2.weight", 1)),
                    multiple=gn_groups))
            stages.append(nn.Sequential(*blocks))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = layers.Linear(512, num_classes)
        self.unit_groups = tuple(groups)
        self.hist_groups = ()

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        return _resnet_forward(self, self.gn1, x, features)


class ResNet18BN(FLModel):
    """CIFAR-style ResNet-18 with BatchNorm (``docs/papers/fadamgc.md`` §4.1, §7 item 7).

    3×3 stem, no max-pool.

    The BatchNorm running statistics are buffers: each client updates its own copy during
    local training (both engines) and the server averages them (plain mean, no correction,
    ``docs/papers/fadamgc.md`` §2.8). No partitionable units (submodels of BatchNorm layers would need
    their statistics sliced too). ``augment`` applies :func:`random_crop_flip`.
    """

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, augment: bool = False):
        super().__init__()
        self.augment = augment
        self.conv1 = layers.Conv2d(sample_shape[0], 64, 3, 1, 1, bias=False, channels_last=False)
        self.bn1 = nn.BatchNorm2d(64)
        stages, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(nn.Sequential(_Block(cin, cout, stride, 1, "bn"),
                                        _Block(cout, cout, 1, 1, "bn")))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = layers.Linear(512, num_classes)

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        return _resnet_forward(self, self.bn1, x, features)


class ResNetProjection(FLModel):
    """The dynamic-clients paper's CIFAR / Tiny ImageNet model (``docs/papers/dynamic_clients.md`` §4.1).

    An ImageNet ResNet-18 (``depth=18``) or ResNet-34 (``depth=34``) backbone with
    BatchNorm (7×7 stride-2 stem, 3×3 max-pool, basic blocks, global average pool to 512,
    no classifier; inputs are not upscaled), a projection head 512 → 512 → ReLU → 256 and a
    classifier 256 → classes. MOON's representation is the 256-d projection.

    ``pretrained``: a local file of ImageNet backbone weights in the torchvision / timm
    layout (``conv1.weight``, ``bn1.*``, ``layer1.0.conv1.weight``, ...,
    ``layerK.0.downsample.*``; a ``fc.*`` classifier is ignored), a ``.safetensors`` file
    or a PyTorch state dict read with ``weights_only=True``; nothing is downloaded. The
    paper uses pretrained backbones (§7 item 19); without a file the backbone is random,
    and the run's resolved config records which (``model.options.pretrained``).
    ``augment`` applies :func:`random_crop_flip` (RandomCrop with padding 4, HFlip).
    """

    DEPTHS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, depth: int = 18,
                 pretrained: str | None = None, augment: bool = False) -> None:
        super().__init__()
        if depth not in self.DEPTHS:
            raise ValueError(f"depth must be 18 or 34, got {depth!r}")
        self.augment, self.pretrained = augment, pretrained
        self.conv1 = layers.Conv2d(sample_shape[0], 64, 7, 2, 3, bias=False, channels_last=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for stage, (cout, blocks) in enumerate(zip((64, 128, 256, 512), self.DEPTHS[depth]), 1):
            stride = 1 if stage == 1 else 2
            setattr(self, f"layer{stage}", nn.Sequential(*(
                _Block(cin if b == 0 else cout, cout, stride if b == 0 else 1, 1, "bn")
                for b in range(blocks))))
            cin = cout
        self.proj1 = layers.Linear(512, 512)
        self.proj2 = layers.Linear(512, 256)
        self.fc = layers.Linear(256, num_classes)

    @override
    def forward(self, x: torch.Tensor, features: bool | str = False):
        if self.augment and self.training:
            x = random_crop_flip(x)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        z = self.proj2(F.relu(self.proj1(x.mean(dim=(-2, -1)))))
        if features == "only":
            return z
        return (self.fc(z), z) if features else self.fc(z)

    def load_backbone(self, path: str) -> None:
        """Copy ImageNet backbone weights from ``path`` (checked: every backbone tensor)."""
        from pathlib import Path

        file = Path(path).expanduser()
        if not file.is_file():
            raise ValueError(f"model.options.pretrained: no file {str(file)[:120]}; give a local "
                             ".safetensors or .pt file of ResNet backbone weights")
        try:
            if file.suffix == ".safetensors":
                from safetensors.torch import load_file

                theirs = load_file(str(file))
            else:
                with warnings.catch_warnings():  # a foreign pickle's protocol warning
                    warnings.simplefilter("ignore")
                    theirs = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is one message
            raise ValueError(f"model.options.pretrained: cannot read {file.name} as weights "
                             f"({type(exc).__name__})") from None
        if not isinstance(theirs, dict):
            raise ValueError(f"model.options.pretrained: {file.name} holds no state dict")
        theirs = {k.removeprefix("module.").replace(".downsample.", ".shortcut."): v
                  for k, v in theirs.items() if isinstance(v, torch.Tensor)}
        mine = {k: v for k, v in self.state_dict().items()
                if not k.startswith(("proj", "fc."))}
        for key, value in mine.items():
            if key not in theirs:
                raise ValueError(f"model.options.pretrained: {file.name} lacks {key} (expected "
                                 "a torchvision/timm ResNet-{18,34} state dict of the same depth)")
            if theirs[key].shape != value.shape:
                raise ValueError(f"model.options.pretrained: {key} has shape "
                                 f"{tuple(theirs[key].shape)} in {file.name}, the model needs "
                                 f"{tuple(value.shape)}")
        self.load_state_dict({**self.state_dict(), **{k: theirs[k].to(v.dtype)
                                                       for k, v in mine.items()}})
