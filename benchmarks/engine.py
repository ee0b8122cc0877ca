"""Client-engine benchmark: HIST's Fashion-MNIST workloads on each backend.

    python benchmarks/engine.py --json [--device cpu|cuda] [--rounds 2]
    python benchmarks/engine.py --rules --json     # local rules: FedProx, SCAFFOLD, MOON vs FedAvg
    python benchmarks/engine.py --resnet --device cuda --json   # ResNet-18, 100 clients, S = 10

Workloads (``docs/papers/hist.md`` §6): FCNN and LeNet-5, 60 clients (shards), H = 20, batch 50,
E = 5, as HIST with N = 4 (uniform masks) and as HFedAvg. For each backend (``loop``,
``batched``) it reports the seconds per global round (median over ``--rounds``), the
achieved GFLOP/s of the client steps (FLOPs of one round counted with
``torch.utils.flop_counter``), that rate as a share of the same machine's dense matmul rate
(``torch.mm`` on 2048 × 2048, float32; ``share_of_matmul`` against the rate measured once at
the start, ``share_of_matmul_paired`` the median over rounds of each round against the rate
measured just before it), and the share of a round (one test evaluation
included) spent outside client steps (masking, aggregation, solvers, channels, evaluation).
On a GPU each backend also reports its peak memory (``torch.cuda.max_memory_allocated``).

``--resnet``: the CIFAR ResNet-18 with GroupNorm on 3 × 32 × 32 inputs (random images: speed
does not depend on them), 100 clients of 500 samples, S = 10 per round, K = 10 steps of batch
64 (FedAvg), loop against batched (``--max-batch`` splits the stacked group into chunks),
with the same FLOP/s accounting as a share of the dense matmul rate.

``--over-the-air``: FedAvg on the FCNN with 60 clients, batched, with exact aggregation
against over-the-air aggregation (``network.aggregation: over_the_air``, M = 10, 30 dB, fast
beamforming): seconds per round of each, measured interleaved, and the overhead ratio.

``--replay off|on`` sets the batched engine's recorded steps (default ``auto``: a recurring
plain SGD step is recorded once and replayed, :mod:`wirelessfl.engine.replay`); each row
reports the steps replayed and the first round's seconds (which pay the recording).

``--placement host`` keeps the datasets in pinned host memory (each batch gathered there and
sent with an asynchronous copy) instead of on the device: the cost of data that does not fit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from wirelessfl.engine.client import evaluate
from wirelessfl.run.config import resolve
from wirelessfl.run.rounds import prepare

MODELS = ("fcnn", "lenet5")
#: The workloads' dataset and its folder (benchmarks/gpu_suite.py may point them elsewhere).
DATASET, DATA_DIR = "fashion_mnist", None
#: Clients, local steps and edge rounds of the workloads (gpu_suite.py --quick shrinks them).
CLIENTS, STEPS, EDGE_ROUNDS = 60, 20, 5
ALGOS = {"HIST N=4": {"cells": 4, "split": True}, "HFedAvg N=4": {"cells": 4, "split": False}}


def matmul_gflops(device: torch.device, n: int = 2048, repeats: int = 20) -> float:
    """Dense IEEE float32 matmul rate of this machine [GFLOP/s] (no TF32 on a GPU)."""
    from wirelessfl.engine.client import float32_arithmetic

    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    with float32_arithmetic("fp32"):
        torch.mm(a, b)
        _sync(device)
        t = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b)
        _sync(device)
        return 2 * n**3 * repeats / (time.perf_counter() - t) / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed_apply(exp, state):
    """One global round of ``exp`` from ``state``: the new state and its seconds (synced)."""
    _sync(exp.device)
    t = time.perf_counter()
    state, _ = exp.algorithm.apply(state)
    _sync(exp.device)
    return state, time.perf_counter() - t


class _Timed:
    """Wraps an executor and adds up the seconds spent in client steps."""

    def __init__(self, inner, device: torch.device) -> None:
        self.inner, self.device, self.seconds = inner, device, 0.0

    def _timed(self, call, *args, **kwargs):
        _sync(self.device)
        t = time.perf_counter()
        out = call(*args, **kwargs)
        _sync(self.device)
        self.seconds += time.perf_counter() - t
        return out

    def run(self, *args, **kwargs):
        return self._timed(self.inner.run, *args, **kwargs)

    def run_batch(self, *args, **kwargs):  # a round's path
        return self._timed(self.inner.run_batch, *args, **kwargs)


def _experiment(model: str, algo: dict, engine: str, device: str, placement: str = "auto",
                edge_rounds: int | None = None, precision: str = "fp32", compile: str = "off",
                replay: str = "auto"):
    algo = {**algo, "edge_rounds": edge_rounds or algo.get("edge_rounds", EDGE_ROUNDS)}
    return prepare(resolve({
        "seed": 0, "device": device, "engine": engine, "compile": compile, "replay": replay,
        "data": {"dataset": DATASET, "data_dir": DATA_DIR, "partition": "shards",
                 "num_clients": CLIENTS, "placement": placement},
        "model": {"name": model},
        "local": {"lr": 0.01, "batch_size": 50, "steps": STEPS, "precision": precision},
        "algorithm": {"name": "hist", **algo}}))


def round_flops(model: str, algo: dict, device: str) -> float:
    """FLOPs of the client steps of one global round (forward and backward).

    Counted on the loop engine over one edge round and multiplied by E: every edge round runs
    the same steps (FCNN HIST N=4: 71.91 GFLOP either way), at a fifth of the counting time.
    The batched engine is not counted: ``FlopCounterMode`` charges its grouped-convolution
    backward as if ungrouped (LeNet-5: 22x the loop's count for the same arithmetic).
    """
    exp = _experiment(model, algo, "loop", device, edge_rounds=1)
    with FlopCounterMode(display=False) as counter:
        exp.algorithm.apply(exp.initial_state())
    return float(counter.get_total_flops()) * algo.get("edge_rounds", EDGE_ROUNDS)


def _resnet_experiment(engine: str, device: str, max_batch: int | None = None,
                       placement: str = "auto"):
    """CIFAR ResNet-18 (GroupNorm), 100 clients, S = 10, K = 10 steps of batch 64."""
    import tempfile

    folder = Path(tempfile.mkdtemp()) / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{k}", 10000) for k in range(1, 6)] + [("test_batch", 1000)]:
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         b"labels": rng.integers(0, 10, n).tolist()}, fh)
    return prepare(resolve({
        "seed": 0, "device": device, "engine": engine, "max_batch": max_batch,
        "data": {"dataset": "cifar10", "data_dir": str(folder.parent), "partition": "iid",
                 "num_clients": 100, "placement": placement},
        "model": {"name": "resnet18"}, "local": {"lr": 0.01, "batch_size": 64, "steps": 10},
        "algorithm": {"name": "fedavg", "clients_per_round": 10}}))


def time_rounds(model: str, algo: dict, engine: str, device: str, rounds: int,
                exp=None, placement: str = "auto", warmup: int = 0,
                precision: str = "fp32", replay: str = "auto", matmul_n: int = 0) -> dict:
    """Seconds per global round (median of ``rounds``, after ``warmup`` untimed rounds).

    The batched engine's replayed steps (:mod:`wirelessfl.engine.replay`) are counted.
    ``matmul_n``: the matmul rate of that size is measured again just before each timed
    round (``matmul_gflops_rounds``), so that a round's FLOP/s can be set against the rate
    the machine gave at that moment (on a shared machine it drifted by ±15% within a run).
    """
    exp = exp or _experiment(model, algo, engine, device, placement, precision=precision,
                             replay=replay)
    timed = _Timed(exp.algorithm.env.executor, exp.device)
    exp.algorithm.env = dataclasses.replace(exp.algorithm.env, executor=timed)
    state, total, client, rates = exp.initial_state(), [], [], []
    for _ in range(warmup):
        state, _ = exp.algorithm.apply(state)
    if exp.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(exp.device)
    for _ in range(rounds):
        if matmul_n:
            rates.append(matmul_gflops(exp.device, n=matmul_n, repeats=5))
        before = timed.seconds
        _sync(exp.device)
        t = time.perf_counter()
        state, _ = exp.algorithm.apply(state)
        evaluate(exp.model, state.params, exp.splits.test, device=exp.device)
        _sync(exp.device)
        total.append(time.perf_counter() - t)
        client.append(timed.seconds - before)
    i = int(np.argsort(total)[len(total) // 2])
    out = {"seconds_per_round": total[i], "client_seconds": client[i],
           "outside_client_share": 1 - client[i] / total[i], "first_round_seconds": total[0]}
    if rates:
        out["client_seconds_rounds"], out["matmul_gflops_rounds"] = client, rates
    if hasattr(timed.inner, "replay"):
        out["replayed_steps"] = timed.inner.replay.replayed
    if exp.device.type == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated(exp.device) / 2**30
    return out


def resnet(device: str, rounds: int, max_batch: int | None, placement: str = "auto") -> dict:
    """ResNet-18, 100 clients, S = 10: loop against batched, FLOP/s against the matmul rate."""
    with FlopCounterMode(display=False) as counter:
        _resnet_experiment("loop", device).algorithm.apply(
            _resnet_experiment("loop", device).initial_state())
    flops = float(counter.get_total_flops())
    mm = matmul_gflops(torch.device(device))
    row = {"workload": "ResNet-18 GN, 100 clients, S=10, K=10, B=64", "gflop_per_round": flops / 1e9,
           "matmul_gflops": mm, "max_batch": max_batch, "placement": placement}
    for engine in ("loop", "batched"):
        r = time_rounds("", {}, engine, device, rounds,
                        exp=_resnet_experiment(engine, device, max_batch, placement))
        gflops = flops / r["client_seconds"] / 1e9
        row[engine] = {**r, "gflops": gflops, "share_of_matmul": gflops / mm}
    row["batched_speedup"] = row["loop"]["seconds_per_round"] / row["batched"]["seconds_per_round"]
    return row


def workloads(models, algos: dict, device: str, rounds: int, placement: str = "auto",
              backends=("loop", "batched"), warmup: int = 0, matmul_n: int = 2048,
              on_row=None, loop_once: bool = False, precision: str = "fp32",
              replay: str = "auto") -> dict:
    """Each model x workload on each backend: seconds, GFLOP/s and share of the matmul rate.

    ``loop_once`` times the loop over one round without warm-up (on a GPU a loop round of
    these workloads takes 13-25 s: one is enough, and three took most of the suite's time).

    ``on_row(partial)`` is called after each row with the result so far (the GPU suite saves
    it, so a cut-off run keeps what it measured).
    """
    mm = matmul_gflops(torch.device(device), n=matmul_n)
    out = {"matmul_gflops": mm, "placement": placement, "precision": precision,
           "replay": replay, "workloads": []}
    for model in models:
        for label, algo in algos.items():
            flops = round_flops(model, algo, device)
            row = {"model": model, "workload": label, "gflop_per_round": flops / 1e9}
            for engine in backends:
                once = loop_once and engine == "loop"
                r = time_rounds(model, algo, engine, device, 1 if once else rounds,
                                placement=placement, warmup=0 if once else warmup,
                                precision=precision, replay=replay,
                                matmul_n=0 if once else matmul_n)
                gflops = flops / r["client_seconds"] / 1e9
                row[engine] = {**r, "gflops": gflops, "share_of_matmul": gflops / mm}
                if "matmul_gflops_rounds" in r:  # each round against the rate just before it
                    row[engine]["share_of_matmul_paired"] = float(np.median(
                        [flops / c / 1e9 / m for c, m in zip(r["client_seconds_rounds"],
                                                              r["matmul_gflops_rounds"])]))
            if "loop" in row and "batched" in row:
                row["batched_speedup"] = (row["loop"]["seconds_per_round"]
                                          / row["batched"]["seconds_per_round"])
            out["workloads"].append(row)
            if on_row is not None:
                on_row(out)
    return out


def profile_round(model: str, algo: dict, engine: str, device: str, rows: int = 20) -> dict:
    """Where one global round spends its time: ``torch.profiler``'s top operators.

    One warm-up round, then one profiled round; the operators with the most self time on the
    host (and, on a GPU, on the device), with call counts: per-step Python and host waits
    show as many calls of small operators and as ``cudaStreamSynchronize`` / ``item`` rows.
    """
    from torch.profiler import ProfilerActivity, profile

    exp = _experiment(model, algo, engine, device)
    state, _ = exp.algorithm.apply(exp.initial_state())
    cuda = exp.device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    _sync(exp.device)
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        exp.algorithm.apply(state)
        _sync(exp.device)
    seconds = time.perf_counter() - t
    events = prof.key_averages()

    def top(attr: str) -> list[dict]:
        best = sorted(events, key=lambda e: getattr(e, attr, 0), reverse=True)[:rows]
        return [{"name": e.key, "calls": e.count,
                 "self_cpu_ms": e.self_cpu_time_total / 1e3,
                 "self_device_ms": getattr(e, "self_device_time_total", 0) / 1e3} for e in best]

    def count(names: tuple[str, ...]) -> int:
        return int(sum(e.count for e in events if e.key in names))

    return {"model": model, "engine": engine, "profiled_round_seconds": seconds,
            "operators": len(events), "calls": int(sum(e.count for e in events)),
            "aten_calls": int(sum(e.count for e in events if e.key.startswith("aten::"))),
            # kernel launches on a GPU (the runtime's and the driver's launch calls)
            "kernel_launches": count(("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                                      "cuLaunchKernelEx", "cudaGraphLaunch")),
            # host waits: a scalar read (.item(), float()) or a stream/device synchronise
            "host_syncs": count(("aten::_local_scalar_dense", "cudaStreamSynchronize",
                                 "cudaDeviceSynchronize")),
            "top_host": top("self_cpu_time_total"),
            "top_device": top("self_device_time_total") if cuda else []}


def compiled_step(model: str, device: str, clients: int = 60, repeats: int = 10) -> dict:
    """One stacked SGD step (vmap forward, autograd backward, update) eager vs ``torch.compile``.

    FCNN/LeNet-5 on random Fashion-MNIST-shaped batches of 50, ``clients`` stacked: the
    first call's seconds (compilation) and milliseconds per step after it. Measured on the
    2-core CPU for the FCNN: compiled 69 ms against 56 ms eager, 16 s to compile, so the
    engine does not compile on CPUs; this part asks the question again on a GPU.
    """
    from torch.func import functional_call, vmap

    from wirelessfl.models import build_model

    dev = torch.device(device)
    net = build_model(model, (1, 28, 28), 10, seed=0, dropout=0.0).to(dev)
    params = {k: torch.stack([v] * clients).to(dev) for k, v in net.params().items()}
    g = torch.Generator().manual_seed(0)
    x = torch.randn(clients, 50, 1, 28, 28, generator=g).to(dev)
    y = torch.randint(0, 10, (clients, 50), generator=g).to(dev)

    def loss(p, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(net, p, (xb,)), yb)

    def step(p, xb, yb):
        q = {k: v.detach().requires_grad_(True) for k, v in p.items()}
        grads = torch.autograd.grad(vmap(loss)(q, xb, yb).sum(), list(q.values()))
        return {k: v - 0.01 * gk for (k, v), gk in zip(p.items(), grads)}

    out = {"model": model, "clients": clients}
    for name, fn in (("eager", step), ("compiled", torch.compile(step))):
        _sync(dev)
        t = time.perf_counter()
        fn(params, x, y)
        _sync(dev)
        out[f"{name}_first_call_s"] = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(repeats):
            fn(params, x, y)
        _sync(dev)
        out[f"{name}_ms_per_step"] = (time.perf_counter() - t) / repeats * 1e3
    out["compiled_speedup"] = out["eager_ms_per_step"] / out["compiled_ms_per_step"]
    return out


def compiled_rounds(models, device: str, rounds: int, modes: tuple[str, ...] | None = None,
                    on_row=None) -> list[dict]:
    """Batched HFedAvg N=4 rounds with the engine's ``compile`` off and in ``torch.compile`` modes.

    Per model and mode: the first round's seconds (compilation included), the median of
    ``rounds`` more, and the relative gap of the final parameters to the eager run's (the
    same numbers to float tolerance are expected). ``modes``: off and default, and on a GPU
    reduce-overhead (CUDA graphs).
    """
    dev = torch.device(device)
    modes = modes or (("off", "default", "reduce-overhead") if dev.type == "cuda"
                      else ("off", "default"))
    out = []
    for model in models:
        eager = None
        for mode in modes:
            exp = _experiment(model, ALGOS["HFedAvg N=4"], "batched", device, compile=mode)
            state, seconds = exp.initial_state(), []
            for _ in range(rounds + 1):
                state, sec = _timed_apply(exp, state)
                seconds.append(sec)
            flat = torch.cat([v.detach().flatten().cpu() for v in state.params.values()])
            eager = flat if eager is None else eager
            out.append({"model": model, "compile": mode, "first_round_s": seconds[0],
                        "seconds_per_round": float(np.median(seconds[1:])),
                        "gap_to_eager": float((flat - eager).norm() / eager.norm())})
            if on_row is not None:
                on_row(out)
    return out


RULES = {"FedAvg": {"name": "fedavg"}, "FedProx": {"name": "fedprox", "mu": 0.01},
         "SCAFFOLD": {"name": "scaffold"}, "MOON": {"name": "moon"},
         "LocalAdam": {"name": "local_adam"}, "FAdamGC": {"name": "fadamgc"}}


def _rule_experiment(model: str, algo: dict, engine: str, device: str):
    return prepare(resolve({
        "seed": 0, "device": device, "engine": engine,
        "data": {"dataset": DATASET, "data_dir": DATA_DIR, "partition": "shards",
                 "num_clients": CLIENTS},
        "model": {"name": model}, "local": {"lr": 0.01, "batch_size": 50, "steps": STEPS},
        "algorithm": algo}))


def rules(models: list[str], device: str, rounds: int, on_row=None,
          loop_once: bool = False, backends=("loop", "batched")) -> list[dict]:
    """Seconds per round of each local rule, loop and batched, and the ratio to FedAvg batched.

    Median over ``rounds`` timed rounds after one untimed warm-up round (``loop_once``: the
    loop timed over one round, no warm-up: on a GPU its rounds are long enough, 3-8 s).
    """
    rows = []
    for model in models:
        base = None
        for label, algo in RULES.items():
            row = {"model": model, "rule": label}
            for engine in backends:
                exp = _rule_experiment(model, algo, engine, device)
                state, times = exp.initial_state(), []
                once = loop_once and engine == "loop"
                if not once:
                    state, _ = exp.algorithm.apply(state)  # warm-up round, not timed
                for _ in range(1 if once else rounds):
                    state, sec = _timed_apply(exp, state)
                    times.append(sec)
                row[f"{engine}_seconds_per_round"] = float(np.median(times))
            if "loop_seconds_per_round" in row:
                row["batched_speedup"] = (row["loop_seconds_per_round"]
                                          / row["batched_seconds_per_round"])
            base = base or row["batched_seconds_per_round"]
            row["batched_vs_fedavg_batched"] = row["batched_seconds_per_round"] / base
            rows.append(row)
            if on_row is not None:
                on_row({"rules": rows})
        adam = {r["rule"]: r["batched_seconds_per_round"] for r in rows if r["model"] == model}
        rows[-1]["fadamgc_vs_localadam_batched"] = adam["FAdamGC"] / adam["LocalAdam"]
    return rows


def over_the_air(device: str, rounds: int) -> dict:
    """Seconds per FedAvg FCNN round (60 clients, batched), exact vs over the air, interleaved."""
    nets = {"exact": None, "over_the_air": {"model": "aircomp", "aggregation": "over_the_air",
                                            "snr_db": 30.0, "antennas": 10}}
    exps = {k: prepare(resolve({
        "seed": 0, "device": device, "engine": "batched",
        "data": {"dataset": "fashion_mnist", "partition": "shards", "num_clients": 60},
        "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": 50, "steps": 20},
        "algorithm": {"name": "fedavg"}, **({"network": n} if n else {})})) for k, n in nets.items()}
    states = {k: e.algorithm.apply(e.initial_state())[0] for k, e in exps.items()}  # warm-up
    times: dict[str, list[float]] = {k: [] for k in exps}
    for _ in range(rounds):
        for k, e in exps.items():
            _sync(e.device)
            t = time.perf_counter()
            states[k], _ = e.algorithm.apply(states[k])
            _sync(e.device)
            times[k].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"seconds_per_round": med, "rounds": rounds,
            "overhead": med["over_the_air"] / med["exact"] - 1.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--rules", action="store_true", help="local rules (FedAvg, FedProx, SCAFFOLD)")
    p.add_argument("--resnet", action="store_true", help="ResNet-18, 100 clients, S = 10")
    p.add_argument("--max-batch", type=int, default=None, help="--resnet: clients per stacked chunk")
    p.add_argument("--placement", choices=("auto", "device", "host"), default="auto",
                   help="GPU: datasets on the device, or pinned on the host (data.placement)")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16", "fp16"), default="fp32",
                   help="local.precision of the workloads (autocast, float32 weights)")
    p.add_argument("--replay", choices=("auto", "on", "off"), default="auto",
                   help="the batched engine's recorded steps (replay setting)")
    p.add_argument("--compile", action="store_true",
                   help="batched HFedAvg rounds with the engine's compile off and on")
    p.add_argument("--over-the-air", action="store_true",
                   help="FedAvg FCNN, 60 clients: exact vs over-the-air aggregation")
    args = p.parse_args()
    device = torch.device(args.device)
    if args.compile:
        out = {"device": str(device), "threads": torch.get_num_threads(),
               "compiled_rounds": compiled_rounds(args.models, args.device, args.rounds)}
        print(json.dumps(out, indent=None if args.json else 2))
        return
    if args.over_the_air:
        out = {"device": str(device), "threads": torch.get_num_threads(),
               "over_the_air": over_the_air(args.device, args.rounds)}
        print(json.dumps(out, indent=None if args.json else 2))
        return
    if args.resnet:
        out = {"device": str(device), "threads": torch.get_num_threads(),
               "resnet": resnet(args.device, args.rounds, args.max_batch, args.placement)}
        print(json.dumps(out, indent=None if args.json else 2))
        return
    if args.rules:
        out = {"device": str(device), "threads": torch.get_num_threads(),
               "rules": rules(args.models, args.device, args.rounds)}
        print(json.dumps(out, indent=None if args.json else 2))
        return
    out = {"device": str(device), "threads": torch.get_num_threads(),
           **workloads(args.models, ALGOS, args.device, args.rounds, args.placement,
                       precision=args.precision, replay=args.replay)}
    print(json.dumps(out, indent=None if args.json else 2))

if __name__ == "__main__":
    main()
