"""The measured-number rule of :mod:`torchgcc.app.docs` (stated in its docstring), as code.

:func:`prose` blanks out what is not prose (fenced code blocks, inline code spans, HTML comments, Jinja2
placeholders, tags and comments, link targets, and the exempt names: arXiv identifiers, section signs, "95% CI",
"95% confidence"); :func:`measured_numbers` then finds every numeric literal that is not part of a word, path or name
(not preceded by a letter, digit, ``_``, ``.`` or ``/``, nor by ``-`` after a letter) and has a decimal point, an
exponent, a percent sign, a ratio ``x`` or one of :data:`UNITS` after it. Two kinds of claim that slipped past that
are flagged too: a count of orders of magnitude, in digits or words ("two orders of magnitude"), and a code span that
is a name plus or minus a decimal number (`` `budget + 0.02` ``), which the code-span blanking used to hide.
``tests/test_docs.py`` holds the cases that must and must not be flagged.
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

_MAGNITUDES = re.compile(
    r"\b(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|a few|several|many)\s+orders?\s+of\s+magnitude\b",
    re.I,
)

# A code span that is nothing but a name plus or minus a decimal number: a tolerance or a measured margin written as
# code (`budget + 0.02`), not a setting (`lam=0.5`, `r = 0.2` are assignments) nor a formula (`0.5 * n`).
_CLAIM_IN_CODE = re.compile(r"`\s*[A-Za-z_][\w.]*\s*[-+]\s*\d+\.\d+\s*`")

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
    """Every measured number in the prose of ``text`` (see the module docstring), in line order."""
    found = [
        Finding(text.count("\n", 0, match.start()) + 1, match.group(0).strip("` "))
        for match in _CLAIM_IN_CODE.finditer(_without_code_blocks(text))
    ]
    text = prose(text)
    for match in _NUMBER.finditer(text):
        if match.group("fraction") or match.group("exponent") or match.group("mark"):
            found.append(Finding(text.count("\n", 0, match.start()) + 1, match.group(0).strip()))
    for match in _MAGNITUDES.finditer(text):
        found.append(Finding(text.count("\n", 0, match.start()) + 1, " ".join(match.group(0).split())))
    return sorted(found, key=lambda finding: finding.line)


def _without_code_blocks(text: str) -> str:
    """``text`` with fenced code blocks, HTML comments and Jinja2 syntax blanked (code spans kept)."""
    for pattern in _NOT_PROSE[:3]:
        text = pattern.sub(_blank, text)
    return text
