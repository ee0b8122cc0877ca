"""Run archives: a published report re-drawn, and extended with seeds, without its run folders."""

import gzip
import json

import pytest
from test_figures import TOY as FIGURES_TOY
from test_figures import write_study

from wirelessfl.cli import main
from wirelessfl.report import load_figures, missing_runs, regenerate, run_folder
from wirelessfl.report.archive import ARCHIVE, KEPT, archive_runs, read_archive, restore_runs
from wirelessfl.report.figures import publish
from wirelessfl.run.config import ConfigError
from wirelessfl.run.records import RunRecord

# test_figures' toy study, its "curves" without the sweep: one HIST and one HFedAvg run a seed
TOY = {**FIGURES_TOY, "scales": {"quick": {"seeds": [0], "overrides": {}}},
       "figures": {"curves": {k: v for k, v in FIGURES_TOY["figures"]["curves"].items()
                              if k != "sweep"}}}

QUIET = {"quiet": True, "log": lambda _: None}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    write_study(tmp_path, monkeypatch, TOY)
    return tmp_path


def _trained(monkeypatch):
    """The runs each ``execute`` call is asked to train (the real executor still trains them)."""
    import wirelessfl.report.figures as figures

    asked: list[list[str]] = []
    real = figures.execute

    def spy(runs, root, **kw):
        asked.append(sorted(r.label for r in runs))
        return real(runs, root, **kw)

    monkeypatch.setattr(figures, "execute", spy)
    return asked


def _kept(folder):
    return {n: (folder / n).read_text() for n in KEPT if (folder / n).is_file()}


def test_a_report_split_over_two_sessions_equals_one_run_straight_through(toy, monkeypatch):
    """Session 1 trains seed 0 and publishes; session 2, with none of session 1's folders,
    takes seed 0 from the archive, trains only seed 1 and draws what one session would."""
    asked = _trained(monkeypatch)
    dest = toy / "docs" / "toy-quick"
    regenerate("toy", "quick", toy / "s1", seeds=[0], **QUIET)
    assert ARCHIVE in {p.name for p in publish(toy / "s1", dest)}
    regenerate("toy", "quick", toy / "s2", seeds=[0, 1], reuse=dest, **QUIET)
    assert asked[-1] == ["HFedAvg · seed 1", "HIST · seed 1"]  # seed 0 came from the archive
    fig = load_figures("toy", "quick", seeds=[0, 1])[0]
    for r in fig.runs:
        if r.seed == 0:  # restored byte for byte, without the checkpoint
            assert _kept(run_folder(toy / "s2", r)) == _kept(run_folder(toy / "s1", r))
            assert not RunRecord(run_folder(toy / "s2", r)).checkpoint_path.exists()
    publish(toy / "s2", dest)
    assert sorted(read_archive(dest / ARCHIVE)) == sorted(r.key for r in fig.runs)
    regenerate("toy", "quick", toy / "straight", seeds=[0, 1], **QUIET)
    for name in ("curves.csv", "README.md"):
        assert (toy / "s2" / name).read_text() == (toy / "straight" / name).read_text()
    # a third session re-draws the published report and trains nothing at all
    calls = len(asked)
    regenerate("toy", "quick", toy / "s3", seeds=[0, 1], reuse=dest / ARCHIVE,
               render_only=True, **QUIET)
    assert len(asked) == calls
    assert (toy / "s3" / "curves.csv").read_text() == (toy / "straight" / "curves.csv").read_text()
    # the same runs archive to the same bytes (no time stamp): a publish again changes nothing
    before = (dest / ARCHIVE).read_bytes()
    publish(toy / "s3", dest)
    assert (dest / ARCHIVE).read_bytes() == before


def test_render_only_trains_nothing_and_a_figure_without_runs_is_one_line(toy, monkeypatch,
                                                                          capsys):
    """Asked to draw a figure none of whose runs is there (nor in the archive): one line, exit
    2, nothing trained and no README written (it used to write a README of "Runs missing")."""
    asked = _trained(monkeypatch)
    with pytest.raises(ConfigError, match="no run of curves"):
        regenerate("toy", "quick", toy / "r", render_only=True, **QUIET)
    assert asked == [] and not (toy / "r" / "README.md").exists()
    assert main(["figures", "toy", "--out", str(toy / "r"), "--render-only", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "drop --render-only" in err[0]
    assert asked == []


def test_render_only_of_a_figure_with_some_runs_names_what_is_missing(toy, monkeypatch):
    """The archive holds seed 0 of a two-seed figure: nothing trained, the figure not drawn,
    and one line says so with the count (the README names the runs)."""
    regenerate("toy", "quick", toy / "s1", seeds=[0], **QUIET)
    dest = toy / "pub"
    publish(toy / "s1", dest)
    asked, lines = _trained(monkeypatch), []
    regenerate("toy", "quick", toy / "s2", seeds=[0, 1], reuse=dest / ARCHIVE, render_only=True,
               quiet=True, log=lines.append)
    fig = load_figures("toy", "quick", seeds=[0, 1])[0]
    missing = [x for x in lines if x.startswith("--render-only: not drawn")]
    assert asked == [] and len(missing) == 1
    assert f"{fig.name} ({len(fig.runs) // 2} of {len(fig.runs)} runs missing)" in missing[0]
    assert not (toy / "s2" / f"{fig.name}.png").exists()


def test_every_report_writes_per_seed_data_from_which_its_verdict_is_recomputed(toy):
    """``<figure>-seeds.csv``: one row per run with its seed and last-row values, the claim's
    measure and the budget it was censored at."""
    import csv

    regenerate("toy", "quick", toy / "s", seeds=[0, 1], **QUIET)
    rows = list(csv.DictReader((toy / "s" / "curves-seeds.csv").open()))
    fig = load_figures("toy", "quick", seeds=[0, 1])[0]
    assert sorted((r["series"], int(r["seed"])) for r in rows) == sorted(
        (r.series, r.seed) for r in fig.runs)
    assert {r["run"] for r in rows} == {r.key for r in fig.runs}
    assert all(float(r["test_accuracy"]) > 0 for r in rows)


def _archive_of(toy, monkeypatch, edit):
    """A one-seed report's archive with each record passed through ``edit``, and its runs."""
    regenerate("toy", "quick", toy / "s1", **QUIET)
    path = toy / "edited.jsonl.gz"
    archive_runs(toy / "s1", path)
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    path.write_bytes(gzip.compress("".join(edit(line) + "\n" for line in lines).encode()))
    return path, load_figures("toy", "quick")[0].runs


def _config_of_another_run(line):
    entry = json.loads(line)
    entry["files"]["config.yaml"] = entry["files"]["config.yaml"].replace("lr: 0.05", "lr: 0.5")
    return json.dumps(entry)


def _unfinished(line):
    entry = json.loads(line)
    del entry["files"]["summary.json"]
    return json.dumps(entry)


def _seed_changed(line):
    entry = json.loads(line)
    entry["files"]["meta.json"] = entry["files"]["meta.json"].replace('"seed": 0', '"seed": 3')
    return json.dumps(entry)


@pytest.mark.parametrize("edit, says", [
    (_config_of_another_run, "config of another run"),
    (_unfinished, "neither finished nor diverged"),
    (_seed_changed, "is damaged"),
    (lambda line: line.replace('"metrics.jsonl": "{', '"metrics.jsonl": "{oops'), "is damaged"),
    (lambda line: line + "\n" + line, "recorded twice"),
    (lambda line: line[:-5], "not a run record"),
])
def test_an_edited_archive_restores_nothing(toy, monkeypatch, edit, says):
    """A record is used only if its config hashes to its key, its meta names its seed and it
    is finished: else a ConfigError naming it, and no folder (nor a half-written one) stays."""
    path, runs = _archive_of(toy, monkeypatch, edit)
    root = toy / "s2"
    (root / "runs").mkdir(parents=True)
    with pytest.raises(ConfigError, match=says):
        restore_runs(runs, root, path, log=lambda _: None)
    assert list((root / "runs").iterdir()) == []


def test_an_archive_never_replaces_a_run_folder_and_refuses_what_is_not_one(toy, monkeypatch):
    path, runs = _archive_of(toy, monkeypatch, lambda line: line)
    root = toy / "s2"
    interrupted = run_folder(root, runs[0])
    interrupted.mkdir(parents=True)
    (interrupted / "config.yaml").write_text("mine")
    linked = run_folder(root, runs[1])  # a dangling link is not replaced either
    linked.symlink_to(toy / "elsewhere")
    assert restore_runs(runs, root, path, log=lambda _: None) == 0
    assert linked.is_symlink() and not (toy / "elsewhere").exists()
    linked.unlink()
    assert restore_runs(runs, root, path, log=lambda _: None) == 1
    assert (interrupted / "config.yaml").read_text() == "mine"
    assert missing_runs(load_figures("toy", "quick"), root) == [runs[0]]
    (toy / "plain.jsonl.gz").write_text("not gzip")
    with pytest.raises(ConfigError, match="not a readable run archive"):
        read_archive(toy / "plain.jsonl.gz")
    import wirelessfl.report.archive as archive

    monkeypatch.setattr(archive, "MAX_BYTES", 1000)  # a bomb expands past the limit: refused
    with pytest.raises(ConfigError, match="expands beyond"):
        read_archive(path)


def test_the_cli_takes_a_folder_or_file_and_refuses_what_it_cannot_use(toy, capsys):
    out = str(toy / "r")
    for bad in (str(toy / "none"), str(toy)):  # nothing there; a folder with no archive
        assert main(["figures", "toy", "--out", out, "--reuse", bad]) == 2
        assert "--reuse" in capsys.readouterr().err
    regenerate("toy", "quick", toy / "s1", **QUIET)
    publish(toy / "s1", toy / "pub")
    assert main(["figures", "toy", "--out", out, "--reuse", str(toy / "pub"), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "0 to do (2 more in --reuse)" in shown and shown.count("reuse  runs/") == 2
    assert main(["figures", "toy", "--out", out, "--reuse", str(toy / "pub"), "--estimate"]) == 0
    assert any(line.split()[:2] == ["curves", "0"] for line in capsys.readouterr().out.splitlines())
    link = toy / "link.jsonl.gz"
    link.symlink_to(toy / "pub" / ARCHIVE)
    assert main(["figures", "toy", "--out", out, "--reuse", str(link)]) == 2
    (toy / "pub" / ARCHIVE).unlink()
    (toy / "pub" / ARCHIVE).write_text("a user's file")  # not the publish's: never rewritten
    (toy / "pub" / ".wirelessfl-published").write_text('{"files": ["README.md"]}')
    with pytest.raises(ConfigError, match="not published by this tool"):
        publish(toy / "s1", toy / "pub")
    assert (toy / "pub" / ARCHIVE).read_text() == "a user's file"


# a time-to-target figure whose runs stop at the target, beside curves of the same runs made
# without stopping: its runs are cut from the curves' (archive.py, RunKind.cut_at_target)
CUT_TOY = {**FIGURES_TOY, "scales": {"quick": {"seeds": [0, 1], "overrides": {"rounds": 6}}},
           "figures": {
               "curves": {"kind": "curves", "x": ["round"],
                          "series": {"HIST": {}, "HFedAvg": {"algorithm.split": False}},
                          "sweep": {"key": "target_accuracy", "label": "target",
                                    "values": [0.5, 0.999]}},
               "timed": {"kind": "sweep", "metric": "round", "target": 0.5,
                         "overrides": {"stop_at_target": True},
                         "series": {"HIST": {}, "HFedAvg": {"algorithm.split": False}},
                         "sweep": {"key": "target_accuracy", "label": "target",
                                   "values": [0.5, 0.999]}}}}


def _unclocked(folder):
    """A run folder's rows, summary and config, without what the wall clock or machine sets."""
    record = RunRecord(folder)
    return ([{k: v for k, v in r.items() if k != "wall_s"} for r in record.rows()],
            {k: v for k, v in record.summary().items() if k != "wall_s"}, record.config())


def test_a_run_that_stops_at_its_target_is_cut_from_the_same_run_made_without_stopping(
        tmp_path, monkeypatch, capsys):
    """Equivalence: the 'timed' runs (stop at the target: 0.5, reached early, and 0.999,
    never) restored from the curves' archive equal those runs trained straight, row for row;
    nothing trains for them, the dry run counts them as --reuse, and each names its source."""
    write_study(tmp_path, monkeypatch, CUT_TOY)
    asked = _trained(monkeypatch)
    regenerate("toy", "quick", tmp_path / "s1", only=["curves"], **QUIET)
    dest = tmp_path / "pub"
    publish(tmp_path / "s1", dest)
    calls = len(asked)
    assert main(["figures", "toy", "--only", "timed", "--out", str(tmp_path / "s2"),
                 "--reuse", str(dest), "--dry-run", "--quiet"]) == 0
    assert "0 to do (8 more in --reuse)" in capsys.readouterr().out
    lines = []
    regenerate("toy", "quick", tmp_path / "s2", only=["timed"], reuse=dest, quiet=True,
               log=lines.append)
    assert not any(asked[calls:])  # nothing trained
    assert any("8 cut at their target" in x for x in lines)
    regenerate("toy", "quick", tmp_path / "straight", only=["timed"], **QUIET)
    fig = load_figures("toy", "quick", only=["timed"])[0]
    full = {r.key: r for f in load_figures("toy", "quick", only=["curves"]) for r in f.runs}
    shorter = 0
    for r in fig.runs:
        cut, straight = run_folder(tmp_path / "s2", r), run_folder(tmp_path / "straight", r)
        assert _unclocked(cut) == _unclocked(straight)
        meta = json.loads((cut / "meta.json").read_text())
        assert meta["cut_from"] in full and meta["seed"] == r.seed
        shorter += len(RunRecord(cut).rows()) < 7
    assert 0 < shorter < len(fig.runs)  # some stop early, the 0.999 ones run all 6 rounds
    assert (tmp_path / "s2" / "timed.csv").read_text() == (
        tmp_path / "straight" / "timed.csv").read_text()


def test_a_cut_run_reads_its_twin_s_rows_as_a_run_folder_does():
    """The twin's metric lines go through the one reader (``parse_rows``): a metric stored under
    an old name is cut under today's, and a damaged twin gives nothing to cut (the run trains)."""
    import json

    import yaml

    from wirelessfl.report.archive import _cut

    def row(t, acc, **extra):
        return {"round": t, "sim_time_s": float(t), "uplink_params_per_client": 10 * t,
                "uplink_mb_per_client": 4e-5 * t, "test_accuracy": acc, "test_loss": 1.0,
                "wall_s": 0.5 * t, **extra}

    rows = [row(0, 0.1), row(1, 0.6, aircomp_mse_mean=0.25), row(2, 0.7)]
    files = {"config.yaml": yaml.safe_dump({"name": "t", "target_accuracy": 0.5, "rounds": 2,
                                            "algorithm": {"name": "fedavg"}}),
             "metrics.jsonl": "".join(json.dumps(r) + "\n" for r in rows),
             "summary.json": "{}", "meta.json": "{}"}
    got = _cut(files, "twin")
    kept = [json.loads(line) for line in got["metrics.jsonl"].splitlines()]
    assert [r["round"] for r in kept] == [0, 1]
    assert kept[1]["aircomp_mse"] == 0.25 and "aircomp_mse_mean" not in kept[1]
    assert json.loads(got["meta.json"])["cut_from"] == "twin"
    assert json.loads(got["summary.json"])["round_to_target"] == 1
    assert _cut({**files, "metrics.jsonl": files["metrics.jsonl"] + '{"round": \n'}, "twin") is None
