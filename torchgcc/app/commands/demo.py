"""``torchgcc demo``: the main job, offline in a few seconds to minutes on a laptop CPU.

A LeNet5-style network trained on scikit-learn's bundled handwritten digits (trained once, then loaded from the
user cache) runs coded inference with GCC, natural-spline GCC and BACC at ``(K, N) = (8, 32)`` while S random
workers of every group straggle. It prints MSE and argmax agreement (RelAcc) with 95% CIs per scheme and S, and writes
``results.json``, ``results.csv``, ``table.md`` and ``stragglers.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from torchgcc.app.experiments.straggler_study import StragglerSweep, run_straggler_sweep
from torchgcc.app.options import add_common_arguments, apply_threads, gcc_options, output_dir
from torchgcc.app.plots import plot_straggler_sweep
from torchgcc.app.tables import lambda_label, publish

__all__ = ["DEMO", "QUICK", "register", "run", "run_and_publish"]

#: The published demo: LeNet5 on digits, K = 8 inputs per group on N = 32 workers, S = 0..16, 20 repeats.
DEMO = StragglerSweep(
    model="lenet5", data="digits", num_inputs=8, num_workers=32, stragglers=tuple(range(0, 17, 2)), repeats=20
)
#: ``--quick``: the same model and code on three values of S with 4 repeats.
QUICK = replace(DEMO, stragglers=(0, 8, 16), repeats=4)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="coded inference of a digits classifier with GCC vs BACC as workers straggle (offline, seconds)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_arguments(parser, name="demo")
    parser.set_defaults(func=run)


def print_verdict(records: list[dict], console: Console) -> bool:
    """Print whether GCC beats BACC in MSE at every S and stays within 0.5 points of its argmax agreement; return
    that verdict."""
    by = {(r["scheme"], r["S"]): r for r in records}
    stragglers = sorted({r["S"] for r in records})
    mse_wins = all(by["gcc", s]["mse"] < by["bacc", s]["mse"] for s in stragglers)
    agreement_ok = all(by["gcc", s]["agreement"] >= by["bacc", s]["agreement"] - 0.005 for s in stragglers)
    console.print(
        f"GCC MSE below BACC at every S: [bold]{'yes' if mse_wins else 'no'}[/]; "
        f"GCC agreement >= BACC - 0.5 points at every S: [bold]{'yes' if agreement_ok else 'no'}[/]"
    )
    return mse_wins and agreement_ok


def run(args: argparse.Namespace) -> int:
    """Run the demo with the parsed command-line ``args``."""
    apply_threads(args)
    sweep = replace(QUICK if args.quick else DEMO, seed=args.seed, gcc=gcc_options(args))
    return run_and_publish(sweep, out=output_dir(args), progress=args.progress, heading="Coded inference")


def run_and_publish(sweep: StragglerSweep, *, out: Path, progress: bool, heading: str) -> int:
    """Run ``sweep``, print its table and verdict, and write results, table and ``stragglers.png`` to ``out``."""
    console = Console()
    records, config = run_straggler_sweep(sweep, progress=progress)
    origin = "loaded from" if config["model_from_cache"] else "trained and cached in"
    console.print(
        f"{sweep.model} on {sweep.data}: test accuracy {100 * config['test_accuracy']:.1f}% "
        f"({origin} {config['model_cache']})"
    )
    title = (
        f"{heading}, {sweep.model} on {sweep.data}, K={sweep.num_inputs}, N={sweep.num_workers}, "
        f"{sweep.placement} stragglers, {sweep.repeats} repeats\n{lambda_label(config)}"
    )
    publish(out, config=config, records=records, setting="S", title=title, console=console)
    plot_straggler_sweep(records, out / "stragglers.png", title=title)
    print_verdict(records, console)
    print(f"wrote {out}/ (results.json, results.csv, table.md, stragglers.png)")
    return 0
