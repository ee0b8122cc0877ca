"""Recorded stacked SGD steps, replayed as one graph of tensor operations.

A batched step of plain local SGD (:class:`~wirelessfl.engine.batched.BatchedExecutor`'s fused
path) is the same tensor operations every time for a given shape: the stacked forward pass,
the backward pass and the in-place update. Running it from Python costs more than those
operations on small models: ``vmap``'s wrapping of every operand, the module calls,
autograd's graph, the dispatcher's per-operator work. On 2 CPU cores that was about 1.1 ms of
a 7.3 ms step of 30 stacked FCNN clients.

:class:`StepReplay` records one step with ``make_fx`` (the ATen operations the step ran,
in order, including the in-place updates of the stacked parameters and the dropout masks'
operator) and runs later steps of the same shape as that graph, written out as a plain
Python function that calls each operator's dispatcher entry directly (:func:`_lean`): about
80 Python calls a step for the stacked FCNN, where the traced module itself made 209 (its
argument flattening and one wrapper call per operator). The graph calls the same
kernels on the same operands in the same order, so the numbers are those of the eager step
bit for bit: the first replay of each recording is checked against the eager step on a
copy of the parameters, and a recording that differs is dropped (the step stays eager).

What it records: the fused plain-SGD step of any rule whose loss and drift read only the
stacked parameters, the start, the rule's context
(:meth:`~wirelessfl.engine.local_sgd.LocalSGD.context`) and the batch: FedAvg's default
objective, FedProx's and SCAFFOLD's drift steps, MOON's contrastive objective (no buffers, no
optimiser state, float32); and a rule's own step (its gradients, then its
:meth:`~wirelessfl.engine.local_sgd.LocalSGD.take_step`) with optimiser state when it is
:attr:`~wirelessfl.engine.local_sgd.LocalSGD.stationary_step`, such as FAdamGC's tracked Adam
or momentum SGD (not a local Adam, whose bias correction reads the step count): the state is
an operand the graph updates in place (the parameters too: new ones are written over the old),
and the first step of a round, which makes the state, stays eager. The start and the context
are inputs of the graph; the model, the step size, the rule's settings (its scalar attributes,
such as μ and τ), the optimiser state's names and the shapes, strides and types of the
operands are its key. ``mode``:

- ``auto`` (default): a key is recorded once it recurs, used in an earlier
  :meth:`StepReplay.begin_run` than the current one and at least :data:`RECORD_AFTER` times,
  for rules from ``wirelessfl`` and models built from ``wirelessfl``'s and ``torch.nn``'s
  modules (:data:`RECORD_AFTER_GPU` times on a GPU). A recording costs 0.35-2.9 s (FCNN;
  the first in a process the most); a short run never pays it, nor does a run whose step
  size changes every round (a new key each round).
- ``on``: every eligible step is recorded at its key's first use, for any rule and model (a
  rule or model whose step branches on tensor values must not use it: the branch taken when
  recording is replayed; the check on the first replay catches a difference on that step only).
- ``off``: always eager.

On a GPU, a checked recording is also captured as a CUDA graph (``torch.cuda.CUDAGraph``)
and replayed with one launch per step instead of one per operator (a stacked FCNN step made
about 85 launches). A CUDA graph is bound to the addresses of its operands: the batch, its
weights and noise keys are copied into the graph's own input buffers each step, and a group
whose stacked parameters (or start, or context) live elsewhere captures the recording
again (once per group: a round's chunk). The first CUDA-graph step of each recording is
checked against the recorded graph on a copy of the parameters, bit for bit, and a capture
that fails or differs leaves that recording on the recorded graph (``graphs=False``: never
captured).
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from wirelessfl.engine.client import Carry, LocalSGD, forked_rng

REPLAY_MODES = ("auto", "on", "off")
#: Uses of a key before ``auto`` records it (and one earlier run). A recording costs 0.35 s
#: (FCNN, 30 stacked clients), the first in a process 1.2-2.9 s (the tracer's imports and
#: warm-up), and a replayed step saves about 2 ms: it pays after 200-1,400 steps, so
#: ``auto`` waits for 500 (a run that has taken that many is likely to take as many more).
RECORD_AFTER = 500
#: The same on a GPU, where a step is bound by its ~85 kernel launches and a replayed CUDA
#: graph launches once: a recording pays for itself within a few steps.
RECORD_AFTER_GPU = 20
#: Recordings kept per :class:`StepReplay` (least recently used dropped first).
MAX_RECORDINGS = 16

Step = Callable[[LocalSGD, Carry, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                torch.Tensor]


@dataclass(eq=False)
class _Entry:
    """One key's record: its uses, the run it was first used in, its graph and whether checked."""

    first_run: int
    model: weakref.ref
    uses: int = 0
    graph: Any = None
    checked: bool = False
    failed: bool = False
    cuda: _Captured | None = None   # the recording captured as a CUDA graph, for one group
    cuda_checked: bool = False
    cuda_failed: bool = False


@dataclass(eq=False)
class _Captured:
    """A recording captured as a CUDA graph: its input buffers, output and operand addresses."""

    graph: Any
    inputs: list[torch.Tensor]
    losses: torch.Tensor
    addresses: tuple[int, ...]


def _capture(graph: Any, params: list[torch.Tensor], given: list[torch.Tensor],
             batch: list[torch.Tensor], addresses: tuple[int, ...]) -> _Captured:
    """``graph`` on ``params``/``given`` and copies of ``batch``, captured as a CUDA graph.

    Warmed up first on a side stream on copies of the parameters (library handles and
    workspaces are made outside the capture), as PyTorch's CUDA-graph notes ask.
    """
    inputs = [t.clone() for t in batch]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        copies = [_twin(v) for v in params]
        for _ in range(2):
            graph(copies, given, *inputs)
    torch.cuda.current_stream().wait_stream(side)
    cuda_graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(cuda_graph):
        losses = graph(params, given, *inputs)
    return _Captured(cuda_graph, inputs, losses, addresses)


def _meta(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.dtype, t.device


def _twin(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its strides (column-major stacks stay column-major)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def library_model(model: torch.nn.Module) -> bool:
    """Whether every module of ``model`` comes from ``wirelessfl`` or ``torch.nn``."""
    return all(type(m).__module__.startswith(("wirelessfl.", "torch.nn."))
               for m in model.modules())


def _given(carry: Carry) -> list[torch.Tensor]:
    """The step's read-only inputs besides the batch: the start, then the context, in order."""
    return list(itertools.chain(carry.start.values(), *[t.values() for t in carry.ctx.values()]))


def _mutable(carry: Carry) -> list[torch.Tensor]:
    """The operands a step updates in place: the parameters, then the optimiser state."""
    return list(itertools.chain(carry.params.values(), *[t.values() for t in carry.opt.values()]))


def _settings(update: LocalSGD) -> tuple:
    """The rule's scalar attributes (μ, τ, β, flags): constants of a recorded graph."""
    return tuple(sorted((k, v) for k, v in vars(update).items()
                        if v is None or isinstance(v, (bool, int, float, str))))


class StepReplay:
    """Records eligible stacked steps and replays them (module docstring).

    Parameters
    ----------
    mode : {"auto", "on", "off"}
        When to record.
    graphs : bool
        On a GPU, replay checked recordings as CUDA graphs (default True).
    """

    def __init__(self, mode: str = "auto", graphs: bool = True) -> None:
        if mode not in REPLAY_MODES:
            raise ValueError(f"replay mode must be one of {', '.join(REPLAY_MODES)}, got {mode!r}")
        if not isinstance(graphs, bool):
            raise TypeError(f"graphs must be True or False, got {graphs!r}")
        self.mode = mode
        self.graphs = graphs
        self.captures = 0  # CUDA graphs captured (one per recording and group)
        self.runs = 0
        self.replayed = 0  # steps run as a recorded graph (checks on copies not counted)
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()

    def __repr__(self) -> str:
        return (f"StepReplay(mode={self.mode!r}, recordings={self.recordings}, "
                f"replayed={self.replayed}, captures={self.captures})")

    @property
    def recordings(self) -> int:
        """Recorded graphs held now (checked or not)."""
        return sum(e.graph is not None for e in self._entries.values())

    def begin_run(self) -> None:
        """Mark the start of an executor run (a round's training): ``auto`` waits for recurrence."""
        self.runs += 1

    def group_key(self, update: LocalSGD, carry: Carry, fused: bool = True) -> tuple | None:
        """The part of a step's key fixed for a group, or None if its steps are not recorded.

        Eligible: a step on stacked parameters with no buffers, its floating tensors in
        float32 (``auto``: a rule
        from ``wirelessfl`` and a model of library modules). ``fused``: the fused plain-SGD
        step (:attr:`~wirelessfl.engine.local_sgd.LocalSGD.plain_sgd`), with no optimiser
        state; otherwise a rule's own step (its gradients, then
        :meth:`~wirelessfl.engine.local_sgd.LocalSGD.take_step`) when it is
        :attr:`~wirelessfl.engine.local_sgd.LocalSGD.stationary_step`, whose optimiser state
        (FAdamGC's moments, a momentum buffer) is an operand the graph updates in place, with
        its names in the step's key (the first step, which makes the state, stays eager).
        """
        if self.mode == "off" or carry.buffers or "amp" in carry.opt or (fused and carry.opt) \
                or not (update.plain_sgd if fused else update.stationary_step):
            return None
        model = update.model
        if self.mode == "auto" and not (type(update).__module__.startswith("wirelessfl.")
                                        and library_model(model)):
            return None
        trees = (carry.params, carry.start, *carry.ctx.values())
        if any(v.dtype != torch.float32 and v.is_floating_point()  # integer operands may
               for tree in trees for v in tree.values()):               # (a rule's counts)
            return None
        return (id(update), id(model), model.training, float(carry.lr), _settings(update), fused,
                tuple((k, _meta(v)) for k, v in carry.params.items()),
                tuple((k, _meta(v)) for k, v in carry.start.items()),
                tuple((name, tuple((k, _meta(v)) for k, v in tree.items()))
                      for name, tree in carry.ctx.items()))

    def step(self, key: tuple | None, update: LocalSGD, carry: Carry, x: torch.Tensor,
             y: torch.Tensor, w: torch.Tensor, keys: torch.Tensor, eager: Step) -> torch.Tensor:
        """One step, ``eager(update, carry, x, y, w, keys)`` or its recorded graph; the losses.

        ``key`` is :meth:`group_key` (None: eager). Updates ``carry.params`` (and a rule's
        optimiser state) in place and counts ``carry.step`` either way: ``eager`` must do
        the same (:func:`wirelessfl.engine.batched._rule_step` for a rule's own step).
        """
        if key is None:
            return eager(update, carry, x, y, w, keys)
        key = key + (_meta(x), _meta(y), _meta(w), _meta(keys))
        if carry.opt:  # a rule's own step: its state's names (made by its first step)
            key = key + (tuple(zip(carry.opt, map(tuple, carry.opt.values()))),)
        entry = self._entries.get(key)
        if entry is None or entry.model() is not update.model:
            entry = self._entries[key] = _Entry(first_run=self.runs, model=weakref.ref(update.model))
            while len(self._entries) > MAX_RECORDINGS:
                self._entries.popitem(last=False)
        self._entries.move_to_end(key)
        entry.uses += 1
        if entry.failed:
            return eager(update, carry, x, y, w, keys)
        if entry.graph is None:
            after = RECORD_AFTER_GPU if x.is_cuda else RECORD_AFTER
            due = self.mode == "on" or (entry.uses >= after and entry.first_run < self.runs)
            if due:
                entry.graph = self._record(update, carry, x, y, w, keys, eager)
                entry.failed = entry.graph is None
            return eager(update, carry, x, y, w, keys)
        params, given = _mutable(carry), _given(carry)
        if not entry.checked:  # the first replay, on a copy, against the eager step
            copies = [_twin(v) for v in params]
            with forked_rng(x.device):
                replayed = entry.graph(copies, given, x, y, w, keys)
            losses = eager(update, carry, x, y, w, keys)
            same = torch.equal(replayed, losses) and all(
                torch.equal(c, v) for c, v in zip(copies, params))
            entry.checked, entry.failed = True, not same
            if not same:
                entry.graph = None
            return losses
        losses = None
        if self.graphs and x.is_cuda and not entry.cuda_failed:
            losses = self._cuda_step(entry, params, given, [x, y, w, keys])
        if losses is None:
            with torch.no_grad():
                losses = entry.graph(params, given, x, y, w, keys)
        carry.step += 1
        self.replayed += 1
        return losses

    def _cuda_step(self, entry: _Entry, params: list[torch.Tensor], given: list[torch.Tensor],
                   batch: list[torch.Tensor]) -> torch.Tensor | None:
        """One step as ``entry``'s CUDA graph, captured for these operands if need be.

        None: the recorded graph takes the step instead (the capture failed or differed).
        """
        addresses = tuple(t.data_ptr() for t in (*params, *given))
        captured = entry.cuda
        if captured is None or captured.addresses != addresses:
            entry.cuda = None  # the last group's graph and its memory go first
            try:
                captured = entry.cuda = _capture(entry.graph, params, given, batch, addresses)
                self.captures += 1
            except Exception:  # noqa: BLE001 - anything the capture refuses: the recorded graph
                entry.cuda_failed = True
                return None
        for buf, t in zip(captured.inputs, batch):
            buf.copy_(t)
        if entry.cuda_checked:
            captured.graph.replay()
            return captured.losses.clone()
        # the first CUDA-graph step of this recording: against the recorded graph, bit for bit
        before = [_twin(v) for v in params]
        captured.graph.replay()
        got = captured.losses.clone()
        with torch.no_grad():
            want = entry.graph(before, given, *batch)
        same = torch.equal(got, want) and all(torch.equal(a, b) for a, b in zip(params, before))
        entry.cuda_checked, entry.cuda_failed = True, not same
        if not same:  # keep the recorded graph's step
            for v, b in zip(params, before):
                v.copy_(b)
            entry.cuda = None
            return want
        return got

    @staticmethod
    def _record(update: LocalSGD, carry: Carry, x: torch.Tensor, y: torch.Tensor,
                w: torch.Tensor, keys: torch.Tensor, eager: Step) -> Any:
        """The graph of one eager step, traced on copies of the parameters (None if it fails)."""
        from torch.fx.experimental.proxy_tensor import make_fx

        names = list(carry.params)
        start_names = list(carry.start)
        ctx_names = [(name, list(tree)) for name, tree in carry.ctx.items()]
        opt_names = [(name, list(tree)) for name, tree in carry.opt.items()]

        def one_step(params: list[torch.Tensor], given: list[torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor, w: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
            rest, state = iter(given), iter(params[len(names):])
            start = {k: next(rest) for k in start_names}
            ctx = {name: {k: next(rest) for k in ks} for name, ks in ctx_names}
            opt = {name: {k: next(state) for k in ks} for name, ks in opt_names}
            shadow = Carry(start=start, params=dict(zip(names, params)), lr=carry.lr,
                           ctx=ctx, opt=opt, batch_dims=carry.batch_dims)
            losses = eager(update, shadow, x, y, w, keys)
            if [(n, list(t)) for n, t in shadow.opt.items()] != opt_names:
                raise ValueError("the step changed its optimiser state's structure")
            return losses

        copies = [_twin(v) for v in _mutable(carry)]
        try:
            with forked_rng(x.device):
                traced = make_fx(one_step)(copies, _given(carry), x, y, w, keys)
            return _lean(traced, len(copies), len(_given(carry)))
        except Exception:  # noqa: BLE001 - anything the tracer cannot follow: stay eager
            return None


def _lean(traced: torch.fx.GraphModule, n_params: int, n_given: int) -> Step:
    """The traced step as a plain Python function, with the host work cut to the operators.

    The same operators on the same operands in the same order, with intermediates released
    after their last use, as the traced module runs them; only Python around them goes. Each
    operator is called through its dispatcher entry (``OpOverload._op``, what
    ``OpOverload.__call__`` calls: one Python call per operator, not two), and the operands
    are unpacked from their lists instead of being flattened by ``pytree`` each step. Called
    as the traced module is: ``(params, given, x, y, w, keys)``.
    """
    nodes = list(traced.graph.nodes)
    last: dict[Any, Any] = {}  # node -> the node after which it is no longer used
    for node in reversed(nodes):
        for used in node.all_input_nodes:
            last.setdefault(used, node)
    names = {node: f"v{i}" for i, node in enumerate(nodes)}
    env: dict[str, Any] = {}

    def show(a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            return names[a]
        if isinstance(a, (list, tuple)):
            inner = ", ".join(show(b) for b in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
        if a is None or type(a) in (bool, int):
            return repr(a)
        env[f"c{len(env)}"] = a  # floats (inf, nan), dtypes, devices, layouts: as themselves
        return f"c{len(env) - 1}"

    holders = [names[n] for n in nodes if n.op == "placeholder"]
    if len(holders) != n_params + n_given + 4:
        raise ValueError("the traced step's operands are not (params, given, x, y, w, keys)")
    body = []
    if n_params:
        body.append(f"({', '.join(holders[:n_params])},) = params")
    if n_given:
        body.append(f"({', '.join(holders[n_params:n_params + n_given])},) = given")
    for node in nodes:
        if node.op == "call_function":
            fn = node.target._op if isinstance(node.target, torch._ops.OpOverload) else node.target
            env[f"f{len(env)}"] = fn
            call = f"f{len(env) - 1}(" + ", ".join(
                [show(a) for a in node.args] + [f"{k}={show(v)}" for k, v in node.kwargs.items()])
            body.append(f"{names[node]} = {call})")
        elif node.op == "get_attr":
            env[f"c{len(env)}"] = getattr(traced, str(node.target))
            body.append(f"{names[node]} = c{len(env) - 1}")
        elif node.op == "output":
            out = node.args[0]
            spec = getattr(traced.graph._codegen, "pytree_info", None)
            spec = None if spec is None else spec.out_spec
            if spec is not None and spec.is_leaf() and isinstance(out, (list, tuple)) and len(out) == 1:
                out = out[0]
            elif spec is not None:
                env["unflatten"], env["out_spec"] = torch.utils._pytree.tree_unflatten, spec
                body.append(f"return unflatten({show(list(out))}, out_spec)")
                break
            body.append(f"return {show(out)}")
            break
        elif node.op != "placeholder":
            raise ValueError(f"a traced step with a {node.op} node is not replayed")
        done = [names[u] for u, at in last.items() if at is node and u.op != "get_attr"]
        if node.op == "call_function" and not node.users:  # an in-place op's alias, unused
            done.append(names[node])
        if done:
            body.append(" = ".join(done) + " = None")
    source = "def step(params, given, " + ", ".join(holders[-4:]) + "):\n    " + \
        "\n    ".join(body) + "\n"
    exec(compile(source, "<recorded step>", "exec"), env)  # noqa: S102 - code we wrote above
    step = env["step"]
    step.source = source  # type: ignore[attr-defined]
    return step
