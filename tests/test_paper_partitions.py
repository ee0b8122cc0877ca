"""Every paper-scale figure's clients can be drawn from its dataset's samples.

The paper-scale estimate found that FAdamGC's two-class text panels (Dirichlet over 100
clients at α = 0.1) could never start: in every one of the partitioner's 100 draws some
client got no sample. A run of those figures needs the user's files and hours of GPU, so
nothing else would have found it before a user did. Here each distinct data setting of every
paper's paper scale is partitioned on labels of its dataset's real size and classes (spread
evenly over the classes: the real sets are near that, and an even spread is the easier case,
so this is a necessary condition).
"""

import numpy as np
import pytest

from wirelessfl.report.estimate import SHAPES, TEXT_SHAPES
from wirelessfl.report.spec import load_figures
from wirelessfl.run.config import resolve
from wirelessfl.run.datasplit import make_partitioner
from wirelessfl.run.kinds import canonical

PAPERS = ("hist", "codesign", "dynamic", "rafed", "fadamgc")
KEYS = ("dataset", "partition", "num_clients", "samples_per_client", "shards_per_client", "alpha",
        "min_size", "reuse", "overlap", "share_overlap", "unseen_labels")


def _size(dataset: str) -> tuple[int, int] | None:
    if dataset in SHAPES:
        return SHAPES[dataset][0], SHAPES[dataset][3]
    if dataset in TEXT_SHAPES:
        return TEXT_SHAPES[dataset][0], TEXT_SHAPES[dataset][2]
    return None


@pytest.mark.parametrize("paper", PAPERS)
def test_every_paper_scale_partition_can_be_drawn_on_its_dataset(paper):
    seen = {}
    for fig in load_figures(paper, "paper"):
        for run in fig.runs:
            if "tasks" in run.raw:
                continue
            cfg = canonical(run.raw)
            d = cfg["data"]
            key = tuple(str(d.get(k)) for k in KEYS) + (str(cfg["algorithm"].get("cells")),)
            if key not in seen and d["partition"] != "natural" and _size(d["dataset"]):
                seen[key] = (run, cfg)
    assert seen
    for run, cfg in seen.values():
        n, classes = _size(cfg["data"]["dataset"])
        labels = np.arange(n) % classes
        parts = make_partitioner(resolve(run.raw), classes).partition(
            labels, np.random.default_rng(0))
        sizes = [len(p) for p in parts]  # cells of ⌊U/N⌋ clients may leave a remainder out
        assert 0 < len(sizes) <= cfg["data"]["num_clients"] and min(sizes) > 0, run.label
