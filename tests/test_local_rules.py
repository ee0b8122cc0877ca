"""Local rules on the one client contract: FedProx and SCAFFOLD run batched, equal the loop,
and reduce to FedAvg where they should (issue 17)."""

import dataclasses

import numpy as np
import pytest
import torch

from wirelessfl.algorithms.scaffold import ControlledSGD
from wirelessfl.engine.batched import BatchedExecutor
from wirelessfl.engine.client import ClientTask, LocalHParams
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.rounds import RoundsJob

RAW = {"seed": 4, "rounds": 2,
       "data": {"dataset": "synthetic", "num_clients": 8, "samples_per_client": 30},
       "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.0}},
       "local": {"lr": 0.05, "batch_size": 10, "steps": 4, "momentum": 0.5}}


def _exp(algorithm, engine="batched", **extra):
    return open_run({**RAW, "engine": engine, "algorithm": algorithm, **extra}).exp


def _rounds(exp, n=2):
    state = exp.initial_state()
    for _ in range(n):
        state, _ = exp.algorithm.apply(state)
    return state


def _close(a, b, **tol):
    for k in a.params:
        torch.testing.assert_close(a.params[k], b.params[k], **tol)


@pytest.mark.parametrize("engine", ["loop", "batched"])
@pytest.mark.parametrize("momentum", [0.5, 0.0], ids=["momentum", "plain-fused"])
def test_fedprox_with_mu_zero_is_fedavg(engine, momentum):
    """Bit for bit, with momentum and with plain SGD (the batched engine's fused step)."""
    local = {"local": {**RAW["local"], "momentum": momentum}}
    _close(_rounds(_exp({"name": "fedprox", "mu": 0.0}, engine, **local)),
           _rounds(_exp({"name": "fedavg"}, engine, **local)), rtol=0, atol=0)


@pytest.mark.parametrize("algorithm", [{"name": "fedprox", "mu": 0.5},
                                       {"name": "scaffold", "clients_per_round": 4},
                                       {"name": "scaffold", "c_update": "weighted"},
                                       {"name": "fedams", "server_lr": 0.01},
                                       {"name": "scaffold_m"}, {"name": "fedavg_m"},
                                       {"name": "fedacg", "beta": 0.1, "lam": 0.5},
                                       {"name": "moon", "mu": 1.0, "clients_per_round": 5}])
def test_loop_equals_batched(algorithm):
    loop, batched = _rounds(_exp(algorithm, "loop"), 3), _rounds(_exp(algorithm, "batched"), 3)
    _close(loop, batched, rtol=1e-4, atol=1e-5)
    if algorithm["name"] in ("scaffold", "moon"):  # c_i, the previous models: stacked = per client
        assert sorted(loop.client_states) == sorted(batched.client_states)
        for u, ci in loop.client_states.items():
            for k in ci:
                torch.testing.assert_close(ci[k], batched.client_states[u][k], rtol=1e-3, atol=1e-5)
    if algorithm["name"] == "scaffold":
        for k in loop.opt_state.c:
            torch.testing.assert_close(loop.opt_state.c[k], batched.opt_state.c[k],
                                       rtol=1e-3, atol=1e-5)


def test_fedprox_pulls_towards_the_start():
    far = _rounds(_exp({"name": "fedprox", "mu": 0.0}), 1)
    near = _rounds(_exp({"name": "fedprox", "mu": 50.0}), 1)
    x0 = _exp({"name": "fedavg"}).initial_state()

    def dist(s):
        return sum(float(((s.params[k] - x0.params[k]) ** 2).sum()) for k in s.params)

    assert dist(near) < 0.5 * dist(far)


def test_scaffold_first_round_is_fedavg_and_sets_control_variates():
    """Zero control variates, η_g = 1: round one is a FedAvg round; c_i⁺ = Δ_i/(Kη), c = Σc_i⁺/N."""
    exp = _exp({"name": "scaffold"})
    fedavg = _rounds(_exp({"name": "fedavg"}), 1)
    state = _rounds(exp, 1)
    _close(state, fedavg, rtol=1e-6, atol=1e-7)
    n = exp.algorithm.env.num_clients
    assert len(state.client_states) == n
    for k in state.opt_state.c:
        mean = sum(ci[k] for ci in state.client_states.values()) / n
        torch.testing.assert_close(state.opt_state.c[k], mean, rtol=1e-5, atol=1e-7)


def test_scaffold_correction_is_applied_in_both_engines():
    exp = _exp({"name": "scaffold"})
    model, hp = exp.model, LocalHParams(lr=0.1, batch_size=10, steps=3)
    params = {k: v.detach() for k, v in exp.initial_state().params.items()}
    c = {k: torch.full_like(v, 0.3) for k, v in params.items()}
    tasks = [ClientTask(i, params, exp.algorithm.env.client_indices[i], seed=i, broadcast={"c": c})
             for i in range(4)]
    data = exp.algorithm.env.train
    one = LocalHParams(lr=0.1, batch_size=10, steps=1)
    plain = LoopExecutor().run(ControlledSGD(model, one, corrected=False), data, tasks, one)
    shifted = LoopExecutor().run(ControlledSGD(model, one), data, tasks, one)
    for p, q in zip(plain, shifted):
        for k in p.delta:  # one step: the correction c shifts the step by η c
            torch.testing.assert_close(q.delta[k], p.delta[k] + 0.1 * c[k], rtol=1e-5, atol=1e-6)
    loop = LoopExecutor().run(ControlledSGD(model, hp), data, tasks, hp)
    batched = BatchedExecutor().run(ControlledSGD(model, hp), data, tasks, hp)
    for lp, b in zip(loop, batched):
        for k in lp.delta:
            torch.testing.assert_close(b.delta[k], lp.delta[k], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(b.state[k], lp.state[k], rtol=1e-4, atol=1e-5)


def test_scaffold_resumes_with_its_control_variates(tmp_path, monkeypatch, interrupt_after):
    from wirelessfl.run.records import RunRecord

    raw = {**RAW, "rounds": 4, "name": "sc", "algorithm": {"name": "scaffold", "clients_per_round": 4}}
    full = run_job(open_run(raw), tmp_path / "full", quiet=True)
    exp = open_run(raw).exp
    interrupt_after(exp, 2)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    assert RunRecord(tmp_path / "cut").load_checkpoint()["client_states"]
    cut = run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)
    assert cut["final_accuracy"] == full["final_accuracy"]
    assert np.isfinite(cut["final_loss"])


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_fedavg_m_with_beta_one_is_fedavg(engine):
    _close(_rounds(_exp({"name": "fedavg_m", "beta": 1.0, "weighting": "samples"}, engine)),
           _rounds(_exp({"name": "fedavg"}, engine)), rtol=1e-6, atol=1e-7)


def test_scaffold_m_control_variate_is_the_mean_raw_gradient():
    """c_i⁺ = (1/K) Σ_k g_k along the momentum-steered path (Cheng et al.; docs/papers/fadamgc.md §3.4)."""
    exp = _exp({"name": "scaffold"})
    model = exp.model
    hp = LocalHParams(lr=0.1, batch_size=10, steps=3)
    params = {k: v.detach() for k, v in exp.initial_state().params.items()}
    c = {k: torch.full_like(v, 0.2) for k, v in params.items()}
    ci = {k: torch.full_like(v, -0.1) for k, v in params.items()}
    u = {k: torch.full_like(v, 0.05) for k, v in params.items()}
    beta, idx = 0.3, exp.algorithm.env.client_indices[0]
    task = ClientTask(0, params, idx, seed=5, state=ci, broadcast={"c": c, "u": u})
    [res] = LoopExecutor().run(ControlledSGD(model, hp, beta=beta), exp.algorithm.env.train,
                               [task], hp)
    # replay: same batches, raw gradients summed by hand
    from wirelessfl.engine.client import batch_schedule
    data = exp.algorithm.env.train
    sched = batch_schedule(len(idx), hp, 5)
    x, total = dict(params), {k: torch.zeros_like(v) for k, v in params.items()}
    rule = ControlledSGD(model, hp)
    for pos in sched:
        b = torch.as_tensor(idx[pos])
        p = {k: v.detach().requires_grad_(True) for k, v in x.items()}
        g = torch.autograd.grad(rule.loss(p, data.x[b], data.y[b]), list(p.values()))
        g = dict(zip(p, g))
        total = {k: total[k] + g[k] for k in g}
        d = {k: beta * (g[k] - ci[k] + c[k]) + (1 - beta) * u[k] for k in g}
        x = {k: x[k] - 0.1 * d[k] for k in x}
    for k in params:
        torch.testing.assert_close(res.delta[k], params[k] - x[k], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(res.state[k], total[k] / len(sched), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_fedacg_without_lookahead_or_proximal_term_is_fedavg(engine):
    _close(_rounds(_exp({"name": "fedacg", "beta": 0.0, "lam": 0.0}, engine)),
           _rounds(_exp({"name": "fedavg"}, engine)), rtol=1e-6, atol=1e-7)


def test_fedacg_momentum_accumulates_the_updates():
    exp = _exp({"name": "fedacg", "beta": 0.0, "lam": 0.5})
    x0 = exp.initial_state()
    s1, _ = exp.algorithm.apply(x0)
    s2, _ = exp.algorithm.apply(s1)
    for k in x0.params:  # w_1 = w_0 + m_1 and w_2 = w_1 + m_2
        torch.testing.assert_close(s1.params[k], x0.params[k] + s1.opt_state.m[k])
        torch.testing.assert_close(s2.params[k], s1.params[k] + s2.opt_state.m[k])


def test_poly_schedule_restarts_and_reaches_zero():
    exp = _exp({"name": "fedavg"})
    raw = {**RAW, "local": {**RAW["local"], "schedule": "poly", "schedule_power": 1.0,
                            "schedule_rounds": 4}, "algorithm": {"name": "fedavg"}}
    algo = open_run(raw).exp.algorithm
    assert [algo.client_lr(t) for t in (0, 2, 4, 6)] == pytest.approx([0.05, 0.025, 0.0, 0.0])
    assert algo.client_lr(5, origin=5) == pytest.approx(0.05)
    assert exp.algorithm.client_lr(3) is None
    state = algo.init(exp.initial_state().params)
    for _ in range(4):
        state, _ = algo.apply(state)
    frozen, _ = algo.apply(state)  # γ = 0 from round 4 on: no movement at all
    _close(frozen, state, rtol=0, atol=0)


def test_single_task_run_stops_at_its_target(tmp_path):
    from wirelessfl.run.records import RunRecord

    raw = {**RAW, "name": "stop", "rounds": 30, "target_accuracy": 0.3, "stop_at_target": True,
           "algorithm": {"name": "fedavg"}}
    summary = run_job(open_run(raw), tmp_path / "r", quiet=True)
    rows = RunRecord(tmp_path / "r").rows()
    assert summary["target_reached"] and rows[-1]["test_accuracy"] >= 0.3
    assert summary["rounds"] < 30 and all(r["test_accuracy"] < 0.3 for r in rows[:-1])
    again = run_job(open_run(raw), tmp_path / "r", resume=True, quiet=True)
    assert again["rounds"] == summary["rounds"]  # a resumed finished run trains no further


ALL_RULES = [{"name": "fedavg"}, {"name": "fedprox", "mu": 0.2}, {"name": "scaffold"},
             {"name": "moon", "mu": 1.0}, {"name": "fedacg", "beta": 0.1, "lam": 0.5},
             {"name": "fedavg_m"}, {"name": "scaffold_m"}, {"name": "fedadam", "server_lr": 0.01},
             {"name": "fedams", "server_lr": 0.01}, {"name": "continuous", "kl_coefficient": 1.0}]


@pytest.mark.parametrize("algorithm", ALL_RULES, ids=lambda a: a["name"])
def test_loop_equals_batched_with_dropout(algorithm):
    """The same client draws the same dropout masks in both engines."""
    raw = {**RAW, "model": {"name": "fcnn", "options": {"hidden": 16, "dropout": 0.5}}}
    loop = open_run({**raw, "engine": "loop", "algorithm": algorithm}).exp
    batched = open_run({**raw, "engine": "batched", "algorithm": algorithm}).exp
    _close(_rounds(loop, 2), _rounds(batched, 2), rtol=1e-4, atol=1e-5)
    no_dropout = open_run({**RAW, "engine": "loop", "algorithm": algorithm}).exp
    with pytest.raises(AssertionError):  # and the masks do matter
        _close(_rounds(loop, 2), _rounds(no_dropout, 2), rtol=1e-4, atol=1e-5)


def test_checkpoints_only_at_the_interval_and_resume_from_the_last(tmp_path, monkeypatch, interrupt_after):
    from wirelessfl.run.records import RunRecord

    raw = {**RAW, "rounds": 7, "name": "ck", "checkpoint_every": 3,
           "algorithm": {"name": "scaffold", "state_dtype": "float16"}}
    saved = []
    real = RunRecord.save_checkpoint

    def counting(self, payload):
        saved.append(payload["round"])
        return real(self, payload)

    monkeypatch.setattr(RunRecord, "save_checkpoint", counting)
    full = run_job(open_run(raw), tmp_path / "full", quiet=True)
    assert saved == [3, 6, 7]
    ckpt = RunRecord(tmp_path / "full").load_checkpoint()
    rows = ckpt["client_states"]["fields"][""]["rows"]  # the stacked store: c_i, one tensor a key
    assert rows and all(v.dtype == torch.float16 and v.device.type == "cpu" for v in rows.values())
    exp = open_run(raw).exp
    interrupt_after(exp, 5)
    with pytest.raises(KeyboardInterrupt):
        run_job(RoundsJob(exp), tmp_path / "cut", quiet=True)
    assert RunRecord(tmp_path / "cut").load_checkpoint()["round"] == 3
    cut = run_job(open_run(raw), tmp_path / "cut", resume=True, quiet=True)
    assert cut["final_accuracy"] == full["final_accuracy"]
    rows = [r["round"] for r in RunRecord(tmp_path / "cut").rows()]
    assert rows == list(range(8))


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_moon_with_mu_zero_is_fedavg_and_keeps_previous_models(engine):
    moon = _rounds(_exp({"name": "moon", "mu": 0.0}, engine), 2)
    _close(moon, _rounds(_exp({"name": "fedavg"}, engine), 2), rtol=1e-6, atol=1e-7)
    assert len(moon.client_states) == 8
    assert all(v.device.type == "cpu" for s in moon.client_states.values() for v in s.values())


def test_moon_contrastive_term_changes_the_round():
    a = _rounds(_exp({"name": "moon", "mu": 5.0}), 2)
    b = _rounds(_exp({"name": "moon", "mu": 0.0}), 2)
    with pytest.raises(AssertionError):
        _close(a, b, rtol=1e-4, atol=1e-5)


def test_moon_refuses_a_model_without_features():
    from wirelessfl.algorithms.moon import ContrastiveSGD
    from wirelessfl.engine.client import LocalHParams
    from wirelessfl.models import build_model

    model = build_model("feddyn_cnn", (1, 28, 28), 10, seed=0)
    with pytest.raises(ValueError, match="MOON needs a model with features"):
        ContrastiveSGD(model, LocalHParams(), mu=1.0, tau=0.5)


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_moon_on_the_linear_model_contrasts_logits(engine):
    """The dynamic-clients paper's MNIST/FMNIST MOON: the linear model's features are its logits."""
    lin = {"model": {"name": "linear"}}
    moon = _rounds(_exp({"name": "moon", "mu": 0.0}, engine, **lin), 2)
    _close(moon, _rounds(_exp({"name": "fedavg"}, engine, **lin), 2), rtol=1e-6, atol=1e-7)
    a = _rounds(_exp({"name": "moon", "mu": 5.0}, engine, **lin), 2)
    with pytest.raises(AssertionError):
        _close(a, moon, rtol=1e-4, atol=1e-5)


def test_a_restarted_schedule_survives_a_resume(tmp_path):
    import wirelessfl.run.rounds as runner
    from wirelessfl.run.records import RunRecord

    raw = {**RAW, "rounds": 3, "name": "sched", "algorithm": {"name": "fedavg"},
           "local": {**RAW["local"], "schedule": "poly", "schedule_rounds": 10}}
    exp = open_run(raw).exp
    first = RoundsJob(exp)
    first.state = dataclasses.replace(first.state, schedule_origin=2)  # as a session start sets it
    run_job(first, tmp_path / "r", quiet=True)
    assert RunRecord(tmp_path / "r").load_checkpoint()["schedule_origin"] == 2
    again = open_run(raw).exp
    job = runner.RoundsJob(again)
    job.restore(RunRecord(tmp_path / "r").load_checkpoint())
    assert job.state.schedule_origin == 2


@pytest.mark.parametrize("engine", ["loop", "batched"])
def test_continuous_with_no_distillation_is_fedavg(engine):
    """docs/papers/dynamic_clients.md §3 item 3 with λ_KL = 0: FedAvg-style training, bit for bit."""
    _close(_rounds(_exp({"name": "continuous", "kl_coefficient": 0.0}, engine)),
           _rounds(_exp({"name": "fedavg"}, engine)), rtol=0, atol=0)


def test_continuous_loss_is_ce_plus_batchmean_kl_to_the_sessions_initial_model():
    import torch.nn.functional as F
    from torch.func import functional_call

    exp = _exp({"name": "continuous", "kl_coefficient": 0.7})
    s0 = exp.initial_state()
    s1, _ = exp.algorithm.apply(s0)
    assert all(torch.equal(s1.opt_state.teacher[k], s0.params[k]) for k in s0.params)
    s2, _ = exp.algorithm.apply(s1)   # the teacher stays for the session
    assert all(torch.equal(s2.opt_state.teacher[k], s0.params[k]) for k in s0.params)
    fresh = exp.algorithm.start_session(s2, 2)   # a new session: its start is the teacher
    s3, _ = exp.algorithm.apply(fresh)
    assert all(torch.equal(s3.opt_state.teacher[k], s2.params[k]) for k in s2.params)
    x, y = exp.splits.train.x[:10], exp.splits.train.y[:10]
    rule = exp.algorithm.update
    w = torch.full((10,), 0.1)
    loss, data = rule.objective(s3.params, {}, s3.params, x, y, w, {"teacher": s0.params})
    out = functional_call(exp.model, s3.params, (x,))
    teacher = functional_call(exp.model, s0.params, (x,))
    expected = F.cross_entropy(out, y) + 0.7 * F.kl_div(F.log_softmax(out, -1),
                                                        F.softmax(teacher, -1),
                                                        reduction="batchmean")
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(data, F.cross_entropy(out, y))
