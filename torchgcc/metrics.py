"""How close coded computation comes to the uncoded model.

Functions (torch only) take decoded outputs and the uncoded model's outputs (``reference``) of shape ``(M, *out)``:

- :func:`mse`: mean squared error over every element,
- :func:`argmax_agreement`: the fraction of samples whose decoded argmax equals the uncoded argmax (called RelAcc in
  the GCC papers; records and logs call it ``agreement``),
- :func:`accuracy`: top-1 accuracy of ``(M, C)`` logits against ``(M,)`` labels.

:class:`CodedMetrics` accumulates them over batches and decodes (``update`` / ``compute``, as torchmetrics does) and
adds 95% confidence intervals over GROUPS of K samples coded together: every group draws its own straggler mask,
so groups are the independent units of coded inference. It is the one accumulator of the experiments, the recipes'
coded evaluation and the distributed job. :class:`ArgmaxAgreement` is a ``torchmetrics.Metric`` for training loops
(it needs the ``experiments`` extra and is imported on first use).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchgcc.checks import check_integer

__all__ = ["CodedMetrics", "Z95", "accuracy", "argmax_agreement", "mean_ci", "mse"]

#: Two-sided 95% normal quantile (the number of groups is in the tens or more).
Z95 = 1.959963984540054


def mse(decoded: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``mean((decoded - reference)^2)`` over every element, a float64 scalar tensor (differentiable).

    Integer and floating-point inputs of any precision are converted to float64 before they are subtracted, so
    int8 differences do not wrap and float16 ones do not overflow; bool and complex inputs raise ``TypeError``, empty
    ones ``ValueError`` (a mean over nothing).
    """
    _check_inputs(decoded, reference)
    if decoded.numel() == 0:
        raise ValueError(f"decoded and reference are empty (shape {tuple(decoded.shape)}): no error to average")
    return _squared_error(decoded, reference).mean()


def argmax_agreement(decoded: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The fraction of samples whose decoded argmax equals the uncoded argmax; inputs ``(M, C)`` real logits with
    ``M >= 1`` and ``C >= 1`` (else ``ValueError``), float64 scalar.

    >>> reference = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0], [0.0, 1.0]])
    >>> argmax_agreement(reference + torch.tensor([[0.0, 0.5], [0.0, 0.0], [0.0, 2.0], [0.0, 0.0]]), reference)
    tensor(0.7500, dtype=torch.float64)
    """
    _check_inputs(decoded, reference, classification=True)
    return (decoded.argmax(dim=-1) == reference.argmax(dim=-1)).double().mean()


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Top-1 accuracy of ``(M, C)`` logits (real, ``M, C >= 1``) against ``(M,)`` integer labels, a float64 scalar
    tensor; anything else raises a one-line ``TypeError`` / ``ValueError`` naming the argument."""
    _check_real("logits", logits)
    if not isinstance(labels, torch.Tensor):
        raise TypeError(
            f"labels must be a torch.Tensor, got {type(labels).__name__}; convert it with torch.as_tensor(...)"
        )
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(f"labels must be an integer tensor of class indices, got {labels.dtype}")
    if logits.ndim != 2 or 0 in logits.shape:
        raise ValueError(f"logits must be (M, C) with M >= 1 samples and C >= 1 classes, got {tuple(logits.shape)}")
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} need labels of shape {tuple(logits.shape[:-1])}, got {tuple(labels.shape)}"
        )
    return (logits.argmax(dim=-1) == labels).double().mean()


def mean_ci(values: torch.Tensor) -> tuple[float, float]:
    """Mean of ``values`` ``(n,)`` and the half-width ``Z95 * std / sqrt(n)`` of its 95% normal confidence interval
    (NaN when n < 2)."""
    values = values.double().flatten()
    mean = values.mean().item()
    if values.numel() < 2:
        return mean, math.nan
    return mean, Z95 * values.std().item() / math.sqrt(values.numel())


class CodedMetrics:
    """MSE, argmax agreement and (given labels) accuracy of decoded outputs, with 95% CIs over groups.

    ``update(decoded, reference, labels=None)`` takes one decode of ``M`` samples, ``(M, *out)`` each (``(M, C)``
    logits when ``classification``; real dtypes, squared errors taken in float64 as :func:`mse` does), whose
    consecutive runs of ``group_size`` (= K) samples were coded together (the last run may be shorter): the layout of
    :func:`torchgcc.coded_module.ungroup_samples`. Every call adds ``ceil(M / K)`` groups; call it once per straggler
    mask (repeat). ``compute()`` returns floats:

    ================================  ===============================================================================
    ``mse``, ``mse_ci``               squared error over all elements; half-width over per-group MSEs
    ``agreement``, ``agreement_ci``   argmax agreement with ``reference`` (``classification=True`` only)
    ``accuracy``, ``accuracy_ci``     top-1 accuracy of ``decoded`` against ``labels`` (when every update had labels)
    ``reference_accuracy``            top-1 accuracy of ``reference`` against ``labels`` (same condition)
    ``groups``, ``samples``           the number of CI units and of samples accumulated
    ================================  ===============================================================================

    Point values pool every sample (:func:`mse`, :func:`argmax_agreement`, :func:`accuracy` of the concatenated
    updates); half-widths are ``Z95 * std(per-group values) / sqrt(groups)`` (:func:`mean_ci`). ``merge(other)`` adds
    another accumulator's groups (e.g. gathered from other ranks); the state is a few float64 numbers per group.

    >>> metrics = CodedMetrics(group_size=2)
    >>> decoded = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    >>> metrics.update(decoded, torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]))
    >>> result = metrics.compute()
    >>> result["groups"], round(result["agreement"], 4), round(result["mse"], 4)
    (2, 0.6667, 0.3333)
    """

    _STATES = ("squared_error", "elements", "samples", "agree", "correct", "reference_correct")

    def __init__(self, group_size: int, *, classification: bool = True) -> None:
        self.group_size = check_integer("group_size (K, the inputs per group)", group_size, minimum=1)
        self.classification = classification
        self.reset()

    def reset(self) -> None:
        """Forget every update."""
        self._state: dict[str, list[torch.Tensor]] = {name: [] for name in self._STATES}
        self._updates = self._labelled = 0

    @torch.no_grad()
    def update(self, decoded: torch.Tensor, reference: torch.Tensor, labels: torch.Tensor | None = None) -> None:
        """Add the groups of one decode (see the class docstring)."""
        _check_inputs(decoded, reference, classification=self.classification)
        if decoded.dim() == 0 or len(decoded) == 0:
            raise ValueError(f"decoded must be (M, *out) with M >= 1, got shape {tuple(decoded.shape)}")
        if labels is not None and labels.shape != decoded.shape[:1]:
            raise ValueError(f"labels must be ({len(decoded)},), got {tuple(labels.shape)}")
        samples = len(decoded)
        group = torch.arange(samples, device=decoded.device) // self.group_size
        num_groups = int(group[-1]) + 1

        def per_group(values: torch.Tensor) -> torch.Tensor:
            sums = torch.zeros(num_groups, dtype=torch.float64, device=values.device)
            return sums.index_add_(0, group, values.double()).cpu()

        squared = _squared_error(decoded, reference).reshape(samples, -1).sum(dim=1)
        self._state["squared_error"].append(per_group(squared))
        self._state["elements"].append(per_group(torch.full_like(squared, decoded[0].numel())))
        self._state["samples"].append(per_group(torch.ones_like(squared)))
        if self.classification:
            predicted = decoded.argmax(dim=-1)
            self._state["agree"].append(per_group(predicted == reference.argmax(dim=-1)))
            if labels is not None:
                self._state["correct"].append(per_group(predicted == labels))
                self._state["reference_correct"].append(per_group(reference.argmax(dim=-1) == labels))
        self._updates += 1
        self._labelled += labels is not None

    def merge(self, other: "CodedMetrics") -> "CodedMetrics":
        """Add ``other``'s groups to this accumulator (same ``group_size`` and ``classification``); returns self."""
        if (other.group_size, other.classification) != (self.group_size, self.classification):
            raise ValueError("merge needs accumulators with the same group_size and classification")
        for name in self._STATES:
            self._state[name] += other._state[name]
        self._updates += other._updates
        self._labelled += other._labelled
        return self

    def compute(self) -> dict[str, Any]:
        """Point values and 95% half-widths (see the class docstring)."""
        if not self._updates:
            raise ValueError("CodedMetrics.compute() before any update()")
        if self._labelled not in (0, self._updates):
            raise ValueError(
                f"labels were given to {self._labelled} of {self._updates} updates: give them to all or none"
            )
        state = {name: torch.cat(values) for name, values in self._state.items() if values}
        samples = state["samples"]
        out: dict[str, Any] = {"groups": len(samples), "samples": int(samples.sum())}
        out["mse"] = (state["squared_error"].sum() / state["elements"].sum()).item()
        out["mse_ci"] = mean_ci(state["squared_error"] / state["elements"])[1]
        ratios = {"agreement": "agree", "accuracy": "correct", "reference_accuracy": "reference_correct"}
        for key, name in ratios.items():
            if name in state:
                out[key] = (state[name].sum() / samples.sum()).item()
                if key != "reference_accuracy":
                    out[f"{key}_ci"] = mean_ci(state[name] / samples)[1]
        return out


def _check_inputs(decoded: torch.Tensor, reference: torch.Tensor, *, classification: bool = False) -> None:
    """Raise unless ``decoded`` and ``reference`` are real (integer or floating-point) tensors of one shape, and
    ``(M, C)`` with ``M, C >= 1`` when ``classification`` (an argmax over ``C`` per sample)."""
    _check_real("decoded", decoded)
    _check_real("reference", reference)
    if decoded.shape != reference.shape:
        raise ValueError(f"decoded {tuple(decoded.shape)} and reference {tuple(reference.shape)} shapes differ")
    if classification and (decoded.ndim != 2 or 0 in decoded.shape):
        raise ValueError(
            f"decoded and reference must be (M, C) logits with M >= 1 samples and C >= 1 classes, "
            f"got shape {tuple(decoded.shape)}"
        )


def _check_real(name: str, value: object) -> None:
    """Raise a one-line ``TypeError`` naming ``name`` unless ``value`` is a real (integer or floating-point)
    tensor."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(value).__name__}; convert it with torch.as_tensor(...)"
        )
    if value.dtype == torch.bool or value.is_complex():
        raise TypeError(f"{name} must be a real (integer or floating-point) tensor, got {value.dtype}")


def _squared_error(decoded: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Elementwise ``(decoded - reference)^2`` in float64, converted BEFORE the subtraction (differentiable)."""
    return (decoded.double() - reference.double()).pow(2)


def _argmax_agreement_metric() -> type:
    """Build :class:`ArgmaxAgreement` (a ``torchmetrics.Metric``) on first use."""
    from torchgcc.optional import require

    metric_base: Any = require("torchmetrics").Metric

    class ArgmaxAgreement(metric_base):
        """torchmetrics ``Metric``: argmax agreement of decoded with uncoded outputs over batches and, given labels,
        both top-1 accuracies. ``compute()`` returns ``{"agreement"[, "accuracy", "reference_accuracy"]}``
        (float64 scalar tensors; the accuracies when labels were given)."""

        full_state_update = False

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            for name in ("agree", "correct", "reference_correct", "total", "labelled"):
                self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

        def update(self, decoded: torch.Tensor, reference: torch.Tensor, labels: torch.Tensor | None = None) -> None:
            _check_inputs(decoded, reference)
            predicted, expected = decoded.argmax(dim=-1), reference.argmax(dim=-1)
            self.agree += (predicted == expected).sum()
            self.total += predicted.numel()
            if labels is not None:
                self.correct += (predicted == labels).sum()
                self.reference_correct += (expected == labels).sum()
                self.labelled += labels.numel()

        def compute(self) -> dict[str, torch.Tensor]:
            out = {"agreement": self.agree.double() / self.total}
            if self.labelled:
                out["accuracy"] = self.correct.double() / self.labelled
                out["reference_accuracy"] = self.reference_correct.double() / self.labelled
            return out

    ArgmaxAgreement.__module__ = __name__
    return ArgmaxAgreement


def __getattr__(name: str) -> Any:
    if name == "ArgmaxAgreement":
        globals()[name] = _argmax_agreement_metric()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
