"""The oracle attack search: per group, the attack by ``q`` adversaries that maximises a decoder's error.

An EVALUATION ORACLE, never a serving component: it reads the exact outputs (the reference) and tries attacks of
:mod:`torchgcc.attacks` against the decoder until it finds the worst, as an omniscient adversary would (the threat
model of arXiv 2502.08058: ``q`` arrived results arbitrary, bounded by ``M``). A fixed attack at full strength
(``+M``) is what locating decoders catch best; the search also tries what they miss:

- ``"shift"``: a block of ``q`` consecutive arrived workers returns ``y + delta``, clipped to ``[-M, M]``, for
  ``delta = +-M 10^(-j/4)`` over four decades (:data:`SHIFT_FRACTIONS`) and every block position when there are at
  most ``max_starts`` (default 128); beyond that, ``max_starts`` evenly spaced ones for every delta, then, per delta
  and group, every position within one spacing of its worst (the error is a jagged function of the position: a block
  over a regression point hurts far more than one between two, so the spread search can miss the worst by a few %);
- ``"signflip"``, ``"random"`` (``+M``), ``"random_pm"`` (``+-M`` per entry), ``"constant"`` (``-M``, 0, ``+M``):
  ``q`` random arrived workers, ``draws`` draws each;
- ``"greedy"``: :class:`~torchgcc.attacks.GreedyAttack` (the sister paper's greedy push).

The error of a group is the MSE of its ``K`` estimates over every output entry (NaN where the decoder returns a NaN
estimate, which counts as worse than every finite error). For decoders that locate
(``last_flagged``), :class:`WorstAttacks` also says whether the worst attacks were detected (all their workers
flagged); with ``classification=True`` it also gives the argmax agreement with the reference (RelAcc) under the
worst-MSE attack and the lowest agreement over every attack tried.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from torchgcc.attacks import Attack, ConstantAttack, GreedyAttack, RandomAttack, ShiftAttack, SignFlipAttack
from torchgcc.checks import check_integer, check_mask, check_real, check_seed
from torchgcc.oracles.inputs import check_outputs, worse

__all__ = ["FAMILIES", "SHIFT_FRACTIONS", "AttackErrors", "WorstAttacks", "attack_errors", "worst_attacks"]

#: The attack families :func:`worst_attacks` searches.
FAMILIES = ("shift", "signflip", "random", "random_pm", "constant", "greedy")

#: Shift magnitudes as fractions of the bound M: 1 down to 1e-4, four per decade.
SHIFT_FRACTIONS = tuple(10 ** (-j / 4) for j in range(17))


@dataclass
class WorstAttacks:
    """What :func:`worst_attacks` found, per group (``B`` groups).

    Attributes:
        errors: ``(B,)`` float64: the largest MSE over every attack tried.
        attacks: per group, a description of that attack (e.g. ``"shift delta=-3.16 start=17"``).
        detected: ``(B,)`` bool: whether the decoder flagged every worker of that attack (None: it does not flag).
        family_errors: family -> ``(B,)`` float64, the largest MSE within the family.
        family_detected: family -> ``(B,)`` bool, detection of the family's worst attack (decoders that flag).
        shifts: ``(J,)`` float64 shift magnitudes tried.
        shift_errors: ``(B, J)`` float64: per magnitude, the largest MSE over sign and the spread positions.
        shift_detected: ``(B, J)`` bool: per magnitude, whether that worst shift was detected (None: no flags).
        agreement: ``(B,)`` float64 argmax agreement under the worst attack (``classification=True``; else None).
        min_agreement: ``(B,)`` float64 the lowest argmax agreement over every attack tried (likewise).
    """

    errors: torch.Tensor
    attacks: list[str]
    detected: Optional[torch.Tensor] = None
    agreement: Optional[torch.Tensor] = None
    min_agreement: Optional[torch.Tensor] = None
    family_errors: dict[str, torch.Tensor] = field(default_factory=dict)
    family_detected: dict[str, torch.Tensor] = field(default_factory=dict)
    shifts: Optional[torch.Tensor] = None
    shift_errors: Optional[torch.Tensor] = None
    shift_detected: Optional[torch.Tensor] = None

    def fold(self, family: str, found: "AttackErrors", describe: Callable[[int, int], str]) -> None:
        """Add a family's results for ``C`` attacks (:class:`AttackErrors`, ``(C, B)`` each); ``describe(c, group)``
        names one attack."""
        best, index = found.errors.max(dim=0)
        groups = torch.arange(len(best))
        self.family_errors[family] = best
        if found.detected is not None:
            self.family_detected[family] = found.detected[index, groups]
            if self.detected is None:
                self.detected = torch.zeros(len(best), dtype=torch.bool)
        if found.agreement is not None:
            lowest = found.agreement.min(dim=0).values
            if self.agreement is None or self.min_agreement is None:
                self.agreement, self.min_agreement = torch.ones(len(best), dtype=torch.float64), lowest
            self.min_agreement = torch.minimum(self.min_agreement, lowest)
        for group in groups.tolist():
            if worse(best[group], self.errors[group]):
                self.errors[group] = best[group]
                self.attacks[group] = describe(int(index[group]), group)
                if found.detected is not None and self.detected is not None:
                    self.detected[group] = self.family_detected[family][group]
                if found.agreement is not None and self.agreement is not None:
                    self.agreement[group] = found.agreement[index[group], group]


@dataclass
class AttackErrors:
    """:func:`attack_errors`' results for ``C`` attacks and ``B`` groups, each ``(C, B)`` on the CPU: the MSE, the
    detection (None when the decoder does not flag) and the argmax agreement (None unless asked for)."""

    errors: torch.Tensor
    detected: Optional[torch.Tensor] = None
    agreement: Optional[torch.Tensor] = None

    def cat(self, other: "AttackErrors") -> "AttackErrors":
        """Both sets of attacks, this one's first."""

        def join(a, b):
            return None if a is None else torch.cat([a, b])

        return AttackErrors(
            torch.cat([self.errors, other.errors]),
            join(self.detected, other.detected),
            join(self.agreement, other.agreement),
        )

    def map(self, transform: Callable[[torch.Tensor], torch.Tensor]) -> "AttackErrors":
        """``transform`` applied to each field that is present."""
        return AttackErrors(
            transform(self.errors),
            None if self.detected is None else transform(self.detected),
            None if self.agreement is None else transform(self.agreement),
        )


@torch.no_grad()
def attack_errors(
    decoder: torch.nn.Module,
    results: torch.Tensor,
    mask: torch.Tensor,
    reference: torch.Tensor,
    attacks: list[Attack],
    *,
    classification: bool = False,
    max_elements: int = 2**22,
) -> AttackErrors:
    """The MSE of every group under each of ``C`` attacks, whether the decoder flagged all of each attack's workers,
    and (``classification``) the argmax agreement of the estimates with the reference over the last dimension.

    ``results`` ``(B, N, *out)`` floating point (``B >= 1``), ``mask`` ``(B, N)`` bool (True = arrived),
    ``reference`` ``(B, K, *out)`` finite, floating point (``N`` and ``K`` the decoder's); the attacked results of
    several attacks are decoded in one call, ``max_elements`` (an integer >= 1) result entries at most. Anything else
    raises a one-line ``TypeError`` / ``ValueError`` naming the argument.
    """
    results, reference = check_outputs(decoder, results, reference)
    mask = check_mask(mask, results.shape[1], results.shape[0])
    max_elements = check_integer("max_elements", max_elements, minimum=1)
    b = results.shape[0]
    truth = reference.to(torch.float64)
    per_call = max(1, max_elements // max(1, results.numel()))
    errors = torch.empty(len(attacks), b, dtype=torch.float64)
    detected: Optional[torch.Tensor] = None
    agreement = torch.empty(len(attacks), b, dtype=torch.float64) if classification else None
    for first in range(0, len(attacks), per_call):
        chunk = attacks[first : first + per_call]
        attacked = torch.cat([attack(results, mask) for attack in chunk])  # (c B, N, *out)
        corrupted = torch.cat([attack.last_corrupted for attack in chunk])  # type: ignore[misc]  # set by each call
        decoded = decoder(attacked, mask.repeat(len(chunk), 1)).to(torch.float64).unflatten(0, (len(chunk), b))
        rows = slice(first, first + len(chunk))
        errors[rows] = (decoded - truth).pow(2).flatten(2).mean(dim=2).cpu()
        if agreement is not None:
            agreement[rows] = (decoded.argmax(-1) == truth.argmax(-1)).flatten(2).double().mean(dim=2).cpu()
        flagged = getattr(decoder, "last_flagged", None)
        if flagged is not None:
            if detected is None:
                detected = torch.zeros(len(attacks), b, dtype=torch.bool)
            detected[rows] = (flagged.to(corrupted.device) | ~corrupted).all(dim=1).view(len(chunk), b).cpu()
    return AttackErrors(errors, detected, agreement)


def _draw(family: str, c: int, group: int) -> str:
    """The name of the ``c``-th draw of a random attack family (:meth:`WorstAttacks.fold`'s ``describe``)."""
    return f"{family} draw {c}"


@torch.no_grad()
def worst_attacks(
    decoder: torch.nn.Module,
    results: torch.Tensor,
    mask: torch.Tensor,
    reference: torch.Tensor,
    *,
    q: int,
    bound: float,
    families: tuple[str, ...] = FAMILIES,
    shift_fractions: tuple[float, ...] = SHIFT_FRACTIONS,
    max_starts: int = 128,
    draws: int = 8,
    seed: int = 0,
    classification: bool = False,
    max_elements: int = 2**22,
) -> WorstAttacks:
    """Search the attacks of :data:`FAMILIES` for the worst per group (see the module docstring).

    Args:
        decoder: the decoder under attack (``code.decoder``: a torchgcc decoder, with ``num_inputs`` and
            ``num_workers``).
        results: ``(B, N, *out)`` floating point, ``B >= 1``: the honest results (straggler slots are never read).
        mask: ``(B, N)`` bool, True = arrived.
        reference: ``(B, K, *out)`` finite, floating point: the exact outputs, of the results' ``B`` and ``*out`` and
            the decoder's ``K``.
        q: adversaries per group, an integer from 1 to the fewest arrived results.
        bound: ``M > 0``, the bound on what an adversary returns.
        families: a non-empty tuple or list, a subset of :data:`FAMILIES`.
        shift_fractions: a non-empty tuple or list of shift magnitudes as fractions of ``bound`` (finite, > 0).
        max_starts: block positions tried per shift before the refinement around the worst, an integer >= 1.
        draws: random draws per random family, an integer >= 1.
        seed: seed of the random families (:func:`~torchgcc.checks.check_seed`).
        classification: also report the argmax agreement (over the last output dimension) with the reference.
        max_elements: memory bound of one decoder call, an integer >= 1.

    Raises:
        TypeError, ValueError: one line naming the argument that is not as above.
    """
    results, reference = check_outputs(decoder, results, reference)
    mask = check_mask(mask, results.shape[1], results.shape[0])
    families = _non_empty("families", families)
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ValueError(f"families must be a non-empty subset of {FAMILIES}, got {families!r}")
    fewest = int(mask.count_nonzero(dim=1).min())
    q = check_integer("q", q, minimum=1)
    if q > fewest:
        raise ValueError(f"q must be an integer in [1, fewest arrived = {fewest}], got {q!r}")
    bound = check_real("bound", bound, low=0, low_open=True)
    shift_fractions = tuple(
        check_real(f"shift_fractions[{i}]", value, low=0, low_open=True)
        for i, value in enumerate(_non_empty("shift_fractions", shift_fractions))
    )
    max_starts = check_integer("max_starts", max_starts, minimum=1)
    draws = check_integer("draws", draws, minimum=1)
    check_seed("seed", seed)
    b = results.shape[0]

    def evaluate(attacks: list[Attack]) -> AttackErrors:
        return attack_errors(
            decoder, results, mask, reference, attacks, classification=classification, max_elements=max_elements
        )

    found = WorstAttacks(errors=torch.full((b,), -float("inf"), dtype=torch.float64), attacks=[""] * b)
    if "shift" in families:
        _search_shifts(evaluate, found, mask, q, bound, shift_fractions, max_starts)
    random_families: dict[str, Callable[[int], Attack]] = {
        "signflip": lambda s: SignFlipAttack(q, seed=s),
        "random": lambda s: RandomAttack(q, bound, seed=s),
        "random_pm": lambda s: RandomAttack(q, bound, random_sign=True, seed=s),
    }
    for family, make in random_families.items():
        if family in families:
            found.fold(family, evaluate([make(seed + i) for i in range(draws)]), functools.partial(_draw, family))
    if "constant" in families:
        values = (-bound, 0.0, bound)
        tried = evaluate([ConstantAttack(q, v, seed=seed + i) for v in values for i in range(draws)])
        found.fold("constant", tried, lambda c, g: f"constant {values[c // draws]:g} draw {c % draws}")
    if "greedy" in families:
        found.fold("greedy", evaluate([GreedyAttack(q, bound)]), lambda c, g: "greedy")
    return found


def _non_empty(name: str, value: object) -> tuple:
    """``value`` as a tuple if it is a non-empty tuple or list, else a one-line error naming ``name``."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{name} must be a tuple or list, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    return tuple(value)


def _search_shifts(evaluate, found: WorstAttacks, mask, q: int, bound: float, fractions, max_starts: int) -> None:
    """The shift family: every magnitude and sign at up to ``max_starts`` spread positions, then, for every magnitude
    and sign, every position within one spacing of its worst spread position (per group)."""
    b = mask.shape[0]
    room = mask.count_nonzero(dim=1).cpu() - q  # valid starts 0 .. room, per group
    grid = torch.linspace(0, 1, min(max_starts, int(room.min()) + 1), dtype=torch.float64)
    spread = torch.stack([(point * room).round().long() for point in grid])  # (G, B)
    deltas = [sign * bound * f for f in fractions for sign in (1.0, -1.0)]  # D = 2 J
    coarse = evaluate([ShiftAttack(q, d, start=start, bound=bound) for d in deltas for start in spread])
    centre = spread.gather(0, coarse.errors.view(len(deltas), len(grid), b).argmax(dim=1))  # (D, B)
    width = int(room.max()) // max(len(grid) - 1, 1) + 1
    offsets = [o for o in range(-width, width + 1) if o]
    starts = torch.stack([torch.minimum((centre + o).clamp(min=0), room) for o in offsets], dim=1)  # (D, O, B)
    fine = evaluate(
        [ShiftAttack(q, d, start=starts[i, o], bound=bound) for i, d in enumerate(deltas) for o in range(len(offsets))]
    )

    def per_delta(values: torch.Tensor) -> torch.Tensor:
        """``(D G + D O, B)`` in search order -> ``(D, G + O, B)``: every position tried per delta."""
        head, tail = values[: len(deltas) * len(grid)], values[len(deltas) * len(grid) :]
        return torch.cat([head.view(len(deltas), len(grid), b), tail.view(len(deltas), len(offsets), b)], dim=1)

    both = coarse.cat(fine)
    every = both.map(per_delta)
    positions = torch.cat([spread.expand(len(deltas), -1, -1), starts], dim=1)

    def describe(c: int, group: int) -> str:
        d, p = divmod(c, every.errors.shape[1])
        return f"shift delta={deltas[d]:+} start={int(positions[d, p, group])}"

    found.fold("shift", every.map(lambda values: values.reshape(-1, b)), describe)
    by_size = every.errors.view(len(fractions), -1, b)  # (J, 2 (G + O), B): over sign and position
    worst = by_size.argmax(dim=1, keepdim=True)
    found.shifts = torch.tensor([bound * f for f in fractions], dtype=torch.float64)
    found.shift_errors = by_size.gather(1, worst).squeeze(1).T
    if every.detected is not None:
        found.shift_detected = every.detected.view(by_size.shape).gather(1, worst).squeeze(1).T
