"""What a round carries and reports: typed, frozen server state, round plans and reports.

- :class:`ServerState`: the global model, the round, the algorithm's own state
  (``opt_state``, an :class:`AlgorithmState`), the clients' persistent states and buffers;
- :class:`AlgorithmState`: base of each algorithm's typed state (SCAFFOLD's c and u,
  FAdamGC's y, RAM-Fed's Σ_n u_n, a server optimiser's moments, ...). Checkpoints hold it as
  a plain mapping of its set fields (:meth:`AlgorithmState.to_plain`), the format run
  folders have always had, and :meth:`AlgorithmState.from_plain` reads it back;
- :class:`RoundPlan`: the configure phase's answer, who trains and what each is sent;
- :class:`RoundReport`: what a round reports; an algorithm with more to log subclasses it
  with typed fields (:meth:`RoundReport.logged`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wirelessfl.models.base import Params


@dataclass(frozen=True)
class AlgorithmState:
    """Base of an algorithm's typed server state (``ServerState.opt_state``).

    Fields hold plain data: parameter trees, nested :class:`AlgorithmState` objects,
    numbers, or None (not set). Build variants with :func:`dataclasses.replace`.

    Examples
    --------
    >>> @dataclass(frozen=True)
    ... class Demo(AlgorithmState):
    ...     gamma_star: float | None = None
    >>> Demo(2.0).to_plain(), Demo.from_plain({"gamma_star": 2.0})
    ({'gamma_star': 2.0}, Demo(gamma_star=2.0))
    """

    def to_plain(self) -> dict[str, Any]:
        """The set fields as a plain mapping (nested states as mappings too)."""
        return {f.name: to_plain(getattr(self, f.name)) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None}

    @classmethod
    def from_plain(cls, plain: Mapping[str, Any] | None) -> AlgorithmState:
        """The state a checkpoint's mapping holds (ValueError for fields it does not have)."""
        if isinstance(plain, cls):
            return plain
        plain = {} if plain is None else plain
        if not isinstance(plain, Mapping):
            raise ValueError(f"{cls.__name__}: a checkpoint's algorithm state must be a mapping, "
                             f"got {type(plain).__name__}")
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(plain) - set(names))
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {unknown[0]!r} (fields: "
                             f"{', '.join(names)}): the checkpoint is of another algorithm")
        return cls(**{k: _typed(v, hints[k]) for k, v in plain.items()})


def _typed(value: Any, hint: Any) -> Any:
    """``value`` read back as ``hint`` (a nested state from its mapping)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) \
        else (hint,)
    for tp in options:
        if isinstance(tp, type) and issubclass(tp, AlgorithmState) and isinstance(value, Mapping):
            return tp.from_plain(value)
    return value


def to_plain(value: Any) -> Any:
    """An algorithm state (or any value holding some) as plain data for a checkpoint."""
    if isinstance(value, AlgorithmState):
        return value.to_plain()
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_plain(v) for v in value)
    return value


@dataclass(frozen=True, eq=False)
class ServerState:
    """Everything the server carries from round to round.

    Attributes
    ----------
    params : Params
        Global model x̄^t.
    round : int
        Rounds completed.
    opt_state : AlgorithmState or None
        The algorithm's typed state (its server optimiser's moments, control variates,
        ...); None when it has none.
    client_states : mapping of int to Any
        Per-client persistent state (Adam moments, correction terms), by client id: a
        :class:`~wirelessfl.engine.client_store.ClientStore` for SCAFFOLD and FAdamGC (one
        stacked tensor per key, updated in place by the next round: a state is applied
        once, or its store copied first), a plain mapping otherwise.
    buffers : Params
        The global model's buffers (BatchNorm running statistics; empty without them).
    late : tuple of ClientResult
        Uploads that missed the last round's deadline and join this round's aggregate
        (``network.late: next_round``); their clients are not sampled this round.
    schedule_origin : int
        The round at which the client learning-rate schedule (re)started (a new session of
        dynamic clients restarts it, ``docs/papers/dynamic_clients.md`` §2.7).
    privacy : AlgorithmState or None
        Differential privacy's own state: adaptive clipping's norm C_t, the over-the-air
        rounds' multipliers (:class:`~wirelessfl.server.privacy.PrivacyState`); None without it.
    """

    params: Params
    round: int = 0
    opt_state: AlgorithmState | None = None
    client_states: Mapping[int, Any] = field(default_factory=dict)
    buffers: Params = field(default_factory=dict)
    late: tuple[Any, ...] = ()
    schedule_origin: int = 0
    privacy: AlgorithmState | None = None


@dataclass(frozen=True, eq=False)
class RoundPlan:
    """The configure phase of round t: who trains and what each client starts from and gets.

    Attributes
    ----------
    clients : ndarray, shape (S,), int
        The round's clients.
    starts : sequence of Params
        Each client's starting model (the global model for FedAvg).
    broadcast : Any
        What the server sends besides the model: one value for all clients, or a list with
        one entry per client (e.g. RA-Fed's masks).
    """

    clients: np.ndarray
    starts: Sequence[Params]
    broadcast: Any = None


@dataclass(frozen=True)
class RoundReport:
    """What a round reports besides the new state.

    Attributes
    ----------
    uplink_params : float
        Parameters uploaded per participating client in this round (HIST §6.6).
    train_loss : float
        Mean local training loss over participating clients.
    latency_s : float or None
        Simulated duration of the round [s], if the algorithm models time.
    clients : mapping of int to mapping
        Diagnostics keyed by client id (``loss``, ``steps``): a
        :class:`~wirelessfl.engine.batch.ClientDiagnostics` (arrays) from the engine's results.
    cumulative : mapping of str to float
        Per-round amounts the runner sums over rounds and logs as running totals under the
        same names (e.g. HIST's ``uplink_mb_paper_per_client``).
    downlink_params : float or None
        Parameters sent to each participating client (None: as many as uploaded); with
        ``uplink_params`` and the clients' ``steps`` what :mod:`wirelessfl.net.links` times.
    delivery : Any
        Over a digital link that shapes learning, the round's
        :class:`~wirelessfl.net.digital.Delivery` (who arrived, the fitted widths); logged.
    """

    uplink_params: float
    train_loss: float
    latency_s: float | None = None
    clients: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    cumulative: Mapping[str, float] = field(default_factory=dict)
    downlink_params: float | None = None
    delivery: Any = None

    def logged(self) -> dict[str, Any]:
        """The set fields a subclass adds (mask sizes, coverage, ...) and the delivery's.

        A field with ``metadata={"logged": False}`` is for the clock only (a round's cells).
        """
        base = {f.name for f in dataclasses.fields(RoundReport)}
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in base and getattr(self, f.name) is not None
               and f.metadata.get("logged", True)}
        return out if self.delivery is None else {**out, **self.delivery.logged()}

