"""``network.model: fdma``: the band split equally among the round's clients (RA-Fed's FDMA).

All S clients upload at once at the same SNR, each at rate R_i/S: the round takes
max_i steps_i·``step_seconds`` + max_i S·up/R_i. A digital link
(:mod:`wirelessfl.net.digital`): deadlines, schedulers and compression apply.
"""

from __future__ import annotations

from typing import ClassVar

from wirelessfl.net.digital import DigitalLink


class FDMA(DigitalLink):
    """Frequency-division uplink: every client at once on an equal share of the band."""

    access: ClassVar[str] = "fdma"
