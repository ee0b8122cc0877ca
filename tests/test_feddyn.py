"""FedDyn (Acar et al., ICLR 2021), added as one module plus one registry line: its
equivalences and its invariant, on both engines."""

import pytest
import torch

from wirelessfl.engine import client_store
from wirelessfl.run.config import resolve
from wirelessfl.run.kinds import open_run

RAW = {"seed": 5, "rounds": 3,
       "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 4}}


def _rounds(algorithm, engine="batched", n=3):
    exp = open_run({**RAW, "engine": engine, "algorithm": algorithm}).exp
    state = exp.initial_state()
    for _ in range(n):
        state, _ = exp.algorithm.apply(state)
    return exp, state


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_feddyn_with_alpha_zero_is_fedavg(engine):
    """α = 0: no linear term, no pull, h = 0, so every round is a uniform FedAvg round.

    Bit for bit on the loop; on the batched engine FedAvg's plain SGD step is fused into the
    weight-gradient GEMM (FedDyn's corrected step is not), which rounds differently."""
    _, dyn = _rounds({"name": "feddyn", "alpha": 0.0, "clients_per_round": 5}, engine)
    _, avg = _rounds({"name": "fedavg", "weighting": "uniform", "clients_per_round": 5}, engine)
    tol = {"rtol": 0, "atol": 0} if engine == "loop" else {"rtol": 1e-5, "atol": 1e-6}
    for k in dyn.params:
        torch.testing.assert_close(dyn.params[k], avg.params[k], **tol)


def test_feddyn_loop_equals_batched():
    _, loop = _rounds({"name": "feddyn", "alpha": 0.1, "clients_per_round": 5}, "loop")
    _, batched = _rounds({"name": "feddyn", "alpha": 0.1, "clients_per_round": 5}, "batched")
    for k in loop.params:
        torch.testing.assert_close(loop.params[k], batched.params[k], rtol=1e-4, atol=1e-5)
    assert loop.client_states.keys() == batched.client_states.keys()
    for u, h in loop.client_states.items():
        for k in h:
            torch.testing.assert_close(h[k], batched.client_states[u][k], rtol=1e-3, atol=1e-5)


def test_server_h_is_the_mean_of_every_clients_h():
    """h⁺ = h + (α/m) Σ_P Δ_i and h_i⁺ = h_i + α Δ_i keep h = (1/m) Σ_i h_i (all m clients,
    absent ones at 0) after any number of partial-participation rounds."""
    exp, state = _rounds({"name": "feddyn", "alpha": 0.3, "clients_per_round": 3}, n=4)
    m = exp.algorithm.env.num_clients
    assert 3 <= len(state.client_states) < m  # some clients never took part
    zeros = {k: torch.zeros_like(v) for k, v in state.params.items()}
    his = [client_store.load(h, zeros) for h in state.client_states.values()]
    for k, h in state.opt_state.h.items():
        torch.testing.assert_close(h, sum(hi[k] for hi in his) / m, rtol=1e-5, atol=1e-7)


def test_feddyn_refuses_a_server_step_it_does_not_have():
    from wirelessfl.errors import ConfigError

    with pytest.raises(ConfigError, match="server_optimizer sgd with server_lr 1"):
        resolve({**RAW, "algorithm": {"name": "feddyn", "server_lr": 0.5}})


def test_feddyn_over_the_air_builds_h_from_what_the_server_received():
    """Over the air the server has only the received (noisy) mean of the Δ_i: h grows by
    α/m · |P_t| × that mean, so after one round from h = 0 (params₁ = params₀ − mean − h/α)
    h/α · (1 + n/m) = (n/m)(params₀ − params₁) holds exactly; with the exact Σ Δ_i (the
    channel ignored) it would not. Sample weighting, which the mean cannot undo, is refused."""
    air = {"network": {"model": "aircomp", "aggregation": "over_the_air", "snr_db": 0.0}}
    exp = open_run({**RAW, **air, "algorithm": {"name": "feddyn", "alpha": 0.1,
                                                "clients_per_round": 4}}).exp
    s0 = exp.initial_state()
    s1, report = exp.algorithm.apply(s0)
    assert report.aircomp_mse > 0
    n, m, alpha = 4, 8, 0.1
    for k, h in s1.opt_state.h.items():
        lhs = h / alpha * (1 + n / m)
        rhs = (n / m) * (s0.params[k] - s1.params[k])
        torch.testing.assert_close(lhs, rhs, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="weighting: uniform"):
        open_run({**RAW, **air, "algorithm": {"name": "feddyn", "weighting": "samples"}})
