"""Lagrange Coded Computing (LCC; Yu et al., 2019) over the reals."""

from __future__ import annotations

from typing import Any

import torch

from torchgcc.codes.base import Code
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.functional.lagrange import lagrange_matrix, padded_lagrange_matrices
from torchgcc.functional.survivors import Survivors

__all__ = ["LCC", "LagrangeDecoder", "BELOW_THRESHOLD_POLICIES"]

#: What LCC does with fewer results than its recovery threshold.
BELOW_THRESHOLD_POLICIES = ("error", "interpolate")


class LagrangeDecoder(Decoder):
    """Fits the degree ``fit_degree`` polynomial (``(K - 1) * deg(f)`` in :class:`LCC`, whose ``degree`` is ``deg(f)``)
    to the surviving results (least squares in the Chebyshev basis, exact for polynomial ``f``) and evaluates it at
    ``alpha``. Below the threshold (only with
    ``below_threshold="interpolate"``) it interpolates all survivors with a lower-degree polynomial, which is not exact.
    """

    def __init__(self, alpha: torch.Tensor, beta: torch.Tensor, *, fit_degree: int, **kwargs) -> None:
        super().__init__(alpha, beta, **kwargs)
        self.fit_degree = fit_degree

    def fit_matrix(self, survivors: Survivors) -> torch.Tensor:
        return padded_lagrange_matrices(survivors.knots, survivors.counts, survivors.valid, self.alpha, self.fit_degree)


class LCC(Code):
    """Lagrange encoder (the degree K-1 polynomial through ``(alpha_k, x_k)``, evaluated at ``beta``) and decoder.

    For ``f`` a polynomial of degree ``degree``, ``f(u_e(t))`` has degree ``(K - 1) * degree``, so the decoder is
    exact once ``threshold = (K - 1) * degree + 1`` results arrived. With fewer the decoder raises ``ValueError``
    (``below_threshold="error"``, the default) or interpolates the survivors (``"interpolate"``, inexact and
    typically unstable: this is how LCC fails beyond its threshold). ``options`` are those of :class:`Code`.
    """

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        degree: int,
        below_threshold: str = "error",
        **options: Any,
    ) -> None:
        super().__init__(num_inputs, num_workers, **options)
        if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
            raise ValueError(f"degree must be a positive integer, got {degree!r}")
        if below_threshold not in BELOW_THRESHOLD_POLICIES:
            raise ValueError(f"below_threshold must be one of {BELOW_THRESHOLD_POLICIES}, got {below_threshold!r}")
        self.degree = degree
        self.threshold = (num_inputs - 1) * degree + 1
        if self.threshold > num_workers:
            raise ValueError(
                f"LCC with K={num_inputs} and degree {degree} needs at least {self.threshold} workers, "
                f"got N={num_workers}"
            )
        alpha, beta = self._points
        self.encoder = Encoder(lagrange_matrix(alpha, beta))
        self.decoder = LagrangeDecoder(
            alpha,
            beta,
            fit_degree=self.threshold - 1,
            min_arrived=self.threshold if below_threshold == "error" else 1,
            **self._decoder_options,
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, degree={self.degree}, threshold={self.threshold}"
