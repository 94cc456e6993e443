import math
import re

import pytest
import torch
from helpers import profiled, random_masks
from torch import nn

import torchgcc
from torchgcc.coded_module import group_samples, ungroup_samples
from torchgcc.noise import GaussianNoise
from torchgcc.stragglers import FixedStragglers
from torchgcc.workers import VirtualWorkers


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 5))


def test_group_and_ungroup_pad_by_repeating_the_last_sample():
    x = torch.arange(7.0).reshape(7, 1)
    groups = group_samples(x, 3)
    assert groups.shape == (3, 3, 1)
    assert groups[-1, :, 0].tolist() == [6.0, 6.0, 6.0]
    assert torch.equal(ungroup_samples(groups, 7), x)


def test_forward_equals_encode_model_decode_by_hand():
    model, code = small_model(), torchgcc.GCC(num_inputs=4, num_workers=10)
    coded = torchgcc.CodedModule(model, code)
    x = torch.randn(10, 3, 4)
    mask = random_masks(3, 10, 2, seed=0)
    out = coded(x, mask=mask)
    groups = group_samples(x, 4)
    by_hand = code.decoder(model(code.encoder(groups).reshape(30, 3, 4)).reshape(3, 10, 5), mask)
    torch.testing.assert_close(out, by_hand.reshape(12, 5)[:10])
    assert coded.last_mask is mask


def test_straggler_model_draws_a_mask_per_forward():
    coded = torchgcc.CodedModule(small_model(), torchgcc.GCC(num_inputs=4, num_workers=10), FixedStragglers(3, seed=1))
    x = torch.randn(8, 3, 4)
    coded(x)
    first = coded.last_mask.clone()
    coded(x)
    assert first.shape == (2, 10) and torch.all(first.sum(1) == 7)
    assert not torch.equal(first, coded.last_mask)


def test_no_stragglers_and_exact_code_reproduce_a_linear_model():
    torch.manual_seed(0)
    model = nn.Linear(6, 3).double()
    coded = torchgcc.CodedModule(model, torchgcc.LCC(num_inputs=3, num_workers=8, degree=1))
    x = torch.randn(7, 6, dtype=torch.float64)
    torch.testing.assert_close(coded(x), model(x))


def test_chunking_does_not_change_the_result():
    model, code = small_model(), torchgcc.BACC(num_inputs=4, num_workers=10)
    x, mask = torch.randn(9, 3, 4), random_masks(3, 10, 3, seed=2)
    torch.testing.assert_close(
        torchgcc.CodedModule(model, code, chunk_size=7)(x, mask=mask), torchgcc.CodedModule(model, code)(x, mask=mask)
    )


def test_gradients_reach_the_model_and_the_inputs():
    model = small_model()
    coded = torchgcc.CodedModule(model, torchgcc.GCC(num_inputs=4, num_workers=10), FixedStragglers(2, seed=3)).train()
    x = torch.randn(8, 3, 4, requires_grad=True)
    coded(x).pow(2).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_wrong_mask_shape_is_a_clear_error():
    coded = torchgcc.CodedModule(small_model(), torchgcc.GCC(num_inputs=4, num_workers=10))
    with pytest.raises(ValueError, match=r"\(B, N\) = \(2, 10\)"):
        coded(torch.randn(8, 3, 4), mask=torch.ones(3, 10, dtype=torch.bool))


class TwoHeads(nn.Module):
    """A model returning several outputs, in the container ``kind``."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.body = kind, small_model()

    def forward(self, x):
        logits = self.body(x)
        features = logits.tanh()[:, :2]
        if self.kind == "dict":
            return {"logits": logits, "features": features}
        return (logits, features) if self.kind == "tuple" else [logits, features]


@pytest.mark.parametrize("kind", ["tuple", "list", "dict"])
@pytest.mark.parametrize("chunk_size", [None, 7])
def test_container_outputs_are_each_decoded_like_a_tensor_output(kind, chunk_size):
    model, code = TwoHeads(kind), torchgcc.GCC(num_inputs=4, num_workers=10, lambda_dec="spacing")  # mask-only lambda
    x, mask = torch.randn(9, 3, 4), random_masks(3, 10, 3, seed=3)
    out = torchgcc.CodedModule(model, code, chunk_size=chunk_size)(x, mask=mask)
    logits = torchgcc.CodedModule(model.body, code)(x, mask=mask)
    features = torchgcc.CodedModule(nn.Sequential(model.body, nn.Tanh()), code)(x, mask=mask)
    assert type(out) is {"tuple": tuple, "list": list, "dict": dict}[kind]
    out = list(out.values()) if kind == "dict" else out  # the keys: test_dict_outputs_keep_their_keys
    torch.testing.assert_close(out[0], logits)
    # features are decoded from the workers' tanh(logits)[:, :2], not computed from the decoded logits
    torch.testing.assert_close(out[1], features[:, :2])
    assert not torch.allclose(out[1], logits.tanh()[:, :2], atol=1e-4)


def test_dict_outputs_keep_their_keys():
    model, code = TwoHeads("dict"), torchgcc.GCC(num_inputs=4, num_workers=10, lambda_dec="spacing")
    out = torchgcc.CodedModule(model, code)(torch.randn(9, 3, 4), mask=random_masks(3, 10, 3, seed=3))
    assert list(out) == ["logits", "features"]


class NonTensorOutput(nn.Module):
    def forward(self, x):
        return {"logits": x.flatten(1), "name": "head"}


def test_non_tensor_model_output_is_rejected_naming_the_key():
    with pytest.raises(TypeError, match=r"\['name'\] is a str"):
        torchgcc.CodedModule(NonTensorOutput(), torchgcc.GCC(2, 4))(torch.randn(4, 3))


def test_list_mask_and_numpy_input_raise_type_errors_with_the_fix():
    coded = torchgcc.CodedModule(small_model(), torchgcc.GCC(num_inputs=4, num_workers=10))
    with pytest.raises(TypeError, match=r"mask must be a bool torch.Tensor.*torch.as_tensor"):
        coded(torch.randn(4, 3, 4), mask=[[True] * 10])
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor.*ndarray"):
        coded(torch.randn(4, 3, 4).numpy())
    with pytest.raises(ValueError, match="non-empty batch"):
        coded(torch.randn(0, 3, 4))


def test_train_mode_batchnorm_warns_once():
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.BatchNorm1d(5))
    # a fixed smoothing: the default would also warn that it calibrates on two groups, not the warning tested here
    coded = torchgcc.CodedModule(model, torchgcc.GCC(num_inputs=4, num_workers=10, lambda_dec="spacing"))
    with pytest.warns(UserWarning, match="BatchNorm"):
        coded(torch.randn(8, 3, 4))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        coded(torch.randn(8, 3, 4))  # once per module
        model.eval()
        eval_mode = torchgcc.CodedModule(model, torchgcc.GCC(num_inputs=4, num_workers=10, lambda_dec="spacing"))
        eval_mode(torch.randn(8, 3, 4))  # eval: silent


LINEAR = torch.nn.Linear(3, 2)


@pytest.mark.parametrize(
    ("model", "x", "options", "error", "names"),
    [
        (lambda x: x.sum(), torch.randn(8, 3), {}, ValueError, "model output has shape ()"),
        (lambda x: (), torch.randn(8, 3), {}, ValueError, "empty tuple"),
        (lambda x: {}, torch.randn(8, 3), {}, ValueError, "empty dict"),
        (lambda x: x[:3], torch.randn(8, 3), {}, ValueError, "one output row per input row"),
        (lambda x: x.argmax(-1), torch.randn(8, 3), {}, TypeError, "floating-point outputs only"),
        (LINEAR, torch.tensor(1.0), {}, ValueError, "x must be a non-empty batch"),
        (LINEAR, torch.zeros(0, 3), {}, ValueError, "x must be a non-empty batch"),
        (LINEAR, torch.ones(8, 3, dtype=torch.long), {}, TypeError, "x must be floating point"),
        (LINEAR, torch.randn(8, 3), {"chunk_size": 2.5}, ValueError, "chunk_size"),
        (LINEAR, torch.randn(8, 3), {"chunk_size": True}, ValueError, "chunk_size"),
        (LINEAR, torch.randn(8, 3), {"chunk_size": 0}, ValueError, "chunk_size"),
        (LINEAR, torch.randn(3), {}, ValueError, "got a 1-D x of shape (3,): pass x.unsqueeze(0) for one sample"),
    ],
)
def test_bad_outputs_inputs_and_options_are_one_clear_error(model, x, options, error, names):
    """Every bad model output, input or option raises one error naming it, never a raw torch error."""
    with pytest.raises(error, match=re.escape(names)):
        torchgcc.CodedModule(model, torchgcc.GCC(4, 8), **options)(x)


def test_one_value_per_sample_and_meta_tensors_keep_their_shapes():
    """A model with one output per sample ``(B N,)`` decodes to ``(M,)``; meta tensors (shape inference) give meta
    outputs of the right shape without computing."""
    code, x = torchgcc.GCC(4, 8, lambda_dec="spacing"), torch.randn(6, 3)
    out = torchgcc.CodedModule(lambda x: x.sum(-1), code)(x)
    by_hand = code.decoder(code.encoder(group_samples(x, 4)).sum(-1), torch.ones(2, 8, dtype=torch.bool))
    assert out.shape == (6,)
    torch.testing.assert_close(out, ungroup_samples(by_hand, 6))
    meta = torchgcc.CodedModule(torch.nn.Linear(3, 2).to("meta"), torchgcc.GCC(4, 8))(torch.randn(6, 3, device="meta"))
    assert meta.device.type == "meta" and meta.shape == (6, 2)


def test_lcc_decode_matrix_refuses_below_the_recovery_threshold_like_the_decoder():
    code = torchgcc.LCC(4, 8, degree=1)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[:, :2] = True
    with pytest.raises(ValueError, match="needs at least 4"):
        code.decoder(torch.randn(2, 8, 3), mask)
    with pytest.raises(ValueError, match="needs at least 4"):
        code.decoder.decode_matrix(mask)
    with pytest.raises(TypeError, match="bool torch.Tensor"):
        code.decoder.decode_matrix(mask.tolist())
    assert torch.isnan(code.decoder.decode_matrix(mask, check=False)).all()  # unchecked: NaN, never a wrong matrix


class ChangingModel:
    """A model whose output differs from call to call in one way (a dict's key order, a tuple's length, a shape)."""

    def __init__(self, change: str) -> None:
        self.change, self.calls = change, 0

    def __call__(self, t: torch.Tensor):
        self.calls += 1
        odd = self.calls % 2 == 1
        if self.change == "key_order":
            return {"a": t, "b": 3 * t} if odd else {"b": 3 * t, "a": t}
        if self.change == "length":
            return (t, 2 * t) if odd else (t,)
        if self.change == "keys":
            return {"a": t} if odd else {"c": t}
        if self.change == "container":
            return (t,) if odd else [t]
        if self.change == "shape":
            return t if odd else t[:, :2]
        return t if odd else t.float()  # "dtype"


def test_chunks_are_joined_by_key_whatever_a_dicts_order():
    """The chunks used to be joined by position: a dict whose key order changed got its values swapped."""
    code, x = torchgcc.GCC(2, 4, lambda_dec=0.0), torch.randn(4, 3, dtype=torch.float64)
    out = torchgcc.CodedModule(ChangingModel("key_order"), code, chunk_size=3)(x)
    expected = torchgcc.CodedModule(lambda t: {"a": t, "b": 3 * t}, code)(x)
    assert list(out) == ["a", "b"]
    for key in "ab":
        torch.testing.assert_close(out[key], expected[key], rtol=0, atol=0)


@pytest.mark.parametrize(
    "change, message",
    [
        ("length", "chunk 0 returned a tuple of 2, chunk 1 a tuple of 1"),
        ("keys", "chunk 0 returned a dict with keys ['a'], chunk 1 a dict with keys ['c']"),
        ("container", "chunk 0 returned a tuple of 1, chunk 1 a list of 1"),
        ("shape", "chunk 0 gave torch.float64 rows of shape (3,), chunk 1 torch.float64 rows of shape (2,)"),
        ("dtype", "chunk 0 gave torch.float64 rows of shape (3,), chunk 1 torch.float32 rows of shape (3,)"),
    ],
)
def test_an_output_that_changes_structure_between_chunks_is_refused(change, message):
    """A tuple that lost an entry used to be truncated silently."""
    x = torch.randn(4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=re.escape(message)):
        torchgcc.CodedModule(ChangingModel(change), torchgcc.GCC(2, 4), chunk_size=3)(x)


@pytest.mark.parametrize("sigma", [None, 3e-2])
def test_calibrate_makes_the_choice_of_a_first_forward_on_the_same_samples(sigma):
    def coded_module() -> torchgcc.CodedModule:
        noise = None if sigma is None else GaussianNoise(sigma, seed=5)
        return torchgcc.CodedModule(small_model(), torchgcc.GCC(num_inputs=4, num_workers=10), noise=noise)

    x, mask = torch.randn(64, 3, 4, generator=torch.Generator().manual_seed(1)), random_masks(16, 10, 3, seed=4)
    calibrated, first = coded_module(), coded_module()
    first.validate_calibration = False  # GCV's choice alone, as calibrate(validate=False) makes it
    ratio = calibrated.calibrate(x, mask, validate=False)
    first(x, mask=mask)
    assert calibrated.code.decoder.calibrated and float(ratio) == float(first.code.decoder.ratio)
    # the decoder's own calibration on the coded results, by hand: the same choice
    by_hand = coded_module()
    with torch.no_grad():
        results = by_hand.model(by_hand.code.encoder(group_samples(x, 4)).reshape(160, 3, 4)).reshape(16, 10, 5)
    if sigma is not None:
        results = by_hand.noise(torch.where(mask.unsqueeze(-1), results, 0.0), mask)
    assert float(by_hand.code.decoder.calibrate(results, mask)) == float(ratio)
    # later forwards decode with the kept choice (a new batch does not choose again)
    torch.testing.assert_close(calibrated(x[:8], mask=mask[:2]), first(x[:8], mask=mask[:2]))
    if sigma is not None:  # the noise reached the choice: more smoothing than the exact results get
        exact = torchgcc.CodedModule(small_model(), torchgcc.GCC(num_inputs=4, num_workers=10))
        assert float(ratio) > float(exact.calibrate(x, mask, validate=False))


@pytest.mark.parametrize(("sigma", "stragglers"), [(1e-1, 3), (3e-1, 5)])
def test_calibrate_validates_against_the_models_outputs_on_the_samples_themselves(sigma, stragglers):
    """``validate=True`` (the default): the decoder's calibration with the model's uncoded outputs on the grouped
    samples as the reference, on every worker's result after the noise reached them (not the reference). Noisy
    enough that the validation moves GCV's choice here, so a wrong reference would show."""

    def coded_module() -> torchgcc.CodedModule:  # each its own seeded noise
        return torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10), noise=GaussianNoise(sigma, seed=5))

    coded, by_hand = coded_module(), coded_module()
    x, mask = (
        torch.randn(64, 3, 4, generator=torch.Generator().manual_seed(1)),
        random_masks(16, 10, stragglers, seed=4),
    )
    ratio = coded.calibrate(x, mask)
    assert float(ratio) != float(coded_module().calibrate(x, mask, validate=False))
    with torch.no_grad():
        results = by_hand.model(by_hand.code.encoder(group_samples(x, 4)).reshape(160, 3, 4)).reshape(16, 10, 5)
        outputs = by_hand.model(x).reshape(16, 4, 5)
    results = by_hand.noise(results, torch.ones_like(mask))  # every result: validation draws other straggler sets
    assert float(by_hand.code.decoder.calibrate(results, mask, reference=outputs)) == float(ratio)


class CountingModel(nn.Module):
    """``small_model()`` that counts the samples it is run on."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.samples = small_model(), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.samples += x.shape[0]
        return self.inner(x)


@pytest.mark.parametrize("groups", [16, 40])
def test_a_first_forward_validates_on_the_groups_its_choice_reads(groups):
    """The default first forward: the model also runs on the coded inputs and the samples of the pooled groups (all
    16 of a batch of 16; 16 evenly spaced ones of 40), and the choice is ``calibrate`` on every worker's result of
    those groups under their masks. Noisy enough that validation moves GCV's choice, so validating on other samples,
    or not at all, would show."""
    k, n = 4, 10
    x = torch.randn(groups * k, 3, 4, generator=torch.Generator().manual_seed(1))
    mask = random_masks(groups, n, 3, seed=4)
    model = CountingModel()
    first = torchgcc.CodedModule(model, torchgcc.GCC(k, n), noise=GaussianNoise(1e-1, seed=5))
    first(x, mask=mask)
    pooled = torch.linspace(0, groups - 1, 16).round().long()
    torch.testing.assert_close(first.code.decoder.pooled_index(groups), pooled, rtol=0, atol=0)
    # the coded inputs, then once each the pooled groups' coded inputs and samples
    assert model.samples == groups * n + 16 * n + 16 * k
    samples = x.reshape(groups, k, 3, 4)[pooled].reshape(16 * k, 3, 4)
    # one seeded noise stream: first the batch's arrived results, then every result of the pooled groups
    noise = GaussianNoise(1e-1, seed=5)
    by_hand = torchgcc.CodedModule(small_model(), torchgcc.GCC(k, n))
    with torch.no_grad():
        results = small_model()(first.code.encoder(group_samples(x, k)).reshape(groups * n, 3, 4)).reshape(groups, n, 5)
        arrived = noise(torch.where(mask.unsqueeze(-1), results, 0.0), mask)
        every = noise(results[pooled], torch.ones_like(mask[pooled]))
        outputs = small_model()(samples).reshape(16, k, 5)
    validated = by_hand.code.decoder.calibrate(every, mask[pooled], reference=outputs)
    assert float(first.code.decoder.ratio) == float(validated)
    gcv_alone = torchgcc.GCC(k, n).decoder.calibrate(arrived[pooled], mask[pooled])
    assert float(validated) != float(gcv_alone)
    model.samples = 0
    first(x[:8], mask=mask[:2])  # calibrated: later forwards run the coded inputs only
    assert model.samples == 2 * n


def test_a_compiled_first_forward_validates_as_an_eager_one():
    """Under torch.compile (Dynamo, the eager backend: no code generation) the validation runs eagerly behind a
    graph break and makes the eager choice."""
    x, mask = torch.randn(64, 3, 4, generator=torch.Generator().manual_seed(1)), random_masks(16, 10, 3, seed=4)

    def coded_module() -> torchgcc.CodedModule:
        return torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10), noise=GaussianNoise(1e-1, seed=5))

    eager, compiled = coded_module(), coded_module()
    eager(x, mask=mask)
    with torch.no_grad():
        torch.compile(compiled, backend="eager")(x, mask=mask)
    assert compiled.code.decoder.calibrated and float(compiled.code.decoder.ratio) == float(eager.code.decoder.ratio)
    assert float(eager.code.decoder.ratio) != float(coded_module().calibrate(x, mask, validate=False))


def test_a_validated_first_forward_refuses_nothing_the_decoder_alone_would_decode():
    """With ``check=False`` a group too short to decode gives NaN estimates and results may be non-finite: the
    validated calibration leaves such groups (and a batch of nothing else) to the decoder's own first call instead
    of raising where the decoder would not."""
    x = torch.randn(64, 3, 4, generator=torch.Generator().manual_seed(1))
    mask = random_masks(16, 10, 3, seed=4)
    mask[5] = False
    mask[5, 0] = True  # one arrived result: too few
    coded = torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10, check=False), noise=GaussianNoise(1e-1, seed=5))
    out = coded(x, mask=mask)
    assert torch.isnan(out[20:24]).all() and torch.isfinite(torch.cat([out[:20], out[24:]])).all()
    # the 15 decodable groups validated the choice, as calibrate on them does
    keep = torch.arange(16) != 5
    by_hand = torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10), noise=GaussianNoise(1e-1, seed=5))
    noise = GaussianNoise(1e-1, seed=5)
    with torch.no_grad():
        results = small_model()(by_hand.code.encoder(group_samples(x, 4)).reshape(160, 3, 4)).reshape(16, 10, 5)
        noise(torch.where(mask.unsqueeze(-1), results, 0.0), mask)  # the forward's draw, before the validation's
        every = noise(results[keep], torch.ones_like(mask[keep]))
        outputs = small_model()(x).reshape(16, 4, 5)
    expected = by_hand.code.decoder.calibrate(every, mask[keep], reference=outputs[keep])
    assert float(coded.code.decoder.ratio) == float(expected)
    infinite = torchgcc.CodedModule(lambda t: torch.full((len(t), 2), math.inf), torchgcc.GCC(4, 10, check=False))
    infinite(x, mask=random_masks(16, 10, 3, seed=4))  # the decoder alone decodes these without a read: no error
    assert infinite.code.decoder.calibrated


def test_validate_calibration_off_leaves_the_choice_to_gcv_and_is_checked():
    x, mask = torch.randn(64, 3, 4, generator=torch.Generator().manual_seed(1)), random_masks(16, 10, 3, seed=4)
    model = CountingModel()
    coded = torchgcc.CodedModule(model, torchgcc.GCC(4, 10), validate_calibration=False)
    coded(x, mask=mask)
    assert model.samples == 160
    assert float(coded.code.decoder.ratio) == float(
        torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10)).calibrate(x, mask, validate=False)
    )
    with pytest.raises(TypeError, match="validate_calibration must be True or False, got int"):
        torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10), validate_calibration=1)


def test_a_first_forward_that_fails_keeps_no_calibration_and_checks_the_mask_first():
    """The validated calibration runs before the decode: a decode that then raises (a Triton backend on CPU data)
    must leave the decoder uncalibrated, and a mask the decoder refuses is its clear error, not a raw one."""
    x = torch.randn(64, 3, 4, generator=torch.Generator().manual_seed(1))
    triton = torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10, backend="triton"))
    with pytest.raises(ValueError, match="backend='triton' runs on CUDA tensors"):
        triton(x)
    assert not triton.code.decoder.calibrated and math.isnan(float(triton.code.decoder.ratio))
    coded = torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10))
    with pytest.raises(ValueError, match="mask"):
        coded(x, mask=torch.ones(16, 10, dtype=torch.bool, device="meta"))
    assert not coded.code.decoder.calibrated


def test_calibrate_draws_its_mask_from_the_straggler_model_and_refuses_what_it_cannot_use():
    x = torch.randn(64, 3, 4, generator=torch.Generator().manual_seed(1))
    drawn = torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10), FixedStragglers(3, seed=2))
    given = torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10))
    assert float(drawn.calibrate(x)) == float(given.calibrate(x, FixedStragglers(3, seed=2).sample(16, 10)))
    # on workers too: the model runs here, so the choice is the in-process one
    workers = VirtualWorkers(small_model(), 10)
    on_workers = torchgcc.CodedModule(small_model(), torchgcc.GCC(4, 10), FixedStragglers(3, seed=2), workers=workers)
    assert float(on_workers.calibrate(x)) == float(drawn.code.decoder.ratio)
    with pytest.raises(TypeError, match=r"BACC's decoder \(BerrutDecoder\) does not calibrate"):
        torchgcc.CodedModule(small_model(), torchgcc.BACC(4, 10)).calibrate(x)
    with pytest.raises(TypeError, match=r"mask must be a bool torch.Tensor.*got a torch.float32 tensor"):
        given.calibrate(x, torch.ones(16, 10))
    with pytest.raises(ValueError, match=r"\(B, N\) = \(16, 10\) for 64 samples"):
        given.calibrate(x, torch.ones(15, 10, dtype=torch.bool))
    with pytest.warns(torchgcc.CalibrationWarning, match=r"coded.calibrate\(x\).*at least 64 samples"):
        given.calibrate(x[:8])


@pytest.mark.parametrize(
    "x, mask, error, names",
    [
        (torch.ones(64, 3, 4, dtype=torch.int64), None, TypeError, "x must be floating point"),
        (torch.randn(64, 3, 4, device="meta"), None, ValueError, "meta tensors"),
        (torch.full((64, 3, 4), float("nan")), None, ValueError, "non-finite result"),
        (torch.randn(64, 3, 4), torch.eye(16, 10, dtype=torch.bool), ValueError, "needs at least 2"),
    ],
)
def test_calibrate_refuses_samples_it_cannot_choose_from_without_calibrating(x, mask, error, names):
    coded = torchgcc.CodedModule(small_model().to(x.device), torchgcc.GCC(4, 10))
    with pytest.raises(error, match=names):
        coded.calibrate(x, mask)
    assert not coded.code.decoder.calibrated


@pytest.mark.parametrize("name", ["noise", "attack", "grouping"])
def test_a_noise_attack_or_grouping_that_is_not_callable_is_refused_at_construction(name):
    """CodedModule(noise=3) was accepted and failed at the first forward with "'int' object is not callable"."""
    with pytest.raises(TypeError, match=f"^{name} must be .* or None, got int"):
        torchgcc.CodedModule(nn.Linear(3, 2), torchgcc.GCC(2, 4), **{name: 3})


@pytest.mark.parametrize(
    ("grouping", "error"),
    [
        (lambda x: torch.zeros(len(x), dtype=torch.long), ValueError),  # sample 0 for every row
        (lambda x: torch.arange(len(x) - 3), ValueError),  # too short: fewer rows than samples
        (lambda x: torch.arange(len(x) + 1) % len(x), ValueError),  # too long
        (lambda x: torch.arange(len(x)) - 1, ValueError),  # -1 would wrap to the last sample
        (lambda x: torch.arange(len(x)) + 1, ValueError),  # M is out of range
        (lambda x: torch.arange(len(x)).reshape(-1, 1), ValueError),  # (M, 1)
        (lambda x: torch.arange(len(x)).float(), TypeError),
        (lambda x: torch.ones(len(x), dtype=torch.bool), TypeError),  # a mask, not indices
        (lambda x: list(range(len(x))), TypeError),
    ],
)
def test_a_grouping_that_does_not_return_a_permutation_is_refused_naming_it(grouping, error):
    """The docstring's promise, ``grouping(x) -> permutation (M,)``: anything else would reorder, repeat or drop
    samples silently (all zeros: sample 0's output on every row; too short: fewer rows than samples)."""
    with pytest.raises(error, match=r"grouping\(x\) must return a permutation"):
        torchgcc.CodedModule(LINEAR, torchgcc.GCC(4, 8, lambda_dec="spacing"), grouping=grouping)(torch.randn(10, 3))


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_a_grouping_permutation_gives_the_callers_order_and_one_more_read_only_with_check(dtype, check):
    """A permutation (int64 or int32) decodes as the module on the permuted samples, rows back in the caller's order.
    With ``check=True`` the permutation check costs one read from the device (besides the decoder's); with
    ``check=False`` the forward reads nothing and a grouping that is no permutation gives NaN outputs (as the decoder
    gives NaN for a mask it cannot decode) instead of other samples' outputs; meta tensors (no values) pass."""
    x, mask = torch.randn(10, 3), random_masks(3, 8, 2, seed=1)
    code = torchgcc.GCC(4, 8, lambda_dec="spacing", check=check)
    reverse = torch.arange(9, -1, -1, dtype=dtype)
    plain, grouped = torchgcc.CodedModule(LINEAR, code), torchgcc.CodedModule(LINEAR, code, grouping=lambda v: reverse)
    with torch.no_grad():
        torch.testing.assert_close(grouped(x, mask), plain(x.flip(0), mask).flip(0), rtol=0, atol=0)
        reads = profiled(lambda: grouped(x, mask))[1] - profiled(lambda: plain(x, mask))[1]
    assert reads == (1 if check else 0)
    if not check:
        for bad in (torch.zeros(10, dtype=torch.long), torch.arange(10) + 1, torch.arange(10) - 1):
            with torch.no_grad():
                out = torchgcc.CodedModule(LINEAR, code, grouping=lambda v, bad=bad: bad)(x, mask)
            assert out.shape == (10, 2) and out.isnan().all()
    meta_model = torch.nn.Linear(3, 2).to("meta")
    meta = torchgcc.CodedModule(meta_model, torchgcc.GCC(4, 8, check=check), grouping=lambda v: torch.argsort(v[:, 0]))
    assert meta(torch.randn(6, 3, device="meta")).shape == (6, 2)


class NanOnInputs(nn.Module):
    """``LINEAR`` (and, with ``two_dtypes``, a float64 copy of its output beside it), but the float32 output is NaN on
    the input rows equal to one of ``poisoned``'s (a worker's coded inputs)."""

    def __init__(self, poisoned: torch.Tensor, two_dtypes: bool) -> None:
        super().__init__()
        self.poisoned, self.two_dtypes = poisoned, two_dtypes

    def forward(self, z):
        y = LINEAR(z)
        hit = (z.unsqueeze(1) == self.poisoned.unsqueeze(0)).all(-1).any(1)
        bad = torch.where(hit.unsqueeze(-1), math.nan, y)
        return {"a": bad, "b": y.double()} if self.two_dtypes else bad


@pytest.mark.parametrize("two_dtypes", [False, True])
def test_nonfinite_straggle_reports_the_mask_the_decoder_used(two_dtypes):
    """With ``nonfinite="straggle"`` a NaN result is dropped by the decoder, and ``last_mask`` says so ("the results
    that were used"): the clean model decoded under the reported mask gives the same outputs (the reference), for every
    output (a worker with a NaN in one output dtype is dropped from all of them, one mask for the whole forward)."""
    code = torchgcc.GCC(4, 8, lambda_dec="spacing", nonfinite="straggle")
    x, mask = torch.randn(10, 3), random_masks(3, 8, 2, seed=2)
    mask[:, 1] = True
    coded_inputs = code.encoder(group_samples(x, 4))
    coded = torchgcc.CodedModule(NanOnInputs(coded_inputs[1, 1:2], two_dtypes), code)
    with torch.no_grad():
        out = coded(x, mask=mask)
        expected = mask.clone()
        expected[1, 1] = False  # worker 1's result in group 1 is NaN
        assert torch.equal(coded.last_mask, expected)
        clean = torchgcc.CodedModule(
            lambda z: {"a": LINEAR(z), "b": LINEAR(z).double()} if two_dtypes else LINEAR(z), code
        )
        reference = clean(x, mask=coded.last_mask)
    for got, want in zip(out.values(), reference.values()) if two_dtypes else [(out, reference)]:
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
