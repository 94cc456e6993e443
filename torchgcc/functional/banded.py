"""Batched solves with symmetric positive-definite pentadiagonal matrices, in a fixed number of launches.

The smoothing-spline systems of :mod:`torchgcc.functional.spline` are pentadiagonal. A factorisation along the band
is O(m) work but m sequential steps (a Python loop of launches); a dense solve is a few launches but O(m^3) work.
:func:`solve_pentadiagonal` takes the middle road, one level of nested dissection: the unknowns are split into
``blocks`` interior blocks of ``width`` unknowns, each followed by a separator pair (with a bandwidth of two, a pair
decouples the unknowns before it from those after it). Every interior block ``A_jj = L_j L_j^T`` is factored and
its inverse factor ``L_j^-1`` formed in one batched Cholesky and one triangular solve; products with it give the
separators' Schur complement ``S = A_SS - sum_j C_j^T A_jj^-1 C_j`` (``C_j`` the block's couplings to its two pairs),
a small dense SPD system solved the same way, and the interiors follow by two more products. The solve is the same
few dozen launches for any batch, its work about ``m (width^2 + 4 r)`` per system for ``r`` right-hand sides plus
``(2 blocks)^3`` for the separators, and it is differentiable by autograd. (``torch.linalg.cholesky_ex`` and
``solve_triangular`` are the only LAPACK route in torch 2.x that never reads an error flag or a pivot back to the
host; ``linalg.solve_ex``, ``lu_solve``, ``cholesky_solve`` and ``eigh`` all do. The explicit inverse factors of the
small, well-conditioned blocks replace triangular solves by batched products: fewer launches, the same accuracy
as the backward-stable solve up to the blocks' condition numbers.)

The systems are given in the plan's padded layout (:class:`PentadiagonalPlan`): ``size >= m + 2`` unknowns, the
rows past a system's own size identity rows (diagonal 1, no couplings, zero right-hand side), so that systems of
different sizes share one batch and their solutions are zero in the padding; the matrices as their stacked bands
``(B, size, 3)``, ``bands[:, i, k] = A[i, i + k]`` (zero where ``i + k >= size``).
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
    unknowns, each followed by a separator pair (the last block's pair is always padding), ``size = blocks * (width
    + 2)``. The separators' system is padded by a dummy pair in front (identity; it stands for the missing pair before
    block 0) to ``side = 2 blocks + 2`` rows.

    Attributes:
        interior_entries: ``(blocks width^2,)`` positions in the flattened bands ``(3 size,)`` of each block's
            ``width x width`` interior matrix (``3 i + k`` for ``A[i, i + k]``);
        coupling_entries: ``(blocks width 4,)`` of its couplings to the pair before it and the pair after it;
        separator_entries: ``(side^2,)`` of the padded ``side x side`` separators' matrix. Entries outside the band
            read ``A[size - 1, size]`` (zero), the dummy pair's diagonal ``A[size - 1, size - 1]`` (one: padding).
        schur_entries: ``(16 blocks,)`` positions in the padded separators' matrix (``row * side + column``) of
            each block's ``4 x 4`` Schur term.
        separator_rows: ``(4 blocks,)`` rows in the padded separators' system of each block's two pairs.
        separator_sources: ``(side,)`` the unknowns of the padded separators (the dummy pair reads ``size - 1``).
        identity_block, identity_separators: ``(width, width)`` and ``(side, side)`` float64 identities.
    """

    m: int
    blocks: int
    width: int
    interior_entries: torch.Tensor
    coupling_entries: torch.Tensor
    separator_entries: torch.Tensor
    schur_entries: torch.Tensor
    separator_rows: torch.Tensor
    separator_sources: torch.Tensor
    identity_block: torch.Tensor
    identity_separators: torch.Tensor

    @property
    def size(self) -> int:
        return self.blocks * (self.width + 2)

    @property
    def side(self) -> int:
        return 2 * self.blocks + 2


def pentadiagonal_plan(m: int, device: Optional[torch.device] = None) -> PentadiagonalPlan:
    """The layout for systems of up to ``m >= 1`` unknowns: the fewest blocks of at most :data:`MAX_BLOCK`."""
    if m < 1:
        raise ValueError(f"a pentadiagonal system needs at least one unknown, got m={m}")
    blocks = max(1, math.ceil((m + 2) / (MAX_BLOCK + 2)))
    width = max(2, math.ceil((m - 2 * (blocks - 1)) / blocks))
    size, side = blocks * (width + 2), 2 * blocks + 2

    def locate(rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """Positions of ``A[rows, columns]`` in the flattened bands (``A[size - 1, size]``, zero, outside them)."""
        low, high = torch.minimum(rows, columns), torch.maximum(rows, columns)
        band = high - low
        present = (band <= 2) & (low >= 0)
        return torch.where(present, 3 * low.clamp(min=0) + band.clamp(max=2), 3 * size - 2)

    start = torch.arange(blocks).view(-1, 1, 1) * (width + 2)
    rows = torch.arange(width).view(1, -1, 1)
    pairs = torch.tensor([-2, -1, width, width + 1]).view(1, 1, -1)  # the pair before the block, the one after
    padded = torch.arange(side)  # padded separator p: the pair after block p // 2 - 1, or the dummy pair (p < 2)
    unknown = (padded // 2 - 1) * (width + 2) + width + padded % 2
    separators = locate(unknown.view(-1, 1), unknown.view(1, -1))
    dummy = (padded.view(-1, 1) < 2) | (padded.view(1, -1) < 2)
    one = padded.view(-1, 1) == padded.view(1, -1)
    separators = torch.where(dummy, torch.where(one, 3 * size - 3, 3 * size - 2), separators)
    four = 2 * torch.arange(blocks).view(-1, 1) + torch.arange(4)  # block j's pairs: padded rows 2j .. 2j + 3
    return PentadiagonalPlan(
        m=m,
        blocks=blocks,
        width=width,
        interior_entries=locate(start + rows, start + rows.mT).flatten().to(device),
        coupling_entries=locate(start + rows, start + pairs).flatten().to(device),
        separator_entries=separators.flatten().to(device),
        schur_entries=(four.view(blocks, 4, 1) * side + four.view(blocks, 1, 4)).flatten().to(device),
        separator_rows=four.flatten().to(device),
        separator_sources=torch.where(padded < 2, size - 1, unknown).to(device),
        identity_block=torch.eye(width, dtype=torch.float64, device=device),
        identity_separators=torch.eye(side, dtype=torch.float64, device=device),
    )


def _inverse_factor(matrix: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
    """``L^-1`` ``(B, m, m)`` for the lower Cholesky factor ``L`` of batched SPD ``matrix``, with ``identity``
    ``(m, m)`` (one triangular solve, no host reads; ``matrix^-1 = L^-T L^-1``)."""
    chol = torch.linalg.cholesky_ex(matrix).L
    return torch.linalg.solve_triangular(chol, identity.expand(chol.shape), upper=False)


def solve_pentadiagonal(
    bands: torch.Tensor,
    rhs: torch.Tensor,
    plan: PentadiagonalPlan,
    *,
    trace_with: Optional[torch.Tensor] = None,
):
    """Solve ``A x = rhs`` for symmetric positive-definite pentadiagonal ``A`` in the padded layout of ``plan``.

    Args:
        bands: ``(B, size, 3)`` the bands of ``A``, ``bands[:, i, k] = A[i, i + k]`` (identity rows in the padding,
            zero where ``i + k >= size``).
        rhs: ``(B, size, r)`` right-hand sides (0 in the padding).
        plan: :func:`pentadiagonal_plan` of the systems.
        trace_with: the bands ``(B, size, 3)`` of a symmetric pentadiagonal ``T`` (zero in the padding): also
            return ``tr(A^-1 T)`` ``(B,)``, from the entries of ``A^-1`` within the band only (selected inversion:
            with ``Z_j = A_jj^-1 C_j`` and ``Sigma = S^-1``, ``(A^-1)_SS = Sigma``, ``(A^-1)_IS = -Z Sigma`` and
            ``(A^-1)_II = A_II^-1 + Z Sigma Z^T``, block by block).

    Returns:
        ``x`` ``(B, size, r)``, zero in the padding; with ``trace_with``, ``(x, trace)``. No check: ``A`` must be
        positive definite; the solve never reads back from the device.
    """
    batch, nb, width, side, r = bands.shape[0], plan.blocks, plan.width, plan.side, rhs.shape[-1]
    if bands.shape[1:] != (plan.size, 3) or rhs.shape[:2] != (batch, plan.size):
        raise ValueError(
            f"bands {tuple(bands.shape)} and right-hand side {tuple(rhs.shape)} do not fit the plan's padded size "
            f"{plan.size}"
        )
    interior, coupling, schur = _blocks(plan, bands)
    inv_l = _inverse_factor(interior, plan.identity_block)  # L_j^-1 of A_jj = L_j L_j^T
    v_c, v_b = torch.bmm(inv_l, coupling), torch.bmm(inv_l, rhs.view(batch * nb, width + 2, r)[:, :width])
    v_ct = v_c.transpose(1, 2)
    schur.index_add_(1, plan.schur_entries, torch.bmm(v_ct, v_c).view(batch, 16 * nb), alpha=-1.0)
    right = rhs.index_select(1, plan.separator_sources)  # (B, side, r): b_S, then minus C_j^T A_jj^-1 b_j
    right.index_add_(1, plan.separator_rows, torch.bmm(v_ct, v_b).view(batch, 4 * nb, r), alpha=-1.0)
    inv_s = _inverse_factor(schur.view(batch, side, side), plan.identity_separators)
    inv_s_t = inv_s.transpose(1, 2)
    x_sep = torch.bmm(inv_s_t, torch.bmm(inv_s, right))  # S^-1 r_S
    around = x_sep.index_select(1, plan.separator_rows).view(batch * nb, 4, r)  # each block's two pairs
    inv_l_t = inv_l.transpose(1, 2)
    x = rhs.new_empty(batch, nb, width + 2, r)
    x[:, :, :width] = torch.bmm(inv_l_t, torch.baddbmm(v_b, v_c, around, alpha=-1.0)).view(batch, nb, width, r)
    x[:, :, width:] = x_sep[:, 2:].view(batch, nb, 2, r)
    x = x.view(batch, plan.size, r)
    if trace_with is None:
        return x
    t_interior, t_coupling, t_schur = _blocks(plan, trace_with)
    sigma = torch.bmm(inv_s_t, inv_s)  # S^-1 (B, side, side)
    local = sigma.unfold(1, 4, 2).unfold(2, 4, 2).diagonal(dim1=1, dim2=2).permute(0, 3, 1, 2)  # (B, nb, 4, 4)
    z_c = torch.bmm(inv_l_t, v_c)  # A_jj^-1 C_j
    inv_is = torch.bmm(z_c, local.reshape(batch * nb, 4, 4))  # -(A^-1)_IS
    inv_ii = torch.baddbmm(torch.bmm(inv_l_t, inv_l), inv_is, z_c.transpose(1, 2))
    trace = (t_interior * inv_ii).view(batch, -1).sum(-1) - 2 * (t_coupling * inv_is).view(batch, -1).sum(-1)
    return x, trace + (t_schur * sigma.reshape(batch, -1)).sum(-1)


def _blocks(plan: PentadiagonalPlan, bands: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The interior blocks ``(B nb, w, w)``, couplings ``(B nb, w, 4)`` and padded separators' matrix
    ``(B, side^2)`` of the matrices with ``bands`` (three gathers)."""
    batch, nb, width = bands.shape[0], plan.blocks, plan.width
    flat = bands.view(batch, -1)
    interior, coupling, schur = (
        flat.gather(1, entries.expand(batch, -1))
        for entries in (plan.interior_entries, plan.coupling_entries, plan.separator_entries)
    )
    return interior.view(batch * nb, width, width), coupling.view(batch * nb, width, 4), schur
