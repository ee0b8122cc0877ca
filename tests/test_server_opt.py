"""Server optimisers against hand-computed steps; FedAdam-family runs resume exactly."""

import math

import pytest
import torch

from wirelessfl.run.config import ConfigError, resolve
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.records import RunRecord
from wirelessfl.run.rounds import RoundsJob
from wirelessfl.server.optimizers import ServerOptimizer

G1, G2 = 2.0, -1.0  # two rounds' aggregated updates of a one-entry model, x0 = 1
LR, B1, B2, EPS, MU = 0.1, 0.9, 0.99, 1e-8, 0.5


def _by_hand(name):
    x, m, v, vhat = 1.0, 0.0, 0.0, 0.0
    for g in (G1, G2):
        if name == "sgd":
            x -= LR * g
            continue
        if name == "momentum":
            m = MU * m + g
            x -= LR * m
            continue
        m = B1 * m + (1 - B1) * g
        if name == "yogi":
            v = v - (1 - B2) * g * g * math.copysign(1.0, v - g * g) if v != g * g else v
        elif name == "adagrad":
            v = v + g * g
        else:
            v = B2 * v + (1 - B2) * g * g
        if name == "amsgrad":
            vhat = max(vhat, v, EPS)
            x -= LR * m / math.sqrt(vhat)
        else:
            x -= LR * m / (math.sqrt(v) + EPS)
    return x


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam", "amsgrad", "yogi", "adagrad"])
def test_server_optimisers_match_hand_computed_steps(name):
    opt = ServerOptimizer(name, lr=LR, momentum=MU, betas=(B1, B2), eps=EPS)
    x, state = {"w": torch.tensor([1.0], dtype=torch.float64)}, None
    for g in (G1, G2):
        x, state = opt.step(x, {"w": torch.tensor([g], dtype=torch.float64)}, state)
    assert float(x["w"]) == pytest.approx(_by_hand(name), rel=1e-12)


def test_amsgrad_floor_and_no_bias_correction():
    opt = ServerOptimizer("amsgrad", lr=1.0, betas=(0.9, 0.99), eps=1e-8)
    x, state = opt.step({"w": torch.zeros(1, dtype=torch.float64)},
                        {"w": torch.zeros(1, dtype=torch.float64)}, None)
    assert float(state.vhat["w"]) == 1e-8 and float(x["w"]) == 0.0
    adam = ServerOptimizer("adam", lr=1.0, betas=(0.9, 0.99), eps=0.0 + 1e-12)
    x, _ = adam.step({"w": torch.zeros(1, dtype=torch.float64)},
                     {"w": torch.ones(1, dtype=torch.float64)}, None)
    assert float(x["w"]) == pytest.approx(-0.1 / math.sqrt(0.01), rel=1e-9)  # m/√v, no 1/(1-β^t)


@pytest.mark.parametrize("bad", [{"server_optimizer": "lion"}, {"server_lr": 0},
                                 {"server_betas": [1.0, 0.5]}, {"server_eps": -1},
                                 {"server_momentum": 1.0}])
def test_bad_server_settings_name_the_key(bad):
    with pytest.raises(ConfigError, match="server"):
        resolve({"algorithm": {"name": "fedadam", **bad}})


RAW = {"name": "adam", "seed": 2, "rounds": 4,
       "data": {"dataset": "synthetic", "num_clients": 10, "samples_per_client": 40},
       "model": {"name": "linear"}, "local": {"lr": 0.05, "batch_size": 10, "steps": 3},
       "algorithm": {"name": "fedams", "server_lr": 0.03, "clients_per_round": 5}}


def test_fedams_learns_and_resumes_with_its_moments(tmp_path, monkeypatch, interrupt_after):
    full = run_job(open_run(RAW), tmp_path / "full", quiet=True)
    rows = RunRecord(tmp_path / "full").rows()
    assert rows[-1]["test_accuracy"] > rows[0]["test_accuracy"]
    exp = open_run(RAW).exp
    interrupt_after(exp, 2)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    ckpt = RunRecord(tmp_path / "cut").load_checkpoint()
    assert set(ckpt["opt_state"]) == {"m", "v", "vhat"}
    cut = run_job(open_run(RAW), tmp_path / "cut", resume=True, quiet=True)
    assert cut["final_accuracy"] == full["final_accuracy"]


def test_fedadagrad_s_default_server_rate_is_its_preset_s_and_old_runs_keep_their_key():
    """The class default agrees with the preset and the reason given there (1e-2); the frozen
    key record keeps 1e-3 for runs made before, so they are not taken for new ones."""
    from wirelessfl.algorithms.fedavg import FedAdagradHParams
    from wirelessfl.run.config import load_raw
    from wirelessfl.run.configtypes import qualified_name
    from wirelessfl.run.key_schema import CHANGED_DEFAULTS, FROZEN

    assert FedAdagradHParams().server_lr == load_raw("fedadagrad_fmnist")["algorithm"]["server_lr"]
    name = qualified_name(FedAdagradHParams)
    assert FROZEN[name]["server_lr"] == 1e-3 and (name, "server_lr") in CHANGED_DEFAULTS
