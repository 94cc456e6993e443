"""The ``torchgcc`` command line.

Each subcommand lives in its own module, which exposes ``register(subparsers)``: it adds its parser and sets
``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit code or None). The modules
are imported lazily so that ``torchgcc --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

#: Modules that contribute subcommands, in the order they are listed in ``--help``.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "torchgcc.experiments.demo",
    "torchgcc.experiments.reproduce",
    "torchgcc.distributed.bench_latency",
    "torchgcc.profiling",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchgcc",
        description="General Coded Computing for PyTorch: straggler-resilient coded inference and training.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code = args.func(args)
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
