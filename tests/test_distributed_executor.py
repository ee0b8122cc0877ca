"""Clients over two gloo worker processes give the numbers of one process."""

import threading

import numpy as np
import pytest
import torch

from wirelessfl.data import ArrayDataset
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientError, ClientTask, LocalHParams, LocalSGD
from wirelessfl.engine.distributed import DistributedExecutor
from wirelessfl.models import build_model
from wirelessfl.run.kinds import run_job
from wirelessfl.run.rounds import RoundsJob


@pytest.fixture
def two_workers():
    with DistributedExecutor(workers=2, threads=1) as ex:
        yield ex


def _setup(seed=0):
    model = build_model("fcnn", (1, 28, 28), 10, seed=0, hidden=16, dropout=0.5)
    hp = LocalHParams(lr=0.05, batch_size=8, steps=3, optimizer="adam")
    g = torch.Generator().manual_seed(seed)
    data = ArrayDataset(torch.randn(200, 1, 28, 28, generator=g),
                        torch.randint(0, 10, (200,), generator=g), 10)
    sizes = [30, 12, 0, 40, 25, 9, 33]            # unequal, one client without data
    starts = np.cumsum([0] + sizes)
    tasks = [ClientTask(c, model.params(), np.arange(starts[c], starts[c] + n), seed=50 + c)
             for c, n in enumerate(sizes)]
    return LocalSGD(model, hp), data, tasks, hp


def test_two_gloo_workers_give_the_one_process_numbers(two_workers):
    update, data, tasks, hp = _setup()
    one = BatchedExecutor().run(update, data, tasks, hp)
    for _ in range(2):                            # a second round reuses the workers and data
        split = two_workers.run(update, data, tasks, hp)
        assert [r.client for r in split] == [t.client for t in tasks]
        for a, b in zip(one, split):
            assert (a.num_steps, a.num_samples) == (b.num_steps, b.num_samples)
            for k in a.delta:
                torch.testing.assert_close(b.delta[k], a.delta[k], rtol=1e-6, atol=1e-8)
    assert two_workers.run(update, data, [], hp) == []


def test_two_workers_fold_their_shares_into_the_one_process_mean(two_workers):
    from wirelessfl.engine.client import DeltaFold

    update, data, tasks, hp = _setup(seed=2)
    w = np.array([len(t.indices) for t in tasks], float) + 1
    one, split = DeltaFold(w), DeltaFold(w)
    BatchedExecutor().run(update, data, tasks, hp, one)
    results = two_workers.run(update, data, tasks, hp, split)
    assert [r.client for r in results] == [t.client for t in tasks]
    assert all(r.delta == {} for r in results) and split.folded == len(tasks)
    for k, v in one.mean().items():
        torch.testing.assert_close(split.mean()[k], v, rtol=1e-6, atol=1e-8)


def test_a_failing_worker_is_reported_and_the_group_goes_on(two_workers):
    update, data, tasks, hp = _setup(seed=1)
    bad = ClientTask(99, {"nope": torch.zeros(1)}, np.arange(5), seed=1)
    with pytest.raises(ClientError, match="rank 1"):
        two_workers.run(update, data, tasks[:3] + [bad], hp)   # the bad task is rank 1's
    assert len(two_workers.run(update, data, tasks, hp)) == len(tasks)


def test_workers_are_checked():
    for bad in (1, 0, 10**6, 2.0, True):
        with pytest.raises(ValueError, match="workers must be"):
            DistributedExecutor(workers=bad)
    with pytest.raises(ValueError, match="device must be"):
        DistributedExecutor(workers=2, device="tpu")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="threads must be"):
            DistributedExecutor(workers=2, threads=bad)


def test_engine_distributed_runs_as_batched(tmp_path):
    """A whole run with engine: distributed (two processes) has the batched run's metrics, and
    its workers stop with the run."""
    from wirelessfl.run.config import ConfigError, resolve
    from wirelessfl.run.kinds import open_run
    from wirelessfl.run.records import RunRecord

    raw = {"name": "dist", "seed": 4, "rounds": 2,
           "data": {"dataset": "synthetic", "num_clients": 5, "samples_per_client": 40},
           "model": {"name": "fcnn", "options": {"hidden": 8, "dropout": 0.5}},
           "local": {"lr": 0.05, "batch_size": 10, "steps": 2}}
    rows = []
    for engine in ("batched", "distributed"):
        exp = open_run({**raw, "engine": engine}).exp
        run_job(RoundsJob(exp), tmp_path / engine, quiet=True)
        rows.append([(r["round"], r["test_accuracy"]) for r in RunRecord(tmp_path / engine).rows()])
        if engine == "distributed":
            assert exp.algorithm.env.executor._procs == []          # stopped with the run
    assert rows[0] == rows[1]
    for bad in (1, 300, "many"):
        with pytest.raises(ConfigError, match="workers"):
            resolve({**raw, "engine": "distributed", "workers": bad})


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_worker_killed_or_stopped_mid_run_is_one_line_within_a_bounded_time(how):
    """kill -9 or SIGSTOP of a worker: the round fails within seconds with one line naming
    the worker (not a hang), the workers are gone, and the next round starts a fresh group."""
    import os
    import signal
    import time

    update, data, tasks, hp = _setup(seed=3)
    ex = DistributedExecutor(workers=2, threads=1)
    try:
        assert len(ex.run(update, data, tasks, hp)) == len(tasks)
        worker = ex._procs[0]
        os.kill(worker.pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        t = time.perf_counter()
        with pytest.raises(ClientError, match="rank 1") as info:
            ex.run(update, data, tasks, hp)
        assert time.perf_counter() - t < 30 and len(str(info.value).splitlines()) == 1
        assert "resume" in str(info.value)
        assert not [t.name for t in threading.enumerate() if t.name.startswith("wirelessfl-")]
        worker.join(timeout=10)
        assert not worker.is_alive() and ex._procs == []
        assert len(ex.run(update, data, tasks, hp)) == len(tasks)   # a fresh group
    finally:
        ex.close()


def test_workers_are_capped_by_the_clients():
    from wirelessfl.run.config import ConfigError
    from wirelessfl.run.kinds import open_run

    raw = {"seed": 1, "rounds": 1, "engine": "distributed", "workers": 5,
           "data": {"dataset": "synthetic", "num_clients": 4}}
    with pytest.raises(ConfigError, match="more than the 4 clients"):
        open_run(raw)


def test_a_worker_that_dies_before_the_group_joins_is_named_within_seconds():
    """The join is watched as a round is (before: 300 s of silence, then a line blaming
    memory): rank 1 exits at start-up and the executor says so, naming it, in seconds."""
    import functools
    import os
    import time

    ex = DistributedExecutor(workers=2, threads=1, worker_init=functools.partial(os._exit, 3))
    t0 = time.monotonic()
    with pytest.raises(ClientError, match=r"rank 1 .* died \(exit code 3\); the run cannot start"):
        ex._start()
    assert time.monotonic() - t0 < 60
    assert not ex._procs  # nothing left behind
    # ... and no thread still in a rendezvous (one that returned during the interpreter's
    # shutdown aborted the whole process, test session included)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("wirelessfl-")]
