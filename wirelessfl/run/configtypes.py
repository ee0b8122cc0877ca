"""The typed-config builder: YAML mappings into frozen dataclasses, every key and value checked.

This module imports nothing of :mod:`wirelessfl` but :mod:`wirelessfl.errors` and the data
of :mod:`wirelessfl.run.key_schema` (and the argument checks of
:mod:`channels.validation`), so every layer can describe its settings as
dataclasses: :func:`build_dataclass` checks keys (listing the valid ones), types (numbers
may be written in exponent notation, ``1e-3``; non-finite ones are refused), nested
dataclass sections, and nested algorithm sections (:class:`AlgorithmConfig`, e.g.
``inner: {name: fedprox, mu: 1}``), resolved through the lazy registry
(:mod:`wirelessfl.registry`) only when such a field is built.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

from channels.validation import as_float, as_int
from wirelessfl.errors import ConfigError, plugin_hint, short
from wirelessfl.run.key_schema import BEFORE, FROZEN, MOVED, REQUIRED

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def check_name(name: str, key: str = "name") -> str:
    """A run or task name usable in a folder name: no path separators, no leading dot.

    >>> check_name("fedavg-fmnist 0.5")
    'fedavg-fmnist 0.5'
    """
    ok = (isinstance(name, str) and 0 < len(name) <= 128 and name[0] not in ".- "
          and not any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in name))
    if not ok:
        raise ConfigError(f"{key} must be 1-128 characters without '/', '\\' or control "
                          f"characters, not starting with '.', '-' or a space; got {short(name)}")
    return name


def checked(prefix: str, **ranges: tuple) -> None:
    """Check named values against ranges: ``key=(value, lo, hi[, "open"])`` (None: unbounded).

    Integers are checked as integers, everything else as finite floats; the error names
    ``prefix.key`` and the received value.
    """
    for key, (value, lo, hi, *flags) in ranges.items():
        if value is None:
            continue
        try:
            if isinstance(value, int) and not isinstance(value, bool):
                as_int(f"{prefix}{key}", value, lo=lo, hi=hi)
            else:
                as_float(f"{prefix}{key}", value, lo=lo, hi=hi, lo_open="open" in flags)
        except ValueError as exc:
            raise ConfigError(str(exc).replace("`", "")) from None


@dataclass(frozen=True)
class AlgorithmConfig:
    """An algorithm's name and its resolved hyperparameters (its own HParams dataclass)."""

    name: str
    hparams: Any




def build_algorithm(raw: Any, key: str, kinds: tuple[str, ...] = ("rounds",)) -> AlgorithmConfig:
    """An :class:`AlgorithmConfig` from ``{name: ..., **hparams}``, looked up lazily.

    ``kinds`` limits which registered algorithms fit (round-based ``rounds``, simulated-time
    ``simulation``).
    """
    from wirelessfl import registry  # lazy: the registry imports algorithms on demand

    if not isinstance(raw, dict):
        raise ConfigError(f"'{key}' must be a mapping with a 'name', got {short(raw)}")
    raw = dict(raw)
    name = raw.pop("name", None)
    known = registry.names(*kinds)
    if not isinstance(name, str) or name not in known:
        raise ConfigError(f"unknown algorithm {short(name)} in '{key}'{plugin_hint('algorithm')}; "
                          "choose one of "
                          f"{', '.join(known)}")
    hparams_cls, _ = registry.get(name)
    return AlgorithmConfig(name, build_dataclass(hparams_cls, raw, key))


def algorithm_dict(cfg: AlgorithmConfig) -> dict[str, Any]:
    """``{name, **hparams}`` of an algorithm section (round-trips through :func:`build_algorithm`)."""
    return {"name": cfg.name, **{f.name: _plain(getattr(cfg.hparams, f.name))
                                 for f in dataclasses.fields(cfg.hparams)}}


def _plain(value: Any) -> Any:
    if isinstance(value, AlgorithmConfig):
        return algorithm_dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):  # a "flat" field's section sits at this level
            v = _plain(getattr(value, f.name))
            if f.metadata.get("flat"):
                out.update(v)
            else:
                out[f.name] = v
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {short(value)}")
    if tp is Any:
        return value
    if tp is AlgorithmConfig:
        return build_algorithm(value, key)
    if isinstance(tp, type) and callable(getattr(tp, "from_raw", None)):  # a section that sorts
        return tp.from_raw(value, key, build_dataclass)  # its own keys (the network's link model)
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, key)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key} must be a list, got {short(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], key) for v in value)
        if len(value) != len(args):
            raise ConfigError(f"{key} must have {len(args)} entries, got {short(value)}")
        return tuple(_coerce(v, a, key) for v, a in zip(value, args))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {short(value)}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {short(value)}")
        return value
    if tp in (int, float) and isinstance(value, str) and _NUMBER.match(value.strip()):
        value = float(value) if tp is float or not value.strip().lstrip("+-").isdigit() else int(value)
    if tp is int:
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            value = int(value)  # 1e3 written in exponent notation
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {short(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} must be a number, got {short(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{key} must be a finite number, got {value}")
        return float(value)
    if tp is str:
        if isinstance(value, bool):  # YAML 1.1 reads on/off/yes/no as booleans
            raise ConfigError(f"{key} must be a string, got {str(value).lower()} (YAML reads "
                              f"on/off/yes/no as true/false: quote the word, e.g. {key}: 'off')")
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {short(value)}")
        return value
    raise ConfigError(f"{key}: unsupported type {tp}")


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, evaluated once per class (read only).

    A paper-scale figure set resolves thousands of configs; evaluating the annotations each
    time was over half of ``load_figures``' time.
    """
    return typing.get_type_hints(cls)


def build_dataclass(cls: type, raw: Any, prefix: str, *, built: dict[str, Any] | None = None) -> Any:
    """Instantiate dataclass ``cls`` from mapping ``raw``, checking keys and types.

    The one config builder: every section (``data``, ``local``, an algorithm's HParams, a
    task) and every whole config (``prefix`` ``""``) is built here. Nested dataclasses and
    algorithm sections are built recursively (:func:`_coerce`); ``built`` gives fields the
    caller has built already (a multi-task run's tasks), which ``raw`` may not set.
    """
    if raw is None:
        raw = {}
    where = f"'{prefix}'" if prefix else "a config"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping, got {short(raw)}")
    built = built or {}
    hints = _type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in raw:
        if k not in names or k in built:
            valid = f"valid keys under '{prefix}'" if prefix else "valid top-level keys"
            raise ConfigError(f"unknown config key '{_key(prefix, str(k)[:40])}'; {valid}: "
                              f"{', '.join(sorted(names))}")
    kwargs = {k: _coerce(v, hints[k], _key(prefix, k)) for k, v in raw.items()}
    try:
        return cls(**kwargs, **built)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        msg = str(exc).replace("`", "")
        field_named = msg.split(" ", 1)[0].split("[", 1)[0] in names
        if not prefix:
            raise ConfigError(msg) from exc
        raise ConfigError(f"{prefix}.{msg}" if field_named else f"{prefix}: {msg}") from exc


def _key(prefix: str, name: str) -> str:
    """A dotted config key: ``name`` under ``prefix`` (at the top level when it is empty)."""
    return f"{prefix}.{name}" if prefix else name


def _lists(value: Any) -> Any:
    """Tuples (also nested ones) as lists, as YAML gives them back."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def key_view(value: Any, keep: frozenset[str] | dict[str, Any] = frozenset()) -> Any:
    """The plain mapping a run's key is the hash of: ``value`` less the defaults of new fields.

    ``value`` is a resolved config or any part of it (dataclasses, algorithm sections, lists,
    mappings). A field enters the view when its class had it when run keys were frozen
    (:data:`wirelessfl.run.key_schema.FROZEN`, generated once, never edited) or when it differs
    from its default. So adding a field with a default to any config, section or
    hyperparameter class leaves every existing run key alone, and the new field re-keys only
    the runs that set it. A frozen field no longer on its class (a setting that moved, such as
    a link model's own settings) enters with its frozen default, so moving a field re-keys
    nothing either. ``keep`` names fields that enter at any value (those a "flat" section
    writes at its parent's level, which the parent's frozen record has). A field whose
    default changed on purpose (:data:`~wirelessfl.run.key_schema.BEFORE`) enters unless it
    has the value runs made before it had.

    >>> from wirelessfl.run.config import resolve
    >>> key_view(resolve({"algorithm": {"name": "fedavg"}}))["network"]["model"]
    'none'
    """
    if isinstance(value, AlgorithmConfig):
        return {"name": value.name, **key_view(value.hparams)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        frozen = FROZEN.get(qualified_name(type(value)), {})
        before = BEFORE.get(qualified_name(type(value)), {})
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if f.metadata.get("flat"):  # a section written at its parent's level
                out.update(key_view(v, keep=frozen))
            elif f.name in before:  # a changed default: in the key unless as runs made before
                if _plain(v) != before[f.name]:
                    out[f.name] = key_view(v)
            elif f.name in frozen or f.name in keep or not has_default(f, v):
                out[f.name] = key_view(v)
        for name, default in frozen.items():
            if name not in out and default is not REQUIRED:
                out[name] = default
        return out
    if isinstance(value, dict):
        return {k: key_view(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [key_view(v) for v in value]
    return value


def plain(value: Any) -> Any:
    """A resolved config (or any part of it) as the plain mapping a config file writes."""
    return _lists(_plain(value))


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class, as :data:`wirelessfl.run.key_schema.FROZEN` names it.

    A class that moved module since the record goes by its recorded name
    (:data:`wirelessfl.run.key_schema.MOVED`).
    """
    name = f"{cls.__module__}.{cls.__qualname__}"
    return MOVED.get(name, name)


def has_default(f: dataclasses.Field, value: Any) -> bool:
    """Whether ``value`` is the default of dataclass field ``f`` (False when it has none)."""
    if f.default is not dataclasses.MISSING:
        return bool(value == f.default)
    if f.default_factory is not dataclasses.MISSING:
        return bool(value == f.default_factory())
    return False
