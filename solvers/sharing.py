"""Frequency-domain sharing of a cell's PRBs among the round's uploads (OFDMA).

A 5G NR base station schedules several uplink users in one slot on disjoint PRBs. Given,
for each of a round's S uploading clients, its rate alone on m = 1 … M PRBs,
``table[u, m-1]`` = r_u(m) [bit/s] (its power control and link adaptation for that many
PRBs: :meth:`wirelessfl.net.nr.NRLink.rate_table`), these functions say how the clients
still uploading share each slot's M PRBs and when each upload ends.

**Shares.** Let A be the clients still uploading and m*_u = argmax_m r_u(m) the PRB count
that maximises client u's rate under its power limit (more PRBs spread its power thinner).

- ``round_robin``: equal shares, water-filled: x_u = min(m*_u, λ) with λ such that
  Σ_{u∈A} min(m*_u, λ) = M (no client takes PRBs that lower its rate; what a capped client
  leaves goes to the others; when every cap fits, the rest of the band idles). Over slots,
  round robin over PRBs gives each client this share on average.
- ``proportional_fair``: the shares that maximise Σ_{u∈A} log r_u(x_u) subject to
  Σ x_u ≤ M: proportional fairness's long-run allocation when a client's channel does not
  change within the round (block fading), found greedily PRB by PRB on the marginal log
  gains made non-increasing in m (greedy is exact for concave utilities). With as many
  clients as PRBs or more, each gets M/|A| (one PRB, a share of the slots), as under round
  robin.

A share x ≥ 0 of PRBs, whole or time-shared over slots, gives ρ_u(x) = r_u(m)·x/m with
m = max(1, ⌊x⌋): the rate of m PRBs, scaled to the share.

**Finish times.** Between two finishes the active set is fixed (a *phase*). With the
finish order o, phase j has the clients o_j, …, o_{S-1} active, and client o_i has sent
Σ_{j≤i} ρ_{o_i}^{(j)} τ_j bits by its end: a lower-triangular system L τ = b_o for the phase
lengths τ. :func:`finish_times` guesses the order (the uploads' lengths at an equal share),
solves the system, re-sorts by the finish times found, and repeats until the order is its
own (τ ≥ 0); in the rare case that does not settle within S passes it steps from finish to
finish (tested equal). Everything else is array arithmetic over phases and clients, with
no loop over slots.
"""

from __future__ import annotations

import numpy as np

from channels.validation import as_finite, as_float

RULES = ("round_robin", "proportional_fair")


def _check(table: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tab = as_finite("table", table, lo=0)
    if tab.ndim != 2 or tab.shape[1] < 1:
        raise ValueError(f"`table` must have shape (S, M): each client's rate on 1..M PRBs, got "
                         f"{tab.shape}")
    act = np.asarray(active, dtype=bool)
    if act.shape[-1] != tab.shape[0]:
        raise ValueError(f"`active` must have shape (..., {tab.shape[0]}), got {act.shape}")
    return tab, act


def best_prbs(table: np.ndarray) -> np.ndarray:
    """(S,) m*_u, the PRB count that maximises each client's rate (the fewest on ties)."""
    tab = as_finite("table", table, lo=0)
    return np.argmax(tab, axis=-1) + 1


def round_robin_shares(table: np.ndarray, active: np.ndarray) -> np.ndarray:
    """(..., S) each active client's PRB share x_u = min(m*_u, λ), water-filled (module notes)."""
    tab, act = _check(table, active)
    prbs = tab.shape[1]
    caps = np.where(act, best_prbs(tab), 0).astype(float)  # (..., S), 0 for the inactive
    srt = np.sort(caps, axis=-1)  # ascending; inactive (0) first
    s = caps.shape[-1]
    k_left = np.arange(s, 0, -1)  # clients from position k on
    before = np.cumsum(srt, axis=-1) - srt  # caps strictly before position k
    level = (prbs - before) / k_left  # λ if the k smallest are capped, the rest share equally
    # the water level is at position k where srt[k-1] <= level_k <= srt[k]: the first k whose
    # cap is at or above its level (inactive zeros never are, unless M = 0)
    ok = (srt >= level) & (srt > 0)
    first = np.where(ok.any(-1), ok.argmax(-1), s)
    lam = np.take_along_axis(level, np.minimum(first, s - 1)[..., None], -1)[..., 0]
    lam = np.where(first >= s, np.inf, lam)  # every cap fits: nobody is limited by the band
    return np.where(act, np.minimum(caps, lam[..., None]), 0.0)


def proportional_fair_shares(table: np.ndarray, active: np.ndarray) -> np.ndarray:
    """(..., S) the shares maximising Σ log r_u(x_u) over the active clients (module notes)."""
    tab, act = _check(table, active)
    s, prbs = tab.shape
    with np.errstate(divide="ignore"):
        logs = np.log(tab)
    gain = np.diff(logs, axis=-1, prepend=-np.inf)  # first PRB: +inf (from no rate at all)
    gain = np.minimum.accumulate(np.nan_to_num(gain, nan=-np.inf), axis=-1)  # non-increasing
    lead = act.shape[:-1]
    g = np.where(act[..., None], gain, -np.inf).reshape(*lead, s * prbs)
    top = np.argsort(-g, axis=-1, kind="stable")[..., :prbs]
    chosen = np.zeros(g.shape, bool)
    np.put_along_axis(chosen, top, True, axis=-1)
    chosen &= g > 0  # only PRBs that raise the utility (the first always does)
    counts = chosen.reshape(*lead, s, prbs).sum(-1).astype(float)
    n_act = act.sum(-1, keepdims=True)
    crowded = n_act >= prbs  # one PRB or less each: equal shares of the slots
    equal = np.where(act, prbs / np.maximum(n_act, 1), 0.0)
    return np.where(crowded, equal, counts)


def share_rates(table: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """(..., S) ρ_u(x_u) = r_u(m)·x_u/m, m = max(1, ⌊x_u⌋) [bit/s]."""
    tab = np.asarray(table, float)
    x = np.asarray(shares, float)
    m = np.clip(np.floor(x), 1, tab.shape[1]).astype(int)
    per = np.take_along_axis(np.broadcast_to(tab, (*x.shape, tab.shape[1])), m[..., None] - 1,
                             -1)[..., 0] / m
    return per * x


def shares(table: np.ndarray, active: np.ndarray, rule: str) -> np.ndarray:
    """(..., S) the PRB shares of ``rule`` for each row of ``active``."""
    if rule == "round_robin":
        return round_robin_shares(table, active)
    if rule == "proportional_fair":
        return proportional_fair_shares(table, active)
    raise ValueError(f"`rule` must be one of {', '.join(RULES)}, got {rule!r}")


def finish_times(table: np.ndarray, payload_bits: np.ndarray, rule: str = "round_robin",
                 compute_s: float = 0.0) -> np.ndarray:
    """(S,) when each client's upload ends [s], the band shared by ``rule`` (module notes).

    Parameters
    ----------
    table : array_like, shape (S, M), [bit/s]
        r_u(m), each client's rate alone on m = 1 … M PRBs (≥ 0; a client whose rates are
        all 0 never ends: inf).
    payload_bits : array_like, shape (S,), [bit]
        What each client sends (0: it ends at ``compute_s`` and takes no PRB).
    rule : str
        ``round_robin`` or ``proportional_fair``.
    compute_s : float
        When the uploads start [s].
    """
    tab = as_finite("table", table, lo=0)
    if tab.ndim != 2:
        raise ValueError(f"`table` must have shape (S, M), got {tab.shape}")
    bits = as_finite("payload_bits", payload_bits, lo=0, shape=tab.shape[:1])
    c = as_float("compute_s", compute_s, lo=0, hi=1e12)
    if rule not in RULES:
        raise ValueError(f"`rule` must be one of {', '.join(RULES)}, got {rule!r}")
    out = np.full(bits.shape, c)
    live = (bits > 0) & (tab.max(-1, initial=0.0) > 0)
    out[(bits > 0) & ~live] = np.inf
    idx = np.flatnonzero(live)
    if len(idx):
        out[idx] = c + _finish(tab[idx], bits[idx], rule)
    return out


def _finish(tab: np.ndarray, bits: np.ndarray, rule: str) -> np.ndarray:
    """Finish times from the uploads' start of clients that all send and can."""
    s = len(bits)
    equal = share_rates(tab, shares(tab, np.ones(s, bool), rule))
    order = np.argsort(bits / equal, kind="stable")
    for _ in range(s + 1):
        done, ends = _phases(tab, bits, order, rule)
        new = np.argsort(ends, kind="stable")
        if done and np.array_equal(new, order):
            return ends
        order = new
    return _events(tab, bits, rule)


def _phases(tab: np.ndarray, bits: np.ndarray, order: np.ndarray, rule: str
            ) -> tuple[bool, np.ndarray]:
    """Whether ``order`` is consistent (every phase ≥ 0) and the finish times it implies."""
    s = len(bits)
    rank = np.empty(s, int)
    rank[order] = np.arange(s)
    active = rank[None, :] >= np.arange(s)[:, None]  # (phase j, client): o_j … o_{S-1}
    rates = share_rates(tab, shares(tab, active, rule))  # (phase, client)
    lower = rates[:, order].T  # L[i, j] = ρ^{(j)}_{o_i}, zero above the diagonal
    lower = np.tril(lower)
    tau = np.linalg.solve(lower, bits[order]) if np.all(np.diag(lower) > 0) \
        else np.full(s, -1.0)
    ends = np.empty(s)
    ends[order] = np.cumsum(tau)
    scale = max(float(np.max(np.abs(ends))), 1e-30)
    return bool(np.all(tau >= -1e-9 * scale)), ends


def _events(tab: np.ndarray, bits: np.ndarray, rule: str) -> np.ndarray:
    """Finish times stepped from finish to finish (the reference the phases must equal)."""
    left, active = bits.astype(float).copy(), np.ones(len(bits), bool)
    ends, now = np.zeros(len(bits)), 0.0
    while active.any():
        rate = share_rates(tab, shares(tab, active, rule))
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.where(active & (rate > 0), left / rate, np.inf)
        step = float(need.min())
        if not np.isfinite(step):  # nobody can send any more
            ends[active] = np.inf
            break
        now += step
        left = np.where(active, left - rate * step, left)
        gone = active & (need <= step * (1 + 1e-12))
        ends[gone] = now
        active &= ~gone
    return ends
