"""Per-request latency models of asynchronous training (FedAST, ``docs/papers/fedast.md`` §4.2).

A request of task m sent to client i lasts D, drawn when it is sent from the ``delays``
stream: :class:`ShiftedExponential` is FedAST's model (speed classes from
:func:`speed_classes`); :class:`WirelessLatency` is local compute plus a TDMA upload over a
fresh Rayleigh channel, as HIST's OMA latency (``docs/papers/hist.md`` §6.4) for one client at a
time. :class:`LinkLatency` adds a link model's time (:mod:`wirelessfl.net.links`, the seam
every round-based run is timed by) to each request: a multi-task run's ``network`` section.
The event-driven clock that uses them is :mod:`wirelessfl.algorithms.fedast.simtime`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from typing_extensions import override

from channels.rates import tdma_rate
from channels.rayleigh import simo_rayleigh
from channels.units import db_to_lin
from channels.validation import as_finite, as_float, as_int, check_rng
from wirelessfl.net.links import LinkModel, RoundCost


class LatencyModel(ABC):
    """Duration of one request of ``task`` at ``client``.

    Contract: :meth:`sample` returns a finite duration ≥ 0 in the model's time unit, drawn
    from ``rng`` only (the ``delays`` stream).
    """

    @abstractmethod
    def sample(self, client: int, task: int, rng: np.random.Generator) -> float:
        """One request's duration."""


class ShiftedExponential(LatencyModel):
    """FedAST's latency (``docs/papers/fedast.md`` §4.2): D = τ_m (β + Exp(mean 2β)), β = κ c_m s_i.

    Parameters
    ----------
    task_constants : sequence of float
        c_m per task.
    speed : ndarray, shape (U,)
        Speed multiplier s_i per client (1.3 slow, 1 normal, 0.7 fast).
    steps : sequence of float
        τ_m, local steps per request of each task.
    kappa : float
        Common factor of β; 1/2 as in the code [code].
    """

    def __init__(self, *, task_constants, speed, steps, kappa: float = 0.5) -> None:
        self.c = as_finite("task_constants", task_constants, lo=0, lo_open=True)
        self.speed = as_finite("speed", speed, lo=0, lo_open=True)
        steps = as_finite("steps", steps, lo=0)
        try:
            self.steps = np.broadcast_to(steps, self.c.shape)
        except ValueError:
            raise ValueError(f"`steps` {steps.shape} must broadcast to the tasks' shape "
                             f"{self.c.shape}") from None
        self.kappa = as_float("kappa", kappa, lo=0, lo_open=True)

    @override
    def sample(self, client: int, task: int, rng: np.random.Generator) -> float:
        beta = self.kappa * self.c[task] * self.speed[client]
        return float(self.steps[task] * (beta + rng.exponential(2 * beta)))


class WirelessLatency(LatencyModel):
    """Physical request latency: local compute plus a TDMA upload over a Rayleigh channel.

    D = τ_m C_m / f_i + bits_m / R_i with R_i = B log2(1 + SNR_i ‖h‖²) drawn per request
    (``channels.tdma_rate``, maximum-ratio reception over M antennas), as HIST's OMA
    latency model (``docs/papers/hist.md`` §6.4) for one client at a time. Time in seconds.

    Parameters
    ----------
    cycles_per_step : sequence of float
        C_m: CPU cycles of one local step of each task.
    steps : sequence of float
        τ_m per request.
    upload_bits : sequence of float
        Bits uploaded per request of each task (32 × parameters for float32).
    cpu_hz : ndarray, shape (U,)
        CPU frequency f_i of every client.
    snr_db : float or ndarray, shape (U,)
        Transmit SNR of every client [dB].
    antennas : int
        Receive antennas M.
    bandwidth_hz : float
        Uplink bandwidth B.
    """

    def __init__(self, *, cycles_per_step, steps, upload_bits, cpu_hz, snr_db=0.0,
                 antennas: int = 1, bandwidth_hz: float = 9e6) -> None:
        self.compute = (np.asarray(cycles_per_step, float) * np.asarray(steps, float))
        self.bits = np.broadcast_to(np.asarray(upload_bits, float), self.compute.shape)
        self.cpu_hz = np.asarray(cpu_hz, float)
        self.snr = np.broadcast_to(db_to_lin(np.asarray(snr_db, float)), self.cpu_hz.shape)
        if (self.cpu_hz <= 0).any() or (self.compute < 0).any() or antennas < 1:
            raise ValueError("cpu_hz must be > 0, cycles and steps >= 0, antennas >= 1")
        self.antennas, self.bandwidth_hz = int(antennas), float(bandwidth_hz)

    @override
    def sample(self, client: int, task: int, rng: np.random.Generator) -> float:
        h = simo_rayleigh((), 1, self.antennas, rng)
        rate = float(tdma_rate(h, self.snr[client], self.bandwidth_hz)[0])
        return float(self.compute[task] / self.cpu_hz[client] + self.bits[task] / rate)


class LinkLatency(LatencyModel):
    """A request's compute latency plus its link's time: D = D_compute + t_link.

    The link (any registered :class:`~wirelessfl.net.links.LinkModel`) times one client that
    downloads and uploads the task's model, drawn from the same ``delays`` stream after the
    compute part. ``download`` ``unicast``: the download is a transmission to that client
    alone, timed as one upload of d over the link (its own channel draw, before the
    upload's: the computation separates them), then the upload (``tdma``: a fresh Rayleigh
    channel each way; ``fixed``: d/R each way); ``free``: one call with the model as uplink
    and downlink payload, which channel-drawn links time by the upload only (the convention
    of runs made before 2026-11-26). A request is timed as if alone on the band: requests in
    flight do not share it. Its seconds are added to the compute model's time units:
    FedAST's shifted exponential is read as seconds [default of this project; the paper's
    §4.2 leaves the unit open]. A link that shapes learning (deadlines, over-the-air
    aggregation) is refused by the multi-task config: requests have no round to drop from.

    Parameters
    ----------
    compute : LatencyModel
        The request's computation (FedAST's :class:`ShiftedExponential`).
    link : LinkModel
        The link; ``none`` adds nothing.
    params : sequence of float
        Parameters each task's model exchanges per direction (``params_per_vector`` or d_m).
    """

    def __init__(self, compute: LatencyModel, link: LinkModel, params,
                 download: str = "unicast") -> None:
        if not isinstance(compute, LatencyModel) or not isinstance(link, LinkModel):
            raise TypeError("`compute` must be a LatencyModel and `link` a LinkModel")
        if download not in ("unicast", "free"):
            raise ValueError(f"`download` must be 'unicast' or 'free', got {download!r}")
        self.compute, self.link, self.download = compute, link, download
        self.params = as_finite("params", params, lo=0)

    @override
    def sample(self, client: int, task: int, rng: np.random.Generator) -> float:
        compute = self.compute.sample(client, task, rng)
        d = float(self.params[task])
        if self.download == "free":
            return compute + (self.link.timed(RoundCost(uplink=d, downlink=d, max_steps=0,
                                                        clients=1), rng) or 0.0)
        one_way = RoundCost(uplink=d, downlink=0.0, max_steps=0, clients=1)
        down = self.link.timed(one_way, rng) or 0.0  # the unicast download, then the upload
        return compute + down + (self.link.timed(one_way, rng) or 0.0)


def speed_classes(num_clients: int, rng: np.random.Generator,
                  shares=(0.25, 0.5, 0.25), multipliers=(1.3, 1.0, 0.7)) -> np.ndarray:
    """Speed multiplier s_i per client: 25% slow (1.3), 50% normal, 25% fast (0.7) (§4.1).

    Exact class sizes (rounded shares, the remainder to the normal class), shuffled once.
    """
    num_clients = as_int("num_clients", num_clients, lo=0, hi=10**8)
    check_rng(rng)
    shares = as_finite("shares", shares, lo=0)
    multipliers = as_finite("multipliers", multipliers, lo=0)
    if shares.ndim != 1 or shares.shape != multipliers.shape or not 0 < shares.sum() <= 1 + 1e-9:
        raise ValueError(f"`shares` and `multipliers` must be 1-D of one length, the shares "
                         f"summing to at most 1 (over 0), got {shares.tolist()}, "
                         f"{multipliers.tolist()}")
    sizes = np.floor(shares * num_clients).astype(int)
    sizes[int(np.argmax(shares))] += num_clients - sizes.sum()
    return rng.permutation(np.repeat(multipliers, sizes))
