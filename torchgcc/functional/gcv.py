"""Generalized cross-validation (Craven and Wahba, 1979) for linear smoothers.

For a smoother with hat matrix ``H`` (fitted values ``H y`` at the ``n`` knots) the GCV score is

    V = (1/n) ||y - H y||^2 / (1 - tr(H) / n)^2,

summed over the output coordinates of ``y``. The smoothing parameter with the smallest score is chosen; this is the
criterion of ``scipy.interpolate.make_smoothing_spline(lam=None)``.
"""

from __future__ import annotations

import torch

__all__ = ["gcv_scores"]


def gcv_scores(hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """GCV scores for hat matrices ``hat`` ``(..., n, n)`` and data ``y`` ``(..., n, d)``; returns ``(...)``."""
    n = hat.shape[-1]
    residual = y - hat @ y
    rss = residual.pow(2).sum(dim=(-2, -1)) / n
    return rss / (1 - hat.diagonal(dim1=-2, dim2=-1).sum(-1) / n) ** 2
