"""General Coded Computing (GCC; Moradi, Tahmasebi and Maddah-Ali): smoothing-spline encoder and decoder."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from torchgcc.codes.base import Code
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.functional import gcv_scores, smoothing_spline_matrix

__all__ = ["GCC", "SplineDecoder", "GCVSplineDecoder", "spacing_lambda", "BANDWIDTH_RATIO", "GCV_GRID", "LAMBDA_RULES"]

#: The default decoder smooths at this fraction of the mean spacing of the points it fits (see :func:`spacing_lambda`).
BANDWIDTH_RATIO = 0.2

#: Named decoder smoothing rules accepted by ``GCC(lambda_dec=...)`` besides explicit numbers.
LAMBDA_RULES = ("spacing", "gcv")


def spacing_lambda(num_points: int, bandwidth_ratio: float = BANDWIDTH_RATIO) -> float:
    """The default decoder smoothing for a fit to ``n = num_points`` results: ``lambda = (r * 2 / (n - 1))^4``.

    A smoothing spline with parameter ``lambda`` averages data over a length scale of about ``lambda^(1/4)`` (its
    equivalent kernel). The rule puts that scale at ``r = 0.2`` of the mean spacing ``2 / (n - 1)`` of the
    surviving worker points, so the decoder smooths more when stragglers leave fewer, sparser results, and:

    - its bias, ``O(lambda) = O(h^4)``, shrinks faster than the ``O((S / N)^3)`` straggler error, which keeps GCC's
      convergence rate in N (a fixed lambda would put a floor under the error);
    - on exact results it costs little against interpolation, and on noisy results (low precision, stochastic
      models) or rough networks with many stragglers it averages some error away. ``benchmarks/lambda_rule.py``
      and the README give the measurements.
    """
    return (bandwidth_ratio * 2.0 / max(num_points - 1, 1)) ** 4


#: Candidate decoder smoothing parameters searched by ``lambda_dec="gcv"`` (mean-normalised convention).
GCV_GRID = torch.logspace(-10, 1, 23, dtype=torch.float64)


class SplineDecoder(Decoder):
    """The cubic smoothing spline through the surviving ``(beta_n, y_n)`` with parameter ``lam``, at ``alpha``.

    ``lam=None`` applies :func:`spacing_lambda` to the number of results fitted.
    """

    def __init__(self, alpha: torch.Tensor, beta: torch.Tensor, *, lam: Optional[float], **kwargs) -> None:
        super().__init__(alpha, beta, **kwargs)
        self.lam = lam

    def lam_for(self, num_points: int) -> float:
        """The smoothing parameter used for a fit to ``num_points`` results."""
        return spacing_lambda(num_points) if self.lam is None else self.lam

    has_fused_kernel = True

    def fit_matrix(self, knots: torch.Tensor) -> torch.Tensor:
        return smoothing_spline_matrix(knots, self.alpha, self.lam_for(knots.shape[-1]))

    def fused_matrices(self, mask: torch.Tensor) -> torch.Tensor:
        from torchgcc.functional.fused_decode import spline_decode_matrices  # imports triton

        return spline_decode_matrices(mask, self.beta, self.alpha, self.lam, ratio=BANDWIDTH_RATIO)


class GCVSplineDecoder(Decoder):
    """The smoothing spline with ``lam`` chosen per group by generalized cross-validation over ``grid``.

    The matrices depend on the data, so only the per-mask candidates (one decode and one hat matrix per grid value)
    are cached.
    """

    grid: torch.Tensor

    def __init__(self, alpha: torch.Tensor, beta: torch.Tensor, *, grid: torch.Tensor = GCV_GRID, **kwargs) -> None:
        super().__init__(alpha, beta, **kwargs)
        self.register_buffer("grid", grid.to(torch.float64))
        #: ``(B,)`` smoothing parameters chosen in the last call.
        self.last_lambda: torch.Tensor | None = None

    def fit_matrix(self, knots: torch.Tensor) -> torch.Tensor:
        """``(G, L, K + N, n)``: for every grid value, the spline's rows at alpha and then at every worker point.

        The rows at the surviving workers form the hat matrix that GCV scores.
        """
        points = torch.cat([self.alpha, self.beta])
        return smoothing_spline_matrix(knots.unsqueeze(1), points, self.grid)

    def matrices(self, flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        candidates, inverse = self.unique_matrices(mask)  # (U, L, K + N, N): one mask's candidates at a time
        k = self.num_inputs
        clean = flat.to(torch.float64)  # only survivors' rows are read
        best = torch.empty(len(mask), dtype=torch.long, device=mask.device)
        for u, candidate in enumerate(candidates):
            groups = (inverse == u).nonzero().squeeze(1)
            survivors = mask[groups[0]].nonzero().squeeze(1)
            hat = candidate[:, k + survivors][:, :, survivors]  # (L, n, n)
            scores = gcv_scores(hat.unsqueeze(1), clean[groups][:, survivors].unsqueeze(0))  # (L, G)
            best[groups] = scores.argmin(dim=0)
        self.last_lambda = self.grid[best]
        return candidates[inverse, best, :k, :]


class GCC(Code):
    """General Coded Computing with cubic smoothing splines (the optimum in the second-order Sobolev space).

    Encoder: the smoothing spline through ``(alpha_k, x_k)`` with ``lambda_enc``, evaluated at ``beta``.
    Decoder: the smoothing spline through the surviving ``(beta_n, y_n)`` with ``lambda_dec``, evaluated at ``alpha``.
    Both minimise ``(1/n) sum_i ||y_i - u(t_i)||^2 + lambda int_{-1}^{1} ||u''||^2`` (n = points fitted).
    ``lambda_enc = lambda_dec = 0`` is natural-spline GCC; ``lambda_dec="gcv"`` picks the decoder's lambda per
    group by generalized cross-validation. Needs at least two arrived results.

    Defaults: ``lambda_enc = 0``, so the encoder passes exactly through the inputs and ``f(u_e(alpha_k)) = f(x_k)``
    (encoder smoothing adds a bias that does not shrink with N); ``lambda_dec = "spacing"`` applies
    :func:`spacing_lambda` to each straggler pattern: a light smoothing at a fifth of the surviving points' spacing.
    ``options`` are those of :class:`Code` (points, non-finite policy, cache size).
    """

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        lambda_enc: float = 0.0,
        lambda_dec: Union[float, str] = "spacing",
        **options: Any,
    ) -> None:
        super().__init__(num_inputs, num_workers, **options)
        _check_lambda("lambda_enc", lambda_enc)
        if lambda_dec not in LAMBDA_RULES:
            _check_lambda("lambda_dec", lambda_dec)
        self.lambda_enc = float(lambda_enc)
        self.lambda_dec = lambda_dec if lambda_dec in LAMBDA_RULES else float(lambda_dec)
        alpha, beta = self._points
        if num_inputs >= 2:
            self.encoder = Encoder(smoothing_spline_matrix(alpha, beta, self.lambda_enc))
        else:  # one input: the spline through one point is the constant
            self.encoder = Encoder(torch.ones(num_workers, 1, dtype=torch.float64))
        if self.lambda_dec == "gcv":
            self.decoder = GCVSplineDecoder(alpha, beta, min_arrived=2, **self._decoder_options)
        else:
            lam = None if self.lambda_dec == "spacing" else self.lambda_dec
            self.decoder = SplineDecoder(alpha, beta, lam=lam, min_arrived=2, **self._decoder_options)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, lambda_enc={self.lambda_enc:g}, lambda_dec={self.lambda_dec}"


def _check_lambda(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < float("inf")):
        raise ValueError(f"{name} must be a finite number >= 0 (or one of {LAMBDA_RULES} for lambda_dec), got {value!r}")
