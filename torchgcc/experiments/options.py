"""Command-line options shared by the ``demo`` and ``reproduce`` subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Union

import torch

__all__ = ["add_common_arguments", "apply_threads", "gcc_options", "parse_lambda"]


def parse_lambda(text: str) -> Union[float, str]:
    """A named rule (``"adaptive"``, ``"gcv"``, ``"spacing"``) or a non-negative float (argparse ``type=``)."""
    if text in ("adaptive", "gcv", "spacing"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected adaptive, gcv, spacing or a number >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"lambda must be >= 0, got {text!r}")
    return value


def _non_negative(text: str) -> float:
    value = parse_lambda(text)
    if isinstance(value, str):
        raise argparse.ArgumentTypeError(f"--lambda-enc takes a number >= 0 ({value!r} is for the decoder only)")
    return value


def add_common_arguments(parser: argparse.ArgumentParser, *, name: str) -> None:
    """``--quick``, ``--seed``, ``--out`` (default ``./torchgcc-results/<name>``), ``--threads``, ``--no-progress``
    and the GCC smoothing parameters ``--lambda-enc`` / ``--lambda-dec`` (library defaults unless given)."""
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, finishes in under 2 minutes on 2 CPU cores")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the data split, training and stragglers (default 0)")
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results") / name,
                        help=f"output folder for results.json, results.csv, table.md and plots "
                             f"(default ./torchgcc-results/{name})")
    parser.add_argument("--lambda-dec", type=parse_lambda, default=None, metavar="adaptive|gcv|spacing|FLOAT",
                        help="GCC decoder smoothing: a number >= 0, 'adaptive' (GCV above a light floor), 'gcv' "
                             "(generalized cross-validation per group) or 'spacing'; "
                             "default: the library default")
    parser.add_argument("--lambda-enc", type=_non_negative, default=None, metavar="FLOAT",
                        help="GCC encoder smoothing, a number >= 0; default: the library default")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: the default models are tiny and one thread is fastest on a "
                             "shared CPU; raise it for MNIST/CIFAR or the ViT)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")


def apply_threads(args: argparse.Namespace) -> None:
    """Set torch's intra-op CPU threads to ``--threads``."""
    if args.threads < 1:
        raise SystemExit(f"--threads must be at least 1, got {args.threads}")
    torch.set_num_threads(args.threads)


def gcc_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``lambda_enc`` / ``lambda_dec`` keyword arguments given on the command line (empty: library defaults)."""
    given = {"lambda_enc": args.lambda_enc, "lambda_dec": args.lambda_dec}
    return {key: value for key, value in given.items() if value is not None}
