"""Hierarchical FedAvg (HFedAvg): cloud → N edge servers → clients.

The baseline of HIST (Fang, Han, Brinton, arXiv 2310.17890, ``docs/papers/hist.md`` §2.3;
Liu et al., "Client-Edge-Cloud Hierarchical Federated Learning", ICC 2020). In each global
round every cell starts from the global model; for E edge rounds its clients run H local SGD
steps and the edge server averages them uniformly (eq. (6)); the cloud then averages the N
edge models uniformly. Weights are uniform at both tiers, as in objective (1).

HIST reuses :meth:`HFedAvg.run_cells` and changes only the dispatch (disjoint submodels per
cell, eq. (4)) and the assembly (eq. (7)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from typing_extensions import override

from channels.validation import as_int
from wirelessfl.algorithms.base import (
    Environment,
    FederatedAlgorithm,
    RoundReport,
    ServerState,
    client_diagnostics,
    num_params,
)
from wirelessfl.engine.client import ClientResult
from wirelessfl.models.base import Params
from wirelessfl.net.digital import Delivery
from wirelessfl.server.aggregation import (
    AggregateInfo,
    Aggregator,
    Mean,
    apply_update,
    weighted_mean,
)
from wirelessfl.server.state import RoundPlan
from wirelessfl.server.topology import Topology


@dataclass(frozen=True)
class HFedAvgHParams:
    """HFedAvg: hierarchical FedAvg, E edge averagings per global round, then the cloud.

    Attributes
    ----------
    cells : int
        Number of cells N; client u belongs to cell ⌊u / (U // N)⌋.
    edge_rounds : int
        Edge aggregations E per global round.
    """

    cells: int = 2
    edge_rounds: int = 5

    def __post_init__(self) -> None:
        as_int("cells", self.cells, lo=1, hi=10**4)
        as_int("edge_rounds", self.edge_rounds, lo=1, hi=10**4)


@dataclass(frozen=True, eq=False)
class CellsPlan(RoundPlan):
    """A hierarchical round's plan: every cell's starting model (``cell_starts[j]``)."""

    cell_starts: Sequence[Params] = ()


@dataclass(frozen=True)
class CellsOutcome:
    """End of the E edge rounds: each cell's model, every client result, the edge infos.

    ``infos`` are what each edge aggregation returned
    (:class:`~wirelessfl.server.aggregation.AggregateInfo`: over the air, its MSE).
    """

    edge_params: list[Params]
    results: list[ClientResult]
    infos: tuple[AggregateInfo, ...] = ()


class HFedAvg(FederatedAlgorithm):
    """Hierarchical FedAvg with uniform weights at edge and cloud."""

    #: The plan a round's configure phase returns (HIST's carries its submodels too).
    plan_type: type[CellsPlan] = CellsPlan

    def __init__(self, env: Environment, hp: HFedAvgHParams = HFedAvgHParams(),
                 aggregator: Aggregator | None = None) -> None:
        super().__init__(env)
        self.hp = hp
        self.topology = Topology.even(env.num_clients, hp.cells)
        self.aggregator = aggregator or Mean()

    def cell_aggregator(self, j: int) -> Aggregator:
        """The aggregator of cell j's edge server (one for all cells here)."""
        return self.aggregator

    def run_cells(self, starts: Sequence[Params], t: int) -> CellsOutcome:
        """E edge rounds in every cell from ``starts[j]`` (lines 5–9 of Algorithm 1).

        All clients of all cells go to the executor in one call per edge round.
        """
        cells = self.topology.cells
        edge = list(starts)
        results: list[ClientResult] = []
        infos: list[AggregateInfo] = []
        for e in range(self.hp.edge_rounds):
            clients = [u for c in cells for u in c]
            begin = [edge[j] for j, c in enumerate(cells) for _ in c]
            out = self.train_clients(begin, clients, t, stage=e)
            pos = 0
            for j, c in enumerate(cells):
                cell_res = out[pos:pos + len(c)]
                pos += len(c)
                update, info = self.cell_aggregator(j).aggregate(
                    [r.delta for r in cell_res], np.ones(len(c)),
                    self.env.seeds.generator("noise", t, e, j))
                infos.append(info)
                edge[j] = apply_update(edge[j], update)
            results.extend(out)
        return CellsOutcome(edge, results, tuple(infos))

    def cells_plan(self, cell_starts: Sequence[Params], **more: Any) -> CellsPlan:
        """The plan of a round in which cell j starts from ``cell_starts[j]`` (every client trains)."""
        cells = self.topology.cells
        return self.plan_type(np.array([u for c in cells for u in c], dtype=int),
                         [cell_starts[j] for j, c in enumerate(cells) for _ in c],
                         cell_starts=list(cell_starts), **more)

    @override
    def configure(self, state: ServerState) -> CellsPlan:
        return self.cells_plan([state.params] * self.topology.num_cells)

    def train(self, state: ServerState, plan: CellsPlan) -> CellsOutcome:
        """The E edge rounds of every cell (:meth:`run_cells`)."""
        return self.run_cells(plan.cell_starts, state.round)

    @override
    def aggregate(self, state: ServerState, plan: CellsPlan,
                  outcome: CellsOutcome,
                  delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        t = state.round
        params = weighted_mean(outcome.edge_params, np.ones(self.topology.num_cells))
        loss, diag = client_diagnostics(outcome.results)
        new = ServerState(params, t + 1, state.opt_state, state.client_states, state.buffers,
                          schedule_origin=state.schedule_origin)
        return new, RoundReport(uplink_params=float(self.hp.edge_rounds * num_params(params)),
                                train_loss=loss, clients=diag)
