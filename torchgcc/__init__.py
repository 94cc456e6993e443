"""torchgcc: General Coded Computing for PyTorch."""

from torchgcc import functional, points
from torchgcc.codes import BACC, GCC, LCC, Code, list_codes, make_code, register_code

__version__ = "0.1.0"

__all__ = ["BACC", "GCC", "LCC", "Code", "functional", "list_codes", "make_code", "points", "register_code"]
