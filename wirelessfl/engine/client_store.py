"""Per-client state kept off the compute device.

Algorithms with persistent client state (SCAFFOLD's c_i, FAdamGC's y_i and v_i, MOON's
previous local model) keep it in ``ServerState.client_states`` on the CPU, in the store's
dtype (float32, or float16 to halve it). A round moves to the compute device only the
states of its own clients, so device memory grows with the clients of a round, not with the
population; checkpoints save the store as it is, at the run's ``checkpoint_every`` interval,
and load it onto the CPU.

Two forms:

- :class:`ClientStore` (SCAFFOLD, FAdamGC: an algorithm's ``stacked_client_store``): one
  stacked host tensor per field and key, a row per client. A round's clients are gathered
  with one ``index_select`` per key (:meth:`ClientStore.gather`, :class:`StoreRows`) and
  their new states, which the rule gives as stacks (:class:`StateStack`), written with one
  ``index_copy_`` per key (:meth:`ClientStore.updated`): no operator per client. It is a
  mapping of id → state too, for code written per client.
- a mapping of id → tree (:func:`store`, :func:`load`) for the rules that go client by
  client (FedDyn, MOON, RA-Fed's memories).

Examples
--------
>>> import numpy as np
>>> import torch
>>> kept = store({"w": torch.ones(2)}, "float16")
>>> kept["w"].dtype, kept["w"].device.type
(torch.float16, 'cpu')
>>> load(kept, {"w": torch.zeros(2)})["w"].dtype
torch.float32
>>> stacked = ClientStore.from_states({4: {"w": torch.ones(2)}})
>>> stacked.gather("", np.array([4, 7]), {"w": torch.zeros(2)})["w"]  # 7 holds none: zeros
tensor([[1., 1.],
        [0., 0.]])
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wirelessfl.engine import device_guard, host_memory
from wirelessfl.engine.store_tables import (
    DiskTable,
    MemoryTable,
    StoreFileError,
    UndoJournal,
    drop_journals,
    replay_undo,
)
from wirelessfl.models.base import Params

#: The marker a disk store's folder holds (a folder without it is not the store's).
STORE_MARK = ".wirelessfl-store"

#: ``state_dtype``: float32, or half the memory in float16 (10 mantissa bits, range ±65,504)
#: or bfloat16 (float32's range, 7 mantissa bits).
STORE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: Dtypes :func:`zeros` and :func:`to_host` also take (index tensors kept beside a store).
HOST_DTYPES = {**STORE_DTYPES, "int64": torch.int64}


def store(tree: Params, dtype: str = "float32") -> Params:
    """``tree`` as the store keeps it: on the CPU, in ``dtype``."""
    if dtype not in STORE_DTYPES:
        raise ValueError(f"`state_dtype` must be one of {', '.join(STORE_DTYPES)}, got {dtype!r}")
    return device_guard.host({k: v.detach().to("cpu", STORE_DTYPES[dtype])
                              for k, v in tree.items()})


def zeros(shape: tuple[int, ...] | torch.Size, dtype: str = "float32") -> torch.Tensor:
    """A zero tensor as the store keeps it (host memory, ``dtype``)."""
    return device_guard.host(torch.zeros(tuple(shape), dtype=HOST_DTYPES[dtype]))


def to_host(t: torch.Tensor, dtype: str = "float32") -> torch.Tensor:
    """One tensor as the store keeps it (host memory, ``dtype``)."""
    return device_guard.host(t.detach().to("cpu", HOST_DTYPES[dtype]))


def load(tree: Params, like: Params) -> Params:
    """A stored ``tree`` on the device and in the dtype of ``like`` (a round's parameters)."""
    return {k: tree[k].to(like[k]) for k in like}


def nbytes(states: Mapping[int, Any]) -> int:
    """Bytes held by a mapping of client id → stored tree (a :class:`ClientStore`'s tensors)."""
    if isinstance(states, ClientStore):
        return states.nbytes
    return sum(v.numel() * v.element_size() for t in states.values() for v in t.values())


def gathered(states: Sequence[Any] | None, like: Params, field: str = "") -> Params | None:
    """Field ``field`` of the clients' states stacked, on the device and in the dtypes of ``like``.

    :func:`load` for a whole round at once: one stack per key (states read from a
    :class:`ClientStore` or a :class:`StateStack`: one gather per key). ``field`` ``""``: a
    state that is one tree. None when no client has the field; a client without it gets zeros.
    """
    if states is None:
        return None
    if isinstance(states, (StoreRows, StateStack)):
        return states.gather(field, like)
    states = [field_of(s, field) for s in states]
    if all(s is None for s in states):
        return None
    proto = next(s for s in states if s is not None)  # the store's dtype and device
    zero = {k: torch.zeros_like(proto[k]) for k in like}
    return {k: torch.stack([s[k] if s is not None else zero[k] for s in states]).to(v)
            for k, v in like.items()}


def repeated(tree: Params | None, n: int, like: Params) -> Params:
    """One tree (or zeros, for None) as ``n`` rows of a stack, on ``like``'s device and dtypes."""
    out = {}
    for k, v in like.items():
        rows = v.new_empty((n, *v.shape))
        out[k] = rows.zero_() if tree is None else rows.copy_(tree[k].detach().to(v))
    return out


# ---------------------------------------------------------------------- the stacked store
def field_of(state: Any, name: str) -> Params | None:
    """Field ``name`` of one client's state: the tree itself for ``""`` (a plain tree state)."""
    if state is None:
        return None
    return state if name == "" else getattr(state, name)


def fields_of(kind: type | None) -> tuple[str, ...]:
    """The tree fields of a state type (``("",)``: the state is one tree)."""
    return ("",) if kind is None else tuple(f.name for f in dataclasses.fields(kind))


def _build(kind: type | None, parts: dict[str, Params | None]) -> Any:
    """One client's state from its fields (None when it has none)."""
    if all(v is None for v in parts.values()):
        return None
    return parts[""] if kind is None else kind(**parts)


class StaleStore(RuntimeError):
    """A :class:`ClientStore` read after a later round updated it."""


class _Rows:
    """A store's rows: per field, one table per key with a row per client (memory or files)."""

    def __init__(self, kind: type | None, dtype: str, folder: Path | None = None,
                 resumed: bool = False) -> None:
        self.kind, self.dtype, self.fields = kind, dtype, fields_of(kind)
        self.slot = np.full(0, -1, np.int64)           # client id → row (-1: none)
        self.ids = np.zeros(0, np.int64)               # row → client id
        self.rows: dict[str, dict[str, MemoryTable | DiskTable]] = {f: {} for f in self.fields}
        self.present = {f: np.zeros(0, bool) for f in self.fields}  # (capacity,) each
        self.capacity = 0  # rows allocated (≥ the rows used, len(ids))
        self.version = 0
        self.folder, self.resumed, self.generation = folder, resumed, 0
        self.journal: UndoJournal | None = None
        if folder is not None and not resumed:
            _claim(folder)
            self.journal = UndoJournal(folder, 0, 0)

    def table(self, field: str, key: str, row_shape: tuple[int, ...]) -> MemoryTable | DiskTable:
        """A new table of ``capacity`` zero rows for ``field``'s ``key``.

        (A memory table allocated at once, zeroed: its pages are all touched; a table made
        later, when a field is first written, is as large as the store.)
        """
        dtype = STORE_DTYPES[self.dtype]
        if self.folder is None:
            return MemoryTable.zeros(self.capacity, row_shape, dtype)
        path = self.folder / _file_name(field, key)
        reuse = self.resumed and path.exists() and not path.is_symlink()
        return DiskTable(path, row_shape, dtype, self.capacity, self.current_journal,
                         create=not reuse)

    def current_journal(self) -> UndoJournal | None:
        """The undo journal of this store's generation (its tables ask at each write)."""
        return self.journal

    def held(self) -> np.ndarray:
        """Which used rows hold some field."""
        out = np.zeros(len(self.ids), bool)
        for f in self.fields:
            out |= self.present[f][:len(self.ids)]
        return out

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` (-1 for a client without one)."""
        ids = np.asarray(ids, np.int64)
        out = np.full(len(ids), -1, np.int64)
        known = ids < len(self.slot)
        out[known] = self.slot[ids[known]]
        return out

    def add(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids``, new rows made for clients without one."""
        ids = np.asarray(ids, np.int64)
        if len(ids) and ids.min() < 0:
            raise ValueError("client ids must be >= 0")
        if len(ids) and ids.max() >= len(self.slot):
            grown = np.full(max(int(ids.max()) + 1, 2 * len(self.slot)), -1, np.int64)
            grown[:len(self.slot)] = self.slot
            self.slot = grown
        new = np.unique(ids[self.slot[ids] < 0])
        if len(new):
            start = len(self.ids)
            self.slot[new] = np.arange(start, start + len(new))
            self.ids = np.concatenate([self.ids, new])
            if len(self.ids) > self.capacity:  # grow by doubling: amortised one copy a row
                self.capacity = max(len(self.ids), 2 * self.capacity)
                for f in self.fields:
                    more = self.capacity - len(self.present[f])
                    self.present[f] = np.concatenate([self.present[f], np.zeros(more, bool)])
                    for v in self.rows[f].values():
                        v.grow(self.capacity)
            for f in self.fields:  # the new rows start at zero in every table
                for v in self.rows[f].values():
                    v.clear(np.arange(start, start + len(new)))
        return self.slot[ids]

    def write(self, field: str, ids: np.ndarray, stack: Params) -> None:
        """Rows of ``ids`` of ``field`` set to ``stack`` ``(len(ids), …)`` (one copy per key)."""
        if not len(ids):
            return
        at = self.add(ids)
        table = self.rows[field]
        if table and table.keys() != stack.keys():
            raise ValueError(f"a client state's keys changed: {sorted(table)} against "
                             f"{sorted(stack)}")
        for k, v in stack.items():
            if k not in table:
                table[k] = self.table(field, k, tuple(v.shape[1:]))
            table[k].write(at, to_host(v, self.dtype))
        self.present[field][at] = True


class ClientStore(Mapping):
    """Every client's persistent state as one stacked host tensor per field and key.

    A mapping of client id → state (a tree, or ``kind`` of trees, as the per-client contract
    has it: each read builds the client's own copy), and for a round's clients at once
    :meth:`gather` (one ``index_select`` per key onto the compute device) and
    :meth:`updated` (one ``index_copy_`` per key), so a round costs no operator per client.
    A field a client has not set reads as zeros in :meth:`gather`, None in its own state.

    A store is updated in place: :meth:`updated` returns the next round's store, and the one
    it was called on is stale (reading it raises :class:`StaleStore`; :meth:`copy` first to
    keep one). Checkpoints hold :meth:`to_plain`; an older checkpoint's mapping of id →
    state loads through :meth:`from_states`.

    Parameters
    ----------
    kind : type or None
        The state's type (a dataclass of trees, e.g. FAdamGC's ``AdamClientState``); None: a
        state is one tree (SCAFFOLD's c_i).
    dtype : str
        ``float32`` or ``float16`` (:data:`STORE_DTYPES`).
    """

    PLAIN_MARK = "__client_store__"

    def __init__(self, kind: type | None = None, dtype: str = "float32",
                 folder: str | Path | None = None) -> None:
        if dtype not in STORE_DTYPES:
            raise ValueError(f"`state_dtype` must be one of {', '.join(STORE_DTYPES)}, got {dtype!r}")
        self._data = _Rows(kind, dtype, None if folder is None else Path(folder))
        self._version = 0

    @property
    def backend(self) -> str:
        """``memory`` or ``disk`` (rows in files of :attr:`folder`)."""
        return "memory" if self._data.folder is None else "disk"

    @property
    def folder(self) -> Path | None:
        """The disk store's folder (None in memory)."""
        return self._data.folder

    @property
    def kind(self) -> type | None:
        """The state's type (None: one tree)."""
        return self._data.kind

    @property
    def dtype(self) -> str:
        """The dtype the store keeps (``float32``/``float16``)."""
        return self._data.dtype

    def _live(self) -> _Rows:
        if self._version != self._data.version:
            raise StaleStore("this client store was updated by a later round: a round's state "
                             "can be applied once (copy() the store to keep it)")
        return self._data

    def _next(self) -> ClientStore:
        data = self._data
        data.version += 1
        out = object.__new__(ClientStore)
        out._data, out._version = data, data.version
        return out

    # -- the per-client view (Mapping)
    def __getitem__(self, client: int) -> Any:
        data = self._live()
        row = int(data.slots(np.array([client]))[0]) if isinstance(client, (int, np.integer)) \
            and client >= 0 else -1
        if row < 0 or not any(data.present[f][row] for f in data.fields):
            raise KeyError(client)
        one = np.array([row])
        return _build(data.kind, {f: {k: v.read(one)[0] for k, v in data.rows[f].items()}
                                  if data.present[f][row] else None for f in data.fields})

    def __iter__(self):
        data = self._live()
        return iter(data.ids[data.held()].tolist())

    def __len__(self) -> int:
        data = self._live()
        return int(data.held().sum())

    def __repr__(self) -> str:
        return f"ClientStore({len(self)} clients, fields {self._data.fields}, {self.dtype})"

    # -- a round's clients at once
    def rows(self, clients: np.ndarray) -> StoreRows:
        """The states of ``clients`` (in order) as a batch's sequence."""
        self._live()
        return StoreRows(self, np.asarray(clients, np.int64))

    def holds(self, clients: np.ndarray, field: str | None = None) -> np.ndarray:
        """Which of ``clients`` have a state here (``field``: that field of it)."""
        data = self._live()
        at = data.slots(clients)
        out = np.zeros(len(at), bool)
        known = at >= 0
        for f in data.fields if field is None else (field,):
            out[known] |= data.present[f][at[known]]
        return out

    def gather(self, field: str, clients: np.ndarray, like: Params) -> Params | None:
        """Field ``field`` of ``clients`` stacked ``(C, …)`` on ``like``'s device and dtypes.

        A client without it reads zeros; None when no client has it.
        """
        data = self._live()
        at = data.slots(clients)
        held = at >= 0
        held[held] = data.present[field][at[held]]
        if not held.any():
            return None
        index = np.where(held, at, 0)
        gone = None if held.all() else device_guard.host(torch.from_numpy(~held))
        out = {}
        for k, v in like.items():
            rows = data.rows[field][k].read(index)
            if gone is not None:
                rows.masked_fill_(gone.view(-1, *[1] * (rows.dim() - 1)), 0)
            out[k] = rows.to(v)
        return out

    def updated(self, clients: np.ndarray, states: Sequence[Any] | None) -> ClientStore:
        """The store with ``clients``' new states written (this store becomes stale).

        ``states`` is a :class:`StateStack` (the engine's stacks: one copy per field and key)
        or a sequence of per-client states (None: unchanged), written client by client.
        """
        self.write(clients, states)
        return self._next()

    def write(self, clients: np.ndarray, states: Sequence[Any] | None) -> None:
        """``clients``' new states written in place, as :meth:`updated` writes them.

        The store stays this version: for a round that writes its clients chunk by chunk as
        they finish (:class:`~wirelessfl.engine.fold.StateFold`) and ends with
        ``updated(clients, None)``. A client written twice keeps the later state.
        """
        data = self._live()
        clients = np.asarray(clients, np.int64)
        if isinstance(states, StateStack):
            for f in data.fields:
                rows = states.written.get(f)
                if rows is None or not rows.any():
                    continue
                if f not in states.stacks:  # written without a stack: the field cleared
                    at = data.slots(clients[rows])
                    data.present[f][at[at >= 0]] = False
                    continue
                pick = torch.from_numpy(np.flatnonzero(rows))
                data.write(f, clients[rows], {k: v.index_select(0, pick.to(v.device))
                                              for k, v in states.stacks[f].items()})
        elif states is not None:
            for u, s in zip(clients.tolist(), states):
                if s is None:
                    continue
                for f in data.fields:
                    tree = field_of(s, f)
                    if tree is not None:
                        data.write(f, np.array([u]), {k: v.unsqueeze(0) for k, v in tree.items()})

    def emptied(self) -> ClientStore:
        """The same store holding no client's state (a session start resets every c_i).

        Its tables are kept and their rows given to the next clients in place. A disk
        store's files thus stay where the last checkpoint names them, and a row overwritten
        before the next checkpoint is journalled as any other (a new store in the same
        folder would remove the files, and a resume from before the start would find them
        truncated).
        """
        data = self._live()
        data.slot = np.full(0, -1, np.int64)
        data.ids = np.zeros(0, np.int64)
        for f in data.fields:
            data.present[f][:] = False
        return self._next()

    @classmethod
    def from_states(cls, states: Mapping[int, Any], kind: type | None = None,
                    dtype: str = "float32") -> ClientStore:
        """A store holding a mapping of id → state (a checkpoint of the per-client format)."""
        if isinstance(states, ClientStore):
            return states
        ids = np.array(list(states), np.int64)
        return cls(kind, dtype).updated(ids, [states[u] for u in ids.tolist()])

    def copy(self) -> ClientStore:
        """An independent store with the same states (in memory, whatever this one's backend)."""
        data = self._live()
        out = ClientStore(data.kind, data.dtype)
        new = out._data
        new.slot, new.ids, new.capacity = data.slot.copy(), data.ids.copy(), data.capacity
        new.present = {f: p.copy() for f, p in data.present.items()}
        new.rows = {f: {k: v.clone() if isinstance(v, MemoryTable) else
                        MemoryTable(v.head(data.capacity)) for k, v in t.items()}
                    for f, t in data.rows.items()}
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the rows in use, the clients stored.

        Rows allocated ahead are not counted, so the figure does not depend on how the store
        grew (across a resume, say).
        """
        data = self._live()
        used = len(data.ids)
        return sum(used * v.row_bytes for t in data.rows.values() for v in t.values())

    def to_plain(self) -> dict[str, Any]:
        """The store as a checkpoint holds it: its ids and, per field, which hold it and the rows.

        A disk store's rows stay in its files: the checkpoint names them (key, row shape)
        with the store's folder and a new generation, whose undo journal starts here
        (:class:`~wirelessfl.engine.store_tables.UndoJournal`); :meth:`committed` once the
        checkpoint is written.
        """
        data = self._live()
        host, n = device_guard.host, len(data.ids)
        plain = {self.PLAIN_MARK: 1, "dtype": data.dtype,
                 "ids": host(torch.from_numpy(data.ids.copy()))}
        if data.folder is None:
            return {**plain, "fields": {
                f: {"present": host(torch.from_numpy(data.present[f][:n].copy())),
                    "rows": {k: v.head(n) for k, v in data.rows[f].items()}}
                for f in data.fields}}
        data.generation += 1
        if data.journal is not None:
            data.journal.close()
        data.journal = UndoJournal(data.folder, data.generation, n)
        return {**plain, "backend": "disk", "dir": data.folder.name, "generation": data.generation,
                "fields": {f: {"present": host(torch.from_numpy(data.present[f][:n].copy())),
                               "keys": {k: list(v.row_shape) for k, v in data.rows[f].items()}}
                           for f in data.fields}}

    def committed(self) -> None:
        """The checkpoint of the last :meth:`to_plain` is written: older journals go."""
        data = self._data
        if data.folder is not None:
            drop_journals(data.folder, data.generation)

    def close(self) -> None:
        """A disk store's files closed (the store is not read after)."""
        data = self._data
        for t in data.rows.values():
            for v in t.values():
                if isinstance(v, DiskTable):
                    v.close()
        if data.journal is not None:
            data.journal.close()

    @classmethod
    def is_plain(cls, plain: Any) -> bool:
        """Whether a checkpoint's client states are a store's :meth:`to_plain`."""
        return isinstance(plain, Mapping) and cls.PLAIN_MARK in plain

    @classmethod
    def from_plain(cls, plain: Mapping[str, Any], kind: type | None = None,
                   run_folder: str | Path | None = None) -> ClientStore:
        """The store of a checkpoint's :meth:`to_plain` (ValueError when it does not fit).

        A disk store's checkpoint opens its files in ``run_folder`` and puts back the rows
        written after the checkpoint (its undo journals), so the rows are the checkpoint's.
        """
        if plain.get("backend") == "disk":
            return cls._from_disk(plain, kind, run_folder)
        try:
            out = cls(kind, str(plain["dtype"]))
            data = out._data
            ids = np.asarray(plain["ids"], np.int64).reshape(-1)
            if set(plain["fields"]) != set(data.fields):
                raise ValueError(f"fields {sorted(plain['fields'])}, not {list(data.fields)}")
            if len(ids) and (ids.min() < 0 or len(np.unique(ids)) != len(ids)):
                raise ValueError("client ids repeat or are negative")
            data.slot = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, np.int64)
            data.slot[ids] = np.arange(len(ids))  # row i is client ids[i]
            data.ids, data.capacity = ids.copy(), len(ids)
            for f, part in plain["fields"].items():
                present = np.asarray(part["present"], bool).reshape(-1)
                rows = {k: device_guard.host(torch.as_tensor(v).to("cpu", STORE_DTYPES[data.dtype]))
                        for k, v in part["rows"].items()}
                if len(present) != len(ids) or any(v.shape[0] != len(ids) for v in rows.values()):
                    raise ValueError("rows and ids of different lengths")
                data.present[f], data.rows[f] = present, {k: MemoryTable(v) for k, v in rows.items()}
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"a damaged client store ({type(exc).__name__}: {exc})") from None
        return out

    @classmethod
    def _from_disk(cls, plain: Mapping[str, Any], kind: type | None,
                   run_folder: str | Path | None) -> ClientStore:
        name = str(plain.get("dir", ""))
        if run_folder is None or not name or "/" in name or name in (".", ".."):
            raise ValueError("a disk client store's checkpoint needs its run folder")
        folder = Path(run_folder) / name
        if folder.is_symlink() or not (folder / STORE_MARK).is_file():
            raise StoreFileError(f"client store folder {folder} is "
                                 f"{'a link' if folder.is_symlink() else 'missing or not a store'}"
                                 "; the run folder is damaged: start again with another --out")
        try:
            out = object.__new__(cls)
            out._version = 0
            data = out._data = _Rows(kind, str(plain["dtype"]), folder, resumed=True)
            ids = np.asarray(plain["ids"], np.int64).reshape(-1)
            if set(plain["fields"]) != set(data.fields):
                raise ValueError(f"fields {sorted(plain['fields'])}, not {list(data.fields)}")
            n = len(ids)
            data.slot = np.full(int(ids.max()) + 1 if n else 0, -1, np.int64)
            data.slot[ids] = np.arange(n)
            data.ids, data.capacity = ids.copy(), n
            data.generation = int(plain["generation"])
            tables = {}
            for f, part in plain["fields"].items():
                present = np.asarray(part["present"], bool).reshape(-1)
                if len(present) != n:
                    raise ValueError("rows and ids of different lengths")
                data.present[f] = present
                for k, shape in part["keys"].items():
                    path = folder / _file_name(f, k)
                    t = DiskTable(path, tuple(shape), STORE_DTYPES[data.dtype], n,
                                  data.current_journal, create=False, rows_needed=n)
                    data.rows[f][k] = tables[path.name] = t
            replay_undo(folder, data.generation, tables)
            data.capacity = max([n, *(t.capacity for t in tables.values())])
            for f in data.fields:
                data.present[f] = np.concatenate(
                    [data.present[f], np.zeros(data.capacity - n, bool)])
            for t in tables.values():
                t.grow(data.capacity)
            data.journal = UndoJournal(folder, data.generation, n)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"a damaged client store ({type(exc).__name__}: {exc})") from None
        return out


def backend_for(setting: str, projected: int, available: int | None = None) -> str:
    """``memory`` or ``disk`` for ``state_store`` ``setting`` and a store of ``projected`` bytes.

    ``auto``: disk when the store would hold more than a quarter of ``available`` (None: the
    machine's available memory, ``MemAvailable``).
    """
    if setting not in ("auto", "memory", "disk"):
        raise ValueError(f"state_store must be auto, memory or disk, got {setting!r}")
    if setting != "auto":
        return setting
    if available is None:
        available = host_memory.available_bytes()
    return "disk" if projected > available // 4 else "memory"


def _file_name(field: str, key: str) -> str:
    """A table's file: ``<field>.<key>.bin`` (``state`` for a one-tree state), safe characters only."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{field or 'state'}.{key}")
    return f"{safe}.bin"


def _claim(folder: Path) -> None:
    """Make ``folder`` a new store's (created, or ours from a run that never checkpointed it).

    A link, or a folder without the store's mark, is refused in one line; in a folder of
    ours the earlier rows and journals are removed (no checkpoint names them).
    """
    if folder.is_symlink():
        raise StoreFileError(f"client store folder {folder} is a link; the run folder is "
                             "damaged: start the run again with another --out")
    try:
        os.mkdir(folder)
    except FileExistsError:
        if not (folder / STORE_MARK).is_file() or (folder / STORE_MARK).is_symlink():
            raise StoreFileError(f"{folder} is already there and is not a client store's: "
                                 "move it away or use another --out") from None
        for p in folder.iterdir():
            if p.name != STORE_MARK and (p.suffix in (".bin", ".log")) and not p.is_symlink():
                p.unlink()
    fd = os.open(folder / STORE_MARK, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    os.close(fd)


class StoreRows(Sequence):
    """A batch's clients' states read from a :class:`ClientStore` (each client's on access)."""

    def __init__(self, store: ClientStore, clients: np.ndarray) -> None:
        self.store, self.clients = store, clients

    def __len__(self) -> int:
        return len(self.clients)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        return self.store.get(int(self.clients[i]))

    def take(self, index: np.ndarray) -> StoreRows:
        """Rows ``index`` (an index array), reading the same store."""
        return StoreRows(self.store, self.clients[np.asarray(index, np.int64)])

    def gather(self, field: str, like: Params) -> Params | None:
        """:meth:`ClientStore.gather` of these clients."""
        return self.store.gather(field, self.clients, like)

    def holds(self, field: str | None = None) -> np.ndarray:
        """Which of these clients have a state (``field``: that field of it)."""
        return self.store.holds(self.clients, field)


class StateStack(Sequence):
    """A batch's new client states as stacks, from a rule's stacked hooks.

    Row i of field f is ``stacks[f]`` row i where ``written[f][i]`` (a field written without
    a stack is cleared: None); elsewhere the client's field is what it was (``old``, the
    batch's states). A sequence of per-client states for
    code written per client (each built on access); :meth:`ClientStore.updated` writes the
    stacks as they are.
    """

    def __init__(self, stacks: dict[str, Params], written: dict[str, np.ndarray],
                 old: Sequence[Any] | None, kind: type | None = None,
                 dtype: str = "float32") -> None:
        self.stacks, self.written, self.old = stacks, written, old
        self.kind, self.dtype = kind, dtype
        self._n = len(next(iter(written.values())))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        i = range(self._n)[i]
        before = None if self.old is None else self.old[i]
        if not any(w[i] for w in self.written.values()):
            return before  # kept as it was
        parts = {}
        for f in fields_of(self.kind):
            if f in self.written and self.written[f][i]:
                parts[f] = ({k: to_host(v[i], self.dtype).clone() for k, v in self.stacks[f].items()}
                            if f in self.stacks else None)  # written without a stack: cleared
            else:
                parts[f] = field_of(before, f)
        return _build(self.kind, parts)

    def take(self, index: np.ndarray) -> StateStack:
        """Rows ``index`` (an index array) as a stack of their own."""
        index = np.asarray(index, np.int64)
        t = torch.from_numpy(index)
        return StateStack({f: {k: v.index_select(0, t.to(v.device)) for k, v in s.items()}
                           for f, s in self.stacks.items()},
                          {f: w[index] for f, w in self.written.items()},
                          None if self.old is None else take_rows(self.old, index),
                          self.kind, self.dtype)

    def holds(self, field: str | None = None) -> np.ndarray:
        """Which rows have a state (``field``: that field of it), new or kept."""
        out = np.zeros(self._n, bool)
        for f in fields_of(self.kind) if field is None else (field,):
            had = holds(self.old, self._n, f)
            w = self.written.get(f, np.zeros(self._n, bool))
            out |= (had & ~w) | (w if f in self.stacks else np.zeros(self._n, bool))
        return out

    def gather(self, field: str, like: Params) -> Params | None:
        """Field ``field`` of every row stacked: the new where written, else the old (zeros)."""
        written = self.written.get(field, np.zeros(self._n, bool))
        before = gathered(self.old, like, field) if self.old is not None else None
        if not written.any():
            return before
        if field not in self.stacks and before is None:  # cleared, and nothing before
            return None
        if not self.holds(field).any():
            return None
        mask = torch.from_numpy(written)
        out = {}
        for k, v in like.items():
            new = (self.stacks[field][k].to(v) if field in self.stacks
                   else v.new_zeros((self._n, *v.shape)))
            m = mask.to(new.device).view(-1, *[1] * (new.dim() - 1))
            out[k] = torch.where(m, new, before[k] if before is not None else 0.0)
        return out


def holds(states: Sequence[Any] | None, n: int, field: str | None = None) -> np.ndarray:
    """Which of ``n`` rows of a batch's or a result's states hold a state (``field``: that field)."""
    if states is None:
        return np.zeros(n, bool)
    if isinstance(states, (StoreRows, StateStack)):
        return states.holds(field)
    return np.array([s is not None if field is None else field_of(s, field) is not None
                     for s in states], bool)


def gather_ids(states: Mapping[int, Any], clients: np.ndarray, like: Params,
               field: str = "") -> Params | None:
    """:func:`gathered` of ``clients``' states kept in ``states`` (a store, or id → state)."""
    if isinstance(states, ClientStore):
        return states.gather(field, clients, like)
    return gathered([states.get(u) for u in np.asarray(clients).tolist()], like, field)


def take_rows(states: Sequence[Any] | None, index: np.ndarray) -> Sequence[Any] | None:
    """Rows ``index`` of a batch's or a result's states (a view where the states are stacked)."""
    if states is None:
        return None
    if isinstance(states, (StoreRows, StateStack)):
        return states.take(index)
    return [states[i] for i in np.asarray(index).tolist()]


def concat_rows(parts: Sequence[Sequence[Any] | None], sizes: Sequence[int]) -> Sequence[Any] | None:
    """Batches' or results' states one after another.

    Stacked where they all read one store or are stacks of one shape; otherwise one per-client
    list.
    """
    if all(p is None for p in parts):
        return None
    if all(isinstance(p, StoreRows) for p in parts) and len({id(p.store) for p in parts}) == 1:
        return StoreRows(parts[0].store, np.concatenate([p.clients for p in parts]))
    if all(isinstance(p, StateStack) for p in parts) and _same_stacks(parts):
        first = parts[0]
        olds = [p.old for p in parts]
        return StateStack({f: {k: torch.cat([p.stacks[f][k] for p in parts]) for k in s}
                           for f, s in first.stacks.items()},
                          {f: np.concatenate([p.written[f] for p in parts]) for f in first.written},
                          concat_rows(olds, sizes) if any(o is not None for o in olds) else None,
                          first.kind, first.dtype)
    return [s for p, n in zip(parts, sizes) for s in (p if p is not None else [None] * n)]


def _same_stacks(parts: Sequence[StateStack]) -> bool:
    first = parts[0]
    return all(p.kind is first.kind and p.dtype == first.dtype and p.written.keys() == first.written.keys()
               and p.stacks.keys() == first.stacks.keys()
               and all(p.stacks[f].keys() == s.keys() and all(
                   p.stacks[f][k].shape[1:] == v.shape[1:] and p.stacks[f][k].device == v.device
                   for k, v in s.items()) for f, s in first.stacks.items())
               for p in parts[1:])
