"""torchgcc: General Coded Computing for PyTorch."""

import importlib
from typing import Any

from torchgcc import functional, points, stragglers
from torchgcc.coded_module import CodedModule
from torchgcc.codes import BACC, GCC, LCC, Code, list_codes, make_code, register_code

__version__ = "0.1.0"

__all__ = [
    "BACC",
    "CodedModule",
    "Code",
    "GCC",
    "LCC",
    "functional",
    "list_codes",
    "make_code",
    "metrics",
    "points",
    "register_code",
    "stragglers",
]


def __getattr__(name: str) -> Any:
    # torchgcc.metrics pulls in torchmetrics (about 2 s); import it on first use only.
    if name == "metrics":
        return importlib.import_module("torchgcc.metrics")
    raise AttributeError(f"module 'torchgcc' has no attribute {name!r}")
