"""The adversarial decoders against scipy and their own defining properties; every valid input is accepted."""

import numpy as np
import pytest
import torch
from scipy.interpolate import make_smoothing_spline

from torchgcc.codes.robust import DECODERS, RobustGCC, adversarial_lambda, min_arrived_for
from torchgcc.functional.weighted_spline import weighted_smoothing_spline


def _attacked(n=40, d=2, q=3, seed=0):
    """Smooth results at the worker points with q of them shifted by 5, and an all-arrived mask."""
    code = RobustGCC(6, n, q=q)
    t = code.beta
    y = torch.stack([torch.sin(2 * t + j) for j in range(d)], dim=-1).unsqueeze(0)  # (1, N, d)
    bad = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:q]
    y[0, bad] += 5.0
    return y, torch.ones(1, n, dtype=torch.bool), bad


def test_smoothing_decoder_is_scipys_smoothing_spline_with_the_adversarial_lambda():
    n, q = 30, 4
    code = RobustGCC(5, n, q=q, decoder="smoothing")
    y, mask, _ = _attacked(n=n, q=q)
    mask[0, [0, 7, 8]] = False
    kept = mask[0].numpy()
    lam = adversarial_lambda(q, int(kept.sum()))
    assert lam == pytest.approx(0.1 * (q / 27) ** 1.6)
    reference = make_smoothing_spline(code.beta.numpy()[kept], y[0].numpy()[kept], lam=27 * lam)
    np.testing.assert_allclose(code.decoder(y, mask)[0].numpy(), reference(code.alpha.numpy()), atol=1e-9)


def test_adversarial_lambda_takes_a_tensor_of_survivor_counts_and_stays_in_float64():
    """Integer counts used to give a float32 lambda (RobustGCC's table was 1e-8 off the float64 promise)."""
    counts = torch.tensor([10, 20, 40])
    ulps = 4 * torch.finfo(torch.float64).eps  # a power and a product in float64 (float32 was ~1e-8 off)
    lam = adversarial_lambda(2, counts)
    assert lam.dtype == torch.float64
    expected = torch.tensor([0.1 * (2 / c) ** 1.6 for c in (10, 20, 40)], dtype=torch.float64)
    torch.testing.assert_close(lam, expected, rtol=ulps, atol=0)
    assert adversarial_lambda(0, counts).eq(0).all()
    table = RobustGCC(4, 7, q=2).decoder.mu_table
    expected = torch.tensor([n * 0.1 * (2 / max(n, 1)) ** 1.6 for n in range(8)], dtype=torch.float64)
    torch.testing.assert_close(table, expected, rtol=ulps, atol=0)


def test_minimum_arrivals_per_decoder():
    assert [min_arrived_for(d, 3) for d in DECODERS] == [2, 5, 5]
    for decoder in DECODERS:
        assert RobustGCC(2, 8, q=1, decoder=decoder).min_arrived == min_arrived_for(decoder, 1)


@pytest.mark.parametrize("decoder", ["huber", "trim"])
def test_refit_does_not_inherit_the_robust_minimum(decoder):
    """The issue's case: K = 2, N = 8, q = 1 with 4 arrived (and 3, the true minimum q + 2) decodes; 2 raise."""
    code = RobustGCC(2, 8, q=1, decoder=decoder)
    y = torch.linspace(0, 1, 8, dtype=torch.float64).view(1, 8, 1).repeat(2, 1, 1)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, [0, 2, 5, 7]] = True
    mask[1, [1, 4, 6]] = True
    out = code.decoder(y, mask)
    assert torch.isfinite(out).all()
    assert (code.decoder.last_flagged.sum(dim=1) <= 1).all()
    mask[1, 4] = False
    with pytest.raises(ValueError, match="group 1 has 2 arrived results but this decoder needs at least 3"):
        code.decoder(y, mask)


@pytest.mark.parametrize("decoder", ["huber", "trim"])
def test_construction_rejects_q_only_where_q_plus_2_exceeds_n(decoder):
    y = torch.randn(3, 8, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    code = RobustGCC(2, 8, q=6, decoder=decoder)  # q + 2 = 8 = N: valid
    assert torch.isfinite(code.decoder(y, torch.ones(3, 8, dtype=torch.bool))).all()
    with pytest.raises(ValueError, match="needs at least q \\+ 2 = 9 arrived results, more than N=8"):
        RobustGCC(2, 8, q=7, decoder=decoder)
    assert RobustGCC(2, 8, q=7, decoder="smoothing").min_arrived == 2
    with pytest.raises(ValueError, match="q must be an integer"):
        RobustGCC(2, 8, q=1.0, decoder=decoder)


@pytest.mark.parametrize("decoder", ["huber", "trim"])
@pytest.mark.parametrize("scale", [1e300, 1e-300])
def test_robust_decoders_are_scale_equivariant_up_to_the_float64_range(decoder, scale):
    """On 1e300 data the Huber weights used to be NaN ("weights must be positive"); now the estimate, the weights and
    the flags equal those of the unscaled data (the decoders are scale-equivariant)."""
    y, mask, _ = _attacked()
    code = RobustGCC(6, 40, q=3, decoder=decoder)
    base = code.decoder(y, mask)
    weights, flagged = code.decoder.last_weights, code.decoder.last_flagged
    scaled = code.decoder(y * scale, mask)
    assert torch.isfinite(scaled).all()
    torch.testing.assert_close(scaled / scale, base, rtol=1e-9, atol=0)
    torch.testing.assert_close(code.decoder.last_weights, weights, rtol=1e-9, atol=1e-12)
    assert torch.equal(code.decoder.last_flagged, flagged)


def test_trim_is_at_its_fixed_point_by_scipy():
    """Trimming's defining property: the flagged workers are the q largest residuals of the smoothing spline (scipy,
    lam = n_kept * lambda) fitted to the others, and without a refit the estimate is that spline at alpha."""
    n, q = 40, 3
    y, mask, bad = _attacked(n=n, q=q)
    code = RobustGCC(6, n, q=q, decoder="trim", robust={"refit": None, "iters": 8})
    estimate = code.decoder(y, mask)[0].numpy()
    flagged = code.decoder.last_flagged[0].numpy()
    assert sorted(np.flatnonzero(flagged)) == sorted(bad.tolist())
    t, data = code.beta.numpy(), y[0].numpy()
    lam = adversarial_lambda(q, n)
    spline = make_smoothing_spline(t[~flagged], data[~flagged], lam=(n - q) * lam)
    residuals = np.linalg.norm(data - spline(t), axis=1)
    assert set(np.argsort(residuals)[-q:]) == set(np.flatnonzero(flagged))
    np.testing.assert_allclose(estimate, spline(code.alpha.numpy()), atol=1e-9)


def test_huber_is_at_its_fixed_point_by_scipy():
    """Huber's IRLS at convergence: the weights are the Huber weights of the residuals of scipy's weighted smoothing
    spline with those weights; the shifted workers get the smallest weights and are the ones flagged."""
    n, q = 40, 3
    y, mask, bad = _attacked(n=n, q=q)
    code = RobustGCC(6, n, q=q, decoder="huber", robust={"refit": None, "iters": 60})
    code.decoder(y, mask)
    w = code.decoder.last_weights[0].numpy()
    t, data = code.beta.numpy(), y[0].numpy()
    spline = make_smoothing_spline(t, data, w=w, lam=n * adversarial_lambda(q, n))
    residuals = np.linalg.norm(data - spline(t), axis=1)
    scale = 1.4826 * np.sort(residuals)[(n - 1) // 2]  # torch's median of an even count: the lower middle value
    np.testing.assert_allclose(w, np.maximum(np.minimum(1, 1.345 * scale / residuals), 1e-8), rtol=1e-6)
    assert set(np.argsort(w)[:q]) == set(bad.tolist())
    assert sorted(np.flatnonzero(code.decoder.last_flagged[0].numpy())) == sorted(bad.tolist())


def test_huber_flags_at_most_q_workers():
    """Half the workers far off: Huber's MAD scale breaks down, but it sets aside q of them, never more."""
    n, q = 24, 2
    y = torch.zeros(1, n, 1, dtype=torch.float64)
    y[0, ::2] = 1.0
    code = RobustGCC(4, n, q=q, decoder="huber")
    assert torch.isfinite(code.decoder(y, torch.ones(1, n, dtype=torch.bool))).all()
    assert code.decoder.last_flagged.sum() <= q


def test_weighted_spline_with_two_knots_is_the_line_through_them():
    knots = torch.tensor([[-0.5, 0.5]], dtype=torch.float64)
    y = torch.tensor([[[1.0], [3.0]]], dtype=torch.float64)
    fitted, values = weighted_smoothing_spline(
        knots, y, torch.tensor([[0.1, 2.0]]), torch.tensor([-1.0, 0.0, 1.0]), 1.0
    )
    assert values.flatten().tolist() == [0.0, 2.0, 4.0] and torch.equal(fitted, y)
