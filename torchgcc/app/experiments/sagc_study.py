"""``torchgcc reproduce sagc``: synchronous GRPO with static group sizes against SAGC-style adaptive group sizing.

Every scheme trains the same tiny policy (same initialisation and prompt stream per seed) with the GRPO loop of
:mod:`torchgcc.rl.loop` on the countdown task. Static schemes use one group size G for every step; ``sagc`` lets
:func:`~torchgcc.control.group_size.group_size_controller` choose G per step from ``candidate_sizes`` under a
budget on the rate of straggler events (a rollout slower than ``kappa`` times the step's median rollout). The
event rule is the same for every scheme. Per scheme and over seeds (mean ± Student-t 95% CI): the straggler-event
rate, the wall-clock to the reward target (the first step whose trailing ``window``-step mean reward reaches
``reward_target``), the final reward (mean over the last ``window`` steps), the mean answer length and the
distribution of the chosen G. The SAGC controller is our design in the spirit of SAGC (arXiv 2606.02218), whose
equations are not public.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

import torchgcc  # noqa: E402
from torchgcc.app.options import apply_threads, output_dir  # noqa: E402
from torchgcc.app.plots import _save as save_figure  # noqa: E402
from torchgcc.app.row_tables import publish_rows, seed_mean_ci, value_ci  # noqa: E402
from torchgcc.control.group_size import GroupSizeHook, group_size_controller  # noqa: E402
from torchgcc.rl.loop import GRPOConfig, train_grpo  # noqa: E402

__all__ = ["QUICK", "SAGC", "SAGCExperiment", "run", "run_sagc", "time_to_target"]


@dataclass(frozen=True)
class SAGCExperiment:
    """Settings of the comparison; ``grpo`` holds the GRPO run settings except the seed and the group size.

    ``fallback`` is SAGC's static group size during warm-up (and its fallback): the G a user would otherwise pick.
    """

    static_sizes: tuple[int, ...] = (4, 8, 16)
    candidate_sizes: tuple[int, ...] = (4, 6, 8, 12, 16)
    seeds: tuple[int, ...] = (0, 1, 2)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    budget: float = 0.3
    kappa: float = 40.0
    eta: float = 1.0
    hold: int = 5
    max_step: int = 1
    warmup: int = 10
    fallback: int = 8
    reward_target: float = 0.9
    window: int = 20


#: The full run: 240 steps of 16 prompts, 3 seeds.
SAGC = SAGCExperiment()
#: ``--quick``: 100 steps, 2 seeds, a lower reward target.
QUICK = replace(SAGC, seeds=(0, 1), grpo=replace(SAGC.grpo, steps=100), reward_target=0.8)


def time_to_target(steps: list[dict[str, Any]], target: float, window: int) -> float:
    """Clock (seconds) at the first step whose trailing ``window``-step mean reward is >= ``target`` (NaN: never)."""
    rewards = np.array([step["reward"] for step in steps])
    trailing = np.convolve(rewards, np.ones(window) / window, mode="valid")  # trailing[i] ends at step i + window - 1
    reached = np.nonzero(trailing >= target)[0]
    return steps[int(reached[0]) + window - 1]["clock"] if len(reached) else math.nan


def _controller(experiment: SAGCExperiment, sizes: tuple[int, ...], seed: int):
    """A static scheme is a controller with one size; SAGC starts from (and falls back to) ``experiment.fallback``."""
    fallback = experiment.fallback if len(sizes) > 1 else sizes[0]
    return group_size_controller(
        sizes,
        prompts_per_step=experiment.grpo.prompts_per_step,
        budget=experiment.budget,
        kappa=experiment.kappa,
        eta=experiment.eta,
        hold=experiment.hold,
        max_step=experiment.max_step,
        warmup=experiment.warmup,
        fallback=fallback,
        seed=seed,
    )


def run_sagc(experiment: SAGCExperiment, *, progress: bool = True) -> tuple[list[dict], dict, dict]:
    """Train every scheme on every seed. Returns the summary records, the config and the per-step histories."""
    schemes = {f"static G={size}": (size,) for size in experiment.static_sizes}
    schemes["sagc"] = experiment.candidate_sizes
    histories: dict[str, list[list[dict[str, Any]]]] = {}
    records = []
    for scheme, sizes in schemes.items():
        runs = []
        for seed in experiment.seeds:
            hook = GroupSizeHook(_controller(experiment, sizes, seed))
            steps = experiment.grpo.steps
            with tqdm(total=steps, desc=f"{scheme} seed {seed}", disable=not progress, leave=False) as bar:
                runs.append(train_grpo(replace(experiment.grpo, seed=seed), hook, on_step=lambda record: bar.update()))
        histories[scheme] = runs
        records.append(_summary(scheme, runs, experiment))
    config = {
        **asdict(experiment),
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
        "clock": "simulated rollout delays + measured generation and update times (on a shared CPU)",
    }
    return records, config, histories


def _summary(scheme: str, runs: list[list[dict[str, Any]]], experiment: SAGCExperiment) -> dict[str, Any]:
    per_seed = {
        "event_rate": [float(np.mean([step["event"] for step in run])) for run in runs],
        "time_to_target": [time_to_target(run, experiment.reward_target, experiment.window) for run in runs],
        "final_reward": [float(np.mean([step["reward"] for step in run[-experiment.window :]])) for run in runs],
        "total_clock": [run[-1]["clock"] for run in runs],
        "answer_tokens": [float(np.mean([step["answer_tokens"] for step in run])) for run in runs],
        "mean_G": [float(np.mean([step["G"] for step in run])) for run in runs],
    }
    record: dict[str, Any] = {"scheme": scheme}
    for key, values in per_seed.items():
        record[key], record[f"{key}_ci"] = seed_mean_ci(values)
        record[f"{key}_per_seed"] = values
    record["seeds_reaching_target"] = sum(not math.isnan(value) for value in per_seed["time_to_target"])
    sizes = [step["G"] for run in runs for step in run]
    record["G_distribution"] = {int(g): sizes.count(g) / len(sizes) for g in sorted(set(sizes))}
    measured = sum(step["update_seconds"] + step["generate_seconds"] for run in runs for step in run)
    record["measured_share_of_clock"] = measured / sum(run[-1]["clock"] for run in runs)
    return record


def plot_sagc(
    histories: dict[str, list[list[dict[str, Any]]]],
    records: list[dict[str, Any]],
    path: Path,
    *,
    experiment: SAGCExperiment,
    title: str,
) -> Path:
    """Three panels: trailing mean reward vs wall-clock (seed 0 of every scheme), event rate per scheme with CIs,
    and the distribution of SAGC's chosen G."""
    fig, (curve, events, sizes) = plt.subplots(1, 3, figsize=(15, 4))
    for index, (scheme, runs) in enumerate(histories.items()):
        for seed_index, run in enumerate(runs):
            rewards = np.array([step["reward"] for step in run])
            trailing = np.convolve(rewards, np.ones(experiment.window) / experiment.window, mode="valid")
            clock = [step["clock"] for step in run][experiment.window - 1 :]
            curve.plot(
                clock,
                trailing,
                color=f"C{index}",
                alpha=0.9 if seed_index == 0 else 0.35,
                lw=1.2,
                label=scheme if seed_index == 0 else None,
            )
    curve.axhline(experiment.reward_target, ls="--", color="grey", lw=1, label="reward target")
    curve.set(
        xlabel="wall-clock (s, simulated delays included)", ylabel=f"reward, trailing {experiment.window}-step mean"
    )
    curve.legend(fontsize=7)
    names = [record["scheme"] for record in records]
    rates = [record["event_rate"] for record in records]
    errors = [0 if math.isnan(record["event_rate_ci"]) else record["event_rate_ci"] for record in records]
    events.bar(names, rates, yerr=errors, color=[f"C{i}" for i in range(len(names))], capsize=3)
    events.axhline(experiment.budget, ls="--", color="k", lw=1, label=f"budget {experiment.budget}")
    events.set(ylabel="straggler-event rate", title="events per step")
    events.legend(fontsize=7)
    distribution = records[-1]["G_distribution"]
    sizes.bar([str(g) for g in distribution], list(distribution.values()), color=f"C{len(names) - 1}")
    sizes.set(xlabel="group size G", ylabel="fraction of steps", title="SAGC's chosen G (all seeds)")
    fig.suptitle(title)
    return save_figure(fig, path)


def _columns(experiment: SAGCExperiment) -> list:
    return [
        ("scheme", lambda record: record["scheme"]),
        ("event rate", value_ci("event_rate", 3)),
        (f"wall-clock to reward {experiment.reward_target:g} (s)", value_ci("time_to_target", 0)),
        ("seeds reaching it", lambda record: str(record["seeds_reaching_target"])),
        (f"final reward (last {experiment.window} steps)", value_ci("final_reward", 3)),
        ("total wall-clock (s)", value_ci("total_clock", 0)),
        ("mean G", value_ci("mean_G", 1)),
        ("answer tokens", value_ci("answer_tokens", 2)),
    ]


def run(args: argparse.Namespace) -> int:
    """``torchgcc reproduce sagc``."""
    apply_threads(args)
    console = Console()
    base = QUICK if args.quick else SAGC
    experiment = replace(base, seeds=tuple(args.seed + seed for seed in base.seeds))
    records, config, histories = run_sagc(experiment, progress=args.progress)
    out = output_dir(args)
    title = (
        f"Synchronous GRPO, countdown task, {experiment.grpo.prompts_per_step} prompts/step, "
        f"{experiment.grpo.steps} steps, {len(experiment.seeds)} seeds; straggler = rollout > "
        f"{experiment.kappa:g} x step median; SAGC budget {experiment.budget}"
    )
    paths = publish_rows(
        out,
        config=config,
        records=records,
        columns=_columns(experiment),
        title=title,
        console=console,
        histories=histories,
    )
    plot_sagc(histories, records, out / "sagc.png", experiment=experiment, title=title)
    console.print(f"SAGC's chosen G: {records[-1]['G_distribution']}")
    console.print(f"wrote {paths['json']}, results.csv, table.md, sagc.png")
    return 0
