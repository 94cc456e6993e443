"""Render one doc template with Jinja2 (the syntax and the names a template may use are in :mod:`torchgcc.app.docs`).

:func:`environment` is the Jinja2 environment of a rendering: undefined names fail (``StrictUndefined``), nothing is
escaped, block tags on lines of their own vanish with their line, every ``{{ }}`` value goes through :func:`finalize`
(floats as ``.3g``; ``None`` and whole JSON objects refused), the filter ``fmt`` formats with a format spec, the tag
``{% check EXPRESSION %}`` fails the rendering when a claim no longer holds, and the globals are the sources, the
table renderers and a few builtins. :func:`render` adds the two rules Jinja2 does not have: an expression that writes a
number must read a source, and every error names the template and line.
"""

from __future__ import annotations

import builtins
import importlib
import math
import statistics
import traceback
from typing import Any, Callable

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension

from torchgcc.app.docs.sources import (
    DocsError,
    Sources,
    View,
    argmax,
    argmin,
    by,
    cells,
    default,
    exports,
    overlaps,
    value,
)

__all__ = ["BUILTINS", "CheckExtension", "environment", "finalize", "fmt", "render", "table"]

#: The Python builtins a template may call (everything else comes from a source or a renderer).
BUILTINS: tuple[str, ...] = ("abs", "enumerate", "float", "len", "list", "max", "min", "sorted", "str", "sum", "zip")


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


def fmt(number: Any, spec: str) -> str:
    """The filter ``{{ x | fmt(".3g") }}``: ``number`` formatted with the format spec ``spec`` (``.3g``, ``.1f``,
    ``.1%``, ``,d``); a float's exponent loses its ``+`` and leading zeros (``1e-2``, not ``1e-02``)."""
    try:
        text = format(number, spec)
    except (ValueError, TypeError) as error:
        raise DocsError(f"fmt({spec!r}) of {number!r}: {error}") from None
    if not isinstance(number, float) or "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{'-' if exponent.startswith('-') else ''}{int(exponent[1:])}"


def finalize(result: Any) -> Any:
    """What a ``{{ }}`` writes: a float as ``.3g``, anything else as it is; ``None`` (missing in its source) and a
    whole JSON object or list are errors."""
    if result is None:
        raise DocsError("the value is None (missing in its source)")
    if isinstance(result, View):
        raise DocsError(f"the value is a {type(result.data).__name__}, not a number or text")
    return fmt(result, ".3g") if isinstance(result, float) else result


class CheckExtension(Extension):
    """``{% check EXPRESSION %}``: the rendering fails, with the claim's text and line, unless the expression is
    true. Write one after every sentence that claims an order or a win, so new results cannot silently contradict
    the prose."""

    tags = {"check"}

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        # Jinja2's parser keeps no source text: each tag's text is read here from Jinja2's own tokens, in the order
        # the parser meets the tags.
        claims, claim, previous = [], None, None
        for _, kind, text in self.environment.lex(source):
            if kind == "block_end" and claim is not None:
                claims.append(" ".join("".join(claim).split()))
                claim = None
            elif claim is not None:
                claim.append(text)
            elif kind == "name" and text == "check" and previous == "block_begin":
                claim = []
            if kind != "whitespace":
                previous = kind
        self._claims = iter(claims)
        return source

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        condition = parser.parse_expression()
        call = self.call_method("_check", [condition, nodes.Const(next(self._claims))], lineno=lineno)
        return nodes.ExprStmt(call, lineno=lineno)

    def _check(self, holds: Any, claim: str) -> str:
        if not holds:
            raise DocsError(f"the claim no longer holds: {claim}")
        return ""


def environment(sources: Sources) -> jinja2.Environment:
    """The Jinja2 environment of one rendering, its globals reading ``sources``."""
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=finalize,
        extensions=[CheckExtension, "jinja2.ext.do"],
    )
    env.filters["fmt"] = fmt
    env.globals.update({name: getattr(builtins, name) for name in BUILTINS})
    env.globals.update(
        argmax=argmax,
        argmin=argmin,
        by=by,
        cells=cells,
        default=default,
        exports=exports,
        load=sources.load,
        math=math,
        overlaps=overlaps,
        statistics=statistics,
        table=table,
        value=value,
    )
    return env


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers_without_source(tree: nodes.Template) -> list[int]:
    """The lines of the expressions that write, bind or test a number and read no name but a builtin: a number
    written into a template is not a measurement (literals without numbers, a list of file names, are fine)."""
    expressions = [child for node in tree.find_all(nodes.Output) for child in node.nodes]
    expressions += [node.node for node in tree.find_all((nodes.Assign, nodes.ExprStmt))]
    lines = []
    for expression in expressions:
        found = [expression, *expression.find_all(nodes.Expr)]
        names = {node.name for node in found if isinstance(node, nodes.Name)} - set(BUILTINS)
        numbers = [node for node in found if isinstance(node, nodes.Const) and _is_number(node.value)]
        if numbers and not names:
            lines.append(expression.lineno)
    return lines


def _template_line(error: BaseException) -> int | None:
    """The template line where ``error`` was raised (Jinja2 puts the template's frames into the traceback)."""
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == "<template>"]
    return lines[-1] if lines else None


def render(text: str, *, name: str, sources: Sources) -> str:
    """The template ``text`` rendered, reading ``sources``. ``name`` (the template's path) goes into error messages,
    with the line."""
    env = environment(sources)
    try:
        tree = env.parse(text)
    except jinja2.TemplateSyntaxError as error:
        raise DocsError(f"{name}:{error.lineno}: {error.message}") from None
    unsourced = _numbers_without_source(tree)
    if unsourced:
        raise DocsError(f"{name}:{unsourced[0]}: the expression computes from no source (a literal is no measurement)")
    try:
        return env.from_string(tree).render()
    except Exception as error:  # any failure of an expression is the template's
        message = str(error) if isinstance(error, DocsError) else f"{type(error).__name__}: {error}"
        raise DocsError(f"{name}:{_template_line(error)}: {message}") from None
