"""``torchgcc reproduce stragglers|polynomial|rates``: the GCC papers' experiments (Figs. 2, 3 and 4).

Every experiment writes ``results.json``, ``results.csv``, ``table.md`` and a PNG to ``--out``
(default ``./torchgcc-results/<experiment>``) and prints its table. ``--quick`` runs small sizes.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Callable

from rich.console import Console

from torchgcc.experiments.data import list_datasets
from torchgcc.experiments.demo import DEMO, QUICK, run_and_publish
from torchgcc.experiments.models import list_models
from torchgcc.experiments.options import add_common_arguments, apply_threads, gcc_options
from torchgcc.experiments.plots import plot_polynomial, plot_rates
from torchgcc.experiments.polynomial import PolynomialExperiment, run_polynomial
from torchgcc.experiments.rates import RatesExperiment, fit_slopes, run_rates
from torchgcc.experiments.report import lambda_label, publish

__all__ = ["EXPERIMENTS", "register"]

#: Fig. 2: the demo's settings, (K, N) = (8, 32), S = 0..16, 20 repeats; --quick: S in {0, 8, 16}, 4 repeats.
STRAGGLERS, STRAGGLERS_QUICK = DEMO, QUICK
#: Fig. 3: (K, N) = (8, 32), so LCC's threshold is 15 results (S <= 17); S = 0..30.
POLYNOMIAL = PolynomialExperiment(num_inputs=8, num_workers=32, repeats=10)
POLYNOMIAL_QUICK = PolynomialExperiment(num_inputs=4, num_workers=16, samples=128, repeats=3)
#: Fig. 4: K = 8, N from 32 to 512, S = 4 worst case, p in {0.05, 0.1, 0.2}.
RATES = RatesExperiment()
RATES_QUICK = replace(RATES, workers=(16, 32, 64, 128), probabilities=(0.1,), samples=64, repeats=3)


def _stragglers(args: argparse.Namespace) -> int:
    apply_threads(args)
    sweep = replace(STRAGGLERS_QUICK if args.quick else STRAGGLERS, model=args.model, data=args.data,
                    data_dir=args.data_dir, download=args.download, seed=args.seed, gcc=gcc_options(args))
    if args.stragglers is not None:
        if max(args.stragglers) >= sweep.num_workers - 1 or min(args.stragglers) < 0:
            raise SystemExit(f"--stragglers must lie in [0, {sweep.num_workers - 2}] (GCC needs 2 results)")
        sweep = replace(sweep, stragglers=args.stragglers)
    return run_and_publish(sweep, out=Path(args.out), progress=args.progress, heading="Fig. 2 analogue")


def _polynomial(args: argparse.Namespace) -> int:
    apply_threads(args)
    console = Console()
    experiment = replace(POLYNOMIAL_QUICK if args.quick else POLYNOMIAL, seed=args.seed, gcc=gcc_options(args))
    records, config = run_polynomial(experiment, progress=args.progress)
    title = (f"Fig. 3 analogue: quadratic f, K={experiment.num_inputs}, N={experiment.num_workers}, "
             f"LCC threshold {config['lcc_threshold']} results (S <= {config['threshold_stragglers']})\n"
             f"{lambda_label(config)}")
    out = Path(args.out)
    publish(out, config=config, records=records, setting="S", title=title, console=console)
    plot_polynomial(records, out / "polynomial.png", threshold_stragglers=config["threshold_stragglers"], title=title)
    return 0


def _rates(args: argparse.Namespace) -> int:
    apply_threads(args)
    console = Console()
    experiment = replace(RATES_QUICK if args.quick else RATES, seed=args.seed, gcc=gcc_options(args))
    records, config = run_rates(experiment, progress=args.progress)
    slopes = fit_slopes(records)
    title = (f"Fig. 4 analogue: smooth f, K={experiment.num_inputs}, worst-case S={experiment.num_stragglers} "
             f"and Bernoulli(p) stragglers\n"
             f"GCC lambdas: {gcc_options(args) or 'library defaults (lambda_dec follows the spacing of the arrived results)'}")
    out = Path(args.out)
    publish(out, config=config, records=records, setting="N", title=title, console=console, slopes=slopes)
    plot_rates(records, out / "rates.png", num_stragglers=experiment.num_stragglers, slopes=slopes, title=title)
    console.print("fitted log-log slopes of MSE vs N: " + ", ".join(f"{k} {v:.2f}" for k, v in slopes.items()))
    return 0


def _sagc(args: argparse.Namespace) -> int:
    from torchgcc.experiments.sagc import run

    return run(args)


def _adaptive_wait(args: argparse.Namespace) -> int:
    from torchgcc.experiments.adaptive_wait import run

    return run(args)


def _stragglers_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=list_models(), default="lenet5", help="classifier (default lenet5)")
    parser.add_argument("--data", choices=list_datasets(), default="digits",
                        help="dataset (default digits, offline; the others need --data-dir or --download)")
    parser.add_argument("--data-dir", default=None, help="torchvision dataset folder for mnist/cifar10/cifar100")
    parser.add_argument("--download", action="store_true", help="let torchvision download the dataset")
    parser.add_argument("--stragglers", type=_int_list, default=None, metavar="S1,S2,...",
                        help=f"values of S to sweep (default {','.join(map(str, STRAGGLERS.stragglers))}; "
                             f"--quick: {','.join(map(str, STRAGGLERS_QUICK.stragglers))})")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


#: ``name -> (help, extra-arguments hook or None, runner)``.
EXPERIMENTS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None] | None,
                             Callable[[argparse.Namespace], int]]] = {
    "stragglers": ("Fig. 2: MSE and RelAcc vs S for GCC, natural-spline GCC and BACC (LeNet5 or ViT)",
                   _stragglers_arguments, _stragglers),
    "polynomial": ("Fig. 3: GCC vs LCC on a quadratic task as S crosses LCC's recovery threshold", None, _polynomial),
    "rates": ("Fig. 4: log-log MSE vs N, worst-case and Bernoulli stragglers, with fitted slopes", None, _rates),
    "sagc": ("SAGC: synchronous GRPO with static G in {4, 8, 16} vs straggler-aware adaptive G, 3 seeds", None, _sagc),
    "adaptive-wait": ("coded inference, N=24, K=8: adaptive wait count N - S vs every fixed S as the latency tail "
                      "changes mid-run", None, _adaptive_wait),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``reproduce`` subcommand and its experiments."""
    parser = subparsers.add_parser("reproduce", help="reproduce the GCC papers' experiments (Figs. 2, 3, 4)",
                                   description=__doc__)
    experiments = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for name, (help_text, add_arguments, runner) in EXPERIMENTS.items():
        sub = experiments.add_parser(name, help=help_text, description=help_text)
        if add_arguments is not None:
            add_arguments(sub)
        add_common_arguments(sub, name=name)
        sub.set_defaults(func=runner)
