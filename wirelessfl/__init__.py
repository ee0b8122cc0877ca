"""wirelessfl: federated learning over wireless networks.

The FL side of the toolkit, in wings from the bottom up: ``data`` and ``models``; the client
``engine`` (local training, loop and batched executors); the ``server`` side (aggregation,
server optimisers, sampling, populations) and the network (``net``: links, latency,
compression); the ``algorithms``, one folder per paper; ``run`` (configs, the run kinds and
their loop, run records); and ``report`` (figures, tables, sweeps, plots). The physical
layer lives in :mod:`channels` and the optimisation in :mod:`solvers`.

The public API is importable from here (each name loads its wing on first use):

>>> import wirelessfl
>>> job = wirelessfl.open_run({"rounds": 1, "data": {"num_clients": 4}})  # doctest: +SKIP
>>> summary = wirelessfl.run_job(job, "runs/demo")  # doctest: +SKIP

- running: :func:`load_config`, :func:`apply_overrides`, :func:`resolve_config`,
  :func:`open_run`, :func:`run_job`, :class:`RunConfig`, :class:`ConfigError`;
- records: :class:`RunRecord` (a run folder's config, rows, summary);
- reports: :func:`regenerate`, :func:`sweep`, :func:`plot_runs`;
- your own pieces: :func:`register_algorithm`, :func:`register_local_rule`,
  :func:`register_model`, :func:`register_dataset`;
- building blocks: :func:`algorithm_names`,
  :func:`get_algorithm`, :class:`FederatedAlgorithm`, :class:`ServerState`,
  :class:`RoundReport`, :class:`Environment`, :class:`LocalSGD`, :class:`LocalHParams`,
  :class:`ClientTask`, :class:`ClientResult`, :func:`build_model`, :func:`load_dataset`.
"""

from channels._lazy import lazy_exports
from wirelessfl.openmp import choose_wait_policy

choose_wait_policy()  # before torch loads: OpenMP reads its wait policy once

__version__ = "0.1.0"

_EXPORTS: dict[str, str | tuple[str, str]] = {
    "load_config": ("wirelessfl.run.config", "load_raw"),
    "apply_overrides": "wirelessfl.run.config",
    "RunConfig": "wirelessfl.run.config",
    "ConfigError": "wirelessfl.errors",
    "resolve_config": "wirelessfl.run.kinds",
    "open_run": "wirelessfl.run.kinds",
    "run_job": "wirelessfl.run.kinds",
    "RunRecord": "wirelessfl.run.records",
    "regenerate": "wirelessfl.report",
    "sweep": "wirelessfl.report",
    "plot_runs": "wirelessfl.report",
    "register_algorithm": ("wirelessfl.registry", "register"),
    "register_local_rule": "wirelessfl.algorithms.rules",
    "register_model": "wirelessfl.models",
    "register_dataset": "wirelessfl.data.datasets",
    "algorithm_names": ("wirelessfl.registry", "names"),
    "get_algorithm": ("wirelessfl.registry", "get"),
    "FederatedAlgorithm": "wirelessfl.algorithms.base",
    "ServerState": "wirelessfl.algorithms.base",
    "RoundReport": "wirelessfl.algorithms.base",
    "Environment": "wirelessfl.algorithms.base",
    "LocalSGD": "wirelessfl.engine.client",
    "LocalHParams": "wirelessfl.engine.client",
    "ClientTask": "wirelessfl.engine.client",
    "ClientResult": "wirelessfl.engine.client",
    "build_model": "wirelessfl.models",
    "load_dataset": "wirelessfl.data",
}
__all__ = ["__version__", *sorted(_EXPORTS)]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
