"""A registry of codes by name, so experiments and command lines select codes without if-chains."""

from __future__ import annotations

from functools import partial
from typing import Callable, Optional

from torchgcc.codes.bacc import BACC
from torchgcc.codes.base import Code
from torchgcc.codes.gcc import GCC
from torchgcc.codes.lcc import LCC
from torchgcc.codes.replication import Replication
from torchgcc.codes.uncoded import Uncoded
from torchgcc.registry import Registry

__all__ = ["CODES", "register_code", "make_code", "list_codes"]

#: Registered codes: ``name -> factory(num_inputs=..., num_workers=..., **kwargs) -> Code``.
CODES: Registry[Callable[..., Code]] = Registry("code")


def register_code(name: str, factory: Callable[..., Code]) -> None:
    """Register ``factory(num_inputs=..., num_workers=..., **kwargs) -> Code`` under ``name``."""
    CODES.register(name, factory)


def make_code(name: str, *, num_inputs: int, num_workers: Optional[int] = None, **kwargs) -> Code:
    """Build the code registered as ``name`` (see :func:`list_codes`) for ``num_inputs`` K and ``num_workers`` N
    (codes whose N follows from K, such as ``"uncoded"``, may leave it out).

    >>> code = make_code("bacc", num_inputs=4, num_workers=12)
    >>> type(code).__name__, code.min_arrived
    ('BACC', 1)
    >>> make_code("baac", num_inputs=4, num_workers=12)
    Traceback (most recent call last):
    ...
    ValueError: unknown code 'baac'; did you mean 'bacc'? (registered: ...)
    """
    if num_workers is None:
        return CODES[name](num_inputs=num_inputs, **kwargs)
    return CODES[name](num_inputs=num_inputs, num_workers=num_workers, **kwargs)


def list_codes() -> list[str]:
    """Names of the registered codes."""
    return CODES.names()


register_code("gcc", GCC)
register_code("natural", partial(GCC, lambda_enc=0.0, lambda_dec=0.0))
register_code("bacc", BACC)
register_code("lcc", LCC)
register_code("replication", Replication)
register_code("uncoded", Uncoded)
