"""Simulated time: completion events and per-request latency models.

Asynchronous algorithms (FedAST, ``docs/papers/fedast.md`` §4.3) and latency accounting share one
clock. A request sent at time t to client i gets its duration D drawn when it is sent and
completes at ``max(t, F_i) + D`` (FIFO service at the client); the :class:`EventQueue`
pops completions in time order, ties broken by insertion order so runs are reproducible.

Request latencies come from a :class:`~wirelessfl.net.delays.LatencyModel` of the network
wing (the shifted exponential of FedAST §4.2 by default, or a wireless one).

:class:`ClientPool` holds each client's speed class, FIFO queue end ``F_i`` and outstanding
requests, and enforces the availability cap (§4.1 [code]: at most A distinct busy clients).
:class:`VersionStore` keeps the model versions outstanding requests refer to, with reference
counts, so memory is bounded by the outstanding requests.

Examples
--------
>>> q = EventQueue()
>>> q.push(2.0, "b"); q.push(1.0, "a"); q.push(2.0, "c")
>>> [q.pop() for _ in range(3)]
[(1.0, 'a'), (2.0, 'b'), (2.0, 'c')]
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from wirelessfl.algorithms.fedast.snapshot import snapshot_type
from wirelessfl.net.delays import LatencyModel


@snapshot_type
class EventQueue:
    """Priority queue of (time, payload), FIFO among equal times."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._pushed = 0  # insertion order breaks ties (a plain int, so queues pickle)

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time: float, payload: Any) -> None:
        """Schedule ``payload`` at simulated ``time``."""
        if not np.isfinite(time):
            raise ValueError(f"event time must be finite, got {time}")
        heapq.heappush(self._heap, (float(time), self._pushed, payload))
        self._pushed += 1

    def pop(self) -> tuple[float, Any]:
        """Earliest event."""
        time, _, payload = heapq.heappop(self._heap)
        return time, payload


@snapshot_type
@dataclass
class Request:
    """One training request: ``task``'s model ``version`` (its round) sent to ``client`` at ``sent``.

    ``done`` is its completion time (FIFO at the client); ``id`` is unique in the run.
    """

    id: int
    task: int
    client: int
    version: int
    sent: float
    done: float


@snapshot_type
class ClientPool:
    """Clients' FIFO queues and the availability cap (``docs/papers/fedast.md`` §4.1, §4.3).

    A request sent at t to client i completes at ``max(t, F_i) + D`` and sets ``F_i`` to
    that time. A client is *busy* while it has outstanding (not cancelled, not completed)
    requests. With ``cap`` set, a request to an idle client is refused when ``cap`` clients
    are already busy (§4.1 [code]); a busy client always accepts (it queues).

    Cancelling a request removes it from the busy count; by default ``F_i`` is not rolled
    back (the client is still computing, §7 item 18 [code]); ``free_on_cancel=True`` frees
    the client's queue end instead (to the latest remaining request's completion).

    Parameters
    ----------
    latency : LatencyModel
        Draws each request's duration D when it is sent.
    num_clients : int
        N.
    cap : int or None
        Maximum number of distinct busy clients (None: no cap).
    free_on_cancel : bool
        Roll ``F_i`` back when a request is cancelled.
    """

    _snapshot_rebuilt = ("latency",)  # rebuilt from the config on resume

    def __init__(self, latency: LatencyModel, num_clients: int, cap: int | None = None,
                 free_on_cancel: bool = False) -> None:
        if cap is not None and cap < 1:
            raise ValueError(f"`cap` must be >= 1 or None, got {cap}")
        self.latency, self.num_clients, self.cap = latency, int(num_clients), cap
        self.free_on_cancel = free_on_cancel
        self.queue_end = np.zeros(self.num_clients)
        self.outstanding: list[dict[int, Request]] = [{} for _ in range(self.num_clients)]
        self._busy = 0
        self._next_id = 0

    @property
    def busy(self) -> int:
        """Distinct clients with at least one outstanding request."""
        return self._busy

    def accepts(self, client: int) -> bool:
        """Whether ``client`` may take a request now (busy, or under the cap)."""
        return bool(self.outstanding[client]) or self.cap is None or self._busy < self.cap

    def send(self, client: int, task: int, version: int, now: float,
             rng: np.random.Generator, *, force: bool = False) -> Request | None:
        """Queue a request at ``client``; None if the cap refuses it (``force`` ignores the cap)."""
        if not (force or self.accepts(client)):
            return None
        start = max(now, self.queue_end[client])
        req = Request(self._next_id, task, client, version, now,
                      start + self.latency.sample(client, task, rng))
        self._next_id += 1
        self.queue_end[client] = req.done
        if not self.outstanding[client]:
            self._busy += 1
        self.outstanding[client][req.id] = req
        return req

    def release(self, req: Request) -> bool:
        """Mark ``req`` completed or cancelled; False if it was no longer outstanding."""
        queue = self.outstanding[req.client]
        if queue.pop(req.id, None) is None:
            return False
        if not queue:
            self._busy -= 1
        return True

    def cancel(self, req: Request) -> bool:
        """Cancel an outstanding request (frees the client's queue end if configured)."""
        if not self.release(req):
            return False
        if self.free_on_cancel:
            rest = self.outstanding[req.client].values()
            self.queue_end[req.client] = max((r.done for r in rest), default=req.sent)
        return True


@snapshot_type
class VersionStore:
    """Model versions kept while requests refer to them (reference counted).

    ``put(key, params)`` stores a version with no references; ``acquire`` / ``release``
    count the outstanding requests that use it; a version is dropped when its count falls
    to zero and it is not pinned as a task's current model (``pin``).
    """

    def __init__(self) -> None:
        self._data: dict[Hashable, Any] = {}
        self._refs: dict[Hashable, int] = {}
        self._pinned: dict[Hashable, Hashable] = {}

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, key: Hashable) -> Any:
        return self._data[key]

    def pin(self, owner: Hashable, key: Hashable, value: Any) -> None:
        """Make ``key`` (holding ``value``) the current version of ``owner``."""
        old = self._pinned.get(owner)
        self._data[key], self._pinned[owner] = value, key
        self._refs.setdefault(key, 0)
        if old is not None and old != key:
            self._drop_if_unused(old)

    def unpin(self, owner: Hashable) -> None:
        """``owner`` has no current version any more (a finished task)."""
        old = self._pinned.pop(owner, None)
        if old is not None:
            self._drop_if_unused(old)

    def acquire(self, key: Hashable) -> None:
        """One more request refers to ``key``."""
        self._refs[key] += 1

    def release(self, key: Hashable) -> None:
        """One request fewer refers to ``key``."""
        self._refs[key] -= 1
        self._drop_if_unused(key)

    def _drop_if_unused(self, key: Hashable) -> None:
        if self._refs.get(key, 0) == 0 and key not in self._pinned.values():
            self._data.pop(key, None)
            self._refs.pop(key, None)
