"""torchgcc.metrics against hand counts and independent numpy computations."""

import math

import numpy as np
import pytest
import torch

from torchgcc.metrics import Z95, CodedMetrics, accuracy, argmax_agreement, mean_ci, mse


def test_functions_by_hand():
    reference = torch.tensor([[2.0, 1.0], [0.0, 3.0], [5.0, 4.0], [1.0, 0.0]])
    decoded = torch.tensor([[1.5, 1.0], [1.0, 0.5], [3.0, 4.0], [2.0, 0.0]])
    labels = torch.tensor([0, 1, 1, 0])
    assert mse(decoded, reference).item() == pytest.approx((0.25 + 1 + 6.25 + 4 + 1) / 8)
    assert argmax_agreement(decoded, reference).item() == 0.5
    assert accuracy(reference, labels).item() == 0.75 and accuracy(decoded, labels).item() == 0.75
    with pytest.raises(ValueError, match="shapes differ"):
        mse(decoded, reference[:3])
    with pytest.raises(ValueError, match="labels of shape"):
        accuracy(decoded, labels[:3])


def test_coded_metrics_match_numpy_per_group():
    generator = torch.Generator().manual_seed(0)
    group_size, updates = 4, []
    metrics = CodedMetrics(group_size)
    for samples in (10, 7):  # partial last groups: 4 + 4 + 2 and 4 + 3
        reference = torch.randn(samples, 3, generator=generator)
        decoded = reference + 0.8 * torch.randn(samples, 3, generator=generator)
        labels = torch.randint(3, (samples,), generator=generator)
        metrics.update(decoded, reference, labels)
        updates.append((decoded.numpy(), reference.numpy(), labels.numpy()))
    result = metrics.compute()

    groups = [
        (d[i : i + group_size], r[i : i + group_size], y[i : i + group_size])
        for d, r, y in updates
        for i in range(0, len(d), group_size)
    ]
    half = lambda values: Z95 * np.std(values, ddof=1) / math.sqrt(len(values))  # noqa: E731
    all_d, all_r, all_y = (np.concatenate(part) for part in zip(*updates))
    assert result["groups"] == len(groups) == 5 and result["samples"] == 17
    assert result["mse"] == pytest.approx(np.mean((all_d - all_r) ** 2))
    assert result["mse_ci"] == pytest.approx(half([np.mean((d - r) ** 2) for d, r, _ in groups]))
    agree = lambda d, r: np.mean(d.argmax(1) == r.argmax(1))  # noqa: E731
    assert result["agreement"] == pytest.approx(agree(all_d, all_r))
    assert result["agreement_ci"] == pytest.approx(half([agree(d, r) for d, r, _ in groups]))
    assert result["accuracy"] == pytest.approx(np.mean(all_d.argmax(1) == all_y))
    assert result["accuracy_ci"] == pytest.approx(half([np.mean(d.argmax(1) == y) for d, _, y in groups]))
    assert result["reference_accuracy"] == pytest.approx(np.mean(all_r.argmax(1) == all_y))


def test_coded_metrics_merge_equals_one_accumulator_and_rejects_mixed_labels():
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(6, 5, generator=generator), torch.randn(6, 5, generator=generator)) for _ in range(3)]
    whole, left, right = CodedMetrics(3), CodedMetrics(3), CodedMetrics(3)
    for index, (decoded, reference) in enumerate(batches):
        whole.update(decoded, reference)
        (left if index < 2 else right).update(decoded, reference)
    assert left.merge(right).compute() == whole.compute()
    assert "accuracy" not in whole.compute()
    regression = CodedMetrics(3, classification=False)
    regression.update(*batches[0])
    assert set(regression.compute()) == {"groups", "samples", "mse", "mse_ci"}
    whole.update(*batches[0], labels=torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match="labels were given to 1 of 4"):
        whole.compute()
    with pytest.raises(ValueError, match="before any update"):
        CodedMetrics(3).compute()
    with pytest.raises(ValueError, match="group_size"):
        CodedMetrics(0)


def test_mean_ci_is_the_normal_interval():
    mean, half = mean_ci(torch.tensor([1.0, 2.0, 4.0, 7.0]))
    assert mean == pytest.approx(3.5) and half == pytest.approx(Z95 * np.std([1, 2, 4, 7], ddof=1) / 2)
    assert math.isnan(mean_ci(torch.tensor([1.0]))[1])


def test_argmax_agreement_torchmetrics_metric():
    from torchgcc.metrics import ArgmaxAgreement

    metric = ArgmaxAgreement()
    metric.update(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([0, 0]))
    metric.update(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 1.0]]), torch.tensor([0]))
    result = metric.compute()
    assert result["agreement"].item() == pytest.approx(2 / 3)
    assert result["accuracy"].item() == pytest.approx(1 / 3) and result["reference_accuracy"].item() == pytest.approx(
        2 / 3
    )


@pytest.mark.parametrize(
    "dtype, decoded, reference",
    [
        (torch.int8, [100, -128, 127], [-100, 127, -128]),  # int8 differences wrap modulo 256
        (torch.uint8, [1, 10, 0], [2, 0, 200]),
        (torch.int16, [30000, -30000], [-30000, 30000]),
        (torch.float16, [60000.0, -1.5], [-60000.0, 2.25]),  # the fp16 difference overflows at 65504
        (torch.bfloat16, [3.0e38, 1.0], [-3.0e38, 2.0]),
    ],
)
def test_mse_takes_the_difference_in_float64_whatever_the_input_dtype(dtype, decoded, reference):
    decoded, reference = torch.tensor(decoded, dtype=dtype), torch.tensor(reference, dtype=dtype)
    expected = np.mean((decoded.double().numpy() - reference.double().numpy()) ** 2)  # numpy float64
    value = mse(decoded, reference)
    assert value.dtype == torch.float64 and value.ndim == 0
    assert value.item() == pytest.approx(expected, rel=1e-12) and math.isfinite(value.item())
    metrics = CodedMetrics(2, classification=False)
    metrics.update(decoded.view(-1, 1), reference.view(-1, 1))
    assert metrics.compute()["mse"] == pytest.approx(expected, rel=1e-12)


def test_mse_of_half_precision_outputs_is_a_float64_loss_with_its_gradient():
    decoded = torch.tensor([60000.0, 1.0, 0.0, 0.0], dtype=torch.float16, requires_grad=True)
    reference = torch.tensor([-60000.0, 0.5, 0.0, 0.0], dtype=torch.float16)
    loss = mse(decoded, reference)
    assert loss.dtype == torch.float64 and loss.item() == pytest.approx((120000.0**2 + 0.25) / 4)
    loss.backward()
    # d/dx mean((x - r)^2) = 2 (x - r) / n, in float64 before it is cast back to the input's float16
    assert decoded.grad.dtype == torch.float16 and decoded.grad.tolist() == [60000.0, 0.25, 0.0, 0.0]


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
@pytest.mark.parametrize("bad", ["decoded", "reference"])
def test_metrics_refuse_bool_and_complex_naming_the_argument(dtype, bad):
    good = torch.ones(2, 3)
    wrong = torch.ones(2, 3, dtype=dtype)
    args = {"decoded": good, "reference": good, bad: wrong}
    for call in (mse, argmax_agreement, CodedMetrics(2).update):
        with pytest.raises(TypeError, match=f"^{bad} must be a real .*{str(dtype)[6:]}"):
            call(**args)
    with pytest.raises(TypeError, match=f"^{bad} must be a torch.Tensor, got list.*torch.as_tensor"):
        mse(**{**args, bad: [[1.0, 1.0, 1.0]] * 2})


@pytest.mark.parametrize("shape", [(3,), (), (3, 0), (0, 4), (2, 3, 4)])
def test_argmax_agreement_needs_m_by_c_logits(shape):
    x = torch.zeros(shape)
    with pytest.raises(ValueError, match="decoded and reference must be \\(M, C\\) logits"):
        argmax_agreement(x, x)
    with pytest.raises(ValueError, match="decoded and reference must be \\(M, C\\) logits"):
        CodedMetrics(2).update(x, x)


def test_group_size_takes_numpy_integers_and_refuses_bool():
    assert CodedMetrics(np.int64(2)).group_size == 2 and type(CodedMetrics(np.int64(2)).group_size) is int
    with pytest.raises(TypeError, match="^group_size .* got True"):
        CodedMetrics(True)
    with pytest.raises(ValueError, match="^group_size .* got 2.5"):
        CodedMetrics(2.5)


@pytest.mark.parametrize(
    ("logits", "labels", "error", "message"),
    [
        ([[1.0, 0.0]], torch.tensor([0]), TypeError, "^logits must be a torch.Tensor"),
        (torch.ones(2, 3, dtype=torch.bool), torch.tensor([0, 1]), TypeError, "^logits must be a real"),
        (torch.ones(2, 3), torch.tensor([0.0, 1.0]), TypeError, "^labels must be an integer tensor"),
        (torch.ones(2, 3), torch.tensor([True, False]), TypeError, "^labels must be an integer tensor"),
        (torch.ones(3), torch.tensor(0), ValueError, "^logits must be \\(M, C\\)"),
        (torch.ones(2, 0), torch.tensor([0, 1]), ValueError, "^logits must be \\(M, C\\)"),
        (torch.ones(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), ValueError, "^logits must be \\(M, C\\)"),
    ],
)
def test_accuracy_refuses_what_is_not_logits_and_class_indices(logits, labels, error, message):
    with pytest.raises(error, match=message):
        accuracy(logits, labels)


def test_accuracy_against_numpy_and_mse_of_nothing_is_refused():
    generator = torch.Generator().manual_seed(3)
    logits, labels = torch.randn(50, 7, generator=generator), torch.randint(0, 7, (50,), generator=generator)
    expected = np.mean(np.argmax(logits.numpy(), axis=1) == labels.numpy())
    assert accuracy(logits, labels).item() == expected and accuracy(logits, labels.int()).item() == expected
    with pytest.raises(ValueError, match="^decoded and reference are empty"):
        mse(torch.zeros(0, 3), torch.zeros(0, 3))
