"""RA-Fed and RAM-Fed: submodels from arbitrarily assigned neurons (``specs/rafed.md``).

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
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from channels.rates import BANDWIDTH_HZ, tdma_rate
from channels.rayleigh import simo_rayleigh
from channels.units import db_to_lin
from channels.validation import as_float, as_int
from wirelessfl.algorithms.base import (
    Environment,
    FederatedAlgorithm,
    RoundReport,
    ServerState,
    client_diagnostics,
    num_params,
)
from wirelessfl.algorithms.rafed.masks import (
    POLICIES,
    draw,
    kept_units,
    parameter_fraction,
    ratio_for_fraction,
)
from wirelessfl.engine import client_store
from wirelessfl.engine.client import ClientResult, LocalHParams, LocalSGD, steps_per_call
from wirelessfl.models import noise
from wirelessfl.models.base import FLModel, Params, UnitGroup
from wirelessfl.net.compression import OPERATORS, compress, relative_error
from wirelessfl.net.resources import by_half, check_scenario, draw_cpu
from wirelessfl.server.sampling import AllClients, ClientSampler, UniformSampler
from wirelessfl.server.submodel import Submodel


@dataclass(frozen=True)
class RAFedHParams:
    """Submodel training and its aggregation (RA-Fed's defaults).

    Attributes
    ----------
    ratios : tuple of float
        Neuron-ratio levels, spread evenly over the clients (client n gets
        ``ratios[n mod L]``); with ``resources: deadline`` the levels a client may pick from.
    fraction : float or None
        Instead of ``ratios``: every client keeps about this parameter fraction (the
        abstract's "50% parameters"); the neuron ratio is solved from the model.
    width : str
        ``own`` (each client its level) or ``min`` (everyone the smallest level: FedAvg-small,
        Federated Dropout).
    policy : str
        Mask policy, one of :data:`~wirelessfl.algorithms.rafed.masks.POLICIES`.
    gamma_min : int
        Γ_min of ``coverage_aware``.
    memory : bool
        RAM-Fed's aggregation with memory (False: RA-Fed).
    memory_dtype : str
        ``float32`` or ``float16`` (halves the N × d store).
    scaler : bool
        HeteroFL's 1/r activation scaler in local training (the inputs of every pruned
        layer's consumer scaled by 1/r_n; the full model evaluates unscaled).
    step_widths : bool
        FjORD's ordered dropout: every local step trains the prefix of a width p ≤ r_n drawn
        uniformly from the levels.
    compression : str
        Operator C: ``none``, ``quantize`` (``bits``) or ``topk`` (``keep``).
    training : str
        ``extract`` (sliced submodels) or ``mask`` (full model, masked).
    weighting : str
        ``uniform`` (the analysed rule) or ``samples`` (per-coordinate data-size weights).
    clients_per_round : int or None
        Clients sampled per round (None: all N, as the analysis assumes).
    resources, deadline_s, deadline_quantile, timing, antennas, snr_db, bandwidth_mhz,
    cpu_ghz, cycles_per_step :
        The network-derived ratio policy and round timing (module docstring).
    """

    ratios: tuple[float, ...] = (1.0,)
    fraction: float | None = None
    width: str = "own"
    policy: str = "random"
    gamma_min: int = 1
    memory: bool = False
    memory_dtype: str = "float32"
    scaler: bool = False
    step_widths: bool = False
    compression: str = "none"
    bits: int = 8
    keep: float = 0.1
    training: str = "extract"
    weighting: str = "uniform"
    clients_per_round: int | None = None
    resources: str = "fixed"
    deadline_s: float | None = None
    deadline_quantile: float = 0.5
    timing: bool = False
    antennas: int = 1
    snr_db: tuple[float, float] = (10.0, 20.0)
    bandwidth_mhz: float = BANDWIDTH_HZ / 1e6
    cpu_ghz: tuple[tuple[float, float], tuple[float, float]] = ((1.0, 2.0), (2.0, 4.0))
    cycles_per_step: float = 1e7

    def __post_init__(self) -> None:
        if not self.ratios or len(self.ratios) > 64:
            raise ValueError("`ratios` must list 1 to 64 neuron-ratio levels")
        for r in self.ratios:
            as_float("ratios", r, lo=0, hi=1, lo_open=True)
        if self.fraction is not None:
            as_float("fraction", self.fraction, lo=0, hi=1, lo_open=True)
        for key, value, allowed in (("width", self.width, ("own", "min")),
                                    ("policy", self.policy, POLICIES),
                                    ("memory_dtype", self.memory_dtype, tuple(client_store.STORE_DTYPES)),
                                    ("compression", self.compression, OPERATORS),
                                    ("training", self.training, ("extract", "mask")),
                                    ("weighting", self.weighting, ("uniform", "samples")),
                                    ("resources", self.resources, ("fixed", "deadline"))):
            if value not in allowed:
                raise ValueError(f"`{key}` must be one of {', '.join(allowed)}, got {value!r}")
        as_int("gamma_min", self.gamma_min, lo=1, hi=10**6)
        as_int("bits", self.bits, lo=1, hi=24)
        as_float("keep", self.keep, lo=0, hi=1, lo_open=True)
        if self.clients_per_round is not None:
            as_int("clients_per_round", self.clients_per_round, lo=1, hi=10**6)
        if self.deadline_s is not None:
            as_float("deadline_s", self.deadline_s, lo=0, hi=1e9, lo_open=True)
        as_float("deadline_quantile", self.deadline_quantile, lo=0, hi=1)
        as_int("antennas", self.antennas, lo=1, hi=4096)
        check_scenario(self.snr_db, self.cpu_ghz)
        as_float("bandwidth_mhz", self.bandwidth_mhz, lo=0, hi=1e6, lo_open=True)
        as_float("cycles_per_step", self.cycles_per_step, lo=0, hi=1e15)
        if self.step_widths and self.policy != "prefix":
            raise ValueError("`step_widths` (FjORD's ordered dropout) needs policy: prefix")


@dataclass(frozen=True)
class RAMFedHParams(RAFedHParams):
    """RAM-Fed (§2.3): RA-Fed's masks with the per-client memory."""

    memory: bool = True


@dataclass(frozen=True)
class FedAvgSmallHParams(RAFedHParams):
    """FedAvg-small (§3 item 2): everyone trains the prefix submodel of the smallest level."""

    width: str = "min"
    policy: str = "prefix"


@dataclass(frozen=True)
class HeteroFLHParams(RAFedHParams):
    """HeteroFL (Diao et al. 2021, §3 item 3): nested prefixes and the 1/r scaler.

    Static BN does not arise: the submodel zoo has no BatchNorm (GroupNorm or no norm).
    """

    policy: str = "prefix"
    scaler: bool = True


@dataclass(frozen=True)
class FedDropoutHParams(RAFedHParams):
    """Federated Dropout (Caldas et al. 2018, §3 item 4): one keep ratio for all.

    The keep ratio is the smallest level (what every client affords), with fresh random
    units per client and round.
    """

    width: str = "min"
    policy: str = "random"


@dataclass(frozen=True)
class FedRolexHParams(RAFedHParams):
    """FedRolex (Alam et al. 2022, §3 item 5): a rolling window advancing one unit a round."""

    policy: str = "rolling"


@dataclass(frozen=True)
class FjORDHParams(RAFedHParams):
    """FjORD (Horváth et al. 2021, §3 item 6): ordered dropout with a width per local step."""

    policy: str = "prefix"
    step_widths: bool = True


class SubmodelSGD(LocalSGD):
    """Local SGD on a submodel: masked gradients, HeteroFL's scaler, FjORD's step widths.

    Everything is elementwise on the client's own tensors (its ``context``), so the loop and
    the batched engine run the same rule; FjORD's width draw comes from the client's noise
    stream (:mod:`wirelessfl.models.noise`), the same in both engines.
    """

    def __init__(self, model: FLModel, hp: LocalHParams, groups: tuple[UnitGroup, ...],
                 scaler: bool, levels: tuple[float, ...] | None) -> None:
        super().__init__(model, hp)
        self.groups, self.scaler, self.levels = groups, scaler, levels
        self.consumers = {s.param for g in groups for s in g.slices if s.dim == 1}
        #: units each level keeps, per group (FjORD's per-step widths)
        self.kept = {g.name: [kept_units(g, r) for r in levels] for g in groups} if levels else {}

    def context(self, task):  # noqa: D102
        return task.broadcast or {}

    def objective(self, params, buffers, start, x, y, w, ctx):  # noqa: D102
        if self.scaler:  # scaling a layer's inputs by 1/r = scaling the pruned outputs
            params = {k: v * ctx["rate"]["inv"] if k in self.consumers else v
                      for k, v in params.items()}
        if self.levels is not None:
            params = self._ordered_dropout(params, ctx["rate"]["allowed"])
        return super().objective(params, buffers, start, x, y, w, ctx)

    def correct(self, grads, params, start, ctx):  # noqa: D102
        if "mask" not in ctx:
            return grads
        return {k: g * ctx["mask"][k] for k, g in grads.items()}

    def _ordered_dropout(self, params: Params, allowed: torch.Tensor) -> Params:
        """The prefix of a width p drawn from the ``allowed`` levels (≤ r_n), this step."""
        u = noise.uniform((1,), allowed.device)[0]
        pick = torch.clamp((u * allowed).floor(), max=allowed - 1).long()
        out = dict(params)
        for g in self.groups:
            keep = torch.tensor(self.kept[g.name], device=allowed.device)
            for s in g.slices:
                v = out[s.param]
                units = v.shape[s.dim] // (s.width * s.blocks)
                line = (torch.arange(units, device=v.device) < keep[pick]).to(v.dtype)
                line = line.repeat_interleave(s.width).repeat(s.blocks)
                view = [1] * v.dim()
                view[s.dim] = -1
                out[s.param] = v * line.view(view)
        return out


class RAFed(FederatedAlgorithm):
    """RA-Fed / RAM-Fed and the submodel baselines (module docstring)."""

    def __init__(self, env: Environment, hp: RAFedHParams = RAFedHParams()) -> None:
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

    # ------------------------------------------------------------------ a round
    def apply(self, state: ServerState) -> tuple[ServerState, RoundReport]:  # noqa: D102
        t, hp, env = state.round, self.hp, self.env
        params, d = state.params, num_params(state.params)
        clients = np.asarray(self.sampler.sample(env.population.active(t),
                                                 env.seeds.generator("sampling", t)))
        ratios, seconds = self._ratios(t, clients, d)
        clients, ratios, seconds = clients[ratios > 0], ratios[ratios > 0], seconds[ratios > 0]
        sent = compress(params, hp.compression, bits=hp.bits, keep=hp.keep,
                        gen=torch.Generator().manual_seed(env.seeds.int_seed("compress", t)))
        subs = self._selections(t, clients, ratios, params)
        lr = self.client_lr(t) or env.local.lr
        starts, broadcasts = self._starts(sent, subs, ratios)
        results = self.train_clients(starts, clients, t, broadcast=broadcasts)
        if hp.training == "mask":  # back to the sliced view the aggregation adds up
            results = [_sliced(r, s) for r, s in zip(results, subs)]
        weights = (np.array([r.num_samples for r in results], float)
                   if hp.weighting == "samples" else np.ones(len(results)))
        new_params, opt_state, states, cov = self._aggregate(state, subs, results, weights, lr)
        loss, diag = client_diagnostics(results)
        sliced = [s.slice(params) for s in subs]   # each client's θ_q ⊙ m, for sizes and ŵ₁²
        sizes = np.array([num_params(p) for p in sliced], float)
        extra = _coverage_log(cov, params, sliced, subs, d, self.groups) | {
            "param_fraction": float(sizes.mean() / d) if len(sizes) else 0.0,
            "neuron_ratio": float(ratios.mean()) if len(ratios) else 0.0,
            "clients_trained": len(results)}
        if hp.compression != "none":
            extra["compression_w2_sq"] = relative_error(params, sent)
        prev = (state.opt_state or {}).get("gamma_star", float("inf"))
        if extra["coverage_min"] > 0:
            opt_state["gamma_star"] = min(prev, extra["coverage_min"])
        extra["gamma_star"] = opt_state.get("gamma_star", prev)
        if hp.memory:
            extra["memory_mb"] = client_store.nbytes(states) / 2**20
        new = ServerState(new_params, t + 1, opt_state, states, state.buffers)
        up = float(sizes.mean()) if len(sizes) else 0.0
        return new, RoundReport(uplink_params=up, train_loss=loss, clients=diag, extra=extra,
                                latency_s=float(seconds.max(initial=0.0)) if self._timed else None)

    @property
    def _timed(self) -> bool:
        return self.hp.timing or self.hp.resources == "deadline"

    def _ratios(self, t: int, clients: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
        """r_n of the round's clients (0: sits out) and their times t_n(f_n) [s]."""
        ratios = self.base_ratio[clients].astype(float)
        if not self._timed:
            return ratios, np.zeros(len(clients))
        hp, n = self.hp, self.env.num_clients
        rng = self.env.seeds.generator("resources", t)
        h = simo_rayleigh((), n, hp.antennas, rng)
        snr = db_to_lin(by_half(n, *hp.snr_db))
        rate = tdma_rate(h, snr, hp.bandwidth_mhz * 1e6 / max(len(clients), 1))[clients]
        per_param = (self.steps[clients] * hp.cycles_per_step / self.cpu_hz[clients] / d
                     + 32.0 / rate)             # seconds per parameter of the submodel
        full = per_param * d
        if hp.resources == "deadline":  # the largest level whose submodel meets the deadline
            deadline = hp.deadline_s if hp.deadline_s is not None else \
                float(np.quantile(full, hp.deadline_quantile)) if len(full) else 0.0
            levels = np.array(self.levels)
            fits = full[:, None] * np.array([self.fractions[r] for r in self.levels]) \
                <= deadline * (1 + 1e-12)
            ratios = np.where(fits, levels, 0.0).max(axis=1, initial=0.0)
        return ratios, full * np.array([self.fractions.get(r, 0.0) for r in ratios])

    def _selections(self, t: int, clients: np.ndarray, ratios: np.ndarray,
                    params: Params) -> list[Submodel]:
        hp, seeds = self.hp, self.env.seeds
        if hp.policy == "static":  # one fixed random order per client: its first k units
            every = np.full(self.env.num_clients, 1.0)
            every[clients] = ratios
            sels = draw("random", self.groups, every, t, seeds.generator("masks", 0))
            sels = [sels[c] for c in clients]
        else:
            sels = draw(hp.policy, self.groups, ratios, t, seeds.generator("masks", t),
                        gamma_min=hp.gamma_min)
        return [Submodel(self.groups, s, params) for s in sels]

    def _starts(self, sent: Params, subs: list[Submodel],
                ratios: np.ndarray) -> tuple[list[Params], list[dict]]:
        """Each client's start C(θ) ⊙ m and what its rule needs (mask, 1/r, allowed widths)."""
        hp, starts, extras = self.hp, [], []
        for sub, r in zip(subs, ratios):
            rate = {"inv": torch.tensor(1.0 / r),
                    "allowed": torch.tensor(sum(lv <= r + 1e-12 for lv in self.levels))}
            if hp.training == "mask":
                mask = sub.mask(sent)
                starts.append({k: v * mask[k] for k, v in sent.items()})
                extras.append({"mask": mask, "rate": rate})
            else:
                starts.append(sub.slice(sent))
                extras.append({"rate": rate})
        return starts, extras

    # ------------------------------------------------------------------ eqs. of §2.2 / §2.3
    def _aggregate(self, state: ServerState, subs: list[Submodel], results: list,
                   weights: np.ndarray, lr: float) -> tuple[Params, dict, dict, Params]:
        """θ_{q+1}, the new algorithm state, the new memories and the coverage Γ_q."""
        hp, params = self.hp, state.params
        acc = {k: torch.zeros_like(v) for k, v in params.items()}
        cov = {k: torch.zeros_like(v) for k, v in params.items()}
        opt = dict(state.opt_state or {})
        states = dict(state.client_states)
        if hp.memory:  # Σ_n u_n (float32, CPU) and this round's change of it
            usum = opt.get("usum") or {k: torch.zeros(v.shape) for k, v in params.items()}
            dsum = {k: torch.zeros(v.shape) for k, v in params.items()}
            dtype = client_store.STORE_DTYPES[hp.memory_dtype]
        for sub, res, w in zip(subs, results, weights):
            mem = states.get(res.client) if hp.memory else None
            new_mem = {}
            for k in params:
                idx = sub.index(k) if k in sub.dims else (slice(None),)
                part = res.delta[k]
                if hp.memory:  # Δ = D/γ against u_n on the coordinates just trained
                    stored = (mem[k].clone() if mem is not None
                              else torch.zeros(params[k].shape, dtype=dtype))
                    old = stored[idx].float()    # (a view where idx is basic: used first)
                    fresh = (part / lr).to("cpu", torch.float32)
                    acc[k][idx] += w * (fresh - old).to(acc[k].device)
                    kept = fresh.to(stored.dtype)  # what the store holds (float16: rounded)
                    dsum[k][idx] += kept.float() - old
                    stored[idx] = kept
                    new_mem[k] = stored
                else:
                    acc[k][idx] += w * part
                cov[k][idx] += w
            if hp.memory:
                states[res.client] = new_mem
        covered = {k: c.clamp(min=1e-30) for k, c in cov.items()}
        if not hp.memory:
            new = {k: params[k] - acc[k] / covered[k] for k in params}
            return new, opt, states, cov
        n = self.env.num_clients  # v_q = ū + corr, ū over all N clients (old memory)
        new = {k: params[k] - lr * (usum[k].to(params[k].device) / n + acc[k] / covered[k])
               for k in params}
        opt["usum"] = {k: usum[k] + dsum[k] for k in params}
        return new, opt, states, cov


def _sliced(result: ClientResult, sub: Submodel) -> ClientResult:
    return replace(result, delta=sub.slice(result.delta))


def _coverage_log(cov: Params, params: Params, sliced: list[Params], subs: list[Submodel],
                  d: int, groups: tuple[UnitGroup, ...]) -> dict[str, Any]:
    """Γ_q statistics, |S_q|/d and the mean submodel-noise ratio ŵ₁² (§2.1.3).

    ``coverage_min`` is over covered coordinates; ``unit_coverage_min`` over the units of
    every prunable layer (what ``coverage_aware`` guarantees: a weight between two pruned
    layers is covered only by a client holding both of its units, so coordinate coverage
    can stay below Γ_min when clients hold few units).
    """
    units = [torch.bincount(torch.cat([s.selection[g.name] for s in subs]), minlength=g.size)
             for g in groups] if subs else []
    flat = torch.cat([c.reshape(-1) for c in cov.values()])
    covered = flat > 0
    norm = sum(float(v.pow(2).sum()) for v in params.values())
    noise_ratios = [1.0 - sum(float(v.pow(2).sum()) for v in p.values()) / norm if norm > 0
                    else 0.0 for p in sliced]
    return {"coverage_min": float(flat[covered].min()) if covered.any() else 0.0,
            "unit_coverage_min": int(min(int(u.min()) for u in units)) if units else 0,
            "coverage_mean": float(flat[covered].mean()) if covered.any() else 0.0,
            "covered_fraction": float(covered.sum()) / d,
            "noise_ratio": float(np.mean(noise_ratios)) if noise_ratios else 0.0}
