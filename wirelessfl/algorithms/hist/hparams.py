"""HIST's hyperparameters (``docs/papers/hist.md`` §6) and the paper's uplink accounting (§6.6)."""

from __future__ import annotations

from dataclasses import dataclass

from channels.validation import as_float, as_int
from solvers.beamforming import METHODS as BEAMFORMING_METHODS
from wirelessfl.algorithms.hist.hfedavg import HFedAvgHParams
from wirelessfl.net.resources import check_scenario

MASK_SIZES = ("uniform", "optimised")
AGGREGATIONS = ("oma", "aircomp")
BIAS_MODES = ("split_and_average", "code_faithful")


def table_uplink_mb(edge_rounds: int, size_mb: float, vol_c: int, vol_f: int,
                    share: float) -> float:
    """Uplink MB per client of one global round in the paper's convention (§6.6, Table I).

    E × size × (vol_c + share · vol_f) / (vol_c + vol_f), with ``share`` the client's fraction
    of the split units (1/N for the uniform split, 1 for HFedAvg). With LeNet-5's
    (0.169 MB, 2572, 59134) this gives 0.845 MB per HFedAvg round and reproduces Table I to
    ±0.01 MB (6 of its 16 entries differ by 0.01 MB from whole rounds times this).
    """
    return edge_rounds * size_mb * (vol_c + share * vol_f) / (vol_c + vol_f)


@dataclass(frozen=True)
class HISTHParams(HFedAvgHParams):
    """HIST: hierarchical submodel training, each cell a disjoint slice of the model.

    HFedAvg's settings, plus the masks and the physical layer.

    Attributes
    ----------
    mask_sizes : str
        ``"uniform"`` or ``"optimised"`` (per-round MILP (20)/(36)).
    aggregation : str
        ``"oma"`` (exact averages, TDMA latency (17)) or ``"aircomp"``.
    eps_th : float
        ε_th / δ₁² (κ) of the cap (19c): k_j ≤ ⌊κ K / (6N)⌋ [default 9 → 1.5 K / N].
    snr_db : tuple of float
        SNR of the first ⌊N/2⌋ cells and of the rest [dB] (§6.4: 30, 40).
    antennas : int
        Edge antennas M.
    beamforming : str
        Receive beamforming method for AirComp.
    real_part_noise, tight_power : bool
        AirComp options of §8.4 items 16 and 17.
    normalise_symbols : bool
        AirComp's symbol normalisation (§8.4 item 18): the clients scale their accumulated
        gradients by one common factor (the largest RMS, sent digitally) so every analog
        symbol has average power ≤ 1, the reading in which the paper's SNR is that of
        §VI-C's unit-power symbols; false (default): the literal reading, the gradients sent
        as they are (RMS 0.15-0.26 per entry for the FCNN, 12-16 dB below unit power).
    cpu_ghz : pair of (low, high)
        CPU frequency ranges [GHz] of the first ⌊N/2⌋ cells and of the rest (§6.4; Fig. 7(b)
        uses (2, 4) for all).
    cpu_redraw : bool
        Redraw CPU frequencies every round (default: once per client, §6.4 [default]).
    bias_mode : str
        ``"split_and_average"`` (default: a unit's bias moves with it) or ``"code_faithful"``
        (the authors' code, §1.3(f): every fully connected layer is rebuilt at each dispatch,
        so cells get freshly initialised biases for all of them — split or not, e.g. FCNN's
        ``fc2.bias`` and LeNet-5's unsplit FC biases — drawn with the submodel's fan-in, and
        never send them back: the global model keeps its initial FC biases; convolution
        biases are aggregated as usual).
    clock : str
        What times a round: ``own`` (default: HIST's eqs. (18)/(35), its own channels and CPU
        draws, whatever the network section says) or ``link`` (the run's ``network`` link,
        cell by cell: each cell's clients upload under the link on their cell's band, the
        cells in parallel, E edge rounds; needs a named link, e.g. ``nr`` with
        ``network.cells`` = ``cells`` so that each cell is a sector).
    split : bool
        False: no submodels (every cell trains the full model) — HFedAvg with the same
        physical layer and accounting.
    """

    mask_sizes: str = "uniform"
    aggregation: str = "oma"
    eps_th: float = 9.0
    snr_db: tuple[float, float] = (30.0, 40.0)
    antennas: int = 10
    beamforming: str = "fast"
    real_part_noise: bool = False
    tight_power: bool = False
    normalise_symbols: bool = False
    cpu_ghz: tuple[tuple[float, float], tuple[float, float]] = ((1.0, 2.0), (2.0, 4.0))
    cpu_redraw: bool = False
    bias_mode: str = "split_and_average"
    split: bool = True
    clock: str = "own"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mask_sizes not in MASK_SIZES:
            raise ValueError(f"mask_sizes must be one of {MASK_SIZES}, got {self.mask_sizes!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation mode {self.aggregation!r}; use one of "
                             f"{AGGREGATIONS}")
        if self.clock not in ("own", "link"):
            raise ValueError(f"clock must be 'own' or 'link', got {str(self.clock)[:40]!r}")
        if self.bias_mode not in BIAS_MODES:
            raise ValueError(f"bias_mode must be one of {BIAS_MODES}, got {self.bias_mode!r}")
        check_scenario(self.snr_db, self.cpu_ghz)
        if not isinstance(self.normalise_symbols, bool):
            raise ValueError(f"normalise_symbols must be true or false, got "
                             f"{str(self.normalise_symbols)[:40]!r}")
        if self.normalise_symbols and self.aggregation != "aircomp":
            raise ValueError("normalise_symbols scales AirComp's analog symbols: set "
                             "aggregation: aircomp with it, or remove it")
        as_int("antennas", self.antennas, lo=1, hi=4096)
        as_float("eps_th", self.eps_th, lo=0, hi=1e6, lo_open=True)
        if self.beamforming not in BEAMFORMING_METHODS:
            raise ValueError(f"beamforming must be one of {', '.join(BEAMFORMING_METHODS)}, got "
                             f"{self.beamforming!r}")
