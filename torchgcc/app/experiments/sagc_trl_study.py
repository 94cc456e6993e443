"""``torchgcc reproduce sagc-trl``: SAGC against static group sizes inside TRL's GRPOTrainer, offline on a CPU.

Every scheme trains the same tiny causal LM (:func:`~torchgcc.integrations.trl.tiny_causal_lm`, same
initialisation per seed) on the same stream of addition prompts (exact-match reward) with
:class:`~torchgcc.integrations.trl.SAGCGRPOTrainer`, ``prompts_per_step`` prompts per step. One CPU process does
not straggle, so every completion's rollout time is its measured share of the batched generation plus an injected
heavy-tailed delay, ``tokens * token_seconds * Pareto(1, tail_index)`` (:class:`torchgcc.stragglers.Pareto`,
seeded per run). A step waits for its slowest rollout; a rollout straggles when it is slower than ``kappa`` times
the step's median rollout, and a step with a straggler is a straggler event (the same rule for every scheme).

Schemes: a static G for every step (``static G=4/8/16``); ``sagc``, G chosen per step from ``candidate_sizes``
under the event-rate ``budget``; ``sagc + dynamic sampling``, the same with DAPO's dynamic sampling (groups with
equal rewards dropped and refilled, each refill round a further barrier); ``G=16 + deadline``, the largest static
G with completions slower than ``deadline`` seconds erased instead of waited for (so no step stalls past the
deadline; the erasures are the cost, and they favour short completions: the length bias is measured).

Per scheme and over seeds (mean ± Student-t 95% CI): the straggler-event rate (per generation round), mean G,
wall-clock per step (TRL's measured ``step_time`` with the measured generation replaced by the simulated rollout
time), the rollout part of it, the reward (all generated completions) over the first and last ``window`` steps,
the mean completion length of all generated completions and, paired per step, how much shorter (negative) or
longer the completions trained on were (the length bias of erasures and dropped groups), the erased fraction and the
generation rounds per step, and the reward curve (mean reward per block of ``window`` steps, over seeds); every
step of every run in ``histories``. The SAGC controller is our design in the
spirit of SAGC (arXiv 2606.02218), whose equations are not public.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import torch
from tqdm.auto import tqdm

import torchgcc
from torchgcc.app.plots import plt, save_figure
from torchgcc.app.results import ExperimentResult
from torchgcc.app.statistics import seed_mean_ci
from torchgcc.app.tables import Column, markdown_rows, publish_rows, value_ci
from torchgcc.control.group_size import group_size_controller
from torchgcc.stragglers import Pareto

__all__ = ["DEFAULT", "QUICK", "Config", "add_arguments", "configure", "docs_table", "report", "run", "schemes"]


@dataclass(frozen=True)
class Config:
    """Settings. ``fallback`` is SAGC's G during its ``warmup`` steps (a static G that meets the budget);
    ``risk_cap`` is its chance constraint (no step at a G whose predicted event probability is above it)."""

    static_sizes: tuple[int, ...] = (4, 8, 16)
    candidate_sizes: tuple[int, ...] = (4, 6, 8, 12, 16)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 300
    prompts_per_step: int = 8
    max_completion_length: int = 4
    max_operand: int = 4
    dataset_size: int = 4096
    hidden: int = 32
    learning_rate: float = 1e-2
    token_seconds: float = 1.0
    tail_index: float = 2.0
    budget: float = 0.3
    kappa: float = 10.0
    risk_cap: Optional[float] = 0.35
    eta: float = 3.0
    warmup: int = 5
    fallback: int = 6
    deadline: float = 12.0
    deadline_size: int = 16
    max_refill_rounds: int = 4
    window: int = 20

    def __post_init__(self) -> None:
        if self.steps % self.window:
            raise ValueError(f"steps ({self.steps}) must be a multiple of window ({self.window})")


#: The full run: 300 steps of 8 prompts, 3 seeds.
DEFAULT = Config()
#: ``--quick``: 30 steps, 2 seeds, at most 2 refill rounds (about 70 s of CPU time).
QUICK = replace(DEFAULT, seeds=(0, 1), steps=30, window=10, max_refill_rounds=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond the run options (``--seed`` shifts every seed of the run)."""


def configure(args: argparse.Namespace) -> Config:
    base = QUICK if args.quick else DEFAULT
    return replace(base, seeds=tuple(args.seed + seed for seed in base.seeds))


def schemes(config: Config) -> dict[str, dict[str, Any]]:
    """Scheme name -> the candidate sizes and the trainer options it runs with."""
    table: dict[str, dict[str, Any]] = {f"static G={g}": {"sizes": (g,)} for g in config.static_sizes}
    table["sagc"] = {"sizes": config.candidate_sizes}
    table["sagc + dynamic sampling"] = {
        "sizes": config.candidate_sizes,
        "dynamic_sampling": True,
        "max_refill_rounds": config.max_refill_rounds,
    }
    table[f"G={config.deadline_size} + deadline"] = {"sizes": (config.deadline_size,), "deadline": config.deadline}
    return table


def train(config: Config, seed: int, *, sizes: tuple[int, ...], progress: Any = None, **options: Any):
    """One run: the per-step log records and the controller."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import PrinterCallback, TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig

    from torchgcc.integrations.trl import (
        SAGCGRPOTrainer,
        addition_dataset,
        char_tokenizer,
        exact_match,
        tiny_causal_lm,
    )

    hf_logging.set_verbosity_error()
    controller = group_size_controller(
        sizes,
        prompts_per_step=config.prompts_per_step,
        budget=config.budget,
        kappa=config.kappa,
        eta=config.eta,
        risk_cap=config.risk_cap,
        warmup=config.warmup,
        fallback=config.fallback if len(sizes) > 1 else sizes[0],
        seed=seed,
    )
    tokenizer = char_tokenizer()

    class Progress(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if progress is not None:
                progress.update()

    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        args = GRPOConfig(
            output_dir=folder,
            per_device_train_batch_size=config.prompts_per_step,
            num_generations=2,
            max_completion_length=config.max_completion_length,
            learning_rate=config.learning_rate,
            lr_scheduler_type="constant",
            max_steps=config.steps,
            logging_steps=1,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            seed=seed,
            disable_tqdm=True,
        )
        trainer = SAGCGRPOTrainer(
            model=tiny_causal_lm(tokenizer, hidden=config.hidden, seed=seed),
            reward_funcs=exact_match,
            args=args,
            train_dataset=addition_dataset(config.dataset_size, max_operand=config.max_operand, seed=seed),
            processing_class=tokenizer,
            controller=controller,
            rollout_delay=Pareto(config.token_seconds, config.tail_index),
            callbacks=[Progress()],
            **options,
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    steps = [entry for entry in trainer.state.log_history if "sagc/group_size" in entry]
    return steps, controller


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Train every scheme on every seed: one summary record per scheme, the per-step histories in ``extra``."""
    load_before = list(os.getloadavg())
    histories: dict[str, list[list[dict[str, Any]]]] = {}
    records = []
    for scheme, setup in schemes(config).items():
        runs, rates = [], []
        for seed in config.seeds:
            with tqdm(total=config.steps, desc=f"{scheme} seed {seed}", disable=not progress, leave=False) as bar:
                steps, controller = train(config, seed, progress=bar, **setup)
            runs.append([_step_record(entry) for entry in steps])
            rates.append(controller.event_rate)
        histories[scheme] = runs
        records.append(_summary(scheme, runs, rates, config))
    written = {
        **asdict(config),
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
        "threads": torch.get_num_threads(),
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
        "clock": "TRL's measured step time, with the measured generation replaced by the simulated rollout time",
        **_versions(),
    }
    return ExperimentResult(records, written, {"histories": histories})


def _versions() -> dict[str, str]:
    import transformers
    import trl

    return {"trl": trl.__version__, "transformers": transformers.__version__}


def _step_record(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of one logged step the study keeps (``seconds``: the step's wall-clock, simulated rollouts)."""
    record = {
        "step": int(entry["step"]),
        "G": int(entry["sagc/group_size"]),
        "reward": entry["reward"],
        "loss": entry["loss"],
        "event": entry["sagc/straggler_event"],
        "rounds": int(entry["sagc/rounds"]),
        "rollout_seconds": entry["sagc/rollout_seconds"],
        "seconds": entry["step_time"] - entry["sagc/generate_seconds"] + entry["sagc/rollout_seconds"],
        "completion_length": entry["sagc/completion_length"],
        "kept_completion_length": entry.get("sagc/kept_completion_length"),
        "erased_fraction": entry["sagc/erased_fraction"],
    }
    return record


def _summary(scheme: str, runs: list[list[dict[str, Any]]], rates: list[float], config: Config) -> dict[str, Any]:
    def mean(run: list[dict[str, Any]], key: str) -> float:
        values = [step[key] for step in run if step[key] is not None]
        return float(np.mean(values)) if values else math.nan

    per_seed = {
        "event_rate": rates,
        "mean_G": [mean(run, "G") for run in runs],
        "seconds_per_step": [mean(run, "seconds") for run in runs],
        "rollout_seconds_per_step": [mean(run, "rollout_seconds") for run in runs],
        "first_reward": [float(np.mean([step["reward"] for step in run[: config.window]])) for run in runs],
        "final_reward": [float(np.mean([step["reward"] for step in run[-config.window :]])) for run in runs],
        "completion_length": [mean(run, "completion_length") for run in runs],
        "kept_completion_length": [mean(run, "kept_completion_length") for run in runs],
        "erased_fraction": [mean(run, "erased_fraction") for run in runs],
        "rounds_per_step": [mean(run, "rounds") for run in runs],
    }
    per_seed["length_bias"] = [  # paired per step: the steps that trained on something
        float(
            np.mean([s["kept_completion_length"] - s["completion_length"] for s in run if s["kept_completion_length"]])
        )
        for run in runs
    ]
    record: dict[str, Any] = {"scheme": scheme}
    for key, values in per_seed.items():
        record[key], record[f"{key}_ci"] = seed_mean_ci(values)
        record[f"{key}_per_seed"] = values
    blocks = [np.array([step["reward"] for step in run]).reshape(-1, config.window).mean(1) for run in runs]
    record["reward_curve"] = np.mean(blocks, 0).tolist()  # mean reward per block of `window` steps, over seeds
    sizes = [step["G"] for run in runs for step in run]
    record["G_distribution"] = {int(g): sizes.count(g) / len(sizes) for g in sorted(set(sizes))}
    return record


def _columns(*, window: int) -> list[Column]:
    return [
        ("scheme", lambda record: record["scheme"]),
        ("event rate", value_ci("event_rate", 3)),
        ("mean G", value_ci("mean_G", 1)),
        ("s per step", value_ci("seconds_per_step", 2)),
        ("rollout s per step", value_ci("rollout_seconds_per_step", 2)),
        (f"reward, first {window} steps", value_ci("first_reward", 3)),
        (f"reward, last {window} steps", value_ci("final_reward", 3)),
        ("completion tokens", value_ci("completion_length", 2)),
        ("trained-on minus all tokens", value_ci("length_bias", 3)),
        ("erased", value_ci("erased_fraction", 3)),
        ("rounds per step", value_ci("rounds_per_step", 2)),
    ]


def docs_table(data: Mapping[str, Any]) -> str:
    """The table ``report`` writes to ``table.md``, from a committed ``results.json`` (for :mod:`torchgcc.app.docs`)."""
    return markdown_rows(data["records"], _columns(window=data["config"]["window"]))


def plot(
    histories: Mapping[str, list[list[dict[str, Any]]]],
    records: list[dict[str, Any]],
    path: Path,
    *,
    window: int,
    budget: float,
    title: str,
) -> Path:
    """Three panels: the trailing mean reward against wall-clock (every seed), the event rate per scheme with its
    CI and the budget, and the distribution of SAGC's chosen G."""
    fig, (curve, events, sizes) = plt.subplots(1, 3, figsize=(16, 4))
    for index, (scheme, runs) in enumerate(histories.items()):
        for seed_index, steps in enumerate(runs):
            rewards = np.array([step["reward"] for step in steps])
            trailing = np.convolve(rewards, np.ones(window) / window, mode="valid")
            clock = np.cumsum([step["seconds"] for step in steps])[window - 1 :]
            label = scheme if seed_index == 0 else None
            curve.plot(clock, trailing, color=f"C{index}", alpha=0.9 if seed_index == 0 else 0.35, lw=1.2, label=label)
    curve.set(xlabel="wall-clock (s, simulated rollouts)", ylabel=f"reward, trailing {window}-step mean")
    curve.legend(fontsize=7)
    names = [record["scheme"] for record in records]
    errors = [0 if math.isnan(record["event_rate_ci"]) else record["event_rate_ci"] for record in records]
    events.bar(
        names, [record["event_rate"] for record in records], yerr=errors, color=[f"C{i}" for i in range(len(names))]
    )
    events.axhline(budget, ls="--", color="k", lw=1, label=f"budget {budget}")
    events.set(ylabel="straggler-event rate", title="events per generation round")
    events.tick_params(axis="x", labelrotation=30, labelsize=7)
    events.legend(fontsize=7)
    distribution = next(record for record in records if record["scheme"] == "sagc")["G_distribution"]
    sizes.bar([str(g) for g in distribution], list(distribution.values()), color="C3")
    sizes.set(xlabel="group size G", ylabel="fraction of steps", title="SAGC's chosen G (all seeds)")
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table and the figure; results, table and ``sagc_trl.png`` in ``out``."""
    config = result.config
    title = (
        f"GRPO in TRL, tiny Llama on a+b, {config['prompts_per_step']} prompts/step, {config['steps']} steps, "
        f"{len(config['seeds'])} seeds; delay tokens x {config['token_seconds']:g} s x "
        f"Pareto({config['tail_index']:g}); "
        f"straggler = rollout > {config['kappa']:g} x step median; SAGC budget {config['budget']}"
    )
    columns = _columns(window=config["window"])
    paths = publish_rows(
        out, config=config, records=result.records, columns=columns, title=title, console=console, **result.extra
    )
    figure = plot(
        result.extra["histories"],
        result.records,
        out / "sagc_trl.png",
        window=config["window"],
        budget=config["budget"],
        title=title,
    )
    return [*paths.values(), figure]
