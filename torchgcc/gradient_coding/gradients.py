"""What a gradient-coding worker computes, and how the coordinator combines and applies it.

A worker's coded gradient is ``f_i = sum_j B[i, j] grad loss_j(w)``. Gradients are linear in the loss weights, so
:func:`weighted_gradient` gets it with ONE forward and ONE backward pass over the worker's concatenated mini-batches
on ``L_i(w) = sum_j B[i, j] loss_j(w)`` (``loss_j`` the mean loss of partition ``j``'s mini-batch), instead of one
backward pass per partition plus a weighted sum. Models with batch statistics (BatchNorm) then normalise over the
concatenated batch, not per partition.

Flat vectors: every gradient and model travels as one float32 vector of all parameters in ``model.parameters()``
order (:func:`flat_parameters`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from torchgcc.checks import check_integer
from torchgcc.gradient_coding.codes import GradientCode
from torchgcc.gradient_coding.partitions import PartitionedData
from torchgcc.gradient_coding.pipelined import PipelinedGradientCode

__all__ = ["GradientWorker", "LossFn", "apply_update", "combine", "flat_parameters", "load_flat", "weighted_gradient"]

#: ``loss_fn(outputs, targets) -> per-sample losses (M,)``.
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets, reduction="none")


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """``(d,)``: a detached copy of every parameter, concatenated in ``model.parameters()`` order."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def load_flat(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy the ``(d,)`` vector ``flat`` into ``model``'s parameters (inverse of :func:`flat_parameters`)."""
    torch.nn.utils.vector_to_parameters(flat.to(next(model.parameters()).dtype), model.parameters())


def weighted_gradient(
    model: nn.Module,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    weights: Sequence[float] | torch.Tensor,
    *,
    loss_fn: LossFn = _cross_entropy,
) -> torch.Tensor:
    """``(d,)`` ``grad_w sum_j weights[j] * mean(loss_fn(model(x_j), y_j))`` with one forward and one backward pass.

    ``batches`` are ``(x_j, y_j)`` pairs, at least one, none empty; their samples are concatenated and sample ``m``
    of batch ``j`` gets the weight ``weights[j] / len(y_j)``. ``weights`` has exactly one entry per batch (a
    ValueError naming it otherwise; extra weights are not ignored).
    """
    sizes = [len(b[1]) for b in batches]
    if not sizes or 0 in sizes:
        raise ValueError(f"batches must be non-empty (x, y) pairs, at least one; got batch sizes {sizes}")
    weights = torch.as_tensor(weights, dtype=torch.float64)
    if weights.shape != (len(batches),):
        raise ValueError(f"weights must hold one weight per batch ({len(batches)}), got shape {tuple(weights.shape)}")
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    sample_weights = torch.cat(
        [torch.full((len(b[1]),), float(w) / len(b[1]), dtype=torch.float64) for b, w in zip(batches, weights)]
    )
    params = [p for p in model.parameters()]
    losses = loss_fn(model(x), y)
    loss = (losses * sample_weights.to(device=losses.device, dtype=losses.dtype)).sum()
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)])


class GradientWorker:
    """Worker ``index`` of ``code``: its partitions, coefficients and (for a pipelined code) its gradient cache.

    :meth:`message` computes what it sends at a step, from the model at that step.
    """

    def __init__(
        self, index: int, code: GradientCode, data: PartitionedData, *, loss_fn: LossFn = _cross_entropy
    ) -> None:
        if data.num_partitions != code.num_partitions:
            raise ValueError(f"data has {data.num_partitions} partitions, the code {code.num_partitions}")
        self.index, self.code, self.data, self.loss_fn = index, code, data, loss_fn
        self.partitions = code.partitions(index)
        self.weights = code.B[index, self.partitions]
        self.cache: list[torch.Tensor | None] = [None] * len(self.partitions)

    def message(self, model: nn.Module, step: int) -> torch.Tensor:
        """``(d,)`` float32 coded gradient ``f_i`` of ``step`` at ``model``'s current weights.

        Unpipelined: one backward pass on ``sum_j B[i, j] loss_j``. Pipelined: one backward pass per recomputed
        slot (one per step after the warm-up), stored in the cache, then ``sum_k B[i, pi_i(k)] cache_k``.
        """
        if not isinstance(self.code, PipelinedGradientCode):
            batches = [self.data.batch(p, step) for p in self.partitions]
            return weighted_gradient(model, batches, self.weights, loss_fn=self.loss_fn)
        for slot in self.code.slots_computed(step):
            self.cache[slot] = weighted_gradient(
                model, [self.data.batch(self.partitions[slot], step)], [1.0], loss_fn=self.loss_fn
            )
        message = torch.zeros_like(self.cache[0])  # type: ignore[arg-type]  # the warm-up step filled every slot
        for weight, gradient in zip(self.weights.tolist(), self.cache):
            message += weight * gradient
        return message


def combine(messages: dict[int, torch.Tensor], a: torch.Tensor) -> torch.Tensor:
    """``(d,)`` ``sum_i a_i f_i`` over the workers with ``a_i != 0``, in ascending worker order (deterministic).

    Raises:
        KeyError: a worker with ``a_i != 0`` has no message.
        ValueError: ``a`` is not 1-D or has no nonzero entry (nothing to combine).
    """
    support = a.nonzero().flatten().tolist() if a.ndim == 1 else []
    if not support:
        raise ValueError(f"a must be a 1-D decoding vector with a nonzero entry, got shape {tuple(a.shape)}")
    missing = [i for i in support if i not in messages]
    if missing:
        raise KeyError(f"decoding needs the messages of workers {missing}")
    total = torch.zeros_like(messages[support[0]])
    for i in support:
        total += float(a[i]) * messages[i]
    return total


def apply_update(model: nn.Module, gradient_sum: torch.Tensor, *, lr: float, num_partitions: int) -> None:
    """Plain SGD on the mean over partitions: ``w <- w - lr * gradient_sum / num_partitions``.

    ``gradient_sum`` is the ``(d,)`` flat vector of :func:`flat_parameters` order (exactly ``d`` entries: a longer
    or shorter one is a ValueError naming it) and ``num_partitions`` an integer >= 1.
    """
    num_partitions = check_integer("num_partitions", num_partitions, minimum=1)
    size = sum(p.numel() for p in model.parameters())
    if gradient_sum.shape != (size,):
        raise ValueError(
            f"gradient_sum must be the ({size},) flat gradient of the model's parameters, got shape "
            f"{tuple(gradient_sum.shape)}"
        )
    with torch.no_grad():
        offset = 0
        for p in model.parameters():
            size = p.numel()
            p.sub_((lr / num_partitions) * gradient_sum[offset : offset + size].view_as(p))
            offset += size
