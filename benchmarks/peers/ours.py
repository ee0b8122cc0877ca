"""wirelessfl on the peers' workload (``workload.py``), with its default settings.

``engine: auto`` (the batched engine on this workload) and ``threads: auto``, applied as
``wirelessfl run`` applies it (:class:`wirelessfl.run.threads.ThreadGovernor`: chosen when
the run starts, decided again between rounds from the load measured over them);
``--workers 2`` with ``WFL_PEERS_ENGINE=distributed`` runs the distributed executor
instead (two processes).
"""

from __future__ import annotations

import os
import sys

# wirelessfl first, as in `wirelessfl run`: it picks OpenMP's wait policy before torch loads
from wirelessfl.engine.client import evaluate
from wirelessfl.run.config import resolve
from wirelessfl.run.rounds import prepare
from wirelessfl.run.threads import ThreadGovernor, torch_threads


def main() -> None:  # noqa: D103
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from workload import Clock, arguments

    args = arguments(__doc__)
    engine = os.environ.get("WFL_PEERS_ENGINE", "auto")
    exp = prepare(resolve({
        "seed": args.seed, "engine": engine, "workers": args.workers,
        "data": {"dataset": "fashion_mnist", "partition": "iid", "num_clients": args.clients,
                 "data_dir": args.data_dir},
        "model": {"name": "fcnn"},
        "local": {"lr": args.lr, "batch_size": args.batch, "steps": args.steps},
        "algorithm": {"name": "fedavg"}}))
    governor = ThreadGovernor(exp.config.threads, exp.config.engine)
    first = governor.count
    with torch_threads(first):
        clock, state = Clock(), exp.initial_state()
        test = exp.splits.test
        clock.tick(evaluate(exp.model, state.params, test, device=exp.device)[0])
        for r in range(args.rounds):
            state, _ = exp.algorithm.apply(state)
            clock.tick(evaluate(exp.model, state.params, test, device=exp.device)[0])
            governor.between(r + 1)
    clock.report("wirelessfl" if engine == "auto" else f"wirelessfl-{engine}", args,
                 engine=type(exp.algorithm.env.executor).__name__, threads=first,
                 thread_changes=governor.changes)


if __name__ == "__main__":
    main()
