"""General Coded Computing (GCC; Moradi, Tahmasebi and Maddah-Ali): smoothing-spline encoder and decoder."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from torchgcc.codes.base import Code
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.functional import gcv_scores, smoothing_spline_matrix
from torchgcc.functional.spline_gcv import spline_gcv_scores

__all__ = [
    "GCC",
    "SplineDecoder",
    "GCVSplineDecoder",
    "FlooredGCVSplineDecoder",
    "spacing_lambda",
    "BANDWIDTH_RATIO",
    "GCV_GRID",
    "LAMBDA_RULES",
]

#: The default decoder smooths at this fraction of the mean spacing of the points it fits (see :func:`spacing_lambda`).
BANDWIDTH_RATIO = 0.2

#: Named decoder smoothing rules accepted by ``GCC(lambda_dec=...)`` besides explicit numbers.
LAMBDA_RULES = ("spacing", "gcv", "adaptive")

#: Bandwidth ratio of the smallest smoothing that ``lambda_dec="adaptive"`` considers.
ADAPTIVE_FLOOR_RATIO = 0.12


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

    The matrices depend on the data, so only the per-mask candidates (one decode and one hat matrix per grid value,
    ``(L, K + N, n)`` per mask: mind ``cache_bytes`` at large N) are cached; :meth:`matrices` returns the chosen
    ``(B, K, N)`` and :meth:`decode_matrix` raises ``TypeError``.
    """

    depends_on_results = True

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


class FlooredGCVSplineDecoder(Decoder):
    """GCV per group over a short grid that starts at a floor (``lambda_dec="adaptive"``, the default):
    ``lam = spacing_lambda(n, floor_ratio) * 10^(j/2)``, ``j = 0 .. 12``, for a fit to ``n`` results.

    The floor keeps the light smoothing that rough networks gain from (the ViT) at a bandwidth ratio small enough to
    cost little on exact smooth results (0.12 of the spacing, against 0.2 for ``"spacing"``); above it GCV smooths
    as much as noisy results warrant. The scores come from :func:`torchgcc.functional.spline_gcv_scores` (one
    Demmler-Reinsch transform per group, then O(n) per candidate, without hat matrices), and only the chosen ``(K,
    n)`` decode matrix is formed per group; nothing is
    cached (the choice depends on the data). Chosen by ``benchmarks/lambda_suite.py``.
    """

    depends_on_results = True

    grid: torch.Tensor

    def __init__(
        self, alpha: torch.Tensor, beta: torch.Tensor, *, floor_ratio: float = ADAPTIVE_FLOOR_RATIO, **kwargs
    ) -> None:
        super().__init__(alpha, beta, **kwargs)
        self.floor_ratio = floor_ratio
        self.register_buffer("grid", 10.0 ** (torch.arange(13, dtype=torch.float64) / 2))
        #: ``(B,)`` smoothing parameters chosen in the last call.
        self.last_lambda: torch.Tensor | None = None

    def matrices(self, flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(mask), self.num_inputs, self.num_workers, dtype=torch.float64, device=flat.device)
        self.last_lambda = torch.empty(len(mask), dtype=torch.float64, device=flat.device)
        counts = mask.count_nonzero(dim=1)
        for count in counts.unique().tolist():
            rows = (counts == count).nonzero().squeeze(1)
            survivors = mask[rows].nonzero()[:, 1].view(len(rows), count)
            knots = self.beta[survivors]  # (G, n)
            candidates = spacing_lambda(count, self.floor_ratio) * self.grid
            if count >= 4:
                y = flat[rows.unsqueeze(1), survivors].to(torch.float64)
                lam = candidates[spline_gcv_scores(knots, y, candidates).argmin(dim=1)]  # (G,)
            else:  # too few results to score: the floor
                lam = candidates[:1].expand(len(rows))
            fitted = smoothing_spline_matrix(knots, self.alpha, lam)  # (G, K, n)
            out[rows] = out[rows].scatter(-1, survivors.unsqueeze(1).expand_as(fitted), fitted)
            self.last_lambda[rows] = lam
        return out


class GCC(Code):
    """General Coded Computing with cubic smoothing splines (the optimum in the second-order Sobolev space).

    Encoder: the smoothing spline through ``(alpha_k, x_k)`` with ``lambda_enc``, evaluated at ``beta``.
    Decoder: the smoothing spline through the surviving ``(beta_n, y_n)`` with ``lambda_dec``, evaluated at ``alpha``.
    Both minimise ``(1/n) sum_i ||y_i - u(t_i)||^2 + lambda int_{-1}^{1} ||u''||^2`` (n = points fitted).
    ``lambda_enc = lambda_dec = 0`` is natural-spline GCC; ``lambda_dec="gcv"`` picks the decoder's lambda per
    group by generalized cross-validation. Needs at least two arrived results.

    Defaults: ``lambda_enc = 0``, so the encoder passes exactly through the inputs and ``f(u_e(alpha_k)) = f(x_k)``
    (encoder smoothing adds a bias that does not shrink with N); ``lambda_dec = "adaptive"``
    (:class:`FlooredGCVSplineDecoder`): GCV per group over a short grid that starts at a light floor, chosen over
    ``"spacing"`` (:func:`spacing_lambda`), ``"gcv"`` and interpolation by ``benchmarks/lambda_suite.py`` (within 10%
    of the best of those three at every workload and S measured there).
    ``options`` are those of :class:`Code` (points, non-finite policy, cache size).
    """

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        lambda_enc: float = 0.0,
        lambda_dec: Union[float, str] = "adaptive",
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
            self.encoder = Encoder(
                smoothing_spline_matrix(alpha, beta, self.lambda_enc), check=self._decoder_options["check"]
            )
        else:  # one input: the spline through one point is the constant
            self.encoder = Encoder(
                torch.ones(num_workers, 1, dtype=torch.float64), check=self._decoder_options["check"]
            )
        if self.lambda_dec in ("gcv", "adaptive"):
            rule = GCVSplineDecoder if self.lambda_dec == "gcv" else FlooredGCVSplineDecoder
            self.decoder = rule(alpha, beta, min_arrived=2, **self._decoder_options)
        else:
            lam = None if self.lambda_dec == "spacing" else self.lambda_dec
            self.decoder = SplineDecoder(alpha, beta, lam=lam, min_arrived=2, **self._decoder_options)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, lambda_enc={self.lambda_enc:g}, lambda_dec={self.lambda_dec}"


def _check_lambda(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < float("inf")):
        raise ValueError(
            f"{name} must be a finite number >= 0 (or one of {LAMBDA_RULES} for lambda_dec), got {value!r}"
        )
