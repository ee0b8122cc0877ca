"""Multi-task runs in simulated time: FedAST and its baselines (``docs/papers/fedast.md``).

A preset with a ``tasks:`` list is a multi-task run::

    tasks: [fmnist_lenet5, fmnist_lenet5]        # registry names, or {task: name, ...overrides}
    pool: {clients: 1000, available: 300}          # §4.1
    method: {name: fedast, option: S, requests: 384}   # or sync_st, centralized
    max_time: 520000

``wirelessfl run`` writes the run folder as for single-task runs: ``config.yaml``,
``meta.json``, ``metrics.jsonl``/``.csv`` (one row per evaluation: task, round, simulated
time, test accuracy and loss, updates, mean staleness, R_m, b_m) and ``summary.json``
(per-task time to target, and the time all tasks are done). Speed classes come from the
``partition`` stream, so every method of one seed sees the same clients (§7 item 16).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import override

from channels.validation import as_float
from wirelessfl import registry
from wirelessfl.algorithms.fedast.fedast import FedASTHParams
from wirelessfl.algorithms.fedast.simtime import ClientPool
from wirelessfl.algorithms.fedast.simulation import TaskState
from wirelessfl.algorithms.fedast.tasks import TaskEnv
from wirelessfl.engine.client import LocalHParams
from wirelessfl.errors import RunFolderError, check_config_size, short
from wirelessfl.net.delays import LinkLatency, ShiftedExponential, speed_classes
from wirelessfl.net.links import NetworkConfig, make_link
from wirelessfl.rng import Seeds
from wirelessfl.run.config import (
    ConfigError,
    DataConfig,
    ModelConfig,
    build_dataclass,
    check_name,
    checked,
)
from wirelessfl.run.configtypes import AlgorithmConfig, build_algorithm, key_view, plain
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import check_finite
from wirelessfl.run.shell import Job, Output
from wirelessfl.run.tasks import TaskConfig, build_tasks, task_from_registry

#: Most tasks one multi-task run trains (``tasks`` × ``copies``).
MAX_TASKS = 64


#: ``pool.download``: how a request's model download is timed over a link.
DOWNLOADS = ("unicast", "free")


@dataclass(frozen=True)
class PoolConfig:
    """The shared client pool (§4.1–4.2).

    Attributes
    ----------
    clients : int
        N.
    available : int or None
        Cap on distinct busy clients for the asynchronous methods (300); None: no cap.
    speed_shares, speed_multipliers : tuple of float
        Shares and multipliers s_i of the slow / normal / fast classes.
    kappa : float
        Latency scale κ (1/2 [code]).
    free_on_cancel : bool
        Free a client when its request is cancelled (default: it keeps computing, §7 item 18).
    download : str
        How a request's model download is timed over the run's ``network`` link:
        ``unicast`` (default since 2026-11-26: a transmission to that one client over the
        link, timed as its upload is, over a channel drawn for it, before its computation)
        or ``free`` (only the upload timed; runs made before have it). Either way a request
        is timed as if alone on the band: requests in flight do not share it. Without a
        ``network`` link there is no download to time and the setting reads ``free``.
    """

    clients: int = 1000
    available: int | None = 300
    speed_shares: tuple[float, float, float] = (0.25, 0.5, 0.25)
    speed_multipliers: tuple[float, float, float] = (1.3, 1.0, 0.7)
    kappa: float = 0.5
    free_on_cancel: bool = False
    download: str = "unicast"

    def __post_init__(self) -> None:
        if self.download not in DOWNLOADS:
            raise ConfigError(f"pool.download must be one of {', '.join(DOWNLOADS)}, got "
                              f"{str(self.download)[:40]!r}")
        checked("pool.", clients=(self.clients, 1, 10**6), available=(self.available, 1, 10**6),
                kappa=(self.kappa, 0, 1e6, "open"))
        for i, (share, mult) in enumerate(zip(self.speed_shares, self.speed_multipliers)):
            checked("pool.", **{f"speed_shares[{i}]": (share, 0, 1),
                                f"speed_multipliers[{i}]": (mult, 0, 1e6, "open")})
        if abs(sum(self.speed_shares) - 1) > 1e-9:
            raise ConfigError(f"pool.speed_shares must sum to 1, got {list(self.speed_shares)} "
                              f"(sum {sum(self.speed_shares):g})")


@dataclass(frozen=True)
class MultiTaskConfig:
    """A multi-task run (see the module docstring).

    ``copies`` (in the YAML only) repeats the task list, for M identical tasks (E4: ``--set
    copies=6``). ``test_samples`` evaluates on a fixed random subset of each test set (quick
    scale); ``eval_every`` counts a task's aggregations; ``eval_interval`` evaluates instead
    at every multiple of that simulated time, so methods compared are evaluated at the same
    times (E4's time to target). ``stop_at_target: false`` trains
    every task until ``max_time`` or ``max_rounds`` (final-accuracy studies, E2 and E9); the
    time to target is still read from the records. ``network`` (the link models of
    :mod:`wirelessfl.net.links`; default ``none``) adds each request's link time to its
    compute latency (:class:`~wirelessfl.net.delays.LinkLatency`): FedAST over TDMA, FDMA,
    fixed or shadowed links, the same seam that times round-based runs.
    """

    name: str = "multitask"
    description: str = ""
    seed: int = 0
    device: str = "auto"
    engine: str = "auto"
    tasks: tuple[TaskConfig, ...] = ()
    pool: PoolConfig = field(default_factory=PoolConfig)
    method: AlgorithmConfig = field(default_factory=lambda: AlgorithmConfig("fedast", FedASTHParams()))
    max_time: float = 5.2e5
    max_rounds: int | None = None
    eval_every: int = 1
    eval_interval: float | None = None
    test_samples: int | None = None
    stop_at_target: bool = True
    network: NetworkConfig = field(default_factory=NetworkConfig)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not self.tasks:
            raise ConfigError("tasks: name at least one task")
        checked("", seed=(self.seed, 0, 2**63 - 1), max_time=(self.max_time, 0, 1e15, "open"),
                max_rounds=(self.max_rounds, 1, 10**7), eval_every=(self.eval_every, 1, 10**7),
                eval_interval=(self.eval_interval, 0, 1e15, "open"),
                test_samples=(self.test_samples, 1, 10**8))
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ConfigError(f"task names must differ, got {names}; give each task a 'name'")
        if self.device not in ("cpu", "cuda", "auto") or self.engine not in ("loop", "batched", "auto"):
            raise ConfigError("device must be cpu, cuda or auto, and engine loop, batched or auto")
        if self.network.step_seconds:
            raise ConfigError("network.step_seconds: a multi-task run's computing time is its "
                              "latency model's (pool.kappa, the tasks' latency constants and "
                              "speed classes); the link times only the transfers (remove it)")
        link = make_link(self.network)
        shaping = link.shaping()
        if shaping:
            raise ConfigError(f"network.{shaping[0]}: a multi-task run's requests have no round "
                              "to drop, schedule or aggregate over the air from; its link only "
                              "times them (remove it)")
        if not link.clocked and self.pool.download != "free":  # no link, no download to time:
            object.__setattr__(self, "pool",  # recorded as runs made before have it
                               dataclasses.replace(self.pool, download="free"))


def is_multitask(raw: dict[str, Any]) -> bool:
    """Whether a raw config describes a multi-task run."""
    return isinstance(raw, dict) and "tasks" in raw


def _task(raw: Any, index: int) -> TaskConfig:
    t = task_from_registry(raw, index)
    prefix = f"tasks[{index}]"
    sections = {"data": DataConfig, "model": ModelConfig, "local": LocalHParams,
                "sync_local": LocalHParams}
    built = {k: build_dataclass(cls, t.pop(k, None), f"{prefix}.{k}") for k, cls in sections.items()
             if k in t or k != "sync_local"}
    return build_dataclass(TaskConfig, t, prefix, built=built)


#: Keys of a multi-task config's top-level ``data``: where every task's data is read from
#: and where it is placed, not which samples it holds.
SHARED_DATA_KEYS = ("data_dir", "placement")


def _with_shared_data(entry: Any, shared: Any, index: int) -> Any:
    """Task ``entry`` with the config's top-level ``data`` as defaults of its own ``data``.

    ``data: {data_dir: DIR}`` reads every task's dataset from ``DIR`` (what ``wirelessfl
    figures --data-dir`` and ``--set data.data_dir=DIR`` give); a task's own setting wins.
    """
    if shared is None:
        return entry
    if not isinstance(shared, dict) or not set(shared) <= set(SHARED_DATA_KEYS):
        keys = sorted(set(shared) - set(SHARED_DATA_KEYS)) if isinstance(shared, dict) else shared
        raise ConfigError(f"data of a multi-task config sets only {', '.join(SHARED_DATA_KEYS)} "
                          f"for every task, got {short(keys)}; set a task's own data under "
                          "tasks[i].data")
    if isinstance(entry, str):
        entry = {"task": entry}
    if not isinstance(entry, dict):
        return entry  # task_from_registry says what is wrong with it
    own = entry.get("data") or {}
    if not isinstance(own, dict):
        raise ConfigError(f"tasks[{index}].data must be a mapping, got {short(own)}")
    return {**entry, "data": {**shared, **own}}


def _with_clients(task: TaskConfig, clients: int) -> TaskConfig:
    """The task on the pool's clients (a task's own ``data.num_clients`` is not used)."""
    return dataclasses.replace(task, data=dataclasses.replace(task.data, num_clients=clients))


def resolve_multitask(raw: dict[str, Any]) -> MultiTaskConfig:
    """A :class:`MultiTaskConfig` from a nested mapping, every key and type checked."""
    check_config_size(raw)
    raw = copy.deepcopy(raw)
    tasks, copies = raw.pop("tasks"), raw.pop("copies", 1)
    if not isinstance(tasks, list) or isinstance(copies, bool) or not isinstance(copies, int) \
            or not 1 <= copies <= MAX_TASKS:
        raise ConfigError(f"tasks must be a list of task names or mappings, copies an integer in "
                          f"1..{MAX_TASKS}, got copies={short(copies)}")
    if not 1 <= len(tasks) * copies <= MAX_TASKS:
        raise ConfigError(f"a run trains 1..{MAX_TASKS} tasks, got {len(tasks) * copies} "
                          "(tasks x copies)")
    shared = raw.pop("data", None)
    tasks = [_with_shared_data(t, shared, i) for i, t in enumerate(tasks * copies)]
    method = raw.pop("method", None) or {}
    if not isinstance(method, dict):
        raise ConfigError(f"'method' must be a mapping, got {short(method)}")
    method = dict(method)
    name = method.pop("name", "fedast")
    methods = registry.names("simulation")  # read now: a user's register() counts
    if not isinstance(name, str) or name not in methods:
        raise ConfigError(f"unknown method {short(name)}; choose one of {', '.join(methods)}")
    method_cfg = build_algorithm({"name": name, **method}, "method", kinds=("simulation",))
    pool = build_dataclass(PoolConfig, raw.pop("pool", None), "pool")
    for i, t in enumerate(tasks):
        given = t.get("data", {}).get("num_clients") if isinstance(t, dict) and isinstance(
            t.get("data"), dict) else None
        if given is not None and given != pool.clients:
            raise ConfigError(f"tasks[{i}].data.num_clients={short(given)} differs from "
                              f"pool.clients={pool.clients}: every task shares the pool's "
                              "clients; set pool.clients instead")
    built = {
        "tasks": tuple(_with_clients(_task(t, i), pool.clients) for i, t in enumerate(tasks)),
        "pool": pool,
        "method": method_cfg,
    }
    return build_dataclass(MultiTaskConfig, raw, "", built=built)


def multitask_to_dict(cfg: MultiTaskConfig) -> dict[str, Any]:
    """Plain nested mapping of a multi-task config (round-trips through :func:`resolve_multitask`)."""
    out = plain(cfg)
    for t in out["tasks"]:
        if t["sync_local"] is None:
            del t["sync_local"]
    return out


def build_simulator(cfg: MultiTaskConfig) -> tuple[Any, list[TaskEnv]]:
    """Tasks, client pool and the method's simulator (nothing written)."""
    from wirelessfl.engine.executors import make_executor, resolve_device

    device = resolve_device(cfg.device)
    seeds = Seeds(cfg.seed)
    sim_cls = registry.get(cfg.method.name)[1]
    sync = getattr(sim_cls, "uses_sync_local", False)
    tasks = build_tasks(cfg.tasks, cfg.pool.clients, seeds, device, sync=sync,
                        test_samples=cfg.test_samples)
    p = cfg.pool
    speed = speed_classes(p.clients, seeds.generator("partition", 1), p.speed_shares,
                          p.speed_multipliers)
    latency = ShiftedExponential(task_constants=[t.config.latency_constant for t in tasks],
                                 speed=speed, steps=[t.steps for t in tasks], kappa=p.kappa)
    link = make_link(cfg.network, seeds=seeds)
    if link.clocked:  # each request also crosses the link (the round-based runs' seam)
        per = cfg.network.params_per_vector
        latency = LinkLatency(latency, link, [per or sum(int(v.numel()) for v in
                                                         t.init_params.values()) for t in tasks],
                              download=p.download)
    pool = ClientPool(latency, p.clients, cap=None if sync else p.available,
                      free_on_cancel=p.free_on_cancel)
    sim = sim_cls(tasks, pool, make_executor(cfg.engine, device), seeds, cfg.method.hparams)
    return sim, tasks


def summarize_multitask(cfg: MultiTaskConfig, rows: list[dict[str, Any]], end: float,
                        wall: float, stats: dict[str, Any]) -> dict[str, Any]:
    """Per-task time to target and final accuracy; the time all tasks are done."""
    per_task = {}
    for t in cfg.tasks:
        mine = [r for r in rows if r["task"] == t.name]
        hit = next((r for r in mine if r["test_accuracy"] >= t.target), None)
        per_task[t.name] = {"target": t.target, "reached": hit is not None,
                            "time_to_target": hit["sim_time"] if hit else None,
                            "final_accuracy": mine[-1]["test_accuracy"] if mine else None,
                            **stats.get(t.name, {})}
    times = [v["time_to_target"] for v in per_task.values()]
    # no task finished a round: the models are the initial ones, said out loud
    learned_nothing = all(not v.get("rounds") for v in per_task.values())
    return {"name": cfg.name, "method": cfg.method.name, "tasks": per_task,
            "learned_nothing": learned_nothing,
            "all_reached": all(x is not None for x in times),
            "time_all_done": max(times) if all(x is not None for x in times) else None,
            "sim_time_end": end, "wall_s": wall}


class SimulationJob(Job):
    """A multi-task simulation as a :class:`~wirelessfl.run.shell.Job`.

    Rows are evaluations; snapshots are written after a completed aggregation once
    ``checkpoint_every_s`` wall seconds have passed (0: after every round).
    """

    progress_unit = "t"
    kept = "evaluations"

    def __init__(self, cfg: MultiTaskConfig, checkpoint_every_s: float) -> None:
        self.cfg, self.every = cfg, as_float("checkpoint_every_s", checkpoint_every_s, lo=0)
        self.sim, self.tasks = build_simulator(cfg)
        self.resolved, self.seed = multitask_to_dict(cfg), cfg.seed
        self.device, self.name = str(self.tasks[0].device), cfg.name
        # simulated time is the bar's scale only when max_time is what ends the run; a run
        # that stops at its targets or after max_rounds ends at a time nobody knows ahead:
        # it counts evaluations (no percentage, no made-up ETA), simulated time beside it
        self.open_ended = cfg.stop_at_target or cfg.max_rounds is not None
        self.progress_total = None if self.open_ended else cfg.max_time
        self.progress_unit = "eval" if self.open_ended else "t"
        self.rows, self.end = 0, 0.0

    @override
    def key_of(self, config: dict[str, Any]) -> Any:
        return key_view(resolve_multitask(config))

    @override
    def restore(self, ckpt: dict[str, Any]) -> None:
        try:
            self.sim.load_state_dict(ckpt["sim"])
            self.rows = int(ckpt["rows"])
        except (KeyError, TypeError, ValueError) as exc:
            raise RunFolderError(f"--resume: the snapshot does not fit this run "
                                 f"({str(exc)[:100]}); start the run again with another --out"
                                 ) from None

    @override
    def kept_rows(self, record: RunRecord,
                  rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(rows) < self.rows:
            raise RunFolderError(f"--resume: {record.metrics_path} has {len(rows)} rows but the "
                                 f"snapshot saw {self.rows}; the folder is damaged: start the "
                                 "run again with another --out")
        kept = rows[:self.rows]
        names = {t.name for t in self.cfg.tasks}
        if any(r.get("task") not in names for r in kept):
            raise RunFolderError(f"--resume: {record.metrics_path} has rows of unknown tasks")
        for name in names:  # a task's evaluations: in order, none twice (several a round with
            mine = [r for r in kept if r["task"] == name]  # eval_interval: keyed by time too)
            record.check_rows(mine, sorted({_eval_key(r) for r in mine}), key=_eval_key)
        return kept

    @override
    def progress(self) -> float:
        return float(self.rows) if self.open_ended else float(getattr(self.sim, "time", 0.0))

    @override
    def advance(self, out: Output) -> None:
        cfg, sim = self.cfg, self.sim
        saved = [time.perf_counter()]

        def on_eval(task: TaskEnv, st: TaskState, now: float) -> bool:
            check_finite(st.params, f"task {task.name}, round {st.round}")
            acc, loss = task.evaluate(st.params)
            out.row({"task": task.name, "round": st.round, "sim_time": now,
                     "test_accuracy": acc, "test_loss": loss, "updates": st.updates,
                     "staleness_mean": st.mean_staleness, "requests": st.target_requests,
                     "buffer": st.buffer_size},
                    progress=self.rows + 1 if self.open_ended else now,
                    note=f"t={now:.4g} {task.name} {acc:.3f}")
            self.rows += 1
            return cfg.stop_at_target and acc >= task.config.target

        def on_checkpoint() -> None:
            if time.perf_counter() - saved[0] >= self.every:
                out.checkpoint({"sim": sim.state_dict(), "rows": self.rows})
                saved[0] = time.perf_counter()

        self.end = sim.run(on_eval, max_time=cfg.max_time, eval_every=cfg.eval_every,
                           max_rounds=cfg.max_rounds, on_checkpoint=on_checkpoint,
                           **({} if cfg.eval_interval is None
                              else {"eval_interval": cfg.eval_interval}))

    @override
    def summary(self, rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
        stats = {t.name: {"updates": s.updates, "rounds": s.round,
                          "staleness_mean": s.mean_staleness}
                 for t, s in zip(self.tasks, self.sim.states)}
        return summarize_multitask(self.cfg, rows, self.end, wall, stats)

    @override
    def describe(self, summary: dict[str, Any], out: Any, plot: Any = None) -> str:
        lines = []
        for name, t in summary["tasks"].items():
            reached = (f"target {t['target']:.2f} at t = {t['time_to_target']:.1f}" if t["reached"]
                       else f"target {t['target']:.2f} not reached")
            final = ("never evaluated" if t.get("final_accuracy") is None
                     else f"final accuracy {t['final_accuracy']:.4f}")
            lines.append(f"{name}: {reached}; {final}, {t.get('rounds', 0)} rounds, "
                         f"{t.get('updates', 0)} updates, mean staleness "
                         f"{t.get('staleness_mean', 0.0):.2f}")
        done = summary["time_all_done"]
        if summary.get("learned_nothing"):
            lines.append(f"nothing was learned: no task finished a round before the run ended at "
                         f"t = {summary['sim_time_end']:.4g} (simulated; max_time "
                         f"{self.cfg.max_time:g}, max_rounds {self.cfg.max_rounds}); raise "
                         "max_time or max_rounds")
        lines.append(f"{self.cfg.name} ({self.cfg.method.name}): all tasks done at t = "
                     f"{'not reached' if done is None else f'{done:.1f}'} (simulated), "
                     f"{summary['wall_s']:.1f} s wall; run folder {out}")
        return "\n".join(lines)


def _eval_key(row: dict[str, Any]) -> tuple[int, float]:
    """A task's evaluation row by its round and simulated time.

    Several a round under ``eval_interval``; the rows of one task come in this order, each once.
    """
    t = row.get("sim_time")
    return int(row["round"]), float(t) if isinstance(t, (int, float)) else 0.0
