"""Where a :class:`~wirelessfl.engine.client_store.ClientStore` keeps one key's rows: memory or a file.

A table holds one state key's rows, one per client, and is read and written a round's rows
at a time (one vectorised gather and one scatter, no operator per client).

- :class:`MemoryTable`: a host tensor, grown by doubling (one copy a row, amortised).
- :class:`DiskTable`: a file in the run folder, mapped into memory (``mmap``, shared), grown
  by ``ftruncate`` so rows never written take no disk (a sparse file). Its pages are handed
  back to the kernel after every read and write (``MADV_DONTNEED``), so a process holding a
  store of 10⁵ clients keeps in its resident memory only the rows of the round at hand; the
  rows stay in the page cache, which the kernel reclaims under pressure. Why ``mmap`` and
  not ``numpy.memmap``, ``torch.from_file`` or a format (safetensors, zarr): the gather and
  the scatter are numpy fancy indexing on the mapping (vectorised), the file is opened
  without following a link (``O_NOFOLLOW``; ``numpy.memmap`` and ``torch.from_file`` open
  by path), ``madvise`` needs the ``mmap`` object, and neither safetensors (written whole)
  nor zarr (chunked, compressed, an extra dependency) writes scattered rows in place.

Exact resume (:class:`UndoJournal`): before a row that a checkpoint holds is first
overwritten after it, its bytes are appended to the journal of that checkpoint's
generation, as one record with a CRC (a record torn by a kill is ignored: its rows were not
yet written). A resume puts the journals' rows back, newest generation first, which gives
the rows exactly as the checkpoint had them; a checkpoint that lands removes the older
journals. A kill −9 leaves the mapping's written pages in the page cache, so the journal
needs no ``fsync`` for that; a power loss is not covered (stated).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from wirelessfl.engine import device_guard

#: The raw integer type a row's bytes are mapped as, by element size (bfloat16 has no numpy type).
_RAW = {2: np.int16, 4: np.int32, 8: np.int64}
_RAW_TORCH = {2: torch.int16, 4: torch.int32, 8: torch.int64}
_HEAD = struct.Struct("<4sHQI")  # magic, name length, rows, CRC of the rest
_MAGIC = b"WFLU"


def _index(rows: np.ndarray) -> torch.Tensor:
    """Row numbers as a host index tensor."""
    return device_guard.host(torch.from_numpy(np.asarray(rows, np.int64)))


class StoreFileError(ValueError):
    """A store file that is a link, foreign, or damaged (one line, saying which)."""


class MemoryTable:
    """One key's rows as a host tensor ``(capacity, *row_shape)``."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.t = device_guard.host(tensor)

    @classmethod
    def zeros(cls, capacity: int, row_shape: tuple[int, ...], dtype: torch.dtype) -> MemoryTable:
        """A table of ``capacity`` zero rows."""
        return cls(torch.zeros((capacity, *row_shape), dtype=dtype))

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The shape of one row."""
        return tuple(self.t.shape[1:])

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(np.prod(self.row_shape, dtype=np.int64)) * self.t.element_size()

    def grow(self, capacity: int) -> None:
        """``capacity`` rows; the new ones are not set (:meth:`clear` them when first used).

        Allocated empty, so the kernel maps their pages only when they are written: the
        store's resident memory follows the rows used, not the rows allocated.
        """
        n = self.t.shape[0]
        if capacity > n:
            grown = torch.empty((capacity, *self.row_shape), dtype=self.t.dtype)
            grown[:n].copy_(self.t)
            self.t = device_guard.host(grown)

    def clear(self, rows: np.ndarray) -> None:
        """Rows ``rows`` set to zero (rows given to new clients)."""
        self.t.index_fill_(0, _index(rows), 0)

    def read(self, rows: np.ndarray) -> torch.Tensor:
        """Rows ``rows`` stacked (a copy)."""
        return self.t.index_select(0, _index(rows))

    def write(self, rows: np.ndarray, values: torch.Tensor) -> None:
        """Rows ``rows`` set to ``values`` (in the table's dtype)."""
        self.t.index_copy_(0, _index(rows), values)

    def head(self, n: int) -> torch.Tensor:
        """The first ``n`` rows (a copy)."""
        return self.t[:n].clone()

    def clone(self) -> MemoryTable:
        """An independent table with the same rows."""
        return MemoryTable(self.t.clone())


class DiskTable:
    """One key's rows in a file ``path``, mapped shared, ``(capacity, *row_shape)``.

    Created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a file already there, or a link, is
    refused in one line: nothing foreign is overwritten); opened for a resume with
    ``O_NOFOLLOW`` and checked to hold at least the rows the checkpoint names.
    """

    def __init__(self, path: Path, row_shape: tuple[int, ...], dtype: torch.dtype,
                 capacity: int, journal: Callable[[], UndoJournal | None] = lambda: None,
                 create: bool = True, rows_needed: int = 0) -> None:
        self.path, self.dtype = Path(path), dtype
        #: The undo journal of the store's current generation, asked at each write (the
        #: store owns it and starts a new one at each checkpoint; None: nothing to journal).
        self.journal = journal
        self._row_shape = tuple(int(s) for s in row_shape)
        self.size = torch.empty((), dtype=dtype).element_size()
        self.raw = _RAW[self.size]
        flags = os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            if create:
                self.fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            else:
                self.fd = os.open(self.path, flags)
        except FileExistsError:
            raise StoreFileError(f"{self.path} is already there: a client store writes only "
                                 "files it creates; move it away or use another --out") from None
        except OSError as exc:
            what = "is a link" if self.path.is_symlink() else f"cannot be opened ({exc.strerror})"
            raise StoreFileError(f"client store file {self.path} {what}; the run folder is "
                                 "damaged: start the run again with another --out") from None
        have = os.fstat(self.fd).st_size // max(1, self.row_bytes)
        if not create and have < rows_needed:
            os.close(self.fd)
            raise StoreFileError(f"client store file {self.path.name} holds {have} rows, the "
                                 f"checkpoint {rows_needed}: it is truncated; the run folder "
                                 "is damaged: start the run again with another --out")
        self.capacity, self._mm, self.arr = 0, None, None
        self._map(max(capacity, have))

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The shape of one row."""
        return self._row_shape

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(np.prod(self._row_shape, dtype=np.int64)) * self.size

    def _map(self, capacity: int) -> None:
        self.arr = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if os.fstat(self.fd).st_size < capacity * self.row_bytes:
            os.ftruncate(self.fd, capacity * self.row_bytes)  # sparse: no disk until written
        self.capacity = capacity
        if capacity and self.row_bytes:
            self._mm = mmap.mmap(self.fd, capacity * self.row_bytes, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
            self.arr = np.frombuffer(self._mm, dtype=self.raw).reshape(
                capacity, self.row_bytes // self.size)

    def _drop(self) -> None:
        """The mapping's pages out of this process's resident memory (kept in the page cache)."""
        if self._mm is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._mm.madvise(mmap.MADV_DONTNEED)

    def grow(self, capacity: int) -> None:
        """``capacity`` rows (the new ones read as zeros and take no disk)."""
        if capacity > self.capacity:
            self._map(capacity)

    def clear(self, rows: np.ndarray) -> None:
        """Nothing: a row read before it is written is masked out by the store's flags."""

    def read(self, rows: np.ndarray) -> torch.Tensor:
        """Rows ``rows`` stacked (a copy in memory)."""
        rows = np.asarray(rows, np.int64)
        if self.arr is None:
            return torch.zeros((len(rows), *self._row_shape), dtype=self.dtype)
        out = torch.from_numpy(self.arr[rows]).view(self.dtype).reshape(len(rows), *self._row_shape)
        self._drop()
        return device_guard.host(out)

    def write(self, rows: np.ndarray, values: torch.Tensor) -> None:
        """Rows ``rows`` set to ``values``; a row a checkpoint holds is journalled first."""
        rows = np.asarray(rows, np.int64)
        journal = self.journal()
        if journal is not None:
            journal.before(self, rows)
        flat = values.detach().to("cpu", self.dtype).contiguous().view(_RAW_TORCH[self.size])
        self.arr[rows] = flat.reshape(len(rows), -1).numpy()
        self._drop()

    def head(self, n: int) -> torch.Tensor:
        """The first ``n`` rows (a copy)."""
        return self.read(np.arange(n))

    def close(self) -> None:
        """Unmap and close the file."""
        self.arr = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class UndoJournal:
    """The pre-images of the rows a checkpoint holds, written before they are overwritten.

    One file ``undo-<generation>.log`` per checkpoint generation; records of
    ``(name, rows, bytes)`` with a CRC (:mod:`~wirelessfl.engine.store_tables`). A row is
    journalled once per generation, and only if it is below ``limit`` (the rows the
    checkpoint holds).
    """

    def __init__(self, folder: Path, generation: int, limit: int) -> None:
        self.folder, self.generation, self.limit = Path(folder), int(generation), int(limit)
        self.path = self.folder / f"undo-{self.generation}.log"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            self.fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            raise StoreFileError(f"client store journal {self.path} cannot be opened "
                                 f"({'a link' if self.path.is_symlink() else exc.strerror}); "
                                 "the run folder is damaged") from None
        self.saved: dict[str, np.ndarray] = {}

    def before(self, table: DiskTable, rows: np.ndarray) -> None:
        """Journal the rows of ``table`` among ``rows`` not yet journalled this generation."""
        name = table.path.name
        saved = self.saved.setdefault(name, np.zeros(self.limit, bool))
        need = np.unique(rows[rows < self.limit])
        need = need[~saved[need]]
        if not len(need) or table.arr is None:
            return
        payload = need.astype("<i8").tobytes() + np.ascontiguousarray(table.arr[need]).tobytes()
        label = name.encode()
        body = label + payload
        record = _HEAD.pack(_MAGIC, len(label), len(need), zlib.crc32(body)) + body
        view = memoryview(record)
        while view:  # the whole record before any row is overwritten
            view = view[os.write(self.fd, view):]
        saved[need] = True

    def close(self) -> None:
        """Close the journal's file."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def replay_undo(folder: Path, generation: int, tables: dict[str, DiskTable]) -> int:
    """Put back the rows journalled since checkpoint ``generation`` (newest journal first).

    The records of every journal of a generation ≥ ``generation`` are applied, the journals
    of later generations first (each row's oldest image is applied last); a torn last record
    is ignored. Returns the rows put back. The journals are removed afterwards.
    """
    folder = Path(folder)
    logs = sorted(((int(p.name[5:-4]), p) for p in folder.glob("undo-*.log")
                   if p.name[5:-4].isdigit()), reverse=True)
    restored = 0
    for gen, path in logs:
        if gen < generation:
            continue
        if path.is_symlink():
            raise StoreFileError(f"client store journal {path} is a link; the run folder is damaged")
        data = path.read_bytes()
        records = []
        at = 0
        while at + _HEAD.size <= len(data):
            magic, nlen, count, crc = _HEAD.unpack_from(data, at)
            start = at + _HEAD.size
            name = data[start:start + nlen].decode(errors="replace")
            table = tables.get(name)
            size = nlen + count * 8 + (count * table.row_bytes if table else 0)
            body = data[start:start + size]
            if magic != _MAGIC or table is None or len(body) < size or zlib.crc32(body) != crc:
                break  # torn by a kill (or not ours): its rows were never overwritten
            rows = np.frombuffer(body, "<i8", count, nlen)
            raw = np.frombuffer(body, table.raw, offset=nlen + count * 8).reshape(count, -1)
            records.append((table, rows, raw))
            at = start + size
        for table, rows, raw in reversed(records):
            table.grow(int(rows.max()) + 1)
            table.arr[rows] = raw
            table._drop()
            restored += len(rows)
    for _, path in logs:
        path.unlink()
    return restored


def drop_journals(folder: Path, below: int) -> None:
    """Remove the journals of generations below ``below`` (their checkpoint was replaced)."""
    for p in Path(folder).glob("undo-*.log"):
        stem = p.name[5:-4]
        if stem.isdigit() and int(stem) < below and not p.is_symlink():
            p.unlink()
