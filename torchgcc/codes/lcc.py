"""Lagrange Coded Computing (LCC; Yu et al., 2019) over the reals."""

from __future__ import annotations

import math
import warnings
from typing import Any, Optional

import torch

from torchgcc.call_site import user_stacklevel
from torchgcc.codes.base import Code
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.functional.lagrange import lagrange_matrix, padded_lagrange_matrices
from torchgcc.functional.survivors import Survivors

__all__ = ["LCC", "ConditioningWarning", "LagrangeDecoder", "BELOW_THRESHOLD_POLICIES", "amplification"]

#: What LCC does with fewer results than its recovery threshold.
BELOW_THRESHOLD_POLICIES = ("error", "interpolate")


class ConditioningWarning(UserWarning):
    """A decode whose weights amplify errors in the results past half the significant digits of their dtype (or an
    LCC encoder that does so for float32 inputs, from its construction).

    The amplification is ``Lambda = max_k sum_n |D[k, n]|`` over the call's decode matrices ``D`` (the Lebesgue
    constant of the fit at the regression points): a decode of results ``y + e`` is off by at most ``Lambda max |e|``.
    Results carry at least their own rounding, ``|e| >= u |y|`` (``u`` the unit roundoff of their dtype), so where
    ``Lambda > u ** -0.5`` the estimates may have lost more than half their digits, however exact the model. LCC's
    polynomial fits amplify exponentially in the stragglers at the threshold (median 5e4, largest 3e15 over 2000
    random masks at K = 16, N = 64, degree 2, S = 33); GCC's and BACC's weights stay bounded by the gaps. Silence
    it with ``warnings.filterwarnings("ignore", category=ConditioningWarning)`` where such decodes are studied on
    purpose."""


class LagrangeDecoder(Decoder):
    """Fits the degree ``fit_degree`` polynomial (``(K - 1) * deg(f)`` in :class:`LCC`, whose ``degree`` is ``deg(f)``)
    to the surviving results (least squares in the Chebyshev basis, exact for polynomial ``f``) and evaluates it at
    ``alpha``. Below the threshold (only with
    ``below_threshold="interpolate"``) it interpolates all survivors with a lower-degree polynomial, which is not exact.

    With ``check=True`` the flag it reads back also holds the amplification of the call's matrices, and a decode that
    may lose more than half the results' digits warns (:class:`ConditioningWarning`): still one read per call.
    """

    def __init__(self, alpha: torch.Tensor, beta: torch.Tensor, *, fit_degree: int, **kwargs) -> None:
        super().__init__(alpha, beta, **kwargs)
        self.fit_degree = fit_degree

    def fit_matrix(self, survivors: Survivors) -> torch.Tensor:
        return padded_lagrange_matrices(survivors.knots, survivors.counts, survivors.valid, self.alpha, self.fit_degree)

    def _product(self, matrices: torch.Tensor, flat: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The base product, and its flag carrying the matrices' amplification (:class:`ConditioningWarning`):
        ``amplification + 0 * flag``, float64, finite exactly where the base flag is (``0 * x`` is NaN for NaN and
        +-Inf), so that one read answers both."""
        out, flag = super()._product(matrices, flat)
        if flag is None:
            return out, None
        return out, amplification(matrices) + 0 * flag.to(torch.float64)

    def _all_good(self, mask: torch.Tensor, out: torch.Tensor, flag: Optional[torch.Tensor]) -> bool:
        if flag is None:
            return super()._all_good(mask, out, flag)
        value = flag.item()  # the one read back from the device
        if not math.isfinite(value):
            return False  # the repair raises for too few or non-finite results, or warns after an overflow
        warn_if_amplified(value, out.dtype)
        return True

    def _repair(self, flat: torch.Tensor, mask: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
        out = super()._repair(flat, mask, matrices)  # raises for too few or non-finite arrived results
        warn_if_amplified(float(amplification(matrices)), out.dtype)
        return out


def amplification(matrices: torch.Tensor) -> torch.Tensor:
    """The largest absolute row sum of linear maps ``matrices`` ``(B, M, n)`` (decode matrices ``(B, K, N)``, an
    encoder's ``(1, N, K)``), a float64 0-d tensor: the map of ``y + e`` differs from that of ``y`` by at most this
    times ``max |e|``."""
    return matrices.detach().abs().sum(dim=-1).amax().to(torch.float64)


def warn_if_amplified(value: float, dtype: torch.dtype, *, encoder: bool = False) -> None:
    """Warn (:class:`ConditioningWarning`) where an amplification ``value`` of LCC's decode (or, with ``encoder``,
    its encoder) exceeds ``u ** -0.5``, ``u`` the unit roundoff of ``dtype``. The message gives its power of ten, so
    that Python's default filter, which shows each distinct message once per call site, shows a few and not one per
    call."""
    roundoff = torch.finfo(dtype).eps / 2
    if value > roundoff**-0.5:
        power = math.floor(math.log10(value))
        step, data, remedy = (
            ("encoder", "inputs", "Chebyshev points (the default) keep it small")
            if encoder
            else ("decode", "results", "fewer stragglers, a lower degree, or GCC/BACC (bounded weights) decode stably")
        )
        warnings.warn(
            f"LCC's {step} amplifies errors in the {data} by more than 1e{power:+03d}"
            f"{'' if encoder else ' for this mask'} (the largest absolute row sum of its matrices): with {dtype} "
            f"{data} (unit roundoff {roundoff:.1e}) its values may be off by more than {10.0**power * roundoff:.0e} "
            f"times the largest of the {data}; {remedy}",
            ConditioningWarning,
            stacklevel=user_stacklevel(),
        )


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
        # the model path's dtype: equispaced points make the encoder's Runge growth exponential in K
        warn_if_amplified(float(amplification(self.encoder.matrix.unsqueeze(0))), torch.float32, encoder=True)
        self.decoder = LagrangeDecoder(
            alpha,
            beta,
            fit_degree=self.threshold - 1,
            min_arrived=self.threshold if below_threshold == "error" else 1,
            **self._decoder_options,
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, degree={self.degree}, threshold={self.threshold}"
