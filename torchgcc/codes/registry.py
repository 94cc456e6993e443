"""A registry of codes by name, so experiments and command lines select codes without if-chains."""

from __future__ import annotations

from functools import partial
from typing import Callable

from torchgcc.codes.bacc import BACC
from torchgcc.codes.base import Code
from torchgcc.codes.gcc import GCC
from torchgcc.codes.lcc import LCC

__all__ = ["register_code", "make_code", "list_codes"]

_REGISTRY: dict[str, Callable[..., Code]] = {}


def register_code(name: str, factory: Callable[..., Code]) -> None:
    """Register ``factory(num_inputs=..., num_workers=..., **kwargs) -> Code`` under ``name``."""
    if name in _REGISTRY:
        raise ValueError(f"a code named {name!r} is already registered")
    _REGISTRY[name] = factory


def make_code(name: str, *, num_inputs: int, num_workers: int, **kwargs) -> Code:
    """Build the code registered as ``name`` (see :func:`list_codes`)."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown code {name!r}; registered: {list_codes()}") from None
    return factory(num_inputs=num_inputs, num_workers=num_workers, **kwargs)


def list_codes() -> list[str]:
    """Names of the registered codes."""
    return sorted(_REGISTRY)


register_code("gcc", GCC)
register_code("natural", partial(GCC, lambda_enc=0.0, lambda_dec=0.0))
register_code("bacc", BACC)
register_code("lcc", LCC)
