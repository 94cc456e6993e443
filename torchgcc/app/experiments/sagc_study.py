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
from typing import Any, Mapping

import numpy as np
import torch
from tqdm.auto import tqdm

import torchgcc
from torchgcc.app.plots import plt, save_figure
from torchgcc.app.results import ExperimentResult
from torchgcc.app.statistics import seed_mean_ci
from torchgcc.app.tables import markdown_rows, publish_rows, value_ci
from torchgcc.control.group_size import GroupSizeHook, group_size_controller
from torchgcc.rl.loop import GRPOConfig, train_grpo

__all__ = ["DEFAULT", "QUICK", "Config", "add_arguments", "configure", "docs_table", "report", "run", "time_to_target"]


@dataclass(frozen=True)
class Config:
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
DEFAULT = Config()
#: ``--quick``: 100 steps, 2 seeds, a lower reward target.
QUICK = replace(DEFAULT, seeds=(0, 1), grpo=replace(DEFAULT.grpo, steps=100), reward_target=0.8)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond the run options (``--seed`` shifts every seed of the run)."""


def configure(args: argparse.Namespace) -> Config:
    base = QUICK if args.quick else DEFAULT
    return replace(base, seeds=tuple(args.seed + seed for seed in base.seeds))


def time_to_target(steps: list[dict[str, Any]], target: float, window: int) -> float:
    """Clock (seconds) at the first step whose trailing ``window``-step mean reward is >= ``target`` (NaN: never)."""
    rewards = np.array([step["reward"] for step in steps])
    trailing = np.convolve(rewards, np.ones(window) / window, mode="valid")  # trailing[i] ends at step i + window - 1
    reached = np.nonzero(trailing >= target)[0]
    return steps[int(reached[0]) + window - 1]["clock"] if len(reached) else math.nan


def _controller(config: Config, sizes: tuple[int, ...], seed: int):
    """A static scheme is a controller with one size; SAGC starts from (and falls back to) ``config.fallback``."""
    fallback = config.fallback if len(sizes) > 1 else sizes[0]
    return group_size_controller(
        sizes,
        prompts_per_step=config.grpo.prompts_per_step,
        budget=config.budget,
        kappa=config.kappa,
        eta=config.eta,
        hold=config.hold,
        max_step=config.max_step,
        warmup=config.warmup,
        fallback=fallback,
        seed=seed,
    )


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Train every scheme on every seed: one summary record per scheme, the per-step histories in ``extra``."""
    schemes = {f"static G={size}": (size,) for size in config.static_sizes}
    schemes["sagc"] = config.candidate_sizes
    histories: dict[str, list[list[dict[str, Any]]]] = {}
    records = []
    for scheme, sizes in schemes.items():
        runs = []
        for seed in config.seeds:
            hook = GroupSizeHook(_controller(config, sizes, seed))
            steps = config.grpo.steps
            with tqdm(total=steps, desc=f"{scheme} seed {seed}", disable=not progress, leave=False) as bar:
                runs.append(train_grpo(replace(config.grpo, seed=seed), hook, on_step=lambda record: bar.update()))
        histories[scheme] = runs
        records.append(_summary(scheme, runs, config))
    written = {
        **asdict(config),
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
        "clock": "simulated rollout delays + measured generation and update times (on a shared CPU)",
    }
    return ExperimentResult(records, written, {"histories": histories})


def _summary(scheme: str, runs: list[list[dict[str, Any]]], config: Config) -> dict[str, Any]:
    per_seed = {
        "event_rate": [float(np.mean([step["event"] for step in run])) for run in runs],
        "time_to_target": [time_to_target(run, config.reward_target, config.window) for run in runs],
        "final_reward": [float(np.mean([step["reward"] for step in run[-config.window :]])) for run in runs],
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
    window: int,
    reward_target: float,
    budget: float,
    title: str,
) -> Path:
    """Three panels: trailing mean reward vs wall-clock (seed 0 of every scheme), event rate per scheme with CIs,
    and the distribution of SAGC's chosen G."""
    fig, (curve, events, sizes) = plt.subplots(1, 3, figsize=(15, 4))
    for index, (scheme, runs) in enumerate(histories.items()):
        for seed_index, run in enumerate(runs):
            rewards = np.array([step["reward"] for step in run])
            trailing = np.convolve(rewards, np.ones(window) / window, mode="valid")
            clock = [step["clock"] for step in run][window - 1 :]
            curve.plot(
                clock,
                trailing,
                color=f"C{index}",
                alpha=0.9 if seed_index == 0 else 0.35,
                lw=1.2,
                label=scheme if seed_index == 0 else None,
            )
    curve.axhline(reward_target, ls="--", color="grey", lw=1, label="reward target")
    curve.set(xlabel="wall-clock (s, simulated delays included)", ylabel=f"reward, trailing {window}-step mean")
    curve.legend(fontsize=7)
    names = [record["scheme"] for record in records]
    rates = [record["event_rate"] for record in records]
    errors = [0 if math.isnan(record["event_rate_ci"]) else record["event_rate_ci"] for record in records]
    events.bar(names, rates, yerr=errors, color=[f"C{i}" for i in range(len(names))], capsize=3)
    events.axhline(budget, ls="--", color="k", lw=1, label=f"budget {budget}")
    events.set(ylabel="straggler-event rate", title="events per step")
    events.legend(fontsize=7)
    distribution = records[-1]["G_distribution"]
    sizes.bar([str(g) for g in distribution], list(distribution.values()), color=f"C{len(names) - 1}")
    sizes.set(xlabel="group size G", ylabel="fraction of steps", title="SAGC's chosen G (all seeds)")
    fig.suptitle(title)
    return save_figure(fig, path)


def _columns(*, reward_target: float, window: int) -> list:
    return [
        ("scheme", lambda record: record["scheme"]),
        ("event rate", value_ci("event_rate", 3)),
        (f"wall-clock to reward {reward_target:g} (s)", value_ci("time_to_target", 0)),
        ("seeds reaching it", lambda record: str(record["seeds_reaching_target"])),
        (f"final reward (last {window} steps)", value_ci("final_reward", 3)),
        ("total wall-clock (s)", value_ci("total_clock", 0)),
        ("mean G", value_ci("mean_G", 1)),
        ("answer tokens", value_ci("answer_tokens", 2)),
    ]


def docs_table(data: Mapping[str, Any]) -> str:
    """The table ``report`` writes to ``table.md``, from a committed ``results.json`` (for :mod:`torchgcc.app.docs`)."""
    config = data["config"]
    return markdown_rows(data["records"], _columns(reward_target=config["reward_target"], window=config["window"]))


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table and SAGC's chosen G; results, table and ``sagc.png`` in ``out``."""
    config = result.config
    title = (
        f"Synchronous GRPO, countdown task, {config['grpo']['prompts_per_step']} prompts/step, "
        f"{config['grpo']['steps']} steps, {len(config['seeds'])} seeds; straggler = rollout > "
        f"{config['kappa']:g} x step median; SAGC budget {config['budget']}"
    )
    columns = _columns(reward_target=config["reward_target"], window=config["window"])
    paths = publish_rows(
        out, config=config, records=result.records, columns=columns, title=title, console=console, **result.extra
    )
    plot = plot_sagc(
        result.extra["histories"],
        result.records,
        out / "sagc.png",
        window=config["window"],
        reward_target=config["reward_target"],
        budget=config["budget"],
        title=title,
    )
    console.print(f"SAGC's chosen G: {result.records[-1]['G_distribution']}")
    return [*paths.values(), plot]
