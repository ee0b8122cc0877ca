"""RA-Fed's hyperparameters (``docs/papers/rafed.md``), shared by RAM-Fed and the §3 baselines."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from channels.rates import BANDWIDTH_HZ
from channels.validation import as_float, as_int
from wirelessfl.algorithms.rafed.masks import POLICIES
from wirelessfl.engine import client_store
from wirelessfl.net.compression import OPERATORS
from wirelessfl.net.resources import check_scenario


@dataclass(frozen=True)
class RAFedHParams:
    """RA-Fed: resource-aware random submodels with coverage-aware aggregation (its defaults).

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
    cycles_per_step: float = dataclasses.field(default=1e7, metadata={"unit": "CPU cycles"})

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
        defaults = {f.name: f.default for f in dataclasses.fields(type(self))}
        inert = [("fraction", self.fraction is not None and self.ratios != defaults["ratios"],
                  "replaces `ratios`: give one of them"),
                 ("gamma_min", self.gamma_min != defaults["gamma_min"]
                  and self.policy != "coverage_aware", "is a setting of policy coverage_aware"),
                 ("deadline_s", self.deadline_s is not None and self.resources != "deadline",
                  "is a setting of resources: deadline"),
                 ("deadline_quantile", self.deadline_quantile != defaults["deadline_quantile"]
                  and (self.resources != "deadline" or self.deadline_s is not None),
                  "sets the deadline of resources: deadline when deadline_s is not given"),
                 ("bits", self.bits != defaults["bits"] and self.compression != "quantize",
                  "is a setting of compression: quantize"),
                 ("keep", self.keep != defaults["keep"] and self.compression != "topk",
                  "is a setting of compression: topk")]
        for key, bad, why in inert:
            if bad:
                raise ValueError(f"`{key}` {why}; as set it would not take effect")


@dataclass(frozen=True)
class RAMFedHParams(RAFedHParams):
    """RAM-Fed (§2.3): RA-Fed's masks with the per-client memory."""

    memory: bool = True
