"""Sessions of arriving and departing clients (docs/papers/dynamic_clients.md §1, §2.7, §4.2, §7 item 9)."""

import json

import numpy as np
import pytest

from wirelessfl.cli import main
from wirelessfl.run.config import resolve, to_dict
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob
from wirelessfl.server.population import EventSessions

RAW = {"name": "s", "seed": 3, "rounds": 6,
       "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 8, "dropout": 0.2}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 2, "schedule": "poly",
                 "schedule_rounds": 3},
       "algorithm": {"name": "scaffold"},
       "population": {"kind": "alternating", "rounds_per_session": 2}}


def run_rows(folder):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in RunRecord(folder).rows()]


def test_only_the_sessions_clients_train_and_rows_carry_the_session(tmp_path):
    exp = open_run(RAW).exp
    state = exp.initial_state()
    for t in range(4):
        if t == 2:
            state = exp.algorithm.start_session(state, t)
        state, report = exp.algorithm.apply(state)
        assert sorted(report.clients) == ([0, 1, 2] if t < 2 else [3, 4, 5])  # full participation
    run_job(open_run(RAW), tmp_path / "r", quiet=True)
    assert [r["session"] for r in RunRecord(tmp_path / "r").rows()] == [0, 0, 0, 1, 1, 2, 2]


def test_a_session_start_resets_the_algorithm_state_and_restarts_the_schedule():
    exp = open_run(RAW).exp
    state = exp.initial_state()
    for _ in range(2):
        state, _ = exp.algorithm.apply(state)
    assert state.opt_state is not None and state.client_states     # SCAFFOLD's c and c_i
    assert exp.algorithm.client_lr(2) < RAW["local"]["lr"]
    fresh = exp.algorithm.start_session(state, 2)
    assert fresh.opt_state is None and dict(fresh.client_states) == {}
    assert fresh.params is state.params and fresh.round == 2      # the model is kept
    assert fresh.schedule_origin == 2 and state.schedule_origin == 0  # in the state
    assert exp.algorithm.client_lr(2, fresh.schedule_origin) == RAW["local"]["lr"]  # poly restarted (§4.3)
    after, _ = exp.algorithm.apply(fresh)
    assert after.schedule_origin == 2                              # carried round to round
    moon = open_run({**RAW, "algorithm": {"name": "moon"}}).exp
    s = moon.initial_state()
    s, _ = moon.algorithm.apply(s)
    assert set(moon.algorithm.start_session(s, 2).client_states) == {0, 1, 2}  # z_prev persists


def test_one_event_session_is_the_static_run_exactly(tmp_path):
    static = {**RAW, "population": {"kind": "static"}}
    events = {**RAW, "population": {"kind": "events",
                                    "events": [{"round": 0, "join": list(range(6))}]}}
    run_job(open_run(static), tmp_path / "a", quiet=True)
    run_job(open_run(events), tmp_path / "b", quiet=True)
    a, b = run_rows(tmp_path / "a"), run_rows(tmp_path / "b")
    assert [{k: v for k, v in r.items() if k not in ("session", "active_accuracy")}
            for r in b] == a
    # every label is active: the active-label accuracy is the test accuracy
    assert [r["active_accuracy"] for r in b] == [r["test_accuracy"] for r in a]


def test_active_accuracy_is_measured_on_the_active_groups_labels(fmnist, tmp_path):
    """§4.3: accuracy on the test samples of the active label set (A: 0-4, B: 5-9)."""
    import torch

    from wirelessfl.engine.client import evaluate
    from wirelessfl.run.records import load_plain

    raw = {"name": "ab", "seed": 0, "rounds": 3,
           "data": {"dataset": "fashion_mnist", "partition": "two_group", "num_clients": 4},
           "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 32, "steps": 5},
           "population": {"kind": "alternating", "rounds_per_session": 2}}
    exp = open_run(raw).exp
    run_job(RoundsJob(exp), tmp_path / "r", quiet=True)
    rows = RunRecord(tmp_path / "r").rows()
    assert [r["session"] for r in rows] == [0, 0, 0, 1]
    params = load_plain(tmp_path / "r" / "checkpoint.pt", "checkpoint")["params"]
    test = exp.splits.test
    keep = test.y >= 5                                   # group B holds labels 5-9
    sub = type(test)(test.x[keep], test.y[keep], test.num_classes)
    assert rows[-1]["active_accuracy"] == evaluate(exp.model, params, sub)[0]
    assert rows[-1]["active_accuracy"] != rows[-1]["test_accuracy"]
    held = np.concatenate([exp.algorithm.env.client_indices[c] for c in (2, 3)])
    assert torch.equal(torch.unique(exp.splits.train.y[held]), torch.arange(5, 10))


@pytest.mark.parametrize("after", [2, 3])   # at a session boundary and inside a session
def test_resume_mid_session_gives_the_uninterrupted_numbers(tmp_path, interrupt_after, after):
    raw = {**RAW, "population": {"kind": "events", "events": [
        {"round": 0, "join": [0, 1, 2]}, {"round": 2, "join": [3]},
        {"round": 4, "leave": [0, 1], "join": [4, 5]}]}}
    run_job(open_run(raw), tmp_path / "full", quiet=True)
    exp = interrupt_after(open_run(raw).exp, after)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)
    assert run_rows(tmp_path / "cut") == run_rows(tmp_path / "full")
    assert [r["session"] for r in run_rows(tmp_path / "full")] == [0, 0, 0, 1, 1, 2, 2]


def test_an_order_sends_groups_in_its_sequence():
    from wirelessfl.server.population import AlternatingGroups

    p = AlternatingGroups(groups=((0,), (1,), (2,)), rounds_per_session=2, order=(0, 1, 0, 2))
    assert [int(p.active(t)[0]) for t in range(10)] == [0, 0, 1, 1, 0, 0, 2, 2, 0, 0]
    assert [p.session(t) for t in range(5)] == [0, 0, 1, 1, 2]
    cfg = resolve({**RAW, "population": {"kind": "alternating", "groups": 3,
                                         "rounds_per_session": 1, "order": [0, 1, 0, 2]}})
    assert resolve(to_dict(cfg)) == cfg


def test_event_sessions_follow_the_joins_and_leaves():
    p = EventSessions(events=[{"round": 0, "join": [0, 1]}, {"round": 3, "join": [2]},
                              {"round": 5, "leave": [0]}], num_clients=3)
    assert [p.session(t) for t in range(7)] == [0, 0, 0, 1, 1, 2, 2]
    assert p.active(4).tolist() == [0, 1, 2] and p.active(6).tolist() == [1, 2]


@pytest.mark.parametrize("population", [
    {"kind": "events", "events": [{"round": 1, "join": [0]}]},                  # not at 0
    {"kind": "events", "events": [{"round": 0, "join": [0]}, {"round": 0, "join": [1]}]},
    {"kind": "events", "events": [{"round": 0, "join": [0]}, {"round": 2, "leave": [1]}]},
    {"kind": "events", "events": [{"round": 0, "join": [0]}, {"round": 2, "leave": [0]}]},
    {"kind": "events", "events": [{"round": 0, "join": [0, 0]}]},
    {"kind": "events", "events": [{"round": 0, "join": [99]}]},
    {"kind": "events", "events": [{"round": 0, "join": [0], "when": 3}]},
    {"kind": "events", "events": []},
    {"kind": "alternating"},                                                    # no T
    {"kind": "alternating", "rounds_per_session": 2, "groups": 4},              # 6 clients
    {"kind": "alternating", "rounds_per_session": 2, "groups": 1},
    {"kind": "weekly"},
    {"kind": "alternating", "rounds_per_session": 2, "order": [0, 0, 1]},        # no change
    {"kind": "alternating", "rounds_per_session": 2, "order": [0, 2]},           # 2 groups
    {"kind": "events", "events": [{"round": 0, "join": [0]}], "order": [0, 1]},
])
def test_bad_populations_are_one_line_errors(tmp_path, capsys, population):
    with pytest.raises(ValueError) as exc:
        open_run({**RAW, "population": population})
    assert "\n" not in str(exc.value)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({**RAW, "population": population}))
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_population_config_round_trips():
    cfg = resolve({**RAW, "population": {"kind": "events", "events": [
        {"round": 0, "join": [0, 1]}, {"round": 2, "leave": [1]}]}})
    assert resolve(to_dict(cfg)) == cfg
    assert isinstance(cfg.population.events, tuple)
    assert np.array_equal(open_run(cfg).exp.algorithm.env.population.active(3), [0])


@pytest.mark.parametrize("data,population,match", [
    ({"partition": "two_group", "num_clients": 6, "unseen_labels": 1},
     {"kind": "alternating", "rounds_per_session": 2}, "population.groups=3"),
    ({"partition": "two_group", "num_clients": 6}, {"kind": "alternating", "rounds_per_session": 2,
                                                    "groups": 3}, "population.groups=2"),
    ({"unseen_labels": 2}, {"kind": "alternating", "rounds_per_session": 2}, "two_group"),
])
def test_groups_of_the_partition_and_the_population_must_agree(data, population, match):
    from wirelessfl.run.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        resolve({**RAW, "data": {**RAW["data"], **data}, "population": population})
