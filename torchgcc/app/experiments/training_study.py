"""``torchgcc reproduce training``: DGD, IS-SGD, GC, IS-GC and pipelined GC trained under simulated stragglers.

The setting of the PGC paper's simulation (Su & Li, arXiv 2607.20739, §6.2, as described by the authors' artifact):
n = 12 workers, s in {1, 2, 3}, an exponential delay of mean m in {1 s, 2 s} added to every worker at every step,
plain SGD. Every scheme starts from the same initial weights and sees the same mini-batch per (partition, step)
and the same delay per (worker, step); 3 seeds. The models are real (LeNet5 on scikit-learn's digits and a small
MLP by default; ResNet-18 on CIFAR-10 when the data are present), the clock is virtual
(:mod:`torchgcc.gradient_coding.simulator`).

The clock carries a straggler's unfinished work into the next steps (``carry_over``, the default; see
:mod:`torchgcc.gradient_coding.clock`): a worker still computing when a step closes starts the next step's task only
when done, its late result is dropped, and a pipelined worker that misses a step does not refresh that slot. Who
arrives then depends on the ratio of the per-partition compute time t_c to the mean delay m, so every
(model, seed, scheme, s) is trained once per m and per t_c:

- ``measured``: t_c of the trained model on one partition's mini-batch, measured here once;
- ``resnet18``: t_c of the paper's model, ResNet-18 on one partition of 32x32 images (batch 256 / n), measured here
  once; the regime of the paper, where computing s + 1 partitions costs GC real time.

``--no-carry-over`` runs the clock of the torchrun runtime instead (late work abandoned at the end of each step, every
worker starting every step; the simulator's clock before carry-over, which favoured pipelining: a straggler's cache
refreshed at no time cost). ``verdicts`` in results.json compares each PGC scheme's time to target with GC's, DGD's
and IS-SGD's at the same (model, s, m, clock).

One record per (model, s, scheme, m, clock), averaged over seeds (value and 95% normal CI half-width):

==================  =====================================================================================
``step_time``       mean virtual seconds per step
``steps_to_target`` steps until the evaluated full training loss first falls to ``target_loss``
``time_to_target``  virtual seconds until then (seeds that never reach it are left out; see ``reached``)
``reached``         how many seeds reached the target
``final_loss``      training loss after the last step;  ``test_accuracy``: test accuracy after it
``load``            partitions each worker computes per step after the first (warm-up) step
``staleness``       fraction of the partition gradients in the decoded sums with staleness 0, 1, ... (all steps;
                    above s only where carry-over kept a pipelined worker from refreshing a slot)
``mean_staleness``  their mean staleness;  ``max_staleness``: the largest seen
``weight_error``    the decoder's error on the partitions at every step: with ``a`` the decoding vector of the
                    arrived set and ``B`` the code, each partition enters the decoded sum with weight
                    ``w_j = (a^T B)_j`` (1 for an exact decoder); the RMS of ``w_j - 1`` over every partition and
                    step, and ``weight_error_max`` the largest ``|w_j - 1|``. PGC-CR's ``"uniform"`` decoder (the
                    authors', ``pgc-cr``) is approximate for every arrived set; ``pgc-cr-ls`` (least squares) is
                    exact; IS-SGD and IS-GC drop partitions (weight 0) and rescale the rest
``weight_gain``     the decoder's largest gain on a partition: ``max_j sum_i |a_i B_ij|`` (1 for an exact decoder
                    with nonnegative coefficients), the mean over steps, and ``weight_gain_max`` the largest. With
                    pipelining a partition's cached gradients differ between workers (other step, other weights,
                    other mini-batch); the decoded sum carries their differences times up to this gain
==================  =====================================================================================

``decoder_weights`` in results.json: for every CR-based scheme, s and seed, every straggler set of size s (the
``n - s`` others arrived) with the decoder's largest ``|a_i|`` and its ``weight_gain``: properties of the code alone,
not of the run.

DGD does not depend on s: its single run is repeated in every s's rows.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from torchgcc.app.cli import UsageError
from torchgcc.app.data import DataSplit, list_datasets, load_dataset
from torchgcc.app.models import build_model, list_models
from torchgcc.app.options import choice_list, comma_list, integer, number
from torchgcc.app.plots import plt, save_figure
from torchgcc.app.results import ExperimentResult, write_results
from torchgcc.app.tables import markdown_grid
from torchgcc.control.wait_count import WaitCountController
from torchgcc.gradient_coding import (
    DelaySchedule,
    GradientCode,
    PartitionedData,
    Simulation,
    list_gradient_codes,
    make_gradient_code,
    measure_compute_time,
    train_with_adaptive_wait,
)
from torchgcc.metrics import mean_ci
from torchgcc.optional import require
from torchgcc.stragglers import Exponential

__all__ = [
    "DEFAULT",
    "LABELS",
    "QUICK",
    "RIVALS",
    "Config",
    "TrainingRun",
    "add_arguments",
    "configure",
    "docs_table",
    "docs_time_table",
    "report",
    "run",
    "verdicts",
]


@dataclass(frozen=True)
class Config:
    """Settings of the study (defaults: the full run)."""

    models: tuple[str, ...] = ("lenet5", "mlp")
    data: str = "digits"
    data_dir: Optional[str] = None
    download: bool = False
    schemes: tuple[str, ...] = (
        "dgd",
        "is-sgd",
        "is-sgd:adaptive",
        "gc-fr",
        "gc-cr",
        "is-gc",
        "pgc-fr",
        "pgc-cr",
        "pgc-cr-ls",
    )
    num_workers: int = 12
    stragglers: tuple[int, ...] = (1, 2, 3)
    mean_delays: tuple[float, ...] = (1.0, 2.0)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 200
    batch_size: int = 16  # per partition; a step's batch is num_workers * batch_size
    lr: Optional[float] = None  # None: DEFAULT_LR of the model
    eval_every: int = 5
    target_loss: float = 0.3
    #: t_c clocks besides the measured one: model names whose per-partition time is measured on 32x32 images.
    reference_models: tuple[str, ...] = ("resnet18",)
    reference_batch: int = 21  # 256 / 12, the paper's per-partition batch
    #: ``SCHEME:adaptive`` runs: S in 0..s chosen per step; a step is a straggler event when its (n - S)-th
    #: fastest worker's delay exceeds ``wait_deadline`` mean delays; the share of such steps is held at ``wait_budget``.
    wait_deadline: float = 3.0
    wait_budget: float = 0.1
    #: Whether a straggler's unfinished work carries into the next steps (False: the runtime's abandoning clock).
    carry_over: bool = True


#: The full run: LeNet5 and the MLP on digits, 3 seeds, 200 steps.
DEFAULT = Config()
#: ``--quick``: the MLP, one seed, 120 steps.
QUICK = Config(models=("mlp",), seeds=(0,), steps=120)

#: Plain-SGD learning rates per model (tuned on DGD so that digits trains in a few hundred steps; 0.01 is the PGC
#: artifact's for ResNet-18).
DEFAULT_LR = {"lenet5": 0.2, "mlp": 0.3, "resnet18": 0.01}


def learning_rate(study: Config, model: str) -> float:
    """The study's ``lr``, else the model's :data:`DEFAULT_LR` (0.01 for others)."""
    return study.lr if study.lr is not None else DEFAULT_LR.get(model, 0.01)


@dataclass
class TrainingRun:
    """One trained trajectory: its scheme, settings, per-step clock facts and the evaluated losses."""

    model: str
    scheme: str
    s: int
    seed: int
    m: float  # mean delay, seconds
    clock: str  # the t_c label: "measured" or a reference model
    loads: list[int]
    arrived: list[list[int]]
    staleness: list[list[int]]
    eval_steps: list[int]  # number of steps done at each evaluation
    train_loss: list[float]
    test_accuracy: float
    times: list[float] = field(default_factory=list)  # cumulative virtual time after each step
    wait_stragglers: Optional[list[int]] = None  # SCHEME:adaptive runs: the S chosen at every step
    wait_policy: Optional[dict] = None  # ... and the controller's final state_dict()


def _evaluator(split: DataSplit) -> Callable[[nn.Module], dict]:
    @torch.no_grad()
    def evaluate(model: nn.Module) -> dict:
        model.eval()
        loss = sum(
            F.cross_entropy(model(split.train_x[i : i + 1024]), split.train_y[i : i + 1024], reduction="sum").item()
            for i in range(0, len(split.train_y), 1024)
        )
        model.train()
        return {"train_loss": loss / len(split.train_y)}

    return evaluate


@torch.no_grad()
def _test_accuracy(model: nn.Module, split: DataSplit) -> float:
    model.eval()
    correct = sum(
        (model(split.test_x[i : i + 1024]).argmax(-1) == split.test_y[i : i + 1024]).sum().item()
        for i in range(0, len(split.test_y), 1024)
    )
    return correct / len(split.test_y)


def reference_compute_time(name: str, *, in_channels: int, num_classes: int, batch: int, seed: int = 0) -> float:
    """Median seconds of one forward and backward pass of model ``name`` on ``batch`` random 32x32 images."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, in_channels, 32, 32, generator=generator)
    y = torch.randint(0, num_classes, (batch,), generator=generator)
    model = build_model(name, in_channels=in_channels, image_size=32, num_classes=num_classes)
    data = PartitionedData(x, y, num_partitions=1, batch_size=batch)
    return measure_compute_time(model, data, repeats=5)


def _runs_for(study: Config) -> list[tuple[str, int]]:
    """(scheme, s) pairs; DGD does not depend on s and runs once (s = 0)."""
    pairs = []
    for scheme in study.schemes:
        pairs += [(scheme, 0)] if scheme == "dgd" else [(scheme, s) for s in study.stragglers]
    return pairs


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Train every (model, seed, scheme, s): the summary records, with the seed-averaged curves and a summary of
    every run in ``extra``."""
    started = time.perf_counter()
    study = config
    split = load_dataset(study.data, data_dir=study.data_dir, download=study.download, seed=study.seeds[0])
    n = study.num_workers
    compute_times: dict[str, dict[str, float]] = {}
    reference = {
        name: reference_compute_time(
            name, in_channels=split.in_channels, num_classes=split.num_classes, batch=study.reference_batch
        )
        for name in study.reference_models
    }
    pairs = _runs_for(study)
    clocks = 1 + len(study.reference_models)
    total = len(study.models) * len(study.seeds) * len(pairs) * len(study.mean_delays) * clocks
    bar = tqdm(total=total, desc="training runs", disable=not progress)
    runs: list[TrainingRun] = []
    evaluate = _evaluator(split)
    for model_name in study.models:
        for seed in study.seeds:
            torch.manual_seed(seed)
            initial = build_model(
                model_name, in_channels=split.in_channels, image_size=split.image_size, num_classes=split.num_classes
            )
            data = PartitionedData(
                split.train_x, split.train_y, num_partitions=n, batch_size=study.batch_size, seed=seed
            )
            if model_name not in compute_times:
                compute_times[model_name] = {
                    "measured": measure_compute_time(copy.deepcopy(initial), data),
                    **reference,
                }
            for (scheme, s), mean, (clock, t_c) in itertools.product(
                pairs, study.mean_delays, compute_times[model_name].items()
            ):
                bar.set_postfix(model=model_name, seed=seed, scheme=scheme, s=s, m=mean, clock=clock)
                runs.append(
                    _train(study, model_name, initial, data, split, evaluate, scheme, s, seed, mean, clock, t_c)
                )
                bar.update()
    bar.close()
    written = {
        **asdict(study),
        "experiment": "training",
        "compute_times": compute_times,
        "learning_rates": {name: learning_rate(study, name) for name in study.models},
        "data_shape": list(split.train_x.shape[1:]),
        "train_samples": len(split.train_y),
        "test_samples": len(split.test_y),
    }
    records = summarise(runs, written)
    written["wall_s"] = time.perf_counter() - started
    written["load_average"] = list(os.getloadavg())
    written["torch_threads"] = torch.get_num_threads()
    extra = {"verdicts": verdicts(records), "curves": curves(runs), "runs": [_run_summary(r) for r in runs]}
    extra["decoder_weights"] = decoder_weights(written)
    return ExperimentResult(records, written, extra)


def _train(
    study: Config,
    model_name: str,
    initial: nn.Module,
    data: PartitionedData,
    split: DataSplit,
    evaluate: Callable[[nn.Module], dict],
    scheme: str,
    s: int,
    seed: int,
    mean: float,
    clock: str,
    t_c: float,
) -> TrainingRun:
    """One trajectory: ``scheme`` with tolerance ``s`` from ``initial``, delays ``Exponential(mean)`` of ``seed``."""
    n = study.num_workers
    base, _, adaptive = scheme.partition(":")
    code = make_gradient_code(base, num_workers=n, num_stragglers=s, seed=seed)
    model = copy.deepcopy(initial)
    simulation = Simulation(
        code,
        model,
        data,
        lr=learning_rate(study, model_name),
        delays=DelaySchedule(Exponential(mean), n, seed=seed),
        compute_time=t_c,
        carry_over=study.carry_over,
    )
    chosen = policy = None
    if adaptive:  # the deadline is in mean delays
        policy = WaitCountController(
            n,
            deadline=study.wait_deadline * mean,
            budget=study.wait_budget,
            candidates=range(s + 1),
            discount=0.9,
            warmup=10,
            max_step=1,
            seed=seed,
        )
        records, chosen = train_with_adaptive_wait(
            simulation,
            policy,
            study.steps,
            deadline=study.wait_deadline * mean,
            evaluate=evaluate,
            eval_every=study.eval_every,
        )
    else:
        records = simulation.run(study.steps, evaluate=evaluate, eval_every=study.eval_every)
    evaluated = [r for r in records if r.metrics]
    return TrainingRun(
        model=model_name,
        scheme=scheme,
        s=s,
        seed=seed,
        m=mean,
        clock=clock,
        loads=[r.load for r in records],
        arrived=[r.arrived for r in records],
        staleness=[r.staleness for r in records],
        eval_steps=[r.step + 1 for r in evaluated],
        train_loss=[r.metrics["train_loss"] for r in evaluated],
        test_accuracy=_test_accuracy(model, split),
        times=torch.tensor([r.step_time for r in records], dtype=torch.float64).cumsum(0).tolist(),
        wait_stragglers=chosen,
        wait_policy=None if policy is None else policy.state_dict(),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``reproduce training`` (defaults: the full run, or ``--quick``'s smaller one)."""
    full = DEFAULT
    parser.add_argument(
        "--models",
        type=choice_list(list_models()),
        default=None,
        help=f"comma-separated models (default {','.join(full.models)}; also resnet18, vit)",
    )
    parser.add_argument("--data", choices=list_datasets(), default=None, help="dataset (default digits, offline)")
    parser.add_argument("--data-dir", default=None, help="torchvision dataset folder for mnist/cifar10/cifar100")
    parser.add_argument("--download", action="store_true", default=None, help="let torchvision download the data")
    parser.add_argument(
        "--schemes",
        type=comma_list(str),
        default=None,
        help=f"comma-separated schemes among {','.join(list_gradient_codes())}, each optionally with "
        f"':adaptive' (S in 0..s chosen per step) (default {','.join(full.schemes)})",
    )
    parser.add_argument(
        "--wait-deadline",
        type=number(low=0, low_open=True),
        default=None,
        help=f"adaptive schemes: a step is late when its (n - S)-th delay exceeds this many mean "
        f"delays (default {full.wait_deadline:g})",
    )
    parser.add_argument(
        "--wait-budget",
        type=number(low=0, high=1, high_open=True),
        default=None,
        help=f"adaptive schemes: allowed share of late steps (default {full.wait_budget:g})",
    )
    parser.add_argument(
        "--no-carry-over",
        dest="carry_over",
        action="store_false",
        default=True,
        help="the torchrun runtime's clock: late work abandoned at the end of each step (default: carried over)",
    )
    parser.add_argument(
        "--stragglers", type=comma_list(integer(minimum=0)), default=None, help="values of s (default 1,2,3)"
    )
    parser.add_argument(
        "--mean-delays",
        type=comma_list(number(low=0, low_open=True)),
        default=None,
        help="mean delays m in seconds (default 1,2)",
    )
    parser.add_argument(
        "--seeds",
        type=integer(minimum=1),
        default=None,
        help=f"number of seeds, from --seed on (default {len(full.seeds)}, --quick 1)",
    )
    parser.add_argument("--steps", type=integer(minimum=1), default=None, help=f"steps per run (default {full.steps})")
    parser.add_argument(
        "--batch-size",
        type=integer(minimum=1),
        default=None,
        help=f"samples per partition per step (default {full.batch_size})",
    )
    parser.add_argument(
        "--lr",
        type=number(low=0, low_open=True),
        default=None,
        help="SGD learning rate (default per model: lenet5 0.2, mlp 0.3, resnet18 0.01)",
    )
    parser.add_argument(
        "--target-loss",
        type=number(low=0),
        default=None,
        help=f"training-loss target (default {full.target_loss}, --quick {QUICK.target_loss})",
    )
    parser.add_argument(
        "--eval-every",
        type=integer(minimum=1),
        default=None,
        help=f"steps between evaluations (default {full.eval_every})",
    )
    parser.add_argument(
        "--reference-models",
        type=choice_list([*list_models(), "none"]),
        default=None,
        help="models whose per-partition compute time gives extra clocks (default resnet18; 'none' for none)",
    )


def configure(args: argparse.Namespace) -> Config:
    """The study of the command-line settings (``--quick``'s or the full run's, with every given option)."""
    base = QUICK if args.quick else DEFAULT
    seeds = None if args.seeds is None else tuple(range(args.seed, args.seed + args.seeds))
    if seeds is None and args.seed:
        seeds = tuple(range(args.seed, args.seed + len(base.seeds)))
    references = args.reference_models
    if references is not None and references == ("none",):
        references = ()
    overrides = dict(
        models=args.models,
        data=args.data,
        data_dir=args.data_dir,
        download=args.download,
        schemes=args.schemes,
        stragglers=args.stragglers,
        mean_delays=args.mean_delays,
        seeds=seeds,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        target_loss=args.target_loss,
        eval_every=args.eval_every,
        reference_models=references,
        wait_deadline=args.wait_deadline,
        wait_budget=args.wait_budget,
    )
    study = replace(base, **{key: value for key, value in overrides.items() if value is not None})
    study = replace(study, carry_over=args.carry_over)
    unknown = [name for name in study.schemes if name.removesuffix(":adaptive") not in list_gradient_codes()]
    if unknown:
        raise UsageError(f"--schemes: unknown {unknown}; choose among {list_gradient_codes()}")
    for scheme, s in _runs_for(study):  # codes are cheap to build; a bad (scheme, s) would fail mid-study
        try:
            _code_of(scheme, s, seed=0, num_workers=study.num_workers)
        except ValueError as error:
            raise UsageError(f"--schemes {scheme} --stragglers {s}: {error}") from None
    return study


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """Print the tables; write ``results.json`` (config, records, curves, per-run summaries), ``results.csv``,
    ``table.md`` and one ``training-<model>.png`` per model into ``out``."""
    config = result.config
    paths = write_results(out, config=config, records=result.records, required=("scheme",), **result.extra)
    table = out / "table.md"
    table.write_text(markdown(result.records, config))
    plots = [
        plot_training(result.extra["curves"], config, out / f"training-{model}.png", model)
        for model in config["models"]
    ]
    print_tables(result.records, config, console)
    return [*paths.values(), table, *plots]


#: Display names of the schemes.
LABELS = {
    "dgd": "DGD",
    "is-sgd": "IS-SGD",
    "is-sgd:adaptive": "IS-SGD adaptive",
    "gc-fr": "GC-FR",
    "gc-cr": "GC-CR",
    "is-gc": "IS-GC",
    "pgc-fr": "PGC-FR",
    "pgc-cr": "PGC-CR (uniform, approx.)",
    "pgc-cr-ls": "PGC-CR (least squares, exact)",
}


def _steps_to_target(run: TrainingRun, target: float) -> Optional[int]:
    return next((step for step, loss in zip(run.eval_steps, run.train_loss) if loss <= target), None)


def _stat(values: Sequence[float]) -> tuple[Optional[float], Optional[float]]:
    if not values:
        return None, None
    mean, ci = mean_ci(torch.tensor(values, dtype=torch.float64))
    return mean, (None if math.isnan(ci) else ci)


def _staleness_counts(run: TrainingRun) -> list[int]:
    """The partition gradients of every decoded sum of ``run`` by staleness (steps of different lengths summed)."""
    counts = [0] * max(len(step) for step in run.staleness)
    for step in run.staleness:
        for tau, count in enumerate(step):
            counts[tau] += count
    return counts


def decoding_vectors(run: TrainingRun, num_workers: int) -> tuple[GradientCode, torch.Tensor]:
    """``run``'s code (rebuilt from the scheme, ``s`` and seed) and its decoding vectors ``a`` ``(steps, n)`` for the
    arrived workers the run recorded at every step."""
    code = _code_of(run.scheme, run.s, run.seed, num_workers)
    return code, torch.stack([code.decode(list(arrived)) for arrived in run.arrived])


def weight_errors(code: GradientCode, a: torch.Tensor) -> torch.Tensor:
    """``(steps, k)`` float64: ``(a^T B)_j - 1`` of every partition for decoding vectors ``a`` ``(steps, n)``."""
    return a @ code.B - 1


def weight_gains(code: GradientCode, a: torch.Tensor) -> torch.Tensor:
    """``(steps,)`` float64: the decoder's largest gain on a partition, ``max_j sum_i |a_i B_ij|``, for decoding
    vectors ``a`` ``(steps, n)``."""
    return (a.unsqueeze(-1) * code.B).abs().sum(-2).amax(-1)


def _code_of(scheme: str, s: int, seed: int, num_workers: int) -> GradientCode:
    return make_gradient_code(scheme.partition(":")[0], num_workers=num_workers, num_stragglers=s, seed=seed)


def decoder_weights(config: dict) -> list[dict[str, Any]]:
    """``decoder_weights`` (module docstring): every straggler set of size s of every CR-based scheme, s and seed."""
    n, out = config["num_workers"], []
    for scheme in dict.fromkeys(name.partition(":")[0] for name in config["schemes"]):
        if "cr" not in scheme.split("-"):
            continue
        for s, seed in itertools.product(config["stragglers"], config["seeds"]):
            code = _code_of(scheme, s, seed, n)
            for stragglers in itertools.combinations(range(n), s):
                a = code.decode([i for i in range(n) if i not in stragglers])
                out.append(
                    {"scheme": scheme, "s": s, "seed": seed, "stragglers": list(stragglers)}
                    | {"max_abs_a": float(a.abs().max()), "weight_gain": float(weight_gains(code, a[None])[0])}
                )
    return out


def summarise(runs: Sequence[TrainingRun], config: dict) -> list[dict[str, Any]]:
    """The records described in the module docstring."""
    records = []
    target = config["target_loss"]
    labels = list(dict.fromkeys((r.m, r.clock) for r in runs))
    for model, s, scheme, (m, clock) in itertools.product(
        config["models"], config["stragglers"], config["schemes"], labels
    ):
        group = [
            r
            for r in runs
            if (r.model, r.scheme, r.s, r.m, r.clock) == (model, scheme, 0 if scheme == "dgd" else s, m, clock)
        ]
        if not group:
            continue
        reach = [_steps_to_target(r, target) for r in group]
        counts = [0] * max(len(_staleness_counts(r)) for r in group)
        for r in group:
            for tau, count in enumerate(_staleness_counts(r)):
                counts[tau] += count
        fractions = [c / sum(counts) for c in counts]
        record = {
            "model": model,
            "s": s,
            "scheme": scheme,
            "m": m,
            "clock": clock,
            "n": config["num_workers"],
            "seeds": len(group),
        }
        record["step_time"], record["step_time_ci"] = _stat([r.times[-1] / len(r.loads) for r in group])
        steps = [k for k in reach if k is not None]
        record["steps_to_target"], record["steps_to_target_ci"] = _stat(steps)
        record["time_to_target"], record["time_to_target_ci"] = _stat(
            [r.times[k - 1] for r, k in zip(group, reach) if k is not None]
        )
        record["reached"] = len(steps)
        record["final_loss"], record["final_loss_ci"] = _stat([r.train_loss[-1] for r in group])
        record["test_accuracy"], record["test_accuracy_ci"] = _stat([r.test_accuracy for r in group])
        record["load"] = group[0].loads[min(1, len(group[0].loads) - 1)]
        record["staleness"] = fractions
        record["mean_staleness"] = sum(tau * f for tau, f in enumerate(fractions))
        record["max_staleness"] = max(tau for tau, f in enumerate(fractions) if f > 0)
        decoded = [decoding_vectors(r, config["num_workers"]) for r in group]
        errors = torch.cat([weight_errors(code, a) for code, a in decoded])
        record["weight_error"] = float(errors.pow(2).mean().sqrt())
        record["weight_error_max"] = float(errors.abs().max())
        gains = torch.cat([weight_gains(code, a) for code, a in decoded])
        record["weight_gain"], record["weight_gain_max"] = float(gains.mean()), float(gains.max())
        records.append(record)
    return records


#: The schemes each pipelined scheme is compared with in :func:`verdicts`.
RIVALS = ("gc-fr", "gc-cr", "dgd", "is-sgd")


#: Ratios of time to target within this relative distance of 1 are ties in :func:`verdicts`.
TIE = 0.01


def verdicts(records: Sequence[dict]) -> list[dict[str, Any]]:
    """Where PGC wins and loses: per (model, s, m, clock), every PGC scheme against each of :data:`RIVALS` by time
    to target: ``ratio`` = PGC's / the rival's (None when either missed the target in a seed) and ``outcome``
    ``"wins"`` (ratio below ``1 - TIE``), ``"loses"`` (above ``1 + TIE``), ``"tie"`` or ``"unreached"``, with the
    final losses beside it."""
    out = []
    by = {(r["model"], r["s"], r["m"], r["clock"], r["scheme"]): r for r in records}
    for (model, s, m, clock, scheme), pgc in by.items():
        if not scheme.startswith("pgc"):
            continue
        for rival in RIVALS:
            other = by.get((model, s, m, clock, rival))
            if other is None:
                continue
            both = pgc["reached"] == pgc["seeds"] and other["reached"] == other["seeds"]
            ratio = pgc["time_to_target"] / other["time_to_target"] if both else None
            out.append(
                {
                    "model": model,
                    "s": s,
                    "m": m,
                    "clock": clock,
                    "pgc": scheme,
                    "rival": rival,
                    "pgc_time_to_target": pgc["time_to_target"],
                    "rival_time_to_target": other["time_to_target"],
                    "ratio": ratio,
                    "outcome": _outcome(ratio),
                    "pgc_final_loss": pgc["final_loss"],
                    "rival_final_loss": other["final_loss"],
                }
            )
    return out


def _outcome(ratio: Optional[float]) -> str:
    if ratio is None:
        return "unreached"
    return "wins" if ratio < 1 - TIE else "loses" if ratio > 1 + TIE else "tie"


def curves(runs: Sequence[TrainingRun]) -> list[dict[str, Any]]:
    """Seed-averaged training-loss curves: per (model, scheme, s, m, clock) the evaluated steps, the mean loss there
    and the mean virtual time there."""
    out = []
    keys = sorted({(r.model, r.scheme, r.s, r.m, r.clock) for r in runs})
    for model, scheme, s, m, clock in keys:
        group = [r for r in runs if (r.model, r.scheme, r.s, r.m, r.clock) == (model, scheme, s, m, clock)]
        steps = group[0].eval_steps
        out.append(
            {
                "model": model,
                "scheme": scheme,
                "s": s,
                "m": m,
                "clock": clock,
                "steps": steps,
                "train_loss": torch.tensor([r.train_loss for r in group]).mean(0).tolist(),
                "time": torch.tensor([[r.times[k - 1] for k in steps] for r in group]).mean(0).tolist(),
            }
        )
    return out


def _fmt(record: dict, key: str, digits: int = 3) -> str:
    value, ci = record.get(key), record.get(f"{key}_ci")
    if value is None:
        return "-"
    return f"{value:.{digits}g}" + ("" if ci is None else f" ± {ci:.1g}")


_COLUMNS = [
    ("step_time", "s/step"),
    ("steps_to_target", "steps to target"),
    ("time_to_target", "time to target (s)"),
    ("reached", "reached"),
    ("final_loss", "final loss"),
    ("test_accuracy", "test acc"),
    ("load", "partitions/step"),
    ("mean_staleness", "mean staleness"),
    ("weight_error", "weight error (RMS)"),
]


def _rows(records: Sequence[dict], model: str, m: float, clock: str) -> list[list[str]]:
    rows = []
    for r in records:
        if (r["model"], r["m"], r["clock"]) == (model, m, clock):
            rows.append(
                [str(r["s"]), LABELS.get(r["scheme"], r["scheme"])]
                + [str(r[key]) if key in ("reached", "load") else _fmt(r, key) for key, _ in _COLUMNS]
            )
    return rows


def markdown(records: Sequence[dict], config: dict) -> str:
    """One Markdown table per (model, m, clock)."""
    parts = []
    header = ["s", "scheme"] + [name for _, name in _COLUMNS]
    for model in config["models"]:
        for label in dict.fromkeys((r["m"], r["clock"]) for r in records):
            t_c = config["compute_times"][model][label[1]]
            parts.append(
                f"### {model}, m = {label[0]:g} s, t_c = {t_c * 1e3:.3g} ms ({label[1]}), target loss "
                f"{config['target_loss']:g}, {len(config['seeds'])} seed(s)\n"
            )
            parts.append("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
            parts += ["| " + " | ".join(row) + " |" for row in _rows(records, model, *label)]
            parts.append("")
    return "\n".join(parts) + "\n"


def print_tables(records: Sequence[dict], config: dict, console: Any) -> None:
    """The m = first mean delay tables on the terminal."""
    m = config["mean_delays"][0]
    for model in config["models"]:
        for clock in config["compute_times"][model]:
            table = require("rich.table").Table(
                title=f"{model}, m = {m:g} s, t_c ({clock}) = {config['compute_times'][model][clock]:.3g} s",
                caption="value ± 95% CI half-width over seeds",
            )
            for name in ["s", "scheme"] + [name for _, name in _COLUMNS]:
                table.add_column(name, justify="right")
            for row in _rows(records, model, m, clock):
                table.add_row(*row)
            console.print(table)


def plot_training(curve_list: Sequence[dict], config: dict, path: Path, model: str) -> Path:
    """Loss against steps and against virtual time for m = the first mean delay, one column per clock (t_c), one
    row per s; the trajectories differ per clock (carry-over), so each column has its own curves."""
    m = config["mean_delays"][0]
    clocks = list(config["compute_times"][model])
    rows = config["stragglers"]
    fig, axes = plt.subplots(
        len(rows), 2 * len(clocks), figsize=(4.2 * 2 * len(clocks), 3.2 * len(rows)), squeeze=False
    )
    for row, s in enumerate(rows):
        for index, scheme in enumerate(config["schemes"]):
            style = dict(color=f"C{index}", lw=1.3, ls="--" if scheme.startswith("pgc") else "-")
            for col, clock in enumerate(clocks):
                curve = next(
                    (
                        c
                        for c in curve_list
                        if (c["model"], c["scheme"], c["s"], c["m"], c["clock"])
                        == (model, scheme, 0 if scheme == "dgd" else s, m, clock)
                    ),
                    None,
                )
                if curve is None:
                    continue
                label = LABELS.get(scheme, scheme)
                axes[row, 2 * col].plot(curve["steps"], curve["train_loss"], label=label, **style)
                axes[row, 2 * col + 1].plot(curve["time"], curve["train_loss"], label=label, **style)
        for col, ax in enumerate(axes[row]):
            clock = clocks[col // 2]
            t_c = config["compute_times"][model][clock] * 1e3
            ax.axhline(config["target_loss"], color="grey", lw=0.8, ls=":")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_ylabel(f"s = {s}: training loss")
            ax.set_xlabel(("steps" if col % 2 == 0 else "virtual seconds") + f" (m = {m:g} s, t_c {t_c:.3g} ms)")
    axes[0, 0].legend(fontsize=7)
    carry = "carried-over" if config.get("carry_over", True) else "abandoning"
    fig.suptitle(
        f"{model} on {config['data']}, n = {config['num_workers']}, {len(config['seeds'])} seed(s), {carry} clock"
    )
    return save_figure(fig, path)


def _jsonable(value):
    """``value`` with every tensor turned into a list (a controller's state_dict holds its generator state)."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return value


def _run_summary(run: TrainingRun) -> dict[str, Any]:
    """One run's seed, final loss and accuracy, first loads and staleness counts (and its adaptive choices)."""
    return {
        "model": run.model,
        "scheme": run.scheme,
        "s": run.s,
        "seed": run.seed,
        "test_accuracy": run.test_accuracy,
        "final_loss": run.train_loss[-1],
        "m": run.m,
        "clock": run.clock,
        "loads": run.loads[:3],
        "staleness_counts": _staleness_counts(run),
        **_wait_summary(run),
    }


def _wait_summary(run: TrainingRun) -> dict:
    """An adaptive run's chosen S (every step, and the mean) and its controller's final state; {} otherwise."""
    if run.wait_stragglers is None:
        return {}
    return {
        "mean_S": sum(run.wait_stragglers) / len(run.wait_stragglers),
        "S_by_step": run.wait_stragglers,
        "wait_policy": _jsonable(run.wait_policy),
    }


def docs_time_table(data: dict, *, model: str, clock: str, m: float) -> str:
    """Every scheme's time to the target loss (s) for ``model`` on ``clock`` at mean delay ``m``, one row per s, the
    fastest in bold (for :mod:`torchgcc.app.docs`)."""
    cells = {
        (r["s"], r["scheme"]): r["time_to_target"]
        for r in data["records"]
        if (r["model"], r["clock"], r["m"]) == (model, clock, m)
    }
    schemes = [scheme for scheme in data["config"]["schemes"] if any(key[1] == scheme for key in cells)]
    rows = []
    for s in sorted({key[0] for key in cells}):
        times = {scheme: cells.get((s, scheme)) for scheme in schemes}
        best = min((t for t in times.values() if t is not None), default=None)
        rows.append(
            [str(s)] + ["-" if t is None else (f"**{t:.0f}**" if t == best else f"{t:.0f}") for t in times.values()]
        )
    return markdown_grid(["s"] + [LABELS.get(scheme, scheme) for scheme in schemes], rows, left=0)


def docs_table(data: dict, *, model: str) -> str:
    """Where PGC wins and loses for ``model``, from a committed ``results.json`` (for :mod:`torchgcc.app.docs`): per
    (m, clock, s), every PGC scheme's time to target over each rival's (:data:`RIVALS`) with its outcome."""
    cells: dict[tuple, dict[tuple[str, str], str]] = {}
    for v in data["verdicts"]:
        if v["model"] == model:
            ratio = "-" if v["ratio"] is None else f"{v['ratio']:.2f}"
            cells.setdefault((v["m"], v["clock"], v["s"]), {})[v["pgc"], v["rival"]] = f"{ratio} {v['outcome']}"
    pairs = list(dict.fromkeys(pair for row in cells.values() for pair in row))
    clocks = list(data["config"]["compute_times"][model])
    header = ["m", "clock", "s"] + [f"{LABELS.get(p, p)} vs {LABELS.get(r, r)}" for p, r in pairs]
    rows = [
        [f"{m:g}", clock, str(s)] + [cells[m, clock, s].get(pair, "-") for pair in pairs]
        for m, clock, s in sorted(cells, key=lambda key: (key[0], clocks.index(key[1]), key[2]))
    ]
    return markdown_grid(header, rows, left=2)
