"""threads: auto chooses a thread count from the free cores, records it, and resume reuses it."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from wirelessfl.run.config import ConfigError, resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob
from wirelessfl.run.threads import (
    busy_sessions,
    choose_threads,
    free_cores,
    session_share,
    torch_threads,
    usable_cpus,
)

RAW = {"name": "threads", "seed": 3, "rounds": 3,
       "data": {"dataset": "synthetic", "num_clients": 4, "samples_per_client": 40},
       "model": {"name": "fcnn", "options": {"hidden": 8, "dropout": 0.5}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 2}, "engine": "loop"}


def test_auto_counts_free_cores_and_an_explicit_choice_wins(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    cpus = usable_cpus()
    assert choose_threads("auto", free=0.0) == 1          # a busy machine: one thread
    assert choose_threads("auto", free=cpus + 5.0) == cpus  # never more than the CPUs
    assert choose_threads("auto", free=1.6) == min(2, cpus)
    assert 0.0 <= free_cores(0.05) <= cpus + 0.5
    assert 1 <= choose_threads("auto") <= cpus
    monkeypatch.setenv("OMP_NUM_THREADS", "3")             # the user's environment wins
    assert choose_threads("auto", free=0.0) == 3
    assert choose_threads(5) == 5
    for bad in (0, -1, 10**6, 2.5, True, "many"):
        with pytest.raises(ValueError, match="threads must be"):
            choose_threads(bad)
        with pytest.raises(ConfigError, match="threads must be"):
            resolve({**RAW, "threads": bad})


def test_torch_threads_restores_the_count():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


def test_a_run_records_its_count_and_resume_reuses_it(tmp_path, monkeypatch, interrupt_after):
    """The count a run chose is in meta.json and its checkpoints; a resume on a machine where
    auto would choose otherwise still computes with it, and gives the uninterrupted numbers."""
    seen, before = [], torch.get_num_threads()

    def spy(exp):
        real = exp.algorithm.apply

        def apply(state):
            seen.append(torch.get_num_threads())
            return real(state)

        monkeypatch.setattr(exp.algorithm, "apply", apply)
        return exp

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run_job(open_run(RAW), tmp_path / "full", quiet=True)
    assert json.loads((tmp_path / "full" / "meta.json").read_text())["threads"] == 1
    assert RunRecord(tmp_path / "full").load_checkpoint()["threads"] == 1
    assert resolve(RAW).threads == "auto"
    assert torch.get_num_threads() == before                # the caller's count is back

    exp = interrupt_after(open_run(RAW).exp, 1)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")              # auto would now choose 2
    run_job(RoundsJob(spy(open_run(RAW).exp)), tmp_path / "cut", resume=True, quiet=True)
    assert seen and set(seen) == {1}
    rows = [[{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(f).rows()]
            for f in (tmp_path / "full", tmp_path / "cut")]
    assert rows[0] == rows[1]


def test_an_explicit_count_beats_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    exp = open_run({**RAW, "threads": 1}).exp
    seen, real = [], exp.algorithm.apply
    monkeypatch.setattr(exp.algorithm, "apply",
                        lambda state: (seen.append(torch.get_num_threads()), real(state))[1])
    run_job(RoundsJob(exp), tmp_path / "one", quiet=True)
    assert set(seen) == {1}
    assert json.loads((tmp_path / "one" / "meta.json").read_text())["threads"] == 1


def test_a_busy_machine_gets_sleeping_openmp_threads_and_batched_runs_every_core(monkeypatch):
    """On a busy machine ``import wirelessfl`` sets OMP_WAIT_POLICY=PASSIVE (before torch
    loads, never over the user's choice); with it the batched engine takes every CPU and
    the loop engine the free cores."""
    import subprocess
    import sys

    from wirelessfl.openmp import choose_wait_policy, machine_busy

    env = {}
    assert choose_wait_policy(env, busy=True, torch_loaded=False) == "PASSIVE"
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    for env, busy, loaded in (({}, False, False), ({}, True, True),
                              ({"OMP_WAIT_POLICY": "ACTIVE"}, True, False)):
        assert choose_wait_policy(env, busy=busy, torch_loaded=loaded) is None
        assert env.get("OMP_WAIT_POLICY") in (None, "ACTIVE")
    cpus = usable_cpus()
    assert machine_busy(float(cpus)) and not machine_busy(cpus - 0.5)

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    assert choose_threads("auto", free=0.0, engine="batched", share=float(cpus)) == cpus
    assert choose_threads("auto", free=0.0, engine="auto", share=cpus + 3.0) == cpus
    assert choose_threads("auto", free=0.0, engine="batched", share=0.4) == 1  # a fifth of 2
    assert choose_threads("auto", free=0.0, engine="loop", share=float(cpus)) == 1
    assert choose_threads(1, free=0.0, engine="batched") == 1
    with pytest.raises(ValueError, match="engine"):
        choose_threads("auto", engine="gpu")
    for bad in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="share"):
            choose_threads("auto", engine="batched", share=bad)

    # importing wirelessfl loads no torch, so the policy it sets is the one torch reads
    code = "import sys, wirelessfl; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # a benchmark harness end to end (~10-25 s): python -m pytest -m slow
def test_threads_benchmark_round_runs_each_setting_as_configured():
    """``benchmarks/threads.py --round``'s runner: the policy and count it sets are the ones
    the fresh interpreter computes with (one timed round of 4 clients each)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "threads.py"
    spec = importlib.util.spec_from_file_location("threads_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seconds, threads, policy = bench.run_round("passive 1", 1, clients=4)
    assert seconds > 0 and (threads, policy) == (1, "PASSIVE")
    seconds, threads, policy = bench.run_round("wirelessfl default", 1, clients=4)
    assert seconds > 0 and 1 <= threads <= usable_cpus() and policy in ("unset", "PASSIVE")


def test_session_share_is_fair_between_sessions_and_leaves_unused_parts():
    assert session_share(2, []) == 2.0                     # alone
    assert session_share(2, [4.0]) == 1.0                  # one job of four: half
    assert session_share(2, [1, 1, 1, 1]) == pytest.approx(0.4)
    assert session_share(8, [1.0, 2.0]) == 5.0             # they use 3 of 8
    assert session_share(8, [1.0, 20.0]) == 3.5            # 1 used, 7 split in two
    assert session_share(4, [0.2, 0.4]) == 4.0             # below half a thread: idle
    for bad in (0, -2, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="cpus"):
            session_share(bad, [1.0])


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc")
def test_busy_sessions_counts_other_sessions_runnable_threads_not_its_own():
    code = "x = 1.0\nwhile True:\n    x = x * 1.000001 + 1e-9"
    mine = subprocess.Popen([sys.executable, "-c", code])
    other = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        time.sleep(0.3)
        seen = busy_sessions(samples=5, interval_s=0.02)
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()
    assert seen.get(other.pid, 0.0) >= 0.6        # the new session's leader: its id is its pid
    assert os.getsid(0) not in seen and 0 not in seen
    with pytest.raises(ValueError, match="samples"):
        busy_sessions(samples=0)


def test_auto_is_decided_again_between_rounds_and_resume_keeps_the_numbers(tmp_path, monkeypatch,
                                                                          interrupt_after):
    """A load that lifts after round 2 moves ``threads: auto`` from 1 thread to 2 between
    rounds; the checkpoint holds the count and its changes, and a run cut after round 3 and
    resumed computes every round with the uninterrupted run's count and gives its rows (the
    loop engine, whose sums depend on the count)."""
    import functools

    from wirelessfl.run import shell
    from wirelessfl.run.threads import ThreadGovernor

    if usable_cpus() < 2:
        pytest.skip("needs 2 CPUs")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    raw = {**RAW, "rounds": 6}
    done = [0]
    free = lambda: {"free": 0.3 if done[0] <= 2 else 2.0}  # noqa: E731 - the scripted load
    monkeypatch.setattr(shell, "ThreadGovernor",
                        functools.partial(ThreadGovernor, interval_s=0.0, measure=free, count=1))

    def spy(exp, seen):
        real = exp.algorithm.apply

        def apply(state):
            seen.append(torch.get_num_threads())
            out = real(state)
            done[0] = out[0].round
            return out

        monkeypatch.setattr(exp.algorithm, "apply", apply)
        return exp

    full, cut = [], []
    run_job(RoundsJob(spy(open_run(raw).exp, full)), tmp_path / "full", quiet=True)
    assert full == [1, 1, 1, 2, 2, 2]                     # decided after rounds 1, 2, 3, ...
    ckpt = RunRecord(tmp_path / "full").load_checkpoint()
    assert ckpt["threads"] == 2 and ckpt["thread_changes"] == [[3, 2]]

    done[0] = 0
    exp = interrupt_after(spy(open_run(raw).exp, cut), 3)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    run_job(RoundsJob(spy(open_run(raw).exp, cut)), tmp_path / "cut", resume=True,
            quiet=True)
    assert cut == full
    assert RunRecord(tmp_path / "cut").load_checkpoint()["thread_changes"] == [[3, 2]]
    rows = [[{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(f).rows()]
            for f in (tmp_path / "full", tmp_path / "cut")]
    assert rows[0] == rows[1]


def test_the_governor_follows_measured_load_and_keeps_a_fixed_count(monkeypatch):
    from wirelessfl.run.threads import ThreadGovernor

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    cpus = usable_cpus()
    loads = iter([{"free": 0.2}, {"free": float(cpus)}, {"share": 0.4}])
    gov = ThreadGovernor("auto", "batched", interval_s=0.0, measure=lambda: next(loads), count=cpus)
    assert [gov.between(k) for k in (1, 2, 3)] == [1, cpus, 1]
    assert gov.changes == ([[1, 1], [2, cpus], [3, 1]] if cpus > 1 else [])
    slow = ThreadGovernor("auto", "batched", interval_s=3600.0, measure=lambda: {"free": 0.0},
                          count=cpus)
    assert slow.between(1) == cpus and not slow.changes  # within the interval: unchanged
    for fixed in (ThreadGovernor(1, "batched", interval_s=0.0, measure=lambda: {"free": 9.0}),):
        assert fixed.fixed and fixed.between(1) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert ThreadGovernor("auto", "loop", interval_s=0.0, measure=lambda: {"free": 9.0}).fixed
    with pytest.raises(ValueError, match="interval_s"):
        ThreadGovernor("auto", "batched", interval_s=-1.0)
    # the machine's own meter: other processes' CPUs, never negative, never more than exist
    monkeypatch.delenv("OMP_NUM_THREADS")
    from wirelessfl.run.threads import _LoadMeter
    meter = _LoadMeter()
    sum(i * i for i in range(200_000))  # this process's own work is not the others' load
    others = meter.others()
    assert others is None or 0.0 <= others <= cpus + 0.5


@pytest.mark.slow  # a benchmark harness end to end (~10-20 s): python -m pytest -m slow
def test_threads_governor_benchmark_runs_a_whole_run_and_reads_its_checkpoint():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "threads_governor.py"
    spec = importlib.util.spec_from_file_location("threads_governor", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.one_run("auto", 1, "spike", 1, 0.5)
    assert out["wall_s"] > 0 and 1 <= out["threads"] <= usable_cpus()
    assert isinstance(out["changes"], list)
