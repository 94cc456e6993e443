"""The rule for a *measured number*: which literals of a doc template must come from a placeholder.

A template's **prose** is its text outside fenced code blocks, inline code spans, HTML comments (the directives),
link targets ``](...)`` and placeholders ``{{ ... }}``. In the prose, a *numeric literal* is a run of digits with
an optional sign, decimal fraction and exponent (``7``, ``-8.36``, ``1.2e-5``) that is not part of a word, path or
name: not preceded by a letter, digit, ``_``, ``.`` or ``/``, nor by ``-`` after a letter (``ResNet-18``). It is a
**measured number**, which must come from a placeholder, when it has

1. a decimal point (``0.5``, ``1.6``; also in ranges: ``0.64-0.78``), or
2. an exponent (``1e-2``, ``3E5``), or
3. a percent sign after it, with or without a space (``5%``, ``99.7 %``), or
4. a ratio ``x`` right after it (``9x``, ``1.8x``; not ``8x8``), or
5. a unit after it, with or without a space: one of :data:`UNITS` (``34 s``, ``12.5 ms``, ``21 minutes``,
   ``19.7 MB``).

Exempt, as names rather than numbers: arXiv identifiers (``arXiv 2606.02218``), section signs (``§6.2``) and the
phrases "95% CI" and "95% confidence" (the convention every interval follows). Integers without one of the marks
above (counts, sizes, settings: ``N = 32``, ``3 seeds``) are not flagged: the rule cannot tell a measured count from
a setting, so write measured counts through placeholders too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["UNITS", "Finding", "measured_numbers", "prose"]

#: Units that make a number measured (case-sensitive; a unit must end at a word boundary).
UNITS: tuple[str, ...] = (
    "s",
    "ms",
    "us",
    "µs",
    "ns",
    "min",
    "seconds",
    "minutes",
    "hours",
    "kB",
    "KB",
    "KiB",
    "MB",
    "MiB",
    "GB",
    "GiB",
)

_UNIT = "|".join(sorted((re.escape(unit) for unit in UNITS), key=len, reverse=True))

_NUMBER = re.compile(
    r"(?<![\w./])(?<![A-Za-z_]-)"  # not inside a word, path, name or number
    r"(?P<number>[-+−]?\d+(?P<fraction>\.\d+)?(?P<exponent>[eE][-+]?\d+)?)"
    rf"(?P<mark>\s?%|x(?!\w)|\s?(?:{_UNIT})(?![\w%]))?"
)

_EXEMPT = re.compile(r"arXiv:?\s+\d{4}\.\d{4,5}(?:v\d+)?|§\s?\d+(?:\.\d+)*|95\s?% (?:CI|confidence)")

# What is not prose, in the order it is removed (each replaced by as many newlines as it spans).
_NOT_PROSE = (
    re.compile(r"^[ \t]*(?P<fence>```|~~~).*?^[ \t]*(?P=fence)[^\n]*$", re.S | re.M),  # fenced code blocks
    re.compile(r"<!--.*?-->", re.S),  # HTML comments, the directives among them
    re.compile(r"\{\{.*?\}\}", re.S),  # placeholders
    re.compile(r"(`+)(?:(?!\1).)+?\1", re.S),  # inline code spans (any number of backticks)
    re.compile(r"\]\([^)\s]*\)"),  # link and image targets
)


@dataclass(frozen=True)
class Finding:
    """A measured number in prose that no placeholder supplies: its 1-based ``line`` and the ``text`` matched."""

    line: int
    text: str


def _blank(match: re.Match) -> str:
    return " " + "\n" * match.group(0).count("\n")


def prose(text: str) -> str:
    """``text`` with code blocks, code spans, HTML comments, placeholders and link targets blanked out (line
    numbers kept)."""
    for pattern in _NOT_PROSE:
        text = pattern.sub(_blank, text)
    return _EXEMPT.sub(_blank, text)


def measured_numbers(text: str) -> list[Finding]:
    """Every measured number in the prose of ``text`` (see the module docstring), in order."""
    text = prose(text)
    found = []
    for match in _NUMBER.finditer(text):
        if match.group("fraction") or match.group("exponent") or match.group("mark"):
            found.append(Finding(text.count("\n", 0, match.start()) + 1, match.group(0).strip()))
    return found
