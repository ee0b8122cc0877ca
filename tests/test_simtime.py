"""Simulated time: FIFO queues, the availability cap, version store, latency models."""

import numpy as np
import pytest

from wirelessfl.algorithms.fedast.simtime import ClientPool, EventQueue, VersionStore
from wirelessfl.net.delays import LatencyModel, ShiftedExponential, WirelessLatency, speed_classes
from wirelessfl.rng import Seeds


class Fixed(LatencyModel):
    """Hand-made durations: client i takes ``durations[i]``."""

    def __init__(self, durations):
        self.durations = durations

    def sample(self, client, task, rng):
        return float(self.durations[client])


def test_fifo_queue_on_a_hand_made_schedule():
    pool = ClientPool(Fixed([2.0, 5.0]), 2)
    rng = np.random.default_rng(0)
    a = pool.send(0, 0, 0, now=0.0, rng=rng)
    b = pool.send(0, 1, 0, now=1.0, rng=rng)   # queued behind a: starts at 2
    c = pool.send(1, 0, 0, now=1.0, rng=rng)
    d = pool.send(0, 0, 1, now=10.0, rng=rng)  # client idle again: starts at 10
    assert (a.done, b.done, c.done, d.done) == (2.0, 4.0, 6.0, 12.0)
    q = EventQueue()
    for r in (d, c, b, a):
        q.push(r.done, r.id)
    assert [q.pop()[1] for _ in range(4)] == [a.id, b.id, c.id, d.id]


def test_cancel_keeps_the_client_computing_unless_freed():
    for free, expect in ((False, 9.0), (True, 6.0)):
        pool = ClientPool(Fixed([3.0]), 1, free_on_cancel=free)
        rng = np.random.default_rng(0)
        pool.send(0, 0, 0, now=0.0, rng=rng)
        second = pool.send(0, 0, 0, now=0.0, rng=rng)   # done at 6
        pool.cancel(second)
        assert pool.send(0, 0, 0, now=0.0, rng=rng).done == expect


def test_availability_cap_is_never_exceeded():
    rng = np.random.default_rng(1)
    pool = ClientPool(Fixed(rng.uniform(1, 3, 50)), 50, cap=7)
    q, refused = EventQueue(), 0
    for r in (pool.send(int(c), 0, 0, 0.0, rng) for c in rng.integers(50, size=7)):
        q.push(r.done, r)
    now = 0.0
    for _ in range(2000):
        now, done = q.pop()
        pool.release(done)
        for c in rng.integers(50, size=2):
            r = pool.send(int(c), 0, 0, now, rng)
            if r is None:
                refused += 1
                continue
            q.push(r.done, r)
        assert pool.busy <= 7
        assert pool.busy == sum(bool(o) for o in pool.outstanding)
    assert refused > 0  # the cap did bind


def test_busy_client_always_accepts_under_the_cap():
    pool = ClientPool(Fixed([1.0, 1.0]), 2, cap=1)
    rng = np.random.default_rng(0)
    assert pool.send(0, 0, 0, 0.0, rng) is not None
    assert pool.send(1, 0, 0, 0.0, rng) is None      # idle client, cap reached
    assert pool.send(0, 0, 0, 0.0, rng) is not None  # busy client queues


def test_version_store_drops_unreferenced_versions():
    store = VersionStore()
    store.pin("task", 0, "x0")
    store.acquire(0)
    store.pin("task", 1, "x1")      # x0 still used by a request
    assert len(store) == 2
    store.release(0)
    assert len(store) == 1 and store[1] == "x1"
    store.unpin("task")
    assert len(store) == 0


def test_shifted_exponential_mean_matches_the_paper():
    """Normal MNIST client, τ = 27, κ = 1/2: mean request time 5.99 (§4.2)."""
    lat = ShiftedExponential(task_constants=[0.148, 0.555], speed=[1.0], steps=[27, 27])
    rng = np.random.default_rng(0)
    for task, expect in ((0, 5.99), (1, 22.48)):
        draws = np.array([lat.sample(0, task, rng) for _ in range(40_000)])
        assert abs(draws.mean() - expect) < 0.02 * expect
        assert draws.min() >= 27 * 0.5 * [0.148, 0.555][task]


def test_wireless_latency_is_compute_plus_rayleigh_upload():
    lat = WirelessLatency(cycles_per_step=[1e6], steps=[10], upload_bits=[1e6], cpu_hz=[1e9],
                          snr_db=10.0, antennas=4, bandwidth_hz=1e6)
    rng = np.random.default_rng(0)
    d = np.array([lat.sample(0, 0, rng) for _ in range(20_000)])
    # ‖h‖² ~ Gamma(4, 1): upload time 1 / log2(1 + 10‖h‖²) seconds per Mbit
    g = np.random.default_rng(1).gamma(4.0, 1.0, 200_000)
    expect = 0.01 + np.mean(1.0 / np.log2(1 + 10 * g))
    assert abs(d.mean() - expect) < 0.02 * expect
    assert d.min() > 0.01


def test_speed_classes_have_the_paper_shares():
    s = speed_classes(1000, Seeds(0).generator("partition", 1))
    assert [int((s == v).sum()) for v in (1.3, 1.0, 0.7)] == [250, 500, 250]


def test_bad_cap_is_refused():
    with pytest.raises(ValueError, match="cap"):
        ClientPool(Fixed([1.0]), 1, cap=0)


def test_a_link_adds_its_time_to_every_request_and_none_adds_nothing():
    """LinkLatency: FedAST's compute latency plus the link's time of one download and one
    upload (fixed: 2·32·d/R), from the same stream after the compute draw."""
    from wirelessfl.net.delays import LinkLatency
    from wirelessfl.net.links import NetworkConfig, make_link

    base = ShiftedExponential(task_constants=[0.148, 0.555], speed=[1.0, 1.3], steps=[27, 27])
    fixed = LinkLatency(base, make_link(NetworkConfig.of("fixed", rate_mbps=10.0)), [1e4, 2e5])
    for client, task in ((0, 0), (1, 1)):
        want = base.sample(client, task, np.random.default_rng(5))
        got = fixed.sample(client, task, np.random.default_rng(5))
        assert got == pytest.approx(want + 2 * 32 * [1e4, 2e5][task] / 10e6)
    none = LinkLatency(base, make_link(NetworkConfig()), [1e4, 2e5])
    assert none.sample(1, 0, np.random.default_rng(3)) == base.sample(1, 0, np.random.default_rng(3))
    tdma = LinkLatency(base, make_link(NetworkConfig.of("tdma", snr_db=0.0)), [1e4, 2e5])
    extra = [tdma.sample(0, 1, np.random.default_rng(s)) - base.sample(0, 1, np.random.default_rng(s))
             for s in range(50)]
    assert min(extra) > 0 and np.std(extra) > 0   # a fresh Rayleigh channel per request


def test_a_request_s_download_is_a_unicast_over_its_own_channel_and_free_keeps_the_old_clock():
    """``unicast`` (the default): a TDMA download of d over a channel drawn for it, then the
    upload over the next draw, each d·32/R(h); ``free``: the earlier single call, which
    TDMA times by the upload alone. Two requests issued together are each timed alone."""
    from wirelessfl.net.delays import LinkLatency
    from wirelessfl.net.links import NetworkConfig, RoundCost, make_link

    base = ShiftedExponential(task_constants=[0.148], speed=[1.0, 1.3], steps=[27])
    link = make_link(NetworkConfig.of("tdma", snr_db=0.0))
    d = 2e5
    unicast, free = LinkLatency(base, link, [d]), LinkLatency(base, link, [d], download="free")
    for client in (0, 1):  # two overlapping requests: neither waits for the other
        rng = np.random.default_rng(11 + client)
        compute = base.sample(client, 0, rng)
        legs = [link.timed(RoundCost(uplink=d, downlink=0.0, max_steps=0, clients=1), rng)
                for _ in range(2)]
        assert unicast.sample(client, 0, np.random.default_rng(11 + client)) == pytest.approx(
            compute + sum(legs), rel=1e-12)
        assert legs[0] != legs[1]  # a channel each way
        rng = np.random.default_rng(11 + client)
        compute = base.sample(client, 0, rng)
        up = link.timed(RoundCost(uplink=d, downlink=0.0, max_steps=0, clients=1), rng)
        assert free.sample(client, 0, np.random.default_rng(11 + client)) == pytest.approx(
            compute + up, rel=1e-12)
    with pytest.raises(ValueError, match="unicast"):
        LinkLatency(base, link, [d], download="broadcast")


def test_pool_download_is_versioned_and_moot_without_a_link():
    from wirelessfl.run.config import ConfigError
    from wirelessfl.run.configtypes import key_view
    from wirelessfl.run.kinds import open_run

    base = {"tasks": ["synthetic_linear"], "pool": {"clients": 20}, "max_rounds": 2,
            "method": {"name": "fedast", "requests": 4, "ratio": 4}}
    plain = open_run(base).cfg
    assert plain.pool.download == "free" and "download" not in key_view(plain)["pool"]
    linked = open_run({**base, "network": {"model": "tdma", "snr_db": 0.0}}).cfg
    assert linked.pool.download == "unicast" and key_view(linked)["pool"]["download"] == "unicast"
    old = open_run({**base, "network": {"model": "tdma", "snr_db": 0.0},
                    "pool": {"clients": 20, "download": "free"}}).cfg
    assert "download" not in key_view(old)["pool"]  # the key of a run made before
    with pytest.raises(ConfigError, match="pool.download"):
        open_run({**base, "pool": {"clients": 20, "download": "broadcast"}})


def test_fedast_runs_over_a_link_from_its_config_and_refuses_shaping_settings(tmp_path):
    from wirelessfl.run.config import ConfigError
    from wirelessfl.run.kinds import open_run, run_job

    base = {"tasks": ["synthetic_linear"], "pool": {"clients": 20}, "max_rounds": 2,
            "stop_at_target": False, "method": {"name": "fedast", "requests": 4, "ratio": 4}}
    plain = run_job(open_run(base), tmp_path / "a", quiet=True)
    slow = run_job(open_run({**base, "network": {"model": "fixed", "rate_mbps": 0.01}}),
                   tmp_path / "b", quiet=True)
    assert slow["sim_time_end"] > plain["sim_time_end"]   # every request crossed a slow link
    with pytest.raises(ConfigError, match="no round"):
        open_run({**base, "network": {"model": "tdma", "deadline_s": 1.0}})
