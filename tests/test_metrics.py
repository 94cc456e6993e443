import torch
import torchmetrics

from torchgcc.metrics import RelativeAccuracy, accuracy, argmax_agreement, mse, relative_accuracy


def test_mse_matches_torchmetrics():
    a, b = torch.randn(50, 7), torch.randn(50, 7)
    torch.testing.assert_close(mse(a, b).float(), torchmetrics.functional.mean_squared_error(a, b))


def test_agreement_and_relative_accuracy_by_hand():
    reference = torch.tensor([[3.0, 1.0], [0.0, 2.0], [5.0, 4.0], [1.0, 0.0]])  # argmax 0, 1, 0, 0
    decoded = torch.tensor([[2.0, 1.0], [3.0, 2.0], [5.0, 6.0], [1.0, 0.0]])  # argmax 0, 0, 1, 0
    labels = torch.tensor([0, 1, 1, 0])
    assert argmax_agreement(decoded, reference).item() == 0.5
    assert accuracy(reference, labels).item() == 0.75 and accuracy(decoded, labels).item() == 0.75
    assert relative_accuracy(decoded, reference, labels).item() == 1.0

    metric = RelativeAccuracy()
    metric.update(decoded[:2], reference[:2], labels[:2])
    metric.update(decoded[2:], reference[2:], labels[2:])
    result = metric.compute()
    assert result["relacc"].item() == 0.5 and result["relative_accuracy"].item() == 1.0
    assert result["accuracy"].item() == 0.75 and result["reference_accuracy"].item() == 0.75
