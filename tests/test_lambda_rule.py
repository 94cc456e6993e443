"""The default decoder smoothing ``lambda_dec="adaptive"``: GCV over a floored grid, checked against scipy."""

import numpy as np
import pytest
import torch
from scipy.interpolate import make_smoothing_spline

import torchgcc
from torchgcc.codes.gcc import ADAPTIVE_FLOOR_RATIO, FlooredGCVSplineDecoder, spacing_lambda
from torchgcc.stragglers import FixedStragglers


def _reference(beta, alpha, y, n_lambdas):
    """Brute force with scipy: GCV score of every candidate from explicit hat matrices, then the chosen fit."""
    n = len(beta)
    best = None
    for lam in n_lambdas:
        hat = make_smoothing_spline(beta, np.eye(n), lam=n * lam)(beta)  # (n, n): column j = fit to e_j
        residual = y - hat @ y
        score = (residual**2).sum() / n / (1 - np.trace(hat) / n) ** 2
        if best is None or score < best[0]:
            best = (score, lam)
    return best[1], make_smoothing_spline(beta, y, lam=n * best[1])(alpha)


def test_adaptive_matches_brute_force_gcv_over_the_floored_grid():
    k, n = 6, 24
    code = torchgcc.GCC(k, n)
    assert isinstance(code.decoder, FlooredGCVSplineDecoder)
    g = torch.Generator().manual_seed(0)
    t = code.beta
    y = torch.stack([torch.sin(3 * t), torch.sin(3 * t) + 0.05 * torch.randn(n, generator=g, dtype=torch.float64)])
    y = torch.stack([y, y.flip(-1)], dim=-1)  # (2 groups, N, 2 outputs)
    mask = FixedStragglers(5, seed=2).sample(2, n)
    out = code.decoder(y, mask)
    for group in range(2):
        arrived = mask[group].numpy()
        m = int(arrived.sum())
        grid = spacing_lambda(m, ADAPTIVE_FLOOR_RATIO) * 10 ** (np.arange(13) / 2)
        lam, expected = _reference(t.numpy()[arrived], code.alpha.numpy(), y[group].numpy()[arrived], grid)
        assert code.decoder.last_lambda[group].item() == lam
        inside = (code.alpha.numpy() >= t.numpy()[arrived].min()) & (code.alpha.numpy() <= t.numpy()[arrived].max())
        np.testing.assert_allclose(out[group].numpy()[inside], expected[inside], atol=1e-8)
    # exact smooth results keep the floor; noisy ones are smoothed more
    assert code.decoder.last_lambda[0] < code.decoder.last_lambda[1]


def test_adaptive_reproduces_straight_lines():
    code = torchgcc.GCC(5, 20)
    y = (2 * code.beta - 1).view(1, 20, 1).expand(3, 20, 1)
    mask = FixedStragglers(6, seed=0).sample(3, 20)
    torch.testing.assert_close(code.decoder(y, mask), (2 * code.alpha - 1).view(1, 5, 1).expand(3, 5, 1))


@pytest.mark.parametrize(("n", "d"), [(20, 2), (12, 50), (4, 3), (140, 3)])  # 140: the banded route
def test_banded_gcv_scores_match_hat_matrices(n, d):
    """Fewer and more outputs than knots, on both routes (Demmler-Reinsch up to 128 knots, banded above)."""
    from torchgcc.functional import gcv_scores, smoothing_spline_matrix
    from torchgcc.functional.spline_gcv import spline_gcv_scores

    g = torch.Generator().manual_seed(n)
    knots = torch.sort(torch.rand(3, n, generator=g, dtype=torch.float64) * 2 - 1).values
    y = torch.randn(3, n, d, generator=g, dtype=torch.float64)
    lams = torch.logspace(-8, -1, 5, dtype=torch.float64)
    hat = smoothing_spline_matrix(knots.unsqueeze(1), knots.unsqueeze(1), lams.view(1, -1))  # (3, 5, 20, 20)
    # the hat-matrix reference itself loses digits as n grows (random knots cluster): 1e-8 at n = 140
    torch.testing.assert_close(
        spline_gcv_scores(knots, y, lams), gcv_scores(hat, y.unsqueeze(1)), rtol=1e-9 if n <= 20 else 1e-8, atol=0
    )
