"""RA-Fed and RAM-Fed: submodels from arbitrarily assigned neurons (``docs/papers/rafed.md``).

Each round q every participating client n gets a selection of units (a neuron index set per
prunable layer, :mod:`wirelessfl.algorithms.rafed.masks`) of ratio r_n, trains the submodel from
θ_{q,n,0} = C(θ_q) ⊙ m_{n,q} (§2.1.5; C from :mod:`wirelessfl.net.compression`) for T local
steps and uploads its update on the coordinates it holds. With Γ_q = Σ_n m_{n,q} the
coordinate-wise coverage:

- **RA-Fed** (§2.2): θ_{q+1} = θ_q − (Σ_n m_{n,q} ⊙ D_{q,n}) ⊘ max(Γ_q, 1), D = θ_{q,n,0} −
  θ_{q,n,T}: every coordinate moves by the plain mean of its coverers' updates, an uncovered
  one stays;
- **RAM-Fed** (§2.3): with Δ_{q,n} = D_{q,n}/γ_q (gradient units, so lr schedules keep the
  proof's bookkeeping) and per-client memories u_n of the last Δ on each coordinate,
  v_q = ū + (Σ_n m ⊙ (Δ − u_n)) ⊘ max(Γ_q, 1), θ_{q+1} = θ_q − γ_q v_q, then
  u_n ← u_n + m ⊙ (Δ − u_n) and ū ← ū + δu/N. Uncovered coordinates still move by γ ū.

The memories are the off-device client state store (``ServerState.client_states``: one
full-size tree per client on the CPU, ``float32`` or ``float16``; a client never seen holds
zeros and is not stored); ū lives on the CPU too. Aggregation adds each client's sliced
update into one full-size accumulator at its indices, so no N full-size copies exist.

Training is **extracted** by default (each client trains the physically smaller submodel:
real compute and upload savings; clients of equal ratio have equal shapes and train as one
batched group) or **masked** (``training: mask``: the full network from θ ⊙ m with masked
gradients, the same iterates for models without normalisation layers, §2.1.5).

The baselines of §3 are the same round with other settings, registered under their names:
FedAvg-small (everyone at min r, prefix), HeteroFL (prefix, 1/r scaler in training),
Federated Dropout (everyone at one keep ratio, random units), FedRolex (rolling window),
FjORD (prefix at r_n, each local step trains the prefix of a width p ≤ r_n drawn from the
levels). Full masks for everyone with C = I give uniform FedAvg exactly, for both rules.

**Resources from the network (beyond the paper).** With ``resources: deadline`` each round
draws every client's Rayleigh uplink (``antennas``, ``snr_db`` by halves of the clients,
``bandwidth_mhz`` shared equally, FDMA) over CPU frequencies drawn once per client
(``cpu_ghz``), times a submodel of parameter fraction f as
t_n(f) = T·``cycles_per_step``·f/F_n + 32 d f/R_n, and gives client n the largest ratio
level whose submodel meets the round deadline (``deadline_s``, or by default the
``deadline_quantile`` of that round's full-model times); a client that cannot meet it
even at the smallest level sits the round out (a zero mask, §2.2). ``timing: true``
reports every round's latency max_n t_n(f_n) under the same model, for any ratios (full
models: FedAvg waiting for its slowest client).

BatchNorm models are refused (their running statistics are not submodel-aware); the zoo's
GroupNorm ResNet-18 prunes the blocks' inner channels in even counts.

Modules: the hyperparameters (:mod:`~wirelessfl.algorithms.rafed.hparams`), the mask
policies (:mod:`~wirelessfl.algorithms.rafed.masks`), the local rule
(:mod:`~wirelessfl.algorithms.rafed.local`), the two aggregations
(:mod:`~wirelessfl.algorithms.rafed.aggregation`), the §3 baselines
(:mod:`~wirelessfl.algorithms.rafed.baselines`); the network-derived resources are in
:mod:`wirelessfl.net.resources`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from typing_extensions import override

from wirelessfl.algorithms.base import (
    Environment,
    FederatedAlgorithm,
    ServerState,
    client_diagnostics,
    num_params,
)
from wirelessfl.algorithms.rafed.aggregation import (
    RAFedState,
    SubmodelReport,
    coverage_aggregate,
    coverage_log,
)
from wirelessfl.algorithms.rafed.hparams import RAFedHParams, RAMFedHParams
from wirelessfl.algorithms.rafed.local import SubmodelSGD
from wirelessfl.algorithms.rafed.masks import (
    draw_levels,
    kept_units,
    parameter_fraction,
    ratio_for_fraction,
)
from wirelessfl.engine import client_store
from wirelessfl.engine.batch import ClientResults, RowStack
from wirelessfl.engine.client import steps_per_call
from wirelessfl.models.base import Params
from wirelessfl.net.compression import compress, relative_error
from wirelessfl.net.digital import Delivery
from wirelessfl.net.resources import draw_cpu, draw_fdma_rates, full_model_seconds, largest_level_in_time
from wirelessfl.server.aggregation import AggregateInfo
from wirelessfl.server.sampling import AllClients, ClientSampler, UniformSampler
from wirelessfl.server.state import RoundPlan
from wirelessfl.server.submodel import Submodels, SubmodelStack

__all__ = ["RAFed", "RAFedHParams", "RAMFedHParams", "RAFedState", "SubmodelPlan", "SubmodelReport"]


@dataclass(frozen=True, eq=False)
class SubmodelPlan(RoundPlan):
    """A round's submodels, ratios r_n, their times t_n(f_n) [s], C(θ_q) and γ_q.

    The clients train in stacks of equal submodel sizes (``subs``): ``starts[j]`` and
    ``broadcast[j]`` are stack j's starts C(θ_q) ⊙ m_{n,q} and what its rule needs, as
    :class:`~wirelessfl.engine.batch.RowStack` s (one row a client).
    """

    subs: Submodels = field(default_factory=lambda: Submodels((), ()))
    ratios: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sent: Params = field(default_factory=dict)
    lr: float = 0.0


class RAFed(FederatedAlgorithm):
    """RA-Fed / RAM-Fed and the submodel baselines (module docstring)."""

    state_type = RAFedState

    #: Over the air, the clients' scattered updates add up in the air (coverage from the masks).
    uses_uplink = True

    def __init__(self, env: Environment, hp: RAFedHParams = RAFedHParams()) -> None:  # noqa: B008
        super().__init__(env)
        self.hp = hp
        model = env.model
        if model.buffers_state():
            raise ValueError(f"{type(model).__name__} has BatchNorm running statistics, which "
                             "submodels cannot share; use a model without BatchNorm (lenet5, "
                             "mlp, cifar_cnn, resnet18 with GroupNorm, char_lstm)")
        self.groups = tuple(model.unit_groups)
        if not self.groups:
            raise ValueError(f"{type(model).__name__} declares no prunable units: submodels need "
                             "hidden layers (lenet5, mlp, fcnn, cifar_cnn, resnet18, char_lstm)")
        if hp.training == "mask" and any(isinstance(m, (torch.nn.GroupNorm, torch.nn.LayerNorm))
                                         for m in model.modules()):
            raise ValueError("training: mask would let dropped channels into the GroupNorm "
                             "statistics; use training: extract for this model")
        self.shapes = {k: v.shape for k, v in model.params().items()}
        n = env.num_clients
        if hp.fraction is not None:   # one ratio for everyone, solved from the model
            self.levels = (ratio_for_fraction(self.groups, self.shapes, hp.fraction),)
        elif hp.width == "min":
            self.levels = (min(hp.ratios),)
        else:
            self.levels = tuple(sorted(set(hp.ratios)))
        #: r_n of client n without the deadline policy: the levels spread evenly, n mod L
        self.base_ratio = (np.array([hp.ratios[c % len(hp.ratios)] for c in range(n)], float)
                           if hp.fraction is None and hp.width == "own"
                           else np.full(n, self.levels[0]))
        self.fractions = {r: parameter_fraction(self.groups, self.shapes, r) for r in self.levels}
        if hp.policy == "coverage_aware" and hp.resources == "fixed" and hp.clients_per_round is None:
            for g in self.groups:  # fail before training when Γ_min cannot be reached
                held = sum(kept_units(g, r) for r in self.base_ratio)
                if held < hp.gamma_min * g.size:
                    raise ValueError(f"gamma_min = {hp.gamma_min} needs {hp.gamma_min * g.size} "
                                     f"units of layer {g.name!r} ({g.size} units) per round, the "
                                     f"clients hold {held}: lower gamma_min or raise the ratios")
        self.update = SubmodelSGD(model, env.local, self.groups, hp.scaler,
                                  self.levels if hp.step_widths else None)
        self.sampler: ClientSampler = (AllClients() if hp.clients_per_round is None
                                       else UniformSampler(num=hp.clients_per_round))
        # F_n drawn once per client, the first ⌊N/2⌋ clients from the first range (as HIST's cells)
        self.cpu_hz = draw_cpu(n, 1, env.seeds.generator("cpu"), cpu_ghz=hp.cpu_ghz).ravel()
        self.steps = np.array([steps_per_call(len(i), env.local) for i in env.client_indices])
        if hp.resources == "deadline" and hp.deadline_s is not None:  # can anyone take part?
            d = sum(int(np.prod(s)) for s in self.shapes.values())
            ratios, _ = self._ratios(0, np.arange(n), d)
            if not (ratios > 0).any():
                raise ValueError(f"deadline_s = {hp.deadline_s:g}: in round 0 no client meets it "
                                 "even with the smallest ratio level, so no client would train; "
                                 "raise deadline_s or add a smaller level to `ratios`")

    # ------------------------------------------------------------------ the round's phases
    def configure(self, state: ServerState) -> SubmodelPlan:
        """Clients, their ratios r_n (0: sits out), masks and starts C(θ_q) ⊙ m_{n,q}."""
        t, hp, env = state.round, self.hp, self.env
        params, d = state.params, num_params(state.params)
        clients = self.sample(t)
        ratios, seconds = self._ratios(t, clients, d)
        clients, ratios, seconds = clients[ratios > 0], ratios[ratios > 0], seconds[ratios > 0]
        sent = compress(params, hp.compression, bits=hp.bits, keep=hp.keep,
                        gen=torch.Generator().manual_seed(env.seeds.int_seed("compress", t)))
        subs = self._selections(t, clients, ratios, params)
        starts, broadcasts = self._starts(sent, subs, ratios)
        return SubmodelPlan(clients, starts, broadcasts, subs=subs, ratios=ratios,
                            seconds=seconds, sent=sent, lr=self.client_lr(t) or env.local.lr)

    def train(self, state: ServerState, plan: SubmodelPlan) -> list[ClientResults]:
        """Local training of the submodels, one engine call per stack of equal sizes.

        The results of stack j (``plan.subs``) hold the sliced updates D_{q,n} of its clients
        (no stored client state reaches the clients).
        """
        out = []
        for stack, rows, start, cast in zip(plan.subs.stacks, plan.subs.rows, plan.starts,
                                            plan.broadcast):
            res = self.train_clients(start, plan.clients[rows], state.round, broadcast=cast,
                                     start_index=np.arange(len(rows)))
            if self.hp.training == "mask":  # back to the sliced view the aggregation adds up
                res = ClientResults(res.clients, res.num_samples, res.num_steps, res.losses,
                                    stack.slice_rows(res.delta_stack()))
            out.append(res)
        return out

    @override
    def server_update(self, state: ServerState, plan: SubmodelPlan,
                      results: list[ClientResults],
                      delivery: Delivery | None = None) -> tuple[ServerState, SubmodelReport]:
        hp, params, d = self.hp, state.params, num_params(state.params)
        opt = self.opt_state(state)
        weights = [r.num_samples.astype(float) if hp.weighting == "samples" else np.ones(len(r))
                   for r in results]
        air, infos = self.env.uplink, []
        memory = self.client_store(state.client_states) if hp.memory else None
        new_params, usum, states, cov = coverage_aggregate(
            params, plan.subs, [r.delta_stack() for r in results], weights, plan.lr,
            memory=memory, clients=[r.clients for r in results],
            usum=opt.usum, num_clients=self.env.num_clients,
            uplink=None if air is None else self._over_the_air(state.round, plan.lr, infos))
        if not hp.memory:
            states = state.client_states
        mse, silent = AggregateInfo.merged(infos)
        loss, diag = ClientResults.concat([r.without_deltas() for r in results],
                                          order=plan.subs.order).diagnostics() \
            if results else client_diagnostics([])
        log = coverage_log(cov, params, plan.subs, d, self.groups)
        size = log.pop("mean_params")
        prev = float("inf") if opt.gamma_star is None else opt.gamma_star
        gamma_star = min(prev, log["coverage_min"]) if log["coverage_min"] > 0 else opt.gamma_star
        new = ServerState(new_params, state.round + 1, RAFedState(usum, gamma_star), states,
                          state.buffers, schedule_origin=state.schedule_origin)
        return new, SubmodelReport(
            uplink_params=size, train_loss=loss,
            clients=diag, latency_s=float(plan.seconds.max(initial=0.0)) if self._timed else None,
            **log, param_fraction=size / d,
            neuron_ratio=float(plan.ratios.mean()) if len(plan.ratios) else 0.0,
            clients_trained=len(plan.subs),
            compression_w2_sq=(relative_error(params, plan.sent) if hp.compression != "none"
                               else None),
            gamma_star=prev if gamma_star is None else gamma_star,
            memory_mb=client_store.nbytes(states) / 2**20 if hp.memory else None,
            aircomp_mse=mse, silent_clients=silent)

    @property
    def stacked_client_store(self) -> bool:  # type: ignore[override]
        """RAM-Fed keeps its memories u_n in a stacked client store (one row a client)."""
        return self.hp.memory

    @override
    def store_dtype(self) -> str:
        """RAM-Fed's memories are kept in ``memory_dtype``."""
        return self.hp.memory_dtype

    def _over_the_air(self, t: int, lr: float, infos: list[AggregateInfo]):
        """Σ_n w_n row_n of a ``(C, …)`` stack as received over the air in round t.

        A symbol is a gradient: RA-Fed's D_n/γ, RAM-Fed's Δ − u_n (already /γ). Each
        aggregation's info is appended to ``infos`` (the round's, for its report).
        """
        unit = 1.0 if self.hp.memory else lr

        def received(stack: Params, w: np.ndarray) -> Params:
            got, info = self.env.uplink.aggregate_stack(
                stack, w, self.env.seeds.generator("noise", t), unit=unit)
            infos.append(info)
            return {k: float(w.sum()) * v for k, v in got.items()}
        return received

    @property
    def _timed(self) -> bool:
        return self.hp.timing or self.hp.resources == "deadline"

    def _ratios(self, t: int, clients: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
        """r_n of the round's clients (0: sits out) and their times t_n(f_n) [s]."""
        ratios = self.base_ratio[clients].astype(float)
        if not self._timed:
            return ratios, np.zeros(len(clients))
        hp = self.hp
        rate = draw_fdma_rates(self.env.num_clients, clients, self.env.seeds.generator("resources", t),
                               antennas=hp.antennas, snr_db=hp.snr_db,
                               bandwidth_hz=hp.bandwidth_mhz * 1e6)
        full = full_model_seconds(d, self.steps[clients], self.cpu_hz[clients], rate,
                                  cycles_per_step=hp.cycles_per_step)
        if hp.resources == "deadline":  # the largest level whose submodel meets the deadline
            ratios = largest_level_in_time(full, self.levels, [self.fractions[r] for r in self.levels],
                                           deadline_s=hp.deadline_s, quantile=hp.deadline_quantile)
        return ratios, full * np.array([self.fractions.get(r, 0.0) for r in ratios])

    def _selections(self, t: int, clients: np.ndarray, ratios: np.ndarray,
                    params: Params) -> Submodels:
        """The round's selections, its clients in stacks of equal submodel sizes."""
        hp, seeds = self.hp, self.env.seeds
        if hp.policy == "static":  # one fixed random order per client: its first k units
            every = np.full(self.env.num_clients, 1.0)
            every[clients] = ratios
            levels = draw_levels("random", self.groups, every, t, seeds.generator("masks", 0),
                                 among=clients)
        else:
            levels = draw_levels(hp.policy, self.groups, ratios, t, seeds.generator("masks", t),
                                 gamma_min=hp.gamma_min)
        return Submodels(tuple(SubmodelStack(self.groups, sel, params) for _, sel in levels),
                         tuple(rows for rows, _ in levels))

    def _starts(self, sent: Params, subs: Submodels,
                ratios: np.ndarray) -> tuple[list[RowStack], list[RowStack]]:
        """Each stack's starts C(θ) ⊙ m and what its rule needs (masks, 1/r, allowed widths)."""
        levels = np.asarray(self.levels, float)
        device = next(iter(sent.values())).device
        starts, extras = [], []
        for stack, rows in zip(subs.stacks, subs.rows):
            r = ratios[rows]
            rate = {"inv": torch.as_tensor(1.0 / r, dtype=torch.float32, device=device),
                    "allowed": torch.as_tensor((levels[None, :] <= r[:, None] + 1e-12).sum(1),
                                               device=device)}
            if self.hp.training == "mask":
                mask = stack.masks(sent)
                starts.append(RowStack({k: v * mask[k] for k, v in sent.items()}))
                extras.append(RowStack({"mask": mask, "rate": rate}))
            else:
                starts.append(RowStack(stack.slice(sent)))
                extras.append(RowStack({"rate": rate}))
        return starts, extras
