"""A CPU stand-in for a GPU's device boundary, so that device bugs are caught without a GPU.

On a GPU run, two kinds of memory meet: the compute device (the executor's stacks, the
server's model) and the host (the client store of :mod:`wirelessfl.engine.client_store`,
RAM-Fed's memories, a test's tasks built on the CPU). An operation that mixes a host tensor
with a device tensor raises on CUDA ("Expected all tensors to be on the same device"),
and a host tensor indexed by device indices raises too. On the CPU both are the same
memory, so such a bug passes every CPU test and first shows on a GPU.

:func:`guarded` turns a CPU run into a two-place run:

- the compute device is :data:`DEVICE` (``cpu:0``, an indexed CPU device: the same memory,
  but a device object of its own), which the tests hand the executors;
- tensors the client store keeps (:func:`~wirelessfl.engine.client_store.store`), tensors
  made without a ``device`` argument (``torch.zeros(shape)``: on a GPU run, CPU memory),
  tensors sent to ``"cpu"`` (``.cpu()``, ``.to("cpu")``) and tensors a test marks with
  :func:`host` are :class:`HostTensor` s; a device tensor's ``.device`` reads
  :data:`DEVICE`, a host tensor's ``cpu``, so ``torch.zeros(n, device=t.device)`` and
  ``.to(t.device)`` land where ``t`` is;
- a :class:`HostTensor` moved with ``.to(DEVICE)`` (or ``.to(t)``/``.to(t.device)`` for a
  device tensor ``t``, as :func:`~wirelessfl.engine.client_store.load` does) becomes a
  plain tensor; every other operation keeps it on the host;
- an operation that takes a non-scalar :class:`HostTensor` together with a plain tensor
  raises :class:`DeviceMismatch`, as CUDA would (0-dim host tensors may join device
  operations, as CPU scalars may on CUDA; a device tensor may be indexed by host indices,
  and ``copy_`` crosses over, as on CUDA).

:func:`check` is the boundary check the engine runs on what reaches a rule's
``client_final``, the aggregation and the client store: every tensor of a tree on the
compute device (and, in a guarded run, not a :class:`HostTensor`).

Outside :func:`guarded` nothing changes: the store keeps plain tensors and :func:`check`
compares real devices only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

#: The compute device of a guarded CPU run: the CPU, as a device object of its own.
DEVICE = torch.device("cpu", 0)

_ACTIVE = False


class DeviceMismatch(RuntimeError):
    """A host tensor met a compute-device tensor (what CUDA refuses)."""


def active() -> bool:
    """Whether a guarded run is in progress."""
    return _ACTIVE


#: Factories whose result, made without a ``device``, is in host memory on a GPU run.
_FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.tensor, torch.as_tensor,
              torch.arange, torch.linspace, torch.rand, torch.randn, torch.randint,
              torch.from_numpy}


_DEVICE_OF = torch.Tensor.device  # the descriptor behind ``t.device``


class _HostFactories(torch.overrides.TorchFunctionMode):
    """Tensors made with no ``device`` (``torch.zeros(shape)``) are host tensors, as on a GPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__self__", None) is _DEVICE_OF:  # device tensors: DEVICE; the host: cpu
            return DEVICE if not isinstance(args[0], HostTensor) else torch.device("cpu")
        out = func(*args, **kwargs)
        if not isinstance(out, torch.Tensor) or isinstance(out, HostTensor) or out.dim() == 0:
            return out
        if ((func in _FACTORIES and kwargs.get("device") is None)
                or func is torch.Tensor.cpu
                or (func is torch.Tensor.to and _names_host(args, kwargs))):
            return out.as_subclass(HostTensor)
        return out


def _names_host(args: tuple, kwargs: Mapping[str, Any]) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names the host (``"cpu"``, not :data:`DEVICE`)."""
    for a in (*args[1:], kwargs.get("device")):
        if isinstance(a, (str, torch.device)):
            try:
                d = torch.device(a)
            except RuntimeError:
                return False
            return d.type == "cpu" and d != DEVICE
        if isinstance(a, torch.Tensor):
            return isinstance(a, HostTensor)
    return False


@contextlib.contextmanager
def guarded() -> Iterator[torch.device]:
    """Within the block, host and compute device are two places; yields :data:`DEVICE`.

    Build the model and the data before the block (they are the device's); within it,
    tensors made without a ``device`` argument are host tensors, as they are on a GPU.
    """
    global _ACTIVE
    before, _ACTIVE = _ACTIVE, True
    try:
        with _HostFactories():
            yield DEVICE
    finally:
        _ACTIVE = before


def _moves_to_device(args: tuple, kwargs: Mapping[str, Any]) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names the compute device (or a device tensor)."""
    for a in (*args[1:], kwargs.get("device"), kwargs.get("other")):
        if isinstance(a, torch.Tensor) and not isinstance(a, HostTensor):
            return True
        if isinstance(a, (str, torch.device)):
            try:
                return torch.device(a) == DEVICE
            except RuntimeError:
                return False
    return False


#: Operations through which a device tensor may read host *indices* (as CUDA allows).
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.index_select,
             torch.index_select, torch.Tensor.index_put_, torch.Tensor.index_add_}


def _allowed(func, args: tuple, hosts: list[torch.Tensor]) -> bool:
    """Whether CUDA would take these host tensors into ``func`` on a device tensor."""
    if func is torch.Tensor.copy_:
        return True
    return (func in _INDEXING and bool(args) and not isinstance(args[0], HostTensor)
            and all(not (t.is_floating_point() or t.is_complex()) for t in hosts))


class HostTensor(torch.Tensor):
    """A tensor in host memory during a :func:`guarded` run (see the module docstring)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.to, torch.Tensor.cuda) and (
                func is torch.Tensor.cuda or _moves_to_device(args, kwargs)):
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            return out.as_subclass(torch.Tensor) if isinstance(out, torch.Tensor) else out
        with torch._C.DisableTorchFunctionSubclass():  # looking at them must not recurse
            leaves = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            hosts = [t for t in leaves if isinstance(t, HostTensor) and t.dim() > 0]
            devices = [t for t in leaves if not isinstance(t, HostTensor)]
        if hosts and devices and not _allowed(func, args, hosts):
            raise DeviceMismatch(
                f"Expected all tensors to be on the same device: {getattr(func, '__name__', func)} "
                f"takes a host tensor of shape {tuple(hosts[0].shape)} with a compute-device "
                f"tensor of shape {tuple(devices[0].shape)} (device guard; on a GPU this is "
                "cuda and cpu: move the host tensor with .to(device) first)")
        out = super().__torch_function__(func, types, args, kwargs)
        if devices:  # host scalars or host indices into a device tensor: the result is on the device
            with torch._C.DisableTorchFunctionSubclass():
                out = tree_map(lambda t: t.as_subclass(torch.Tensor)
                               if isinstance(t, HostTensor) else t, out)
        return out


def host(tree: Any) -> Any:
    """``tree`` (a tensor, or a mapping of them) marked as host memory in a guarded run."""
    if isinstance(tree, torch.Tensor):
        return tree.as_subclass(HostTensor) if _ACTIVE else tree
    return {k: host(v) for k, v in tree.items()}


def is_host(t: torch.Tensor) -> bool:
    """Whether ``t`` is a :class:`HostTensor`."""
    return isinstance(t, HostTensor)


def check(tree: Mapping[str, Any] | None, device: torch.device | str, where: str) -> None:
    """Raise :class:`DeviceMismatch` unless every tensor of ``tree`` is on ``device``.

    ``where`` names the boundary (``"FedDyn's client_final"``, ``"aggregation"``) for the
    message. Nested mappings are walked; non-tensors are skipped. A device without an
    index matches any index of its type (``cuda`` matches ``cuda:0``).
    """
    if not tree:
        return
    want = torch.device(device)
    for k, v in tree.items():
        if isinstance(v, Mapping):
            check(v, want, f"{where}[{k!r}]")
        elif isinstance(v, torch.Tensor):
            got = v.device
            wrong = (is_host(v) or got.type != want.type
                     or (want.index is not None and got.index is not None and got.index != want.index))
            if wrong:
                place = "host (client store)" if is_host(v) else str(got)
                raise DeviceMismatch(f"{where}: tensor {k!r} is on the {place}, expected {want}; "
                                     "move it with .to(device) before it leaves the rule")
