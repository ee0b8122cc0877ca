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

    def torch_generator(self, stream: str, *keys: int) -> torch.Generator:
        """CPU torch generator of ``stream`` at ``keys``."""
        return torch.Generator().manual_seed(self.int_seed(stream, *keys))
