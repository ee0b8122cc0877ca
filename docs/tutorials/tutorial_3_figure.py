"""
Regenerating a paper's figure and reading its table
===================================================

Every figure and table of the five papers is declared in ``experiments/<paper>/figures.yaml``
(what to run, at a quick and a paper scale, and how to draw it). ``wirelessfl figures PAPER
--only NAME`` runs what is missing into a report folder, then draws the PNG and writes the
numbers behind it as CSV (and Markdown for tables). Runs are keyed by their configuration,
so a second call only re-draws.

Here: FedAST's experiment E3 (the paper's Figs. 4/14), two *different* tasks trained at
once over one client pool — LeNet-5 and an MLP on Fashion-MNIST — with FedAST and with
FedAST-NoBuffer, at quick scale (3 min 28 s on two quiet CPU cores; see the measured times in
the development guide).
"""

# %%
# Running the figure
# ------------------
# :func:`wirelessfl.regenerate` is what the ``figures`` command calls; it returns the files
# it wrote. The report folder must be new or one this tool made (nothing else is touched).
import csv
import tempfile
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

import wirelessfl

report = Path(tempfile.mkdtemp()) / "fedast-quick"
written = wirelessfl.regenerate("fedast", "quick", report, only=["e3"], quiet=True,
                                log=lambda line: None)
print("\n".join(str(p.relative_to(report)) for p in written))

# %%
# The figure
# ----------
png = next(p for p in written if p.suffix == ".png")
fig, ax = plt.subplots(figsize=(9, 4))
ax.imshow(mpimg.imread(png))
ax.axis("off")
fig.tight_layout()

# %%
# The numbers behind it
# ---------------------
# The CSV holds one row per series, task and evaluation time (mean over seeds when there
# are several). Reading it back gives, e.g., each series' final accuracy per task:
rows = list(csv.DictReader(open(next(p for p in written if p.suffix == ".csv"))))
final = {}
for r in rows:
    if r["accuracy_mean"]:
        final[(r["series"], r["task"])] = (float(r["time"]), float(r["accuracy_mean"]))
for (series, task), (t, acc) in sorted(final.items()):
    print(f"{series:>16} {task:>7}: accuracy {acc:.3f} at simulated time {t:.0f}")

# %%
# Every run folder of the report holds its resolved config, seed and metrics, so any
# number here can be traced to the run that produced it (``report/runs/<hash>/``); the
# report's ``README.md`` lists the figures with the settings that were run. The paper's
# own numbers and our quick-scale results side by side are on :doc:`/papers/fedast`.

# %%
# The runs above were written to a temporary folder, which the tutorial removes at its end.
import shutil

shutil.rmtree(report.parent, ignore_errors=True)
