"""Hyperparameters of FedAST (``docs/papers/fedast.md`` §2, §7) and of Sync-ST (§3)."""

from __future__ import annotations

from dataclasses import dataclass

from channels.validation import as_float, as_int
from wirelessfl.algorithms.fedast.snapshot import snapshot_type


@dataclass(frozen=True)
class FedASTHParams:
    """FedAST: buffered asynchronous training of several tasks on one client pool (§2.7).

    Attributes
    ----------
    option : str
        ``S`` (static) or ``D`` (dynamic Realloc).
    requests : int
        Total request budget R, split evenly at the start (R_m^(0) = R / M).
    ratio : int
        r = R_m / b_m, held fixed (32 [code]).
    buffer : int or None
        Fixed buffer size b_m (None: max(1, round(R_m / r)), §7 item 12); 1 is FedAST-NoBuffer.
    server_lr : float
        η_s (0.1 for FedAST, 0.038 for NoBuffer).
    window : int
        V, the number of recent updates of the variance estimate.
    period : float
        c_period = ``period`` × M × Σ_m R_m arrivals between reallocations.
    variance : str
        ``paper`` (R_m ∝ √(η_c η_s τ σ̃²)) or ``code`` (∝ η_s σ̃² / (η_c τ²), §7 item 6).
    max_batch : int
        Most requests trained in one executor call, and most trained results held at once
        (bounds memory whatever R; the results do not depend on it).
    cap_initial_burst : bool
        Apply the availability cap to the initial R requests too (default, so the cap is
        never exceeded; refused ones are made up at later arrivals); ``False`` exempts the
        burst as the authors' code does (§7 item 1).
    """

    option: str = "S"
    requests: int = 384
    ratio: int = 32
    buffer: int | None = None
    server_lr: float = 0.1
    window: int = 8
    period: float = 0.75
    variance: str = "paper"
    max_batch: int = 64
    cap_initial_burst: bool = True

    def __post_init__(self) -> None:
        if self.option not in ("S", "D"):
            raise ValueError(f"`option` must be S or D, got {self.option!r}")
        if self.variance not in ("paper", "code"):
            raise ValueError(f"`variance` must be paper or code, got {self.variance!r}")
        if self.requests < 1 or self.ratio < 1 or (self.buffer is not None and self.buffer < 1):
            raise ValueError("`requests`, `ratio` and `buffer` must be >= 1")
        as_int("requests", self.requests, lo=1, hi=10**5)
        as_int("ratio", self.ratio, lo=1, hi=10**5)
        as_float("server_lr", self.server_lr, lo=0, hi=1e4, lo_open=True)
        as_int("window", self.window, lo=2, hi=10**4)
        as_float("period", self.period, lo=0, hi=1e6, lo_open=True)
        as_int("max_batch", self.max_batch, lo=1, hi=4096)


#: Sync-ST's client-to-task assignments (:mod:`wirelessfl.algorithms.fedast.assignment`).
ASSIGNMENT_NAMES = ("random", "bayes", "ucb")


@snapshot_type
@dataclass(frozen=True)
class SyncSTHParams:
    """Sync-ST: synchronous multi-task rounds, each task its share of the clients (§3.1).

    Attributes
    ----------
    first_k : int or None
        Keep the k earliest finishers per task (30); None keeps all (NoStrag.Mit).
    clients : int
        Σ_m n_m, clients drawn per round (the 300 available).
    split : tuple of int or None
        n_m per task (e.g. 100/84/48/68); None splits ``clients`` evenly, the remainder at
        random.
    server_lr : float
        η_s (1: plain FedAvg averaging).
    assignment : str
        ``random`` (Sync-ST), ``bayes`` (Sync-Bayes-ST) or ``ucb`` (Sync-UCB-ST).
    bayes_alpha : float
        α of Sync-Bayes-ST's cost (latency vs fairness, 0.25 [code]).
    ucb_discount : float
        γ of Sync-UCB-ST (0.99 [code]).
    """

    first_k: int | None = 30
    clients: int = 300
    split: tuple[int, ...] | None = None
    server_lr: float = 1.0
    assignment: str = "random"
    bayes_alpha: float = 0.25
    ucb_discount: float = 0.99

    def __post_init__(self) -> None:
        if self.first_k is not None and self.first_k < 1:
            raise ValueError(f"`first_k` must be >= 1 or null, got {self.first_k}")
        if self.clients < 1 or not self.server_lr > 0:
            raise ValueError("`clients` must be >= 1 and `server_lr` > 0")
        if self.assignment not in ASSIGNMENT_NAMES:
            raise ValueError(f"`assignment` must be one of {', '.join(ASSIGNMENT_NAMES)}, got "
                             f"{self.assignment!r}")
        if self.split is not None and (sum(self.split) != self.clients or min(self.split) < 1):
            raise ValueError(f"`split` {self.split} must be positive and sum to `clients` "
                             f"({self.clients})")
