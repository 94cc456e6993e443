"""The coded-inference job (``python -m torchgcc.distributed``): settings, rank 0's step loop, the summary.

Rank 0 holds one :class:`~torchgcc.CodedModule` per code of the run, all on the same engine (the ranks of a
torchrun job, :class:`~torchgcc.distributed.ProcessGroupWorkers`; or Ray actors,
:class:`~torchgcc.distributed.RayWorkers`); every step it draws a batch of the workload, runs every code on it (on
the same injected delays or drawn mask) and hands one record per step and code to ``emit`` (then a summary record);
ranks 1..P-1 serve the coded workers until shutdown (:func:`~torchgcc.distributed.serve`). The command line that
builds :class:`JobSettings` is :mod:`torchgcc.app.commands.distributed_job`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional, Sequence

import torch
import torch.distributed as dist

from torchgcc.app.code_names import NamedCode, named_code
from torchgcc.app.workloads import Workload, make_workload
from torchgcc.checks import check_integer, check_real, check_seed
from torchgcc.coded_module import CodedModule
from torchgcc.distributed import ProcessGroupWorkers, connect, serve
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.heartbeat import peak_rss_mb
from torchgcc.distributed.transport import STORE_CHUNK_BYTES, STORE_VALUE_LIMIT, Channel
from torchgcc.metrics import argmax_agreement, mean_ci, mse
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers, LatencyStragglers, StragglerModel
from torchgcc.workers import Completion, Task, TooFewWorkersError, Workers

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "EXIT_TOO_FEW_WORKERS",
    "EXIT_TRANSPORT",
    "EXIT_USAGE",
    "JobOutcome",
    "JobSettings",
    "Terminated",
    "run_job",
    "summarize",
]

#: exit status when too few workers remain to decode (lost ranks, or a step timed out).
EXIT_TOO_FEW_WORKERS = 3
#: exit status when the store or the data plane failed on the coordinator's side.
EXIT_TRANSPORT = 4
#: exit status for a bad option (a one-line message, no traceback).
EXIT_USAGE = 2
#: exit status when the launcher terminated the coordinator (torchrun does so when another rank exits non-zero).
EXIT_TERMINATED = 143
#: exit status when the coordinator was interrupted (SIGINT, Ctrl-C).
EXIT_INTERRUPTED = 130

Record = dict[str, Any]


@dataclass
class JobSettings:
    """Everything a rank needs to take part in the job; every rank must be given the same settings.

    Engine: ``"torchrun"`` (ranks launched by torchrun or the local launcher: rank 0 coordinates, the others host
    the workers) or ``"ray"`` (one process: the coordinator, with the N workers as Ray actors on a local Ray
    instance, each restarted up to ``max_restarts`` times after a crash; ``layout``, ``transport`` and the rank
    faults do not apply).

    Code: ``schemes`` (code names run on the same batches and delays, :mod:`torchgcc.app.code_names`:
    ``"uncoded"``, ``"replication"`` or registered codes, optionally ``"gcc:S=4"`` or ``"gcc:adaptive"``),
    ``code_params`` (keyword arguments of ``make_code``), ``num_workers`` N, ``num_inputs`` K, ``num_stragglers`` S
    (decode once N - S results arrived), ``layout`` of the N workers over the worker ranks.

    Run: ``steps``, ``task`` (``"mlp"`` or a timm model name) with ``image_size``, ``num_classes`` and
    ``checkpoint``; ``batch_size`` M samples per step; ``transport`` (``"pg"`` data plane or ``"store"``) with
    ``store_chunk_mb``; ``seed``; ``device`` of the workers; torch ``threads`` per process; ``check`` also runs the
    single-process :class:`~torchgcc.CodedModule` with the same mask; ``save``: keep every step's tensors in the
    outcome.

    Mask mode: ``mode`` (``"simulated"``: the straggler model's mask; ``"injected"``: workers sleep latency-model
    delays; ``"measured"``: real completion order), ``straggler_model`` of the simulated mode (``"fixed"``,
    ``"bernoulli"``, ``"latency"``) with ``straggler_placement`` and ``straggle_prob``; ``latency`` model name and
    ``latency_params``; ``deadline`` seconds (<= 0: none; ``None``: :func:`default_deadline`); ``step_timeout`` and
    ``heartbeat_timeout`` seconds.

    Adaptive wait count (schemes ``CODE:adaptive``): ``wait_deadline``, ``wait_budget``, ``wait_max_stragglers``
    (default N - K), ``wait_warmup``, ``wait_max_step``, ``wait_discount`` (see
    :class:`~torchgcc.control.wait_count.WaitCountController`).

    Fault injection: ``kill_rank`` at ``kill_step`` with ``kill_exit_code``; ``hang_rank`` from ``hang_step``;
    ``slow_workers`` delayed by ``slow_delay`` seconds at every step.
    """

    engine: str = "torchrun"
    max_restarts: int = 0
    schemes: tuple[str, ...] = ("gcc",)
    code_params: dict[str, Any] = field(default_factory=dict)
    num_workers: int = 8
    num_inputs: int = 4
    num_stragglers: int = 2
    layout: str = "round_robin"
    steps: int = 10
    task: str = "mlp"
    image_size: int = 224
    num_classes: int = 1000
    checkpoint: Optional[str] = None
    batch_size: int = 64
    transport: str = "pg"
    store_chunk_mb: float = STORE_CHUNK_BYTES / 2**20
    seed: int = 0
    device: str = "cpu"
    threads: int = 1
    check: bool = False
    save: bool = False
    mode: str = "simulated"
    straggler_model: str = "fixed"
    straggler_placement: str = "random"
    straggle_prob: float = 0.1
    latency: str = "shifted_exponential"
    latency_params: dict[str, Any] = field(default_factory=dict)
    deadline: Optional[float] = None
    step_timeout: float = 30.0
    heartbeat_timeout: float = 2.0
    wait_deadline: Optional[float] = None
    wait_budget: float = 0.01
    wait_max_stragglers: Optional[int] = None
    wait_warmup: int = 1
    wait_max_step: int = 4
    wait_discount: float = 0.95
    kill_rank: Optional[int] = None
    kill_step: int = 0
    kill_exit_code: int = 0
    hang_rank: Optional[int] = None
    hang_step: int = 0
    slow_workers: tuple[int, ...] = ()
    slow_delay: float = 5.0

    def __post_init__(self) -> None:
        """Reject settings no run can use, each with one line naming the setting (and its option)."""
        n, k, s = self.num_workers, self.num_inputs, self.num_stragglers
        for name, value, low in (
            ("num_workers (-N)", n, 1),
            ("num_inputs (-K)", k, 1),
            ("steps", self.steps, 1),
            ("batch_size (-M)", self.batch_size, 1),
            ("threads", self.threads, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if k > n:
            raise ValueError(f"num_inputs (-K {k}) must not exceed num_workers (-N {n})")
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < n:
            raise ValueError(f"num_stragglers (-S {s}) must be an integer in [0, N) = [0, {n}): N - S results decode")
        if not self.schemes:
            raise ValueError("schemes (--scheme) names no scheme")
        choices = {
            "engine": ("torchrun", "ray"),
            "mode": ("simulated", "injected", "measured"),
            "straggler_model": ("fixed", "bernoulli", "latency"),
            "device": ("cpu", "cuda"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.engine == "ray" and (self.kill_rank is not None or self.hang_rank is not None):
            raise ValueError("--kill-rank/--hang-rank are faults of torchrun ranks; with --engine ray kill an actor")
        if not 0 <= self.straggle_prob < 1:
            raise ValueError(f"straggle_prob must be in [0, 1), got {self.straggle_prob!r}")
        for name in ("step_timeout", "heartbeat_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if self.deadline is not None and math.isnan(self.deadline):  # NaN > 0 is False: it meant "no deadline"
            raise ValueError(
                f"deadline (--deadline) must be a number of seconds (<= 0: no deadline), got {self.deadline!r}"
            )
        self._check_controller_options()
        if not 0 <= self.slow_delay < math.inf:
            raise ValueError(f"slow_delay (--slow-delay) must be finite seconds >= 0, got {self.slow_delay!r}")
        for worker in self.slow_workers:
            if not 0 <= worker < n:
                raise ValueError(
                    f"slow_workers (--slow-worker {worker}) must name coded workers in 0..N-1 = 0..{n - 1}"
                )
        for name, maximum in (("kill_step", None), ("hang_step", None), ("kill_exit_code", 255)):
            option = f"--{name.replace('_', '-')}"
            setattr(self, name, check_integer(f"{name} ({option})", getattr(self, name), minimum=0, maximum=maximum))
        for name in ("kill_rank", "hang_rank"):
            rank = getattr(self, name)
            if rank is not None and rank < 1:
                raise ValueError(
                    f"{name} (--{name.replace('_', '-')} {rank}) must be a worker rank >= 1: rank 0 is the coordinator"
                )
        if not 0 < self.chunk_bytes <= STORE_VALUE_LIMIT:
            raise ValueError(
                f"--store-chunk-mb {self.store_chunk_mb} is outside (0, {STORE_VALUE_LIMIT / 2**20:g}] MiB (the "
                "TCPStore's largest value)"
            )

    def _check_controller_options(self) -> None:
        """The options that reach the wait-count controller of ``CODE:adaptive`` schemes, in the ranges it takes
        (checked here, not when rank 0 builds the controllers after every rank has started, so the launcher refuses
        them before any rank starts): NaN or out-of-range values got through to the first adaptive step."""
        if self.wait_deadline is not None:
            self.wait_deadline = check_real("wait_deadline (--wait-deadline)", self.wait_deadline, low=0, low_open=True)
        self.wait_budget = check_real("wait_budget (--wait-budget)", self.wait_budget, low=0, high=1, high_open=True)
        self.wait_discount = check_real(
            "wait_discount (--wait-discount)", self.wait_discount, low=0, low_open=True, high=1
        )
        if self.wait_max_stragglers is not None:
            self.wait_max_stragglers = check_integer(
                "wait_max_stragglers (--wait-max-stragglers)",
                self.wait_max_stragglers,
                minimum=0,
                maximum=self.num_workers - 1,
            )
        self.wait_warmup = check_integer("wait_warmup (--wait-warmup)", self.wait_warmup, minimum=0)
        self.wait_max_step = check_integer("wait_max_step (--wait-max-step)", self.wait_max_step, minimum=1)
        self.seed = check_seed("seed (--seed)", self.seed)

    @property
    def chunk_bytes(self) -> int:
        return int(self.store_chunk_mb * 2**20)


@dataclass
class JobOutcome:
    """What rank 0 returns: the exit status, every step record, the summary record and (with ``save``) the saved
    steps (inputs, mask, delays, outputs per step and code) and the adaptive controllers' states."""

    status: int
    records: list[Record]
    summary: Record
    saved: dict[str, Any] | None = None


class Terminated(Exception):
    """The coordinator received SIGTERM or SIGINT; ``status`` is the exit status it ends with (143 or 130).

    Not a ``RuntimeError``: a signal handler's exception raised inside ``threading.Condition.notify`` (the data
    plane's sender queue) is swallowed there if it is one (CPython's gh-92530 workaround), and the job then ran on
    after a Ctrl-C until torchrun killed it."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Termination:
    """The coordinator's SIGTERM / SIGINT handler.

    While the steps run, the first signal raises :class:`Terminated` (later ones are ignored: torchrun sends SIGTERM
    after a Ctrl-C), so the error and summary records are still written. Once the steps are over (:meth:`disarm`:
    closing the workers, writing the summary) a signal only sets the exit status, and it wins over the errors it
    causes (ranks torn down by the launcher look like lost workers)."""

    def __init__(
        self, sigterm: str = "terminated by the launcher (SIGTERM); torchrun does this when another rank exits non-zero"
    ) -> None:
        self.status: Optional[int] = None
        self.armed = True
        self.sigterm = sigterm  # the error record's words for a SIGTERM

    def handle(self, signum: int, frame: object) -> None:
        if self.status is not None:
            return
        self.status = EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED
        if self.armed:
            self.armed = False
            if signum == signal.SIGINT:
                raise Terminated("interrupted (SIGINT, Ctrl-C)", EXIT_INTERRUPTED)
            raise Terminated(self.sigterm, EXIT_TERMINATED)

    def disarm(self) -> None:
        self.armed = False

    def install(self) -> dict:
        """Handle SIGTERM and SIGINT here; returns the previous handlers."""
        return {signum: signal.signal(signum, self.handle) for signum in (signal.SIGTERM, signal.SIGINT)}


def fault_plan(settings: JobSettings) -> FaultPlan:
    """The settings' fault injection."""
    return FaultPlan(
        kill_rank=settings.kill_rank,
        kill_step=settings.kill_step,
        kill_exit_code=settings.kill_exit_code,
        hang_rank=settings.hang_rank,
        hang_step=settings.hang_step,
        slow_workers=tuple(settings.slow_workers),
        slow_delay_s=settings.slow_delay,
    )


def straggler_model(settings: JobSettings, min_arrived: int) -> StragglerModel:
    """The simulated mode's straggler model (its masks are drawn per step and shared by every code; Bernoulli
    masks keep at least ``min_arrived`` workers)."""
    s = settings.num_stragglers
    if settings.straggler_model == "fixed":
        return FixedStragglers(s, settings.straggler_placement, seed=settings.seed)
    if settings.straggler_model == "bernoulli":
        return BernoulliStragglers(settings.straggle_prob, min_arrived=min_arrived, seed=settings.seed)
    return latency_model(settings)


def latency_model(settings: JobSettings) -> LatencyStragglers:
    """The injected mode's delays (and the simulated ``latency`` straggler model)."""
    return LatencyStragglers(
        settings.latency, num_stragglers=settings.num_stragglers, seed=settings.seed, **settings.latency_params
    )


#: seconds of the default deadline in the simulated and measured modes.
DEADLINE_S = 1.0
#: the injected mode's default deadline is :data:`DEADLINE_S` after this quantile of the injected delays.
DEADLINE_QUANTILE = 0.999


def default_deadline(settings: JobSettings) -> float:
    """The deadline (seconds) of settings given none: :data:`DEADLINE_S`, or in the injected mode that much after
    the latency model's :data:`DEADLINE_QUANTILE` (99.9th percentile) delay of one worker (from 10^4 seeded draws).

    The deadline is a soft limit for absent workers; inside the range of the injected delays it would decode every
    step from the first arrivals instead of the fastest ``N - S`` (the default shifted exponential delays are at
    least 1 s, so with a 1 s deadline every step did)."""
    if settings.mode != "injected":
        return DEADLINE_S
    steps = math.ceil(10_000 / settings.num_workers)
    draws = latency_model(settings).sample_delays(steps, settings.num_workers)
    return float(draws.quantile(DEADLINE_QUANTILE)) + DEADLINE_S


def wait_controller(settings: JobSettings):
    """A fresh :class:`~torchgcc.control.wait_count.WaitCountController` for a ``CODE:adaptive`` name."""
    if settings.wait_deadline is None or settings.wait_deadline <= 0:
        raise ValueError("an adaptive scheme needs --wait-deadline SECONDS (> 0), the latency it keeps steps under")
    if settings.mode == "simulated":
        raise ValueError("an adaptive wait count needs arrivals to wait for: use --mode injected or measured")
    from torchgcc.control.wait_count import WaitCountController

    largest = settings.wait_max_stragglers
    if largest is None:
        largest = settings.num_workers - settings.num_inputs
    return WaitCountController(
        settings.num_workers,
        deadline=settings.wait_deadline,
        budget=settings.wait_budget,
        candidates=range(largest + 1),
        discount=settings.wait_discount,
        warmup=settings.wait_warmup,
        max_step=settings.wait_max_step,
        seed=settings.seed,
    )


def build_codes(settings: JobSettings) -> list[NamedCode]:
    """The codes of ``settings.schemes`` with their waits (raises ``ValueError`` for a bad name or combination)."""
    deadline = default_deadline(settings) if settings.deadline is None else settings.deadline
    named = [
        named_code(
            name,
            num_inputs=settings.num_inputs,
            num_workers=settings.num_workers,
            num_stragglers=settings.num_stragglers,
            deadline_s=deadline if deadline > 0 else None,
            timeout_s=settings.step_timeout,
            controller=lambda: wait_controller(settings),
            watch_s=settings.wait_deadline,
            code_params=settings.code_params,
        )
        for name in settings.schemes
    ]
    if settings.mode == "simulated" and any(n.code.num_inputs != settings.num_inputs for n in named):
        raise ValueError(
            "uncoded groups N samples, but the simulated mode draws one mask per step for groups of K: "
            "use --mode injected or measured"
        )
    return named


class InjectedDelays:
    """An engine whose tasks wait ``delays[worker]`` seconds after the model (set per step; the injected mode)
    plus the fault plan's slow workers' extra delay; everything else is the wrapped engine's."""

    def __init__(self, workers: Workers, extra: torch.Tensor) -> None:
        self.workers, self.extra = workers, extra
        self.num_workers, self.workers_per_process = workers.num_workers, workers.workers_per_process
        self.delays: Optional[torch.Tensor] = None

    def applied(self) -> Optional[torch.Tensor]:
        """``(N,)`` the delays the next tasks get, or None when there are none."""
        if self.delays is None and not self.extra.any():
            return None
        return self.extra if self.delays is None else self.extra + self.delays

    def now(self) -> float:
        return self.workers.now()

    def submit(self, tasks: Sequence[Task]) -> None:
        delays = self.applied()
        if delays is not None:
            tasks = [dataclasses.replace(t, delay_s=t.delay_s + float(delays[t.worker])) for t in tasks]
        self.workers.submit(tasks)

    def cancel(self, keys: Sequence[Hashable]) -> None:
        self.workers.cancel(keys)

    def wait(self, until_s: float) -> list[Completion]:
        return self.workers.wait(until_s)

    def lost_workers(self) -> set[int]:
        return self.workers.lost_workers()

    def close(self) -> None:
        self.workers.close()


def summarize(records: list[Record]) -> dict[str, dict[str, float]]:
    """Per code name: steps, median and p99 step latency, MSE and argmax agreement (RelAcc) as mean and 95% CI
    half-width over steps (``1.96 * std / sqrt(steps)``), median MSE, the samples left without a result, and the
    mean S (NaN for the codes without one)."""
    summary = {}
    for name in dict.fromkeys(r["scheme"] for r in records):
        rows = [r for r in records if r["scheme"] == name]
        latency = torch.tensor([r["latency_s"] for r in rows], dtype=torch.float64)
        errors = torch.tensor([r["mse"] for r in rows], dtype=torch.float64)
        mean_mse, mse_ci = mean_ci(errors)
        agreement, agreement_ci = mean_ci(torch.tensor([r["agreement"] for r in rows], dtype=torch.float64))
        chosen = [math.nan if r.get("S") is None else r["S"] for r in rows]
        summary[name] = {
            "steps": len(rows),
            "median_latency_s": float(latency.quantile(0.5)),
            "p99_latency_s": float(latency.quantile(0.99)),
            "mse": mean_mse,
            "mse_ci": mse_ci,
            "median_mse": float(errors.quantile(0.5)),
            "agreement": agreement,
            "agreement_ci": agreement_ci,
            "missing_samples": sum(len(r["missing"]) for r in rows),
            "mean_S": float(torch.tensor(chosen, dtype=torch.float64).mean()),
        }
    return summary


def run_job(
    settings: JobSettings,
    *,
    emit: Callable[[Record], None] = lambda record: None,
    on_step: Callable[[int], None] = lambda step: None,
) -> JobOutcome | None:
    """Take part in the job: rank 0 coordinates and returns the :class:`JobOutcome`, the others serve the coded
    workers and return None once the coordinator shuts the job down.

    Rank 0 hands every record to ``emit`` as it is made (``"start"``, one per step and code, ``"error"``, then
    ``"summary"``) and calls ``on_step(step)`` after each step. Raises ``ValueError`` for bad settings on every
    rank before any process group is joined.
    """
    torch.set_num_threads(settings.threads)
    faults = fault_plan(settings)
    if settings.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but CUDA is not available on this machine: use --device cpu")
    # built on every rank before joining, so that bad settings stop every rank, not just the coordinator
    workload = make_workload(
        settings.task,
        seed=settings.seed,
        batch_size=settings.batch_size,
        image_size=settings.image_size,
        num_classes=settings.num_classes,
        checkpoint=settings.checkpoint,
    )
    codes = build_codes(settings)
    extra = faults.extra_delays(settings.num_workers)
    if settings.engine == "ray":
        return _run_on_ray(settings, workload, codes, extra, emit, on_step)
    channel = connect()
    if channel.rank != 0:
        # Ctrl-C reaches every rank of a torchrun job: the coordinator stops the workers (or torchrun ends them)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        device = "cpu"
        if settings.device == "cuda":
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"
        serve(
            workload.model,
            channel,
            device=device,
            faults=faults,
            transport=settings.transport,
            chunk_bytes=settings.chunk_bytes,
        )
        return None

    termination = Termination()
    termination.install()
    try:
        workers = ProcessGroupWorkers(
            channel,
            num_workers=settings.num_workers,
            layout=settings.layout,
            transport=settings.transport,
            chunk_bytes=settings.chunk_bytes,
            heartbeat_timeout_s=settings.heartbeat_timeout,
        )
        start = {
            "event": "start",
            "engine": "torchrun",
            "world_size": channel.world_size,
            "layout": workers.assignment,
            "transport": settings.transport,
        }
        engine = InjectedDelays(workers, extra)

        def set_step(step: int) -> None:
            workers.step = step

        return _coordinate(
            settings, engine, start, workload, codes, emit, on_step, lambda: _max_rss_mb(channel), set_step, termination
        )
    finally:
        with contextlib.suppress(dist.DistError):  # the store may be gone with a launcher that tears the job down
            channel.request_shutdown()  # idempotent; also frees the workers when the coordinator fails early


def _run_on_ray(settings, workload, codes, extra, emit, on_step) -> JobOutcome:
    """The coordinator's loop with the N workers as Ray actors, in this process."""
    from torchgcc.distributed.ray_workers import RayWorkers, local_ray

    termination = Termination(sigterm="terminated (SIGTERM)")
    previous = termination.install()
    ray_up = False
    try:
        with local_ray():
            # ray.init installs its own C-level SIGTERM handler, which aborts (status 134, no error record, no
            # summary): put ours back in front of it
            termination.install()
            ray_up = True
            with RayWorkers(workload.model, settings.num_workers, max_restarts=settings.max_restarts) as ray:
                start = {"event": "start", "engine": "ray", "num_workers": settings.num_workers, "pids": ray.pids}
                engine = InjectedDelays(ray, extra)
                rss = lambda: {0: peak_rss_mb()}  # noqa: E731
                return _coordinate(
                    settings, engine, start, workload, codes, emit, on_step, rss, lambda step: None, termination
                )
    except SystemExit:
        if ray_up:
            raise
        # a SIGTERM while ray.init runs meets Ray's Python handlers, which exit silently (sys.exit(15), or 1 once its
        # node started; local_ray has shut Ray down): the job's error line and status instead
        raise Terminated(termination.sigterm, EXIT_TERMINATED) from None
    finally:  # this process goes on (a test, a notebook): give it its signal handlers back
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _coordinate(
    settings: JobSettings,
    engine: InjectedDelays,
    start: Record,
    workload: Workload,
    codes: list[NamedCode],
    emit: Callable[[Record], None],
    on_step: Callable[[int], None],
    max_rss_mb: Callable[[], dict],
    set_step: Callable[[int], None],
    termination: Termination,
) -> JobOutcome:
    """The coordinator's loop (the engine closed at the end): every step, every code, one record; then the
    summary. GCC's default calibrates on the first batch by GCV alone (``validate_calibration=False``): the
    coordinator leaves the model to the workers, as the published ``bench-latency`` runs were made."""
    modules = {
        n.name: CodedModule(workload.model, n.code, workers=engine, wait=n.wait, validate_calibration=False)
        for n in codes
    }
    num_groups = math.ceil(settings.batch_size / settings.num_inputs)
    min_arrived = max(n.code.min_arrived for n in codes)
    drawn = straggler_model(settings, min_arrived) if settings.mode == "simulated" else None
    latency = latency_model(settings) if settings.mode == "injected" else None
    records: list[Record] = []
    saved: list[dict] = []
    status = 0
    started = time.monotonic()
    try:
        emit(start)
        for step in range(settings.steps):
            x = workload.batch(step)
            with torch.no_grad():
                reference = workload.model(x)
            mask = None if drawn is None else drawn.sample(num_groups, settings.num_workers)
            engine.delays = None if latency is None else latency.sample_delays(1, settings.num_workers)[0].double()
            set_step(step)
            for named in codes:
                record, kept = _run_code(settings, modules[named.name], named, engine, x, mask, reference, step)
                records.append(record)
                emit(record)
                if settings.save:
                    saved.append(kept)
            on_step(step)
    except (TooFewWorkersError, Terminated, dist.DistError) as error:
        emit({"event": "error", "error": f"{type(error).__name__}: {error}"})
        status = EXIT_TOO_FEW_WORKERS if isinstance(error, TooFewWorkersError) else EXIT_TRANSPORT
        status = error.status if isinstance(error, Terminated) else status
    termination.disarm()  # from here a signal only sets the status: the workers are closed and the summary written
    try:
        engine.close()
    except dist.DistError as error:  # a launcher tearing the job down took the store with it: still summarise
        if not status:  # else the steps already ended on an error, said once: a job ends with one error line
            emit({"event": "error", "error": f"while closing the workers: {type(error).__name__}: {error}"})
        status = status or EXIT_TRANSPORT
    status = termination.status or status
    lost = sorted(engine.lost_workers())  # after close(), which also catches ranks that died near the end
    per_step = collections.Counter(r["step"] for r in records)
    completed = sum(count == len(codes) for count in per_step.values())  # steps every code finished
    controllers = {n.name: n.wait.adaptive for n in codes if n.wait.adaptive is not None}
    summary = {
        "event": "summary",
        "status": status,
        "steps": completed,
        "steps_requested": settings.steps,
        "wall_s": time.monotonic() - started,
        "lost_workers": lost,
        "worker_events": getattr(engine.workers, "events", []),  # the Ray engine's losses and re-admissions
        "max_rss_mb": max_rss_mb(),
        "schemes": summarize(records),
        "wait_policies": {
            name: {
                "stragglers_distribution": c.stragglers_distribution(),
                "event_rate": c.controller.event_rate,
                "changes": c.controller.changes,
            }
            for name, c in controllers.items()
        },
    }
    emit(summary)
    kept = None
    if settings.save:
        kept = {"steps": saved, "wait_policies": {name: c.state_dict() for name, c in controllers.items()}}
    return JobOutcome(status=status, records=records, summary=summary, saved=kept)


def _run_code(
    settings: JobSettings,
    coded: CodedModule,
    named: NamedCode,
    engine: InjectedDelays,
    x: torch.Tensor,
    mask: Optional[torch.Tensor],
    reference: torch.Tensor,
    step: int,
) -> tuple[Record, dict]:
    """One step of one code: its record, and the tensors ``save`` keeps."""
    delays = engine.applied()
    started = time.monotonic()
    with torch.no_grad():
        output = coded(x, mask=mask)
    finished = time.monotonic()
    round_ = coded.last_round
    assert round_ is not None  # a CodedModule with workers keeps every forward's round
    latency_s = finished - started - (round_.watched_s - round_.waited_s)  # watching late results is not latency
    used = round_.mask.any(0)
    have = ~torch.isnan(output).flatten(1).any(1)  # samples without a result (replication at a deadline) are NaN
    groups = math.ceil(len(x) / named.code.num_inputs)
    record = {
        "step": step,
        "scheme": named.name,
        "latency_s": latency_s,
        "compute_s": float(round_.compute_s[used].max()),
        "payload_mb_per_rank": groups * x[0].nbytes * engine.workers_per_process / 1e6,
        "arrived": used.nonzero().flatten().tolist(),
        "missing": (~have).nonzero().flatten().tolist(),
        "mse": float(mse(output[have], reference[have])) if have.any() else math.nan,
        "agreement": float(argmax_agreement(output[have], reference[have])) if have.any() else math.nan,
        "lost_workers": round_.lost_workers,
        "S": round_.num_stragglers,
    }
    if settings.check:
        with torch.no_grad():
            single = CodedModule(coded.model, named.code)(x, mask=round_.mask)
        record["max_abs_diff_single_process"] = float((single - output).abs().max())
    kept = {
        "step": step,
        "scheme": named.name,
        "x": x,
        "mask": round_.mask,
        "delays": delays,
        "output": output,
        "arrival_s": round_.arrival_s,
        "watched_s": round_.watched_s,
    }
    return record, kept


def _rank0_rss_mb() -> dict[int, float]:
    """This process's peak resident memory in MB (the Ray engine: the actors are Ray's processes)."""
    return {0: peak_rss_mb()}


def _max_rss_mb(channel: Channel) -> dict[int, float]:
    """Peak resident memory per rank in MB (worker ranks report theirs when they exit; absent if they did not, or
    if the store is already gone)."""
    peaks = {0: peak_rss_mb()}
    try:
        for rank in range(1, channel.world_size):
            key = f"rss/{rank}"
            if channel.store.check([key]):
                peaks[rank] = float(channel.store.get(key))
    except dist.DistError:
        pass
    return peaks
