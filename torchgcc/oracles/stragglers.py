"""The oracle straggler adversary: per group, the straggler set that maximises the decode error.

An EVALUATION ORACLE, never a serving component: it reads the workers' results AND the exact outputs (the
reference), which no system that decodes has, and searches for the ``S`` workers whose absence hurts the estimate
most. It measures the worst case that the theory's ``O(S^3 N^-3)`` bound speaks of; a geometric rule such as
:class:`torchgcc.stragglers.FixedStragglers`' ``placement="widest_gap"`` only guesses it.

Three searches, per group; the worst set any of them finds is the answer:

- ``"block"``: every contiguous block of ``S`` workers (``N - S + 1`` positions; the points are ascending, so a block
  is a run of neighbouring points; the theory's worst case for splines);
- ``"greedy"``: non-contiguous sets grown one straggler at a time, each round adding the worker whose absence
  (given those already removed) gives the largest error: ``S`` rounds of at most ``N`` candidates;
- ``"swap"``: hill climbing from several starts (the greedy set and the ``starts`` worst blocks): each round tries
  moving every straggler to each arrived worker at most ``radius`` positions away and keeps the best move while it
  increases the error (at most ``2 S`` rounds per start). It finds near-blocks such as ``{9, 10, 12}``, which beat
  every block in some groups at small N.

No polynomial search is exhaustive (there are ``C(N, S)`` sets); the tests compare the result with an exhaustive
search at small N.

The error of a group is the mean squared error of its ``K`` estimates over every output entry,
``mean_{k, j} (decoded - reference)^2``. Candidate masks are decoded by the decoder itself (its forward, so
data-adaptive decoders such as GCV are searched as they serve), all groups and candidates of a round in batches of at
most ``max_elements`` result entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["WorstStragglers", "block_masks", "decode_errors", "worst_stragglers", "SEARCHES"]

#: The searches :func:`worst_stragglers` can run.
SEARCHES = ("block", "greedy", "swap")

#: Default bound on the result entries (groups x workers x outputs) decoded in one batch (32 MiB of float64).
MAX_ELEMENTS = 2**22


@dataclass
class WorstStragglers:
    """What :func:`worst_stragglers` found, per group (``B`` groups, ``N`` workers).

    Attributes:
        masks: ``(B, N)`` bool, True = arrived: the worst straggler set found.
        errors: ``(B,)`` float64: each group's MSE under ``masks``.
        block_errors: ``(B,)`` float64: the largest MSE over the contiguous blocks.
        block_starts: ``(B,)`` int64: the first straggler of that block.
        greedy_errors: ``(B,)`` float64: the MSE of the greedy set (NaN when greedy was not run).
    """

    masks: torch.Tensor
    errors: torch.Tensor
    block_errors: torch.Tensor
    block_starts: torch.Tensor
    greedy_errors: torch.Tensor

    @property
    def beyond_block(self) -> torch.Tensor:
        """``(B,)`` bool: the groups whose worst set is not a block (strictly worse than every block)."""
        return self.errors > self.block_errors


def block_masks(num_workers: int, num_stragglers: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(N - S + 1, N)`` bool masks, row ``i`` with workers ``i .. i + S - 1`` straggling (True = arrived)."""
    index = torch.arange(num_workers, device=device)
    start = torch.arange(num_workers - num_stragglers + 1, device=device).unsqueeze(1)
    return (index < start) | (index >= start + num_stragglers)


@torch.no_grad()
def decode_errors(
    decoder: torch.nn.Module,
    results: torch.Tensor,
    reference: torch.Tensor,
    masks: torch.Tensor,
    *,
    max_elements: int = MAX_ELEMENTS,
) -> torch.Tensor:
    """``(B, C)`` float64 MSE of every group under each of its ``C`` candidate masks.

    Args:
        decoder: a decoder ``(G, N, *out), (G, N) mask -> (G, K, *out)``.
        results: ``(B, N, *out)`` the workers' results.
        reference: ``(B, K, *out)`` the exact outputs.
        masks: ``(B, C, N)`` bool candidate masks per group, or ``(C, N)`` shared by every group.
        max_elements: the most result entries decoded in one call of the decoder.
    """
    b, n = results.shape[:2]
    if masks.dim() == 2:
        masks = masks.unsqueeze(0).expand(b, -1, -1)
    if masks.shape[0] != b or masks.shape[2] != n:
        raise ValueError(f"masks must be (B={b}, C, N={n}) or (C, N), got {tuple(masks.shape)}")
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


@torch.no_grad()
def worst_stragglers(
    decoder: torch.nn.Module,
    results: torch.Tensor,
    reference: torch.Tensor,
    num_stragglers: int,
    *,
    searches: tuple[str, ...] = SEARCHES,
    radius: int = 2,
    starts: int = 3,
    max_elements: int = MAX_ELEMENTS,
) -> WorstStragglers:
    """The oracle adversary: per group, the set of ``num_stragglers`` workers whose absence maximises the MSE.

    Args:
        decoder: the decoder under attack (``code.decoder``).
        results: ``(B, N, *out)`` every worker's result (all of them: the oracle chooses who straggles).
        reference: ``(B, K, *out)`` the exact outputs ``f(x_k)``.
        num_stragglers: S, with ``0 <= S`` and ``N - S`` at least the decoder's ``min_arrived``.
        searches: a subset of :data:`SEARCHES`; ``"block"`` always runs (it gives ``block_errors``).
        radius: how far (in worker positions) ``"swap"`` moves one straggler per try.
        starts: how many of the worst blocks ``"swap"`` starts from (besides the greedy set).
        max_elements: the most result entries decoded in one call (memory bound).

    Returns:
        a :class:`WorstStragglers`; ``masks`` and ``errors`` are the worst set found per group.
    """
    unknown = set(searches) - set(SEARCHES)
    if unknown:
        raise ValueError(f"searches must be a subset of {SEARCHES}, got {searches!r}")
    for name, value in (("radius", radius), ("starts", starts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if results.dim() < 2 or reference.dim() < 2 or reference.shape[0] != results.shape[0]:
        raise ValueError(
            f"results must be (B, N, *out) and reference (B, K, *out), got {tuple(results.shape)} and "
            f"{tuple(reference.shape)}"
        )
    b, n = results.shape[:2]
    s = num_stragglers
    needed = getattr(decoder, "min_arrived", 1)
    if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= n - needed:
        raise ValueError(
            f"num_stragglers must be an integer in [0, N - min_arrived] = [0, {n - needed}] (N={n}), got {s!r}"
        )

    def errors_of(masks: torch.Tensor) -> torch.Tensor:
        return decode_errors(decoder, results, reference, masks, max_elements=max_elements)

    device = results.device
    blocks = block_masks(n, s, device)
    ranked, order = errors_of(blocks).sort(dim=1, descending=True)  # over the N - S + 1 positions
    block_errors, block_starts = ranked[:, 0], order[:, 0]
    masks, errors = blocks[block_starts], block_errors.clone()
    greedy_errors = torch.full((b,), float("nan"), dtype=torch.float64, device=device)
    if s == 0:
        return WorstStragglers(masks, errors, block_errors, block_starts, greedy_errors)
    found = [(masks, errors)] + [(blocks[order[:, i]], ranked[:, i]) for i in range(1, min(starts, order.shape[1]))]
    if "greedy" in searches:
        grown, greedy_errors = _greedy(errors_of, b, n, s, device)
        found.append((grown, greedy_errors))
    if "swap" in searches:
        found = [_swap(errors_of, m, e, radius, rounds=2 * s) for m, e in found]
    for candidate, candidate_errors in found:
        better = candidate_errors > errors
        masks = torch.where(better.unsqueeze(1), candidate, masks)
        errors = torch.where(better, candidate_errors, errors)
    return WorstStragglers(masks, errors, block_errors, block_starts, greedy_errors)


def _greedy(errors_of, b: int, n: int, s: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Grow each group's straggler set one worker at a time, always the one that increases the error most."""
    current = torch.ones(b, n, dtype=torch.bool, device=device)
    eye = torch.eye(n, dtype=torch.bool, device=device)
    best = torch.empty(b, dtype=torch.float64, device=device)
    for _ in range(s):
        scores = errors_of(current.unsqueeze(1) & ~eye)  # candidate j: current stragglers plus worker j
        best, pick = scores.masked_fill(~current, -float("inf")).max(dim=1)
        current = current & ~eye[pick]
    return current, best


def _swap(errors_of, masks: torch.Tensor, errors: torch.Tensor, radius: int, *, rounds: int):
    """Hill climbing: move one straggler by at most ``radius`` positions per round while the error grows."""
    b, n = masks.shape
    offsets = torch.tensor([o for o in range(-radius, radius + 1) if o], device=masks.device)
    rows = torch.arange(b, device=masks.device).view(b, 1, 1)
    for _ in range(rounds):
        stragglers = (~masks).nonzero()[:, 1].view(b, -1)  # (B, S) ascending
        target = stragglers.unsqueeze(2) + offsets  # (B, S, 2 r)
        inside = (target >= 0) & (target < n)
        target = target.clamp(0, n - 1)
        valid = inside & masks[rows, target]  # the target must be an arrived worker
        candidates = masks.view(b, 1, 1, n).repeat(1, stragglers.shape[1], len(offsets), 1)
        candidates.scatter_(3, stragglers.view(b, -1, 1, 1).expand(-1, -1, len(offsets), 1), True)
        candidates.scatter_(3, target.unsqueeze(3), False)
        candidates = candidates.view(b, -1, n)
        scores = errors_of(candidates).masked_fill(~valid.view(b, -1), -float("inf"))
        best, pick = scores.max(dim=1)
        improved = best > errors
        if not improved.any():
            break
        masks = torch.where(improved.unsqueeze(1), candidates[torch.arange(b), pick], masks)
        errors = torch.where(improved, best, errors)
    return masks, errors
