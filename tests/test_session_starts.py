"""Algorithm 1 at session starts (docs/papers/dynamic_clients.md §2.2-2.6, §3): pilot, fingerprints, rules."""

import pytest
import torch

from wirelessfl.algorithms.dynamic.sessions import SessionStarts, session_store_bytes
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord, load_plain
from wirelessfl.run.rounds import RoundsJob

RAW = {"name": "a1", "seed": 4, "rounds": 8,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
       "model": {"name": "fcnn", "options": {"hidden": 8, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3},
       "algorithm": {"name": "scaffold"},
       "population": {"kind": "alternating", "rounds_per_session": 2}}


def _run(tmp_path, name, **initial):
    raw = {**RAW, "name": name, "initial_model": {"fingerprint_batch": 16, **initial}}
    run_job(open_run(raw), tmp_path / name, quiet=True)
    return [{k: v for k, v in r.items() if k not in ("wall_s", "init_weights")}
            for r in RunRecord(tmp_path / name).rows()]


def test_r_zero_proposed_is_average_and_one_stored_model_is_previous(tmp_path):
    """Sessions 0 (pilot), 1 = P (from w_rand), 2 (one stored model), 3 (two)."""
    prev = _run(tmp_path, "prev", rule="previous")
    avg = _run(tmp_path, "avg", rule="average")
    prop0 = _run(tmp_path, "p0", rule="proposed", scale=0.0)
    prop = _run(tmp_path, "p", rule="proposed", scale=10.0)
    assert prop0 == avg                       # R = 0: uniform weights, the same numbers
    assert prev[:7] == avg[:7] == prop[:7]    # up to session 3 every rule agrees
    assert prev[7:] != avg[7:]                # session 3 starts from the mean of two models
    w = [r.get("init_weights") for r in RunRecord(tmp_path / "p").rows()]
    assert w[5] == [1.0] and len(w[7]) == 2 and sum(w[7]) == pytest.approx(1.0)
    none = _run(tmp_path, "none", rule="none")
    assert none[:3] == prev[:3] and none[3] != prev[3]   # previous restarts from w_rand at P


def test_pilot_model_fingerprints_and_resets_at_the_session_starts():
    raw = {**RAW, "initial_model": {"rule": "proposed", "pilot_sessions": 2,
                                    "fingerprint_batch": 16}}
    cfg = resolve(raw)
    exp = open_run(cfg).exp
    s0 = exp.initial_state()
    starts = SessionStarts(cfg.initial_model, exp.algorithm, cfg.algorithm, s0)
    s1, _ = exp.algorithm.apply(s0)
    s1 = s1.__class__({k: v + 1 for k, v in s0.params.items()}, 2, s1.opt_state,
                      s1.client_states, s1.buffers)
    out = starts(s1, 2, 1)                                  # end of pilot session 0
    assert out.opt_state is None and not out.client_states  # SCAFFOLD's c, c_i reset
    assert all(torch.equal(out.params[k], s1.params[k]) for k in s1.params)  # pilot: kept
    s3 = s1.__class__({k: v + 3 for k, v in s0.params.items()}, 4)
    out = starts(s3, 4, 2)                                  # end of pilot session 1 = P
    for k in s0.params:
        torch.testing.assert_close(starts.w_pilot[k], s0.params[k] + 2)   # eq. (3)
        assert torch.equal(out.params[k], s0.params[k])     # session P starts from w_rand
        assert torch.equal(s3.params[k], s0.params[k] + 3)  # fingerprints leave it alone
    assert set(starts.current_fp) == set(s0.params) and any(
        float(v.abs().max()) > 0 for v in starts.current_fp.values())


def test_resume_with_a_session_store_gives_the_uninterrupted_numbers(tmp_path,
                                                                     interrupt_after):
    raw = {**RAW, "initial_model": {"rule": "proposed", "fingerprint_batch": 16}}
    run_job(open_run(raw), tmp_path / "full", quiet=True)
    exp = interrupt_after(open_run(raw).exp, 7)   # inside session 3, Q1 of two
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)

    def rows(f):
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(f).rows()]

    assert rows(tmp_path / "cut") == rows(tmp_path / "full")
    ckpt = load_plain(tmp_path / "full" / "checkpoint.pt", "checkpoint")
    assert len(ckpt["sessions"]["models"]) == 2 == len(ckpt["sessions"]["fingerprints"])


def test_store_memory_is_sessions_times_model_size():
    raw = {**RAW, "initial_model": {"rule": "proposed", "fingerprint_batch": 16}}
    cfg = resolve(raw)
    exp = open_run(cfg).exp
    state = exp.initial_state()
    starts = SessionStarts(cfg.initial_model, exp.algorithm, cfg.algorithm, state)
    for s in range(1, 5):
        state = starts(state, 2 * s, s)
    w = sum(v.numel() * 4 for v in state.params.values())
    # Q1 and Q2 of sessions 1-3, w_Pilot and the current fingerprint: 2 W per session + 2 W
    assert session_store_bytes(starts) == 3 * 2 * w + 2 * w
    assert all(v.device.type == "cpu" for m in starts.store.models for v in m.values())


@pytest.mark.parametrize("initial,population", [
    ({"rule": "proposed", "pilot_sessions": 0}, None),
    ({"rule": "telepathy"}, None),
    ({"rule": "proposed", "scale": -1}, None),
    ({"rule": "average"}, {"kind": "static"}),
])
def test_bad_initial_model_sections_are_refused(initial, population):
    raw = {**RAW, "initial_model": initial}
    if population:
        raw["population"] = population
    with pytest.raises(ValueError):
        resolve(raw)
