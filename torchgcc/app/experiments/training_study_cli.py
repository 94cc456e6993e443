"""Command line of ``torchgcc reproduce training`` (registered in :mod:`torchgcc.app.commands.reproduce`).

Examples::

    torchgcc reproduce training --quick                       # MLP on digits, 1 seed, 120 steps
    torchgcc reproduce training                               # LeNet5 and MLP on digits, 3 seeds, 200 steps
    torchgcc reproduce training --data cifar10 --data-dir ~/data --models resnet18 --batch-size 21 \\
        --lr 0.01 --steps 4000 --target-loss 0.5 --threads 8   # the PGC paper's model (hours on CPU)
"""

from __future__ import annotations

import argparse

from rich.console import Console

from torchgcc.app.cli import UsageError
from torchgcc.app.data import list_datasets
from torchgcc.app.experiments.training_study import QUICK_STUDY, TrainingStudy, run_training_study, with_overrides
from torchgcc.app.experiments.training_study_report import write_training_results
from torchgcc.app.options import apply_threads, output_dir
from torchgcc.gradient_coding import list_training_schemes

__all__ = ["add_training_arguments", "run_training"]


def _names(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in _names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(item) for item in _names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``reproduce training`` (defaults: the full run, or ``--quick``'s smaller one)."""
    full = TrainingStudy()
    parser.add_argument(
        "--models",
        type=_names,
        default=None,
        help=f"comma-separated models (default {','.join(full.models)}; also resnet18, vit)",
    )
    parser.add_argument("--data", choices=list_datasets(), default=None, help="dataset (default digits, offline)")
    parser.add_argument("--data-dir", default=None, help="torchvision dataset folder for mnist/cifar10/cifar100")
    parser.add_argument("--download", action="store_true", default=None, help="let torchvision download the data")
    parser.add_argument(
        "--schemes",
        type=_names,
        default=None,
        help=f"comma-separated schemes among {','.join(list_training_schemes())}, each optionally with "
        f"':adaptive' (S in 0..s chosen per step) (default {','.join(full.schemes)})",
    )
    parser.add_argument(
        "--wait-deadline",
        type=float,
        default=None,
        help=f"adaptive schemes: a step is late when its (n - S)-th delay exceeds this many mean "
        f"delays (default {full.wait_deadline:g})",
    )
    parser.add_argument(
        "--wait-budget",
        type=float,
        default=None,
        help=f"adaptive schemes: allowed share of late steps (default {full.wait_budget:g})",
    )
    parser.add_argument("--stragglers", type=_ints, default=None, help="values of s (default 1,2,3)")
    parser.add_argument("--mean-delays", type=_floats, default=None, help="mean delays m in seconds (default 1,2)")
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"number of seeds, from --seed on (default {len(full.seeds)}, --quick 1)",
    )
    parser.add_argument("--steps", type=int, default=None, help=f"steps per run (default {full.steps})")
    parser.add_argument(
        "--batch-size", type=int, default=None, help=f"samples per partition per step (default {full.batch_size})"
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="SGD learning rate (default per model: lenet5 0.2, mlp 0.3, resnet18 0.01)",
    )
    parser.add_argument(
        "--target-loss",
        type=float,
        default=None,
        help=f"training-loss target (default {full.target_loss}, --quick {QUICK_STUDY.target_loss})",
    )
    parser.add_argument(
        "--eval-every", type=int, default=None, help=f"steps between evaluations (default {full.eval_every})"
    )
    parser.add_argument(
        "--reference-models",
        type=_names,
        default=None,
        help="models whose per-partition compute time gives extra clocks (default resnet18; 'none' for none)",
    )


def run_training(args: argparse.Namespace) -> int:
    """Run the study with the command-line settings and publish its results under ``--out``."""
    apply_threads(args)
    base = QUICK_STUDY if args.quick else TrainingStudy()
    seeds = None if args.seeds is None else tuple(range(args.seed, args.seed + args.seeds))
    if seeds is None and args.seed:
        seeds = tuple(range(args.seed, args.seed + len(base.seeds)))
    references = args.reference_models
    if references is not None and references == ("none",):
        references = ()
    study = with_overrides(
        base,
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
    unknown = [name for name in study.schemes if name.removesuffix(":adaptive") not in list_training_schemes()]
    if unknown:
        raise UsageError(f"--schemes: unknown {unknown}; choose among {list_training_schemes()}")
    console = Console()
    runs, config = run_training_study(study, progress=args.progress)
    paths = write_training_results(output_dir(args), runs, config, console=console)
    for path in paths.values():
        console.print(f"wrote {path}")
    return 0
