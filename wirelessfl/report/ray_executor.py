"""Figure and sweep runs as Ray tasks (``--executor ray``; the optional extra ``[ray]``).

Each run of a figure or sweep becomes one Ray task with its CPU/GPU request, on a local Ray
instance (default) or an existing cluster (``address``: ``auto`` or ``HOST:PORT``). A task
trains its run exactly as the local executor does (:func:`wirelessfl.report.figures.execute` on one
run), into the same run folder, named by the hash of the run's config, so:

- finished runs are reused and the tables are the local executor's, byte for byte;
- a task that raises or whose worker or node dies is retried (``retries`` times) and the
  retry *resumes* the run from its folder's checkpoint, so completed rounds are kept (the
  folder's ``flock`` dies with the process that held it);
- data errors, diverged runs and folders locked by another writer are reported as skipped,
  as locally, not retried.

On a cluster the report folder must be on storage every node sees (a shared file system),
and the workers need wirelessfl installed in the same environment. A progress bar counts
finished runs.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channels.validation import as_float, as_int
from wirelessfl.report.local import run_in_process

#: ``auto``, or HOST:PORT (a name, IPv4 or [IPv6] host) with an optional ``ray://``.
_ADDRESS = re.compile(r"auto|(ray://)?([A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
                      r":(?P<port>[0-9]{1,5})")


@dataclass(frozen=True)
class RayOptions:
    """Where and how runs are dispatched.

    Attributes
    ----------
    address : str or None
        None: start a local Ray instance; ``auto`` or ``HOST:PORT``: join an existing cluster.
    cpus_per_run : float
        CPUs each run asks for (and the PyTorch threads it uses).
    gpus_per_run : float
        GPUs each run asks for (fractions share a GPU; runs then use ``--device cuda``).
    retries : int
        Retries of a failed run (raised error, dead worker or node).
    """

    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    retries: int = 3

    def __post_init__(self) -> None:
        as_float("--cpus-per-run", self.cpus_per_run, lo=0, hi=1024, lo_open=True)
        as_float("--gpus-per-run", self.gpus_per_run, lo=0, hi=64)
        as_int("--retries", self.retries, lo=0, hi=100)
        match = _ADDRESS.fullmatch(self.address) if isinstance(self.address, str) else None
        if self.address is not None and not (match and (match["port"] is None
                                                        or 0 < int(match["port"]) < 65536)):
            raise ValueError(f"--address must be 'auto' or HOST:PORT (or ray://HOST:PORT), "
                             f"got {str(self.address)[:60]!r}")


def _ray():
    try:
        import ray
    except ImportError:
        raise ValueError("--executor ray needs Ray: pip install 'wirelessfl[ray]'") from None
    return ray


def _task(run: Any, root: str, threads: int, index: str) -> str:
    """One run on a Ray worker (the local executor's code); returns its log lines."""
    return run_in_process(run, Path(root), threads, index)


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse, within ``timeout_s``, a HOST:PORT no Ray cluster answers on (Ray would retry on)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise ValueError(f"--address {address}: no Ray cluster answers there "
                         f"({getattr(exc, 'strerror', None) or type(exc).__name__}); start one "
                         "with `ray start --head` or leave --address out") from None


@contextlib.contextmanager
def _cancelled_on_interrupt(ray: Any, pending: dict[Any, Any]) -> Iterator[None]:
    """Ctrl-C or SIGTERM: every task not finished is cancelled, on any cluster, then re-raised.

    A running task gets a KeyboardInterrupt (Ray's ``cancel``), so its run stops as an
    interrupted one does, its last checkpoint kept; a queued one never starts. (Shutting
    down the driver alone leaves the tasks of a cluster it did not start running.)
    """
    try:
        yield
    except BaseException:
        for ref in list(pending):
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        raise


def init_keeping_handlers(ray: Any, **kwargs: Any) -> None:
    """``ray.init(**kwargs)``, with this process's SIGINT and SIGTERM handlers kept.

    ``ray.init`` installs its own SIGTERM handler in the driver (it calls ``sys.exit``), which
    outlives ``ray.shutdown``: a SIGTERM during a Ray sweep then exited with status 15 and no
    line, and every later SIGTERM of the same process (a notebook, the test suite) went to Ray.
    """
    import signal
    import threading

    kept = {}
    if threading.current_thread() is threading.main_thread():
        kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray.init(**kwargs)
    finally:
        for sig, handler in kept.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(sig, handler)


def execute_ray(runs: Sequence[Any], root: Path, options: RayOptions, *,
                log: Callable[[str], None] = print, quiet: bool = False) -> None:
    """Train ``runs`` (:class:`~wirelessfl.report.figures.RunSpec`) as Ray tasks under ``root``."""
    if not runs:
        return
    ray = _ray()
    from tqdm import tqdm

    started = not ray.is_initialized()
    if started and options.address and options.address != "auto":
        _reachable(options.address)
    if started:
        kw: dict[str, Any] = {"address": options.address} if options.address else {
            "num_cpus": os.cpu_count() or 1}
        init_keeping_handlers(ray, include_dashboard=False, log_to_driver=False,
                              logging_level="ERROR", **kw)
    try:
        have = ray.cluster_resources()
        for what, need in (("CPU", options.cpus_per_run), ("GPU", options.gpus_per_run)):
            if need > have.get(what, 0.0):  # the task could never be scheduled
                raise ValueError(f"each run asks for {need:g} {what}s but the Ray cluster has "
                                 f"{have.get(what, 0.0):g}: lower --{what.lower()}s-per-run")
        from wirelessfl.run import plugins

        env = {plugins.ENV: os.environ[plugins.ENV]} if os.environ.get(plugins.ENV) else {}
        task = ray.remote(_task).options(num_cpus=options.cpus_per_run,
                                         num_gpus=options.gpus_per_run,
                                         max_retries=options.retries, retry_exceptions=True,
                                         **({"runtime_env": {"env_vars": env}} if env else {}))
        threads = max(1, int(options.cpus_per_run))
        pending = {task.remote(r, str(root), threads, f"[{i}/{len(runs)}]"): r
                   for i, r in enumerate(runs, 1)}
        with tqdm(total=len(pending), unit="run", disable=quiet, desc="ray") as bar, \
                _cancelled_on_interrupt(ray, pending):
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                if not done:
                    continue
                run = pending.pop(done[0])
                try:
                    log(ray.get(done[0]))
                except Exception as exc:  # noqa: BLE001 - Ray wraps the worker's error
                    first = str(exc).strip().splitlines()
                    log(f"  failed after {options.retries} retries: {run.series} {run.panel} "
                        f"s{run.seed}: {first[-1] if first else type(exc).__name__}"[:400])
                bar.update(1)
    finally:
        if started:
            ray.shutdown()
