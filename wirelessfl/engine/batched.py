"""Batched client execution: many clients' local steps as one stacked computation.

:class:`BatchedExecutor` follows the :class:`~wirelessfl.engine.loop.Executor` contract (same
results as :class:`~wirelessfl.engine.loop.LoopExecutor`, to float tolerance). Tasks whose
parameters have the same shapes (one architecture, or HIST cells with equal submodel sizes)
and the same step size form a group; a group's parameters are stacked along a leading client
dimension and every local step is one ``vmap``-ed forward pass (batched matmuls and
convolutions) with one backward pass, followed by :meth:`LocalSGD.descend` on the stacked
tensors (SGD with momentum and weight decay, or Adam).

Speed on CPU comes from these things, each measured on 60 stacked clients: the model layers'
own ``vmap`` rules (:mod:`wirelessfl.models.layers`: weight gradients in the weights' layout,
clients as groups of a channels-last convolution), one fused pass per optimiser update
(:meth:`LocalSGD.descend`), :func:`retain_freed_memory` (no page faults on the large
stacked tensors). ``benchmarks/engine.py``: FCNN HFedAvg 8.2 → 4.2 s per round, LeNet-5
34.9 → 21.1 s (HIST N = 4: 5.5 → 1.5 s and 28.1 → 17.6 s) on 2 cores. Then, for rules whose
step is plain SGD (:attr:`~wirelessfl.engine.local_sgd.LocalSGD.plain_sgd`: FedAvg, HIST, MOON,
...), the group owns its parameters and steps them in place, the wide linear layers' step
fused into their weight-gradient GEMM inside the backward pass
(:func:`~wirelessfl.models.layers.sgd_in_backward`), and on an AVX-512 CPU wide linear
weights are stacked column-major (:func:`~wirelessfl.models.layers.column_major`; row-major
on AVX2, where that is faster): the peers' benchmark's FCNN FedAvg round (60 clients × 20
steps) 0.71 → 0.51 s. Clients that share
their start (FedAvg's global model) get it once, unstacked, so rules that read the start
(MOON's anchor features, FedProx's pull) do not hold a copy per client, and a
:class:`~wirelessfl.engine.fold.DeltaFold` takes each chunk's pseudo-gradients on the
stack as the chunk finishes (``benchmarks/scale.py``: 10,000 FCNN clients in 1.4 GB
instead of 10.5 GB; 1,000 clients one step each 0.75 → 0.27 s per round). A plain step
(any rule whose step is plain SGD with a drift) that recurs is recorded once and replayed
as a graph of tensor operations, without the Python work of ``vmap``, the module calls and
autograd (:mod:`wirelessfl.engine.replay`;
the same numbers bit for bit).

Clients keep their own mini-batch order (:func:`~wirelessfl.engine.schedule.batch_schedule` under
their seed). Unequal local data sizes give unequal batch sizes and step counts: a short
batch is padded with zero-weight samples, and a client whose schedule has ended takes no
further step (its parameters are frozen; since every client steps from step 0 until its
schedule ends, the clients still active at step s have all taken s steps, so Adam's bias
correction is shared; a finished client's buffers are kept as well). With BatchNorm, the
padding of a short batch enters that step's batch statistics, so clients with unequal batch
sizes differ from the loop there. Dropout masks and augmentation draws come from each
client's own counter-based stream (:mod:`wirelessfl.models.noise`, the client's key a vmapped
input), so they are the same as in the loop, draw by draw.

Every :class:`~wirelessfl.engine.local_sgd.LocalSGD` rule runs here: the engine vmaps the rule's own
loss (data loss plus :meth:`~wirelessfl.engine.local_sgd.LocalSGD.penalty`) over the stacked clients
and their stacked :meth:`~wirelessfl.engine.local_sgd.LocalSGD.context`, applies its gradient
correction and optimiser on the stacks, and ends each client with the rule's
:meth:`~wirelessfl.engine.local_sgd.ClientUpdate.client_final`. Other
:class:`~wirelessfl.engine.local_sgd.ClientUpdate` implementations run through the loop.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.func import vmap

from wirelessfl.data.arrays import ArrayDataset
from wirelessfl.engine import device_guard, host_memory
from wirelessfl.engine.batch import ClientBatch, ClientResults, RowStack
from wirelessfl.engine.client import (
    Carry,
    ClientError,
    ClientResult,
    ClientTask,
    ClientUpdate,
    DeltaFold,
    LocalHParams,
    LocalSGD,
    float32_arithmetic,
    forked_rng,
    keep_where,
    on_device,
    task_lr,
)
from wirelessfl.engine.loop import Executor, LoopExecutor
from wirelessfl.engine.replay import StepReplay, library_model
from wirelessfl.engine.schedule import stacked_schedule, stacked_widths
from wirelessfl.models.base import FLModel, Params
from wirelessfl.models.layers import Linear, column_major, sgd_in_backward
from wirelessfl.models.lowrank import LowRankDelta, LowRankWeight
from wirelessfl.models.noise import client_noise, step_keys

#: On the CPU, the most bytes of stacked parameters one chunk of clients holds by default.
#: Each chunk pays its own steps' dispatch and its stacking and folding, and each step
#: streams the chunk's weights through the forward pass, the backward pass and the update.
#: Measured on 2 cores (AMD EPYC, AVX-512; FCNN, 0.94 MB per client; FedAvg round with the
#: test-set evaluation), 2026-11-26: 60 clients × 20 steps of 50, all 60 at once 0.47 s
#: against chunks of 30 0.53 s; 1,000 clients × 3 steps of 20, chunks of ~34 (32 MB) 0.84 s,
#: of 135 0.72 s, of 270 (256 MB) 0.65-0.68 s at 1.2 GB peak, of 525 (the memory budget)
#: 0.62-0.66 s at 1.7 GB; FCNN HFedAvg N = 4 (60 clients) 2.8 → 2.3 s. An earlier engine
#: (before the shared start was stacked once per chunk and the fold written in place)
#: measured the opposite, chunks of 30 faster, hence 32 MB until then.
CPU_CHUNK_BYTES = 256 << 20
#: The same for a rule whose clients carry state (:meth:`LocalSGD.stacked_states`: SCAFFOLD,
#: FedDyn, MOON, FAdamGC): its chunk also stacks the states read, the new ones and, as the
#: chunk is folded, the changes the server sums (:class:`~wirelessfl.engine.fold.StateFold`),
#: about STATE_COPIES more parameter-sized stacks. Measured on 2 cores (AMD EPYC), SCAFFOLD,
#: FCNN, 8,000 clients, 500 a round, 2 steps of 5, store on disk, 2026-11-28: chunks of 40
#: 2.82 s a round at 1.21 GB peak RSS, of 80 2.87 s at 1.50 GB, of 250 (256 MB) 2.86 s at
#: 2.72 GB: the round time does not move, the peak does.
STATE_CHUNK_BYTES = 32 << 20
STATE_COPIES = 4

#: A linear weight is kept low-rank (:mod:`wirelessfl.models.lowrank`) when the rows of all
#: its steps are at most this share of its smaller side. Measured on 2 cores (AMD EPYC,
#: FedAvg rounds of 1,000 FCNN clients, 784 → 300, low-rank against stacked): 3 steps of
#: batch 20 (60 rows) 0.49 against 0.65 s, 3 × 25 0.49 against 0.63 s, 2 × 50 0.46 against
#: 0.56 s, 5 × 20 0.83 against 0.94 s, 3 × 50 (150 rows) 0.84 against 0.93 s, 10 × 20 1.76
#: against 1.83 s, 5 × 50 (250 rows) 1.36 against 1.35 s, 8 × 50 2.06 against 1.93 s: the
#: small products grow with the square of the steps, so the gain ends at about 0.8; half
#: keeps a margin. 20 steps of batch 50 (1,000 rows) stay stacked.
LOWRANK_MAX_SHARE = 0.5
#: ``low_rank`` settings of :class:`BatchedExecutor`: on the CPU, on every device, never.
LOW_RANK_MODES = ("auto", "on", "off")

#: ``compile`` settings of :class:`BatchedExecutor`: off, or a ``torch.compile`` mode.
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")


def _signature(task: ClientTask, hp: LocalHParams) -> tuple:
    return (task_lr(task, hp), *((k, tuple(v.shape), v.dtype) for k, v in task.params.items()))


class BatchedExecutor(Executor):
    """Clients with equal parameter shapes and step size trained together.

    Parameters
    ----------
    device : torch.device or str
        Where the stacked computation runs.
    max_batch : int or None
        At most this many clients stacked at once: a group is trained in chunks (to fit a
        device's memory). None: as many as fit in :meth:`memory_budget` by
        :meth:`client_bytes` (all of them for the papers' workloads; 10,000 FCNN clients
        are trained in chunks instead of holding ~80 GB), and on the CPU at most
        :data:`CPU_CHUNK_BYTES` of stacked parameters. A group is cut into chunks of equal
        size (to one client). Each client's computation is its own, so chunks give the
        numbers of one group.
    compile : str
        ``off`` (default), or the ``torch.compile`` mode each stacked step's gradient
        computation (forward, backward, the rule's correction) is compiled in: ``default``,
        ``reduce-overhead`` (on a GPU, CUDA graphs: the static-shape step replayed without
        a kernel launch per operator) or ``max-autotune``. Compiled steps take the general
        path (gradients, then the rule's :meth:`~wirelessfl.engine.local_sgd.LocalSGD.take_step`)
        rather than the fused in-place SGD step, and give the same numbers to float
        tolerance. Opt-in: the first step of each shape compiles (3-8 s for the FCNN on 2
        CPU cores), and on the CPU the compiled FCNN step (15.6 ms, 30 clients) was slower
        than the eager fused one (11.2 ms), so it is meant for GPUs, where per-operator
        launches dominate small models.
    replay : str
        ``auto`` (default), ``on`` or ``off``: when a plain SGD step (compile ``off``; FedAvg's,
        FedProx's, SCAFFOLD's, MOON's) is recorded as a graph of tensor operations and
        replayed, the same numbers bit for bit
        (:class:`~wirelessfl.engine.replay.StepReplay`; the FCNN HFedAvg round on 2 cores
        1.78 -> 1.58 s, LeNet-5's 6.45 -> 6.21 s).
    low_rank : str
        ``auto`` (default), ``on`` or ``off``: whether a plain SGD step may keep a linear
        weight that every client starts from one tensor as that start plus its steps'
        low-rank factors (:meth:`_low_rank`, :mod:`wirelessfl.models.lowrank`; the same
        numbers to float rounding): ``auto`` on the CPU, where it was measured, ``on`` on a
        GPU too (to measure it there: ``benchmarks/gpu_suite.py``'s ``lowrank`` part).
    """

    def __init__(self, device: torch.device | str = "cpu", max_batch: int | None = None,
                 compile: str = "off", replay: str = "auto",  # noqa: A002 - torch's own word
                 low_rank: str = "auto") -> None:
        if max_batch is not None and (int(max_batch) != max_batch or max_batch < 1):
            raise ValueError(f"max_batch must be an integer >= 1 or None, got {max_batch!r}")
        if compile not in COMPILE_MODES:
            raise ValueError(f"compile must be one of {', '.join(COMPILE_MODES)}, "
                             f"got {compile!r}")
        if low_rank not in LOW_RANK_MODES:
            raise ValueError(f"low_rank must be one of {', '.join(LOW_RANK_MODES)}, "
                             f"got {low_rank!r}")
        self.device = torch.device(device)
        self.low_rank = low_rank
        self.low_ranked = 0  # weights kept low-rank so far (one per weight and chunk)
        self.max_batch = max_batch
        self.compile = compile
        self._compiled = None  # the compiled _gradients, made on first use
        self.replay = StepReplay(replay)
        self._loop = LoopExecutor(device)
        self._checked: dict[type, bool] = {}  # undeclared rules checked against the loop
        if self.device.type == "cpu":
            retain_freed_memory()

    def __repr__(self) -> str:
        more = f", compile='{self.compile}'" if self.compile != "off" else ""
        more += f", replay='{self.replay.mode}'" if self.replay.mode != "auto" else ""
        more += f", low_rank='{self.low_rank}'" if self.low_rank != "auto" else ""
        return f"BatchedExecutor(device='{self.device}', max_batch={self.max_batch}{more})"

    def _gradient_fn(self):
        """:meth:`_gradients`, compiled in :attr:`compile`'s mode unless it is ``off``."""
        if self.compile == "off":
            return self._gradients
        if self._compiled is None:
            self._compiled = torch.compile(self._gradients, dynamic=False,
                                           mode=None if self.compile == "default" else self.compile)
        if self.compile == "reduce-overhead" and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are consumed
        return self._compiled

    def run(self, update: ClientUpdate, data: ArrayDataset, tasks: Sequence[ClientTask],
            hp: LocalHParams, fold: DeltaFold | None = None) -> list[ClientResult]:
        """Train every task, one stacked group at a time; results in task order.

        The per-client contract: tasks with equal shapes and step size (:func:`_signature`)
        form a group, trained as :meth:`run_batch` trains a batch. A rule that is not
        elementwise (:attr:`~wirelessfl.engine.local_sgd.LocalSGD.elementwise`) runs on the loop
        engine instead. With a ``fold``, each chunk's pseudo-gradients go into it as the
        chunk finishes.
        """
        tasks = on_device(tasks, self.device)
        if not isinstance(update, LocalSGD) or not self._batchable(update, data, tasks, hp):
            return self._loop.run(update, data, tasks, hp, fold)
        if fold is not None:
            fold.check(tasks)
        self.replay.begin_run()
        groups: dict[tuple, list[int]] = {}
        for i, t in enumerate(tasks):
            groups.setdefault(_signature(t, hp), []).append(i)
        out: list[ClientResult | None] = [None] * len(tasks)
        for members in groups.values():
            batch = ClientBatch.from_tasks([tasks[i] for i in members])
            got = self._chunks(update, data, batch, hp, fold, np.asarray(members))
            for i, r in zip(members, got):
                out[i] = r
        return out  # type: ignore[return-value]

    def run_batch(self, update: ClientUpdate, data: ArrayDataset, batch: ClientBatch,
                  hp: LocalHParams, fold: DeltaFold | None = None) -> ClientResults:
        """Train a batch stacked; its results as arrays (Δ stacked, or folded with ``fold``).

        One group when every start has the same shapes (FedAvg's one start, HFedAvg's N
        cells, HIST's cells of equal mask sizes): no Python per client but each client's
        generator and permutations (:func:`~wirelessfl.engine.schedule.stacked_schedule`).
        Starts of several shapes (HIST's unequal masks, a lockstep group of other cells)
        train as one group per shape, their results put back in the batch's order (each
        client's result then built as an object: the stacks differ in shape). A rule that
        runs on the loop goes through the per-client contract (:meth:`run`).
        """
        if not len(batch):
            return ClientResults.from_list([])
        batch = batch.to(self.device)
        if not isinstance(update, LocalSGD) or not self._batchable(update, data, batch, hp):
            return super().run_batch(update, data, batch, hp, fold)
        if fold is not None:
            fold.check(batch.clients)
        self.replay.begin_run()
        groups = batch.shape_groups()
        if len(groups) == 1:
            return self._chunks(update, data, batch, hp, fold, np.arange(len(batch)))
        # starts of several shapes: each shape's clients stacked, the results back in order
        parts = [self._chunks(update, data, batch.select(rows), hp, fold, rows) for rows in groups]
        return ClientResults.concat(parts, order=np.concatenate(groups))

    def _chunks(self, update: LocalSGD, data: ArrayDataset, batch: ClientBatch,
                hp: LocalHParams, fold: DeltaFold | None, positions: np.ndarray) -> ClientResults:
        """``batch`` (one group) in chunks of equal size, to one client; ``positions`` in the call."""
        n = len(batch)
        factored = {}
        if self._fuses(update) and self._low_rank_rule(update, hp):  # weights may stay factored
            steps, widths = stacked_widths(batch.num_samples, hp)
            factored = self._low_rank_names(update, batch, hp, steps, int(widths.sum()))
        parts = -(-n // self.chunk_size(batch.task(0), hp, data, update.model, factored,
                                        stateful=_states_of(update)))
        cuts = [n * j // parts for j in range(parts + 1)]
        return ClientResults.concat([self._run_group(update, data, batch.take(slice(lo, hi)), hp,
                                                     fold, positions[lo:hi])
                                     for lo, hi in zip(cuts, cuts[1:])])

    def chunk_size(self, task: ClientTask, hp: LocalHParams, data: ArrayDataset,
                   model: FLModel | None = None, factored: Mapping[str, int] | None = None,
                   stateful: bool = False) -> int:
        """Clients stacked at once for tasks like ``task``.

        ``max_batch``, else as many as :meth:`memory_budget` holds by :meth:`client_bytes`
        (with ``stateful``, a rule whose clients carry state, :data:`STATE_COPIES` more
        parameter stacks a client), on the CPU at most :data:`CPU_CHUNK_BYTES` of stacked
        parameters (:data:`STATE_CHUNK_BYTES` when ``stateful``; at least one client).
        ``factored``: the weights kept low-rank (:meth:`_low_rank_names`), each with its rows
        of factors, which a client holds instead of the weight.
        """
        if self.max_batch:
            return self.max_batch
        stacked = _stacked_bytes(task.params, factored or {})
        per = self.client_bytes(task, hp, data, model, factored) + (STATE_COPIES * stacked
                                                                     if stateful else 0)
        size = max(1, int(self.memory_budget() // per))
        if self.device.type == "cpu":
            cap = STATE_CHUNK_BYTES if stateful else CPU_CHUNK_BYTES
            size = min(size, max(1, cap // max(1, stacked)))
        return size

    def memory_budget(self) -> int:
        """Bytes the stacked clients may take.

        Half the GPU's free memory; on the CPU a quarter of the available memory, at most
        4 GiB.
        """
        if self.device.type == "cuda":
            return torch.cuda.mem_get_info(self.device)[0] // 2
        return min(4 << 30, host_memory.available_bytes() // 4)

    @staticmethod
    def client_bytes(task: ClientTask, hp: LocalHParams, data: ArrayDataset,
                     model: FLModel | None = None, factored: Mapping[str, int] | None = None
                     ) -> int:
        """A stacked client's memory, estimated.

        Its parameters eight times over (start, current, gradient, update and the rule's
        context; twelve with Adam's moments) and its step's activations
        (:meth:`~wirelessfl.models.base.FLModel.activation_bytes`; without a model, its
        mini-batch four times over). A frozen base (GPT-2 under LoRA) is one copy for all
        clients and not counted; nor is a ``factored`` weight, whose factors are counted
        in its place, eight times over too.
        """
        params = _stacked_bytes(task.params, factored or {})
        sample = data.x[0].numel() * data.x.element_size() if len(data.x) else 0
        batch = min(hp.batch_size, max(1, len(task.indices)))
        act = model.activation_bytes(batch, sample) if model is not None else 4 * batch * sample
        return max(1, params * (12 if hp.optimizer == "adam" else 8) + act)

    def _batchable(self, update: LocalSGD, data: ArrayDataset,
                   tasks: Sequence[ClientTask] | ClientBatch, hp: LocalHParams) -> bool:
        """Whether ``update`` may run stacked: declared elementwise, or checked once.

        An undeclared rule that overrides ``correct`` or ``descend`` trains the first two
        clients both ways on its first call; if the numbers differ it runs on the loop
        from then on (a one-line notice on stderr), instead of silently diverging.
        """
        rule = type(update)
        if rule.elementwise is not None:
            return bool(rule.elementwise)
        if rule.correct is LocalSGD.correct and rule.descend is LocalSGD.descend:
            return True
        if rule not in self._checked:
            if isinstance(tasks, ClientBatch):
                tasks = tasks.take(slice(0, 2)).tasks()
            pair = [t for t in tasks if _signature(t, hp) == _signature(tasks[0], hp)][:2]
            if len(pair) < 2:
                return True  # nothing stacked to check yet
            stacked = self._run_group(update, data, ClientBatch.from_tasks(pair), hp)
            alone = self._loop.run(update, data, pair, hp)
            same = all(torch.allclose(s.delta[k], a.delta[k].to(s.delta[k].device), rtol=1e-4,
                                      atol=1e-6)
                       for s, a in zip(stacked, alone) for k in s.delta)
            self._checked[rule] = same
            if not same:
                print(f"wirelessfl: note: local rule {rule.__name__} gives other numbers on "
                      "stacked clients (its correct/descend is not elementwise); it runs one "
                      "client at a time. Set elementwise = False on it to skip this check.",
                      file=sys.stderr)
        return self._checked[rule]

    def _low_rank_names(self, update: LocalSGD, batch: ClientBatch, hp: LocalHParams,
                        steps: np.ndarray, rows: int) -> dict[str, int]:
        """The linear weights this group keeps as a shared start plus low-rank steps, and their rows.

        :mod:`wirelessfl.models.lowrank`'s form, eq. (1), for a plain SGD step (the default
        loss, no drift, the default final step) in float32 (or tf32, which is float32 there)
        on the CPU, every client taking the same number of steps: the weights of
        :class:`~wirelessfl.models.layers.Linear` layers that every client starts from one
        tensor (FedAvg's global model) and whose steps' rows (``rows``: the widths of all
        steps, summed) are at most :data:`LOWRANK_MAX_SHARE` of the layer's smaller side.
        Only in models built from ``wirelessfl``'s and ``torch.nn``'s modules, whose linear
        weights are read by their layers alone (a model of your own might read one
        directly, which would see the start, not the client's weight). A layer used several
        times a forward pass (a recurrent one) records each use's factors, so its rank grows
        faster than estimated: the same numbers, less gain. On a GPU the weights stay
        stacked unless ``low_rank`` is ``on`` (not measured there yet), and in float32 only.
        """
        if (not self._low_rank_rule(update, hp)
                or len(steps) == 0 or steps.min() != steps.max() or rows < 1):
            return {}
        names = {f"{name}.weight" if name else "weight"
                 for name, m in update.model.named_modules() if isinstance(m, Linear)}
        return {k: rows for k, v in batch.starts[0].items()
                if k in names and v.dim() == 2 and v.dtype == torch.float32
                and rows <= LOWRANK_MAX_SHARE * min(v.shape) and batch.one_start(k)}

    def _low_rank_rule(self, update: LocalSGD, hp: LocalHParams) -> bool:
        """Whether this engine and ``update``'s rule may keep weights low-rank at all."""
        cpu = self.device.type == "cpu"
        # on the CPU tf32 is float32 arithmetic: the same path, the same numbers
        return not (self.low_rank == "off" or (self.low_rank == "auto" and not cpu)
                    or hp.precision not in (("fp32", "tf32") if cpu else ("fp32",))
                    or not library_model(update.model) or update.drifts
                    or type(update).objective is not LocalSGD.objective
                    or type(update).client_final is not ClientUpdate.client_final)

    def _fuses(self, update: LocalSGD) -> bool:
        """Whether ``update``'s plain SGD steps run fused into the backward pass."""
        return update.plain_sgd and self.compile == "off"

    def _low_rank(self, update: LocalSGD, batch: ClientBatch, hp: LocalHParams,
                  steps: np.ndarray, rows: int) -> dict[str, LowRankWeight]:
        """The weights of :meth:`_low_rank_names` as their shared start, factors to come."""
        lr = hp.lr if batch.lr is None else batch.lr
        first = batch.starts[0]
        out = {k: LowRankWeight(first[k].detach().to(self.device), len(batch), lr)
               for k in self._low_rank_names(update, batch, hp, steps, rows)}
        self.low_ranked += len(out)
        return out

    def _run_group(self, update: LocalSGD, data: ArrayDataset, batch: ClientBatch,
                   hp: LocalHParams, fold: DeltaFold | None = None,
                   positions: Sequence[int] | np.ndarray = ()) -> ClientResults:
        """Train one group of equal shapes stacked: its results as arrays (or folded)."""
        index, weight, offsets, steps = stacked_schedule(batch.indices, batch.seeds, hp)
        fused = self._fuses(update)
        low_rank = self._low_rank(update, batch, hp, steps, int(offsets[-1])) if fused else {}
        carry, contexts = self._group_carry(update, batch, hp, fused, low_rank)
        dtype = next(iter(carry.params.values())).dtype  # the model's: weights, loss sums
        loss_sum = torch.zeros(len(batch), dtype=dtype, device=self.device)
        try:
            with forked_rng(self.device), float32_arithmetic(hp.precision):
                torch.manual_seed(int(batch.seeds[0]))
                update.model.train()
                carry = self._steps(update, data, carry, steps, index, weight, offsets,
                                    batch.seeds, fused, low_rank, loss_sum)
        except Exception as exc:
            ids = ", ".join(map(str, batch.clients.tolist()))
            raise ClientError(f"batched clients {ids} failed: {exc}") from exc
        sums = loss_sum.cpu().numpy().astype(np.float64)  # one read of the device per call
        with np.errstate(invalid="ignore", divide="ignore"):
            losses = np.where(steps > 0, sums / np.maximum(steps, 1), np.nan)
        states = _states_of(update)
        if type(update).client_final is ClientUpdate.client_final or states:
            # the default final step's Δ = start − end for the whole stack at once (one
            # subtraction per tensor), folded on the stack or kept as the results' stack;
            # a rule whose final step only adds its state gives every state from the stack
            deltas = _stacked_deltas(batch, carry, self.device, low_rank,
                                     in_place=not update.state_reads_end)
            # each client's Δ contiguous (column-major stacks back to rows: one pass), for the
            # results or a rule's states; a fold reads the stack as it lies
            rows = (_rows({k: v.dense() if isinstance(v, LowRankDelta) else v
                           for k, v in deltas.items()}) if fold is None or states else None)
            states = update.stacked_states(batch, carry, rows, steps) if states else batch.states
            if fold is not None:  # the Δ folded, the new states written to the store
                fold.add(positions, deltas)
                states = fold.take_states(positions, states)
            deltas = rows if fold is None else None
            return ClientResults(batch.clients, batch.num_samples, steps, losses, deltas,
                                 carry.buffers, states)
        results = self._own_final(update, batch, carry, contexts, steps, sums)
        for r in results:  # a rule's own final step: its results' tensors are checked
            device_guard.check(r.delta, self.device, f"{type(update).__name__}.client_final")
        if fold is not None:
            results = fold.add_results(positions, results)
        return ClientResults.from_list(results)

    def _group_carry(self, update: LocalSGD, batch: ClientBatch, hp: LocalHParams,
                     fused: bool, low_rank: dict[str, LowRankWeight]
                     ) -> tuple[Carry, list[dict[str, Params]]]:
        """The group's stacked carry (its own parameters) and each client's rule context."""
        cols = column_major(update.model) if self.device.type == "cpu" else frozenset()
        stacked = {k: (low_rank[k].start if k in low_rank else _stack_starts(batch, k, self.device,
                                                                            k in cols))
                   for k in batch.starts[0]}
        contexts: list[dict[str, Params]] = []
        ctx: dict[str, Params] = {}
        if type(update).context is not LocalSGD.context:  # the rule's, stacked or per client
            whole = update.stacked_context(batch, self.device)
            if whole is not None:
                ctx = {name: {k: _layout_stack(v, k in cols) for k, v in tree.items()}
                       for name, tree in whole.items()}
            else:
                contexts = [update.context(t) for t in batch.tasks()]
                ctx = {name: {k: _stack([c[name][k] for c in contexts], self.device, k in cols)
                              for k in contexts[0][name]} for name in contexts[0]}
        buffers = _stack_buffers(batch, self.device)
        # steps taken in place (the group owns its parameters), unless compiled
        params, start = stacked, stacked
        if fused and type(update).objective is LocalSGD.objective and not update.drifts:
            start = {}  # the default loss never reads the start: the stack is the parameters
        elif all(batch.one_start(k) for k in stacked):
            # one start for all (FedAvg's global model): one unstacked copy, which vmap
            # passes to every client (and the layers read with one GEMM), in the stack's
            # layout (an elementwise pass over both, as FedProx's w − w_start, is unit-stride)
            start = {k: _layout(v.detach().to(self.device), k in cols)
                     for k, v in batch.starts[0].items()}
        elif fused:
            params = {k: v.clone() for k, v in stacked.items()}
        lr = hp.lr if batch.lr is None else batch.lr
        return Carry(start=start, params=params, lr=lr, ctx=ctx, buffers=buffers,
                     batch_dims=1), contexts

    def _steps(self, update: LocalSGD, data: ArrayDataset, carry: Carry, steps: np.ndarray,
               index: np.ndarray, weight: np.ndarray, offsets: np.ndarray, seeds: np.ndarray,
               fused: bool, low_rank: dict[str, LowRankWeight], loss_sum: torch.Tensor) -> Carry:
        """Every local step of the group (replayed, fused or the rule's own); the final carry."""
        batches = self._schedule(data, index, weight, offsets, loss_sum.dtype)  # one upload
        active_steps = torch.as_tensor(steps[None, :] > np.arange(len(batches))[:, None],
                                       device=self.device)
        all_keys = step_keys(seeds, range(len(batches)), self.device)
        # low-rank weights change their factors, not their tensors: not recorded
        replay_key = (self.replay.group_key(update, carry, fused)
                      if not low_rank and self.compile == "off" else None)
        if fused:
            eager = functools.partial(_plain_sgd_step, low_rank=low_rank)
        else:  # the rule's own step, its parameters and state updated in place
            eager = functools.partial(_rule_step, gradients=self._gradient_fn())
            if replay_key is not None and any(v is carry.start.get(k)
                                              for k, v in carry.params.items()):
                carry.params = {k: v.clone() for k, v in carry.params.items()}
        for s, (idx, w) in enumerate(batches):
            x, y = data.batch(idx, self.device)
            finishing = s >= steps.min()  # some client's schedule has ended
            keys = all_keys[s]
            if (fused or replay_key is not None) and not finishing:
                loss_sum += self.replay.step(replay_key, update, carry, x, y, w, keys,
                                             eager).detach()
                continue
            # BatchNorm updates buffers in place: keep a copy only when it is needed
            old_buffers = {k: v.clone() for k, v in carry.buffers.items()} if finishing else {}
            grads, losses = self._gradient_fn()(update, carry, x, y, w, keys)
            old = carry.params
            # copies: a rule's descend may update its optimiser state in place
            old_opt = ({name: {k: v.clone() for k, v in tree.items()}
                        for name, tree in carry.opt.items() if isinstance(tree, dict)}
                       if finishing else {})
            carry = update.take_step(carry, grads, 0.0)
            if finishing:  # finished clients keep params, buffers, moments
                active = active_steps[s]
                carry.params = keep_where(active, carry.params, old)
                carry.buffers = keep_where(active, carry.buffers, old_buffers)
                for name, before in old_opt.items():
                    carry.opt[name] = keep_where(active, carry.opt[name], before)
            loss_sum += losses.detach()
        return carry

    def _own_final(self, update: LocalSGD, batch: ClientBatch, carry: Carry,
                   contexts: list[dict[str, Params]], steps: np.ndarray,
                   sums: np.ndarray) -> list[ClientResult]:
        """A rule's own final step, client by client (its contract is per client)."""
        # column-major stacks back to each client's own layout (results are contiguous)
        params = _rows(carry.params)
        opt = {name: _rows(tree) for name, tree in carry.opt.items() if isinstance(tree, dict)}
        tasks = batch.tasks()
        if not contexts:  # the rule's stacked context (or none): each client's rows
            ctx = {name: _rows(tree) for name, tree in carry.ctx.items()}
            contexts = [{name: {k: v[c] for k, v in tree.items()} for name, tree in ctx.items()}
                        for c in range(len(tasks))]
        return [update.client_final(t, Carry(  # the start is each task's own
                    start={k: v.detach().to(self.device) for k, v in t.params.items()},
                    params={k: params[k][c] for k in params}, lr=carry.lr, state=t.state,
                    step=int(steps[c]), loss_sum=float(sums[c]), ctx=contexts[c],
                    buffers={k: v[c] for k, v in carry.buffers.items()},
                    opt={name: {k: v[c] for k, v in tree.items()} for name, tree in opt.items()},
                    seed=t.seed))
                for c, t in enumerate(tasks)]

    def _schedule(self, data: ArrayDataset, index: np.ndarray, weight: np.ndarray,
                  offsets: np.ndarray, dtype: torch.dtype
                  ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every step's sample indices and loss weights, per step (of :func:`stacked_schedule`).

        Built on the host and moved to the devices in one transfer each (the indices to the
        dataset's, the weights to the compute device), then viewed per step: the step loop
        itself sends nothing to the device. The weights take ``dtype``, the model's.
        """
        idx = torch.as_tensor(index, device=data.x.device)
        w = torch.as_tensor(weight, dtype=dtype, device=self.device)
        return [(idx[:, offsets[s]:offsets[s + 1]], w[:, offsets[s]:offsets[s + 1]])
                for s in range(len(offsets) - 1)]

    @staticmethod
    def _gradients(update: LocalSGD, carry: Carry, x: torch.Tensor, y: torch.Tensor,
                   w: torch.Tensor, keys: torch.Tensor, fused: bool = False,
                   shared: frozenset[str] = frozenset()) -> tuple[Params, torch.Tensor]:
        """Per-client gradients of the rule's loss (decay and correction applied), data losses.

        ``fused``: plain SGD inside :func:`~wirelessfl.models.layers.sgd_in_backward`, the
        raw gradients, None for the weights already stepped. ``shared``: parameters held as
        one tensor for every client (the starts of low-rank weights), not stacked.
        """
        stacked = {k: v.detach().requires_grad_(True) for k, v in carry.params.items()}
        dims = {k: None if k in shared else 0 for k in stacked}

        def client_loss(p: Params, s: Params, xb: torch.Tensor, yb: torch.Tensor,
                        wb: torch.Tensor, c: dict[str, Params], b: Params, key: torch.Tensor):
            with client_noise(key):  # each client's own dropout stream, as in the loop
                return update.objective(p, b, s, xb, yb, wb, c)  # b updated in place

        # a start of lower rank than the parameters is one tensor for every client (unstacked)
        one_start = any(v.dim() < carry.params[k].dim() for k, v in carry.start.items())
        with update.autocast(x.device.type):
            total, losses = vmap(client_loss, in_dims=(dims, None if one_start else 0, 0, 0, 0, 0,
                                                       0, 0),
                                 randomness="different")(
                stacked, carry.start, x, y, w, carry.ctx, carry.buffers, keys)
        if fused:
            return dict(zip(stacked, torch.autograd.grad(total.sum(), list(stacked.values()),
                                                         allow_unused=True))), losses
        grads = update.unscaled_gradients(carry, total, stacked)
        return update.finish_gradients(grads, carry.params, carry.start, carry.ctx), losses


def _plain_sgd_step(update: LocalSGD, carry: Carry, x: torch.Tensor, y: torch.Tensor,
                    w: torch.Tensor, keys: torch.Tensor,
                    low_rank: dict[str, LowRankWeight] | None = None) -> torch.Tensor:
    """One step of :attr:`LocalSGD.plain_sgd` on the stacked clients, in place; data losses.

    Stacked linear weights step inside the backward pass
    (:func:`~wirelessfl.models.layers.sgd_in_backward`), the other parameters after it; the
    rule's :meth:`~wirelessfl.engine.local_sgd.LocalSGD.drift_step`, if it :attr:`drifts
    <wirelessfl.engine.local_sgd.LocalSGD.drifts>`, just before each gradient step. The weights
    of ``low_rank`` (kept as a shared start and their steps' factors,
    :mod:`wirelessfl.models.lowrank`) record their step in the backward pass.
    """
    drift = (functools.partial(update.drift_step, start=carry.start, ctx=carry.ctx, lr=carry.lr)
             if update.drifts else None)
    low_rank = low_rank or {}
    with sgd_in_backward(carry.params, carry.lr, drift, low_rank) as stepped:
        grads, losses = BatchedExecutor._gradients(update, carry, x, y, w, keys, fused=True,
                                                   shared=frozenset(low_rank))
    for k, g in grads.items():
        if k in stepped:
            continue
        if drift is not None:
            drift(k, carry.params[k])
        if g is not None:  # None: a parameter the loss does not use
            carry.params[k].add_(g, alpha=-carry.lr)
    carry.step += 1
    return losses


def _rule_step(update: LocalSGD, carry: Carry, x: torch.Tensor, y: torch.Tensor,
               w: torch.Tensor, keys: torch.Tensor, gradients: Any) -> torch.Tensor:
    """A rule's own step on the stacked clients (its gradients, then ``take_step``); data losses.

    The new parameters and optimiser state are written over the old tensors, so the step
    updates its operands in place as a replayed one does (:mod:`wirelessfl.engine.replay`).
    """
    params = carry.params
    opt = {name: dict(tree) for name, tree in carry.opt.items()}
    grads, losses = gradients(update, carry, x, y, w, keys)
    update.take_step(carry, grads, 0.0)
    for old, new in ((params, carry.params),
                     *((opt[name], carry.opt[name]) for name in opt if name in carry.opt)):
        for k, v in new.items():
            if old.get(k) is not None and old[k] is not v:
                old[k].copy_(v)
                new[k] = old[k]
    carry.params = params
    return losses


def _stacked_bytes(tree: Params, factored: Mapping[str, int]) -> int:
    """A client's bytes of ``tree`` stacked.

    A ``factored`` weight (out × in, R rows of factors) counts as its factors' R · (out + in)
    numbers (:mod:`wirelessfl.models.lowrank`).
    """
    return sum(v.element_size() * (factored[k] * sum(v.shape) if k in factored else v.numel())
               for k, v in tree.items())


def _stacked_deltas(batch: ClientBatch, carry: Carry, device: torch.device,
                    low_rank: dict[str, LowRankWeight] | None = None, in_place: bool = True
                    ) -> dict[str, torch.Tensor | LowRankDelta]:
    """Every client's Δ = start − end, written over ``carry.params`` (for a :class:`DeltaFold`).

    The group's stacked parameters are its own and read no more, so Δ takes their memory
    and layout (no new stack); ``in_place`` False keeps them (a rule's states read them).
    The start is the carry's stacked one, or, where the group trained its starts in place,
    the batch's own: one broadcast tensor when they all share it (FedAvg's global model), in
    the stack's layout. A weight of ``low_rank`` gives its
    factored Δ (:class:`~wirelessfl.models.lowrank.LowRankDelta`).
    """
    out: dict[str, torch.Tensor | LowRankDelta] = {}
    for k, end in carry.params.items():
        if low_rank and k in low_rank:
            out[k] = low_rank[k].delta()
            continue
        if k in carry.start:
            start = carry.start[k]
        elif batch.one_start(k):
            start = batch.starts[0][k].detach().to(device)
            if start.dim() == 2 and end.stride(-2) == 1:  # column-major: read as it lies
                start = _layout(start, True)
        else:
            start = _stack_starts(batch, k, device, end.dim() == 3 and end.stride(-2) == 1)
        out[k] = torch.sub(start, end, out=end) if in_place else start - end
    return out


def _states_of(update: LocalSGD) -> bool:
    """Whether ``update`` gives its clients' new states from the stack (:meth:`LocalSGD.stacked_states`)."""
    return type(update).stacked_states is not LocalSGD.stacked_states


def _layout_stack(v: torch.Tensor, column: bool) -> torch.Tensor:
    """A stack ``(C, …)`` laid out as :func:`_stack` lays one (``column``: 2-D rows column-major)."""
    if column and v.dim() == 3:
        return v.transpose(1, 2).contiguous().transpose(1, 2)
    return v.contiguous()


def _stack_starts(batch: ClientBatch, k: str, device: torch.device, column: bool) -> torch.Tensor:
    """Parameter ``k`` of every client's start, stacked (a tensor the group owns).

    Each of the K distinct starts is laid out once (column-major when ``column``) and
    the clients take theirs by one index: FedAvg's one start is one broadcast copy,
    HFedAvg's N cells one gather.
    """
    if isinstance(batch.starts, RowStack):  # stacked already: laid out once, no Python per start
        laid = _layout_stack(batch.starts.tree[k].detach().to(device), column)
        return _gathered(laid, batch.start_index, column)
    distinct = [s[k] for s in batch.starts]
    if batch.one_start(k):
        distinct = distinct[:1]
    if len(distinct) == 1:  # one copy per client of the one start, laid out once
        t = distinct[0].detach()
        column = column and t.dim() == 2
        one = t.t() if column else t
        out = torch.empty((len(batch), *one.shape), dtype=one.dtype, device=device)
        out.copy_(one.unsqueeze(0))  # a copy of its own, even of one client
        return out.transpose(1, 2) if column else out
    return _gathered(_stack(distinct, device, column), batch.start_index, column)


def _gathered(laid: torch.Tensor, start_index: np.ndarray, column: bool) -> torch.Tensor:
    """Each client's row of the K starts ``laid`` ``(K, …)`` (in the stack's layout): a copy."""
    index = torch.as_tensor(start_index, device=laid.device)
    if column and laid.dim() == 3:  # gather the (K, in, out) storage, view it back
        return laid.transpose(1, 2).index_select(0, index).transpose(1, 2)
    return laid.index_select(0, index)


def _stack_buffers(batch: ClientBatch, device: torch.device) -> Params:
    """The clients' buffers stacked (each client its own copy: BatchNorm updates them)."""
    if not batch.buffers:
        return {}
    if isinstance(batch.buffers, list):
        return {k: torch.stack([b[k].detach() for b in batch.buffers]).to(device)
                for k in batch.buffers[0]}
    return {k: torch.empty((len(batch), *v.shape), dtype=v.dtype, device=device).copy_(
                v.detach().unsqueeze(0)) for k, v in batch.buffers.items()}


def _runs(tensors: list[torch.Tensor]) -> list[tuple[torch.Tensor, int]]:
    """``tensors`` as runs of one tensor repeated (by identity).

    HIST's cells hand each client of a cell the cell's own start: one tensor for the run of
    the cell's clients.
    """
    runs: list[list] = []
    for t in tensors:
        if runs and runs[-1][0] is t:
            runs[-1][1] += 1
        else:
            runs.append([t, 1])
    return [(t, n) for t, n in runs]


def _stack(tensors: list[torch.Tensor], device: torch.device, column: bool) -> torch.Tensor:
    """The clients' tensors stacked on ``device`` (detached); ``column``: 2-D ones column-major.

    Column-major (:func:`~wirelessfl.models.layers.column_major`): stored as ``(clients, in,
    out)``, returned as its ``(clients, out, in)`` view. Elementwise updates keep the layout.
    Each distinct tensor is transposed once: clients that share a start (FedAvg's global
    model) share that copy, so pass the tasks' own tensors, not one ``detach()`` each.
    """
    runs = _runs(tensors)
    if column and tensors[0].dim() == 2:
        once: dict[int, torch.Tensor] = {}
        for t, _ in runs:
            if id(t) not in once:
                once[id(t)] = t.detach().t().contiguous()
        parts = [(once[id(t)], n) for t, n in runs]
    else:
        parts = [(t.detach(), n) for t, n in runs]
    if len(parts) == len(tensors):  # every client its own tensor
        out = torch.stack([t for t, _ in parts])
    else:  # a run of clients sharing one tensor is one broadcast copy, not one per client
        out = torch.cat([t.unsqueeze(0).expand(n, *t.shape) for t, n in parts])
    out = out.to(device)
    return out.transpose(1, 2) if column and tensors[0].dim() == 2 else out


def _layout(t: torch.Tensor, column: bool) -> torch.Tensor:
    """One client's ``t`` as a stacked one of :func:`_stack` lies: ``column``: 2-D column-major."""
    return t.t().contiguous().t() if column and t.dim() == 2 else t


def _rows(tree: Params) -> Params:
    """``tree`` with every tensor contiguous (column-major stacks copied back to rows)."""
    return {k: v.contiguous() for k, v in tree.items()}


def retain_freed_memory(threshold: int = 1 << 30) -> bool:
    """Let glibc's ``malloc`` keep freed blocks up to ``threshold`` bytes for reuse.

    Stacked clients allocate tens of megabytes per tensor and step. By default glibc serves
    such blocks with ``mmap`` and returns them to the system on ``free``, so every step
    page-faults its tensors in again: measured on 60 stacked FCNN clients, an update
    ``W - γ g`` took 52 ms this way and 16 ms with the blocks kept (the same effect as the
    jemalloc/tcmalloc advice of PyTorch's CPU performance guide). Process-wide; a no-op
    (returns ``False``) where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold)
                     and libc.mallopt(_M_TRIM_THRESHOLD, 2 * threshold))
    except (OSError, AttributeError):
        return False


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>


