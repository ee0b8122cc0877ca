"""Lazy package exports: the public names of a package, imported on first use.

A package's ``__init__`` lists ``name → module`` (or ``name → (module, attribute)``) and gets
``__getattr__``/``__dir__`` from :func:`lazy_exports` (PEP 562), so ``import wirelessfl``
loads nothing heavy and never pulls a higher layer into a lower one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, namespace: dict[str, Any],
                 exports: dict[str, str | tuple[str, str]]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package`` exporting ``exports`` lazily.

    Examples
    --------
    >>> ns = {}
    >>> getattr_, _ = lazy_exports("demo", ns, {"sqrt": "math", "tau2": ("math", "tau")})
    >>> getattr_("sqrt")(9.0), round(getattr_("tau2"), 2)
    (3.0, 6.28)
    >>> getattr_("nope")
    Traceback (most recent call last):
    ...
    AttributeError: module 'demo' has no attribute 'nope'
    """
    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = (where, name) if isinstance(where, str) else where
        value = getattr(importlib.import_module(module), attribute)
        namespace[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
