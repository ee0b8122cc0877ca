"""The client store on disk (issue 94): the memory store's numbers, exact resume, safe files."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from wirelessfl.algorithms.fadamgc.local import AdamClientState
from wirelessfl.engine.client_store import ClientStore, StateStack, backend_for
from wirelessfl.engine.store_tables import StoreFileError
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord

SHAPES = {"fc1.weight": (6, 5), "fc1.bias": (6,), "out.weight": (3, 6)}


def _tree(rng, n):
    return {k: torch.as_tensor(rng.standard_normal((n, *s)), dtype=torch.float32)
            for k, s in SHAPES.items()}


@pytest.mark.parametrize("kind", [None, AdamClientState], ids=["one tree", "two fields"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_disk_store_equals_the_memory_store_on_the_same_writes(tmp_path, kind, dtype):
    rng = np.random.default_rng(0)
    mem, disk = ClientStore(kind, dtype), ClientStore(kind, dtype, tmp_path / "s")
    fields = ["v", "y"] if kind else [""]
    like = {k: torch.zeros(s) for k, s in SHAPES.items()}
    for _ in range(6):  # new clients, rewritten ones, growth past the doubling
        ids = rng.choice(40, size=7, replace=False)
        written = {f: rng.random(7) < 0.8 for f in fields}
        stack = StateStack({f: _tree(rng, 7) for f in fields}, written, mem.rows(ids), kind, dtype)
        stack_d = StateStack(stack.stacks, written, disk.rows(ids), kind, dtype)
        mem, disk = mem.updated(ids, stack), disk.updated(ids, stack_d)
        probe = rng.choice(50, size=9, replace=False)
        for f in fields:
            a, b = mem.gather(f, probe, like), disk.gather(f, probe, like)
            assert (a is None) == (b is None)
            if a is not None:
                for k in a:
                    assert torch.equal(a[k], b[k])
    assert sorted(mem) == sorted(disk) and mem.nbytes == disk.nbytes
    assert disk.backend == "disk" and mem.backend == "memory"
    u = next(iter(mem))
    got, want = disk[u], mem[u]
    for f in fields:
        x = want if kind is None else getattr(want, f)
        y = got if kind is None else getattr(got, f)
        assert (x is None) == (y is None)
        if x is not None:
            assert all(torch.equal(x[k], y[k]) for k in x)


def test_rows_never_written_take_no_disk(tmp_path):
    """Rows are given to clients as they first write (any ids) and the file grows by
    doubling: the rows allocated ahead take no disk. (Small rows: a test that leaves a
    gigabyte of dirty pages behind slows the suite's later tests.)"""
    store = ClientStore(None, "float32", tmp_path / "s")
    row = 16 * 1024  # bytes: (4, 1024) floats
    store = store.updated(np.arange(300) * 1000, StateStack(
        {"": {"w": torch.ones(300, 4, 1024)}}, {"": np.ones(300, bool)}, None))
    store = store.updated(np.array([10**7]), [{"w": torch.ones(4, 1024)}])  # 301: grows to 600
    f = tmp_path / "s" / "state.w.bin"
    used = os.stat(f).st_blocks * 512
    assert os.stat(f).st_size == 600 * row and used <= 301 * row + (1 << 20)
    store.close()
    f.unlink()


def test_a_checkpoint_of_the_disk_store_resumes_to_its_rows_after_later_and_torn_writes(tmp_path):
    rng = np.random.default_rng(1)
    like = {k: torch.zeros(s) for k, s in SHAPES.items()}
    store = ClientStore(None, "float32", tmp_path / "s")
    ids = np.arange(10)
    store = store.updated(ids, StateStack({"": _tree(rng, 10)}, {"": np.ones(10, bool)}, None))
    plain = store.to_plain()  # the checkpoint
    store.committed()
    want = store.gather("", ids, like)
    for _ in range(3):  # later rounds: overwrite some, add others
        more = rng.choice(30, size=8, replace=False)
        store = store.updated(more, StateStack({"": _tree(rng, 8)}, {"": np.ones(8, bool)}, None))
    with open(tmp_path / "s" / "undo-1.log", "ab") as fh:  # a kill in the middle of a record
        fh.write(b"WFLU\x05\x00" + b"\x07" * 40)
    back = ClientStore.from_plain(plain, None, tmp_path)
    got = back.gather("", ids, like)
    assert sorted(back) == list(range(10))
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert back.gather("", np.array([25, 29]), like) is None or not back.holds(np.array([25])).any()


def test_store_files_that_are_links_foreign_or_truncated_are_one_line(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "linked")
    with pytest.raises(StoreFileError, match="is a link"):
        ClientStore(None, "float32", tmp_path / "linked")
    (tmp_path / "foreign").mkdir()
    with pytest.raises(StoreFileError, match="not a client store"):
        ClientStore(None, "float32", tmp_path / "foreign")
    store = ClientStore(None, "float32", tmp_path / "s")
    store = store.updated(np.arange(4), StateStack({"": {"w": torch.ones(4, 3)}},
                                                   {"": np.ones(4, bool)}, None))
    plain = store.to_plain()
    store.close()
    f = tmp_path / "s" / "state.w.bin"
    os.truncate(f, 12)
    with pytest.raises(StoreFileError, match="truncated"):
        ClientStore.from_plain(plain, None, tmp_path)
    f.unlink()
    os.symlink(tmp_path / "elsewhere" / "x", f)
    with pytest.raises(StoreFileError, match="is a link"):
        ClientStore.from_plain(plain, None, tmp_path)
    assert not (tmp_path / "elsewhere" / "x").exists()


def test_auto_picks_disk_when_the_projected_store_exceeds_its_share_of_memory():
    assert backend_for("auto", 300, available=1000) == "disk"
    assert backend_for("auto", 200, available=1000) == "memory"
    assert backend_for("memory", 10**15, available=1000) == "memory"
    assert backend_for("disk", 1, available=1000) == "disk"
    with pytest.raises(ValueError, match="auto, memory or disk"):
        backend_for("ssd", 1)


RAW = {"seed": 2, "rounds": 6, "eval_every": 1, "checkpoint_every": 2,
       "data": {"dataset": "synthetic", "num_clients": 30, "samples_per_client": None},
       "model": {"name": "fcnn", "options": {"hidden": 16}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 2},
       "algorithm": {"name": "scaffold", "clients_per_round": 6}}


def test_a_disk_store_run_equals_a_memory_store_run_bit_for_bit(tmp_path):
    run_job(open_run({**RAW, "state_store": "memory"}), tmp_path / "m", quiet=True)
    run_job(open_run({**RAW, "state_store": "disk"}), tmp_path / "d", quiet=True)
    assert (tmp_path / "d" / "client-store" / "state.fc1.weight.bin").is_file()
    assert not (tmp_path / "m" / "client-store").exists()
    rows = [[r["test_accuracy"], r["test_loss"]] for r in RunRecord(tmp_path / "m").rows()]
    assert rows == [[r["test_accuracy"], r["test_loss"]] for r in RunRecord(tmp_path / "d").rows()]


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
def test_kill_9_of_a_disk_store_run_resumes_to_the_uninterrupted_rows(tmp_path, kill_9_and_resume):
    """SIGKILL of a real run between checkpoints (rows written to the store after the last
    one, past round 4), then --resume: the rows equal a run straight through."""
    raw = {**RAW, "rounds": 12, "state_store": "disk"}
    run_job(open_run(raw), tmp_path / "straight", quiet=True)
    cut = kill_9_and_resume(raw, 6)
    key = ["round", "test_accuracy", "test_loss"]
    got = [[r[k] for k in key] for r in RunRecord(cut).rows()]
    assert got == [[r[k] for k in key] for r in RunRecord(tmp_path / "straight").rows()]


def test_available_memory_is_read_from_meminfo_and_falls_back_without_it(tmp_path):
    from wirelessfl.engine import host_memory

    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       32000000 kB\nMemAvailable:    1000 kB\n")
    assert host_memory.available_bytes(str(info)) == 1000 * 1024
    info.write_text("MemTotal:       32000000 kB\n")
    assert host_memory.available_bytes(str(info)) == host_memory.FALLBACK_BYTES
    assert host_memory.available_bytes(str(tmp_path / "none")) == host_memory.FALLBACK_BYTES


@pytest.mark.slow  # other processes started, killed or signalled: CI's second step
def test_kill_9_after_a_session_start_resumes_a_disk_store_to_the_uninterrupted_rows(
        tmp_path, kill_9_and_resume):
    """A session start resets SCAFFOLD's c_i: the store is emptied in place, so the files the
    last checkpoint (before the start) names stay, and a kill between that start and the next
    checkpoint resumes exactly (a new store in the folder removed them: "truncated")."""
    raw = {**RAW, "rounds": 9, "checkpoint_every": 3, "state_store": "disk",
           "population": {"kind": "alternating", "groups": 2, "rounds_per_session": 3}}
    run_job(open_run(raw), tmp_path / "straight", quiet=True)
    cut = kill_9_and_resume(raw, 5)  # checkpoint at round 3, a session from round 4, killed in 5-6
    key = ["round", "test_accuracy", "test_loss"]
    got = [[r[k] for k in key] for r in RunRecord(cut).rows()]
    assert got == [[r[k] for k in key] for r in RunRecord(tmp_path / "straight").rows()]
