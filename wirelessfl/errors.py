"""Errors of the FL side, and bounds on what a configuration may expand to.

This module imports nothing of the project, so every layer can raise these errors:

- :class:`ConfigError` — bad input (a key, a value, a file), found before anything is written;
- :class:`RunFolderError` — a run folder that is damaged, locked by another run, or holds
  files that no run of wirelessfl made (never overwritten);
- :class:`TrainingDiverged` — the loss or the model became NaN/Inf during training.

The command line prints each of them as one line and exits with code 2.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["ConfigError", "RunFolderError", "TrainingDiverged", "check_config_size", "short"]

#: Most nodes (mappings, lists and scalars, aliases counted each time they are used) a
#: configuration may hold; a YAML alias bomb expands far beyond it and is refused.
MAX_CONFIG_NODES = 200_000


_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxdict = 40, 40, 4, 4


def short(value: object) -> str:
    """A repr of ``value`` cut to a few dozen characters (error messages stay one short line)."""
    return _repr.repr(value)


class ConfigError(ValueError):
    """A configuration is invalid; the message names the key and what is allowed."""


class RunFolderError(ConfigError):
    """A run folder cannot be used as asked (damaged, locked, or not made by a run)."""


class TrainingDiverged(RuntimeError):
    """Training produced a NaN or infinite loss or model; the message says where."""


def check_config_size(raw: Any, where: str = "config", limit: int = MAX_CONFIG_NODES) -> None:
    """Refuse a configuration that expands to more than ``limit`` nodes.

    Shared sub-structures (YAML aliases) count every time they are reached, so the walk stops
    as soon as the count passes ``limit``: its cost is bounded whatever the input.
    """
    stack, seen = [raw], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            raise ConfigError(f"{where} expands to more than {limit} values (YAML aliases "
                              "repeated?); write a smaller configuration")
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
