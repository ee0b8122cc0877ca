"""Build a run from its config and drive it round by round.

:func:`prepare` does everything that can fail on bad input (data, partition, model,
algorithm) without touching the disk; :func:`run` then creates the run folder, trains, and
appends a metrics row per evaluation and a checkpoint every ``checkpoint_every`` rounds, as
a :class:`RoundsJob` of the shared run loop (:mod:`wirelessfl.run.shell`). With ``resume=True``
it continues an interrupted run from its checkpoint and, because every random stream is keyed
by (seed, round, ...), ends with the same numbers as an uninterrupted run. Rounds that do not
time themselves are timed by the run's network model (:mod:`wirelessfl.net.links`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from typing_extensions import override

from wirelessfl import registry
from wirelessfl.algorithms.base import Environment, FederatedAlgorithm, ServerState
from wirelessfl.data import (
    DatasetSplits,
    load_dataset,
)
from wirelessfl.data.arrays import inside
from wirelessfl.engine.client import ClientResult, LocalSGD, evaluate
from wirelessfl.engine.client_store import ClientStore, backend_for
from wirelessfl.engine.executors import make_executor, resolve_device
from wirelessfl.engine.lockstep import Lockstep
from wirelessfl.engine.loop import Executor
from wirelessfl.engine.store_tables import StoreFileError
from wirelessfl.errors import RunFolderError, TrainingDiverged
from wirelessfl.models import FLModel, Params, build_model
from wirelessfl.net.links import LinkModel, RoundCost, make_link
from wirelessfl.rng import Seeds
from wirelessfl.run import plugins
from wirelessfl.run.config import ConfigError, RunConfig, key_view, resolve, to_dict
from wirelessfl.run.datasplit import make_partitioner, partition_data  # noqa: F401 (re-exported)
from wirelessfl.run.records import RunRecord, first_reaching, params_to_mb
from wirelessfl.run.shell import Job, Output
from wirelessfl.server.population import make_population
from wirelessfl.server.privacy import PrivacyState
from wirelessfl.server.state import to_plain


@dataclass(eq=False)
class Experiment:
    """A run, built and validated, before anything is written."""

    config: RunConfig
    device: torch.device
    seeds: Seeds
    splits: DatasetSplits
    model: FLModel
    algorithm: FederatedAlgorithm
    link: LinkModel | None = None
    #: What the algorithm runs in (data, clients, executor, population), as built here.
    env: Environment | None = None

    def initial_state(self) -> ServerState:
        """Server state before round 0."""
        return self.algorithm.init(self.model.to(self.device).params())


def model_options(cfg: RunConfig) -> dict[str, Any]:
    """The model's options; a relative ``pretrained`` file or ``model_dir`` is found in ``data.data_dir``."""
    options = dict(cfg.model.options)
    for key in ("pretrained", "model_dir"):
        path = options.get(key)
        if isinstance(path, str) and cfg.data.data_dir and not Path(path).expanduser().is_absolute():
            try:
                options[key] = str(inside(cfg.data.data_dir, path, f"model.options.{key}"))
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    return options


#: Datasets read from files, the same whatever the run's seed: a lockstep group loads one.
SHARED_DATASETS = ("fashion_mnist", "mnist", "cifar10", "cifar100", "svhn", "tinyimagenet")


def shared_dataset(name: str) -> bool:
    """Whether runs of a lockstep group can share one copy of dataset ``name``.

    The file datasets and those registered from a user's code (a function of the data
    folder alone) can; the others are drawn from each run's seed.
    """
    from wirelessfl.data.datasets import USER_DATASETS

    return name in SHARED_DATASETS or name in USER_DATASETS


def prepare(config: RunConfig | dict[str, Any], lockstep: Lockstep | None = None,
            executor_wrap: Callable[[Executor], Executor] | None = None) -> Experiment:
    """Load data, partition it, build model, client engine and algorithm.

    With ``lockstep`` (:class:`~wirelessfl.engine.lockstep.Lockstep`) the run trains in that
    group: its clients on the group's engine, from the group's copy of a file dataset.
    ``executor_wrap`` wraps the client engine built (``--estimate``'s
    :class:`~wirelessfl.engine.sampled.SampledExecutor`).

    Raises ``ValueError`` (a :class:`~wirelessfl.run.config.ConfigError` or a data error) for
    any bad input; writes nothing.
    """
    if executor_wrap is not None and not callable(executor_wrap):
        raise ConfigError(f"executor_wrap must be a callable that wraps an Executor (or None), "
                          f"got {type(executor_wrap).__name__}")
    cfg = config if isinstance(config, RunConfig) else resolve(config)
    device = resolve_device(cfg.device)
    seeds = Seeds(cfg.seed)
    d = cfg.data

    def load() -> Any:
        return load_dataset(d.dataset, data_dir=d.data_dir, normalization=d.normalization,
                            rng=seeds.generator("data"), num_clients=d.num_clients,
                            synthetic_alpha=d.synthetic_alpha, synthetic_beta=d.synthetic_beta,
                            synthetic_dim=d.synthetic_dim,
                            samples_per_client=d.samples_per_client, tokenizer=d.tokenizer,
                            max_length=d.max_length)
    if lockstep is not None and shared_dataset(d.dataset):
        splits = lockstep.shared(("data", d.dataset, d.data_dir, d.normalization, str(device),
                                  d.placement), lambda: load().placed(device, d.placement))
    else:
        splits = load()
    client_indices = partition_data(cfg, splits, seeds)
    model = build_model(cfg.model.name, splits.train.sample_shape, splits.train.num_classes,
                        seed=seeds.int_seed("init"), **model_options(cfg)).to(device)
    vocab = getattr(model, "vocab_size", None)
    if vocab is not None:  # token-id models: the tokenizer's ids must fit the embedding
        top = int(max(splits.train.x.max(), splits.test.x.max()))
        if top >= vocab:
            raise ConfigError(f"the tokenizer gives token ids up to {top} but model "
                              f"{cfg.model.name!r} has a vocabulary of {vocab}: use the model's "
                              "own tokenizer or raise its vocabulary size")
    splits = splits.placed(device, d.placement)
    train = splits.train
    _check_model(model, cfg.model.name, train, device)
    net = cfg.network
    d = sum(int(p.numel()) for p in model.parameters() if p.requires_grad)
    cells = getattr(cfg.algorithm.hparams, "cells", None)
    if net.model == "nr" and isinstance(cells, int) and net.settings.cells != cells:
        raise ConfigError(f"network.cells = {net.settings.cells} but {cfg.algorithm.name} has "
                          f"{cells} cells: under network.model nr cell j is sector j, so set "
                          f"network.cells: {cells}")
    link = make_link(net, d, len(client_indices), seeds)
    uplink = link.aggregator(cfg.local.lr)
    shaping = link.shaping() if uplink is None else []
    algo_cls = registry.get(cfg.algorithm.name)[1]
    # an algorithm that times its own uplink (HIST, HFedAvg) takes no digital uplink unless a
    # setting shapes learning (refused below); nr's outage then shortens the clock only
    digital = (link.digital_uplink(len(client_indices), seeds)
               if shaping or algo_cls.uses_digital_link else None)
    executor = lockstep.member() if lockstep is not None else make_executor(
        cfg.engine, device, cfg.max_batch, model, cfg.workers, cfg.compile, cfg.replay,
        cfg.low_rank, worker_init=plugins.load_in_worker)
    env = Environment(model=model, train=train, client_indices=tuple(client_indices),
                      local=cfg.local, update=LocalSGD(model, cfg.local),
                      executor=executor if executor_wrap is None else executor_wrap(executor),
                      population=make_population(cfg.population, len(client_indices)),
                      seeds=seeds, uplink=uplink,
                      link=digital, rounds=cfg.rounds)
    if uplink is not None and not algo_cls.uses_uplink:
        from wirelessfl.algorithms.fedavg import FedAvg

        if issubclass(algo_cls, FedAvg):  # a server phase of its own (a user's rule)
            raise ConfigError(f"network.aggregation over_the_air: {cfg.algorithm.name} has its "
                              "own server_update, which reads each client's update; over the air "
                              "the server receives only their noisy sum. Aggregate with "
                              "self.combine(...) (the received sum) and set uses_uplink = True "
                              "in the class, or use network.aggregation: digital")
        raise ConfigError(f"network.aggregation over_the_air: {cfg.algorithm.name} aggregates its "
                          "own way (HIST: algorithm.aggregation aircomp); use it with the FedAvg "
                          "family (fedavg, fedprox, scaffold, fadamgc, moon, fedacg, feddyn, ...) "
                          "or RA-Fed / RAM-Fed")
    second = getattr(net.settings, "vector_channel", "round")
    if second != "round" and algo_cls.upload_vectors is FederatedAlgorithm.upload_vectors:
        raise ConfigError(f"network.vector_channel {second}: {cfg.algorithm.name} uploads one "
                          "vector a round, so there is no second vector to send over another "
                          "channel (remove it; it matters for scaffold and fadamgc)")
    if shaping and not algo_cls.uses_digital_link:
        raise ConfigError(f"network.{shaping[0]}: {cfg.algorithm.name} schedules and times its "
                          "own uplink; use it with the FedAvg family (fedavg, fedprox, scaffold, "
                          "fadamgc, moon, fedacg, feddyn, ...)")
    if digital is not None and digital.takes_late and not algo_cls.takes_late_uploads:
        raise ConfigError(f"network.late next_round: {cfg.algorithm.name} sums the second "
                          "vectors of its round's clients only, so a late one would be lost; "
                          "use late: drop with it")
    if cfg.engine == "distributed":  # capped by the clients and by memory before any spawns
        from channels.validation import check_memory
        from wirelessfl.engine.distributed import WORKER_BYTES

        if cfg.workers > len(client_indices):
            raise ConfigError(f"workers = {cfg.workers} is more than the {len(client_indices)} "
                              "clients: a worker without clients only costs memory; lower it")
        try:
            check_memory(cfg.workers * (WORKER_BYTES + train.nbytes),
                         f"engine distributed with {cfg.workers} workers (each a process with "
                         "PyTorch and a copy of the training set)", "use fewer --workers")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    fewest = (cfg.local.steps if cfg.local.epochs is None else cfg.local.epochs * min(
        (len(i) // cfg.local.batch_size if cfg.local.drop_last
         else -(-len(i) // cfg.local.batch_size)) for i in client_indices))
    try:
        link.check_reachable(fewest, len(client_indices), cfg.rounds)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    algorithm = algo_cls(env, cfg.algorithm.hparams)
    if getattr(cfg.algorithm.hparams, "clock", None) == "link" and not link.clocked:
        raise ConfigError("algorithm.clock link times HIST's rounds by the run's network link, "
                          "cell by cell, but network.model is none: name a link (tdma, nr, "
                          "...) or use clock: own")
    k = algorithm.clients_per_round
    if k is not None and k > len(client_indices):
        raise ConfigError(f"algorithm.clients_per_round = {k} is more than the "
                          f"{len(client_indices)} clients; lower it (or omit it: all take part)")
    if digital is not None and digital.schedules and k is None:
        raise ConfigError(f"network.scheduler {digital.cfg.scheduler} picks K clients a round: set "
                          "algorithm.hparams.clients_per_round (K)")
    return Experiment(cfg, device, seeds, splits, model, algorithm, link, env)


def _check_model(model: FLModel, name: str, train: Any, device: torch.device | str) -> None:
    """A model that can train on this data: trainable parameters, one logit per class.

    Checked on two training samples before anything trains (a registered model with too few
    output columns failed with an IndexError mid-round, one with no trainable parameter with
    autograd's "inputs argument to grad() cannot be empty").
    """
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(f"model {name!r} has no trainable parameters (requires_grad=True): "
                          "there is nothing for the clients to train")
    was = model.training
    model.eval()
    # on the run's device, not the data's: data pinned on the host (data.placement: host)
    # feeds a model on the GPU (the first H200 run failed here)
    try:
        with torch.no_grad():
            out = model(train.batch(slice(0, min(2, len(train))), device)[0])
    except Exception as exc:  # noqa: BLE001 - a plug-in's forward pass: one line
        raise ConfigError(f"model {name!r} cannot read samples of shape {train.sample_shape} "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
                          ) from None
    finally:
        model.train(was)
    want = (min(2, len(train)), train.num_classes)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(f"model {name!r} gives outputs of shape {got} for 2 samples; the "
                          f"data has {train.num_classes} classes, so it must give {want} "
                          "(one logit per class)")
    if not out.is_floating_point():  # an argmax or a rounding: nothing to differentiate
        raise ConfigError(f"model {name!r} gives {out.dtype} outputs; it must give float "
                          "logits (no argmax or rounding at its end), which the loss "
                          "differentiates")


def _checkpoint(state: ServerState, uplink: float, sim_time: float | None,
                totals: dict[str, float]) -> dict[str, Any]:
    return {"params": {k: v.cpu() for k, v in state.params.items()}, "round": state.round,
            "opt_state": _to_device(to_plain(state.opt_state), torch.device("cpu")),
            # already on the CPU (client_store); typed states as their plain mappings
            "client_states": (state.client_states.to_plain()
                              if isinstance(state.client_states, ClientStore)
                              else {u: to_plain(s) for u, s in state.client_states.items()}),
            "buffers": {k: v.cpu() for k, v in state.buffers.items()},
            "uplink_params_per_client": uplink, "sim_time_s": sim_time,
            "totals": dict(totals), "schedule_origin": state.schedule_origin,
            **({"privacy": to_plain(state.privacy)} if state.privacy is not None else {}),
            **({"late": [_to_device(dataclasses.asdict(r), torch.device("cpu"))
                         for r in state.late]} if state.late else {})}


def _restore(ckpt: dict[str, Any], exp: Experiment) -> ServerState:
    """The checkpoint's state, after checking it belongs to this config (round, shapes)."""
    init = exp.initial_state()
    params, t = ckpt.get("params"), ckpt.get("round")
    where = "--resume: the checkpoint"
    if not isinstance(t, int) or not 0 <= t <= exp.config.rounds:
        raise RunFolderError(f"{where} is of round {t!r}, outside 0..{exp.config.rounds} of the "
                             "config; the folder is damaged: start the run again with another --out")
    if not isinstance(params, dict) or {k: tuple(getattr(v, "shape", ())) for k, v in params.items()} \
            != {k: tuple(v.shape) for k, v in init.params.items()}:
        raise RunFolderError(f"{where}'s parameter shapes do not match the model of config.yaml; "
                             "the folder is damaged: start the run again with another --out")
    missing = [k for k in ("uplink_params_per_client", "sim_time_s", "wall_s") if k not in ckpt]
    if missing:
        raise RunFolderError(f"{where} lacks {', '.join(missing)}; the folder is damaged")
    buffers = ckpt.get("buffers") or {}
    if {k: tuple(v.shape) for k, v in buffers.items()} != {k: tuple(v.shape) for k, v in
                                                            init.buffers.items()}:
        raise RunFolderError(f"{where}'s buffers do not match the model of config.yaml; the "
                             "folder is damaged: start the run again with another --out")
    try:
        opt_state = exp.algorithm.load_state(_to_device(ckpt.get("opt_state"), exp.device))
    except (TypeError, ValueError) as exc:
        raise RunFolderError(f"{where}'s algorithm state does not fit {exp.config.algorithm.name} "
                             f"({str(exc)[:120]}); the folder is damaged: start the run again "
                             "with another --out") from None
    try:
        client_states = exp.algorithm.load_client_states(ckpt.get("client_states"))
    except StoreFileError as exc:  # the disk store's files: says which and why
        raise RunFolderError(f"--resume: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise RunFolderError(f"{where}'s client states do not fit {exp.config.algorithm.name} "
                             f"({str(exc)[:120]}); the folder is damaged: start the run again "
                             "with another --out") from None
    origin = ckpt.get("schedule_origin", 0)  # a restarted lr schedule resumes as it was
    if isinstance(origin, bool) or not isinstance(origin, int) or not 0 <= origin <= t:
        raise RunFolderError(f"{where}'s schedule origin is damaged; start the run again with "
                             "another --out")
    try:  # adaptive clipping's C_t (absent: none, as in every checkpoint made before it)
        privacy = PrivacyState.from_plain(ckpt["privacy"]) if ckpt.get("privacy") else None
    except (TypeError, ValueError) as exc:
        raise RunFolderError(f"{where}'s privacy state is damaged ({str(exc)[:80]}); start the "
                             "run again with another --out") from None
    return ServerState({k: v.to(exp.device) for k, v in params.items()}, t, opt_state,
                       client_states,  # the store stays on the CPU
                       {k: v.to(exp.device) for k, v in buffers.items()},
                       _late_uploads(ckpt.get("late", []), init.params, exp), origin,
                       privacy)


def _late_uploads(plain: Any, params: Params, exp: Experiment) -> tuple[ClientResult, ...]:
    """The checkpoint's pending late uploads, checked against the model (``network.late``)."""
    fields = {f.name for f in dataclasses.fields(ClientResult)}
    shapes = {k: tuple(v.shape) for k, v in params.items()}
    if not isinstance(plain, list) or not all(
            isinstance(r, dict) and set(r) == fields and isinstance(r["delta"], dict)
            and {k: tuple(getattr(v, "shape", ())) for k, v in r["delta"].items()} == shapes
            and isinstance(r["client"], int) and 0 <= r["client"] < exp.env.num_clients
            for r in plain):
        raise RunFolderError("--resume: the checkpoint's late uploads do not fit the model of "
                             "config.yaml; the folder is damaged: start the run again with "
                             "another --out")
    return tuple(ClientResult(**{**r, "delta": {k: v.to(exp.device) for k, v in r["delta"].items()}})
                 for r in plain)


def _to_device(value: Any, device: torch.device) -> Any:
    """Tensors of a (nested) checkpoint value moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


def evaluated_rounds(cfg: RunConfig, upto: int) -> list[int]:
    """Rounds ≤ ``upto`` that have a metrics row: 0, every ``eval_every``-th, and the last."""
    return [0] + [t for t in range(1, upto + 1) if t % cfg.eval_every == 0 or t == cfg.rounds]


def _plugins(exp: Experiment) -> str:
    """`` (plug-ins in use: ...)`` naming the run's pieces from outside wirelessfl, or ''."""
    algo = exp.algorithm
    pieces = (("algorithm", type(algo)), ("local rule", type(getattr(algo, "update", None))),
              ("model", type(exp.model)))
    own = [f"{what} {cls.__name__} ({cls.__module__})" for what, cls in pieces
           if cls is not type(None) and not cls.__module__.startswith("wirelessfl.")]
    return f" (plug-ins in use, which may cause it too: {', '.join(own)})" if own else ""


def check_finite(params: Params, where: str) -> None:
    """Raise :class:`~wirelessfl.errors.TrainingDiverged` if any parameter is NaN or infinite."""
    bad = [k for k, v in params.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise TrainingDiverged(f"{where}: the model became NaN/Inf ({bad[0]}); the loss diverged "
                               "- lower the learning rate(s) and start again with another --out")


def _evaluate_row(exp: Experiment, state: ServerState, uplink: float,
                  sim_time: float | None) -> dict[str, Any]:
    acc, loss = evaluate(exp.model, state.params, exp.splits.test, device=exp.device,
                         buffers=state.buffers)
    if not (math.isfinite(acc) and math.isfinite(loss)):
        raise TrainingDiverged(f"{exp.config.name}, round {state.round}: the test loss became "
                               f"{loss} (the model's outputs overflow); lower the learning "
                               "rate(s) and start again with another --out")
    row = {"round": state.round, "sim_time_s": sim_time, "uplink_params_per_client": uplink,
           "uplink_mb_per_client": params_to_mb(uplink), "test_accuracy": acc,
           "test_loss": loss}
    if sim_time is None:
        row.pop("sim_time_s")
    return row


def summarize(cfg: RunConfig, rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    """Final/best accuracy and, with a target, the round, uplink and time that reach it."""
    last = rows[-1]
    summary: dict[str, Any] = {
        "name": cfg.name, "rounds": last["round"], "final_accuracy": last["test_accuracy"],
        "best_accuracy": max(r["test_accuracy"] for r in rows),
        "final_loss": last["test_loss"], "uplink_mb_per_client": last["uplink_mb_per_client"],
        "sim_time_s": last.get("sim_time_s"), "wall_s": wall,
    }
    if last.get("empty_rounds"):  # rounds whose link delivered no upload (the model stayed)
        summary["empty_rounds"] = int(last["empty_rounds"])
    if "uploads" in last:  # a deadline: what it did to the uploads, over the whole run
        summary.update(uploads=int(last["uploads"]),
                       dropped_uploads=int(last.get("dropped_clients", 0)),
                       late_uploads=int(last.get("late_clients", 0)))
        if last.get("outage_clients"):  # nr: uploads lost on the radio (among the dropped)
            summary["outage_uploads"] = int(last["outage_clients"])
    if last.get("epsilon") is not None:  # DP: the privacy spent, at the run's delta
        summary["epsilon"] = float(last["epsilon"])
        summary["dp_delta"] = float(getattr(cfg.algorithm.hparams, "dp_delta", float("nan")))
    if cfg.target_accuracy is not None:
        hit = first_reaching(rows, cfg.target_accuracy)
        summary["target_accuracy"] = cfg.target_accuracy
        summary["target_reached"] = hit is not None
        summary["round_to_target"] = hit["round"] if hit else None
        summary["uplink_mb_to_target"] = hit["uplink_mb_per_client"] if hit else None
        summary["sim_time_s_to_target"] = hit.get("sim_time_s") if hit else None
        if hit and "uplink_mb_paper_per_client" in hit:
            summary["uplink_mb_paper_to_target"] = hit["uplink_mb_paper_per_client"]
    return summary


class RoundsJob(Job):
    """A round-based run (:class:`Experiment`) as a :class:`~wirelessfl.run.shell.Job`."""

    plottable = True

    def __init__(self, exp: Experiment) -> None:
        cfg = exp.config
        self.exp, self.cfg = exp, cfg
        self.resolved, self.seed, self.device = to_dict(cfg), cfg.seed, str(exp.device)
        self.name, self.progress_total = cfg.name, cfg.rounds
        self.state = exp.initial_state()
        self.uplink, self.sim_time = 0.0, None
        self.totals: dict[str, float] = {}  # RoundReport.cumulative, summed over rounds
        self.costs: list[list[float]] = []  # RoundCost of the rounds since the last row
        self._active_tests: dict[int, Any] = {}  # session -> its active labels' test samples
        self.starts = None
        if cfg.population.dynamic:
            from wirelessfl.algorithms.dynamic.sessions import SessionStarts

            self.starts = SessionStarts(cfg.initial_model, exp.algorithm, cfg.algorithm,
                                        self.state)

    @override
    def key_of(self, config: dict[str, Any]) -> Any:
        return key_view(resolve(config))

    @override
    def open_folder(self, folder: Path) -> None:
        """A stateful algorithm keeps its rows in ``folder/client-store`` where ``state_store`` says."""
        alg = self.exp.algorithm
        alg.run_folder = Path(folder)
        if backend_for(self.cfg.state_store, alg.store_bytes()) == "disk":
            alg.store_folder = alg.run_folder / "client-store"

    @override
    def restore(self, ckpt: dict[str, Any]) -> None:
        self.state = _restore(ckpt, self.exp)
        self.uplink, self.sim_time = ckpt["uplink_params_per_client"], ckpt["sim_time_s"]
        self.totals = dict(ckpt.get("totals", {}))
        costs = ckpt.get("round_costs", [])
        if not isinstance(costs, list) or not all(isinstance(c, list) and len(c) in (4, 6, 9)
                                                  for c in costs):
            raise RunFolderError("--resume: the checkpoint's round costs are damaged; start the "
                                 "run again with another --out")
        self.costs = costs
        if self.starts is not None:
            self.starts.load_state_dict(ckpt.get("sessions"))

    @override
    def progress(self) -> float:
        return self.state.round

    @override
    def kept_rows(self, record: RunRecord,
                  rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        t = self.state.round
        rows = [r for r in rows if r["round"] <= t]
        expected = evaluated_rounds(self.cfg, t)
        if t and t not in expected and self.exp.algorithm.spent(t, self.state):  # stopped by its budget
            expected = [*expected, t]
        record.check_rows(rows, expected[:len(rows)] if t == 0 else expected,
                          key=lambda r: r["round"])
        return rows

    @override
    def advance(self, out: Output) -> None:
        try:
            with deterministic_mode(self.cfg.deterministic):
                self._rounds(out)
        finally:  # worker processes of engine: distributed stop with the run
            close = getattr(self.exp.env.executor, "close", None)
            if close is not None:
                close()

    def _rounds(self, out: Output) -> None:
        """The round loop: train, time, evaluate, checkpoint, until the last round or the target."""
        exp, cfg = self.exp, self.cfg
        if self.state.round == 0 and not out.record.rows():
            row0 = _evaluate_row(exp, self.state, 0.0, None if self.sim_time is None else 0.0)
            out.row({**row0, **self._session_metrics(0)} if cfg.population.dynamic else row0)
        # a resumed run that had already stopped at its target does not train on
        done = cfg.stop_at_target and first_reaching(out.record.rows(),
                                                     cfg.target_accuracy) is not None
        population = exp.env.population
        while self.state.round < cfg.rounds and not done and not out.stopped:
            t0 = self.state.round
            if exp.algorithm.spent(t0, self.state):  # a privacy budget: the next round would exceed it
                break
            if t0 > 0 and population.session(t0) != population.session(t0 - 1):
                self.state = self.starts(self.state, t0, population.session(t0))
            try:
                self.state, report = exp.algorithm.apply(self.state)
            except TrainingDiverged as exc:
                raise TrainingDiverged(f"{cfg.name}, round {t0 + 1}: {exc}{_plugins(exp)}") from None
            t = self.state.round
            try:
                check_finite(self.state.params, f"{cfg.name}, round {t}")
            except TrainingDiverged as exc:
                raise TrainingDiverged(f"{exc}{_plugins(exp)}") from None
            self.uplink += report.uplink_params
            cost = exp.link.cost(report) if exp.link is not None else RoundCost.from_report(report)
            self.costs.append(cost.as_list())  # what re-timing the run needs
            latency = report.latency_s
            if latency is None and exp.link is not None:  # (a hierarchical round: per cell)
                latency = exp.link.timed(cost, exp.seeds.generator("network", t))
            if latency is not None:
                self.sim_time = (self.sim_time or 0.0) + latency
            for k, v in report.cumulative.items():
                self.totals[k] = self.totals.get(k, 0.0) + v
            if t % cfg.eval_every == 0 or t == cfg.rounds or exp.algorithm.spent(t, self.state):
                row = _evaluate_row(exp, self.state, self.uplink, self.sim_time)
                if cfg.population.dynamic:  # the session the round's clients trained in
                    row.update(self._session_metrics(t - 1))
                    weights = self.starts.take_weights()  # eq. (5)'s α of this session
                    if weights is not None:
                        row["init_weights"] = weights
                empty = int(self.totals.get("empty_rounds", 0))
                out.row({**row, **self.totals, "train_loss": report.train_loss,
                         **report.logged(), "round_costs": self.costs},
                        progress=t, note=f"acc={row['test_accuracy']:.3f}"
                        + (f", {empty} of {t} rounds aggregated nothing" if empty else ""))
                self.costs = []
                done = cfg.stop_at_target and row["test_accuracy"] >= cfg.target_accuracy
            else:
                out.tick(t)
            if t % cfg.checkpoint_every == 0 or t == cfg.rounds or done or exp.algorithm.spent(t, self.state):
                out.checkpoint({**_checkpoint(self.state, self.uplink, self.sim_time, self.totals),
                                "round_costs": self.costs,
                                **({"sessions": self.starts.state_dict()} if self.starts else {})})
                if isinstance(self.state.client_states, ClientStore):  # older journals go
                    self.state.client_states.committed()

    def _session_metrics(self, t: int) -> dict[str, Any]:
        """The session of round ``t`` and the accuracy on its active label set (§4.3).

        The active label set is every label held by a client present in round ``t``; the
        metric is the test accuracy on the test samples of those labels.
        """
        exp = self.exp
        env = exp.env
        s = env.population.session(t)
        if s not in self._active_tests:
            clients = env.population.active(t)
            train_y = env.train.y.cpu()
            labels = torch.unique(torch.cat([train_y[torch.as_tensor(env.client_indices[c])]
                                             for c in clients]))
            test = exp.splits.test
            keep = torch.isin(test.y, labels.to(test.y.device))
            self._active_tests = {s: type(test)(test.x[keep], test.y[keep], test.num_classes)}
        test = self._active_tests[s]
        acc = (evaluate(exp.model, self.state.params, test, device=exp.device,
                        buffers=self.state.buffers)[0] if len(test) else float("nan"))
        return {"session": s, "active_accuracy": acc}

    @override
    def summary(self, rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
        return summarize(self.cfg, rows, wall)

    @override
    def describe(self, summary: dict[str, Any], out: Any, plot: Any = None) -> str:
        line = (f"{self.name}: {summary['rounds']} rounds, test accuracy "
                f"{summary['final_accuracy']:.4f} (best {summary['best_accuracy']:.4f}), "
                f"uplink {summary['uplink_mb_per_client']:.2f} MB/client")
        if summary.get("sim_time_s") is not None:
            line += f", simulated {summary['sim_time_s']:.1f} s"
        if summary.get("uploads"):
            late = summary.get("late_uploads", 0)
            line += (f", {summary['dropped_uploads']} of {summary['uploads']} uploads dropped by "
                     f"the link" + (f" and {late} late (aggregated a round later)" if late else ""))
        if summary.get("outage_uploads"):
            line += f" ({summary['outage_uploads']} in radio outage)"
        if summary.get("epsilon") is not None:
            line += f", privacy spent ε = {summary['epsilon']:.3g} at δ = {summary['dp_delta']:g}"
        if summary.get("empty_rounds"):
            line += (f", {summary['empty_rounds']} of {summary['rounds']} rounds aggregated "
                     "nothing (no upload reached the server)")
        return f"{line}, {summary['wall_s']:.1f} s wall; run folder {out}" + (
            f"; plot {plot}" if plot else "")


@contextlib.contextmanager
def deterministic_mode(on: bool):
    """PyTorch's deterministic algorithms for the duration of a run (``deterministic: true``).

    Sets ``torch.use_deterministic_algorithms``, cuDNN's deterministic flag (benchmark off)
    and, on CUDA, ``CUBLAS_WORKSPACE_CONFIG``; an op without a deterministic kernel stops
    the run with a ``ValueError`` naming it. The previous settings come back afterwards.
    """
    if not on:
        yield
        return
    import os

    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    except RuntimeError as exc:
        if "deterministic" not in str(exc):
            raise
        raise ValueError(f"deterministic: {str(exc).splitlines()[0][:200]} (run without "
                         "deterministic, or on another device)") from None
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1:3]
        if before[3] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
