"""Command-line options shared by the ``torchgcc`` subcommands (``demo``, ``reproduce``, ``profile``) and the recipes.

Outputs go to a fresh folder ``./torchgcc-results/<name>/<date>-<time>`` unless ``--out`` names one, so no run
overwrites another or a tracked file; the folder is checked before any work starts (:func:`check_output_dir`), so
a run never finishes only to fail writing. CPU threads default to :func:`default_threads`.

Option values are checked as they are parsed, before any work: :func:`integer`, :func:`number`, :func:`seed`,
:func:`choice_list` and :func:`comma_list` make argparse ``type=`` functions whose errors argparse prints as
``error: argument --OPTION: ...`` with exit status 2. The ranges are the library's checks
(:mod:`torchgcc.checks`), so the command line refuses what the library would refuse later.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, TypeVar, Union

from torchgcc.app.cli import UsageError

__all__ = [
    "RESULTS_ROOT",
    "DefaultsHelpFormatter",
    "add_gcc_arguments",
    "add_run_arguments",
    "apply_threads",
    "check_output_dir",
    "choice_list",
    "comma_list",
    "default_threads",
    "fresh_output_dir",
    "gcc_options",
    "int_list",
    "integer",
    "number",
    "output_dir",
    "parse_lambda",
    "seed",
]

T = TypeVar("T")

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


def _checked(check: Callable[..., T], text: str, convert: Callable[[str], Any], **bounds: Any) -> T:
    """``check("", convert(text), **bounds)`` (a :mod:`torchgcc.checks` function) with its error as argparse's:
    ``must be ..., got 'TEXT'`` (argparse puts the option's name in front)."""
    try:
        value = convert(text)
    except (ValueError, OverflowError):
        value = text  # the check says what was expected
    try:
        return check("", value, **bounds)
    except (TypeError, ValueError) as error:
        expected = str(error).strip().rsplit(", got ", 1)[0]
        raise argparse.ArgumentTypeError(f"{expected}, got {text!r}") from None


def integer(*, minimum: Optional[int] = None, maximum: Optional[int] = None) -> Callable[[str], int]:
    """argparse ``type=``: an integer in ``[minimum, maximum]`` (either bound optional)."""
    from torchgcc.checks import check_integer

    def parse(text: str) -> int:
        return _checked(check_integer, text, int, minimum=minimum, maximum=maximum)

    return parse


def number(
    *,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
) -> Callable[[str], float]:
    """argparse ``type=``: a finite number between ``low`` and ``high`` (either optional; closed unless ``*_open``).
    ``inf``, ``nan`` and ``1e400`` are refused everywhere."""
    from torchgcc.checks import check_real

    def parse(text: str) -> float:
        return _checked(check_real, text, float, low=low, high=high, low_open=low_open, high_open=high_open)

    return parse


def seed(text: str) -> int:
    """argparse ``type=``: a seed torch takes (:func:`torchgcc.checks.check_seed`: in
    :data:`~torchgcc.checks.SEED_RANGE`)."""
    from torchgcc.checks import check_seed

    return _checked(check_seed, text, int)


def comma_list(item: Callable[[str], T]) -> Callable[[str], tuple[T, ...]]:
    """argparse ``type=``: ``"a,b,c"`` -> a tuple of ``item(a), item(b), item(c)`` (``item`` an argparse ``type=``
    function, e.g. :func:`integer`); an empty list is refused."""

    def parse(text: str) -> tuple[T, ...]:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        values = []
        for part in parts:
            try:
                values.append(item(part))
            except argparse.ArgumentTypeError as error:
                raise argparse.ArgumentTypeError(
                    f"{part!r} in {text!r}: {error}" if len(parts) > 1 else error
                ) from None
        return tuple(values)

    return parse


def choice_list(choices: Iterable[str]) -> Callable[[str], tuple[str, ...]]:
    """argparse ``type=``: comma-separated names, each one of ``choices``."""
    allowed = list(choices)

    def name(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"unknown {text!r}; choose among {', '.join(allowed)}")
        return text

    return comma_list(name)


#: ``"0,4,8"`` -> ``(0, 4, 8)`` (argparse ``type=``): comma-separated integers, at least one.
int_list = comma_list(integer())


def parse_lambda(text: str) -> Union[float, str]:
    """A named rule (``"adaptive"``, ``"gcv"``, ``"spacing"``) or a finite float >= 0 (argparse ``type=``)."""
    if text in ("adaptive", "gcv", "spacing"):
        return text
    try:
        float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected adaptive, gcv, spacing or a number >= 0, got {text!r}") from None
    return number(low=0)(text)


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
        "--seed", type=seed, default=0, help="seed of every random draw: data split, weights, inputs, stragglers"
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
