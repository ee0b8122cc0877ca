"""The layout change moved every module and changed no number: the public API imports from
the top level, figure run keys are those of the code before it, and run folders written by
that code resume to the numbers of an uninterrupted run."""

import shutil
from pathlib import Path

import pytest

import channels
import solvers
import wirelessfl

OLD_RUNS = Path(__file__).parent / "data" / "old_runs"


def test_public_api_imports_from_the_top_level():
    from wirelessfl import (  # noqa: F401
        ClientResult,
        ClientTask,
        ConfigError,
        Environment,
        FederatedAlgorithm,
        LocalHParams,
        LocalSGD,
        RoundReport,
        RunConfig,
        RunRecord,
        ServerState,
        algorithm_names,
        apply_overrides,
        build_model,
        get_algorithm,
        load_config,
        load_dataset,
        open_run,
        plot_runs,
        regenerate,
        register_algorithm,
        resolve_config,
        run_job,
        sweep,
    )
    for pkg in (wirelessfl, channels, solvers):
        for name in pkg.__all__:
            assert getattr(pkg, name) is not None, f"{pkg.__name__}.{name}"
    assert "feddyn" in wirelessfl.algorithm_names("rounds")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        wirelessfl.nope  # noqa: B018


KEYS = Path(__file__).parent / "data" / "run_keys"


def _recorded_keys_are_kept(paper, scale, order_before):
    """Every recorded key is made again, under the one dated re-key since (the batch order);
    and with today's default order no recorded key is (new runs are keyed apart)."""
    from wirelessfl.report import RunSpec, load_figures

    recorded = set((KEYS / f"{paper}-{scale}.txt").read_text().split())
    found = {RunSpec(r.panel, r.series, r.value, r.seed, order_before(r.raw)).key
             for f in load_figures(paper, scale) for r in f.runs}
    missing = sorted(recorded - found)
    assert not missing, (f"{len(missing)} of the {len(recorded)} recorded {scale}-scale run keys "
                         f"of {paper} are gone (their runs would train again): {missing[:5]}")
    assert not recorded & {r.key for f in load_figures(paper, scale) for r in f.runs}


@pytest.mark.parametrize("paper", ["hist", "fedast", "fadamgc", "dynamic", "rafed", "codesign"])
def test_recorded_quick_run_keys_are_kept(paper, order_before):
    """Every run key recorded in tests/data/run_keys is still made (new figures may add keys;
    a changed key means a changed run, which re-trains every report that holds it). The
    quick-scale keys of the first five papers are those of the code before the layout change
    (commit 3495931)."""
    _recorded_keys_are_kept(paper, "quick", order_before)


@pytest.mark.slow
@pytest.mark.parametrize("paper", ["hist", "fedast", "fadamgc", "dynamic", "rafed", "codesign"])
def test_recorded_paper_run_keys_are_kept(paper, order_before):
    _recorded_keys_are_kept(paper, "paper", order_before)


def _rows(folder):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in wirelessfl.RunRecord(folder).rows()]


def _costs_as_before(rows):
    """Rows with each round cost's first four entries (rows written before the costs named
    their clients, issue 33, hold only those)."""
    return [{**r, "round_costs": [c[:4] for c in r["round_costs"]]} if "round_costs" in r else r
            for r in rows]


@pytest.mark.parametrize("name", ["scaffold", "fadamgc", "fedadam", "ramfed", "hist"])
def test_a_run_folder_written_before_the_layout_change_resumes(tmp_path, name):
    """The folders were cut after 2 of 4 rounds by the code before the layout change."""
    cut = tmp_path / "cut"
    shutil.copytree(OLD_RUNS / name, cut)
    raw = wirelessfl.RunRecord(cut).config()
    wirelessfl.run_job(wirelessfl.open_run(raw), cut, resume=True, quiet=True)
    wirelessfl.run_job(wirelessfl.open_run(raw), tmp_path / "full", quiet=True)
    assert [r["round"] for r in _rows(cut)] == [0, 1, 2, 3, 4]
    # the cut rows were computed on another machine (its numpy/BLAS): equal to float
    # precision, not bit for bit; the same machine's resumes are exact (test_hardening)
    _close(_costs_as_before(_rows(cut)), _costs_as_before(_rows(tmp_path / "full")))
    _close(_rows(cut)[3:], _rows(tmp_path / "full")[3:])


def _close(a, b):
    """Equal structures, floats to 1e-5 relative."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for k in a:
            _close(a[k], b[k])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-5, abs=1e-7)
    else:
        assert a == b
