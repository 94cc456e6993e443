"""``torchgcc reproduce stragglers`` (and ``torchgcc demo``): coded inference of a trained classifier as S grows.

The Fig. 2 experiment. A classifier is trained on an image dataset (or loaded from the cache); its test set is split
into groups of K images, each group is coded into N worker inputs with GCC, natural-spline GCC and BACC, and S random
workers per group straggle. Every scheme decodes the same masks. The records give MSE against the uncoded logits and
argmax agreement with the uncoded model (RelAcc) with 95% CIs, per scheme and S.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import torch

import torchgcc
from torchgcc.app.cli import UsageError
from torchgcc.app.data import check_data_dir, list_datasets, load_dataset
from torchgcc.app.evaluate import evaluate_sweep
from torchgcc.app.model_cache import load_or_train
from torchgcc.app.models import list_models
from torchgcc.app.options import add_gcc_arguments, gcc_options, int_list
from torchgcc.app.plots import plot_straggler_sweep
from torchgcc.app.results import ExperimentResult
from torchgcc.app.tables import lambda_label, markdown_table, publish
from torchgcc.stragglers import FixedStragglers

__all__ = [
    "DEFAULT",
    "QUICK",
    "SCHEMES",
    "Config",
    "add_arguments",
    "configure",
    "docs_table",
    "report",
    "run",
    "verdict",
]

#: Schemes compared, in table order.
SCHEMES: tuple[str, ...] = ("gcc", "natural", "bacc")


@dataclass(frozen=True)
class Config:
    """Settings of one sweep over S at fixed ``(num_inputs, num_workers)`` = ``(K, N)``.

    ``gcc`` holds keyword arguments for the ``"gcc"`` code only (``lambda_enc`` / ``lambda_dec``; empty = library
    defaults). ``repeats`` masks are drawn per group and S.
    """

    model: str = "lenet5"
    data: str = "digits"
    num_inputs: int = 8
    num_workers: int = 32
    straggler_counts: tuple[int, ...] = tuple(range(0, 17, 2))
    repeats: int = 20
    placement: str = "random"
    seed: int = 0
    gcc: Mapping[str, Any] = field(default_factory=dict)
    data_dir: str | None = None
    download: bool = False


#: The published run (and ``torchgcc demo``): LeNet5 on digits, K = 8 on N = 32, S = 0..16, 20 repeats.
DEFAULT = Config()
#: ``--quick``: the same model and code on three values of S with 4 repeats.
QUICK = replace(DEFAULT, straggler_counts=(0, 8, 16), repeats=4)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=list_models(), default="lenet5", help="classifier (default lenet5)")
    parser.add_argument(
        "--data",
        choices=list_datasets(),
        default="digits",
        help="dataset (default digits, offline; the others need --data-dir or --download)",
    )
    parser.add_argument("--data-dir", default=None, help="torchvision dataset folder for mnist/cifar10/cifar100")
    parser.add_argument("--download", action="store_true", help="let torchvision download the dataset")
    parser.add_argument(
        "--stragglers",
        dest="straggler_counts",
        type=int_list,
        default=None,
        metavar="S1,S2,...",
        help=f"values of S to sweep (default {','.join(map(str, DEFAULT.straggler_counts))}; "
        f"--quick: {','.join(map(str, QUICK.straggler_counts))})",
    )
    add_gcc_arguments(parser)


def configure(args: argparse.Namespace) -> Config:
    config = replace(
        QUICK if args.quick else DEFAULT,
        model=args.model,
        data=args.data,
        data_dir=args.data_dir,
        download=args.download,
        seed=args.seed,
        gcc=gcc_options(args),
    )
    if args.straggler_counts is not None:
        if max(args.straggler_counts) >= config.num_workers - 1 or min(args.straggler_counts) < 0:
            raise UsageError(f"--stragglers must lie in [0, {config.num_workers - 2}] (GCC needs 2 results)")
        config = replace(config, straggler_counts=args.straggler_counts)
    if args.data != "digits":
        check_data_dir(args.data, args.data_dir, args.download)
    return config


def run(config: Config, *, progress: bool = True) -> ExperimentResult:
    """Train (or load) the classifier and sweep S."""
    split = load_dataset(config.data, data_dir=config.data_dir, download=config.download, seed=config.seed)
    trained = load_or_train(config.model, split, seed=config.seed, progress=progress)
    codes = {
        scheme: torchgcc.make_code(
            scheme,
            num_inputs=config.num_inputs,
            num_workers=config.num_workers,
            **(dict(config.gcc) if scheme == "gcc" else {}),
        )
        for scheme in SCHEMES
    }
    settings = [
        ({"S": s}, FixedStragglers(num_stragglers=s, placement=config.placement, seed=1000 * config.seed + s))
        for s in config.straggler_counts
    ]
    records = evaluate_sweep(
        trained.model,
        split.test_x,
        codes=codes,
        settings=settings,
        repeats=config.repeats,
        progress=progress,
        desc=f"{config.model} on {config.data}",
    )
    written = {
        **asdict(config),
        "gcc_lambda_enc": codes["gcc"].lambda_enc,
        "gcc_lambda_dec": codes["gcc"].lambda_dec,
        "test_samples": len(split.test_y),
        "test_accuracy": trained.test_accuracy,
        "model_cache": str(trained.path),
        "model_from_cache": trained.from_cache,
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return ExperimentResult(records, written, {"verdict": verdict(records)})


def verdict(records: list[dict]) -> dict[str, bool]:
    """Whether GCC's MSE is below BACC's at every S, and its argmax agreement within 0.5 points of BACC's."""
    by = {(r["scheme"], r["S"]): r for r in records}
    counts = sorted({r["S"] for r in records})
    return {
        "gcc_mse_below_bacc_at_every_S": all(by["gcc", s]["mse"] < by["bacc", s]["mse"] for s in counts),
        "gcc_agreement_within_half_a_point_of_bacc": all(
            by["gcc", s]["agreement"] >= by["bacc", s]["agreement"] - 0.005 for s in counts
        ),
    }


def report(result: ExperimentResult, out: Path, *, console: Any) -> list[Path]:
    """The table with the model's accuracy and the verdict; results, table and ``stragglers.png`` in ``out``."""
    config = result.config
    origin = "loaded from" if config["model_from_cache"] else "trained and cached in"
    console.print(
        f"{config['model']} on {config['data']}: test accuracy {100 * config['test_accuracy']:.1f}% "
        f"({origin} {config['model_cache']})"
    )
    title = (
        f"Coded inference, {config['model']} on {config['data']}, K={config['num_inputs']}, "
        f"N={config['num_workers']}, {config['placement']} stragglers, {config['repeats']} repeats\n"
        f"{lambda_label(config)}"
    )
    paths = publish(
        out, config=config, records=result.records, setting="S", title=title, console=console, **result.extra
    )
    plot = plot_straggler_sweep(result.records, out / "stragglers.png", title=title)
    found = result.extra["verdict"]
    console.print(
        f"GCC MSE below BACC at every S: [bold]{'yes' if found['gcc_mse_below_bacc_at_every_S'] else 'no'}[/]; "
        "GCC agreement >= BACC - 0.5 points at every S: "
        f"[bold]{'yes' if found['gcc_agreement_within_half_a_point_of_bacc'] else 'no'}[/]"
    )
    return [*paths.values(), plot]


def docs_table(data: Mapping[str, Any]) -> str:
    """The table ``report`` writes to ``table.md``, made from a committed ``results.json`` (for
    :mod:`torchgcc.app.docs`)."""
    return markdown_table(data["records"], setting="S")
