"""The docs the project ships: every citation resolves, every public name is documented.

(The docs build itself, with warnings as errors and the tutorials executed, is a CI step.)
"""

import inspect
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CITE = re.compile(r"docs/papers/(\w+)\.md`{0,2}\)?,? §\s?(\d+(?:\.\d+)*)")


def _project_files():
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / f for f in out if f.endswith((".py", ".yaml", ".md", ".toml"))]


def test_no_citation_of_files_the_project_does_not_ship():
    gone = "spec" + "s/"  # the internal folder (spelt so that this file does not cite it)
    bad = [f.relative_to(ROOT) for f in _project_files()
           if f.is_file() and gone in f.read_text(errors="replace")]
    assert not bad, f"cite docs/papers/*.md instead of the internal notes: {bad[:5]}"


def test_every_cited_section_of_a_paper_page_exists():
    checked, missing = 0, []
    for f in _project_files():
        if f.suffix not in (".py", ".yaml") or not f.is_file():
            continue
        for m in CITE.finditer(f.read_text()):
            page = ROOT / "docs" / "papers" / f"{m.group(1)}.md"
            assert page.is_file(), f"{f.name} cites {page.name}, which does not exist"
            heads = re.findall(r"^#+\s+(?:§\s*)?(\d+(?:\.\d+)*)\.?\s", page.read_text(), re.M)
            checked += 1
            if m.group(2) not in heads:
                missing.append(f"{f.name}: {page.name} §{m.group(2)}")
    assert checked > 100 and not missing, missing[:5]


def test_every_public_name_has_a_docstring():
    import wirelessfl

    undocumented = [n for n in wirelessfl.__all__ if n != "__version__"
                    and not inspect.getdoc(getattr(wirelessfl, n))]
    assert not undocumented


def test_the_license_matches_pyproject():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()


def test_list_algorithms_names_every_entry_with_a_preset(capsys):
    from wirelessfl import registry
    from wirelessfl.cli import main

    assert main(["list", "--algorithms"]) == 0
    out = capsys.readouterr().out
    listed = {line.split()[0] for line in out.splitlines()
              if line and not line.startswith((" ", "units:"))}
    assert "cycles_per_step=10000000.0 [CPU cycles]" in out  # units where a name has none
    assert listed == set(registry.names())
    from wirelessfl.run.config import algorithm_table

    table = algorithm_table()
    assert all(e.presets for e in table), [e.name for e in table if not e.presets]
    fedprox = next(e for e in table if e.name == "fedprox")
    assert fedprox.defaults["mu"] == 1.0 and "mu=1.0" in out


def test_every_preset_resolves():
    import wirelessfl
    from wirelessfl.run.config import list_presets, load_raw

    presets = list_presets()
    assert len(presets) >= 30
    for name, path in presets.items():
        config = wirelessfl.resolve_config(load_raw(str(path)))
        assert config.name == name, f"{path}: a preset's run is named as the preset"


def test_a_timed_run_is_plotted_against_simulated_time_with_a_title(tmp_path):
    import yaml

    from wirelessfl.cli import main
    from wirelessfl.report.plotting import _title, plot_axes
    from wirelessfl.run.records import RunRecord

    cfg = tmp_path / "t.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "timed", "seed": 1, "rounds": 2, "network": {"model": "tdma"},
        "data": {"dataset": "synthetic", "num_clients": 4, "samples_per_client": 20},
        "model": {"name": "fcnn", "options": {"hidden": 4}},
        "local": {"lr": 0.05, "batch_size": 10, "steps": 1}}))
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    rec = RunRecord(tmp_path / "r")
    assert [k for k, _ in plot_axes([rec])] == ["round", "uplink_mb_per_client", "sim_time_s"]
    assert _title([rec]) == "timed · fedavg · synthetic · 4 clients"


def test_a_multitask_run_that_stops_at_its_targets_counts_evaluations():
    from wirelessfl.run.multitask import SimulationJob, resolve_multitask

    raw = {"tasks": ["synthetic_linear"], "seed": 0, "device": "cpu",
           "pool": {"clients": 10, "available": 5},
           "method": {"name": "fedast", "requests": 4, "ratio": 2}, "max_rounds": 3}
    job = SimulationJob(resolve_multitask(raw), 60.0)
    assert job.progress_total is None and job.progress_unit == "eval"  # no made-up ETA
    timed = SimulationJob(resolve_multitask({**raw, "max_rounds": None, "stop_at_target": False,
                                            "max_time": 50.0}), 60.0)
    assert timed.progress_total == 50.0 and timed.progress_unit == "t"


def test_a_first_kernel_call_that_compiles_says_so_once(monkeypatch, capsys):
    pytest.importorskip("numba")
    import numpy as np

    from solvers import mask_sizes as ms

    def twice(x):
        return 2 * x

    kernel = ms._jit(twice)
    monkeypatch.setattr(ms, "COMPILE_NOTICE_S", 0.0)
    assert ms._announced(kernel, np.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert ms._announced(kernel, np.ones(3)).tolist() == [2.0, 2.0, 2.0]
    import time

    time.sleep(0.05)  # the notice is printed by a timer thread
    err = capsys.readouterr().err
    assert err.count("compiling the mask-size kernels") == 1, err


def test_sweep_bars_start_at_zero_name_the_grid_and_carry_no_legend(tmp_path, monkeypatch):
    import yaml

    from wirelessfl.report import renderers
    from wirelessfl.report.figures import sweep

    seen = {}
    real = renderers._finish

    def capture(fig, f, ax, out, table, **kw):
        a = ax[0][0]
        seen.update(ylim=a.get_ylim(), xlabel=a.get_xlabel(), legend=kw.get("legend", True),
                    title=fig.title)
        return real(fig, f, ax, out, table, **kw)

    monkeypatch.setattr(renderers, "_finish", capture)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "sw", "seed": 0, "rounds": 1,
        "data": {"dataset": "synthetic", "num_clients": 4, "samples_per_client": 20},
        "model": {"name": "fcnn", "options": {"hidden": 4}},
        "local": {"lr": 0.05, "batch_size": 10, "steps": 1}}))
    sweep(str(cfg), ["local.lr=0.01,0.1", "local.steps=1,2"], [0], tmp_path / "rep", quiet=True,
          log=lambda _: None)
    assert seen["ylim"][0] == 0.0 and seen["xlabel"] == "local.lr, local.steps"
    assert seen["legend"] is False and "1 seed" in seen["title"]


def test_an_explicit_data_dir_never_falls_back(tmp_path):
    from wirelessfl.data import DataNotFoundError, load_dataset

    with pytest.raises(DataNotFoundError, match="put the four IDX files there"):
        load_dataset("fashion_mnist", data_dir=tmp_path)  # empty: not the system copy


def test_published_reports_match_the_figures_that_made_them():
    """The paper pages include generated reports (docs/papers/results/<paper>-<scale>): each
    section's title is the one the current figures.yaml gives (regenerate on a change; at the
    seeds it was published with), its pictures are there, its per-seed values are published
    (``<figure>-seeds.csv`` and the runs' archive) or the section says they are not, and the
    paper's page includes it."""
    import re

    from wirelessfl.report.archive import ARCHIVE
    from wirelessfl.report.figures import NO_PER_SEED, _readme_sections, _section_outputs
    from wirelessfl.report.spec import load_figures

    folders = sorted((ROOT / "docs" / "papers" / "results").iterdir())
    assert folders
    for folder in folders:
        paper, scale = folder.name.rsplit("-", 1)
        text = (folder / "README.md").read_text()
        figures = {f.name: f for f in load_figures(paper, scale)}
        sections = re.findall(r"^## (\S+)\n\n\*\*(.+)\*\*$", text, re.M)
        assert sections, folder
        for name, title in sections:
            want = figures[name].title
            seeds = re.search(r"(\d+) seeds?$", title)
            if title != want and seeds:  # published with --seeds 0-(n-1) (the paper scale's 5)
                want = {f.name: f for f in load_figures(
                    paper, scale, only=[name], seeds=list(range(int(seeds.group(1)))))}[name].title
            assert title == want, f"{folder.name}/{name}: run `wirelessfl figures`"
        for name, section in _readme_sections(folder / "README.md").items():
            # per-seed values published, or the README says they are not
            outputs = _section_outputs(section)
            assert not outputs or f"{name}-seeds.csv" in outputs or NO_PER_SEED in section, (
                f"{folder.name}/{name}")
            if f"{name}-seeds.csv" in outputs:
                assert (folder / f"{name}-seeds.csv").is_file() and (folder / ARCHIVE).is_file()
        for image in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
            assert (folder / image).is_file(), image
        page = {"dynamic": "papers/dynamic_clients", "codesign": "guide/codesign"}.get(
            paper, f"papers/{paper}")
        assert f"results/{folder.name}/README.md" in (ROOT / "docs" / f"{page}.md").read_text()


def test_the_paper_scale_page_names_figures_that_exist_at_scales_that_parse():
    """Every `wirelessfl figures` command of docs/papers/paper-scale.md (the GPU queue and the
    CPU list) names a paper and figures of its figures.yaml at a scale it has, and its
    seeds parse; the queue is numbered in order and every paper's figures are in the table."""
    import shlex
    from functools import cache

    from wirelessfl.report.spec import load_figures, parse_seeds

    @cache  # each (paper, scale) resolved once: the page names the same ones many times
    def names(paper: str, scale: str) -> frozenset[str]:
        return frozenset(f.name for f in load_figures(paper, scale))

    text = (ROOT / "docs" / "papers" / "paper-scale.md").read_text()
    commands = [c for c in re.findall(r"`(wirelessfl figures [^`]+)`", text)
                if "PAPER" not in c]  # the page's own placeholder in its how-to
    assert len(commands) >= 10
    for cmd in commands:
        args = shlex.split(cmd)[2:]
        paper, scale = args[0], args[args.index("--scale") + 1] if "--scale" in args else "quick"
        only = [args[i + 1] for i, a in enumerate(args) if a == "--only"]
        assert set(only) <= names(paper, scale), cmd
        if "--seeds" in args:
            assert parse_seeds(args[args.index("--seeds") + 1]), cmd
    queue = re.findall(r"^(\d+)\. HIST", text, re.M)
    assert [int(q) for q in queue] == list(range(1, len(queue) + 1))
    table = re.findall(r"^\| (HIST|co-design|dynamic clients|RA-Fed|FAdamGC|FedAST) \| ([^|]+) \|",
                       text, re.M)
    papers = {"HIST": "hist", "co-design": "codesign", "dynamic clients": "dynamic",
              "RA-Fed": "rafed", "FAdamGC": "fadamgc", "FedAST": "fedast"}
    listed = {(papers[p], n.strip()) for p, names in table for n in names.split(",")}
    for paper in papers.values():
        for name in names(paper, "paper"):
            assert (paper, name) in listed, (paper, name)


def _guide_commands() -> list[tuple[str, list[str]]]:
    """Every ``wirelessfl`` command of the README's and the guides' shell blocks, as argv."""
    import shlex

    out = []
    for f in [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|console|sh)\n(.*?)```", f.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                if line.startswith("wirelessfl "):
                    out.append((f.name, shlex.split(line)[1:]))
    return out


def test_every_command_the_guides_show_parses_and_its_settings_resolve(fmnist):
    """The guides' commands: each parses (no option that does not exist); a ``run`` of a
    preset builds its experiment with its ``--set`` overrides (every setting checked, the
    algorithm's own refusals too, nothing trained); a ``figures`` of a paper here loads its
    figures at the scale, seeds and names given (its --dry-run)."""
    from wirelessfl.cli import build_parser
    from wirelessfl.report.spec import load_figures, parse_seeds
    from wirelessfl.run.config import apply_overrides, list_presets, load_raw
    from wirelessfl.run.kinds import open_run

    commands = _guide_commands()
    assert len(commands) >= 30
    papers = {p.name for p in (ROOT / "experiments").iterdir() if (p / "figures.yaml").is_file()}
    built = 0
    for where, argv in commands:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:
            raise AssertionError(f"{where}: `wirelessfl {' '.join(argv)}` does not parse") from None
        if argv[0] == "run" and args.config in list_presets() and not args.resume:
            raw = apply_overrides(load_raw(args.config), args.set or [])
            open_run({**raw, "rounds": 1}) if "tasks" not in raw else None
            built += 1
        elif argv[0] == "figures" and args.paper in papers:
            seeds = None if args.seeds is None else parse_seeds(args.seeds)
            assert load_figures(args.paper, args.scale, args.only, None, seeds), where
    assert built >= 15


@pytest.mark.slow  # about 25 s; the parse of every command stays in the default suite
def test_the_guides_solver_list_and_figure_commands_run_as_shown(tmp_path, monkeypatch, capsys):
    """The commands that need no run folder run to their end, as a reader pastes them at the
    project's root (reports go to a fresh folder): ``list``, ``masks`` and ``beamform``
    whole, ``figures`` with --dry-run added (it would train for hours). Each ends with 0,
    or with the one line of a solver this machine lacks (Gurobi), never a traceback."""
    from wirelessfl.cli import main

    monkeypatch.chdir(ROOT)
    # a study of one's own, as the guide writes it (``# ~/studies/NAME/figures.yaml`` blocks)
    for f in (ROOT / "docs" / "guide").glob("*.md"):
        for name, block in re.findall(r"```yaml\n# ~/studies/(\w+)/figures\.yaml\n(.*?)```",
                                      f.read_text(), re.S):
            (tmp_path / "studies" / name).mkdir(parents=True)
            (tmp_path / "studies" / name / "figures.yaml").write_text(block)
    monkeypatch.setenv("WIRELESSFL_EXPERIMENTS", str(tmp_path / "studies"))
    ran = 0
    for where, argv in _guide_commands():
        if argv[0] in ("list", "masks", "beamform"):
            cmd = argv
        elif argv[0] == "figures" and not {"--estimate", "--render-only", "--publish"} & set(argv):
            cmd = [*argv, *(["--dry-run"] * ("--dry-run" not in argv)), "--out",
                   str(tmp_path / "report")]
        else:
            continue
        code = main(cmd)
        err = capsys.readouterr().err
        assert code == 0 or (code == 2 and "gurobi" in err.lower()), (where, cmd, err)
        ran += 1
    assert ran >= 8


@pytest.mark.slow
def test_every_run_sweep_and_run_folder_command_of_the_guides_runs_in_order(tmp_path, monkeypatch,
                                                                           capsys):
    """The guides' ``run``, ``sweep``, ``plot``, ``radio`` and ``retime`` commands, each file's
    in the order a reader pastes them (a later one reads the folders an earlier one made),
    with ``rounds=1`` added so each trains one round. Each ends with 0, or with one line
    naming an optional extra this machine lacks (a tracker), never a traceback."""
    from wirelessfl.cli import main

    monkeypatch.chdir(tmp_path)
    ran = set()
    for where, argv in _guide_commands():
        if argv[0] not in ("run", "sweep", "plot", "radio", "retime"):
            continue
        one = ["--set", "rounds=1"] if argv[0] in ("run", "sweep") and "--resume" not in argv else []
        cmd = [*argv, *one, *(["--quiet"] * (argv[0] in ("run", "sweep")))]
        code = main(cmd)
        err = capsys.readouterr().err
        assert code == 0 or (code == 2 and "pip install" in err), (where, cmd, err)
        ran.add(argv[0])
    assert ran == {"run", "sweep", "plot", "radio", "retime"}


def test_two_runs_of_one_preset_in_one_second_get_their_own_default_folders(tmp_path, monkeypatch):
    """Default run folders are timestamped to the second; a second run of the same preset
    within it (pasted commands of one round) gets ``-2``, not "already holds a run"."""
    import time

    from wirelessfl.cli import _fresh_run_folder

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20261129-010203")
    first = _fresh_run_folder("fedavg_fmnist")
    first.mkdir(parents=True)
    second = _fresh_run_folder("fedavg_fmnist")
    assert second.name == "fedavg_fmnist-20261129-010203-2" and not second.exists()
    second.mkdir()
    assert _fresh_run_folder("fedavg_fmnist").name.endswith("-3")
