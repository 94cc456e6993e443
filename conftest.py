"""Settings for every test, the notebooks included.

- ``TORCHGCC_CACHE`` points at a temporary folder for the whole session (removed at the end), so no test and no
  notebook writes the user's model cache.
- Every test starts from the global seed ``TORCHGCC_TEST_SEED`` (default 0) for torch, numpy and ``random``. No test
  may depend on which value it is: ``TORCHGCC_TEST_SEED=1 pytest`` and ``=2`` must pass too.
- The library's doctests (``--doctest-modules`` in pyproject.toml) import every module of ``torchgcc/``: the Triton
  kernels only where Triton is installed, torchgcc.integrations.trl only with the [trl] extra.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import tempfile

import numpy as np
import pytest
import torch

collect_ignore = [] if importlib.util.find_spec("triton") else ["torchgcc/functional/fused_decode.py"]
if importlib.util.find_spec("trl") is None:  # the [trl] extra
    collect_ignore.append("torchgcc/integrations/trl")

GLOBAL_SEED = int(os.environ.get("TORCHGCC_TEST_SEED", "0"))
_CACHE = tempfile.mkdtemp(prefix="torchgcc-test-cache-")
os.environ["TORCHGCC_CACHE"] = _CACHE  # before any test or notebook kernel starts


def pytest_report_header() -> str:
    return f"torchgcc: global seed {GLOBAL_SEED} (TORCHGCC_TEST_SEED), model cache {_CACHE}"


def pytest_unconfigure() -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def global_seed() -> int:
    """Seed torch, numpy and ``random`` with ``TORCHGCC_TEST_SEED`` before every test; returns the seed."""
    torch.manual_seed(GLOBAL_SEED)
    np.random.seed(GLOBAL_SEED)
    random.seed(GLOBAL_SEED)
    return GLOBAL_SEED
