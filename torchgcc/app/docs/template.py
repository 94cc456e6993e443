"""Render one doc template: directives, placeholders and tables (the syntax is in :mod:`torchgcc.app.docs`)."""

from __future__ import annotations

import ast
import builtins
import importlib
import math
import re
import statistics
from typing import Any, Callable

from torchgcc.app.docs.sources import DocsError, Sources, View, argmax, argmin, by, default, exports, overlaps, value

__all__ = ["SAFE_BUILTINS", "render", "table"]

#: The builtins an expression may call (everything else must come from a source).
SAFE_BUILTINS: tuple[str, ...] = (
    "abs",
    "all",
    "any",
    "bool",
    "dict",
    "enumerate",
    "filter",
    "float",
    "format",
    "int",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "range",
    "reversed",
    "round",
    "set",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
)

# A directive on lines of its own (removed with its line) or inline, then a placeholder.
_TOKEN = re.compile(
    r"(?P<own>^[ \t]*)?<!--\s*(?P<kind>let|check)\s(?P<body>.*?)-->(?(own)[ \t]*\n?)"
    r"|(?P<escaped>\\\{\{)"
    r"|\{\{(?P<expression>.*?)\}\}",
    re.S | re.M,
)
_LET = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\s*=(?!=)(?P<expression>.*)", re.S)
_EXPONENT = re.compile(r"e(?P<sign>[-+])0*(?P<digits>\d+)")
_SPEC = re.compile(r"^(?P<expression>.*)\|(?P<spec>[^|()\[\]{}'\"]*)$", re.S)


def table(renderer: str, source: Any = None, **options: Any) -> str:
    """The Markdown table that ``renderer`` makes of ``source``: ``"module"`` (its function ``docs_table``) or
    ``"module:function"``, relative to :mod:`torchgcc.app` (``"experiments.straggler_study"``). The function
    receives the plain JSON data of a :class:`View` and ``options``, and returns the whole table."""
    module, _, function = renderer.partition(":")
    name = module if module.startswith("torchgcc.") else f"torchgcc.app.{module}"
    try:
        make: Callable[..., str] = getattr(importlib.import_module(name), function or "docs_table")
    except (ImportError, AttributeError) as error:
        raise DocsError(f"table({renderer!r}): {error}") from None
    return make(_plain(source), **options).rstrip("\n")


def _plain(source: Any) -> Any:
    """The JSON data of a view, or of the views in a dict or list."""
    if isinstance(source, View):
        return source.data
    if isinstance(source, dict):
        return {key: _plain(item) for key, item in source.items()}
    if isinstance(source, (list, tuple)):
        return [_plain(item) for item in source]
    return source


def _check_sourced(expression: str, where: str) -> None:
    """An expression with a number in it must read something (a source, a let name, a table): a number written
    into a placeholder is not a measurement. Literals without numbers (a list of file names) are fine."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise DocsError(f"{where}: {expression.strip()!r} is not a Python expression ({error.msg})") from None
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    numbers = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    ]
    if numbers and not names - set(SAFE_BUILTINS):
        raise DocsError(f"{where}: {expression.strip()!r} computes from no source (a literal is not a measurement)")


def _format(result: Any, spec: str | None, where: str) -> str:
    if result is None:
        raise DocsError(f"{where}: the value is None (missing in its source)")
    if isinstance(result, View):
        raise DocsError(f"{where}: the value is a {type(result.data).__name__}, not a number or text")
    try:
        text = format(result, ".3g" if spec is None and isinstance(result, float) else (spec or "").strip())
    except (ValueError, TypeError) as error:
        raise DocsError(f"{where}: format spec {spec!r}: {error}") from None
    return (
        _EXPONENT.sub(lambda m: "e" + m["sign"].replace("+", "") + m["digits"], text)
        if isinstance(result, float)
        else text
    )


def render(text: str, *, name: str, sources: Sources) -> str:
    """``text`` with its directives applied and removed and its placeholders replaced by their values.

    ``name`` (the template's path) goes into error messages, with the line.
    """
    namespace: dict[str, Any] = {
        "__builtins__": {key: getattr(builtins, key) for key in SAFE_BUILTINS},
        "argmax": argmax,
        "argmin": argmin,
        "by": by,
        "default": default,
        "exports": exports,
        "load": sources.load,
        "math": math,
        "overlaps": overlaps,
        "statistics": statistics,
        "table": table,
        "value": value,
    }

    def evaluate(expression: str, where: str) -> Any:
        _check_sourced(expression, where)
        try:
            return eval(expression.strip(), namespace)  # noqa: S307 - the repository's own templates
        except DocsError as error:
            raise DocsError(f"{where}: {error}") from None
        except Exception as error:  # any failure of the expression is the template's
            raise DocsError(f"{where}: {expression.strip()!r}: {type(error).__name__}: {error}") from None

    def replace(match: re.Match) -> str:
        if match.group("escaped") is not None:
            return "{{"
        where = f"{name}:{text.count(chr(10), 0, match.start()) + 1}"
        if match.group("expression") is not None:
            found = _SPEC.match(match.group("expression"))
            expression, spec = (found["expression"], found["spec"]) if found else (match.group("expression"), None)
            return _format(evaluate(expression, where), spec, where)
        body = match.group("body")
        if match.group("kind") == "let":
            let = _LET.match(body)
            if let is None:
                raise DocsError(f"{where}: expected '<!-- let NAME = EXPRESSION -->'")
            namespace[let["name"]] = evaluate(let["expression"], where)
        elif not evaluate(body, where):
            raise DocsError(f"{where}: the claim no longer holds: {body.strip()}")
        return ""

    return _TOKEN.sub(replace, text)
