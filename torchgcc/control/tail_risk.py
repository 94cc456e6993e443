"""A Beta posterior on the probability that one unit (a rollout, a worker) exceeds the straggler threshold."""

from __future__ import annotations

import math
from collections.abc import Sized
from typing import Any

import torch

from torchgcc.checks import check_integer, check_real

__all__ = ["BetaTailRisk", "beta_binomial_sf"]


def beta_binomial_sf(at_least: torch.Tensor, trials: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """``P(X >= at_least)`` for ``X ~ BetaBinomial(trials, alpha, beta)``, elementwise, float64.

    ``pmf(x) = C(n, x) B(x + alpha, n - x + beta) / B(alpha, beta)``, summed in log space up to ``max(trials)``.
    ``at_least <= 0`` gives 1 and ``at_least > trials`` gives 0.

    Raises:
        ValueError: ``alpha`` or ``beta`` is not a finite number > 0, ``trials`` holds a value that is not an
            integer >= 0, or ``at_least`` one that is not an integer (NaN included).
        TypeError: ``alpha`` or ``beta`` is not a real number.
    """
    alpha = check_real("alpha", alpha, low=0, low_open=True)
    beta = check_real("beta", beta, low=0, low_open=True)
    at_least = _integer_counts("at_least", at_least)
    trials = _integer_counts("trials", trials, minimum=0)
    at_least, trials = torch.broadcast_tensors(at_least, trials)
    x = torch.arange(int(trials.max().item()) + 1 if trials.numel() else 1, dtype=torch.float64)
    n = trials.unsqueeze(-1)
    lgamma = torch.lgamma
    log_pmf = (
        lgamma(n + 1)
        - lgamma(x + 1)
        - lgamma((n - x).clamp_min(0) + 1)
        + lgamma(x + alpha)
        + lgamma((n - x).clamp_min(0) + beta)
        - lgamma(n + alpha + beta)
        - (math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta))
    )
    keep = (x <= n) & (x >= at_least.unsqueeze(-1))
    return torch.where(keep, log_pmf.exp(), torch.zeros((), dtype=torch.float64)).sum(-1).clamp(0.0, 1.0)


def _integer_counts(name: str, value: torch.Tensor, minimum: float = -math.inf) -> torch.Tensor:
    """``value`` as a float64 tensor if every entry is an integer >= ``minimum``, else a ValueError naming ``name``."""
    counts = torch.as_tensor(value, dtype=torch.float64)
    bad = counts[(counts != counts.round()) | (counts < minimum) | ~torch.isfinite(counts)]
    if bad.numel():
        bound = "" if minimum == -math.inf else f" >= {minimum:g}"
        raise ValueError(f"{name} must hold integers{bound}, got {float(bad[0]):g} among its values")
    return counts


class BetaTailRisk:
    """Posterior ``q ~ Beta(alpha, beta)`` of the per-unit exceedance probability, learned from observed durations.

    Every observed unit that exceeded the threshold adds 1 to ``alpha``, every other one adds 1 to ``beta``. Before
    each update the data part of both counts is multiplied by ``discount`` (exponential forgetting with a memory of
    about ``1 / (1 - discount)`` updates), so the estimate follows a tail that changes during the run; the prior
    pseudo-counts are never forgotten.

    The predicted probability that at least ``m`` of ``n`` units exceed is the posterior predictive
    ``P(X >= m)``, ``X ~ BetaBinomial(n, alpha, beta)`` (:func:`beta_binomial_sf`): it integrates over the
    uncertainty in ``q`` instead of plugging in the mean, so it is cautious while few units have been seen.

    Args:
        prior: the prior pseudo-counts ``(alpha0, beta0)``, both > 0.
        discount: forgetting factor in ``(0, 1]`` (1: never forget).
    """

    def __init__(self, prior: tuple[float, float] = (1.0, 1.0), *, discount: float = 0.98) -> None:
        if isinstance(prior, (str, bytes)) or not isinstance(prior, Sized) or len(prior) != 2:
            raise TypeError(f"prior must be two positive pseudo-counts (alpha0, beta0), got {prior!r}")
        self.prior = (
            check_real("prior[0] (alpha0)", prior[0], low=0, low_open=True),
            check_real("prior[1] (beta0)", prior[1], low=0, low_open=True),
        )
        self.discount = check_real("discount", discount, low=0, low_open=True, high=1)
        self.exceeded = 0.0  # discounted data counts
        self.within = 0.0

    @property
    def alpha(self) -> float:
        return self.prior[0] + self.exceeded

    @property
    def beta(self) -> float:
        return self.prior[1] + self.within

    @property
    def mean(self) -> float:
        """Posterior mean of q."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def observations(self) -> float:
        """The discounted number of units seen."""
        return self.exceeded + self.within

    def update(self, exceeded: int, total: int) -> None:
        """Add one step's observation: ``exceeded`` of ``total`` units were over the threshold (integers,
        ``0 <= exceeded <= total``)."""
        total = check_integer("total", total, minimum=0)
        exceeded = check_integer("exceeded", exceeded, minimum=0, maximum=total)
        self.exceeded = self.discount * self.exceeded + exceeded
        self.within = self.discount * self.within + (total - exceeded)

    def forget(self) -> None:
        """Drop the data counts and keep the prior (after a detected change of the tail)."""
        self.exceeded = self.within = 0.0

    def probability_at_least(self, at_least: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
        """Posterior predictive ``P(at least `at_least` of `units` units exceed)``, elementwise, float64."""
        return beta_binomial_sf(at_least, units, self.alpha, self.beta)

    def state_dict(self) -> dict[str, Any]:
        return {"prior": list(self.prior), "discount": self.discount, "exceeded": self.exceeded, "within": self.within}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prior = (float(state["prior"][0]), float(state["prior"][1]))
        self.discount = float(state["discount"])
        self.exceeded, self.within = float(state["exceeded"]), float(state["within"])

    def __repr__(self) -> str:
        return f"BetaTailRisk(alpha={self.alpha:.3g}, beta={self.beta:.3g}, discount={self.discount})"
