"""Mini-batch schedules: which of its samples a client uses at each local step.

Mini-batch order [code, ``docs/papers/hist.md`` §2.4]: the client reshuffles its local data
every epoch and cycles through it; ``steps`` counts SGD steps, not epochs. With ``epochs``
set, a call runs that many epochs instead (FedAST §4.6: 3 epochs, last partial batch
dropped). Each epoch is one permutation of the client's ``n_i`` samples, cut into
batches of ``B = min(batch_size, n_i)``.

Where the permutations come from is the setting ``local.batch_order`` (:data:`BATCH_ORDERS`):

- ``counter`` (the default since 2026-11-26): epoch ``e`` of the client with seed ``s``
  orders its positions ``j`` by the top 40 bits of ``mix(s ⊕ mix(e·2³² + j + φ))``
  (``mix``: SplitMix64's finaliser, φ its increment), ties by ``j``. Every client's every epoch is one
  array expression and one sort (:func:`epoch_orders`): no Python per client.
- ``pcg64``: ``np.random.default_rng(s).permutation(n_i)`` per epoch, the runs made before
  (a generator and a shuffle per client).

:func:`batch_schedule` is one client's schedule as a list of batches (the loop engine's);
:func:`stacked_schedule` is a whole group's as one padded array, built from the same
permutations with array operations, so the loop and batched engines draw the same batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

#: The mini-batch order streams (``local.batch_order``): ``counter`` is the default.
BATCH_ORDERS = ("counter", "pcg64")

_PHI = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment (2^64 / golden ratio)
_KEY_BITS = 40  # the sort key's bits: the hash's top 40 (ties, ~n²/2^41 an epoch, by position)


class _Local(Protocol):  # the fields of LocalHParams a schedule reads
    batch_size: int
    steps: int
    epochs: int | None
    drop_last: bool
    batch_order: str


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (a bijection; wraps modulo 2^64)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def epoch_orders(seeds: np.ndarray, epochs: np.ndarray, sizes: np.ndarray,
                 order: str = "counter") -> np.ndarray:
    """Every client's epoch permutations, one after another in one pool (client-major).

    Client ``c`` (seed ``seeds[c]``, ``sizes[c]`` samples) draws ``epochs[c]``
    permutations of ``range(sizes[c])``; the pool holds them in that order. ``counter``
    computes all of them at once (module docstring); ``pcg64`` runs one NumPy generator per
    client. Returns int64 of length ``Σ sizes·epochs``.
    """
    sizes, epochs = np.asarray(sizes, np.int64), np.asarray(epochs, np.int64)
    draws = np.repeat(sizes, epochs)  # one entry per (client, epoch)
    total = int(draws.sum())
    seg_at = np.cumsum(draws) - draws
    pool = np.arange(total, dtype=np.int64) - np.repeat(seg_at, draws)  # j within its epoch
    if order == "pcg64":
        at = 0
        for rng, e, n in zip(map(np.random.default_rng, np.asarray(seeds).tolist()),
                             epochs.tolist(), sizes.tolist()):
            for _ in range(e):  # the client's generator and its shuffles
                rng.shuffle(pool[at:at + n])
                at += n
        return pool
    if order != "counter":
        raise ValueError(f"`batch_order` must be one of {', '.join(BATCH_ORDERS)}, got {order!r}")
    if not total:
        return pool
    seg = np.repeat(np.arange(len(draws), dtype=np.int64), draws)
    owner = np.repeat(np.arange(len(sizes), dtype=np.int64), epochs)  # the client of each epoch
    epoch = np.arange(len(draws), dtype=np.int64) - np.repeat(np.cumsum(epochs) - epochs, epochs)
    with np.errstate(over="ignore"):
        count = (epoch[seg].astype(np.uint64) << np.uint64(32)) + pool.astype(np.uint64) + _PHI
        key = _mix64(np.asarray(seeds, np.int64).astype(np.uint64)[owner][seg] ^ _mix64(count))
        key >>= np.uint64(64 - _KEY_BITS)
    if len(draws) < 2 ** (64 - _KEY_BITS):  # epoch and key in one word: one stable sort
        return pool[np.argsort((seg.astype(np.uint64) << np.uint64(_KEY_BITS)) | key, kind="stable")]
    return pool[np.lexsort((pool, key, seg))]  # the same order, for very many epochs


def _epoch_cuts(n: np.ndarray, hp: _Local) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per client of ``n`` samples: batch size, full batches and remainder per epoch, batches per epoch."""
    bs = np.minimum(hp.batch_size, np.maximum(n, 1))
    full, rem = n // bs, n % bs
    cuts = full + ((rem > 0) & (not hp.drop_last))
    return bs, full, np.where(hp.drop_last, 0, rem), np.where(n > 0, cuts, 0)


def steps_per_call(num_samples: int, hp: _Local) -> int:
    """Local steps one call runs on ``num_samples`` samples (the length of :func:`batch_schedule`)."""
    if num_samples == 0:
        return 0
    if hp.epochs is None:
        return hp.steps
    *_, cuts = _epoch_cuts(np.array([num_samples]), hp)
    return int(cuts[0]) * hp.epochs


def _epochs(cuts: np.ndarray, hp: _Local) -> np.ndarray:
    """Epochs (permutations) each client draws: ``epochs``, or enough for ``steps`` batches."""
    if hp.epochs is not None:
        return np.where(cuts > 0, hp.epochs, 0)
    return np.where(cuts > 0, -(-hp.steps // np.maximum(cuts, 1)), 0)


def batch_schedule(num_samples: int, hp: _Local, seed: int | np.random.Generator
                   ) -> list[np.ndarray]:
    """Positions (into the client's local data) of each mini-batch of one call.

    Each epoch is a fresh permutation cut into batches; epochs are drawn until ``steps``
    batches exist (or ``epochs`` epochs are done). A client with no data gets none.
    ``seed`` is the client's seed, whose stream ``hp.batch_order`` names; a NumPy
    generator instead is drawn from directly (the ``pcg64`` way, whatever ``hp`` says).
    """
    n = np.array([num_samples])
    bs, full, rem, cuts = (int(a[0]) for a in _epoch_cuts(n, hp))
    if not cuts:
        return []
    epochs = int(_epochs(np.array([cuts]), hp)[0])
    if isinstance(seed, np.random.Generator):
        perms = [seed.permutation(num_samples) for _ in range(epochs)]
    else:
        pool = epoch_orders(np.array([seed], np.int64), np.array([epochs]), n,
                            hp.batch_order)
        perms = np.split(pool, epochs)
    batches: list[np.ndarray] = []
    for perm in perms:
        batches.extend(np.split(perm[:full * bs], full) if full else [])
        if rem:
            batches.append(perm[full * bs:])
    return batches if hp.epochs is not None else batches[: hp.steps]


def _stacked_layout(size: np.ndarray, hp: _Local) -> tuple[np.ndarray, ...]:
    """The layout of clients of ``size`` samples.

    Per client: batch size, remainder, batches and epochs, its steps; per client and step:
    the batch within its epoch and the batch's length.
    """
    bs, full, rem, cuts = _epoch_cuts(size, hp)
    epochs = _epochs(cuts, hp)
    steps = cuts * epochs if hp.epochs is not None else np.where(cuts > 0, hp.steps, 0)
    s = np.arange(int(steps.max(initial=0)))[None, :]
    j = s % np.maximum(cuts, 1)[:, None]  # the batch within its epoch
    lengths = np.where(s < steps[:, None], np.where(j < full[:, None], bs[:, None], rem[:, None]), 0)
    return bs, rem, cuts, epochs, steps, j, lengths


def stacked_widths(sizes: np.ndarray, hp: _Local) -> tuple[np.ndarray, np.ndarray]:
    """Each client's number of batches and each step's width (its largest batch).

    Those of :func:`stacked_schedule` for clients of ``sizes`` samples, without drawing any
    order.
    """
    *_, steps, _, lengths = _stacked_layout(np.asarray(sizes, np.int64), hp)
    return steps.astype(np.int64), lengths.max(axis=0, initial=0)


def stacked_schedule(indices: Sequence[np.ndarray], seeds: np.ndarray, hp: _Local
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A group's batches as one padded ``(clients, Σ widths)`` array of sample indices and weights.

    Client ``c`` owns the samples ``indices[c]`` and draws its order from its seed
    ``seeds[c]`` exactly as :func:`batch_schedule` does (:func:`epoch_orders`). Step ``s``
    takes columns ``offsets[s]:offsets[s + 1]``, as wide as its largest batch; client ``c``'s
    batch ``s`` fills the first of them with its samples and weight ``1 / len(batch)`` each,
    the rest stays 0 (no sample, no weight). Returns ``(index, weight, offsets, steps)``,
    ``steps`` being each client's number of batches. The weights are float64: the engine
    rounds them once, to the model's own dtype, when it uploads them.
    """
    size = np.fromiter(map(len, indices), np.int64, len(indices))
    bs, rem, cuts, epochs, steps, j, lengths = _stacked_layout(size, hp)
    widths = lengths.max(axis=0, initial=0)
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    pool_at = np.concatenate([[0], np.cumsum(size * epochs)[:-1]]).astype(np.int64)
    pool = epoch_orders(seeds, epochs, size, hp.batch_order)
    owner_at = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    owned = np.concatenate(indices).astype(np.int64) if len(indices) else np.zeros(0, np.int64)
    n_steps = len(widths)
    safe = np.maximum(cuts, 1)[:, None]
    col_step = np.repeat(np.arange(n_steps), widths)
    col_k = np.arange(int(offsets[-1])) - offsets[col_step]
    # each client's place in its pool of permutations, per column (one row when all are alike)
    rows = slice(0, 1) if len(size) and (size == size[0]).all() else slice(None)
    rel = ((col_step[None, :] // safe[rows]) * size[rows, None] + j[rows][:, col_step] * bs[rows, None]
           + col_k[None, :])
    if n_steps and (lengths == widths).all():  # every batch of every client full
        pos = pool[pool_at[:, None] + rel]
        row = np.repeat(1.0 / np.maximum(widths, 1), widths)
        return owned[owner_at[:, None] + pos], np.tile(row, (len(size), 1)), offsets, steps
    length = lengths[:, col_step]
    valid = col_k[None, :] < length
    pos = pool[np.where(valid, pool_at[:, None] + rel, 0)] if len(pool) else np.zeros(valid.shape, np.int64)
    index = np.where(valid, owned[np.where(valid, owner_at[:, None] + pos, 0)] if len(owned) else 0, 0)
    weight = np.where(valid, 1.0 / np.maximum(length, 1), 0.0)
    return index.astype(np.int64), weight, offsets, steps.astype(np.int64)
