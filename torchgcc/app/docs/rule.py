"""The measured-number rule of :mod:`torchgcc.app.docs` (stated in its docstring), as code.

:func:`prose` blanks out what is not prose (fenced code blocks, inline code spans, HTML comments, Jinja2
placeholders, tags and comments, link targets, and the exempt names: arXiv identifiers, section signs, "95% CI",
"95% confidence"); :func:`measured_numbers` then finds every numeric literal that is not part of a word, path or name
(not preceded by a letter, digit, ``_``, ``.`` or ``/``, nor by ``-`` after a letter) and has a decimal point, an
exponent, a percent sign, a ratio ``x`` or one of :data:`UNITS` after it. ``tests/test_docs.py`` holds the cases that
must and must not be flagged.
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
    re.compile(r"<!--.*?-->", re.S),  # HTML comments
    re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S),  # Jinja2 placeholders, tags and comments
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
    """``text`` with code blocks, code spans, HTML comments, Jinja2 placeholders, tags and comments, and link targets
    blanked out (line numbers kept)."""
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
