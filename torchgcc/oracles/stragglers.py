"""The oracle straggler adversary: per group, the straggler set that maximises the decode error.

An EVALUATION ORACLE, never a serving component: it reads the workers' results AND the exact outputs (the
reference), which no system that decodes has, and searches for the ``S`` workers whose absence hurts the estimate
most. It measures the worst case that the theory's ``O(S^3 N^-3)`` bound speaks of; a geometric rule such as
:class:`torchgcc.stragglers.FixedStragglers`' ``placement="widest_gap"`` only guesses it.

What it guarantees, per group:

- **exact** when ``C(N, S) <= exhaustive_limit`` (default :data:`EXHAUSTIVE_LIMIT` = 200,000): every straggler set
  is decoded (in batches) and the worst one returned;
- above that, **at least as bad as every set of one or two contiguous runs** of stragglers (every block and every
  pair of blocks, ``S - 1`` splits of ``S`` at every pair of positions: the shape of the theory's worst case, the
  largest gap, and of the near-blocks that beat it at small N), **and a local maximum under single moves**: from
  each of several starting sets (the ``starts`` worst blocks and block pairs, and a greedy set grown one straggler at a
  time)
  hill climbing moves one straggler to any arrived worker while that increases the error, until no such move does.
  No claim of a global maximum is made there (``exact`` is False).

The error of a group is the mean squared error of its ``K`` estimates over every output entry,
``mean_{k, j} (decoded - reference)^2``; a set under which the decoder returns a NaN estimate (it cannot make it:
replication without a copy of an input) has a NaN error, and counts as worse than every finite one. Candidate
masks are decoded by the decoder itself: a mask-only :class:`~torchgcc.codes.maps.Decoder` (its matrices depend on
the mask only, as the calibrated default's do) by its ``decode_matrix``, one matrix per candidate shared by every
group that tries it; any other torchgcc decoder (data-adaptive ones such as GCV per group, or a wrapper with the
decoder's ``num_inputs`` and ``num_workers``) by its forward, so it is searched as it serves. Batches hold at most
``max_elements`` entries.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from torchgcc.checks import check_integer
from torchgcc.codes.maps import Decoder
from torchgcc.oracles.inputs import check_outputs, worse

__all__ = [
    "EXHAUSTIVE_LIMIT",
    "WorstStragglers",
    "block_masks",
    "block_pair_masks",
    "decode_errors",
    "subset_masks",
    "worst_stragglers",
]

#: Straggler sets searched exhaustively up to this many (``C(N, S)``).
EXHAUSTIVE_LIMIT = 200_000

#: Default bound on the entries (results, decode-matrix entries or estimates) one batch holds (32 MiB of float64).
MAX_ELEMENTS = 2**22


@dataclass
class WorstStragglers:
    """What :func:`worst_stragglers` found, per group (``B`` groups, ``N`` workers).

    Attributes:
        masks: ``(B, N)`` bool, True = arrived: the worst straggler set found, ``S`` stragglers per group.
        errors: ``(B,)`` float64: each group's MSE under ``masks`` (NaN: the decoder returned a NaN estimate).
        block_errors: ``(B,)`` float64: the largest MSE over the contiguous blocks.
        block_starts: ``(B,)`` int64: the first straggler of that block.
        exact: whether ``masks`` is the worst set over all ``C(N, S)`` (the exhaustive search ran).
        candidates: how many straggler sets were decoded per group.
    """

    masks: torch.Tensor
    errors: torch.Tensor
    block_errors: torch.Tensor
    block_starts: torch.Tensor
    exact: bool
    candidates: int

    @property
    def beyond_block(self) -> torch.Tensor:
        """``(B,)`` bool: the groups whose worst set is not one contiguous block of stragglers."""
        straggles = ~self.masks
        runs = straggles[:, 0].int() + (straggles[:, 1:] & ~straggles[:, :-1]).sum(dim=1)
        return runs > 1


def block_masks(num_workers: int, num_stragglers: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(N - S + 1, N)`` bool masks, row ``i`` with workers ``i .. i + S - 1`` straggling (True = arrived)."""
    index = torch.arange(num_workers, device=device)
    start = torch.arange(num_workers - num_stragglers + 1, device=device).unsqueeze(1)
    return (index < start) | (index >= start + num_stragglers)


def block_pair_masks(num_workers: int, num_stragglers: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(C, N)`` bool masks of every set of exactly two separate runs of stragglers: a block of ``a`` and a block of
    ``S - a`` (``1 <= a < S``) with at least one arrived worker between them (True = arrived)."""
    n, s = num_workers, num_stragglers
    index = torch.arange(n, device=device)
    rows = []
    for first in range(1, s):
        second = s - first
        start1, start2 = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        keep = start2 >= start1 + first + 1  # a gap of at least one worker
        keep &= start2 + second <= n
        start1, start2 = start1[keep].to(device).unsqueeze(1), start2[keep].to(device).unsqueeze(1)
        straggle = ((index >= start1) & (index < start1 + first)) | ((index >= start2) & (index < start2 + second))
        rows.append(~straggle)
    return torch.cat(rows) if rows else torch.ones(0, n, dtype=torch.bool, device=device)


def subset_masks(
    num_workers: int, num_stragglers: int, *, chunk: int, device: torch.device | str | None = None
) -> Iterator[torch.Tensor]:
    """Every ``C(N, S)`` straggler set as ``(c, N)`` bool masks (True = arrived), ``chunk`` rows at a time, in the
    lexicographic order of the straggler indices."""
    combinations = itertools.combinations(range(num_workers), num_stragglers)
    while True:
        batch = list(itertools.islice(combinations, chunk))
        if not batch:
            return
        masks = torch.ones(len(batch), num_workers, dtype=torch.bool)
        if num_stragglers:
            masks.scatter_(1, torch.tensor(batch, dtype=torch.int64), False)
        yield masks.to(device)


@torch.no_grad()
def decode_errors(
    decoder: torch.nn.Module,
    results: torch.Tensor,
    reference: torch.Tensor,
    masks: torch.Tensor,
    *,
    max_elements: int = MAX_ELEMENTS,
) -> torch.Tensor:
    """``(B, C)`` float64 MSE of every group under each of its ``C`` candidate masks (NaN where the decoder returns
    a NaN estimate).

    Args:
        decoder: a torchgcc decoder ``(G, N, *out), (G, N) mask -> (G, K, *out)`` (``code.decoder``).
        results: ``(B, N, *out)`` floating point, ``B >= 1``: the workers' results.
        reference: ``(B, K, *out)`` finite, floating point: the exact outputs.
        masks: ``(B, C, N)`` bool candidate masks per group, or ``(C, N)`` shared by every group (a mask-only
            decoder then builds each candidate's matrix once for all groups).
        max_elements: the most entries one batch holds, an integer >= 1.

    Raises:
        TypeError, ValueError: one line naming the argument that is not as above (:func:`check_outputs`).
    """
    results, reference = check_outputs(decoder, results, reference)
    max_elements = check_integer("max_elements", max_elements, minimum=1)
    b, n = results.shape[:2]
    if not isinstance(masks, torch.Tensor) or masks.dtype != torch.bool:
        found = masks.dtype if isinstance(masks, torch.Tensor) else type(masks).__name__
        raise TypeError(f"masks must be a bool tensor (True = arrived), got {found}")
    shared = masks.dim() == 2
    if masks.dim() not in (2, 3) or masks.shape[-1] != n or not (shared or masks.shape[0] == b):
        raise ValueError(f"masks must be (B={b}, C, N={n}) or (C, N), got {tuple(masks.shape)}")
    if shared:
        # a mask-only torchgcc decoder's estimates are decode_matrix(mask) @ results: one matrix per candidate
        if isinstance(decoder, Decoder) and not decoder.depends_on_results and bool(torch.isfinite(results).all()):
            return _shared_matrix_errors(decoder, results, reference, masks, max_elements)
        masks = masks.unsqueeze(0).expand(b, -1, -1)
    c = masks.shape[1]
    flat = results.reshape(b, n, -1)
    truth = reference.reshape(b, reference.shape[1], -1).to(torch.float64)
    per_chunk = max(1, max_elements // max(1, b * flat[0].numel()))
    errors = torch.empty(b, c, dtype=torch.float64, device=results.device)
    for first in range(0, c, per_chunk):
        chunk = masks[:, first : first + per_chunk]  # (B, c', N)
        width = chunk.shape[1]
        y = flat.unsqueeze(1).expand(b, width, n, flat.shape[-1]).reshape(b * width, n, -1)
        decoded = decoder(y, chunk.reshape(b * width, n)).reshape(b, width, truth.shape[1], -1)
        errors[:, first : first + width] = (decoded.to(torch.float64) - truth.unsqueeze(1)).pow(2).mean(dim=(2, 3))
    return errors


def _shared_matrix_errors(
    decoder: Decoder, results: torch.Tensor, reference: torch.Tensor, masks: torch.Tensor, max_elements: int
) -> torch.Tensor:
    """:func:`decode_errors` for masks ``(C, N)`` shared by every group, each candidate's matrix built once."""
    b, n = results.shape[:2]
    flat = results.reshape(b, n, -1).to(torch.float64)
    truth = reference.reshape(b, reference.shape[1], -1).to(torch.float64)
    k, d = truth.shape[1:]
    per_chunk = max(1, max_elements // max(1, k * max(n, b * d)))
    errors = torch.empty(b, len(masks), dtype=torch.float64, device=results.device)
    for first in range(0, len(masks), per_chunk):
        chunk = masks[first : first + per_chunk].to(decoder.beta.device)
        matrices = decoder.decode_matrix(chunk).to(flat.device)  # (c, K, N), zero at the stragglers
        decoded = torch.einsum("ckn,bnd->bckd", matrices, flat)
        errors[:, first : first + len(chunk)] = (decoded - truth.unsqueeze(1)).pow(2).mean(dim=(2, 3))
    return errors


@torch.no_grad()
def worst_stragglers(
    decoder: torch.nn.Module,
    results: torch.Tensor,
    reference: torch.Tensor,
    num_stragglers: int,
    *,
    exhaustive_limit: int = EXHAUSTIVE_LIMIT,
    starts: int = 3,
    max_elements: int = MAX_ELEMENTS,
) -> WorstStragglers:
    """The oracle adversary: per group, the set of ``num_stragglers`` workers whose absence maximises the MSE.

    Exact (every set) when ``C(N, S) <= exhaustive_limit``; above, the worst of every block and every pair of blocks,
    improved by single-straggler moves to a local maximum from ``starts`` starting sets (module docstring).

    Args:
        decoder: the decoder under attack (``code.decoder``: a torchgcc decoder, with ``num_inputs`` and
            ``num_workers``).
        results: ``(B, N, *out)`` floating point, ``B >= 1``: every worker's result (all of them: the oracle chooses
            who straggles).
        reference: ``(B, K, *out)`` finite, floating point: the exact outputs ``f(x_k)``, of the results' ``B`` and
            ``*out`` and the decoder's ``K``.
        num_stragglers: S, an integer with ``0 <= S`` and ``N - S`` at least the decoder's ``min_arrived``.
        exhaustive_limit: the most sets searched exhaustively, an integer >= 1.
        starts: how many of each group's worst blocks and block pairs the hill climbing starts from above the
            limit (besides the greedy set), an integer >= 1.
        max_elements: the most entries one batch holds (memory bound), an integer >= 1.

    Returns:
        a :class:`WorstStragglers`; ``masks`` and ``errors`` are the worst set found per group.

    Raises:
        TypeError, ValueError: one line naming the argument that is not as above.
    """
    starts = check_integer("starts", starts, minimum=1)
    exhaustive_limit = check_integer("exhaustive_limit", exhaustive_limit, minimum=1)
    max_elements = check_integer("max_elements", max_elements, minimum=1)
    results, reference = check_outputs(decoder, results, reference)
    b, n = results.shape[:2]
    s = check_integer("num_stragglers", num_stragglers, minimum=0)
    needed = getattr(decoder, "min_arrived", 1)
    if s > n - needed:
        raise ValueError(
            f"num_stragglers must be an integer in [0, N - min_arrived] = [0, {n - needed}] (N={n}), got {s!r}"
        )

    def errors_of(masks: torch.Tensor) -> torch.Tensor:
        return decode_errors(decoder, results, reference, masks, max_elements=max_elements)

    device = results.device
    blocks = block_masks(n, s, device)
    block_scores = errors_of(blocks)  # first: an uncalibrated default calibrates on these masks, as before
    block_errors, block_starts = block_scores.max(dim=1)
    if math.comb(n, s) <= exhaustive_limit:
        masks, errors = _exhaustive(errors_of, b, n, s, max(1, max_elements // n), device)
        return WorstStragglers(masks, errors, block_errors, block_starts, True, math.comb(n, s))
    pairs = block_pair_masks(n, s, device)
    shapes = torch.cat([blocks, pairs])
    scores = torch.cat([block_scores, errors_of(pairs)], dim=1)  # (B, blocks + pairs)
    ranked = scores.topk(min(starts, scores.shape[1]), dim=1)  # the worst shapes first
    found = [(shapes[ranked.indices[:, i]], ranked.values[:, i]) for i in range(ranked.indices.shape[1])]
    found.append(_greedy(errors_of, b, n, s, device))
    masks, errors = _climb(errors_of, *found[0])  # from the worst shape: at least as bad as every shape
    for start in found[1:]:
        candidate, candidate_errors = _climb(errors_of, *start)
        better = worse(candidate_errors, errors)
        masks = torch.where(better.unsqueeze(1), candidate, masks)
        errors = torch.where(better, candidate_errors, errors)
    return WorstStragglers(masks, errors, block_errors, block_starts, False, shapes.shape[0])


def _exhaustive(errors_of: Callable, b: int, n: int, s: int, chunk: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The worst of every ``C(N, S)`` set per group (the first chunk replaces the placeholder: every MSE, NaN
    included, is :func:`worse` than ``-inf``; ``max`` ranks NaN first)."""
    errors = torch.full((b,), -math.inf, dtype=torch.float64, device=device)
    masks = torch.ones(b, n, dtype=torch.bool, device=device)
    for candidates in subset_masks(n, s, chunk=chunk, device=device):
        scores, at = errors_of(candidates).max(dim=1)
        better = worse(scores, errors)
        masks = torch.where(better.unsqueeze(1), candidates[at], masks)
        errors = torch.where(better, scores, errors)
    return masks, errors


def _greedy(errors_of: Callable, b: int, n: int, s: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Grow each group's straggler set one worker at a time, always the one that increases the error most."""
    current = torch.ones(b, n, dtype=torch.bool, device=device)
    eye = torch.eye(n, dtype=torch.bool, device=device)
    best = torch.empty(b, dtype=torch.float64, device=device)
    for _ in range(s):
        scores = errors_of(current.unsqueeze(1) & ~eye)  # candidate j: current stragglers plus worker j
        best, pick = scores.masked_fill(~current, -math.inf).max(dim=1)
        current = current & ~eye[pick]
    return current, best


def _climb(errors_of: Callable, masks: torch.Tensor, errors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hill climbing over single moves: each round tries moving every straggler to every arrived worker and keeps
    the best move while it makes the error :func:`worse`; stops at a local maximum (the error grows strictly every
    round, and nothing is worse than NaN, so it ends)."""
    b, n = masks.shape
    rows = torch.arange(b, device=masks.device)
    while True:
        stragglers = (~masks).nonzero()[:, 1].view(b, -1)  # (B, S) ascending
        s = stragglers.shape[1]
        candidates = masks.view(b, 1, 1, n).repeat(1, s, n, 1)  # (B, S, N, N): move straggler i to worker j
        candidates.scatter_(3, stragglers.view(b, s, 1, 1).expand(-1, -1, n, 1), True)
        target = torch.arange(n, device=masks.device).view(1, 1, n, 1).expand(b, s, n, 1)
        candidates.scatter_(3, target, False)
        valid = masks.view(b, 1, n).expand(b, s, n)  # the target must be an arrived worker
        scores = errors_of(candidates.view(b, s * n, n)).masked_fill(~valid.reshape(b, -1), -math.inf)
        best, pick = scores.max(dim=1)
        improved = worse(best, errors)
        if not improved.any():
            return masks, errors
        masks = torch.where(improved.unsqueeze(1), candidates.view(b, s * n, n)[rows, pick], masks)
        errors = torch.where(improved, best, errors)
