"""``torchgcc reproduce adaptive-wait``: coded inference with an adaptive wait count against every fixed S.

A LeNet5 trained on digits (cached) runs GCC coded inference with ``K = 8`` inputs per group on ``N = 24`` workers.
Every step processes ``groups_per_step`` groups of the test set; every worker gets one simulated latency per step
from :class:`torchgcc.stragglers.LatencyStragglers`, whose latency model changes at mid-run (the tail gets
heavier). A scheme with S stragglers waits for the ``N - S`` fastest results: the step latency is the
``(N - S)``-th smallest worker latency and the decoder sees exactly those results. Every scheme sees the same
latencies and groups at every step (paired comparison).

Fixed schemes use one S for the whole run. The ``adaptive`` scheme asks a
:class:`~torchgcc.control.wait_count.WaitCountController` for S before each step: the utility is the RelAcc of
each S measured beforehand on a calibration split (training images, random straggler masks), a straggler event is
a step slower than ``deadline``, and the long-run event rate is held at ``budget``. After a step the controller
sees the latencies the executor would see when it keeps recording late arrivals until the deadline (later ones as
``inf``).

Per scheme: p50 and p99 step latency, the fraction of steps over the deadline, RelAcc (argmax agreement with the
uncoded model, 95% CI over steps) and accuracy against the labels, for the whole run and for each half. The
reference is the most accurate fixed S whose p99 meets the deadline; ``results.json`` says whether the adaptive
row has a p99 no worse than it and an accuracy no worse than it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from tqdm.auto import tqdm

import torchgcc
from torchgcc.app.data import load_dataset
from torchgcc.app.evaluate import evaluate_coded, model_outputs
from torchgcc.app.model_cache import load_or_train
from torchgcc.app.options import add_gcc_arguments, gcc_options
from torchgcc.app.plots import plt, save_figure
from torchgcc.app.results import ExperimentResult
from torchgcc.app.tables import Column, markdown_rows, publish_rows, value_ci
from torchgcc.app.wait_count_verdict import compare_with_fixed
from torchgcc.coded_module import group_samples
from torchgcc.control.wait_count import WaitCountController
from torchgcc.metrics import mean_ci
from torchgcc.stragglers import FixedStragglers, LatencyStragglers

__all__ = ["COLUMNS", "DEFAULT", "QUICK", "Config", "add_arguments", "configure", "docs_table", "report", "run"]


@dataclass(frozen=True)
class Config:
    """Settings. ``latency_before`` / ``latency_after``: ``(name, params)`` of the latency model of each half."""

    model: str = "lenet5"
    data: str = "digits"
    num_inputs: int = 8
    num_workers: int = 24
    stragglers: tuple[int, ...] = tuple(range(17))
    steps: int = 3000
    groups_per_step: int = 4
    latency_before: tuple[str, Mapping[str, float]] = ("shifted_exponential", {"shift": 1.0, "scale": 0.2})
    latency_after: tuple[str, Mapping[str, float]] = ("shifted_exponential", {"shift": 1.0, "scale": 0.4})
    deadline: float = 1.6
    budget: float = 0.005
    eta: float = 2.0
    discount: float = 0.9
    warmup: int = 20
    max_step: int = 1
    calibration_samples: int = 400
    calibration_repeats: int = 4
    seed: int = 0
    gcc: Mapping[str, Any] = field(default_factory=dict)


#: The full study: 3000 steps (the tail changes at step 1500).
DEFAULT = Config()
#: ``--quick``: 400 steps, a smaller calibration.
QUICK = replace(DEFAULT, steps=400, calibration_samples=200, calibration_repeats=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_gcc_arguments(parser)


def configure(args: argparse.Namespace) -> Config:
    return replace(QUICK if args.quick else DEFAULT, seed=args.seed, gcc=gcc_options(args))


def calibrate_agreement(model, code, inputs: torch.Tensor, config: Config) -> dict[int, float]:
    """RelAcc of ``code`` at every candidate S on ``inputs`` under random masks (the controller's utility)."""
    groups = math.ceil(len(inputs) / config.num_inputs)
    profile = {}
    for s in config.stragglers:
        masks = FixedStragglers(s, seed=10_000 + s).sample(groups * config.calibration_repeats, config.num_workers)
        stats = evaluate_coded(model, code, inputs, masks.view(config.calibration_repeats, groups, -1))
        profile[s] = stats["agreement"]
    return profile


class _Tally:
    """Per-step latencies, RelAcc and accuracy of one scheme."""

    def __init__(self) -> None:
        self.latency: list[float] = []
        self.agreement: list[float] = []
        self.accuracy: list[float] = []
        self.stragglers: list[int] = []

    def summary(self, deadline: float, rows: slice) -> dict[str, float]:
        latency = np.array(self.latency[rows])
        agreement, agreement_ci = mean_ci(torch.tensor(self.agreement[rows]))
        return {
            "p50": float(np.quantile(latency, 0.5)),
            "p99": float(np.quantile(latency, 0.99)),
            "miss_rate": float(np.mean(latency > deadline)),
            "agreement": agreement,
            "agreement_ci": agreement_ci,
            "accuracy": float(np.mean(self.accuracy[rows])),
            "mean_S": float(np.mean(self.stragglers[rows])),
        }


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Run the study: the fixed S rows, then the adaptive row; the verdict in ``extra``."""
    n, k = config.num_workers, config.num_inputs
    split = load_dataset(config.data, seed=config.seed)
    trained = load_or_train(config.model, split, seed=config.seed, progress=progress)
    model = trained.model
    code = torchgcc.make_code("gcc", num_inputs=k, num_workers=n, **dict(config.gcc))
    profile = calibrate_agreement(model, code, split.train_x[: config.calibration_samples], config)

    inputs, labels = split.test_x, split.test_y
    reference = model_outputs(model, inputs).argmax(-1)
    coded = code.encoder(group_samples(inputs, k))  # (B, N, *in)
    results = model_outputs(model, coded.flatten(0, 1)).unflatten(0, coded.shape[:2])  # (B, N, classes)
    num_groups = results.shape[0]
    padded = num_groups * k
    reference = torch.cat([reference, reference[-1:].expand(padded - len(reference))]).view(num_groups, k)
    labels = torch.cat([labels, labels[-1:].expand(padded - len(labels))]).view(num_groups, k)

    phases = [
        LatencyStragglers(name, seed=config.seed + index, **params)
        for index, (name, params) in enumerate((config.latency_before, config.latency_after))
    ]
    waiters = {s: LatencyStragglers(phases[0].latency, num_stragglers=s) for s in config.stragglers}
    policy = WaitCountController(
        n,
        deadline=config.deadline,
        budget=config.budget,
        candidates=config.stragglers,
        accuracy=profile,
        eta=config.eta,
        discount=config.discount,
        warmup=config.warmup,
        max_step=config.max_step,
        seed=config.seed,
    )
    tallies = {s: _Tally() for s in config.stragglers}
    tallies["adaptive"] = _Tally()
    half = config.steps // 2
    for step in tqdm(range(config.steps), desc="adaptive wait", disable=not progress, leave=False):
        latencies = phases[step >= half].sample_delays(1, n)[0]  # (N,) seconds
        groups = (torch.arange(config.groups_per_step) + step * config.groups_per_step) % num_groups
        chosen = policy.choose()
        for scheme, tally in tallies.items():
            s = chosen if scheme == "adaptive" else scheme
            mask, step_latency = waiters[s].mask_from_delays(latencies.unsqueeze(0))
            decoded = code.decoder(results[groups], mask.expand(len(groups), n)).argmax(-1)  # (G, K)
            tally.latency.append(float(step_latency))
            tally.agreement.append(float((decoded == reference[groups]).float().mean()))
            tally.accuracy.append(float((decoded == labels[groups]).float().mean()))
            tally.stragglers.append(s)
        seen = torch.where(latencies <= config.deadline, latencies, torch.full_like(latencies, math.inf))
        policy.observe(seen, num_stragglers=chosen, watched_until=config.deadline)

    records = []
    for scheme, tally in tallies.items():
        record = {
            "scheme": "adaptive" if scheme == "adaptive" else f"fixed S={scheme}",
            "N": n,
            "K": k,
            "S": None if scheme == "adaptive" else scheme,
            "profile_agreement": profile.get(scheme),
            **tally.summary(config.deadline, slice(None)),
        }
        for name, rows in (("before", slice(0, half)), ("after", slice(half, None))):
            record.update(
                {
                    f"{key}_{name}": value
                    for key, value in tally.summary(config.deadline, rows).items()
                    if key in ("p99", "miss_rate", "agreement", "mean_S")
                }
            )
        records.append(record)
    verdict = compare_with_fixed(records[:-1], records[-1], config.deadline)
    verdict["adaptive_S_by_step"] = tallies["adaptive"].stragglers
    verdict["detected_changes"] = policy.controller.changes
    written = {
        **asdict(config),
        "gcc_lambda_enc": code.lambda_enc,
        "gcc_lambda_dec": code.lambda_dec,
        "test_samples": len(split.test_y),
        "test_accuracy": trained.test_accuracy,
        "calibration_agreement": profile,
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return ExperimentResult(records, written, {"verdict": verdict})


def plot_adaptive_wait(
    records: list[dict[str, Any]], adaptive_s: list[int], path: Path, *, deadline: float, title: str
) -> Path:
    """p99 latency and RelAcc of every fixed S with the adaptive scheme drawn as a line, and the adaptive S by step."""
    fixed, adaptive = records[:-1], records[-1]
    s = [r["S"] for r in fixed]
    fig, (latency, accuracy, trace) = plt.subplots(1, 3, figsize=(15, 4))
    latency.plot(s, [r["p99"] for r in fixed], "o-", ms=3, label="fixed S, p99")
    latency.axhline(adaptive["p99"], color="C3", label=f"adaptive, p99 (mean S {adaptive['mean_S']:.1f})")
    latency.axhline(deadline, color="k", ls="--", lw=1, label="deadline")
    latency.set(xlabel="stragglers S (wait for N - S)", ylabel="p99 step latency (s)")
    accuracy.errorbar(
        s,
        [r["agreement"] for r in fixed],
        yerr=[r["agreement_ci"] for r in fixed],
        fmt="o-",
        ms=3,
        capsize=2,
        label="fixed S",
    )
    accuracy.axhline(adaptive["agreement"], color="C3", label="adaptive")
    accuracy.set(xlabel="stragglers S", ylabel="RelAcc (argmax agreement)")
    trace.plot(adaptive_s, lw=0.6, color="C3")
    trace.axvline(len(adaptive_s) // 2, color="grey", ls="--", lw=1, label="tail gets heavier")
    trace.set(xlabel="step", ylabel="adaptive S")
    for ax in (latency, accuracy, trace):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return save_figure(fig, path)


def _number(key: str, digits: int):
    return lambda record: "-" if record.get(key) is None else f"{record[key]:.{digits}f}"


#: The columns of ``table.md`` (and of the docs' table): one row per fixed S, then the adaptive row.
COLUMNS: list[Column] = [
    ("scheme", lambda record: record["scheme"]),
    ("mean S", _number("mean_S", 1)),
    ("p50 (s)", _number("p50", 3)),
    ("p99 (s)", _number("p99", 3)),
    ("p99 2nd half (s)", _number("p99_after", 3)),
    ("over deadline", _number("miss_rate", 4)),
    ("RelAcc", value_ci("agreement", 4)),
    ("RelAcc 1st / 2nd half", lambda r: f"{r['agreement_before']:.4f} / {r['agreement_after']:.4f}"),
    ("accuracy vs labels", _number("accuracy", 4)),
]


def docs_table(data: Mapping[str, Any]) -> str:
    """The table ``report`` writes to ``table.md``, from a committed ``results.json`` (for :mod:`torchgcc.app.docs`)."""
    return markdown_rows(data["records"], COLUMNS)


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table and the verdict; results, table and ``adaptive_wait.png`` in ``out``."""
    config, verdict = result.config, result.extra["verdict"]
    before, after = config["latency_before"], config["latency_after"]
    title = (
        f"Adaptive wait count: GCC, {config['model']} on {config['data']}, N={config['num_workers']}, "
        f"K={config['num_inputs']}, {config['steps']} steps, deadline {config['deadline']:g} s, budget "
        f"{config['budget']}\nlatency {before[0]}{dict(before[1])} -> {after[0]}{dict(after[1])} at mid-run"
    )
    paths = publish_rows(
        out, config=config, records=result.records, columns=COLUMNS, title=title, console=console, **result.extra
    )
    plot = plot_adaptive_wait(
        result.records,
        verdict["adaptive_S_by_step"],
        out / "adaptive_wait.png",
        deadline=config["deadline"],
        title=title,
    )
    shown = {key: value for key, value in verdict.items() if key != "adaptive_S_by_step"}
    console.print(f"verdict: {shown}")
    return [*paths.values(), plot]
