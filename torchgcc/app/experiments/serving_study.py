"""``torchgcc serve-bench`` (and ``torchgcc reproduce serving``): coded serving under open-loop load.

Queries (digits test images) arrive as a Poisson process at each rate of ``rates``; batches of ``batch_size``
queries (or fewer after ``batch_timeout_s``) are dispatched to N real workers (local processes, or Ray actors with
``--engine ray``) that each hold the trained classifier and run their tasks in order; each batch is decoded from
the results its scheme needs (:func:`torchgcc.serving.serve_open_loop`). Every scheme uses the same N workers:

- ``uncoded``: the batch split into N shares; waits for every share;
- ``replication``: every query on ``r = N / K`` workers; waits for one copy of each;
- ``hedged``: uncoded, plus a backup of every share still unanswered after the ``hedge_percentile`` of recent
  share latencies, on the least-loaded other worker ("The Tail at Scale");
- ``gcc``, ``natural`` (natural-spline GCC), ``bacc`` at two S, ``(N - K) / 2`` and ``N - K``: groups of K queries
  coded into N inputs, decoded from the fastest ``N - S``. GCC's default decoder chooses its smoothing once from
  results (it calibrates): before a code serves, it is calibrated on ``calibration_groups`` groups of training
  images under random masks of its S, as a server would before taking traffic, and the choice is validated on
  those images' uncoded outputs (``decoder.calibrate(y, mask, reference=...)``; ``--no-validate-calibration``:
  GCV's choice alone; ``calibration_groups`` 0: on the first batch it serves, one or two groups here).

Worker slowdowns are injected delays (each worker stays busy ``delay`` seconds after its model ran; the latency
model is seeded per rate and trial, and every scheme of a trial gets the same arrivals and the same delays),
optionally with real interference: a busy loop pinned to ``interference_cores`` (workers are then pinned round
robin over the cores), or replayed from a recorded trace (``--latency trace --latency-param path=...``). A
query's latency runs from its arrival to its batch's decode. Per rate and scheme the records give the median,
p99 and p99.9 latency, the throughput, argmax agreement with the base model (RelAcc) and accuracy against the
labels, each as a mean over trials with a Student-t 95% half-width.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

import torchgcc
from torchgcc.app.cli import UsageError
from torchgcc.app.code_names import NamedCode, named_code
from torchgcc.app.data import list_datasets, load_dataset
from torchgcc.app.model_cache import load_or_train
from torchgcc.app.models import list_models
from torchgcc.app.plots import plt, save_figure
from torchgcc.app.results import ExperimentResult
from torchgcc.app.statistics import seed_mean_ci
from torchgcc.app.tables import markdown_rows, publish_rows
from torchgcc.coded_module import group_samples
from torchgcc.codes.gcc import GCV_POOL
from torchgcc.metrics import accuracy, argmax_agreement, mse
from torchgcc.serving import CpuHog, HedgePolicy, PoissonArrivals, form_batches, serve_open_loop
from torchgcc.stragglers import LATENCY_MODELS, FixedStragglers, LatencyStragglers
from torchgcc.workers import ProcessWorkers, VirtualWorkers

__all__ = [
    "docs_p99_table",
    "DEFAULT",
    "ENGINES",
    "QUICK",
    "Config",
    "add_arguments",
    "calibrate_before_serving",
    "configure",
    "docs_table",
    "report",
    "run",
    "schemes_for",
    "summarize_trials",
]

#: Where the workers run: local processes and Ray actors are real execution; ``virtual`` is a simulated clock.
ENGINES = ("processes", "ray", "virtual")
#: Latency statistics of a run, by record key: the quantile of the per-query latencies.
QUANTILES = {"median_s": 0.5, "p99_s": 0.99, "p999_s": 0.999}


def schemes_for(num_workers: int, num_inputs: int) -> tuple[str, ...]:
    """The baselines and each code at S = ``(N - K) / 2`` and ``N - K``, all at N workers."""
    stragglers = sorted({max((num_workers - num_inputs) // 2, 1), num_workers - num_inputs})
    codes = tuple(f"{code}:S={s}" for code in ("gcc", "natural", "bacc") for s in stragglers)
    return ("uncoded", "replication", "hedged", *codes)


@dataclass(frozen=True)
class Config:
    """Settings of one serving benchmark.

    ``batch_size`` queries per batch (a multiple of K: ``batch_size / K`` groups), ``queries`` per rate and
    trial, ``latency`` a registered latency model with ``latency_params`` (seconds), drawn once per batch and
    worker; ``worker_threads`` torch threads per worker; ``virtual_service_s`` the model time of one task on the
    virtual clock (``engine="virtual"`` only); ``calibration_groups`` the groups of training images a calibrating
    decoder (GCC's default) is calibrated on before it serves (0: on its first served batch), and
    ``validate_calibration`` whether that choice is validated on their uncoded outputs.
    """

    model: str = "lenet5"
    data: str = "digits"
    num_workers: int = 8
    num_inputs: int = 4
    batch_size: int = 8
    batch_timeout_s: float = 0.02
    rates: tuple[float, ...] = (25.0, 50.0, 100.0, 150.0)
    queries: int = 600
    trials: int = 3
    schemes: tuple[str, ...] = schemes_for(8, 4)
    hedge_percentile: float = 0.95
    latency: str = "bimodal"
    latency_params: Mapping[str, Any] = field(
        default_factory=lambda: {"fast": 0.02, "slow": 0.3, "p_slow": 0.05, "jitter": 0.5}
    )
    engine: str = "processes"
    interference_cores: tuple[int, ...] = ()
    worker_threads: int = 1
    virtual_service_s: float = 0.001
    calibration_groups: int = GCV_POOL
    validate_calibration: bool = True
    seed: int = 0


#: The published run: LeNet5 on digits, (N, K) = (8, 4), 4 rates, 600 queries per rate and trial, 3 trials.
DEFAULT = Config()
#: ``--quick``: 3 rates, 160 queries, 2 trials (p99.9 of 160 queries is their maximum: a smoke run).
QUICK = replace(DEFAULT, rates=(25.0, 100.0, 200.0), queries=160, trials=2)


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _key_value(text: str) -> tuple[str, Any]:
    from torchgcc.app.commands.distributed_job import parse_value

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.replace("-", "_"), parse_value(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=list_models(), default=DEFAULT.model, help="classifier the workers run")
    parser.add_argument("--data", choices=list_datasets(), default=DEFAULT.data, help="queries: its test images")
    parser.add_argument("--engine", choices=ENGINES, default=DEFAULT.engine, help="where the workers run")
    parser.add_argument("-N", "--num-workers", dest="num_workers", type=int, default=DEFAULT.num_workers)
    parser.add_argument("-K", "--num-inputs", dest="num_inputs", type=int, default=DEFAULT.num_inputs)
    parser.add_argument("--batch-size", type=int, default=None, help="queries per batch, a multiple of K (default N)")
    parser.add_argument(
        "--batch-timeout", dest="batch_timeout_s", type=float, default=DEFAULT.batch_timeout_s, help="seconds"
    )
    parser.add_argument(
        "--rates",
        type=_floats,
        default=None,
        metavar="R1,R2,...",
        help=f"arrival rates in queries/s (default {','.join(f'{r:g}' for r in DEFAULT.rates)}; "
        f"--quick: {','.join(f'{r:g}' for r in QUICK.rates)})",
    )
    parser.add_argument("--queries", type=int, default=None, help="queries per rate and trial")
    parser.add_argument("--trials", type=int, default=None, help="trials per rate (seeds); CIs are over trials")
    parser.add_argument(
        "--schemes", default=None, help="comma-separated schemes (default: the baselines and each code at two S)"
    )
    parser.add_argument(
        "--hedge-percentile", type=float, default=DEFAULT.hedge_percentile, help="backup after this percentile"
    )
    parser.add_argument("--latency", choices=LATENCY_MODELS.names(), default=DEFAULT.latency, help="latency model")
    parser.add_argument(
        "--latency-param",
        dest="latency_params",
        type=_key_value,
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="latency model parameter, e.g. p_slow=0.2 or path=trace.json (repeatable; default "
        + " ".join(f"{k}={v}" for k, v in DEFAULT.latency_params.items())
        + ")",
    )
    parser.add_argument(
        "--interference",
        dest="interference_cores",
        type=lambda text: tuple(int(c) for c in text.split(",")),
        default=(),
        metavar="CORES",
        help="run a busy loop on these CPU cores during every run (workers pinned round robin over the cores)",
    )
    parser.add_argument("--worker-threads", type=int, default=DEFAULT.worker_threads, help="torch threads per worker")
    parser.add_argument(
        "--virtual-service",
        dest="virtual_service_s",
        type=float,
        default=DEFAULT.virtual_service_s,
        help="seconds of model time per task on the virtual clock (--engine virtual)",
    )
    parser.add_argument(
        "--calibration-groups",
        type=int,
        default=DEFAULT.calibration_groups,
        help="groups of training images GCC's default decoder is calibrated on before it serves "
        "(0: on the first batch it serves)",
    )
    parser.add_argument(
        "--no-validate-calibration",
        dest="validate_calibration",
        action="store_false",
        help="keep GCV's choice of smoothing instead of validating it on the calibration images' uncoded outputs",
    )


def configure(args: argparse.Namespace) -> Config:
    base = QUICK if args.quick else DEFAULT
    n, k = args.num_workers, args.num_inputs
    if not 1 <= k < n or n % k:
        raise UsageError(f"-N {n} -K {k}: need 1 <= K < N with N a multiple of K (replication runs N / K copies)")
    config = replace(
        base,
        model=args.model,
        data=args.data,
        engine=args.engine,
        num_workers=n,
        num_inputs=k,
        batch_size=n if args.batch_size is None else args.batch_size,
        batch_timeout_s=args.batch_timeout_s,
        rates=base.rates if args.rates is None else args.rates,
        queries=base.queries if args.queries is None else args.queries,
        trials=base.trials if args.trials is None else args.trials,
        schemes=schemes_for(n, k) if args.schemes is None else tuple(s.strip() for s in args.schemes.split(",")),
        hedge_percentile=args.hedge_percentile,
        latency=args.latency,
        latency_params=base.latency_params if args.latency_params is None else dict(args.latency_params),
        interference_cores=args.interference_cores,
        worker_threads=args.worker_threads,
        virtual_service_s=args.virtual_service_s,
        calibration_groups=args.calibration_groups,
        validate_calibration=args.validate_calibration,
        seed=args.seed,
    )
    if config.batch_size < 1 or config.batch_size % k:
        raise UsageError(f"--batch-size {config.batch_size} must be a positive multiple of K = {k}")
    if not config.rates or min(config.rates) <= 0:
        raise UsageError("--rates must be positive queries per second")
    if config.calibration_groups < 0:
        raise UsageError(f"--calibration-groups must be at least 0, got {config.calibration_groups}")
    if config.queries < config.batch_size or config.trials < 1:
        raise UsageError(f"--queries must be at least one batch ({config.batch_size}) and --trials at least 1")
    if not 0 < config.hedge_percentile < 1:
        raise UsageError(f"--hedge-percentile must be in (0, 1), got {config.hedge_percentile}")
    if config.data != "digits":
        raise UsageError("serve-bench serves the digits test images (--data digits)")
    unknown = sorted(set(config.interference_cores) - os.sched_getaffinity(0))
    if unknown:
        raise UsageError(f"--interference cores {unknown} are not available (have {sorted(os.sched_getaffinity(0))})")
    for name in config.schemes:
        _scheme(config, name)  # a bad name fails here, before any worker starts
    try:
        LatencyStragglers(config.latency, seed=0, **dict(config.latency_params))
    except (TypeError, ValueError, OSError) as error:
        raise UsageError(f"--latency {config.latency} with {dict(config.latency_params)}: {error}") from None
    return config


def _scheme(config: Config, name: str) -> NamedCode:
    """The code and wait of ``name`` (``hedged`` is uncoded; the serving loop adds the backups); a batch still not
    decodable 60 s after dispatch is given up."""
    try:
        return named_code(
            "uncoded" if name == "hedged" else name,
            num_inputs=config.num_inputs,
            num_workers=config.num_workers,
            num_stragglers=0,
            timeout_s=60.0,
        )
    except ValueError as error:
        raise UsageError(f"--schemes: {error}") from None


@contextmanager
def _workers(config: Config, model: torch.nn.Module) -> Iterator[Any]:
    """The N workers of ``config.engine``; stopped (processes, actors, Ray itself) on exit, Ctrl-C included."""
    n = config.num_workers
    if config.engine == "virtual":
        yield VirtualWorkers(model, n, service_s=config.virtual_service_s)
        return
    cores = sorted(os.sched_getaffinity(0))
    cpus = [[cores[w % len(cores)]] for w in range(n)] if config.interference_cores else None
    if config.engine == "processes":
        with ProcessWorkers(model, n, cpus=cpus, threads=config.worker_threads) as workers:
            yield workers
        return
    from torchgcc.distributed.ray_workers import RayWorkers, local_ray

    with local_ray(num_cpus=len(cores)), RayWorkers(model, n, threads=config.worker_threads) as actors:
        yield actors


def calibrate_before_serving(
    named: NamedCode, model: torch.nn.Module, images: torch.Tensor, config: Config, seed: int
) -> None:
    """Calibrate ``named``'s decoder if it calibrates (GCC's default) on ``config.calibration_groups`` groups of
    ``images`` (drawn with ``seed``), coded and run through ``model`` here, under random masks of the code's S:
    the smoothing then comes from as many groups as the rule was chosen on, not from the first served batch. With
    ``config.validate_calibration`` the model also runs on the images themselves and the choice is validated on
    those outputs (:func:`torchgcc.functional.decoder_smoothing.validated_ratio`). Other codes, and
    ``calibration_groups = 0``, are left as they are."""
    decoder = named.code.decoder
    if config.calibration_groups == 0 or not getattr(decoder, "calibrates", False):
        return
    k, n = config.num_inputs, config.num_workers
    generator = torch.Generator().manual_seed(seed)
    picked = torch.randperm(len(images), generator=generator)[: config.calibration_groups * k]
    groups = group_samples(images[picked], k)
    with torch.no_grad():
        coded = named.code.encoder(groups)
        results = model(coded.flatten(0, 1)).reshape(len(groups), n, -1)
        reference = model(groups.flatten(0, 1)).reshape(len(groups), k, -1) if config.validate_calibration else None
    stragglers = named.wait.num_stragglers or 0
    decoder.calibrate(results, FixedStragglers(stragglers, seed=seed).sample(len(groups), n), reference=reference)


def _trial_seed(config: Config, rate_index: int, trial: int) -> int:
    return 1_000_003 * config.seed + 1000 * rate_index + trial


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Train (or load) the classifier, start the workers, and serve every rate, trial and scheme."""
    from tqdm.auto import tqdm

    split = load_dataset(config.data, seed=config.seed)
    trained = load_or_train(config.model, split, seed=config.seed, progress=progress)
    model = trained.model
    runs: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    started = time.monotonic()
    total = len(config.rates) * config.trials * len(config.schemes)
    with _workers(config, model) as workers, ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=total, desc="serve-bench", disable=not progress, leave=False))
        hog = stack.enter_context(_Interference(config.interference_cores))
        for rate_index, rate in enumerate(config.rates):
            for trial in range(config.trials):
                seed = _trial_seed(config, rate_index, trial)
                generator = torch.Generator().manual_seed(seed)
                picked = torch.randint(len(split.test_y), (config.queries,), generator=generator)
                queries, labels = split.test_x[picked], split.test_y[picked]
                with torch.no_grad():
                    base = model(queries)
                arrivals = PoissonArrivals(rate, seed=seed).times(config.queries)
                batches = form_batches(arrivals, batch_size=config.batch_size, timeout_s=config.batch_timeout_s)
                delays = _delays(config, seed, len(batches))
                backup_delays = _delays(config, seed + 500_000, len(batches))
                for name in config.schemes:
                    bar.set_description(f"{rate:g} q/s, trial {trial}, {name}")
                    hedge = HedgePolicy(config.hedge_percentile) if name == "hedged" else None
                    named = _scheme(config, name)
                    calibrate_before_serving(named, model, split.train_x, config, seed)
                    with hog.running():
                        served = serve_open_loop(
                            torchgcc.CodedModule(model, named.code, workers=workers, wait=named.wait),
                            queries,
                            arrivals,
                            batches,
                            delays=delays,
                            backup_delays=backup_delays,
                            hedge=hedge,
                        )
                    runs.append(_run_record(name, rate, trial, served, base, labels, len(batches)))
                    bar.update()
    records = summarize_trials(runs)
    written = {
        **asdict(config),
        "latency_params": dict(config.latency_params),
        "base_accuracy": trained.test_accuracy,
        "model_cache": str(trained.path),
        "wall_s": time.monotonic() - started,
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "coordinator_threads": torch.get_num_threads(),
        "cpus": len(os.sched_getaffinity(0)),
        "real_execution": config.engine != "virtual",
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return ExperimentResult(records, written, {"runs": runs, "comparison": compare(records)})


def _delays(config: Config, seed: int, num_batches: int) -> torch.Tensor:
    """``(num_batches, N)`` seconds each worker stays busy after its model ran, per batch."""
    latency = LatencyStragglers(config.latency, seed=seed, **dict(config.latency_params))
    return latency.sample_delays(num_batches, config.num_workers)


class _Interference:
    """The busy loops of ``--interference``, running only inside :meth:`running` (none without cores)."""

    def __init__(self, cores: tuple[int, ...]) -> None:
        self.hog = CpuHog(list(cores)) if cores else None

    @contextmanager
    def running(self) -> Iterator[None]:
        if self.hog is None:
            yield
            return
        self.hog.start()
        try:
            yield
        finally:
            self.hog.stop()

    def __enter__(self) -> "_Interference":
        return self

    def __exit__(self, *exc_info) -> None:
        if self.hog is not None:
            self.hog.stop()


def _run_record(name, rate, trial, served, base, labels, num_batches) -> dict[str, Any]:
    """One (rate, trial, scheme) run: latency quantiles, throughput, accuracies, work done."""
    have = torch.ones(len(labels), dtype=torch.bool)
    have[served.missing] = False
    outputs = served.outputs[have]
    latency = served.latency_s
    record = {
        "scheme": name,
        "rate_qps": rate,
        "trial": trial,
        **{key: float(latency.quantile(q)) for key, q in QUANTILES.items()},
        "mean_s": float(latency.mean()),
        "throughput_qps": len(labels) / max(served.duration_s, 1e-9),
        "agreement": float(argmax_agreement(outputs, base[have])) if have.any() else math.nan,
        "accuracy": float(accuracy(outputs, labels[have])) if have.any() else math.nan,
        "base_accuracy": float(accuracy(base, labels)),
        "mse": float(mse(outputs, base[have])) if have.any() else math.nan,
        "missing": len(served.missing),
        "tasks_per_batch": served.tasks / num_batches,
        "backups_per_batch": served.backups / num_batches,
        "backups_won": sum(b.backups_won for b in served.batches),
        "lost_workers": served.lost_workers,
    }
    return record


def summarize_trials(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (rate, scheme): each statistic's mean over trials and its Student-t 95% half-width."""
    records = []
    keys = [*QUANTILES, "mean_s", "throughput_qps", "agreement", "accuracy", "mse", "tasks_per_batch"]
    for rate in dict.fromkeys(r["rate_qps"] for r in runs):
        for name in dict.fromkeys(r["scheme"] for r in runs):
            rows = [r for r in runs if r["rate_qps"] == rate and r["scheme"] == name]
            record = {"scheme": name, "rate_qps": rate, "trials": len(rows)}
            for key in keys:
                record[key], record[f"{key}_ci"] = seed_mean_ci([r[key] for r in rows])
            record["backups_per_batch"] = sum(r["backups_per_batch"] for r in rows) / len(rows)
            record["missing"] = sum(r["missing"] for r in rows)
            record["base_accuracy"] = sum(r["base_accuracy"] for r in rows) / len(rows)
            records.append(record)
    return records


def compare(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rate and code: its p99 against replication's and hedging's (ratios below 1: the code's tail is
    shorter) and its agreement (the baselines are exact)."""
    out = []
    by = {(r["rate_qps"], r["scheme"]): r for r in records}
    for (rate, name), row in by.items():
        if ":S=" not in name:
            continue
        entry = {"rate_qps": rate, "scheme": name, "agreement": row["agreement"], "p99_s": row["p99_s"]}
        for baseline in ("replication", "hedged", "uncoded"):
            other = by.get((rate, baseline))
            if other is not None:
                entry[f"p99_vs_{baseline}"] = row["p99_s"] / other["p99_s"]
        out.append(entry)
    return out


def _cell(key: str, digits: int, ci: bool = True):
    def format_cell(record: Mapping[str, Any]) -> str:
        value = record.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        half = record.get(f"{key}_ci")
        if not ci or half is None or (isinstance(half, float) and math.isnan(half)):
            return f"{value:.{digits}f}"
        return f"{value:.{digits}f} ± {half:.{digits}f}"

    return format_cell


COLUMNS = [
    ("rate q/s", lambda r: f"{r['rate_qps']:g}"),
    ("scheme", lambda r: r["scheme"]),
    ("median s", _cell("median_s", 3)),
    ("p99 s", _cell("p99_s", 3)),
    ("p99.9 s", _cell("p999_s", 3)),
    ("throughput q/s", _cell("throughput_qps", 1, ci=False)),
    ("agreement", _cell("agreement", 3)),
    ("accuracy", _cell("accuracy", 3)),
    ("tasks/batch", _cell("tasks_per_batch", 2, ci=False)),
]


def docs_table(data: Mapping[str, Any]) -> str:
    """The table ``report`` writes to ``table.md`` (every rate and scheme), from a committed ``results.json`` (for
    :mod:`torchgcc.app.docs`)."""
    return markdown_rows(data["records"], COLUMNS)


def docs_p99_table(data: Mapping[str, Any]) -> str:
    """Every scheme's p99 latency at every rate (the lowest of each rate in bold) and its agreement with the base
    model over the rates: the whole comparison in one small table (for the README)."""
    rates = data["config"]["rates"]
    cell = {(r["scheme"], r["rate_qps"]): r for r in data["records"]}
    best = {rate: min(cell[scheme, rate]["p99_s"] for scheme in data["config"]["schemes"]) for rate in rates}
    lines = [
        "| scheme | " + " | ".join(f"p99 (s) at {rate:g} q/s" for rate in rates) + " | agreement |",
        "|---|" + "---:|" * (len(rates) + 1),
    ]
    for scheme in data["config"]["schemes"]:
        p99 = [cell[scheme, rate]["p99_s"] for rate in rates]
        cells = [f"**{value:.3f}**" if value == best[rate] else f"{value:.3f}" for value, rate in zip(p99, rates)]
        agreement = [cell[scheme, rate]["agreement"] for rate in rates]
        spread = (
            f"{min(agreement):.3f}"
            if min(agreement) == max(agreement)
            else f"{min(agreement):.3f}-{max(agreement):.3f}"
        )
        lines.append(f"| {scheme} | " + " | ".join(cells) + f" | {spread} |")
    return "\n".join(lines)


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table, ``results.json`` / ``results.csv`` / ``table.md``, ``latency_vs_load.png`` and ``frontier.png``."""
    config = result.config
    kind = "real worker processes" if config["engine"] == "processes" else f"engine {config['engine']}"
    if config["engine"] == "virtual":
        kind = "VIRTUAL CLOCK (simulated latencies)"
    title = (
        f"Coded serving, {config['model']} on {config['data']} (base accuracy {config['base_accuracy']:.3f}), "
        f"N={config['num_workers']}, K={config['num_inputs']}, batches of {config['batch_size']}, {kind}; "
        f"{config['latency']} delays {dict(config['latency_params'])}; {config['trials']} trials of "
        f"{config['queries']} queries per rate; mean ± 95% CI over trials"
    )
    paths = publish_rows(
        out, config=config, records=result.records, columns=COLUMNS, title=title, console=console, **result.extra
    )
    return [
        *paths.values(),
        plot_latency_vs_load(result.records, out / "latency_vs_load.png", title=title),
        plot_frontier(result.records, out / "frontier.png"),
    ]


def _style(name: str) -> dict[str, Any]:
    family, _, option = name.partition(":")
    colours = {
        "uncoded": "k",
        "replication": "tab:red",
        "hedged": "tab:purple",
        "gcc": "tab:blue",
        "natural": "tab:green",
        "bacc": "tab:orange",
    }
    return {"color": colours.get(family, "grey"), "linestyle": "--" if option.endswith(("=4", "=8", "=16")) else "-"}


def plot_latency_vs_load(records: list[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """Median, p99 and p99.9 latency against the arrival rate, one line per scheme (log scale)."""
    fig, axes = plt.subplots(1, len(QUANTILES), figsize=(5 * len(QUANTILES), 4.2), squeeze=False)
    for ax, (key, q) in zip(axes[0], QUANTILES.items()):
        for name in dict.fromkeys(r["scheme"] for r in records):
            rows = sorted((r for r in records if r["scheme"] == name), key=lambda r: r["rate_qps"])
            ax.errorbar(
                [r["rate_qps"] for r in rows],
                [r[key] for r in rows],
                yerr=[0 if r[f"{key}_ci"] is None or math.isnan(r[f"{key}_ci"]) else r[f"{key}_ci"] for r in rows],
                marker="o",
                label=name,
                **_style(name),
            )
        ax.set_yscale("log")
        ax.set_xlabel("arrival rate (queries/s)")
        ax.set_ylabel(f"{'median' if q == 0.5 else f'p{100 * q:g}'} end-to-end latency (s)")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(title, fontsize=7)
    return save_figure(fig, path)


def plot_frontier(records: list[dict[str, Any]], path: Path) -> Path:
    """Per rate: agreement with the base model against p99 latency, one marker per scheme."""
    rates = list(dict.fromkeys(r["rate_qps"] for r in records))
    fig, axes = plt.subplots(1, len(rates), figsize=(4.2 * len(rates), 4), squeeze=False)
    for ax, rate in zip(axes[0], rates):
        for r in (r for r in records if r["rate_qps"] == rate):
            ax.scatter(r["p99_s"], r["agreement"], marker="o", color=_style(r["scheme"])["color"])
            ax.annotate(
                r["scheme"], (r["p99_s"], r["agreement"]), fontsize=6, xytext=(3, 3), textcoords="offset points"
            )
        ax.set_xscale("log")
        ax.set_title(f"{rate:g} queries/s", fontsize=9)
        ax.set_xlabel("p99 latency (s)")
        ax.set_ylabel("agreement with the base model")
        ax.grid(alpha=0.3)
    return save_figure(fig, path)
