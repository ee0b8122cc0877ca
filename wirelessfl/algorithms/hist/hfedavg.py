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

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
from wirelessfl.engine.batch import ClientResults
from wirelessfl.engine.client import ClientResult
from wirelessfl.errors import ConfigError
from wirelessfl.models.base import Params
from wirelessfl.net.digital import Delivery
from wirelessfl.server.aggregation import (
    AggregateInfo,
    Aggregator,
    Mean,
    apply_update,
    segment_means,
    weighted_mean,
)
from wirelessfl.server.privacy import PrivacySettings, PrivateMean
from wirelessfl.server.privacy import epsilon as dp_epsilon
from wirelessfl.server.state import RoundPlan
from wirelessfl.server.topology import Topology


@dataclass(frozen=True)
class HFedAvgHParams(PrivacySettings):
    """HFedAvg: hierarchical FedAvg, E edge averagings per global round, then the cloud.

    Attributes
    ----------
    cells : int
        Number of cells N; client u belongs to cell ⌊u / (U // N)⌋.
    edge_rounds : int
        Edge aggregations E per global round.
    dp, dp_clip, dp_noise, dp_delta, dp_target_epsilon
        Differential privacy at the edge servers
        (:class:`~wirelessfl.server.privacy.PrivacySettings`, :class:`HFedAvg`).
    """

    cells: int = 2
    edge_rounds: int = 5

    def __post_init__(self) -> None:
        as_int("cells", self.cells, lo=1, hi=10**4)
        as_int("edge_rounds", self.edge_rounds, lo=1, hi=10**4)
        self.check_privacy()
        if self.dp == "over_the_air" and self.dp_noise == 0:
            raise ValueError("`dp_noise` 0 (the channel alone) is accounted for the FedAvg "
                             "family only; in cells give a multiplier > 0, which the clients "
                             "top the channel's noise up to")


@dataclass(frozen=True)
class CellsReport(RoundReport):
    """A hierarchical round's report: with ``dp``, the ε spent so far (None without).

    ``cell_of`` (client id → cell, −1: in none), ``cell_params`` (what each client of a
    cell uploads per edge round) and ``edge_rounds`` E let a run's network link time the
    round per cell (:meth:`~wirelessfl.net.links.LinkModel.cells_seconds`); not logged.
    """

    epsilon: float | None = None
    cell_of: np.ndarray | None = field(default=None, metadata={"logged": False})
    cell_params: tuple[float, ...] | None = field(default=None, metadata={"logged": False})
    edge_rounds: int | None = field(default=None, metadata={"logged": False})


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
    results: Sequence[ClientResult]
    infos: tuple[AggregateInfo, ...] = ()


class HFedAvg(FederatedAlgorithm):
    """Hierarchical FedAvg with uniform weights at edge and cloud.

    **Differential privacy at the edge** (``dp``): each edge aggregation clips every
    client's Δ_i to norm ≤ C and adds Gaussian noise of multiplier z
    (:class:`~wirelessfl.server.privacy.PrivateMean`): ``central`` by the edge server on its
    cell's sum (private against the cloud and the other cells, the edge server trusted),
    ``local`` by each client on its own, ``over_the_air`` the cell's channel noise topped up
    to z. Every client trains in every edge round, so a client's data is released E times a
    global round, each a Gaussian mechanism at z with no sampling: after t rounds ε is the
    RDP accountant's for t·E such releases (the cells hold disjoint clients, so a client's
    privacy is its own cell's). Over the air each release is accounted at z, the floor the
    top-up guarantees.
    """

    #: The plan a round's configure phase returns (HIST's carries its submodels too).
    plan_type: type[CellsPlan] = CellsPlan

    @classmethod
    @override
    def round_work(cls, settings: Mapping[str, Any]) -> float:
        """1 + E/N: E edge rounds of every cell's clients on a 1/N submodel.

        With ``split`` off the whole model (1 + E); the round's cloud side and evaluation
        count as one more pass of the whole model: the FCNN rounds of HIST's quick Fig. 3
        measured 0.38, 0.64 and 1.1 s at E/N = 1.25, 2.5 and 5 on 2 cores, a + b·E/N with
        a ≈ b ≈ 0.18 s.
        """
        share = 1.0 / int(settings["cells"]) if settings.get("split", False) else 1.0
        return 1.0 + int(settings["edge_rounds"]) * share

    def __init__(self, env: Environment, hp: HFedAvgHParams = HFedAvgHParams(),
                 aggregator: Aggregator | None = None) -> None:
        super().__init__(env)
        self.hp = hp
        self.topology = Topology.even(env.num_clients, hp.cells)
        self.aggregator = aggregator or Mean()
        if type(self).cell_aggregator is HFedAvg.cell_aggregator:  # (else: once it has them)
            self.check_private()

    def check_private(self) -> None:
        """Refuse ``dp`` where the cells' aggregation does not fit it (one line).

        Also a target ε that the first round already spends, as FedAvg does.
        """
        try:
            self.edge_aggregators  # noqa: B018 - built once, here, where it can be refused
        except ValueError as exc:
            raise ConfigError(f"algorithm.{exc}") from None
        target, first = self.hp.dp_target_epsilon, self.epsilon(1)
        if target is not None and first is not None and first > target:
            raise ConfigError(f"algorithm.dp_target_epsilon {target:g} is spent by the first "
                              f"round (epsilon {first:.3g} after its {self.hp.edge_rounds} edge "
                              "rounds): raise it or dp_noise")

    @functools.cached_property
    def edge_aggregators(self) -> tuple[Aggregator, ...]:
        """Each cell's edge aggregation: its aggregator, behind DP when ``dp`` is on."""
        hp = self.hp
        inner = [self.cell_aggregator(j) for j in range(self.topology.num_cells)]
        if hp.dp == "none":
            return tuple(inner)
        return tuple(PrivateMean(hp.dp, hp.dp_clip, hp.dp_noise, a) for a in inner)

    def epsilon(self, rounds: int) -> float | None:
        """ε at ``dp_delta`` after ``rounds`` global rounds: rounds·E releases at z (None: no DP)."""
        hp = self.hp
        if hp.dp == "none":
            return None
        return dp_epsilon("local" if hp.dp == "local" else "central", hp.dp_noise,
                          int(rounds) * hp.edge_rounds, 1, 1, hp.dp_delta)

    @override
    def spent(self, rounds_done: int, state: ServerState | None = None) -> bool:
        """Whether one more round would spend more than ``dp_target_epsilon``."""
        target = self.hp.dp_target_epsilon
        return target is not None and self.epsilon(rounds_done + 1) > target

    def cell_aggregator(self, j: int) -> Aggregator:
        """The aggregator of cell j's edge server (one for all cells here)."""
        return self.aggregator

    def run_cells(self, starts: Sequence[Params], t: int) -> CellsOutcome:
        """E edge rounds in every cell from ``starts[j]`` (lines 5–9 of Algorithm 1).

        All clients of all cells train as one batch per edge round (cell j's clients start
        from ``edge[j]``, a per-client index into the N cell models). Exact edge servers
        (:class:`~wirelessfl.server.aggregation.Mean`) average every cell in one segmented
        reduction of the stacked Δ when the cells' models have one shape; otherwise (HIST's
        unequal mask sizes, an aggregator over the air) each cell's aggregator takes its
        cell's rows, one call per cell.
        """
        cells = self.topology.cells
        clients = np.array([u for c in cells for u in c], dtype=np.int64)
        sizes = np.array([len(c) for c in cells])
        cell_of = np.repeat(np.arange(len(cells)), sizes)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        edges = self.edge_aggregators
        exact = all(type(a) is Mean for a in edges)
        edge = list(starts)
        parts: list[ClientResults] = []
        infos: list[AggregateInfo] = []
        for e in range(self.hp.edge_rounds):
            out = self.train_clients(edge, clients, t, stage=e, start_index=cell_of)
            if exact and out.deltas is not None:  # one stack (cells of one shape)
                updates = segment_means(out.delta_stack(), np.ones(len(clients)), cell_of,
                                        len(cells))
                infos.extend(AggregateInfo() for _ in cells)
            else:
                updates = []
                for j in range(len(cells)):
                    update, info = edges[j].aggregate_stack(
                        out.delta_stack(slice(bounds[j], bounds[j + 1])), np.ones(sizes[j]),
                        self.env.seeds.generator("noise", t, e, j))
                    updates.append(update)
                    infos.append(info)
            edge = [apply_update(edge[j], updates[j]) for j in range(len(cells))]
            parts.append(out.without_deltas())
        return CellsOutcome(edge, ClientResults.concat(parts), tuple(infos))

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
    def server_update(self, state: ServerState, plan: CellsPlan,
                      outcome: CellsOutcome,
                      delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        t = state.round
        params = weighted_mean(outcome.edge_params, np.ones(self.topology.num_cells))
        loss, diag = client_diagnostics(outcome.results)
        new = ServerState(params, t + 1, state.opt_state, state.client_states, state.buffers,
                          schedule_origin=state.schedule_origin)
        d = float(num_params(params))
        return new, CellsReport(uplink_params=self.hp.edge_rounds * d, train_loss=loss,
                                clients=diag, epsilon=self.epsilon(t + 1),
                                **self.cells_cost([d] * self.topology.num_cells))

    def cells_cost(self, sizes: Sequence[float]) -> dict[str, Any]:
        """A :class:`CellsReport`'s clock fields: cells, each cell's upload ``sizes``, E."""
        return {"cell_of": self.topology_cell_of, "cell_params": tuple(float(v) for v in sizes),
                "edge_rounds": self.hp.edge_rounds}

    @functools.cached_property
    def topology_cell_of(self) -> np.ndarray:
        """Client id → its cell (−1: a client no cell holds)."""
        out = np.full(self.env.num_clients, -1, np.int64)
        for j, c in enumerate(self.topology.cells):
            out[list(c)] = j
        return out
