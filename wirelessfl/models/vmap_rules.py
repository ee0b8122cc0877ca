"""A layer's own ``vmap`` rule, called on the stacked tensors without PyTorch's generic route.

Under ``torch.func.vmap`` (the batched client engine), ``Function.apply`` of an
``autograd.Function`` that has a ``vmap`` staticmethod reaches that rule through functorch's
dispatcher: the operands are flattened and unwrapped as pytrees, the rule runs one level down,
and the outputs are wrapped back (``custom_function_call_vmap_helper``). That generic route
costs tens to hundreds of microseconds of Python per call, which a stacked step pays for
every layer: on 2 cores, 30 stacked FCNN clients spent about 0.8 ms of a 10.5 ms step there.

:func:`apply` takes the same steps for the one case the engine meets, the current
transform being a ``vmap``: it unwraps each tensor operand at that level (PyTorch's
``_unwrap_batched``), calls the rule with the vmap interpreter lowered, exactly as the
generic route does, and wraps each output at its out-dim. Everything else (no transform
active, another transform on top, nothing batched at this level, tracing by
``torch.compile``, a PyTorch without these internals) goes to ``Function.apply``. The
results, gradients included, are those of ``Function.apply`` (tested bit for bit).
``benchmarks/engine.py``: the FCNN HFedAvg round 2.36 → 2.18 s on 2 cores (with the dropout
masks' direct call, :func:`wirelessfl.models.noise.keep_mask`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

try:  # functorch's internals, as PyTorch's own generic route uses them
    from torch._C._functorch import _add_batch_dim, _unwrap_batched, peek_interpreter_stack
    from torch._functorch.autograd_function import VmapInfo
    from torch._functorch.pyfunctorch import TransformType, retrieve_current_functorch_interpreter
except ImportError:  # pragma: no cover - a PyTorch without them: the generic route always
    peek_interpreter_stack = None

__all__ = ["apply", "call_rule", "vmap_interpreter"]


def _tracing() -> bool:
    """Whether ``make_fx`` is recording (:mod:`wirelessfl.engine.replay`): PyTorch's route then."""
    try:
        return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY) is not None
    except AttributeError:  # pragma: no cover - a PyTorch without dispatch-mode keys
        return False


def vmap_interpreter() -> Any | None:
    """The active ``vmap`` interpreter if a ``vmap`` is the current transform, else None."""
    if peek_interpreter_stack is None or peek_interpreter_stack() is None:
        return None
    if torch.compiler.is_compiling() or _tracing():
        return None
    interpreter = retrieve_current_functorch_interpreter()
    return interpreter if interpreter.key() == TransformType.Vmap else None


def call_rule(rule: Callable[..., tuple[Any, Any]], args: Sequence[Any],
              fallback: Callable[..., Any]) -> Any:
    """``rule(info, in_dims, *stacked_args)`` under the current ``vmap``, else ``fallback(*args)``.

    ``rule`` returns ``(outputs, out_dims)`` as an ``autograd.Function``'s ``vmap``
    staticmethod does (a tensor and an int or None, or tuples of them).
    """
    interpreter = vmap_interpreter()
    if interpreter is None:
        return fallback(*args)
    level = interpreter.level()
    stacked, dims = [], []
    for a in args:
        p, d = _unwrap_batched(a, level) if isinstance(a, torch.Tensor) else (a, None)
        stacked.append(p)
        dims.append(d)
    if all(d is None for d in dims):  # nothing batched at this level
        return fallback(*args)
    info = VmapInfo(batch_size=interpreter.batch_size(), randomness=interpreter.randomness())
    with interpreter.lower():
        out, out_dims = rule(info, tuple(dims), *stacked)

    def wrap(o: Any, d: int | None) -> Any:
        for a, p in zip(args, stacked):  # an operand given back: the operand itself
            if o is p:
                return a
        return o if d is None or not isinstance(o, torch.Tensor) else _add_batch_dim(o, d, level)

    if isinstance(out, tuple):
        dims_out = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(out)
        return tuple(wrap(o, d) for o, d in zip(out, dims_out))
    return wrap(out, out_dims)


def apply(fn: type[torch.autograd.Function], *args: Any) -> Any:
    """``fn.apply(*args)``; under ``vmap``, ``fn.vmap`` called directly (module docstring)."""
    return call_rule(fn.vmap, args, fn.apply)
