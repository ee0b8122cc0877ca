"""
Adding your own algorithm, from your own code
=============================================

An algorithm is two small pieces: a frozen dataclass of hyperparameters (what a config's
``algorithm`` section may set) and a class that says what clients do locally and what the
server does with their updates. Everything else — client sampling, the batched engine,
network timing, checkpoints, records — is shared. Here we add *FedClip*: FedAvg whose
clients clip each gradient entry to [−c, c] before the step, register it from this script
(no file of the project is edited) and run it on both client engines.
"""

# %%
# The hyperparameters and the local rule
# --------------------------------------
# :class:`wirelessfl.LocalSGD` runs local steps; its ``correct`` hook changes the gradient
# before each step. The rule below acts entry by entry, so it gives the same numbers on
# stacked clients (the batched engine, one vectorised step for all clients of a round)
# as one client at a time (the loop engine).
from dataclasses import dataclass

import wirelessfl
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams


@dataclass(frozen=True)
class FedClipHParams(FedAvgHParams):
    """FedAvg's hyperparameters and ``clip``, the bound c on each gradient entry."""

    clip: float = 0.05

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.clip <= 1e6:  # a ValueError is a one-line error for configs
            raise ValueError(f"clip must be > 0 and <= 1e+06, got {self.clip}")


class ClippedSGD(wirelessfl.LocalSGD):
    """Local SGD on the gradient clipped entrywise to [−c, c]."""

    elementwise = True   # correct() acts entry by entry: the batched engine may stack clients

    def __init__(self, model, hp, clip):
        super().__init__(model, hp)
        self.clip = clip

    def correct(self, grads, params, start, ctx):
        return {k: g.clamp(-self.clip, self.clip) for k, g in grads.items()}


class FedClip(FedAvg):
    """FedAvg with :class:`ClippedSGD` clients (the server step is FedAvg's)."""

    def __init__(self, env, hp=FedClipHParams()):
        super().__init__(env, hp)
        self.update = ClippedSGD(env.model, env.local, hp.clip)


wirelessfl.register_algorithm("fedclip", FedClipHParams, FedClip)
print("registered:", "fedclip" in wirelessfl.algorithm_names())

# %%
# Running it from a config
# ------------------------
# The registered name works wherever a built-in one does: in a mapping passed to
# :func:`wirelessfl.open_run`, in a YAML file or ``--set algorithm.name=fedclip`` on the command
# line (with ``--plugin``: the last section). Its
# hyperparameters are checked like the built-in ones.
import tempfile
from pathlib import Path

config = {
    "name": "fedclip", "seed": 3, "rounds": 10,
    "data": {"dataset": "synthetic", "num_clients": 12, "samples_per_client": 50},
    "model": {"name": "fcnn", "options": {"hidden": 32}},
    "local": {"lr": 0.1, "batch_size": 25, "steps": 5},
    "algorithm": {"name": "fedclip", "clip": 0.05},
}
out = Path(tempfile.mkdtemp())
final = {}
for engine in ("batched", "loop"):
    summary = wirelessfl.run_job(wirelessfl.open_run({**config, "engine": engine}),
                                 out / engine, quiet=True)
    rows = wirelessfl.RunRecord(out / engine).rows()
    final[engine] = rows[-1]["test_accuracy"]
    print(f"{engine:>7} engine: test accuracy {final[engine]:.4f}")

# %%
# The two engines agree: the clipping is entrywise, so stacking clients does not mix them.
# A bad value is one line, before anything trains:
try:
    wirelessfl.open_run({**config, "algorithm": {"name": "fedclip", "clip": -1}})
except ValueError as err:
    print("refused:", err)

wirelessfl.registry.unregister("fedclip")   # (only so that this page can be built twice)

# %%
# Shorter, for a rule on FedAvg's server
# --------------------------------------
# When only the local rule is new, :func:`wirelessfl.register_local_rule` builds the
# algorithm class for you from the rule and a dataclass of its options. A rule that is
# *not* entrywise (a per-tensor norm, say) declares ``elementwise = False`` and runs one
# client at a time; an undeclared one is checked against the loop engine on its first
# round and falls back to it, with a one-line notice, instead of silently training on
# mixed-up clients.


@dataclass(frozen=True)
class ClipOptions:
    """The rule's one hyperparameter."""

    clip: float = 0.05


wirelessfl.register_local_rule("fedclip2", ClippedSGD, ClipOptions)
summary = wirelessfl.run_job(
    wirelessfl.open_run({**config, "algorithm": {"name": "fedclip2", "clip": 0.05}}),
    out / "short", quiet=True)
print("fedclip2:", f"{wirelessfl.RunRecord(out / 'short').rows()[-1]['test_accuracy']:.4f}")
wirelessfl.registry.unregister("fedclip2")

# %%
# A new server rule: a coordinate-wise median
# -------------------------------------------
# The server side is one method, :meth:`~wirelessfl.algorithms.fedavg.FedAvg.server_update`:
# it gets the round's :class:`~wirelessfl.engine.task.ClientResult` s, each with the
# client's pseudo-gradient ``delta`` (start − end), and returns the next state. FedMedian
# takes the entrywise median of the Δ_i instead of their weighted mean (robust to a few
# wild clients). FedAvg itself averages the Δ_i while clients train, chunk by chunk, to save
# memory; a class that overrides ``server_update`` gets every client's full Δ_i unless it says
# ``folds_deltas = True`` beside it (only right when it reads them through ``combine``).
# Over a digital link with a deadline, ``delivery`` (a
# :class:`~wirelessfl.net.digital.Delivery`) says who arrived and who was dropped; the
# ``results`` are the arrived ones. Over the air (``network.aggregation: over_the_air``) the
# server never receives a client's Δ_i, only their noisy sum, so a median cannot run there:
# a class that defines its own ``server_update`` is refused over the air unless it
# aggregates through ``self.combine(...)`` (the received sum) and says so with
# ``uses_uplink = True``.
import torch


class FedMedian(FedAvg):
    """FedAvg whose server steps along the coordinate-wise median of the Δ_i."""

    def server_update(self, state, plan, results, delivery=None):
        median = {k: torch.stack([r.delta[k] for r in results]).median(0).values
                  for k in state.params}
        params, opt = self.server_opt.step(state.params, median, state.opt_state)
        return self.finish_round(state, params, opt, results)


wirelessfl.register_algorithm("fedmedian", FedAvgHParams, FedMedian)
summary = wirelessfl.run_job(
    wirelessfl.open_run({**config, "algorithm": {"name": "fedmedian"}}), out / "median", quiet=True)
print("fedmedian:", f"{wirelessfl.RunRecord(out / 'median').rows()[-1]['test_accuracy']:.4f}")

# %%
# The median learns more slowly here than the mean: Synthetic(1, 1) gives each client its
# own model, and the median of 12 heterogeneous updates discards most of what they carry.
# That is the price of its robustness to a few corrupted clients, which this data has none of.
#
# Over a digital link, the median is taken over what arrives. Each client uploads its Δ_i
# over TDMA (its own Rayleigh channel each round, 0 dB); the server waits ``deadline_s`` and
# ``results`` holds the uploads that made it, so the rule needs no change. The rows count
# the uploads and the dropped ones.
digital = {**config, "algorithm": {"name": "fedmedian"},
           "network": {"model": "tdma", "snr_db": 0.0, "deadline_s": 0.02}}
wirelessfl.run_job(wirelessfl.open_run(digital), out / "median-tdma", quiet=True)
last = wirelessfl.RunRecord(out / "median-tdma").rows()[-1]
print(f"fedmedian over TDMA: test accuracy {last['test_accuracy']:.4f}, "
      f"{last['dropped_clients']:.0f} of {last['uploads']:.0f} uploads missed the deadline")

# %%
# Over the air it cannot run as it is. AirComp computes a *sum*: every client transmits at
# once and the receiver gets Σ_i Δ_i plus noise, never a single Δ_i, so there is nothing to
# take a median of. A class with its own ``server_update`` is refused over the air, in one
# line, before anything trains:
try:
    wirelessfl.open_run({**config, "algorithm": {"name": "fedmedian"},
                         "network": {"model": "aircomp", "aggregation": "over_the_air"}})
except ValueError as err:
    print("refused:", err)
wirelessfl.registry.unregister("fedmedian")

# %%
# A rule that *is* a weighted sum (a norm-bounded mean, say) can go over the air: aggregate
# through ``self.combine(state, results)``, which returns the received sum, and declare
# ``uses_uplink = True``. The built-in ``algorithm.robust: median`` is refused over the air
# for the same reason as FedMedian.

# %%
# The same algorithm from the command line
# -----------------------------------------
# The command cannot import your code by itself: a config that names your algorithm is
# refused as an unknown algorithm. Put the class and its ``register_algorithm`` line in a
# file and name it with ``--plugin`` (a module name on your ``PYTHONPATH`` works too; an
# installed package registers itself through the ``wirelessfl.plugins`` entry point). The
# run folder records the plug-in, and ``--resume``, ``figures``, ``sweep`` and ``--jobs``
# workers load it the same way. Here, a second server rule in such a file: the
# coordinate-wise trimmed mean, which drops each entry's largest and smallest update.
import textwrap

from wirelessfl.cli import main

(out / "trimmed.py").write_text(textwrap.dedent("""
    import torch
    import wirelessfl
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams

    class FedTrimmed(FedAvg):
        \"\"\"The coordinate-wise mean of the Δ_i without each entry's largest and smallest.\"\"\"

        def server_update(self, state, plan, results, delivery=None):
            trimmed = {}
            for k in state.params:
                ordered = torch.stack([r.delta[k] for r in results]).sort(0).values
                trimmed[k] = ordered[1:-1].mean(0) if len(results) > 2 else ordered.mean(0)
            params, opt = self.server_opt.step(state.params, trimmed, state.opt_state)
            return self.finish_round(state, params, opt, results)

    wirelessfl.register_algorithm("fedtrimmed", FedAvgHParams, FedTrimmed)
"""))
(out / "trimmed.yaml").write_text(textwrap.dedent("""
    rounds: 3
    data: {dataset: synthetic, num_clients: 12, samples_per_client: 40}
    model: {name: linear}
    local: {lr: 0.05, batch_size: 10, steps: 10}
    algorithm: {name: fedtrimmed}
"""))
code = main(["run", str(out / "trimmed.yaml"), "--plugin", str(out / "trimmed.py"),
             "--out", str(out / "trimmed-cli"), "--quiet"])
print("exit code", code)
wirelessfl.registry.unregister("fedtrimmed")

# %%
# The runs above were written to a temporary folder, which the tutorial removes at its end.
import shutil

shutil.rmtree(out, ignore_errors=True)
