"""
Timing any algorithm over a wireless link, and re-timing a finished run
=======================================================================

Every round-based algorithm reports what it sent each round (a ``RoundCost``: payload,
local steps, who took part); the ``network`` section of a config turns that into simulated
seconds. Here we train FedAvg and SCAFFOLD once on a TDMA uplink, then ask what the same
runs would have cost over AirComp or with more receive antennas, without training again.
"""

# %%
# Two runs over a TDMA uplink
# ---------------------------
# :func:`wirelessfl.open_run` builds and checks a run from a plain mapping (the same keys as
# a YAML config); :func:`wirelessfl.run_job` trains it into a run folder.
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

import wirelessfl
from wirelessfl.run.retime import retime_run

base = {
    "seed": 0, "rounds": 15,
    "data": {"dataset": "synthetic", "num_clients": 20, "samples_per_client": 60},
    "model": {"name": "fcnn", "options": {"hidden": 32}},
    "local": {"lr": 0.05, "batch_size": 20, "steps": 5},
    "network": {"model": "tdma", "antennas": 2, "snr_db": 10.0},
}
out = Path(tempfile.mkdtemp())
folders = {}
for name in ("fedavg", "scaffold"):
    job = wirelessfl.open_run({**base, "name": name, "algorithm": {"name": name}})
    wirelessfl.run_job(job, out / name, quiet=True)
    folders[name] = out / name
    rows = wirelessfl.RunRecord(out / name).rows()
    print(f"{name:>8}: accuracy {rows[-1]['test_accuracy']:.3f} after "
          f"{rows[-1]['sim_time_s']:.2f} simulated s (TDMA, M = 2)")

# %%
# SCAFFOLD uploads its control variate too: twice FedAvg's payload, so each of its rounds
# takes about twice as long on the same TDMA link.
#
# Re-timing without training
# --------------------------
# Training does not depend on the link model (only the clock does), so
# :func:`wirelessfl.run.retime.retime_run` replays the recorded round costs under other
# ``network.*`` settings. Settings that would change learning (over-the-air noise,
# deadlines that drop uploads, compression) are refused there: they need a new run.
links = {"TDMA, M = 2": ["network.model=tdma", "network.antennas=2"],
         "TDMA, M = 16": ["network.model=tdma", "network.antennas=16"],
         "AirComp clock, M = 2": ["network.model=aircomp", "network.antennas=2"]}
fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
for ax, (name, folder) in zip(axes, folders.items()):
    for label, overrides in links.items():
        # round 0 is at simulated time 0, which a log axis cannot show: plot from round 1
        rows = [r for r in retime_run(folder, overrides) if r["round"] > 0]
        ax.plot([r["sim_time_s"] for r in rows], [r["test_accuracy"] for r in rows],
                marker=".", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("simulated time [s] (log scale, from round 1)")
    ax.set_title(name)
    ax.grid(alpha=0.3)
axes[0].set_ylabel("test accuracy")
axes[0].legend(fontsize=8)
fig.tight_layout()

# %%
# The accuracy at each round is the same in every curve; only the clock moves. AirComp's
# upload time does not grow with the number of clients (they all send at once), TDMA's does,
# and more antennas raise every client's rate. The same works from the command line:
#
# .. code-block:: bash
#
#     wirelessfl run fedavg_fmnist --out runs/fedavg        # a named run folder (--out)
#     wirelessfl retime runs/fedavg --set network.model=aircomp --out fedavg-aircomp.csv

# %%
# The runs above were written to a temporary folder, which the tutorial removes at its end.
import shutil

shutil.rmtree(out, ignore_errors=True)
