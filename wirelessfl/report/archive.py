"""Run archives: a report's finished runs in one file, published beside it and taken up again.

A report's run folders (``runs/<key>/``, :mod:`~wirelessfl.run.records`) hold checkpoints
of a megabyte or more each, so a published report copies its outputs, not its runs
(:func:`~wirelessfl.report.figures.publish`). What a finished run adds to a report is
small: its config, metadata, metric rows and summary (or its divergence record). An
archive, ``runs.jsonl.gz``, holds exactly those files' texts, one JSON line per run,
sorted by key and gzip-compressed without a time stamp (the same runs give the same bytes).

It serves two purposes:

- a published report can be re-drawn, and its verdicts re-checked, with no training
  (``wirelessfl figures ... --reuse DIR --render-only``);
- a figure's runs can be split over machines or sessions whose ``reports/`` folders do not
  survive: each publishes what it finished, the next takes those runs up with ``--reuse``
  and trains only the rest.

A restored run is checked as a run folder is on resume, before it is used: its config must
hash to its folder's key (so an archive can give a figure only the very runs it asks for),
its ``meta.json`` must name its seed, its rows must parse, and it must hold a summary or a
divergence record. It is written to a fresh folder beside ``runs/<key>`` and renamed into
place, so an interrupted restore leaves no half-written run; a run folder that exists is
never replaced. An archive is data only (JSON), read with limits on its size.

A run that stops at its target (``stop_at_target``) is also restored from the same run made
without stopping, when the archive holds that one and its kind can cut it
(:meth:`~wirelessfl.run.kinds.RunKind.cut_at_target`): a time-to-target figure takes its
points from the full curves another figure already ran. Its ``meta.json`` names the run it
was cut from (``cut_from``), and it is checked as any restored run is.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import yaml

from wirelessfl.errors import ConfigError, RunFolderError, parse_json, parse_yaml
from wirelessfl.report.spec import RunSpec, config_key
from wirelessfl.run.kinds import kind_of
from wirelessfl.run.records import RunRecord, parse_rows, row_line, summary_text, write_csv
from wirelessfl.run.safe_io import atomic_write, open_new, refuse_link

__all__ = ["ARCHIVE", "archive_runs", "read_archive", "restore_runs", "reusable"]

#: The archive's file name in a published report folder.
ARCHIVE = "runs.jsonl.gz"

#: The files of a run folder an archive keeps (the checkpoint and derived CSV are not kept).
KEPT = ("config.yaml", "meta.json", "metrics.jsonl", "summary.json", "diverged.json")

#: Most bytes an archive may expand to, and one run's line (a run of 10,000 rows is ~6 MB).
MAX_BYTES = 2 << 30
MAX_LINE = 256 << 20

_KEY = re.compile(r"[0-9a-f]{12}")


def _done(record: RunRecord) -> bool:
    """Whether a run folder holds a run that will not train again (finished or diverged)."""
    return record.exists() and (record.summary() is not None or record.diverged() is not None)


def _entry(folder: Path) -> dict[str, object]:
    """One archive line: a finished run folder's kept files, as text."""
    files = {}
    for name in KEPT:
        path = folder / name
        if path.is_file() and not path.is_symlink():
            files[name] = path.read_text()
    return {"key": folder.name, "files": files}


def read_archive(path: Path, keys: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """Key → files (name → text) of the runs in the archive ``path`` (only ``keys``, if given).

    Raises ConfigError, naming the archive and line, when it is not a readable archive: not
    gzip, a line that is not a run record, a key given twice, or larger than the limits.
    """
    refuse_link(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no run archive there ({ARCHIVE}, written by --publish)")
    wanted = None if keys is None else set(keys)
    out: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    for n, line in enumerate(_lines(path), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        files = entry.get("files") if isinstance(entry, dict) else None
        key = entry.get("key") if isinstance(entry, dict) else None
        if (not isinstance(key, str) or not _KEY.fullmatch(key) or not isinstance(files, dict)
                or not all(name in KEPT and isinstance(text, str)
                           for name, text in files.items())
                or "config.yaml" not in files):
            raise ConfigError(f"{path} line {n} is not a run record (damaged or edited); "
                              "publish the report again to rewrite it")
        if key in seen:
            raise ConfigError(f"{path} line {n}: run {key} is recorded twice; the archive was "
                              "edited - publish the report again to rewrite it")
        seen.add(key)
        if wanted is None or key in wanted:
            out[key] = files
    return out


def _lines(path: Path) -> Iterator[str]:
    """The archive's lines, decompressed, within :data:`MAX_BYTES` and :data:`MAX_LINE`."""
    total = 0
    try:
        with gzip.open(path, "rb") as fh:
            while line := fh.readline(MAX_LINE + 1):
                total += len(line)
                if len(line) > MAX_LINE or total > MAX_BYTES:
                    raise ConfigError(f"{path} expands beyond {MAX_BYTES >> 30} GiB or holds a "
                                      "run line over 256 MiB; it is not an archive this tool "
                                      "wrote")
                if line.strip():
                    yield line.decode()
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # gzip.BadGzipFile is an OSError
        raise ConfigError(f"{path} is not a readable run archive ({type(exc).__name__}); "
                          "publish the report again to rewrite it") from None


def archive_runs(root: Path, dest: Path) -> int:
    """Write ``dest``: the finished runs under ``root/runs`` and those ``dest`` held before.

    A run in both is taken from ``root``. Returns the number of runs archived (with none,
    nothing is written). An earlier ``dest`` that cannot be read is refused (ConfigError),
    not overwritten.
    """
    entries = {k: {"key": k, "files": f} for k, f in
               (read_archive(dest).items() if dest.exists() or dest.is_symlink() else ())}
    runs = root / "runs"
    if runs.is_dir() and not runs.is_symlink():
        for folder in sorted(runs.iterdir()):
            if (_KEY.fullmatch(folder.name) and folder.is_dir() and not folder.is_symlink()
                    and _done(RunRecord(folder))):
                entries[folder.name] = _entry(folder)
    if not entries:
        return 0
    text = "".join(json.dumps(entries[k], sort_keys=True) + "\n" for k in sorted(entries))
    data = gzip.compress(text.encode(), compresslevel=9, mtime=0)
    atomic_write(dest, lambda fh: fh.write(data))
    return len(entries)


def _uncut(run: RunSpec) -> str | None:
    """The key of ``run`` made without stopping at its target, when it stops at one."""
    raw = run.raw
    if raw.get("stop_at_target") is not True or raw.get("target_accuracy") is None:
        return None
    return config_key({**raw, "stop_at_target": False})


def _cut(files: dict[str, str], key: str) -> dict[str, str] | None:
    """A stopping run's kept files, cut from ``files``: its twin ``key``'s, made without stopping.

    None when the twin cannot give them: it diverged, did not finish, or its kind cannot
    cut (:meth:`~wirelessfl.run.kinds.RunKind.cut_at_target`).
    """
    if "summary.json" not in files or "diverged.json" in files or "metrics.jsonl" not in files:
        return None
    try:
        config = parse_yaml(files["config.yaml"], f"run {key}")
        rows = parse_rows(files["metrics.jsonl"], f"run {key}'s metrics.jsonl")
        meta = parse_json(files.get("meta.json", "{}"), f"run {key}")
    except (ConfigError, RunFolderError):
        return None  # the check of restore_runs names a damaged run; a twin is only a source
    if not (isinstance(config, dict) and isinstance(meta, dict)):
        return None
    config = {**config, "stop_at_target": True}
    kind = kind_of(config)
    try:
        got = kind.cut_at_target(kind.resolve(config), rows)
    except (ConfigError, KeyError, TypeError, ValueError):
        return None
    if got is None:
        return None
    kept, summary = got
    return {"config.yaml": yaml.safe_dump(config, sort_keys=False),
            "meta.json": json.dumps({**meta, "cut_from": key}, indent=2) + "\n",
            "metrics.jsonl": "".join(map(row_line, kept)), "summary.json": summary_text(summary)}


def _found(archive: Path, runs: dict[str, RunSpec]
           ) -> tuple[dict[str, dict[str, str]], set[str]]:
    """Key → kept files of the ``runs`` the archive holds or can cut, and the keys cut."""
    # twin key → the stopping run's key (they differ only in stop_at_target: one each)
    twins = {twin: key for key, run in runs.items() if (twin := _uncut(run)) is not None}
    held = read_archive(archive, [*runs, *twins]) if runs else {}
    found = {k: f for k, f in held.items() if k in runs}
    cut = set()
    for twin, key in twins.items():
        if key not in found and twin in held and (files := _cut(held[twin], twin)) is not None:
            found[key] = files
            cut.add(key)
    return found, cut


def reusable(archive: Path, runs: Iterable[RunSpec]) -> set[str]:
    """The keys of ``runs`` that :func:`restore_runs` would take from ``archive``."""
    return set(_found(archive, {r.key: r for r in runs})[0])


def restore_runs(runs: Iterable[RunSpec], root: Path, archive: Path, *,
                 log: Callable[[str], None] = print) -> int:
    """Restore the archived ones of ``runs`` whose folders under ``root/runs`` do not exist.

    Returns the number restored. ``archive`` is a run archive or a published report folder
    holding one. Each restored run is checked (module docstring); one that fails is a
    ConfigError naming it, and no folder of it is left behind. A run whose folder exists
    (finished, or interrupted and resumable), or a link, is left as it is.
    """
    archive = archive / ARCHIVE if archive.is_dir() and not archive.is_symlink() else archive
    todo = {r.key: r for r in runs  # no folder, nor a link (even a dangling one), there
            if not (root / "runs" / r.key).exists() and not (root / "runs" / r.key).is_symlink()}
    found, cut = _found(archive, todo)
    if found:
        refuse_link(root / "runs")
        (root / "runs").mkdir(parents=True, exist_ok=True)
    for key in sorted(found):
        spec, files = todo[key], found[key]
        tmp = Path(tempfile.mkdtemp(prefix=f".restoring-{key}-", dir=root / "runs"))
        try:
            for name, text in files.items():
                with open_new(tmp / name) as fh:
                    fh.write(text)
            record = RunRecord(tmp)
            try:
                config = record.config()
                rows = record.rows()
                record.check_meta(spec.seed)
                same = config_key(config) == key
            except (RunFolderError, ConfigError, ValueError) as exc:
                raise ConfigError(f"{archive}: run {spec.label} ({key}) is damaged: "
                                  f"{str(exc).splitlines()[0][:160]}") from None
            if not same or not _done(record):
                raise ConfigError(f"{archive}: run {spec.label} ({key}) "
                                  + ("holds a config of another run" if not same else
                                     "is neither finished nor diverged")
                                  + "; the archive was edited - nothing restored from it")
            write_csv(tmp / "metrics.csv", rows)
            tmp.rename(root / "runs" / key)  # fails, leaving the run there, if one appeared
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    if found:
        log(f"{len(found)} of {len(todo)} runs to do taken from {archive}"
            + (f" ({len(cut)} cut at their target from the same runs made without stopping)"
               if cut else ""))
    return len(found)
