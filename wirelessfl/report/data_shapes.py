"""The sizes and shapes of the image datasets' real files, for what must know them unread.

``--estimate``'s stand-ins (:mod:`wirelessfl.report.estimate`) and the lockstep groups'
memory sizing (:mod:`wirelessfl.report.local`) read them without the files.
"""

from __future__ import annotations

__all__ = ["SHAPES"]

#: Dataset → (train samples, test samples, sample shape, classes) of the real files.
SHAPES: dict[str, tuple[int, int, tuple[int, ...], int]] = {
    "fashion_mnist": (60_000, 10_000, (1, 28, 28), 10),
    "mnist": (60_000, 10_000, (1, 28, 28), 10),
    "cifar10": (50_000, 10_000, (3, 32, 32), 10),
    "cifar100": (50_000, 10_000, (3, 32, 32), 100),
    "svhn": (73_257, 26_032, (3, 32, 32), 10),
    "tinyimagenet": (100_000, 10_000, (3, 64, 64), 200),
}
