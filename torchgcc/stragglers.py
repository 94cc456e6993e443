"""Straggler models: seeded samplers of ``(B, N)`` bool masks, True where the worker's result arrived.

Every model owns a ``torch.Generator`` (``seed=`` makes runs reproducible) and draws one mask row per group and step,
on the CPU or, with ``sample(..., device=...)``, directly on the data's device from a generator of that device seeded
with the same seed (reproducible per device, but a different stream from the CPU's; no host synchronisation except
:class:`BernoulliStragglers`' redraws when ``min_arrived > 0``).

- :class:`FixedStragglers`: exactly S stragglers, placed at random, as a random contiguous block, or as the block that
  leaves the widest gap between surviving points (a geometric rule, NOT the worst case of a decoder: with Chebyshev
  points it is the central block, which holds no regression point; :mod:`torchgcc.oracles.stragglers` finds the
  worst case by search).
- :class:`BernoulliStragglers`: every worker straggles independently with probability p.
- :class:`LatencyStragglers`: every worker gets a simulated latency (shifted exponential, Pareto or bimodal); the
  step waits for the fastest N - S results and/or until a deadline, and reports the step latency.
- Latency models (:data:`LATENCY_MODELS`): shifted exponential, Pareto, bimodal, an additive exponential delay, a
  persistent slow set and a shifted exponential whose tail changes after a number of draws (:class:`TailChange`);
  :mod:`torchgcc.gradient_coding` draws them per (worker, step) for its training clock.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Callable, Optional, Union

import torch

from torchgcc.checks import check_integer, check_real, check_seed
from torchgcc.points import PointSpec, resolve_points
from torchgcc.registry import Registry

__all__ = [
    "StragglerModel",
    "FixedStragglers",
    "BernoulliStragglers",
    "LatencyStragglers",
    "LatencyModel",
    "ShiftedExponential",
    "Pareto",
    "Bimodal",
    "Exponential",
    "PersistentSlow",
    "TailChange",
    "TraceReplay",
    "TRACE_FORMAT",
    "LATENCY_MODELS",
    "make_latency_model",
    "PLACEMENTS",
]

PLACEMENTS = ("random", "contiguous", "widest_gap")

Device = Union[str, torch.device, None]


class StragglerModel(ABC):
    """A seeded sampler of straggler masks."""

    def __init__(self, seed: Optional[int] = None) -> None:
        self.seed = check_seed("seed", seed, optional=True)
        self.generator = self._new_generator(torch.device("cpu"))
        self._device_generators: dict[torch.device, torch.Generator] = {}

    def _new_generator(self, device: torch.device) -> torch.Generator:
        generator = torch.Generator(device)
        if self.seed is None:
            generator.seed()
        else:
            generator.manual_seed(self.seed)
        return generator

    def generator_for(self, device: Device) -> torch.Generator:
        """The generator that draws on ``device``: :attr:`generator` for the CPU, else one per device (seeded alike);
        ``ValueError`` for the ``meta`` device, which holds no values to draw."""
        device = torch.device("cpu" if device is None else device)
        if device.type == "meta":
            raise ValueError("device='meta' holds no values, so nothing random can be drawn on it; sample on the CPU")
        if device.type == "cpu":
            return self.generator
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in self._device_generators:
            self._device_generators[device] = self._new_generator(device)
        return self._device_generators[device]

    @abstractmethod
    def sample(self, num_groups: int, num_workers: int, device: Device = None) -> torch.Tensor:
        """A ``(num_groups, num_workers)`` bool mask on ``device`` (default CPU), True = result arrived."""

    def __call__(self, num_groups: int, num_workers: int, device: Device = None) -> torch.Tensor:
        return self.sample(num_groups, num_workers, device)


class FixedStragglers(StragglerModel):
    """Exactly ``num_stragglers`` stragglers in every group.

    Args:
        num_stragglers: S, with ``0 <= S < N``.
        placement: ``"random"`` (a uniformly random subset), ``"contiguous"`` (a block of S consecutive workers at a
            uniformly random position) or ``"widest_gap"`` (the deterministic block that maximises the largest gap
            between surviving worker points, counting the domain ends -1 and 1 as neighbours). The widest gap
            maximises a BOUND on a spline decoder's error (it grows with the cube of the largest gap), not the
            error: with Chebyshev points it is the central block, far from every regression point, and its MSE is
            a few % of the worst block's or less (:func:`torchgcc.oracles.stragglers.worst_stragglers` searches).
        points: the worker points used by ``"widest_gap"`` (a rule name or a tensor; the codes' default is
            ``"chebyshev2"``).
        seed: seed of the generator.

    >>> mask = FixedStragglers(num_stragglers=2, seed=0).sample(num_groups=3, num_workers=8)
    >>> mask.shape, mask.dtype, mask.sum(dim=1).tolist()  # (B, N), True = arrived: 6 of 8 in every group
    (torch.Size([3, 8]), torch.bool, [6, 6, 6])
    """

    def __init__(
        self,
        num_stragglers: int,
        placement: str = "random",
        *,
        points: PointSpec = "chebyshev2",
        seed: Optional[int] = None,
    ) -> None:
        super().__init__(seed)
        num_stragglers = check_integer("num_stragglers", num_stragglers, minimum=0)
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        self.num_stragglers = num_stragglers
        self.placement = placement
        self.points = points

    def sample(self, num_groups: int, num_workers: int, device: Device = None) -> torch.Tensor:
        num_groups, num_workers = check_shape(num_groups, num_workers)
        s = self.num_stragglers
        if s >= num_workers:
            raise ValueError(f"num_stragglers={s} leaves no worker out of N={num_workers}")
        generator = self.generator_for(device)
        device = generator.device
        if s == 0:  # every worker arrives, wherever the placement would put stragglers
            return torch.ones(num_groups, num_workers, dtype=torch.bool, device=device)
        if self.placement == "random":
            order = torch.rand(num_groups, num_workers, generator=generator, device=device).argsort(dim=1)
            return order >= s  # the first S of a random permutation straggle
        if self.placement == "contiguous":
            start = torch.randint(0, num_workers - s + 1, (num_groups, 1), generator=generator, device=device)
        else:
            widest = widest_gap_block_start(resolve_points(self.points, num_workers), s)
            start = torch.full((num_groups, 1), widest, device=device)
        index = torch.arange(num_workers, device=device)
        return (index < start) | (index >= start + s)

    def __repr__(self) -> str:
        return f"FixedStragglers(num_stragglers={self.num_stragglers}, placement={self.placement!r})"


def check_shape(num_groups: object, num_workers: object) -> tuple[int, int]:
    """``(num_groups, num_workers)`` of a mask to sample, if they are integers ``>= 0`` and ``>= 1``."""
    return check_integer("num_groups", num_groups, minimum=0), check_integer("num_workers", num_workers, minimum=1)


def widest_gap_block_start(points: torch.Tensor, num_stragglers: int) -> int:
    """First index of the block of ``num_stragglers`` consecutive points whose removal leaves the largest gap.

    The domain ends -1 and 1 act as neighbours of the first and last points; ties go to the most central block.
    """
    n, s = len(points), num_stragglers
    if s == 0:
        return 0
    padded = torch.cat([points.new_tensor([-1.0]), points, points.new_tensor([1.0])])
    starts = torch.arange(n - s + 1)
    gaps = padded[starts + s + 1] - padded[starts]
    ties = (gaps >= gaps.max() - 1e-12).nonzero().squeeze(1)
    centrality = (ties + (s - 1) / 2 - (n - 1) / 2).abs()
    return int(ties[centrality.argmin()])


class BernoulliStragglers(StragglerModel):
    """Every worker straggles independently with probability ``p``.

    ``min_arrived`` redraws the groups in which fewer results arrived (0 accepts every draw; the decoder then raises
    if it gets fewer results than it needs).

    >>> mask = BernoulliStragglers(p=0.5, min_arrived=3, seed=0).sample(num_groups=100, num_workers=6)
    >>> int(mask.sum(dim=1).min()) >= 3
    True
    """

    def __init__(self, p: float, *, min_arrived: int = 0, seed: Optional[int] = None) -> None:
        super().__init__(seed)
        self.p = check_real("p", p, low=0, high=1, high_open=True)
        self.min_arrived = check_integer("min_arrived", min_arrived, minimum=0)

    def sample(self, num_groups: int, num_workers: int, device: Device = None) -> torch.Tensor:
        num_groups, num_workers = check_shape(num_groups, num_workers)
        if self.min_arrived > num_workers:
            raise ValueError(f"min_arrived={self.min_arrived} exceeds N={num_workers}")
        generator = self.generator_for(device)
        mask = torch.rand(num_groups, num_workers, generator=generator, device=generator.device) >= self.p
        if self.min_arrived == 0:
            return mask
        for _ in range(10_000):
            short = mask.sum(dim=1) < self.min_arrived
            if not short.any():
                return mask
            redraw = torch.rand(int(short.sum()), num_workers, generator=generator, device=generator.device)
            mask[short] = redraw >= self.p
        raise RuntimeError(f"could not draw {self.min_arrived} arrivals with p={self.p} in 10000 tries")

    def __repr__(self) -> str:
        return f"BernoulliStragglers(p={self.p}, min_arrived={self.min_arrived})"


class LatencyModel(ABC):
    """A distribution of per-worker step latencies in seconds."""

    @abstractmethod
    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """float64 latencies of the given shape, on the generator's device."""


class ShiftedExponential(LatencyModel):
    """``shift + Exp(mean=scale)``: a fixed compute time plus an exponential tail (Lee et al., 2018)."""

    def __init__(self, shift: float = 1.0, scale: float = 0.5) -> None:
        _check_positive(shift=shift, scale=scale)
        self.shift, self.scale = shift, scale

    def sample(self, shape, generator):
        u = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device)
        return self.shift - self.scale * torch.log1p(-u)

    def __repr__(self) -> str:
        return f"ShiftedExponential(shift={self.shift}, scale={self.scale})"


class Pareto(LatencyModel):
    """Pareto latencies ``scale * U^(-1/tail_index)`` (heavy tail; infinite variance when tail_index <= 2)."""

    def __init__(self, scale: float = 1.0, tail_index: float = 3.0) -> None:
        _check_positive(scale=scale, tail_index=tail_index)
        self.scale, self.tail_index = scale, tail_index

    def sample(self, shape, generator):
        u = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device)
        return self.scale * (1 - u) ** (-1 / self.tail_index)

    def __repr__(self) -> str:
        return f"Pareto(scale={self.scale}, tail_index={self.tail_index})"


class Bimodal(LatencyModel):
    """``fast`` or, with probability ``p_slow``, ``slow`` seconds, times a uniform jitter ``1 +- jitter``."""

    def __init__(self, fast: float = 1.0, slow: float = 5.0, p_slow: float = 0.1, jitter: float = 0.05) -> None:
        _check_positive(fast=fast, slow=slow)
        p_slow = check_real("p_slow", p_slow, low=0, high=1)
        jitter = check_real("jitter", jitter, low=0, high=1, high_open=True)
        self.fast, self.slow, self.p_slow, self.jitter = fast, slow, p_slow, jitter

    def sample(self, shape, generator):
        slow = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device) < self.p_slow
        base = torch.where(slow, self.slow, self.fast)
        jitter = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device)
        noise = 1 + self.jitter * (2 * jitter - 1)
        return base * noise

    def __repr__(self) -> str:
        return f"Bimodal(fast={self.fast}, slow={self.slow}, p_slow={self.p_slow}, jitter={self.jitter})"


class Exponential(LatencyModel):
    """``Exp(mean)``: an additive random delay (the PGC simulations add one with mean 1 s or 2 s per worker-step)."""

    def __init__(self, mean: float = 1.0) -> None:
        _check_positive(mean=mean)
        self.mean = mean

    def sample(self, shape, generator):
        u = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device)
        return -self.mean * torch.log1p(-u)

    def __repr__(self) -> str:
        return f"Exponential(mean={self.mean})"


class PersistentSlow(LatencyModel):
    """A fixed slow set: the workers ``slow`` (a sequence of indices along the last dimension, each in ``[-N, N)``)
    get ``delay`` extra seconds at every step, on top of ``base``'s latencies (0 when ``base`` is None)."""

    def __init__(self, slow: Sequence[int] = (0,), delay: float = 3.0, base: Optional[LatencyModel] = None) -> None:
        _check_positive(delay=delay)
        if isinstance(slow, (str, bytes)) or not isinstance(slow, Iterable):
            raise TypeError(f"slow must be a sequence of worker indices, got {slow!r} ({type(slow).__name__})")
        self.slow = tuple(check_integer("slow (worker indices)", i) for i in slow)
        self.delay, self.base = delay, base

    def sample(self, shape, generator):
        workers = shape[-1]
        outside = [i for i in self.slow if not -workers <= i < workers]
        if outside:
            raise ValueError(
                f"slow (worker indices) {outside} out of range [-{workers}, {workers}) for {workers} workers"
            )
        if self.base is None:
            out = torch.zeros(shape, dtype=torch.float64, device=generator.device)
        else:
            out = self.base.sample(shape, generator)
        out[..., list(self.slow)] += self.delay
        return out

    def __repr__(self) -> str:
        return f"PersistentSlow(slow={self.slow}, delay={self.delay}, base={self.base!r})"


class TailChange(LatencyModel):
    """``shift + Exp(mean=scale)`` for the first ``change_at`` draws (calls of :meth:`sample`, one per step in the
    executors), then ``shift + Exp(mean=scale_after)``: a latency tail that changes mid-run."""

    def __init__(self, shift: float = 1.0, scale: float = 0.2, scale_after: float = 0.4, change_at: int = 100) -> None:
        _check_positive(shift=shift, scale=scale, scale_after=scale_after)
        change_at = check_integer("change_at (draws)", change_at, minimum=0)
        self.before = ShiftedExponential(shift, scale)
        self.after = ShiftedExponential(shift, scale_after)
        self.change_at = change_at
        self.draws = 0

    def sample(self, shape, generator):
        phase = self.before if self.draws < self.change_at else self.after
        self.draws += 1
        return phase.sample(shape, generator)

    def __repr__(self) -> str:
        return (
            f"TailChange(shift={self.before.shift}, scale={self.before.scale}, scale_after={self.after.scale}, "
            f"change_at={self.change_at})"
        )


#: Latency models by name.
LATENCY_MODELS: Registry[Callable[..., LatencyModel]] = Registry("latency model")
LATENCY_MODELS.register("shifted_exponential", ShiftedExponential)
LATENCY_MODELS.register("pareto", Pareto)
LATENCY_MODELS.register("bimodal", Bimodal)
LATENCY_MODELS.register("exponential", Exponential)
LATENCY_MODELS.register("persistent_slow", PersistentSlow)
LATENCY_MODELS.register("tail_change", TailChange)


#: the ``format`` field of a latency trace file (written by :mod:`torchgcc.distributed.latency_trace`).
TRACE_FORMAT = "torchgcc.latency_trace/1"


class TraceReplay(LatencyModel):
    """Recorded per-worker latencies replayed row by row (deterministic: the generator is unused).

    ``sample((B, N))`` returns the next B rows, from the first again after the last; N must be the trace's.
    The file format and how to record one from a run: :mod:`torchgcc.distributed.latency_trace`.

    Args:
        delays_s: ``(T, N)`` seconds, finite and non-negative.
        censored: ``(T, N)`` bool, True where a value is only a lower bound (default: none).
        source: where the numbers came from.
        start: the first row replayed, an integer ``>= 0`` (counted from the first again after the last).
    """

    def __init__(self, delays_s, censored=None, *, source: str = "", start: int = 0) -> None:
        self.delays_s = torch.as_tensor(delays_s, dtype=torch.float64)
        self.censored = torch.zeros_like(self.delays_s, dtype=torch.bool) if censored is None else censored
        self.censored = torch.as_tensor(self.censored, dtype=torch.bool)
        if self.delays_s.ndim != 2 or self.delays_s.numel() == 0:
            raise ValueError(f"a trace needs delays of shape (steps, workers), got {tuple(self.delays_s.shape)}")
        if self.censored.shape != self.delays_s.shape:
            raise ValueError(f"censored {tuple(self.censored.shape)} must match delays {tuple(self.delays_s.shape)}")
        if not (torch.isfinite(self.delays_s).all() and (self.delays_s >= 0).all()):
            raise ValueError("trace delays must be finite and non-negative seconds")
        self.source = source
        self.position = check_integer("start", start, minimum=0) % len(self.delays_s)

    @property
    def num_workers(self) -> int:
        return self.delays_s.shape[1]

    @classmethod
    def from_file(cls, path: str, *, start: int = 0) -> "TraceReplay":
        """Read a trace file (JSON with ``format``, ``num_workers``, ``delays_s`` and optional ``censored``)."""
        import json

        with open(path) as handle:
            record = json.load(handle)
        if record.get("format") != TRACE_FORMAT:
            raise ValueError(f"{path} is not a latency trace (format {record.get('format')!r}, not {TRACE_FORMAT!r})")
        trace = cls(record["delays_s"], record.get("censored"), source=record.get("source", ""), start=start)
        if trace.num_workers != record["num_workers"]:
            raise ValueError(f"{path}: num_workers {record['num_workers']} but rows of {trace.num_workers} delays")
        return trace

    def sample(self, shape, generator):
        *batch, workers = shape
        if workers != self.num_workers:
            raise ValueError(f"the trace has {self.num_workers} workers, asked for {workers}")
        count = math.prod(batch)
        rows = (self.position + torch.arange(count, device=self.delays_s.device)) % len(self.delays_s)
        if count:
            self.position = int(rows[-1] + 1) % len(self.delays_s)
        return self.delays_s[rows].reshape(*batch, workers).to(generator.device)

    def __repr__(self) -> str:
        steps, workers = self.delays_s.shape
        return f"TraceReplay({steps} steps x {workers} workers, position={self.position})"


LATENCY_MODELS.register("trace", TraceReplay.from_file)


def make_latency_model(name: str, **params: float) -> LatencyModel:
    """Build a latency model registered in :data:`LATENCY_MODELS`."""
    return LATENCY_MODELS[name](**params)


class LatencyStragglers(StragglerModel):
    """Stragglers from simulated latencies: wait for the fastest ``N - num_stragglers`` results and/or a deadline.

    Args:
        latency: a :class:`LatencyModel` or a name in :data:`LATENCY_MODELS` (``params`` go to its constructor).
        num_stragglers: S; the step ends when ``N - S`` results arrived (``None``: wait for all, up to the deadline).
        deadline: seconds; the step ends at the deadline at the latest (``None``: no deadline).
        seed: seed of the generator.

    A result arrives when its latency is at most the step latency, so ties can let more than ``N - S`` arrive.

    >>> stragglers = LatencyStragglers("shifted_exponential", num_stragglers=2, seed=0)
    >>> mask, latency = stragglers.sample_with_latency(num_groups=3, num_workers=8)
    >>> mask.sum(dim=1).tolist(), latency.shape  # the fastest 6 of 8 arrived; each group's step latency (s)
    ([6, 6, 6], torch.Size([3]))
    """

    def __init__(
        self,
        latency: LatencyModel | str = "shifted_exponential",
        *,
        num_stragglers: Optional[int] = None,
        deadline: Optional[float] = None,
        seed: Optional[int] = None,
        **params: float,
    ) -> None:
        super().__init__(seed)
        self.latency = make_latency_model(latency, **params) if isinstance(latency, str) else latency
        if num_stragglers is not None:
            num_stragglers = check_integer("num_stragglers", num_stragglers, minimum=0)
        if deadline is not None:
            deadline = check_real("deadline (seconds)", deadline, low=0, low_open=True)
        self.num_stragglers = num_stragglers
        self.deadline = deadline

    @classmethod
    def from_trace(cls, path: str, **kwargs) -> "LatencyStragglers":
        """Replay the per-worker latencies recorded in a trace file (:class:`TraceReplay`; the format and how to
        record one: :mod:`torchgcc.distributed.latency_trace`); ``kwargs`` as for the constructor."""
        return cls(TraceReplay.from_file(path), **kwargs)

    def sample_delays(self, num_groups: int, num_workers: int, device: Device = None) -> torch.Tensor:
        """``(num_groups, num_workers)`` float64 latencies in seconds, on ``device`` (default CPU)."""
        num_groups, num_workers = check_shape(num_groups, num_workers)
        return self.latency.sample((num_groups, num_workers), self.generator_for(device))

    def mask_from_delays(self, delays: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The arrival mask ``(B, N)`` and step latency ``(B,)`` for given worker latencies ``(B, N)``: a
        floating-point tensor of seconds, ``inf`` for a result that never arrives, no NaN (else a one-line
        ``TypeError`` / ``ValueError`` naming ``delays``)."""
        if not isinstance(delays, torch.Tensor):
            raise TypeError(
                f"delays must be a torch.Tensor of shape (B, N) (seconds), got {type(delays).__name__}; "
                "convert it with torch.as_tensor(..., dtype=torch.float64)"
            )
        if not delays.is_floating_point():
            raise TypeError(f"delays must be floating point (seconds), got {delays.dtype}; cast it with .double()")
        if delays.ndim != 2:
            hint = "; a single step's (N,) delays are delays.unsqueeze(0)" if delays.ndim == 1 else ""
            raise ValueError(f"delays must have shape (B, N), got {tuple(delays.shape)}{hint}")
        if delays.isnan().any():
            raise ValueError("delays must not be NaN (use inf for a result that never arrives)")
        return self._mask_from_delays(delays)

    def _mask_from_delays(self, delays: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`mask_from_delays` without the checks (and their host synchronisation) for the model's own draws."""
        n = delays.shape[-1]
        s = 0 if self.num_stragglers is None else self.num_stragglers
        if s >= n:
            raise ValueError(f"num_stragglers={s} leaves no worker out of N={n}")
        step = delays.sort(dim=-1).values[..., n - s - 1]
        if self.deadline is not None:
            step = step.clamp(max=self.deadline)
        return delays <= step.unsqueeze(-1), step

    def sample_with_latency(
        self, num_groups: int, num_workers: int, device: Device = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A mask ``(B, N)`` and the simulated step latency ``(B,)`` in seconds, on ``device``."""
        return self._mask_from_delays(self.sample_delays(num_groups, num_workers, device))

    def sample(self, num_groups: int, num_workers: int, device: Device = None) -> torch.Tensor:
        return self.sample_with_latency(num_groups, num_workers, device)[0]

    def __repr__(self) -> str:
        return f"LatencyStragglers({self.latency!r}, num_stragglers={self.num_stragglers}, deadline={self.deadline})"


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        check_real(name, value, low=0, low_open=True)
