"""The peers' workload (``workload.py``) as one Flower App, run by both of Flower's entry points.

A ``ClientApp`` trains its partition (``node_config["partition-id"]``) with plain torch; the
``ServerApp`` runs Flower's ``FedAvg`` strategy (weighted by ``num-examples``, every node
trained each round, no federated evaluation) and evaluates the global model centrally on the
test set after each round (``evaluate_fn``).

The workload's settings come from the run's ``run_config`` (``flwr run --run-config``: the
current entry point, :mod:`flower_run`) or, where that is empty, from ``WFL_PEERS_ARGS`` in
the environment (JSON; the deprecated ``run_simulation`` of :mod:`flower_sim`, which takes
no run config). The ``ServerApp`` prints its timing line and, with ``out`` set, writes it to
that file too (``flwr run`` runs the app in a process of its own).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from workload import FCNN, OPTIONS, Clock, accuracy, cached, fashion_mnist, local_sgd


def settings(context: Context) -> argparse.Namespace:
    """The workload's options of this run (see the module docstring), and ``out``."""
    rc = dict(context.run_config)
    raw = ({name: rc[name.replace("_", "-")] for name, _, _ in OPTIONS
            if name.replace("_", "-") in rc} or json.loads(os.environ.get("WFL_PEERS_ARGS", "{}")))
    args = {name: kind(raw.get(name, default)) for name, kind, default in OPTIONS}
    return argparse.Namespace(**args, out=str(rc.get("out", "")))


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:  # noqa: D103
    args = settings(context)
    x, y, parts = cached(args.data_dir, args.clients, args.seed)  # once per Ray actor
    pid = int(context.node_config["partition-id"])
    idx = torch.from_numpy(parts[pid])
    model = FCNN()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    gen = torch.Generator().manual_seed(args.seed * 1_000_003 + pid)
    local_sgd(model, x[idx], y[idx], args.steps, args.batch, args.lr, gen)
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": len(idx)})})
    return Message(content=content, reply_to=msg)


server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:  # noqa: D103
    args = settings(context)
    clock = Clock()
    _, _, xte, yte = fashion_mnist(args.data_dir)
    xte, yte = torch.from_numpy(xte), torch.from_numpy(yte)
    torch.manual_seed(args.seed)
    model = FCNN()

    def central(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        acc = accuracy(model, xte, yte)
        clock.tick(acc)
        return MetricRecord({"accuracy": acc})

    n = args.clients
    FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n,
           min_available_nodes=n).start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                                        num_rounds=args.rounds, evaluate_fn=central)
    entry = "flwr-run" if args.out else "run_simulation"
    clock.report("flower-simulation", args, path=args.out or None, workers=args.workers,
                 entry_point=entry)
