"""
A first 5G NR study: who makes the deadline in a UMi cell
==========================================================

``network.model: nr`` is a digital uplink whose radio comes from Sionna: clients dropped in a
TR 38.901 urban-micro sector, open-loop power control (TS 38.213), link adaptation at a BLER
target and the PUSCH error rates of Sionna's PHY abstraction. Here we look at the link a run
gets, then train FedAvg over it with a deadline and see whose uploads are dropped.
It needs the ``[nr]`` extra (``pip install 'wirelessfl[nr]'``).
"""

# %%
# The link of a run
# -----------------
# :func:`wirelessfl.net.links.make_link` builds the link a run would have; the clients are
# dropped from the run's seed, once. Each round every client gets an MCS and a transport
# block size for its SINR, and an expected rate R = TBS·(1 − TBLER)/T_slot.
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import wirelessfl
from wirelessfl.net.links import NetworkConfig, make_link
from wirelessfl.rng import Seeds

clients, seed = 20, 0
link = make_link(NetworkConfig.of("nr", deadline_s=1.0), num_clients=clients, seeds=Seeds(seed))
drop = link.deployment(clients)
rates = np.mean([link.rates(clients, Seeds(seed).generator("network", t)) for t in range(1, 21)],
                axis=0)
payload = 32 * 100_000  # bits: an fp32 update of 100k parameters
for u in np.argsort(drop.pathloss_db)[[0, clients // 2, -1]]:
    print(f"client {u:2d}: {drop.distance_m[u]:5.0f} m, {'LoS ' if drop.los[u] else 'NLoS'}, "
          f"loss {drop.pathloss_db[u]:5.1f} dB -> {rates[u] / 1e6:6.2f} Mbit/s, "
          f"upload {payload / rates[u]:6.2f} s")

fig, ax = plt.subplots(figsize=(5, 3.2))
ax.semilogy(drop.pathloss_db, rates / 1e6, "o")
ax.set_xlabel("path loss with shadowing and walls [dB]")
ax.set_ylabel("mean NR rate [Mbit/s]")
ax.set_title("UMi sector, 20 MHz at 30 kHz, 4 antennas, 23 dBm UEs")
fig.tight_layout()

# %%
# Power control gives every client the same received power per PRB until its 23 dBm run
# out; past that point a client concentrates its power on fewer PRBs and its rate falls
# with its loss.
#
# FedAvg with a 1 s deadline
# --------------------------
# The deadline drops the uploads that do not end in time, as over ``tdma``. Under NR the
# clients that miss it are the same cell-edge ones round after round.
raw = {"seed": seed, "rounds": 6, "eval_every": 2,
       "data": {"dataset": "synthetic", "num_clients": clients, "samples_per_client": 60},
       "model": {"name": "fcnn", "options": {"hidden": 150}},
       "local": {"lr": 0.05, "batch_size": 20, "steps": 5},
       "algorithm": {"name": "fedavg", "clients_per_round": 10},
       "network": {"model": "nr", "deadline_s": 1.0}}
out = Path(tempfile.mkdtemp()) / "nr"
wirelessfl.run_job(wirelessfl.open_run(raw), out, quiet=True)
rows = wirelessfl.RunRecord(out).rows()
ids, counts = np.unique([u for r in rows[1:] for u in r.get("dropped", [])], return_counts=True)
print(f"accuracy {rows[-1]['test_accuracy']:.3f} after {rows[-1]['sim_time_s']:.1f} simulated s; "
      f"dropped uploads by client: {dict(zip(ids.tolist(), counts.tolist()))}")
print("the clients with the most loss:", np.argsort(drop.pathloss_db)[-4:].tolist())
