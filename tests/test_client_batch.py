"""A round's clients as arrays: seeds, stacked results, segmented and stacked aggregation,
and the host work of a round (Python calls per client, counted)."""

import cProfile
import pstats
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from wirelessfl.data import ArrayDataset
from wirelessfl.engine.batch import ClientBatch, ClientResults
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, LocalHParams, LocalSGD
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.models import build_model
from wirelessfl.rng import Seeds
from wirelessfl.server.aggregation import (
    Aggregator,
    AirComp,
    Mean,
    segment_means,
    stacked_mean,
    weighted_mean,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1, 2**40])
def test_the_seeds_of_a_whole_round_are_each_clients_own_bit_for_bit(seed):
    rng = np.random.default_rng(seed % 1000)
    seeds = Seeds(seed)
    for keys in [(), (0,), (3, 1), (2**32 - 1, 5), (2**33,)]:
        last = rng.integers(0, 2**32, size=40)
        last[:3] = [0, 1, 2**32 - 1]
        got = seeds.int_seeds("local", *keys, last=last)
        want = [seeds.int_seed("local", *keys, int(k)) for k in last]
        assert got.dtype == np.int64 and got.tolist() == want, keys
    assert seeds.int_seeds("local", 1, last=np.zeros(0, int)).shape == (0,)
    with pytest.raises(ValueError):
        seeds.int_seeds("local", last=np.array([[1, 2]]))


def _data(n=96, shape=(1, 6, 6), classes=4):
    g = torch.Generator().manual_seed(1)
    return ArrayDataset(torch.randn(n, *shape, generator=g),
                        torch.randint(0, classes, (n,), generator=g), classes)


class _Prox(LocalSGD):
    """A rule with a context and a penalty: the stacked path reads each client's context."""

    elementwise = True

    def context(self, task):
        return {"anchor": {k: v * 0.5 for k, v in task.params.items()}}

    def penalty(self, params, start, ctx):
        return sum(((params[k] - ctx["anchor"][k]) ** 2).sum() for k in params) * 0.01


class _OwnFinal(LocalSGD):
    """A rule with its own final step (through the per-client contract)."""

    elementwise = True

    def client_final(self, task, carry):
        res = super().client_final(task, carry)
        return type(res)(res.client, {k: 2 * v for k, v in res.delta.items()}, res.num_samples,
                         res.num_steps, res.loss, res.state, res.buffers)


@pytest.mark.parametrize("rule", [LocalSGD, _Prox, _OwnFinal])
@pytest.mark.parametrize("starts", [1, 3])
def test_a_batch_s_stacked_results_equal_the_loop_s_per_client_results(rule, starts):
    model = build_model("fcnn", (1, 6, 6), 4, seed=0, hidden=7)
    hp = LocalHParams(lr=0.1, batch_size=5, steps=3)
    data = _data()
    sizes = [12, 12, 7, 12, 0, 9]  # ragged: short batches, a client with no data
    at = np.cumsum([0, *sizes])
    indices = tuple(np.arange(at[c], at[c + 1]) for c in range(len(sizes)))
    g = torch.Generator().manual_seed(3)
    distinct = [{k: v + 0.01 * k_ * torch.randn(v.shape, generator=g)
                 for k, v in model.params().items()} for k_ in range(starts)]
    index = np.arange(len(sizes)) % starts
    batch = ClientBatch(np.arange(10, 10 + len(sizes)), tuple(distinct), index, indices,
                        Seeds(2).int_seeds("local", 0, 0, last=np.arange(len(sizes))))
    update = rule(model, hp)
    got = BatchedExecutor().run_batch(update, data, batch, hp)
    want = LoopExecutor().run(update, data, batch.tasks(), hp)
    assert isinstance(got, ClientResults) and len(got) == len(want)
    assert got.clients.tolist() == [r.client for r in want]
    assert got.num_steps.tolist() == [r.num_steps for r in want]
    assert got.num_samples.tolist() == sizes
    np.testing.assert_allclose(got.losses, [r.loss for r in want], rtol=1e-5)
    stack = got.delta_stack()
    for c, r in enumerate(want):
        for k, v in r.delta.items():
            torch.testing.assert_close(stack[k][c], v, rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(got[c].delta[k], v, rtol=1e-4, atol=1e-6)
    if rule is LocalSGD:
        assert got.stacked  # the engine's own arrays, no per-client objects


def test_a_batch_and_its_tasks_describe_the_same_clients():
    p, q = {"w": torch.ones(2)}, {"w": torch.zeros(2)}
    tasks = [ClientTask(4, p, np.arange(3), 11), ClientTask(2, q, np.arange(2), 12, state="s"),
             ClientTask(9, p, np.arange(5), 13)]
    batch = ClientBatch.from_tasks(tasks)
    assert len(batch.starts) == 2 and batch.start_index.tolist() == [0, 1, 0]
    assert batch.tasks() == tasks
    assert batch.take(slice(1, 3)).tasks() == tasks[1:]
    assert batch.num_samples.tolist() == [3, 2, 5]
    with pytest.raises(ValueError):
        ClientBatch(np.arange(2), (p,), np.array([0, 1]), (np.arange(1),) * 2, np.zeros(2, int))
    with pytest.raises(ValueError, match="rows"):
        ClientResults(np.arange(3), np.ones(3), np.ones(3), np.ones(3),
                      deltas={"w": torch.zeros(2, 4)})
    res = ClientResults(np.arange(3), [5, 6, 7], [2, 0, 2], [0.5, np.nan, 1.5],
                        deltas={"w": torch.arange(6.0).reshape(3, 2)})
    loss, diag = res.diagnostics()
    assert loss == 1.0 and diag[1]["steps"] == 0 and np.isnan(diag[1]["loss"])
    assert res.take(slice(1, 3)).clients.tolist() == [1, 2]
    assert torch.equal(res[2].delta["w"], torch.tensor([4.0, 5.0]))
    assert res.reordered(np.array([2, 0, 1])).clients.tolist() == [1, 2, 0]


def test_the_segmented_mean_is_each_segment_s_weighted_mean():
    g = torch.Generator().manual_seed(0)
    stack = {"w": torch.randn(7, 3, 2, generator=g), "b": torch.randn(7, 5, generator=g)}
    w = np.array([1.0, 2.0, 0.5, 3.0, 1.0, 0.0, 4.0])
    seg = np.array([2, 0, 2, 1, 0, 1, 1])
    got = segment_means(stack, w, seg, 3)
    for j in range(3):
        rows = np.flatnonzero(seg == j)
        want = weighted_mean([{k: v[i] for k, v in stack.items()} for i in rows], w[rows])
        for k in stack:
            torch.testing.assert_close(got[j][k], want[k], rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="no weight"):
        segment_means(stack, w, seg, 4)  # segment 3 has no rows
    with pytest.raises(ValueError):
        segment_means(stack, w[:3], seg, 3)
    one = stacked_mean(stack, w)
    rows = [{k: v[i] for k, v in stack.items()} for i in range(7)]
    for k in stack:  # the same sums as over the rows one by one
        assert torch.equal(one[k], weighted_mean(rows, w)[k])


class _Median(Aggregator):
    """A per-client plug-in aggregator (tutorial 2's kind): it only implements aggregate."""

    def aggregate(self, deltas, weights, rng, *, unit=None, channel=None):
        from wirelessfl.server.aggregation import AggregateInfo

        return ({k: torch.stack([d[k] for d in deltas]).median(0).values for k in deltas[0]},
                AggregateInfo())


@pytest.mark.parametrize("agg", [Mean(), _Median(),
                                 AirComp(10.0, 0.1, antennas=4),
                                 AirComp(10.0, 0.1, antennas=4, normalise=True, truncation_db=-3)])
def test_aggregating_a_stack_equals_aggregating_its_rows(agg):
    """Over the air on the same channel stream; a per-client aggregator through the adapter."""
    g = torch.Generator().manual_seed(5)
    stack = {"w": torch.randn(6, 4, 3, generator=g), "b": torch.randn(6, 4, generator=g)}
    rows = [{k: v[i] for k, v in stack.items()} for i in range(6)]
    w = np.array([1.0, 2.0, 1.0, 1.0, 3.0, 1.0])
    a, ia = agg.aggregate_stack(stack, w, np.random.default_rng(9))
    b, ib = agg.aggregate(rows, w, np.random.default_rng(9))
    assert ia == ib
    for k in stack:
        torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-7)


def test_over_the_air_cells_aggregate_the_stack_as_their_rows_would():
    """HFedAvg over the air: each cell's rows of the stack, its own channel stream."""
    from wirelessfl.run.kinds import open_run

    raw = {"seed": 1, "engine": "batched", "data": {"dataset": "synthetic", "num_clients": 8},
           "local": {"lr": 0.05, "batch_size": 10, "steps": 2},
           "algorithm": {"name": "hist", "cells": 2, "split": False, "edge_rounds": 2,
                         "aggregation": "aircomp"}}
    exp = open_run(raw).exp
    algo = exp.algorithm
    state = exp.initial_state()
    out = algo.run_cells([state.params] * 2, 0)
    # by hand: the same batches, each cell's rows through the per-client aggregate
    edge = [state.params] * 2
    cells = algo.topology.cells
    for e in range(2):
        clients = [u for c in cells for u in c]
        res = algo.train_clients([edge[j] for j, c in enumerate(cells) for _ in c], clients, 0,
                                 stage=e)
        pos, new = 0, []
        for j, c in enumerate(cells):
            upd, _ = algo.cell_aggregator(j).aggregate([res[i].delta for i in range(pos, pos + len(c))],
                                                       np.ones(len(c)),
                                                       exp.env.seeds.generator("noise", 0, e, j))
            new.append({k: edge[j][k] - upd[k] for k in upd})
            pos += len(c)
        edge = new
    for j in range(2):
        for k in edge[j]:
            torch.testing.assert_close(out.edge_params[j][k], edge[j][k], rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- host work
#: Python calls a round may make per client and engine call (FedAvg: one call a round; a
#: hierarchical round: one per edge round). Since the counter-based mini-batch orders (issue
#: 68) a round makes about one (the issue's target: at most 5); the pcg64 order made 11.
PER_CLIENT_CALLS = 2


#: Python calls a replayed local step may make per executed step (issue 68's target: at most
#: 100). The recorded step runs as generated code that calls each operator's dispatcher entry
#: once: about 80 for the FCNN (84 operators), where the traced module made 209.
PER_STEP_CALLS = 100


def _calls(algo: str, clients: int, steps: int = 1) -> int:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from host_calls import config

    from wirelessfl.run.kinds import open_run

    raw = config(algo, clients, steps, dataset="synthetic")
    raw["data"]["samples_per_client"] = 1000  # full batches of 50 for every step counted
    raw["model"] = {"name": "fcnn", "options": {"hidden": 8}}
    exp = open_run(raw).exp
    state, _ = exp.algorithm.apply(exp.initial_state())  # the clients' states stored
    prof = cProfile.Profile()
    prof.enable()
    exp.algorithm.apply(state)
    prof.disable()
    return pstats.Stats(prof).total_calls


@pytest.mark.parametrize("algo,calls", [("FedAvg", 1), ("HFedAvg N=4", 5), ("HIST N=4", 5),
                                        ("FedAvg over the air", 1), ("SCAFFOLD", 1),
                                        ("FAdamGC", 1), ("RA-Fed", 1), ("MOON", 1)])
def test_a_round_s_python_grows_by_a_few_calls_a_client(algo, calls):
    """Counted, not timed: a round of 40 clients makes at most PER_CLIENT_CALLS Python calls
    per client and engine call more than one of 8 (before: 73 for FedAvg, 400 for HIST, 253
    for SCAFFOLD, 245 for FAdamGC, whose client states now move as stacks, 478 for RA-Fed,
    whose submodels now come as stacks, and 134 for MOON), and at most 1.1 times as many
    calls in all."""
    small, large = _calls(algo, 8), _calls(algo, 40)
    per_client = (large - small) / 32 / calls
    assert per_client <= PER_CLIENT_CALLS, (algo, small, large, per_client)
    assert large <= 1.1 * small, (algo, small, large)


@pytest.mark.parametrize("algo,calls,most", [
    ("FedAvg", 1, PER_STEP_CALLS), ("HFedAvg N=4", 5, PER_STEP_CALLS),
    ("SCAFFOLD", 1, PER_STEP_CALLS), ("FedAvg over the air", 1, PER_STEP_CALLS),
    ("FAdamGC", 1, PER_STEP_CALLS), ("RA-Fed", 1, PER_STEP_CALLS)])
def test_a_replayed_local_step_makes_at_most_100_python_calls(algo, calls, most):
    """Counted, not timed: 7 local steps against 3 (replay on, every step but a round's first
    replayed after the warm-up round) cost at most PER_STEP_CALLS Python calls per executed
    step (HFedAvg: E = 5 edge rounds a round, so FedAvg's per step); the traced module made
    209. FAdamGC's own step (its Adam state updated in place) makes about 82 (118 before its
    operands were listed without a generator per tensor); eager, 2,020.
    RA-Fed's submodel steps (one engine call per ratio level) replay too: eager, about 690
    per call."""
    per_step = (_calls(algo, 8, 7) - _calls(algo, 8, 3)) / 4 / calls
    assert 0 < per_step <= most, (algo, per_step)


def _stateful_batch(model, sizes, states, broadcast, seed):
    """Clients of ``sizes`` samples (0: none) from the model, with their states."""
    at = np.cumsum([0, *sizes])
    n = len(sizes)
    return ClientBatch(np.arange(n), (model.params(),), np.zeros(n, np.int64),
                       tuple(np.arange(at[c], at[c + 1]) for c in range(n)),
                       Seeds(seed).int_seeds("local", 0, 0, last=np.arange(n)), states=states,
                       broadcast=broadcast)


def _loop_and_stacked(rule, data, batch, monkeypatch):
    """The loop's results, then the batched engine's with the per-client hooks forbidden."""
    want = LoopExecutor().run(rule, data, batch.tasks(), rule.hp)

    def per_client(*_a):
        raise AssertionError("the batched engine went client by client")

    monkeypatch.setattr(type(rule), "context", per_client)
    monkeypatch.setattr(type(rule), "client_final", per_client)
    return want, BatchedExecutor().run_batch(rule, data, batch, rule.hp)


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_scaffold_s_stacked_contexts_and_states_are_its_per_client_ones(beta, monkeypatch):
    """c − c_i gathered once and c_i⁺ from the stacked Δ: the loop's, client by client
    (clients with and without a stored c_i, one without data keeps its c_i)."""
    from wirelessfl.algorithms.scaffold import ControlledSGD
    from wirelessfl.engine import client_store

    model = build_model("fcnn", (1, 6, 6), 4, seed=0, hidden=7)
    hp = LocalHParams(lr=0.1, batch_size=5, steps=3)
    data = _data()
    g = torch.Generator().manual_seed(4)

    def noise():
        return {k: 0.05 * torch.randn(v.shape, generator=g) for k, v in model.params().items()}

    states = [None, client_store.store(noise()), client_store.store(noise()), None]
    batch = _stateful_batch(model, [12, 10, 0, 12], states, {"c": noise(), "u": noise()}, 1)
    want, got = _loop_and_stacked(ControlledSGD(model, hp, beta=beta), data, batch, monkeypatch)
    assert got.stacked and got.states[2] is states[2]  # no step: c_i kept
    for c, r in enumerate(want):
        for k, v in r.delta.items():
            torch.testing.assert_close(got.delta_stack()[k][c], v, rtol=1e-4, atol=1e-6)
        for k, v in r.state.items():
            torch.testing.assert_close(got.states[c][k], v, rtol=1e-4, atol=1e-5)
            assert got.states[c][k].device.type == "cpu"


@pytest.mark.parametrize("correction", ["pre", "post", "none"])
def test_fadamgc_s_stacked_contexts_and_states_are_its_per_client_ones(correction, monkeypatch):
    """v_i and y − y_i gathered once, v_i⁺ and (for S̃) y_i⁺ from the stacked carry: the
    loop's, client by client (stored and missing states, a client without data, ragged)."""
    from wirelessfl.algorithms.fadamgc.local import AdamClientState, TrackedAdam
    from wirelessfl.engine import client_store

    model = build_model("fcnn", (1, 6, 6), 4, seed=0, hidden=7)
    hp = LocalHParams(lr=0.01, batch_size=5, steps=3)
    data = _data()
    g = torch.Generator().manual_seed(6)

    def noise(scale=0.05):
        return {k: scale * torch.randn(v.shape, generator=g).abs()
                for k, v in model.params().items()}

    states = [None, AdamClientState(v=client_store.store(noise(1e-3)), y=client_store.store(noise())),
              AdamClientState(v=client_store.store(noise(1e-3))), None,
              AdamClientState(v=client_store.store(noise(1e-3)), y=client_store.store(noise()))]
    batch = _stateful_batch(model, [12, 7, 0, 12, 10], states,
                            {"y": noise(), "tracked": frozenset({0, 1, 2})}, 2)
    want, got = _loop_and_stacked(TrackedAdam(model, hp, correction), data, batch, monkeypatch)
    assert got.stacked and got.states[2] is states[2]  # no data, no step: kept
    for c, r in enumerate(want):
        for k, v in r.delta.items():
            torch.testing.assert_close(got.delta_stack()[k][c], v, rtol=1e-4, atol=1e-6)
        if r.state is None:
            assert got.states[c] is None
            continue
        for name in ("v", "y"):
            a, b = getattr(got.states[c], name), getattr(r.state, name)
            assert (a is None) == (b is None), (c, name)
            for k in b or {}:
                torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("max_batch", [None, 2, 3])
@pytest.mark.parametrize("hidden", [(7, 7, 7), (7, 5, 7)])
def test_chunks_and_shapes_of_a_batch_keep_each_client_on_its_own_start(max_batch, hidden):
    """Chunks that hold only a later start's clients, and starts of several shapes (HIST's
    unequal masks): every client trains from its own start, in the batch's order."""
    models = [build_model("fcnn", (1, 6, 6), 4, seed=j, hidden=h) for j, h in enumerate(hidden)]
    hp = LocalHParams(lr=0.1, batch_size=4, steps=2)
    data = _data()
    index = np.array([0, 0, 1, 1, 2, 1])
    indices = tuple(np.arange(8 * c, 8 * c + 8) for c in range(len(index)))
    batch = ClientBatch(np.arange(len(index)), tuple(m.params() for m in models), index,
                        indices, Seeds(5).int_seeds("local", 0, 0, last=np.arange(len(index))))
    got = BatchedExecutor(max_batch=max_batch).run_batch(LocalSGD(models[0], hp), data, batch, hp)
    want = LoopExecutor().run(LocalSGD(models[0], hp), data, batch.tasks(), hp)
    assert got.clients.tolist() == list(range(len(index)))
    for c, r in enumerate(want):
        for k, v in r.delta.items():
            torch.testing.assert_close(got[c].delta[k], v, rtol=1e-4, atol=1e-6)


def test_a_round_s_diagnostics_are_arrays_and_read_as_the_per_client_mapping():
    """RoundReport.clients from the engine: arrays, the same mapping of id → loss and steps, and
    the same round cost for the links' timing as the per-client dicts gave."""
    from wirelessfl.engine.batch import ClientDiagnostics
    from wirelessfl.net.links import RoundCost
    from wirelessfl.server.state import RoundReport

    ids, loss, steps = np.array([7, 2, 9]), np.array([0.5, np.nan, 0.25]), np.array([3, 0, 5])
    diag = ClientDiagnostics(ids, loss, steps)
    as_dicts = {7: {"loss": 0.5, "steps": 3}, 2: {"loss": float("nan"), "steps": 0},
                9: {"loss": 0.25, "steps": 5}}
    assert list(diag) == [7, 2, 9] and diag[9] == as_dicts[9] and diag.get(4) is None
    a = RoundCost.from_report(RoundReport(10.0, 0.3, clients=diag), 2.0, population=12)
    b = RoundCost.from_report(RoundReport(10.0, 0.3, clients=as_dicts), 2.0, population=12)
    assert a == b and a.ids == (2, 7, 9) and a.max_steps == 5
    with pytest.raises(ValueError, match="one entry per client"):
        ClientDiagnostics(ids, loss[:2], steps)


def test_moon_s_stacked_contexts_and_states_are_its_per_client_ones(monkeypatch):
    """The previous models gathered once (the received model for a client without one) and
    every end model as the new state: the loop's, client by client."""
    from wirelessfl.algorithms.moon import ContrastiveSGD
    from wirelessfl.engine import client_store

    model = build_model("fcnn", (1, 6, 6), 4, seed=0, hidden=7)
    hp = LocalHParams(lr=0.1, batch_size=5, steps=3)
    g = torch.Generator().manual_seed(8)
    prev = [None, client_store.store({k: v + 0.1 * torch.randn(v.shape, generator=g)
                                      for k, v in model.params().items()}, "float16"), None]
    batch = _stateful_batch(model, [12, 10, 0], prev, None, 3)
    want, got = _loop_and_stacked(ContrastiveSGD(model, hp, 1.0, 0.5, "float16"), _data(), batch,
                                  monkeypatch)
    assert got.stacked
    for c, r in enumerate(want):
        for k, v in r.delta.items():
            torch.testing.assert_close(got.delta_stack()[k][c], v, rtol=1e-4, atol=1e-6)
        for k, v in r.state.items():  # the end model, even without a step (then the start)
            assert got.states[c][k].dtype == torch.float16
            torch.testing.assert_close(got.states[c][k], v, rtol=1e-3, atol=1e-4)


def test_rafed_s_stacked_submodels_train_as_one_call_of_the_loop_s_numbers(monkeypatch):
    """Starts and broadcasts as RowStacks (one shape, per-client ratios) train with no
    per-client hook and give the loop's per-client results."""
    from wirelessfl.algorithms.rafed.local import SubmodelSGD
    from wirelessfl.engine.batch import RowStack
    from wirelessfl.server.submodel import SubmodelStack

    model = build_model("fcnn", (1, 6, 6), 4, seed=0, hidden=8)
    rule = SubmodelSGD(model, LocalHParams(lr=0.1, batch_size=5, steps=3), model.unit_groups,
                       scaler=True, levels=None)
    sel = {"fc1": torch.tensor([[0, 2, 5, 7], [1, 2, 3, 4], [6, 7, 0, 3]])}
    stack = SubmodelStack(model.unit_groups, sel, model.params())
    ratios = torch.tensor([0.5, 0.45, 0.5])
    batch = _stateful_batch(model, [12, 10, 9], None,
                            RowStack({"rate": {"inv": 1 / ratios,
                                               "allowed": torch.ones(3, dtype=torch.long)}}), 5)
    batch = ClientBatch(batch.clients, RowStack(stack.slice(model.params())), np.arange(3),
                        batch.indices, batch.seeds, broadcast=batch.broadcast)
    want = LoopExecutor().run(rule, _data(), batch.tasks(), rule.hp)

    def per_client(*_a):
        raise AssertionError("the batched engine asked for contexts client by client")

    monkeypatch.setattr(type(rule), "context", per_client)
    got = BatchedExecutor().run_batch(rule, _data(), batch, rule.hp)
    assert got.stacked and len(got) == 3
    for c, r in enumerate(want):
        assert r.delta["fc1.weight"].shape == (4, 36)
        for k, v in r.delta.items():
            torch.testing.assert_close(got.delta_stack()[k][c], v, rtol=1e-4, atol=1e-6)


def test_a_row_stack_reads_as_rows_and_a_batch_selects_and_joins_it():
    from wirelessfl.engine.batch import RowStack

    with pytest.raises(ValueError, match="one leading size"):
        RowStack({"a": torch.zeros(3, 2), "b": {"c": torch.zeros(4)}})
    with pytest.raises(ValueError, match="one leading size"):
        RowStack({"a": torch.tensor(1.0)})
    starts = RowStack({"w": torch.arange(6.0).view(3, 2)})
    cast = RowStack({"rate": {"inv": torch.tensor([1.0, 2.0, 4.0])}})
    batch = ClientBatch(np.array([7, 8, 9]), starts, np.arange(3),
                        tuple(np.arange(2) for _ in range(3)), np.arange(3), broadcast=cast)
    assert batch.shape_groups()[0].tolist() == [0, 1, 2] and batch.shared_broadcast is None
    task = batch.task(2)  # a client's own copies
    assert task.params["w"].tolist() == [4.0, 5.0] and task.broadcast["rate"]["inv"] == 4.0
    task.params["w"].zero_()
    assert starts.tree["w"][2].tolist() == [4.0, 5.0]
    part = batch.select(np.array([2, 0]))
    assert isinstance(part.starts, RowStack) and len(part.starts) == 2
    assert [part.task(c).params["w"][0].item() for c in range(2)] == [4.0, 0.0]
    assert part.broadcast.tree["rate"]["inv"].tolist() == [4.0, 1.0]
    both = ClientBatch.concat([batch, part])  # a lockstep group's: rows, one per client
    assert len(both) == 5 and both.task(3).broadcast["rate"]["inv"] == 4.0
    assert both.task(4).params["w"].tolist() == [0.0, 1.0]
