"""The stacked client store: one tensor per field and key, gathered and written for a round at once."""

import dataclasses
import io

import numpy as np
import pytest
import torch

from wirelessfl.engine.client_store import (
    ClientStore,
    StaleStore,
    StateStack,
    StoreRows,
    concat_rows,
    gathered,
    holds,
    take_rows,
)
from wirelessfl.server.state import AlgorithmState

LIKE = {"w": torch.zeros(3, 2), "b": torch.zeros(3)}


@dataclasses.dataclass(frozen=True)
class TwoTrees(AlgorithmState):
    v: dict | None = None
    y: dict | None = None


def _tree(gen, scale=1.0):
    return {k: scale * torch.randn(v.shape, generator=gen) for k, v in LIKE.items()}


def _per_client(states, ids, field=""):
    """The reference: each client's stored field, zeros where it has none."""
    rows = []
    for u in ids:
        s = states.get(u)
        t = None if s is None else (s if field == "" else getattr(s, field))
        rows.append(t if t is not None else {k: torch.zeros_like(v) for k, v in LIKE.items()})
    return {k: torch.stack([r[k] for r in rows]) for k in LIKE}


@pytest.mark.parametrize("seed", range(3))
def test_a_gather_is_each_client_s_state_and_zeros_for_the_others(seed):
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    states = {int(u): _tree(gen) for u in rng.choice(50, 12, replace=False)}
    store = ClientStore.from_states(states)
    assert set(store) == set(states) and len(store) == 12
    ids = rng.choice(60, 20)  # some held, some never seen, repeats allowed
    want = _per_client(states, ids.tolist())
    got = store.gather("", ids, LIKE)
    for k in LIKE:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)
    for u, t in states.items():
        for k in LIKE:
            assert torch.equal(store[u][k], t[k])
    assert store.gather("", np.array([55, 56]), LIKE) is None  # no client holds one


def test_a_state_stack_writes_what_its_per_client_states_would():
    """The engine's stacks (new where written, a field cleared, the rest kept) against the
    same states written client by client through the sequence adapter."""
    gen = torch.Generator().manual_seed(1)
    old = {0: TwoTrees(v=_tree(gen), y=_tree(gen)), 2: TwoTrees(v=_tree(gen)), 5: TwoTrees(y=_tree(gen))}
    clients = np.array([0, 1, 2, 5, 7])
    stacked = ClientStore.from_states(old, TwoTrees)
    by_client = ClientStore.from_states(old, TwoTrees)
    new = {"v": {k: torch.randn(5, *v.shape, generator=gen) for k, v in LIKE.items()}}
    stack = StateStack(new, {"v": np.array([1, 1, 0, 1, 0], bool),
                             "y": np.array([0, 0, 1, 1, 0], bool)},  # y written, no stack: cleared
                       stacked.rows(clients), TwoTrees)
    each = list(stack)  # per-client objects, read before the store moves on
    assert each[4] is None and each[2].y is None and each[2].v is not None
    assert holds(stack, 5).tolist() == [True, True, True, True, False]
    assert holds(stack, 5, "y").tolist() == [True, False, False, False, False]
    for field in ("v", "y"):
        got, want = stack.gather(field, LIKE), gathered(each, LIKE, field)
        for k in LIKE:
            assert torch.equal(got[k], want[k])
    a = stacked.updated(clients, stack)
    b = by_client.updated(clients, each)
    b = ClientStore.from_states({u: s for u, s in b.items() if u not in (2, 5)}
                                | {2: TwoTrees(v=old[2].v), 5: TwoTrees(v=each[3].v)}, TwoTrees)
    assert set(a) == set(b) == {0, 1, 2, 5}
    for u in a:
        for f in ("v", "y"):
            x, y = getattr(a[u], f), getattr(b[u], f)
            assert (x is None) == (y is None), (u, f)
            for k in x or {}:
                assert torch.equal(x[k], y[k])


def test_a_store_moved_on_is_stale_and_a_copy_is_not():
    gen = torch.Generator().manual_seed(2)
    store = ClientStore.from_states({3: _tree(gen)})
    kept = store.copy()
    nxt = store.updated(np.array([3]), [_tree(gen)])
    with pytest.raises(StaleStore, match="later round"):
        store[3]
    with pytest.raises(StaleStore):
        store.gather("", np.array([3]), LIKE)
    assert not torch.equal(kept[3]["w"], nxt[3]["w"])
    kept.updated(np.array([3]), [None])  # a copy moves on alone
    assert len(nxt) == 1


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_store_round_trips_through_a_checkpoint_and_refuses_a_damaged_one(dtype):
    gen = torch.Generator().manual_seed(3)
    store = ClientStore.from_states({9: TwoTrees(v=_tree(gen)), 40: TwoTrees(y=_tree(gen)),
                                     2: TwoTrees(v=_tree(gen), y=_tree(gen))}, TwoTrees, dtype)
    buf = io.BytesIO()
    torch.save(store.to_plain(), buf)
    buf.seek(0)
    back = ClientStore.from_plain(torch.load(buf, weights_only=True), TwoTrees)
    assert back.dtype == dtype and list(back) == list(store)
    for u in store:
        for f in ("v", "y"):
            x, y = getattr(store[u], f), getattr(back[u], f)
            assert (x is None) == (y is None)
            for k in x or {}:
                assert torch.equal(x[k], y[k]) and y[k].dtype == getattr(torch, dtype)
    plain = store.to_plain()
    for damage in ({**plain, "ids": torch.tensor([1, 1, 2])},
                   {**plain, "fields": {"v": plain["fields"]["v"]}},
                   {k: v for k, v in plain.items() if k != "dtype"}):
        with pytest.raises(ValueError):
            ClientStore.from_plain(damage, TwoTrees)


def test_a_store_grows_without_losing_a_row():
    gen = torch.Generator().manual_seed(4)
    store, want = ClientStore(), {}
    for start in range(0, 70, 7):  # new clients every round: the rows grow by doubling
        ids = np.arange(start, start + 7)[::-1]
        trees = [_tree(gen) for _ in ids]
        want.update(dict(zip(ids.tolist(), trees)))
        store = store.updated(ids, trees)
    assert store._data.capacity >= 70 and len(store) == 70
    got = store.gather("", np.arange(70), LIKE)
    for u in range(70):
        assert torch.equal(got["w"][u], want[u]["w"])


def test_a_round_s_store_work_does_not_grow_with_its_clients():
    """Operators of one gather and one stacked write: 4 clients against 40 (an invariant; the
    rows already allocated, as in every round once the store has grown)."""
    from torch.profiler import ProfilerActivity, profile

    counts = []
    for n in (4, 40):
        gen = torch.Generator().manual_seed(n)
        store = ClientStore.from_states({u: _tree(gen) for u in range(2 * n)})
        ids = np.arange(0, 2 * n, 2)
        new = {k: torch.randn(n, *v.shape, generator=gen) for k, v in LIKE.items()}
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            store.gather("", ids, LIKE)
            store.updated(ids, StateStack({"": new}, {"": np.ones(n, bool)}, store.rows(ids)))
        counts.append(sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")))
    assert counts[0] == counts[1]


def test_rows_of_one_store_stay_one_view_through_takes_and_concatenation():
    gen = torch.Generator().manual_seed(5)
    store = ClientStore.from_states({u: _tree(gen) for u in range(6)})
    rows = store.rows(np.array([5, 4, 3, 2]))
    part = take_rows(rows, np.array([2, 0]))
    assert isinstance(part, StoreRows) and part.clients.tolist() == [3, 5]
    both = concat_rows([part, store.rows(np.array([1]))], [2, 1])
    assert isinstance(both, StoreRows) and both.clients.tolist() == [3, 5, 1]
    mixed = concat_rows([part, [None]], [2, 1])
    assert isinstance(mixed, list) and mixed[2] is None and torch.equal(mixed[0]["w"], store[3]["w"])
