"""Run configuration: typed frozen dataclasses, YAML presets and ``--set`` overrides.

A YAML file (or a preset name, looked up under ``experiments/``) gives a nested mapping;
``--set section.key=value`` edits it (the value parsed as YAML); :func:`resolve` turns it
into a :class:`RunConfig`, checking every key and type and saying what is wrong and what is
allowed. The ``algorithm`` section is resolved against the HParams dataclass of the
algorithm it names, looked up lazily in :mod:`wirelessfl.registry`.

Examples
--------
>>> cfg = resolve({"rounds": 3, "local": {"lr": 0.05}})
>>> cfg.rounds, cfg.local.lr, cfg.algorithm.name
(3, 0.05, 'fedavg')
>>> resolve({"local": {"lrr": 1}})
Traceback (most recent call last):
...
wirelessfl.errors.ConfigError: unknown config key 'local.lrr'; valid keys under 'local': batch_order, batch_size, betas, drop_last, epochs, eps, lr, momentum, optimizer, precision, schedule, schedule_floor, schedule_power, schedule_rounds, steps, weight_decay
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wirelessfl.algorithms.dynamic.initial_model import InitialModelConfig
from wirelessfl.data import datasets as _datasets
from wirelessfl.data.arrays import PLACEMENTS
from wirelessfl.data.datasets import DATASETS, NORMALIZATIONS
from wirelessfl.data.text import TEXT_DATASETS
from wirelessfl.engine.batched import COMPILE_MODES, LOW_RANK_MODES
from wirelessfl.engine.client import LocalHParams
from wirelessfl.engine.replay import REPLAY_MODES
from wirelessfl.errors import ConfigError, check_config_size, parse_yaml, plugin_hint, short
from wirelessfl.net.links import NetworkConfig
from wirelessfl.run.configtypes import (
    AlgorithmConfig,
    build_algorithm,
    build_dataclass,
    check_name,
    checked,
    key_view,
    plain,
)
from wirelessfl.server.population import PopulationConfig

PARTITIONS = ("iid", "shards", "cell_iid_shards", "dirichlet_over_clients",
              "dirichlet_per_client", "two_group", "two_shard", "half", "partial_overlap",
              "distinct", "natural")


__all__ = ["ConfigError", "DataConfig", "ModelConfig", "AlgorithmConfig", "RunConfig", "resolve",
           "to_dict", "apply_overrides", "load_raw", "list_presets", "check_name", "checked",
           "key_view"]

@dataclass(frozen=True)
class DataConfig:
    """Dataset and partition.

    Attributes
    ----------
    dataset : str
        Registry name (``wirelessfl.data.DATASETS``).
    data_dir : str or None
        Folder with the dataset files.
    normalization : str
        ``auto``, ``none`` or a named normalisation.
    partition : str
        One of :data:`PARTITIONS`; ``natural`` keeps a dataset's own clients (synthetic).
    num_clients : int
        Clients U.
    samples_per_client : int or None
        Per-client sample count (iid, dirichlet_per_client, synthetic).
    shards_per_client : int
        Shards per client (shards, cell_iid_shards).
    alpha : float
        Dirichlet concentration.
    min_size : int
        Minimum client size (dirichlet_over_clients).
    reuse : bool
        Allow FedAST's sample reuse (dirichlet_per_client).
    overlap : float
        Label overlap of the two groups (two_group).
    share_overlap : bool
        two_group: a label both groups hold gives its samples to both (the reference code,
        ``docs/papers/dynamic_clients.md`` §7 item 21; default) or splits them half and half (False).
    unseen_labels : int
        two_group: labels held out of A and B and brought by a third group C with B's
        labels (Table 12; 0 = none).
    synthetic_alpha, synthetic_beta : float
        Synthetic(α, β) heterogeneity.
    synthetic_dim : int
        Synthetic: features a sample has (60 [default], FedProx's; 784 gives Fashion-MNIST's
        input size, for populations beyond its 60,000 images).
    tokenizer : str or None
        Text datasets: a local tokenizer folder (relative names from ``data_dir``).
    max_length : int
        Text datasets: tokens per sample (truncated, right-padded).
    placement : str
        Where the training and test sets live when runs compute on a GPU
        (:meth:`wirelessfl.data.ArrayDataset.placed`): ``device`` (copied once), ``host``
        (pinned host memory; each batch is gathered into a pinned buffer and sent
        asynchronously) or ``auto`` (default: on the device when the training set takes at
        most half of the device's free memory, else pinned on the host). Same numbers
        either way; ignored on the CPU.
    """

    dataset: str = "synthetic"
    data_dir: str | None = None
    normalization: str = "auto"
    partition: str = "natural"
    num_clients: int = 30
    samples_per_client: int | None = None
    shards_per_client: int = 2
    alpha: float = 0.5
    min_size: int = 10
    reuse: bool = False
    overlap: float = 0.0
    share_overlap: bool = True
    unseen_labels: int = 0
    synthetic_alpha: float = 1.0
    synthetic_beta: float = 1.0
    synthetic_dim: int = 60
    tokenizer: str | None = None
    max_length: int = 128
    placement: str = "auto"

    def __post_init__(self) -> None:
        known = (*DATASETS, *TEXT_DATASETS, *_datasets.USER_DATASETS)  # read now: registered
        if not isinstance(self.dataset, str) or self.dataset not in known:
            raise ConfigError(f"data.dataset: unknown dataset {short(self.dataset)}"
                              f"{plugin_hint('dataset')}; choose one of {', '.join(known)}")
        if self.tokenizer is not None and self.dataset not in TEXT_DATASETS:
            raise ConfigError(f"data.tokenizer is for text datasets ({', '.join(TEXT_DATASETS)}); "
                              f"{short(self.dataset)} does not use one: remove it")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"data.placement must be one of {', '.join(PLACEMENTS)}, "
                              f"got {short(self.placement)}")
        if self.normalization not in ("auto", "none", *NORMALIZATIONS):
            raise ConfigError(f"data.normalization must be auto, none or one of "
                              f"{', '.join(NORMALIZATIONS)}, got {short(self.normalization)}")
        if self.partition not in PARTITIONS:
            raise ConfigError(f"data.partition must be one of {', '.join(PARTITIONS)}, "
                              f"got {self.partition!r}")
        checked("data.", num_clients=(self.num_clients, 1, 10**6),
                samples_per_client=(self.samples_per_client, 1, 10**7),
                shards_per_client=(self.shards_per_client, 1, 10**6),
                alpha=(self.alpha, 0, 1e6, "open"), min_size=(self.min_size, 0, 10**7),
                overlap=(self.overlap, 0, 1), unseen_labels=(self.unseen_labels, 0, 10**6),
                synthetic_alpha=(self.synthetic_alpha, 0, 1e3),
                synthetic_beta=(self.synthetic_beta, 0, 1e3),
                synthetic_dim=(self.synthetic_dim, 1, 10**5),
                max_length=(self.max_length, 2, 8192))


@dataclass(frozen=True)
class ModelConfig:
    """Model name and constructor options (e.g. ``padded``, ``hidden``, ``dropout``)."""

    name: str = "fcnn"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunConfig:
    """A whole run.

    Attributes
    ----------
    name : str
        Run name (default run folder ``runs/<name>``).
    description : str
        One line shown by ``wirelessfl list``.
    seed : int
        The run's seed; all streams derive from it.
    rounds : int
        Global rounds T.
    eval_every : int
        Evaluate every this many rounds (and after the last).
    target_accuracy : float or None
        Accuracy in [0, 1] whose first crossing the summary reports.
    stop_at_target : bool
        End the run at the first evaluation reaching ``target_accuracy``.
    checkpoint_every : int
        Write ``checkpoint.pt`` after every this many rounds (and the last); a resumed run
        continues from the last one (rows after it are produced again, with the same
        numbers). Raise it for runs with a large client store.
    device : str
        ``cpu``, ``cuda`` or ``auto``.
    engine : str
        Client executor: ``loop``, ``batched``, ``auto`` or ``distributed``
        (:func:`wirelessfl.engine.executors.make_executor`).
    workers : int
        ``engine: distributed``: processes a round's clients are split over (2 to 256;
        :mod:`wirelessfl.engine.distributed`).
    deterministic : bool
        Run with PyTorch's deterministic algorithms (:func:`wirelessfl.run.rounds.deterministic_mode`;
        CLI ``--deterministic``).
    threads : int or "auto"
        CPU threads PyTorch computes with; ``auto`` (default) counts the cores free when the
        run starts and records the count, which a resumed run reuses
        (:mod:`wirelessfl.run.threads`).
    state_store : str
        Where a stateful algorithm keeps its clients' rows (SCAFFOLD's c_i, FedDyn's h_i,
        MOON's models, FAdamGC's y_i and v_i): ``memory``, ``disk`` (files in the run
        folder's ``client-store/``, read and written a round's rows at a time, resumed
        exactly: :mod:`wirelessfl.engine.store_tables`) or ``auto`` (default: disk when the
        population's rows would take more than a quarter of the available memory). Same
        numbers either way.
    max_batch : int or None
        Batched engine: at most this many clients stacked at once (a round's group is split
        into chunks, e.g. to fit a GPU's memory); None = all of them. Same numbers either way.
    compile : str
        Batched engine: ``off`` (default), or the ``torch.compile`` mode of each stacked
        step (``default``, ``reduce-overhead``: CUDA graphs on a GPU, ``max-autotune``);
        same numbers to float tolerance (:class:`~wirelessfl.engine.batched.BatchedExecutor`).
    replay : str
        Batched engine: ``auto`` (default) records a plain SGD step that recurs (any rule whose
        step is plain SGD, with its drift) and replays it as one graph of tensor operations,
        the same numbers bit for bit; ``on`` records at once, for any rule and model; ``off``
        never (:mod:`wirelessfl.engine.replay`). YAML's booleans count as on/off (``--set
        replay=off`` reads ``off`` as false).
    low_rank : str
        Batched engine: ``auto`` (default) keeps, on the CPU, a linear weight that every
        client starts from one tensor as that start plus the low-rank factors of its plain
        SGD steps when they are few and small beside the layer (many clients, few
        small-batch steps: :mod:`wirelessfl.models.lowrank`); ``on`` does so on a GPU too
        (not yet measured there); ``off`` stacks every client's weight. The same numbers to
        float rounding. YAML's booleans count as on/off.
    network : NetworkConfig
        How rounds are timed when the algorithm does not time itself (:mod:`wirelessfl.net.links`).
    population : PopulationConfig
        Which clients are present in each round: static, or sessions of arriving and
        departing clients (:mod:`wirelessfl.server.population`).
    initial_model : InitialModelConfig
        The model each new session starts from (:mod:`wirelessfl.algorithms.dynamic.sessions`).
    data, model, local, algorithm
        The sections.
    """

    name: str = "run"
    description: str = ""
    seed: int = 0
    rounds: int = 10
    eval_every: int = 1
    target_accuracy: float | None = None
    stop_at_target: bool = False
    checkpoint_every: int = 1
    device: str = "auto"
    engine: str = "auto"
    max_batch: int | None = None
    state_store: str = "auto"
    compile: str | bool = "off"
    replay: str | bool = "auto"
    low_rank: str | bool = "auto"
    deterministic: bool = False
    threads: int | str = "auto"
    workers: int = 2
    network: NetworkConfig = field(default_factory=NetworkConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    initial_model: InitialModelConfig = field(default_factory=InitialModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    local: LocalHParams = field(default_factory=LocalHParams)
    algorithm: AlgorithmConfig = field(
        default_factory=lambda: build_algorithm({"name": "fedavg"}, "algorithm"))

    def __post_init__(self) -> None:
        check_name(self.name)
        checked("", seed=(self.seed, 0, 2**63 - 1), rounds=(self.rounds, 1, 10**7),
                eval_every=(self.eval_every, 1, 10**7),
                checkpoint_every=(self.checkpoint_every, 1, 10**7),
                max_batch=(self.max_batch, 1, 10**6), workers=(self.workers, 2, 256))
        if self.state_store not in ("auto", "memory", "disk"):
            raise ConfigError(f"state_store must be auto, memory or disk, got {short(self.state_store)}")
        if self.workers != 2 and self.engine != "distributed":
            raise ConfigError(f"workers ({self.workers}) is the process count of engine "
                              "distributed: add --engine distributed, or remove --workers")
        if self.threads != "auto" and (isinstance(self.threads, bool)
                                       or not isinstance(self.threads, int)
                                       or not 1 <= self.threads <= 4096):
            raise ConfigError(f"threads must be auto or an integer in [1, 4096], got "
                              f"{short(self.threads)}")
        if self.compile is False:  # YAML reads off as false
            object.__setattr__(self, "compile", "off")
        if self.compile is True:
            raise ConfigError("compile: true names no mode; write default, reduce-overhead or "
                              "max-autotune (or off)")
        if self.compile not in COMPILE_MODES:
            raise ConfigError(f"compile must be one of {', '.join(COMPILE_MODES)}, got "
                              f"{short(self.compile)}")
        if isinstance(self.replay, bool):  # YAML reads on/off as true/false
            object.__setattr__(self, "replay", "on" if self.replay else "off")
        if self.replay not in REPLAY_MODES:
            raise ConfigError(f"replay must be one of {', '.join(REPLAY_MODES)}, got "
                              f"{short(self.replay)}")
        if isinstance(self.low_rank, bool):  # YAML reads on/off as true/false
            object.__setattr__(self, "low_rank", "on" if self.low_rank else "off")
        if self.low_rank not in LOW_RANK_MODES:
            raise ConfigError(f"low_rank must be one of {', '.join(LOW_RANK_MODES)}, got "
                              f"{short(self.low_rank)}")
        inert = [f"{k}: {v}" for k, v, off in (("replay", self.replay, "on"),
                                                ("low_rank", self.low_rank, "on"),
                                                ("max_batch", self.max_batch, None))
                 if self.engine == "loop" and (v == off if off else v is not None)]
        if inert:
            raise ConfigError(f"{inert[0]} sets the batched engine's stacked steps; the loop "
                              "engine trains one client at a time and would ignore it: set "
                              "engine: batched (or auto), or remove it")
        if self.compile != "off" and self.engine == "loop":
            raise ConfigError(f"compile: {self.compile} compiles the batched engine's steps; the "
                              "loop engine does not compile: set engine: batched (or auto) or "
                              "compile: off")
        if self.device not in ("cpu", "cuda", "auto"):
            raise ConfigError(f"device must be cpu, cuda or auto, got {self.device!r}")
        if self.engine not in ("loop", "batched", "auto", "distributed"):
            raise ConfigError(f"engine must be loop, batched, auto or distributed, got "
                              f"{short(self.engine)}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ConfigError(f"target_accuracy must be in (0, 1], got {self.target_accuracy}")
        if self.stop_at_target and self.target_accuracy is None:
            raise ConfigError("stop_at_target needs target_accuracy")
        if self.initial_model.rule != "none" and not self.population.dynamic:
            raise ConfigError("initial_model.rule needs sessions: set population.kind to "
                              "alternating or events")
        groups = 3 if self.data.unseen_labels else 2
        if (self.data.partition == "two_group" and self.population.kind == "alternating"
                and self.population.groups != groups):
            raise ConfigError(f"data.partition two_group makes {groups} client groups but "
                              f"population.groups is {self.population.groups}; set "
                              f"population.groups={groups} so that each session is one group")
        if self.data.unseen_labels and self.data.partition != "two_group":
            raise ConfigError("data.unseen_labels is for data.partition two_group")
        pop = self.population
        if pop.kind == "alternating" and pop.rounds_per_session >= self.rounds:
            raise ConfigError(f"population.rounds_per_session = {pop.rounds_per_session} is not "
                              f"shorter than the run's {self.rounds} rounds: no session would "
                              "ever end; lower it or raise rounds")
        late = [e.get("round") for e in pop.events if isinstance(e, dict)
                and isinstance(e.get("round"), int) and e["round"] >= self.rounds]
        if late:
            raise ConfigError(f"population.events: an event at round {late[0]} comes after the "
                              f"run's {self.rounds} rounds and would never happen; remove it or "
                              "raise rounds")
        if self.initial_model.rule != "none" and pop.kind == "alternating":
            sessions = -(-self.rounds // pop.rounds_per_session)
            if self.initial_model.pilot_sessions >= sessions:
                raise ConfigError(f"initial_model.pilot_sessions = "
                                  f"{self.initial_model.pilot_sessions} covers all {sessions} "
                                  "sessions of the run, so the rule would never act; lower it or "
                                  "raise rounds")


# --------------------------------------------------------------------------- typed building


def resolve(raw: dict[str, Any]) -> RunConfig:
    """A :class:`RunConfig` from a nested mapping (YAML), every key and type checked."""
    if not isinstance(raw or {}, dict):
        raise ConfigError(f"a config must be a mapping, got {type(raw).__name__}")
    check_config_size(raw)
    raw = copy.deepcopy(raw or {})
    algorithm = raw.get("algorithm") or {}
    if isinstance(algorithm, dict):  # FedAvg unless named
        raw["algorithm"] = {"name": "fedavg", **algorithm}
    return build_dataclass(RunConfig, raw, "")


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain nested mapping of a config (round-trips through :func:`resolve`)."""
    return plain(cfg)


#: Parsed scalar override values by their text: a paper-scale figure set applies tens of
#: thousands of overrides, most of them the same few texts (``seed=3``, ``data.alpha=0.1``).
_SCALARS: dict[str, Any] = {}


def _override_value(text: str, path: str) -> Any:
    """The YAML value of one ``--set`` text (a scalar's parse is remembered; it is immutable)."""
    if text in _SCALARS:
        return _SCALARS[text]
    value = parse_yaml(text, f"--set {short(path)}")
    check_config_size(value, f"--set {path}")
    if len(text) <= 64 and len(_SCALARS) < 65536 and (
            value is None or type(value) in (bool, int, float, str)):
        _SCALARS[text] = value
    return value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` strings (values parsed as YAML) to a nested mapping."""
    raw = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {short(item)}")
        path, text = item.split("=", 1)
        keys = path.strip().split(".")
        if not all(keys):
            raise ConfigError(f"--set {short(path)}: the key must be names joined by dots, e.g. "
                              "local.lr=0.05")
        value = _override_value(text, path)
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {path}: {k!r} is not a section")
        node[keys[-1]] = value
    return raw


# --------------------------------------------------------------------------- presets


def presets_dir() -> Path:
    """The project's own ``experiments/`` folder (the shipped presets and figures)."""
    return Path(__file__).resolve().parents[2] / "experiments"


def experiment_dirs() -> list[Path]:
    """The folders presets and figures are read from: the user's, then the project's.

    ``WIRELESSFL_EXPERIMENTS`` names folders of one's own (several separated by ``os.pathsep``,
    ``:`` on Linux); they add to the shipped ``experiments/``, they do not hide it. A name
    found in two of them (a preset, or a paper's ``figures.yaml``) is refused as a clash
    (:func:`list_presets`, :func:`figures_file`).
    """
    env = os.environ.get("WIRELESSFL_EXPERIMENTS", "")
    mine = [Path(p) for p in env.split(os.pathsep) if p]
    return list(dict.fromkeys([*mine, presets_dir()]))


def list_presets() -> dict[str, Path]:
    """Preset name → YAML file, for every ``*.yaml`` in :func:`experiment_dirs`.

    ``figures.yaml`` files describe figure regeneration (:mod:`wirelessfl.report.figures`), not
    runs. A name two files share is a ConfigError naming both.
    """
    out: dict[str, Path] = {}
    for root in experiment_dirs():
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*.yaml")):
            if p.name == "figures.yaml":
                continue
            if p.stem in out and out[p.stem].resolve() != p.resolve():
                raise ConfigError(f"preset {p.stem!r} is defined twice: {out[p.stem]} and {p}; "
                                  "rename one (WIRELESSFL_EXPERIMENTS adds to the shipped "
                                  "presets, it does not replace them)")
            out.setdefault(p.stem, p)
    return out


def figures_file(paper: str) -> Path:
    """``<folder>/<paper>/figures.yaml`` of :func:`experiment_dirs` (ConfigError if none or two)."""
    found = [d / paper / "figures.yaml" for d in experiment_dirs()
             if (d / paper / "figures.yaml").is_file()]
    if len({p.resolve() for p in found}) > 1:
        raise ConfigError(f"paper {paper!r} has figures in two folders: {found[0]} and "
                          f"{found[1]}; rename one (WIRELESSFL_EXPERIMENTS adds to the shipped "
                          "experiments, it does not replace them)")
    if not found:
        known = sorted({p.parent.name for d in experiment_dirs() if d.is_dir()
                        for p in d.glob("*/figures.yaml")})
        raise ConfigError(f"no figures for paper {paper!r}; papers with figures: "
                          f"{', '.join(known)}")
    return found[0]


def load_raw(preset_or_path: str) -> dict[str, Any]:
    """The nested mapping of a preset name or a YAML file path."""
    if not isinstance(preset_or_path, str) or not preset_or_path:
        raise ConfigError("name a preset or a YAML file (`wirelessfl list` shows the presets)")
    path = Path(preset_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists() and not path.is_file():
        raise ConfigError(f"{path} is not a file")
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        presets = list_presets()
        if preset_or_path not in presets:
            raise ConfigError(f"unknown preset {short(preset_or_path)} (and no such YAML file); "
                              f"`wirelessfl list` shows the presets: {', '.join(presets)}")
        path = presets[preset_or_path]
    try:
        if path.stat().st_size > 4 * 2**20:
            raise ConfigError(f"{path}: over 4 MiB, too large for a config file")
        raw = parse_yaml(path.read_text(), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({type(exc).__name__})") from exc
    if raw is None:
        raise ConfigError(f"{path} is empty; a config names at least its data, model and rounds "
                          "(start from a preset: `wirelessfl list`)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping")
    check_config_size(raw, str(path))
    return raw


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    """One registered algorithm as ``wirelessfl list --algorithms`` shows it.

    Attributes
    ----------
    name, kind : str
        The registry name and ``rounds`` or ``simulation``.
    summary : str
        The first line of its hyperparameter class's docstring.
    defaults : dict
        Each hyperparameter (a config's ``algorithm``/``method`` key) and its default.
    presets : tuple of str
        The presets that run it.
    units : dict
        The unit of each hyperparameter that declares one (field metadata ``unit``); a
        name's suffix gives the others' (``_s`` seconds, ``_db`` dB, ``_mhz``, ``_ghz``).
    choices : dict
        The names a setting takes, for those that take one of a few (the class's
        ``choices``; a registered robust rule is among ``robust``'s).
    """

    name: str
    kind: str
    summary: str
    defaults: dict
    presets: tuple[str, ...]
    units: dict = dataclasses.field(default_factory=dict)
    choices: dict = dataclasses.field(default_factory=dict)


def algorithm_table() -> list[AlgorithmEntry]:
    """Every registered algorithm with its hyperparameters' defaults and its presets."""
    from wirelessfl import registry

    used: dict[str, list[str]] = {}
    for preset, path in list_presets().items():
        try:
            raw = load_raw(str(path))
        except ValueError:
            continue
        section = raw.get("algorithm") or raw.get("method") or {}
        used.setdefault(section.get("name", "fedavg") if isinstance(section, dict) else "fedavg",
                        []).append(preset)
    out = []
    for name in registry.ENTRIES:
        hp, _ = registry.get(name)
        defaults, units = {}, {}
        for f in dataclasses.fields(hp):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
            if "unit" in f.metadata:
                units[f.name] = f.metadata["unit"]
        doc = (hp.__doc__ or "").strip().splitlines()
        choices = {k: tuple(v() if callable(v) else v)
                   for k, v in getattr(hp, "choices", {}).items() if k in defaults}
        out.append(AlgorithmEntry(name, registry.ENTRIES[name][0], doc[0].replace("``", "") if doc else "",
                                  defaults, tuple(used.get(name, ())), units, choices))
    return out
