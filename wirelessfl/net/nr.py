"""``network.model: nr``: a 5G NR uplink with Sionna's radio (38.901, 38.213, PHY tables).

**Deployment** (once per run, from the run's ``deployment`` stream). A TR 38.901 hexagonal
grid of 7 sites × 3 sectors with the ``scenario``'s inter-site distance and heights
(``sionna.sys.gen_hexgrid_topology``, Tables 7.2-1 and 7.2-3). The N clients are users
dropped uniformly in the first ``cells`` sectors, client u in sector ⌊u·cells/N⌋ (HIST's
cells, ``docs/papers/hist.md`` §1.1, when ``cells`` is its N). A client's large-scale loss
to its sector, PL_u, is TR 38.901's path loss (§7.4.1, LoS/NLoS drawn per §7.4.2) with
the outdoor-to-indoor loss (§7.4.3, low-loss model) and log-normal shadow fading, drawn by
Sionna's scenario and LSP generator, fixed for the run. Antenna element gains are not
modelled (0 dBi).

**Each round** (its ``("network", t)`` stream, as every digital link; no loop over clients
or slots):

- PRBs: N_RB from ``bandwidth_mhz`` and ``scs_khz`` (TS 38.101-1 Table 5.3.2-1). A client
  transmits on the most PRBs its power reaches at the open-loop target, at least one (a
  power-limited client at the cell edge concentrates its power):
  M_u = clip(⌊10^((P_max − P0 − α·PL_u)/10)⌋, 1, N_RB);
- power: TS 38.213 §7.1.1's open loop, P_u = min(P_max, P0 + α·PL_u + 10 log10 M_u)
  (``sionna.sys.open_loop_uplink_power_control``);
- SINR: SIMO Rayleigh fading over ``bs_antennas`` receive antennas (``channels``' draw:
  block fading, one draw per client and round, flat over its PRBs), maximum-ratio
  combining, thermal noise with the BS ``noise_figure_db``:
  SINR_u = P_u·‖h_u‖² / (PL_u · (kT·F · 12·M_u·Δf + M_u·I_c)), where I_c is the other
  cells' interference per PRB at the client's sector c: none by default
  (``interference: false``), or with ``interference: true`` its mean over the other cells'
  transmitters and their schedules, treated as spatially white noise:

  - every one of the grid's 21 sectors transmits. A sector holding clients serves one of them
    at a time (TDMA, each equally likely), on M_u of its N_RB PRBs at P_u; a sector without
    clients is fully loaded by one user of its own drop, with its own open-loop power per
    PRB on every PRB;
  - so I_c = Σ_{s≠c, clients} P_u / (N_RB·n_s·L_{c,u}) + Σ_{s≠c, others} P_j / (M_j·L_{c,j}),
    with n_s the clients of sector s and L_{c,j} the loss from transmitter j to sector c's
    antenna (linear);
  - the cross losses L_{c,j} (and the other sectors' users' own losses) are a second draw of
    Sionna's scenario on the same drop, with every sector and transmitter: the clients' own
    losses PL_u are those of the drop without interference, so turning it on changes the
    SINR only, not the drop. A sector's antenna discriminates against the transmitters
    outside its boresight by TR 38.901's horizontal element pattern,
    A(φ) = −min(12(φ/65°)², 30) dB (Table 7.3-1), added to the cross losses; every link to
    its own sector keeps 0 dB, as the serving links do (their element gain is not modelled);
- MCS: inner-loop link adaptation at ``bler_target`` (``sionna.sys.InnerLoopLinkAdaptation``:
  the highest MCS of PUSCH table 1 whose transport-block error rate meets it);
  transport-block size from TS 38.214 §5.1.3.2 (``sionna.phy.nr.utils.calculate_tb_size``)
  on 12·M_u subcarriers × 12 data symbols of a slot's 14 (2 DM-RS); TBLER from Sionna's
  PHY abstraction (``PHYAbstraction``: EESM effective SINR and BLER tables);
- upload: the round's clients take the band one after another (time division, shortest
  first, as ``tdma``; with ``sharing: round_robin`` they take its slots in turn, each an
  equal share while it still uploads), each slot carrying one transport block that is decoded with
  probability 1 − TBLER; HARQ resends a failed block until it is decoded. A payload of P
  bits so takes on average P / R_u with R_u = TBS_u·(1 − TBLER_u) / T_slot and
  T_slot = 1 ms / 2^μ. The clock uses this mean: over the hundreds of blocks of a model
  update the HARQ draws' spread, √(TBLER/K) relative for K blocks, is a few percent.

**Outer-loop link adaptation** (``link_adaptation: outer``): each slot fades anew and the
MCS is chosen on the client's mean SINR lowered by OLLA's offset, which HARQ feedback moves
(:mod:`wirelessfl.net.olla`); the clock uses the offset's long-run law, solved once per run
(:meth:`NRLink.outer_loop`).

Deadlines, ``late``, schedulers and compression are those of every digital link
(:mod:`wirelessfl.net.digital`), on these rates; ``retime`` re-clocks a run under ``nr``.
The link's few tensors (N clients) live on the CPU: they make the clock, not the model.

Sionna is an optional extra (``pip install wirelessfl[nr]``). Its import and its PHY
tables (seconds) are built once per process. Sionna's draws run under its global seed,
set from the run's stream for the drop and restored after it; PyTorch's own generators are
left as they were (Sionna reseeds them when its seed is set).
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from typing_extensions import override

from channels.rayleigh import simo_rayleigh
from channels.validation import as_float, as_int
from solvers.sharing import finish_times, share_rates, shares
from solvers.uplink import deadline_outage
from wirelessfl.errors import ConfigError
from wirelessfl.net.digital import DigitalLink, DigitalUplink, RoundChannels, ShapingSettings, Upload

#: TR 38.901 scenarios of a hexagonal grid (urban micro, urban macro, rural macro).
SCENARIOS = ("umi", "uma", "rma")
#: Transmission bandwidth N_RB in PRBs per subcarrier spacing [kHz] and channel bandwidth
#: [MHz], FR1 (TS 38.101-1 Table 5.3.2-1).
N_RB: dict[int, dict[int, int]] = {
    15: {5: 25, 10: 52, 15: 79, 20: 106, 25: 133, 30: 160, 40: 216, 50: 270},
    30: {5: 11, 10: 24, 15: 38, 20: 51, 25: 65, 30: 78, 40: 106, 50: 133, 60: 162, 70: 189,
         80: 217, 90: 245, 100: 273},
    60: {10: 11, 15: 18, 20: 24, 25: 31, 30: 38, 40: 51, 50: 65, 60: 79, 70: 93, 80: 107,
         90: 121, 100: 135},
}
#: OFDM symbols of a slot that carry data (14 less 2 DM-RS symbols).
DATA_SYMBOLS = 12
#: Thermal noise density kT at 290 K [dBm/Hz].
THERMAL_DBM_HZ = -174.0
#: Sectors of the grid (7 sites of 3 sectors: one ring around the centre site).
MAX_CELLS = 21
#: The highest TBLER the clock uses (a client in a deep fade still ends its upload).
TBLER_CAP = 0.999
#: Link adaptation: the inner loop on each round's SINR, or the outer loop on the mean SINR.
LINK_ADAPTATION = ("inner", "outer")
#: How a sector's band is shared among the round's uploads: in frequency (each slot's PRBs
#: among the clients still uploading, :mod:`solvers.sharing`), or in time (one client a
#: slot on its open-loop PRBs: the model of runs made before 2026-11-28).
SHARING = ("ofdma", "proportional_fair", "tdma", "round_robin")
#: The sharings in frequency and :mod:`solvers.sharing`'s rule of each.
FREQUENCY_RULES = {"ofdma": "round_robin", "proportional_fair": "proportional_fair"}
#: How a client's SINR on its PRBs becomes a rate: Sionna's PHY tables (MCS, TBS, BLER), or
#: Shannon's capacity on the same PRBs and symbols (an ideal PHY on the same drop).
RATE_MODELS = ("tables", "shannon")
#: The SINR grid of the PHY tables the frequency sharings read [dB]: from, to, step.
GRID_DB = (-12.0, 36.0, 0.05)
#: Points of the fading quadrature for a slot's error rate averaged over its fading.
FADING_POINTS = 32
#: MCS indices of PUSCH table 1.
MCS_COUNT = 28


@dataclass(frozen=True)
class NRSettings(ShapingSettings):
    """Settings of the ``nr`` link; defaults from the standards and from Sionna's own.

    Attributes
    ----------
    scenario : str
        TR 38.901 scenario: ``umi`` (street canyon, ISD 200 m), ``uma`` (500 m) or ``rma``
        (1,732 m) [default umi].
    carrier_hz : float
        Carrier frequency [Hz], FR1 (0.5–7.125 GHz) [default 3.5e9, band n78].
    bandwidth_mhz : int
        Channel bandwidth [MHz]; with ``scs_khz`` gives N_RB (TS 38.101-1 Table 5.3.2-1)
        [default 20].
    scs_khz : int
        Subcarrier spacing Δf = 15·2^μ kHz: 15, 30 or 60 [default 30, μ = 1, 0.5 ms slots].
    bs_antennas : int
        Receive antennas of a sector (SIMO, maximum-ratio combining) [default 4].
    ut_max_power_dbm : float
        A client's maximum transmit power [dBm] (TS 38.101-1 power class 3) [default 23].
    p0_dbm : float
        P0, the open-loop target received power per PRB [dBm] (TS 38.213 §7.1.1; Sionna's
        default) [default -90].
    alpha : float
        α ∈ [0, 1], the path-loss compensation (1: full, Sionna's default) [default 1].
    noise_figure_db : float
        The base station's noise figure [dB] (TR 38.901 Table 7.8-1's calibration: 5 dB)
        [default 5].
    bler_target : float
        Link adaptation's transport-block error-rate target [default 0.1].
    cells : int
        Sectors the clients are dropped in (1 to 21; HIST's N cells) [default 1].
    interference : bool
        Whether the other sectors' transmitters interfere (their mean interference, module
        docstring) [default false: thermal noise only].
    link_adaptation : str
        ``inner`` (default): block fading per round, the MCS chosen on that round's SINR
        (inner loop only). ``outer``: fading per slot, the MCS chosen on the client's mean
        SINR lowered by outer-loop link adaptation's offset (module docstring).
    olla_step_db : float
        OLLA's NACK step δ_up [dB] (``outer``; Sionna's default) [default 1].
    sharing : str
        How the round's uploading clients of a sector share its band (module docstring):
        ``ofdma`` (default: each slot's PRBs shared among the clients still uploading, round
        robin over PRBs, each at most the PRBs that maximise its rate), ``proportional_fair``
        (the PRB shares of proportional fairness), or the model of runs made before
        2026-11-28, one client a slot on its open-loop PRBs with the rest of the band idle:
        ``tdma`` (one after another, the shortest upload first) or ``round_robin`` (each slot
        to the next client still uploading; :func:`solvers.uplink.deadline_outage`).
    harq_max : int
        The most HARQ transmissions of a transport block (TS 38.321's HARQ, typically 4); 0:
        unbounded, every block resent until decoded (runs made before 2026-11-28) [default 4].
    arq_max : int
        RLC acknowledged mode's retransmissions of a block that HARQ lost (TS 38.322's
        maxRetxThreshold), each with ``harq_max`` HARQ transmissions; a block lost after all
        of them is a radio-link failure: the upload fails and the client is in outage for the
        round [default 4].
    min_sinr_db : float or None
        A client whose SINR on one PRB (the most its power control reaches per PRB) is below
        this is not served this round: in outage (None: everyone is served) [default -5].
    rate_model : str
        ``tables`` (default): link adaptation over Sionna's PUSCH tables. ``shannon``: the
        same drop, fading, power control, sharing and association, with each client's rate
        on m PRBs Shannon's capacity 12·m·Δf·log2(1 + SINR) over all 14 symbols of a slot,
        every block decoded (no MCS, BLER, HARQ or DM-RS overhead): the ideal PHY that
        figure (e) compares NR with. Sharings in frequency only.
    deadline_s, scheduler, compression, max_bits, late
        How the uplink shapes learning (:class:`~wirelessfl.net.digital.ShapingSettings`).
    """

    scenario: str = "umi"
    carrier_hz: float = 3.5e9
    bandwidth_mhz: int = 20
    scs_khz: int = 30
    bs_antennas: int = 4
    ut_max_power_dbm: float = 23.0
    p0_dbm: float = -90.0
    alpha: float = 1.0
    noise_figure_db: float = 5.0
    bler_target: float = 0.1
    cells: int = 1
    interference: bool = False
    link_adaptation: str = "inner"
    olla_step_db: float = 1.0
    sharing: str = "ofdma"
    harq_max: int = 4
    arq_max: int = 4
    min_sinr_db: float | None = -5.0
    rate_model: str = "tables"

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"`scenario` must be one of {', '.join(SCENARIOS)}, got "
                             f"{self.scenario!r}")
        as_float("carrier_hz", self.carrier_hz, lo=0.5e9, hi=7.125e9)
        if self.scs_khz not in N_RB or isinstance(self.scs_khz, bool):
            raise ValueError(f"`scs_khz` must be 15, 30 or 60 (FR1 numerologies), got "
                             f"{self.scs_khz!r}")
        table = N_RB[self.scs_khz]
        if isinstance(self.bandwidth_mhz, bool) or self.bandwidth_mhz not in table:
            raise ValueError(f"`bandwidth_mhz` {self.bandwidth_mhz!r} is not a channel bandwidth "
                             f"of {self.scs_khz} kHz subcarriers (TS 38.101-1 Table 5.3.2-1): "
                             f"choose one of {', '.join(map(str, table))}")
        as_int("bs_antennas", self.bs_antennas, lo=1, hi=1024)
        as_float("ut_max_power_dbm", self.ut_max_power_dbm, lo=-40, hi=40)
        as_float("p0_dbm", self.p0_dbm, lo=-202, hi=24)  # TS 38.213's P0 range
        as_float("alpha", self.alpha, lo=0, hi=1)
        as_float("noise_figure_db", self.noise_figure_db, lo=0, hi=30)
        as_float("bler_target", self.bler_target, lo=0, hi=1, lo_open=True, hi_open=True)
        as_int("cells", self.cells, lo=1, hi=MAX_CELLS)
        if not isinstance(self.interference, bool):
            raise ValueError(f"`interference` must be true or false, got {self.interference!r}")
        if self.link_adaptation not in LINK_ADAPTATION:
            raise ValueError(f"`link_adaptation` must be one of {', '.join(LINK_ADAPTATION)}, "
                             f"got {self.link_adaptation!r}")
        as_float("olla_step_db", self.olla_step_db, lo=0, hi=10, lo_open=True)
        if self.olla_step_db != 1.0 and self.link_adaptation != "outer":
            raise ValueError("`olla_step_db` is outer-loop link adaptation's step: set "
                             "link_adaptation: outer with it, or leave it out")
        if self.sharing not in SHARING:
            raise ValueError(f"`sharing` must be one of {', '.join(SHARING)}, got "
                             f"{self.sharing!r}")
        as_int("harq_max", self.harq_max, lo=0, hi=32)
        as_int("arq_max", self.arq_max, lo=0, hi=32)
        if self.arq_max != 4 and self.harq_max == 0:
            raise ValueError("`arq_max` retransmits blocks that HARQ gave up on, but harq_max 0 "
                             "never gives up: set harq_max >= 1 with it, or remove it")
        if self.min_sinr_db is not None:
            as_float("min_sinr_db", self.min_sinr_db, lo=-50, hi=50)
        if self.rate_model not in RATE_MODELS:
            raise ValueError(f"`rate_model` must be one of {', '.join(RATE_MODELS)}, got "
                             f"{self.rate_model!r}")
        if self.rate_model == "shannon" and (self.sharing not in FREQUENCY_RULES
                                             or self.link_adaptation != "inner"):
            raise ValueError("`rate_model: shannon` is built for the sharings in frequency "
                             f"({', '.join(FREQUENCY_RULES)}) with link_adaptation inner: "
                             "remove sharing or link_adaptation with it")
        if self.link_adaptation == "outer" and self.sharing in FREQUENCY_RULES:
            raise ValueError(f"`link_adaptation: outer` is built for the sharings in time only "
                             f"(tdma, round_robin), not sharing {self.sharing}: set "
                             "sharing: tdma (or round_robin) with it")
        super().__post_init__()

    @property
    def prbs(self) -> int:
        """N_RB, the band's PRBs."""
        return N_RB[self.scs_khz][int(self.bandwidth_mhz)]

    @property
    def slot_s(self) -> float:
        """T_slot = 1 ms / 2^μ [s]."""
        return 1e-3 * 15 / self.scs_khz

    @property
    def transmissions(self) -> int:
        """L = harq_max·(arq_max + 1), the most transmissions of one block (0: unbounded)."""
        return self.harq_max * (self.arq_max + 1)

    @property
    def outage(self) -> bool:
        """Whether clients can be in outage (a transmission limit or an association rule)."""
        return self.harq_max > 0 or self.min_sinr_db is not None


# --------------------------------------------------------------------------- Sionna
_LOCK = threading.Lock()  # Sionna's seed is global: one drop at a time


@contextlib.contextmanager
def _torch_rng_kept() -> Iterator[None]:
    """PyTorch's global generators as they were after the block (Sionna reseeds them)."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        yield


@functools.cache
def sionna() -> Any:
    """The ``sionna`` package, imported once (without it: a ConfigError naming the extra)."""
    try:
        with _torch_rng_kept():
            import sionna.phy  # noqa: F401  (its config reseeds torch at import)
            import sionna.sys  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"network.model nr needs Sionna: pip install 'wirelessfl[nr]' "
                          f"(sionna-no-rt); {type(exc).__name__}: {str(exc)[:80]}") from None
    import sionna as sn
    return sn


def _preparing(what: str) -> None:
    """Say on stderr what the first NR round prepares (once per process: seconds to a minute)."""
    print(f"wirelessfl: preparing the NR radio: {what} (once per process)", file=sys.stderr,
          flush=True)


@functools.cache
def radio() -> tuple[Any, Any]:
    """Sionna's PHY abstraction (its BLER tables, built once) and inner-loop link adaptation."""
    sn = sionna()
    _preparing("Sionna's PHY abstraction and BLER tables")
    with _torch_rng_kept():
        phy = sn.sys.PHYAbstraction(precision="double", device="cpu")
        return phy, sn.sys.InnerLoopLinkAdaptation(phy, bler_target=0.1, precision="double",
                                                   device="cpu")


@dataclass(frozen=True)
class PHYTables:
    """Sionna's PUSCH error rates and block sizes on a SINR grid, for every PRB count.

    Built once per band (:func:`phy_tables`) so that a round's link adaptation for every
    client and PRB count is a table look-up (the nearest grid point) instead of a Sionna call
    per entry.

    Attributes
    ----------
    grid_db : np.ndarray
        (G,) the SINR grid [dB] (:data:`GRID_DB`).
    tbs : np.ndarray
        (M, 28) the transport-block size [bits] of each MCS on m = 1 … M PRBs (TS 38.214).
    tbler : np.ndarray
        (M, 28, G) its TBLER at each grid SINR (Sionna's ``PHYAbstraction``; 1 where Sionna
        has no table: MCS 0-2 and 28 of PUSCH table 1).
    valid : np.ndarray
        (28,) the MCS indices Sionna has tables for.
    """

    grid_db: np.ndarray
    tbs: np.ndarray
    tbler: np.ndarray
    valid: np.ndarray

    def adapt(self, sinr: np.ndarray, target: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Inner-loop link adaptation of (..., M) per-PRB SINRs on 1 … M PRBs (linear).

        Each SINR reads the nearest grid point (0.025 dB at most away).
        The highest MCS whose TBLER meets ``target`` (the lowest valid one where none does),
        as ``sionna.sys.InnerLoopLinkAdaptation``: (MCS, TBS [bits], TBLER), each (..., M).
        """
        lo, _, step = GRID_DB
        with np.errstate(divide="ignore"):
            pos = (10.0 * np.log10(np.maximum(sinr, 1e-30)) - lo) / step
        near = np.rint(np.clip(pos, 0.0, len(self.grid_db) - 1.0)).astype(np.int64)
        m = np.arange(self.tbs.shape[0])
        rates = self.tbler[m, :, near]  # (..., M, 28)
        ok = (rates <= target) & self.valid
        top = self.valid.size - 1 - np.argmax(ok[..., ::-1], axis=-1)
        mcs = np.where(ok.any(-1), top, int(np.argmax(self.valid)))
        tbler = np.take_along_axis(rates, mcs[..., None], -1)[..., 0]
        tbs = self.tbs[m, mcs]
        return mcs, tbs, tbler


@functools.cache
def phy_tables(prbs: int) -> PHYTables:
    """:class:`PHYTables` for m = 1 … ``prbs`` PRBs (built once per process and band)."""
    phy, _ = radio()
    _preparing(f"the link adaptation tables of {prbs} PRBs")
    lo, hi, step = GRID_DB
    grid = np.arange(lo, hi + step / 2, step)
    g = len(grid)
    res = torch.arange(1, prbs + 1, dtype=torch.int32) * 12 * DATA_SYMBOLS
    mcs = torch.arange(MCS_COUNT, dtype=torch.int32)
    shape = (prbs, MCS_COUNT, g)
    with _torch_rng_kept():
        tbler = phy(mcs[None, :, None].expand(shape).reshape(-1),
                    sinr_eff=torch.as_tensor(10.0 ** (grid / 10.0))[None, None, :]
                    .expand(shape).reshape(-1),
                    num_allocated_re=res[:, None, None].expand(shape).reshape(-1),
                    check_mcs_index_validity=False)[3].reshape(shape).numpy()
    valid = np.isfinite(tbler).all(axis=(0, 2))
    tbs = NRLink.block_bits(mcs[None, :].expand(prbs, MCS_COUNT),
                            res[:, None].expand(prbs, MCS_COUNT)).numpy().astype(float)
    return PHYTables(grid, np.where(valid, tbs, 0.0), np.where(np.isfinite(tbler),
                                                               np.minimum(tbler, 1.0), 1.0),
                     valid)


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Sionna's global seed set to ``seed`` for the block, then restored; torch's kept."""
    config = sionna().phy.config
    with _LOCK, _torch_rng_kept():
        before = config.seed
        config.seed = seed
        try:
            yield
        finally:
            config.seed = before


@dataclass(frozen=True)
class Deployment:
    """Where a run's clients are: each one's sector and large-scale loss, fixed for the run.

    Attributes
    ----------
    cell : np.ndarray
        (N,) the sector of each client (0 … cells − 1).
    distance_m : np.ndarray
        (N,) the 3-D distance to its sector's antenna [m].
    los : np.ndarray
        (N,) whether the link is line of sight.
    pathloss_db : np.ndarray
        (N,) PL_u: path loss with O2I loss and shadow fading to its sector [dB].
    cross_db : np.ndarray or None
        With ``interference``: (21, J) the loss from each transmitter j to each sector's
        antenna [dB], of the J = N clients and then one user of each sector without clients
        (a second draw on the same drop); None without.
    serving : np.ndarray or None
        With ``interference``: (J,) each transmitter's sector; None without.
    """

    cell: np.ndarray
    distance_m: np.ndarray
    los: np.ndarray
    pathloss_db: np.ndarray
    cross_db: np.ndarray | None = None
    serving: np.ndarray | None = None


def drop(settings: NRSettings, num_clients: int, seed: int) -> Deployment:
    """Drop ``num_clients`` clients in the grid's first ``settings.cells`` sectors (seeded)."""
    sn = sionna()
    tr = sn.phy.channel.tr38901
    n, cells = int(num_clients), settings.cells
    cell = (np.arange(n) * cells) // max(n, 1)
    per = int(np.bincount(cell, minlength=cells).max(initial=1))
    scenario_cls = {"umi": tr.UMiScenario, "uma": tr.UMaScenario, "rma": tr.RMaScenario}
    with _seeded(seed):
        ut_loc, bs_loc, ut_or, bs_or, ut_vel, indoor, los, virtual = \
            sn.sys.gen_hexgrid_topology(batch_size=1, num_rings=1, num_ut_per_sector=per,
                                        scenario=settings.scenario, precision="double",
                                        device="cpu")
        arrays = [tr.PanelArray(num_rows_per_panel=1, num_cols_per_panel=1,
                                polarization="single", polarization_type="V",
                                antenna_pattern="omni", carrier_frequency=settings.carrier_hz,
                                precision="double", device="cpu") for _ in range(2)]
        # users are dropped sector by sector: client u is user (its sector, its rank there);
        # only the clients and their sectors enter the scenario (the LSPs' spatial
        # correlation grows with the square of the users)
        rank = np.arange(n) - np.searchsorted(cell, cell)
        ut = torch.as_tensor(cell * per + rank)
        kwargs = {} if settings.scenario == "rma" else {"o2i_model": "low"}

        def draw_lsp(ut: torch.Tensor, bs: slice) -> tuple[Any, Any]:
            scenario = scenario_cls[settings.scenario](
                carrier_frequency=settings.carrier_hz, ut_array=arrays[0], bs_array=arrays[1],
                direction="uplink", precision="double", device="cpu", **kwargs)
            scenario.set_topology(ut_loc[:, ut], bs_loc[:, bs], ut_or[:, ut], bs_or[:, bs],
                                  ut_vel[:, ut], indoor[:, ut], los, virtual[:, bs][:, :, ut])
            sampler = tr.LSPGenerator(scenario)
            sampler.topology_updated_callback()  # its correlations for this drop
            return scenario, sampler()

        scenario, lsp = draw_lsp(ut, slice(0, cells))
        cross = serving = None
        if settings.interference:  # every sector, and one user of each without clients
            others = np.arange(cells, MAX_CELLS)
            every = torch.cat([ut, torch.as_tensor(others * per)])
            _, lsp_all = draw_lsp(every, slice(0, MAX_CELLS))
            serving = np.concatenate([cell, others])
            cross = _loss_db(lsp_all) - sector_pattern_db(
                virtual[0][:, every].numpy(), ut_loc[0, every].numpy(), bs_or[0, :, 0].numpy(),
                serving)
    mine = (cell, np.arange(n))
    loss = _loss_db(lsp)[mine]
    return Deployment(cell, scenario.distance_3d[0].numpy()[mine],
                      scenario.los[0].numpy()[mine].astype(bool), loss, cross, serving)


def sector_pattern_db(bs_xyz: np.ndarray, ut_xyz: np.ndarray, yaw: np.ndarray,
                      serving: np.ndarray) -> np.ndarray:
    """(sectors, users) each sector antenna's horizontal pattern towards each user [dB].

    A(φ) = −min(12(φ/65°)², 30) dB (TR 38.901 Table 7.3-1), 0 dB on each user's own link.
    ``bs_xyz`` (sectors, users, 3): each sector's antenna as each user sees it (the grid's
    wrap-around positions); ``yaw`` (sectors,): its boresight [rad].
    """
    d = ut_xyz[None, :, :2] - bs_xyz[:, :, :2]
    phi = np.degrees(np.angle(np.exp(1j * (np.arctan2(d[..., 1], d[..., 0]) - yaw[:, None]))))
    att = -np.minimum(12.0 * (phi / 65.0) ** 2, 30.0)
    att[serving, np.arange(len(serving))] = 0.0
    return att


def _loss_db(lsp: Any) -> np.ndarray:
    """(sectors, users) path loss with O2I loss and shadow fading of an LSP draw [dB]."""
    return lsp.pathloss[0].numpy() - 10 * np.log10(lsp.sf[0].numpy())


@dataclass(frozen=True)
class OuterLoop:
    """Each client's outer-loop link adaptation in the long run (``link_adaptation: outer``).

    Over the lattice of offsets Δ_k (:func:`wirelessfl.net.olla.offsets`): the MCS chosen
    at each, its transport-block size and its error rate averaged over the slot's fading,
    and π, the offset's stationary law (:func:`wirelessfl.net.olla.stationary_law`).

    Attributes
    ----------
    offsets_db : np.ndarray
        (K+1,) the lattice [dB].
    law, mcs, bits, bler : np.ndarray
        (N, K+1) π; m(Δ_k); TBS(m(Δ_k)) [bits]; p̄(Δ_k).
    """

    offsets_db: np.ndarray
    law: np.ndarray
    mcs: np.ndarray
    bits: np.ndarray
    bler: np.ndarray

    @property
    def achieved_bler(self) -> np.ndarray:
        """(N,) Σ_k π_k p̄_k: the fraction of a long upload's blocks that fail."""
        return np.sum(self.law * self.bler, -1)

    @property
    def bits_per_slot(self) -> np.ndarray:
        """(N,) Σ_k π_k TBS_k (1 − p̄_k): a long upload's mean decoded bits per slot."""
        return np.sum(self.law * self.bits * (1.0 - np.minimum(self.bler, TBLER_CAP)), -1)


@dataclass(frozen=True)
class NRRound(RoundChannels):
    """One round's NR radio for every client of the population (:meth:`NRLink.channels`).

    Per client u and PRB count m = 1 … M (M = 1 under the sharings in time, on the open-loop
    PRBs): the per-PRB SINR, MCS, TBS and TBLER, and r_u(m) = TBS·(1 − TBLER)/T_slot [bit/s].

    Attributes
    ----------
    rates : np.ndarray
        (N,) each client's rate alone, r_u(m*_u).
    access : str
        The ``sharing``.
    sinr, mcs, tbs, tbler, table : np.ndarray
        (N, M) the per-PRB SINR (linear), MCS, TBS [bits], TBLER and rate r_u(m) [bit/s].
    prbs : np.ndarray
        (N,) m*_u: the PRBs a client uses alone (the rate-maximising count; under the
        sharings in time, the open-loop count).
    associated : np.ndarray
        (N,) whether the client is served this round (SINR on one PRB ≥ ``min_sinr_db``).
    first_loss : np.ndarray
        (N,) J_u, the index of the first block that every transmission loses (a geometric
        draw with ε_u = TBLER_u^L; inf when L is unbounded or ε_u = 0).
    transmissions : int
        L, the most transmissions of a block (0: unbounded).
    capped : np.ndarray
        (N,) whether the client's SINR is beyond what the top MCS needs (MCS 27 meets the
        target with room: Sionna has no table for MCS 28).
    """

    sinr: np.ndarray
    mcs: np.ndarray
    tbs: np.ndarray
    tbler: np.ndarray
    table: np.ndarray
    prbs: np.ndarray
    associated: np.ndarray
    first_loss: np.ndarray
    transmissions: int
    capped: np.ndarray

    @property
    def rule(self) -> str | None:
        """:mod:`solvers.sharing`'s rule, or None for the sharings in time."""
        return FREQUENCY_RULES.get(self.access)

    def _at_best(self, values: np.ndarray, ids: np.ndarray) -> np.ndarray:
        return values[ids, self.prbs[ids] - 1] if values.shape[1] > 1 else values[ids, 0]

    @override
    def uplink(self, ids: np.ndarray, payload_bits: np.ndarray, deadline_s: float | None,
               compute_s: float) -> Upload:
        """The round's uploads of clients ``ids``: outage, shares, finish times, diagnostics.

        A client is in outage when it is not associated, or when its upload of
        K = ⌈bits/TBS⌉ blocks (at its PRBs alone) meets its first lost block (J ≤ K). It
        occupies the band until then: (J − 1) blocks at its goodput and L transmissions of
        the lost one, (J − 1 + L(1 − TBLER))·TBS bits at its rate; unassociated, nothing.
        """
        ids = np.asarray(ids, int)
        bits = np.broadcast_to(np.asarray(payload_bits, float), ids.shape)
        tbs, tbler = self._at_best(self.tbs, ids), self._at_best(self.tbler, ids)
        blocks = np.ceil(bits / np.maximum(tbs, 1.0))
        loss = self.first_loss[ids]
        failed = ~self.associated[ids] | ((loss <= blocks) & (bits > 0))
        spent = np.where(loss <= blocks,
                         (np.minimum(loss, blocks) - 1.0
                          + self.transmissions * (1.0 - tbler)) * tbs, bits)
        sent = np.where(self.associated[ids], np.minimum(spent, bits), 0.0)
        if self.rule is None:
            finish = deadline_outage(self.rates[ids], sent, None, access=self.access,
                                     compute_s=compute_s).finish_s
        else:
            finish = finish_times(self.table[ids], sent, self.rule, compute_s)
        deadline = math.inf if deadline_s is None else deadline_s
        on_time = finish <= deadline * (1 + 1e-9)
        arrived = on_time & ~failed
        end = float(np.max(finish, initial=compute_s))
        seconds = min(end, deadline) if (on_time | failed).all() else deadline
        share = (self.fit_rates(ids) / max(len(ids), 1) if self.rule is not None
                 else self.rates[ids])
        radio = {"clients": ids.tolist(),
                 "sinr_db": _rounded(10 * np.log10(np.maximum(self._at_best(self.sinr, ids),
                                                              1e-30))),
                 "mcs": self._at_best(self.mcs, ids).astype(int).tolist(),
                 "prbs": self.prbs[ids].astype(int).tolist(),
                 "tbler": _rounded(tbler, 4),
                 "rate_mbps": _rounded(share / 1e6, 4),
                 "upload_s": _rounded(np.where(failed, np.nan, finish - compute_s), 4),
                 "capped": self.capped[ids].astype(int).tolist(),
                 "outage": int(failed.sum())}
        return Upload(arrived, finish, np.asarray(seconds), self.access, failed, radio)

    @override
    def fit_rates(self, ids: np.ndarray) -> np.ndarray:
        """S·ρ_u(x_u) at the round's first shares (everyone active).

        R_i (T − c)/S is then what client i sends by the deadline at its share (sharings in
        frequency).
        """
        if self.rule is None:
            return self.rates[ids]
        tab = self.table[ids]
        return len(ids) * share_rates(tab, shares(tab, np.ones(len(ids), bool), self.rule))

    @property
    @override
    def fit_access(self) -> str:
        return self.access if self.rule is None else "fdma"


def _rounded(x: np.ndarray, digits: int = 2) -> list[float | None]:
    """A compact JSON list: rounded, NaN as None."""
    return [None if not np.isfinite(v) else round(float(v), digits) for v in np.asarray(x)]


class NRLink(DigitalLink):
    """A 5G NR uplink (module docstring): Sionna's radio, the digital links' shaping."""

    Settings: ClassVar[type] = NRSettings

    @property  # type: ignore[override]
    def access(self) -> str:
        """The uploads' sharing of the slots (``sharing``): ``tdma`` or ``round_robin``."""
        return str(self.settings.sharing)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._drops: dict[int, Deployment] = {}
        self._interference: dict[int, np.ndarray] = {}
        self._outer: dict[int, OuterLoop] = {}
        sionna()  # without the extra: one line naming it, before anything trains

    def deployment(self, n: int) -> Deployment:
        """The run's drop of n clients (from its ``deployment`` stream; once per n)."""
        if n not in self._drops:
            if self.seeds is None:
                raise ValueError("network.model nr drops its clients from the run's seed: "
                                 "make the link with make_link(..., seeds=Seeds(seed))")
            self._drops[n] = drop(self.settings, n, self.seeds.int_seed("deployment"))
        return self._drops[n]

    def budget(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per client: PRBs M_u, transmit power P_u [W] and the noise power on them [W].

        With ``interference`` the noise power includes the other cells' mean interference on
        the client's M_u PRBs, M_u·I_c (module docstring).
        """
        prbs, power = self.open_loop(self.deployment(n).pathloss_db)
        noise = 10.0 ** ((THERMAL_DBM_HZ + self.settings.noise_figure_db - 30.0) / 10.0) \
            * 12 * prbs * self.settings.scs_khz * 1e3
        if self.settings.interference:
            noise = noise + prbs * self.interference(n)[self.deployment(n).cell]
        return prbs, power, noise

    def open_loop(self, pathloss_db: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """PRBs M and transmit power P [W] of users with these losses (TS 38.213 §7.1.1)."""
        s = self.settings
        room = s.ut_max_power_dbm - s.p0_dbm - s.alpha * pathloss_db
        prbs = np.clip(np.floor(10.0 ** (room / 10.0)), 1, s.prbs).astype(np.int64)
        power = sionna().sys.open_loop_uplink_power_control(
            torch.as_tensor(10.0 ** (pathloss_db / 10.0)), torch.as_tensor(12 * prbs),
            alpha=s.alpha, p0_dbm=s.p0_dbm, ut_max_power_dbm=s.ut_max_power_dbm,
            precision="double").numpy()
        return prbs, power

    def interference(self, n: int) -> np.ndarray:
        """I_c, the other cells' mean interference per PRB at each client sector's antenna [W].

        (cells,): Σ over the transmitters j of the other sectors of c_j / L_{c,j}, with
        c_j = P_j/(N_RB·n_s) for a client of sector s (one of its n_s clients at a time, on
        M_j of the N_RB PRBs) and c_j = P_j/M_j for a fully loaded sector's user.
        """
        if n in self._interference:
            return self._interference[n]
        dep, s = self.deployment(n), self.settings
        if dep.cross_db is None or dep.serving is None:
            raise ValueError("the drop has no cross losses: make it with interference: true")
        own = dep.cross_db[dep.serving, np.arange(len(dep.serving))]
        own[:n] = dep.pathloss_db  # the clients' own losses are the drop's
        prbs, power = self.open_loop(own)
        counts = np.bincount(dep.cell, minlength=s.cells)
        per_prb = np.where(np.arange(len(own)) < n,
                           power / (s.prbs * counts[np.minimum(dep.serving, s.cells - 1)]),
                           power / prbs)
        gain = 10.0 ** (-dep.cross_db[:s.cells] / 10.0)  # (cells, J)
        other = dep.serving[None, :] != np.arange(s.cells)[:, None]
        self._interference[n] = (gain * other) @ per_prb
        return self._interference[n]

    def sinr(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The round's SINR (linear) and PRBs of n clients, from the round's generator."""
        prbs, power, noise = self.budget(n)
        fading = np.sum(np.abs(simo_rayleigh((), n, self.settings.bs_antennas, rng)) ** 2, -1)
        return power * fading / (10.0 ** (self.deployment(n).pathloss_db / 10.0) * noise), prbs

    def transport(self, sinr: np.ndarray, prbs: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """MCS (link adaptation at the BLER target), TBS [bits] and TBLER of each client."""
        phy, illa = radio()
        illa.bler_target = self.settings.bler_target
        sinr_t = torch.as_tensor(np.maximum(sinr, 1e-30), dtype=torch.float64)
        res = torch.as_tensor(12 * DATA_SYMBOLS * prbs, dtype=torch.int32)
        mcs = illa(sinr_eff=sinr_t, num_allocated_re=res)
        tbs = self.block_bits(mcs, res)
        tbler = phy(mcs, sinr_eff=sinr_t, num_allocated_re=res,
                    check_mcs_index_validity=False)[3]
        return mcs.numpy(), tbs.numpy().astype(float), tbler.numpy().astype(float)

    def mean_sinr(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Each client's SINR averaged over the fading (linear; A·P_u/(PL_u·noise)) and PRBs."""
        prbs, power, noise = self.budget(n)
        gain = self.settings.bs_antennas  # E‖h‖² of A unit-power Rayleigh antennas
        return power * gain / (10.0 ** (self.deployment(n).pathloss_db / 10.0) * noise), prbs

    def outer_loop(self, n: int) -> OuterLoop:
        """OLLA's long run for n clients (once per n; ``link_adaptation: outer``).

        The base station's estimate is the client's mean SINR S̄_u; a slot's SINR is
        S̄_u·G/A with G ~ Gamma(A, 1) (maximum-ratio combining of A Rayleigh antennas, a new
        draw each slot), so p̄ of an MCS is its TBLER averaged over G, by the midpoint rule
        on :data:`FADING_POINTS` equiprobable quantiles of G.
        """
        if n in self._outer:
            return self._outer[n]
        from scipy.stats import gamma

        from wirelessfl.net import olla

        s = self.settings
        mean, prbs = self.mean_sinr(n)
        lattice = olla.offsets(s.olla_step_db, s.bler_target)
        phy, illa = radio()
        illa.bler_target = s.bler_target
        states, q = lattice.numel(), FADING_POINTS
        res = torch.as_tensor(12 * DATA_SYMBOLS * prbs, dtype=torch.int32)
        mean_t = torch.as_tensor(mean, dtype=torch.float64)
        estimate = mean_t[None, :] * 10.0 ** (-lattice[:, None] / 10.0)  # (K+1, N)
        mcs = illa(sinr_eff=estimate, num_allocated_re=res.expand(states, n)).long()
        g = torch.as_tensor(gamma.ppf((np.arange(q) + 0.5) / q, s.bs_antennas)
                            / s.bs_antennas, dtype=torch.float64)
        every = torch.arange(MCS_COUNT, dtype=torch.int32)[:, None].expand(MCS_COUNT, n)
        faded = (mean_t[None, None, :] * g[:, None, None]).expand(q, MCS_COUNT, n)
        table = phy(every.expand(q, MCS_COUNT, n), sinr_eff=faded,
                    num_allocated_re=res.expand(q, MCS_COUNT, n),
                    check_mcs_index_validity=False)[3].mean(0)  # (MCS, N); inf: invalid
        bits = self.block_bits(every, res.expand(MCS_COUNT, n))
        bler = table.gather(0, mcs).clamp(max=1.0).T  # (N, K+1)
        law = olla.stationary_law(bler, s.olla_step_db, s.bler_target, lattice)
        self._outer[n] = OuterLoop(lattice.numpy(), law.numpy(), mcs.T.numpy(),
                                   bits.gather(0, mcs).T.numpy().astype(float), bler.numpy())
        return self._outer[n]

    @override
    def channels(self, n: int, rng: np.random.Generator) -> RoundChannels:
        """The round's radio of n clients (:class:`NRRound`).

        The link of runs made before 2026-11-28 (a sharing in time, unbounded HARQ, every
        client served) gives their plain rates, as then.
        """
        s = self.settings
        if not s.outage and s.sharing not in FREQUENCY_RULES:
            return RoundChannels(self._rates_in_time(n, rng), self.access)
        if s.sharing in FREQUENCY_RULES:
            sinr, mcs, tbs, tbler = self.rate_table(n, rng)
        elif s.link_adaptation == "outer":  # the long-run law: its mean MCS, TBS and BLER
            law = self.outer_loop(n)
            prbs1 = self.budget(n)[0]
            sinr = self.mean_sinr(n)[0][:, None]
            mcs = np.rint(np.sum(law.law * law.mcs, -1))[:, None]
            tbs = (law.bits_per_slot / (1.0 - law.achieved_bler))[:, None]
            tbler = law.achieved_bler[:, None]
        else:
            sinr1, prbs1 = self.sinr(n, rng)
            mcs, tbs, tbler = (v[:, None] for v in self.transport(sinr1, prbs1))
            sinr = sinr1[:, None]
        tbler = np.minimum(tbler, 1.0)
        table = tbs * (1.0 - tbler) / s.slot_s
        # alone: the rate-maximising PRBs (sharings in time: the open-loop PRBs, column 0)
        best = np.argmax(table, axis=1) + 1 if s.sharing in FREQUENCY_RULES else np.ones(n, int)
        one = sinr[:, 0]  # per PRB: on one PRB, or on the open-loop PRBs (sharings in time)
        rates = table[np.arange(n), best - 1]
        associated = (np.ones(n, bool) if s.min_sinr_db is None
                      else 10 * np.log10(np.maximum(one, 1e-30)) >= s.min_sinr_db)
        p = tbler[np.arange(n), best - 1]
        u = rng.random(n)  # after the fading: the fading draw is that of the runs before
        eps = p ** s.transmissions if s.transmissions else np.zeros(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            loss = np.where(eps >= 1.0, 1.0, np.ceil(np.log1p(-u) / np.log1p(-eps)))
        loss = np.where(eps > 0, np.maximum(loss, 1.0), np.inf)
        top = mcs[np.arange(n), best - 1] == MCS_COUNT - 1
        capped = top & (p < s.bler_target / 2)
        return NRRound(rates, s.sharing, sinr, mcs, tbs, tbler, table,
                       best if s.sharing in FREQUENCY_RULES else prbs1, associated, loss,
                       s.transmissions, capped)

    def noise_per_prb(self, n: int) -> np.ndarray | float:
        """Noise per PRB of each client [W]: thermal at the BS noise figure.

        With ``interference``, plus its sector's mean interference per PRB (the per-PRB form
        of :meth:`budget`'s noise).
        """
        s = self.settings
        per_prb = 10.0 ** ((THERMAL_DBM_HZ + s.noise_figure_db - 30.0) / 10.0) \
            * 12 * s.scs_khz * 1e3
        if s.interference:
            per_prb = per_prb + self.interference(n)[self.deployment(n).cell]
        return per_prb

    def rate_table(self, n: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(N, M) per-PRB SINR (linear), MCS, TBS [bits] and TBLER of n clients on m = 1 … M PRBs.

        (``rate_model: shannon``: MCS −1, TBS the bits a slot carries at Shannon's capacity,
        TBLER 0.)

        On m PRBs a client transmits at TS 38.213's open-loop power
        P_u(m) = min(P_max, P0 + α·PL_u + 10 log10 m) (the formula of
        ``sionna.sys.open_loop_uplink_power_control``), so its per-PRB SINR is
        P_u(m)/m · ‖h_u‖² / (PL_u · N_PRB): constant up to its open-loop count, then falling
        as 1/m. Link adaptation reads :func:`phy_tables`. The fading is the round's draw, the
        same as :meth:`sinr`'s.
        """
        s = self.settings
        pl = self.deployment(n).pathloss_db
        fading = np.sum(np.abs(simo_rayleigh((), n, s.bs_antennas, rng)) ** 2, -1)
        m = np.arange(1, s.prbs + 1)
        p_dbm = np.minimum(s.ut_max_power_dbm, s.p0_dbm + s.alpha * pl[:, None]
                           + 10 * np.log10(m))
        per_prb = self.noise_per_prb(n)
        sinr = (10.0 ** ((p_dbm - 30.0) / 10.0) / m * (fading / (10.0 ** (pl / 10.0)
                                                                 * per_prb))[:, None])
        if s.rate_model == "shannon":  # every block decoded, all 14 symbols carry data
            bits = 12 * m * s.scs_khz * 1e3 * s.slot_s * np.log2(1.0 + sinr)
            return sinr, np.full(sinr.shape, -1), bits, np.zeros(sinr.shape)
        mcs, tbs, tbler = phy_tables(s.prbs).adapt(sinr, s.bler_target)
        return sinr, mcs, tbs, tbler

    @override
    def digital_uplink(self, num_clients: int, seeds: Any) -> DigitalUplink | None:
        """Always one where clients can be in outage: who arrives depends on the radio."""
        if self.settings.outage:
            return DigitalUplink(self, num_clients, seeds)
        return super().digital_uplink(num_clients, seeds)

    @staticmethod
    def block_bits(mcs: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        """TBS [bits] of PUSCH table 1's ``mcs`` on ``res`` resource elements (TS 38.214)."""
        nr = sionna().phy.nr.utils
        order, rate = nr.decode_mcs_index(mcs, table_index=1, is_pusch=True, device="cpu")
        return nr.calculate_tb_size(modulation_order=order, target_coderate=rate,
                                    num_coded_bits=res * order, return_cw_length=False,
                                    device="cpu")[0]

    @override
    def rates(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """R_u = TBS_u·(1 − TBLER_u) / T_slot of n clients this round [bit/s], (n,).

        ``link_adaptation: outer``: OLLA's long-run decoded bits per slot over T_slot, the
        same every round (:meth:`outer_loop`).
        """
        s = self.settings
        if s.outage or s.sharing in FREQUENCY_RULES:
            return self.channels(n, rng).rates
        return self._rates_in_time(n, rng)

    def _rates_in_time(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The rates of the sharings in time (open-loop PRBs), as runs made before computed."""
        if self.settings.link_adaptation == "outer":
            return self.outer_loop(n).bits_per_slot / self.settings.slot_s
        sinr, prbs = self.sinr(n, rng)
        _, tbs, tbler = self.transport(sinr, prbs)
        return tbs * (1.0 - np.minimum(tbler, TBLER_CAP)) / self.settings.slot_s

    @override
    def check_reachable(self, steps: int, num_clients: int, rounds: int) -> None:
        """Refuse a deadline computing alone misses; name the clients the radio cannot serve.

        An NR upload always ends (the lowest MCS on one PRB) unless the client is in outage;
        clients whose TBLER is near 1 at their mean SINR would be in outage in most rounds
        (:meth:`edge_clients`), and are named once on stderr, before anything trains.
        """
        self.check_deadline(steps)
        if self.num_clients != num_clients:  # re-timing: no population of its own to name
            return
        edge = self.edge_clients(num_clients)
        if len(edge):
            names = ", ".join(map(str, edge[:10].tolist())) + (" …" if len(edge) > 10 else "")
            print(f"wirelessfl: network.model nr: {len(edge)} of {num_clients} clients ({names}) "
                  "are beyond the cell edge: at their mean SINR even the lowest MCS on one PRB "
                  "fails (TBLER > 0.9) or they are below min_sinr_db, so they will be in outage "
                  "in most rounds", file=sys.stderr, flush=True)

    def edge_clients(self, n: int) -> np.ndarray:
        """The clients whose TBLER on one PRB at their mean SINR exceeds 0.9 (sorted ids).

        The mean SINR is over the fading (A antennas: E‖h‖² = A); below ``min_sinr_db`` a
        client counts too. Only with a HARQ limit or an association rule (else none).
        """
        s = self.settings
        if not s.outage:
            return np.zeros(0, int)
        pl = self.deployment(n).pathloss_db
        p1 = np.minimum(s.ut_max_power_dbm, s.p0_dbm + s.alpha * pl)
        per_prb = self.noise_per_prb(n)
        mean = 10.0 ** ((p1 - 30.0 - pl) / 10.0) * s.bs_antennas / per_prb
        if s.rate_model == "shannon":
            bad = np.zeros(n, bool)
        else:
            _, _, tbler = phy_tables(s.prbs).adapt(mean[:, None] * np.ones((1, s.prbs)),
                                                   s.bler_target)
            bad = tbler[:, 0] > 0.9
        if s.min_sinr_db is not None:
            bad |= 10 * np.log10(np.maximum(mean, 1e-30)) < s.min_sinr_db
        return np.flatnonzero(bad)
