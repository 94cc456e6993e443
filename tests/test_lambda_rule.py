"""The GCV smoothing rules (``lambda_dec="gcv"`` per group, ``"adaptive"`` pooled over the batch) against scipy."""

import collections
import math
import warnings

import numpy as np
import pytest
import torch
from references import reinsch_condition
from scipy.interpolate import make_smoothing_spline

import torchgcc
from torchgcc.codes.gcc import GCV_POOL, GCV_RATIOS, GCVSplineDecoder, SplineDecoder, spacing_lambda
from torchgcc.functional import compact_survivors, survivor_layout
from torchgcc.functional.decoder_smoothing import (
    LEFT_OUT_GAP,
    VALIDATION_DRAWS,
    VALIDATION_SEED,
    drawn_masks,
    pooled_gcv_ratio,
    validated_ratio,
)
from torchgcc.functional.gcv import GRAM_JITTER, gcv_scores
from torchgcc.stragglers import FixedStragglers


def hat_matrix(knots: np.ndarray, lam: float) -> np.ndarray:
    """scipy's smoothing spline applied to the unit vectors: column j is the fit to e_j at the knots."""
    n = len(knots)
    return make_smoothing_spline(knots, np.eye(n), lam=n * lam)(knots)


def gcv_reference(knots: np.ndarray, y: np.ndarray, lam: float) -> float:
    """The GCV score from its definition, (1/n) ||y - H y||^2 / (1 - tr(H) / n)^2, on y scaled to unit norm."""
    n = len(knots)
    y = y / np.linalg.norm(y)
    hat = hat_matrix(knots, lam)
    return float(((y - hat @ y) ** 2).sum() / n / (1 - np.trace(hat) / n) ** 2)


@pytest.mark.parametrize(("n", "d"), [(6, 1), (20, 2), (12, 50), (40, 3), (200, 2)])  # 200: the banded route
def test_gcv_scores_match_the_definition_with_scipy_hat_matrices(n, d):
    """Agreement to the conditioning of what is computed: both routes are backward stable, so their scores differ by
    a small multiple (16: the score squares two solved quantities, the reference forms them from n solves) of
    (cond(R + mu Q^T Q) + n / (n - tr H)) eps relative, the second term the cancellation in the reference's
    1 - tr(H) / n (from 1e-13 for n = 6 to 1e-4 for n = 200, lam = 0.1). Where d > n - 2 the scores solve with the
    Gram factor, whose diagonal jitter GRAM_JITTER moves them by up to GRAM_JITTER cond relative more."""
    generator = torch.Generator().manual_seed(n)
    mask = torch.rand(3, n + 5, generator=generator) < 0.85
    mask[:, : n + 1] = True
    points = torch.sort(torch.rand(n + 5, generator=generator, dtype=torch.float64) * 2 - 1).values
    survivors = compact_survivors(mask, survivor_layout(points))
    y = torch.randn(3, n + 5, d, generator=generator, dtype=torch.float64)
    lams = torch.tensor([1e-7, 1e-5, 1e-3, 1e-1], dtype=torch.float64)
    scores = gcv_scores(survivors.knots, survivors.counts, y, survivors.counts.unsqueeze(-1) * lams)
    for b in range(3):
        count = int(survivors.counts[b])
        knots, data = survivors.knots[b, :count].numpy(), y[b, :count].numpy()
        for score, lam in zip(scores[b].tolist(), lams.tolist()):
            cancellation = count / (count - np.trace(hat_matrix(knots, lam)))
            cond = reinsch_condition(knots, lam)
            rtol = 16 * (cond + cancellation) * np.finfo(np.float64).eps + (GRAM_JITTER * cond if d > count - 2 else 0)
            np.testing.assert_allclose(score, gcv_reference(knots, data, lam), rtol=rtol)


def test_gcv_score_at_zero_smoothing_is_the_limit_of_interpolation():
    """V(mu) - V(0) = O(mu * kappa_max): on Chebyshev knots (kappa_max ~ 1e7 for n = 15) the scores at
    mu = 1e-13 and 1e-15 approach the mu = 0 limit like mu."""
    generator = torch.Generator().manual_seed(1)
    knots = torchgcc.points.chebyshev_second_kind(15).unsqueeze(0)
    y = torch.randn(1, 15, 2, generator=generator, dtype=torch.float64)
    scores = gcv_scores(knots, torch.tensor([15]), y, torch.tensor([[0.0, 1e-13, 1e-15]], dtype=torch.float64))[0]
    gaps = (scores[1:] - scores[0]).abs() / scores[0]
    assert gaps[0] < 1e-4 and gaps[1] < 1e-2 * gaps[0] + 1e-12


@pytest.mark.parametrize("scale", [1e-300, 1e-150, 1e-20, 1.0, 1e20, 1e150, 1e300])
def test_the_choice_and_the_decode_are_invariant_to_the_scale_of_the_results(scale):
    """Both GCV rules choose the same smoothing at every scale, and the decode scales with the results."""
    generator = torch.Generator().manual_seed(0)
    for lambda_dec in ("adaptive", "gcv"):
        code = torchgcc.GCC(4, 12, lambda_dec=lambda_dec)
        t = code.beta
        y = torch.sin(3 * t + torch.rand(5, 1, generator=generator, dtype=torch.float64))
        y = (y + 0.05 * torch.randn(5, 12, generator=generator, dtype=torch.float64)).unsqueeze(-1)
        mask = FixedStragglers(3, seed=1).sample(5, 12)
        unit = code.decoder(y, mask)
        ratio = code.decoder.last_ratio.clone()
        scaled = code.decoder(y * scale, mask)
        torch.testing.assert_close(code.decoder.last_ratio, ratio, rtol=0, atol=0)
        torch.testing.assert_close(scaled / scale, unit, rtol=1e-12, atol=0)


def test_per_group_gcv_picks_each_groups_own_best_ratio():
    k, n = 6, 24
    code = torchgcc.GCC(k, n, lambda_dec="gcv")
    assert isinstance(code.decoder, GCVSplineDecoder) and code.decoder.pool is None
    generator = torch.Generator().manual_seed(0)
    t = code.beta
    smooth = torch.sin(3 * t)
    y = torch.stack([smooth, smooth + 0.05 * torch.randn(n, generator=generator, dtype=torch.float64)]).unsqueeze(-1)
    mask = FixedStragglers(5, seed=2).sample(2, n)
    out = code.decoder(y, mask)
    for group in range(2):
        arrived = mask[group].numpy()
        count = int(arrived.sum())
        knots, data = t.numpy()[arrived], y[group].numpy()[arrived]
        positive = [r for r in GCV_RATIOS if r > 0]  # scipy cannot interpolate: its smallest lam stands in for 0
        scores = [gcv_reference(knots, data, spacing_lambda(count, max(r, 1e-3))) for r in GCV_RATIOS]
        best = GCV_RATIOS[int(np.argmin(scores))]
        assert code.decoder.last_ratio[group].item() == pytest.approx(best)
        assert best in positive or best == 0.0
        lam = spacing_lambda(count, best)
        expected = make_smoothing_spline(knots, data, lam=count * max(lam, 1e-30))(code.alpha.numpy())
        inside = (code.alpha.numpy() >= knots.min()) & (code.alpha.numpy() <= knots.max())
        np.testing.assert_allclose(out[group].numpy()[inside], expected[inside], atol=1e-7)
    # exact smooth results are smoothed less than noisy ones
    assert code.decoder.last_ratio[0] < code.decoder.last_ratio[1]


def test_the_default_pools_the_scores_of_evenly_spaced_groups_of_the_batch():
    """One ratio for the batch from the mean score over min(B, 16) evenly spaced groups: its argmin r* divided by
    2^(1 - rho), rho = 1 - mean(r*) / mean(0), checked against scipy's hat matrices; every group is then decoded with
    it."""
    assert list(GCV_RATIOS) == sorted(GCV_RATIOS)
    code = torchgcc.GCC(4, 16)
    assert isinstance(code.decoder, GCVSplineDecoder) and code.decoder.pool == GCV_POOL
    generator = torch.Generator().manual_seed(3)
    batch = 40
    t = code.beta
    y = torch.sin(2 * t + torch.rand(batch, 1, generator=generator, dtype=torch.float64))
    y = (y + 0.02 * torch.randn(batch, 16, generator=generator, dtype=torch.float64)).unsqueeze(-1)
    mask = torch.rand(batch, 16, generator=generator) < 0.8
    mask[:, :5] = True
    code.decoder(y, mask)
    pooled = np.linspace(0, batch - 1, GCV_POOL).round().astype(int)
    mean = np.zeros(len(GCV_RATIOS))
    for group in pooled:
        arrived = mask[group].numpy()
        count = int(arrived.sum())
        mean += [
            gcv_reference(t.numpy()[arrived], y[group].numpy()[arrived], spacing_lambda(count, max(r, 1e-3)))
            for r in GCV_RATIOS
        ]
    assert code.decoder.last_ratio.ndim == 0
    best = int(np.argmin(mean))
    removed = 1 - mean[best] / mean[0]
    assert code.decoder.last_ratio.item() == pytest.approx(GCV_RATIOS[best] / LEFT_OUT_GAP ** (1 - removed), rel=1e-6)
    assert LEFT_OUT_GAP == 2 and 0 < removed < 1
    torch.testing.assert_close(code.decoder.last_lambda, spacing_lambda(mask.sum(-1), code.decoder.last_ratio))


@pytest.mark.parametrize(
    "num_workers, batch, warned", [(16, 1, True), (16, 15, True), (16, 16, False), (128, 8, False)]
)
def test_a_default_that_calibrates_on_fewer_groups_than_it_pools_says_so(num_workers, batch, warned):
    """A first batch smaller than the pool (min(16, 1024 // N) groups) gives a noisy choice: the decoder warns once,
    naming the pool and the fix; a full pool (8 groups at N = 128) warns nothing."""
    code = torchgcc.GCC(4, num_workers)
    y = torch.sin(3 * code.beta).repeat(batch, 1).unsqueeze(-1)
    mask = torch.ones(batch, num_workers, dtype=torch.bool)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code.decoder(y, mask)
        code.decoder(y, mask)  # calibrated: the second call chooses nothing
    messages = [str(warning.message) for warning in caught if warning.category is torchgcc.CalibrationWarning]
    assert code.decoder.calibrated
    if warned:
        assert len(messages) == 1
        assert f"from {batch} group(s)" in messages[0] and "it pools 16" in messages[0]
        assert "code.decoder.calibrate(y, mask)" in messages[0] and "at least 64 samples" in messages[0]  # 16 K
    else:
        assert messages == []


def textbook_gcv(knots: np.ndarray, y: np.ndarray, mu: float) -> float:
    """GCV from the hat matrix ``(I + mu Q R^-1 Q^T)^-1`` of the natural cubic smoothing spline (Green and Silverman
    1994, sec. 2.3), built densely from its definition."""
    n, h = len(knots), np.diff(knots)
    q, r = np.zeros((n, n - 2)), np.zeros((n - 2, n - 2))
    for j in range(n - 2):
        q[j, j], q[j + 1, j], q[j + 2, j] = 1 / h[j], -1 / h[j] - 1 / h[j + 1], 1 / h[j + 1]
        r[j, j] = (h[j] + h[j + 1]) / 3
        if j + 1 < n - 2:
            r[j, j + 1] = r[j + 1, j] = h[j + 1] / 6
    hat = np.linalg.inv(np.eye(n) + mu * q @ np.linalg.solve(r, q.T))
    return float(n * ((y - hat @ y) ** 2).sum() / (n - np.trace(hat)) ** 2)


def test_gcv_depends_on_the_smoothing_only_from_four_results():
    """The fact behind the informative groups: with three knots the textbook GCV score is the same for every mu
    (one interior second derivative: the residual and n - tr(H) scale alike), with four it is not."""
    generator = np.random.default_rng(0)
    for n, varies in ((3, False), (4, True)):
        knots, y = np.sort(generator.uniform(-1, 1, n)), generator.normal(size=n)
        scores = [textbook_gcv(knots, y, mu) for mu in (1e-3, 1e-1, 10.0)]
        assert (max(scores) / min(scores) - 1 > 1e-3) == varies, scores


@pytest.mark.parametrize("lambda_dec", ["adaptive", "gcv"])
def test_groups_too_small_to_score_interpolate(lambda_dec):
    """With three results in every group GCV cannot tell the candidates apart: interpolation (r = 0), the noiseless
    optimum."""
    code = torchgcc.GCC(4, 16, lambda_dec=lambda_dec)
    generator = torch.Generator().manual_seed(0)
    y = torch.randn(6, 16, 3, generator=generator, dtype=torch.float64)
    mask = torch.zeros(6, 16, dtype=torch.bool)
    mask[:, [0, 5, 10]] = True
    code.decoder(y, mask)
    torch.testing.assert_close(code.decoder.last_ratio, torch.zeros_like(code.decoder.last_ratio), rtol=0, atol=0)


def test_pooled_ratio_divides_the_minimiser_by_the_gap_to_the_power_of_the_share_smoothing_cannot_remove():
    ratios = torch.tensor([0.0, 0.1, 0.2, 0.4], dtype=torch.float64)
    scores = torch.tensor([[3.0, 2.0, 1.0, 2.0], [1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 1.5, 3.0]], dtype=torch.float64)
    # means over the informative first and last groups: 2.5, 1.5, 1.25, 2.5 -> r* = 0.2, rho = 1 - 1.25 / 2.5
    assert pooled_gcv_ratio(scores, ratios).item() == pytest.approx(0.2 / 2**0.5)
    scores[2] = float("nan")  # a non-finite group does not count: the first alone, rho = 2 / 3
    assert pooled_gcv_ratio(scores, ratios).item() == pytest.approx(0.2 / 2 ** (1 / 3))
    flat = torch.tensor([[1.0, 0.999, 1.0, 1.2]], dtype=torch.float64)  # a tiny dip (exact results): about half
    assert pooled_gcv_ratio(flat, ratios).item() == pytest.approx(0.1 / 2**0.999)
    assert pooled_gcv_ratio(torch.ones(2, 4, dtype=torch.float64), ratios).item() == 0.0
    # another gap (benchmarks/lambda_derived_rules.py measures it on the masks): the same power of it
    assert pooled_gcv_ratio(flat, ratios, left_out_gap=1.5).item() == pytest.approx(0.1 / 1.5**0.999)


@pytest.mark.parametrize("lambda_dec", ["adaptive", "gcv", "spacing"])
def test_every_rule_reproduces_straight_lines(lambda_dec):
    code = torchgcc.GCC(5, 20, lambda_dec=lambda_dec)
    y = (2 * code.beta - 1).view(1, 20, 1).expand(3, 20, 1)
    mask = FixedStragglers(6, seed=0).sample(3, 20)
    torch.testing.assert_close(code.decoder(y, mask), (2 * code.alpha - 1).view(1, 5, 1).expand(3, 5, 1))


@pytest.mark.parametrize("lambda_dec", ["adaptive", "gcv"])
def test_the_choice_is_not_differentiated_the_decode_is(lambda_dec):
    """Results that require grad: the chosen ratio carries no autograd history, and the gradient of the decode is
    that of the linear map with the chosen smoothing held fixed (the transposed decoding matrices)."""
    code = torchgcc.GCC(5, 20, lambda_dec=lambda_dec)
    generator = torch.Generator().manual_seed(1)
    y = torch.sin(3 * code.beta).view(1, 20, 1).expand(4, 20, 2) + 1e-2 * torch.randn(4, 20, 2, generator=generator)
    y = y.clone().requires_grad_(True)
    mask = FixedStragglers(5, seed=0).sample(4, 20)
    weights = torch.randn(4, 5, 2, generator=generator, dtype=y.dtype)
    (code.decoder(y, mask) * weights).sum().backward()
    assert not code.decoder.last_ratio.requires_grad
    matrices = code.decoder.matrices(y.detach(), mask).to(y.dtype)  # (B, K, N), the same choice for these results
    torch.testing.assert_close(y.grad, matrices.transpose(1, 2) @ weights, rtol=1e-5, atol=1e-6)


def validated_reference(errors: np.ndarray, candidates: np.ndarray, proposed: int) -> float:
    """The validation from its definition, candidate by candidate in numpy: the least ratio among those whose total
    error is within one standard error (of the paired difference, over the groups) of the least total; the proposal
    with fewer than two groups."""
    if len(errors) < 2:
        return float(candidates[proposed])
    totals = errors.sum(axis=0)
    least = int(np.argmin(totals))
    within = [
        float(candidates[column])
        for column in range(errors.shape[1])
        if totals[column] - totals[least] <= np.std(errors[:, column] - errors[:, least], ddof=1) * np.sqrt(len(errors))
    ]
    return min(within)


@pytest.mark.parametrize("seed", range(12))
def test_validated_ratio_matches_its_definition(seed):
    """Random error tables with groups of very different scales, some with a clear winner."""
    rng = np.random.default_rng(seed)
    groups, candidates = int(rng.integers(1, 20)), int(rng.integers(2, 9))
    errors = rng.gamma(2.0, size=(groups, candidates)) * rng.gamma(1.0, size=(groups, 1)) * 10.0 ** rng.normal()
    winner = int(rng.integers(candidates))
    errors[:, winner] *= rng.uniform(0.2, 1.0)  # a candidate better in every group, by chance more or less
    errors[rng.random(groups) < 0.15, 0] = 0.0
    ratios = np.sort(rng.uniform(0, 2, candidates))
    proposed = int(rng.integers(candidates))
    chosen = validated_ratio(torch.from_numpy(errors), torch.from_numpy(ratios), proposed)
    assert chosen.dtype == torch.float64 and chosen.ndim == 0
    assert chosen.item() == validated_reference(errors, ratios, proposed)


def test_validated_ratio_takes_the_least_total_error_beyond_noise_and_needs_two_groups():
    ratios = torch.tensor([0.0, 0.1, 0.2], dtype=torch.float64)
    one = torch.tensor([[2.0, 1.0, 0.5]], dtype=torch.float64)  # one group: no sample to validate on
    assert validated_ratio(one, ratios, 0).item() == 0.0
    # every group gains the same at 0.2: no spread, a clear gain (a group 100 times larger weighs 100 times more)
    consistent = torch.tensor([[1.0, 0.9, 0.8], [100.0, 90.0, 80.0], [10.0, 9.0, 8.0]], dtype=torch.float64)
    assert validated_ratio(consistent, ratios, 0).item() == 0.2
    # 0.2 has the least total (9 against 10) but the groups disagree: differences at 0 of 4, -4 and 1, standard
    # deviation 4.04, standard error of the total 4.04 sqrt(3) = 7.0 > 1: the least smoothing within it, interpolation
    noisy = torch.tensor([[5.0, 5.0, 1.0], [1.0, 1.0, 5.0], [4.0, 4.0, 3.0]], dtype=torch.float64)
    assert validated_ratio(noisy, ratios, 1).item() == 0.0
    # candidates in any order (GCV's proposal last): the least ratio among those within, not the first index
    unordered = torch.tensor([0.3, 0.0, 0.1], dtype=torch.float64)
    tie = torch.tensor([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]], dtype=torch.float64)
    assert validated_ratio(tie, unordered, 0).item() == 0.1


def test_validated_ratio_keeps_the_proposal_where_an_error_is_not_finite():
    ratios = torch.tensor([0.0, 0.1, 0.2], dtype=torch.float64)
    errors = torch.tensor([[1.0, 0.5, 0.2], [math.inf, 0.5, 0.2]], dtype=torch.float64)
    assert validated_ratio(errors, ratios, 1).item() == 0.1
    assert validated_ratio(torch.where(torch.isinf(errors), math.nan, errors), ratios, 2).item() == 0.2


@pytest.mark.parametrize("scale", [1e-300, 1e-150, 1e-20, 1e20, 1e150, 1e300])
def test_the_validated_choice_is_invariant_to_the_scale_of_results_and_outputs(scale):
    """Results and outputs scaled alike (to where their squares under- or overflow float64) validate the same ratio:
    the decoder divides them by their largest magnitude first."""
    k, n, groups = 6, 14, 16
    code = torchgcc.GCC(k, n)
    generator = torch.Generator().manual_seed(11)
    noise = torch.randn(groups, n, 3, generator=generator, dtype=torch.float64)
    y = torch.sin(2 * code.beta).view(1, n, 1) + 0.2 * noise
    outputs = torch.sin(2 * code.alpha).view(1, k, 1).expand(groups, k, 3)
    mask = FixedStragglers(4, seed=2).sample(groups, n)
    unit = torchgcc.GCC(k, n).decoder.calibrate(y, mask, reference=outputs).item()
    # GCV's proposal, a candidate, is itself invariant to rounding (its scores are of normalised results)
    assert code.decoder.calibrate(y * scale, mask, reference=outputs * scale).item() == pytest.approx(unit, rel=1e-12)


@pytest.mark.parametrize(("workers", "arrived"), [(5, 3), (6, 2), (4, 4)])
def test_drawn_masks_are_uniform_over_the_sets_with_each_groups_count(workers, arrived):
    """Every straggler set with the group's count is drawn equally often: each set's frequency over 4000 draws within
    five binomial standard errors of ``1 / C(N, n)`` (a chance failure about 1e-6 per set), and the draws are a
    function of the generator's seed. A second group with one fewer result keeps its own count."""
    mask = torch.zeros(2, workers, dtype=torch.bool)
    mask[0, :arrived] = True
    mask[1, : arrived - 1] = True
    draws = 4000
    drawn = drawn_masks(mask, draws, torch.Generator().manual_seed(3))
    assert drawn.shape == (2 * draws, workers) and drawn.dtype == torch.bool
    torch.testing.assert_close(drawn.sum(-1), mask.sum(-1).repeat(draws), rtol=0, atol=0)
    torch.testing.assert_close(drawn, drawn_masks(mask, draws, torch.Generator().manual_seed(3)), rtol=0, atol=0)
    first = drawn.view(draws, 2, workers)[:, 0]
    sets = math.comb(workers, arrived)
    counts = collections.Counter(tuple(row.tolist()) for row in first)
    assert len(counts) == sets
    p = 1 / sets
    bound = 5 * math.sqrt(p * (1 - p) / draws)
    assert all(abs(c / draws - p) <= bound for c in counts.values())


def test_calibrate_validated_asks_for_the_decodable_pooled_groups_only():
    """A first call with the model at hand: the outputs (and every worker's results, when asked for them) are
    computed for the pooled groups (16 evenly spaced of 40) that can be decoded, and the choice is calibrate() on
    exactly those; a batch with none of them, or with an infinite result, leaves the choice to the decoder's own
    first call."""
    k, n, groups = 4, 10, 40
    generator = torch.Generator().manual_seed(2)
    code = torchgcc.GCC(k, n, check=False)
    y = torch.sin(3 * code.beta).view(1, n, 1) + 0.1 * torch.randn(
        groups, n, 2, generator=generator, dtype=torch.float64
    )
    truth = torch.sin(3 * code.alpha).view(1, k, 1).expand(groups, k, 2)
    mask = FixedStragglers(3, seed=1).sample(groups, n)
    pooled = torch.linspace(0, groups - 1, 16).round().long()
    mask[pooled[3]] = False  # a pooled group with nothing arrived: left out
    asked = []

    def outputs(index):
        asked.append(index)
        return truth[index]

    assert code.decoder.calibrate_validated(y, mask, outputs)
    (index,) = asked
    torch.testing.assert_close(index, pooled[pooled != pooled[3]], rtol=0, atol=0)
    expected = torchgcc.GCC(k, n).decoder.calibrate(y[index], mask[index], reference=truth[index])
    assert float(code.decoder.ratio) == float(expected)
    assert not code.decoder.calibrate_validated(y, mask, outputs)  # calibrated already
    # every worker's results from results(index): the stragglers' slots of y are never read then
    other = y + 0.3 * torch.randn(groups, n, 2, generator=generator, dtype=torch.float64)
    given = torchgcc.GCC(k, n, check=False).decoder
    asked.clear()
    assert given.calibrate_validated(torch.where(mask.unsqueeze(-1), y, math.nan), mask, outputs, lambda i: other[i])
    expected = torchgcc.GCC(k, n).decoder.calibrate(other[index], mask[index], reference=truth[index])
    assert float(given.ratio) == float(expected) and len(asked) == 1
    with pytest.raises(ValueError, match=r"results\(index\) must be every worker's results \(G, N, \*out\)"):
        torchgcc.GCC(k, n).decoder.calibrate_validated(y, mask, outputs, lambda i: other[i, :, :1])
    fresh = torchgcc.GCC(k, n, check=False).decoder
    assert not fresh.calibrate_validated(y, torch.zeros_like(mask), outputs)
    assert not fresh.calibrate_validated(torch.where(mask.unsqueeze(-1), math.inf, y), mask, outputs)
    assert not fresh.calibrate_validated(y, mask, outputs, lambda i: torch.where(mask[i].unsqueeze(-1), y[i], math.inf))
    assert not fresh.calibrated
    asked.clear()
    assert not torchgcc.GCC(k, n, lambda_dec="gcv").decoder.calibrate_validated(y, mask, outputs)  # never calibrates
    assert asked == []


@pytest.mark.parametrize("truth_ratio", [0.0, 0.1, 0.4, 1.6])
def test_validation_picks_the_ratio_whose_decode_the_outputs_are(truth_ratio):
    """Outputs that are exactly what ratio ``r0`` decodes from every result (no stragglers: the drawn straggler sets
    are the groups' own): its error is zero in every group, so validation takes it (whatever GCV proposed), and later
    calls decode as a fixed-ratio decoder at ``r0`` does (the numba kernel)."""
    k, n, groups = 6, 18, 16
    code = torchgcc.GCC(k, n)
    generator = torch.Generator().manual_seed(3)
    y = torch.sin(2 * code.beta).view(1, n, 1) + 0.2 * torch.randn(
        groups, n, 2, generator=generator, dtype=torch.float64
    )
    mask = torch.ones(groups, n, dtype=torch.bool)
    fixed = SplineDecoder(code.alpha, code.beta, lam=None, bandwidth_ratio=truth_ratio, min_arrived=2)
    outputs = fixed(y, mask)
    assert code.decoder.calibrate(y, mask, reference=outputs).item() == truth_ratio
    torch.testing.assert_close(code.decoder(y, mask), outputs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("features", [3, 40])
def test_validated_calibration_scores_each_candidate_as_a_fixed_ratio_decoder_decodes(features):
    """The decoder's own scoring (compacted splines, float64; with more features than N + K, on the QR-reduced
    results) against the kernel path of fixed-ratio decoders on the full features: each group's error summed over its
    own straggler set and the drawn ones gives the same choice, GCV's proposal included as the last candidate."""
    k, n, groups = 8, 16, 16
    code, plain = torchgcc.GCC(k, n), torchgcc.GCC(k, n)
    generator = torch.Generator().manual_seed(7)
    shift = torch.linspace(0, 1, features, dtype=torch.float64)
    y = torch.tanh(3 * code.beta.view(1, n, 1) + shift) + 0.05 * torch.randn(
        groups, n, features, generator=generator, dtype=torch.float64
    )
    outputs = torch.tanh(3 * code.alpha.view(1, k, 1) + shift).expand(groups, k, features)
    mask = FixedStragglers(6, seed=4).sample(groups, n)
    proposed = plain.decoder.calibrate(y, mask)
    candidates = [*GCV_RATIOS, proposed.item()]
    sets = 1 + VALIDATION_DRAWS
    masks = torch.cat([mask, drawn_masks(mask, VALIDATION_DRAWS, torch.Generator().manual_seed(VALIDATION_SEED))])
    ys, targets = y.repeat(sets, 1, 1), outputs.repeat(sets, 1, 1)
    errors = torch.stack(
        [
            (SplineDecoder(code.alpha, code.beta, lam=None, bandwidth_ratio=r, min_arrived=2)(ys, masks) - targets)
            .pow(2)
            .sum((1, 2))
            .view(sets, groups)
            .sum(0)
            for r in candidates
        ],
        dim=1,
    )
    expected = validated_ratio(errors, torch.tensor(candidates, dtype=torch.float64), len(candidates) - 1)
    assert code.decoder.calibrate(y, mask, reference=outputs).item() == pytest.approx(expected.item(), rel=1e-12)
    best, second = sorted(errors.sum(0).tolist())[:2]
    assert best < (1 - 1e-9) * second  # no near-tie that rounding (about 1e-13 relative here) could turn


@pytest.mark.parametrize(
    "reference, error, message",
    [
        (
            torch.zeros(4, 5, 2, dtype=torch.float64),
            ValueError,
            r"reference must be the uncoded outputs \(B, K, \*out\) = \(4, 6, 2\)",
        ),
        (
            torch.zeros(4, 6, 2, dtype=torch.int64),
            TypeError,
            r"reference must be a floating-point torch.Tensor.*torch.int64",
        ),
        ([[0.0]], TypeError, r"reference must be a floating-point torch.Tensor.*got list"),
        (torch.full((4, 6, 2), float("nan"), dtype=torch.float64), ValueError, "reference has non-finite values"),
    ],
)
def test_calibrate_refuses_a_reference_that_is_not_the_groups_outputs(reference, error, message):
    code = torchgcc.GCC(6, 12)
    y = torch.randn(4, 12, 2, dtype=torch.float64)
    with pytest.raises(error, match=message):
        code.decoder.calibrate(y, torch.ones(4, 12, dtype=torch.bool), reference=reference)
    assert not code.decoder.calibrated
