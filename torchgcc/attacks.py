"""Adversarial workers: seeded, composable attack models that corrupt the results that arrived.

Threat model of "General Coded Computing: Adversarial Settings" (arXiv 2502.08058): ``q`` of the workers whose
results arrive are controlled by one omniscient adversary and return arbitrary values bounded by ``M``. An attack is
called as ``attack(results, mask) -> results`` with ``results`` ``(B, N, *out)`` and ``mask`` ``(B, N)`` (True =
arrived); it records the ``(B, N)`` bool tensor of the workers it corrupted in ``last_corrupted``. Attacks compose
with ``+`` (applied left to right) and never touch straggler slots.

- :class:`RandomAttack`: ``q`` random arrived workers return ``+M`` (or ``+-M`` with a random sign per worker);
- :class:`ConcentratedAttack`: a block of ``q`` consecutive arrived workers at the middle of the points return ``+M``
  (the strongest attack on a smoothing spline in arXiv 2505.17356);
- :class:`ShiftAttack`: a block of ``q`` consecutive arrived workers, at a chosen position, return ``y + delta``
  (clipped to ``[-M, M]``): small shifts pass for honest residuals, which is how they evade locating decoders;
- :class:`GreedyAttack`: ``q`` times, the currently best-fitting worker (smallest residual against a smoothing spline
  of the current results) is pushed by ``M * sign(fit - y)`` and clipped to ``[-M, M]`` (arXiv 2505.17356);
- :class:`SignFlipAttack`: ``q`` random arrived workers return ``-y``;
- :class:`ConstantAttack`: ``q`` arrived workers (random, or the fixed ``workers=``, e.g. the workers of a rank that
  is adversarial in ``CodedModule(..., workers=..., attack=...)``) return one constant.

Positions are drawn among the arrived workers of each group from the attack's own generator (``seed=``).
:mod:`torchgcc.oracles.attacks` searches these attacks for the one that hurts a decoder most.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from torchgcc.checks import check_integer, check_real, check_seed
from torchgcc.functional import smoothing_spline_matrix
from torchgcc.points import PointSpec, resolve_points

__all__ = [
    "Attack",
    "ComposedAttack",
    "RandomAttack",
    "ConcentratedAttack",
    "ShiftAttack",
    "GreedyAttack",
    "SignFlipAttack",
    "ConstantAttack",
    "ATTACKS",
]


class Attack:
    """Base class: choose ``q`` arrived workers per group (:meth:`positions`) and replace their results
    (:meth:`values`)."""

    def __init__(self, q: int, *, seed: Optional[int] = None) -> None:
        self.q = check_integer("q", q, minimum=0)  # the number of adversarial workers
        seed = check_seed("seed", seed, optional=True)
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        #: ``(B, N)`` bool: the workers corrupted in the last call.
        self.last_corrupted: Optional[torch.Tensor] = None

    def __call__(self, results: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if results.ndim < 2 or mask.shape != results.shape[:2] or mask.dtype != torch.bool:
            raise ValueError(
                f"attack expects results (B, N, *out) and a bool mask (B, N), got {tuple(results.shape)} "
                f"and {tuple(mask.shape)} {mask.dtype}"
            )
        arrived = mask.cpu().count_nonzero(dim=1)
        if self.q > int(arrived.min()):
            raise ValueError(f"q={self.q} adversaries but a group has only {int(arrived.min())} arrived results")
        corrupted = self.positions(mask.cpu()).to(results.device)
        self.last_corrupted = corrupted
        if self.q == 0:
            return results
        view = corrupted.view(corrupted.shape + (1,) * (results.ndim - 2))
        return torch.where(view, self.values(results, corrupted), results)

    def positions(self, mask: torch.Tensor) -> torch.Tensor:
        """``(B, N)`` bool: ``q`` uniformly random arrived workers per group."""
        keys = torch.rand(mask.shape, generator=self.generator).masked_fill(~mask, 2.0)
        rank = keys.argsort(dim=1).argsort(dim=1)
        return rank < self.q

    def values(self, results: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
        """What the corrupted workers return, ``results``' shape (only entries at ``corrupted`` are used)."""
        raise NotImplementedError

    def __add__(self, other: "Attack") -> "ComposedAttack":
        return ComposedAttack([self, other])


class ComposedAttack(Attack):
    """Several attacks applied in turn; ``last_corrupted`` is the union of theirs."""

    def __init__(self, attacks: Sequence[Attack]) -> None:
        flat: list[Attack] = []
        for attack in attacks:
            flat += attack.attacks if isinstance(attack, ComposedAttack) else [attack]
        super().__init__(sum(a.q for a in flat), seed=0)
        self.attacks: list[Attack] = flat

    def __call__(self, results: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        corrupted = torch.zeros(mask.shape, dtype=torch.bool, device=results.device)
        for attack in self.attacks:
            results = attack(results, mask)
            assert attack.last_corrupted is not None  # every attack sets it when called
            corrupted |= attack.last_corrupted
        self.last_corrupted = corrupted
        return results

    def __repr__(self) -> str:
        return " + ".join(map(repr, self.attacks))


class RandomAttack(Attack):
    """``q`` random arrived workers return ``+M`` in every output (``random_sign=True``: ``+M`` or ``-M`` drawn per
    output entry, which also scrambles the order of a classifier's logits)."""

    def __init__(self, q: int, bound: float, *, random_sign: bool = False, seed: Optional[int] = None) -> None:
        super().__init__(q, seed=seed)
        self.bound = _check_bound(bound)
        self.random_sign = random_sign

    def values(self, results, corrupted):
        if not self.random_sign:
            return torch.full_like(results, self.bound)
        sign = torch.randint(0, 2, results.shape, generator=self.generator).to(results) * 2 - 1
        return self.bound * sign

    def __repr__(self) -> str:
        return f"RandomAttack(q={self.q}, bound={self.bound:g}, random_sign={self.random_sign})"


class ConcentratedAttack(Attack):
    """A block of ``q`` consecutive arrived workers centred on the middle arrived worker returns ``+M``.

    Worker points are ascending, so consecutive workers are neighbours on [-1, 1] and the block sits at the median
    point: the strongest of the attacks on a smoothing spline studied in arXiv 2505.17356. Deterministic.
    """

    def __init__(self, q: int, bound: float, *, seed: Optional[int] = None) -> None:
        super().__init__(q, seed=seed)
        self.bound = _check_bound(bound)

    def positions(self, mask):
        return block_positions(mask, self.q, (mask.count_nonzero(dim=1) - self.q) // 2)

    def values(self, results, corrupted):
        return torch.full_like(results, self.bound)

    def __repr__(self) -> str:
        return f"ConcentratedAttack(q={self.q}, bound={self.bound:g})"


def block_positions(mask: torch.Tensor, q: int, start: torch.Tensor) -> torch.Tensor:
    """``(B, N)`` bool: the arrived workers ``start .. start + q - 1`` in the order of the arrived workers of each
    group (``start`` ``(B,)`` int64, at most ``arrived - q``)."""
    order = mask.long().cumsum(dim=1) - 1  # index of each arrived worker among the arrived ones
    start = start.view(-1, 1)
    return mask & (order >= start) & (order < start + q)


class ShiftAttack(Attack):
    """A block of ``q`` consecutive arrived workers returns ``y + shift`` in every output, clipped to
    ``[-bound, bound]`` when ``bound`` is given.

    Args:
        q: the block's length.
        shift: ``delta``, a finite number or a ``(B,)`` real tensor (one per group).
        start: the block's first worker, counted among the arrived workers of each group: an integer ``>= 0`` or a
            ``(B,)`` integer tensor (one per group); ``None`` centres the block, as :class:`ConcentratedAttack`.
            Deterministic.
        bound: ``M``; None leaves the shifted results unclipped.

    A ``(B,)`` tensor must match the batch it is called on (``ValueError`` naming ``shift`` / ``start`` otherwise).
    """

    def __init__(
        self,
        q: int,
        shift: float | torch.Tensor,
        *,
        start: int | torch.Tensor | None = None,
        bound: float | None = None,
        seed: Optional[int] = None,
    ) -> None:
        super().__init__(q, seed=seed)
        self.shift = _check_per_group("shift", shift, integer=False)
        self.start = None if start is None else _check_per_group("start", start, integer=True)
        self.bound = None if bound is None else _check_bound(bound)

    def positions(self, mask):
        arrived = mask.count_nonzero(dim=1)
        if self.start is None:
            start = (arrived - self.q) // 2
        else:
            start = _one_per_group("start", self.start, len(mask)).to(mask.device, torch.long).expand(len(mask))
            if ((start < 0) | (start > arrived - self.q)).any():
                raise ValueError(f"start must lie in [0, arrived - q] for every group, got {self.start!r}")
        return block_positions(mask, self.q, start)

    def values(self, results, corrupted):
        shift = _one_per_group("shift", self.shift, len(results)).to(results.device, results.dtype)
        if shift.dim() == 1:  # one per group
            shift = shift.view((-1,) + (1,) * (results.ndim - 1))
        shifted = results + shift
        return shifted if self.bound is None else shifted.clamp(-self.bound, self.bound)

    def __repr__(self) -> str:
        start = "centre" if self.start is None else self.start
        return f"ShiftAttack(q={self.q}, shift={self.shift}, start={start}, bound={self.bound})"


class GreedyAttack(Attack):
    """``q`` rounds: fit a smoothing spline (parameter ``lam``) to the current arrived results at the worker
    ``points``, take the not yet corrupted worker with the smallest residual norm, and move its result by
    ``M * sign(fit - y)`` (sign +1 where the residual is 0), clipped to ``[-M, M]``. Deterministic."""

    def __init__(
        self, q: int, bound: float, *, points: PointSpec = "chebyshev2", lam: float = 1e-4, seed: Optional[int] = None
    ) -> None:
        super().__init__(q, seed=seed)
        self.bound = _check_bound(bound)
        self.points = points
        self.lam = check_real("lam", lam, low=0)

    def __call__(self, results, mask):
        super().__call__(results, mask)  # validates and fills last_corrupted with placeholders
        beta = resolve_points(self.points, mask.shape[1])
        out = results.clone()
        corrupted = torch.zeros_like(mask, device="cpu")
        for group in range(mask.shape[0]):
            survivors = mask[group].cpu().nonzero().squeeze(1)
            hat = smoothing_spline_matrix(beta[survivors], beta[survivors], self.lam).to(results.device)
            for _ in range(self.q):
                y = out[group, survivors.to(results.device)].reshape(len(survivors), -1)
                fit = hat.to(y.dtype) @ y
                residual = (fit - y).norm(dim=1).cpu().double()
                residual[corrupted[group, survivors]] = float("inf")
                pick = int(residual.argmin())
                direction = torch.where(fit[pick] >= y[pick], 1.0, -1.0).to(y)
                pushed = (y[pick] + self.bound * direction).clamp(-self.bound, self.bound)
                out[group, int(survivors[pick])] = pushed.reshape(results.shape[2:])
                corrupted[group, survivors[pick]] = True
        self.last_corrupted = corrupted.to(results.device)
        return out

    def positions(self, mask):
        return torch.zeros_like(mask)  # chosen round by round in __call__

    def values(self, results, corrupted):
        return results

    def __repr__(self) -> str:
        return f"GreedyAttack(q={self.q}, bound={self.bound:g}, lam={self.lam:g})"


class SignFlipAttack(Attack):
    """``q`` random arrived workers return ``-y`` (bounded by ``M`` whenever the honest results are)."""

    def values(self, results, corrupted):
        return -results

    def __repr__(self) -> str:
        return f"SignFlipAttack(q={self.q})"


class ConstantAttack(Attack):
    """Arrived workers return ``value`` in every output: ``q`` random ones, or those in ``workers`` (fixed ranks;
    a listed worker that straggles corrupts nothing)."""

    def __init__(
        self, q: int = 0, value: float = 0.0, *, workers: Sequence[int] = (), seed: Optional[int] = None
    ) -> None:
        if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence):
            raise TypeError(f"workers must be a sequence of worker ranks, got {type(workers).__name__}")
        ranks = tuple(check_integer(f"workers[{i}]", w, minimum=0) for i, w in enumerate(workers))
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"workers must be distinct ranks, got {ranks}")
        super().__init__(q if not ranks else len(ranks), seed=seed)
        self.value = check_real("value", value)
        self.workers = ranks

    def __call__(self, results, mask):
        if self.workers and max(self.workers) >= mask.shape[1]:
            raise ValueError(f"workers {self.workers} must lie in 0..{mask.shape[1] - 1}")
        if self.workers:  # fixed ranks: only those that arrived, however many
            corrupted = torch.zeros_like(mask)
            corrupted[:, list(self.workers)] = True
            corrupted &= mask
            self.last_corrupted = corrupted
            view = corrupted.view(corrupted.shape + (1,) * (results.ndim - 2))
            return torch.where(view, torch.full_like(results, self.value), results)
        return super().__call__(results, mask)

    def values(self, results, corrupted):
        return torch.full_like(results, self.value)

    def __repr__(self) -> str:
        return f"ConstantAttack(q={self.q}, value={self.value:g}, workers={self.workers})"


#: Attack models by name, for experiments and command lines: ``name -> class(q, bound, seed=...)``.
ATTACKS = {
    "random": RandomAttack,
    "concentrated": ConcentratedAttack,
    "greedy": GreedyAttack,
    "signflip": lambda q, bound, **kw: SignFlipAttack(q, **kw),
    "constant": lambda q, bound, **kw: ConstantAttack(q, bound, **kw),
}


def _check_bound(bound: float) -> float:
    return check_real("bound (M)", bound, low=0, low_open=True)


def _check_per_group(name: str, value: object, *, integer: bool) -> float | int | torch.Tensor:
    """``value`` if it is one number or a ``(B,)`` tensor of them (integers ``>= 0`` when ``integer``, else finite
    reals), else a one-line ``TypeError`` / ``ValueError`` naming ``name``; the batch size is checked per call
    (:func:`_one_per_group`)."""
    if not isinstance(value, torch.Tensor):
        return check_integer(name, value, minimum=0) if integer else check_real(name, value)
    what = "integer" if integer else "real"
    if value.dtype == torch.bool or value.is_complex() or (integer and value.is_floating_point()):
        raise TypeError(f"{name} must be a number or a (B,) {what} tensor (one per group), got {value.dtype}")
    if value.ndim > 1:
        raise ValueError(f"{name} must be a number or a (B,) tensor (one per group), got shape {tuple(value.shape)}")
    entries = value.detach().reshape(-1).cpu()
    bad = (entries < 0) if integer else ~torch.isfinite(entries)
    if bad.any():
        first = entries[bad][0].item()
        raise ValueError(f"{name} must hold {'integers >= 0' if integer else 'finite numbers'}, got {first!r} in it")
    return value


def _one_per_group(name: str, value: float | int | torch.Tensor, groups: int) -> torch.Tensor:
    """``value`` (checked by :func:`_check_per_group`) as a tensor, one entry or ``groups`` of them (its shape is
    checked, its values are not read)."""
    value = torch.as_tensor(value)
    if value.ndim == 1 and len(value) != groups:
        raise ValueError(f"{name} has {len(value)} entries, one per group, but the batch has {groups} groups")
    return value
