"""
Privacy and robustness with one setting each
=============================================

Any algorithm of the FedAvg family can clip its clients' updates and add Gaussian noise
(``algorithm.dp``), with the privacy spent in every metrics row, and can replace the server's
mean with a robust rule (``algorithm.robust``) against simulated attackers
(``algorithm.attack``). Here: DP-FedAvg until a privacy budget is spent, then a sign-flip
attack against the mean and the coordinate-wise median. It needs the ``[privacy]`` extra
(``pip install 'wirelessfl[privacy]'``).
"""

# %%
# DP-FedAvg with a budget
# -----------------------
# Each update is clipped to norm C = 1 and the server adds N(0, (zC)²) to their sum
# (``dp: central``, z = 4). The run stops before the round that would spend more than
# ε = 6 at δ = 1e-5; every row says how much it has spent (Google's dp-accounting).
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

import wirelessfl

base = {"seed": 0, "rounds": 60, "eval_every": 5,
        "data": {"dataset": "synthetic", "num_clients": 20, "samples_per_client": 60},
        "model": {"name": "fcnn", "options": {"hidden": 32}},
        "local": {"lr": 0.05, "batch_size": 20, "steps": 5}}
out = Path(tempfile.mkdtemp())
private = {"name": "fedavg", "clients_per_round": 5, "weighting": "uniform", "dp": "central",
           "dp_clip": 1.0, "dp_noise": 4.0, "dp_target_epsilon": 6.0}
wirelessfl.run_job(wirelessfl.open_run({**base, "algorithm": private}), out / "dp", quiet=True)
rows = wirelessfl.RunRecord(out / "dp").rows()
for r in rows[1:]:
    print(f"round {r['round']:2d}: accuracy {r['test_accuracy']:.3f}, epsilon {r['epsilon']:.2f}")

# %%
# The run stopped at the last round whose ε stays within 6: the next one would exceed it.
#
# A sign-flip attack against the mean and the median
# --------------------------------------------------
# A fifth of the clients, drawn once per run, send −Δ_i. The median of each coordinate
# ignores a minority of extreme values; the mean follows them.
curves = {}
for rule in ("mean", "median"):
    algo = {"name": "fedavg", "clients_per_round": 10, "robust": rule,
            "attack": "sign_flip", "attackers": 0.2}
    wirelessfl.run_job(wirelessfl.open_run({**base, "rounds": 30, "algorithm": algo}),
                       out / rule, quiet=True)
    curves[rule] = wirelessfl.RunRecord(out / rule).rows()
fig, ax = plt.subplots(figsize=(5, 3.2))
for rule, rs in curves.items():
    ax.plot([r["round"] for r in rs], [r["test_accuracy"] for r in rs], marker=".", label=rule)
ax.plot([r["round"] for r in rows], [r["test_accuracy"] for r in rows], marker=".",
        label="DP-FedAvg (z = 4, no attack)")
ax.set_xlabel("round")
ax.set_ylabel("test accuracy")
ax.set_title("synthetic data, 20 clients, 20% sign-flip attackers")
ax.legend(fontsize=8)
fig.tight_layout()
