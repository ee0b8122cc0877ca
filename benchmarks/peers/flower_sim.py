"""Flower's simulation runtime through ``run_simulation`` on the peers' workload (``workload.py``).

The app is :mod:`flower_app`'s. ``run_simulation`` is the Python entry point Flower 1.42
marks deprecated ("use ``flwr run``": :mod:`flower_run` runs the same app that way); it is
kept to compare the two. ``--workers`` Ray actors share the machine
(``client_resources.num_cpus = cores / workers``). Runs in its own environment with
``flwr[simulation]`` (``benchmarks/peers/run.py setup``).
"""

from __future__ import annotations

import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["PYTHONPATH"] = HERE + os.pathsep + os.environ.get("PYTHONPATH", "")  # Ray actors

from workload import arguments  # noqa: E402

ARGS = arguments(__doc__)
os.environ["WFL_PEERS_ARGS"] = json.dumps(vars(ARGS))  # run_simulation takes no run config

from flower_app import client, server  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

if __name__ == "__main__":
    cores = os.cpu_count() or 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecation notice: said in the docstring
        run_simulation(server_app=server, client_app=client, num_supernodes=ARGS.clients,
                       backend_config={"client_resources": {"num_cpus": max(1, cores // ARGS.workers),
                                                            "num_gpus": 0.0},
                                       "init_args": {"num_cpus": cores, "include_dashboard": False}})
