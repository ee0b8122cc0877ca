"""One GPU suite: every CUDA test and the engine benchmarks in one short call (issue 34).

    PYTHONPATH=. python benchmarks/gpu_suite.py --out DIR [--data-dir FMNIST] [--device cuda]
    python benchmarks/gpu_suite.py --out DIR --device cpu --quick     # the schema, in seconds

Parts, in this order (what the issue's GPU targets need first: parts that would start after
``--budget-s`` are skipped), each timed and recorded whatever happens to the others (a
failing part keeps its error and the suite goes on):

- ``presets``: every shipped preset for 3 rounds on the GPU, and on the CPU beside it in a
  pool of processes (``benchmarks/presets.py``): both accuracies, the gap, whether it learns
  (presets not started within ``--presets-budget-s`` are listed as skipped);
- ``cuda_tests``: ``pytest -m cuda`` (every test marked as needing a GPU), pass/fail counts;
- ``engine``: FCNN and LeNet-5, HIST N=4 and HFedAvg N=4 with 60 clients, loop against
  batched (``benchmarks/engine.py``; ``--batched-only``: batched alone): seconds per round,
  GFLOP/s, share of the matmul rate;
- ``profile``: one batched FCNN and LeNet-5 HFedAvg round under ``torch.profiler`` (top
  operators on the host and the device, call counts, kernel launches and host syncs per
  round), run right after the engine part so that the time budget never skips it;
- ``conv``: the stacked convolution's two rules (``grouped``, ``gemm``) on one LeNet-5 step
  of 8 and 60 clients (``benchmarks/conv_rules.py``): milliseconds, aten operators, kernels
  launched, and the gap between their gradients (a few seconds);
- ``lockstep``: many runs as one computation (issue 55, ``benchmarks/lockstep.py``): a group
  of :data:`LOCKSTEP_RUNS` FCNN runs of 60 clients, with the engine's memory budget and with
  chunks of :data:`LOCKSTEP_CHUNK` stacked clients: peak GPU memory, seconds per group round
  and per run against one run alone;
- ``lowrank``: FedAvg rounds of 1,000 FCNN clients × 3 steps of batch 20 with the engine's
  ``low_rank`` off and ``on`` (:mod:`wirelessfl.models.lowrank`; ``auto`` uses it on a CPU
  only): seconds a round each and the final models' relative distance (a few seconds);
- ``figure``: HIST Fig. 3 at paper scale (36 runs x 100 rounds) through ``wirelessfl
  figures``, as a user runs it (every run in one lockstep group on a GPU), cut at
  ``--figure-timeout-s``: its wall time, start-up included, and the report with its runs'
  rows (no checkpoints) packed as ``DIR/figure.tar.gz``;
- ``precision``: the batched HFedAvg rounds in tf32, bf16 and fp16 (``local.precision``);
- ``resnet``: the CIFAR ResNet-18 round, 100 clients, S = 10 (random images);
- ``lora``: one GPT-2-small LoRA round, loop and batched;
- ``rules``: FedAvg, FedProx, SCAFFOLD, MOON, LocalAdam, FAdamGC, loop and batched;
- ``compile``: the batched HFedAvg rounds with the engine's ``compile`` off, ``default`` and
  ``reduce-overhead`` (CUDA graphs): seconds and the gap to the eager numbers; then one
  stacked FCNN / LeNet-5 step eager against ``torch.compile``;
- ``placement``: the batched HFedAvg rounds with the datasets pinned on the host instead of
  on the device.

Measured on one H200 (torch 2.11, CUDA 13.0; 2026-11-26), per part with ``--batched-only``:
presets 52 s (the GPU side; the presets budget 90 s), CUDA tests 44-52 s (33 passed; the 2
Ray tests skip where Ray is absent), engine 54-62 s, profile 27-34 s, lockstep 22 s,
precision 81 s; the figure part takes what ``--figure-timeout-s`` allows (HIST Fig. 3 at
paper scale needs about 10 minutes). Earlier, on an H100: ResNet-18 30 s, LoRA 12 s, and
the engine part with the loop timed three times per workload 289 s (13-25 s a loop round),
which is why the loop is timed once (about 130 s expected), and not at all with
``--batched-only``.

Fashion-MNIST is read from ``--data-dir`` (or the system copy); without it the workloads run
on random tensors of the same shapes, and the JSON says so. Needs only the project, PyTorch,
numpy, scipy, PyYAML, tqdm and matplotlib (no cvxpy, Gurobi, Ray or network); the JSON records
any of those found imported. Writes ``DIR/gpu_suite.json`` (small) and ``DIR/gpu_suite.md``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FORBIDDEN = ("cvxpy", "gurobipy", "ray")


def _module(name: str):
    """``benchmarks/<name>.py`` imported by its own name, with this folder on ``sys.path``:
    ``torch.compile`` imports the module of each function it traces by name, and the presets'
    CPU pool (spawned processes, which inherit ``sys.path``) unpickles its worker by it. An
    earlier ``_bench_<name>`` alias could not be imported by those children: every CPU row
    of the presets part failed on the first H200 run."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return importlib.import_module(name)


def _data(data_dir: str | None) -> dict:
    """Point the engine benchmark at Fashion-MNIST, or at random tensors of its shapes."""
    from wirelessfl.data import ArrayDataset, DatasetSplits, load_dataset
    from wirelessfl.data.datasets import USER_DATASETS, register_dataset

    try:
        load_dataset("fashion_mnist", data_dir=data_dir)
        return {"dataset": "fashion_mnist", "data_dir": data_dir, "real": True}
    except ValueError as exc:
        reason = str(exc).splitlines()[0][:200]

    def random_fmnist(_folder):
        g = torch.Generator().manual_seed(0)

        def split(n):
            return ArrayDataset(torch.rand(n, 1, 28, 28, generator=g),
                                torch.randint(0, 10, (n,), generator=g), 10)

        return DatasetSplits("fmnist_random", split(60_000), split(10_000))

    if "fmnist_random" not in USER_DATASETS:
        register_dataset("fmnist_random", random_fmnist)
    return {"dataset": "fmnist_random", "data_dir": None, "real": False, "why": reason}


#: Seconds the presets part may take: presets not started by then are listed as skipped.
PRESETS_BUDGET_S = 170.0
#: Seconds ``pytest -m cuda`` may take (about 30 on an H100).
CUDA_TESTS_TIMEOUT_S = 240
#: The lockstep part's group: runs of 60 FCNN clients, and the chunk (stacked clients) of its
#: second setting (issue 55's target: 100 such runs in one group within 8 GiB).
LOCKSTEP_RUNS, LOCKSTEP_CHUNK = 100, 1500
#: The figure part: a paper's figure at paper scale, and the seconds it may take.
FIGURE = ("hist", "fig3")
FIGURE_TIMEOUT_S = 240.0
#: The suite's output folder (set by :func:`main`).
OUT: list[Path] = []


def presets(device: str, quick: bool) -> dict:
    """Every shipped preset for 3 rounds on this device and on the CPU beside it
    (``benchmarks/presets.py``): accuracy on both, their gap, and whether each learns."""
    import tempfile

    pre = _module("presets")
    names = list(pre.QUICK) if quick else list(__import__("wirelessfl.run.config", fromlist=["x"])
                                                .list_presets())
    devices = ["cpu"] + ([device] if device != "cpu" else [])
    workers = 1 if quick else max(1, min(6, (os.cpu_count() or 2) // 2))
    with tempfile.TemporaryDirectory() as tmp:
        return pre.table(names, devices, 1 if quick else 3, tmp, cpu_workers=workers,
                         data_dir=DATA.get("data_dir"), on_row=PARTIAL,
                         budget_s=None if quick else PRESETS_BUDGET_S)


def lockstep(device: str, quick: bool) -> dict:
    """A lockstep group of FCNN runs: its peak memory and speed against one run alone."""
    ls = _module("lockstep")
    if quick:
        return ls.table(3, 6, 3, 2, ["auto", "4"], device, DATA, on_row=PARTIAL)
    return ls.table(LOCKSTEP_RUNS, 60, 3, 20, ["auto", str(LOCKSTEP_CHUNK)], device, DATA,
                    on_row=PARTIAL)


def _rounds_done(root: Path) -> tuple[int, int]:
    """Finished runs and trained rounds under a report folder's ``runs/`` (their records)."""
    from wirelessfl.run.records import RunRecord

    records = [RunRecord(f) for f in (root / "runs").glob("*") if f.is_dir()]
    rounds = 0
    for rec in records:
        rows = rec.rows() if (rec.folder / "metrics.jsonl").is_file() else []
        rounds += int(rows[-1]["round"]) if rows else 0
    return sum(rec.summary() is not None for rec in records), rounds


def figure(device: str, quick: bool) -> dict:
    """A figure at paper scale through the command line, timed from the process's start."""
    import tarfile
    import tempfile

    if quick or not device.startswith("cuda"):
        return {"skipped": "a paper-scale figure on a GPU only"}
    if not DATA["real"]:
        return {"skipped": "needs Fashion-MNIST (--data-dir)"}
    paper, only = FIGURE
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "report"
        cmd = [sys.executable, "-m", "wirelessfl", "figures", paper, "--scale", "paper",
               "--only", only, "--out", str(root), "--quiet"]
        if DATA.get("data_dir"):
            cmd += ["--data-dir", str(DATA["data_dir"])]
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  timeout=FIGURE_TIMEOUT_S)
            code, text, cut = proc.returncode, proc.stdout + proc.stderr, False
        except subprocess.TimeoutExpired as exc:
            code, cut = None, True
            text = "".join(x.decode() if isinstance(x, bytes) else (x or "")
                           for x in (exc.stdout, exc.stderr))
        wall = time.perf_counter() - t
        finished, rounds = _rounds_done(root)
        if OUT and root.is_dir():
            with tarfile.open(OUT[0] / "figure.tar.gz", "w:gz") as tar:
                tar.add(root, arcname=f"{paper}-{only}-paper",
                        filter=lambda ti: None if ti.name.endswith(("checkpoint.pt",
                                                                    "accuracy.png")) else ti)
    return {"figure": f"{paper} {only}", "scale": "paper", "wall_s": round(wall, 1),
            "returncode": code, "cut_at_s": FIGURE_TIMEOUT_S if cut else None,
            "runs_finished": finished, "rounds_trained": rounds,
            "tail": text.strip().splitlines()[-15:]}


def cuda_tests(device: str, quick: bool) -> dict:
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p",
                           "no:cacheprovider", "--no-header", "-rfEs", "--tb=short",
                           str(ROOT / "tests")],
                          cwd=ROOT, capture_output=True, text=True, timeout=CUDA_TESTS_TIMEOUT_S)
    tail = proc.stdout.strip().splitlines()[-12:]
    if OUT:  # the whole report, tracebacks included (the tail alone hid why tests failed)
        (OUT[0] / "cuda_tests.txt").write_text(proc.stdout[-400_000:] + proc.stderr[-20_000:])
    return {"returncode": proc.returncode, "summary": tail[-1] if tail else "", "tail": tail}


def _engine_module(quick: bool):
    eng = _module("engine")
    eng.DATASET, eng.DATA_DIR = DATA["dataset"], DATA["data_dir"]
    if quick:  # the schema check: every path, tiny work
        eng.CLIENTS, eng.STEPS, eng.EDGE_ROUNDS = 8, 2, 1
    return eng


def engine(device: str, quick: bool) -> dict:
    eng = _engine_module(quick)
    algos = dict(list(eng.ALGOS.items())[:1]) if quick else eng.ALGOS
    return eng.workloads(["fcnn"] if quick else ["fcnn", "lenet5"], algos, device,
                         1 if quick else 2, warmup=0 if quick else 1, backends=BACKENDS,
                         matmul_n=512 if quick else 4096, on_row=PARTIAL, loop_once=not quick)


def precision(device: str, quick: bool) -> dict:
    """The batched HFedAvg rounds in tf32 (float32 tensors, TF32 matmuls and convolutions),
    bf16 and fp16 (autocast, float32 master weights)."""
    eng = _engine_module(quick)
    algos = {k: v for k, v in eng.ALGOS.items() if k.startswith("HFedAvg")}
    return {p: eng.workloads(["fcnn"] if quick else ["fcnn", "lenet5"], algos, device,
                             1 if quick else 2, backends=("batched",), warmup=0 if quick else 1,
                             matmul_n=512 if quick else 4096, precision=p)
            for p in ("tf32", "bf16", "fp16")}


def compile_step(device: str, quick: bool) -> dict:
    """The engine's compiled rounds against eager, then the bare stacked step (not quick)."""
    eng = _engine_module(quick)
    out: dict = {}

    def row(rows):
        out["rounds"] = rows
        PARTIAL(out)

    eng.compiled_rounds(["fcnn"] if quick else ["fcnn", "lenet5"], device, 1 if quick else 2,
                        on_row=row)
    if not quick:  # compilation of the bare step takes tens of seconds more
        out["steps"] = [eng.compiled_step(m, device) for m in ("fcnn", "lenet5")]
    return out


def profile(device: str, quick: bool) -> dict:
    """One batched FCNN HFedAvg round and one LeNet-5 round under ``torch.profiler``.

    With the host work of a round fitted against clients and steps
    (``benchmarks/host_calls.py`` on its small grid: Python and aten calls per client and
    per step of FedAvg and HFedAvg N = 4; counts, the same on any machine).
    """
    eng = _engine_module(quick)
    algo = eng.ALGOS["HFedAvg N=4"]
    calls = _module("host_calls")
    host = [calls.measure(a, calls.QUICK_CLIENTS, calls.QUICK_STEPS, dataset=DATA["dataset"],
                          data_dir=DATA["data_dir"]) for a in ("FedAvg", "HFedAvg N=4")]
    return {"rounds": [eng.profile_round(m, algo, "batched", device, rows=12)
                       for m in (["fcnn"] if quick else ["fcnn", "lenet5"])],
            "host_calls": [{k: h[k] for k in ("algorithm", "python", "aten")} for h in host]}


def conv(device: str, quick: bool) -> dict:
    """The stacked convolution's two rules on one LeNet-5 step (``benchmarks/conv_rules.py``)."""
    return _module("conv_rules").measure(device, (4,) if quick else (8, 60), 1 if quick else 5)


def placement(device: str, quick: bool) -> dict:
    if not device.startswith("cuda"):
        return {"skipped": "pinned host memory matters on a GPU only"}
    eng = _engine_module(quick)
    algos = {k: v for k, v in eng.ALGOS.items() if k.startswith("HFedAvg")}
    return eng.workloads(["fcnn"] if quick else ["fcnn", "lenet5"], algos, device,
                         1 if quick else 2, placement="host", backends=("batched",),
                         warmup=0 if quick else 1, matmul_n=512 if quick else 4096,
                         on_row=PARTIAL)


def rules(device: str, quick: bool) -> dict:
    eng = _engine_module(quick)
    if quick:
        eng.RULES = {k: eng.RULES[k] for k in ("FedAvg", "FedProx", "LocalAdam", "FAdamGC")}
    return {"rules": eng.rules(["fcnn"] if quick else ["fcnn", "lenet5"], device,
                               1 if quick else 2, on_row=PARTIAL, loop_once=not quick,
                               backends=BACKENDS)}


def resnet(device: str, quick: bool) -> dict:
    if quick:
        return {"skipped": "quick mode"}
    return _module("engine").resnet(device, 2, None)


def lora(device: str, quick: bool) -> dict:
    lo = _module("lora")
    if quick:
        return lo.lora_round("tiny", 2, 8, 16, 4, device)
    return lo.lora_round("small", 10, 64, 128, 32, device)


#: The low-rank part's workload: FedAvg of the FCNN, clients × local steps × batch (the
#: peers' cross-device workload, ``benchmarks/peers``), and the rounds timed after a warm-up.
LOWRANK_WORKLOAD, LOWRANK_ROUNDS = (1000, 3, 20), 4


def lowrank(device: str, quick: bool) -> dict:
    """FedAvg rounds of many small clients with ``low_rank`` off and on
    (:mod:`wirelessfl.models.lowrank`): seconds a round each and the final models' distance.
    ``on`` is what the default ``auto`` does on a CPU; on a GPU it is measured here first."""
    from wirelessfl.run.config import resolve
    from wirelessfl.run.rounds import prepare

    clients, steps, batch = (40, 3, 20) if quick else LOWRANK_WORKLOAD
    rounds = 1 if quick else LOWRANK_ROUNDS
    out: dict = {"clients": clients, "steps": steps, "batch": batch, "modes": {}}
    finals = {}
    for mode in ("off", "on"):
        exp = prepare(resolve({
            "seed": 0, "device": device, "low_rank": mode,
            "data": {"dataset": DATA["dataset"], "data_dir": DATA["data_dir"],
                     "partition": "iid", "num_clients": clients},
            "model": {"name": "fcnn"}, "local": {"lr": 0.05, "batch_size": batch, "steps": steps},
            "algorithm": {"name": "fedavg"}}))
        state = exp.initial_state()
        state, _ = exp.algorithm.apply(state)  # warm-up
        sync, times = _module("lockstep")._sync, []
        for _ in range(rounds):
            sync(device)
            t = time.perf_counter()
            state, _ = exp.algorithm.apply(state)
            sync(device)
            times.append(time.perf_counter() - t)
        finals[mode] = {k: v.detach().cpu() for k, v in state.params.items()}
        out["modes"][mode] = {"seconds_per_round": sorted(times)[len(times) // 2],
                              "low_ranked": exp.algorithm.env.executor.low_ranked}
        PARTIAL(out)
    out["relative_gap"] = max(float((finals["on"][k] - finals["off"][k]).norm()
                                    / finals["off"][k].norm()) for k in finals["off"])
    out["speedup"] = (out["modes"]["off"]["seconds_per_round"]
                      / out["modes"]["on"]["seconds_per_round"])
    return out


#: In order of what the issue's GPU targets need first: a run cut off by ``--budget-s``
#: skips the last parts.
PARTS = {"presets": presets, "cuda_tests": cuda_tests, "engine": engine, "profile": profile,
         "conv": conv, "lockstep": lockstep, "lowrank": lowrank, "figure": figure, "precision": precision,
         "resnet": resnet, "lora": lora, "rules": rules, "compile": compile_step,
         "placement": placement}
DATA: dict = {}
#: The engines the engine and rules parts time (``--batched-only`` drops the loop: on a GPU
#: its rounds take 13-25 s each, most of the suite's time when device time is short).
BACKENDS: tuple[str, ...] = ("loop", "batched")
_SAVE: list = []   # the running part's saver: PARTIAL(result so far) writes it into the JSON


def PARTIAL(result) -> None:  # noqa: N802 - a module-level hook, named as a constant
    """Record a part's result so far (a run cut off by a time limit keeps what it measured)."""
    if _SAVE:
        _SAVE[0](result)


def _markdown(report: dict) -> str:
    lines = [f"# GPU suite — {report['device_name']}", "",
             f"torch {report['torch']}, data: {report['data']['dataset']}"
             f"{'' if report['data']['real'] else ' (random tensors)'}", "",
             "| part | ok | seconds | headline |", "|---|---|---|---|"]
    for name, part in report["parts"].items():
        res = part.get("result") or {}
        if "skipped" in res:
            head = f"skipped: {res['skipped']}"
        elif name in ("engine", "placement"):
            head = "; ".join(f"{w['model']} {w['workload']}: batched "
                             f"{w['batched']['seconds_per_round']:.3f}s"
                             + (f" ({w['batched_speedup']:.1f}x loop)" if "batched_speedup" in w
                                else "")
                             + f", {100 * w['batched']['share_of_matmul']:.0f}% of matmul"
                             for w in res.get("workloads", []))
        elif name == "rules":
            head = "; ".join(f"{r['model']} {r['rule']} {r['batched_seconds_per_round']:.2f}s"
                             for r in res.get("rules", []))
        elif name == "lora":
            head = (f"{res.get('size')}: batched {res.get('batched_s_per_round')}s, "
                    f"loop {res.get('loop_s_per_round')}s")
        elif name == "precision":
            head = "; ".join(f"{p} {w['model']} {w['batched']['seconds_per_round']:.3f}s"
                             for p, r in res.items() for w in r.get("workloads", []))
        elif name == "compile":
            head = "; ".join([f"{r['model']} step {r['compiled_speedup']:.2f}x eager "
                              f"(compile {r['compiled_first_call_s']:.0f}s)"
                              for r in res.get("steps", [])]
                             + [f"{r['model']} round {r['compile']} "
                                f"{r['seconds_per_round']:.3f}s (gap {r['gap_to_eager']:.0e})"
                                for r in res.get("rounds", [])])
        elif name == "presets":
            ps = res.get("presets", [])
            gaps = [e["gap"] for e in ps if "gap" in e]
            head = (f"{sum(e['runs'] for e in ps)}/{len(ps)} run, "
                    f"{sum(bool(e.get('learns')) for e in ps)} learn"
                    + (f", largest CPU/GPU gap {max(gaps):.1e}" if gaps else "")
                    + "".join(f"; {e['preset']}: {e['errors'][0][:60]}" for e in ps
                              if e.get("errors"))[:300])
        elif name == "profile":
            head = "; ".join(f"{r['model']}: {r.get('kernel_launches', 0)} launches, "
                             f"{r.get('host_syncs', 0)} host syncs, {r['calls']} calls, top host "
                             f"{r['top_host'][0]['name']} {r['top_host'][0]['self_cpu_ms']:.0f} ms"
                             for r in res.get("rounds", []))
            head += "".join(f"; {h['algorithm']}: {h['python']['per_client']:.0f} Python, "
                            f"{round(h['aten']['per_client'], 1) + 0.0:.1f} aten a client"
                            for h in res.get("host_calls", []))
        elif name == "conv":
            head = "; ".join(f"{r['clients']} clients {r['rule']} {1e3 * r['seconds']:.1f} ms, "
                             f"{r['kernels']} kernels" for r in res.get("rows", []))
        elif name == "lockstep":
            head = "; ".join(f"{g['runs']} runs, chunk {g['max_batch']}: "
                             f"{g['seconds_per_group_round']:.2f} s a round, "
                             f"{g['speedup_per_run']:.1f}x alone per run"
                             + (f", peak {g['peak_gib']:.1f} GiB" if g.get("peak_gib") else "")
                             for g in res.get("groups", []))
        elif name == "figure":
            head = (f"{res.get('figure')}: {res.get('wall_s')} s"
                    + (f" (cut at {res['cut_at_s']:.0f} s)" if res.get("cut_at_s") else "")
                    + f", {res.get('runs_finished')} runs finished, "
                      f"{res.get('rounds_trained')} rounds")
        elif name == "resnet":
            head = f"batched {res.get('batched_speedup', 0):.2f}x loop"
        elif name == "lowrank":
            modes = res.get("modes", {})
            head = (f"{res.get('clients')} x {res.get('steps')} x {res.get('batch')}: "
                    + ", ".join(f"{m} {r['seconds_per_round']:.3f}s" for m, r in modes.items())
                    + (f" ({res['speedup']:.2f}x, gap {res['relative_gap']:.0e})"
                       if "speedup" in res else ""))
        else:
            head = str(res.get("summary", ""))[:120]
        if not part["ok"]:
            head = part["error"][:160]
        lines.append(f"| {name} | {'yes' if part['ok'] else 'NO'} | {part['seconds']:.1f} | {head} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    global BACKENDS, PRESETS_BUDGET_S, FIGURE_TIMEOUT_S
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for gpu_suite.json and gpu_suite.md")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    p.add_argument("--quick", action="store_true", help="small versions of every part (CPU check)")
    p.add_argument("--only", nargs="+", choices=list(PARTS), help="run only these parts")
    p.add_argument("--batched-only", action="store_true",
                   help="time the batched engine only in the engine and rules parts (no loop)")
    p.add_argument("--presets-budget-s", type=float, default=PRESETS_BUDGET_S,
                   help=f"presets not started within this many seconds are skipped "
                        f"(default {PRESETS_BUDGET_S:.0f})")
    p.add_argument("--figure-timeout-s", type=float, default=FIGURE_TIMEOUT_S,
                   help=f"the figure part is cut after this many seconds "
                        f"(default {FIGURE_TIMEOUT_S:.0f})")
    p.add_argument("--budget-s", type=float, default=450.0,
                   help="parts not started within this many seconds are skipped (default 450)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    DATA.clear()
    DATA.update(_data(args.data_dir))
    BACKENDS = ("batched",) if args.batched_only else ("loop", "batched")
    PRESETS_BUDGET_S, FIGURE_TIMEOUT_S = args.presets_budget_s, args.figure_timeout_s
    OUT[:] = [out]
    cuda = args.device.startswith("cuda") and torch.cuda.is_available()
    report = {"device": args.device, "quick": args.quick, "backends": list(BACKENDS),
              "torch": torch.__version__,
              "device_name": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
              "cuda": torch.version.cuda, "cpu_threads": torch.get_num_threads(),
              "data": DATA.copy(), "parts": {}}
    for name, part in PARTS.items():
        if args.only and name not in args.only:
            continue
        t = time.perf_counter()
        if t - started > args.budget_s:
            report["parts"][name] = {"ok": True, "seconds": 0.0, "error": "",
                                     "result": {"skipped": f"time budget {args.budget_s:.0f}s spent"}}
            continue

        def save(result, name=name, t=t):
            report["parts"][name] = {"ok": False, "seconds": round(time.perf_counter() - t, 2),
                                     "result": result, "error": "cut off: partial result"}
            (out / "gpu_suite.json").write_text(json.dumps(report, default=str))

        _SAVE[:] = [save]
        try:
            result, ok, error = part(args.device, args.quick), True, ""
        except Exception as exc:  # noqa: BLE001 - a failing part is recorded, the suite goes on
            result, ok = None, False
            error = f"{type(exc).__name__}: {str(exc)[:300]} | " + traceback.format_exc(limit=3)[-600:]
        report["parts"][name] = {"ok": ok, "seconds": round(time.perf_counter() - t, 2),
                                 "result": result, "error": error}
        (out / "gpu_suite.json").write_text(json.dumps(report, default=str))  # kept as it grows
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["forbidden_imports"] = sorted(m for m in FORBIDDEN if m in sys.modules)
    (out / "gpu_suite.json").write_text(json.dumps(report, default=str))
    (out / "gpu_suite.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0 if all(p["ok"] for p in report["parts"].values()) else 1


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
