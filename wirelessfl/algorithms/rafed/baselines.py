"""The submodel baselines of ``docs/papers/rafed.md`` §3, each RA-Fed's round with other settings.

FedAvg-small (everyone at the smallest level, prefix), HeteroFL (nested prefixes and the
1/r scaler), Federated Dropout (one keep ratio, random units), FedRolex (a rolling window)
and FjORD (ordered dropout with a width per local step). They are registered under their
names with :class:`~wirelessfl.algorithms.rafed.rafed.RAFed` as the algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

from wirelessfl.algorithms.rafed.rafed import RAFed, RAFedHParams

__all__ = ["FedAvgSmallHParams", "HeteroFLHParams", "FedDropoutHParams", "FedRolexHParams",
           "FjORDHParams", "RAFed"]


@dataclass(frozen=True)
class FedAvgSmallHParams(RAFedHParams):
    """FedAvg-small (§3 item 2): everyone trains the prefix submodel of the smallest level."""

    width: str = "min"
    policy: str = "prefix"


@dataclass(frozen=True)
class HeteroFLHParams(RAFedHParams):
    """HeteroFL (Diao et al. 2021, §3 item 3): nested prefixes and the 1/r scaler.

    Static BN does not arise: the submodel zoo has no BatchNorm (GroupNorm or no norm).
    """

    policy: str = "prefix"
    scaler: bool = True


@dataclass(frozen=True)
class FedDropoutHParams(RAFedHParams):
    """Federated Dropout (Caldas et al. 2018, §3 item 4): one keep ratio for all.

    The keep ratio is the smallest level (what every client affords), with fresh random
    units per client and round.
    """

    width: str = "min"
    policy: str = "random"


@dataclass(frozen=True)
class FedRolexHParams(RAFedHParams):
    """FedRolex (Alam et al. 2022, §3 item 5): a rolling window advancing one unit a round."""

    policy: str = "rolling"


@dataclass(frozen=True)
class FjORDHParams(RAFedHParams):
    """FjORD (Horváth et al. 2021, §3 item 6): ordered dropout with a width per local step."""

    policy: str = "prefix"
    step_widths: bool = True
