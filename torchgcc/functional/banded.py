"""Batched solves with symmetric positive-definite pentadiagonal matrices, in a fixed number of launches.

The smoothing-spline systems of :mod:`torchgcc.functional.spline` are pentadiagonal. A factorisation along the band
is O(m) work but m sequential steps (a Python loop of launches); a dense Cholesky is a few launches but O(m^3) work.
:func:`solve_pentadiagonal` takes the middle road, one level of nested dissection: the unknowns are split into
``blocks`` interior blocks of ``width`` unknowns, each followed by a separator pair (with a bandwidth of two, a pair
decouples the unknowns before it from those after it). One batched dense Cholesky factors every interior block of
every system; a second factors the separators' Schur complement, a small dense SPD matrix. The solve is then the
same few dozen launches for any batch, its work about ``m (width^2 + 4 r)`` per system for ``r`` right-hand sides
plus ``(2 blocks)^3`` for the separators, and it is differentiable by autograd.

The systems are given in the plan's padded layout (:class:`PentadiagonalPlan`): ``size >= m`` unknowns, the rows
past a system's own size identity rows (diagonal 1, no couplings, zero right-hand side), so that systems of
different sizes share one batch and their solutions are zero in the padding.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

__all__ = [
    "PentadiagonalFactor",
    "PentadiagonalPlan",
    "factor_pentadiagonal",
    "pentadiagonal_plan",
    "solve_factored",
    "solve_pentadiagonal",
    "trace_of_inverse_product",
]

#: Largest interior block: a batched dense Cholesky costs O(width^3), the separators' system O(blocks^3).
MAX_BLOCK = 46


class PentadiagonalPlan(NamedTuple):
    """The nested-dissection layout of systems of up to ``m`` unknowns: ``blocks`` blocks of ``width`` interior
    unknowns, each followed by a separator pair (the last block's pair is padding), ``size = blocks * (width + 2)``.

    Attributes:
        entries: ``(E,)`` positions in ``cat([diag, off1, off2])`` (each ``(B, size)``) of every matrix entry the
            solve reads, with ``present``, ``(E,)`` bool, False where the entry is zero (outside the band): first
            each block's ``width x width`` interior matrix, then its ``width x 4`` couplings to the separator before
            it and the one after it, then each separator's ``2 x 2`` matrix.
        schur: ``(blocks * 16,)`` flat positions in the ``(2 blocks + 2)^2`` separator matrix (two leading dummy
            rows and columns stand for the separator before block 0) of each block's ``4 x 4`` Schur term;
            ``separator_rows``: ``(blocks * 4,)`` rows there of each block's two separators.
    """

    m: int
    blocks: int
    width: int
    entries: torch.Tensor
    present: torch.Tensor
    schur: torch.Tensor
    separator_rows: torch.Tensor

    @property
    def size(self) -> int:
        return self.blocks * (self.width + 2)


def pentadiagonal_plan(m: int, device: Optional[torch.device] = None) -> PentadiagonalPlan:
    """The layout for systems of up to ``m >= 1`` unknowns: the fewest blocks of at most :data:`MAX_BLOCK`."""
    if m < 1:
        raise ValueError(f"a pentadiagonal system needs at least one unknown, got m={m}")
    blocks = max(1, math.ceil((m + 2) / (MAX_BLOCK + 2)))
    width = max(2, math.ceil((m - 2 * (blocks - 1)) / blocks))
    size = blocks * (width + 2)
    start = torch.arange(blocks).view(-1, 1, 1) * (width + 2)

    def locate(rows: torch.Tensor, columns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions of ``A[rows, columns]`` in cat([diag, off1, off2]) and whether they lie in the band."""
        low, high = torch.minimum(rows, columns), torch.maximum(rows, columns)
        band = high - low
        present = (band <= 2) & (low >= 0) & (high < size)
        return torch.where(present, band.clamp(max=2) * size + low.clamp(min=0), 0).flatten(), present.flatten()

    rows = torch.arange(width).view(1, -1, 1)
    separator = torch.tensor([-2, -1, width, width + 1]).view(1, 1, -1)
    pairs = torch.tensor([width, width + 1])
    located = [
        locate(start + rows, start + rows.mT),  # (blocks, width, width)
        locate(start + rows, start + separator),  # (blocks, width, 4)
        locate(start + pairs.view(1, 2, 1), start + pairs.view(1, 1, 2)),  # (blocks, 2, 2)
    ]
    corner = 2 * torch.arange(blocks).view(-1, 1)  # block j's separators sit at rows 2j .. 2j + 3 (dummy offset 2)
    four = corner + torch.arange(4)
    return PentadiagonalPlan(
        m=m,
        blocks=blocks,
        width=width,
        entries=torch.cat([index for index, _ in located]).to(device),
        present=torch.cat([present for _, present in located]).to(device),
        schur=(four.unsqueeze(-1) * (2 * blocks + 2) + four.unsqueeze(-2)).flatten().to(device),
        separator_rows=four.flatten().to(device),
    )


class PentadiagonalFactor(NamedTuple):
    """The nested-dissection factors of a batch of SPD pentadiagonal systems (:func:`factor_pentadiagonal`).

    Attributes:
        plan: the layout.
        blocks: ``(B, nb, w, w)`` Cholesky factors ``L_j`` of the interior blocks.
        coupling: ``(B, nb, w, 4)`` ``L_j^-1 C_j``, the blocks' couplings to their two separator pairs.
        schur: ``(B, 2 nb, 2 nb)`` Cholesky factor of the separators' Schur complement.
    """

    plan: PentadiagonalPlan
    blocks: torch.Tensor
    coupling: torch.Tensor
    schur: torch.Tensor


def _gather(plan: PentadiagonalPlan, diag: torch.Tensor, off1: torch.Tensor, off2: torch.Tensor):
    """The interior blocks ``(B, nb, w, w)``, couplings ``(B, nb, w, 4)`` and separator blocks ``(B, nb, 2, 2)`` of a
    pentadiagonal matrix given by its bands in the plan's layout."""
    batch, size = diag.shape
    if size != plan.size or off1.shape != diag.shape or off2.shape != diag.shape:
        raise ValueError(
            f"bands {tuple(diag.shape)}, {tuple(off1.shape)}, {tuple(off2.shape)} do not fit the plan's padded size "
            f"{plan.size}"
        )
    nb, width = plan.blocks, plan.width
    values = torch.where(plan.present, torch.cat([diag, off1, off2], 1)[:, plan.entries], 0.0)
    interior, coupling, separator = values.split([nb * width * width, nb * width * 4, nb * 4], 1)
    return interior.view(batch, nb, width, width), coupling.view(batch, nb, width, 4), separator.view(batch, nb, 2, 2)


def factor_pentadiagonal(
    diag: torch.Tensor, off1: torch.Tensor, off2: torch.Tensor, plan: PentadiagonalPlan
) -> PentadiagonalFactor:
    """Factor SPD pentadiagonal matrices given by their bands in the padded layout of ``plan``.

    Args:
        diag: ``(B, size)`` main diagonal (1 in the padding).
        off1: ``(B, size)`` first super-diagonal, ``off1[:, i] = A[i, i + 1]`` (0 where ``i + 1`` is padding).
        off2: ``(B, size)`` second super-diagonal, ``off2[:, i] = A[i, i + 2]`` (0 likewise).
        plan: :func:`pentadiagonal_plan` of the systems.

    No pivoting and no check: the matrices must be positive definite (a non-positive pivot gives NaN rather than an
    error, so the factorisation never reads back from the device).
    """
    interior, coupling, separator = _gather(plan, diag, off1, off2)
    batch, nb = diag.shape[0], plan.blocks
    blocks = torch.linalg.cholesky_ex(interior).L
    solved = torch.linalg.solve_triangular(blocks, coupling, upper=False)  # L^-1 C
    # the separators' Schur complement S = A_SS - sum_j (L^-1 C_j)^T (L^-1 C_j), over 2 nb + 2 rows: two leading
    # dummy rows stand for the (missing) separator before block 0, whose couplings are zero
    side = 2 * nb + 2
    terms = -(solved.mT @ solved)
    terms[..., 2:, 2:] += separator  # block j's own separator, the pair after it
    schur = diag.new_zeros(batch, side * side).index_add(1, plan.schur, terms.flatten(1))
    return PentadiagonalFactor(
        plan, blocks, solved, torch.linalg.cholesky_ex(schur.view(batch, side, side)[:, 2:, 2:]).L
    )


def solve_factored(factor: PentadiagonalFactor, rhs: torch.Tensor) -> torch.Tensor:
    """``A^-1 rhs`` for ``rhs`` ``(B, size, r)`` (0 in the padding) given the :class:`PentadiagonalFactor` of ``A``;
    returns ``(B, size, r)``, zero in the padding."""
    plan = factor.plan
    batch, nb, width, r = rhs.shape[0], plan.blocks, plan.width, rhs.shape[-1]
    b = rhs.view(batch, nb, width + 2, r)
    inner = torch.linalg.solve_triangular(factor.blocks, b[:, :, :width], upper=False)  # L^-1 b_I
    reduced = rhs.new_zeros(batch, 2 * nb + 2, r).index_add(
        1, plan.separator_rows, -(factor.coupling.mT @ inner).flatten(1, 2)
    )
    reduced = reduced[:, 2:] + b[:, :, width:].reshape(batch, 2 * nb, r)
    x_sep = _cholesky_solve(factor.schur, reduced)
    around = torch.nn.functional.pad(x_sep, (0, 0, 2, 0)).unfold(1, 4, 2)  # (B, nb, r, 4): the pairs of block j
    x_int = torch.linalg.solve_triangular(factor.blocks.mT, inner - factor.coupling @ around.mT, upper=True)
    return torch.cat([x_int, x_sep.view(batch, nb, 2, r)], 2).view(batch, plan.size, r)


def solve_pentadiagonal(
    diag: torch.Tensor, off1: torch.Tensor, off2: torch.Tensor, rhs: torch.Tensor, plan: PentadiagonalPlan
) -> torch.Tensor:
    """Solve ``A x = rhs`` for SPD pentadiagonal ``A`` given by its bands in the padded layout of ``plan`` (see
    :func:`factor_pentadiagonal`); ``rhs`` ``(B, size, r)``, 0 in the padding. Returns ``(B, size, r)``."""
    if rhs.shape[:2] != diag.shape:
        raise ValueError(f"right-hand side {tuple(rhs.shape)} does not fit bands {tuple(diag.shape)}")
    return solve_factored(factor_pentadiagonal(diag, off1, off2, plan), rhs)


def trace_of_inverse_product(
    factor: PentadiagonalFactor, diag: torch.Tensor, off1: torch.Tensor, off2: torch.Tensor
) -> torch.Tensor:
    """``tr(M^-1 A)`` ``(B,)`` for the factored ``M`` and a symmetric pentadiagonal ``A`` given by its bands (in the
    same layout, zero in the padding), from the entries of ``M^-1`` within ``A``'s band only (selected inversion).

    With ``Z_j = A_jj^-1 C_j`` and ``Sigma = S^-1``: ``(M^-1)_SS = Sigma``, ``(M^-1)_IS = -Z Sigma`` and
    ``(M^-1)_II = A_II^-1 + Z Sigma Z^T``, block by block (every entry of the band lies in one block's interior and
    its two separator pairs).
    """
    plan = factor.plan
    batch, nb, width = factor.blocks.shape[0], plan.blocks, plan.width
    a_int, a_coup, a_sep = _gather(plan, diag, off1, off2)
    eye = torch.eye(2 * nb, dtype=factor.schur.dtype, device=factor.schur.device)
    sigma = _cholesky_solve(factor.schur, eye.expand(batch, -1, -1))  # S^-1 (B, 2 nb, 2 nb)
    local = torch.nn.functional.pad(sigma, (2, 0, 2, 0)).flatten(1)[:, plan.schur].view(batch, nb, 4, 4)
    z = torch.linalg.solve_triangular(factor.blocks.mT, factor.coupling, upper=True)  # A_jj^-1 C_j
    inverse = _cholesky_solve(factor.blocks, torch.eye(width, dtype=z.dtype, device=z.device).expand_as(factor.blocks))
    inv_ii = inverse + z @ local @ z.mT
    inv_is = -(z @ local)
    return (
        (a_int * inv_ii).sum((1, 2, 3))
        + 2 * (a_coup * inv_is).sum((1, 2, 3))
        + (a_sep * local[..., 2:, 2:]).sum((1, 2, 3))
    )


def _cholesky_solve(factor: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``(L L^T)^-1 rhs`` by two triangular solves (``torch.cholesky_solve`` reads an error flag back to the host)."""
    return torch.linalg.solve_triangular(factor.mT, torch.linalg.solve_triangular(factor, rhs, upper=False), upper=True)
