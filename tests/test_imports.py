"""Every module imports on its own in a fresh interpreter, and lower layers never import
higher ones (config errors, data, models, client engine never pull algorithms, runner, CLI)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for pkg in ("wirelessfl", "channels", "solvers") for p in (ROOT / pkg).rglob("*.py"))
LOWER = ["wirelessfl.errors", "wirelessfl.configtypes", "wirelessfl.data", "wirelessfl.models",
         "wirelessfl.client", "wirelessfl.batched", "wirelessfl.config", "wirelessfl.registry"]
HIGHER = ("wirelessfl.algorithms", "wirelessfl.runner", "wirelessfl.cli", "wirelessfl.multitask",
          "wirelessfl.figures", "wirelessfl.tasks")

# One interpreter, torch loaded once; before each module every project module is forgotten,
# so each import starts from nothing of the project (as a fresh interpreter would).
SCRIPT = """
import importlib, json, sys
import torch, numpy, scipy, yaml  # third-party imports stay cached
mods, lower, higher = json.loads(sys.argv[1]), json.loads(sys.argv[2]), tuple(json.loads(sys.argv[3]))
ours = ("wirelessfl", "channels", "solvers")
bad = []
for order in (mods, mods[::-1]):
    for m in order:
        for k in [k for k in sys.modules if k.split(".")[0] in ours]:
            del sys.modules[k]
        try:
            importlib.import_module(m)
        except Exception as exc:
            bad.append(f"{m}: {type(exc).__name__}: {exc}")
            continue
        if m in lower:
            pulled = [k for k in sys.modules if any(k == h or k.startswith(h + ".") for h in higher)]
            if pulled:
                bad.append(f"{m} imports the higher layer {pulled[0]}")
print(json.dumps(bad))
"""


def test_every_module_imports_alone_and_layers_point_one_way():
    import json

    assert len(MODULES) > 40
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(MODULES), json.dumps(LOWER),
                          json.dumps(list(HIGHER))], capture_output=True, text=True, cwd=ROOT,
                         timeout=600, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_channels_and_solvers_never_import_the_fl_side():
    for pkg in ("channels", "solvers"):
        for p in (ROOT / pkg).rglob("*.py"):
            text = p.read_text()
            assert "from wirelessfl" not in text and "import wirelessfl" not in text, p
