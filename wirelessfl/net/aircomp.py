"""``network.model: aircomp``: HIST's over-the-air uplink, timed by eq. (34), and its aggregate.

All clients transmit at once, one symbol per uploaded entry on its own subcarrier: the round
takes max_i steps_i·``step_seconds`` + d t_s Δf / B, whatever the number of clients. With
``aggregation: over_the_air`` every vector the clients upload is aggregated over drawn SIMO
channels at ``snr_db`` with ``antennas`` (:class:`~wirelessfl.server.aggregation.AirComp`,
eqs. (21)–(28)), so the link changes what is learned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from typing_extensions import override

from channels.rates import SUBCARRIER_HZ, SYMBOL_S
from channels.units import db_to_lin
from channels.validation import as_float
from wirelessfl.net.links import NEVER, SHAPES_LEARNING, ChannelLink, ChannelSettings, RoundCost
from wirelessfl.server.aggregation import AirComp

AGGREGATIONS = ("exact", "over_the_air")
#: ``large_scale``: none, or the TR 38.901 scenario the clients are dropped in.
LARGE_SCALE = ("none", "umi", "uma", "rma")
#: With ``large_scale``: a client's transmit power [dBm] (TS 38.101-1 power class 3) and the
#: base station's noise figure [dB] (TR 38.901 Table 7.8-1), as ``network.model: nr``.
UT_POWER_DBM, NOISE_FIGURE_DB = 23.0, 5.0

#: Which channel a round's second uploaded vector goes over (``vector_channel``).
VECTOR_CHANNELS = ("round", "fresh")


@dataclass(frozen=True)
class AirCompSettings(ChannelSettings):
    """Settings of the over-the-air uplink.

    Attributes
    ----------
    snr_db, antennas, bandwidth_hz
        The channels (:class:`~wirelessfl.net.links.ChannelSettings`).
    aggregation : str
        ``exact`` (the link changes the clock only) or ``over_the_air`` (every uploaded
        vector aggregated over the air). Deviation, stated: over-the-air learning is opt-in
        [default ``exact``] so that runs made before it keep their numbers.
    beamforming : str
        Receive beamformer of ``over_the_air`` (``fast``, ``sca``, ``certified``, ...).
    truncation_db : float or None
        ``over_the_air``: clients whose average channel gain ‖h‖²/M is below this [dB]
        stay silent (truncated channel inversion; None: none).
    normalise : bool
        ``over_the_air``: one common scale makes every transmitted symbol of power ≤ 1 (the
        literature's transmit normalisation [default true]; false sends gradient-valued
        symbols as HIST does, whose noise accumulates in SCAFFOLD's c and FAdamGC's y).
    real_part : bool
        ``over_the_air``: the server keeps the real part of the estimate (22), whose noise
        has variance MSE/2 per entry for the MSE (25) [default true: the model's parameters
        are real]; false adds noise of variance MSE, as HIST's (27)-(28) write it.
    vector_channel : str
        ``over_the_air``, for rules that upload a second vector in a round (SCAFFOLD's Δc,
        FAdamGC's Δy): ``round`` [default] sends it over the round's channel, the one the
        model update used (the same h, beam and silent clients; its own noise); ``fresh``
        draws a new channel for it.
    subset_rows : bool
        ``vector_channel: round``, a second vector sent by a subset of the round's clients
        (FAdamGC's S̃): true [default] gives each sender its own h of the round and solves
        the beam for the senders; false is how runs made before 2026-11-26 drew it (a smaller
        draw from the round's stream, not the senders' own channels: issue 71's D4), kept so
        that they resume with their own numbers.
    large_scale : str
        ``over_the_air``: ``none`` [default] gives every client a unit-gain channel at
        ``snr_db`` (HIST's model); a TR 38.901 scenario (``umi``, ``uma``, ``rma``) drops the
        clients in one sector of that scenario, as ``network.model: nr`` does
        (:func:`wirelessfl.net.nr.drop`, the run's seed, the ``[nr]`` extra), and client i's
        channel is h_i ~ CN(0, g_i I_M) with g_i = P_max 10^(−PL_i/10) / (kT·F·B): its own
        path loss, walls and shadowing at :data:`UT_POWER_DBM` and the base station's
        :data:`NOISE_FIGURE_DB` over ``bandwidth_hz`` (``snr_db`` is then not used).
    """

    aggregation: str = field(default="exact", metadata=SHAPES_LEARNING)
    beamforming: str = field(default="fast", metadata=SHAPES_LEARNING)
    truncation_db: float | None = field(default=None, metadata=SHAPES_LEARNING)
    normalise: bool = field(default=True, metadata=SHAPES_LEARNING)
    real_part: bool = field(default=True, metadata=SHAPES_LEARNING)
    vector_channel: str = field(default="round", metadata=SHAPES_LEARNING)
    subset_rows: bool = field(default=True, metadata=SHAPES_LEARNING)
    large_scale: str = field(default="none", metadata=SHAPES_LEARNING)

    def __post_init__(self) -> None:
        from solvers.beamforming import METHODS

        super().__post_init__()
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"`aggregation` must be one of {', '.join(AGGREGATIONS)}, got "
                             f"{self.aggregation!r}")
        if self.beamforming not in METHODS:
            raise ValueError(f"`beamforming` must be one of {', '.join(METHODS)}, got "
                             f"{self.beamforming!r}")
        if self.truncation_db is not None:
            as_float("truncation_db", self.truncation_db, lo=-200, hi=200)
        if self.vector_channel not in VECTOR_CHANNELS:
            raise ValueError(f"`vector_channel` must be one of {', '.join(VECTOR_CHANNELS)}, "
                             f"got {self.vector_channel!r}")
        if not isinstance(self.real_part, bool):
            raise ValueError(f"`real_part` must be true or false, got {self.real_part!r}")
        if not isinstance(self.subset_rows, bool):
            raise ValueError(f"`subset_rows` must be true or false, got {self.subset_rows!r}")
        if self.large_scale not in LARGE_SCALE:
            raise ValueError(f"`large_scale` must be one of {', '.join(LARGE_SCALE)}, got "
                             f"{self.large_scale!r}")
        if self.large_scale != "none" and self.snr_db != ChannelSettings.snr_db:
            raise ValueError("`snr_db` is not used with large_scale: each client's SNR comes "
                             "from its path loss; remove snr_db")
        inert = [k for k, v, d in (("large_scale", self.large_scale, "none"),
                                   ("beamforming", self.beamforming, "fast"),
                                   ("truncation_db", self.truncation_db, None),
                                   ("normalise", self.normalise, True),
                                   ("real_part", self.real_part, True),
                                   ("vector_channel", self.vector_channel, "round"),
                                   ("subset_rows", self.subset_rows, True)) if v != d]
        if inert and self.aggregation != "over_the_air":
            raise ValueError(f"`{inert[0]}` is a setting of over-the-air aggregation: add "
                             "aggregation: over_the_air (with model: aircomp) or remove it")


class AirCompLink(ChannelLink):
    """Over-the-air uplink: eq. (34) time; with ``over_the_air`` its noisy aggregate."""

    Settings: ClassVar[type] = AirCompSettings

    @override
    def seconds(self, cost: RoundCost, rng: np.random.Generator) -> float:
        compute = cost.max_steps * self.cfg.step_seconds
        return float(compute + cost.uplink * SYMBOL_S * SUBCARRIER_HZ / self.settings.bandwidth_hz)

    @override
    def aggregator(self, lr: float) -> AirComp | None:
        s = self.settings
        if s.aggregation != "over_the_air":
            return None
        return AirComp(0.0 if s.large_scale != "none" else s.snr_db, lr, antennas=s.antennas,
                       method=s.beamforming, truncation_db=s.truncation_db,
                       normalise=s.normalise, real_part=s.real_part,
                       round_channel=s.vector_channel == "round", subset_rows=s.subset_rows,
                       gains=None if s.large_scale == "none" else self.gains())

    def gains(self) -> Callable[[np.ndarray], np.ndarray]:
        """``large_scale``: each client's g_i = P_max 10^(−PL_i/10) / (kT·F·B), by client id."""
        from wirelessfl.net.nr import THERMAL_DBM_HZ, NRSettings, drop

        s = self.settings
        if self.seeds is None or not self.num_clients:
            raise ValueError("network.large_scale drops the run's clients from its seed: make "
                             "the link with make_link(cfg, d, num_clients, seeds)")
        loss = drop(NRSettings(scenario=s.large_scale), self.num_clients,
                    self.seeds.int_seed("deployment")).pathloss_db
        noise = THERMAL_DBM_HZ + NOISE_FIGURE_DB + 10 * np.log10(s.bandwidth_hz)
        g = 10.0 ** ((UT_POWER_DBM - loss - noise) / 10.0)
        return lambda ids: g[ids]

    @override
    def check_reachable(self, steps: int, num_clients: int, rounds: int) -> None:
        """A ``truncation_db`` no client's average gain ‖h‖²/M reaches in the whole run.

        The gain of a unit Rayleigh channel over M antennas is Gamma(M, 1/M), so the chance
        that any of N clients clears g in any of T rounds is at most N T P(Gamma ≥ g); below
        :data:`~wirelessfl.net.links.NEVER` every client stays silent.
        """
        s = self.settings
        if s.aggregation != "over_the_air" or s.truncation_db is None or s.large_scale != "none":
            return  # (with large_scale the gains differ per client: no one-line bound)
        from scipy.stats import gamma

        m = s.antennas
        p = gamma.sf(db_to_lin(s.truncation_db), a=m, scale=1.0 / m)
        if p * num_clients * rounds < NEVER:
            raise ValueError(f"network.truncation_db = {s.truncation_db:g} dB silences every "
                             f"client: the average gain of a Rayleigh channel over {m} antennas "
                             f"exceeds it with probability {p:.2g}, so no client would transmit "
                             f"in {rounds} rounds; lower truncation_db")
