"""Batched solves with symmetric positive-definite pentadiagonal matrices, in a fixed number of launches.

The smoothing-spline systems of :mod:`torchgcc.functional.spline` are pentadiagonal. A factorisation along the band
is O(m) work but m sequential steps (a Python loop of launches); a dense solve is a few launches but O(m^3) work.
:func:`solve_pentadiagonal` takes the middle road, one level of nested dissection: the unknowns are split into
``blocks`` interior blocks of ``width`` unknowns, each followed by a separator pair (with a bandwidth of two, a pair
decouples the unknowns before it from those after it). One batched dense solve gives every interior block's
``A_jj^-1 [C_j, b_j]`` (its couplings to its two separator pairs and its right-hand sides) in every system; a second
solves the separators' Schur complement, a small dense SPD system; the interiors follow by one product. The solve is
the same two dozen launches for any batch, its work about ``m (width^2 + 4 r)`` per system for ``r`` right-hand
sides plus ``(2 blocks)^3`` for the separators, and it is differentiable by autograd. (Batched Cholesky by
``torch.linalg.cholesky_ex`` and two triangular solves: the only LAPACK route in torch 2.x that never reads an
error flag or a pivot back to the host; ``linalg.solve_ex``, ``lu_solve``, ``cholesky_solve`` and ``eigh`` all do.)

The systems are given in the plan's padded layout (:class:`PentadiagonalPlan`): ``size >= m + 2`` unknowns, the
rows past a system's own size identity rows (diagonal 1, no couplings, zero right-hand side), so that systems of
different sizes share one batch and their solutions are zero in the padding; the matrices as their stacked bands
``(B, 3, size)``, ``bands[:, k, i] = A[i, i + k]`` (zero where ``i + k >= size``).
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
            ``width x width`` interior matrix;
        coupling_entries: ``(blocks width 4,)`` of its couplings to the pair before it and the pair after it;
        separator_entries: ``(side^2,)`` of the padded ``side x side`` separators' matrix. Entries outside the band
            read ``A[size - 1, size]`` (zero), the dummy pair's diagonal ``A[size - 1, size - 1]`` (one: padding).
        schur_entries: ``(16 blocks,)`` positions in the padded separators' matrix (``row * side + column``) of
            each block's ``4 x 4`` Schur term.
        separator_rows: ``(4 blocks,)`` rows in the padded separators' system of each block's two pairs.
        separator_sources: ``(side,)`` the unknowns of the padded separators (the dummy pair reads ``size - 1``).
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
        return torch.where(present, band.clamp(max=2) * size + low.clamp(min=0), 2 * size - 1)

    start = torch.arange(blocks).view(-1, 1, 1) * (width + 2)
    rows = torch.arange(width).view(1, -1, 1)
    pairs = torch.tensor([-2, -1, width, width + 1]).view(1, 1, -1)  # the pair before the block, the one after
    padded = torch.arange(side)  # padded separator p: the pair after block p // 2 - 1, or the dummy pair (p < 2)
    unknown = (padded // 2 - 1) * (width + 2) + width + padded % 2
    separators = locate(unknown.view(-1, 1), unknown.view(1, -1))
    dummy = (padded.view(-1, 1) < 2) | (padded.view(1, -1) < 2)
    one = padded.view(-1, 1) == padded.view(1, -1)
    separators = torch.where(dummy, torch.where(one, size - 1, 2 * size - 1), separators)
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
    )


def _spd_solve(chol: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``A^-1 rhs`` from the lower Cholesky factor of batched ``A`` (two triangular solves, no host reads)."""
    return torch.linalg.solve_triangular(chol.mT, torch.linalg.solve_triangular(chol, rhs, upper=False), upper=True)


def _columns(parts: list[torch.Tensor]) -> torch.Tensor:
    """The parts side by side (the last dimension): written into one buffer, so that the number of ops does not
    depend on the sizes (``torch.cat`` on CPU takes a different path above 32768 elements)."""
    out = parts[0].new_empty(parts[0].shape[:-1] + (sum(part.shape[-1] for part in parts),))
    start = 0
    for part in parts:
        out[..., start : start + part.shape[-1]] = part
        start += part.shape[-1]
    return out


def solve_pentadiagonal(
    bands: torch.Tensor,
    rhs: torch.Tensor,
    plan: PentadiagonalPlan,
    *,
    trace_with: Optional[torch.Tensor] = None,
):
    """Solve ``A x = rhs`` for symmetric positive-definite pentadiagonal ``A`` in the padded layout of ``plan``.

    Args:
        bands: ``(B, 3, size)`` the bands of ``A``, ``bands[:, k, i] = A[i, i + k]`` (identity rows in the padding,
            zero where ``i + k >= size``).
        rhs: ``(B, size, r)`` right-hand sides (0 in the padding).
        plan: :func:`pentadiagonal_plan` of the systems.
        trace_with: the bands ``(B, 3, size)`` of a symmetric pentadiagonal ``T`` (zero in the padding): also
            return ``tr(A^-1 T)`` ``(B,)``, from the entries of ``A^-1`` within the band only (selected inversion:
            with ``Z_j = A_jj^-1 C_j`` and ``Sigma = S^-1``, ``(A^-1)_SS = Sigma``, ``(A^-1)_IS = -Z Sigma`` and
            ``(A^-1)_II = A_II^-1 + Z Sigma Z^T``, block by block).

    Returns:
        ``x`` ``(B, size, r)``, zero in the padding; with ``trace_with``, ``(x, trace)``. No check: ``A`` must be
        positive definite; the solve never reads back from the device.
    """
    batch, nb, width, side, r = bands.shape[0], plan.blocks, plan.width, plan.side, rhs.shape[-1]
    if bands.shape[1:] != (3, plan.size) or rhs.shape[:2] != (batch, plan.size):
        raise ValueError(
            f"bands {tuple(bands.shape)} and right-hand side {tuple(rhs.shape)} do not fit the plan's padded size "
            f"{plan.size}"
        )
    interior, coupling, schur = _blocks(plan, bands)
    parts = [coupling, rhs.view(batch * nb, width + 2, r)[:, :width]]
    if trace_with is not None:  # A_jj^-1 itself too
        parts.append(torch.eye(width, dtype=bands.dtype, device=bands.device).expand(batch * nb, -1, -1))
    solved = _spd_solve(torch.linalg.cholesky_ex(interior).L, _columns(parts))  # A_jj^-1 [C_j, b_j, (I)]
    gram = torch.bmm(coupling.mT, solved[..., : 4 + r])  # (B nb, 4, 4 + r): C_j^T A_jj^-1 [C_j, b_j]
    schur.index_add_(1, plan.schur_entries, gram[..., :4].reshape(batch, 16 * nb), alpha=-1)
    right = rhs.index_select(1, plan.separator_sources)  # (B, side, r): b_S, then minus the blocks' terms
    right.index_add_(1, plan.separator_rows, gram[..., 4:].reshape(batch, 4 * nb, r), alpha=-1)
    if trace_with is not None:  # Sigma = S^-1 too
        right = _columns([right, torch.eye(side, dtype=bands.dtype, device=bands.device).expand(batch, -1, -1)])
    sep = _spd_solve(torch.linalg.cholesky_ex(schur.view(batch, side, side)).L, right)  # S^-1 [r_S, (I)]
    around = sep[..., :r].unfold(1, 4, 2).mT.reshape(batch * nb, 4, r)  # each block's two pairs
    x = rhs.new_empty(batch, nb, width + 2, r)
    x[:, :, :width] = torch.baddbmm(solved[..., 4 : 4 + r], solved[..., :4], around, alpha=-1).view(batch, nb, width, r)
    x[:, :, width:] = sep[:, 2:, :r].unflatten(1, (nb, 2))
    x = x.view(batch, plan.size, r)
    if trace_with is None:
        return x
    t_interior, t_coupling, t_schur = _blocks(plan, trace_with)
    sigma = sep[..., r:]  # (B, side, side)
    local = sigma.unfold(1, 4, 2).unfold(2, 4, 2).diagonal(dim1=1, dim2=2).permute(0, 3, 1, 2)  # (B, nb, 4, 4)
    local = local.reshape(batch * nb, 4, 4)
    z = solved[..., :4]
    inv_is = torch.bmm(z, local)  # -(A^-1)_IS
    inv_ii = torch.baddbmm(solved[..., 4 + r :], inv_is, z.mT)
    trace = (t_interior * inv_ii).view(batch, -1).sum(-1) - 2 * (t_coupling * inv_is).view(batch, -1).sum(-1)
    return x, trace + (t_schur * sigma.reshape(batch, -1)).sum(-1)


def _blocks(plan: PentadiagonalPlan, bands: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The interior blocks ``(B nb, w, w)``, couplings ``(B nb, w, 4)`` and padded separators' matrix
    ``(B, side^2)`` of the matrices with ``bands`` (three gathers)."""
    batch, nb, width = bands.shape[0], plan.blocks, plan.width
    flat = bands.reshape(batch, -1)
    interior, coupling, schur = (
        flat.gather(1, entries.expand(batch, -1))
        for entries in (plan.interior_entries, plan.coupling_entries, plan.separator_entries)
    )
    return interior.view(batch * nb, width, width), coupling.view(batch * nb, width, 4), schur
