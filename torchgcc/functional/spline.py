"""Cubic smoothing splines as linear maps, batched over knot sets of different sizes, in the Reinsch form.

For knots ``t_1 < ... < t_n`` and data ``y_i`` the cubic smoothing spline is

    u = argmin (1/n) sum_i (y_i - u(t_i))^2 + lam * int u''(t)^2 dt,

a natural cubic spline with knots ``t`` (linear beyond the outermost knots). ``lam = 0`` gives the natural
interpolating spline. ``u`` is linear in ``y``, so its values at any points are ``D @ y`` for a matrix ``D`` that
depends only on the knots, the points and ``lam``; :func:`smoothing_spline_matrix` returns that matrix.

Following Green and Silverman (1994), with ``h_i = t_{i+1} - t_i``, the tridiagonal ``Q`` (n x n-2) of second
divided differences, the tridiagonal ``R`` (n-2 x n-2) and ``mu = n * lam``:

    (R + mu Q^T Q) gamma = Q^T y,      g = y - mu Q gamma,

where ``g`` are the fitted values and ``gamma`` the second derivatives at the interior knots. Between knots ``u`` is
the cubic in ``(g, gamma)``; outside it continues linearly. The row of ``D`` for a point ``x`` is
``v + Q M^-1 (c - mu Q^T v)``, ``M = R + mu Q^T Q``, where ``v`` and ``c`` hold the weights of the knot values and of
the interior second derivatives in the cubic at ``x`` (at most two entries each), so the solve has one right-hand
side per point.

:func:`padded_spline_matrices` is the batched core behind every spline code: knot sets of ``n_b`` knots padded to a
common width, their systems in one padded layout (:func:`spline_plan`, :func:`reinsch_bands`,
:mod:`torchgcc.functional.banded`), one solve for the whole batch, the same few dozen launches for any batch and no
reads back to the host. Everything is float64.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch

from torchgcc.checks import batch_shape, check_finite, check_nodes, check_real
from torchgcc.functional.banded import PentadiagonalPlan, pentadiagonal_plan, solve_pentadiagonal

__all__ = [
    "ReinschBands",
    "SplinePlan",
    "apply_q",
    "apply_qt",
    "check_lam",
    "padded_spline_matrices",
    "reinsch_bands",
    "smoothing_spline_matrix",
    "spline_plan",
]

Lam = Union[float, torch.Tensor]


class SplinePlan(NamedTuple):
    """The padded layout of smoothing-spline systems on knot sets of up to ``n`` knots, and its constants.

    Attributes:
        solve: the :func:`~torchgcc.functional.banded.pentadiagonal_plan` of the ``n - 2`` interior unknowns.
        width: ``size + 3`` knot slots: every set's knots, then padding knots (strictly increasing, beyond every
            evaluation point), so that each row of the system reads its three spacings without a pad.
        band_knots: ``(size, 3)`` int64, ``i + k + 2``: entry ``A[i, i + k]`` is in a set's own system iff that knot
            index is below the set's count (else identity rows).
        identity: ``(size, 3)`` float64, the bands of the identity.
        pair: ``(2, 1)`` int64 ``[0, 1]``; ``pair_offset``, ``pair_sign``: ``(2, 1)`` float64 ``[1, 0]``, ``[-1, 1]``.
        zero: ``()`` float64 zero; ``first``: ``()`` int64 zero.
    """

    solve: PentadiagonalPlan
    width: int
    band_knots: torch.Tensor
    identity: torch.Tensor
    pair: torch.Tensor
    pair_offset: torch.Tensor
    pair_sign: torch.Tensor
    zero: torch.Tensor
    first: torch.Tensor

    @property
    def size(self) -> int:
        return self.solve.size


def spline_plan(num_knots: int, device: Optional[torch.device] = None) -> SplinePlan:
    """The :class:`SplinePlan` of knot sets of up to ``num_knots >= 2`` knots."""
    solve = pentadiagonal_plan(max(num_knots - 2, 1), device)
    size = solve.size
    band_knots = torch.arange(size, device=device).view(-1, 1) + torch.arange(2, 5, device=device)
    identity = torch.zeros(size, 3, dtype=torch.float64, device=device)
    identity[:, 0] = 1.0
    pair = torch.tensor([[0], [1]], device=device)
    pair_offset = torch.tensor([[1.0], [0.0]], dtype=torch.float64, device=device)
    pair_sign = torch.tensor([[-1.0], [1.0]], dtype=torch.float64, device=device)
    zero = torch.zeros((), dtype=torch.float64, device=device)
    first = torch.zeros((), dtype=torch.int64, device=device)
    return SplinePlan(solve, size + 3, band_knots, identity, pair, pair_offset, pair_sign, zero, first)


class ReinschBands(NamedTuple):
    """The Reinsch system ``M = R + mu Q^T Q`` of padded knot sets in the layout of a :class:`SplinePlan`.

    Attributes:
        h: ``(B, size + 2, 1)`` knot spacings ``h_j = t_{j+1} - t_j``.
        inv_h: ``(B, size + 2, 1)`` their inverses; column ``j`` of ``Q`` (interior knot ``j + 1``) holds
            ``lo = inv_h[j]``, ``-mid = -(inv_h[j] + inv_h[j + 1])``, ``hi = inv_h[j + 1]`` in rows ``j``, ``j + 1``,
            ``j + 2``; ``lo``, ``mid``, ``hi`` ``(B, size, 1)``.
        bands: ``(B, size, 3)`` bands of ``M`` (identity in the rows ``j >= n - 2`` of each set: the format of
            :func:`torchgcc.functional.banded.solve_pentadiagonal`).
        rows: ``(B, size, 1)`` bool, the rows of each set's own system, ``j < n - 2``.
    """

    h: torch.Tensor
    inv_h: torch.Tensor
    lo: torch.Tensor
    mid: torch.Tensor
    hi: torch.Tensor
    bands: torch.Tensor
    rows: torch.Tensor


def reinsch_bands(
    knots: torch.Tensor,
    counts: torch.Tensor,
    mu: torch.Tensor,
    plan: SplinePlan,
    inverse_weights: Optional[torch.Tensor] = None,
) -> ReinschBands:
    """:class:`ReinschBands` of ``(B, W)`` strictly increasing knots whose first ``counts`` ``(B,)`` are each set's
    (the rest padding; ``W = plan.width``, or fewer: then padded here at unit spacing), for ``mu`` ``(B,)``.

    With ``inverse_weights`` ``(B, W)`` (``1 / w_i`` of the weighted objective ``(1/n) sum_i w_i (y_i - u(t_i))^2``),
    the system is ``R + mu Q^T W^-1 Q`` (Green and Silverman 1994, sec. 3.5)."""
    size, batch = plan.size, knots.shape[0]
    h = knots[:, 1:] - knots[:, :-1]
    if h.shape[-1] < size + 2:
        h = torch.nn.functional.pad(h, (0, size + 2 - h.shape[-1]), value=1.0)
    h = h.view(batch, size + 2, 1)
    inv_h = h.reciprocal()
    lo, hi, after = inv_h[:, :size], inv_h[:, 1 : size + 1], inv_h[:, 2:]  # Q[j, j], Q[j + 2, j], Q[j + 2, j + 2]
    mid = lo + hi  # -Q[j + 1, j]
    if inverse_weights is None:
        q_diag = (lo * lo).addcmul_(mid, mid).addcmul_(hi, hi)
        q_off1 = -hi * (mid + hi + after)
        q_off2 = hi * after
    else:  # Q's column j has rows j, j + 1, j + 2
        w = inverse_weights.to(torch.float64)
        if w.shape[-1] < size + 2:
            w = torch.nn.functional.pad(w, (0, size + 2 - w.shape[-1]), value=1.0)
        w = w.view(batch, size + 2, 1)
        w0, w1, w2 = w[:, :size], w[:, 1 : size + 1], w[:, 2:]
        q_diag = w0 * lo * lo + w1 * mid * mid + w2 * hi * hi
        q_off1 = -hi * (w1 * mid + w2 * (hi + after))
        q_off2 = w2 * hi * after
    mu = mu.view(-1, 1, 1)
    h_next = h[:, 1 : size + 1]
    bands = h.new_empty(batch, size, 3)  # written band by band (no stack: the same ops for every size)
    bands[..., :1] = torch.addcmul((h[:, :size] + h_next).mul_(1 / 3), mu, q_diag)
    bands[..., 1:2] = torch.addcmul(h_next * (1 / 6), mu, q_off1)
    bands[..., 2:] = mu * q_off2
    own = plan.band_knots < counts.view(-1, 1, 1)
    return ReinschBands(h, inv_h, lo, mid, hi, torch.where(own, bands, plan.identity), own[..., :1])


def apply_qt(bands: ReinschBands, y: torch.Tensor) -> torch.Tensor:
    """``Q^T y`` ``(B, size, r)`` for data ``y`` ``(B, W, r)`` at the knots (``W >= size + 2``). The rows past each
    set's system are not zero: mask them with ``bands.rows``."""
    size = bands.rows.shape[1]
    product = torch.addcmul(bands.lo * y[:, :size], bands.hi, y[:, 2 : size + 2])
    return product.addcmul_(bands.mid, y[:, 1 : size + 1], value=-1.0)


def apply_q(bands: ReinschBands, z: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out += Q z`` in place for ``z`` ``(B', size, r)`` (zero past each set's system) and ``out`` ``(B', W, r)``,
    ``W >= size + 2``; returns ``out``. ``B'`` may be a multiple of ``B``: each set's ``Q`` repeated over
    consecutive ``B' / B`` rows (candidates of one set)."""
    size = z.shape[1]
    repeats = z.shape[0] // bands.lo.shape[0]
    lo, mid, hi = (q.repeat_interleave(repeats, 0) if repeats > 1 else q for q in (bands.lo, bands.mid, bands.hi))
    out[:, :size].addcmul_(lo, z)
    out[:, 1 : size + 1].addcmul_(mid, z, value=-1.0)
    out[:, 2 : size + 2].addcmul_(hi, z)
    return out


def padded_spline_matrices(
    knots: torch.Tensor,
    counts: torch.Tensor,
    points: torch.Tensor,
    mu: torch.Tensor,
    plan: Optional[SplinePlan] = None,
) -> torch.Tensor:
    """Matrices mapping data at each set's knots to its smoothing spline's values at ``points``.

    Args:
        knots: ``(B, W)`` float64, strictly increasing; the first ``counts[b]`` of row ``b`` are its knots, the
            rest padding beyond every point (:func:`torchgcc.functional.survivors.compact_survivors` makes them).
            ``W = plan.width`` on the fast path; other widths are padded here.
        counts: ``(B,)`` knots per set, ``n >= 2`` (no check: fewer give meaningless values, never an error).
        points: ``(P,)`` or ``(B, P)`` float64 evaluation points (inside or outside the knots).
        mu: ``(B,)`` ``n * lam`` per set.
        plan: the :func:`spline_plan` of ``W`` knots (built here when None; callers decoding many batches keep it).

    Returns:
        ``(B, P, W)`` float64 (a transposed view), zero in the padding columns. No host reads, the same launches for
        any batch.
    """
    batch, width = knots.shape
    plan = spline_plan(width, knots.device) if plan is None else plan
    if width != plan.width:  # pad with knots beyond the last at unit spacing, cut the padding columns off below
        knots = torch.cat([knots, knots[:, -1:] + torch.arange(1, plan.width - width + 1, device=knots.device)], 1)
        return padded_spline_matrices(knots, counts, points, mu, plan)[..., :width]
    size = plan.size
    bands = reinsch_bands(knots, counts, mu, plan)
    # interval of each point, knots[idx] <= x < knots[idx + 1], clamped to the set's end intervals
    x = points.expand(batch, -1).contiguous()
    idx = torch.clamp(torch.searchsorted(knots, x, right=True).sub_(1), max=(counts - 2).view(-1, 1)).clamp_(plan.first)
    ends = idx.view(batch, 1, -1) + plan.pair  # (B, 2, P): knots idx and idx + 1
    t = knots.gather(1, ends.view(batch, -1)).view(ends.shape)
    left = t[:, :1]
    h = t[:, 1:] - left  # (B, 1, P)
    # the weights of the fitted values at knots idx and idx + 1 (B, 2, P), 1 - b and b = (x - t_idx) / h ...
    ab = torch.addcmul(plan.pair_offset, plan.pair_sign, (x.view(batch, 1, -1) - left).div_(h))
    # ... and of the second derivatives there: (a^3 - a) h^2 / 6 inside the knots; beyond them the natural spline
    # is the chord plus the end slope, a line: -a h^2 / 6 (outside iff a b < 0, as a + b = 1)
    outside = ab.prod(dim=1, keepdim=True) < 0.0
    weights = (ab * ab).sub_(1.0).masked_fill_(outside, -1.0).mul_(ab).mul_((h * h).mul_(1 / 6))
    # in the (B, W, P) knot layout: v of the knot values, c of the second derivatives (knot j + 1 is interior row j);
    # the right-hand sides are c - mu Q^T v, the rows of D^T are v + Q M^-1 (c - mu Q^T v)
    v = knots.new_full((batch, plan.width, x.shape[-1]), 0.0).scatter_(1, ends, ab)
    c = knots.new_full((batch, plan.width, x.shape[-1]), 0.0).scatter_(1, ends, weights)
    rhs = torch.addcmul(c[:, 1 : size + 1], mu.view(-1, 1, 1), apply_qt(bands, v), value=-1.0)
    z = solve_pentadiagonal(bands.bands, torch.where(bands.rows, rhs, plan.zero), plan.solve)  # zero in the padding
    out = v.clone() if v.requires_grad else v  # autograd saved v for Q^T v
    return apply_q(bands, z, out).transpose(1, 2)


def check_lam(lam: object, device: Optional[torch.device] = None) -> torch.Tensor:
    """``lam`` as a float64 tensor on ``device`` if it is a finite real number ``>= 0`` or a tensor of them, else a
    one-line ``TypeError`` / ``ValueError`` naming ``lam``. One host read for a tensor, none for a number."""
    value = check_finite(lam, "lam", low=0.0) if isinstance(lam, torch.Tensor) else check_real("lam", lam, low=0.0)
    return torch.as_tensor(value, dtype=torch.float64, device=device)


def smoothing_spline_matrix(knots: torch.Tensor, points: torch.Tensor, lam: Lam = 0.0) -> torch.Tensor:
    """Matrix mapping data at ``knots`` to the smoothing spline's values at ``points``.

    Args:
        knots: ``(..., n)`` finite, strictly increasing knots, ``n >= 2``.
        points: ``(..., P)`` finite evaluation points (any order, inside or outside the knots; ``P = 0`` gives an
            empty matrix).
        lam: smoothing parameter ``>= 0`` of the mean-normalised objective above; a finite real number or a tensor
            that broadcasts against the batch shape ``...`` (:func:`check_lam`).

    Raises ``TypeError`` / ``ValueError`` naming the argument otherwise (tensors of real numbers only: not lists,
    bool or complex; batch shapes that do not broadcast). The checks read three flags back from the device (the
    knots, the points, a tensor ``lam``).

    Returns:
        ``(..., P, n)`` float64 matrix ``D`` with ``u(points) = D @ y``. Rows sum to one and straight lines are
        reproduced exactly. Equals ``scipy.interpolate.make_smoothing_spline(knots, I, lam=n * lam)(points)``
        between the outermost knots.

    >>> knots = torch.linspace(-1, 1, 6, dtype=torch.float64)
    >>> points = torch.tensor([-0.5, 0.25, 1.5], dtype=torch.float64)
    >>> matrix = smoothing_spline_matrix(knots, points, lam=1e-2)  # (P, n) = (3, 6)
    >>> torch.allclose(matrix @ (3 * knots + 1), 3 * points + 1)  # a line is its own smoothing spline
    True
    """
    knots = check_nodes(knots, "knots", order="increasing")
    points = check_nodes(points, "points")
    lam = check_lam(lam, knots.device)
    n = knots.shape[-1]
    if n < 2:
        raise ValueError(f"a cubic smoothing spline needs at least 2 knots, got {n}")
    batch = batch_shape(knots=knots.shape[:-1], points=points.shape[:-1], lam=lam.shape)
    if points.shape[-1] == 0:
        return knots.new_zeros(batch + (0, n))
    flat_knots = knots.expand(batch + (n,)).reshape(-1, n)
    flat_points = points.expand(batch + points.shape[-1:]).reshape(-1, points.shape[-1])
    mu = (n * lam).expand(batch).reshape(-1)
    counts = torch.full((flat_knots.shape[0],), n, device=knots.device)
    matrix = padded_spline_matrices(flat_knots, counts, flat_points, mu)
    return matrix.reshape(batch + (points.shape[-1], n))
