"""Optional dependencies: which extra provides each, and a one-line error when one is missing.

The core (codes, functional, stragglers, ``CodedModule``, points, the metric functions) needs torch, numpy and
numba only. The experiments, the command line's main job and the recipes import their dependencies through
:func:`require` (or let ``ModuleNotFoundError`` reach :func:`torchgcc.app.cli.main`, which turns it into the same
message); a command checks its whole extra first (:func:`check_extra`), so a missing module stops it before any
work.

>>> require("math").pi > 3
True
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "check_extra", "extra_for", "require"]

#: Top-level module name -> the ``pip install 'torchgcc[EXTRA]'`` extra that provides it (mpmath, which the tests use
#: too, is not here: torch's sympy always installs it).
EXTRAS: dict[str, str] = {
    "jinja2": "experiments",
    "matplotlib": "experiments",
    "rich": "experiments",
    "sklearn": "experiments",
    "timm": "experiments",
    "torchmetrics": "experiments",
    "torchvision": "experiments",
    "tqdm": "experiments",
    "ray": "ray",
    "accelerate": "trl",
    "datasets": "trl",
    "tokenizers": "trl",
    "transformers": "trl",
    "trl": "trl",
    "jsonargparse": "recipes",
    "lightning": "recipes",
    "csaps": "test",
    "hypothesis": "test",
    "pytest": "test",
    "scipy": "experiments",
}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def extra_for(module: str) -> str | None:
    """The extra that provides ``module`` (a dotted name), or None when it is not an optional dependency."""
    return EXTRAS.get(module.split(".")[0])


def missing_message(module: str, extra: str | None = None) -> str:
    """One line: what is missing and the command that installs it (``extra`` defaults to :data:`EXTRAS`'s)."""
    extra = extra or extra_for(module) or "all"
    return (
        f"{module.split('.')[0]} is not installed; it comes with the {extra!r} extra: "
        f"pip install 'torchgcc[{extra}]' (or pip install -e '.[{extra}]' in a checkout)"
    )


def require(module: str, *, extra: str | None = None) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming the extra (default: from :data:`EXTRAS`)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is None or module.split(".")[0] != error.name.split(".")[0]:
            raise  # something the module itself imports is missing: not ours to rename
        raise MissingExtraError(missing_message(module, extra)) from None


def check_extra(extra: str) -> None:
    """Raise :class:`MissingExtraError` for the first module of ``extra`` (in :data:`EXTRAS`) that cannot be found;
    imports nothing."""
    for module, provider in EXTRAS.items():
        if provider == extra and _missing(module):
            raise MissingExtraError(missing_message(module, extra))


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent package that fails to import, or a module set to None
        return True
