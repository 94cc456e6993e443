"""Accuracy of coded computation against the uncoded model.

Functional forms take decoded outputs and the uncoded model's outputs (``reference``) of shape ``(M, *out)``; the
:class:`RelativeAccuracy` metric accumulates them over batches (torchmetrics).
"""

from __future__ import annotations

import torch
from torchmetrics import Metric

__all__ = ["mse", "argmax_agreement", "accuracy", "relative_accuracy", "RelativeAccuracy"]


def mse(decoded: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Mean squared error between decoded and uncoded outputs, over every element."""
    _check_same_shape(decoded, reference)
    return (decoded - reference).double().pow(2).mean()


def argmax_agreement(decoded: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """RelAcc: the fraction of samples whose decoded argmax equals the uncoded model's argmax; inputs ``(M, C)``."""
    _check_same_shape(decoded, reference)
    return (decoded.argmax(dim=-1) == reference.argmax(dim=-1)).double().mean()


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Top-1 accuracy of ``(M, C)`` logits against ``(M,)`` labels."""
    return (logits.argmax(dim=-1) == labels).double().mean()


def relative_accuracy(decoded: torch.Tensor, reference: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Accuracy of the decoded outputs divided by the uncoded model's accuracy, both against ``labels``."""
    _check_same_shape(decoded, reference)
    return accuracy(decoded, labels) / accuracy(reference, labels)


class RelativeAccuracy(Metric):
    """Accumulates argmax agreement with the uncoded model and, given labels, both accuracies.

    ``compute()`` returns ``{"relacc": agreement, "accuracy": ..., "reference_accuracy": ..., "relative_accuracy": ...}``
    (the label-based entries only when labels were given).
    """

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        for name in ("agree", "correct", "reference_correct", "total", "labelled"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, decoded: torch.Tensor, reference: torch.Tensor, labels: torch.Tensor | None = None) -> None:
        _check_same_shape(decoded, reference)
        predicted, expected = decoded.argmax(dim=-1), reference.argmax(dim=-1)
        self.agree += (predicted == expected).sum()
        self.total += predicted.numel()
        if labels is not None:
            self.correct += (predicted == labels).sum()
            self.reference_correct += (expected == labels).sum()
            self.labelled += labels.numel()

    def compute(self) -> dict[str, torch.Tensor]:
        out = {"relacc": self.agree.double() / self.total}
        if self.labelled:
            out["accuracy"] = self.correct.double() / self.labelled
            out["reference_accuracy"] = self.reference_correct.double() / self.labelled
            out["relative_accuracy"] = self.correct.double() / self.reference_correct
        return out


def _check_same_shape(decoded: torch.Tensor, reference: torch.Tensor) -> None:
    if decoded.shape != reference.shape:
        raise ValueError(f"decoded {tuple(decoded.shape)} and reference {tuple(reference.shape)} shapes differ")
