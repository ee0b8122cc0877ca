"""Similarity-weighted initial models for new sessions (``docs/papers/dynamic_clients.md`` §2.2–2.5).

The pieces of Algorithm 1 that are pure arithmetic on model states, shared by the proposed
method and its baselines:

- :func:`pilot_model`, eq. (3): the mean of the pilot sessions' final models;
- :func:`fingerprint`, §2.3: G_s = w_s^(V) − w_Pilot over the trainable parameters (the
  code's indexing: the model *after* V fingerprint rounds) [default];
- :func:`distances` and :func:`similarity_weights`, §2.4: per-layer normalised, bias-free
  ``two_norm`` (softmin of R·d, the code's default) or ``inner_product`` (softmax of R·⟨·,·⟩);
  ``literal_eq5`` uses the raw full-vector ‖G_s − G_z‖ of eq. (5);
- :func:`blend`, eq. (5): Σ_z α_z w_z^last over the whole state (parameters and floating
  buffers; integer buffers such as ``num_batches_tracked`` from the most recent model);
- :class:`SessionStore`, §2.5: Q1 (session-final models) and Q2 (fingerprints) on the CPU,
  never on the compute device, optionally only the last ``history`` sessions (FIFO).

R = 0 gives the plain average of the stored models (the *Average* baseline), and with one
stored model every rule returns it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from channels.validation import as_float, as_int
from wirelessfl.errors import short
from wirelessfl.models.base import Params, check_tree

SIMILARITIES = ("two_norm", "inner_product")


def cpu_copy(tree: Params) -> Params:
    """A detached CPU copy of ``tree`` (what the session store keeps; dtypes unchanged)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in tree.items()}


def pilot_model(finals: Sequence[Params]) -> Params:
    """Eq. (3): w_Pilot = (1/P) Σ_s w_s^last over the P pilot sessions' final models."""
    finals = _models("finals", finals)
    for i, f in enumerate(finals):
        check_tree(f"finals[{i}]", f, finals[0])
    return {k: torch.stack([f[k].float() for f in finals]).mean(0).to(finals[0][k].dtype)
            if finals[0][k].is_floating_point() else finals[-1][k].clone() for k in finals[0]}


def fingerprint(after: Params, pilot: Params, trainable: Sequence[str]) -> Params:
    """§2.3: G_s = w_s^(V) − w_Pilot over the trainable parameters (not the buffers)."""
    check_tree("pilot", pilot, check_tree("after", after))
    if isinstance(trainable, (str, bytes)) or not isinstance(trainable, Sequence) or not all(
            isinstance(k, str) for k in trainable):
        raise TypeError(f"`trainable` must be a list of parameter names, got {short(trainable)}")
    missing = [k for k in trainable if k not in after]
    if missing:
        raise ValueError(f"`trainable` names {missing[0]!r}, which the models do not have")
    return {k: (after[k] - pilot[k]).detach().to("cpu", torch.float32) for k in trainable}


def _models(name: str, models: object) -> Sequence[Params]:
    """``models`` checked as a non-empty list of trees (checked one by one by the caller)."""
    if isinstance(models, (str, bytes, dict)) or not isinstance(models, Sequence):
        raise TypeError(f"`{name}` must be a list of parameter trees, got "
                        f"{type(models).__name__}")
    if not models:
        raise ValueError(f"`{name}` is empty; at least one session's model is needed")
    return models


def _layers(g: Params) -> list[str]:
    """The fingerprint tensors that enter the distance: names without ``bias`` (§2.4)."""
    names = [k for k in g if "bias" not in k]
    if not names:
        raise ValueError("a fingerprint needs at least one parameter whose name has no 'bias'")
    return names


def distances(current: Params, stored: Sequence[Params], similarity: str = "two_norm",
              literal_eq5: bool = False) -> torch.Tensor:
    """d_{s,z} for every stored fingerprint (§2.4); for ``inner_product`` the similarity.

    ``two_norm``: mean over bias-free layers of ‖Ĝ_s^ℓ − Ĝ_z^ℓ‖ with Ĝ^ℓ = G^ℓ/‖G^ℓ‖ (each
    term in [0, 2]); ``inner_product``: mean over those layers of ⟨Ĝ_s^ℓ, Ĝ_z^ℓ⟩;
    ``literal_eq5``: ‖G_s − G_z‖ over the whole parameter vector.
    """
    if similarity not in SIMILARITIES:
        raise ValueError(f"`similarity` must be one of {', '.join(SIMILARITIES)}, "
                         f"got {similarity!r}")
    check_tree("current", current, floating=True)
    stored = _models("stored", stored)
    for i, g in enumerate(stored):
        check_tree(f"stored[{i}]", g, current)
    if literal_eq5:
        return torch.stack([torch.sqrt(sum(((current[k] - g[k]) ** 2).sum() for k in current))
                            for g in stored])
    names = _layers(current)

    def unit(t: torch.Tensor) -> torch.Tensor:
        n = t.norm()
        return t / n if n > 0 else t

    out = []
    for g in stored:
        terms = []
        for k in names:
            a, b = unit(current[k].flatten()), unit(g[k].flatten())
            terms.append((a - b).norm() if similarity == "two_norm" else (a * b).sum())
        out.append(torch.stack(terms).mean())
    return torch.stack(out)


def similarity_weights(current: Params, stored: Sequence[Params], scale: float,
                       similarity: str = "two_norm", literal_eq5: bool = False) -> torch.Tensor:
    """α_{s,·} of eq. (5): softmin(R·d) (``two_norm``) or softmax(R·⟨·,·⟩) (``inner_product``)."""
    as_float("scale", scale, lo=0, hi=1e6)  # R of eq. (5)
    _models("stored", stored)
    d = distances(current, stored, similarity, literal_eq5).to(torch.float64)
    logits = scale * d if similarity == "inner_product" and not literal_eq5 else -scale * d
    return torch.softmax(logits, 0)


def blend(models: Sequence[Params], weights: torch.Tensor) -> Params:
    """Σ_z α_z w_z over the whole state; integer entries from the most recent model (§2.4)."""
    if not isinstance(weights, torch.Tensor) or weights.dim() != 1:
        raise TypeError("`weights` must be a 1-d tensor, one weight per model")
    models = _models("models", models)
    if len(models) != len(weights):
        raise ValueError(f"{len(models)} models for {len(weights)} weights")
    last = check_tree(f"models[{len(models) - 1}]", models[-1])
    for i, m in enumerate(models):
        check_tree(f"models[{i}]", m, last)
    w = weights.to(torch.float64)
    if not bool(torch.isfinite(w).all()):
        raise ValueError("`weights` holds NaN or Inf")
    if not math.isclose(float(w.sum()), 1.0, rel_tol=1e-9) or bool((w < 0).any()):
        raise ValueError("blend weights must be non-negative and sum to 1")
    out = {}
    for k, last in models[-1].items():
        if last.is_floating_point():
            acc = sum(float(a) * m[k].to(torch.float64) for a, m in zip(w, models))
            out[k] = acc.to(last.dtype)
        else:
            out[k] = last.clone()
    return out


@dataclass
class SessionStore:
    """Q1 (session-final models) and Q2 (fingerprints) on the CPU (§2.5).

    ``history`` keeps only the last H post-pilot sessions (FIFO; None: all of them). Entries
    are CPU copies, so the store costs (sessions) × (model size) × 2 of host memory and
    nothing on the compute device.
    """

    history: int | None = None
    models: list[Params] = field(default_factory=list)
    fingerprints: list[Params] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.history is not None:
            as_int("history", self.history, lo=1, hi=10**6)

    def add(self, final: Params, fp: Params | None = None) -> None:
        """Store a session's final model (and its fingerprint, for the proposed method)."""
        check_tree("final", final, self.models[0] if self.models else None)
        if fp is not None:
            check_tree("fp", fp, self.fingerprints[0] if self.fingerprints else None,
                       floating=True)
        self.models.append(cpu_copy(final))
        if fp is not None:
            self.fingerprints.append(cpu_copy(fp))
        if self.history is not None and len(self.models) > self.history:
            del self.models[0]
            if len(self.fingerprints) > self.history:
                del self.fingerprints[0]

    def nbytes(self) -> int:
        """Host bytes held by the stored models and fingerprints."""
        return sum(v.numel() * v.element_size() for m in (*self.models, *self.fingerprints)
                   for v in m.values())

    def average(self) -> Params:
        """The *Average* baseline: the unweighted mean of the stored models (§3 item 2)."""
        n = len(self.models)
        if not n:
            raise ValueError("the session store holds no model yet; add a session's final "
                             "model first")
        return blend(self.models, torch.full((n,), 1.0 / n, dtype=torch.float64))

    def initial_model(self, current_fp: Params, scale: float, similarity: str = "two_norm",
                      literal_eq5: bool = False) -> tuple[Params, torch.Tensor]:
        """Eq. (5): the similarity-weighted blend of the stored models, and the weights.

        The stored fingerprints pair with the stored models (the same sessions).
        """
        if len(self.fingerprints) != len(self.models):
            raise ValueError(f"{len(self.models)} stored models but {len(self.fingerprints)} "
                             "fingerprints; store each session's fingerprint with its model")
        alpha = similarity_weights(current_fp, self.fingerprints, scale, similarity, literal_eq5)
        return blend(self.models, alpha), alpha


RULES = ("none", "previous", "average", "recovery", "proposed", "random_pilot")


@dataclass(frozen=True)
class InitialModelConfig:
    """The run's ``initial_model`` section: the model each new session starts from.

    Attributes
    ----------
    rule : str
        ``none`` (default: train on across sessions, nothing replaced), ``previous`` (the
        paper's baseline: continue, but from w_rand at session P), ``average`` (mean of the stored post-pilot
        session models), ``recovery`` (the random initial model), ``proposed`` (Algorithm 1,
        eq. 5) or ``random_pilot`` (Table 14's ablation: fingerprints from the random model).
    pilot_sessions : int
        P (1 in the paper). Every rule restarts from the random initial model at session P
        (§2.6 line 8, [CODE]); construction starts at session P + 1.
    fingerprint_rounds : int
        V (1).
    fingerprint_steps, fingerprint_batch : int
        Local steps and batch of a fingerprint round (5 and 128, [CODE]); the learning rate
        is half the session's initial rate, constant.
    scale : float
        R (10).
    similarity : str
        ``two_norm`` (default) or ``inner_product`` (§2.4).
    literal_eq5 : bool
        Raw full-vector distance of eq. (5) instead of the code's per-layer normalised one.
    history : int or None
        Keep only the last H post-pilot sessions (None: all).
    """

    rule: str = "none"
    pilot_sessions: int = 1
    fingerprint_rounds: int = 1
    fingerprint_steps: int = 5
    fingerprint_batch: int = 128
    scale: float = 10.0
    similarity: str = "two_norm"
    literal_eq5: bool = False
    history: int | None = None

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"`rule` must be one of {', '.join(RULES)}, got {self.rule!r}")
        as_int("pilot_sessions", self.pilot_sessions, lo=0, hi=10**6)
        if self.fingerprinted and self.pilot_sessions < 1:
            raise ValueError(f"rule {self.rule} needs pilot_sessions >= 1 (the pilot model)")
        as_int("fingerprint_rounds", self.fingerprint_rounds, lo=1, hi=10**4)
        as_int("fingerprint_steps", self.fingerprint_steps, lo=1, hi=10**6)
        as_int("fingerprint_batch", self.fingerprint_batch, lo=1, hi=10**6)
        as_float("scale", self.scale, lo=0, hi=1e6)
        if self.similarity not in SIMILARITIES:
            raise ValueError(f"`similarity` must be one of {', '.join(SIMILARITIES)}, got "
                             f"{self.similarity!r}")
        if self.history is not None:
            as_int("history", self.history, lo=1, hi=10**6)
        if not isinstance(self.literal_eq5, bool):
            raise TypeError(f"`literal_eq5` must be true or false, got {short(self.literal_eq5)}")

    @property
    def fingerprinted(self) -> bool:
        """Whether the rule runs fingerprint rounds (the proposed method and its ablation)."""
        return self.rule in ("proposed", "random_pilot")
