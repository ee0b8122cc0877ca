"""FedAST and Sync-ST on small real simulations (synthetic data, linear model)."""

import dataclasses

import numpy as np
import pytest
import torch

from wirelessfl.algorithms.fedast.centralized import Centralized, CentralizedHParams
from wirelessfl.algorithms.fedast.fedast import FedAST, FedASTHParams
from wirelessfl.algorithms.fedast.hparams import SyncSTHParams
from wirelessfl.algorithms.fedast.realloc import normalised_variance, realloc_units
from wirelessfl.algorithms.fedast.simtime import ClientPool
from wirelessfl.algorithms.fedast.simulation import split_budget
from wirelessfl.algorithms.fedast.sync_st import SyncST
from wirelessfl.algorithms.fedast.tasks import train_requests
from wirelessfl.engine.client import batch_schedule
from wirelessfl.engine.loop import LoopExecutor
from wirelessfl.net.delays import LatencyModel
from wirelessfl.rng import Seeds
from wirelessfl.run.config import ConfigError
from wirelessfl.run.kinds import open_run, run_job
from wirelessfl.run.multitask import resolve_multitask
from wirelessfl.run.records import RunRecord
from wirelessfl.run.tasks import build_tasks

N = 20


class Fixed(LatencyModel):
    def __init__(self, durations):
        self.durations = np.asarray(durations, float)

    def sample(self, client, task, rng):
        return float(self.durations[client])


class Recording(LoopExecutor):
    """The real loop executor, remembering what it trained."""

    def __init__(self):
        super().__init__("cpu")
        self.calls = []

    def run(self, update, data, tasks, hp):
        self.calls.extend((t.client, t.seed, {k: v.clone() for k, v in t.params.items()})
                          for t in tasks)
        return super().run(update, data, tasks, hp)


def _tasks(m=1, seed=0):
    cfg = resolve_multitask({"tasks": ["synthetic_linear"] * m, "pool": {"clients": N}})
    return build_tasks(cfg.tasks, N, Seeds(seed), torch.device("cpu"))


def _never(task, state, now):
    return False


def _close(a, b):
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_buffer_one_and_one_request_is_sequential_sgd():
    """b = 1, η_s = 1, one request in flight (no staleness): plain asynchronous SGD."""
    tasks, ex = _tasks(), Recording()
    sim = FedAST(tasks, ClientPool(Fixed(np.linspace(1, 2, N)), N), ex, Seeds(0),
                 FedASTHParams(requests=1, buffer=1, server_lr=1.0))
    sim.run(_never, max_rounds=6)
    assert sim.states[0].round == 6 and set(sim.states[0].staleness) == {0}
    x = tasks[0].init_params
    for client, seed, start in ex.calls[:6]:
        _close(start, x)
        delta = train_requests(LoopExecutor("cpu"), tasks[0], [x], [client], [seed])[0].delta
        x = {k: x[k] - delta[k] for k in x}
    _close(sim.states[0].params, x)


def test_first_round_with_full_buffer_is_fedavg():
    """Equal latencies, b = R, η_s = 1: the first aggregation is a FedAvg round of the R clients."""
    tasks, ex = _tasks(), Recording()
    r = 8
    sim = FedAST(tasks, ClientPool(Fixed(np.ones(N)), N), ex, Seeds(3),
                 FedASTHParams(requests=r, buffer=r, server_lr=1.0))
    sim.run(_never, max_rounds=1)
    first = ex.calls[:r]
    deltas = train_requests(LoopExecutor("cpu"), tasks[0], [tasks[0].init_params] * r,
                            [c for c, _, _ in first], [s for _, s, _ in first])
    x0 = tasks[0].init_params
    _close(sim.states[0].params, {k: x0[k] - sum(d.delta[k] for d in deltas) / r for k in x0})


def test_versions_stay_bounded_by_outstanding_requests():
    tasks = _tasks(2)
    sim = FedAST(tasks, ClientPool(Fixed(np.random.default_rng(0).uniform(1, 4, N)), N, cap=10),
                 LoopExecutor("cpu"), Seeds(0), FedASTHParams(requests=24, ratio=4))
    seen = []

    def check(task, state, now):
        seen.append((len(sim.versions), len(sim.pending)))
        assert len(sim.versions) <= len(sim.pending) + len(tasks)
        assert sim.pool.busy <= 10
        return False

    sim.run(check, max_rounds=15)
    assert len(seen) == 30 and max(v for v, _ in seen) > len(tasks)  # stale versions were kept


def test_same_seed_same_numbers_and_staleness_grows_with_requests(tmp_path):
    def run(name, seed, requests):
        cfg = resolve_multitask({
            "tasks": ["synthetic_linear", "synthetic_linear"], "seed": seed, "device": "cpu",
            "pool": {"clients": N, "available": 10},
            "method": {"name": "fedast", "requests": requests, "ratio": 4}, "max_rounds": 12})
        run_job(open_run(cfg), tmp_path / name, quiet=True)
        return [(r["task"], r["round"], r["sim_time"], r["test_accuracy"], r["staleness_mean"])
                for r in RunRecord(tmp_path / name).rows()]

    a, b, c = run("a", 5, 16), run("b", 5, 16), run("c", 6, 16)
    assert a == b and a != c
    few = np.mean([r[4] for r in run("few", 5, 4)])
    many = np.mean([r[4] for r in a])
    assert many > few


def test_finished_task_hands_its_budget_over():
    tasks = _tasks(2)
    sim = FedAST(tasks, ClientPool(Fixed(np.ones(N)), N), LoopExecutor("cpu"), Seeds(0),
                 FedASTHParams(requests=16, ratio=4))

    def first_done(task, state, now):
        return task.index == 0 and state.round == 2

    sim.run(first_done, max_rounds=5)
    assert sim.states[0].finished and sim.states[0].target_requests == 0
    assert sim.states[1].target_requests == 16 and sim.states[1].buffer_size == 4
    assert not any(r.task == 0 for r in sim.pending.values())


def test_realloc_units_and_variance():
    units = realloc_units(384, 32, np.array([1.0, 2.0, 0.1, 1.0]))
    assert units.sum() == 384 and (units % 32 == 0).all() and units.min() == 32
    assert units[1] == units.max()
    same = {"w": torch.ones(3)}
    assert normalised_variance([same, same]) == 0.0
    spread = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([-1.0, 0.0])},
              {"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([-1.0, 2.0])}]
    assert normalised_variance(spread) == pytest.approx(2.0 / 1.0)
    parts = split_budget(10, np.array([1.0, 1.0, 2.0]), np.random.default_rng(0))
    assert parts.sum() == 10 and parts[2] >= 5


@pytest.mark.parametrize("variance, expect", [("paper", (16, 32)), ("code", (8, 40))])
def test_realloc_follows_the_estimated_heterogeneity(variance, expect):
    """Updates twice as spread around their mean in task 1: σ̂ doubles (paper, R_m ∝ σ̂) or
    the weight quadruples (code variant, ∝ σ̃²); 48 requests in units of r = 8."""
    tasks = _tasks(2)
    sim = FedAST(tasks, ClientPool(Fixed(np.ones(N)), N), LoopExecutor("cpu"), Seeds(0),
                 FedASTHParams(option="D", requests=48, ratio=8, window=4, variance=variance))
    g = torch.Generator().manual_seed(0)
    noise = [torch.randn(50, generator=g) for _ in range(4)]
    noise = [n - sum(noise) / 4 for n in noise]
    for j, scale in ((0, 1.0), (1, 2.0)):
        sim.states[j].window.extend({"w": 3.0 + scale * n} for n in noise)
    sim.arrivals_since_realloc = 10**6
    sim._realloc()
    assert tuple(s.target_requests for s in sim.states) == expect
    assert sim.arrivals_since_realloc == 0


def test_realloc_waits_for_full_windows():
    tasks = _tasks(2)
    sim = FedAST(tasks, ClientPool(Fixed(np.ones(N)), N), LoopExecutor("cpu"), Seeds(0),
                 FedASTHParams(option="D", requests=48, ratio=8, window=4))
    sim.states[0].window.extend({"w": torch.randn(5)} for _ in range(4))
    sim.arrivals_since_realloc = 10**6
    sim._realloc()
    assert [s.target_requests for s in sim.states] == [24, 24]


def test_sync_st_keeps_first_k_and_waits_for_the_slowest_kept():
    tasks, ex = _tasks(2), Recording()
    durations = np.arange(1, N + 1, dtype=float)
    sim = SyncST(tasks, ClientPool(Fixed(durations), N), ex, Seeds(0),
                 SyncSTHParams(first_k=3, clients=10, split=(5, 5)))
    sim.run(_never, max_rounds=1)
    chosen = [c for c, _, _ in ex.calls]
    assert len(chosen) == 6 and sim.states[0].updates == 3
    # the round lasts until the 3rd-fastest client of the slower task
    assert sim.time == max(sorted(durations[c] for c in chosen[:3])[-1],
                           sorted(durations[c] for c in chosen[3:])[-1])
    no_mitigation = SyncST(tasks, ClientPool(Fixed(durations), N), LoopExecutor("cpu"), Seeds(0),
                           SyncSTHParams(first_k=None, clients=10, split=(5, 5)))
    no_mitigation.run(_never, max_rounds=1)
    assert no_mitigation.time > sim.time


def test_bad_multitask_configs_name_the_problem():
    with pytest.raises(ConfigError, match="unknown task"):
        resolve_multitask({"tasks": ["nope"]})
    with pytest.raises(ConfigError, match="option"):
        resolve_multitask({"tasks": ["synthetic_linear"], "method": {"option": "X"}})
    with pytest.raises(ConfigError, match="split"):
        resolve_multitask({"tasks": ["synthetic_linear"],
                           "method": {"name": "sync_st", "split": [1, 2]}})
    with pytest.raises(ConfigError, match="step_seconds"):  # inert: compute is the pool's
        resolve_multitask({"tasks": ["synthetic_linear"],
                           "network": {"model": "fixed", "step_seconds": 0.5}})


def test_ucb_round_zero_trains_everyone_then_prefers_high_loss_clients():
    tasks, ex = _tasks(2), Recording()
    sim = SyncST(tasks, ClientPool(Fixed(np.ones(N)), N), ex, Seeds(0),
                 SyncSTHParams(first_k=3, clients=10, split=(5, 5), assignment="ucb"))
    sim.run(_never, max_rounds=1)
    assert [s.updates for s in sim.states] == [N, N]          # no first-k in round 0
    assert sim.time == 2.0                                     # each client ran 2 jobs FIFO
    ucb = sim.assignment
    ucb.losses[0] = np.arange(N, dtype=float)   # task 0: score = client id (counts are 1)
    picks, first_k = ucb.assign(1, [0, 1], [5, 5], np.random.default_rng(0))
    pool = np.random.default_rng(0).permutation(N)[:15]
    # round 1 starts with task 1 (r mod M); task 0 then takes the 5 highest ids left
    left = [c for c in pool if c not in set(picks[1])]
    assert first_k and set(picks[1]) <= set(pool) and set(picks[1]).isdisjoint(picks[0])
    assert sorted(picks[0]) == sorted(left)[-5:]


def test_expected_improvement_prefers_candidates_near_cheap_assignments():
    from wirelessfl.algorithms.fedast.assignment import expected_improvement

    rng = np.random.default_rng(0)
    cheap, costly = rng.integers(0, 2, 40), rng.integers(0, 2, 40)
    seen = np.array([cheap, costly, rng.integers(0, 2, 40)], float)
    near = lambda x: np.where(rng.random(40) < 0.05, 1 - x, x)  # noqa: E731
    ei = expected_improvement(seen, np.array([0.0, 10.0, 6.0]),
                              np.array([near(cheap), near(costly)], float))
    assert ei[0] > ei[1]


def test_bayes_assignment_gives_disjoint_blocks_of_the_right_sizes():
    tasks = _tasks(2)
    sim = SyncST(tasks, ClientPool(Fixed(np.random.default_rng(2).uniform(1, 3, N)), N),
                 LoopExecutor("cpu"), Seeds(0),
                 SyncSTHParams(first_k=2, clients=8, split=(5, 3), assignment="bayes"))
    sim.run(_never, max_rounds=4)
    bayes = sim.assignment
    assert len(bayes.costs) == 4 and bayes.kept_counts.sum() == 4 * (2 + 2)
    for v in bayes.seen:
        grid = v.reshape(2, N)
        assert grid.sum(1).tolist() == [5, 3] and grid.max(0).max() == 1


@pytest.mark.parametrize("make", [
    lambda tasks, pool, seeds: FedAST(tasks, pool, LoopExecutor("cpu"), seeds,
                                      FedASTHParams(option="D", requests=16, ratio=4, window=3,
                                                    period=0.2)),
    lambda tasks, pool, seeds: SyncST(tasks, pool, LoopExecutor("cpu"), seeds,
                                      SyncSTHParams(first_k=2, clients=8, assignment="ucb")),
], ids=["fedast-D", "sync-ucb"])
def test_snapshot_resumes_with_the_same_numbers(make):
    import io

    def build():
        pool = ClientPool(Fixed(np.random.default_rng(4).uniform(1, 3, N)), N, cap=12)
        return make(_tasks(2), pool, Seeds(9))

    def log(rows):
        def on_eval(task, st, now):
            rows.append((task.index, st.round, now, task.evaluate(st.params)[0]))
            return False
        return on_eval

    full = []
    build().run(log(full), max_rounds=8)

    class Stop(Exception):
        pass

    cut, snap, sim = [], {}, build()

    def interrupted(task, st, now):
        if len(cut) == 7:
            raise Stop
        return log(cut)(task, st, now)

    def checkpoint():  # one snapshot after 3 evaluations; 4 more are made, then lost
        if len(cut) >= 3 and not snap:
            buf = io.BytesIO()
            torch.save(sim.state_dict(), buf)
            snap.update(bytes=buf.getvalue(), rows=len(cut))

    with pytest.raises(Stop):
        sim.run(interrupted, max_rounds=8, on_checkpoint=checkpoint)
    resumed = build()
    resumed.my_cache = {"added": "later"}  # a simulator grown a cache: snapshots still load
    resumed.load_state_dict(torch.load(io.BytesIO(snap["bytes"]), weights_only=False))
    assert set(sim.state_dict()) == set(type(sim).snapshot_fields)  # listed, nothing else
    rest = []
    resumed.run(log(rest), max_rounds=8)
    assert 3 <= snap["rows"] < 7 and cut[:snap["rows"]] + rest == full


def test_centralized_is_plain_sgd_through_the_pooled_samples():
    """The reference line (§3.7): one epoch = torch SGD over every distinct pooled sample."""
    tasks = _tasks()
    task, evals = tasks[0], []
    sim = Centralized(tasks, None, LoopExecutor("cpu"), Seeds(3), CentralizedHParams(epochs=1))
    sim.run(lambda t, st, now: evals.append((st.round, now)) or False)
    assert evals == [(1, 0.0)] and sim.states[0].finished
    pooled = np.unique(np.concatenate(task.client_indices))
    hp = task.local
    order = batch_schedule(len(pooled), dataclasses.replace(hp, epochs=1, drop_last=False),
                           Seeds(3).int_seed("local", 0, 0))
    assert sum(map(len, order)) == len(pooled) > 0
    params = {k: v.clone().requires_grad_(True) for k, v in task.init_params.items()}
    opt = torch.optim.SGD(params.values(), lr=hp.lr, weight_decay=hp.weight_decay)
    data = task.splits.train
    for batch in order:
        idx = torch.as_tensor(pooled[batch])
        opt.zero_grad()
        torch.nn.functional.cross_entropy(
            torch.func.functional_call(task.model, params, (data.x[idx],)), data.y[idx]).backward()
        opt.step()
    _close(sim.states[0].params, {k: v.detach() for k, v in params.items()})


def test_cifar100_task_takes_five_augmented_steps():
    """App. D.4: τ = 5 (the latency scales with it too), Dir(1), random crop + flip."""
    task = resolve_multitask({"tasks": ["cifar100_resnet18"]}).tasks[0]
    assert (task.local.epochs, task.local.steps, task.data.alpha) == (None, 5, 1.0)
    assert task.model.options == {"augment": True} and task.latency_constant == 2.071


def test_every_assignment_name_has_its_class():
    from wirelessfl.algorithms.fedast.assignment import ASSIGNMENTS
    from wirelessfl.algorithms.fedast.hparams import ASSIGNMENT_NAMES

    assert set(ASSIGNMENTS) == set(ASSIGNMENT_NAMES)
    for name in ASSIGNMENT_NAMES:
        assert SyncSTHParams(assignment=name).assignment == name
    with pytest.raises(ValueError, match="`assignment` must be one of random, bayes, ucb"):
        SyncSTHParams(assignment="greedy")


def test_a_user_registered_simulation_method_runs_from_a_config(tmp_path):
    """``register(..., kind="simulation")`` from user code: the method runs from a config
    (the method list is read when a config is resolved, not frozen at import)."""
    from wirelessfl import registry
    from wirelessfl.algorithms.fedast.fedast import FedAST, FedASTHParams

    class MyAST(FedAST):
        """FedAST under another name (a user's simulator subclass)."""

    registry.register("my_ast", FedASTHParams, MyAST, kind="simulation")
    try:
        raw = {"tasks": ["synthetic_linear"], "seed": 1, "device": "cpu",
               "pool": {"clients": N, "available": 10},
               "method": {"name": "my_ast", "requests": 4, "ratio": 4}, "max_rounds": 3}
        summary = run_job(open_run(raw), tmp_path / "mine", quiet=True)
        assert RunRecord(tmp_path / "mine").config()["method"]["name"] == "my_ast"
        assert summary["tasks"]
    finally:
        registry.unregister("my_ast")
    with pytest.raises(ValueError, match="unknown method 'my_ast'"):
        open_run(raw)


def test_a_multitask_run_that_ends_before_any_round_says_it_learned_nothing(tmp_path):
    """max_time so short that no task aggregates: the summary says nothing was learned (it
    used to read 'never evaluated, 0 rounds' and exit 0 as if all were well)."""
    from wirelessfl.run.kinds import open_run, run_job

    job = open_run({"tasks": ["synthetic_linear", "synthetic_linear"], "pool": {"clients": 20},
                    "max_time": 1e-6, "method": {"name": "fedast", "requests": 4, "ratio": 4}})
    summary = run_job(job, tmp_path / "r", quiet=True)
    assert summary["learned_nothing"]
    assert "nothing was learned" in job.describe(summary, tmp_path / "r")
    job = open_run({"tasks": ["synthetic_linear"], "pool": {"clients": 20}, "max_rounds": 2,
                    "method": {"name": "fedast", "requests": 4, "ratio": 4}})
    summary = run_job(job, tmp_path / "s", quiet=True)
    assert not summary["learned_nothing"]
