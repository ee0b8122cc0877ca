"""Partitioners: how a training set is split over clients.

Every partitioner is deterministic given its ``rng``, returns *disjoint* index sets (sample
reuse only where an option asks for it by name), never loops without bound, and raises
``ValueError`` with the reason when a request cannot be met.

- :class:`IID` — uniform random equal split;
- :class:`Shards` — HIST case (i), "fully non-iid": sort by label, cut 2U shards, 2 per client
  (``docs/papers/hist.md`` §6.1, after McMahan et al. 2017);
- :class:`CellIIDShards` — HIST case (ii), iid across cells and shards within each cell;
- :class:`DirichletOverClients` — per class, proportions ~ Dir(α) over clients (Flower /
  FL-bench convention, Hsu et al. 2019), resampled until every client has ``min_size``;
- :class:`DirichletPerClient` — per client, label distribution ~ Dir(α) over classes and a fixed
  sample count (FedAST ``docs/papers/fedast.md`` §4.5, dynamic clients §4.2);
- :class:`TwoGroupOverlap` — two client groups A, B with overlapping label sets
  (``docs/papers/dynamic_clients.md`` §4.2);
- :class:`LabelSets` — Two-Shard, Half, Partial-Overlap, Distinct (the same paper's
  Tables 8-11).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
from typing_extensions import override

from channels.validation import check_memory, check_rng

Partition = tuple[np.ndarray, ...]


class Partitioner(ABC):
    """Split sample indices over clients.

    Contract: :meth:`partition` returns one int64 index array per client (client order is
    the order of the tuple). Arrays are pairwise disjoint unless the concrete class documents
    an explicit reuse option. An impossible request raises ``ValueError`` naming the argument.
    """

    @property
    @abstractmethod
    def num_clients(self) -> int:
        """Number of index arrays :meth:`partition` returns."""

    @abstractmethod
    def partition(self, labels: np.ndarray, rng: np.random.Generator) -> Partition:
        """Split ``range(len(labels))``.

        Parameters
        ----------
        labels : ndarray, shape (n,), int
            Class label of every training sample.
        rng : numpy.random.Generator
            The partition stream.
        """

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _positive_int(name: str, value: int) -> int:
    if int(value) != value or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}")
    return int(value)


def _labels_iv(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"`labels` must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    return labels


class IID(Partitioner):
    """Uniform random split into equal parts (the ``n mod U`` leftover samples are unused).

    Parameters
    ----------
    num_clients : int
        Number of clients U.
    samples_per_client : int or None
        Samples per client; None uses ``n // U``.
    """

    def __init__(self, *, num_clients: int, samples_per_client: int | None = None) -> None:
        self._num_clients = _positive_int("num_clients", num_clients)
        self.samples_per_client = (None if samples_per_client is None
                                   else _positive_int("samples_per_client", samples_per_client))

    @property
    @override
    def num_clients(self) -> int:
        return self._num_clients

    @override
    def partition(self, labels: np.ndarray, rng: np.random.Generator) -> Partition:
        n = len(_labels_iv(labels))
        per = self.samples_per_client or n // self._num_clients
        if per * self._num_clients > n or per == 0:
            raise ValueError(
                f"IID: {self._num_clients} clients x {per} samples needs "
                f"{self._num_clients * max(per, 1)} samples, the dataset has {n}"
            )
        perm = rng.permutation(n)[: per * self._num_clients]
        return tuple(np.sort(p) for p in perm.reshape(self._num_clients, per))


def _shard_split(indices: np.ndarray, labels: np.ndarray, num_clients: int,
                 shards_per_client: int, rng: np.random.Generator) -> Partition:
    """Sort ``indices`` by label, cut ``num_clients·shards_per_client`` equal shards, deal them."""
    num_shards = num_clients * shards_per_client
    size = len(indices) // num_shards
    if size == 0:
        raise ValueError(
            f"shards: {num_shards} shards need at least {num_shards} samples, got {len(indices)}"
        )
    ordered = indices[np.argsort(labels[indices], kind="stable")][: size * num_shards]
    shards = ordered.reshape(num_shards, size)
    deal = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return tuple(np.sort(shards[d].ravel()) for d in deal)


class Shards(Partitioner):
    """HIST case (i), "fully non-iid" (``docs/papers/hist.md`` §6.1).

    Sort the training set by label, cut it into ``shards_per_client·U`` equal shards
    (120 shards of 500 for Fashion-MNIST with U = 60), give each client
    ``shards_per_client`` distinct shards at random. Each client then holds at most
    ``shards_per_client`` classes.
    """

    def __init__(self, *, num_clients: int, shards_per_client: int = 2) -> None:
        self._num_clients = _positive_int("num_clients", num_clients)
        self.shards_per_client = _positive_int("shards_per_client", shards_per_client)

    @property
    @override
    def num_clients(self) -> int:
        return self._num_clients

    @override
    def partition(self, labels: np.ndarray, rng: np.random.Generator) -> Partition:
        labels = _labels_iv(labels)
        return _shard_split(np.arange(len(labels)), labels, self._num_clients,
                            self.shards_per_client, rng)


class CellIIDShards(Partitioner):
    """HIST case (ii), iid across cells, non-iid within a cell (``docs/papers/hist.md`` §6.1).

    Split the training set uniformly at random into N equal parts, one per cell; inside
    cell j apply :class:`Shards` with ``shards_per_client·n_j`` shards. Clients are numbered
    cell by cell (client u of cell j is ``sum(n_<j) + u``), as in
    :class:`~wirelessfl.server.topology.Topology`.

    Parameters
    ----------
    clients_per_cell : sequence of int
        n_j for every cell.
    """

    def __init__(self, *, clients_per_cell: Sequence[int], shards_per_client: int = 2) -> None:
        self.clients_per_cell = tuple(_positive_int("clients_per_cell", n) for n in clients_per_cell)
        if not self.clients_per_cell:
            raise ValueError("`clients_per_cell` must name at least one cell")
        self.shards_per_client = _positive_int("shards_per_client", shards_per_client)

    @property
    @override
    def num_clients(self) -> int:
        return sum(self.clients_per_cell)

    @override
    def partition(self, labels: np.ndarray, rng: np.random.Generator) -> Partition:
        labels = _labels_iv(labels)
        cells = len(self.clients_per_cell)
        per_cell = len(labels) // cells
        parts = rng.permutation(len(labels))[: per_cell * cells].reshape(cells, per_cell)
        out: list[np.ndarray] = []
        for idx, n_j in zip(parts, self.clients_per_cell):
            out.extend(_shard_split(idx, labels, n_j, self.shards_per_client, rng))
        return tuple(out)


class DirichletOverClients(Partitioner):
    """Per class, split its samples over clients with proportions ~ Dir(α·1_U).

    The Flower / FL-bench convention (Hsu et al. 2019 as implemented there): with
    ``self_balancing`` a client that already holds more than n/U samples gets no more of the
    next class. The whole draw is repeated until every client has at least ``min_size``
    samples, at most ``max_tries`` times; then a ``ValueError`` says to lower ``min_size`` or
    raise ``alpha``.
    """

    def __init__(self, *, num_clients: int, alpha: float, min_size: int = 10,
                 self_balancing: bool = True, max_tries: int = 100) -> None:
        self._num_clients = _positive_int("num_clients", num_clients)
        if not alpha > 0:
            raise ValueError(f"`alpha` must be > 0, got {alpha!r}")
        self.alpha = float(alpha)
        self.min_size = int(min_size)
        self.self_balancing = bool(self_balancing)
        self.max_tries = _positive_int("max_tries", max_tries)

    @property
    @override
    def num_clients(self) -> int:
        return self._num_clients

    def _draw(self, labels: np.ndarray, rng: np.random.Generator) -> list[list[np.ndarray]]:
        u, n = self._num_clients, len(labels)
        parts: list[list[np.ndarray]] = [[] for _ in range(u)]
        sizes = np.zeros(u, dtype=np.int64)
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(u, self.alpha))
            if self.self_balancing:
                p = np.where(sizes < n / u, p, 0.0)
                p = p / p.sum() if p.sum() > 0 else np.full(u, 1.0 / u)
            cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].append(chunk)
                sizes[k] += len(chunk)
        return parts

    @override
    def partition(self, labels: np.ndarray, rng: np.random.Generator) -> Partition:
        labels = _labels_iv(labels)
        if self.min_size * self._num_clients > len(labels):
            raise ValueError(
                f"DirichletOverClients: min_size={self.min_size} for {self._num_clients} clients "
                f"needs {self.min_size * self._num_clients} samples, the dataset has {len(labels)}"
            )
        for _ in range(self.max_tries):
            parts = self._draw(labels, rng)
            out = tuple(np.sort(np.concatenate(p)) for p in parts)
            if min(len(p) for p in out) >= self.min_size:
                return out
        raise ValueError(
            f"DirichletOverClients: no draw in {self.max_tries} tries gave every client "
            f">= {self.min_size} samples (alpha={self.alpha}); lower `min_size` or raise `alpha`"
        )


def _largest_remainder(p: np.ndarray, total: int) -> np.ndarray:
    """Integer counts proportional to ``p`` that sum exactly to ``total``."""
    raw = p * total
    counts = np.floor(raw).astype(np.int64)
    short = total - counts.sum()
    counts[np.argsort(-(raw - counts), kind="stable")[:short]] += 1
    return counts


class _LabelPools:
    """Per-label pools of unused sample indices, drawn without replacement."""

    def __init__(self, labels: np.ndarray, classes: np.ndarray, rng: np.random.Generator,
                 indices: np.ndarray | None = None) -> None:
        idx = np.arange(len(labels)) if indices is None else indices
        self._full = [rng.permutation(idx[labels[idx] == c]) for c in classes]
        self._rng = rng
        self.pools = [f.copy() for f in self._full]

    def remaining(self) -> np.ndarray:
        return np.array([len(p) for p in self.pools])

    def refill(self) -> None:
        self.pools = [self._rng.permutation(f) for f in self._full]

    def _draw_refilling(self, p: np.ndarray, total: int) -> np.ndarray:
        present = np.array([len(f) > 0 for f in self._full])
        w = np.where(present, p, 0.0)
        w = w / w.sum() if w.sum() > 0 else present / present.sum()
        taken: list[np.ndarray] = []
        for k, count in enumerate(_largest_remainder(w, total)):
            need, mine = int(count), []
            while need > 0:
                if len(self.pools[k]) == 0:  # refill; this client's samples go last
                    fresh = self._rng.permutation(self._full[k])
                    seen = np.isin(fresh, np.concatenate(mine)) if mine else np.zeros(len(fresh), bool)
                    self.pools[k] = np.concatenate([fresh[~seen], fresh[seen]])
                mine.append(self.take(k, min(need, len(self.pools[k]))))
                need -= len(mine[-1])
            taken.extend(mine)
        return np.sort(np.concatenate(taken)) if taken else np.zeros(0, np.int64)

    def take(self, k: int, count: int) -> np.ndarray:
        got, self.pools[k] = self.pools[k][:count], self.pools[k][count:]
        return got

    def draw(self, p: np.ndarray, total: int, *, reuse: bool) -> np.ndarray:
        """``total`` samples with label shares ``p``.

        With ``reuse`` (FedAST's rule [code]) a label whose pool runs short is refilled with
        all its samples (freshly shuffled) at once, so every client gets its Dirichlet shares
        exactly. Without it a short label's deficit goes to the client's other labels.
        """
        if reuse:
            return self._draw_refilling(p, total)
        taken: list[np.ndarray] = []
        need = total
        weights = p.astype(np.float64).copy()
        while need > 0:
            avail = self.remaining()
            if avail.sum() == 0:
                if not reuse:
                    raise ValueError(f"label pools exhausted with {need} samples still to draw; "
                                     "ask for fewer samples or allow reuse")
                self.refill()
                avail = self.remaining()
            w = np.where(avail > 0, weights, 0.0)
            w = w / w.sum() if w.sum() > 0 else (avail > 0) / (avail > 0).sum()
            counts = np.minimum(_largest_remainder(w, need), avail)
            for k in np.flatnonzero(counts):
                taken.append(self.take(k, int(counts[k])))
            need -= int(counts.sum())
        return np.sort(np.concatenate(taken)) if taken else np.zeros(0, np.int64)


class DirichletPerClient(Partitioner):
    """Per client, label distribution p ~ Dir(α·1_C) and a fixed sample count.

    FedAST convention (``docs/papers/fedast.md`` §4.5): each of the U clients draws
    ``samples_per_client`` samples with label shares p from per-label pools, without
    replacement. Counts are rounded by largest remainder so each client gets exactly
    ``samples_per_client`` **[default]** (the FedAST code rounds each label separately).
    When a label's pool runs dry the missing samples come from the client's other labels in
    proportion to p, so clients keep their size and sets stay disjoint.

    FedAST's 1000 clients × 300 samples exceed the training set; its code then refills a
    label's pool as soon as it runs short, so each client's label shares follow its draw
    exactly. That reuse is available only as ``reuse=True`` (and follows the code's rule);
    by default a request larger than the dataset raises ``ValueError``.
    """

    def __init__(self, *, num_clients: int, alpha: float, samples_per_client: int,
                 reuse: bool = False) -> None:
        self._num_clients = _positive_int("num_clients", num_clients)
        if not alpha > 0:
            raise ValueError(f"`alpha` must be > 0, got {alpha!r}")
        self.alpha = float(alpha)
        self.samples_per_client = _positive_int("samples_per_client", samples_per_client)
        self.reuse = bool(reuse)

    @property
    @override
    def num_clients(self) -> int:
        return self._num_clients

    @override
    def partition(self, labels: np.ndarray, rng: np.random.Generator) -> Partition:
        labels = _labels_iv(labels)
        need = self._num_clients * self.samples_per_client
        check_memory(16.0 * need + 8.0 * self._num_clients * 1000,
                     f"{self._num_clients} clients x {self.samples_per_client} samples",
                     "ask for fewer clients or samples per client")
        if need > len(labels) and not self.reuse:
            raise ValueError(
                f"DirichletPerClient: {self._num_clients} clients x {self.samples_per_client} "
                f"samples = {need} > {len(labels)} samples in the dataset; lower "
                f"`samples_per_client` or set `reuse=True` (FedAST's reuse rule)"
            )
        classes = np.unique(labels)
        pools = _LabelPools(labels, classes, rng)
        props = rng.dirichlet(np.full(len(classes), self.alpha), size=self._num_clients)
        return tuple(pools.draw(p, self.samples_per_client, reuse=self.reuse) for p in props)


def deal_labels(labels: np.ndarray, sets: Sequence[np.ndarray], rng: np.random.Generator, *,
                share: bool = False) -> list[np.ndarray]:
    """Each label's samples (shuffled) to the holders of that label among ``sets``.

    Every holder gets all of them (``share``) or an equal part (``np.array_split``).
    """
    labels = _labels_iv(labels)
    if isinstance(sets, (str, bytes, np.ndarray)) or not isinstance(sets, Sequence) or not sets:
        raise ValueError("`sets` must be a non-empty sequence of label arrays (one per holder)")
    sets = [np.asarray(held) for held in sets]
    if any(held.ndim != 1 or (held.size and not np.issubdtype(held.dtype, np.integer))
           for held in sets):
        raise ValueError("each of `sets` must be a 1-D integer array of labels")
    check_rng(rng)
    parts: list[list[np.ndarray]] = [[] for _ in sets]
    for c in np.unique(np.concatenate(sets)):
        holders = [k for k, held in enumerate(sets) if c in held]
        idx = rng.permutation(np.flatnonzero(labels == c))
        for k, piece in zip(holders, [idx] * len(holders) if share
                            else np.array_split(idx, len(holders))):
            parts[k].append(piece)
    return [np.sort(np.concatenate(p)) if p else np.zeros(0, np.int64) for p in parts]


def two_group_labels(num_classes: int, overlap: float) -> tuple[np.ndarray, np.ndarray]:
    """Label sets of groups A and B (``docs/papers/dynamic_clients.md`` §4.2).

    Examples
    --------
    >>> a, b = two_group_labels(10, 0.2)
    >>> a.tolist(), b.tolist()
    ([0, 1, 2, 3, 4], [4, 5, 6, 7, 8])
    """
    if not 0 <= overlap < 1:
        raise ValueError(f"`overlap` must be in [0, 1), got {overlap!r}")
    half = (np.arange(num_classes // 2), np.arange(num_classes // 2, num_classes))
    if overlap == 0:
        return half
    g = int(num_classes // (2 - overlap))
    o = int(np.floor(g * overlap))
    u = g - o
    if o == 0 or g <= o:
        return half
    return np.arange(0, u + o), np.arange(u, u + o + u)


class TwoGroupOverlap(Partitioner):
    """Two client groups with overlapping label sets (``docs/papers/dynamic_clients.md`` §4.2).

    Clients ``0..G-1`` form group A and ``G..2G-1`` group B; their label sets come from
    :func:`two_group_labels`. Within a group each client gets an equal quota of the group's
    samples (the remainder spread round-robin) with label shares ~ Dir(α) over the group's
    labels, drawn from per-label pools without replacement (IID when ``alpha`` is None).
    The reference draws each sample's label from the client's shares (up to 3|L|+5 tries);
    drawing the per-label counts by largest remainder gives the same shares in expectation
    **[default]**.

    As in the authors' code (§7 item 21), the samples of a label shared by A and B go to
    *both* groups (the same samples then appear in A and in B; ``share_overlap=True``,
    the default); ``share_overlap=False`` splits them half and half, so all sets are disjoint.

    ``unseen_labels`` = u > 0 sets up Table 12 (unseen labels appear only in the final
    session) **[default, the paper gives no construction]**: A and B split the first L − u
    labels as above, and a third group C (clients ``2G..3G-1``) holds B's labels and the u
    held-out ones; the population then brings C in for the last session
    (``population.order``, e.g. ``[0, 1, 0, 1, 0, 2]``).
    """

    def __init__(self, *, clients_per_group: int, num_classes: int, overlap: float = 0.0,
                 alpha: float | None = None, share_overlap: bool = True,
                 unseen_labels: int = 0) -> None:
        self.clients_per_group = _positive_int("clients_per_group", clients_per_group)
        self.num_classes = _positive_int("num_classes", num_classes)
        if not 0 <= unseen_labels <= num_classes - 2 or int(unseen_labels) != unseen_labels:
            raise ValueError(f"`unseen_labels` must be an integer in [0, {num_classes - 2}] (A and "
                             f"B need a label each), got {unseen_labels!r}")
        self.unseen_labels = int(unseen_labels)
        a, b = two_group_labels(num_classes - self.unseen_labels, overlap)
        held_out = np.arange(num_classes - self.unseen_labels, num_classes)
        self.label_sets = (a, b) + ((np.concatenate([b, held_out]),) if self.unseen_labels else ())
        self.overlap = float(overlap)
        if alpha is not None and not alpha > 0:
            raise ValueError(f"`alpha` must be > 0 or None, got {alpha!r}")
        self.alpha = alpha
        self.share_overlap = bool(share_overlap)

    @property
    @override
    def num_clients(self) -> int:
        return len(self.label_sets) * self.clients_per_group

    @override
    def partition(self, labels: np.ndarray, rng: np.random.Generator) -> Partition:
        labels = _labels_iv(labels)
        if labels.max(initial=0) >= self.num_classes:
            raise ValueError(f"labels reach {labels.max()} but `num_classes`={self.num_classes}")
        out: list[np.ndarray] = []
        g = self.clients_per_group
        groups = deal_labels(labels, self.label_sets, rng, share=self.share_overlap)
        for idx, label_set in zip(groups, self.label_sets):
            if len(idx) < g:
                raise ValueError(f"TwoGroupOverlap: a group has {len(idx)} samples for {g} clients")
            quotas = np.full(g, len(idx) // g) + (np.arange(g) < len(idx) % g)
            if self.alpha is None:
                out.extend(np.sort(p) for p in np.split(rng.permutation(idx), np.cumsum(quotas)[:-1]))
                continue
            pools = _LabelPools(labels, label_set, rng, indices=idx)
            props = rng.dirichlet(np.full(len(label_set), self.alpha), size=g)
            out.extend(pools.draw(p, int(q), reuse=False) for p, q in zip(props, quotas))
        return tuple(out)


#: The alternative label distributions of the dynamic-clients paper (Appendix A.2, Tables 8-11).
LABEL_SET_KINDS = ("two_shard", "half", "partial_overlap", "distinct")


def label_sets(kind: str, num_clients: int, num_classes: int,
               rng: np.random.Generator) -> list[np.ndarray]:
    """Each client's labels under an alternative distribution (``docs/papers/dynamic_clients.md`` §4.2).

    - ``two_shard``: labels in U = min(L, 10) units (a label, or for L = 100 a batch of 10
      consecutive labels); each unit is cut into 2N/U shards and each client gets 2 shards
      of different units, at random (the paper: 10 clients, 2 shards per label);
    - ``half``: the first N/2 clients hold the first ⌊L/2⌋ labels, the rest the others;
    - ``partial_overlap``: the halves hold 60% of the labels each, overlapping in 20%
      (L = 10: 0-5 and 4-9);
    - ``distinct``: the labels cut into N consecutive blocks, one per client (N ≤ L).

    Examples
    --------
    >>> [s.tolist() for s in label_sets("partial_overlap", 2, 10, np.random.default_rng(0))]
    [[0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9]]
    """
    n, L = num_clients, num_classes
    half = n // 2
    if kind in ("half", "partial_overlap") and n < 2:
        raise ValueError(f"{kind} needs at least 2 clients (two halves), got {n}")
    if kind == "half":
        return [np.arange(L // 2) if k < half else np.arange(L // 2, L) for k in range(n)]
    if kind == "partial_overlap":
        width = int(round(0.6 * L))
        return [np.arange(width) if k < half else np.arange(L - width, L) for k in range(n)]
    if kind == "distinct":
        if n > L:
            raise ValueError(f"distinct labels: {n} clients > {L} labels; use at most {L} clients")
        return list(np.array_split(np.arange(L), n))
    if kind == "two_shard":
        units = min(L, 10)
        if L % units or (2 * n) % units:
            raise ValueError(f"two_shard: {n} clients x 2 shards must split evenly over {units} "
                             f"label units ({L} labels); use a multiple of {units // 2 or 1} clients")
        slots = np.repeat(np.arange(units), 2 * n // units)
        pairs = _distinct_pairs(rng.permutation(slots), rng)
        per_unit = L // units
        return [np.sort(np.concatenate([np.arange(u * per_unit, (u + 1) * per_unit) for u in p]))
                for p in pairs]
    raise ValueError(f"unknown label distribution {kind!r}; choose one of {', '.join(LABEL_SET_KINDS)}")


def _distinct_pairs(slots: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``slots`` as rows of 2 with different entries.

    A pair (a, a) swaps its second a with the first entry of a random pair without a.
    """
    pairs = slots.reshape(-1, 2).copy()
    for i in np.flatnonzero(pairs[:, 0] == pairs[:, 1]):
        a = pairs[i, 0]
        if pairs[i, 1] != a:  # mended by an earlier swap
            continue
        j = next((j for j in rng.permutation(len(pairs)) if a not in pairs[j]), None)
        if j is None:
            raise ValueError("two_shard: cannot give every client 2 different label units")
        pairs[i, 1], pairs[j, 0] = pairs[j, 0], a
    return pairs


class LabelSets(Partitioner):
    """Clients with given label sets; each label's samples split equally among its holders.

    The alternative distributions of Tables 8-11 (:func:`label_sets`): every client holds
    its labels, each label's samples shuffled and cut into equal parts, one per client
    holding it. The two halves of the clients (by index) take turns as groups A and B
    (§7 item 17).
    """

    def __init__(self, *, kind: str, num_clients: int, num_classes: int) -> None:
        if kind not in LABEL_SET_KINDS:
            raise ValueError(f"unknown label distribution {kind!r}; choose one of "
                             f"{', '.join(LABEL_SET_KINDS)}")
        self.kind = kind
        self._num_clients = _positive_int("num_clients", num_clients)
        self.num_classes = _positive_int("num_classes", num_classes)
        label_sets(kind, self._num_clients, self.num_classes, np.random.default_rng(0))  # checks

    @property
    @override
    def num_clients(self) -> int:
        return self._num_clients

    @override
    def partition(self, labels: np.ndarray, rng: np.random.Generator) -> Partition:
        labels = _labels_iv(labels)
        out = tuple(deal_labels(labels, label_sets(self.kind, self._num_clients,
                                                   self.num_classes, rng), rng))
        empty = [k for k, p in enumerate(out) if len(p) == 0]
        if empty:
            raise ValueError(f"{self.kind}: clients {empty[:5]} get no samples; use fewer clients")
        return out
