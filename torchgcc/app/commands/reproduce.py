"""``torchgcc reproduce stragglers|polynomial|rates``: the GCC papers' experiments (Figs. 2, 3 and 4).

Every experiment writes ``results.json``, ``results.csv``, ``table.md`` and a PNG to ``--out``
(default: a fresh ``./torchgcc-results/<experiment>/<date>-<time>``) and prints its table. ``--quick`` runs small
sizes.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Callable

from rich.console import Console

from torchgcc.app.cli import UsageError
from torchgcc.app.commands.demo import DEMO, QUICK, run_and_publish
from torchgcc.app.data import list_datasets
from torchgcc.app.experiments.polynomial_study import PolynomialExperiment, run_polynomial
from torchgcc.app.experiments.rates_study import RatesExperiment, fit_slopes, run_rates
from torchgcc.app.experiments.training_study_cli import add_training_arguments, run_training
from torchgcc.app.models import list_models
from torchgcc.app.options import add_common_arguments, apply_threads, gcc_options, output_dir
from torchgcc.app.plots import plot_polynomial, plot_rates
from torchgcc.app.tables import lambda_label, publish

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
    sweep = replace(
        STRAGGLERS_QUICK if args.quick else STRAGGLERS,
        model=args.model,
        data=args.data,
        data_dir=args.data_dir,
        download=args.download,
        seed=args.seed,
        gcc=gcc_options(args),
    )
    if args.stragglers is not None:
        if max(args.stragglers) >= sweep.num_workers - 1 or min(args.stragglers) < 0:
            raise UsageError(f"--stragglers must lie in [0, {sweep.num_workers - 2}] (GCC needs 2 results)")
        sweep = replace(sweep, stragglers=args.stragglers)
    if args.data != "digits" and args.data_dir is None:
        raise UsageError(f"--data {args.data} needs --data-dir DIR (add --download to let torchvision fetch it)")
    return run_and_publish(sweep, out=output_dir(args), progress=args.progress, heading="Fig. 2 analogue")


def _polynomial(args: argparse.Namespace) -> int:
    apply_threads(args)
    console = Console()
    experiment = replace(POLYNOMIAL_QUICK if args.quick else POLYNOMIAL, seed=args.seed, gcc=gcc_options(args))
    records, config = run_polynomial(experiment, progress=args.progress)
    title = (
        f"Fig. 3 analogue: quadratic f, K={experiment.num_inputs}, N={experiment.num_workers}, "
        f"LCC threshold {config['lcc_threshold']} results (S <= {config['threshold_stragglers']})\n"
        f"{lambda_label(config)}"
    )
    out = output_dir(args)
    publish(out, config=config, records=records, setting="S", title=title, console=console)
    plot_polynomial(records, out / "polynomial.png", threshold_stragglers=config["threshold_stragglers"], title=title)
    print(f"wrote {out}/ (results.json, results.csv, table.md, polynomial.png)")
    return 0


def _rates(args: argparse.Namespace) -> int:
    apply_threads(args)
    console = Console()
    experiment = replace(RATES_QUICK if args.quick else RATES, seed=args.seed, gcc=gcc_options(args))
    records, config = run_rates(experiment, progress=args.progress)
    slopes = fit_slopes(records)
    title = (
        f"Fig. 4 analogue: smooth f, K={experiment.num_inputs}, worst-case S={experiment.num_stragglers} "
        f"and Bernoulli(p) stragglers\n"
        f"GCC lambdas: {gcc_options(args) or 'library defaults (lambda_dec adaptive: GCV above a light floor)'}"
    )
    out = output_dir(args)
    publish(out, config=config, records=records, setting="N", title=title, console=console, slopes=slopes)
    plot_rates(records, out / "rates.png", num_stragglers=experiment.num_stragglers, slopes=slopes, title=title)
    console.print("fitted log-log slopes of MSE vs N: " + ", ".join(f"{k} {v:.2f}" for k, v in slopes.items()))
    print(f"wrote {out}/ (results.json, results.csv, table.md, rates.png)")
    return 0


def _sagc(args: argparse.Namespace) -> int:
    from torchgcc.app.experiments.sagc_study import run

    return run(args)


def _adaptive_wait(args: argparse.Namespace) -> int:
    from torchgcc.app.experiments.adaptive_wait_study import run

    return run(args)


def _stragglers_arguments(parser: argparse.ArgumentParser) -> None:
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
        type=_int_list,
        default=None,
        metavar="S1,S2,...",
        help=f"values of S to sweep (default {','.join(map(str, STRAGGLERS.stragglers))}; "
        f"--quick: {','.join(map(str, STRAGGLERS_QUICK.stragglers))})",
    )


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


#: ``name -> (help, extra-arguments hook or None, runner)``.
EXPERIMENTS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], None] | None, Callable[[argparse.Namespace], int]]
] = {
    "stragglers": (
        "Fig. 2: MSE and argmax agreement (RelAcc) vs S for GCC, natural-spline GCC and BACC (LeNet5 or ViT)",
        _stragglers_arguments,
        _stragglers,
    ),
    "polynomial": ("Fig. 3: GCC vs LCC on a quadratic task as S crosses LCC's recovery threshold", None, _polynomial),
    "rates": ("Fig. 4: log-log MSE vs N, worst-case and Bernoulli stragglers, with fitted slopes", None, _rates),
    "training": ("Gradient coding: DGD, IS-SGD, GC, IS-GC, PGC under stragglers", add_training_arguments, run_training),
    "adversarial": (
        "adversarial workers: worst-case error vs N for q = N^a, plain, adversarial-lambda and robust "
        "decoders beside BACC (x sin x and LeNet5)",
        None,
        lambda args: _lazy("adversarial")(args),
    ),
    "manifold": (
        "manifold-aware grouping (our reconstruction) vs standard GCC: LeNet5, ViT, Swiss-roll polynomial",
        None,
        lambda args: _lazy("manifold")(args),
    ),
    "noisy": (
        "noisy workers: MSE vs N and vs sigma for noise-aware, natural, GCV GCC and BACC; bf16 workers",
        None,
        lambda args: _lazy("noisy")(args),
    ),
    "sagc": ("SAGC: synchronous GRPO with static G in {4, 8, 16} vs straggler-aware adaptive G, 3 seeds", None, _sagc),
    "adaptive-wait": (
        "coded inference, N=24, K=8: adaptive wait count N - S vs every fixed S as the latency tail changes mid-run",
        None,
        _adaptive_wait,
    ),
}


def _lazy(module: str) -> Callable[[argparse.Namespace], int]:
    """The ``run`` of ``torchgcc.app.experiments.<module>``, imported when the experiment runs."""
    import importlib

    return importlib.import_module(f"torchgcc.app.experiments.{module}").run


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``reproduce`` subcommand and its experiments."""
    parser = subparsers.add_parser(
        "reproduce", help="reproduce the GCC papers' experiments (Figs. 2, 3, 4)", description=__doc__
    )
    experiments = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for name, (help_text, add_arguments, runner) in EXPERIMENTS.items():
        sub = experiments.add_parser(name, help=help_text, description=help_text)
        if add_arguments is not None:
            add_arguments(sub)
        add_common_arguments(sub, name=name)
        sub.set_defaults(func=runner)
