import numpy as np
import pytest

from wirelessfl.data import (
    IID,
    LABEL_SET_KINDS,
    CellIIDShards,
    DirichletOverClients,
    DirichletPerClient,
    LabelSets,
    Shards,
    TwoGroupOverlap,
    label_sets,
    two_group_labels,
)

LABELS = np.repeat(np.arange(10), 600)  # 6000 samples, 600 per class


def _disjoint(parts):
    flat = np.concatenate(parts)
    return len(flat) == len(np.unique(flat))


PARTITIONERS = [
    IID(num_clients=12),
    Shards(num_clients=12, shards_per_client=2),
    CellIIDShards(clients_per_cell=(4, 4, 4)),
    DirichletOverClients(num_clients=12, alpha=0.5, min_size=20),
    DirichletPerClient(num_clients=12, alpha=0.1, samples_per_client=300),
    TwoGroupOverlap(clients_per_group=6, num_classes=10, overlap=0.2, alpha=0.5,
                    share_overlap=False),
    *(LabelSets(kind=k, num_clients=10, num_classes=10) for k in LABEL_SET_KINDS),
]


@pytest.mark.parametrize("p", PARTITIONERS, ids=lambda p: getattr(p, "kind", type(p).__name__))
def test_disjoint_deterministic_and_sized(p):
    a = p.partition(LABELS, np.random.default_rng(0))
    b = p.partition(LABELS, np.random.default_rng(0))
    c = p.partition(LABELS, np.random.default_rng(1))
    assert len(a) == p.num_clients
    assert _disjoint(a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    if getattr(p, "kind", None) != "distinct":  # distinct: each client holds whole labels
        assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert all(x.dtype.kind == "i" and len(x) > 0 for x in a)


def test_iid_equal_sizes_cover():
    parts = IID(num_clients=7).partition(LABELS, np.random.default_rng(0))
    assert {len(p) for p in parts} == {6000 // 7}


def test_shards_at_most_two_classes():
    parts = Shards(num_clients=60, shards_per_client=2).partition(
        np.repeat(np.arange(10), 6000), np.random.default_rng(0))
    assert {len(p) for p in parts} == {1000}  # 120 shards of 500 (HIST, U = 60)
    labels = np.repeat(np.arange(10), 6000)
    assert max(len(np.unique(labels[p])) for p in parts) <= 2


def test_cell_iid_cells_see_all_classes():
    labels = np.repeat(np.arange(10), 6000)  # Fashion-MNIST-sized, HIST N = 4, n_j = 15
    parts = CellIIDShards(clients_per_cell=(15,) * 4).partition(labels, np.random.default_rng(0))
    assert {len(q) for q in parts} == {1000}
    for j in range(4):
        cell = np.concatenate(parts[15 * j:15 * j + 15])
        counts = np.bincount(labels[cell], minlength=10)
        assert (counts > 0).all()  # iid across cells: each cell holds every class
        assert counts.std() / counts.mean() < 0.2
    # non-iid within a cell: a shard spans <= 2 classes (shards unaligned with class edges)
    classes = [len(np.unique(labels[q])) for q in parts]
    assert max(classes) <= 4 and np.mean(classes) < 3


def test_dirichlet_over_clients_min_size_and_error():
    parts = DirichletOverClients(num_clients=20, alpha=0.1, min_size=50).partition(
        LABELS, np.random.default_rng(0))
    assert min(len(q) for q in parts) >= 50
    assert sum(len(q) for q in parts) == len(LABELS)
    with pytest.raises(ValueError, match="needs 6020 samples"):
        DirichletOverClients(num_clients=20, alpha=0.1, min_size=301).partition(
            LABELS, np.random.default_rng(0))
    with pytest.raises(ValueError, match="no draw in 3 tries"):
        DirichletOverClients(num_clients=20, alpha=0.01, min_size=290, max_tries=3,
                             self_balancing=False).partition(LABELS, np.random.default_rng(0))


def test_dirichlet_per_client_exact_sizes_skew_and_reuse():
    p = DirichletPerClient(num_clients=20, alpha=0.1, samples_per_client=300)
    parts = p.partition(LABELS, np.random.default_rng(0))
    assert {len(q) for q in parts} == {300}
    dominant = [np.bincount(LABELS[q], minlength=10).max() / 300 for q in parts]
    assert np.mean(dominant) > 0.5  # alpha = 0.1: most mass on few labels
    with pytest.raises(ValueError, match="set `reuse=True`"):
        DirichletPerClient(num_clients=21, alpha=0.1, samples_per_client=300).partition(
            LABELS, np.random.default_rng(0))
    big = DirichletPerClient(num_clients=30, alpha=0.1, samples_per_client=300, reuse=True)
    parts = big.partition(LABELS, np.random.default_rng(0))
    assert {len(q) for q in parts} == {300} and all(len(np.unique(q)) == 300 for q in parts)


@pytest.mark.parametrize("L,o,a,b", [(10, 0.0, (0, 4), (5, 9)), (10, 0.2, (0, 4), (4, 8)),
                                     (100, 0.2, (0, 54), (44, 98)), (200, 0.2, (0, 110), (89, 199)),
                                     (4, 0.6, (0, 1), (1, 2)), (4, 0.8, (0, 2), (1, 3))])
def test_two_group_labels_spec_table(L, o, a, b):
    ga, gb = two_group_labels(L, o)
    assert (ga.min(), ga.max()) == a and (gb.min(), gb.max()) == b


def test_two_group_overlap_duplicates_shared_labels_by_default_or_splits_them():
    p = TwoGroupOverlap(clients_per_group=5, num_classes=10, overlap=0.2)
    parts = p.partition(LABELS, np.random.default_rng(0))
    group_a, group_b = np.concatenate(parts[:5]), np.concatenate(parts[5:])
    assert set(np.unique(LABELS[group_a])) == set(range(5))
    assert set(np.unique(LABELS[group_b])) == set(range(4, 9))
    both = np.intersect1d(group_a, group_b)  # the reference code: label 4 goes to both groups
    assert len(both) == 600 and set(LABELS[both]) == {4}
    assert len(group_a) == len(group_b) == 3000
    split = TwoGroupOverlap(clients_per_group=5, num_classes=10, overlap=0.2, share_overlap=False)
    parts = split.partition(LABELS, np.random.default_rng(0))
    assert _disjoint(parts) and sum(map(len, parts)) == 5400


def test_unseen_labels_come_with_a_third_group_only():
    p = TwoGroupOverlap(clients_per_group=4, num_classes=10, alpha=0.3, unseen_labels=2)
    parts = p.partition(LABELS, np.random.default_rng(0))
    assert p.num_clients == len(parts) == 12
    seen = [set(np.unique(LABELS[np.concatenate(parts[g:g + 4])])) for g in (0, 4, 8)]
    assert seen == [set(range(4)), set(range(4, 8)), set(range(4, 10))]
    assert [len(np.concatenate(parts[g:g + 4])) for g in (0, 4, 8)] == [2400, 2400, 3600]


def test_alternative_label_distributions_of_tables_8_to_11():
    labels = np.repeat(np.arange(10), 600)
    sets = {k: [set(np.unique(labels[q])) for q in
                LabelSets(kind=k, num_clients=10, num_classes=10).partition(
                    labels, np.random.default_rng(3))] for k in LABEL_SET_KINDS}
    assert sets["distinct"] == [{c} for c in range(10)]
    assert sets["half"] == [set(range(5))] * 5 + [set(range(5, 10))] * 5
    assert sets["partial_overlap"] == [set(range(6))] * 5 + [set(range(4, 10))] * 5
    assert all(len(s) == 2 for s in sets["two_shard"])  # 2 shards of different labels
    counts = np.bincount([c for s in sets["two_shard"] for c in s], minlength=10)
    assert counts.tolist() == [2] * 10  # every label cut into 2 shards
    # CIFAR-100: 10 batches of 10 labels, 20 labels per client
    hundred = np.repeat(np.arange(100), 50)
    parts = LabelSets(kind="two_shard", num_clients=20, num_classes=100).partition(
        hundred, np.random.default_rng(0))
    assert {len(np.unique(hundred[q])) for q in parts} == {20} and _disjoint(parts)
    for seed in range(30):  # many clients per label: still two different units each
        pairs = label_sets("two_shard", 40, 10, np.random.default_rng(seed))
        assert all(len(s) == 2 for s in pairs)
        assert np.bincount(np.concatenate(pairs)).tolist() == [8] * 10


@pytest.mark.parametrize("kind,n,L,match", [("distinct", 11, 10, "11 clients > 10 labels"),
                                            ("two_shard", 7, 10, "multiple of 5"),
                                            ("half", 1, 10, "at least 2"), ("thirds", 4, 10, "unknown")])
def test_label_sets_refuse_impossible_layouts(kind, n, L, match):
    with pytest.raises(ValueError, match=match):
        LabelSets(kind=kind, num_clients=n, num_classes=L)


@pytest.mark.parametrize("make,match", [
    (lambda: IID(num_clients=0), "num_clients"),
    (lambda: DirichletOverClients(num_clients=3, alpha=0), "alpha"),
    (lambda: Shards(num_clients=4000).partition(LABELS, np.random.default_rng(0)), "8000 shards"),
    (lambda: IID(num_clients=5, samples_per_client=2000).partition(LABELS, np.random.default_rng(0)),
     "needs 10000 samples"),
    (lambda: Shards(num_clients=2).partition(LABELS.astype(float), np.random.default_rng(0)),
     "integer"),
])
def test_impossible_requests_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()
