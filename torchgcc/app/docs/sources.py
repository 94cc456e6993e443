"""What a doc template may read: committed result files, the code's own names, and views that find records.

:func:`load` reads a committed JSON (or JSON-lines) file under one of :data:`RESULT_DIRS` and wraps it in a
:class:`View`: attribute and item access to its entries, and ``view(**match)`` for the one record whose fields
equal ``match`` (``demo(scheme="gcc", S=16).mse``). :func:`value` imports a dotted name, so a default or a constant of
the code is quoted from the code itself.
"""

from __future__ import annotations

import importlib
import itertools
import json
from pathlib import Path
from typing import Any, Iterator

__all__ = [
    "RESULT_DIRS",
    "DocsError",
    "Sources",
    "View",
    "argmax",
    "argmin",
    "by",
    "cells",
    "default",
    "exports",
    "overlaps",
    "value",
]

#: Folders (relative to the checkout) whose committed JSON files templates may read.
RESULT_DIRS: tuple[str, ...] = ("docs/results", "benchmarks/results", "recipes/results")


class DocsError(Exception):
    """A template that cannot be rendered: a missing source, a record that is not there, a claim that no longer
    holds, a measured number without a source. The message names the template and line."""


def _wrap(data: Any, where: str) -> Any:
    return View(data, where) if isinstance(data, (dict, list)) else data


class View:
    """Read-only view of JSON data (a dict or a list), for expressions in templates.

    - ``view.key`` / ``view["key"]``: an entry (dicts and lists come back as views, scalars as they are);
    - ``view(**match)``: the single record, among a list of records (or the ``records`` of a results file), whose
      fields equal ``match``; an error when none or several do;
    - ``view.where(**match)``: all such records; ``view.values(key)``: the sorted distinct values of ``key``;
    - ``view.data``: the plain JSON data.
    """

    #: Jinja2 asks every callable for this attribute; a view has no such entry to report.
    jinja_pass_arg = None

    def __init__(self, data: Any, where: str) -> None:
        self.data = data
        self.where_ = where

    def _records(self) -> list:
        if isinstance(self.data, list):
            return self.data
        if isinstance(self.data, dict) and isinstance(self.data.get("records"), list):
            return self.data["records"]
        raise DocsError(f"{self.where_} is not a list of records")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, key: Any) -> Any:
        try:
            return _wrap(self.data[key], f"{self.where_}[{key!r}]")
        except (KeyError, IndexError, TypeError):
            known = f"; it has {sorted(self.data)}" if isinstance(self.data, dict) else ""
            raise DocsError(f"{self.where_} has no entry {key!r}{known}") from None

    def where(self, **match: Any) -> list:
        """Every record whose fields equal ``match`` (views of them)."""
        records = self._records()
        return [
            _wrap(record, f"{self.where_}({match})")
            for record in records
            if all(record.get(key) == wanted for key, wanted in match.items())
        ]

    def __call__(self, **match: Any) -> Any:
        found = self.where(**match)
        if len(found) != 1:
            raise DocsError(f"{self.where_}: {len(found)} records match {match}, expected exactly one")
        return found[0]

    def values(self, key: str) -> list:
        """The sorted distinct values of ``key`` over the records that have it."""
        return sorted({record[key] for record in self._records() if record.get(key) is not None})

    def __iter__(self) -> Iterator[Any]:
        items = self.data if isinstance(self.data, list) else list(self.data)
        for index, item in enumerate(items):
            yield _wrap(item, f"{self.where_}[{index}]") if isinstance(self.data, list) else item

    def __len__(self) -> int:
        return len(self.data)

    def keys(self) -> list:
        return list(self.data) if isinstance(self.data, dict) else []

    def items(self) -> list:
        return [(key, _wrap(item, f"{self.where_}[{key!r}]")) for key, item in self.data.items()]

    def __repr__(self) -> str:
        return f"View({self.where_})"


class Sources:
    """The result files one rendering read, loaded once each (:meth:`load`), relative to ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.read: dict[str, Any] = {}

    def load(self, path: str) -> View:
        """The committed JSON (``.json``) or JSON-lines (``.jsonl``) file ``path``, relative to the checkout."""
        if not any(path.startswith(folder + "/") for folder in RESULT_DIRS):
            raise DocsError(f"load({path!r}): templates read results from {', '.join(RESULT_DIRS)} only")
        if path not in self.read:
            file = self.root / path
            if not file.is_file():
                raise DocsError(f"load({path!r}): no such file")
            text = file.read_text()
            if path.endswith(".jsonl"):
                self.read[path] = [json.loads(line) for line in text.splitlines() if line.strip()]
            else:
                self.read[path] = json.loads(text)
        return View(self.read[path], path)


def value(dotted: str) -> Any:
    """The object a dotted name ``package.module.NAME`` (or a module) refers to, imported."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError as error:
            if error.name is not None and not dotted.startswith(error.name):
                raise
            continue
        try:
            for attribute in parts[split:]:
                found = getattr(found, attribute)
        except AttributeError:
            raise DocsError(f"value({dotted!r}): {'.'.join(parts[:split])} has no {'.'.join(parts[split:])}") from None
        return found
    raise DocsError(f"value({dotted!r}): no such module")


def default(dotted: str, parameter: str) -> Any:
    """The default value of ``parameter`` of the function or class ``dotted`` (its signature's)."""
    import inspect

    found = inspect.signature(value(dotted)).parameters.get(parameter)
    if found is None or found.default is inspect.Parameter.empty:
        raise DocsError(f"default({dotted!r}, {parameter!r}): no such parameter with a default")
    return found.default


def exports(module: str) -> str:
    """``__all__`` of ``module`` as a comma-separated list of code spans, in its order."""
    names = value(module).__all__
    return ", ".join(f"`{name}`" for name in names)


def by(records: Any, *keys: str) -> dict:
    """``records`` (a view of a results file or a list of records) indexed by the values of ``keys``:
    ``by(demo, "scheme", "S")["gcc", 16]``; one key gives plain keys. Two records with the same key are an error."""
    found: dict = {}
    items = records.where() if isinstance(records, View) else list(records)
    for record in items:
        key = tuple(record[name] for name in keys)
        key = key[0] if len(keys) == 1 else key
        if key in found:
            raise DocsError(f"by({keys}): two records have {key!r}")
        found[key] = record
    return found


def cells(records: Any, *axes: Any) -> list:
    """The records of a dict from :func:`by` at every combination of the ``axes``' values, the last axis varying
    fastest: ``cells(p, rates, ["gcc:S=2", "bacc:S=2"])`` is ``[p[r, s] for r in rates for s in (...)]``. A missing
    combination is an error."""
    found = []
    for key in itertools.product(*axes):
        key = key[0] if len(axes) == 1 else key
        if key not in records:
            raise DocsError(f"cells: no record at {key!r}")
        found.append(records[key])
    return found


def argmin(mapping: Any) -> Any:
    """The key of the smallest value of a dict."""
    return min(mapping, key=mapping.__getitem__)


def argmax(mapping: Any) -> Any:
    """The key of the largest value of a dict."""
    return max(mapping, key=mapping.__getitem__)


def overlaps(first: Any, second: Any, metric: str = "mse") -> bool:
    """Whether two records' 95% intervals ``metric ± metric_ci`` overlap."""
    low = max(first[metric] - first[f"{metric}_ci"], second[metric] - second[f"{metric}_ci"])
    high = min(first[metric] + first[f"{metric}_ci"], second[metric] + second[f"{metric}_ci"])
    return low <= high
