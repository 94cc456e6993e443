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
:func:`validated_ratio` chooses by the decode error itself, the criterion the ratio is for: the candidate (the GCV
choice among them) with the least squared error over the calibration groups, each group decoded under its own
straggler set and under :data:`VALIDATION_DRAWS` more drawn uniformly with its number of stragglers
(:func:`drawn_masks`; the decoder then needs every worker's result of those groups, the stragglers' too), or the
least smoothing within one standard error of it (a gain the groups' spread cannot tell from noise is no reason to
smooth). One straggler set per group is a poor sample of where stragglers fall: a group's error depends strongly on
the gaps its stragglers leave, so the choice then follows a few groups' sets (and weighing every group alike, as an
earlier rule did, trades that noise for a bias toward the groups whose sets left no large gap). A model whose
outputs are rough between its inputs (a transformer's logits) is where validation and GCV disagree: GCV reads the
roughness at the coded points as signal and under-smooths.
"""

from __future__ import annotations

import torch

__all__ = [
    "LEFT_OUT_GAP",
    "SAME_SCORE",
    "VALIDATION_DRAWS",
    "VALIDATION_SEED",
    "drawn_masks",
    "informative_groups",
    "pooled_gcv_ratio",
    "validated_ratio",
]

#: The gap, in worker spacings, across which GCV predicts a left-out result (the decoder predicts within one).
LEFT_OUT_GAP = 2.0

#: Scores of one group that differ by less than this, relative, are the same: square root of float64's epsilon, half
#: the digits (a constant row computed in float64 varies by about 1e-15; a candidate whose score differs by 1e-8
#: relative is not a choice either way).
SAME_SCORE = torch.finfo(torch.float64).eps ** 0.5

#: Straggler sets drawn per calibration group, beside its own, when a validated calibration measures the decode error
#: (:func:`drawn_masks`): a Monte Carlo average over where the stragglers fall. Its error shrinks as one over the
#: square root of the sets per group, and a calibration decodes ``1 + VALIDATION_DRAWS`` sets per group and candidate.
VALIDATION_DRAWS = 64
#: The seed of those draws (a CPU generator): a calibration is a function of its batch.
VALIDATION_SEED = 0


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


def drawn_masks(mask: torch.Tensor, draws: int, generator: torch.Generator) -> torch.Tensor:
    """``(draws * G, N)`` bool: ``draws`` straggler sets for each of the ``G`` groups of ``mask`` ``(G, N)``, each
    uniform among the sets with as many arrived results as that group has (row ``d * G + g`` is group ``g``'s ``d``-th
    draw), on ``mask``'s device. ``generator`` is a CPU ``torch.Generator`` (the draws do not depend on the device)."""
    groups, workers = mask.shape
    scores = torch.rand(draws * groups, workers, generator=generator, dtype=torch.float64).to(mask.device)
    ranks = scores.argsort(dim=-1).argsort(dim=-1)  # a uniform random permutation of the workers per row
    return ranks < mask.sum(dim=-1).repeat(draws).unsqueeze(-1)


def validated_ratio(errors: torch.Tensor, candidates: torch.Tensor, proposed: int) -> torch.Tensor:
    """The ratio a calibration batch with known outputs validates (module docstring): the least smoothing among the
    candidates whose total error ``T_l = sum_g errors[g, l]`` is within one standard error of the least total
    ``T_m``,

        T_l - T_m <= sqrt(G) * std_g(errors[g, l] - errors[g, m])

    (the one-standard-error rule: the standard error of the paired difference of the totals over the ``G`` groups),
    so that smoothing away from interpolation, GCC's noiseless optimum, must show a gain beyond the groups' noise.

    Args:
        errors: ``(G, L)`` each group's squared decode error against its uncoded outputs at each candidate, summed
            over the straggler sets it was decoded under (its own and :func:`drawn_masks`').
        candidates: ``(L,)`` the candidate ratios (in any order: the least smoothing is the least ratio).
        proposed: the index of the choice made without the outputs (GCV's), kept for fewer than two groups.

    Returns:
        A float64 0-d tensor: that candidate's ratio; ``candidates[proposed]`` with fewer than two groups (one group's
        samples are no sample of the model's inputs, nor a spread) or where an error is not finite. No host reads.
    """
    errors = errors.to(torch.float64)
    values = candidates.to(device=errors.device, dtype=torch.float64)
    if len(errors) < 2:
        return values[proposed]
    totals = errors.sum(dim=0)
    least = totals.argmin()
    paired = errors - errors[:, least].unsqueeze(-1)  # (G, L): each group's excess over the least total's candidate
    within = totals - totals[least] <= paired.std(dim=0) * len(errors) ** 0.5
    return torch.where(torch.isfinite(errors).all(), torch.where(within, values, torch.inf).min(), values[proposed])
