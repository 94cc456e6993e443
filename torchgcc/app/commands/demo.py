"""``torchgcc demo``: the main job, offline, in seconds to a few minutes on a laptop CPU.

A LeNet5-style network trained on scikit-learn's bundled handwritten digits (trained once, then loaded from the
user cache) runs coded inference with GCC, natural-spline GCC and BACC at ``(K, N) = (8, 32)`` while S random
workers of every group straggle. It prints MSE and argmax agreement (RelAcc) with 95% CIs per scheme and S, and writes
``results.json``, ``results.csv``, ``table.md`` and ``stragglers.png`` to ``--out``. It is
``torchgcc reproduce stragglers`` with its defaults (:mod:`torchgcc.app.experiments.straggler_study`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Sequence

from torchgcc.app.commands.reproduce import run_and_report
from torchgcc.app.experiments import straggler_study
from torchgcc.app.options import add_gcc_arguments, add_run_arguments, apply_threads, gcc_options, output_dir
from torchgcc.optional import check_extra

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction, argv: Sequence[str] = ()) -> None:
    """Add the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="coded inference of a digits classifier with GCC vs BACC as workers straggle (offline, seconds)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add_run_arguments(parser, name="demo")
    add_gcc_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo with the parsed command-line ``args``."""
    out = output_dir(args)  # checked before any work, as is the extra
    check_extra("experiments")
    apply_threads(args)
    config = straggler_study.QUICK if args.quick else straggler_study.DEFAULT
    return run_and_report(straggler_study, replace(config, seed=args.seed, gcc=gcc_options(args)), args, out)
