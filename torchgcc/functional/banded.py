"""Batched solves with symmetric positive-definite pentadiagonal matrices by nested dissection, a few launches per
level and O(log m) levels.

The smoothing-spline systems of :mod:`torchgcc.functional.spline` are pentadiagonal. A factorisation along the band
is O(m) work but m sequential steps (a Python loop of launches); a dense solve is a few launches but O(m^3) work.
:func:`solve_pentadiagonal` takes the middle road. Grouped in pairs of unknowns ``(2p, 2p + 1)``, a pentadiagonal
matrix is block tridiagonal in ``2 x 2`` blocks, so any single pair separates the unknowns before it from those
after it. One level of nested dissection splits the pairs into blocks of at most :data:`MAX_BLOCK` interior
unknowns, each followed by a separator pair. Every interior block ``A_jj = L_j L_j^T`` is factored and its inverse
factor ``L_j^-1`` formed in one batched Cholesky and one triangular solve; products with it give the separators'
Schur complement ``S = A_SS - sum_j C_j^T A_jj^-1 C_j`` (``C_j`` the block's couplings to the pair before it and the
pair after it). ``S`` couples each separator to its two neighbours only: it is block tridiagonal in pairs again,
about ``1 / 8`` the size, and the next level solves it the same way, down to a system of at most
:data:`DENSE_PAIRS` pairs solved dense. The interiors follow by two more products per level.

Work per system is about ``m (width^2 + 4 r)`` for ``r`` right-hand sides (the levels shrink geometrically), the
launches a few dozen per level for any batch (no level up to 22 unknowns, one up to 174, two up to 1,390, three up
to 11,118), and everything is differentiable by autograd. (``torch.linalg.cholesky_ex`` and ``solve_triangular``
are the only LAPACK route in torch 2.x that never reads an error flag or a pivot back to the host;
``linalg.solve_ex``, ``inv_ex``, ``lu_solve``, ``cholesky_solve`` and ``eigh`` all do. The explicit inverse
factors of the small, well-conditioned blocks replace triangular solves by batched products: fewer launches, the
same accuracy as the backward-stable solve up to the blocks' condition numbers.)

The systems are given in the plan's padded layout (:class:`PentadiagonalPlan`): ``size >= m + 2`` unknowns, the
rows past a system's own size identity rows (diagonal 1, no couplings, zero right-hand side), so that systems of
different sizes share one batch and their solutions are zero in the padding; the matrices as their stacked bands
``(B, size, 3)``, ``bands[:, i, k] = A[i, i + k]`` (zero where ``i + k >= size``). Inside, every level stores its
block tridiagonal matrix over ``P`` pairs flat, ``(B, 8 P)``: for pair ``p`` its diagonal block ``A[pair p, pair p]``
then its coupling ``A[pair p, pair p + 1]``, row-major. The last pair of every level is padding (so its diagonal
entry is one and its coupling zero: the positions every out-of-range entry reads), and pairs past ``P`` that a
level's blocks cover are identity pairs that are never stored.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

__all__ = ["DENSE_PAIRS", "MAX_BLOCK", "PentadiagonalPlan", "pentadiagonal_plan", "solve_pentadiagonal"]

#: Largest interior block, in unknowns (an even number: whole pairs). A batched dense Cholesky costs O(width^3) per
#: block and every block its own LAPACK call: at N = 64 (m = 62, B = 512, 16 right-hand sides, 2 threads, measured
#: with one level of dissection) blocks of 10 to 18 unknowns solved alike (4.8-5.0 ms), 8 in 5.1 ms, 20 in 7.8 ms.
MAX_BLOCK = 14

#: Systems of at most this many pairs (the last level's separators, or small systems outright) are solved dense.
DENSE_PAIRS = 12


class DissectionLevel(NamedTuple):
    """One level of nested dissection of a block tridiagonal system over ``P`` pairs (the last one padding):
    ``blocks`` blocks of ``width`` interior unknowns, block ``j`` the pairs from ``j (width / 2 + 1)``, each followed
    by its separator pair, tiling the pairs exactly. The separators' system has ``P' >= blocks + 1`` pairs: a dummy
    identity pair (it stands for the missing pair before block 0), the separator after each block, then identity
    pairs up to the next level's tiling.

    Attributes:
        interior_entries: ``(blocks width^2,)`` positions in the level's flat storage ``(8 P,)`` of each block's
            ``width x width`` interior matrix (identity entries past ``P`` read the last pair's diagonal one,
            zero entries its coupling);
        coupling_entries: ``(blocks (width + 2) 4,)`` of its couplings to the pair before it and the pair after it
            (two zero rows below: for the padded inverse factor);
        separator_entries: ``(8 P' + 1,)`` the separators' storage before the Schur terms (their diagonal blocks,
            zero couplings, a spare last slot);
        schur_entries: ``(16 blocks,)`` positions in the separators' storage of each block's ``4 x 4`` Schur term
            (its lower left quarter, the transpose of the upper right one, lands in the spare slot);
        separator_pairs: ``(P',)`` the pairs whose right-hand sides the separators read (the dummy and the identity
            pairs read the padding pair's zeros);
        separator_rows: ``(4 blocks,)`` rows of each block's two separator pairs in the separators' system;
        local_entries: ``(16 blocks,)`` positions in the separators' inverse (its storage) of each block's ``4 x 4``;
        inverse_entries: ``(8 P,)`` positions of this level's inverse storage in the concatenation of the
            interiors' inverse blocks ``(blocks width^2)``, the interior-separator ones ``(blocks width 4)`` and the
            separators' inverse storage ``(8 P')``;
        identity: ``(width, width + 2)`` float64 ``[I, 0]``: the inverse factor comes padded by two zero columns;
        separator_pick: ``(width + 2, 4)`` float64, zero but for ``I`` in its last two rows and columns (a block's
            rows of the separator pair after it).
    """

    blocks: int
    width: int
    interior_entries: torch.Tensor
    coupling_entries: torch.Tensor
    separator_entries: torch.Tensor
    schur_entries: torch.Tensor
    separator_pairs: torch.Tensor
    separator_rows: torch.Tensor
    local_entries: torch.Tensor
    inverse_entries: torch.Tensor
    identity: torch.Tensor
    separator_pick: torch.Tensor


class DenseLevel(NamedTuple):
    """The dense solve of a block tridiagonal system over ``P <= DENSE_PAIRS`` pairs.

    Attributes:
        entries: ``(4 P^2,)`` positions in the flat storage of the ``2P x 2P`` dense matrix;
        inverse_entries: ``(8 P,)`` positions of the inverse storage in the flattened dense inverse (the
            coupling past the last pair reads the inverse's zero entry between the padding pair and pair 0);
        identity: ``(2P, 2P)`` float64.
    """

    entries: torch.Tensor
    inverse_entries: torch.Tensor
    identity: torch.Tensor


class PentadiagonalPlan(NamedTuple):
    """The nested-dissection layout of pentadiagonal systems of up to ``m`` unknowns, padded to ``size`` (even,
    ``>= m + 2``).

    Attributes:
        pair_entries: ``(8 size / 2,)`` positions in the flattened bands ``(3 size,)`` of the first level's storage
            (``3 i + k`` for ``A[i, i + k]``; ``A[size - 1, size]``, zero, outside the band);
        trace_weights: ``(8 size / 2,)`` float64, 1 for the diagonal blocks' entries and 2 for the couplings'
            (``tr(A^-1 T)`` of symmetric block tridiagonal ``T`` from the storages of ``A^-1`` and ``T``);
        levels: the :class:`DissectionLevel` of every level, outermost first (none for a small system);
        dense: the :class:`DenseLevel` of the last system.

    The first level (or the dense one, when there is none) reads the bands themselves: its entries are positions in
    the flattened bands (its positions in the pair storage mapped through ``pair_entries``).
    """

    m: int
    size: int
    pair_entries: torch.Tensor
    trace_weights: torch.Tensor
    levels: tuple
    dense: DenseLevel


def _storage_entries(rows: torch.Tensor, columns: torch.Tensor, pairs: int) -> torch.Tensor:
    """Positions of ``A[rows, columns]`` in the flat storage of a block tridiagonal matrix over ``pairs`` pairs
    whose last pair is padding: unknowns outside ``[0, 2 pairs)`` are identity rows (reading the padding pair's
    diagonal one on the diagonal, its zero coupling elsewhere), as are entries beyond the block band."""
    p, a = torch.div(rows, 2, rounding_mode="floor"), rows % 2
    q, b = torch.div(columns, 2, rounding_mode="floor"), columns % 2
    inside = (p >= 0) & (p < pairs) & (q >= 0) & (q < pairs)
    position = torch.where(p == q, 8 * p + 2 * a + b, torch.where(q > p, 8 * p + 4 + 2 * a + b, 8 * q + 4 + 2 * b + a))
    one, zero = 8 * (pairs - 1), 8 * (pairs - 1) + 4
    band = inside & ((p - q).abs() <= 1)
    return torch.where(band, position, torch.where(rows == columns, one, zero))


def _blocking(pairs: int) -> tuple[int, int]:
    """``(blocks, interior pairs per block)`` of a level over ``pairs`` pairs: the fewest blocks of at most
    :data:`MAX_BLOCK` interior unknowns, each with its separator pair, that cover them."""
    blocks = math.ceil(pairs / (MAX_BLOCK // 2 + 1))
    return blocks, math.ceil(pairs / blocks) - 1


def _padded(pairs: int) -> int:
    """The pairs of a system of ``pairs`` pairs padded so that its level's blocks tile it exactly."""
    if pairs <= DENSE_PAIRS:
        return pairs
    blocks, inner = _blocking(pairs)
    return blocks * (inner + 1)


def _dissection_level(pairs: int, device: Optional[torch.device]) -> DissectionLevel:
    """The level over ``pairs`` pairs (tiled exactly by its blocks, :func:`_padded`)."""
    blocks, inner = _blocking(pairs)
    width, stride = 2 * inner, inner + 1
    separator_pairs = _padded(blocks + 1)  # the dummy, the blocks' separators, identity pairs to tile the next level
    start = 2 * stride * torch.arange(blocks).view(-1, 1, 1)  # first unknown of each block
    rows = start + torch.arange(width).view(1, -1, 1)
    around = start + torch.tensor([-2, -1, width, width + 1]).view(1, 1, -1)  # the pair before, the pair after
    interior = _storage_entries(rows, rows.mT, pairs)
    coupling = _storage_entries(rows, around, pairs)
    coupling = torch.cat([coupling, torch.full((blocks, 2, 4), 8 * (pairs - 1) + 4)], 1)  # the two zero rows
    # the separators' system: the dummy pair (-1), each block's separator j stride + inner, then identity pairs
    separator = torch.arange(separator_pairs) * stride - 1
    separator = torch.where(separator < pairs, separator, pairs + 1)  # past the blocks: identity
    unknown = 2 * separator.view(-1, 1) + torch.arange(2)  # (separator_pairs, 2)
    diagonal = _storage_entries(unknown.view(-1, 2, 1), unknown.view(-1, 1, 2), pairs).view(-1, 4)
    zero = torch.full((separator_pairs, 4), 8 * (pairs - 1) + 4)
    separators = torch.cat([torch.cat([diagonal, zero], 1).flatten(), zero[:1, 0]])
    # block j's Schur term [[LL, LR], [RL, RR]] onto separators j (left) and j + 1 (right)
    a, b = torch.arange(4).view(4, 1) % 2, torch.arange(4).view(1, 4) % 2
    row_left, column_left = torch.arange(4).view(4, 1) < 2, torch.arange(4).view(1, 4) < 2
    j = torch.arange(blocks).view(-1, 1, 1)
    same = torch.where(row_left, 8 * j + 2 * a + b, 8 * (j + 1) + 2 * a + b)  # LL onto separator j, RR onto j + 1
    upper = 8 * j + 4 + 2 * a + b  # LR: the coupling of separator j to separator j + 1
    diagonal_quarter = row_left == column_left
    schur = torch.where(diagonal_quarter, same, torch.where(row_left, upper, 8 * separator_pairs))  # RL: spare slot
    # the 4 x 4 of the separators' inverse around block j (its lower left quarter the transpose of the coupling)
    local = torch.where(diagonal_quarter, same, torch.where(row_left, upper, 8 * j + 4 + 2 * b + a))
    # this level's inverse storage, pair by pair: interior pair i of block j, or its separator (i = inner)
    pair = torch.arange(pairs).view(-1, 1)
    jb, i = torch.div(pair, stride, rounding_mode="floor"), pair % stride
    e = torch.arange(8).view(1, -1)
    ea, eb, coupled = (e % 4) // 2, e % 2, e >= 4
    is_base, s_base = blocks * width * width, blocks * width * (width + 4)  # after the II blocks, after the IS ones
    row = 2 * i + ea
    in_interior = jb * width * width + row * width + 2 * i + 2 * coupled + eb  # II_j[row, own or next pair]
    to_separator = is_base + jb * width * 4 + row * 4 + 2 + eb  # the last interior pair to the separator after it
    interior_value = torch.where(coupled & (i == inner - 1), to_separator, in_interior)
    next_block = jb + 1  # a separator's coupling to the first interior pair of the next block: IS_{j+1}[b, a]
    # (the last separator's: the separators' inverse between their pairs j + 1 and j + 2, both padding: zero)
    next_interior = is_base + next_block * width * 4 + eb * 4 + ea
    beyond = s_base + 8 * (jb + 1) + 4 + 2 * ea + eb
    separator_value = torch.where(
        coupled, torch.where(next_block < blocks, next_interior, beyond), s_base + 8 * (jb + 1) + 2 * ea + eb
    )
    inverse = torch.where(i < inner, interior_value, separator_value)
    pick = torch.zeros(width + 2, 4, dtype=torch.float64)
    pick[width:, 2:] = torch.eye(2, dtype=torch.float64)
    return DissectionLevel(
        blocks=blocks,
        width=width,
        interior_entries=interior.flatten().to(device),
        coupling_entries=coupling.flatten().to(device),
        separator_entries=separators.to(device),
        schur_entries=schur.flatten().to(device),
        separator_pairs=torch.where(separator < 0, pairs - 1, separator.clamp(max=pairs - 1)).to(device),
        separator_rows=(2 * torch.arange(blocks).view(-1, 1) + torch.arange(4)).flatten().to(device),
        local_entries=local.flatten().to(device),
        inverse_entries=inverse.flatten().to(device),
        identity=torch.eye(width, width + 2, dtype=torch.float64, device=device),
        separator_pick=pick.to(device),
    )


def _dense_level(pairs: int, device: Optional[torch.device]) -> DenseLevel:
    unknowns = torch.arange(2 * pairs)
    entries = _storage_entries(unknowns.view(-1, 1), unknowns.view(1, -1), pairs)
    p, e = torch.arange(pairs).view(-1, 1), torch.arange(8).view(1, -1)
    row, column = 2 * p + (e % 4) // 2, 2 * p + 2 * (e >= 4) + e % 2
    beyond = column >= 2 * pairs  # the coupling of the last pair: the zero between the padding pair and pair 0
    inverse = torch.where(beyond, (2 * pairs - 1) * 2 * pairs, row * 2 * pairs + column)
    return DenseLevel(
        entries=entries.flatten().to(device),
        inverse_entries=inverse.flatten().to(device),
        identity=torch.eye(2 * pairs, dtype=torch.float64, device=device),
    )


def pentadiagonal_plan(m: int, device: Optional[torch.device] = None) -> PentadiagonalPlan:
    """The layout for systems of up to ``m >= 1`` unknowns: levels of blocks of at most :data:`MAX_BLOCK` interior
    unknowns until at most :data:`DENSE_PAIRS` pairs are left."""
    if m < 1:
        raise ValueError(f"a pentadiagonal system needs at least one unknown, got m={m}")
    pairs = _padded(math.ceil((m + 2) / 2))
    size = 2 * pairs
    p, e = torch.arange(pairs).view(-1, 1), torch.arange(8).view(1, -1)
    row, column = 2 * p + (e % 4) // 2, 2 * p + 2 * (e >= 4) + e % 2
    low, band = torch.minimum(row, column), (column - row).abs()
    pair_entries = torch.where((band <= 2) & (torch.maximum(row, column) < size), 3 * low + band, 3 * size - 2)
    pair_entries = pair_entries.flatten().to(device)
    levels = []
    while pairs > DENSE_PAIRS:
        levels.append(_dissection_level(pairs, device))
        pairs = _padded(levels[-1].blocks + 1)
    dense = _dense_level(pairs, device)
    # the first level reads the bands themselves: the entries it reads from its input's storage (the rest index its
    # own products) mapped through pair_entries
    if levels:
        first = levels[0]
        levels[0] = first._replace(
            interior_entries=pair_entries[first.interior_entries],
            coupling_entries=pair_entries[first.coupling_entries],
            separator_entries=pair_entries[first.separator_entries],
        )
    else:
        dense = dense._replace(entries=pair_entries[dense.entries])
    return PentadiagonalPlan(
        m=m,
        size=size,
        pair_entries=pair_entries,
        trace_weights=torch.tensor([1.0] * 4 + [2.0] * 4, dtype=torch.float64, device=device).repeat(size // 2),
        levels=tuple(levels),
        dense=dense,
    )


def _inverse_factor(matrix: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
    """``L^-1 identity`` ``(B, m, k)`` for the lower Cholesky factor ``L`` of batched SPD ``matrix`` and ``identity``
    ``(m, k)`` (``I``, or ``[I, 0]``): one triangular solve, no host reads; ``matrix^-1 = L^-T L^-1``."""
    chol = torch.linalg.cholesky_ex(matrix).L
    return torch.linalg.solve_triangular(chol, identity, upper=False)  # the identity broadcast over the batch


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
            return ``tr(A^-1 T)`` ``(B,)``, from the entries of ``A^-1`` within the block band only (selected
            inversion: with ``Z_j = A_jj^-1 C_j`` and ``Sigma`` the separators' inverse, ``(A^-1)_SS = Sigma``,
            ``(A^-1)_IS = -Z Sigma`` and ``(A^-1)_II = A_jj^-1 + Z Sigma Z^T``, block by block, level by level).

    Returns:
        ``x`` ``(B, size, r)``, zero in the padding; with ``trace_with``, ``(x, trace)``. No check: ``A`` must be
        positive definite; the solve never reads back from the device.
    """
    batch, r = bands.shape[0], rhs.shape[-1]
    if bands.shape[1:] != (plan.size, 3) or rhs.shape[:2] != (batch, plan.size):
        raise ValueError(
            f"bands {tuple(bands.shape)} and right-hand side {tuple(rhs.shape)} do not fit the plan's padded size "
            f"{plan.size}"
        )
    bands, rhs = (t if t.is_contiguous() else t.contiguous() for t in (bands, rhs))  # read below as views
    x, inverse = _solve(
        bands.view(batch, -1), rhs.view(batch, plan.size // 2, 2, r), plan.levels, plan.dense, trace_with is not None
    )
    x = x.view(batch, plan.size, r)
    if trace_with is None:
        return x
    other = trace_with.reshape(batch, -1).gather(1, plan.pair_entries.expand(batch, -1))
    return x, (inverse * other * plan.trace_weights).sum(-1)


def _solve(storage: torch.Tensor, rhs: torch.Tensor, levels: tuple, dense: DenseLevel, invert: bool):
    """``x`` ``(B, P, 2, r)`` of the block tridiagonal system in ``storage`` (its flat storage ``(B, >= 8 P)``, or at
    the first level the flattened bands) with ``rhs`` ``(B, P, 2, r)``, and with ``invert`` the storage ``(B, 8 P)``
    of its inverse's block tridiagonal part."""
    batch, pairs, r = rhs.shape[0], rhs.shape[1], rhs.shape[-1]
    if not levels:
        # (index_select, not an expanded gather as below: two fewer ops, and the dense system is small)
        matrix = storage.index_select(1, dense.entries).view(batch, 2 * pairs, 2 * pairs)
        inv_l = _inverse_factor(matrix, dense.identity)
        inv_l_t = inv_l.transpose(1, 2)
        x = torch.bmm(inv_l_t, torch.bmm(inv_l, rhs.reshape(batch, 2 * pairs, r))).view(rhs.shape)
        if not invert:
            return x, None
        inverse = torch.bmm(inv_l_t, inv_l).view(batch, -1).gather(1, dense.inverse_entries.expand(batch, -1))
        return x, inverse
    level = levels[0]
    nb, width = level.blocks, level.width
    interior = storage.gather(1, level.interior_entries.expand(batch, -1)).view(batch * nb, width, width)
    coupling = storage.gather(1, level.coupling_entries.expand(batch, -1)).view(batch * nb, width + 2, 4)
    # [L_j^-1, 0] of A_jj = L_j L_j^T, (w, w + 2): applied to a block's rows with its separator pair, a view of the
    # right-hand sides (the blocks tile them), it reads the interior rows only
    inv_l_padded = _inverse_factor(interior, level.identity)
    v_c, v_b = torch.bmm(inv_l_padded, coupling), torch.bmm(inv_l_padded, rhs.view(batch * nb, width + 2, r))
    v_ct = v_c.transpose(1, 2)
    schur = storage.gather(1, level.separator_entries.expand(batch, -1))
    schur.index_add_(1, level.schur_entries, torch.bmm(v_ct, v_c).view(batch, 16 * nb), alpha=-1.0)
    right = rhs.index_select(1, level.separator_pairs)  # minus C_j^T A_jj^-1 b_j, below
    right = right.view(batch, -1, r)
    right.index_add_(1, level.separator_rows, torch.bmm(v_ct, v_b).view(batch, 4 * nb, r), alpha=-1.0)
    x_s, sigma = _solve(schur, right.view(batch, -1, 2, r), levels[1:], dense, invert)
    around = x_s.view(batch, -1, r).index_select(1, level.separator_rows).view(batch * nb, 4, r)
    # each block with its separator pair, (w + 2) rows: [A_jj^-1 b_j; 0] + [-A_jj^-1 C_j; pick of the pair after] x
    inv_l_t = inv_l_padded.transpose(1, 2)  # [L_j^-T; 0]
    z = torch.baddbmm(level.separator_pick, inv_l_t, v_c, alpha=-1.0)
    x = torch.baddbmm(torch.bmm(inv_l_t, v_b), z, around).view(rhs.shape)
    if not invert:
        return x, None
    local = sigma.gather(1, level.local_entries.expand(batch, -1)).view(batch * nb, 4, 4)
    minus_z_c = z[:, :width]  # -A_jj^-1 C_j
    inv_is = torch.bmm(minus_z_c, local)  # (A^-1)_IS = -Z Sigma
    inv_l = inv_l_padded[..., :width]
    inv_ii = torch.baddbmm(torch.bmm(inv_l.transpose(1, 2), inv_l), inv_is, minus_z_c.transpose(1, 2))
    source = torch.cat([inv_ii.view(batch, -1), inv_is.reshape(batch, -1), sigma], 1)
    return x, source.gather(1, level.inverse_entries.expand(batch, -1))
