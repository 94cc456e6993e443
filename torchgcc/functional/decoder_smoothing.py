"""The default decoder smoothing: generalized cross-validation pooled over groups, corrected for the gap it predicts
across.

GCV (:func:`torchgcc.functional.gcv.gcv_scores`) scores a smoothing by how well the fit to the other results predicts
each left-out result; a left-out worker's result sits in a gap of two worker spacings between its neighbours. The
decoder predicts at the regression points, which sit within a gap of one spacing between arrived workers. A cubic
smoothing spline with parameter ``lam`` averages the data over a length proportional to ``lam^(1/4)`` (its
equivalent kernel; Silverman, Ann. Statist. 1984). The left-out error of the interpolating fit has two parts:

- the error of bridging the gap, for exact smooth results (GCC's setting). It and the bias of the averaging both
  scale as the fourth power of their lengths, so the averaging length that balances them is proportional to the gap:
  the decoder's is :data:`LEFT_OUT_GAP` (= 2) times shorter than GCV's, the bandwidth ratio ``r`` of
  :func:`torchgcc.codes.gcc.spacing_lambda` halved (``lam / 16``);
- noise (low precision, stochastic models, or a model rough at a scale below the worker spacing). The averaging
  length that balances noise against bias does not depend on the gap: GCV's choice is the decoder's.

Smoothing removes noise, not the error of bridging a gap, so the share of GCV's score at interpolation that its best
smoothing removes, ``rho = 1 - V(r*) / V(0)``, measures the noise's share; the rule takes the bandwidth between the two
answers in that proportion, geometrically (the error is a function of the logarithm of the bandwidth):

    r = r* / LEFT_OUT_GAP ** (1 - rho),

halving the GCV minimiser ``r*`` for exact results (``rho = 0``) and keeping it for pure noise (``rho -> 1``).

Only groups whose scores depend on ``lam`` count: with fewer than four results the GCV score of a cubic smoothing
spline does not depend on ``lam`` (the fit has at most one interior second derivative), nor for results on a line.
Without any such group the rule interpolates (``r = 0``): for exact results the interpolating natural spline is the
optimal recovery in the second-order Sobolev space, GCC's own setting.

GCV scores the fit at the workers' coded points; the decoder is read at the regression points, where the results are
the model's outputs at the data themselves. When a calibration batch's uncoded outputs are known (a ``CodedModule``
has the model: its first forward of an uncalibrated decoder and :meth:`torchgcc.CodedModule.calibrate` compute them),
:func:`validated_ratio` chooses by the decode error itself, the criterion the ratio is for: each group's squared
error at every candidate, as a share of its error at interpolation (natural-spline GCC), so that each group weighs
alike, and the candidate with the least mean share over the groups (validation on held-out truth; the GCV choice is
a candidate too). A model whose outputs are rough between its inputs (a transformer's logits) is where the two
disagree: GCV reads the roughness at the coded points as signal and under-smooths.
"""

from __future__ import annotations

import torch

__all__ = ["LEFT_OUT_GAP", "SAME_SCORE", "informative_groups", "pooled_gcv_ratio", "validated_ratio"]

#: The gap, in worker spacings, across which GCV predicts a left-out result (the decoder predicts within one).
LEFT_OUT_GAP = 2.0

#: Scores of one group that differ by less than this, relative, are the same: square root of float64's epsilon, half
#: the digits (a constant row computed in float64 varies by about 1e-15; a candidate whose score differs by 1e-8
#: relative is not a choice either way).
SAME_SCORE = torch.finfo(torch.float64).eps ** 0.5


def informative_groups(scores: torch.Tensor) -> torch.Tensor:
    """``(G,)`` bool: the groups whose GCV scores ``(G, L)`` are finite and not the same for every candidate (to
    :data:`SAME_SCORE` relative)."""
    finite = torch.isfinite(scores).all(dim=-1)
    safe = torch.where(finite.unsqueeze(-1), scores, 0.0)
    high, low = safe.amax(dim=-1), safe.amin(dim=-1)
    return finite & (high - low > SAME_SCORE * high.abs())


def pooled_gcv_ratio(
    scores: torch.Tensor, ratios: torch.Tensor, left_out_gap: float | torch.Tensor = LEFT_OUT_GAP
) -> torch.Tensor:
    """The decoder's bandwidth ratio (module docstring) from the GCV scores ``(G, L)`` of ``G`` groups for the ``L``
    candidate ratios ``ratios`` ``(L,)``, ascending (from 0, interpolation, as :data:`torchgcc.codes.gcc.GCV_RATIOS`;
    otherwise the smallest candidate stands in for it); scores of normalised results, so that each group weighs
    alike. The mean score ``V`` over the informative groups gives ``r*`` (its minimiser) and
    ``rho = 1 - V(r*) / V(0)``; the ratio is ``r* / left_out_gap ** (1 - rho)`` (the default's gap,
    :data:`LEFT_OUT_GAP`, is that of evenly spaced workers), 0 (interpolation) without any informative group. A
    float64 0-d tensor; no host reads."""
    informative = informative_groups(scores)
    kept = torch.where(informative.unsqueeze(-1), scores, 0.0)
    mean = kept.sum(dim=0) / informative.sum().clamp_min(1)
    best = mean.argmin()
    removed = (1 - mean[best] / mean[0]).clamp(0.0, 1.0)  # mean[0]: the score at interpolation (ratio 0)
    chosen = ratios.to(torch.float64)[best] / left_out_gap ** (1 - removed)
    return torch.where(informative.any(), chosen, torch.zeros((), dtype=torch.float64, device=scores.device))


def validated_ratio(errors: torch.Tensor, candidates: torch.Tensor, proposed: int) -> torch.Tensor:
    """The ratio a calibration batch with known outputs validates (module docstring): the candidate minimising
    ``mean_g errors[g, l] / errors[g, 0]`` over the groups ``g`` with ``errors[g, 0] > 0``.

    Args:
        errors: ``(G, L)`` each group's squared decode error against its uncoded outputs at each candidate.
        candidates: ``(L,)`` the candidate ratios; the first is interpolation (ratio 0) or stands in for it: each
            group's errors are taken as shares of its error there.
        proposed: the index of the choice made without the outputs (GCV's), kept when fewer than two groups count.

    Returns:
        A float64 0-d tensor: the candidate with the least mean share over the groups (the first of equal ones).
        Groups decoded exactly at interpolation (error 0: no share) do not count; with fewer than two counting
        groups (one group's errors are no sample to validate on) ``candidates[proposed]``. No host reads.
    """
    errors = errors.to(torch.float64)
    counted = errors[:, 0] > 0  # (G,)
    shares = torch.where(counted.unsqueeze(-1), errors / torch.where(counted, errors[:, 0], 1.0).unsqueeze(-1), 0.0)
    count = counted.sum()
    best = (shares.sum(dim=0) / count.clamp_min(1)).argmin()
    values = candidates.to(device=errors.device, dtype=torch.float64)
    return torch.where(count >= 2, values[best], values[proposed])
