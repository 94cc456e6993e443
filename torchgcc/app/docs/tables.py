"""Table renderers for results whose producing module does not define its own ``docs_table``.

Each function takes the plain JSON data of one committed results file and returns a whole Markdown table (see
:mod:`torchgcc.app.docs`). A renderer belongs next to the code that writes its JSON; these live here because that
code is a benchmark script or a module that has no renderer yet, and may move there.
"""

from __future__ import annotations

from typing import Any, Mapping

from torchgcc.app.tables import markdown_table

__all__ = ["DECODE_ROWS", "decode", "exports", "profile", "rates"]

Data = Mapping[str, Any]


def rates(data: Data) -> str:
    """``torchgcc reproduce rates``: its ``table.md`` (MSE against N, one column per series)."""
    return markdown_table(data["records"], setting="N")


#: What each timing of ``benchmarks/decode.py`` measures (a key it does not know is shown by name).
DECODE_ROWS: dict[str, str] = {
    "bmm": "bare `torch.bmm` applying {groups} precomputed `(K, N)` matrices",
    "decode_cold": 'decode, `lambda_dec="spacing"`, empty cache ({groups} distinct matrices built in the call)',
    "decode_cold_check_false": "the same with `check=False`",
    "decode_warm": "the same with the matrices cached",
    "construct": "matrix construction alone ({groups} masks)",
    "decode_adaptive_default": 'decode, the default `lambda_dec="adaptive"` (lambda per group, nothing cached)',
    "scipy_loop": "a scipy loop fitting each group's results (spacing lambda)",
}


def decode(data: Data) -> str:
    """``benchmarks/decode.py``: every timing of its JSON, in ms and against the bare bmm."""
    settings, seconds = data["settings"], data["seconds"]
    lines = ["| what | time (ms) | against the bare bmm |", "|---|---:|---:|"]
    for key, value in seconds.items():
        label = DECODE_ROWS.get(key, f"`{key}`").format(groups=settings["groups"])
        lines.append(f"| {label} | {1e3 * value:.3g} | {value / seconds['bmm']:.3g}x |")
    return "\n".join(lines)


def profile(data: Data) -> str:
    """``torchgcc profile``'s ``profile.json``: every stage's median, its share of the forward, and per group."""
    forward = data["stages"]["forward"]["median_ms"]
    lines = ["| stage | median (ms) | per group (ms) | of the forward |", "|---|---:|---:|---:|"]
    for name, summary in data["stages"].items():
        share = summary["median_ms"] / forward
        lines.append(f"| {name} | {summary['median_ms']:.4g} | {data['per_group_ms'][name]:.4g} | {share:.3%} |")
    return "\n".join(lines)


def exports(data: None, *, modules: list[str]) -> str:
    """Each module's ``__all__`` (imported from the code), one row per module."""
    from torchgcc.app.docs.sources import exports as names

    lines = ["| module | `__all__` |", "|---|---|"]
    lines += [f"| `{module}` | {names(module)} |" for module in modules]
    return "\n".join(lines)
