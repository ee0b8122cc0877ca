"""Simulated attackers among the clients (``algorithm.attack``): a client-side component.

What an attacking client sends in place of its honest pseudo-gradient, on the round's
stacked rows with no Python per client: ``sign_flip`` (−s·Δ_i), ``scaled`` (s·Δ_i), ``noise``
(Δ_i plus Gaussian noise of s times its own RMS per entry), ``label_flip`` (a data attack: it
trains on its samples with label y read as K − 1 − y), ``alie`` ("a little is enough", Baruch
et al. 2019) and ``ipm`` (inner-product manipulation, Xie et al. 2020), the last two from the
honest rows' statistics, as their threat models allow. The attackers are a fixed fraction of
the population, drawn once per run (``attackers`` stream). The server's rules that resist
them are :mod:`wirelessfl.server.robust`; any algorithm of the FedAvg family takes both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.errors import ConfigError
from wirelessfl.models.base import Params

#: Simulated client attacks of ``algorithm.attack`` (on the pseudo-gradients they upload).
ATTACKS = ("none", "sign_flip", "scaled", "noise", "label_flip", "alie", "ipm")


class Attack:
    """Which clients attack, and what they send (one per run; see the module notes).

    Parameters
    ----------
    kind : str
        One of :data:`ATTACKS`.
    fraction : float
        The fraction of the population that attacks.
    scale : float
        s of the attack.
    env : Environment
        The run's environment (its clients, partition and seeds).
    """

    def __init__(self, kind: str, fraction: float, scale: float, env: Any) -> None:
        self.kind, self.scale, self.seeds = kind, float(scale), env.seeds
        n = env.num_clients
        order = env.seeds.generator("attackers").permutation(n) if kind != "none" else []
        #: The clients that attack (sorted ids; none without an attack).
        self.ids = np.sort(np.asarray(order[:int(np.floor(fraction * n))], np.int64))

    def environment(self, env: Any) -> Any:
        """The run's environment as the clients train in it (``label_flip``: their labels)."""
        if self.kind == "label_flip" and len(self.ids):
            return dataclasses.replace(env, train=flipped_labels(env, self.ids))
        return env

    def sent(self, stack: Params, clients: np.ndarray, t: int) -> Params:
        """The stack as sent: the attackers' rows changed by ``attack`` (no Python per client)."""
        if not len(self.ids) or self.kind == "label_flip":  # (that one is in the data)
            return stack
        bad = np.isin(np.asarray(clients), self.ids)
        if not bad.any():
            return stack
        first = next(iter(stack.values()))
        mask = torch.as_tensor(bad, device=first.device)
        s = self.scale
        if self.kind in ("sign_flip", "scaled"):
            factor = 1.0 + ((-s if self.kind == "sign_flip" else s) - 1.0) * mask.double()
            return {k: v * factor.to(v.dtype).reshape(-1, *[1] * (v.dim() - 1))
                    for k, v in stack.items()}
        if self.kind in ("alie", "ipm"):
            return literature_attack(stack, mask, self.kind, s)
        n = len(bad)  # noise: s times each row's own RMS per entry, from the round's stream
        rms = torch.cat([v.reshape(n, -1) for v in stack.values()], 1).pow(2).mean(1).sqrt()
        gen = torch.Generator().manual_seed(self.seeds.int_seed("attack", t))
        out = {}
        for k, v in stack.items():
            z = torch.randn(v.shape, generator=gen, dtype=v.dtype).to(v.device)
            amp = (s * rms * mask).to(v.dtype).reshape(-1, *[1] * (v.dim() - 1))
            out[k] = v + amp * z
        return out


def literature_attack(stack: Params, mask: torch.Tensor, attack: str, eps: float) -> Params:
    """ALIE or IPM (``attack``): every row of ``mask`` replaced by one vector from the others.

    ALIE (Baruch, Baruch, Goldberg, NeurIPS 2019): μ − z_max·σ, with μ and σ the honest rows'
    coordinate-wise mean and (sample) standard deviation and z_max = Φ⁻¹((n − s)/n),
    s = ⌊n/2 + 1⌋ − f (n rows, f of them attackers): the largest shift that stays within the
    honest spread of enough rows to pass median- and Krum-type rules. IPM (Xie, Koyejo,
    Gupta, UAI 2020): −ε·μ, whose inner product with the true mean is negative. On the
    stacked rows in a few operations; with no honest row, every row's statistics.
    """
    from scipy.stats import norm

    keys = list(stack)
    n = int(mask.shape[0])
    flat = torch.cat([stack[k].reshape(n, -1) for k in keys], 1)
    honest = flat[~mask] if bool((~mask).any()) else flat
    mu = honest.mean(0)
    if attack == "ipm":
        row = -eps * mu
    else:
        f = int(mask.sum())
        s = math.floor(n / 2 + 1) - f
        z = float(norm.ppf(min(max((n - s) / n, 1e-6), 1 - 1e-6)))
        sigma = honest.std(0, correction=1 if honest.shape[0] > 1 else 0)
        row = mu - z * sigma
    out = torch.where(mask[:, None], row[None, :].to(flat.dtype), flat)
    sizes = [stack[k][0].numel() for k in keys]
    return {k: part.reshape(stack[k].shape)
            for k, part in zip(keys, torch.split(out, sizes, dim=1))}



def flipped_labels(env: Any, attackers: np.ndarray) -> ArrayDataset:
    """The training set with the attackers' samples labelled K − 1 − y (``label_flip``).

    The inputs are shared, not copied. Refused (ConfigError) when the partition gives a
    sample to more than one client: an honest client would then train on flipped labels.
    """
    owned = [np.asarray(env.client_indices[c], np.int64) for c in attackers]
    every = np.concatenate([np.asarray(i, np.int64) for i in env.client_indices])
    if np.unique(every).size != every.size:
        raise ConfigError("algorithm.attack label_flip flips the labels of the attackers' own "
                          "samples, and this partition gives some samples to several clients "
                          "(an honest one would train on them flipped): use a partition "
                          "without overlap, or another attack")
    train = env.train
    y = train.y.clone()
    at = torch.as_tensor(np.concatenate(owned), device=y.device)
    y[at] = train.num_classes - 1 - y[at]
    return ArrayDataset(train.x, y, train.num_classes)
