import numpy as np
import pytest

from wirelessfl.data import (
    IID,
    CellIIDShards,
    DirichletOverClients,
    DirichletPerClient,
    Shards,
    TwoGroupOverlap,
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
    TwoGroupOverlap(clients_per_group=6, num_classes=10, overlap=0.2, alpha=0.5),
]


@pytest.mark.parametrize("p", PARTITIONERS, ids=lambda p: type(p).__name__)
def test_disjoint_deterministic_and_sized(p):
    a = p.partition(LABELS, np.random.default_rng(0))
    b = p.partition(LABELS, np.random.default_rng(0))
    c = p.partition(LABELS, np.random.default_rng(1))
    assert len(a) == p.num_clients
    assert _disjoint(a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
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


def test_two_group_overlap_split_and_code_option():
    p = TwoGroupOverlap(clients_per_group=5, num_classes=10, overlap=0.2)
    parts = p.partition(LABELS, np.random.default_rng(0))
    group_a, group_b = np.concatenate(parts[:5]), np.concatenate(parts[5:])
    assert set(np.unique(LABELS[group_a])) == set(range(5))
    assert set(np.unique(LABELS[group_b])) == set(range(4, 9))
    assert len(np.intersect1d(group_a, group_b)) == 0
    shared = TwoGroupOverlap(clients_per_group=5, num_classes=10, overlap=0.2, share_overlap=True)
    parts = shared.partition(LABELS, np.random.default_rng(0))
    both = np.intersect1d(np.concatenate(parts[:5]), np.concatenate(parts[5:]))
    assert len(both) == 600 and set(LABELS[both]) == {4}


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
