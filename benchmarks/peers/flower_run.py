"""Flower's current entry point, ``flwr run``, on the peers' workload (``workload.py``).

What Flower's documentation recommends for a simulation since ``run_simulation`` was
deprecated: the app (:mod:`flower_app`, with ``workload.py`` beside it) as a Flower App
project (a ``pyproject.toml`` naming its ``ServerApp`` and ``ClientApp``), run with ``flwr
run APP local --stream`` against a local SuperLink in simulation mode (the
``:local-in-memory:`` connection, which ``flwr`` starts by itself), ``num-supernodes`` =
clients and ``--workers`` Ray actors (``client-resources.num-cpus = cores / workers``).

Everything lives in a temporary folder: the app, ``FLWR_HOME`` (the connection's
``config.toml``, the SuperLink's log) and the timing line the ``ServerApp`` writes. The
SuperLink ``flwr`` starts is detached (a session of its own) and would outlive the run: every
process started under this run's ``FLWR_HOME`` (the SuperLink, its simulation process, Ray)
is stopped when the run ends. Runs in the ``flwr[simulation]`` environment
(``benchmarks/peers/run.py setup``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from workload import OPTIONS, arguments  # noqa: E402

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "wflpeers"
version = "1.0.0"
description = "The wirelessfl peers' workload as a Flower App"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "wirelessfl"

[tool.flwr.app.components]
serverapp = "flower_app:server"
clientapp = "flower_app:client"

[tool.flwr.app.config]
{config}
"""

CONNECTION = """[superlink]
default = "local"

[superlink.local]
address = ":local-in-memory:"
options.num-supernodes = {clients}
options.backend.client-resources.num-cpus = {per_actor}
options.backend.client-resources.num-gpus = 0.0
options.backend.init-args.num-cpus = {cores}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _stop_everything_under(home: str) -> None:
    """SIGKILL every process whose environment has ``FLWR_HOME=home`` (this run's, and only)."""
    mark = f"FLWR_HOME={home}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in env:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def main() -> None:  # noqa: D103
    args = arguments(__doc__)
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="wfl-flwr-") as tmp:
        app, home, out = Path(tmp) / "app", Path(tmp) / "home", Path(tmp) / "timing.json"
        app.mkdir()
        home.mkdir()
        for name in ("flower_app.py", "workload.py"):
            shutil.copy(HERE / name, app / name)
        config = "\n".join(f"{n.replace('_', '-')} = {_toml(getattr(args, n))}"
                           for n, _, _ in OPTIONS)
        (app / "pyproject.toml").write_text(PYPROJECT.format(config=config + '\nout = ""'))
        (home / "config.toml").write_text(CONNECTION.format(
            clients=args.clients, per_actor=max(1, cores // args.workers), cores=cores))
        env = {**os.environ, "FLWR_HOME": str(home), "FLWR_DISABLE_UPDATE_CHECK": "1",
               "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(_free_port()),
               "FLWR_LOCAL_CONTROL_API_PORT": str(_free_port()),
               # flwr starts `flower-superlink` by name: this environment's first
               "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
        flwr = str(Path(sys.executable).with_name("flwr"))
        try:
            done = subprocess.run([flwr, "run", str(app), "local", "--stream",
                                   "--run-config", f'out="{out}"'], env=env,
                                  capture_output=True, text=True, timeout=3600)
            for _ in range(50):  # the ServerApp's file is written as the run ends
                if out.exists() or done.returncode:
                    break
                time.sleep(0.1)
        finally:
            _stop_everything_under(str(home))
        if not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            log = home / "local-superlink" / "superlink.log"
            if log.exists():
                tail += log.read_text().strip().splitlines()[-5:]
            sys.exit(f"flwr run wrote no timing (exit {done.returncode}): {' | '.join(tail)}")
        print(out.read_text().strip())


if __name__ == "__main__":
    main()
