"""No algorithm escapes the link (issue 72): every registered round-based algorithm, and a
user's server rule written as tutorial 2 teaches, either runs under over-the-air aggregation,
a deadline and deadline-fitted compression with the link's effect in its rows, or is refused
in one line. Two rounds each on a tiny synthetic task."""

import pytest
import torch

import wirelessfl
from wirelessfl import registry
from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams
from wirelessfl.errors import ConfigError

RAW = {"seed": 1, "rounds": 2,
       "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 8, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 2}}
#: Each link and the row field that shows it acted: the AirComp MSE, who arrived, the widths.
LINKS = {
    "over the air": ({"model": "aircomp", "aggregation": "over_the_air", "snr_db": 0.0},
                     "aircomp_mse"),
    "deadline": ({"model": "tdma", "snr_db": 0.0, "deadline_s": 0.05,
                  "params_per_vector": 100000}, "arrived"),
    "compression": ({"model": "tdma", "snr_db": 0.0, "deadline_s": 0.05,
                     "params_per_vector": 100000, "compression": "quantize"}, "bits_per_param"),
}


class FedMedian(FedAvg):
    """Tutorial 2's server rule: the coordinate-wise median of the Δ_i."""

    def server_update(self, state, plan, results, delivery=None):
        median = {k: torch.stack([r.delta[k] for r in results]).median(0).values
                  for k in state.params}
        params, opt = self.server_opt.step(state.params, median, state.opt_state)
        return self.finish_round(state, params, opt, results)


@pytest.mark.parametrize("link", list(LINKS))
def test_every_algorithm_runs_under_the_link_or_is_refused_in_one_line(tmp_path, link):
    network, field = LINKS[link]
    names = [*registry.names("rounds"), "fedmedian_link"]
    wirelessfl.register_algorithm("fedmedian_link", FedAvgHParams, FedMedian)
    ran, refused = [], []
    try:
        for name in names:
            raw = {**RAW, "algorithm": {"name": name}, "network": network}
            try:
                job = wirelessfl.open_run(raw)
            except ConfigError as exc:
                assert "\n" not in str(exc), (name, str(exc))
                refused.append(name)
                continue
            out = tmp_path / f"{link}-{name}".replace(" ", "_")
            wirelessfl.run_job(job, out, quiet=True)
            rows = wirelessfl.RunRecord(out).rows()
            assert rows[-1].get(field) is not None, (name, link, sorted(rows[-1]))
            ran.append(name)
    finally:
        registry.unregister("fedmedian_link")
    assert "fedavg" in ran and "fedmedian_link" in ([*refused] if link == "over the air" else ran)
    print(f"{link}: {len(ran)} ran with the link's effect in their rows, refused: {refused}")
