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
    listed = {line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")}
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
    for path in presets.values():
        wirelessfl.resolve_config(load_raw(str(path)))


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
