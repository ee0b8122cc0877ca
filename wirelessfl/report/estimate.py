"""How long a figure set takes on this machine: ``wirelessfl figures PAPER --estimate``.

Each distinct setting of a figure (its panel, series and sweep value; seeds cost the same) is
timed on random tensors of its dataset's shapes (:func:`stand_in`), so the estimate needs no
dataset files: the runs of CIFAR-100 or Tiny ImageNet figures are timed on a machine that
does not hold them. One run of the setting is timed by its rows' clock: a first round of
:data:`LONG_ROUND_S` or more alone, else the rounds after the first (up to ``sample_rounds``,
fewer once they have taken :data:`SAMPLE_S`). A setting's run costs its start (data,
partition, model, the first round's warm-up) plus its rounds at the timed seconds per round:

    time = Σ_runs to do (start + rounds × seconds per round),

an upper bound for runs that stop at their target. Multi-task runs in simulated time
(FedAST) and text datasets are not estimated; the table says so.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from wirelessfl.data import datasets
from wirelessfl.data.arrays import ArrayDataset, DatasetSplits
from wirelessfl.errors import TrainingDiverged
from wirelessfl.report.metrics import group_runs
from wirelessfl.report.spec import Figure, RunSpec, missing_runs
from wirelessfl.run.kinds import canonical, open_run
from wirelessfl.run.records import RunRecord
from wirelessfl.run.shell import execute

#: Dataset → (train samples, test samples, sample shape, classes) of the real files.
SHAPES: dict[str, tuple[int, int, tuple[int, ...], int]] = {
    "fashion_mnist": (60_000, 10_000, (1, 28, 28), 10),
    "mnist": (60_000, 10_000, (1, 28, 28), 10),
    "cifar10": (50_000, 10_000, (3, 32, 32), 10),
    "cifar100": (50_000, 10_000, (3, 32, 32), 100),
    "svhn": (73_257, 26_032, (3, 32, 32), 10),
    "tinyimagenet": (100_000, 10_000, (3, 64, 64), 200),
}

#: A setting whose first round takes at least this many seconds is timed by that round alone
#: (its warm-up, a few allocations and lazy initialisations, is then a small part of it);
#: a shorter one by up to ``sample_rounds`` rounds after the first, fewer once they have
#: taken :data:`SAMPLE_S`. HIST's paper-scale settings took 1-13 s a round on 2 CPU cores,
#: its CIFAR-10 ones 64 s.
LONG_ROUND_S, SAMPLE_S = 10.0, 5.0

#: A stand-in's training set is capped at this many bytes (Tiny ImageNet's would be 4.9 GB);
#: a round's cost does not depend on it when clients take a fixed number of steps.
MAX_TRAIN_BYTES = 2**30


def stand_in(dataset: str) -> str | None:
    """The registered name of random tensors shaped as ``dataset`` (None: no stand-in).

    Inputs are uniform in [0, 1), labels balanced over the classes, drawn from a fixed
    seed; the training set keeps the real size up to :data:`MAX_TRAIN_BYTES`.
    """
    if dataset not in SHAPES:
        return None
    name = f"estimate_{dataset}"
    if name not in datasets.USER_DATASETS:
        train_n, test_n, shape, classes = SHAPES[dataset]
        train_n = min(train_n, MAX_TRAIN_BYTES // (4 * math.prod(shape)))

        def load(_: Path | None) -> DatasetSplits:
            gen = torch.Generator().manual_seed(0)

            def split(n: int) -> ArrayDataset:
                y = torch.arange(n) % classes
                return ArrayDataset(torch.rand((n, *shape), generator=gen),
                                    y[torch.randperm(n, generator=gen)], classes)
            return DatasetSplits(name, split(train_n), split(test_n))

        datasets.register_dataset(name, load)
    return name


@dataclass(frozen=True)
class Estimate:
    """A figure's estimated time and what was not estimated.

    Its runs to do (those not counted for an earlier figure), their rounds and seconds.
    """

    figure: str
    runs: int
    rounds: int
    seconds: float
    note: str = ""


def estimate(figures: list[Figure], root: Path, *, sample_rounds: int = 2,
             log: Callable[[str], None] = print) -> list[Estimate]:
    """Time a sample of every figure's settings and estimate its runs still to do."""
    todo = {r.key for r in missing_runs(figures, root)}  # a run two figures share counts once
    timed: dict[str, tuple[float, float] | str] = {}  # a setting's (start, per round) or why not
    out = []
    for fig in figures:
        runs = list({r.key: r for r in fig.runs if r.key in todo}.values())
        total, rounds, notes = 0.0, 0, set()
        for group in group_runs(fig).values():
            mine = list({r.key: r for r in group if r.key in todo}.values())
            todo -= {r.key for r in mine}
            if not mine:
                continue
            sample = mine[0]
            if sample.key not in timed:
                timed[sample.key] = _time_setting(sample, sample_rounds, log)
            cost = timed[sample.key]
            if isinstance(cost, str):
                notes.add(cost)
                continue
            start, per_round = cost
            for r in mine:
                n = int(canonical(r.raw)["rounds"])
                total, rounds = total + start + n * per_round, rounds + n
        out.append(Estimate(fig.name, len(runs), rounds, total, "; ".join(sorted(notes))))
    return out


def _time_setting(run: RunSpec, sample_rounds: int,
                  log: Callable[[str], None]) -> tuple[float, float] | str:
    """(start, seconds per round) of ``run``'s setting on a stand-in of its data, or why not."""
    if "tasks" in run.raw:
        return "multi-task runs in simulated time are not estimated"
    data = dict(run.raw.get("data") or {})
    if data.get("dataset", "synthetic") != "synthetic":
        name = stand_in(data["dataset"])
        if name is None:
            return f"{data['dataset']}: no stand-in (text datasets are not estimated)"
        data.update(dataset=name, data_dir=None, normalization="auto")
    base = _sessions_inside({**run.raw, "data": data, "stop_at_target": False,
                             "name": "estimate"}, 1 + sample_rounds)
    with tempfile.TemporaryDirectory(prefix="wirelessfl-estimate-") as tmp:
        sample = _Sample()
        try:
            total = _timed_job({**base, "rounds": 1 + sample_rounds}, Path(tmp) / "0", sample)
        except TrainingDiverged as exc:  # one setting's sample: the others are still timed
            return f"{run.label}: its timed sample diverged ({str(exc).splitlines()[0][:80]})"
        walls = sample.walls
        last = max(walls, default=0)
        if 0 in walls and 1 in walls and last == 1:  # a long first round, timed alone
            per_round = walls[1] - walls[0]
            start = max(0.0, total - per_round)
        elif 1 in walls and last >= 2:  # rounds 2 .. last after the warm-up round
            per_round = max(0.0, (walls[last] - walls[1]) / (last - 1))
            start = max(0.0, total - last * per_round)
        else:  # rows not every round (eval_every > 1): a 1-round run beside it
            try:
                first = _timed_job({**base, "rounds": 1}, Path(tmp) / "1", None)
            except TrainingDiverged as exc:
                return f"{run.label}: its timed sample diverged ({str(exc).splitlines()[0][:80]})"
            per_round = max(0.0, (total - first) / sample_rounds)
            start = max(0.0, first - per_round)
    log(f"  timed {run.label}: {per_round:.3g} s a round, {start:.3g} s to start")
    return start, per_round


def _sessions_inside(raw: dict[str, Any], rounds: int) -> dict[str, Any]:
    """``raw`` with its dynamic population's sessions and events inside the ``rounds`` timed.

    A run of alternating client groups whose sessions last longer than the timed rounds would
    be refused (no session would end); its timed sample gets sessions of L rounds, L small
    enough that the sample holds more sessions than the initial-model rule's pilot sessions,
    so session starts (and the rule acting at them) are inside the timing: an upper bound for
    the real sessions, which start less often. Events after the timed rounds are dropped.
    """
    cfg = canonical(raw)
    pop = cfg.get("population") or {}
    if pop.get("kind") == "alternating":
        pilot = int((cfg.get("initial_model") or {}).get("pilot_sessions") or 0) \
            if (cfg.get("initial_model") or {}).get("rule", "none") != "none" else 0
        length = max(1, min(int(pop["rounds_per_session"]), (rounds - 1) // (pilot + 1)))
        return {**raw, "population": {**(raw.get("population") or {}),
                                      "rounds_per_session": length}}
    if pop.get("kind") == "events":
        events = [e for e in (raw.get("population") or {}).get("events", [])
                  if not (isinstance(e, dict) and isinstance(e.get("round"), int)
                          and e["round"] >= rounds)]
        return {**raw, "population": {**(raw.get("population") or {}), "events": events}}
    return raw


class _Sample:
    """When a setting's timed run has sampled enough rounds: its rows' clock by round.

    A first round of :data:`LONG_ROUND_S` or more is its own sample; after a shorter one the
    run goes on to its last round, or until the rounds after the first have taken
    :data:`SAMPLE_S`.
    """

    def __init__(self) -> None:  # noqa: D107
        self.walls: dict[int, float] = {}

    def __call__(self, row: dict[str, Any]) -> bool:
        r, walls = int(row["round"]), self.walls
        walls[r] = float(row["wall_s"])
        if r == 1:
            return 0 in walls and walls[1] - walls[0] >= LONG_ROUND_S
        return r >= 2 and 1 in walls and walls[r] - walls[1] >= SAMPLE_S


def _timed_job(raw: dict[str, Any], folder: Path, until: _Sample | None) -> float:
    """Run ``raw`` into ``folder`` (ending once ``until`` says so); its seconds."""
    job = open_run(raw)
    t0 = time.perf_counter()
    execute(RunRecord(folder), job, quiet=True, estimate=False, until=until)
    return time.perf_counter() - t0


def estimate_table(rows: list[Estimate], device: str) -> str:
    """The estimate as text: a line per figure and the total in hours."""
    lines = [f"{'figure':14s} {'runs':>5s} {'rounds':>7s} {'hours':>8s}  (on {device})"]
    for e in rows:
        lines.append(f"{e.figure:14s} {e.runs:5d} {e.rounds:7d} {e.seconds / 3600:8.2f}"
                     + (f"  not all estimated: {e.note}" if e.note else ""))
    total = sum(e.seconds for e in rows)
    lines.append(f"{'total':14s} {sum(e.runs for e in rows):5d} "
                 f"{sum(e.rounds for e in rows):7d} {total / 3600:8.2f}  "
                 f"(runs x rounds x seconds per round, timed; an upper bound where runs stop "
                 f"at their target)")
    return "\n".join(lines)


def describe_device(raw: dict[str, Any]) -> str:
    """The device the runs would use, in words (``cuda``: the GPU's name)."""
    device = str(raw.get("device", "auto"))
    if device in ("auto", "cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "CPU" if device in ("auto", "cpu") else device
