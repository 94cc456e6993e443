"""Batched solves with symmetric positive-definite pentadiagonal matrices, in a fixed number of launches.

The smoothing-spline systems of :mod:`torchgcc.functional.spline` are pentadiagonal. A factorisation along the band
is O(m) work but m sequential steps (a Python loop of launches); a dense solve is a few launches but O(m^3) work.
:func:`solve_pentadiagonal` takes the middle road, one level of nested dissection: the unknowns are split into
``blocks`` interior blocks of ``width`` unknowns, each followed by a separator pair (with a bandwidth of two, a pair
decouples the unknowns before it from those after it). One batched dense solve gives every interior block's
``A_jj^-1 [C_j, b_j]`` (its couplings to its two separator pairs and its right-hand sides) in every system; a second
solves the separators' Schur complement, a small dense SPD system; the interiors follow by one product. The solve is
the same two dozen launches for any batch, its work about ``m (width^2 + 4 r)`` per system for ``r`` right-hand
sides plus ``(2 blocks)^3`` for the separators, and it is differentiable by autograd. (Batched LU with partial
pivoting on the SPD blocks: one LAPACK call each, without the error flag that ``torch.linalg.cholesky`` and
``cholesky_solve`` read back to the host.)

The systems are given in the plan's padded layout (:class:`PentadiagonalPlan`): ``size >= m`` unknowns, the rows
past a system's own size identity rows (diagonal 1, no couplings, zero right-hand side), so that systems of
different sizes share one batch and their solutions are zero in the padding.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

__all__ = ["PentadiagonalPlan", "pentadiagonal_plan", "solve_pentadiagonal"]

#: Largest interior block. A batched dense Cholesky costs O(width^3) per block, the separators' system O(blocks^3):
#: at N = 64 (m = 62) blocks of 8 to 14 unknowns were fastest on CPU (1 thread: 6.4-7.1 ms for 512 systems and 16
#: right-hand sides, against 9-12 ms for blocks of 20-30; ``benchmarks/decode.py`` times the whole decode).
MAX_BLOCK = 14


class PentadiagonalPlan(NamedTuple):
    """The nested-dissection layout of systems of up to ``m`` unknowns: ``blocks`` blocks of ``width`` interior
    unknowns, each followed by a separator pair (the last block's pair is padding), ``size = blocks * (width + 2)``.

    Attributes:
        entries: ``(E,)`` positions in ``cat([diag, off1, off2, 0])`` (each band ``(B, size)``, then one zero) of
            every matrix entry the solve reads (the zero for those outside the band): first each block's
            ``width x width`` interior matrix, then its ``width x 4`` couplings to the separator before it and the
            one after it, then each separator's ``2 x 2`` matrix.
        separator_rows: ``(4 blocks,)`` rows of each block's two separator pairs (the one before it, then the one
            after it) in the separators' system padded by two leading dummy rows (for the pair before block 0).
        schur_entries: ``(16 blocks,)`` the matching positions ``row * side + column`` in that padded
            ``side x side`` system, ``side = 2 blocks + 2``.
    """

    m: int
    blocks: int
    width: int
    entries: torch.Tensor
    separator_rows: torch.Tensor
    schur_entries: torch.Tensor

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

    def locate(rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """Positions of ``A[rows, columns]`` in cat([diag, off1, off2, 0]) (the zero outside the band)."""
        low, high = torch.minimum(rows, columns), torch.maximum(rows, columns)
        band = high - low
        present = (band <= 2) & (low >= 0) & (high < size)
        return torch.where(present, band.clamp(max=2) * size + low.clamp(min=0), 3 * size).flatten()

    rows = torch.arange(width).view(1, -1, 1)
    separator = torch.tensor([-2, -1, width, width + 1]).view(1, 1, -1)
    pairs = torch.tensor([width, width + 1])
    located = [
        locate(start + rows, start + rows.mT),  # (blocks, width, width)
        locate(start + rows, start + separator),  # (blocks, width, 4)
        locate(start + pairs.view(1, 2, 1), start + pairs.view(1, 1, 2)),  # (blocks, 2, 2)
    ]
    four = 2 * torch.arange(blocks).view(-1, 1) + torch.arange(4)  # block j's pairs sit at rows 2j .. 2j + 3
    return PentadiagonalPlan(
        m=m,
        blocks=blocks,
        width=width,
        entries=torch.cat(located).to(device),
        separator_rows=four.flatten().to(device),
        schur_entries=(four.view(blocks, 4, 1) * (2 * blocks + 2) + four.view(blocks, 1, 4)).flatten().to(device),
    )


def _gather(plan: PentadiagonalPlan, diag: torch.Tensor, off1: torch.Tensor, off2: torch.Tensor):
    """The interior blocks ``(B, nb, w, w)``, couplings ``(B, nb, w, 4)`` and separator blocks ``(B, nb, 2, 2)`` of a
    pentadiagonal matrix given by its bands in the plan's layout (one gather)."""
    batch, size = diag.shape
    if size != plan.size or off1.shape != diag.shape or off2.shape != diag.shape:
        raise ValueError(
            f"bands {tuple(diag.shape)}, {tuple(off1.shape)}, {tuple(off2.shape)} do not fit the plan's padded size "
            f"{plan.size}"
        )
    nb, width = plan.blocks, plan.width
    values = torch.cat([diag, off1, off2, diag.new_zeros(batch, 1)], 1).gather(1, plan.entries.expand(batch, -1))
    interior, coupling, separator = values.split([nb * width * width, nb * width * 4, nb * 4], 1)
    return interior.view(batch, nb, width, width), coupling.view(batch, nb, width, 4), separator.view(batch, nb, 2, 2)


def _separators(plan: PentadiagonalPlan, gram: torch.Tensor, own: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The separators' Schur complement ``S = A_SS - sum_j C_j^T A_jj^-1 C_j`` ``(B, 2 nb, 2 nb)`` and right-hand
    side ``b_S - sum_j C_j^T A_jj^-1 b_j`` ``(B, 2 nb, r)``, from each block's ``gram = C_j^T A_jj^-1 [C_j, b_j]``
    ``(B, nb, 4, 4 + r)`` (rows and columns 0..1 the pair before the block, 2..3 the pair after it) and ``own``
    ``[A_SS | b_S]`` ``(B, nb, 2, 2 + r)`` of the pair after each block (two index_adds)."""
    batch, nb, _, columns = gram.shape
    side = 2 * nb + 2
    terms = -gram
    terms[..., 2:, 2:] += own
    matrix = gram.new_zeros(batch, side * side).index_add_(1, plan.schur_entries, terms[..., :4].flatten(1))
    rhs = gram.new_zeros(batch, side, columns - 4).index_add_(1, plan.separator_rows, terms[..., 4:].flatten(1, 2))
    return matrix.view(batch, side, side)[:, 2:, 2:], rhs[:, 2:]


def solve_pentadiagonal(
    diag: torch.Tensor,
    off1: torch.Tensor,
    off2: torch.Tensor,
    rhs: torch.Tensor,
    plan: PentadiagonalPlan,
    *,
    trace_with: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None,
):
    """Solve ``A x = rhs`` for symmetric positive-definite pentadiagonal ``A`` in the padded layout of ``plan``.

    Args:
        diag: ``(B, size)`` main diagonal (1 in the padding).
        off1: ``(B, size)`` first super-diagonal, ``off1[:, i] = A[i, i + 1]`` (0 where ``i + 1`` is padding).
        off2: ``(B, size)`` second super-diagonal, ``off2[:, i] = A[i, i + 2]`` (0 likewise).
        rhs: ``(B, size, r)`` right-hand sides (0 in the padding).
        plan: :func:`pentadiagonal_plan` of the systems.
        trace_with: the bands ``(diag, off1, off2)`` of a symmetric pentadiagonal ``T`` (zero in the padding): also
            return ``tr(A^-1 T)`` ``(B,)``, from the entries of ``A^-1`` within the band only (selected inversion:
            with ``Z_j = A_jj^-1 C_j`` and ``Sigma = S^-1``, ``(A^-1)_SS = Sigma``, ``(A^-1)_IS = -Z Sigma`` and
            ``(A^-1)_II = A_II^-1 + Z Sigma Z^T``, block by block).

    Returns:
        ``x`` ``(B, size, r)``, zero in the padding; with ``trace_with``, ``(x, trace)``. No check: ``A`` must be
        positive definite; the solve never reads back from the device.
    """
    if rhs.shape[:2] != diag.shape:
        raise ValueError(f"right-hand side {tuple(rhs.shape)} does not fit bands {tuple(diag.shape)}")
    interior, coupling, separator = _gather(plan, diag, off1, off2)
    batch, nb, width, r = diag.shape[0], plan.blocks, plan.width, rhs.shape[-1]
    b = rhs.view(batch, nb, width + 2, r)
    columns = [coupling, b[:, :, :width]]
    if trace_with is not None:  # A_jj^-1 itself too
        columns.append(torch.eye(width, dtype=diag.dtype, device=diag.device).expand(batch, nb, width, width))
    solved = torch.linalg.solve_ex(interior, torch.cat(columns, -1)).result  # A_jj^-1 [C_j, b_j, I]
    gram = coupling.mT @ solved[..., : 4 + r]  # (B, nb, 4, 4 + r)
    own = torch.cat([separator, b[:, :, width:]], -1)  # (B, nb, 2, 2 + r): [A_SS | b_S] of each pair
    schur, right = _separators(plan, gram, own)
    if trace_with is not None:
        right = torch.cat([right, torch.eye(2 * nb, dtype=diag.dtype, device=diag.device).expand(batch, -1, -1)], -1)
    sep = torch.linalg.solve_ex(schur, right).result  # S^-1 [r_S, I]
    x_sep = sep[..., :r]
    around = torch.nn.functional.pad(x_sep, (0, 0, 2, 0)).unfold(1, 4, 2)  # (B, nb, r, 4): the pairs of block j
    x_int = solved[..., 4 : 4 + r] - solved[..., :4] @ around.mT
    x = torch.cat([x_int, x_sep.view(batch, nb, 2, r)], 2).view(batch, plan.size, r)
    if trace_with is None:
        return x
    t_int, t_coup, t_sep = _gather(plan, *trace_with)
    sigma = torch.nn.functional.pad(sep[..., r:], (2, 0, 2, 0))  # (B, 2 nb + 2, 2 nb + 2), zero dummy pair
    local = sigma.unfold(1, 4, 2).unfold(2, 4, 2).diagonal(dim1=1, dim2=2).permute(0, 3, 1, 2)  # (B, nb, 4, 4)
    z = solved[..., :4]
    inv_ii = solved[..., 4 + r :] + z @ local @ z.mT
    inv_is = -(z @ local)
    trace = (t_int * inv_ii).sum((1, 2, 3)) + 2 * (t_coup * inv_is).sum((1, 2, 3))
    return x, trace + (t_sep * local[..., 2:, 2:]).sum((1, 2, 3))
