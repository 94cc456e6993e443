"""Every registered code honours the same contract; each code's matrices match an independent reference."""

import math
import warnings

import numpy as np
import pytest
import torch
from helpers import caught_warnings, profiled, random_masks, requires_cuda
from references import berrut_reference, exact_lagrange, natural_spline_reference

import torchgcc
from torchgcc.codes.gcc import spacing_lambda
from torchgcc.functional import smoothing_spline_matrix

K, N = 4, 12


def build(name: str, **kwargs) -> torchgcc.Code:
    if name == "lcc":
        kwargs.setdefault("degree", 1)
    return torchgcc.make_code(name, num_inputs=K, num_workers=N, **kwargs)


#: The codes that fit a function to any ``min_arrived`` results (replication and uncoded, which need a copy of every
#: input, are checked against their own reference below; every code runs torchgcc.testing.CodeContract).
FITTING_CODES = [name for name in torchgcc.list_codes() if name not in ("replication", "uncoded")]


@pytest.fixture(params=FITTING_CODES)
def code(request):
    return build(request.param)


# --- the shared contract -----------------------------------------------------------------------------------------


def test_points_and_shapes(code):
    assert code.alpha.shape == (K,) and code.beta.shape == (N,)
    assert code.alpha.dtype == torch.float64 and torch.all(code.alpha.diff() > 0)
    x = torch.randn(3, K, 2, 5)
    coded = code.encoder(x)
    assert coded.shape == (3, N, 2, 5)
    decoded = code.decoder(coded, torch.ones(3, N, dtype=torch.bool))
    assert decoded.shape == (3, K, 2, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_output_dtype_follows_input(code, dtype):
    x = torch.randn(2, K, 3, dtype=dtype)
    assert code.encoder(x).dtype == dtype
    assert code.decoder(code.encoder(x), torch.ones(2, N, dtype=torch.bool)).dtype == dtype


def test_identity_computation_is_recovered_without_stragglers(code):
    # f = identity: LCC is exact; the spline and Berrut decoders fit a different function space than their
    # encoders, so they recover x approximately (GCC far more closely than BACC). Tolerances: 2x the largest error
    # over seeds 0..1999 of this draw (LCC 3.1e-15, GCC 0.0075 / natural 0.0069, BACC 0.216), rounded up.
    x = torch.randn(5, K, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    decoded = code(x, torch.ones(5, N, dtype=torch.bool))
    tolerance = {torchgcc.LCC: 1e-14, torchgcc.GCC: 0.015, torchgcc.BACC: 0.44}[type(code)]
    assert (decoded - x).abs().max() < tolerance


def test_constant_data_decodes_exactly_under_any_mask(code):
    mask = random_masks(6, N, 3, seed=1)
    y = torch.full((6, N, 2), 3.25, dtype=torch.float64)
    torch.testing.assert_close(code.decoder(y, mask), torch.full((6, K, 2), 3.25, dtype=torch.float64))


def test_values_at_stragglers_never_reach_the_output(code):
    mask = random_masks(4, N, 3, seed=2)
    y = torch.randn(4, N, 6, dtype=torch.float64)
    clean = code.decoder(y, mask)
    poisoned = y.clone()
    poisoned[~mask] = float("nan")
    poisoned[0][~mask[0]] = float("inf")
    torch.testing.assert_close(code.decoder(poisoned, mask), clean)


def test_nonfinite_arrived_result_names_group_and_worker(code):
    mask = torch.ones(3, N, dtype=torch.bool)
    y = torch.randn(3, N, 2)
    y[1, 5, 0] = float("nan")
    with pytest.raises(ValueError, match="worker 5 in group 1"):
        code.decoder(y, mask)


def test_nonfinite_straggle_policy_treats_the_worker_as_a_straggler():
    code = build("gcc", nonfinite="straggle")
    mask = torch.ones(2, N, dtype=torch.bool)
    y = torch.randn(2, N, 3, dtype=torch.float64)
    bad = y.clone()
    bad[1, 4] = float("inf")
    expected_mask = mask.clone()
    expected_mask[1, 4] = False
    torch.testing.assert_close(code.decoder(bad, mask), build("gcc").decoder(y, expected_mask))


@pytest.mark.parametrize(
    "y_shape, mask_shape, mask_dtype, error",
    [
        ((2, N, 3), (2, N - 1), torch.bool, ValueError),
        ((2, N, 3), (3, N), torch.bool, ValueError),
        ((2, N + 1, 3), (2, N + 1), torch.bool, ValueError),
        ((2, N, 3), (2, N), torch.float32, TypeError),
        ((2, N, 3), (2, N), torch.int64, TypeError),
    ],
)
def test_bad_masks_and_shapes_raise(code, y_shape, mask_shape, mask_dtype, error):
    with pytest.raises(error):
        code.decoder(torch.randn(y_shape), torch.ones(mask_shape, dtype=mask_dtype))


def test_too_few_survivors_raise(code):
    mask = torch.zeros(2, N, dtype=torch.bool)
    mask[:, 0] = True
    y = torch.randn(2, N, 1, dtype=torch.float64)
    if code.min_arrived <= 1:  # BACC decodes one result as the constant through it
        torch.testing.assert_close(code.decoder(y, mask), y[:, :1].expand(2, K, 1))
        mask[:, 0] = False
    with pytest.raises(ValueError, match="needs at least"):
        code.decoder(y, mask)


def test_encoder_rejects_wrong_group_size(code):
    with pytest.raises(ValueError, match="K=4"):
        code.encoder(torch.randn(2, K + 1, 3))


@pytest.mark.parametrize("name", ["gcc", "bacc", "lcc"])
def test_more_inputs_than_workers_raise(name):
    with pytest.raises(ValueError, match="must not exceed"):
        torchgcc.make_code(name, num_inputs=5, num_workers=4, **({"degree": 1} if name == "lcc" else {}))


def test_duplicate_points_raise():
    with pytest.raises(ValueError, match="duplicates"):
        torchgcc.GCC(num_inputs=2, num_workers=3, beta=[-1.0, 0.0, 0.0])


def test_unknown_code_and_bad_lambdas_raise():
    with pytest.raises(ValueError, match="registered"):
        torchgcc.make_code("reed-solomon", num_inputs=2, num_workers=4)
    with pytest.raises(ValueError, match="lambda_dec"):
        torchgcc.GCC(num_inputs=2, num_workers=4, lambda_dec=-1.0)
    with pytest.raises(ValueError, match="lambda_enc"):
        torchgcc.GCC(num_inputs=2, num_workers=4, lambda_enc="gcv")


def test_a_batch_of_mixed_masks_decodes_like_each_group_alone(code):
    """Groups with different survivor counts share one batched plan: every group's estimate equals the decode of that
    group alone (one group per call), for every mask-only code and rule."""
    if code.decoder.depends_on_results:  # a pooled rule chooses from the batch: its per-group decode is checked below
        code = build("gcc", lambda_dec="spacing")
    masks = torch.cat([random_masks(5, N, 2, seed=3), random_masks(5, N, 3, seed=4), random_masks(2, N, 0, seed=5)])
    y = torch.randn(12, N, 2, dtype=torch.float64)
    batched = code.decoder(y, masks)
    for b in range(12):
        torch.testing.assert_close(batched[b : b + 1], code.decoder(y[b : b + 1], masks[b : b + 1]), rtol=0, atol=1e-12)


def test_per_group_gcv_decodes_each_group_like_it_alone():
    code = build("gcc", lambda_dec="gcv")
    masks = torch.cat([random_masks(4, N, 2, seed=6), random_masks(4, N, 4, seed=7)])
    y = torch.randn(8, N, 3, dtype=torch.float64)
    batched = code.decoder(y, masks)
    for b in range(8):
        torch.testing.assert_close(batched[b : b + 1], code.decoder(y[b : b + 1], masks[b : b + 1]), rtol=0, atol=1e-12)


def test_gradients_flow_through_encoder_and_decoder(code):
    x = torch.randn(2, K, 3, dtype=torch.float64, requires_grad=True)
    mask = random_masks(2, N, 2, seed=5)
    assert torch.autograd.gradcheck(lambda v: code.decoder(torch.sin(code.encoder(v)), mask), (x,))


def test_casting_the_code_keeps_float64_points(code):
    code = code.to(torch.bfloat16)
    assert code.beta.dtype == torch.float64 and code.encoder.matrix.dtype == torch.float64


@pytest.mark.cuda
@requires_cuda
def test_cuda_matches_cpu(code):
    mask = random_masks(8, N, 3, seed=6)
    x = torch.randn(8, K, 5)
    cpu = code.decoder(code.encoder(x), mask)
    gpu = code.to("cuda").decoder(code.encoder(x.cuda()), mask.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-5, rtol=1e-5)


# --- each code against its reference --------------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [8, 64, 512])
@pytest.mark.parametrize("lam", [0.0, 1e-7, "spacing"])
def test_gcc_matrices_match_scipy(num_workers, lam):
    k = 16 if num_workers >= 16 else 5  # scipy's smoothing spline needs 5 points
    lambda_enc = 0.0 if lam == "spacing" else lam
    code = torchgcc.GCC(num_inputs=k, num_workers=num_workers, lambda_enc=lambda_enc, lambda_dec=lam)
    alpha, beta = code.alpha.numpy(), code.beta.numpy()
    np.testing.assert_allclose(
        code.encoder.matrix.numpy(), natural_spline_reference(alpha, beta, lambda_enc), atol=1e-8
    )
    for stragglers in sorted({0, 1, num_workers // 4, num_workers - 5}):
        mask = random_masks(2, num_workers, stragglers, seed=stragglers)
        full = code.decoder.decode_matrix(mask)
        for row, arrived in zip(full, mask):
            n = int(arrived.sum())
            lam_n = spacing_lambda(n) if lam == "spacing" else lam
            expected = natural_spline_reference(beta[arrived.numpy()], alpha, lam_n)
            np.testing.assert_allclose(row[:, arrived].numpy(), expected, atol=1e-8)
            assert not row[:, ~arrived].any()


def test_bacc_matrices_match_berrut_definition_over_sorted_survivors():
    code = torchgcc.BACC(num_inputs=5, num_workers=20)
    alpha, beta = code.alpha.numpy(), code.beta.numpy()
    np.testing.assert_allclose(code.encoder.matrix.numpy(), berrut_reference(alpha, beta), atol=1e-12)
    mask = random_masks(3, 20, 7, seed=9)
    for row, arrived in zip(code.decoder.decode_matrix(mask), mask):
        np.testing.assert_allclose(row[:, arrived].numpy(), berrut_reference(beta[arrived.numpy()], alpha), atol=1e-12)


def test_lcc_recovers_a_degree_two_polynomial_exactly_at_its_threshold():
    code = torchgcc.LCC(num_inputs=4, num_workers=12, degree=2)
    assert code.threshold == 7
    generator = torch.Generator().manual_seed(10)
    weight = torch.randn(6, 3, generator=generator, dtype=torch.float64)
    f = lambda x: (x @ weight) ** 2 + x @ weight  # noqa: E731  (degree 2 in x)
    x = torch.randn(5, 4, 6, generator=generator, dtype=torch.float64)
    y = f(code.encoder(x))
    for stragglers in (0, 3, 5):  # 5 stragglers leave exactly the threshold
        mask = random_masks(5, 12, stragglers, seed=stragglers)
        assert (code.decoder(y, mask) - f(x)).abs().max() < 1e-8
    below = random_masks(5, 12, 6, seed=11)
    with pytest.raises(ValueError, match="needs at least 7"):
        code.decoder(y, below)
    interpolating = torchgcc.LCC(num_inputs=4, num_workers=12, degree=2, below_threshold="interpolate")
    assert (interpolating.decoder(y, below) - f(x)).abs().max() > 1e-6  # inexact beyond the threshold


def lcc_amplification(code: torchgcc.LCC, arrived: torch.Tensor) -> float:
    """The largest absolute row sum of LCC's decode matrix at its threshold for one group's mask: its Lagrange basis
    over the survivors at the regression points, in exact rational arithmetic."""
    basis = exact_lagrange(code.beta.numpy()[arrived.numpy()], code.alpha.numpy())
    return float(np.abs(basis).sum(axis=1).max())


def decode_warnings(code: torchgcc.Code, y: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, list]:
    return caught_warnings(lambda: code.decoder(y, mask), torchgcc.ConditioningWarning)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lcc_warns_exactly_where_its_weights_amplify_rounding_past_half_the_digits(dtype):
    """At its threshold (22 of 40 workers) LCC's amplification ranges from about 2 (no stragglers) to 1e18 (a block
    of stragglers at one end, an extrapolation): the decoder warns for a mask iff the exact Lagrange basis's largest
    absolute row sum exceeds ``u ** -0.5`` of the results' dtype; the warned float32 decode of exact cubic results is
    off by more than ``u ** 0.5`` times their largest."""
    code = torchgcc.LCC(num_inputs=8, num_workers=40, degree=3)
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(1, 8, 5, generator=generator, dtype=torch.float64)
    y = (code.encoder(x) ** 3).to(dtype)
    limit = (torch.finfo(dtype).eps / 2) ** -0.5
    block = torch.arange(40) >= 18  # the 18 stragglers at one end
    masks = [torch.ones(40, dtype=torch.bool), block, *random_masks(16, 40, 18, seed=5)]
    outcomes = set()
    for arrived in masks:
        amplification = lcc_amplification(code, arrived)
        assert not 0.99 < amplification / limit < 1.01, "a mask this close to the limit tests rounding, not the rule"
        out, caught = decode_warnings(code, y, arrived.unsqueeze(0))
        assert bool(caught) == (amplification > limit), (amplification, limit, caught)
        outcomes.add(bool(caught))
        if caught:
            assert f"more than 1e{math.floor(math.log10(amplification)):+03d} " in str(caught[0].message)
            assert caught[0].filename == __file__  # points at the call, not inside torch or torchgcc
    assert outcomes == {True, False}
    if dtype == torch.float32:  # the warned block mask: the estimates of exact results are far from f(x)
        out, _ = decode_warnings(code, y, block.unsqueeze(0))
        assert (out.double() - x**3).abs().max() > limit**-1 * y.abs().max()


@pytest.mark.parametrize("num_inputs, warns", [(16, False), (32, True)])
def test_an_lcc_encoder_that_amplifies_float32_rounding_past_half_its_digits_warns_once_built(num_inputs, warns):
    """Equispaced points: the Lagrange encoder's largest absolute row sum (exact rational basis) is about 5e2 at
    K = 16 and 8e6 at K = 32 (N = 64), against float32's limit 2^12; Chebyshev points (the default) keep it near 3."""
    alpha, beta = torchgcc.points.equispaced(num_inputs), torchgcc.points.equispaced(64)
    exact = float(np.abs(exact_lagrange(alpha.numpy(), beta.numpy())).sum(axis=1).max())
    assert (exact > 2**12) == warns and not 0.99 < exact / 2**12 < 1.01
    equispaced = dict(alpha="equispaced", beta="equispaced")
    _, caught = caught_warnings(
        lambda: torchgcc.LCC(num_inputs, 64, degree=1, **equispaced), torchgcc.ConditioningWarning
    )
    assert len(caught) == int(warns)
    if warns:
        assert "LCC's encoder" in str(caught[0].message) and caught[0].filename == __file__
    assert caught_warnings(lambda: torchgcc.LCC(num_inputs, 64, degree=1), torchgcc.ConditioningWarning)[1] == []


def test_lcc_conditioning_is_read_with_the_flag_and_not_without_a_check():
    """check=True: the amplification rides on the one read of the finiteness flag, and too few results still raise
    before any warning; check=False: no read (the least-squares fit included) and no warning."""
    block = (torch.arange(40) >= 18).unsqueeze(0)
    block = torch.cat([block, torch.ones_like(block)])  # at the threshold (interpolation) and above (least squares)
    y = torch.randn(2, 40, 5)
    reads, warned = {}, {}
    for check in (True, False):
        code = torchgcc.LCC(num_inputs=8, num_workers=40, degree=3, check=check)
        reads[check] = profiled(lambda code=code: code.decoder(y, block))[1]
        warned[check] = len(decode_warnings(code, y, block)[1])
    assert reads == {True: 1, False: 0} and warned == {True: 1, False: 0}
    short = (torch.arange(40) >= 19).unsqueeze(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", torchgcc.ConditioningWarning)
        with pytest.raises(ValueError, match="needs at least 22"):
            torchgcc.LCC(num_inputs=8, num_workers=40, degree=3).decoder(y[:1], short)


def test_lcc_threshold_above_workers_raises():
    with pytest.raises(ValueError, match="needs at least 10 workers"):
        torchgcc.LCC(num_inputs=4, num_workers=8, degree=3)


# --- the defaults are good: GCC against BACC on a small network -------------------------------------------------


def mlp_errors(stragglers: int, groups: int = 200) -> dict[str, float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10))
    x = torch.randn(groups, 10, 20)
    mask = random_masks(groups, 40, stragglers, seed=stragglers)
    errors = {}
    with torch.no_grad():
        reference = model(x)
        for name in ("gcc", "bacc"):
            code = torchgcc.make_code(name, num_inputs=10, num_workers=40)
            errors[name] = torch.mean((code.decoder(model(code.encoder(x)), mask) - reference) ** 2).item()
    return errors


@pytest.mark.parametrize("stragglers", [0, 4, 10, 20])
def test_default_gcc_beats_bacc_on_a_tanh_mlp(stragglers):
    errors = mlp_errors(stragglers)
    assert errors["gcc"] <= errors["bacc"]
    if stragglers == 10:
        assert errors["gcc"] <= errors["bacc"] / 3


def test_default_lambdas_follow_the_documented_rule():
    assert torchgcc.GCC(num_inputs=4, num_workers=41).lambda_dec == "adaptive"  # tested in test_lambda_rule.py
    code = torchgcc.GCC(num_inputs=4, num_workers=41, lambda_dec="spacing")
    assert code.lambda_enc == 0.0 and code.lambda_dec == "spacing"
    mask = random_masks(2, 41, 10, seed=13)  # 31 results: lambda = (0.2 * 2 / 30)^4
    knots = code.beta[mask[0]]
    expected = smoothing_spline_matrix(knots, code.alpha, (0.2 * 2 / 30) ** 4)
    torch.testing.assert_close(code.decoder.decode_matrix(mask)[0][:, mask[0]], expected, rtol=0, atol=1e-14)
    natural = torchgcc.make_code("natural", num_inputs=4, num_workers=41)
    assert natural.lambda_enc == 0.0 and natural.lambda_dec == 0.0


def test_overflowing_but_finite_results_are_decoded_not_rejected():
    code = build("gcc")
    mask = random_masks(2, N, 2, seed=14)
    y = torch.full((2, N, 4), 1e38, dtype=torch.float32)  # finite; the decoder's finiteness probe (a sum) overflows
    y[~mask] = float("nan")
    torch.testing.assert_close(code.decoder(y, mask), torch.full((2, K, 4), 1e38), rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_the_check_catches_one_bad_value_in_any_dtype(dtype, bad):
    """The check's flag (a sum of the estimates, their extremes for float16) sees a single NaN or Inf: from an arrived
    worker it raises naming it; at a straggler it is kept out of the estimate (equal to the clean decode's)."""
    code = build("gcc", lambda_dec="spacing")
    mask = random_masks(3, N, 3, seed=15)
    y = torch.randn(3, N, 50, generator=torch.Generator().manual_seed(15)).to(dtype)
    clean = code.decoder(y, mask)
    arrived, straggler = y.clone(), y.clone()
    worker = int(mask[2].nonzero()[-1])
    arrived[2, worker, 49] = bad
    with pytest.raises(ValueError, match=f"non-finite result from worker {worker} in group 2"):
        code.decoder(arrived, mask)
    straggler[2, int((~mask[2]).nonzero()[0]), 49] = bad
    torch.testing.assert_close(code.decoder(straggler, mask), clean, rtol=0, atol=0)


def test_check_false_skips_validation_and_keeps_straggle_policy():
    y = torch.randn(3, 10, 4, dtype=torch.float64)
    mask = random_masks(3, 10, 3, seed=5)
    reference = torchgcc.GCC(4, 10).decoder(y, mask)
    unchecked = torchgcc.GCC(4, 10, check=False).decoder
    torch.testing.assert_close(unchecked(y, mask), reference, rtol=0, atol=0)
    poisoned = y.clone()
    poisoned[1, (~mask[1]).nonzero()[0, 0]] = float("nan")  # a straggler slot
    assert torch.isnan(unchecked(poisoned, mask)[1]).all()  # documented: not zeroed without check
    assert torch.isfinite(unchecked(poisoned, mask)[[0, 2]]).all()
    straggle = torchgcc.GCC(4, 10, check=False, nonfinite="straggle").decoder
    torch.testing.assert_close(straggle(poisoned, mask), reference, rtol=0, atol=0)


def test_lcc_degree_is_the_degree_of_f_and_the_decoder_fits_degree_k_minus_1_times_it():
    code = torchgcc.LCC(num_inputs=3, num_workers=9, degree=2)
    assert code.degree == 2 and code.decoder.fit_degree == 4 == code.threshold - 1
    assert not hasattr(code.decoder, "degree")


@pytest.mark.parametrize(("num_inputs", "num_workers"), [(4, 12), (3, 8), (5, 5), (1, 3)])
def test_replication_decodes_the_mean_of_each_inputs_arrived_copies(num_inputs, num_workers):
    """Against a loop over inputs: worker n copies input floor(n K / N); the estimate is the mean of the arrived
    copies' results, NaN without one; ``decodable`` is True exactly when every input has one."""
    code = torchgcc.make_code("replication", num_inputs=num_inputs, num_workers=num_workers)
    owners = [n * num_inputs // num_workers for n in range(num_workers)]
    x = torch.randn(6, num_inputs, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    coded = code.encoder(x)
    for n, k in enumerate(owners):
        assert torch.equal(coded[:, n], x[:, k])
    masks = torch.cat([random_masks(2, num_workers, s, seed=s) for s in range(num_workers)])
    y = torch.randn(len(masks), num_workers, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    estimate = code.decoder(y, masks)
    for b, mask in enumerate(masks.tolist()):
        for k in range(num_inputs):
            copies = [n for n in range(num_workers) if owners[n] == k and mask[n]]
            expected = y[b, copies].mean(0) if copies else torch.full((3,), float("nan"), dtype=torch.float64)
            torch.testing.assert_close(estimate[b, k], expected, rtol=1e-15, atol=1e-15, equal_nan=True)
        covered = all(any(mask[n] for n in range(num_workers) if owners[n] == k) for k in range(num_inputs))
        assert bool(code.decodable(masks[b : b + 1])) == covered


def test_uncoded_is_the_identity_on_k_workers():
    code = torchgcc.make_code("uncoded", num_inputs=4)
    assert (code.num_inputs, code.num_workers) == (4, 4)
    x = torch.randn(3, 4, 2)
    torch.testing.assert_close(code.decoder(code.encoder(x), torch.ones(3, 4, dtype=torch.bool)), x, rtol=0, atol=0)
    mask = torch.tensor([[True, True, False, True]])
    assert code.decodable(mask).tolist() == [False]
    estimate = code.decoder(x[:1], mask)
    assert torch.isnan(estimate[0, 2]).all() and torch.equal(estimate[0, [0, 1, 3]], x[0, [0, 1, 3]])
    assert torchgcc.make_code("uncoded", num_inputs=4, num_workers=4).num_workers == 4
    with pytest.raises(ValueError, match="num_workers must equal num_inputs"):
        torchgcc.make_code("uncoded", num_inputs=4, num_workers=8)


@pytest.mark.parametrize("name", torchgcc.list_codes())
def test_decodable_checks_the_mask_as_the_decoder_does(name):
    """Against a count and a coverage written here: a (B, N) bool mask is decodable when at least min_arrived
    arrived and (replication, uncoded) every input has an arrived copy; a mask the decoder refuses (other N, no batch
    dimension, an integer or float dtype, a list) raises the same error type naming ``mask``, never an answer."""
    code = torchgcc.make_code(name, num_inputs=K) if name == "uncoded" else build(name)
    n = code.num_workers
    masks = torch.cat([random_masks(3, n, s, seed=s) for s in range(n + 1)])
    copies = code.decoder.copies.tolist() if name in ("replication", "uncoded") else [[True] * n]
    expected = [
        sum(row) >= code.min_arrived and all(any(a and c for a, c in zip(row, held)) for held in copies)
        for row in masks.tolist()
    ]
    assert code.decodable(masks).tolist() == expected
    bad = [
        (torch.ones(2, n - 1, dtype=torch.bool), ValueError),
        (torch.ones(2, n + 3, dtype=torch.bool), ValueError),
        (torch.ones(n, dtype=torch.bool), ValueError),
        (torch.full((2, n), 2), TypeError),
        (torch.ones(2, n), TypeError),
        ([[True] * n], TypeError),
    ]
    for mask, error in bad:
        with pytest.raises(error, match="^mask must"):
            code.decodable(mask)


# --- state dicts, odd inputs, tracing -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["torch", "numba"])
@pytest.mark.parametrize("lambda_dec", [0.0, 1e-3, "spacing"])
def test_loading_a_state_dict_with_other_points_decodes_as_its_source(backend, lambda_dec):
    """The torch path used to keep the survivor layout of the points the code was built with (off by 0.5)."""
    source = torchgcc.GCC(3, 8, lambda_dec=lambda_dec, backend=backend, beta="equispaced", alpha="equispaced")
    target = torchgcc.GCC(3, 8, lambda_dec=lambda_dec, backend=backend)
    target.load_state_dict(source.state_dict())
    y = torch.randn(4, 8, 5, dtype=torch.float64)
    mask = random_masks(4, 8, 3, seed=2)
    assert torch.equal(target.beta, source.beta) and torch.equal(target.alpha, source.alpha)
    torch.testing.assert_close(target.decoder(y, mask), source.decoder(y, mask), rtol=0, atol=0)
    torch.testing.assert_close(target.decoder.decode_matrix(mask), source.decoder.decode_matrix(mask), rtol=0, atol=0)


@pytest.mark.parametrize("assign", [False, True])
def test_a_decoder_that_has_decoded_follows_every_later_change(assign, monkeypatch):
    """The kernel call is bound on the first decode (the points and tables it reads); loading other points, a higher
    min_arrived, another backend and a device or dtype move must each take effect on the next call."""
    from torchgcc.functional import numba_decode

    source = torchgcc.GCC(3, 8, lambda_dec="spacing", beta="equispaced", alpha="equispaced")
    target = torchgcc.GCC(3, 8, lambda_dec="spacing")
    y, mask = torch.randn(4, 8, 5, dtype=torch.float64), random_masks(4, 8, 3, seed=2)
    before = target.decoder(y, mask)
    target.load_state_dict(source.state_dict(), assign=assign)
    after = target.decoder(y, mask)
    torch.testing.assert_close(after, source.decoder(y, mask), rtol=0, atol=0)
    assert not torch.allclose(after, before)
    target.decoder.min_arrived = 6
    with pytest.raises(ValueError, match="needs at least 6"):
        target.decoder(y, mask)
    target.decoder.min_arrived = 2
    target.double()  # a conversion: the float64 buffers stay as they are, the binding is dropped and made again
    torch.testing.assert_close(target.decoder(y, mask), after, rtol=0, atol=0)
    target.decoder.backend = "torch"
    monkeypatch.setattr(numba_decode, "_spline_kernel", None)  # any call of the numba kernel now fails
    torch.testing.assert_close(target.decoder(y, mask), after, rtol=1e-12, atol=1e-12)


def test_a_state_dict_of_another_code_is_refused_before_anything_is_loaded():
    code = torchgcc.GCC(3, 8, lambda_dec="spacing")
    beta = code.beta.clone()
    with pytest.raises(ValueError, match="encoder.matrix has shape \\(12, 3\\), this code's \\(8, 3\\)"):
        code.load_state_dict(torchgcc.GCC(3, 12, lambda_dec="spacing").state_dict())
    with pytest.raises(ValueError, match="unexpected \\['decoder.ratio', 'decoder.ratios'\\]"):
        code.load_state_dict(torchgcc.GCC(3, 8).state_dict())
    state = torchgcc.GCC(3, 8, lambda_dec="spacing").state_dict()
    state["decoder.beta"] = torch.linspace(0, 3, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="decoder.beta must lie on \\[-1, 1\\]"):
        code.load_state_dict(state)
    assert torch.equal(code.beta, beta)


def test_a_loaded_calibration_is_kept_and_a_copy_decodes_alike():
    import copy
    import pickle

    y, mask = torch.randn(6, 8, 3, dtype=torch.float64), random_masks(6, 8, 2, seed=3)
    source = torchgcc.GCC(3, 8)
    expected = source.decoder(y, mask)
    target = torchgcc.GCC(3, 8)
    target.load_state_dict(source.state_dict())
    assert target.decoder.calibrated
    for copied in (target, copy.deepcopy(source), pickle.loads(pickle.dumps(source))):
        torch.testing.assert_close(copied.decoder(y, mask), expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_results_without_values_decode_to_an_empty_estimate(code, dtype):
    """Zero-size feature dimensions used to raise IndexError (amax over nothing) in the encoder and the GCV rules;
    the estimate of nothing is empty, and the default rule does not calibrate on it."""
    coded = code.encoder(torch.zeros(2, K, 3, 0, dtype=dtype))
    assert coded.shape == (2, N, 3, 0) and coded.dtype == dtype
    out = code.decoder(torch.zeros(2, N, 0, dtype=dtype), random_masks(2, N, 1, seed=0))
    assert out.shape == (2, K, 0) and out.dtype == dtype
    assert not getattr(code.decoder, "calibrated", False)


@pytest.mark.parametrize("method", ["huber", "trim", "smoothing"])
def test_robust_decoders_decode_results_without_values(method):
    code = torchgcc.codes.RobustGCC(3, 8, q=1, decoder=method)
    assert code.decoder(torch.zeros(2, 8, 0), torch.ones(2, 8, dtype=torch.bool)).shape == (2, 3, 0)


def test_a_mask_without_a_batch_dimension_is_refused_naming_the_shape(code):
    if code.decoder.depends_on_results:
        code = build("gcc", lambda_dec="spacing")
    for mask in (torch.tensor(True), torch.ones(N, dtype=torch.bool)):
        with pytest.raises(ValueError, match=f"mask must have shape \\(B, N\\) = \\(B, {N}\\)"):
            code.decoder.decode_matrix(mask)


@pytest.mark.parametrize("name", torchgcc.list_codes())
def test_a_traced_decoder_decodes_every_mask(name):
    """torch.jit.trace of the numba path used to freeze the first mask's matrices into the trace (error 2.84)."""
    options = {"lcc": {"degree": 1}, "gcc": {"lambda_dec": "spacing"}}.get(name, {})
    n = K if name == "uncoded" else N
    code = torchgcc.make_code(name, num_inputs=K, num_workers=n, check=False, **options)
    y = torch.randn(3, n, 4, dtype=torch.float64)
    traced = torch.jit.trace(code.decoder, (y, random_masks(3, n, 1, seed=0)), check_trace=False)
    for seed in range(3):
        mask = random_masks(3, n, 3, seed=seed + 1)
        torch.testing.assert_close(traced(y, mask), code.decoder(y, mask), rtol=0, atol=1e-13, equal_nan=True)


def test_tracing_refuses_what_a_trace_would_freeze():
    y, mask = torch.randn(2, N, 3), random_masks(2, N, 1)
    with pytest.raises(ValueError, match="check=False"):
        torch.jit.trace(build("gcc", lambda_dec="spacing").decoder, (y, mask))
    with pytest.raises(ValueError, match="not calibrated yet.*Call the decoder once eagerly"):
        torch.jit.trace(build("gcc", check=False).decoder, (y, mask))
    robust = torchgcc.codes.RobustGCC(K, N, q=1, decoder="huber", check=False)
    with pytest.raises(ValueError, match="cannot record RobustSplineDecoder"):
        torch.jit.trace(robust.decoder, (y, mask))


def test_scripting_is_refused_with_what_works_instead(code):
    with pytest.raises(TypeError, match="torch.jit.script cannot compile Encoder.*use torch.compile"):
        torch.jit.script(code)


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ((3, "8"), TypeError, "num_workers must be an integer >= 1, got '8' \\(str\\); pass a number"),
        ((2.5, 8), ValueError, "num_inputs must be an integer >= 1, got 2.5"),
        ((float("nan"), -1), ValueError, "num_inputs must be an integer"),
        ((3, None), TypeError, "num_workers must be an integer"),
    ],
)
def test_sizes_that_are_not_integers_are_named(arguments, error, message):
    for make in (torchgcc.GCC, torchgcc.BACC, lambda k, n: torchgcc.codes.RobustGCC(k, n, q=1)):
        with pytest.raises(error, match=message):
            make(*arguments)


def test_robust_gcc_names_a_bad_q_only_for_a_good_code():
    with pytest.raises(TypeError, match="q must be an integer in \\[0, 7\\], got '1'"):
        torchgcc.codes.RobustGCC(3, 8, q="1")
    with pytest.raises(ValueError, match="c must be a finite number >= 0"):
        torchgcc.codes.RobustGCC(3, 8, q=1, c=float("nan"))


def test_every_submodule_is_an_attribute_of_the_package():
    import subprocess
    import sys

    script = "import torchgcc; print(torchgcc.codes.RobustGCC.__name__, torchgcc.stragglers.FixedStragglers.__name__)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["RobustGCC", "FixedStragglers"]
