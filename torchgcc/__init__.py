"""torchgcc: General Coded Computing for PyTorch."""

from torchgcc import functional, metrics, points, stragglers
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
