"""Exact leave-one-out scores of cubic smoothing splines against brute force with scipy."""

import numpy as np
import pytest
import torch
from references import natural_spline_reference, reinsch_condition

from torchgcc.functional import compact_survivors, survivor_layout
from torchgcc.functional.gcv import GRAM_JITTER
from torchgcc.functional.loo import loo_errors, loo_scores


def loo_reference(knots: np.ndarray, y: np.ndarray, mu: float) -> np.ndarray:
    """``(n,)``: ``||y_i - u_{-i}(t_i)||^2`` on y scaled to unit norm, ``u_{-i}`` scipy's natural smoothing spline of
    the other n - 1 results with the same penalty weight ``mu`` (mean-normalised ``lam = mu / (n - 1)``; linear
    beyond its outer knots, where the left-out end result lies), refitted n times."""
    n = len(knots)
    y = y / np.linalg.norm(y)
    errors = np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        fit = natural_spline_reference(knots[keep], knots[i : i + 1], mu / (n - 1)) @ y[keep]
        errors[i] = float(((fit - y[i]) ** 2).sum())
    return errors


@pytest.mark.parametrize(("n", "d"), [(4, 1), (9, 2), (12, 30), (40, 3)])  # d = 30 > n - 2: the Gram factor route
def test_loo_scores_and_errors_match_n_refits_with_scipy(n, d):
    """Both are backward stable: they differ by a small multiple (64: the reference refits n times and extrapolates
    the end knots) of cond(R + mu Q^T Q) eps relative, plus GRAM_JITTER cond where d > n - 2; mu = 0 is the
    interpolating spline (scipy's CubicSpline)."""
    generator = torch.Generator().manual_seed(n)
    mask = torch.rand(3, n + 4, generator=generator) < 0.8
    mask[:, :n] = True
    points = torch.sort(torch.rand(n + 4, generator=generator, dtype=torch.float64) * 2 - 1).values
    survivors = compact_survivors(mask, survivor_layout(points))
    y = torch.randn(3, n + 4, d, generator=generator, dtype=torch.float64)
    mus = torch.tensor([0.0, 1e-5, 1e-3, 1e-1], dtype=torch.float64)
    scores = loo_scores(survivors.knots, survivors.counts, y, mus.expand(3, -1))
    errors = loo_errors(survivors.knots, survivors.counts, y, mus.expand(3, -1))
    for b in range(3):
        count = int(survivors.counts[b])
        knots, data = survivors.knots[b, :count].numpy(), y[b, :count].numpy()
        assert not errors[b, :, count:].any()  # the padding
        for candidate, mu in enumerate(mus.tolist()):
            cond = reinsch_condition(knots, mu / count)
            rtol = 64 * cond * np.finfo(np.float64).eps + (GRAM_JITTER * cond if d > count - 2 else 0)
            reference = loo_reference(knots, data, mu)
            np.testing.assert_allclose(scores[b, candidate].item(), reference.mean(), rtol=rtol)
            # each knot's error, to the same bound taken absolutely: the solves' rounding (and the Gram's jitter) is
            # relative to the norm of the whole residual, which one knot's error may carry alone
            np.testing.assert_allclose(
                errors[b, candidate, :count].numpy(), reference, rtol=0, atol=rtol * reference.sum()
            )


def test_loo_scores_do_not_depend_on_the_smoothing_below_four_results_or_for_lines():
    """Three knots: one interior second derivative, the left-out residual is the same for every mu; results on a
    line: every fit reproduces them, every score is 0."""
    knots = torch.tensor([[-1.0, 0.2, 0.5, 1.0]], dtype=torch.float64)
    y = torch.tensor([[[1.0], [-2.0], [0.5], [0.0]]], dtype=torch.float64)
    mus = torch.tensor([[0.0, 1e-3, 1e-1, 10.0]], dtype=torch.float64)
    three = loo_scores(knots, torch.tensor([3]), y, mus)[0]
    torch.testing.assert_close(three, three[:1].expand(4), rtol=1e-12, atol=0)
    line = loo_scores(knots, torch.tensor([4]), 3 * knots.unsqueeze(-1) - 1, mus)[0]
    assert line.abs().max() < 1e-25
