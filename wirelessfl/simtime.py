"""Simulated time: completion events and per-request latency models.

Asynchronous algorithms (FedAST, ``specs/fedast.md`` §4.3) and latency accounting share one
clock. A request sent at time t to client i gets its duration D drawn when it is sent and
completes at ``max(t, F_i) + D`` (FIFO service at the client); the :class:`EventQueue`
pops completions in time order, ties broken by insertion order so runs are reproducible.

Latency models are pluggable (:class:`LatencyModel`): the shifted exponential of FedAST
(§4.2) by default; a wireless model (compute from CPU frequency plus a Rayleigh uplink from
:mod:`channels`) plugs in behind the same interface.

Examples
--------
>>> q = EventQueue()
>>> q.push(2.0, "b"); q.push(1.0, "a"); q.push(2.0, "c")
>>> [q.pop() for _ in range(3)]
[(1.0, 'a'), (2.0, 'b'), (2.0, 'c')]
"""

from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from typing import Any

import numpy as np


class EventQueue:
    """Priority queue of (time, payload), FIFO among equal times."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._counter = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time: float, payload: Any) -> None:
        """Schedule ``payload`` at simulated ``time``."""
        if not np.isfinite(time):
            raise ValueError(f"event time must be finite, got {time}")
        heapq.heappush(self._heap, (float(time), next(self._counter), payload))

    def pop(self) -> tuple[float, Any]:
        """Earliest event."""
        time, _, payload = heapq.heappop(self._heap)
        return time, payload


class LatencyModel(ABC):
    """Duration of one request of ``task`` at ``client``.

    Contract: :meth:`sample` returns a finite duration ≥ 0 in the model's time unit, drawn
    from ``rng`` only (the ``delays`` stream).
    """

    @abstractmethod
    def sample(self, client: int, task: int, rng: np.random.Generator) -> float:
        """One request's duration."""


class ShiftedExponential(LatencyModel):
    """FedAST's latency (``specs/fedast.md`` §4.2): D = τ_m (β + Exp(mean 2β)), β = κ c_m s_i.

    Parameters
    ----------
    task_constants : sequence of float
        c_m per task.
    speed : ndarray, shape (U,)
        Speed multiplier s_i per client (1.3 slow, 1 normal, 0.7 fast).
    steps : sequence of float
        τ_m, local steps per request of each task.
    kappa : float
        Common factor of β; 1/2 as in the code [code].
    """

    def __init__(self, *, task_constants, speed, steps, kappa: float = 0.5) -> None:
        self.c = np.asarray(task_constants, dtype=float)
        self.speed = np.asarray(speed, dtype=float)
        self.steps = np.broadcast_to(np.asarray(steps, dtype=float), self.c.shape)
        if (self.c <= 0).any() or (self.speed <= 0).any() or kappa <= 0:
            raise ValueError("task constants, speeds and kappa must be > 0")
        self.kappa = float(kappa)

    def sample(self, client: int, task: int, rng: np.random.Generator) -> float:  # noqa: D102
        beta = self.kappa * self.c[task] * self.speed[client]
        return float(self.steps[task] * (beta + rng.exponential(2 * beta)))
