"""``StragglerAwareController``: pick a size per step under a long-run budget on straggler events.

This is our design in the spirit of SAGC ("Faster Synchronous On-Policy RL via Straggler-Aware Group Sizing",
arXiv 2606.02218). Only SAGC's abstract and secondary descriptions are public: an online constrained optimisation
that keeps the benefit of large groups while bounding the long-run rate of straggler events, a posterior of
straggler risk learned from completed samples, changes only at stable step boundaries, static sizes as fallback.
The equations below are ours, not the paper's.

At step ``t`` the controller picks, from the candidate sizes ``g_1 < ... < g_n``,

    g_t = argmax_g  U(g) - lambda_t * P_t(event | g)

where ``U`` is a utility normalised to ``[0, 1]`` (:mod:`~torchgcc.control.utilities`), ``P_t`` is the
Beta-binomial posterior predictive of an event (:mod:`~torchgcc.control.event_models`,
:class:`~torchgcc.control.tail_risk.BetaTailRisk`) and ``lambda`` is a dual variable updated with the observed
event ``e_t``: ``lambda_{t+1} = max(0, lambda_t + eta (e_t - budget))`` (:class:`~torchgcc.control.dual.DualVariable`).
The dual update alone bounds the realised event rate by ``budget + lambda_T / (eta T)``; the posterior makes the
penalty anticipate the risk of a size it has not tried. A chosen size is held for ``hold`` steps, a change moves at
most ``max_step`` positions of the candidate grid, and the controller returns the static ``fallback`` size during
``warmup`` steps or after :meth:`use_fallback`.

Two optional safeguards, both off by default:

- **Chance constraint** (``risk_cap``): only sizes with ``P_t(event | g) <= risk_cap`` are eligible (if none is,
  the size with the smallest predicted risk). With the dual penalty alone the risk enters the choice only through
  ``lambda``, which starts at 0 and grows only with events: while it is small the controller picks the largest
  size whatever its risk, and learns the budget by missing it. With a cap, each step's predicted risk stays under
  the cap and the dual variable corrects what the posterior gets wrong.
- **Change detection** (``change_level``): a step whose number of exceedances ``x`` out of ``n`` units is
  improbable under the current posterior, ``P(X >= x) < change_level`` with ``X ~ BetaBinomial(n, alpha, beta)``
  computed before the update, makes the posterior forget its data (it keeps the prior and this step), and the next
  choice may move to any smaller size at once, past ``hold`` and ``max_step``; a larger size still waits for ``hold``
  and moves at most ``max_step``. The test only fires on improbably many exceedances, and in both event models the
  predicted risk grows with the size, so a smaller size is the safe move when the tail has just become heavier.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import torch

from torchgcc.checks import check_integer, check_real, check_seed
from torchgcc.control.dual import DualVariable
from torchgcc.control.event_models import AllMustFinish, EventModel, make_event_model
from torchgcc.control.tail_risk import BetaTailRisk
from torchgcc.control.thresholds import StragglerThreshold, make_threshold
from torchgcc.control.utilities import UtilitySpec, normalised_utility

__all__ = ["StragglerAwareController"]


class StragglerAwareController:
    """Chooses a size per step from ``sizes``, holding the long-run straggler-event rate at ``budget``.

    Use: ``size = controller.choose()`` before a step, run the step with ``size``, then
    ``controller.observe(durations)`` with the durations of the step's units.

    Args:
        sizes: candidate sizes (distinct positive integers; sorted internally).
        budget: the allowed long-run fraction of steps with a straggler event, epsilon in ``[0, 1)``.
        threshold: when a unit straggles (:class:`~torchgcc.control.thresholds.DeadlineThreshold` or
            :class:`~torchgcc.control.thresholds.RelativeThreshold`).
        event_model: how a size maps to units and events (default :class:`AllMustFinish` with one unit per size).
        utility: a name in :data:`~torchgcc.control.utilities.UTILITIES` or one value per (sorted) size.
        eta: step size of the dual update.
        hold: steps a chosen size is kept before the next change (>= 1).
        max_step: most grid positions one change may move (>= 1).
        fallback: the static size used during warm-up and after :meth:`use_fallback` (default: the smallest).
        warmup: steps that use ``fallback`` while the posterior collects its first observations.
        discount: forgetting factor of the tail-risk posterior (memory about ``1 / (1 - discount)`` steps).
        prior: Beta prior pseudo-counts ``(alpha0, beta0)`` of the per-unit exceedance probability.
        risk_cap: if set, only sizes whose predicted event probability is at most this are chosen (chance
            constraint, in ``[0, 1)``).
        change_level: if set, the significance level of the change test on each observed step (in ``(0, 1)``).
        seed: seed of the generator that breaks ties between equally scored sizes.

    Raises:
        TypeError / ValueError: one line naming the argument, for a size, count or seed that is not an integer
            (``2.5``, ``"4"``, ``True``; numpy integers are integers), a number out of its range, or a
            ``threshold`` / ``event_model`` of the wrong kind. Nothing is rounded.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        budget: float,
        threshold: StragglerThreshold,
        event_model: Optional[EventModel] = None,
        utility: UtilitySpec = "log",
        eta: float = 1.0,
        hold: int = 1,
        max_step: int = 1,
        fallback: Optional[int] = None,
        warmup: int = 10,
        discount: float = 0.98,
        prior: tuple[float, float] = (1.0, 1.0),
        risk_cap: Optional[float] = None,
        change_level: Optional[float] = None,
        seed: int = 0,
    ) -> None:
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
            raise TypeError(f"sizes must be a sequence of distinct integers, got {sizes!r}")
        given = [check_integer("sizes", size) for size in sizes]
        values = sorted(set(given))
        if not values or len(values) != len(given):
            raise ValueError(f"sizes must be distinct integers, at least one, got {given!r}")
        if not isinstance(threshold, StragglerThreshold):
            raise TypeError(
                f"threshold must be a StragglerThreshold (DeadlineThreshold, RelativeThreshold), got {threshold!r}"
            )
        if event_model is not None and not isinstance(event_model, EventModel):
            raise TypeError(f"event_model must be an EventModel (AllMustFinish, WaitForFastest), got {event_model!r}")
        self.event_model = event_model if event_model is not None else AllMustFinish()
        for size in values:
            self.event_model.check_size(size)
        hold = check_integer("hold", hold, minimum=1)
        max_step = check_integer("max_step", max_step, minimum=1)
        warmup = check_integer("warmup", warmup, minimum=0)
        if risk_cap is not None:
            risk_cap = check_real("risk_cap", risk_cap, low=0, high=1, high_open=True)
        if change_level is not None:
            change_level = check_real("change_level", change_level, low=0, high=1, low_open=True, high_open=True)
        fallback = values[0] if fallback is None else check_integer("fallback", fallback)
        if fallback not in values:
            raise ValueError(f"fallback={fallback!r} is not one of the sizes {values}")
        self.sizes = torch.tensor(values, dtype=torch.int64)
        self.utility = normalised_utility(utility, self.sizes)
        self.threshold = threshold
        self.dual = DualVariable(budget, eta=eta)
        self.risk = BetaTailRisk(prior, discount=discount)
        self.hold, self.max_step, self.warmup = hold, max_step, warmup
        self.risk_cap, self.change_level = risk_cap, change_level
        self.changes = 0  # detected tail changes
        self.after_change = False  # the next choice may move to a smaller size without bounds
        self.fallback_index = values.index(fallback)
        self.index = self.fallback_index
        self.adaptive = True
        self.held = 0  # steps observed since the size last changed
        self.steps = 0
        self.events = 0
        self.size_counts = [0] * len(values)
        self.generator = torch.Generator().manual_seed(check_seed("seed", seed))

    @property
    def size(self) -> int:
        """The current size (the one :meth:`choose` returned last)."""
        return int(self.sizes[self.index])

    @property
    def budget(self) -> float:
        return self.dual.budget

    @property
    def event_rate(self) -> float:
        """Fraction of observed steps that had a straggler event (0 before the first step)."""
        return self.events / self.steps if self.steps else 0.0

    def event_probability(self) -> torch.Tensor:
        """Predicted ``P(event | size)`` for every candidate size ``(n,)``, float64."""
        return self.risk.probability_at_least(self.event_model.at_least(self.sizes), self.event_model.units(self.sizes))

    def scores(self) -> torch.Tensor:
        """``U(size) - lambda * P(event | size)`` for every candidate size ``(n,)``, float64."""
        return self.utility - self.dual.value * self.event_probability()

    def choose(self) -> int:
        """The size for the next step."""
        if not self.adaptive or self.steps < self.warmup:
            target = self.fallback_index
        elif self.held < self.hold and not self.after_change:
            target = self.index
        else:
            scores = self.scores()
            if self.risk_cap is not None:
                risk = self.event_probability()
                eligible = risk <= self.risk_cap
                scores = scores.masked_fill(~eligible, -torch.inf) if eligible.any() else -risk
            best = (scores >= scores.max() - 1e-12).nonzero().squeeze(1)
            pick = int(best[torch.randint(len(best), (1,), generator=self.generator)])
            # after a detected change (a heavier tail) any smaller size at once; a larger one only as without it
            lowest = 0 if self.after_change else self.index - self.max_step
            highest = self.index if self.held < self.hold else self.index + self.max_step
            target = min(max(pick, lowest), highest)
        self.after_change = False
        if target != self.index:
            self.index, self.held = target, 0
        return self.size

    def observe(
        self,
        durations: torch.Tensor | Sequence[float],
        size: Optional[int] = None,
        *,
        watched_until: Optional[float] = None,
    ) -> bool:
        """Record one step's unit durations ``(units,)`` in seconds; returns whether it was a straggler event.

        ``size`` is the size the step ran with (default: the current size; an integer, never rounded). Units whose
        result was not seen by ``watched_until`` seconds (default: the largest finite duration, i.e. the end of the
        step) are given as ``inf``: they count as exceedances when ``watched_until`` reached the threshold and are
        left out of the posterior otherwise (their exceedance is unknown). An executor that records late arrivals up
        to the deadline passes ``watched_until=deadline`` and loses no information.
        """
        size = self.size if size is None else check_integer("size", size)
        if size not in self.sizes.tolist():
            raise ValueError(f"size={size} is not one of the candidate sizes {self.sizes.tolist()}")
        durations = torch.as_tensor(durations, dtype=torch.float64).flatten()
        expected = int(self.event_model.units(torch.tensor(size)))
        if durations.numel() != expected:
            raise ValueError(
                f"size {size} runs {expected} units under {self.event_model!r}, got {durations.numel()} durations"
            )
        if torch.isnan(durations).any() or (durations < 0).any():
            raise ValueError("durations must be >= 0 seconds (inf for results never seen), got NaN or negative values")
        seen = torch.isfinite(durations)
        if not seen.any():
            raise ValueError("at least one duration must be finite")
        threshold = self.threshold(durations[seen])
        exceeded, total = int((durations[seen] > threshold).sum()), int(seen.sum())
        censored = durations.numel() - total
        watched = float(durations[seen].max()) if watched_until is None else float(watched_until)
        if censored and watched >= threshold:
            exceeded, total = exceeded + censored, total + censored
        event = exceeded >= int(self.event_model.at_least(torch.tensor(size)))
        if self.change_level is not None and exceeded and self.steps >= self.warmup:
            surprise = float(self.risk.probability_at_least(torch.tensor(exceeded), torch.tensor(total)))
            if surprise < self.change_level:
                self.risk.forget()
                self.changes += 1
                self.after_change = True
        self.risk.update(exceeded, total)
        self.dual.update(event)
        self.steps += 1
        self.events += int(event)
        self.held += 1
        self.size_counts[self.sizes.tolist().index(size)] += 1
        return event

    def use_fallback(self, enabled: bool = True) -> None:
        """Switch to the static fallback size (``enabled=False`` resumes adaptive choices)."""
        self.adaptive = not enabled

    def size_distribution(self) -> dict[int, float]:
        """Fraction of observed steps run at each candidate size."""
        total = max(self.steps, 1)
        return {int(size): count / total for size, count in zip(self.sizes, self.size_counts)}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: settings, posterior, dual variable, counters and the generator state."""
        return {
            "sizes": self.sizes.tolist(),
            "utility": self.utility.tolist(),
            "threshold": self.threshold.state_dict(),
            "event_model": self.event_model.state_dict(),
            "dual": self.dual.state_dict(),
            "risk": self.risk.state_dict(),
            "hold": self.hold,
            "max_step": self.max_step,
            "warmup": self.warmup,
            "risk_cap": self.risk_cap,
            "change_level": self.change_level,
            "changes": self.changes,
            "after_change": self.after_change,
            "fallback_index": self.fallback_index,
            "index": self.index,
            "adaptive": self.adaptive,
            "held": self.held,
            "steps": self.steps,
            "events": self.events,
            "size_counts": list(self.size_counts),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (settings included)."""
        self.sizes = torch.tensor(state["sizes"], dtype=torch.int64)
        self.utility = torch.tensor(state["utility"], dtype=torch.float64)
        self.threshold = make_threshold(state["threshold"])
        self.event_model = make_event_model(state["event_model"])
        self.dual.load_state_dict(state["dual"])
        self.risk.load_state_dict(state["risk"])
        for key in (
            "hold",
            "max_step",
            "warmup",
            "risk_cap",
            "change_level",
            "changes",
            "after_change",
            "fallback_index",
            "index",
            "adaptive",
            "held",
            "steps",
            "events",
        ):
            setattr(self, key, state[key])
        self.size_counts = list(state["size_counts"])
        self.generator.set_state(state["generator"])

    def __repr__(self) -> str:
        return (
            f"StragglerAwareController(sizes={self.sizes.tolist()}, size={self.size}, budget={self.budget}, "
            f"lambda={self.dual.value:.3g}, q={self.risk.mean:.3g}, {self.event_model!r}, {self.threshold!r})"
        )
