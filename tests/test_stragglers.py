import math

import pytest
import torch
from helpers import requires_cuda

from torchgcc.points import chebyshev_second_kind, equispaced
from torchgcc.stragglers import (
    LATENCY_MODELS,
    BernoulliStragglers,
    Bimodal,
    Exponential,
    FixedStragglers,
    LatencyStragglers,
    Pareto,
    PersistentSlow,
    ShiftedExponential,
    TailChange,
    TraceReplay,
    make_latency_model,
)


@pytest.mark.parametrize("placement", ["random", "contiguous", "widest_gap"])
def test_fixed_stragglers_drop_exactly_s_workers(placement):
    mask = FixedStragglers(5, placement, seed=0).sample(100, 20)
    assert mask.shape == (100, 20) and mask.dtype == torch.bool
    assert torch.all(mask.sum(1) == 15)


def test_contiguous_blocks_are_contiguous_and_move():
    mask = FixedStragglers(4, "contiguous", seed=1).sample(200, 16)
    stragglers = (~mask).nonzero()[:, 1].view(200, 4)
    assert torch.all(stragglers.diff(dim=1) == 1)
    assert len(stragglers[:, 0].unique()) > 5


def test_random_placement_is_uniform_over_workers():
    mask = FixedStragglers(3, seed=2).sample(20000, 12)
    frequency = (~mask).double().mean(0)
    assert torch.allclose(frequency, torch.full((12,), 0.25, dtype=torch.float64), atol=0.02)


@pytest.mark.parametrize("points", ["chebyshev2", "equispaced"])
@pytest.mark.parametrize("n, s", [(10, 3), (17, 4), (40, 10)])
def test_widest_gap_placement_leaves_the_largest_gap_by_brute_force(points, n, s):
    beta = chebyshev_second_kind(n) if points == "chebyshev2" else equispaced(n)
    mask = FixedStragglers(s, "widest_gap", points=points).sample(3, n)
    assert torch.equal(mask[0], mask[1])  # deterministic

    def gap(m):
        survivors = torch.cat(
            [torch.tensor([-1.0], dtype=torch.float64), beta[m], torch.tensor([1.0], dtype=torch.float64)]
        )
        return survivors.diff().max().item()

    best = max(gap((torch.arange(n) < i) | (torch.arange(n) >= i + s)) for i in range(n - s + 1))
    assert math.isclose(gap(mask[0]), best, rel_tol=1e-12)


def test_seeds_make_draws_reproducible():
    a = FixedStragglers(3, seed=7).sample(5, 10)
    b = FixedStragglers(3, seed=7).sample(5, 10)
    c = FixedStragglers(3, seed=8).sample(5, 10)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_fixed_stragglers_validate():
    with pytest.raises(ValueError, match="placement"):
        FixedStragglers(1, "diagonal")
    with pytest.raises(ValueError, match="no worker"):
        FixedStragglers(5).sample(1, 5)


def test_bernoulli_rate_and_min_arrived():
    mask = BernoulliStragglers(0.3, seed=0).sample(5000, 20)
    assert abs((~mask).double().mean().item() - 0.3) < 0.01
    constrained = BernoulliStragglers(0.9, min_arrived=3, seed=0).sample(500, 8)
    assert torch.all(constrained.sum(1) >= 3)
    with pytest.raises(ValueError):
        BernoulliStragglers(1.0)


@pytest.mark.parametrize(
    "model, mean",
    [
        (ShiftedExponential(shift=1.0, scale=0.5), 1.5),
        (Pareto(scale=1.0, tail_index=3.0), 1.5),
        (Bimodal(fast=1.0, slow=5.0, p_slow=0.1, jitter=0.05), 1.4),
    ],
)
def test_latency_models_have_their_closed_form_means(model, mean):
    samples = model.sample((200000,), torch.Generator().manual_seed(0))
    assert samples.dtype == torch.float64
    assert abs(samples.mean().item() - mean) < 0.02 * mean


def test_latency_stragglers_wait_for_the_fastest_n_minus_s():
    model = LatencyStragglers("shifted_exponential", num_stragglers=2, seed=0)
    delays = torch.tensor([[3.0, 1.0, 2.0, 5.0, 4.0], [1.0, 1.5, 9.0, 8.0, 1.2]], dtype=torch.float64)
    mask, latency = model.mask_from_delays(delays)
    assert mask.tolist() == [[True, True, True, False, False], [True, True, False, False, True]]
    assert latency.tolist() == [3.0, 1.5]


def test_latency_stragglers_deadline_caps_the_step():
    model = LatencyStragglers("pareto", num_stragglers=1, deadline=2.5, seed=0)
    delays = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    mask, latency = model.mask_from_delays(delays)
    assert mask.tolist() == [[True, True, False, False]] and latency.item() == 2.5
    mask, latency = model.sample_with_latency(1000, 8)
    assert torch.all(latency <= 2.5) and mask.shape == (1000, 8)
    assert model.sample(3, 8).shape == (3, 8)


def test_make_latency_model_by_name():
    assert isinstance(make_latency_model("bimodal", slow=3.0), Bimodal)
    with pytest.raises(ValueError, match="unknown latency model"):
        make_latency_model("weibull")
    with pytest.raises(ValueError, match="positive"):
        ShiftedExponential(shift=-1.0)


def test_samplers_draw_the_same_masks_when_asked_for_the_cpu():
    for make in (
        lambda: FixedStragglers(3, seed=4),
        lambda: FixedStragglers(3, "contiguous", seed=4),
        lambda: BernoulliStragglers(0.3, min_arrived=2, seed=4),
        lambda: LatencyStragglers(num_stragglers=3, seed=4),
    ):
        assert torch.equal(make().sample(6, 10, device="cpu"), make().sample(6, 10))
        sampler = make()
        assert sampler.generator_for(None) is sampler.generator is sampler.generator_for(torch.device("cpu"))


def test_no_stragglers_need_no_points_whatever_the_placement():
    """widest_gap used to place points for a valid call with S = 0 and fail on N = 1."""
    for placement in ("random", "contiguous", "widest_gap"):
        assert FixedStragglers(0, placement).sample(3, 1).all()


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: BernoulliStragglers("0.1"), TypeError, "p must be a finite number in \\[0, 1\\), got '0.1'"),
        (lambda: BernoulliStragglers(1.0), ValueError, "p must be a finite number in \\[0, 1\\), got 1.0"),
        (lambda: BernoulliStragglers(0.1, min_arrived="2"), TypeError, "min_arrived must be an integer"),
        (lambda: FixedStragglers("2"), TypeError, "num_stragglers must be an integer >= 0, got '2'"),
        (lambda: FixedStragglers(1, seed="0"), TypeError, "seed must be an integer"),
        (
            lambda: FixedStragglers(1, seed=2**70),
            ValueError,
            "^seed must be an integer in .*, got 1180591620717411303424",
        ),
        (lambda: BernoulliStragglers(0.1, seed=-(2**63) - 1), ValueError, "^seed must be an integer in \\[-9223372036"),
        (lambda: LatencyStragglers(seed=1.5), ValueError, "^seed must be an integer in .*, got 1.5"),
        (lambda: FixedStragglers(1, seed=0).sample(2, 4, device="meta"), ValueError, "^device='meta' holds no values"),
        (lambda: TraceReplay([[1.0, 2.0]], start="1"), TypeError, "^start must be an integer >= 0, got '1'"),
        (lambda: TraceReplay([[1.0, 2.0]], start=1.5), ValueError, "^start must be an integer >= 0, got 1.5"),
        (lambda: TraceReplay([[1.0, 2.0]], start=-1), ValueError, "^start must be an integer >= 0, got -1"),
        (lambda: PersistentSlow(slow=1), TypeError, "^slow must be a sequence of worker indices, got 1 \\(int\\)"),
        (lambda: PersistentSlow(slow=(0, 1.5)), ValueError, "^slow \\(worker indices\\) must be an integer"),
        (
            lambda: PersistentSlow(slow=(-10, 1)).sample((2, 4), torch.Generator()),
            ValueError,
            "^slow \\(worker indices\\) \\[-10\\] out of range \\[-4, 4\\)",
        ),
        (lambda: FixedStragglers(1).sample("3", 8), TypeError, "num_groups must be an integer"),
        (lambda: LatencyStragglers(deadline="1"), TypeError, "deadline \\(seconds\\) must be a positive"),
        (lambda: LatencyStragglers(num_stragglers=1.5), ValueError, "num_stragglers must be an integer"),
    ],
)
def test_numbers_given_otherwise_are_named(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_seeds_across_the_whole_64_bit_range_are_taken():
    for seed in (-(2**63), 2**64 - 1):
        assert torch.equal(FixedStragglers(2, seed=seed).sample(3, 6), FixedStragglers(2, seed=seed).sample(3, 6))
    assert TraceReplay([[1.0], [2.0], [3.0]], start=4).sample((2, 1), torch.Generator()).flatten().tolist() == [2, 3]


def _every_latency_model():
    trace = TraceReplay([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    return [LATENCY_MODELS[name]() for name in LATENCY_MODELS.names() if name != "trace"] + [
        PersistentSlow(base=Exponential()),
        TailChange(change_at=0),
        trace,
    ]


def test_latency_models_draw_on_the_generators_device_not_the_default_device():
    """Exponential and PersistentSlow(base=None) drew on the default device: under ``torch.device('meta')`` their
    CPU generator gave meta tensors (on a GPU, a CUDA generator gave CPU delays or a raw device mismatch)."""
    generator = torch.Generator().manual_seed(0)
    for model in _every_latency_model():
        with torch.device("meta"):
            delays = model.sample((2, 3), generator)
        assert delays.device == generator.device and delays.dtype == torch.float64, model
        assert torch.isfinite(delays).all() and (delays >= 0).all(), model


@requires_cuda
def test_latency_models_draw_on_the_cuda_generators_device():
    for model in _every_latency_model():
        delays = LatencyStragglers(model, seed=0).sample_delays(2, 3, device="cuda")
        assert delays.device.type == "cuda" and delays.dtype == torch.float64, model


@pytest.mark.parametrize(
    "delays, error, message",
    [
        ([[1.0, 2.0]], TypeError, "^delays must be a torch.Tensor of shape \\(B, N\\).*got list.*torch.as_tensor"),
        (torch.tensor(1.0), ValueError, "^delays must have shape \\(B, N\\), got \\(\\)$"),
        (torch.tensor([1.0, 2.0, 3.0]), ValueError, "^delays must have shape \\(B, N\\), got \\(3,\\); .*unsqueeze"),
        (torch.ones(2, 3, 1), ValueError, "^delays must have shape \\(B, N\\), got \\(2, 3, 1\\)$"),
        (torch.ones(2, 3, dtype=torch.complex64), TypeError, "^delays must be floating point .*complex64"),
        (torch.ones(2, 3, dtype=torch.long), TypeError, "^delays must be floating point .*int64"),
        (torch.tensor([[1.0, float("nan"), 2.0]]), ValueError, "^delays must not be NaN"),
    ],
)
def test_mask_from_delays_names_bad_delays(delays, error, message):
    with pytest.raises(error, match=message):
        LatencyStragglers(num_stragglers=1).mask_from_delays(delays)


def test_mask_from_delays_keeps_empty_batches_and_never_arriving_workers():
    model = LatencyStragglers(num_stragglers=1, deadline=10.0)
    mask, latency = model.mask_from_delays(torch.tensor([[1.0, float("inf"), 3.0]]))
    assert mask.tolist() == [[True, False, True]] and latency.tolist() == [3.0]
    mask, latency = model.mask_from_delays(torch.zeros(0, 3))
    assert mask.shape == (0, 3) and latency.shape == (0,)
    assert model.sample(0, 3).shape == (0, 3)
