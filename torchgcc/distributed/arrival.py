"""How a step's mask is decided: simulated, injected latency, or measured completion order.

Each mode turns a step into a :class:`StepPlan`: delays the workers sleep before answering (or none), and the
rule that ends the coordinator's wait. The masks and delays come from the core straggler models
(:mod:`torchgcc.stragglers`); nothing here draws randomness of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

__all__ = [
    "Injected",
    "Measured",
    "Simulated",
    "StepPlan",
    "decode_arrived",
    "stack_results",
    "usable_mask",
    "wait_is_over",
]


@dataclass(frozen=True)
class StepPlan:
    """What one step asks of the workers and of the coordinator.

    Attributes:
        delays: ``(N,)`` float64 seconds each coded worker waits before answering, or None for no injected delay.
        required: ``(B, N)`` bool mask (simulated mode): the coordinator waits for these workers (until the
            deadline) and decodes with ``required & arrived``; None in the other modes.
        quorum: when ``required`` is None, the wait ends as soon as this many results arrived.
    """

    delays: torch.Tensor | None
    required: torch.Tensor | None
    quorum: int


class Simulated:
    """Mode (a): every worker computes; the straggler model's mask decides whose result is used.

    Deterministic for a seeded straggler model, so the decoded outputs equal the single-process
    ``CodedModule(model, code)(x, mask=mask)`` for the same mask.

    Args:
        stragglers: any core straggler model with ``sample(num_groups, num_workers) -> (B, N) bool``.
    """

    def __init__(self, stragglers) -> None:
        self.stragglers = stragglers

    def plan(self, num_groups: int, num_workers: int) -> StepPlan:
        mask = self.stragglers.sample(num_groups, num_workers)
        return StepPlan(delays=None, required=mask, quorum=int(mask.any(0).sum()))


class Injected:
    """Mode (b): each worker sleeps a delay drawn by the coordinator from a latency model; decode on the fastest.

    The delays are drawn on the coordinator (seeded) and sent with the work, so a run is reproducible up to the
    scheduling noise of the machine.

    Args:
        latency: a core ``LatencyStragglers`` (``sample_delays(num_groups, num_workers) -> (B, N)`` seconds).
        num_stragglers: S; the wait ends when the fastest ``N - S`` results arrived (or at the deadline).
    """

    def __init__(self, latency, *, num_stragglers: int) -> None:
        self.latency = latency
        self.num_stragglers = num_stragglers

    def plan(self, num_groups: int, num_workers: int) -> StepPlan:
        delays = self.latency.sample_delays(1, num_workers)[0].to(torch.float64)
        return StepPlan(delays=delays, required=None, quorum=num_workers - self.num_stragglers)


class Measured:
    """Mode (c): no injected delay; the real completion order decides (fastest ``N - S``, or the deadline)."""

    def __init__(self, *, num_stragglers: int) -> None:
        self.num_stragglers = num_stragglers

    def plan(self, num_groups: int, num_workers: int) -> StepPlan:
        return StepPlan(delays=None, required=None, quorum=num_workers - self.num_stragglers)


def usable_mask(
    plan: StepPlan, arrived_workers, *, num_workers: int, num_groups: int, min_arrived: int
) -> torch.Tensor:
    """``(B, N)`` results the decoder may use: every arrived one, or (simulated mode) the drawn mask's arrived
    ones, topped up with every arrived result in groups left with fewer than ``min_arrived``."""
    arrived = torch.zeros(num_workers, dtype=torch.bool)
    arrived[list(arrived_workers)] = True
    if plan.required is None:
        return arrived.expand(num_groups, -1).clone()
    mask = plan.required & arrived
    short = mask.sum(1) < min_arrived
    mask[short] = arrived  # the drawn survivors of these groups did not arrive: use whatever did
    return mask


def stack_results(results: Mapping[int, torch.Tensor], num_workers: int) -> torch.Tensor:
    """``(N, *out)``: each worker's result from ``results`` (worker -> ``(*out)``, not empty), zeros for the rest."""
    first = next(iter(results.values()))
    stacked = first.new_zeros(num_workers, *first.shape)
    for worker, output in results.items():
        stacked[worker] = output
    return stacked


def decode_arrived(
    scheme, plan: StepPlan, results: Mapping[int, torch.Tensor], *, num_workers: int, num_groups: int, num_samples: int
) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """Decode a step from the ``results`` that arrived (worker -> ``(B, *out)``): the outputs ``(M, *out)``, the
    samples left without a result, and the ``(B, N)`` mask of the results the decode used."""
    usable = usable_mask(plan, results, num_workers=num_workers, num_groups=num_groups, min_arrived=scheme.min_arrived)
    output, missing = scheme.decode(stack_results(results, num_workers), usable, num_samples)
    return output, missing, scheme.used_mask(usable)


def wait_is_over(
    scheme,
    plan: StepPlan,
    arrived: set[int],
    pending: set[int],
    *,
    num_workers: int,
    num_groups: int,
    live: int,
    past_deadline: bool,
) -> bool:
    """Whether a step of ``scheme`` may decode now, given the workers whose results ``arrived`` and those still
    ``pending`` (live workers not heard from), ``live`` workers in all.

    The results must be decodable, and then the scheme's wait must be over (codes: the plan's rule, i.e. its
    ``required`` workers, or ``N - S`` results with the scheme's own S, or the plan's quorum; at most ``live``),
    or the deadline passed, or nothing more can arrive.
    """
    if not arrived:
        return False
    if plan.required is None:
        stragglers = getattr(scheme, "num_stragglers", None)
        quorum = plan.quorum if stragglers is None else num_workers - stragglers
        rule_met = len(arrived) >= min(quorum, live)
    else:
        required = set(plan.required.any(0).nonzero().flatten().tolist())
        rule_met = not (required & pending)
    usable = usable_mask(plan, arrived, num_workers=num_workers, num_groups=num_groups, min_arrived=scheme.min_arrived)
    if not scheme.decodable(usable):
        return False
    raw = usable_mask(plan, arrived, num_workers=num_workers, num_groups=num_groups, min_arrived=0)
    return scheme.wait_over(raw, rule_met) or past_deadline or not pending
