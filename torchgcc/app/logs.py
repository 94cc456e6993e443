"""How the application shows the library's diagnostics: one line per message on stderr, ``[torchgcc] ...``.

The library logs through ``logging.getLogger("torchgcc....")`` and adds only a ``NullHandler`` to the ``torchgcc``
logger (a program that configures logging decides what it sees); the command lines call :func:`configure_logging`.
"""

from __future__ import annotations

import logging
import sys

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


def configure_logging(level: int = logging.INFO) -> None:
    """Show the ``torchgcc`` loggers' messages of ``level`` and above as ``[torchgcc] message`` lines on stderr
    (idempotent)."""
    logger = logging.getLogger("torchgcc")
    if not any(isinstance(handler, _Stderr) for handler in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("[torchgcc] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
