"""Command-line options shared by the ``torchgcc`` subcommands (``demo``, ``reproduce``, ``profile``) and the recipes.

Outputs go to a fresh folder ``./torchgcc-results/<name>/<date>-<time>`` unless ``--out`` names one, so no run
overwrites another or a tracked file; the folder is checked before any work starts (:func:`check_output_dir`), so
a run never finishes only to fail writing. CPU threads default to :func:`default_threads`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Union

from torchgcc.app.cli import UsageError

__all__ = [
    "RESULTS_ROOT",
    "DefaultsHelpFormatter",
    "add_gcc_arguments",
    "add_run_arguments",
    "apply_threads",
    "check_output_dir",
    "default_threads",
    "fresh_output_dir",
    "gcc_options",
    "int_list",
    "output_dir",
    "parse_lambda",
]

#: Root of every default output folder (gitignored).
RESULTS_ROOT = Path("torchgcc-results")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each option's default appended, except where it says nothing: flags (``--quick``,
    ``--no-progress``), ``None`` defaults, and help texts that already state their default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.nargs == 0 or action.default is None or "default" in text:
            return text
        return super()._get_help_string(action)


def default_threads() -> int:
    """Half the CPUs this process may use, at least 1 and at most 4: the models of the experiments are small, and
    more threads than that only contend on a shared machine."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus // 2))


def fresh_output_dir(name: str) -> Path:
    """``./torchgcc-results/<name>/<date>-<time>`` (with a ``-2``, ``-3``... suffix if it exists), not created."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, index = RESULTS_ROOT / name / stamp, 1
    while candidate.exists():
        index += 1
        candidate = RESULTS_ROOT / name / f"{stamp}-{index}"
    return candidate


def output_dir(args: argparse.Namespace) -> Path:
    """``--out`` if given, else a :func:`fresh_output_dir` for the subcommand (``args.out_name``); checked by
    :func:`check_output_dir` (call it before the work: it raises :class:`UsageError`), not created."""
    path = Path(args.out) if args.out is not None else fresh_output_dir(args.out_name)
    check_output_dir(path)
    return path


def check_output_dir(path: Path, option: str = "--out") -> None:
    """Raise :class:`UsageError` (one line naming ``option``) unless ``path`` can be the output folder: a folder or
    nothing yet, below a folder where one can be created (probed with an empty folder, removed at once)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is an existing file; name a folder (it is created if missing)")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: {parent} is a file, not a folder")
    try:  # a real probe: permissions alone miss read-only mounts and pseudo file systems
        os.rmdir(tempfile.mkdtemp(prefix=".torchgcc-probe-", dir=parent))
    except OSError as error:
        raise UsageError(f"{option} {path}: cannot create a folder in {parent} ({error.strerror})") from None


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


def int_list(text: str) -> tuple[int, ...]:
    """``"0,4,8"`` -> ``(0, 4, 8)`` (argparse ``type=``)."""
    try:
        return tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _non_negative(text: str) -> float:
    value = parse_lambda(text)
    if isinstance(value, str):
        raise argparse.ArgumentTypeError(f"--lambda-enc takes a number >= 0 ({value!r} is for the decoder only)")
    return value


def add_run_arguments(parser: argparse.ArgumentParser, *, name: str) -> None:
    """``--quick``, ``--seed``, ``--out`` (default: :func:`fresh_output_dir` of ``name``, see :func:`output_dir`),
    ``--threads`` and ``--no-progress``: the options every experiment and the demo take."""
    parser.add_argument("--quick", action="store_true", help="small sizes, a few minutes at most on 2 CPU cores")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of every random draw: data split, weights, inputs, stragglers"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help=f"output folder (default: ./torchgcc-results/{name}/<date>-<time>)"
    )
    parser.set_defaults(out_name=name)
    parser.add_argument(
        "--threads",
        type=int,
        default=default_threads(),
        help="torch CPU threads (default: half the CPUs, at most 4; %(default)s here)",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")


def add_gcc_arguments(parser: argparse.ArgumentParser) -> None:
    """``--lambda-dec`` and ``--lambda-enc``, the GCC smoothing (library defaults unless given), for the commands
    whose GCC rows they change."""
    parser.add_argument(
        "--lambda-dec",
        type=parse_lambda,
        default=None,
        metavar="adaptive|gcv|spacing|FLOAT",
        help="GCC decoder smoothing: a number >= 0 or a named rule ('adaptive', 'gcv', 'spacing'); "
        "default: the library default",
    )
    parser.add_argument(
        "--lambda-enc",
        type=_non_negative,
        default=None,
        metavar="FLOAT",
        help="GCC encoder smoothing, a number >= 0; default: the library default",
    )


def apply_threads(args: argparse.Namespace) -> None:
    """Set torch's intra-op CPU threads to ``--threads``."""
    import torch

    if args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    torch.set_num_threads(args.threads)


def gcc_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``lambda_enc`` / ``lambda_dec`` keyword arguments given on the command line (empty: library defaults)."""
    given = {"lambda_enc": args.lambda_enc, "lambda_dec": args.lambda_dec}
    return {key: value for key, value in given.items() if value is not None}
