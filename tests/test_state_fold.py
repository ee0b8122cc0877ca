"""Stateful rounds write their clients' states chunk by chunk (issue 94): the same numbers as a
round that stacks every client's new state, and no stack of the whole round is kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wirelessfl.engine.client_store import ClientStore, StateStack
from wirelessfl.engine.fold import DeltaFold, StateFold
from wirelessfl.run.kinds import open_run

RAW = {"seed": 3, "data": {"dataset": "synthetic", "num_clients": 9, "samples_per_client": None},
       "model": {"name": "fcnn", "options": {"hidden": 16}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 3}, "max_batch": 2}


def _rounds(algorithm: dict, executor: str, fold: bool, rounds: int = 3):
    raw = {**RAW, "engine": executor, "algorithm": algorithm}
    if executor == "loop":
        raw.pop("max_batch")
    exp = open_run(raw).exp
    alg = exp.algorithm
    if not fold:  # the path of a round that cannot fold (DP on Δc, a robust rule, a link)
        alg.folds_states = False
        alg.delta_fold = lambda plan: None
    state = exp.initial_state()
    for _ in range(rounds):
        state, _ = alg.apply(state)
    return state


@pytest.mark.parametrize("algorithm", [
    {"name": "scaffold", "clients_per_round": 5},
    {"name": "scaffold", "clients_per_round": 5, "c_update": "weighted", "weighting": "samples"},
    {"name": "feddyn", "clients_per_round": 5, "alpha": 0.1},
    {"name": "moon", "clients_per_round": 5, "state_dtype": "bfloat16"},
], ids=["scaffold", "scaffold-weighted", "feddyn", "moon-bf16"])
@pytest.mark.parametrize("executor", ["batched", "loop"])
def test_a_folded_stateful_round_equals_the_stacked_one(algorithm, executor):
    folded, stacked = _rounds(algorithm, executor, True), _rounds(algorithm, executor, False)
    assert isinstance(folded.client_states, ClientStore)
    for k in stacked.params:
        torch.testing.assert_close(folded.params[k], stacked.params[k], rtol=1e-4, atol=1e-6)
    assert sorted(folded.client_states) == sorted(stacked.client_states)
    for u in stacked.client_states:
        a, b = folded.client_states[u], stacked.client_states[u]
        for k in b:
            torch.testing.assert_close(a[k].float(), b[k].float(), rtol=1e-3, atol=1e-5)
    opt_f, opt_s = folded.opt_state, stacked.opt_state
    for name in ("c", "h"):
        if getattr(opt_s, name, None) is not None:
            for k, v in getattr(opt_s, name).items():
                torch.testing.assert_close(getattr(opt_f, name)[k], v, rtol=1e-4, atol=1e-7)


def test_the_fold_writes_each_chunk_and_the_round_holds_no_stack_of_states():
    """The executor hands every chunk's states to the fold (results carry none) and the
    fold's change sum is Σ a_i (s_i⁺ − s_i) with s_i read before the write."""
    exp = open_run({**RAW, "algorithm": {"name": "scaffold", "clients_per_round": 5}}).exp
    alg, state = exp.algorithm, exp.initial_state()
    state, _ = alg.apply(state)
    plan = alg.configure(state)
    seen = []
    real = StateFold.add

    def spy(self, positions, states):
        seen.append((np.asarray(positions).copy(), type(states)))
        return real(self, positions, states)

    StateFold.add = spy
    try:
        results = alg.train(state, plan)
    finally:
        StateFold.add = real
    assert results.states is None  # nothing of the round's states kept beside the store
    assert len(seen) == 3 and all(t is StateStack for _, t in seen)  # 5 clients, chunks of 2
    assert sorted(np.concatenate([p for p, _ in seen]).tolist()) == list(range(5))


def test_state_fold_by_hand():
    store = ClientStore().updated(np.array([4]), [{"w": torch.tensor([1.0, 2.0])}])
    fold = StateFold(store, [4, 7], weights=[0.5, 0.25], like={"w": torch.zeros(2)})
    fold.add([1], [{"w": torch.tensor([4.0, 4.0])}])  # new client: s = 0 before
    fold.add([0], [{"w": torch.tensor([3.0, 0.0])}])
    torch.testing.assert_close(fold.change()["w"], torch.tensor([0.5 * 2 + 0.25 * 4,
                                                                 0.5 * -2 + 0.25 * 4]))
    new = store.updated(fold.clients, None)
    torch.testing.assert_close(new[7]["w"], torch.tensor([4.0, 4.0]))
    with pytest.raises(ValueError, match="distinct"):
        StateFold(new, [1, 1])
    half = StateFold(new, [4, 7])
    half.add([0], None)
    with pytest.raises(RuntimeError, match="1 of 2"):
        half.change()
    assert DeltaFold([1.0]).take_states([0], "kept") == "kept"  # no state fold: as they are


@pytest.mark.parametrize("budget", [1e9, 0.0], ids=["whole", "stand-ins"])
@pytest.mark.parametrize("executor", ["batched", "loop"])
def test_the_estimate_s_sampled_engine_feeds_the_state_fold(budget, executor):
    """``figures --estimate`` trains a sample of a call and gives the rest stand-ins: every
    client's state still reaches the round's state fold (it raised "0 of 10 clients' states
    were folded" before); with budget to spare the round is the inner engine's."""
    from wirelessfl.engine.sampled import SampledExecutor

    raw = {**RAW, "engine": executor, "algorithm": {"name": "scaffold", "clients_per_round": 5}}
    if executor == "loop":
        raw.pop("max_batch")
    runs = []
    for sampled in (False, True):
        exp = open_run(raw).exp
        if sampled:
            object.__setattr__(exp.env, "executor",
                               SampledExecutor(exp.env.executor, budget_s=budget, seed=1))
        state = exp.initial_state()
        for _ in range(2):
            state, _ = exp.algorithm.apply(state)
        runs.append(state)
    assert sorted(runs[1].client_states) == sorted(runs[0].client_states)
    if budget:
        for k, v in runs[0].params.items():
            torch.testing.assert_close(runs[1].params[k], v, rtol=1e-4, atol=1e-6)
