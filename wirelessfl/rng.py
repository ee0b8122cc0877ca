"""Named, independent random streams derived from one seed.

A run has one integer seed. Every stochastic part of the system (data partition,
model initialisation, client sampling, local mini-batch order, channels, delays)
draws from its own stream, derived with :class:`numpy.random.SeedSequence`
from ``(seed, stream name, keys...)``. Streams are *stateless*: the generator for
round ``t`` and client ``i`` is rebuilt from its keys whenever it is needed, so a
resumed run draws exactly the numbers an uninterrupted run would, with no RNG
state in the checkpoint.

Examples
--------
>>> seeds = Seeds(7)
>>> a = seeds.generator("sampling", 3).integers(100, size=3)
>>> b = Seeds(7).generator("sampling", 3).integers(100, size=3)
>>> bool((a == b).all())
True
>>> bool((seeds.generator("channels", 3).integers(100, size=3) == a).all())
False
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

STREAMS = ("partition", "init", "sampling", "local", "channels", "delays", "masks", "noise", "data")


def _stream_id(name: str) -> int:
    """Stable 32-bit id of a stream name (independent of Python's hash seed)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


# numpy.random.SeedSequence's constants (Melissa O'Neill's seed_seq hash, numpy/random/bit_generator.pyx)
_POOL = 4
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _SHIFT = 0xCA01F9DD, 0x4973F715, 16


def _seed_sequence_state(words: list, n: int) -> np.ndarray:
    """The first 63-bit word of ``SeedSequence.generate_state(2, uint64)``, vectorised.

    ``words`` is the assembled entropy (the run's seed padded to the pool's four words, then
    the spawn key's words), each a uint32 scalar or an array of ``n``; returns int64 (n,).
    SeedSequence's hash constant advances the same way whatever the data, so every client's
    sequence follows one schedule of multiplications, taken here on arrays.
    """
    with np.errstate(over="ignore"):
        const = [np.uint32(_INIT_A)]

        def hashmix(value):
            value = np.bitwise_xor(value, const[0])
            const[0] = np.uint32(const[0] * np.uint32(_MULT_A))
            value = value * const[0]
            return value ^ (value >> np.uint32(_SHIFT))

        def mix(x, y):
            out = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
            return out ^ (out >> np.uint32(_SHIFT))

        pool = [np.broadcast_to(hashmix(np.asarray(words[i], np.uint32)), (n,)).copy()
                for i in range(_POOL)]
        for src in range(_POOL):
            for dst in range(_POOL):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        for w in words[_POOL:]:
            for dst in range(_POOL):
                pool[dst] = mix(pool[dst], hashmix(np.asarray(w, np.uint32)))
        state, b = [], np.uint32(_INIT_B)
        for i in range(2):  # two 32-bit words: the first uint64
            value = pool[i] ^ b
            b = np.uint32(b * np.uint32(_MULT_B))
            value = value * b
            state.append(value ^ (value >> np.uint32(_SHIFT)))
    low, high = state[0].astype(np.uint64), state[1].astype(np.uint64)
    return ((low | (high << np.uint64(32))) >> np.uint64(1)).astype(np.int64)


@dataclass(frozen=True)
class Seeds:
    """One run seed and the named streams spawned from it.

    Attributes
    ----------
    seed : int
        The run's seed (a non-negative integer).
    """

    seed: int

    def __post_init__(self) -> None:
        if not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"`seed` must be a non-negative integer, got {self.seed!r}")

    def sequence(self, stream: str, *keys: int) -> np.random.SeedSequence:
        """SeedSequence of ``stream`` at integer ``keys`` (e.g. round, client id)."""
        return np.random.SeedSequence(
            entropy=int(self.seed), spawn_key=(_stream_id(stream), *(int(k) for k in keys))
        )

    def generator(self, stream: str, *keys: int) -> np.random.Generator:
        """NumPy generator of ``stream`` at ``keys``."""
        return np.random.default_rng(self.sequence(stream, *keys))

    def int_seed(self, stream: str, *keys: int) -> int:
        """A 63-bit integer seed of ``stream`` at ``keys`` (for torch generators)."""
        return int(self.sequence(stream, *keys).generate_state(2, np.uint64)[0] >> np.uint64(1))

    def int_seeds(self, stream: str, *keys: int, last: np.ndarray | list[int]) -> np.ndarray:
        """:meth:`int_seed` of ``(stream, *keys, k)`` for every ``k`` of ``last``, at once.

        The same numbers as one :meth:`int_seed` call per ``k`` (tested bit for bit), computed
        for the whole array with NumPy: :class:`numpy.random.SeedSequence`'s entropy mixing and
        state generation, written over a vector of last keys (a round's clients), so that a
        round's per-client seeds cost no Python per client. Keys of 32 bits or more (any
        of them, or the run's seed) take the one-by-one path. Returns int64, shape of ``last``.
        """
        last = np.asarray(last)
        if last.ndim != 1 or (last.size and last.dtype.kind not in "iu"):
            raise ValueError(f"`last` must be a 1-D array of integers, got {last!r}")
        fixed = (int(self.seed), _stream_id(stream), *(int(k) for k in keys))
        if not last.size:
            return np.zeros(0, np.int64)
        if min(fixed) < 0 or max(fixed) >= 2**32 or last.min() < 0 or last.max() >= 2**32:
            return np.array([self.int_seed(stream, *keys, int(k)) for k in last], np.int64)
        words = [np.uint32(fixed[0]), *[np.uint32(0)] * (_POOL - 1), *map(np.uint32, fixed[1:]),
                 last.astype(np.uint32)]
        return _seed_sequence_state(words, len(last))

    def torch_generator(self, stream: str, *keys: int) -> torch.Generator:
        """CPU torch generator of ``stream`` at ``keys``."""
        return torch.Generator().manual_seed(self.int_seed(stream, *keys))
