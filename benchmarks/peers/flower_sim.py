"""Flower's simulation runtime (Ray backend) on the peers' workload (``workload.py``).

A ``ClientApp`` trains its partition (``node_config["partition-id"]``) with plain torch; the
``ServerApp`` runs Flower's ``FedAvg`` strategy (weighted by ``num-examples``, every node
trained each round, no federated evaluation) and evaluates the global model centrally on the
test set after each round (``evaluate_fn``). ``--workers`` Ray actors share the machine
(``client_resources.num_cpus = cores / workers``). Runs in its own environment with
``flwr[simulation]`` (``benchmarks/peers/run.py setup``).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["PYTHONPATH"] = HERE + os.pathsep + os.environ.get("PYTHONPATH", "")  # Ray actors

import torch  # noqa: E402
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402
from workload import FCNN, Clock, accuracy, arguments, cached, fashion_mnist, local_sgd  # noqa: E402

ARGS = arguments(__doc__)


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:  # noqa: D103
    x, y, parts = cached(ARGS.data_dir, ARGS.clients, ARGS.seed)  # once per Ray actor
    pid = int(context.node_config["partition-id"])
    idx = torch.from_numpy(parts[pid])
    model = FCNN()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    gen = torch.Generator().manual_seed(ARGS.seed * 1_000_003 + pid)
    local_sgd(model, x[idx], y[idx], ARGS.steps, ARGS.batch, ARGS.lr, gen)
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": len(idx)})})
    return Message(content=content, reply_to=msg)


server = ServerApp()
CLOCK = Clock()


@server.main()
def main(grid: Grid, context: Context) -> None:  # noqa: D103
    _, _, xte, yte = fashion_mnist(ARGS.data_dir)
    xte, yte = torch.from_numpy(xte), torch.from_numpy(yte)
    torch.manual_seed(ARGS.seed)
    model = FCNN()

    def central(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        acc = accuracy(model, xte, yte)
        CLOCK.tick(acc)
        return MetricRecord({"accuracy": acc})

    n = ARGS.clients
    FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n,
           min_available_nodes=n).start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                                        num_rounds=ARGS.rounds, evaluate_fn=central)


if __name__ == "__main__":
    cores = os.cpu_count() or 1
    run_simulation(server_app=server, client_app=client, num_supernodes=ARGS.clients,
                   backend_config={"client_resources": {"num_cpus": max(1, cores // ARGS.workers),
                                                        "num_gpus": 0.0},
                                   "init_args": {"num_cpus": cores, "include_dashboard": False}})
    CLOCK.report("flower-simulation", ARGS, workers=ARGS.workers)
