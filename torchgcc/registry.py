"""Named entries of one kind (codes, models, datasets, latency models), selected by name instead of if-chains.

Lookups ignore case (``"GCC"`` finds ``"gcc"``); an unknown name raises a ``ValueError`` that lists the registered
names and suggests the closest ones.
"""

from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterator, Optional, TypeVar, Union, overload

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> entry table that says what it holds in its errors.

    >>> shapes = Registry[int]("shape")
    >>> shapes.register("square", 4)
    4
    >>> shapes["Square"], shapes.names()
    (4, ['square'])
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, entry: T) -> T: ...

    def register(self, name: str, entry: Optional[T] = None) -> Union[T, Callable[[T], T]]:
        """Add ``entry`` under ``name`` and return it; without ``entry``, a decorator that does so."""

        def add(value: T) -> T:
            if name.lower() in {key.lower() for key in self._entries}:
                raise ValueError(f"a {self.kind} named {name!r} is already registered")
            self._entries[name] = value
            return value

        return add if entry is None else add(entry)

    def __getitem__(self, name: str) -> T:
        key = self._key(name)
        if key is None:
            close = difflib.get_close_matches(str(name).lower(), self.names(), n=3, cutoff=0.5)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"unknown {self.kind} {name!r}{hint} (registered: {', '.join(self.names())})")
        return self._entries[key]

    def _key(self, name: object) -> Optional[str]:
        """The registered name equal to ``name`` ignoring case, or None."""
        if not isinstance(name, str):
            return None
        if name in self._entries:
            return name
        return next((key for key in self._entries if key.lower() == name.lower()), None)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return self._key(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
