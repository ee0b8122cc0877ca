"""``network.model: shadowed``: fixed-rate links with log-normal shadowing, per client and round.

Each client's rate in a round is R_i = R · 10^(X_i/10), X_i ~ N(0, σ²) in dB (log-normal
shadowing of the link budget around a median rate R, the standard large-scale fading
model), drawn for all N clients of the population at once from the round's ``("network",
t)`` stream, so a client's rate does not depend on who else takes part and a re-timed run
reports the times a live one would. A client takes (down + up)/R_i + steps·``step_seconds``;
the round lasts as long as its slowest client. σ = 0 gives ``fixed``'s times to within 1
ulp (R · 10⁰ = R exactly, but the times are summed in another order). The clock only:
who is aggregated does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from typing_extensions import override

from channels.validation import as_float
from wirelessfl.net.links import LinkModel, RoundCost


@dataclass(frozen=True)
class ShadowedSettings:
    """Settings of shadowed links.

    Attributes
    ----------
    rate_mbps : float
        Median per-client rate R in both directions [Mbit/s] [default 100, as ``fixed``].
    shadowing_db : float
        σ, the standard deviation of the shadowing in dB [default 8, a typical urban
        macro-cell value].
    """

    rate_mbps: float = 100.0
    shadowing_db: float = 8.0

    def __post_init__(self) -> None:
        as_float("rate_mbps", self.rate_mbps, lo=0, hi=1e9, lo_open=True)
        as_float("shadowing_db", self.shadowing_db, lo=0, hi=40)


class Shadowed(LinkModel):
    """Links of median rate ``rate_mbps`` under log-normal shadowing of ``shadowing_db``."""

    Settings: ClassVar[type] = ShadowedSettings

    def rates(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Rates R_i [bit/s] of n clients in one round, (n,)."""
        s = self.settings
        return s.rate_mbps * 1e6 * 10.0 ** (rng.normal(0.0, s.shadowing_db, n) / 10.0)

    @override
    def seconds(self, cost: RoundCost, rng: np.random.Generator) -> float:
        rates = (self.rates(cost.clients, rng) if cost.ids is None
                 else self.rates(cost.population, rng)[list(cost.ids)])
        bits = (cost.downlink + cost.uplink) * self.cfg.bits_per_param
        compute = cost.max_steps * self.cfg.step_seconds
        return float(compute + bits / rates.min()) if rates.size else float(compute)  # nobody sends
