"""FedAvg (McMahan et al., AISTATS 2017).

"Communication-Efficient Learning of Deep Networks from Decentralized Data".
Each round the server samples clients among those present, each runs local SGD from the
global model, and the server moves by the weighted mean of their pseudo-gradients:
x ← x − η_s Σ_i w_i Δ_i, with w_i ∝ n_i (data size, the paper's weighting) or uniform.

The server step is a :class:`~wirelessfl.server.optimizers.ServerOptimizer` (``server_optimizer``):
``sgd`` is the rule above, ``momentum`` FedAvgM (Hsu et al.), and the adaptive rules give
FedAdam, FedAMS, FedYogi and FedAdagrad (Reddi et al. 2021; ``docs/papers/fadamgc.md`` §3.5–3.6), each
registered under its own name with its defaults (:class:`FedAdamHParams`, ...).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from typing_extensions import override

from channels.validation import as_float, as_int
from wirelessfl.algorithms.attacks import ATTACKS, Attack
from wirelessfl.algorithms.base import (
    Environment,
    FederatedAlgorithm,
    RoundReport,
    ServerState,
    client_diagnostics,
    mean_buffers,
    num_params,
)
from wirelessfl.engine.batch import ClientResults, FoldedResults
from wirelessfl.engine.client import ClientResult, DeltaFold, weighted_sum
from wirelessfl.engine.fold import StateFold
from wirelessfl.errors import ConfigError
from wirelessfl.models.base import Params
from wirelessfl.net.digital import Delivery
from wirelessfl.server.aggregation import AggregateInfo, Aggregator, Mean, RoundChannel
from wirelessfl.server.optimizers import SERVER_OPTIMIZERS, ServerOptimizer, ServerOptState
from wirelessfl.server.privacy import DP_MODES, Privacy, PrivacySettings
from wirelessfl.server.robust import robust_aggregator, robust_names
from wirelessfl.server.sampling import AllClients, ClientSampler, UniformSampler
from wirelessfl.server.state import RoundPlan


def warn_noisy_mean(hp: Any, privacy: Privacy, clients: int, params: int) -> None:
    """Warn on stderr (once, at set-up) when the DP noise on the mean outweighs the updates.

    Each clipped update has norm ≤ C; the noise the mean of K of them carries has norm about
    z·C·√d/K (central and over the air: one draw on the sum) or z·C·√d/√K (local: K draws).
    Above C, the mean is mostly noise and the model hardly learns (the robustness guide's
    first DP command, z = 4 over 10 clients of the FCNN: about 195·C, trained to chance).
    """
    if hp.dp == "none" or privacy.z <= 0 or clients < 1:
        return
    cohort = privacy.sample if getattr(hp, "dp_noise_cohort", None) else clients
    spread = privacy.z * math.sqrt(params) / (math.sqrt(clients) if hp.dp == "local"
                                              else cohort)
    if spread > 1.0:
        print(f"wirelessfl: warning: the DP noise on the mean has norm about {spread:.3g}·C, "
              f"above the clip C (z = {privacy.z:.3g}, {clients} clients, d = {params:,}): the "
              "model will hardly learn; aggregate more clients a round or lower dp_noise",
              file=sys.stderr, flush=True)


@dataclass(frozen=True)
class FedAvgHParams(PrivacySettings):
    """FedAvg: local SGD on sampled clients, weighted averaging, an optional server optimiser.

    Attributes
    ----------
    clients_per_round : int or None
        Clients sampled uniformly per round; None for full participation.
    server_lr : float
        Server step η_s (1 = plain model averaging).
    weighting : str
        ``"samples"`` (w_i ∝ n_i) or ``"uniform"``.
    server_optimizer : str
        One of :data:`~wirelessfl.server.optimizers.SERVER_OPTIMIZERS` (``sgd``).
    server_momentum : float
        μ of ``momentum``.
    server_betas : tuple of float
        (β1, β2) of the adaptive rules (0.9, 0.99: ``docs/papers/fadamgc.md`` §4.4).
    server_eps : float
        ε of the adaptive rules (1e-8, outside the root; ``docs/papers/fadamgc.md`` §3.5).
    robust : str
        The server's aggregation rule (:mod:`wirelessfl.server.robust`): ``mean`` (the
        weighted mean, default), ``median``, ``trimmed_mean``, ``krum``, ``bulyan``,
        ``norm_bounded``.
    trim : float
        β of ``trimmed_mean``: the fraction dropped at each end per coordinate [0.1].
    byzantine : int
        f of ``krum`` and ``bulyan``: the attackers they allow for (Bulyan needs 4f + 3
        clients a round) [1].
    krum_select : int
        m of ``krum``: the rows of least score averaged (1: Krum, more: multi-Krum) [1].
    norm_bound : float
        The norm every Δ_i is scaled down to under ``norm_bounded`` [1.0].
    attack : str
        Attackers among the clients, to test the rules: ``none`` (default), ``sign_flip``
        (an attacker sends −s·Δ_i), ``scaled`` (s·Δ_i), ``noise`` (Δ_i plus Gaussian noise
        of s times its own RMS per entry), s = ``attack_scale``, ``label_flip`` (an
        attacker trains on its samples with label y read as K − 1 − y, and sends what it
        learned: a data attack; its partition must give each sample to one client),
        ``alie`` ("a little is enough", Baruch et al. 2019: every attacker sends μ − z_max·σ,
        the honest rows' coordinate-wise mean and standard deviation, z_max = Φ⁻¹((n − s)/n)
        with s = ⌊n/2 + 1⌋ − f for the round's n rows and f attackers) or ``ipm``
        (inner-product manipulation, Xie et al. 2020: every attacker sends −ε·μ, ε =
        ``attack_scale``). Both read the honest clients' updates, as their threat models
        allow.
    attackers : float
        The fraction of the population that attacks, drawn once per run (``attackers``
        stream) [0].
    attack_scale : float
        s of the attack [1.0].
    dp, dp_clip, dp_noise, dp_delta, dp_target_epsilon
        Differential privacy (:class:`~wirelessfl.server.privacy.PrivacySettings`); over the
        air each round is accounted at its own multiplier, and ``dp_noise`` 0 is the
        channel's noise alone.
    dp_clip_quantile : float or None
        Adaptive clipping (central DP and over the air; Andrew et al. 2021): the quantile
        γ ∈ (0, 1) of the update norms the clip norm follows, starting at ``dp_clip`` (None:
        the fixed ``dp_clip``) [None].
    dp_clip_lr : float
        η_C, the geometric step of the clip norm per round [0.2].
    dp_count_noise : float or None
        σ_b, the noise on the count of updates within the clip norm (None: K/20, K the
        round's clients, as Andrew et al.); the sum's noise grows to keep z
        (:func:`~wirelessfl.server.privacy.update_noise`) [None].
    dp_epsilon : float or None
        Calibration: the noise multiplier z is derived from this target ε at ``dp_delta``
        for the run's rounds and sampling (``dp-accounting``'s calibration,
        :func:`~wirelessfl.server.privacy.calibrate`), in place of ``dp_noise``; over the
        air the top-up uses it (None: z = ``dp_noise``) [None].
    dp_noise_cohort : int or None
        Central DP: the noise on the mean is that of a cohort of M clients (zC/M) and the
        accountant samples M, while the round's K ≤ M clients train: a simulation device
        (pfl-research's ``noise_cohort_size``), not the model M clients would train [None].
    dp_clip_second : float or None
        C₂, the norm a client's second upload (SCAFFOLD's Δc_i, FAdamGC's Δy_i) is scaled
        down to before its own noise z·C₂ (None: ``dp_clip``) [None].
    dp_vectors : str
        ``all`` (default): every vector a client sends is clipped, noised and accounted
        (:class:`~wirelessfl.server.privacy.Privacy`). ``model`` is how SCAFFOLD and FAdamGC
        ran before 2026-11-28 (the second vector unprivatised, outside ε); it is refused
        for them, so such an old run folder is not resumed under a wrong ε.
    """

    #: The settings that take one of a few names: ``wirelessfl list --algorithms`` shows them
    #: (a callable for a list that grows, as ``robust`` with :func:`register_aggregator`).
    choices: ClassVar[dict[str, Any]] = {
        "weighting": ("samples", "uniform"), "server_optimizer": SERVER_OPTIMIZERS,
        "robust": robust_names, "attack": ATTACKS, "dp": DP_MODES, "dp_vectors": ("all", "model")}

    clients_per_round: int | None = None
    server_lr: float = 1.0
    weighting: str = "samples"
    server_optimizer: str = "sgd"
    server_momentum: float = 0.9
    server_betas: tuple[float, float] = (0.9, 0.99)
    server_eps: float = 1e-8
    robust: str = "mean"
    trim: float = 0.1
    byzantine: int = 1
    krum_select: int = 1
    norm_bound: float = 1.0
    attack: str = "none"
    attackers: float = 0.0
    attack_scale: float = 1.0
    dp_clip_quantile: float | None = None
    dp_clip_lr: float = 0.2
    dp_count_noise: float | None = None
    dp_epsilon: float | None = None
    dp_noise_cohort: int | None = None
    dp_clip_second: float | None = None
    dp_vectors: str = "all"

    def __post_init__(self) -> None:
        if self.weighting not in ("samples", "uniform"):
            raise ValueError(f"`weighting` must be 'samples' or 'uniform', got {self.weighting!r}")
        if self.clients_per_round is not None:
            as_int("clients_per_round", self.clients_per_round, lo=1, hi=10**6)
        as_float("server_lr", self.server_lr, lo=0, hi=1e6, lo_open=True)
        self.server()  # checks the server optimiser's settings
        if self.robust not in robust_names():
            raise ValueError(f"`robust` must be one of {', '.join(robust_names())}, got "
                             f"{self.robust!r}")
        as_float("trim", self.trim, lo=0, hi=0.5, hi_open=True)
        as_int("byzantine", self.byzantine, lo=0, hi=10**6)
        as_int("krum_select", self.krum_select, lo=1, hi=10**6)
        as_float("norm_bound", self.norm_bound, lo=0, hi=1e12, lo_open=True)
        if self.attack not in ATTACKS:
            raise ValueError(f"`attack` must be one of {', '.join(ATTACKS)}, got {self.attack!r}")
        as_float("attackers", self.attackers, lo=0, hi=1)
        as_float("attack_scale", self.attack_scale, lo=0, hi=1e6)
        for key, rules in (("trim", ("trimmed_mean",)), ("byzantine", ("krum", "bulyan")),
                           ("krum_select", ("krum",)), ("norm_bound", ("norm_bounded",))):
            if getattr(self, key) != getattr(FedAvgHParams, key) and self.robust not in rules:
                raise ValueError(f"`{key}` is a setting of robust: {' or '.join(rules)}; set "
                                 f"robust: {rules[0]} or remove it")
        if (self.attackers > 0) != (self.attack != "none"):
            raise ValueError("`attack` and `attackers` go together: name the attack and the "
                             "fraction of clients that makes it (or neither)")
        if self.attack_scale != 1.0 and self.attack in ("none", "label_flip", "alie"):
            raise ValueError("`attack_scale` is a setting of the sign_flip, scaled, noise and "
                             "ipm attacks: set one of them, or remove it")
        if self.attack == "scaled" and self.attack_scale == 1.0:
            raise ValueError("`attack: scaled` at attack_scale 1 sends the honest update: no "
                             "attack; set attack_scale (e.g. 10)")
        self.check_privacy(also=("dp_clip_quantile", "dp_epsilon", "dp_noise_cohort",
                                 "dp_clip_second"))
        if self.dp_vectors not in ("all", "model"):
            raise ValueError(f"`dp_vectors` must be 'all' or 'model', got {self.dp_vectors!r}")
        if self.dp_epsilon is not None:
            as_float("dp_epsilon", self.dp_epsilon, lo=0, hi=1e6, lo_open=True)
            if self.dp_noise != FedAvgHParams.dp_noise:
                raise ValueError("`dp_epsilon` derives the noise multiplier, and `dp_noise` "
                                 "gives it: set one of them")
        if self.dp_noise_cohort is not None:
            as_int("dp_noise_cohort", self.dp_noise_cohort, lo=1, hi=10**9)
            if self.dp != "central":
                raise ValueError("`dp_noise_cohort` scales the server's noise on the mean: it "
                                 "is for dp: central")
        if self.dp_clip_second is not None:
            as_float("dp_clip_second", self.dp_clip_second, lo=0, hi=1e12, lo_open=True)
        if self.dp != "none" and self.weighting != "uniform":
            raise ValueError("`dp` bounds each client's part of the mean: set weighting: uniform "
                             "(sample weights would give a large client more than C)")
        if self.dp != "none" and self.robust != "mean":
            raise ValueError("`dp` is accounted for the clipped mean: use robust: mean with it")
        if self.dp_clip_quantile is not None:
            as_float("dp_clip_quantile", self.dp_clip_quantile, lo=0, hi=1, lo_open=True,
                     hi_open=True)
            if self.dp not in ("central", "over_the_air"):
                raise ValueError("`dp_clip_quantile` (adaptive clipping) releases a noisy count "
                                 "at the server: it is built for dp: central and over_the_air; "
                                 "set one, or use a fixed dp_clip")
            if self.dp_noise == 0:
                raise ValueError("`dp_clip_quantile` pays for its count out of the noise "
                                 "multiplier z: give dp_noise > 0 (the channel alone has no "
                                 "z to share)")
        as_float("dp_clip_lr", self.dp_clip_lr, lo=0, hi=10, lo_open=True)
        if self.dp_count_noise is not None:
            as_float("dp_count_noise", self.dp_count_noise, lo=0, hi=1e6, lo_open=True)
        for key in ("dp_clip_lr", "dp_count_noise"):
            if getattr(self, key) != getattr(FedAvgHParams, key) and self.dp_clip_quantile is None:
                raise ValueError(f"`{key}` is a setting of adaptive clipping: set "
                                 "dp_clip_quantile too, or remove it")

    def server(self) -> ServerOptimizer:
        """The server optimiser these hyperparameters describe."""
        return ServerOptimizer(self.server_optimizer, lr=self.server_lr,
                               momentum=self.server_momentum, betas=self.server_betas,
                               eps=self.server_eps)


@dataclass(frozen=True)
class FedAdamHParams(FedAvgHParams):
    """FedAdam (``docs/papers/fadamgc.md`` §3.5): local SGD, Adam on the server, η_g = 1e-3 (Table 4)."""

    server_lr: float = 1e-3
    weighting: str = "uniform"
    server_optimizer: str = "adam"


@dataclass(frozen=True)
class FedAMSHParams(FedAdamHParams):
    """FedAMS (``docs/papers/fadamgc.md`` §3.6): FedAdam with v̂ = max(v̂, v, ε) on the server."""

    server_optimizer: str = "amsgrad"


@dataclass(frozen=True)
class FedYogiHParams(FedAdamHParams):
    """FedYogi (Reddi et al. 2021): Yogi on the server."""

    server_optimizer: str = "yogi"


@dataclass(frozen=True)
class FedAdagradHParams(FedAdamHParams):
    """FedAdagrad (Reddi et al. 2021): Adagrad (with β1 momentum) on the server.

    The server rate defaults to 1e-2, ten times FedAdam's: Adagrad's second moment starts
    at g² (Adam's at (1 − β2) g²) and keeps growing, so at one rate its first step is
    (1 − β1) of Adam's and shrinks like 1/√t (the preset ``fedadagrad_fmnist`` measures
    both rates). Runs made with the earlier default, 1e-3, keep it in their keys.
    """

    server_lr: float = 1e-2
    server_optimizer: str = "adagrad"


def client_weights(sizes: np.ndarray, weighting: str) -> np.ndarray:
    """Aggregation weights from local data sizes (uniform if all sizes are zero)."""
    sizes = np.asarray(sizes, dtype=float)
    if weighting == "uniform" or sizes.sum() == 0:
        return np.ones_like(sizes)
    return sizes


class FedAvg(FederatedAlgorithm):
    """Federated averaging on the shared interfaces, in the three phases of a round.

    :meth:`configure` samples the round's clients (:meth:`sample`) and sends each the
    :meth:`start` model and the :meth:`broadcast`; :meth:`server_update` combines the
    pseudo-gradients (:meth:`combine`) and takes the server optimiser's step. The family
    (FedProx, SCAFFOLD, FAdamGC, FedACG, MOON, FedDyn, ...) overrides only what differs.
    """

    state_type = ServerOptState
    uses_uplink = True
    uses_digital_link = True
    #: Whether :meth:`server_update` reads the clients' pseudo-gradients only through
    #: :meth:`combine`: then, over an exact uplink, they are averaged while the clients train
    #: (:meth:`delta_fold`), and the results reach :meth:`server_update` with that mean instead of
    #: their Δ_i. The class that defines :meth:`server_update` declares it beside it (FedDyn,
    #: which sums the Δ_i itself, says False): a subclass that overrides :meth:`server_update`
    #: without declaring it gets every client's full Δ_i (a median, a trimmed mean), and
    #: nothing is folded. Folded and unfolded rounds agree to float rounding (tested).
    folds_deltas = True

    def __init__(self, env: Environment, hp: FedAvgHParams = FedAvgHParams(),
                 aggregator: Aggregator | None = None) -> None:
        super().__init__(env)
        self.hp = hp
        self.server_opt = hp.server()
        #: The channel's own sum (exact, or over the air): second vectors go over it as sent.
        self.uplink = aggregator or env.uplink or Mean()
        try:
            self.aggregator = self.uplink if aggregator is not None else robust_aggregator(
                hp.robust, env.uplink, trim=hp.trim, byzantine=hp.byzantine,
                select=hp.krum_select, norm_bound=hp.norm_bound)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if hp.robust == "bulyan" and (hp.clients_per_round or env.num_clients) < 4 * hp.byzantine + 3:
            raise ConfigError(f"algorithm.robust bulyan with byzantine {hp.byzantine} needs at "
                              f"least 4f + 3 = {4 * hp.byzantine + 3} clients a round, this run "
                              f"has {hp.clients_per_round or env.num_clients}: lower byzantine or "
                              "raise clients_per_round")
        clients = hp.clients_per_round or env.num_clients
        if hp.robust == "krum" and clients < 2 * hp.byzantine + 3:
            raise ConfigError(f"algorithm.robust krum with byzantine {hp.byzantine} needs at least "
                              f"2f + 3 = {2 * hp.byzantine + 3} clients a round (Blanchard et al. "
                              f"2017), this run has {clients}: lower byzantine or raise "
                              "clients_per_round")
        if hp.robust == "krum" and hp.krum_select > clients - hp.byzantine:
            raise ConfigError(f"algorithm.krum_select {hp.krum_select} is more than the n - f = "
                              f"{clients - hp.byzantine} rows multi-Krum may average ({clients} "
                              f"clients a round, byzantine {hp.byzantine}): lower krum_select")
        if (hp.robust != "mean" or hp.attack != "none" or hp.dp != "none") and aggregator is None \
                and not type(self).reads_deltas_through_combine():
            raise ConfigError(f"algorithm.robust / attack / dp: {type(self).__name__} combines "
                              "the clients' updates its own way, not through the server's "
                              "rule; use them with fedavg, fedprox, scaffold, fadamgc, moon, "
                              "fedacg or the server-optimiser variants")
        #: Differential privacy of every vector the clients send (``algorithm.dp``).
        self.privacy = Privacy(hp, population=env.num_clients, sample=self._sample_size(),
                               rounds=env.rounds, uplink=self.uplink, seeds=env.seeds,
                               second=self.second_vector())
        if hp.dp != "none":
            if hp.dp == "over_the_air" and hp.dp_noise == 0 and not self.privacy.channel_counted:
                raise ConfigError("algorithm.dp_noise 0 accounts the channel's noise alone, but "
                                  "network.normalise scales that noise with the updates (a noise "
                                  "level that depends on the data): set network.normalise: false")
            if (hp.dp == "over_the_air") == self.uplink.exact:
                raise ConfigError("algorithm.dp over_the_air counts the channel's own noise: it "
                                  "needs network.aggregation over_the_air, and over the air "
                                  "only it can be used (central and local noise are for exact "
                                  "or digital links)")
            if hp.dp_clip_quantile is not None:  # the count's noise must leave room for z
                try:
                    self.privacy.noise_multiplier(hp.clients_per_round or env.num_clients)
                except ValueError as exc:
                    raise ConfigError(str(exc)) from None
            if hp.dp_target_epsilon is not None and self.privacy.z > 0 \
                    and self.epsilon(1) > hp.dp_target_epsilon:
                raise ConfigError(f"algorithm.dp_target_epsilon {hp.dp_target_epsilon:g} is spent by "
                                  f"the first round (epsilon {self.epsilon(1):.3g}): raise it or "
                                  "dp_noise")
            warn_noisy_mean(hp, self.privacy, hp.clients_per_round or env.num_clients,
                            sum(int(p.numel()) for p in env.model.parameters() if p.requires_grad))
        #: The simulated attackers among the clients (``algorithm.attack``), client-side.
        self.attack = Attack(hp.attack, hp.attackers, hp.attack_scale, env)
        #: The clients that attack (sorted ids; none without ``attack``).
        self.attackers = self.attack.ids
        self.env = self.attack.environment(env)
        self.sampler: ClientSampler = (AllClients() if hp.clients_per_round is None
                                       else UniformSampler(num=hp.clients_per_round))

    # ------------------------------------------------------------------ configure
    @override
    def configure(self, state: ServerState) -> RoundPlan:
        clients = self.sample(state.round, busy=[r.client for r in state.late])
        return RoundPlan(clients, [self.start(state)] * len(clients), self.broadcast(state, clients))

    def start(self, state: ServerState) -> Params:
        """The model every client starts from (the global model)."""
        return state.params

    def broadcast(self, state: ServerState, clients: np.ndarray) -> Any:
        """What the server sends with the model (nothing for FedAvg)."""
        return None

    # ------------------------------------------------------------------ train
    def delta_fold(self, plan: RoundPlan) -> DeltaFold | None:
        """Over an exact uplink, the fold of the Δ_i's weighted mean (:meth:`combine` reads it).

        With the exact mean (:class:`~wirelessfl.server.aggregation.Mean`, no digital link
        deciding who arrives) the server needs only Σ_i w_i Δ_i / Σ_i w_i, so a
        :class:`~wirelessfl.engine.fold.DeltaFold` sums it chunk by chunk and a round holds
        one chunk's pseudo-gradients, not every client's. Central DP with a fixed clip folds
        too: each Δ_i is clipped as it is folded, and the server's noise is added to the mean
        (equal to the stacked release to float rounding, tested).
        """
        return self.exact_fold(plan) if self.reads_deltas_through_combine() else None

    def exact_fold(self, plan: RoundPlan) -> DeltaFold | None:
        """:meth:`delta_fold`'s fold wherever the round's mean is exact, whoever reads it."""
        hp = self.hp
        central = hp.dp == "central" and hp.dp_clip_quantile is None  # clipped as they fold
        if not (self.env.link is None
                and type(self.aggregator) is Mean and type(self).combine is FedAvg.combine
                and len(plan.clients) and not len(self.attackers)
                and (hp.dp == "none" or central)):
            return None
        sizes = self.env.num_samples[np.asarray(plan.clients, dtype=np.int64)]
        return DeltaFold(client_weights(sizes, hp.weighting),
                         clip=self.privacy.clip_norm() if central else None)

    #: Whether the round's new client states are written to the store as clients finish
    #: (:meth:`state_fold`): a rule whose server phase reads them only through the fold.
    folds_states = False

    @override
    def state_fold(self, state: ServerState, plan: RoundPlan,
                   weights: np.ndarray | None = None) -> StateFold | None:
        """With :attr:`folds_states` and a stacked store, the clients' states go to it as they finish.

        A round then holds one chunk's new states, not a stack of every client's (issue 94:
        SCAFFOLD at 500 clients a round held 4.2 GB against FedAvg's 0.93 GB). ``weights``:
        a_i of the sum of the state changes the server reads (:meth:`StateFold.change`).
        Only where the round's Δ_i fold too (:meth:`delta_fold`) and its clients are distinct.
        """
        clients = np.asarray(plan.clients, np.int64)
        if not (self.folds_states and self.stacked_client_store and len(clients)
                and len(np.unique(clients)) == len(clients)):
            return None
        return StateFold(self.client_store(state.client_states), clients, weights,
                         None if weights is None else {k: torch.zeros_like(v)
                                                       for k, v in state.params.items()})

    @classmethod
    def reads_deltas_through_combine(cls) -> bool:
        """:attr:`folds_deltas` as declared by the class that defines :meth:`server_update`."""
        owner = next(c for c in cls.__mro__ if "server_update" in vars(c))
        return bool(cls.folds_deltas and vars(owner).get("folds_deltas", False))

    # ------------------------------------------------------------------ server_update
    @override
    def server_update(self, state: ServerState, plan: RoundPlan,
                      results: list[ClientResult],
                      delivery: Delivery | None = None) -> tuple[ServerState, RoundReport]:
        update, _, info = self.combine(state, results)
        params, opt_state = self.server_opt.step(state.params, update, state.opt_state)
        return self.finish_round(state, params, opt_state, results, infos=(info,))

    def combine(self, state: ServerState,
                results: list[ClientResult]) -> tuple[Params, np.ndarray, AggregateInfo]:
        """The aggregated pseudo-gradient (``noise`` stream), its weights and its info.

        The info is the aggregation's :class:`~wirelessfl.server.aggregation.AggregateInfo`
        (its MSE over the air).

        Results folded while training (:meth:`train`) bring their mean with them.
        """
        results = ClientResults.from_list(results)
        w = client_weights(results.num_samples, self.hp.weighting)
        if isinstance(results, FoldedResults):  # (central DP: clipped as they folded)
            update = results.fold.mean()
            if self.hp.dp == "central":
                update = self.privacy.noisy_mean(update, len(results), state.round)
            return update, w, AggregateInfo()
        stack = self.attacked(results.delta_stack(), results.clients, state.round)
        rng = self.env.seeds.generator("noise", state.round)

        def aggregate(rows: Params) -> tuple[Params, AggregateInfo]:
            return self.aggregator.aggregate_stack(rows, w, rng, **self.client_ids(results.clients))

        if self.hp.dp == "none":
            update, info = aggregate(stack)
        else:
            update, info = self.privacy.release(stack, aggregate, state, state.round)
        return update, w, info

    def second_vector(self) -> str | None:
        """What each client uploads besides its model update (None: nothing), in words.

        Under ``dp`` such a vector goes through :meth:`release_second`: clipped, noised and
        accounted with the update (:class:`~wirelessfl.server.privacy.Privacy`).
        """
        return None

    def release_second(self, state: ServerState, stack: Params,
                       coefs: np.ndarray) -> Params:
        """Σ_i coef_i x_i of the clients' second vectors ``stack`` over an exact uplink, under DP.

        Each row is clipped to ``dp_clip_second`` and noised (local) or the sum is (central),
        from the round's ``dp`` stream of vector 1 (:meth:`Privacy.release`).
        """
        first = next(iter(stack.values()))
        c = torch.as_tensor(np.asarray(coefs, float), dtype=first.dtype, device=first.device)

        def total(rows: Params) -> tuple[Params, AggregateInfo]:
            return {k: weighted_sum(c, v) for k, v in rows.items()}, AggregateInfo()

        if self.hp.dp == "none":
            return total(stack)[0]
        return self.privacy.release(stack, total, state, state.round, vector=1,
                                    scale=float(np.sum(coefs)))[0]

    def _sample_size(self) -> int:
        n = self.env.num_clients
        return n if self.hp.clients_per_round is None else min(n, self.hp.clients_per_round)

    def epsilon(self, rounds: int, state: ServerState | None = None) -> float | None:
        """ε at ``dp_delta`` spent by ``rounds`` rounds (None without ``dp``; :meth:`Privacy.epsilon`)."""
        return self.privacy.epsilon(rounds, state)

    @override
    def spent(self, rounds_done: int, state: ServerState | None = None) -> bool:
        """Whether one more round would spend more than ``dp_target_epsilon`` (:meth:`Privacy.spent`)."""
        return self.privacy.spent(rounds_done, state)

    def attacked(self, stack: Params, clients: np.ndarray, t: int) -> Params:
        """The stack as the clients sent it (:meth:`Attack.sent`: the attackers' rows changed)."""
        return self.attack.sent(stack, clients, t)

    def client_ids(self, ids: Any) -> dict[str, Any]:
        """``{"clients": ids}`` for an aggregator whose channel belongs to the clients, else {}.

        (An aggregator of one's own written before the ids were passed takes none.)
        """
        return {"clients": np.asarray(ids, np.int64)} if getattr(
            self.aggregator, "needs_clients", False) else {}

    def finish_round(self, state: ServerState, params: Params, opt_state: Any,
                     results: list[ClientResult], vectors_up: float = 1,
                     vectors_down: float | None = None,
                     infos: Sequence[AggregateInfo] = ()) -> tuple[ServerState, RoundReport]:
        """The next state (clients' new states stored, buffers averaged) and the report.

        ``vectors_up``/``vectors_down`` count the d-vectors each client sends and receives;
        ``infos`` are what the round's aggregations returned (over the air: their mean MSE
        and silent clients go into the report).
        """
        states = state.client_states  # a rule's client states, the new ones stored
        folded = getattr(getattr(results, "fold", None), "states", None)
        if folded is not None:  # written as the clients finished (state_fold)
            states = folded.store.updated(folded.clients, None)
        elif not isinstance(results, ClientResults) or results.states is not None:
            if self.stacked_client_store:  # the stacks written as they are (one copy a key)
                got = ClientResults.from_list(results)
                states = self.client_store(states).updated(got.clients, got.states)
            else:
                states = {**states, **{r.client: r.state for r in results if r.state is not None}}
        new = ServerState(params, state.round + 1, opt_state, states,
                          mean_buffers(results, state.buffers),
                          schedule_origin=state.schedule_origin,
                          privacy=self.privacy.next_state(state, infos, len(results)))
        loss, diag = client_diagnostics(results)
        d = float(num_params(state.params))
        fields = dict(uplink_params=vectors_up * d, train_loss=loss, clients=diag,
                      downlink_params=None if vectors_down is None else vectors_down * d)
        eps = self.epsilon(new.round, new)
        if self.aggregator.exact:
            return new, (RoundReport(**fields) if eps is None else UplinkReport(
                **fields, epsilon=eps, dp_clip_norm=self.privacy.clip_norm(state)
                if self.hp.dp_clip_quantile is not None else None))
        nothing = bool(infos) and infos[0].received_nothing  # the model's own: all silent
        mse, silent = AggregateInfo.merged(infos)
        channel = self.privacy.channel_multiplier(state, infos, len(results)) \
            if self.hp.dp == "over_the_air" else None
        return new, UplinkReport(**fields, aircomp_mse=mse, silent_clients=silent, epsilon=eps,
                                 dp_channel_noise=channel,
                                 dp_clip_norm=self.privacy.clip_norm(state)
                                 if self.hp.dp_clip_quantile is not None else None,
                                 cumulative={"empty_rounds": float(nothing)})

    def uplink_sum(self, state: ServerState, trees: list[Params] | Params,
                   coefs: np.ndarray, rows: np.ndarray | None = None,
                   clients: int | None = None,
                   ids: np.ndarray | None = None) -> tuple[Params, AggregateInfo]:
        """Σ_i coef_i tree_i of a second uploaded vector, as received over the air, and its info.

        For control variates and tracking terms (gradient units, one symbol = 1); only for a
        non-exact uplink: exact algorithms keep their own arithmetic. Over the air it goes
        over the channel of the round's model update (``network.vector_channel: round``):
        sent by a subset of the round's ``clients``, at positions ``rows`` among them, each
        sender keeps its own channel of the round
        (:class:`~wirelessfl.server.aggregation.RoundChannel`). ``trees`` is a list of
        per-client trees, or their stack ``(C, …)`` (a dict); ``ids`` the senders' client ids
        (for a channel whose gains belong to the clients).
        """
        total = float(np.sum(coefs))
        how = self.uplink.aggregate_stack if isinstance(trees, dict) else self.uplink.aggregate
        stream = self.env.seeds.generator("noise", state.round)  # the round's first aggregation's
        channel = stream if rows is None else RoundChannel(stream, int(clients), np.asarray(rows))
        got, info = how(trees, np.asarray(coefs, float),
                        self.env.seeds.generator("noise", state.round, 1), unit=1.0,
                        channel=channel, **({} if ids is None else self.client_ids(ids)))
        return {k: total * v for k, v in got.items()}, info


@dataclass(frozen=True)
class UplinkReport(RoundReport):
    """A round's uplink measures: AirComp MSE and silent clients, or the ε spent so far.

    Over the air: the mean AirComp MSE per entry (25) and the silent clients; under ``dp``
    the ε spent so far (at ``dp_delta``); under ``dp: over_the_air`` the channel's own noise
    multiplier z_t of the round's model update (before any top-up); with adaptive clipping
    the clip norm C_t the round used.
    """

    aircomp_mse: float | None = None
    silent_clients: int | None = None
    epsilon: float | None = None
    dp_channel_noise: float | None = None
    dp_clip_norm: float | None = None
