"""A round's clients as arrays: :class:`ClientBatch` in, :class:`ClientResults` out.

One engine call trains a :class:`ClientBatch`: the clients' ids, their K distinct start
models with a per-client index into them (FedAvg K = 1, a hierarchical round's N cells K =
N), their data, seeds, step size and states. It returns :class:`ClientResults`: every
client's pseudo-gradient Δ_i, loss, steps and buffers as ``(C, …)`` stacks and arrays, so
that aggregation is a (segmented) reduction over the stack and nothing on the round's path
builds an object per client.

The per-client contract (:class:`~wirelessfl.engine.task.ClientTask`,
:class:`~wirelessfl.engine.task.ClientResult`) stays for plug-ins: :meth:`ClientBatch.tasks`
makes a batch's tasks, :class:`ClientResults` is a sequence of results (each built on
access), and :meth:`ClientResults.from_list` wraps the results of a per-client engine.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, overload

import numpy as np
import torch

from wirelessfl.engine.client_store import concat_rows, take_rows
from wirelessfl.engine.fold import DeltaFold
from wirelessfl.engine.task import ClientResult, ClientTask, mover
from wirelessfl.models.base import Params


def _mapped(tree: Any, fn: Any) -> Any:
    """``fn`` on every tensor of a tree of (nested) dicts."""
    return {k: _mapped(v, fn) for k, v in tree.items()} if isinstance(tree, dict) else fn(tree)


def _leaves(tree: Any) -> list[torch.Tensor]:
    return [x for v in tree.values() for x in _leaves(v)] if isinstance(tree, dict) else [tree]


class RowStack(Sequence):
    """A tree of ``(n, …)`` stacks, read as a sequence of n trees (row i: the stacks' row i).

    What an algorithm hands the engine when its clients' starts or broadcasts are already
    stacked (RA-Fed's submodels of one size, :class:`~wirelessfl.server.submodel.SubmodelStack`):
    the batched engine takes the stacks as they are, with no Python per client; code
    written per client reads row i (:meth:`__getitem__`, views of the stacks).

    Parameters
    ----------
    tree : dict
        Tensors, or dicts of them (one level deeper, as a rule's context), all with the same
        leading size n.
    """

    def __init__(self, tree: dict[str, Any]) -> None:
        sizes = {t.shape[0] if t.dim() else -1 for t in _leaves(tree)}
        if len(sizes) != 1 or -1 in sizes:
            raise ValueError(f"a RowStack's tensors need one leading size, got {sorted(sizes)}")
        self.tree, self._n = tree, sizes.pop()

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.select(np.arange(self._n)[i])
        i = range(self._n)[i]
        return _mapped(self.tree, lambda v: v[i])

    def select(self, rows: np.ndarray) -> RowStack:
        """Rows ``rows`` (an index array) as a stack of their own (copies)."""
        index = torch.as_tensor(np.asarray(rows, np.int64))
        return RowStack(_mapped(self.tree, lambda v: v.index_select(0, index.to(v.device))))

    def to(self, device: torch.device) -> RowStack:
        """The stacks on ``device`` (itself when they are there)."""
        if all(v.device == device for v in _leaves(self.tree)):
            return self
        return RowStack(_mapped(self.tree, lambda v: v.to(device)))

    def keys(self):
        """The tree's top-level keys (a start's parameter names)."""
        return self.tree.keys()


def _copied(tree: Any) -> Any:
    """A row of a :class:`RowStack` as a client's own tree (copies: a task may be sent away)."""
    return _mapped(tree, torch.Tensor.clone) if isinstance(tree, dict) else tree


@dataclass(frozen=True, eq=False)
class ClientBatch:
    """The clients of one engine call, as arrays.

    Attributes
    ----------
    clients : ndarray, shape (C,), int64
        Client ids.
    starts : tuple of Params, or RowStack
        The K distinct models the clients start from (each used by some client: a batch's
        :meth:`take` and :meth:`select` keep only the starts their clients use); a
        :class:`RowStack` when they come stacked (K of one shape).
    start_index : ndarray, shape (C,), int64
        Client c starts from ``starts[start_index[c]]``.
    indices : tuple of ndarray
        Each client's samples in the training set.
    seeds : ndarray, shape (C,), int64
        Each client's seed (mini-batch order, dropout; the ``local`` stream).
    lr : float or None
        The clients' step size (None: ``LocalHParams.lr``).
    states : sequence or None
        Each client's persistent state (None: no client has one).
    broadcast : Any
        What the server sends every client with the model (a list or a :class:`RowStack`:
        one per client).
    buffers : Params, list of Params or None
        The model buffers every client starts from (a list: one per client).
    """

    clients: np.ndarray
    starts: tuple[Params, ...] | RowStack
    start_index: np.ndarray
    indices: tuple[np.ndarray, ...]
    seeds: np.ndarray
    lr: float | None = None
    states: Sequence[Any] | None = None
    broadcast: Any = None
    buffers: Params | list[Params] | None = None

    def __post_init__(self) -> None:
        n = len(self.clients)
        if not (len(self.start_index) == len(self.indices) == len(self.seeds) == n):
            raise ValueError(f"a batch of {n} clients needs one start index, index set and "
                             f"seed each (got {len(self.start_index)}, {len(self.indices)}, "
                             f"{len(self.seeds)})")
        if n and (self.start_index.min() < 0 or self.start_index.max() >= len(self.starts)):
            raise ValueError(f"start_index must lie in [0, {len(self.starts)})")
        if self.states is not None and len(self.states) != n:
            raise ValueError(f"{len(self.states)} states for {n} clients")

    @classmethod
    def of(cls, clients: Sequence[int] | np.ndarray, starts: Sequence[Params],
           start_index: Sequence[int] | np.ndarray, client_indices: Sequence[np.ndarray],
           seeds: np.ndarray, **more: Any) -> ClientBatch:
        """A batch of ``clients``, their data taken from ``client_indices`` (a run's by id)."""
        ids = np.asarray(clients, dtype=np.int64).reshape(-1)
        got = operator.itemgetter(*ids.tolist())(client_indices) if len(ids) else ()
        return cls(ids, starts if isinstance(starts, RowStack) else tuple(starts),
                   np.asarray(start_index, dtype=np.int64).reshape(-1),
                   (got,) if len(ids) == 1 else tuple(got), np.asarray(seeds, np.int64), **more)

    @classmethod
    def from_tasks(cls, tasks: Sequence[ClientTask]) -> ClientBatch:
        """The batch of per-client tasks (their starts told apart by identity)."""
        first: dict[int, int] = {}
        starts: list[Params] = []
        index = np.zeros(len(tasks), np.int64)
        for c, t in enumerate(tasks):
            k = first.setdefault(id(t.params), len(starts))
            if k == len(starts):
                starts.append(t.params)
            index[c] = k
        lrs = {t.lr for t in tasks}
        if len(lrs) > 1:
            raise ValueError("a batch has one step size; these tasks have several")
        states = [t.state for t in tasks]
        bcast = [t.broadcast for t in tasks]
        bufs = [t.buffers for t in tasks]
        return cls(np.array([t.client for t in tasks], np.int64), tuple(starts), index,
                   tuple(t.indices for t in tasks), np.array([t.seed for t in tasks], np.int64),
                   lr=next(iter(lrs)) if lrs else None,
                   states=None if all(s is None for s in states) else states,
                   broadcast=bcast if any(b is not bcast[0] for b in bcast) else
                   (bcast[0] if bcast else None),
                   buffers=bufs if any(b is not bufs[0] for b in bufs) else
                   (bufs[0] if bufs else None))

    @classmethod
    def concat(cls, batches: Sequence[ClientBatch], lr: float | None = None) -> ClientBatch:
        """Batches one after another as one (a lockstep group's runs), at step size ``lr``.

        Each batch keeps its starts (the index shifted past the earlier batches'); a
        broadcast or buffers that differ between batches become one entry per client.
        """
        shift = np.cumsum([0, *(len(b.starts) for b in batches[:-1])])
        per = [len(b) for b in batches]

        def each(field: str) -> Any:  # one value for all, or a list of one per client
            vals = [getattr(b, field) for b in batches]
            if all(not isinstance(v, list | RowStack) and v is vals[0] for v in vals):
                return vals[0]
            return [x for v, n in zip(vals, per)
                    for x in (list(v) if isinstance(v, list | RowStack) else [v] * n)]

        states = concat_rows([b.states for b in batches], per)
        return cls(np.concatenate([b.clients for b in batches]),
                   tuple(s for b in batches for s in b.starts),
                   np.concatenate([b.start_index + k for b, k in zip(batches, shift)]),
                   tuple(i for b in batches for i in b.indices),
                   np.concatenate([b.seeds for b in batches]), lr=lr, states=states,
                   broadcast=each("broadcast"), buffers=each("buffers"))

    def __len__(self) -> int:
        return len(self.clients)

    @property
    def num_samples(self) -> np.ndarray:
        """n_i of every client, shape (C,)."""
        return np.fromiter(map(len, self.indices), np.int64, len(self.indices))

    @property
    def shared_broadcast(self) -> Any:
        """What the server sent every client alike (``{}`` for nothing), None when one per client."""
        if isinstance(self.broadcast, list | RowStack):
            return None
        return self.broadcast if self.broadcast is not None else {}

    def state(self, c: int) -> Any:
        """Client c's persistent state (None without one)."""
        return None if self.states is None else self.states[c]

    def task(self, c: int) -> ClientTask:
        """Client c as a per-client task (for rules written against that contract)."""
        stacked = isinstance(self.broadcast, RowStack)
        b = self.broadcast[c] if isinstance(self.broadcast, list) or stacked else self.broadcast
        buf = self.buffers[c] if isinstance(self.buffers, list) else self.buffers
        start = self.starts[self.start_index[c]]
        return ClientTask(client=int(self.clients[c]),
                          params=_copied(start) if isinstance(self.starts, RowStack) else start,
                          indices=self.indices[c], seed=int(self.seeds[c]), state=self.state(c),
                          broadcast=_copied(b) if stacked else b, lr=self.lr, buffers=buf)

    def tasks(self) -> list[ClientTask]:
        """Every client as a :class:`~wirelessfl.engine.task.ClientTask`, in order."""
        return [self.task(c) for c in range(len(self))]

    def take(self, rows: slice) -> ClientBatch:
        """Clients ``rows`` (a slice) as a batch of their own (:meth:`select`)."""
        return self.select(np.arange(len(self))[rows])

    def select(self, rows: np.ndarray) -> ClientBatch:
        """Clients ``rows`` (an index array) as a batch of their own (with only the starts they use)."""
        rows = np.asarray(rows, np.int64)
        pick = rows.tolist()
        starts, index = self._used_starts(self.start_index[rows])
        return replace(self, clients=self.clients[rows], starts=starts, start_index=index,
                       indices=tuple(self.indices[i] for i in pick), seeds=self.seeds[rows],
                       states=take_rows(self.states, rows),
                       broadcast=self.broadcast.select(rows) if isinstance(self.broadcast, RowStack)
                       else [self.broadcast[i] for i in pick]
                       if isinstance(self.broadcast, list) else self.broadcast,
                       buffers=[self.buffers[i] for i in pick]
                       if isinstance(self.buffers, list) else self.buffers)

    def _used_starts(self, index: np.ndarray) -> tuple[tuple[Params, ...], np.ndarray]:
        """The starts ``index`` uses, in order, and the index into them (``starts[0]`` is used)."""
        used, inverse = np.unique(index, return_inverse=True)
        if len(used) == len(self.starts):
            return self.starts, index
        if isinstance(self.starts, RowStack):
            return self.starts.select(used), inverse.astype(np.int64).reshape(-1)
        return tuple(self.starts[k] for k in used.tolist()), inverse.astype(np.int64).reshape(-1)

    def shape_groups(self) -> list[np.ndarray]:
        """The clients in groups whose starts have one shape, as index arrays (in order).

        One group for FedAvg and HFedAvg; HIST's cells of unequal mask sizes, or a lockstep
        group's runs of other cells, make one per shape. Stacked starts (a :class:`RowStack`)
        have one.
        """
        if isinstance(self.starts, RowStack):
            return [np.arange(len(self))]
        kinds: dict[tuple, list[int]] = {}
        for k, start in enumerate(self.starts):
            kinds.setdefault(tuple((n, tuple(v.shape), v.dtype) for n, v in start.items()),
                             []).append(k)
        if len(kinds) == 1:
            return [np.arange(len(self))]
        kind = np.zeros(len(self.starts), np.int64)
        for j, members in enumerate(kinds.values()):
            kind[members] = j
        of = kind[self.start_index]
        return [np.flatnonzero(of == j) for j in range(len(kinds))]

    def one_start(self, key: str | None = None) -> bool:
        """Whether every client starts from one model (``key``: one tensor of that parameter)."""
        if len(self.starts) == 1 or not len(self):
            return True
        if key is not None and not isinstance(self.starts, RowStack):
            first = self.starts[0][key]
            if all(s[key] is first for s in self.starts):
                return True
        return bool((self.start_index == 0).all())

    def to(self, device: torch.device) -> ClientBatch:
        """The batch with its starts, buffers and broadcast tensors on ``device``.

        Each distinct tensor moves once (starts that share a tensor keep sharing it);
        nothing already there is copied. States stay where the client store keeps them.
        """
        move = mover(device)

        def moved(x: Any) -> Any:
            return x.to(device) if isinstance(x, RowStack) else move(x)
        starts, buffers, broadcast = moved(self.starts), move(self.buffers), moved(self.broadcast)
        if starts is self.starts and buffers is self.buffers and broadcast is self.broadcast:
            return self
        return replace(self, starts=starts, buffers=buffers, broadcast=broadcast)


class ClientResults(Sequence[ClientResult]):
    """An engine call's results as arrays: Δ stacked ``(C, …)``, losses, steps, samples.

    A :class:`~collections.abc.Sequence` of
    :class:`~wirelessfl.engine.task.ClientResult` for code written per client (each built
    when it is read); code on the round's path reads the arrays: :attr:`clients`,
    :attr:`num_samples`, :attr:`num_steps`, :attr:`losses` and :meth:`delta_stack`.

    Parameters
    ----------
    clients, num_samples, num_steps : ndarray, shape (C,)
        Ids, local data sizes, steps taken.
    losses : ndarray, shape (C,)
        Mean training loss over each client's steps (NaN without a step).
    deltas : dict of Tensor or None
        Δ_i = start − end stacked along the first dimension (None: folded while training,
        or held per client in ``rows``).
    buffers : dict of Tensor
        The clients' buffers, stacked (empty without buffers).
    states : sequence or None
        Each client's new persistent state (None: none).
    rows : list of ClientResult or None
        Per-client results this object wraps (:meth:`from_list`).
    """

    def __init__(self, clients: np.ndarray, num_samples: np.ndarray, num_steps: np.ndarray,
                 losses: np.ndarray, deltas: Params | None = None, buffers: Params | None = None,
                 states: Sequence[Any] | None = None,
                 rows: Sequence[ClientResult] | None = None) -> None:
        self.clients = np.asarray(clients, np.int64)
        self.num_samples = np.asarray(num_samples, np.int64)
        self.num_steps = np.asarray(num_steps, np.int64)
        self.losses = np.asarray(losses, np.float64)
        self.deltas = deltas
        self.buffers = buffers or {}
        self.states = states
        self._rows = list(rows) if rows is not None else None
        n = len(self.clients)
        sizes = {len(self.num_samples), len(self.num_steps), len(self.losses),
                 *(v.shape[0] for v in (deltas or {}).values()),
                 *(v.shape[0] for v in self.buffers.values()),
                 *((len(states),) if states is not None else ()),
                 *((len(self._rows),) if self._rows is not None else ())}
        if sizes - {n}:
            raise ValueError(f"results of {n} clients need {n} rows in every array and stack, "
                             f"got {sorted(sizes)}")

    @classmethod
    def from_list(cls, results: Sequence[ClientResult]) -> ClientResults:
        """Per-client results as one object (their Δ stacked on :meth:`delta_stack`)."""
        if isinstance(results, ClientResults):
            return results
        states = [r.state for r in results]
        return cls(np.array([r.client for r in results], np.int64),
                   np.array([r.num_samples for r in results], np.int64),
                   np.array([r.num_steps for r in results], np.int64),
                   np.array([r.loss for r in results], np.float64),
                   states=None if all(s is None for s in states) else states, rows=results)

    @classmethod
    def concat(cls, parts: Sequence[ClientResults], order: np.ndarray | None = None
               ) -> ClientResults:
        """Parts one after another (``order``: the position each row of the parts takes)."""
        if len(parts) == 1 and order is None:
            return parts[0]
        cat = np.concatenate
        arrays = all(p.stacked for p in parts)  # the engine's own: no per-client rows
        deltas = (all(p.deltas is not None for p in parts)
                  and _same_shapes([p.deltas for p in parts]))
        states = concat_rows([p.states for p in parts], [len(p) for p in parts])
        out = cls(cat([p.clients for p in parts]), cat([p.num_samples for p in parts]),
                  cat([p.num_steps for p in parts]), cat([p.losses for p in parts]),
                  deltas={k: torch.cat([p.deltas[k] for p in parts]) for k in parts[0].deltas}
                  if deltas else None,
                  buffers={k: torch.cat([p.buffers[k] for p in parts]) for k in parts[0].buffers}
                  if arrays and parts[0].buffers and _same_shapes([p.buffers for p in parts])
                  else None,
                  states=states,
                  rows=None if arrays and (deltas or all(p.deltas is None for p in parts))
                  else [r for p in parts for r in p])
        return out if order is None else out.reordered(order)

    def reordered(self, order: np.ndarray) -> ClientResults:
        """The rows in the order that puts row ``i`` at ``order[i]``."""
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        t = torch.as_tensor(inv)
        return ClientResults(
            self.clients[inv], self.num_samples[inv], self.num_steps[inv], self.losses[inv],
            deltas=None if self.deltas is None else
            {k: v.index_select(0, t.to(v.device)) for k, v in self.deltas.items()},
            buffers={k: v.index_select(0, t.to(v.device)) for k, v in self.buffers.items()},
            states=take_rows(self.states, inv),
            rows=None if self._rows is None else [self._rows[i] for i in inv])

    def __len__(self) -> int:
        return len(self.clients)

    @property
    def stacked(self) -> bool:
        """Whether these are the engine's arrays (buffers stacked), not per-client results wrapped."""
        return self._rows is None

    @overload
    def __getitem__(self, i: int) -> ClientResult: ...

    @overload
    def __getitem__(self, i: slice) -> list[ClientResult]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._rows is not None:
            return self._rows[i]
        i = range(len(self))[i]
        return ClientResult(int(self.clients[i]),
                            {} if self.deltas is None else {k: v[i] for k, v in self.deltas.items()},
                            int(self.num_samples[i]), int(self.num_steps[i]),
                            float(self.losses[i]),
                            None if self.states is None else self.states[i],
                            {k: v[i] for k, v in self.buffers.items()} or None)

    def take(self, rows: slice) -> ClientResults:
        """Clients ``rows`` (a slice) as results of their own (views of the stacks)."""
        return ClientResults(
            self.clients[rows], self.num_samples[rows], self.num_steps[rows], self.losses[rows],
            None if self.deltas is None else {k: v[rows] for k, v in self.deltas.items()},
            {k: v[rows] for k, v in self.buffers.items()},
            None if self.states is None else self.states[rows],
            None if self._rows is None else self._rows[rows])

    def delta_stack(self, rows: slice = slice(None)) -> Params:
        """Δ of clients ``rows`` stacked ``(C, …)`` (a view of the engine's stack when it has one)."""
        if self.deltas is not None:
            return {k: v[rows] for k, v in self.deltas.items()}
        got = self[rows]
        if not got or not got[0].delta:
            raise ValueError("these results carry no pseudo-gradients (folded while training)")
        return {k: torch.stack([r.delta[k] for r in got]) for k in got[0].delta}

    def diagnostics(self) -> tuple[float, ClientDiagnostics]:
        """The mean training loss of clients that stepped, and each client's loss and steps."""
        stepped = self.num_steps > 0
        loss = float(self.losses[stepped].mean()) if stepped.any() else float("nan")
        return loss, ClientDiagnostics(self.clients, self.losses, self.num_steps)

    def without_deltas(self) -> ClientResults:
        """These results without their Δ (what a round keeps once it has aggregated them)."""
        return ClientResults(self.clients, self.num_samples, self.num_steps, self.losses, None,
                             self.buffers, self.states,
                             None if self._rows is None else
                             [replace(r, delta={}) for r in self._rows])


class ClientDiagnostics(Mapping):
    """A round's per-client diagnostics as arrays: ``ids``, ``loss`` and ``steps``, shape (S,).

    Read whole (``diag.steps.max()``), or as a mapping of id → ``{"loss", "steps"}`` for code
    written per client (each entry built when read).
    """

    def __init__(self, ids: np.ndarray, loss: np.ndarray, steps: np.ndarray) -> None:
        self.ids = np.asarray(ids, np.int64)
        self.loss = np.asarray(loss, np.float64)
        self.steps = np.asarray(steps, np.int64)
        if not len(self.ids) == len(self.loss) == len(self.steps):
            raise ValueError("ids, loss and steps must have one entry per client")
        self._at: dict[int, int] | None = None

    def __getitem__(self, client: int) -> dict[str, float]:
        if self._at is None:
            self._at = {u: i for i, u in enumerate(self.ids.tolist())}
        i = self._at[client]
        return {"loss": float(self.loss[i]), "steps": int(self.steps[i])}

    def __iter__(self):
        return iter(self.ids.tolist())

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"ClientDiagnostics({len(self)} clients)"


def per_row(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-client value ``(C,)`` shaped to broadcast against a stack ``like`` ``(C, …)``."""
    return values.reshape(-1, *[1] * (like.dim() - 1))


def _same_shapes(trees: Sequence[Params]) -> bool:
    first = trees[0]
    return all(t.keys() == first.keys() and all(t[k].shape[1:] == first[k].shape[1:]
                                                and t[k].dtype == first[k].dtype for k in t)
               for t in trees[1:])


class FoldedResults(ClientResults):
    """A round's results whose pseudo-gradients were folded into :attr:`fold` while training."""

    def __init__(self, results: Sequence[ClientResult], fold: DeltaFold) -> None:
        got = ClientResults.from_list(results)
        super().__init__(got.clients, got.num_samples, got.num_steps, got.losses, None,
                         got.buffers, got.states, got._rows)
        self.fold = fold
