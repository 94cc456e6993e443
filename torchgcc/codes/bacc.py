"""Berrut Approximated Coded Computing (BACC; Jahani-Nezhad and Maddah-Ali, 2021)."""

from __future__ import annotations

import torch

from torchgcc.codes.base import Code
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.functional import berrut_matrix
from torchgcc.points import PointSpec

__all__ = ["BACC", "BerrutDecoder"]


class BerrutDecoder(Decoder):
    """Berrut's rational interpolant through the surviving ``(beta_n, y_n)``, evaluated at ``alpha``."""

    def fit_matrix(self, knots: torch.Tensor) -> torch.Tensor:
        return berrut_matrix(knots, self.alpha)


class BACC(Code):
    """Berrut encoder through ``(alpha_k, x_k)`` evaluated at ``beta``; Berrut decoder on the survivors.

    Decodes from any number of arrived results (at least one).
    """

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        alpha: PointSpec = "chebyshev1",
        beta: PointSpec = "chebyshev2",
        nonfinite: str = "error",
        cache_size: int = 4096,
    ) -> None:
        super().__init__(num_inputs, num_workers, alpha=alpha, beta=beta)
        alpha_, beta_ = self._points
        self.encoder = Encoder(berrut_matrix(alpha_, beta_))
        self.decoder = BerrutDecoder(alpha_, beta_, min_arrived=1, nonfinite=nonfinite, cache_size=cache_size)
