"""``torchgcc reproduce EXPERIMENT``: the papers' and the seeds' experiments, one subcommand each.

Every experiment writes ``results.json``, ``results.csv``, ``table.md`` and its plots to ``--out`` (default: a fresh
``./torchgcc-results/<experiment>/<date>-<time>``) and prints its table; ``--quick`` runs small sizes. The
experiments are listed in :data:`torchgcc.app.experiments.EXPERIMENTS`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any, Optional, Sequence

from torchgcc.app.experiments import EXPERIMENTS, load_experiment
from torchgcc.app.options import add_run_arguments, apply_threads, output_dir
from torchgcc.optional import check_extra

__all__ = ["register", "run", "run_and_report"]


def register(subparsers: argparse._SubParsersAction, argv: Sequence[str] = ()) -> None:
    """Add ``reproduce`` and its experiments; only the experiment named in ``argv`` is imported (for its options)."""
    parser = subparsers.add_parser(
        "reproduce",
        help="reproduce the papers' and the seeds' experiments",
        description=__doc__.split("\n\n")[0],
    )
    experiments = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    chosen = next((arg for arg in argv if arg in EXPERIMENTS), None)
    for name, (_, summary) in EXPERIMENTS.items():
        sub = experiments.add_parser(name, help=summary, description=summary, allow_abbrev=False)
        if name == chosen:
            load_experiment(name).add_arguments(sub)
            add_run_arguments(sub, name=name)
        sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Configure, run and report the experiment ``args.experiment``."""
    out = output_dir(args)  # checked before any work, as is the extra
    check_extra("experiments")
    apply_threads(args)
    experiment = load_experiment(args.experiment)
    return run_and_report(experiment, experiment.configure(args), args, out)


def run_and_report(experiment: ModuleType, config: Any, args: argparse.Namespace, out: Optional[Path] = None) -> int:
    """Run ``experiment`` with ``config``, report it into ``out`` (default: :func:`~torchgcc.app.options.output_dir`,
    checked here, before the run) and print what was written."""
    from torchgcc.app.results import writing
    from torchgcc.app.tables import make_console

    out = output_dir(args) if out is None else out
    result = experiment.run(config, progress=args.progress)
    console = make_console()
    with writing(out):  # an interrupt while writing leaves the marker INCOMPLETE in out
        paths = experiment.report(result, out, console=console)
    console.print(f"wrote {out}/ ({', '.join(path.name for path in paths)})", soft_wrap=True)
    return 0
