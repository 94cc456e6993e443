"""Codes: an encoder ``(B, K, *feat) -> (B, N, *feat)`` and a decoder ``(B, N, *out), mask -> (B, K, *out)``."""

from torchgcc.codes.bacc import BACC
from torchgcc.codes.base import Code
from torchgcc.codes.catalog import CODES, list_codes, make_code, register_code
from torchgcc.codes.gcc import GCC, CalibrationWarning
from torchgcc.codes.lcc import LCC, ConditioningWarning
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.codes.replication import Replication
from torchgcc.codes.robust import RobustGCC
from torchgcc.codes.uncoded import Uncoded

__all__ = [
    "BACC",
    "CODES",
    "CalibrationWarning",
    "Code",
    "ConditioningWarning",
    "Decoder",
    "Encoder",
    "GCC",
    "LCC",
    "Replication",
    "RobustGCC",
    "Uncoded",
    "list_codes",
    "make_code",
    "register_code",
]
