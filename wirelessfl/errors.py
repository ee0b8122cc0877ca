"""Errors of the FL side, and bounds on what a configuration may expand to.

This module imports nothing of the project, so every layer can raise these errors:

- :class:`ConfigError` — bad input (a key, a value, a file), found before anything is written;
- :class:`RunFolderError` — a run folder that is damaged, locked by another run, or holds
  files that no run of wirelessfl made (never overwritten);
- :class:`TrainingDiverged` — the loss or the model became NaN/Inf during training.

The command line prints each of them as one line and exits with code 2; a command stopped by
Ctrl-C or SIGTERM ends through :func:`end_process`.
"""

from __future__ import annotations

import functools
import os
import reprlib
import sys
from typing import Any

from typing_extensions import override

__all__ = ["ConfigError", "RunFolderError", "TrainingDiverged", "check_config_size", "end_process",
           "short"]

#: Most nodes (mappings, lists and scalars, aliases counted each time they are used) a
#: configuration may hold; a YAML alias bomb expands far beyond it and is refused.
MAX_CONFIG_NODES = 200_000


_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxdict = 40, 40, 4, 4


def short(value: object) -> str:
    """A repr of ``value`` cut to a few dozen characters (error messages stay one short line)."""
    return _repr.repr(value)


def plugin_hint(what: str) -> str:
    """A note for an 'unknown ...' message, before its list: how to bring in one's own."""
    return (f" (your own {what}? pass --plugin MODULE_OR_FILE, a module that registers it; "
            "from Python, import that module first)")


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


#: Deepest nesting of lists and mappings a YAML or JSON text may have (parsers recurse).
MAX_NESTING = 64
#: Largest YAML or JSON text parsed at once [bytes].
MAX_TEXT_BYTES = 16 * 2**20


def check_nesting(text: str, where: str, limit: int = MAX_NESTING) -> None:
    """Refuse a YAML or JSON text nested deeper than ``limit`` before it is parsed.

    Flow nesting counts open brackets and braces; block nesting counts the indentation
    levels and the ``- `` markers that open a level on one line. Brackets inside strings
    count too (a text needs more than ``limit`` of them to be refused).
    """
    if len(text) > MAX_TEXT_BYTES:
        raise ConfigError(f"{where}: over {MAX_TEXT_BYTES // 2**20} MiB of text; give a smaller file")
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    if deepest <= limit:
        indents: list[int] = []
        for line in text.splitlines():
            body = line.lstrip(" ")
            if not body or body.startswith("#"):
                continue
            indent = len(line) - len(body)
            while indents and indents[-1] >= indent:
                indents.pop()
            indents.append(indent)
            dashes = len(body) - len(body.lstrip("- "))
            deepest = max(deepest, len(indents) + dashes // 2)
    if deepest > limit:
        raise ConfigError(f"{where}: nested more than {limit} levels deep; flatten it")


@functools.cache
def _safe_loader() -> type:
    """The safe YAML loader (libyaml's where PyYAML has it), refusing repeated keys.

    YAML requires the keys of a mapping to be unique; PyYAML keeps the last of a repeated
    one silently, so ``rounds: 5`` followed later by ``rounds: 50`` would run 50 rounds with
    no word. Merge keys (``<<: *base``) may still be overridden, as YAML intends.
    """
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class UniqueKeyLoader(base):  # type: ignore[misc, valid-type]
        @override
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=deep)
                    try:
                        repeated = key in seen
                    except TypeError:  # unhashable: the base class says so
                        continue
                    if repeated:
                        raise _RepeatedKey(key, key_node.start_mark.line + 1, seen[key])
                    seen[key] = key
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


class _RepeatedKey(Exception):
    """A mapping of a YAML document gives one key twice."""

    def __init__(self, key: object, line: int, first: object = None) -> None:
        super().__init__(key, line)
        self.key, self.line, self.first = key, line, first


def parse_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` with bounded size and nesting; a ConfigError of one line.

    Through libyaml's safe loader (``yaml.CSafeLoader``: the same constructors, several
    times faster) where PyYAML was built with it; a paper-scale figure set parses tens of
    thousands of override values. A key given twice in one mapping is refused (YAML asks
    for unique keys; PyYAML would keep the last one without a word).
    """
    import yaml

    check_nesting(text, where)
    try:
        return yaml.load(text, Loader=_safe_loader())
    except _RepeatedKey as exc:
        if type(exc.first) is not type(exc.key):  # 1 and true, 1 and 1.0: one key to Python
            raise ConfigError(f"{where}: keys {short(exc.first)} and {short(exc.key)} (line "
                              f"{exc.line}) are one key once read (Python counts true as 1 and 1.0 "
                              "as 1); use other keys") from None
        raise ConfigError(f"{where}: key {short(exc.key)} is given twice in one mapping (the "
                          f"second at line {exc.line}); keep one") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({type(exc).__name__})") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply; flatten it") from None


def parse_json(text: str, where: str) -> Any:
    """``json.loads(text)`` with bounded size and nesting; a ConfigError of one line."""
    import json

    check_nesting(text, where)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ConfigError(f"{where}: not valid JSON ({str(exc)[:80]})") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply; flatten it") from None


#: Exit codes of a command stopped by Ctrl-C (130) or SIGTERM (143).
STOPPED = (130, 143)


def end_process(code: int) -> None:
    """Exit the process with ``code``; a stopped command skips the interpreter's finalisation.

    After Ctrl-C or SIGTERM the command has said its one line and left every run folder
    resumable. A native thread of PyTorch's that is still joinable when C++'s static objects
    are destroyed aborts the process ("terminate called without an active exception",
    SIGABRT in place of 143): measured 1 in 6 to 1 in 25 SIGTERMs of a lockstep group with
    ``CI`` set, after every run's thread had been joined. So a stopped process flushes its
    streams and ends at once (``os._exit``); any other ends normally.
    """
    if code in STOPPED:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed, or None after a broken pipe
                pass
        os._exit(code)
    sys.exit(code)
