"""What ``torch.compile`` and ``torch.jit.trace`` cannot record, and how torchgcc says so.

A decode whose control flow depends on the data (the check's read back, the first call's calibration, a straggler
model's generator) cannot be one compiled graph. :func:`graph_break` ends the graph there with the reason: without
``fullgraph`` the rest runs in another graph or eagerly, and with ``fullgraph=True`` Dynamo stops with an error whose
explanation is that reason, which says what to do. ``torch.jit.trace`` would freeze such a branch silently, so the
modules raise instead (where ``torch.jit.is_tracing()``).
"""

from __future__ import annotations

import sys

import torch

__all__ = ["graph_break"]


def graph_break(reason: str) -> None:
    """Under ``torch.compile``: end the graph here, with ``reason`` as the explanation of the error that
    ``fullgraph=True`` raises. Does nothing outside ``torch.compile``."""
    if torch.compiler.is_compiling():
        sys.modules["torch._dynamo"].graph_break(msg=reason)  # imported by whatever is compiling
