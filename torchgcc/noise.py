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

from torchgcc.checks import check_mask, check_real, check_seed

__all__ = ["GaussianNoise", "LowPrecisionWorkers"]


class GaussianNoise:
    """``y + sigma * scale * z`` with ``z`` standard normal, drawn from the model's own generator.

    Args:
        sigma: relative standard deviation, a finite number ``>= 0``.
        relative: True (default) multiplies by each group's result scale ``sqrt(mean(y^2))`` over its ARRIVED
            workers and all their outputs (straggler slots are never read: their values, even NaN, change nothing);
            False makes ``sigma`` absolute.
        seed: seed of the generator (an integer; None draws a fresh one).
    """

    def __init__(self, sigma: float, *, relative: bool = True, seed: Optional[int] = None) -> None:
        self.sigma = check_real("sigma", sigma, low=0)
        self.relative = relative
        seed = check_seed("seed", seed, optional=True)
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    def __call__(self, results: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Noisy copy of ``results`` ``(B, N, *out)``; ``mask`` ``(B, N)`` (True = arrived, None = every worker
        arrived) picks the workers whose results set the relative scale."""
        z = torch.randn(results.shape, generator=self.generator, dtype=torch.float64).to(results)
        scale: float | torch.Tensor = self.sigma
        if self.relative:
            batch, workers = results.shape[:2]
            arrived = (
                torch.ones(batch, workers, dtype=torch.bool, device=results.device)
                if mask is None
                else check_mask(mask, workers, batch).to(results.device)
            )
            flat = results.detach().reshape(batch, workers, -1).to(torch.float64)
            squares = torch.where(arrived.unsqueeze(-1), flat.pow(2), 0.0)  # where, not a product: NaN * 0 is NaN
            count = (arrived.sum(dim=1) * flat.shape[-1]).clamp(min=1)
            rms = (squares.sum(dim=(1, 2)) / count).sqrt()
            scale = self.sigma * rms.view((-1,) + (1,) * (results.ndim - 1)).to(results)
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
