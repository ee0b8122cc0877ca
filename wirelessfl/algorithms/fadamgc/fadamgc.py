"""FAdamGC: federated Adam with gradient correction before the moments (``docs/papers/fadamgc.md``).

One local rule, :class:`TrackedAdam`, gives the three Adam-type methods of the paper; they
differ in where the drift correction c_i = y − y_i enters (§2.2, §3.1–3.2):

- ``pre`` (FAdamGC, Algorithm 1): ĝ = g + c_i feeds both moments, Δ = m / (√v̂ + ε),
  x ← x − η_l Δ; a tracked client's new y_i is the mean of its raw gradients (§2.3);
- ``post`` (FA-NT, Algorithm 2): the raw g feeds the moments, x ← x − η_l (Δ + c_i); a
  tracked client's new y_i is the mean of its Δ (SCAFFOLD option II, the same quantity);
- ``none`` (LocalAdam, §3.1): Algorithm 1 without any correction (no y).

Every method: m restarts at 0 each round, v_i persists per client (the EMA, not v̂), v̂ is a
running maximum within the round restarted from v_i, no bias correction, ε outside the root
(0/0 := 0 when ε = 0), the element-wise formulas also at β₂ = 0 [default, §2.5]. The server
samples S clients and, among them, S̃ tracked ones (``tracked``, S/2 by default for images,
§2.6); it sends (x, y), averages the models uniformly with η_g (its server optimiser), and
sets y ← y + (1/n) Σ_{S̃} (y_i⁺ − y_i), so y = mean_i y_i always (§2.3). y_i and v_i live in
the client store (CPU). Uplink per client 1 + S̃/S vectors, downlink 2 (LocalAdam 1 and 1).

Options: ``warm_start`` (§7 item 1; default off, y_i = y = 0): before round 1 every client
takes one minibatch gradient at x^(1) (its Δ for FA-NT), y_i is set to it and y to their mean;
this exchange happens once and is not timed. ``normaliser: norm`` is the analysis variant of
§2.5, Δ = m / (‖√v̂‖ + ε) with one scalar per client (so ‖Δ‖ ≤ 1 at β₂ = 0); the default
``elementwise`` is Algorithm 1. ``adam: library`` (LocalAdam only, §7 item 3) replaces the
local rule by a library Adam: bias-corrected, no running maximum, m and v re-created every
round (nothing stored per client).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from typing_extensions import override

from channels.validation import as_float, as_int
from wirelessfl.algorithms.base import Environment, RoundReport, ServerState
from wirelessfl.algorithms.fadamgc.local import AdamClientState, TrackedAdam
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
from wirelessfl.engine import client_store
from wirelessfl.engine.batch import ClientResults
from wirelessfl.engine.client import ClientResult, LocalSGD
from wirelessfl.errors import ConfigError
from wirelessfl.models.base import Params
from wirelessfl.net.digital import Delivery
from wirelessfl.server.optimizers import ServerOptState
from wirelessfl.server.state import AlgorithmState, RoundPlan

CORRECTIONS = ("pre", "post", "none")
NORMALISERS = ("elementwise", "norm")
ADAMS = ("algorithm1", "library")


@dataclass(frozen=True)
class FAdamGCHParams(FedAvgHParams):
    """FAdamGC: local Adam with global gradient correction (``docs/papers/fadamgc.md`` §2.6).

    ``server_lr`` is η_g, ``local.lr`` η_l.

    Attributes
    ----------
    correction : str
        ``pre`` (FAdamGC), ``post`` (FA-NT) or ``none`` (LocalAdam).
    betas, eps : tuple of float, float
        (β1, β2) and ε of the local Adam (0.9, 0.99, 1e-8; β₂ = 0 allowed).
    tracked : int or None
        S̃, tracked clients per round (None: half the round's clients, at least one).
    state_dtype : str
        dtype of the stored y_i and v_i (``float32``, ``float16`` or ``bfloat16``).
    warm_start : bool
        y_i^(1) from one minibatch gradient at x^(1) instead of 0 (§7 item 1).
    normaliser : str
        ``elementwise`` (Algorithm 1) or ``norm`` (Δ = m / (‖√v̂‖ + ε), §2.5).
    adam : str
        ``algorithm1`` or, for LocalAdam, ``library`` (bias-corrected Adam, §7 item 3).
    """

    weighting: str = "uniform"
    correction: str = "pre"
    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    tracked: int | None = None
    state_dtype: str = "float32"
    warm_start: bool = False
    normaliser: str = "elementwise"
    adam: str = "algorithm1"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.correction not in CORRECTIONS:
            raise ValueError(f"`correction` must be one of {', '.join(CORRECTIONS)}, got "
                             f"{self.correction!r}")
        if len(self.betas) != 2:
            raise ValueError(f"`betas` must be two numbers, got {self.betas}")
        for b in self.betas:
            as_float("betas", b, lo=0, hi=1, hi_open=True)
        as_float("eps", self.eps, lo=0, hi=1)
        if self.tracked is not None:
            as_int("tracked", self.tracked, lo=0, hi=10**6)
            if self.clients_per_round is not None and self.tracked > self.clients_per_round:
                raise ConfigError(f"`tracked` S~ = {self.tracked} > clients_per_round S = "
                                  f"{self.clients_per_round}: S~ is a subset of the round's "
                                  "clients; lower tracked")
        client_store.store({}, self.state_dtype)
        if self.normaliser not in NORMALISERS:
            raise ValueError(f"`normaliser` must be one of {', '.join(NORMALISERS)}, got "
                             f"{self.normaliser!r}")
        if self.adam not in ADAMS:
            raise ValueError(f"`adam` must be one of {', '.join(ADAMS)}, got {self.adam!r}")
        if self.adam == "library" and (self.correction != "none" or self.warm_start
                                       or self.normaliser != "elementwise"):
            raise ConfigError("`adam: library` is LocalAdam's option (§7 item 3): use it with "
                              "correction none, without warm_start and the norm normaliser")
        if self.warm_start and self.correction == "none":
            raise ConfigError("`warm_start` initialises y_i; LocalAdam (correction none) has no y")


@dataclass(frozen=True)
class FANTHParams(FAdamGCHParams):
    """FA-NT (``docs/papers/fadamgc.md`` §3.2): the correction after the moments."""

    correction: str = "post"


@dataclass(frozen=True)
class LocalAdamHParams(FAdamGCHParams):
    """LocalAdam (``docs/papers/fadamgc.md`` §3.1): Algorithm 1 without the correction."""

    correction: str = "none"


@dataclass(frozen=True)
class FAdamGCState(AlgorithmState):
    """y = mean_i y_i (None: zero, and always for LocalAdam) and the server optimiser's state."""

    y: Params | None = None
    server: ServerOptState | None = None


class FAdamGC(FedAvg):
    """FAdamGC, FA-NT or LocalAdam (``correction``) over FedAvg's sampling and server step."""

    uses_uplink = True  # its server phase aggregates through the uplink (combine)

    state_type = FAdamGCState

    def __init__(self, env: Environment, hp: FAdamGCHParams = FAdamGCHParams()) -> None:
        super().__init__(env, hp)
        self.hp: FAdamGCHParams = hp
        if hp.tracked is not None and hp.tracked > env.num_clients:
            raise ConfigError(f"`tracked` S~ = {hp.tracked} > the {env.num_clients} clients: S~ is "
                              "a subset of the round's clients; lower tracked")
        if hp.adam == "library":
            self.update = LocalSGD(env.model, dataclasses.replace(
                env.local, optimizer="adam", betas=hp.betas, eps=max(hp.eps, 1e-38)))
        else:
            self.update = TrackedAdam(env.model, env.local, hp.correction, hp.betas, hp.eps,
                                      hp.state_dtype, hp.normaliser)

    def warm_start(self, state: ServerState) -> ServerState:
        """§7 item 1 option: every client's y_i^(1) from one minibatch at x^(1), y = mean.

        Each client takes one step of its rule from x^(1) with its own batch order (stage 1
        of round 0); only the tracked quantity is kept (the raw gradient for FAdamGC, the
        first Δ for FA-NT), not the moments.
        """
        clients = np.arange(self.env.num_clients)
        rule = TrackedAdam(self.env.model, dataclasses.replace(self.env.local, steps=1),
                           self.hp.correction, self.hp.betas, self.hp.eps, self.hp.state_dtype,
                           self.hp.normaliser)
        results = self.train_clients([state.params] * len(clients), clients, 0, stage=1,
                                     broadcast={"tracked": set(clients.tolist())},
                                     buffers=state.buffers, update=rule)
        zeros = {k: torch.zeros_like(v) for k, v in state.params.items()}
        got = client_store.gathered(results.states, zeros, "y")  # y_i of every client, or zeros
        y = {k: (got[k].sum(0) if got is not None else zeros[k]) / self.env.num_clients
             for k in zeros}
        kept = [AdamClientState(y=s.y) if s is not None and s.y is not None else None
                for s in (results.states or [])]  # the tracked quantity only, not the moments
        store = self.client_store(state.client_states).updated(results.clients, kept)
        return dataclasses.replace(state, client_states=store,
                                   opt_state=dataclasses.replace(self.opt_state(state), y=y))

    def _tracked(self, clients: np.ndarray, t: int) -> set[int]:
        """S̃: a uniform sample without replacement of the round's clients (§7 item 14)."""
        if self.hp.correction == "none":
            return set()
        k = max(1, len(clients) // 2) if self.hp.tracked is None else self.hp.tracked
        rng = self.env.seeds.generator("tracking", t)
        return {int(c) for c in rng.choice(clients, min(k, len(clients)), replace=False)}

    @override
    def apply(self, state: ServerState) -> tuple[ServerState, RoundReport]:
        if self.hp.warm_start and state.round == 0 and self.opt_state(state).y is None:
            state = self.warm_start(state)
        return super().apply(state)

    def broadcast(self, state: ServerState, clients: np.ndarray) -> dict[str, Any]:
        """Y and S̃, the round's clients whose y_i is refreshed (§2.6)."""
        y = self.opt_state(state).y or {k: torch.zeros_like(v) for k, v in state.params.items()}
        return {"y": y, "tracked": frozenset(self._tracked(clients, state.round))}

    #: y ← y + Σ_{S̃} Δy_i counts the round's S̃ only; a late Δy_i would leave y behind.
    takes_late_uploads = False
    client_state_type = AdamClientState
    stacked_client_store = True  # v_i and y_i: one stacked tensor per parameter each

    def upload_vectors(self, plan: RoundPlan, result: ClientResult) -> float:
        """Δ_i, and Δy_i for a client of S̃."""
        return 2.0 if result.client in plan.broadcast["tracked"] else 1.0

    folds_deltas = True  # server_update reads the Δ_i only through combine

    @override
    def second_vector(self) -> str | None:
        return "tracking-term changes" if self.hp.correction != "none" else None

    def _tracked_changes(self, state: ServerState, results: ClientResults,
                         tracked: frozenset[int], zeros: Params
                         ) -> tuple[Params | None, np.ndarray]:
        """Δy_i = y_i⁺ − y_i of the round's S̃ clients, stacked (None: none), and their rows.

        The rows are S̃'s positions among the round's results (over the air, each sends its
        Δy_i over its own channel of the round).

        A client without a stored y_i had y_i = 0. One gather per parameter of the new and
        of the stored y_i, not a tree per client.
        """
        mine = np.isin(results.clients, list(tracked))
        if not mine.any():
            return None, np.zeros(0, np.int64)
        rows = np.flatnonzero(mine)
        now = client_store.gathered(client_store.take_rows(results.states, rows), zeros, "y")
        before = client_store.gather_ids(state.client_states, results.clients[rows], zeros, "y")
        now = now if now is not None else {k: v.expand(int(mine.sum()), *v.shape)
                                           for k, v in zeros.items()}
        if before is not None:
            now = {k: now[k] - before[k] for k in zeros}
        return now, rows

    @override
    def server_update(self, state: ServerState, plan: RoundPlan,
                      results: list[ClientResult],
                      delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        update, _, info = self.combine(state, results)
        params, server = self.server_opt.step(state.params, update, self.opt_state(state).server)
        y, tracked = plan.broadcast["y"], plan.broadcast["tracked"]
        zeros = {k: torch.zeros_like(v) for k, v in state.params.items()}
        infos = [info]
        if tracked:  # y ← y + (1/n) Σ_{S̃} (y_i⁺ − y_i)
            dy, rows = self._tracked_changes(state, ClientResults.from_list(results), tracked,
                                             zeros)
            if dy is None:
                pass
            elif self.aggregator.exact:  # (under dp: clipped and noised)
                got = self.release_second(state, dy, np.full(len(rows), 1.0 / self.env.num_clients))
                y = {k: y[k] + got[k] for k in y}
            else:  # the y_i changes go up over the air too, over S̃'s own channels
                got, more = self.uplink_sum(state, dy, np.full(len(rows), 1.0 / self.env.num_clients),
                                            rows=rows, clients=len(results),
                                            ids=ClientResults.from_list(results).clients[rows])
                infos.append(more)
                y = {k: y[k] + got[k] for k in y}
        new = FAdamGCState(y if self.hp.correction != "none" else None, server)
        share = len(tracked) / max(1, len(results))
        return self.finish_round(state, params, new, results, infos=infos, vectors_up=1 + share,
                                 vectors_down=1 if self.hp.correction == "none" else 2)
