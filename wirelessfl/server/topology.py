"""Cells of a hierarchical network: which clients each edge server serves.

``docs/papers/hist.md`` §1.1 and §6.1: N edge servers, cell j serves n_j clients; with
``Topology.even`` client u belongs to cell ⌊u / n⌋ [code], and with U not divisible by N
the ``U mod N`` last clients take no part (e.g. 60 clients, N = 8: 7 per cell, 56 active).

Examples
--------
>>> Topology.even(60, 8).clients_per_cell
(7, 7, 7, 7, 7, 7, 7, 7)
>>> Topology.even(6, 2).cells
((0, 1, 2), (3, 4, 5))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Topology:
    """Client ids of every cell.

    Attributes
    ----------
    cells : tuple of tuple of int
        ``cells[j]`` lists the clients of cell j (disjoint, each non-empty).
    """

    cells: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.cells:
            raise ValueError("a topology needs at least one cell")
        for j, c in enumerate(self.cells):
            if not c:
                raise ValueError(f"cell {j} has zero clients; every cell needs at least one")
        flat = [u for c in self.cells for u in c]
        if len(set(flat)) != len(flat):
            raise ValueError("a client appears in more than one cell")

    @classmethod
    def even(cls, num_clients: int, num_cells: int) -> Topology:
        """``num_cells`` cells of ``num_clients // num_cells`` consecutive clients."""
        if num_cells < 1:
            raise ValueError(f"`cells` must be >= 1, got {num_cells}")
        per = num_clients // num_cells
        if per == 0:
            raise ValueError(f"{num_clients} clients cannot fill {num_cells} cells: every cell "
                             "needs at least one client")
        return cls(tuple(tuple(range(j * per, (j + 1) * per)) for j in range(num_cells)))

    @classmethod
    def from_sizes(cls, clients_per_cell: Sequence[int]) -> Topology:
        """Cells of the given sizes over consecutive client ids."""
        edges = np.concatenate([[0], np.cumsum(clients_per_cell)]).astype(int)
        return cls(tuple(tuple(range(a, b)) for a, b in zip(edges[:-1], edges[1:])))

    @property
    def num_cells(self) -> int:
        """N."""
        return len(self.cells)

    @property
    def clients_per_cell(self) -> tuple[int, ...]:
        """(n_1, ..., n_N)."""
        return tuple(len(c) for c in self.cells)

    @property
    def clients(self) -> tuple[int, ...]:
        """All active clients, cell by cell."""
        return tuple(u for c in self.cells for u in c)

    @property
    def n_tilde(self) -> float:
        """Ñ = Σ_j 1 / n_j (``docs/papers/hist.md`` §1.2)."""
        return float(sum(1.0 / n for n in self.clients_per_cell))
