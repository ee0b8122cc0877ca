"""Many runs trained as one computation (issue 55): a lockstep group gives each run its solo
numbers, lets runs end early, resumes, and groups only runs that can share."""

import numpy as np
import pytest
import torch

from wirelessfl.data import datasets
from wirelessfl.data.arrays import ArrayDataset, DatasetSplits
from wirelessfl.report.local import execute_local, lockstep_groups, run_group, share_signature
from wirelessfl.report.spec import RunSpec, run_folder
from wirelessfl.run.config import apply_overrides
from wirelessfl.run.records import RunRecord


def _toy_data(_folder):
    gen = torch.Generator().manual_seed(0)
    centres = torch.randn(4, 12, generator=gen) * 2

    def split(n):
        y = torch.arange(n) % 4
        return ArrayDataset(centres[y] + torch.randn(n, 12, generator=gen), y, 4)
    return DatasetSplits("lockstep_toy", split(480), split(120))


@pytest.fixture
def toy_data(monkeypatch):
    monkeypatch.setattr(datasets, "USER_DATASETS", dict(datasets.USER_DATASETS))
    datasets.register_dataset("lockstep_toy", _toy_data)


BASE = {"rounds": 5, "data": {"dataset": "lockstep_toy", "partition": "shards", "num_clients": 8},
        "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
        "local": {"lr": 0.05, "batch_size": 10, "steps": 3},
        "algorithm": {"name": "fedavg"}}


def _run(label, seed, **over):
    raw = apply_overrides(BASE, [f"seed={seed}", *(f"{k}={v}" for k, v in over.items())])
    return RunSpec("", label, None, seed, raw)


def _final(folder):
    return torch.load(folder / "checkpoint.pt", weights_only=False)["params"]


def _rows(root, run):
    return [{k: v for k, v in r.items() if k not in ("wall_s",)}
            for r in RunRecord(run_folder(root, run)).rows()]


RUNS = [_run("a", 0), _run("b", 1, **{"local.lr": 0.1}),
        _run("c", 2, **{"algorithm.name": "fedavg", "algorithm.clients_per_round": 4})]


def test_a_group_of_three_gives_each_run_its_solo_rows(toy_data, tmp_path):
    """Different seeds, learning rates and sampling: each run's rows and final model in the
    group equal its solo run's to 1e-5 relative (float rounding of other stack sizes)."""
    assert len(lockstep_groups(RUNS, 64)) == 1
    run_group(RUNS, tmp_path / "group", quiet=True, log=lambda _: None)
    for r in RUNS:
        execute_local([r], tmp_path / "solo", quiet=True, log=lambda _: None, batch_runs=1)
        together, alone = _rows(tmp_path / "group", r), _rows(tmp_path / "solo", r)
        assert [x["round"] for x in together] == [x["round"] for x in alone] == list(range(6))
        for x, y in zip(together, alone):
            assert x["test_accuracy"] == pytest.approx(y["test_accuracy"], abs=1e-6)
            assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-5)
        a, b = _final(run_folder(tmp_path / "group", r)), _final(run_folder(tmp_path / "solo", r))
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_a_group_trains_its_runs_as_one_batch_with_no_task_per_client(toy_data, tmp_path,
                                                                     monkeypatch):
    """The runs' batches meet as one ClientBatch: the per-client contract is never entered."""
    from wirelessfl.engine.batched import BatchedExecutor

    def per_client(*_a, **_k):
        raise AssertionError("a group's round went through per-client tasks")

    monkeypatch.setattr(BatchedExecutor, "run", per_client)
    run_group(RUNS, tmp_path, quiet=True, log=lambda _: None)
    for r in RUNS:
        assert len(_rows(tmp_path, r)) == 6


def test_hierarchical_runs_of_other_cells_and_masks_keep_their_solo_rows(toy_data, tmp_path):
    """HFedAvg N = 2, HIST N = 4 and HIST N = 2 at another learning rate in one group."""
    hier = {"algorithm.name": "hist", "algorithm.edge_rounds": 2, "rounds": 3}
    runs = [_run("h2", 0, **hier, **{"algorithm.cells": 2, "algorithm.split": False}),
            _run("h4", 1, **hier, **{"algorithm.cells": 4}),
            _run("s2", 2, **hier, **{"algorithm.cells": 2, "local.lr": 0.1})]
    assert len(lockstep_groups(runs, 64)) == 1
    run_group(runs, tmp_path / "group", quiet=True, log=lambda _: None)
    execute_local(runs, tmp_path / "solo", quiet=True, log=lambda _: None, batch_runs=1)
    for r in runs:
        together, alone = _rows(tmp_path / "group", r), _rows(tmp_path / "solo", r)
        assert [x["round"] for x in together] == [x["round"] for x in alone] == list(range(4))
        for x, y in zip(together, alone):
            assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_group_on_cuda_gives_each_run_its_solo_rows_and_the_cpus(toy_data, tmp_path):
    """On a GPU too: the group's rows equal each run's solo CUDA rows (1e-5) and the CPU's
    (1e-4: other kernels, other summation orders)."""
    on = {d: [RunSpec(r.panel, r.series, r.value, r.seed, {**r.raw, "device": d}) for r in RUNS]
          for d in ("cuda", "cpu")}
    run_group(on["cuda"], tmp_path / "group", quiet=True, log=lambda _: None)
    for gpu, cpu in zip(on["cuda"], on["cpu"]):
        execute_local([gpu], tmp_path / "solo", quiet=True, log=lambda _: None, batch_runs=1)
        execute_local([cpu], tmp_path / "cpu", quiet=True, log=lambda _: None, batch_runs=1)
        together, alone = _rows(tmp_path / "group", gpu), _rows(tmp_path / "solo", gpu)
        host = _rows(tmp_path / "cpu", cpu)
        for x, y, z in zip(together, alone, host, strict=True):
            assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-5)
            assert x["test_loss"] == pytest.approx(z["test_loss"], rel=1e-4)


def test_a_run_that_stops_at_its_target_leaves_the_others_rows_unchanged(toy_data, tmp_path):
    early = _run("early", 3, **{"target_accuracy": 0.3, "stop_at_target": "true"})
    run_group([*RUNS[:2], early], tmp_path / "g", quiet=True, log=lambda _: None)
    run_group(RUNS[:2], tmp_path / "h", quiet=True, log=lambda _: None)
    assert len(_rows(tmp_path / "g", early)) < 6
    for r in RUNS[:2]:
        for x, y in zip(_rows(tmp_path / "g", r), _rows(tmp_path / "h", r), strict=True):
            assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-5)


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
def test_a_killed_group_resumes_to_the_uninterrupted_rows(toy_data, tmp_path):
    """kill -9 of a group's process mid-run leaves every run resumable: the group resumed
    ends with the rows of a group never killed (to float rounding)."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    runs = [RunSpec(r.panel, r.series, r.value, r.seed, {**r.raw, "rounds": 40}) for r in RUNS]
    script = (
        "import json, sys; sys.path.insert(0, 'tests')\n"
        "from test_lockstep import _toy_data\n"
        "from wirelessfl.data import datasets\n"
        "from wirelessfl.report.spec import RunSpec\n"
        "from wirelessfl.report.local import run_group\n"
        "datasets.register_dataset('lockstep_toy', _toy_data)\n"
        "runs = [RunSpec(*r) for r in json.loads(sys.argv[1])]\n"
        "from pathlib import Path\n"
        "run_group(runs, Path(sys.argv[2]), quiet=True, log=lambda _: None)\n")
    spec = json.dumps([[r.panel, r.series, r.value, r.seed, r.raw] for r in runs])
    proc = subprocess.Popen([sys.executable, "-c", script, spec, str(tmp_path / "cut")],
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        rows = [RunRecord(run_folder(tmp_path / "cut", r)).rows()
                if (run_folder(tmp_path / "cut", r) / "metrics.jsonl").is_file() else []
                for r in runs]
        if all(len(x) >= 4 for x in rows):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    cut_at = [len(RunRecord(run_folder(tmp_path / "cut", r)).rows()) for r in runs]
    assert min(cut_at) >= 4 and max(cut_at) < 41, cut_at  # killed mid-run
    run_group(runs, tmp_path / "cut", quiet=True, log=lambda _: None)
    run_group(runs, tmp_path / "whole", quiet=True, log=lambda _: None)
    for r in runs:
        got, want = _rows(tmp_path / "cut", r), _rows(tmp_path / "whole", r)
        assert [x["round"] for x in got] == list(range(41))
        for x, y in zip(got, want, strict=True):
            assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-5)


def test_deterministic_and_free_runs_are_never_one_group(toy_data):
    """``deterministic`` flips process-wide PyTorch flags: a group's threads must agree on it."""
    strict = _run("d", 0, deterministic=True)
    assert share_signature(strict) != share_signature(RUNS[0])
    assert share_signature(strict) == share_signature(_run("d2", 1, deterministic=True))
    groups = lockstep_groups([RUNS[0], strict, RUNS[1]], 64)
    assert sorted(map(len, groups)) == [1, 2]
    assert [strict] in groups


def test_runs_that_cannot_share_are_not_grouped(toy_data):
    other_model = _run("m", 0, **{"model.options.hidden": 32})
    loop = _run("l", 0, engine="loop")
    steps = _run("s", 0, **{"local.steps": 4})
    synthetic = RunSpec("", "syn", None, 0, {**BASE, "data": {"dataset": "synthetic",
                                                              "num_clients": 8}})
    multitask = RunSpec("", "mt", None, 0, {"tasks": ["fmnist_lenet5"]})
    assert share_signature(loop) is None and share_signature(synthetic) is None
    assert share_signature(multitask) is None
    groups = lockstep_groups([RUNS[0], other_model, loop, steps, RUNS[1], synthetic], 64)
    assert sorted(map(len, groups)) == [1, 1, 1, 1, 2]
    assert lockstep_groups(RUNS, 1) == [[r] for r in RUNS]  # --batch-runs 1: all alone
    assert [len(g) for g in lockstep_groups(RUNS, 2)] == [2, 1]
    if not torch.cuda.is_available():  # the default: groups on a GPU, none on a CPU
        assert lockstep_groups(RUNS, None) == [[r] for r in RUNS]


def test_runs_beyond_one_group_are_split_into_groups_of_equal_rounds(toy_data):
    """Two long and four short runs in groups of at most 3: each group gets one long run and
    two short ones (not the long runs together), in the runs' order."""
    long = [_run(f"l{i}", i, rounds=30) for i in range(2)]
    short = [_run(f"s{i}", i, rounds=10) for i in range(4)]
    runs = [long[0], long[1], *short]
    groups = lockstep_groups(runs, 3)
    assert len(groups) == 2 and sorted(map(len, groups)) == [3, 3]
    for g in groups:
        assert sum(int(r.raw["rounds"]) for r in g) == 50
        assert [runs.index(r) for r in g] == sorted(runs.index(r) for r in g)
    assert sorted(r.series for g in groups for r in g) == sorted(r.series for r in runs)


def test_the_group_engine_merges_each_steps_calls_into_one(toy_data, tmp_path):
    lines = []
    run_group(RUNS, tmp_path, quiet=True, log=lines.append)
    calls, merged = map(int, np.array(lines[-1].split())[[2, 6]])
    assert merged == 3 * calls and calls == 5  # one engine call per round for three runs


def test_a_groups_merged_step_is_replayed_whichever_run_arrives_first(toy_data, tmp_path):
    """The merged call is served in the members' order, so it is trained with the same run's
    model every round and the step replay keeps its recording (keyed by the model): with
    ``replay: on`` every step but the recording and its check is replayed (two merged calls a
    round: one per learning rate, 0.05 for runs a and c, 0.1 for b). Served in the order the
    threads arrived, a recording was dropped whenever another run came first."""
    runs = [RunSpec(r.panel, r.series, r.value, r.seed, {**r.raw, "replay": "on"}) for r in RUNS]
    lines = []
    run_group(runs, tmp_path, quiet=True, log=lines.append)
    assert lines[-1].endswith(f"; {2 * (5 * 3 - 2)} local steps replayed"), lines[-1]


def test_dynamic_client_sessions_join_a_group_with_their_solo_rows(fmnist, tmp_path):
    """The sessions' pilot and fingerprint training goes through the group's engine too."""
    from wirelessfl.run.config import load_raw

    base = apply_overrides(load_raw("proposed_fmnist"), [
        "rounds=8", "population.rounds_per_session=2", "data.num_clients=8", "local.steps=2"])
    runs = [RunSpec("", "d", None, s, apply_overrides(base, [f"seed={s}"])) for s in (0, 1)]
    lines = []
    run_group(runs, tmp_path / "g", quiet=True, log=lines.append)
    assert "2 runs: " in lines[-1]
    for r in runs:
        execute_local([r], tmp_path / "s", quiet=True, log=lambda _: None, batch_runs=1)
        for x, y in zip(_rows(tmp_path / "g", r), _rows(tmp_path / "s", r), strict=True):
            assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-5)


def test_an_error_in_one_run_lets_the_others_finish_and_is_raised(toy_data, tmp_path, monkeypatch):
    from wirelessfl.run import rounds

    real = rounds.RoundsJob.__init__

    def broken(self, exp):
        if exp.config.seed == 1:
            raise RuntimeError("a bug in run b")
        real(self, exp)

    monkeypatch.setattr(rounds.RoundsJob, "__init__", broken)
    with pytest.raises(RuntimeError, match="a bug in run b"):
        run_group(RUNS, tmp_path, quiet=True, log=lambda _: None)
    assert RunRecord(run_folder(tmp_path, RUNS[0])).summary() is not None
    assert RunRecord(run_folder(tmp_path, RUNS[2])).summary() is not None


def test_the_groups_progress_reads_each_runs_last_complete_row(tmp_path):
    """The progress bar's count: the last whole row's round, however long the rows or the file."""
    import json

    from wirelessfl.report.local import _rounds_done

    long_row = {"round": 0, "clients": list(range(3000))}  # ~15 KB: past the first tail read
    a = tmp_path / "a.jsonl"
    a.write_text("".join(json.dumps({**long_row, "round": r}) + "\n" for r in range(40)))
    b = tmp_path / "b.jsonl"
    b.write_text('{"round": 0}\n{"round": 1}\n{"round": 2, "test_acc')  # a row being written
    missing, folder = tmp_path / "none.jsonl", tmp_path / "dir.jsonl"
    folder.mkdir()
    assert _rounds_done([a]) == 39
    assert _rounds_done([b]) == 1
    assert _rounds_done([a, b, missing, folder]) == 40
    (tmp_path / "c.jsonl").write_text('{"round": 7, "clients": [' + "1, " * 20000)  # one cut row
    assert _rounds_done([tmp_path / "c.jsonl"]) == 0


@pytest.mark.parametrize("algorithm, lr", [("scaffold", 0.05), ("fadamgc", 0.01)])
def test_runs_with_stacked_client_stores_keep_their_solo_rows(toy_data, tmp_path, algorithm, lr):
    """SCAFFOLD's or FAdamGC's runs (each its own stacked store of c_i, or v_i and y_i) in one
    group: the merged batch reads each run's store and writes each run's new states to it."""
    runs = [_run(f"{algorithm}{i}", i, **{"algorithm.name": algorithm, "local.lr": lr * (1 + i),
                                         "algorithm.clients_per_round": 4}) for i in range(2)]
    assert len(lockstep_groups(runs, 64)) == 1
    run_group(runs, tmp_path / "group", quiet=True, log=lambda _: None)
    execute_local(runs, tmp_path / "solo", quiet=True, log=lambda _: None, batch_runs=1)
    for r in runs:
        together, alone = _rows(tmp_path / "group", r), _rows(tmp_path / "solo", r)
        assert len(together) == len(alone) == 6
        for x, y in zip(together, alone):
            assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-5)


def test_runs_are_dealt_by_their_work_not_their_rounds(toy_data):
    """HIST at N = 2 trains half the model a round, at N = 4 a quarter: four 30-round runs in
    groups of 2 get one of each, whatever their order (by rounds alone, the runs' order put
    both N = 2 runs in one group)."""
    from wirelessfl.algorithms.hist.hfedavg import HFedAvg
    from wirelessfl.report.local import run_work

    def hist(label, seed, cells):
        return _run(label, seed, rounds=30, **{"algorithm.name": "hist", "algorithm.cells": cells})
    runs = [hist("a", 0, 2), hist("b", 0, 4), hist("c", 1, 2), hist("d", 1, 4)]
    assert run_work(runs[0]) == 30 * HFedAvg.round_work({"cells": 2, "edge_rounds": 5,
                                                          "split": True}) == 30 * 3.5
    assert run_work(runs[1]) == 30 * 2.25
    assert HFedAvg.round_work({"cells": 4, "edge_rounds": 5, "split": False}) == 6.0
    groups = lockstep_groups(runs, 2)
    dealt = sorted(sorted(r.label[0] for r in g) for g in groups)
    assert dealt in ([["a", "b"], ["c", "d"]], [["a", "d"], ["b", "c"]])  # an N = 2 run each
    works = [sum(run_work(r) for r in g) for g in groups]
    assert works[0] == works[1]


@pytest.mark.parametrize("work", [float("nan"), -1.0, 0, float("inf"), "2", True])
def test_a_plugins_round_work_that_is_no_positive_number_is_refused(toy_data, work):
    """A plug-in's ``round_work`` is checked where groups are dealt: NaN or a negative work
    would otherwise deal every run to one group without a word."""
    from wirelessfl import registry
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
    from wirelessfl.errors import ConfigError
    from wirelessfl.report.local import run_work

    class Odd(FedAvg):
        @classmethod
        def round_work(cls, settings):
            return work

    registry.register("odd_work", FedAvgHParams, Odd)
    try:
        with pytest.raises(ConfigError, match="odd_work.*round_work returned.*finite number > 0"):
            run_work(_run("a", 0, **{"algorithm.name": "odd_work"}))
        assert run_work(_run("b", 0, **{"algorithm.name": "fedavg"})) == 5.0
    finally:
        registry.unregister("odd_work")


def test_runs_of_other_submodel_shapes_get_their_results_as_stacks(toy_data, tmp_path,
                                                                   monkeypatch):
    """HIST at N = 2 and 4 and HFedAvg in one group: each merged call holds one shape of
    starts, so every run gets its clients' results as stacks (views of the engine's), not as
    objects per client that it would stack again."""
    from wirelessfl.engine.lockstep import Lockstep

    hier = {"algorithm.name": "hist", "algorithm.edge_rounds": 2, "rounds": 2}
    runs = [_run("h2", 0, **hier, **{"algorithm.cells": 2, "algorithm.split": False}),
            _run("h4", 1, **hier, **{"algorithm.cells": 4}),
            _run("s2", 2, **hier, **{"algorithm.cells": 2})]
    seen, share = [], Lockstep._share

    def recording(self, calls, batch):
        share(self, calls, batch)
        seen.extend((len(batch.shape_groups()), c.results.stacked) for c in calls)

    monkeypatch.setattr(Lockstep, "_share", recording)
    run_group(runs, tmp_path, quiet=True, log=lambda _: None)
    assert len(seen) == 3 * 2 * 2 and all(seen[i] == (1, True) for i in range(len(seen))), seen


@pytest.mark.parametrize("work", ["raise", float("nan")])
def test_a_plugins_bad_round_work_is_one_line_before_any_folder_is_claimed(tmp_path, capsys,
                                                                            work):
    """A ``round_work`` that raises or returns a bad value: ``sweep`` says so in one line,
    naming the algorithm and the hook, and leaves no report folder behind."""
    from wirelessfl import registry
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
    from wirelessfl.cli import main

    class Odd(FedAvg):
        @classmethod
        def round_work(cls, settings):
            if work == "raise":
                raise KeyError("cells")
            return work

    registry.register("odd_hook", FedAvgHParams, Odd)
    try:
        (tmp_path / "c.yaml").write_text(
            "rounds: 2\ndata: {dataset: synthetic, num_clients: 4, samples_per_client: 20}\n"
            "model: {name: fcnn, options: {hidden: 8}}\nalgorithm: {name: odd_hook}\n")
        code = main(["sweep", str(tmp_path / "c.yaml"), "--grid", "local.lr=0.01,0.02",
                     "--out", str(tmp_path / "sw"), "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and "odd_hook" in err[-1] and "round_work" in err[-1], err
        assert "Traceback" not in "\n".join(err)
        assert not (tmp_path / "sw").exists()
    finally:
        registry.unregister("odd_hook")
