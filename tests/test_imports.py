"""The house rules of the import graph, checked on the whole tree.

Every module imports on its own in a fresh interpreter, and dependencies point one way:
``channels`` ← ``solvers`` ← ``wirelessfl`` ← ``experiments``, and inside ``wirelessfl`` a
wing imports only wings on lower floors (:data:`FLOORS`), with no import circles anywhere.
The rules are written per wing, so a new module is covered by where it sits.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("channels", "solvers", "wirelessfl")
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))

#: Wings from the bottom up: a module may import its own wing and the wings below it.
#: ``wirelessfl`` (the package itself) exposes the public API lazily and imports only the
#: torch-free ``wirelessfl.openmp`` (the wait policy is chosen before torch loads).
FLOORS = [
    ["channels"],
    ["solvers"],
    ["wirelessfl", "wirelessfl.errors", "wirelessfl.rng", "wirelessfl.registry",
     "wirelessfl.openmp"],
    ["wirelessfl.data", "wirelessfl.models"],
    ["wirelessfl.engine"],
    ["wirelessfl.server"],
    ["wirelessfl.net"],         # link models: the over-the-air one provides its aggregator
    ["wirelessfl.algorithms"],
    ["wirelessfl.run"],
    ["wirelessfl.report"],
    ["wirelessfl.cli"],
    ["wirelessfl.__main__"],   # the command's entry: Ctrl-C during the CLI's imports
]


def wing(module: str) -> str:
    """The wing a module belongs to (the longest listed prefix)."""
    names = [w for floor in FLOORS for w in floor
             if module == w or (module.startswith(w + ".") and w != "wirelessfl")]
    assert names, f"{module} is in no wing: add its folder to FLOORS"
    return max(names, key=len)


def floor(module: str) -> int:
    w = wing(module)
    return next(i for i, f in enumerate(FLOORS) if w in f)


def imports(module: str) -> set[str]:
    """Project modules ``module`` imports anywhere in its source (also inside functions)."""
    path = ROOT / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            # ``from pkg import sub`` depends on pkg.sub; ``from pkg import name`` on pkg
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        for n in names:
            while n and n not in MODULES:
                n = n.rpartition(".")[0]
            if n and n != module and n.split(".")[0] in PACKAGES:
                found.add(n)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_is_in_a_wing():
    assert len(MODULES) > 60
    for m in MODULES:
        wing(m)


def test_wings_import_only_their_own_floor_and_below():
    bad = [f"{m} (floor {floor(m)}) imports {t} (floor {floor(t)})"
           for m, targets in GRAPH.items() for t in targets if floor(t) > floor(m)]
    assert bad == []


def test_a_wing_on_one_floor_does_not_import_its_neighbour():
    """Wings that share a floor are independent (data vs models, server vs net)."""
    bad = [f"{m} imports {t}" for m, targets in GRAPH.items() for t in targets
           if floor(t) == floor(m) and wing(t) != wing(m) and wing(t) != "wirelessfl"
           and floor(m) > 2]
    assert bad == []


def test_no_import_circles():
    index, low, stack, on, cycles = {}, {}, [], set(), []
    sys.setrecursionlimit(10_000)

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in MODULES:
        if m not in index:
            visit(m)
    assert cycles == []


def test_few_modules_loose_in_the_package_root():
    loose = [p.name for p in (ROOT / "wirelessfl").glob("*.py") if p.name != "__init__.py"]
    assert len(loose) <= 10, loose


# One interpreter per order, torch loaded once; before each module every project module is forgotten,
# so each import starts from nothing of the project (as a fresh interpreter would). After the
# import, no module of a higher floor may be loaded (lazy imports stay lazy).
SCRIPT = """
import importlib, json, sys
import torch, numpy, scipy, yaml  # third-party imports stay cached
mods, floors = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ours = ("wirelessfl", "channels", "solvers")
bad = []
for m in mods:
    for k in [k for k in sys.modules if k.split(".")[0] in ours]:
        del sys.modules[k]
    try:
        importlib.import_module(m)
    except Exception as exc:
        bad.append(f"{m}: {type(exc).__name__}: {exc}")
        continue
    higher = [k for k in sys.modules if k in floors and floors[k] > floors[m]]
    if higher:
        bad.append(f"{m} loads the higher floor {higher[0]}")
print(json.dumps(bad))
"""


def test_every_module_imports_alone_without_loading_higher_floors():
    """In both orders (third-party state left by earlier imports differs), one process each,
    the two side by side."""
    floors = json.dumps({m: floor(m) for m in MODULES})
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, json.dumps(order), floors],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for order in (MODULES, MODULES[::-1])]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        assert json.loads(out.strip().splitlines()[-1]) == []


def test_channels_and_solvers_never_import_the_fl_side():
    for m, targets in GRAPH.items():
        if m.split(".")[0] in ("channels", "solvers"):
            assert not any(t.startswith("wirelessfl") for t in targets), m


def test_help_and_argument_errors_import_no_torch_and_no_algorithm():
    """``wirelessfl --help``, a command's ``--help`` and a bad option are answered before any
    heavy import (PyTorch, the algorithms): a fraction of a second, not the 2 s of torch."""
    import subprocess
    import sys

    code = ("import sys\nfrom wirelessfl.cli import main\n"
            "for argv in (['--help'], ['run', '--help'], ['figures', '--help'], ['run', '--bogus']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "heavy = [m for m in ('torch', 'wirelessfl.algorithms', 'wirelessfl.run.config') "
            "if m in sys.modules]\nprint('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in out.stdout, out.stdout[-500:] + out.stderr[-500:]
