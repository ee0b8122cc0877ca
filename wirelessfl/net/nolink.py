"""``network.model: none``: no link, no simulated time (the default)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from typing_extensions import override

from wirelessfl.net.links import LinkModel, NoSettings, RoundCost


class NoLink(LinkModel):
    """No link model: rounds take no simulated time (``sim_time_s`` is null)."""

    Settings: ClassVar[type] = NoSettings
    clocked: ClassVar[bool] = False

    @override
    def seconds(self, cost: RoundCost, rng: np.random.Generator) -> None:
        return None
