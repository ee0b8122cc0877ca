"""``network.model: tdma``: HIST's OMA uplink (``docs/papers/hist.md`` §4.1, §6.4).

SIMO Rayleigh channels are drawn each round, R_i = B log2(1 + SNR ‖h_i‖²), and the clients
upload one after another: the round takes max_i steps_i·``step_seconds`` + Σ_i up/R_i. A
digital link (:mod:`wirelessfl.net.digital`): deadlines, schedulers and compression apply.
"""

from __future__ import annotations

from typing import ClassVar

from wirelessfl.net.digital import DigitalLink


class TDMA(DigitalLink):
    """Time-division uplink: one client at a time on the whole band."""

    access: ClassVar[str] = "tdma"
