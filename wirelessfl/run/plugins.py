"""A researcher's own code from the command line: plug-ins named with ``--plugin``.

A plug-in is a Python module (``--plugin mypkg.fedclip``, importable from ``sys.path``) or
a ``.py`` file (``--plugin ./fedclip.py``) that registers algorithms, local rules, models,
datasets or link models when imported (``wirelessfl.register_algorithm(...)``,
``register_link``, ...). An installed package may register itself instead under the
entry-point group :data:`ENTRY_GROUP` (``[project.entry-points."wirelessfl.plugins"]``), as
pytest and flake8 plug-ins do: those load whenever the command runs.

Code runs only because the user named it on the command line or installed it: a config
file or a run folder never causes an import. A run folder records the plug-ins its run was
made with (``meta.json``: ``plugins``, and ``entry_points`` with each package's version),
so ``--resume`` without them says in one line which ``--plugin`` to pass, unless the run's
names are now provided otherwise (an installed package of the same plug-in): then it says
which it used. Worker processes (``--jobs``, Ray tasks) load the same plug-ins: the
command passes them in the environment variable :data:`ENV`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from wirelessfl.errors import ConfigError, short

#: The entry-point group an installed package registers its plug-in under.
ENTRY_GROUP = "wirelessfl.plugins"
#: Plug-ins of this command, for its worker processes (``os.pathsep``-separated).
ENV = "WIRELESSFL_PLUGINS"
#: Loaded plug-ins: their spec as recorded (a module name, or a file's absolute path).
_LOADED: list[str] = []
#: Loaded entry points, as a run folder records them: name, value, package and its version.
_ENTRY: list[dict[str, str]] = []


def loaded() -> list[str]:
    """The plug-ins loaded in this process, as a run folder records them."""
    return list(_LOADED)


def entry_points_loaded() -> list[dict[str, str]]:
    """The installed plug-ins (entry points) loaded in this process, as a run records them.

    Each is ``{"entry_point", "value", "package", "version"}``.
    """
    return [dict(e) for e in _ENTRY]


def load_plugins(specs: list[str] | tuple[str, ...]) -> list[str]:
    """Import each plug-in (a module name or a ``.py`` file); the specs as recorded.

    Raises :class:`~wirelessfl.errors.ConfigError` (one line) for a plug-in that cannot be
    found or fails while importing. Loading one twice imports it once. The specs are also
    put in :data:`ENV`, so the command's worker processes load them too.
    """
    if isinstance(specs, str) or not isinstance(specs, (list, tuple)):
        raise ConfigError(f"plug-ins must be a list of module names or .py files, got "
                          f"{short(specs)}")
    out = [_load(spec) for spec in specs]
    os.environ[ENV] = os.pathsep.join(_LOADED)
    return out


def load_from_env() -> list[str]:
    """Load the plug-ins the parent command named (:data:`ENV`); a worker's first step."""
    specs = [s for s in os.environ.get(ENV, "").split(os.pathsep) if s]
    return load_plugins(specs) if specs else []


def load_entry_points() -> list[str]:
    """Load the installed packages' plug-ins (group :data:`ENTRY_GROUP`); their names.

    An entry point names a module (imported) or a callable (called with no arguments).
    """
    from importlib.metadata import entry_points

    names = []
    for ep in entry_points(group=ENTRY_GROUP):
        record = {"entry_point": str(ep.name), "value": str(ep.value),
                  "package": str(getattr(getattr(ep, "dist", None), "name", None) or "?"),
                  "version": str(getattr(getattr(ep, "dist", None), "version", None) or "?")}
        if record in _ENTRY:  # loaded by this process already (a worker's second call)
            names.append(ep.name)
            continue
        try:
            target = ep.load()
            if callable(target):
                target()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of the user's package
            raise ConfigError(f"the installed plug-in {ep.name!r} ({ep.value}) failed to load: "
                              f"{type(exc).__name__}: {str(exc)[:160]}; fix or uninstall it"
                              ) from None
        _ENTRY.append(record)
        names.append(ep.name)
    return names


def load_in_worker() -> None:
    """A worker process's first step: the installed plug-ins and the command's (:data:`ENV`).

    Module-level, so a spawned process (``--jobs``, Ray, the distributed engine's ranks) can
    be handed it.
    """
    load_entry_points()
    load_from_env()


def describe_entry_points() -> str:
    """``clip (clipavg-pkg 0.1)``, ...: the loaded entry points, for a message."""
    return ", ".join(f"{e['entry_point']} ({e['package']} {e['version']})" for e in _ENTRY)


def missing(recorded: Any) -> list[str]:
    """The recorded plug-ins (a run folder's ``meta.json``) not loaded in this process.

    A recorded plug-in file that no longer exists where it was (moved) counts as loaded when
    a loaded plug-in file has its name: ``--plugin NEW/PATH/name.py`` resumes such a run.
    """
    if not isinstance(recorded, list):
        return []
    names = {Path(s).name for s in _LOADED if s.endswith(".py")}
    return [s for s in recorded if isinstance(s, str) and s not in _LOADED
            and not (s.endswith(".py") and not Path(s).exists() and Path(s).name in names)]


def _load(spec: Any) -> str:
    if not isinstance(spec, str) or not spec.strip() or "\x00" in spec:
        raise ConfigError(f"--plugin must name a module or a .py file, got {short(spec)}")
    spec = spec.strip()
    path = Path(spec).expanduser()
    if spec.endswith(".py") or os.sep in spec or (os.altsep and os.altsep in spec):
        if not path.is_file() or path.suffix != ".py":
            raise ConfigError(f"--plugin {short(spec)}: no such .py file; pass a module name "
                              "or the path of a Python file")
        key = str(path.resolve())
        if key not in _LOADED:
            digest = hashlib.sha1(key.encode()).hexdigest()[:10]
            name = f"wirelessfl_plugin_{path.stem if path.stem.isidentifier() else 'file'}_{digest}"
            module_spec = importlib.util.spec_from_file_location(name, key)
            if module_spec is None or module_spec.loader is None:
                raise ConfigError(f"--plugin {short(spec)}: cannot be loaded as a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module  # its classes pickle to worker processes by this name
            _run(spec, lambda: module_spec.loader.exec_module(module), name)
            _LOADED.append(key)
        return key
    if not all(part.isidentifier() for part in spec.split(".")):
        raise ConfigError(f"--plugin {short(spec)}: not a module name (dotted identifiers) "
                          "nor a .py file")
    if spec not in _LOADED:
        if importlib.util.find_spec(spec.split(".")[0]) is None:
            raise ConfigError(f"--plugin {spec}: no module of that name on the Python path; "
                              "install it, add its folder to PYTHONPATH, or pass its .py file")
        _run(spec, lambda: importlib.import_module(spec), None)
        _LOADED.append(spec)
    return spec


def _run(spec: str, load: Any, name: str | None) -> None:
    """Import a plug-in: its own errors become one line naming it."""
    try:
        load()
    except ConfigError:
        raise
    except SystemExit as exc:  # sys.exit() at import would end the command silently
        if name is not None:
            sys.modules.pop(name, None)
        raise ConfigError(f"--plugin {short(spec)} called sys.exit({short(exc.code)}) while "
                          "importing; a plug-in must only define and register things") from None
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises
        if name is not None:
            sys.modules.pop(name, None)
        if _ENTRY and "registered already" in str(exc):  # the package of the same code
            raise ConfigError(f"--plugin {short(spec)} registers a name the installed "
                              f"plug-in(s) {describe_entry_points()} registered already "
                              f"({str(exc)[:80]}): drop --plugin to use the installed one (a "
                              "run made with the file resumes without it)") from None
        raise ConfigError(f"--plugin {short(spec)} failed while importing: "
                          f"{type(exc).__name__}: {str(exc)[:200]}") from None
