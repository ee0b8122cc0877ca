"""pfl-research (``pfl``) on the peers' workload (``workload.py``).

``FederatedAveraging`` on a ``SimulatedBackend`` over a ``FederatedDataset`` of the IID
shards (every user sampled once per round: ``minimize_reuse``, cohort = all clients), local SGD
through ``PyTorchModel`` (central optimiser SGD with lr 1, which applies the mean update), and
``CentralEvaluationCallback`` on the test set each round (split over the workers). Its best
configuration on a CPU is one process per core: the driver starts this script under
``torchrun --nproc_per_node=WORKERS``, which pfl detects and uses (gloo). Runs in its own
environment with ``pfl[pytorch]`` (``benchmarks/peers/run.py setup``).

Settings and why (the workload's work and nothing more, at pfl's best):

- ``evaluation_frequency`` (:data:`EVALUATION_FREQUENCY`) never comes round after the first
  iteration. pfl evaluates every user's training data before and after its local training
  in the central iterations that are a multiple of it (``do_evaluation``), work no other
  framework here does: with ``evaluation_frequency=1``, which this harness set until
  2026-11-26, a 60 x 20 round took 0.98 s against 0.72 s without it (an outside
  measurement). pfl evaluates users at iteration 0 whatever the setting; that first round
  is the warm-up the driver leaves out of the per-round times.
- ``val_cohort_size=0``: no federated validation users (nor do the others).
- ``CentralEvaluationCallback(frequency=1)``: the test set after every round, as every
  framework here does; distributed over the workers (pfl's default).
- Workers: two processes on two cores (``--workers``), each with one PyTorch thread (what
  ``torchrun`` sets for several processes); ``benchmarks/peers/run.py bench --workers 1``
  measures one instead.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.callback.base import TrainingProcessCallback  # noqa: E402
from pfl.callback.central_evaluation import CentralEvaluationCallback  # noqa: E402
from pfl.data.dataset import Dataset  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.sampling import get_user_sampler  # noqa: E402
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams  # noqa: E402
from pfl.metrics import Weighted  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402
from workload import FCNN, Clock, arguments, fashion_mnist, shards  # noqa: E402

#: pfl's ``evaluation_frequency``: larger than any run's rounds, so that no central iteration
#: after the first evaluates its users' training data (see the module docstring).
EVALUATION_FREQUENCY = 1_000_000


class Net(FCNN):
    """The FCNN with the ``loss`` and ``metrics`` methods pfl's ``PyTorchModel`` calls."""

    def loss(self, x, y, eval=False):  # noqa: D102, A002
        self.train(not eval)
        return torch.nn.functional.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x, y, eval=True):  # noqa: D102, A002
        self.train(not eval)
        out = self(x)
        return {"loss": Weighted(float(torch.nn.functional.cross_entropy(out, y, reduction="sum")),
                                 len(y)),
                "accuracy": Weighted(float((out.argmax(1) == y).sum()), len(y))}


class Timer(TrainingProcessCallback):
    """Ticks the clock after each central iteration (after the central evaluation)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_train_begin(self, *, model):  # noqa: D102
        self.clock.tick(float("nan"))
        return super().on_train_begin(model=model)

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):  # noqa: D102
        # pfl evaluates centrally before training and after iterations 1, 2, ...: the metrics
        # of iteration 0 hold the initial model's accuracy, not that after one round.
        acc = [float(getattr(v, "overall_value", v)) for k, v in aggregate_metrics
               if "central" in str(k).lower() and "accuracy" in str(k).lower()]
        self.clock.tick(acc[0] if acc and central_iteration > 0 else float("nan"))
        return False, type(aggregate_metrics)()


def main() -> None:  # noqa: D103
    args = arguments(__doc__)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    xtr, ytr, xte, yte = (torch.from_numpy(a) for a in fashion_mnist(args.data_dir))
    parts = shards(args.clients, args.seed)
    users = {str(k): [xtr[p], ytr[p]] for k, p in enumerate(parts)}
    train = FederatedDataset.from_slices(users, get_user_sampler("minimize_reuse", list(users)))
    net = Net()
    model = PyTorchModel(model=net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
    clock = Clock()
    callbacks = [CentralEvaluationCallback(Dataset(raw_data=[xte, yte]),
                                           model_eval_params=NNEvalHyperParams(local_batch_size=2000),
                                           frequency=1),
                 Timer(clock)]
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=args.rounds,
                                           evaluation_frequency=EVALUATION_FREQUENCY,
                                           train_cohort_size=args.clients, val_cohort_size=0),
        backend=SimulatedBackend(training_data=train, val_data=train),
        model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=args.lr, local_num_epochs=None,
                                              local_num_steps=args.steps,
                                              local_batch_size=args.batch),
        model_eval_params=NNEvalHyperParams(local_batch_size=2000),
        callbacks=callbacks)
    if int(os.environ.get("RANK", "0")) == 0:
        clock.report("pfl-research", args, workers=int(os.environ.get("WORLD_SIZE", "1")))


if __name__ == "__main__":
    main()
