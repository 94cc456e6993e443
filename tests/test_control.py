"""torchgcc.control: the straggler-aware controller and its parts, against closed forms and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from torchgcc.control import (
    AllMustFinish,
    BetaTailRisk,
    DeadlineThreshold,
    DualVariable,
    RelativeThreshold,
    StragglerAwareController,
    WaitCountController,
    WaitForFastest,
    beta_binomial_sf,
    group_size_controller,
    normalised_utility,
)
from torchgcc.testing.pareto_stream import pareto_stream

GRID = tuple(range(2, 33, 2))


def test_beta_binomial_tail_matches_scipy():
    at_least = torch.tensor([0, 1, 3, 7, 20, 21])
    trials = torch.tensor([20, 20, 20, 20, 20, 20])
    for alpha, beta in [(1.0, 1.0), (0.5, 30.0), (4.0, 200.0)]:
        expected = [scipy.stats.betabinom.sf(m - 1, 20, alpha, beta) for m in at_least.tolist()]
        assert torch.allclose(
            beta_binomial_sf(at_least, trials, alpha, beta), torch.tensor(expected, dtype=torch.float64), atol=1e-10
        )


def test_dual_variable_is_a_projected_virtual_queue():
    dual = DualVariable(0.1, eta=2.0)
    values = [dual.update(event) for event in [1, 0, 0, 0, 0, 0, 1]]
    expected, lam = [], 0.0
    for event in [1, 0, 0, 0, 0, 0, 1]:
        lam = max(0.0, lam + 2.0 * (event - 0.1))
        expected.append(lam)
    assert values == pytest.approx(expected)
    with pytest.raises(ValueError, match="budget"):
        DualVariable(1.5)


def test_tail_risk_counts_and_forgets():
    risk = BetaTailRisk((1.0, 9.0), discount=0.5)
    risk.update(3, 4)
    risk.update(0, 2)
    # data counts: exceeded 0.5 * 3 + 0 = 1.5, within 0.5 * 1 + 2 = 2.5
    assert (risk.alpha, risk.beta) == pytest.approx((2.5, 11.5))
    assert risk.mean == pytest.approx(2.5 / 14)
    with pytest.raises(ValueError, match="exceeded"):
        risk.update(5, 4)


def test_thresholds():
    durations = torch.tensor([1.0, 2.0, 3.0, 10.0, 4.0])
    assert DeadlineThreshold(2.5)(durations) == 2.5
    assert RelativeThreshold(2.0)(durations) == pytest.approx(6.0)  # 2 x median 3
    with pytest.raises(ValueError, match="kappa"):
        RelativeThreshold(0.5)


def test_event_models_give_binomial_tails_when_q_is_known():
    risk = BetaTailRisk((0.1 * 1e6, 0.9 * 1e6))  # q = 0.1 with negligible uncertainty
    group = AllMustFinish(units_per_size=3)
    sizes = torch.tensor([1, 2, 4])
    got = risk.probability_at_least(group.at_least(sizes), group.units(sizes))
    assert torch.allclose(got, 1 - 0.9 ** (3 * sizes.double()), atol=1e-5)
    wait = WaitForFastest(num_workers=24)
    waits = torch.tensor([8, 16, 20, 24])
    got = risk.probability_at_least(wait.at_least(waits), wait.units(waits))
    expected = torch.tensor([scipy.stats.binom.sf(24 - k, 24, 0.1) for k in waits.tolist()], dtype=torch.float64)
    assert torch.allclose(got, expected, atol=1e-5)


def test_utilities_are_scaled_to_unit_range():
    sizes = torch.tensor([2, 4, 8])
    assert torch.allclose(normalised_utility("log", sizes), torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64))
    assert torch.allclose(
        normalised_utility([3.0, 1.0, 2.0], sizes), torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    )
    with pytest.raises(ValueError, match="one value per size"):
        normalised_utility([1.0], sizes)
    with pytest.raises(ValueError, match="unknown utility"):
        normalised_utility("cubic", sizes)


def static_event_probability(size: int, shape: float, deadline: float) -> float:
    return 1 - (1 - deadline**-shape) ** size  # P(max of `size` Pareto(1, shape) > deadline)


@pytest.mark.parametrize("drift", [False, True], ids=["stationary", "drifting"])
def test_controller_holds_the_budget_and_uses_large_sizes(drift):
    budget, deadline, steps = 0.1, 6.0, 1000
    shape_of_step = (lambda t: 2.0 if t >= steps // 2 else 3.0) if drift else (lambda t: 3.0)
    controller = StragglerAwareController(GRID, budget=budget, threshold=DeadlineThreshold(deadline), seed=0)
    chosen = pareto_stream(controller, steps, shape_of_step, seed=1)
    # the largest static size whose long-run event probability (averaged over the halves) meets the budget
    feasible = [
        g
        for g in GRID
        if sum(static_event_probability(g, shape_of_step(t), deadline) for t in (0, steps - 1)) / 2 <= budget
    ]
    best_static = max(feasible)
    assert best_static == (6 if drift else 22)  # closed form: q = deadline^-shape
    assert controller.steps == steps
    assert controller.event_rate <= budget + 0.02
    assert sum(chosen) / steps >= best_static - 2  # one grid step


def test_controller_shrinks_the_group_once_the_tail_gets_heavier():
    budget, deadline, steps = 0.1, 6.0, 1000
    controller = StragglerAwareController(GRID, budget=budget, threshold=DeadlineThreshold(deadline), seed=0)
    chosen = pareto_stream(controller, steps, lambda t: 2.0 if t >= steps // 2 else 3.0, seed=1)
    assert sum(chosen[400:500]) > 1.5 * sum(chosen[-100:])  # large groups while light, small ones once heavy


def test_hold_bounded_step_and_warmup():
    controller = StragglerAwareController(
        GRID, budget=0.1, threshold=DeadlineThreshold(6.0), hold=4, max_step=2, warmup=7, fallback=10, seed=0
    )
    chosen = pareto_stream(controller, 300, lambda t: 3.0, seed=2)
    assert chosen[:7] == [10] * 7
    index = [GRID.index(size) for size in chosen]
    changes = [t for t in range(1, len(chosen)) if chosen[t] != chosen[t - 1]]
    assert changes and all(abs(index[t] - index[t - 1]) <= 2 for t in changes)
    assert all(b - a >= 4 for a, b in zip(changes, changes[1:]))
    controller.use_fallback()
    assert controller.choose() == 10
    controller.use_fallback(False)


@pytest.mark.parametrize("safeguards", [{}, {"risk_cap": 0.2, "change_level": 0.05}], ids=["plain", "safeguards"])
def test_state_dict_round_trip_resumes_identically(safeguards):
    make = lambda: StragglerAwareController(  # noqa: E731
        GRID,
        budget=0.1,
        threshold=RelativeThreshold(3.0),
        hold=2,
        seed=5,  # noqa: E731
        **safeguards,
    )
    first = make()
    pareto_stream(first, 120, lambda t: 2.5, seed=3)
    state = first.state_dict()
    second = make()
    second.load_state_dict(state)
    assert second.state_dict()["risk"] == state["risk"] and second.dual.value == first.dual.value
    assert pareto_stream(first, 80, lambda t: 2.5, seed=4) == pareto_stream(second, 80, lambda t: 2.5, seed=4)
    assert first.size_distribution() == second.size_distribution()
    assert first.changes == second.changes


def test_observe_validates_and_handles_cancelled_results():
    controller = StragglerAwareController([2, 4], budget=0.1, threshold=DeadlineThreshold(1.0), warmup=0)
    assert controller.choose() == 2
    with pytest.raises(ValueError, match="runs 2 units"):
        controller.observe([0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="NaN or negative"):
        controller.observe([0.5, float("nan")])
    # the step ended at 0.5 < 1.0: the cancelled result's exceedance is unknown, so it is left out
    assert controller.observe([0.5, math.inf]) is False
    assert (controller.risk.exceeded, controller.risk.within) == pytest.approx((0.0, 1.0))
    # the step ran to 1.5 >= 1.0: the cancelled result was late too
    assert controller.observe([1.5, math.inf]) is True
    assert controller.risk.exceeded == pytest.approx(2.0)
    with pytest.raises(ValueError, match="not one of the sizes"):
        StragglerAwareController([2, 4], budget=0.1, threshold=DeadlineThreshold(1.0), fallback=3)
    with pytest.raises(ValueError, match="distinct"):
        StragglerAwareController([2, 2], budget=0.1, threshold=DeadlineThreshold(1.0))


def test_wait_count_controller_meets_a_deadline_budget():
    n, deadline, budget = 24, 2.0, 0.02
    policy = WaitCountController(n, deadline=deadline, budget=budget, candidates=range(0, 17), seed=0)
    generator = torch.Generator().manual_seed(0)
    chosen = []
    for _ in range(1000):
        s = policy.choose()
        chosen.append(s)
        latencies = 1.0 - 0.3 * torch.log1p(-torch.rand(n, generator=generator, dtype=torch.float64))
        policy.observe(latencies)
    late = policy.controller.event_rate
    assert late <= budget + 0.02
    # closed form: a worker is late w.p. q = exp(-(2 - 1) / 0.3); the most results one may wait for at the budget
    q = math.exp(-1 / 0.3)
    best_fixed = min(s for s in range(17) if scipy.stats.binom.sf(s, n, q) <= budget)
    assert sum(chosen[200:]) / 800 <= best_fixed + 1
    assert set(policy.stragglers_distribution()) == set(range(17))


def test_wait_count_controller_accuracy_floor_and_errors():
    accuracy = {s: 1.0 - 0.02 * s for s in range(24)}
    policy = WaitCountController(24, deadline=2.0, accuracy=accuracy, min_accuracy=0.8)
    assert sorted(24 - k for k in policy.controller.sizes.tolist()) == list(range(11))
    assert policy.choose() == 10  # warm-up: the fallback is the fastest allowed S
    with pytest.raises(ValueError, match="needs accuracy"):
        WaitCountController(24, deadline=2.0, min_accuracy=0.8)
    with pytest.raises(ValueError, match=r"\[0, N - 1"):
        WaitCountController(24, deadline=2.0, candidates=[30])


@pytest.mark.parametrize("min_accuracy", [None, 0.5])
@pytest.mark.parametrize(("bad", "error"), [(math.nan, ValueError), (math.inf, ValueError), ("0.9", TypeError)])
def test_wait_count_controller_refuses_a_non_finite_accuracy(bad, error, min_accuracy):
    """A NaN accuracy of a candidate S with ``min_accuracy`` set silently dropped that S (NaN >= floor is False);
    every candidate's accuracy must be a finite number, and the error names ``accuracy`` and the S."""
    accuracy = {0: 0.99, 1: bad, 2: 0.9, 3: 0.8}
    with pytest.raises(error, match=r"^accuracy\[1\] \(S = 1\) must be a finite number") as info:
        WaitCountController(4, deadline=1.0, accuracy=accuracy, min_accuracy=min_accuracy)
    assert "\n" not in str(info.value)
    unused = {**accuracy, 1: 0.95, 7: math.nan}  # only the candidates' accuracies are used and checked
    assert WaitCountController(4, deadline=1.0, accuracy=unused, min_accuracy=0.5).controller.sizes.tolist() == [
        1,
        2,
        3,
        4,
    ]


def test_group_size_controller_waits_for_every_rollout_of_the_step():
    controller = group_size_controller((4, 8), prompts_per_step=2, budget=0.2, deadline=3.0, warmup=0)
    group = controller.choose()
    assert controller.observe(torch.ones(2 * group), size=group) is False  # 2 prompts x G rollouts, none late
    assert controller.observe([1.0] * (2 * group - 1) + [4.0], size=group) is True and controller.events == 1
    with pytest.raises(ValueError, match="runs 8 units"):
        controller.observe(torch.ones(2 * 4 + 1), size=4)
    with pytest.raises(ValueError, match="exactly one"):
        group_size_controller((4, 8), prompts_per_step=2, budget=0.2)


def test_results_watched_until_the_deadline_count_as_late():
    controller = StragglerAwareController(
        [3], budget=0.1, threshold=DeadlineThreshold(1.0), event_model=WaitForFastest(4), warmup=0
    )
    # waited for 3 of 4; the 4th was not back by the deadline, so it exceeded it although the step ended at 0.6
    assert controller.observe([0.2, 0.4, 0.6, math.inf], watched_until=1.0) is False
    assert (controller.risk.exceeded, controller.risk.within) == pytest.approx((1.0, 3.0))


def test_wait_count_controller_drives_coded_module_through_its_mask():
    import torchgcc
    from torchgcc.stragglers import LatencyStragglers

    n, deadline = 8, 1.3
    module = torchgcc.CodedModule(
        torch.nn.Linear(3, 2).double(), torchgcc.make_code("gcc", num_inputs=4, num_workers=n)
    )
    latency = LatencyStragglers("shifted_exponential", seed=0, shift=1.0, scale=0.2)
    waiter = LatencyStragglers(latency.latency)
    policy = WaitCountController(n, deadline=deadline, budget=0.05, candidates=range(5), warmup=2)
    x = torch.randn(8, 3, dtype=torch.float64)
    for _ in range(20):
        s = policy.choose()
        waiter.num_stragglers = s
        delays = latency.sample_delays(1, n)
        mask, step_latency = waiter.mask_from_delays(delays)
        y = module(x, mask=mask.expand(2, n))
        assert y.shape == (8, 2) and int(module.last_mask[0].sum()) == n - s
        seen = delays[0].masked_fill(delays[0] > deadline, math.inf)
        assert policy.observe(seen, num_stragglers=s, watched_until=deadline) == bool(step_latency[0] > deadline)
    assert policy.controller.steps == 20


def test_chance_constraint_picks_the_largest_size_under_the_cap():
    # q = 0.1 with negligible uncertainty: P(event | G) = 1 - 0.9^G, at most 0.5 for G <= 6 (closed form)
    controller = StragglerAwareController(
        GRID,
        budget=0.1,
        threshold=DeadlineThreshold(1.0),
        warmup=0,
        max_step=len(GRID),
        prior=(0.1e6, 0.9e6),
        risk_cap=0.5,
    )
    assert max(g for g in GRID if 1 - 0.9**g <= 0.5) == 6
    controller.observe(torch.full((controller.choose(),), 0.5))  # the first choice holds the fallback
    assert controller.choose() == 6
    # no size meets a cap below the smallest size's risk: the safest size
    tight = StragglerAwareController(
        GRID,
        budget=0.1,
        threshold=DeadlineThreshold(1.0),
        warmup=0,
        max_step=len(GRID),
        prior=(0.1e6, 0.9e6),
        risk_cap=0.1,
        fallback=32,
    )
    tight.observe(torch.full((tight.choose(),), 0.5))
    assert tight.choose() == 2
    with pytest.raises(ValueError, match="risk_cap"):
        StragglerAwareController(GRID, budget=0.1, threshold=DeadlineThreshold(1.0), risk_cap=1.0)


def test_chance_constraint_holds_every_choice_under_the_cap():
    controller = StragglerAwareController(
        GRID, budget=0.1, threshold=DeadlineThreshold(6.0), warmup=0, max_step=len(GRID), risk_cap=0.1, seed=0
    )
    generator = torch.Generator().manual_seed(7)
    for _ in range(300):
        risk = controller.event_probability()  # what the choice is made on
        size = controller.choose()
        index = controller.sizes.tolist().index(size)
        assert risk[index] <= 0.1 or index == int(risk.argmin())
        u = torch.rand(size, generator=generator, dtype=torch.float64)
        controller.observe((1 - u) ** (-1 / 3.0))


def test_change_detection_forgets_the_posterior_and_allows_a_jump_to_a_safer_size():
    make = lambda alpha: StragglerAwareController(  # noqa: E731
        GRID,
        budget=0.05,
        threshold=DeadlineThreshold(1.0),
        warmup=0,
        hold=50,
        max_step=1,
        discount=0.98,
        fallback=32,
        risk_cap=0.05,
        change_level=alpha,
        seed=0,
    )
    controller, reference = make(0.01), make(None)
    for policy in (controller, reference):
        for _ in range(30):  # a quiet tail: no unit is late; the hold keeps the fallback 32
            policy.observe(torch.full((policy.choose(),), 0.5))
        assert policy.size == 32
    # every unit late at once: P(X >= 32) is tiny under the quiet posterior, so this is a detected change
    expected = float(controller.risk.probability_at_least(torch.tensor(32), torch.tensor(32)))
    assert expected < 0.01
    controller.observe(torch.full((32,), 2.0))
    reference.observe(torch.full((32,), 2.0))
    assert controller.changes == 1 and reference.changes == 0
    # the data counts were dropped before this step was added: only the prior and the 32 late units remain
    assert (controller.risk.alpha, controller.risk.beta) == pytest.approx((1.0 + 32, 1.0))
    # the next choice ignores hold = 50 and max_step = 1 to reach the safest size; the reference is held
    assert controller.choose() == 2
    assert reference.choose() == 32
    # only surprising steps count: an ordinary one at the new risk level is no change
    controller.observe(torch.full((2,), 2.0))
    assert controller.changes == 1


def test_wait_count_controller_raises_s_at_once_when_the_tail_gets_heavier():
    n, deadline, budget = 24, 0.6, 0.005
    policy = WaitCountController(
        n, deadline=deadline, budget=budget, candidates=range(17), discount=0.9, eta=2.0, warmup=1, max_step=4, seed=0
    )
    generator = torch.Generator().manual_seed(0)
    chosen = []
    for step in range(300):
        s = policy.choose()
        chosen.append(s)
        scale = 0.06 if step < 150 else 0.15
        latencies = 0.3 - scale * torch.log1p(-torch.rand(n, generator=generator, dtype=torch.float64))
        policy.observe(latencies.masked_fill(latencies > deadline, math.inf), num_stragglers=s, watched_until=deadline)
    # closed form: a worker is late w.p. q = exp(-0.3 / scale); the smallest S whose miss probability meets the budget
    safe = {
        scale: min(s for s in range(17) if scipy.stats.binom.sf(s, n, math.exp(-0.3 / scale)) <= budget)
        for scale in (0.06, 0.15)
    }
    assert safe == {0.06: 2, 0.15: 8}
    assert sum(chosen[100:150]) / 50 <= safe[0.06] + 1.5  # waits for more results while the tail is light
    first_late = next(t for t in range(150, 300) if chosen[t] >= safe[0.15])
    assert first_late <= 152  # detected on the first or second heavy step, then raised past max_step at once
    assert policy.controller.changes >= 1
    assert policy.controller.event_rate <= budget + 0.02


@pytest.mark.parametrize("event", [float("nan"), 7, -0.5, float("inf")])
def test_dual_variable_refuses_an_event_outside_unit_interval(event):
    dual = DualVariable(0.1, value=5.0)
    with pytest.raises(ValueError, match="event"):
        dual.update(event)
    assert dual.value == 5.0  # the accumulated price is kept, not reset to 0
    # a fraction in [0, 1] is the closed-form projected step
    assert dual.update(0.25) == pytest.approx(max(0.0, 5.0 + 1.0 * (0.25 - 0.1)))


@pytest.mark.parametrize(
    ("make", "error", "name"),
    [
        (lambda: DualVariable("0.1"), TypeError, "budget"),
        (lambda: DualVariable(0.1, eta="1"), TypeError, "eta"),
        (lambda: DualVariable(0.1, value=float("inf")), ValueError, "value"),
        (lambda: BetaTailRisk(("1", 1.0)), TypeError, "prior"),
        (lambda: BetaTailRisk((float("inf"), 1.0)), ValueError, "prior"),
        (lambda: BetaTailRisk(1.0), TypeError, "prior"),
        (lambda: BetaTailRisk(discount="0.5"), TypeError, "discount"),
        (lambda: BetaTailRisk().update(0, float("inf")), ValueError, "total"),
        (lambda: BetaTailRisk().update(0.5, 2), ValueError, "exceeded"),
        (lambda: DeadlineThreshold("2"), TypeError, "deadline"),
        (lambda: RelativeThreshold("2"), TypeError, "kappa"),
    ],
)
def test_control_parts_name_their_bad_argument(make, error, name):
    with pytest.raises(error, match=name) as info:
        make()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("at_least", "trials", "alpha", "beta", "name"),
    [
        (1, 3, -0.5, 1.0, "alpha"),
        (1, 3, 0.0, 1.0, "alpha"),
        (1, 3, float("nan"), 1.0, "alpha"),
        (1, 3, 1.0, float("inf"), "beta"),
        (1.0, 2.5, 1.0, 1.0, "trials"),
        (0, -3, 1.0, 1.0, "trials"),
        (0, float("nan"), 1.0, 1.0, "trials"),
        (float("nan"), 3, 1.0, 1.0, "at_least"),
        (1.5, 3, 1.0, 1.0, "at_least"),
    ],
)
def test_beta_binomial_tail_refuses_what_is_not_a_beta_binomial(at_least, trials, alpha, beta, name):
    with pytest.raises(ValueError, match=name):
        beta_binomial_sf(torch.tensor(at_least), torch.tensor(trials), alpha, beta)


def test_beta_binomial_tail_edges_match_scipy():
    # negative at_least, zero trials and float tensors holding integers are valid
    at_least = torch.tensor([-2.0, 0.0, 1.0, 4.0, 0.0, 1.0])
    trials = torch.tensor([3.0, 3.0, 3.0, 3.0, 0.0, 0.0])
    expected = [scipy.stats.betabinom.sf(m - 1, n, 0.7, 2.5) for m, n in zip(at_least.tolist(), trials.tolist())]
    assert torch.allclose(beta_binomial_sf(at_least, trials, 0.7, 2.5), torch.tensor(expected, dtype=torch.float64))


_T = DeadlineThreshold(1.0)


@pytest.mark.parametrize(
    ("make", "error", "name"),
    [
        (lambda: StragglerAwareController((2.5, 4.7), budget=0.1, threshold=_T), ValueError, "sizes"),
        (lambda: StragglerAwareController(("2", "4"), budget=0.1, threshold=_T), TypeError, "sizes"),
        (lambda: StragglerAwareController(4, budget=0.1, threshold=_T), TypeError, "sizes"),
        (lambda: StragglerAwareController((2, 4), budget=0.1, threshold=_T, hold=True), TypeError, "hold"),
        (
            lambda: StragglerAwareController((2, 4), budget=0.1, threshold=_T, change_level="0.01"),
            TypeError,
            "change_level",
        ),
        (lambda: StragglerAwareController((2, 4), budget=0.1, threshold=_T, fallback=4.0), ValueError, "fallback"),
        (lambda: StragglerAwareController((2, 4), budget=0.1, threshold=_T, risk_cap="0.1"), TypeError, "risk_cap"),
        (lambda: StragglerAwareController((2, 4), budget=0.1, threshold=_T, seed="a"), TypeError, "seed"),
        (lambda: StragglerAwareController((2, 4), budget="0.1", threshold=_T), TypeError, "budget"),
        (lambda: StragglerAwareController((2, 4), budget=0.1, threshold=None), TypeError, "threshold"),
        (lambda: WaitCountController(4, deadline=1.0, candidates=[0.5, 1.5]), ValueError, "candidates"),
        (lambda: WaitCountController(4.0, deadline=1.0), ValueError, "num_workers"),
        (lambda: WaitCountController("4", deadline=1.0), TypeError, "num_workers"),
        (lambda: WaitCountController(4, deadline="1"), TypeError, "deadline"),
        (lambda: WaitCountController(4, deadline=1.0, accuracy={0: 0.9}, min_accuracy=0.5), ValueError, "accuracy"),
    ],
)
def test_controllers_name_a_bad_argument_instead_of_truncating_it(make, error, name):
    with pytest.raises(error, match=name) as info:
        make()
    assert "\n" not in str(info.value)


def test_observe_refuses_a_fractional_size_or_s_and_records_nothing():
    controller = StragglerAwareController((2, 4), budget=0.1, threshold=_T, warmup=0)
    with pytest.raises(ValueError, match="size"):
        controller.observe([0.5] * 4, size=4.9)
    policy = WaitCountController(4, deadline=1.0)
    with pytest.raises(ValueError, match="num_stragglers"):
        policy.observe([0.1] * 4, num_stragglers=2.6)
    assert controller.steps == policy.controller.steps == 0
    # numpy integers are integers: recorded at the size they name
    controller.observe([0.5] * 4, size=np.int64(4))
    policy.observe([0.1] * 4, num_stragglers=np.int64(2))
    assert controller.size_distribution() == {2: 0.0, 4: 1.0}
    assert policy.stragglers_distribution()[2] == 1.0


def test_event_models_and_group_size_controller_take_numpy_integers_and_name_the_callers_argument():
    # numpy integers are integers (torchgcc.checks): the counts they name, as Python ints
    controller = group_size_controller((2, 4), prompts_per_step=np.int64(4), budget=0.1, kappa=2.0)
    assert controller.event_model.units_per_size == 4 and type(controller.event_model.units_per_size) is int
    assert int(controller.event_model.units(torch.tensor(4))) == 16
    assert AllMustFinish(np.int32(3)).units_per_size == 3 and WaitForFastest(np.int64(5)).num_workers == 5
    # the error names prompts_per_step, the argument given, not the event model's units_per_size
    for bad, error in ((0, ValueError), (2.0, ValueError), ("4", TypeError)):
        with pytest.raises(error, match="^prompts_per_step must be an integer >= 1"):
            group_size_controller((2, 4), prompts_per_step=bad, budget=0.1, kappa=2.0)
    with pytest.raises(ValueError, match="^num_workers must be an integer >= 1"):
        WaitForFastest(0)


def test_wait_count_observe_names_the_s_and_the_latencies_the_caller_gave():
    policy = WaitCountController(4, deadline=1.0, candidates=[0, 1])
    for s in (3, 4):  # S outside the candidates: the message speaks in S, as given
        with pytest.raises(ValueError, match=rf"^num_stragglers={s} is not one of the candidate S values \[0, 1\]$"):
            policy.observe([0.5] * 4, num_stragglers=s)
    with pytest.raises(ValueError, match=r"^latencies must hold N = 4 values \(one per worker\), got 3$"):
        policy.observe([0.5] * 3)
    assert policy.controller.steps == 0
    assert policy.observe([0.5] * 4, num_stragglers=1) is False
    assert policy.stragglers_distribution() == {0: 0.0, 1: 1.0}


def test_after_a_detected_change_only_a_smaller_size_skips_hold_and_max_step():
    """The change test is one-sided: it fires on improbably *many* exceedances, evidence that the tail got heavier.
    The smaller size is the safe reaction and may be reached at once; a larger size still waits for ``hold`` (here
    the change comes from the only unit being late, and a tiny eta leaves lambda ~ 0, so the scores favour the
    largest size: a free move would go up right after the evidence of a heavier tail)."""

    def first_two_sizes(change_level, hold):
        controller = StragglerAwareController(
            range(1, 9),
            budget=0.5,
            threshold=DeadlineThreshold(1.0),
            hold=hold,
            max_step=1,
            warmup=0,
            eta=1e-6,
            change_level=change_level,
        )
        sizes = [controller.choose()]
        controller.observe([2.0], size=sizes[-1])  # P(X >= 1) = 0.5 under the prior: a change at level 0.9
        sizes.append(controller.choose())
        return sizes, controller.changes

    assert first_two_sizes(None, hold=10) == ([1, 1], 0)  # held
    assert first_two_sizes(0.9, hold=10) == ([1, 1], 1)  # a change does not release the hold upwards
    assert first_two_sizes(0.9, hold=1) == ([1, 2], 1)  # past the hold, an upward move is bounded by max_step
