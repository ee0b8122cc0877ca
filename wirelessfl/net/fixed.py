"""``network.model: fixed``: independent links of one rate per client (FAdamGC's 100 Mbps).

A client takes down/R + steps·``step_seconds`` + up/R and the round lasts as long as its
slowest client (``docs/papers/fadamgc.md`` §4.6); every client has the same payloads and its
own link, so that is the payloads' time at R plus the most local steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.net.links import LinkModel, RoundCost


@dataclass(frozen=True)
class FixedSettings:
    """Settings of fixed-rate links.

    Attributes
    ----------
    rate_mbps : float
        Per-client link rate in both directions [Mbit/s] (100, ``docs/papers/fadamgc.md`` §4.6).
    """

    rate_mbps: float = 100.0

    def __post_init__(self) -> None:
        as_float("rate_mbps", self.rate_mbps, lo=0, hi=1e9, lo_open=True)


class FixedRate(LinkModel):
    """Links of ``rate_mbps`` per client in both directions."""

    Settings: ClassVar[type] = FixedSettings

    @override
    def seconds(self, cost: RoundCost, rng: np.random.Generator) -> float:
        rate = self.settings.rate_mbps * 1e6
        bits = self.cfg.bits_per_param
        return float(cost.downlink * bits / rate + cost.max_steps * self.cfg.step_seconds
                     + cost.uplink * bits / rate)
