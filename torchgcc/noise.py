"""Noisy worker results: seeded noise models applied to the results that arrived, and workers in low precision.

- :class:`GaussianNoise`: additive Gaussian noise whose standard deviation is ``sigma`` times the scale (RMS) of
  each group's results, the setting of LeTCC (error ``O(S^(8/5) N^(-3/5))`` with a smoothing decoder).
- :class:`LowPrecisionWorkers`: a real source of such noise: the workers run a copy of the model in bfloat16 or
  float16 while the reference is the float32 model; results come back in the input's dtype.

A noise model is called as ``noise(results, mask) -> results`` with ``results`` ``(B, N, *out)`` and ``mask``
``(B, N)``, like an attack (:mod:`torchgcc.attacks`), so :class:`torchgcc.CodedModule` takes either.
"""

from __future__ import annotations

import copy
from typing import Optional

import torch
from torch import nn

__all__ = ["GaussianNoise", "LowPrecisionWorkers"]


class GaussianNoise:
    """``y + sigma * scale * z`` with ``z`` standard normal, drawn from the model's own generator.

    Args:
        sigma: relative standard deviation, ``>= 0``.
        relative: True (default) multiplies by each group's result scale ``sqrt(mean(y^2))`` over its workers and
            outputs; False makes ``sigma`` absolute.
        seed: seed of the generator.
    """

    def __init__(self, sigma: float, *, relative: bool = True, seed: Optional[int] = None) -> None:
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not 0 <= sigma < float("inf"):
            raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
        self.sigma = float(sigma)
        self.relative = relative
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    def __call__(self, results: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Noisy copy of ``results`` ``(B, N, *out)`` (``mask`` is unused: straggler values are never read)."""
        z = torch.randn(results.shape, generator=self.generator, dtype=torch.float64).to(results)
        scale: float | torch.Tensor = self.sigma
        if self.relative:
            flat = results.detach().reshape(results.shape[0], -1).to(torch.float64)
            scale = self.sigma * flat.pow(2).mean(dim=1).sqrt().view((-1,) + (1,) * (results.ndim - 1)).to(results)
        return results + scale * z

    def __repr__(self) -> str:
        return f"GaussianNoise(sigma={self.sigma:g}, relative={self.relative})"


class LowPrecisionWorkers(nn.Module):
    """``model`` as the workers run it in ``dtype``: a cast copy, inputs cast down, outputs cast back up.

    ``LowPrecisionWorkers(model, torch.bfloat16)(x)`` has ``x``'s dtype and shape of ``model(x)``; the original
    ``model`` is left untouched (the coordinator's float32 reference).
    """

    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        if dtype not in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
            raise ValueError(f"dtype must be a floating-point dtype such as torch.bfloat16, got {dtype!r}")
        self.dtype = dtype
        self.model = copy.deepcopy(model).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x.to(self.dtype)).to(x.dtype)
