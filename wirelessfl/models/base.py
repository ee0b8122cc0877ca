"""Models with declared partitionable hidden units.

HIST (``docs/papers/hist.md`` §1.3) and RA-Fed (``docs/papers/rafed.md`` §2.1) train *submodels*: a
hidden unit is kept or dropped together with every parameter it owns (its row of incoming
weights, its bias, its column of outgoing weights). Each model here declares those
ownerships as :class:`UnitGroup` objects, so an algorithm can slice a submodel out of the
global parameters and write it back (:mod:`wirelessfl.server.submodel`) without knowing the
architecture.

Models are used functionally: parameters live in a ``dict[str, Tensor]`` (:data:`Params`)
and the forward pass is ``torch.func.functional_call(model, params, x)``. A sliced
submodel is just a dict of smaller tensors, since linear and conv layers take their sizes
from the tensors they are given.

A model with a representation (MOON's z: the penultimate ReLU layer, or the pooled ResNet
features) takes ``features``: ``False`` gives the logits, ``True`` the pair (logits, z),
``"only"`` z alone, without running the head (MOON's frozen anchor models need only z).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class UnitSlice:
    """A parameter owned by a unit group along one dimension.

    Attributes
    ----------
    param : str
        Parameter name (as in ``named_parameters``).
    dim : int
        Dimension along which units index the parameter (0 = outputs of the layer
        the units belong to, 1 = inputs of the next layer). Only 0 and 1 are allowed.
    width : int
        Entries per unit along ``dim``: 1 for a neuron; H·W when the next layer reads a
        flattened conv channel.
    blocks : int
        Blocks of the group's size stacked along ``dim``, each holding one slot per unit:
        4 for an LSTM's gate rows (i, f, g, o), so hidden unit j owns rows j, H + j, 2H + j
        and 3H + j (``docs/papers/rafed.md`` §2.1.1: the same index in every gate block).
    """

    param: str
    dim: int
    width: int = 1
    blocks: int = 1

    def __post_init__(self) -> None:
        if self.dim not in (0, 1):
            raise ValueError(f"UnitSlice.dim must be 0 or 1, got {self.dim}")
        if self.width < 1 or self.blocks < 1:
            raise ValueError("UnitSlice.width and .blocks must be >= 1")


@dataclass(frozen=True)
class UnitGroup:
    """A layer's hidden units and the parameters each of them owns.

    Attributes
    ----------
    name : str
        Group name (usually the layer name).
    size : int
        Number of units K in the layer.
    slices : tuple of UnitSlice
        Every parameter slice a unit owns.
    multiple : int
        A submodel keeps a multiple of this many units (2 for channels under GroupNorm(2)).
    """

    name: str
    size: int
    slices: tuple[UnitSlice, ...]
    multiple: int = 1

    def params_per_unit(self, shapes: dict[str, torch.Size]) -> int:
        """Parameters one unit owns (q in ``docs/papers/hist.md`` §4.3)."""
        total = 0
        for s in self.slices:
            shape = shapes[s.param]
            total += s.blocks * s.width * int(torch.Size(shape).numel()) // int(shape[s.dim])
        return total


class FLModel(nn.Module):
    """Base class: a module that declares its partitionable units.

    Subclasses set ``unit_groups`` (all partitionable groups, input side first) and
    ``hist_groups`` (the groups HIST splits by default: the FC hidden layers, every second
    hidden layer for deeper MLPs, ``docs/papers/hist.md`` §1.3(c, d)). ``paper_volumes`` =
    (size MB, vol_c, vol_f) of HIST's uplink accounting (§6.6), where the paper's numbers
    differ from the parameter count (LeNet-5, CIFAR CNN).
    """

    unit_groups: tuple[UnitGroup, ...] = ()
    hist_groups: tuple[str, ...] = ()
    paper_volumes: tuple[float, int, int] | None = None

    def params(self) -> Params:
        """A detached copy of the trainable parameters (what clients train and send)."""
        return {k: v.detach().clone() for k, v in self.named_parameters() if v.requires_grad}

    def activation_bytes(self, batch_size: int, sample_bytes: int) -> int:
        """Bytes one client's training step keeps for its backward pass, estimated.

        The batched engine sizes its chunks of stacked clients by it (with the parameters'
        copies). Default: four times the mini-batch (inputs and the activations of a small
        network); a model whose activations are far larger than its inputs (a transformer)
        overrides it.
        """
        return 4 * batch_size * sample_bytes

    def buffers_state(self) -> Params:
        """A detached copy of the buffers (BatchNorm running statistics), empty if none.

        Clients update their own copy in training; the server averages them (plain mean,
        ``docs/papers/fadamgc.md`` §2.8). Frozen parameters (``requires_grad=False``, e.g. a LoRA base)
        stay in the module: no client trains or sends them.
        """
        return {k: v.detach().clone() for k, v in self.named_buffers()}

    def group(self, name: str) -> UnitGroup:
        """The unit group called ``name``."""
        for g in self.unit_groups:
            if g.name == name:
                return g
        raise ValueError(f"{type(self).__name__} has no unit group {name!r}; "
                         f"it has {[g.name for g in self.unit_groups]}")


def linear_group(name: str, size: int, nxt: str, width: int = 1) -> UnitGroup:
    """Units of linear/conv layer ``name`` whose outputs feed layer ``nxt``."""
    return UnitGroup(name, size, (UnitSlice(f"{name}.weight", 0), UnitSlice(f"{name}.bias", 0),
                                  UnitSlice(f"{nxt}.weight", 1, width)))


def check_tree(name: str, tree: object, like: Params | None = None, *,
               finite: bool = True, floating: bool = False) -> Params:
    """``tree`` checked as a parameter tree: a mapping of names to tensors.

    With ``like``, the names, every shape and every dtype kind (floating or not) must match
    it exactly (no broadcasting); with ``finite``, floating entries must be finite; with
    ``floating``, every entry must be a floating tensor. Raises TypeError/ValueError naming
    ``name``.
    """
    if not isinstance(tree, dict):
        raise TypeError(f"`{name}` must be a mapping of parameter names to tensors, got "
                        f"{type(tree).__name__}")
    for k, v in tree.items():
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"`{name}`[{str(k)[:40]!r}] must be a tensor, got {type(v).__name__}")
        if floating and not v.is_floating_point():
            raise TypeError(f"`{name}`[{str(k)[:40]!r}] must be a floating tensor, got {v.dtype}")
    if like is not None:
        if set(tree) != set(like):
            extra, missing = sorted(set(tree) - set(like)), sorted(set(like) - set(tree))
            raise ValueError(f"`{name}` has keys {'+' + str(extra[:2]) if extra else ''}"
                             f"{' -' + str(missing[:2]) if missing else ''} that differ from the "
                             "model's; give one tensor per parameter")
        for k, v in tree.items():
            if tuple(v.shape) != tuple(like[k].shape):
                raise ValueError(f"`{name}`[{k!r}] has shape {tuple(v.shape)}, the parameter "
                                 f"{tuple(like[k].shape)}")
            if v.is_floating_point() != like[k].is_floating_point():
                raise TypeError(f"`{name}`[{k!r}] has dtype {v.dtype}, the parameter "
                                f"{like[k].dtype}")
    if finite:
        bad = [k for k, v in tree.items() if v.is_floating_point() and not v.is_meta
               and not bool(torch.isfinite(v).all())]
        if bad:
            raise ValueError(f"`{name}`[{bad[0]!r}] holds NaN or Inf")
    return tree
