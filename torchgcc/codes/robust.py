"""GCC decoders for adversarial workers: the seed's smoothing decoder, and two robust decoders beyond the seed.

Setting (arXiv 2502.08058): of the results that arrive, up to ``q`` come from adversaries and are arbitrary (bounded
by ``M``). :class:`RobustGCC` pairs the interpolating GCC encoder with one of :data:`DECODERS`:

- ``"smoothing"``, :class:`AdversarialSplineDecoder`: THE SEED'S METHOD. It does not locate the corrupted workers;
  the smoothing spline's regularisation limits their influence, at linear master-side cost, with the smoothing
  parameter of :func:`adversarial_lambda`, ``lambda_d = c (q / n)^(8/5)`` for a fit to ``n`` results. The exponent
  is our reconstruction of the rule behind the seed's ``O((q/N)^(6/5))`` bound (its text gives the rate, not the
  rule): a smoothing spline averages over a length ``h = lambda^(1/4)`` with weights of height ``1 / (n h)``, so ``q``
  results off by ``M`` move an estimate by up to ``(q / n) M / h``, a squared error ``(q / n)^2 M^2 lambda^(-1/2)``;
  the honest fit's worst squared error over the unit ball of W^{2,2} is of order ``lambda^(3/4)`` (a bump of width
  ``h`` and unit ``||f''||_2`` has height ``h^(3/2)``). Balancing the two gives ``lambda ~ (q/n)^(8/5)`` and the
  squared error ``(q/n)^(6/5)``. The constant ``c = 0.1`` is measured by ``benchmarks/adversarial_lambda.py``.
- ``"huber"`` and ``"trim"``, :class:`RobustSplineDecoder`: BEYOND THE SEED (ours, no paper behind them). They
  locate: one weight per worker from its residual norm over all outputs, batched over groups with equal survivor
  counts, each fit a weighted smoothing spline
  (:func:`torchgcc.functional.weighted_spline.weighted_smoothing_spline`) with the adversarial lambda:

  * ``"huber"``: iteratively reweighted least squares with Huber weights ``min(1, 1.345 s / r_n)`` and the MAD scale
    ``s = 1.4826 median_n r_n`` of the residual norms ``r_n``;
  * ``"trim"``: fit, drop the ``q`` workers with the largest residual norms, refit on the rest, repeat.

  Then (``refit``, on by default) the flagged workers, at most ``q``, are treated as stragglers and the rest are
  decoded with GCC's ``"spacing"`` smoothing, so the adversarial lambda's bias does not stay in the estimate. Their
  failure modes are measured by ``torchgcc reproduce adversarial``: shifts small enough to pass as honest residuals
  are not flagged, and then decode like the natural spline; sign flips inside the honest range likewise.

Minimum arrivals, derived per decoder and checked when the code is built: the smoothing decoder fits any ``n >= 2``
results (two give the straight line); Huber and trim fit after setting aside up to ``q`` results, so they need
``n >= q + 2``, and ``RobustGCC`` rejects ``q + 2 > N``. Data are divided by each group's largest magnitude before
the robust fits (they are scale-equivariant), so results near the float64 range (1e300) give finite weights.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from torchgcc.checks import check_integer, check_real
from torchgcc.codes.base import check_sizes
from torchgcc.codes.gcc import GCC, SplineDecoder, _check_lambda
from torchgcc.codes.maps import Decoder
from torchgcc.functional.weighted_spline import huber_weights, weighted_smoothing_spline

__all__ = [
    "ADVERSARIAL_C",
    "DECODERS",
    "AdversarialSplineDecoder",
    "RobustSplineDecoder",
    "RobustGCC",
    "adversarial_lambda",
    "min_arrived_for",
]

#: Constant ``c`` of :func:`adversarial_lambda`.
ADVERSARIAL_C = 0.1

#: The decoders of :class:`RobustGCC`: the seed's smoothing decoder, then the two that locate (beyond the seed).
DECODERS = ("smoothing", "huber", "trim")


def adversarial_lambda(
    num_adversaries: int, num_points: Union[int, torch.Tensor], c: float = ADVERSARIAL_C
) -> Union[float, torch.Tensor]:
    """``lambda_d = c * (q / n)^(8/5)`` for ``q`` adversaries among ``n >= 1`` fitted results (0 when ``q = 0``).

    ``num_points`` may be an int or a tensor of survivor counts (the result is then a float64 tensor).
    """
    points: Union[int, torch.Tensor]
    if isinstance(num_points, torch.Tensor):
        points = num_points.to(torch.float64).clamp(min=1)
    else:
        points = max(num_points, 1)
    return c * (num_adversaries / points) ** 1.6


def min_arrived_for(decoder: str, q: int) -> int:
    """The fewest arrived results ``decoder`` (one of :data:`DECODERS`) can decode with ``q`` adversaries:
    2 for ``"smoothing"`` (a line through two results), ``q + 2`` for ``"huber"`` and ``"trim"`` (two results left
    after setting ``q`` aside)."""
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {DECODERS}, got {decoder!r}")
    return 2 if decoder == "smoothing" else q + 2


class AdversarialSplineDecoder(SplineDecoder):
    """The seed's decoder: the smoothing spline with :func:`adversarial_lambda` for the number of results fitted."""

    def __init__(self, alpha: torch.Tensor, beta: torch.Tensor, *, q: int, c: float = ADVERSARIAL_C, **kwargs) -> None:
        kwargs.setdefault("min_arrived", 2)
        self.q, self.c = q, c  # before the base class builds mu_table from lam_for
        super().__init__(alpha, beta, lam=None, **kwargs)

    def lam_for(self, num_points: Union[int, torch.Tensor]) -> Union[float, torch.Tensor]:
        return adversarial_lambda(self.q, num_points, self.c)


class RobustSplineDecoder(Decoder):
    """Robust smoothing-spline decoder with one weight per worker (see the module docstring; beyond the seed).

    Its weights depend on the results, so :meth:`decode_matrix` raises ``TypeError``. It reports what it did in the
    last call: ``last_weights`` ``(B, N)`` (Huber weights, or 1 for kept and 0 for trimmed workers; 0 for
    stragglers) and ``last_flagged`` ``(B, N)``, the arrived workers it set aside (at most ``q`` per group: detection).
    With ``q = 0`` it returns the interpolating spline's estimate and flags nothing.

    Args:
        alpha, beta: regression and worker points.
        q: the number of adversaries to withstand (sets lambda and the most workers flagged), ``>= 0``.
        method: ``"huber"`` or ``"trim"``.
        c: constant of the adversarial lambda.
        iters: reweighting (Huber, default 10) or trimming (default 3) rounds.
        refit: the smoothing of a final fit without the flagged workers: ``"spacing"`` (default; GCC's spacing rule)
            or a number, or None to return the robust fit itself (smoothed with the adversarial lambda).
        flag_below: Huber weights below this flag a worker (the ``q`` lowest such weights at most).
        options: those of :class:`Decoder` (``min_arrived`` defaults to, and may not be below, ``q + 2``).
    """

    depends_on_results = True

    def __init__(
        self,
        alpha: torch.Tensor,
        beta: torch.Tensor,
        *,
        q: int,
        method: str = "huber",
        c: float = ADVERSARIAL_C,
        iters: Optional[int] = None,
        refit: Union[float, str, None] = "spacing",
        flag_below: float = 0.5,
        **options: Any,
    ) -> None:
        if method not in ("huber", "trim"):
            raise ValueError(f"method must be 'huber' or 'trim', got {method!r}")
        q = check_integer("q", q, minimum=0)
        c = check_real("c", c, low=0)
        flag_below = check_real("flag_below", flag_below, low=0, high=1)
        if iters is not None:
            iters = check_integer("iters", iters, minimum=1)
        needed = min_arrived_for(method, q)
        options.setdefault("min_arrived", needed)
        if options["min_arrived"] < needed:
            raise ValueError(
                f"min_arrived must be at least q + 2 = {needed} for method={method!r}, got {options['min_arrived']}"
            )
        super().__init__(alpha, beta, **options)
        self.q, self.method, self.c, self.flag_below = q, method, c, flag_below
        self.iters = iters if iters is not None else (10 if method == "huber" else 3)
        if refit is not None and refit != "spacing":
            _check_lambda("refit", refit)
        lam = None if refit in (None, "spacing") else float(refit)  # SplineDecoder(lam=None): the spacing rule
        decoder_options = {**options, "min_arrived": 2}  # the refit sees at least n - q >= 2 results
        self.refit = None if refit is None else SplineDecoder(self.alpha, self.beta, lam=lam, **decoder_options)
        self.last_weights: Optional[torch.Tensor] = None
        self.last_flagged: Optional[torch.Tensor] = None

    def check_traceable(self, check: Optional[bool] = None) -> None:
        raise ValueError(
            f"torch.jit.trace cannot record {type(self).__name__}: it fits each call's groups by their survivor counts "
            "(a Python loop over the data); decode it eagerly, or trace decoder='smoothing'"
        )

    def forward(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y, mask = self.check_inputs(y, mask)
        if torch.jit.is_tracing():
            self.check_traceable()
        flat = y.reshape(y.shape[0], self.num_workers, -1)
        if self.nonfinite == "straggle":
            mask = mask & torch.isfinite(flat).all(dim=-1)
        elif not torch.isfinite(flat[mask]).all():
            raise ValueError("non-finite result from an arrived worker; pass nonfinite='straggle' to drop such workers")
        self._check_counts(mask)
        if flat.shape[-1] == 0:  # no values: nothing to weigh, flag or decode
            self.last_weights, self.last_flagged = mask.to(torch.float64), torch.zeros_like(mask)
            return y.new_zeros((y.shape[0], self.num_inputs) + y.shape[2:])
        clean = torch.where(mask.unsqueeze(-1), flat, torch.zeros((), dtype=flat.dtype, device=flat.device))
        # The fits are equivariant to scale: fit each group divided by its largest magnitude (no overflow at 1e300).
        scale = clean.to(torch.float64).abs().amax(dim=(1, 2), keepdim=True)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        estimate, weights, flagged = self._robust_fit(clean.to(torch.float64) / scale, mask)
        self.last_weights, self.last_flagged = weights.detach(), flagged  # reports, not part of the graph
        if self.q > 0 and self.refit is not None:
            out = self.refit(clean, mask & ~flagged)
        else:
            out = (estimate * scale).to(y.dtype)
        return out.reshape((y.shape[0], self.num_inputs) + y.shape[2:])

    def _robust_fit(self, unit: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Estimates ``(B, K, d)``, weights ``(B, N)`` and flagged workers ``(B, N)`` for data scaled to at most 1."""
        b, n_workers, d = unit.shape
        estimate = unit.new_zeros(b, self.num_inputs, d)
        weights = mask.to(torch.float64)
        flagged = torch.zeros_like(mask)
        counts = mask.count_nonzero(dim=1)
        for count in counts.unique().tolist():
            rows = (counts == count).nonzero().squeeze(1)
            survivors = mask[rows].nonzero()[:, 1].view(len(rows), count)
            knots = self.beta[survivors]  # (G, n)
            data = unit[rows.unsqueeze(1), survivors]  # (G, n, d)
            lam = float(adversarial_lambda(self.q, count, self.c))
            if self.q == 0:
                _, at_alpha = weighted_smoothing_spline(knots, data, torch.ones_like(knots), self.alpha, lam)
                estimate[rows] = at_alpha
                continue
            fit = self._trim if self.method == "trim" else self._huber
            at_alpha, w, set_aside = fit(knots, data, lam)
            estimate[rows] = at_alpha
            weights[rows.unsqueeze(1), survivors] = w
            flagged[rows.unsqueeze(1), survivors] = set_aside
        return estimate, weights, flagged

    def _huber(self, knots: torch.Tensor, data: torch.Tensor, lam: float):
        w = torch.ones_like(knots)
        for _ in range(self.iters):
            fitted, at_alpha = weighted_smoothing_spline(knots, data, w, self.alpha, lam)
            w = huber_weights((data - fitted).norm(dim=-1))
        # Set aside the workers weighted below flag_below, the q lowest at most.
        rank = w.argsort(dim=1).argsort(dim=1)
        return at_alpha, w, (w < self.flag_below) & (rank < self.q)

    def _trim(self, knots: torch.Tensor, data: torch.Tensor, lam: float):
        g, n = knots.shape
        points = torch.cat([self.alpha.expand(g, -1), knots], dim=1)  # the estimates, then every knot's fit
        _, values = weighted_smoothing_spline(knots, data, torch.ones_like(knots), points, lam)
        kept = torch.ones_like(knots, dtype=torch.bool)
        for _ in range(self.iters):
            norms = (data - values[:, self.num_inputs :]).norm(dim=-1)  # residuals of every worker, trimmed too
            kept = torch.ones_like(kept).scatter(1, norms.topk(self.q, dim=1).indices, False)
            index = kept.nonzero()[:, 1].view(g, n - self.q)
            _, values = weighted_smoothing_spline(
                knots.gather(1, index),
                data.gather(1, index.unsqueeze(-1).expand(-1, -1, data.shape[-1])),
                torch.ones(g, n - self.q, dtype=torch.float64, device=knots.device),
                points,
                lam,
            )
        return values[:, : self.num_inputs], kept.to(torch.float64), ~kept


class RobustGCC(GCC):
    """GCC for ``q`` adversarial workers: the GCC encoder (interpolating) and an adversarial decoder.

    ``decoder="smoothing"`` (the default, the seed's method) is :class:`AdversarialSplineDecoder`; ``"huber"`` and
    ``"trim"`` (beyond the seed) are :class:`RobustSplineDecoder`, which need ``q + 2 <= N``. ``robust`` passes
    ``iters``, ``refit`` and ``flag_below`` to the latter.
    """

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        q: int,
        decoder: str = "smoothing",
        c: float = ADVERSARIAL_C,
        robust: Optional[dict] = None,
        **options: Any,
    ) -> None:
        num_inputs, num_workers = check_sizes(num_inputs, num_workers)
        q = check_integer("q", q, minimum=0, maximum=num_workers - 1)
        c = check_real("c", c, low=0)
        needed = min_arrived_for(decoder, q)
        if needed > num_workers:
            raise ValueError(
                f"decoder={decoder!r} with q={q} adversaries needs at least q + 2 = {needed} arrived results, "
                f"more than N={num_workers} workers; lower q or use decoder='smoothing'"
            )
        super().__init__(num_inputs, num_workers, lambda_dec=0.0, **options)
        alpha, beta = self._points
        if decoder == "smoothing":
            self.decoder = AdversarialSplineDecoder(alpha, beta, q=q, c=c, **self._decoder_options)
        else:
            self.decoder = RobustSplineDecoder(
                alpha, beta, q=q, method=decoder, c=c, **(robust or {}), **self._decoder_options
            )
        self.q, self.decoder_name = q, decoder
        self.lambda_dec = f"adversarial(q={q}, c={c:g})"

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, decoder={self.decoder_name}"
