"""Regenerate a paper's figures and tables, or a user's sweep: train what is missing, then render.

``wirelessfl figures <paper> [--scale] [--only]`` and ``wirelessfl sweep``. A figure's runs
(:mod:`~wirelessfl.report.spec`) are trained by the local executor
(:mod:`~wirelessfl.report.local`) or as Ray tasks (:mod:`~wirelessfl.report.ray_executor`),
then drawn by the renderer of its kind (:mod:`~wirelessfl.report.renderers`) into the report
folder with a ``README.md`` listing every output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wirelessfl.errors import parse_yaml, short
from wirelessfl.report.archive import ARCHIVE, archive_runs, restore_runs
from wirelessfl.report.claims import Verdict, check_claim, per_seed_rows
from wirelessfl.report.local import check_hooks, execute_local
from wirelessfl.report.metrics import diverged
from wirelessfl.report.ray_executor import RayOptions, execute_ray
from wirelessfl.report.renderers import RENDERERS, figure_style
from wirelessfl.report.spec import (
    Figure,
    RunSpec,
    budget_here,
    check_seeds,
    first_repeated,
    load_figures,
    missing_runs,
    override_pairs,
    run_folder,
    show_value,
)
from wirelessfl.report.tables import write_csv, write_text
from wirelessfl.run.config import ConfigError, apply_overrides
from wirelessfl.run.kinds import canonical
from wirelessfl.run.records import RunRecord
from wirelessfl.run.safe_io import atomic_write, open_new, refuse_link


def execute(runs: list[RunSpec], root: Path, *, quiet: bool = False,
            log: Callable[[str], None] = print, jobs: int = 1, ray: RayOptions | None = None,
            batch_runs: int | None = None) -> None:
    """Train (or resume) every run in ``runs``: locally ``jobs`` at a time, or as Ray tasks.

    A run that cannot start or finish (missing data, a folder another process is writing,
    divergence) is skipped with its one-line reason and its figure reported as incomplete
    (:func:`~wirelessfl.report.local.run_one`). Locally, runs that can share their client
    engine train in lockstep groups of at most ``batch_runs`` (None: as memory allows; 1:
    none; :func:`~wirelessfl.report.local.execute_local`). With ``ray`` (a
    :class:`~wirelessfl.report.ray_executor.RayOptions`) every run is a Ray task.
    """
    if ray is not None:
        execute_ray(runs, root, ray, log=log, quiet=quiet)
    else:
        execute_local(runs, root, quiet=quiet, log=log, jobs=jobs, batch_runs=batch_runs)


#: Figure kinds that draw a run whose training diverged (as diverged); the others wait for it.
DRAWS_DIVERGED = frozenset({"final_accuracy", "transitions"})


def _unfinished(runs: list[RunSpec], root: Path) -> str:
    """Why a figure is not drawn: its runs never started, or stopped part-way (each named)."""
    stopped = []
    for r in runs:
        rows = RunRecord(run_folder(root, r)).rows() if RunRecord(run_folder(root, r)).exists() \
            else []
        if rows:
            stopped.append(f"{r.label} (stopped after round {rows[-1].get('round', '?')})")
    if not stopped:
        return "Runs missing: run `wirelessfl figures` again."
    shown = "; ".join(stopped[:6]) + (f"; and {len(stopped) - 6} more" if len(stopped) > 6 else "")
    return (f"Not drawn: {len(stopped)} of its runs stopped before their last round, diverged or "
            f"interrupted: {shown}. `wirelessfl figures` again resumes interrupted ones; a "
            "diverged run diverges again (its log line says so)"
            + (f"; {len(runs) - len(stopped)} more never started." if len(runs) > len(stopped)
               else "."))


def render(figures: list[Figure], root: Path, style: str = "report",
           title: bool | None = None) -> list[Path]:
    """Write every figure's outputs and a README with, per figure, its claim checked.

    Figures with missing runs are listed as such. The README keeps the sections of figures
    rendered here before (``--only X``, then ``--only Y``). ``style``: ``report`` or
    ``paper`` (:func:`~wirelessfl.report.renderers.figure_style`), ``title`` whether the
    images carry their titles (None: the style's default); either way the README gives
    each figure its title as a caption.
    """
    root.mkdir(parents=True, exist_ok=True)
    readme = root / "README.md"
    sections = _readme_sections(readme)
    outputs = []
    for fig in figures:
        draws_diverged = fig.spec["kind"] in DRAWS_DIVERGED
        unfinished = [r for r in fig.runs if RunRecord(run_folder(root, r)).summary() is None
                      and not (draws_diverged and diverged(root, r))]
        if unfinished:
            sections[fig.name] = (f"## {fig.name}\n\n{fig.title}\n\n"
                                  f"{_unfinished(unfinished, root)}\n")
            continue
        with figure_style(style, title):
            paths = RENDERERS[fig.spec["kind"]](fig, root, root)
        # per seed: what the CSVs' means and the verdict are computed from
        paths = [*paths, write_csv(root / f"{fig.name}-seeds.csv", per_seed_rows(fig, root))]
        outputs += paths
        sections[fig.name] = readme_section(fig, paths, check_claim(fig, root))
    write_text(readme, README_HEAD + "\n" + "\n".join(sections.values()))
    return [*outputs, readme]


#: The first line of a report README (also how an older report folder is recognised).
README_HEAD = "# Regenerated figures and tables\n"


def readme_section(fig: Figure, paths: list[Path], verdict: Verdict | None) -> str:
    """A figure's README section: title, outputs, picture, the paper's finding, ours, verdict."""
    # the files beside this README, named, not linked: the docs include the README elsewhere
    files = ", ".join(f"`{p.name}`" for p in paths)
    out = [f"## {fig.name}", "", f"**{fig.title}**", "", f"Outputs: {files}", ""]
    out += [f"![{fig.name}]({p.name})\n" for p in paths if p.suffix == ".png"]
    for p in paths:  # a table's markdown, without its title (the section has it)
        if p.suffix == ".md" and p.is_file():
            out += [p.read_text().split("\n", 1)[-1].strip(), ""]
    if verdict is None:
        out.append("No claim of the paper is attached to this figure.")
    else:
        out.append(f"- **The paper:** {verdict.finding}")
        if verdict.checked:
            out.append(f"- **Checked here:** {verdict.checked}")
        if verdict.unchecked:
            out.append(f"- **Not checked here:** {verdict.unchecked}")
        budget = (fig.spec.get("claim") or {}).get("budget")
        if budget:  # the rule is stated (and tested) for the paper scale
            out.append(f"- **Budget{'' if fig.scale == 'paper' else ' rule at paper scale'}:** "
                       f"{budget}")
            here = budget_here(fig)
            if here:
                out.append(f"- **Budget of these runs:** {here}")
        if verdict.ours:
            out.append(f"- **This report** ({verdict.measured}):")
            out += [f"  - {line}" for line in verdict.ours]
        out.append(f"- **Verdict:** {verdict.verdict}")
    return "\n".join(out) + "\n"


_OLD_ENTRY = re.compile(r"^- (?:\*\*(?P<a>[^*]+)\*\*|(?P<b>[^:\s]+):)")


def _readme_sections(readme: Path) -> dict[str, str]:
    """Figure name → its section in a report README written here before (empty if none).

    A README from before the sections (one ``- **name** — ...`` line per figure) gives
    its lines as sections.
    """
    if not readme.is_file() or readme.is_symlink():
        return {}
    out: dict[str, str] = {}
    name = None
    for line in readme.read_text(errors="replace").splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            out[name] = line + "\n"
        elif name is not None:
            out[name] += line + "\n"
        elif m := _OLD_ENTRY.match(line):
            key = m.group("a") or m.group("b")
            out[key] = f"## {key}\n\n{line[2:]}\n"
    return {k: v.rstrip("\n") + "\n" for k, v in out.items()}


#: Marks a folder as a published copy of a report (:func:`publish`).
PUBLISH_MARK = ".wirelessfl-published"

#: What a published report holds: the rendered outputs, never the run folders (their
#: finished runs go into one archive, :data:`~wirelessfl.report.archive.ARCHIVE`).
PUBLISHED = (".png", ".csv", ".md")


def check_publish_folder(dest: Path) -> None:
    """Refuse (ConfigError) a ``--publish`` folder that is a link, a file or holds foreign files."""
    refuse_link(dest)
    if dest.exists() and (not dest.is_dir() or (any(dest.iterdir())
                                               and not (dest / PUBLISH_MARK).is_file())):
        raise ConfigError(f"--publish {dest}: holds files this tool did not publish; give a new "
                          "or empty folder (nothing is overwritten)")


def publish(root: Path, dest: Path) -> list[Path]:
    """Copy a report's outputs (README, PNG, CSV and markdown) and its runs' archive to ``dest``.

    For the docs (``docs/papers/results/<paper>-<scale>``): the paper pages include the
    copied README, so their results are the report's, generated, never typed. ``dest`` must
    be new, empty, or a folder published here before; no link is written through. A publish
    adds to the one before (figures of a paper finish in different sessions): a figure the
    report drew replaces its earlier outputs and README section; a figure published before
    keeps both when the report did not draw it (not run, or its runs unfinished). The files
    of the earlier publish that no figure keeps are removed; any other file there stays.

    The run folders are not copied (their checkpoints are large); their finished runs'
    configs, rows and summaries are, into the archive ``runs.jsonl.gz``, added to the runs
    published there before (:mod:`~wirelessfl.report.archive`): ``--reuse dest`` re-draws
    the report, or extends it with more seeds, elsewhere, without training them again.
    """
    check_publish_folder(dest)
    if not (root / "README.md").is_file():
        raise ConfigError(f"--publish: {root} has no README.md to publish; render it first")
    dest.mkdir(parents=True, exist_ok=True)
    _mark(dest, PUBLISH_MARK)
    names = [src.name for src in sorted(root.iterdir())
             if src.suffix in PUBLISHED and src.is_file() and not src.is_symlink()]
    before = set(_published_before(dest))
    if (dest / ARCHIVE).exists() and ARCHIVE not in before:
        raise ConfigError(f"--publish {dest}: its {ARCHIVE} was not published by this tool; "
                          "move it away (nothing was changed)")
    sections = _readme_sections(dest / "README.md") if "README.md" in before else {}
    earlier = set(sections)  # figures whose published section (and files) stay as they are
    for name, section in _readme_sections(root / "README.md").items():
        if _section_outputs(section) or not _section_outputs(sections.get(name, "")):
            sections[name] = section  # an undrawn figure does not replace a drawn one
            earlier.discard(name)
    kept = {f for name in earlier for f in _section_outputs(sections[name])} & before
    sections = {name: mark_per_seed(name, section) for name, section in sections.items()}
    names = [n for n in names if n not in kept]
    archived = archive_runs(root, dest / ARCHIVE)  # the earlier publish's runs and this one's
    for name in before - set(names) - kept - {ARCHIVE}:  # an earlier publish's, not kept
        old = dest / name
        if old.is_file() and not old.is_symlink():
            old.unlink()
    out = []
    for name in names:
        data = ((README_HEAD + "\n" + "\n".join(sections.values())).encode()
                if name == "README.md" else (root / name).read_bytes())
        atomic_write(dest / name, lambda fh, data=data: fh.write(data))
        out.append(dest / name)
    manifest = json.dumps({"files": sorted({*names, *kept, *([ARCHIVE] if archived else [])})},
                          indent=1)
    atomic_write(dest / PUBLISH_MARK, lambda fh: fh.write(manifest.encode()))
    return [*out, *([dest / ARCHIVE] if archived else [])]


_OUTPUTS = re.compile(r"^Outputs: (.*)$", re.MULTILINE)

#: The line a published figure without per-seed outputs carries under its ``Outputs:`` line.
NO_PER_SEED = ("**Per-seed data not published:** this figure was drawn before reports wrote "
               "per-seed values (`<figure>-seeds.csv`) and their runs (`runs.jsonl.gz`); its "
               "means and verdict cannot be recomputed from these files until it is re-run.")


def mark_per_seed(name: str, section: str) -> str:
    """``section`` with :data:`NO_PER_SEED` under its outputs when they lack ``name-seeds.csv``.

    A drawn section whose outputs name the per-seed CSV loses any earlier mark; an undrawn
    one (no ``Outputs:`` line) is returned as it is.
    """
    bare = section.replace(f"\n\n{NO_PER_SEED}", "")
    m = _OUTPUTS.search(bare)
    if m is None or f"{name}-seeds.csv" in _section_outputs(bare):
        return bare
    return f"{bare[:m.end()]}\n\n{NO_PER_SEED}{bare[m.end():]}"


def _section_outputs(section: str) -> set[str]:
    """The published files a README section names on its ``Outputs:`` line (none if undrawn)."""
    m = _OUTPUTS.search(section)
    return {n for n in re.findall(r"`([^`/\\]+)`", m.group(1)) if Path(n).suffix in PUBLISHED} \
        if m else set()


def _published_before(dest: Path) -> list[str]:
    """The files the last publish into ``dest`` wrote (its mark's list; none in an old mark).

    Only these are removed by the next publish: a user's own files beside them stay.
    """
    try:
        names = json.loads((dest / PUBLISH_MARK).read_text() or "{}").get("files", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str) and n == Path(n).name
            and (Path(n).suffix in PUBLISHED or n == ARCHIVE)]


def regenerate(paper: str, scale: str, root: Path, *, only: list[str] | None = None,
               extra: list[str] | None = None, quiet: bool = False,
               log: Callable[[str], None] = print, jobs: int = 1,
               ray: Any = None, seeds: list[int] | None = None,
               batch_runs: int | None = None, style: str = "report",
               title: bool | None = None, reuse: Path | None = None,
               render_only: bool = False) -> list[Path]:
    """Run what is missing (``jobs`` at a time, or as Ray tasks), then render; the written files.

    ``seeds`` replaces every figure's seeds (:func:`~wirelessfl.report.spec.load_figures`);
    ``style`` and ``title`` are the figures' (:func:`render`). ``reuse``: a run archive, or
    a published report folder, whose runs are taken instead of trained
    (:func:`~wirelessfl.report.archive.restore_runs`); ``render_only``: train nothing, draw
    the figures whose runs are all there.
    """
    return _complete(load_figures(paper, scale, only, extra, seeds), root, f"{paper} ({scale})",
                     quiet=quiet, log=log, jobs=jobs, ray=ray, batch_runs=batch_runs,
                     style=style, title=title, reuse=reuse, render_only=render_only)


#: Marks a report folder as this tool's: its tables, plots and README may be rewritten.
REPORT_MARK = ".wirelessfl-report"


def _claim_report_folder(root: Path) -> None:
    """Use ``root`` only if it is new, empty or a report folder made here (else ConfigError).

    A folder from before the mark existed is recognised by a ``runs/`` folder of config-hash
    run folders only, beside nothing or this tool's ``README.md``. Nothing that this
    tool did not write is ever overwritten, and no link is written through.
    """
    refuse_link(root)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"report folder {root} is a file; give a folder with --out")
    if root.is_dir() and any(root.iterdir()) and not _is_report_folder(root):
        raise ConfigError(f"report folder {root} holds files this tool did not write; give a "
                          "new or empty folder with --out (nothing is overwritten)")
    root.mkdir(parents=True, exist_ok=True)
    _mark(root, REPORT_MARK)
    runs = root / "runs"  # where every run folder goes: never through a planted link
    refuse_link(runs)
    if runs.exists() and not runs.is_dir():
        raise ConfigError(f"report folder {root}: its runs/ is a file; remove it or give "
                          "another --out")


def _mark(folder: Path, name: str) -> None:
    """An empty file ``name`` in ``folder`` saying this tool wrote it (made once, no link)."""
    mark = folder / name
    refuse_link(mark)
    if not mark.is_file():
        with open_new(mark):
            pass


def _is_report_folder(root: Path) -> bool:
    """Whether ``root`` carries the mark, or is a report folder from before the mark."""
    mark = root / REPORT_MARK
    if mark.is_file() and not mark.is_symlink():
        return True
    readme, runs = root / "README.md", root / "runs"
    if not (runs.is_dir() and not runs.is_symlink()) or not all(
            re.fullmatch(r"[0-9a-f]{12}", p.name) and p.is_dir() and not p.is_symlink()
            for p in runs.iterdir()):
        return False
    if {p.name for p in root.iterdir()} == {"runs"}:
        return True
    try:
        return (readme.is_file() and not readme.is_symlink()
                and readme.open("rb").read(64).startswith(README_HEAD.strip().encode()))
    except OSError:
        return False


def _complete(figures: list[Figure], root: Path, what: str, *, quiet: bool,
              log: Callable[[str], None], jobs: int, ray: Any,
              batch_runs: int | None = None, style: str = "report",
              title: bool | None = None, reuse: Path | None = None,
              render_only: bool = False) -> list[Path]:
    """Train the figures' missing runs (each once), then render them under ``root``.

    Runs the archive ``reuse`` holds are taken from it first; ``render_only`` trains none.
    The algorithms' planning hooks are checked before the folder is claimed, so a plug-in's
    bad hook leaves nothing behind (:func:`~wirelessfl.report.local.check_hooks`).
    """
    if not render_only:
        check_hooks([r for f in figures for r in f.runs])
    _claim_report_folder(root)
    if reuse is not None:
        restore_runs([r for f in figures for r in f.runs], root, reuse, log=log)
    todo = missing_runs(figures, root)
    log(f"{what}: {len(todo)} of {len({r.key for f in figures for r in f.runs})} runs to do; "
        f"report folder {root}" + ("; none trained (--render-only)" if render_only and todo
                                   else ""))
    if not render_only:
        check_data(todo)
        execute(todo, root, quiet=quiet, log=log, jobs=jobs, ray=ray, batch_runs=batch_runs)
        return render(figures, root, style, title)
    waiting = {r.key for r in todo}
    missing = {f.name: ({r.key for r in f.runs} & waiting, {r.key for r in f.runs})
               for f in figures}
    lacking = [name for name, (gone, every) in missing.items() if gone == every]
    if len(lacking) == len(figures):
        raise ConfigError(f"--render-only: no run of {', '.join(lacking)} is "
                          + (f"in {reuse} or " if reuse is not None else "")
                          + f"under {root}; drop --render-only to train them")
    if lacking:  # nothing of theirs to draw: left as they were, not listed as missing
        log(f"--render-only: {', '.join(lacking)} not drawn (none of their runs is there)")
    partial = [f"{name} ({len(gone)} of {len(every)} runs missing)"
               for name, (gone, every) in missing.items() if gone and gone != every]
    if partial:  # its README section lists the runs, as after an interrupted command
        log(f"--render-only: not drawn, runs missing: {', '.join(partial)}; the README names them")
    return render([f for f in figures if f.name not in lacking], root, style, title)


#: Datasets read from files: checked once before any run starts.
FILE_DATASETS = ("fashion_mnist", "mnist", "cifar10", "cifar100", "svhn", "tinyimagenet")


def check_data(runs: list[RunSpec]) -> None:
    """Refuse (one ConfigError, before anything trains) runs whose dataset files are missing.

    Each distinct (dataset, data folder) is looked up once; a missing one names the runs'
    dataset and how to get it, instead of every run being skipped with the same line.
    """
    from wirelessfl.data import load_dataset
    from wirelessfl.data.arrays import DataNotFoundError

    seen = set()
    for r in runs:
        data = r.raw.get("data") if isinstance(r.raw, dict) else None
        if not isinstance(data, dict) or data.get("dataset") not in FILE_DATASETS:
            continue
        key = (data["dataset"], data.get("data_dir"))
        if key in seen:
            continue
        seen.add(key)
        try:
            load_dataset(key[0], data_dir=key[1])
        except DataNotFoundError as exc:
            n = sum(1 for q in runs if isinstance(q.raw.get("data"), dict)
                    and (q.raw["data"].get("dataset"), q.raw["data"].get("data_dir")) == key)
            raise ConfigError(f"{n} run(s) need {key[0]}: {str(exc).splitlines()[0]}") from None


def sweep(config: str, grid: list[str], seeds: list[int], root: Path, *,
          extra: list[str] | None = None, quiet: bool = False,
          log: Callable[[str], None] = print, jobs: int = 1, ray: Any = None,
          batch_runs: int | None = None) -> list[Path]:
    """A user's sweep: every combination of ``grid`` (``key=v1,v2``) × ``seeds`` of ``config``.

    Runs go to ``root/runs`` under their config hashes (finished ones reused, interrupted
    ones resumed, on the local or the Ray executor); ``sweep.md``/``.csv``/``.png`` give the
    final accuracy (the last evaluation) per grid point, mean ± sample std over the seeds.
    """
    import itertools

    import yaml

    from wirelessfl.run.config import load_raw

    check_seeds(seeds, "--seeds")
    axes = []
    for item in grid:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError(f"--grid {item[:60]!r}: write KEY=V1,V2,... (e.g. local.lr=0.01,0.03)")
        try:
            axis = [(key.strip(), parse_yaml(v, f"--grid {short(key)}")) for v in values.split(",")]
        except yaml.YAMLError:
            raise ConfigError(f"--grid {item[:60]!r}: a value is not a YAML scalar") from None
        shown = [show_value(v) for _, v in axis]
        if len(set(shown)) < len(shown):
            raise ConfigError(f"--grid {item[:60]!r}: {first_repeated(shown)} is given twice; "
                              "give each value once")
        axes.append(axis)
    if not axes:
        raise ConfigError("give at least one --grid KEY=V1,V2,...")
    keys = [a[0][0] for a in axes]
    if len(set(keys)) < len(keys):
        raise ConfigError(f"--grid: {first_repeated(keys)} has two --grid options; give its values "
                          "in one, comma-separated")
    points = list(itertools.product(*axes))
    if len(points) * len(seeds) > 10_000:
        raise ConfigError(f"the sweep has {len(points) * len(seeds)} runs; at most 10000")
    base = apply_overrides(load_raw(config), list(extra or ()))
    runs = []
    for point in points:
        label = ", ".join(f"{k}={show_value(v)}" for k, v in point)
        for seed in seeds:
            raw = apply_overrides(base, override_pairs({**dict(point), "seed": seed}))
            canonical(raw)  # fail before any training
            runs.append(RunSpec("final accuracy", label, None, seed, raw))
    seen: dict[str, str] = {}
    for r in runs:
        if seen.setdefault(r.key, r.series) != r.series:
            raise ConfigError(f"--grid: {seen[r.key]} and {r.series} give the same run (equal "
                              "values written two ways); give each value once")
    over = ", ".join(keys)
    fig = Figure("sweep", {"kind": "final_accuracy", "last": 1, "xlabel": over,
                           "title": f"sweep of {config} over {over} ({len(seeds)} seed(s))"},
                 tuple(runs), scale="")
    return _complete([fig], root, "sweep", quiet=quiet, log=log, jobs=jobs, ray=ray,
                     batch_runs=batch_runs)
