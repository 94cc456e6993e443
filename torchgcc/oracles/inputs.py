"""What every oracle checks and compares: the decoder's results against the exact outputs, and which error is worse.

The checks are those of the decoders (:func:`~torchgcc.checks.check_tensor`): one-line errors that name the
argument. An oracle's MSE is ``mean (estimate - reference)^2``, so ``reference`` must have the estimates' shape
exactly (a broadcast one would give numbers against other outputs) and be finite (a NaN would make every error NaN).
"""

from __future__ import annotations

import torch

from torchgcc.checks import check_tensor

__all__ = ["check_outputs", "worse"]


def check_outputs(decoder: torch.nn.Module, results: object, reference: object) -> tuple[torch.Tensor, torch.Tensor]:
    """``(results, reference)`` if ``results`` is a floating-point ``(B, N, *out)`` tensor with ``B >= 1`` and
    ``reference`` a finite floating-point ``(B, K, *out)`` one, ``N`` and ``K`` the decoder's ``num_workers`` and
    ``num_inputs`` (every torchgcc decoder has them); else a one-line ``TypeError`` / ``ValueError`` naming
    ``decoder``, ``results`` or ``reference``."""
    num_inputs, num_workers = getattr(decoder, "num_inputs", None), getattr(decoder, "num_workers", None)
    if not isinstance(num_inputs, int) or not isinstance(num_workers, int):
        raise TypeError(
            f"decoder must be a torchgcc decoder with num_inputs and num_workers (code.decoder), got "
            f"{type(decoder).__name__}"
        )
    results = check_tensor(results, "results", "N", num_workers, "out")
    reference = check_tensor(reference, "reference", "K", num_inputs, "out")
    expected = (results.shape[0], num_inputs, *results.shape[2:])
    if reference.shape != expected:
        raise ValueError(
            f"reference must have shape (B, K, *out) = {expected} (the results' B and *out, the decoder's K), got "
            f"{tuple(reference.shape)}"
        )
    if not bool(torch.isfinite(reference).all()):
        raise ValueError("reference must be finite (the exact outputs), got NaN or Inf")
    return results, reference


def worse(errors: torch.Tensor, than: torch.Tensor) -> torch.Tensor:
    """Elementwise bool: ``errors`` is worse than ``than``: larger, or NaN (an estimate the decoder could not make,
    the worst outcome) where ``than`` is not. ``>`` alone never holds for NaN, so a search would skip such sets."""
    return (errors > than) | (errors.isnan() & ~than.isnan())
