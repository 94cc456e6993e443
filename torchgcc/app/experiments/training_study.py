"""``torchgcc reproduce training``: DGD, IS-SGD, GC, IS-GC and pipelined GC trained under simulated stragglers.

The setting of the PGC paper's simulation (Su & Li, arXiv 2607.20739, §6.2, as described by the authors' artifact):
n = 12 workers, s in {1, 2, 3}, an exponential delay of mean m in {1 s, 2 s} added to every worker at every step,
plain SGD. Every scheme starts from the same initial weights and sees the same mini-batch per (partition, step)
and the same delay per (worker, step); 3 seeds. The models are real (LeNet5 on scikit-learn's digits and a small
MLP by default; ResNet-18 on CIFAR-10 when the data are present), the clock is virtual
(:mod:`torchgcc.gradient_coding.simulator`).

Each (model, seed, scheme, s) is trained once. Its trajectory does not depend on m or on the per-partition compute
time t_c: every worker of a step carries the same load, so the arrived set is the order of the delays, which
``Exponential(m)`` draws as ``m`` times the same unit draws. The time axes are then computed for every m and for two
values of t_c (checked: the arrived sets are recomputed on each clock and must equal the trained ones):

- ``measured``: t_c of the trained model on one partition's mini-batch, measured here once;
- ``resnet18``: t_c of the paper's model, ResNet-18 on one partition of 32x32 images (batch 256 / n), measured here
  once; the regime of the paper, where computing s + 1 partitions costs GC real time.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from torchgcc.app.data import DataSplit, load_dataset
from torchgcc.app.models import build_model
from torchgcc.control.wait_count import WaitCountController
from torchgcc.gradient_coding import (
    DelaySchedule,
    PartitionedData,
    Simulation,
    make_training_scheme,
    measure_compute_time,
    train_with_adaptive_wait,
)
from torchgcc.gradient_coding.clock import timeline
from torchgcc.stragglers import Exponential

__all__ = ["TrainingRun", "TrainingStudy", "run_training_study"]


@dataclass(frozen=True)
class TrainingStudy:
    """Settings of the study (defaults: the full run)."""

    models: tuple[str, ...] = ("lenet5", "mlp")
    data: str = "digits"
    data_dir: Optional[str] = None
    download: bool = False
    schemes: tuple[str, ...] = ("dgd", "is-sgd", "is-sgd:adaptive", "gc-fr", "gc-cr", "is-gc", "pgc-fr", "pgc-cr")
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


QUICK_STUDY = TrainingStudy(models=("mlp",), seeds=(0,), steps=120)

#: Plain-SGD learning rates per model (tuned on DGD so that digits trains in a few hundred steps; 0.01 is the PGC
#: artifact's for ResNet-18).
DEFAULT_LR = {"lenet5": 0.2, "mlp": 0.3, "resnet18": 0.01}


def learning_rate(study: TrainingStudy, model: str) -> float:
    """The study's ``lr``, else the model's :data:`DEFAULT_LR` (0.01 for others)."""
    return study.lr if study.lr is not None else DEFAULT_LR.get(model, 0.01)


@dataclass
class TrainingRun:
    """One trained trajectory: its scheme, settings, per-step clock facts and the evaluated losses."""

    model: str
    scheme: str
    s: int
    seed: int
    loads: list[int]
    arrived: list[list[int]]
    staleness: list[list[int]]
    eval_steps: list[int]  # number of steps done at each evaluation
    train_loss: list[float]
    test_accuracy: float
    times: dict[str, list[float]] = field(default_factory=dict)  # clock label -> cumulative time after each step
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


def _runs_for(study: TrainingStudy) -> list[tuple[str, int]]:
    """(scheme, s) pairs; DGD does not depend on s and runs once (s = 0)."""
    pairs = []
    for scheme in study.schemes:
        pairs += [(scheme, 0)] if scheme == "dgd" else [(scheme, s) for s in study.stragglers]
    return pairs


def run_training_study(study: TrainingStudy, *, progress: bool = True) -> tuple[list[TrainingRun], dict]:
    """Train every (model, seed, scheme, s) of ``study``; returns the runs and the config (with measured t_c)."""
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
    total = len(study.models) * len(study.seeds) * len(pairs)
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
            for scheme, s in pairs:
                bar.set_postfix(model=model_name, seed=seed, scheme=scheme, s=s)
                base, _, adaptive = scheme.partition(":")
                code = make_training_scheme(base, num_workers=n, num_stragglers=s, seed=seed)
                model = copy.deepcopy(initial)
                unit_delays = DelaySchedule(Exponential(1.0), n, seed=seed)
                simulation = Simulation(
                    code,
                    model,
                    data,
                    lr=learning_rate(study, model_name),
                    delays=unit_delays,
                    compute_time=0.0 if adaptive else compute_times[model_name]["measured"],
                )
                chosen = policy = None
                if adaptive:  # the deadline is on the unit delays, so the choices are the same on every clock
                    policy = WaitCountController(
                        n,
                        deadline=study.wait_deadline,
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
                        deadline=study.wait_deadline,
                        evaluate=evaluate,
                        eval_every=study.eval_every,
                    )
                else:
                    records = simulation.run(study.steps, evaluate=evaluate, eval_every=study.eval_every)
                evaluated = [r for r in records if r.metrics]
                run = TrainingRun(
                    model=model_name,
                    scheme=scheme,
                    s=s,
                    seed=seed,
                    loads=[r.load for r in records],
                    arrived=[r.arrived for r in records],
                    staleness=[r.staleness for r in records],
                    eval_steps=[r.step + 1 for r in evaluated],
                    train_loss=[r.metrics["train_loss"] for r in evaluated],
                    test_accuracy=_test_accuracy(model, split),
                    wait_stragglers=chosen,
                    wait_policy=None if policy is None else policy.state_dict(),
                )
                for mean in study.mean_delays:
                    for clock, t_c in compute_times[model_name].items():
                        arrived, step_times = timeline(
                            code, DelaySchedule(Exponential(mean), n, seed=seed), t_c, study.steps, stragglers=chosen
                        )
                        if arrived != run.arrived:
                            raise RuntimeError(f"{scheme} s={s}: the arrived sets changed with m={mean}, t_c={t_c}")
                        run.times[f"m={mean:g},{clock}"] = torch.tensor(step_times).cumsum(0).tolist()
                runs.append(run)
                bar.update()
    bar.close()
    config = {
        **asdict(study),
        "experiment": "training",
        "compute_times": compute_times,
        "learning_rates": {name: learning_rate(study, name) for name in study.models},
        "data_shape": list(split.train_x.shape[1:]),
        "train_samples": len(split.train_y),
        "test_samples": len(split.test_y),
    }
    return runs, config


def with_overrides(study: TrainingStudy, **overrides) -> TrainingStudy:
    """``study`` with the given non-None fields replaced."""
    return replace(study, **{k: v for k, v in overrides.items() if v is not None})
