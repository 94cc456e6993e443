"""Table renderers for results whose producing module does not define its own ``docs_table``.

Each function takes the plain JSON data of one committed results file and returns a whole Markdown table (see
:mod:`torchgcc.app.docs`). A renderer belongs next to the code that writes its JSON; these live here because that
code is a benchmark script or a module that has no renderer yet, and may move there.
"""

from __future__ import annotations

from typing import Any, Mapping

from torchgcc.app.tables import markdown_table

__all__ = ["rates"]

Data = Mapping[str, Any]


def rates(data: Data) -> str:
    """``torchgcc reproduce rates``: its ``table.md`` (MSE against N, one column per series)."""
    return markdown_table(data["records"], setting="N")
