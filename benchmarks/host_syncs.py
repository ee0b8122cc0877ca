"""Where a round waits for the GPU: every synchronising CUDA call of one round, by call site.

    PYTHONPATH=. python benchmarks/host_syncs.py --out FILE [--models fcnn lenet5] [--data-dir D]

One warm-up round, then one round of each of ``benchmarks/engine.py``'s workloads (HIST and
HFedAvg N = 4, 60 clients, batched) under ``torch.cuda.set_sync_debug_mode("warn")``: each
operation that makes the host wait for the device (a scalar read, a copy to unpinned host
memory, an operation whose output size depends on the data) warns, and the warning's stack
is reduced to its innermost frames inside the project. Per workload: the count, the sites
with the most waits, and the allocator's device allocations and frees during the round
(``cudaMalloc`` and ``cudaFree`` calls, which also stall). Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import traceback
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _sites(stack: list[traceback.FrameSummary], depth: int = 3) -> str:
    """The innermost ``depth`` frames of the project (``wirelessfl``, ``channels``,
    ``solvers``) as ``file:line function`` joined by ' < '."""
    own = [f for f in stack if any(f"/{p}/" in f.filename for p in ("wirelessfl", "channels",
                                                                      "solvers"))]
    return " < ".join(f"{Path(f.filename).relative_to(ROOT) if str(ROOT) in f.filename else f.filename}"
                      f":{f.lineno} {f.name}" for f in reversed(own[-depth:])) or "(outside)"


def probe(model: str, label: str, algo: dict, device: str) -> dict:
    """One warm round, then one round with every host wait recorded by site."""
    sys.path.insert(0, str(HERE))
    import engine as eng

    exp = eng._experiment(model, algo, "batched", device)
    state, _ = exp.algorithm.apply(exp.initial_state())
    torch.cuda.synchronize()
    sites: collections.Counter = collections.Counter()
    before = torch.cuda.memory_stats()
    real = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchronizing" in str(message):
            sites[_sites(traceback.extract_stack()[:-1])] += 1
        else:
            real(message, category, filename, lineno, file, line)

    warnings.showwarning = record
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            torch.cuda.set_sync_debug_mode("warn")
            try:
                exp.algorithm.apply(state)
            finally:
                torch.cuda.set_sync_debug_mode("default")
    finally:
        warnings.showwarning = real
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in
             ("num_device_alloc", "num_device_free", "num_alloc_retries",
              "segment.all.allocated", "segment.all.freed")}
    return {"model": model, "workload": label, "host_syncs": sum(sites.values()),
            "allocator": delta, "sites": sites.most_common(25)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--models", nargs="+", default=["fcnn", "lenet5"])
    p.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX files")
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device: host waits exist only there")
    sys.path.insert(0, str(HERE))
    import engine as eng
    from gpu_suite import _data

    data = _data(args.data_dir)
    eng.DATASET, eng.DATA_DIR = data["dataset"], data["data_dir"]
    rows = []
    for model in args.models:
        for label, algo in eng.ALGOS.items():
            rows.append(probe(model, label, algo, args.device))
            Path(args.out).write_text(json.dumps({"data": data, "rows": rows}, indent=1))
            print(f"{model} {label}: {rows[-1]['host_syncs']} host waits, "
                  f"allocator {rows[-1]['allocator']}", flush=True)
            for site, n in rows[-1]["sites"][:8]:
                print(f"  {n:5d}  {site}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
