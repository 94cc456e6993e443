"""Named entries of one kind (codes, models, datasets, latency models), selected by name instead of if-chains."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, Optional, TypeVar, Union, overload

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> entry table that says what it holds in its errors.

    >>> shapes = Registry[int]("shape")
    >>> shapes.register("square", 4)
    4
    >>> shapes["square"], shapes.names()
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
            if name in self._entries:
                raise ValueError(f"a {self.kind} named {name!r} is already registered")
            self._entries[name] = value
            return value

        return add if entry is None else add(entry)

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {self.names()}") from None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
