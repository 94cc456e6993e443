"""``torchgcc serve-bench``: latency under open-loop load of uncoded, replicated, hedged and coded serving.

The experiment is :mod:`torchgcc.app.experiments.serving_study` (also ``torchgcc reproduce serving``); this
command runs it with its options and writes ``results.json``, ``results.csv``, ``table.md``,
``latency_vs_load.png`` and ``frontier.png`` into ``--out`` (default: a fresh
``./torchgcc-results/serve-bench/<date>-<time>``). Ctrl-C or SIGTERM stops every worker process (or Ray and its
actors), removes their temp folders and writes nothing.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Sequence

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction, argv: Sequence[str] = ()) -> None:
    from torchgcc.app.experiments import serving_study
    from torchgcc.app.options import add_run_arguments

    parser = subparsers.add_parser(
        "serve-bench",
        help="coded serving under open-loop load: latency vs rate of uncoded, replication, hedging and codes",
        description=serving_study.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serving_study.add_arguments(parser)
    add_run_arguments(parser, name="serve-bench")
    parser.set_defaults(func=run)


def _stop(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt(signum)


def run(args: argparse.Namespace) -> int:
    """Configure, run and report; a signal unwinds through the workers' clean-up and writes nothing."""
    from torchgcc.app.commands.reproduce import run_and_report
    from torchgcc.app.experiments import serving_study
    from torchgcc.app.options import apply_threads

    apply_threads(args)
    config = serving_study.configure(args)
    previous = {signum: signal.signal(signum, _stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return run_and_report(serving_study, config, args)
    except KeyboardInterrupt as interrupt:
        print("interrupted: every worker was stopped and its temp folders removed; nothing written", file=sys.stderr)
        return 143 if interrupt.args[:1] == (signal.SIGTERM,) else 130
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
