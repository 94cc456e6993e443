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


#: Ray's logger that announces, at every start of a local cluster, that it enabled its default (token
#: authentication); the command lines drop that one record (Ray's other messages pass).
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _not_ray_default_auth_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def configure_logging(level: int = logging.INFO) -> None:
    """Show the ``torchgcc`` loggers' messages of ``level`` and above as ``[torchgcc] message`` lines on stderr, and
    drop Ray's notice of its default token authentication (idempotent)."""
    logger = logging.getLogger("torchgcc")
    if not any(isinstance(handler, _Stderr) for handler in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("[torchgcc] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
    ray_auth = logging.getLogger(RAY_AUTH_LOGGER)
    if _not_ray_default_auth_notice not in ray_auth.filters:
        ray_auth.addFilter(_not_ray_default_auth_notice)
