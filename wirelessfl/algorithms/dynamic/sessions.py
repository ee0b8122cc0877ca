"""Algorithm 1 of the dynamic-clients paper at session starts (``docs/papers/dynamic_clients.md`` §2.6).

:class:`SessionStarts` is called by the run loop at the first round of every session after
the first. It stores the finished session's final model (the pilot models until session P,
then Q1 with the session's fingerprint), resets the algorithm's state and restarts its
schedule (:meth:`~wirelessfl.algorithms.base.FederatedAlgorithm.start_session`), runs the
fingerprint rounds of the proposed rule and returns the state the session starts from:

- ``none`` (default): only the reset — the model trains on across sessions;
- session P: the random initial model w_rand for every other rule (§2.6 line 8, [CODE]);
- session s ≥ P + 1: ``previous`` keeps the model, ``recovery`` takes w_rand, ``average``
  the mean of Q1, ``proposed``/``random_pilot`` the similarity-weighted blend of eq. (5).

Fingerprint rounds (§2.3) are V rounds of the *same* algorithm, built afresh on a copy of the
environment (fresh state, constant lr η₀/2, ``fingerprint_steps`` steps of batch
``fingerprint_batch``, the session's clients, their own random streams), from w_Pilot (or
w_rand for ``random_pilot``); they never touch the real model, its state or its streams,
and are not counted as rounds. Everything stored lives on the CPU and is checkpointed, so a
resumed run gives the numbers of an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from wirelessfl import registry
from wirelessfl.algorithms.base import FederatedAlgorithm, ServerState
from wirelessfl.algorithms.dynamic.initial_model import (
    InitialModelConfig,
    SessionStore,
    cpu_copy,
    fingerprint,
    pilot_model,
)
from wirelessfl.engine.client import LocalSGD
from wirelessfl.models.base import Params
from wirelessfl.rng import Seeds
from wirelessfl.server.population import Static


class SessionStarts:
    """The initial-model rule of a run (see the module docstring)."""

    def __init__(self, cfg: InitialModelConfig, algorithm: FederatedAlgorithm,
                 algorithm_cfg: Any, w_rand: ServerState) -> None:
        self.cfg, self.algorithm, self.algorithm_cfg = cfg, algorithm, algorithm_cfg
        self.w_rand = cpu_copy({**w_rand.params, **w_rand.buffers})
        self.pilot_finals: list[Params] = []
        self.w_pilot: Params | None = None
        self.store = SessionStore(cfg.history)
        self.current_fp: Params | None = None
        self.last_weights: list[float] | None = None

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Plain data for the run's checkpoint."""
        return {"pilot_finals": self.pilot_finals, "w_pilot": self.w_pilot,
                "models": self.store.models, "fingerprints": self.store.fingerprints,
                "current_fp": self.current_fp, "last_weights": self.last_weights}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (checked shallowly; tensors are the checkpoint's)."""
        if not isinstance(d, dict) or set(d) != {"pilot_finals", "w_pilot", "models",
                                                 "fingerprints", "current_fp",
                                                 "last_weights"}:
            raise ValueError("--resume: the checkpoint's session store is damaged; start the "
                             "run again with another --out")
        self.pilot_finals, self.w_pilot = list(d["pilot_finals"]), d["w_pilot"]
        self.store.models, self.store.fingerprints = list(d["models"]), list(d["fingerprints"])
        self.current_fp, self.last_weights = d["current_fp"], d["last_weights"]

    def take_weights(self) -> list[float] | None:
        """Eq. (5)'s α of the last session start, once (None when already taken or none)."""
        weights, self.last_weights = self.last_weights, None
        return weights

    # ------------------------------------------------------------------ the hook
    def __call__(self, state: ServerState, t: int, session: int) -> ServerState:
        """State to start session ``session`` (first round ``t``) from."""
        cfg, P = self.cfg, self.cfg.pilot_sessions
        if cfg.rule == "none":
            return self.algorithm.start_session(state, t)
        final = {**state.params, **state.buffers}  # the finished session's model
        finished = session - 1
        if cfg.fingerprinted and finished < P:
            self.pilot_finals.append(cpu_copy(final))
            if len(self.pilot_finals) == P:  # eq. (3); the pilot models are dropped
                self.w_pilot, self.pilot_finals = pilot_model(self.pilot_finals), []
        elif finished >= P and cfg.rule in ("average", "proposed", "random_pilot"):
            self.store.add(final, self.current_fp)  # copies to the CPU
        state = self.algorithm.start_session(state, t)
        if cfg.fingerprinted and session >= P:
            start = self.w_rand if cfg.rule == "random_pilot" else self.w_pilot
            self.current_fp = self._fingerprint(start, t, session)
        self.last_weights = None
        if session == P:
            new = self.w_rand
        elif session < P or cfg.rule == "previous":
            return state
        elif cfg.rule == "recovery":
            new = self.w_rand
        elif cfg.rule == "average":
            new = self.store.average()
        else:
            new, alpha = self.store.initial_model(self.current_fp, cfg.scale, cfg.similarity,
                                                  cfg.literal_eq5)
            self.last_weights = [float(a) for a in alpha]
        device = next(iter(state.params.values())).device
        return dataclasses.replace(
            state, params={k: new[k].to(device) for k in state.params},
            buffers={k: new[k].to(device) for k in state.buffers})

    def _fingerprint(self, start: Params, t: int, session: int) -> Params:
        """G_s = w_s^(V) − w_start after V fresh rounds with the session's clients (§2.3)."""
        cfg, algo = self.cfg, self.algorithm
        env = algo.env
        lr0 = env.local.lr  # the session's initial rate (the schedule restarts at η₀)
        local = dataclasses.replace(env.local, steps=cfg.fingerprint_steps,
                                    batch_size=cfg.fingerprint_batch, lr=lr0 / 2,
                                    schedule="constant")
        fp_env = dataclasses.replace(
            env, local=local, update=LocalSGD(env.model, local),
            population=Static(clients=np.asarray(env.population.active(t))),
            seeds=Seeds(env.seeds.int_seed("fingerprint", session)))
        fp_algo = registry.get(self.algorithm_cfg.name)[1](fp_env, self.algorithm_cfg.hparams)
        device = next(iter(env.model.parameters())).device
        x = fp_algo.init({k: start[k].to(device) for k in env.model.params()})
        x = dataclasses.replace(x, buffers={k: start[k].to(device) for k in x.buffers})
        for _ in range(cfg.fingerprint_rounds):
            x, _ = fp_algo.apply(x)
        return fingerprint(x.params, {k: start[k].to(x.params[k].device) for k in x.params},
                           list(x.params))


def session_store_bytes(starts: SessionStarts | None) -> int:
    """Host bytes of the stored session models and fingerprints (0 without a rule)."""
    if starts is None:
        return 0
    extra = [t for t in (starts.w_pilot, starts.current_fp) if t is not None]
    return starts.store.nbytes() + sum(v.numel() * v.element_size() for m in extra
                                       for v in m.values()) + sum(
        v.numel() * v.element_size() for m in starts.pilot_finals for v in m.values())

