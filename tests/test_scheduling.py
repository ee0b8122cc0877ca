"""Channel-aware scheduling policies (issue 33, items 2 and 5): hand cases, batched = loop,
uniform is uniform (Monte Carlo), the state updates, and one-line errors."""

import numpy as np
import pytest

from solvers.scheduling import POLICIES, schedule, update_age, update_average


def test_best_channel_picks_the_strongest_and_breaks_ties_to_the_lower_index():
    r = np.array([2.0, 7.0, 7.0, 1.0, 5.0])
    res = schedule(r, 3, "best_channel")
    assert res.selected.tolist() == [1, 2, 4]
    assert res.mask.tolist() == [False, True, True, False, True]


def test_proportional_fair_favours_a_client_above_its_average():
    r = np.array([10.0, 4.0, 3.0])
    avg = np.array([20.0, 2.0, 3.0])  # client 1 is at twice its average
    assert schedule(r, 1, "proportional_fair", average_bps=avg).selected.tolist() == [1]


def test_age_serves_the_longest_waiting_then_the_stronger():
    r = np.array([1.0, 5.0, 9.0, 2.0])
    assert schedule(r, 2, "age", age=np.array([3, 3, 0, 3])).selected.tolist() == [1, 3]


@pytest.mark.parametrize("policy", POLICIES)
def test_batched_equals_a_loop_over_instances(policy, rng):
    r = rng.exponential(1.0, (3, 4, 8))
    extra = {"uniform": {}, "best_channel": {},
             "proportional_fair": {"average_bps": rng.uniform(0.5, 2.0, (3, 4, 8))},
             "age": {"age": rng.integers(0, 4, (3, 4, 8))}}[policy]
    kw = lambda i, j: {k: v[i, j] for k, v in extra.items()}  # noqa: E731
    batched = schedule(r, 3, policy, rng=np.random.default_rng(1), **extra)
    keys = np.random.default_rng(1).random(r.shape)  # the uniform keys, drawn at once
    for i in range(3):
        for j in range(4):
            if policy == "uniform":
                want = np.argsort(-keys[i, j], kind="stable")[:3]
            else:
                want = schedule(r[i, j], 3, policy, **kw(i, j)).selected
            assert batched.selected[i, j].tolist() == want.tolist()


def test_uniform_schedules_every_client_equally_often():
    picks = schedule(np.ones((20_000, 5)), 2, "uniform", rng=np.random.default_rng(3)).mask
    np.testing.assert_allclose(picks.mean(0), 0.4, atol=0.012)


def test_state_updates_follow_their_definitions():
    avg = update_average(np.array([4.0, 4.0]), np.array([10.0, 10.0]), [True, False], window=4)
    np.testing.assert_allclose(avg, [0.75 * 4 + 2.5, 0.75 * 4])
    assert update_age(np.array([2, 5]), [True, False]).tolist() == [0, 6]


@pytest.mark.parametrize("call, match", [
    (lambda: schedule([1.0, 2.0], 3), "`k` must be"),
    (lambda: schedule([1.0, np.nan], 1), "rate_bps"),
    (lambda: schedule([1.0, -2.0], 1), "rate_bps"),
    (lambda: schedule([1.0, 2.0], 1, "greedy"), "`policy` must be one of"),
    (lambda: schedule([1.0, 2.0], 1, "uniform"), "needs `rng`"),
    (lambda: schedule([1.0, 2.0], 1, "proportional_fair"), "needs `average_bps`"),
    (lambda: schedule([1.0, 2.0], 1, "proportional_fair", average_bps=[0.0, 1.0]), "average_bps"),
    (lambda: schedule([1.0, 2.0], 1, "age"), "needs `age`"),
    (lambda: update_average([1.0], [1.0], [True], window=0.5), "window"),
])
def test_hostile_input_is_one_named_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
