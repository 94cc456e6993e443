"""How the application shows the library's diagnostics: one line per message on stderr, ``[torchgcc] ...``.

The library logs through ``logging.getLogger("torchgcc....")`` and adds only a ``NullHandler`` to the ``torchgcc``
logger (a program that configures logging decides what it sees); the command lines call :func:`configure_logging`.
What the library warns about with :mod:`warnings` (what the caller can change: a noisy calibration, a BatchNorm in
train mode) is shown the same way, ``[torchgcc] warning: ...``; other packages' warnings keep Python's format.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

__all__ = ["configure_logging"]


class _Stderr(logging.StreamHandler):
    """A handler on the current ``sys.stderr`` (looked up at each record, so captured and redirected streams work)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # logging.StreamHandler sets it; the current sys.stderr is used instead
        pass


#: Ray's logger that announces, at every start of a local cluster, that it enabled its default (token
#: authentication); the command lines drop that one record (Ray's other messages pass).
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _not_ray_default_auth_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


#: The installed package: warnings raised from files under it are the library's.
PACKAGE = Path(__file__).resolve().parents[1]


def _show_warning(message, category, filename, lineno, file=None, line=None, *, shown=warnings.showwarning) -> None:
    """:func:`warnings.showwarning` that logs the library's warnings as one ``warning:`` line each; ``shown`` (Python's
    own, bound when this module was imported) shows the others."""
    if Path(filename).resolve().is_relative_to(PACKAGE):
        logging.getLogger("torchgcc.warnings").warning("warning: %s", message)
    else:
        shown(message, category, filename, lineno, file, line)


def configure_logging(level: int = logging.INFO) -> None:
    """Show the ``torchgcc`` loggers' messages of ``level`` and above as ``[torchgcc] message`` lines on stderr, the
    library's warnings as ``[torchgcc] warning: message`` lines, and drop Ray's notice of its default token
    authentication (idempotent)."""
    logger = logging.getLogger("torchgcc")
    if not any(isinstance(handler, _Stderr) for handler in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("[torchgcc] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
    warnings.showwarning = _show_warning
    ray_auth = logging.getLogger(RAY_AUTH_LOGGER)
    if _not_ray_default_auth_notice not in ray_auth.filters:
        ray_auth.addFilter(_not_ray_default_auth_notice)
