"""The docs generator: README.md and docs/*.md rendered from templates and committed results.

``python -m torchgcc.app.docs`` renders every template ``docs/templates/<name>.md`` into ``docs/<name>.md``
(``docs/templates/README.md`` into ``README.md``); ``--check`` writes nothing and exits 1 when a committed doc
differs from its rendering or a template has a measured number without a source. ``tests/test_docs.py`` runs the
same check. Edit the templates, never the rendered docs; after new results are committed, rerun the command.

Templates are Jinja2 (https://jinja.palletsprojects.com/templates/), rendered by :mod:`torchgcc.app.docs.template`
with an undefined name an error (``StrictUndefined``), nothing escaped, and block tags on lines of their own removed
with their line (``trim_blocks``, ``lstrip_blocks``); the rest is Markdown, copied as it is:

- ``{{ EXPRESSION }}``: its value; a float is written with the format spec ``.3g``, ``None`` and a whole JSON object
  are errors. ``{{ EXPRESSION | fmt(".1%") }}`` formats with a spec (``.3g``, ``.1f``, ``.1%``, ``,d``); Jinja2's
  filters bind tighter than arithmetic, so write ``{{ (a / b) | fmt(".2g") }}``. An expression that writes or binds a
  number must read a source (``{{ 0.5 }}`` is refused).
- ``{% set NAME = EXPRESSION %}``; lists and dicts are built with ``{% for %}`` and ``{% do xs.append(...) %}``;
  ``{% macro %}`` for a phrase repeated with other arguments; Jinja2's filters (``map(attribute="mse")``,
  ``selectattr``, ``min``, ``max``, ``join``, ``first``) for projections.
- ``{% check EXPRESSION %}``: rendering fails, with the template line and the expression's text, unless the
  expression is true. Write one after every sentence that claims an order or a win ("below BACC at every S"; in a
  ``{% for %}`` loop for "at every"), so new results cannot silently contradict the prose.
- ``{{ "{{" }}`` writes a literal ``{{``.

Names available in expressions (besides Jinja2's ``range``, ``dict`` and ``namespace``):

- ``load("docs/results/demo.json")``: a committed JSON (or ``.jsonl``) file under ``docs/results``,
  ``benchmarks/results`` or ``recipes/results`` as a :class:`~torchgcc.app.docs.sources.View`:
  ``demo.config.repeats``, ``demo(scheme="gcc", S=16).mse`` (the one record that matches),
  ``demo.where(scheme="gcc")``, ``demo.values("S")``;
- ``by(records, "scheme", "S")``: the records indexed by those fields (``m["gcc", 16].mse``), and
  ``cells(m, ["gcc", "bacc"], [0, 16])``: the records at every combination of keys; ``argmin`` / ``argmax`` of a dict,
  ``overlaps(a, b, "mse")`` of two records' 95% intervals;
- ``table(RENDERER, SOURCE, **options)``: a whole Markdown table. ``RENDERER`` is a module of
  :mod:`torchgcc.app` (``"experiments.straggler_study"``: its function ``docs_table(data, **options) -> str``) or
  ``"module:function"``; it receives the plain JSON data. Tables are whole: a renderer shows every record it is
  given, never a selection of the flattering rows;
- ``value("torchgcc.codes.maps.CACHE_BYTES")``: an object of the code (a default, a constant);
  ``default("torchgcc.distributed.launch.launch", "grace_s")``: a parameter's default;
  ``exports("torchgcc.metrics")``: a module's ``__all__`` as code spans;
- ``math``, ``statistics`` and the builtins of :data:`torchgcc.app.docs.template.BUILTINS` (``min``, ``max``, ``len``,
  ``sorted``, ...).

**Measured numbers.** In a template's prose (its text outside fenced code blocks, inline code spans, HTML comments,
link targets ``](...)`` and placeholders), every number with a decimal point (``0.5``), an exponent (``1e-2``), a
percent sign (``5%``), a ratio ``x`` (``9x``) or a unit (s, ms, us, µs, ns, min, seconds, minutes, hours, kB, KB,
KiB, MB, MiB, GB, GiB: ``34 s``, ``19.7 MB``) must come from a placeholder. A number that is part of a word, path or
name (``float32``, ``budget0.002.json``, ``ResNet-18``), arXiv identifiers, section signs (``§6.2``) and the phrases
"95% CI" and "95% confidence" are exempt; integers without those marks (counts, settings: ``N = 32``) are not
flagged, since the rule cannot tell a measured count from a setting, so write measured counts through placeholders
too. :mod:`torchgcc.app.docs.rule` implements exactly this rule; ``tests/test_docs.py`` applies it to every
template.

**Adding a table or a paragraph** (another branch, without touching a shared file beyond its own lines): commit the
result JSON under ``docs/results/`` or ``benchmarks/results/``; write ``docs_table(data, **options) -> str`` next
to the code that produced it (the experiment module, the benchmark's command module); add one line
``{{ table("experiments.my_study", load("docs/results/my.json")) }}`` and the paragraph, its numbers as
placeholders, to the template of the page; run ``python -m torchgcc.app.docs``. A new page is a new template.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchgcc.app.docs.rule import Finding, measured_numbers
from torchgcc.app.docs.sources import DocsError, Sources
from torchgcc.app.docs.template import render

__all__ = [
    "TEMPLATES",
    "DocsError",
    "Rendered",
    "checkout",
    "header",
    "render_all",
    "render_template",
    "stale_docs",
    "target_of",
    "unsourced_numbers",
]

#: Where the templates live, relative to the checkout.
TEMPLATES = "docs/templates"


def checkout(start: Path | None = None) -> Path:
    """The checkout whose docs are rendered: ``start`` (default: the working directory) or the folder above this
    package, whichever holds ``docs/templates``."""
    candidates = [Path.cwd() if start is None else Path(start), Path(__file__).resolve().parents[3]]
    for candidate in candidates:
        if (candidate / TEMPLATES).is_dir():
            return candidate
    raise DocsError(f"no {TEMPLATES}/ here or above the package: run from a checkout (pip install -e .)")


def target_of(template: Path) -> Path:
    """The doc a template renders to, relative to the checkout: ``README.md`` for the top-level README template,
    ``<folder>/<name>`` for a template in a subfolder ``<folder>/`` of the templates (``recipes/README.md``), else
    ``docs/<name>``."""
    if template.parent.name != Path(TEMPLATES).name:
        return Path(template.parent.name) / template.name
    return Path(template.name) if template.name == "README.md" else Path("docs") / template.name


def template_name(template: Path) -> str:
    """``template``'s path relative to the checkout (``docs/templates/...``)."""
    folder = "" if template.parent.name == Path(TEMPLATES).name else f"{template.parent.name}/"
    return f"{TEMPLATES}/{folder}{template.name}"


def header(template: Path) -> str:
    """The first line of every rendered doc: where it comes from."""
    return (
        f"<!-- Generated by `python -m torchgcc.app.docs` from {template_name(template)}: "
        "edit the template, then rerun. -->\n"
    )


@dataclass
class Rendered:
    """One rendered doc: its ``target`` (relative to the checkout), ``text``, and the result files it read."""

    template: Path
    target: Path
    text: str
    sources: list[str]


def render_template(template: Path, root: Path) -> Rendered:
    """Render one template of the checkout ``root``."""
    sources = Sources(root)
    name = template_name(template)
    text = header(template) + render(template.read_text(), name=name, sources=sources)
    return Rendered(template, target_of(template), text, sorted(sources.read))


def templates(root: Path) -> list[Path]:
    """Every template of the checkout (and of its subfolders), sorted."""
    return sorted((root / TEMPLATES).glob("*.md")) + sorted((root / TEMPLATES).glob("*/*.md"))


def render_all(root: Path) -> list[Rendered]:
    """Every template of ``root`` rendered (nothing written)."""
    return [render_template(template, root) for template in templates(root)]


def unsourced_numbers(root: Path) -> dict[str, list[Finding]]:
    """Measured numbers without a placeholder, per template (only templates that have some)."""
    found = {template_name(t): measured_numbers(t.read_text()) for t in templates(root)}
    return {name: findings for name, findings in found.items() if findings}


def stale_docs(root: Path, rendered: list[Rendered]) -> list[Path]:
    """The targets whose committed text differs from their rendering."""
    return [
        doc.target
        for doc in rendered
        if not (root / doc.target).is_file() or (root / doc.target).read_text() != doc.text
    ]
