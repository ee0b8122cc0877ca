"""HIST: hierarchical independent submodel training (Algorithm 1 of HIST).

Fang, Han, Brinton, arXiv 2310.17890 (``docs/papers/hist.md`` §2, §4, §5). Each global round t:

1. draw the round's CPU frequencies and channels (§6.4) and turn them into per-unit
   latencies c_j (:func:`wirelessfl.net.resources.unit_latency`);
2. mask sizes k_j: the uniform split, or the latency-optimal one of the MILP (20)/(36)
   (:func:`solvers.mask_sizes.solve` under the cap (19c));
3. a fresh random disjoint partition of each split unit group into N blocks of those sizes
   (§4.4); cell j's submodel is the sliced model on block j (shared layers are whole);
4. E edge rounds of H local steps per cell on the submodel (:meth:`HFedAvg.run_cells`), the
   edge aggregation exact (``"oma"``) or over the air (``"aircomp"``, :class:`AirComp`);
5. cloud assembly (7): every split parameter is written back from the cell that owns it;
   shared parameters (and the biases of layers whose inputs are split) are averaged over cells.

With N = 1 (one block holding every unit) HIST is HFedAvg. The round latency is
E · max_j c_j k_j, eqs. (18)/(35); the uplink per client is E times its cell's submodel size
(§6.6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from typing_extensions import override

from solvers import mask_sizes
from solvers.latency import size_cap, uniform_sizes
from wirelessfl.algorithms.base import (
    Environment,
    ServerState,
    client_diagnostics,
    num_params,
)
from wirelessfl.algorithms.hist.hfedavg import CellsOutcome, CellsPlan, CellsReport, HFedAvg
from wirelessfl.algorithms.hist.hparams import HISTHParams, table_uplink_mb
from wirelessfl.engine.client import steps_per_call
from wirelessfl.models.base import Params
from wirelessfl.net.digital import Delivery
from wirelessfl.net.resources import by_half, draw_cpu, draw_resources, unit_latency
from wirelessfl.server.aggregation import AggregateInfo, Aggregator, AirComp, weighted_mean
from wirelessfl.server.submodel import Submodel, random_disjoint_selections


@dataclass(frozen=True, eq=False)
class HISTPlan(CellsPlan):
    """HIST's round plan: the cells' submodels, their mask sizes and the round's C_j."""

    subs: list[Submodel] = field(default_factory=list)
    sizes: list[np.ndarray] = field(default_factory=list)
    full_latency: np.ndarray | None = None


@dataclass(frozen=True)
class HISTReport(CellsReport):
    """A HIST round's report, with what it logs.

    Attributes
    ----------
    submodel_params : list of int
        Parameters of each cell's submodel.
    mask_sizes : list of list of int or None
        k_j per split group and cell (None without splitting).
    aircomp_mse : float or None
        Mean AirComp MSE (25) of the round's edge aggregations (OMA: None); the name every
        over-the-air round logs (run folders written before call it ``aircomp_mse_mean``,
        read as this by :meth:`~wirelessfl.run.records.RunRecord.rows`).
    """

    submodel_params: list[int] | None = None
    mask_sizes: list[list[int]] | None = None
    aircomp_mse: float | None = None


class HIST(HFedAvg):
    """HIST (and, with ``split=False``, HFedAvg) over OMA or AirComp edge aggregation."""

    plan_type = HISTPlan

    def __init__(self, env: Environment, hp: HISTHParams = HISTHParams()) -> None:  # noqa: B008
        super().__init__(env, hp)
        self.hp: HISTHParams = hp
        model = env.model
        self.groups = [g for g in model.unit_groups if g.name in model.hist_groups]
        if hp.split and not self.groups:
            raise ValueError(f"model {type(model).__name__} has no unit group HIST can split")
        for g in self.groups if hp.split else ():
            if g.size < hp.cells:
                raise ValueError(f"{hp.cells} cells but layer {g.name!r} has only {g.size} "
                                 "units: use at most that many cells")
            if hp.mask_sizes == "optimised" and size_cap(g.size, hp.cells, hp.eps_th) * hp.cells < g.size:
                raise ValueError(f"eps_th={hp.eps_th} makes the cap (19c) infeasible for layer "
                                 f"{g.name!r} ({g.size} units in {hp.cells} cells): raise eps_th")
        sizes = [len(c) for c in self.topology.cells]
        if min(sizes) < 1:
            raise ValueError("a cell has zero clients; use fewer cells or more clients")
        self.clients_per_cell = max(sizes)
        self.cpu_hz = draw_cpu(hp.cells, self.clients_per_cell, env.seeds.generator("cpu"),
                               cpu_ghz=hp.cpu_ghz)
        shapes = {k: v.shape for k, v in model.params().items()}
        self.fc_biases = {k for k in shapes if k.endswith("bias")
                          and len(shapes.get(k.removesuffix("bias") + "weight", ())) == 2}
        # the part of a cell's upload that does not depend on its mask (§4.3): sub_size_j =
        # shared + per_unit · k_j for the (single) split group
        num = sum(int(np.prod(s)) for s in shapes.values())
        self.per_unit = [sum(int(np.prod(shapes[s.param])) // shapes[s.param][s.dim]
                             for s in g.slices) for g in self.groups]
        self.shared = [num - q * g.size for q, g in zip(self.per_unit, self.groups)]
        cells = self.topology.cells
        self.client_mask = np.array([[i < len(c) for i in range(max(sizes))] for c in cells])
        self.local_steps = np.array([[steps_per_call(len(env.client_indices[c[i]]), env.local)
                                      if i < len(c) else 1 for i in range(max(sizes))]
                                     for c in cells])
        self.aggregators: list[Aggregator] = [self.aggregator] * hp.cells
        if hp.aggregation == "aircomp":
            self.aggregators = [AirComp(float(snr), env.local.lr, antennas=hp.antennas,
                                        method=hp.beamforming, real_part=hp.real_part_noise,
                                        tight_power=hp.tight_power,
                                        normalise=hp.normalise_symbols)
                                for snr in by_half(hp.cells, *hp.snr_db)]
        self.check_private()  # (its cells' aggregators now known)

    @override
    def cell_aggregator(self, j: int) -> Aggregator:
        return self.aggregators[j]

    def _full_latency(self, t: int, num: int) -> np.ndarray:
        """C_j of round t: each cell's edge-round latency with the full model [s], (17)/(34)."""
        hp = self.hp
        res = draw_resources(hp.cells, self.clients_per_cell,
                             self.env.seeds.generator("resources", t), snr_db=hp.snr_db,
                             cpu_ghz=hp.cpu_ghz, antennas=hp.antennas,
                             cpu_hz=None if hp.cpu_redraw else self.cpu_hz)
        return unit_latency(res, scheme=hp.aggregation, units=1, num_params=num,
                            local_steps=self.local_steps, client_mask=self.client_mask)

    def _sizes(self, full: np.ndarray, num: int) -> list[np.ndarray]:
        """Per-group mask sizes: the uniform split or the MILP (20)/(36) of the logged latency.

        A cell with k_j units uploads s + q·k_j parameters (shared ones included, §4.3), so
        its edge round takes C_j (s + q k_j)/d = c_j (k_j + σ) with c_j = C_j q/d, σ = s/q:
        the solver minimises exactly the latency the round reports.
        """
        hp = self.hp
        if hp.mask_sizes == "uniform":
            return [uniform_sizes(g.size, hp.cells) for g in self.groups]
        return [mask_sizes.solve(full * q / num, g.size, size_cap(g.size, hp.cells, hp.eps_th),
                                 offset=s / q).sizes
                for g, q, s in zip(self.groups, self.per_unit, self.shared)]

    def _dispatch(self, params: Params, t: int,
                  full: np.ndarray) -> tuple[list[Submodel], list[Params], list]:
        """Round t's submodels, the cells' starting parameters and the mask sizes.

        ``full`` is the round's C_j (:meth:`_full_latency`), which sizes optimised masks.
        """
        hp = self.hp
        if not hp.split:
            return [], [params] * hp.cells, []
        sizes = self._sizes(full, num_params(params))
        selections = random_disjoint_selections(self.groups, sizes,
                                                self.env.seeds.generator("masks", t))
        subs = [Submodel(self.env.model.unit_groups, s, params) for s in selections]
        starts = [s.slice(params) for s in subs]
        if hp.bias_mode == "code_faithful":
            gen = torch.Generator().manual_seed(self.env.seeds.int_seed("biases", t))
            starts = [{k: _fresh_bias(s, k, gen) if k in self.fc_biases else v
                       for k, v in s.items()} for s in starts]
        return subs, starts, sizes

    def configure(self, state: ServerState) -> HISTPlan:
        """Round t's channels and C_j, the mask sizes and each cell's submodel (Algorithm 1, l. 3)."""
        full = self._full_latency(state.round, num_params(state.params))
        subs, starts, sizes = self._dispatch(state.params, state.round, full)
        return self.cells_plan(starts, subs=subs, sizes=sizes, full_latency=full)

    @override
    def server_update(self, state: ServerState, plan: HISTPlan,
                      outcome: CellsOutcome,
                      delivery: Delivery | None = None) -> tuple[ServerState, HISTReport]:
        t, params, hp = state.round, state.params, self.hp
        num = num_params(params)
        full, subs, starts, sizes = plan.full_latency, plan.subs, plan.cell_starts, plan.sizes
        new_params = self._assemble(params, subs, outcome.edge_params)
        loss, diag = client_diagnostics(outcome.results)
        sub_sizes = np.array([num_params(p) for p in starts])
        # (18)/(35) with shared parameters uploaded by every cell (§8.3 item 13)
        latency = hp.edge_rounds * float((full * sub_sizes / num).max())
        per_client = np.concatenate([[j] * len(c) for j, c in enumerate(self.topology.cells)])
        cumulative = {}
        paper = type(self.env.model).paper_volumes
        if paper is not None:
            share = sizes[0] / self.groups[0].size if sizes else np.ones(hp.cells)
            cumulative["uplink_mb_paper_per_client"] = table_uplink_mb(
                hp.edge_rounds, *paper, float(share[per_client].mean()))
        mse, _ = AggregateInfo.merged(outcome.infos)
        new = ServerState(new_params, t + 1, state.opt_state, state.client_states, state.buffers,
                          schedule_origin=state.schedule_origin)
        return new, HISTReport(uplink_params=hp.edge_rounds * float(sub_sizes[per_client].mean()),
                               train_loss=loss, latency_s=latency if hp.clock == "own" else None,
                               clients=diag,
                               cumulative=cumulative, submodel_params=sub_sizes.tolist(),
                               mask_sizes=[s.tolist() for s in sizes] if sizes else None,
                               aircomp_mse=mse, epsilon=self.epsilon(t + 1),
                               **self.cells_cost(sub_sizes.tolist()))

    def _assemble(self, params: Params, subs: list[Submodel], edge: list[Params]) -> Params:
        """Eq. (7): split entries from their owner cell, the rest averaged over cells.

        In ``code_faithful`` bias mode every FC bias keeps its global value.
        """
        if not subs:
            return weighted_mean(edge, np.ones(len(edge)))
        shared = weighted_mean([{k: v for k, v in e.items() if k not in subs[0].dims}
                                for e in edge], np.ones(len(edge)))
        out = dict(shared)
        for k in subs[0].dims:
            full = params[k].clone()
            for sub, e in zip(subs, edge):
                full[sub.index(k)] = e[k]
            out[k] = full
        if self.hp.bias_mode == "code_faithful":
            out.update({k: params[k] for k in self.fc_biases})
        return {k: out[k] for k in params}


def _fresh_bias(sub: Params, name: str, gen: torch.Generator) -> torch.Tensor:
    """PyTorch's default bias init U(±1/√fan_in) of a rebuilt layer of the submodel ``sub``."""
    like, weight = sub[name], sub[name.removesuffix("bias") + "weight"]
    bound = 1.0 / math.sqrt(weight[0].numel())
    fresh = (torch.rand(like.shape, generator=gen, dtype=like.dtype) * 2 - 1) * bound
    return fresh.to(like.device)
