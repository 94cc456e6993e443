"""torchgcc: General Coded Computing for PyTorch.

The public names are imported on first use (PEP 562), so ``import torchgcc`` and ``torchgcc --help`` stay fast and
``torchgcc.__version__`` needs no torch import.
"""

import importlib
import importlib.util
import logging
from typing import Any

__version__ = "0.1.0"

# the library's diagnostics go to logging.getLogger("torchgcc...."); the program decides where they are shown
logging.getLogger("torchgcc").addHandler(logging.NullHandler())

#: Public name -> the module that defines it (``None``: the name is a submodule of torchgcc). Every other submodule
#: is an attribute too, imported on first use (``torchgcc.codes.RobustGCC`` right after ``import torchgcc``).
_EXPORTS: dict[str, str | None] = {
    "BACC": "torchgcc.codes",
    "CalibrationWarning": "torchgcc.codes",
    "CodedModule": "torchgcc.coded_module",
    "Code": "torchgcc.codes",
    "ConditioningWarning": "torchgcc.codes",
    "codes": None,
    "GCC": "torchgcc.codes",
    "LCC": "torchgcc.codes",
    "attacks": None,
    "control": None,
    "distributed": None,
    "functional": None,
    "gradient_coding": None,
    "list_codes": "torchgcc.codes",
    "make_code": "torchgcc.codes",
    "manifold": None,
    "metrics": None,
    "noise": None,
    "oracles": None,
    "points": None,
    "register_code": "torchgcc.codes",
    "Replication": "torchgcc.codes",
    "serving": None,
    "stragglers": None,
    "Uncoded": "torchgcc.codes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    home = _EXPORTS.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"torchgcc.{name}") is not None:
        value = importlib.import_module(f"torchgcc.{name}")  # any subpackage, as after `import torchgcc.codes`
    else:
        raise AttributeError(f"module 'torchgcc' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
