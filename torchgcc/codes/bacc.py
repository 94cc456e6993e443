"""Berrut Approximated Coded Computing (BACC; Jahani-Nezhad and Maddah-Ali, 2021)."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable

import torch

from torchgcc.codes.base import Code
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.functional.berrut import berrut_matrix, padded_berrut_matrices
from torchgcc.functional.survivors import Survivors

__all__ = ["BACC", "BerrutDecoder"]


class BerrutDecoder(Decoder):
    """Berrut's rational interpolant through the surviving ``(beta_n, y_n)``, evaluated at ``alpha``."""

    has_fused_kernel = True

    def fit_matrix(self, survivors: Survivors) -> torch.Tensor:
        return padded_berrut_matrices(survivors.knots, survivors.valid, self.alpha)

    def kernel_call(self, kernels: ModuleType) -> Callable[..., torch.Tensor]:
        return functools.partial(kernels.berrut_rows, beta=self.beta, alpha=self.alpha, min_arrived=self.min_arrived)


class BACC(Code):
    """Berrut encoder through ``(alpha_k, x_k)`` evaluated at ``beta``; Berrut decoder on the survivors.

    Decodes from any number of arrived results (at least one). ``options`` are those of :class:`Code`.
    """

    def __init__(self, num_inputs: int, num_workers: int, **options: Any) -> None:
        super().__init__(num_inputs, num_workers, **options)
        alpha, beta = self._points
        self.encoder = Encoder(berrut_matrix(alpha, beta))
        self.decoder = BerrutDecoder(alpha, beta, min_arrived=1, **self._decoder_options)
