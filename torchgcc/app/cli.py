"""The ``torchgcc`` command line.

Each subcommand lives in its own module, which exposes ``register(subparsers, argv)``: it adds its parser and sets
``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit code or None). Only the module
of the subcommand being run is imported (the others are listed from :data:`SUBCOMMANDS`), so ``torchgcc --help``
imports neither torch nor any optional dependency.

User errors end in one line on stderr and exit status 2, not a traceback: a subcommand raises :class:`UsageError`,
and a missing optional dependency names the extra that installs it. Ctrl-C (SIGINT) ends a command with the line
``torchgcc: interrupted`` and exit status 130; an output folder it had begun to write keeps the marker file
``INCOMPLETE`` (:func:`torchgcc.app.results.writing`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn, Sequence

from torchgcc import __version__

__all__ = ["SUBCOMMANDS", "Parser", "UsageError", "build_parser", "main"]

#: ``name -> (module that registers it, one-line help)``, in the order ``--help`` lists them.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "torchgcc.app.commands.demo",
        "coded inference of a digits classifier with GCC vs BACC as workers straggle (offline, seconds)",
    ),
    "reproduce": ("torchgcc.app.commands.reproduce", "reproduce the papers' and the seeds' experiments"),
    "bench-latency": (
        "torchgcc.app.commands.bench_latency",
        "tail latency of uncoded vs coded execution on local processes with injected latency",
    ),
    "serve-bench": (
        "torchgcc.app.commands.serve_bench",
        "coded serving under open-loop load: latency vs rate of uncoded, replication, hedging and codes",
    ),
    "profile": ("torchgcc.app.commands.profile", "time encode, decode and the model forward of coded inference"),
}


class UsageError(Exception):
    """A user error (bad option value, unknown name, missing data, no GPU): ``torchgcc`` prints
    ``torchgcc: error: <message>`` on one line and exits with status 2. The message should say how to fix it."""


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` that never expands abbreviated options (``--out`` must not silently mean ``--output``) and
    says a command-line mistake in one line (argparse prints its usage block above the error)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help for the options)\n")


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named by ``argv``: its first argument that is not an option."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in SUBCOMMANDS else None
    return None


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The ``torchgcc`` parser, with the full options of the subcommand ``argv`` names (the others listed only)."""
    parser = Parser(
        prog="torchgcc",
        description="General Coded Computing for PyTorch: straggler-resilient coded inference and training.",
    )
    parser.add_argument("--version", action="version", version=f"torchgcc {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    chosen = _chosen(argv)
    for name, (module, help_text) in SUBCOMMANDS.items():
        if name == chosen:
            importlib.import_module(module).register(subparsers, argv)
        else:
            subparsers.add_parser(name, help=help_text)
    return parser


def _close_progress_bars() -> None:
    """Close the tqdm bars an interrupt left open (tqdm is imported only by the commands that draw them)."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torchgcc`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from torchgcc.app.logs import configure_logging
    from torchgcc.optional import MissingExtraError, extra_for, missing_message

    argv = sys.argv[1:] if argv is None else list(argv)
    configure_logging()
    try:
        args = build_parser(argv).parse_args(argv)
        return int(args.func(args) or 0)
    except UsageError as error:
        print(f"torchgcc: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _close_progress_bars()  # else they redraw at exit, below the line
        print("\ntorchgcc: interrupted", file=sys.stderr)
        return 130
    except MissingExtraError as error:
        print(f"torchgcc: error: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        if error.name is None or extra_for(error.name) is None:
            raise
        print(f"torchgcc: error: {missing_message(error.name)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
