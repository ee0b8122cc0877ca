"""The shape every FL algorithm has: ``init`` / ``apply`` over an immutable server state.

``init(params) -> ServerState`` and ``apply(state) -> (ServerState, RoundReport)``, one call
per (global) round; clients return pseudo-gradients (server minus client) and the server
applies an aggregate of them. All randomness of round t comes from the run's
:class:`~wirelessfl.rng.Seeds` with t as a key, so a round is a pure function of the state.

How each paper plugs in:

- **HIST**: a hierarchical algorithm like
  :class:`~wirelessfl.algorithms.hist.hfedavg.HFedAvg` whose dispatch slices one disjoint
  :class:`~wirelessfl.server.submodel.Submodel` per cell and whose assembly scatters the
  pieces back (eq. (7)); AirComp is an :class:`~wirelessfl.server.aggregation.Aggregator`;
  round latency goes into ``RoundReport.latency_s``.
- **FedAST**: several ``ServerState`` objects (one per task) driven by the
  :mod:`wirelessfl.algorithms.fedast.simtime` event queue instead of a round loop; clients
  run through the same executor, one task per request.
- **FAdamGC**: a :class:`~wirelessfl.engine.local_sgd.LocalSGD` subclass whose step corrects
  the gradient before Adam's moments; correction terms live in ``ServerState.client_states``
  (per-client persistent state) and the server's in ``opt_state``.
- **Dynamic clients**: a :class:`~wirelessfl.server.population.Population` with sessions;
  on a session change the initial-model builder overwrites ``state.params``.
- **RA-Fed / RAM-Fed**: per-client selections (:class:`~wirelessfl.server.submodel.Submodel`,
  drawn by a :mod:`~wirelessfl.algorithms.rafed.masks` policy) and a coverage-weighted
  aggregation (:mod:`wirelessfl.algorithms.rafed.rafed`); RAM-Fed's per-client memories are
  ``client_states`` (the off-device store), Σ_n u_n is ``opt_state``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine.batch import ClientBatch, ClientDiagnostics, ClientResults, FoldedResults
from wirelessfl.engine.client import ClientResult, ClientUpdate, DeltaFold, LocalHParams, scheduled_lr
from wirelessfl.engine.client_store import STORE_DTYPES, ClientStore, fields_of
from wirelessfl.engine.fold import StateFold
from wirelessfl.engine.loop import Executor
from wirelessfl.models.base import FLModel, Params
from wirelessfl.net.digital import Delivery, DigitalUplink
from wirelessfl.rng import Seeds
from wirelessfl.server.aggregation import Aggregator
from wirelessfl.server.population import Population
from wirelessfl.server.state import AlgorithmState, RoundPlan, RoundReport, ServerState


@dataclass(frozen=True, eq=False)
class Environment:
    """What an algorithm runs on.

    Attributes
    ----------
    model : FLModel
        Architecture (parameters are kept in ``ServerState``).
    train : ArrayDataset
        Training samples (on the compute device).
    client_indices : tuple of ndarray
        Training indices of every client (id = position).
    local : LocalHParams
        Local training hyperparameters.
    update : ClientUpdate
        Local training functions.
    executor : Executor
        How clients are run.
    population : Population
        Which clients are present in each round.
    seeds : Seeds
        The run's random streams.
    uplink : Aggregator or None
        How the clients' uploads reach the server (None: exactly; an
        :class:`~wirelessfl.server.aggregation.AirComp` over the air, ``network.aggregation``).
    link : DigitalUplink or None
        A digital uplink that shapes learning (``network.deadline_s``, ``scheduler``,
        ``compression``; :mod:`wirelessfl.net.digital`): who is scheduled, who arrives and
        with what compression. None: the link only times the rounds.
    rounds : int or None
        The run's global rounds T (what DP's calibration from a target ε plans for).
    """

    model: FLModel
    train: ArrayDataset
    client_indices: tuple[np.ndarray, ...]
    local: LocalHParams
    update: ClientUpdate
    executor: Executor
    population: Population
    seeds: Seeds
    uplink: Aggregator | None = None
    link: DigitalUplink | None = None
    rounds: int | None = None

    @property
    def num_clients(self) -> int:
        """Clients with data."""
        return len(self.client_indices)

    @functools.cached_property
    def num_samples(self) -> np.ndarray:
        """n_i of every client (by id), shape (U,): read by index, not client by client."""
        return np.fromiter(map(len, self.client_indices), np.int64, len(self.client_indices))


class FederatedAlgorithm(ABC):
    """Base class of round-based algorithms: a round in three named phases.

    :meth:`apply` runs round ``state.round`` as :meth:`configure` (who is sampled and what
    each client starts from and is sent: a :class:`RoundPlan`), :meth:`train` (local
    training on the client engine) and :meth:`server_update` (the new :class:`ServerState`
    and the :class:`RoundReport`), the phases Flower's strategies name configure_fit, fit and
    aggregate_fit. (``aggregate`` names one thing: a server
    :class:`~wirelessfl.server.aggregation.Aggregator`'s reduction of the clients' updates. An
    algorithm written against the earlier name of this phase, ``aggregate``, still runs: a
    subclass that defines ``aggregate`` and not ``server_update`` has it called as its
    :meth:`server_update`, with a ``FutureWarning``, and ``super().aggregate(...)`` reaches the
    parent's :meth:`server_update`.) An algorithm's own server state is a frozen :class:`AlgorithmState` of
    type :attr:`state_type` in ``ServerState.opt_state``.

    Parameters
    ----------
    env : Environment
        Model, data, clients and executor.
    """

    #: The type of ``ServerState.opt_state`` (None: the algorithm keeps no state of its own).
    state_type: type[AlgorithmState] | None = None
    #: The type of each client's stored state in ``ServerState.client_states`` (FAdamGC's
    #: v_i and y_i); None: a parameter tree (SCAFFOLD's c_i, FedDyn's h_i, ...) or none.
    client_state_type: type[AlgorithmState] | None = None
    #: Whether ``ServerState.client_states`` is a
    #: :class:`~wirelessfl.engine.client_store.ClientStore` (a stacked tensor per key: a
    #: round's states read and written without an operator per client), not a mapping of
    #: id → state. Its rules give their new states as a
    #: :class:`~wirelessfl.engine.client_store.StateStack` (SCAFFOLD, FAdamGC).
    stacked_client_store: bool = False
    #: Whether every upload goes through ``env.uplink`` (over-the-air runs need it). A class
    #: that defines its own :meth:`server_update` declares it anew (else False): a server
    #: phase that reads each client's Δ_i, which over the air the server never receives (only
    #: their noisy sum), must not run over the air.
    uses_uplink: bool = False
    #: Whether its rounds run over a digital link that shapes learning (``env.link``).
    uses_digital_link: bool = False
    #: Whether an upload may join the next round's aggregate (``network.late: next_round``).
    takes_late_uploads: bool = True

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.update: ClientUpdate = env.update  # a rule with its own local step replaces it
        #: ``state.schedule_origin`` of the round being applied (read by :meth:`client_lr`;
        #: the state holds it, :meth:`apply` copies it here for the round's helpers).
        self._origin = 0

    @property
    def clients_per_round(self) -> int | None:
        """K, the clients its sampler picks a round (None: every present client, or its own way)."""
        return getattr(getattr(self, "sampler", None), "num", None)

    def client_lr(self, t: int, origin: int | None = None) -> float | None:
        """The scheduled client learning rate of round ``t`` (None: constant ``local.lr``).

        ``origin`` is the round the schedule (re)started at
        (:attr:`~wirelessfl.server.state.ServerState.schedule_origin`; None: that of the
        state being applied).
        """
        if self.env.local.schedule == "constant":
            return None
        return scheduled_lr(self.env.local, t - (self._origin if origin is None else origin))

    def start_session(self, state: ServerState, t: int) -> ServerState:
        """Round ``t`` opens a new session (``docs/papers/dynamic_clients.md`` §2.7, §4.3).

        The learning-rate schedule restarts and the algorithm's state is reset: the server
        optimiser's (SCAFFOLD's c, FedACG's m, FedAdam's moments) and every client's
        (c_i, v_i, y_i) [default: per-client states too]. The model and its buffers are kept
        (an initial-model rule replaces them separately). A rule whose client state must
        persist across sessions (MOON's previous local models) keeps it by overriding
        :meth:`session_client_states`.
        """
        return ServerState(state.params, state.round, None, self.session_client_states(state),
                           state.buffers, schedule_origin=t, privacy=state.privacy)

    @classmethod
    def round_work(cls, settings: Mapping[str, Any]) -> float:
        """A round's work beside the other runs of its lockstep group.

        It deals runs into groups of equal work (:func:`wirelessfl.report.local.lockstep_groups`).
        ``settings`` is the run's resolved ``algorithm`` section; the runs of one group share
        the algorithm, model and local settings. By default every round costs the same (1.0);
        an algorithm whose settings change what a round trains (HIST's submodels) says so,
        as a finite number > 0 (anything else is refused where groups are dealt).
        """
        return 1.0

    def session_client_states(self, state: ServerState) -> Mapping[int, Any]:
        """Client states kept at a session start (none by default).

        A :class:`~wirelessfl.engine.client_store.ClientStore` is emptied in place
        (:meth:`~wirelessfl.engine.client_store.ClientStore.emptied`): its rows are reused, and
        a disk store's files stay where the last checkpoint names them.
        """
        states = state.client_states
        return states.emptied() if isinstance(states, ClientStore) else {}

    def init(self, params: Params) -> ServerState:
        """Initial server state around the initial model (and the model's own buffers)."""
        device = next(iter(params.values())).device if params else None
        return ServerState(params={k: v.detach().clone() for k, v in params.items()},
                           buffers={k: v.to(device) for k, v in self.env.model.buffers_state().items()})

    def apply(self, state: ServerState) -> tuple[ServerState, RoundReport]:
        """Run round ``state.round`` (configure, train, server_update); the next state and its report.

        Over a digital uplink that shapes learning (``env.link``) only the results that
        arrive by the deadline are aggregated (compressed as the link fits them) and the
        report carries the :class:`~wirelessfl.net.digital.Delivery` and its duration.
        """
        self._origin = state.schedule_origin
        plan = self.configure(state)
        results = self.train(state, plan)
        link = self.env.link
        if link is None:
            return self.server_update(state, plan, results)
        vectors = [self.upload_vectors(plan, r) for r in results]
        kept, delivery, later = link.deliver(state.round, results, vectors,
                                             num_params(state.params))
        kept = [*state.late, *kept]  # last round's late uploads arrive first
        if kept:
            new, report = self.server_update(state, plan, kept, delivery)
        else:  # nobody arrived: the model stays, the round passes
            loss, diag = client_diagnostics(results)
            new = dataclasses.replace(state, round=state.round + 1)
            report = RoundReport(uplink_params=float(np.mean(vectors)) * num_params(state.params),
                                 train_loss=loss, clients=diag)
        new = dataclasses.replace(new, late=tuple(later))
        sent = report.uplink_params if delivery.sent_params is None else delivery.sent_params
        return new, dataclasses.replace(
            report, latency_s=delivery.seconds, delivery=delivery, uplink_params=sent,
            cumulative={**report.cumulative, "dropped_clients": float(len(delivery.dropped)),
                        "outage_clients": float(len(delivery.outage)),
                        "late_clients": float(len(delivery.late)),
                        "uploads": float(len(results)),
                        "empty_rounds": float(not kept),
                        "uplink_delivered_params_per_client": delivery.delivered_params or 0.0})

    def spent(self, rounds_done: int, state: ServerState | None = None) -> bool:
        """Whether the run must stop before its next round (a privacy budget spent; no).

        ``state`` is the server state after ``rounds_done`` rounds (None: not known).
        """
        return False

    def upload_vectors(self, plan: RoundPlan, result: ClientResult) -> float:
        """d-vectors client ``result.client`` uploads this round (1: its model update)."""
        return 1.0

    @abstractmethod
    def configure(self, state: ServerState) -> RoundPlan:
        """Round ``state.round``'s clients, their starting models and what they are sent."""

    def train(self, state: ServerState, plan: RoundPlan) -> Any:
        """Local training of the plan's clients (with their stored states and the buffers)."""
        fold = self.delta_fold(plan)
        if fold is not None:
            fold.states = self.state_fold(state, plan)
        return self.train_clients(plan.starts, plan.clients, state.round, states=state.client_states,
                                  broadcast=plan.broadcast, buffers=state.buffers, fold=fold)

    def delta_fold(self, plan: RoundPlan) -> DeltaFold | None:
        """A fold averaging the round's Δ_i as clients finish; None (the default): keep them."""
        return None

    def state_fold(self, state: ServerState, plan: RoundPlan) -> StateFold | None:
        """Beside :meth:`delta_fold`'s fold, one writing the clients' new states as they finish.

        None (the default): the results carry the new states and the server phase stores
        them (:class:`~wirelessfl.engine.fold.StateFold`).
        """
        return None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """The earlier name of :meth:`server_update`, ``aggregate``, kept for plug-ins (class doc)."""
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "aggregate" in own and "server_update" not in own:
            warnings.warn(f"{cls.__qualname__} defines `aggregate`, the earlier name of an "
                          "algorithm's server phase: rename it `server_update` (it runs as "
                          "that for now)", FutureWarning, stacklevel=2)
            cls.server_update = own["aggregate"]
        elif "server_update" in own:
            cls.aggregate = own["server_update"]  # super().aggregate(...) of a subclass
        if "server_update" in vars(cls) and "uses_uplink" not in own:
            # a new server phase may read each client's update itself, which over the air
            # the server never receives: it says so by declaring uses_uplink = True
            cls.uses_uplink = False

    @abstractmethod
    def server_update(self, state: ServerState, plan: RoundPlan,
                      results: Any,
                      delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        """The next server state and the round's report from the clients' results.

        ``results`` are the uploads that reached the server (over a digital link that
        shapes learning, those that met the deadline, and last round's late ones first);
        ``delivery`` says who arrived, who was dropped and who will arrive late (None
        without such a link), as Flower's ``failures`` do.
        """

    def sample(self, t: int, busy: Sequence[int] = ()) -> np.ndarray:
        """Round ``t``'s clients among those present, by ``self.sampler`` (``sampling`` stream).

        Over a channel-aware digital link (``network.scheduler``) the link schedules
        ``self.sampler.num`` clients by the round's channels instead. ``busy`` clients (still
        uploading a late update) are not available.
        """
        link = self.env.link
        if link is not None and link.schedules:
            return link.schedule(t, int(self.sampler.num), self.env.population.active)
        available = self.env.population.active(t)
        if len(busy):
            available = np.setdiff1d(available, np.asarray(busy, dtype=int))
        return np.asarray(self.sampler.sample(available, self.env.seeds.generator("sampling", t)),
                          dtype=int)

    def opt_state(self, state: ServerState) -> AlgorithmState | None:
        """``state.opt_state``, or a fresh state of :attr:`state_type` (all fields unset)."""
        if state.opt_state is not None or self.state_type is None:
            return state.opt_state
        return self.state_type()

    def load_client_states(self, plain: Any) -> Mapping[int, Any]:
        """The typed client states of a checkpoint's plain mapping (trees stay trees).

        A :class:`~wirelessfl.engine.client_store.ClientStore`'s checkpoint loads as a store;
        a mapping of id → state (the per-client format, and older checkpoints) loads as one
        for an algorithm that keeps a store (:attr:`stacked_client_store`).
        """
        if ClientStore.is_plain(plain):
            return ClientStore.from_plain(plain, self.client_state_type, self.run_folder)
        states = dict(plain or {})
        if self.client_state_type is not None:
            states = {u: self.client_state_type.from_plain(s) for u, s in states.items()}
        return self.client_store(states) if self.stacked_client_store and states else states

    def client_store(self, states: Mapping[int, Any]) -> ClientStore:
        """``states`` as this algorithm's :class:`~wirelessfl.engine.client_store.ClientStore`."""
        if isinstance(states, ClientStore):
            return states
        dtype = self.store_dtype()
        if self.store_folder is not None and not states:  # rows in files (state_store: disk)
            return ClientStore(self.client_state_type, dtype, self.store_folder)
        return ClientStore.from_states(states, self.client_state_type, dtype)

    #: The run folder (a disk store's checkpoint names its files in it) and the folder a new
    #: store keeps its rows in (None: memory); set by the run (``state_store``).
    run_folder: Path | None = None
    store_folder: Path | None = None

    def store_dtype(self) -> str:
        """The dtype the client store keeps (the local rule's ``state_dtype``; float32)."""
        return getattr(getattr(self, "update", None), "state_dtype", None) or "float32"

    def store_bytes(self) -> int:
        """Bytes the store would take holding every client (its fields × the model, in its dtype)."""
        if not self.stacked_client_store:
            return 0
        size = STORE_DTYPES[self.store_dtype()].itemsize
        params = sum(p.numel() for p in self.env.model.parameters() if p.requires_grad)
        return self.env.num_clients * len(fields_of(self.client_state_type)) * params * size

    def load_state(self, plain: Any) -> AlgorithmState | None:
        """The typed state of a checkpoint's plain mapping (None or empty: no state)."""
        if not plain or self.state_type is None:
            if plain:
                raise ValueError(f"{type(self).__name__} keeps no algorithm state, but the "
                                 "checkpoint holds one: it is of another algorithm")
            return None
        return self.state_type.from_plain(plain)

    def train_clients(self, starts: Sequence[Params], clients: Sequence[int] | np.ndarray, t: int,
                      stage: int = 0, states: Mapping[int, Any] | None = None,
                      broadcast: Any = None, buffers: Params | None = None,
                      update: ClientUpdate | None = None,
                      fold: DeltaFold | None = None,
                      start_index: np.ndarray | None = None) -> ClientResults:
        """Run local training for ``clients`` as one :class:`~wirelessfl.engine.batch.ClientBatch`.

        Client k starts from ``starts[k]``, or, with ``start_index``, from
        ``starts[start_index[k]]`` (K distinct starts: a hierarchical round's cells).
        ``stage`` separates several local phases within round ``t`` (HIST's edge rounds) so
        each gets its own mini-batch order; ``states`` are the clients' persistent states and
        ``broadcast`` what the server sends to all of them with the model (a list: one per
        client, e.g. RA-Fed's masks); ``buffers`` the
        global model's buffers each client starts from; ``update`` a local rule other than
        the algorithm's own (with its own ``hp``); ``fold`` takes the clients' pseudo-gradients
        as they finish (the results, a :class:`~wirelessfl.engine.batch.FoldedResults`,
        come back without them). The results are
        :class:`~wirelessfl.engine.batch.ClientResults`: arrays, and a sequence of
        per-client results for code that reads them one by one.
        """
        env = self.env
        ids = np.asarray(clients, dtype=np.int64).reshape(-1)
        if start_index is None:
            starts, start_index = _distinct(starts)
        per_client = None
        if isinstance(states, ClientStore):  # the stacked store: read as one gather per key
            per_client = states.rows(ids) if len(states) else None
        elif states:  # a rule's client states, by id
            per_client = [states.get(u) for u in ids.tolist()]
            if all(s is None for s in per_client):
                per_client = None
        batch = ClientBatch.of(ids, starts, start_index, env.client_indices,
                               env.seeds.int_seeds("local", t, stage, last=ids),
                               lr=self.client_lr(t), states=per_client,
                               broadcast=list(broadcast) if isinstance(broadcast, list) else broadcast,
                               buffers=buffers or None)
        rule, hp = (self.update, env.local) if update is None else (update, update.hp)
        results = env.executor.run_batch(rule, env.train, batch, hp, fold)
        return results if fold is None else FoldedResults(results, fold)


def _distinct(starts: Sequence[Params]) -> tuple[list[Params], np.ndarray]:
    """The distinct starts (by identity) of a per-client list and each client's index into them."""
    if not len(starts):
        return [], np.zeros(0, np.int64)
    first = starts[0]
    if all(map(operator.is_, starts, itertools.repeat(first))):  # one start (FedAvg's)
        return [first], np.zeros(len(starts), np.int64)
    at: dict[int, int] = {}
    distinct: list[Params] = []
    index = np.zeros(len(starts), np.int64)
    for c, p in enumerate(starts):
        k = at.setdefault(id(p), len(distinct))
        if k == len(distinct):
            distinct.append(p)
        index[c] = k
    return distinct, index


def client_diagnostics(results: Sequence[ClientResult]) -> tuple[float, ClientDiagnostics]:
    """Mean training loss and per-client diagnostics (arrays) of a round's results."""
    return ClientResults.from_list(results).diagnostics()


def mean_buffers(results: Sequence[ClientResult], current: Params) -> Params:
    """The clients' buffers averaged (plain mean, no correction, ``docs/papers/fadamgc.md`` §2.8).

    Floating buffers (running means and variances) are averaged; integer ones (batch
    counters) take the largest value. Without client buffers, ``current`` is kept.
    """
    if isinstance(results, ClientResults) and results.stacked:  # the engine's own arrays
        if not results.buffers:
            return current
        return {k: (v.mean(0) if v.is_floating_point() else v.amax(0))  # stacked: one each
                for k, v in results.buffers.items()}
    got = [r.buffers for r in results if r.buffers]
    if not got:
        return current
    return {k: (torch.stack([b[k] for b in got]).mean(0) if got[0][k].is_floating_point()
                else torch.stack([b[k] for b in got]).amax(0)) for k in got[0]}


def num_params(params: Params) -> int:
    """Number of scalars in a parameter tree."""
    return sum(int(v.numel()) for v in params.values())
