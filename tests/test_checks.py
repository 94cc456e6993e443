"""``torchgcc.checks``: the one validation path for the numbers public constructors take."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchgcc.checks import SEED_RANGE, check_seed


@pytest.mark.parametrize("seed", [SEED_RANGE[0], -1, 0, np.int64(7), SEED_RANGE[1]])
def test_check_seed_accepts_what_torch_generators_accept(seed):
    assert (
        torch.Generator().manual_seed(check_seed("seed", seed)).initial_seed()
        == torch.Generator().manual_seed(int(seed)).initial_seed()
    )


@pytest.mark.parametrize("seed", [SEED_RANGE[0] - 1, SEED_RANGE[1] + 1])
def test_check_seed_refuses_what_torch_generators_refuse_and_names_the_argument(seed):
    with pytest.raises((ValueError, RuntimeError)):
        torch.Generator().manual_seed(seed)
    with pytest.raises(ValueError, match=rf"^start must be an integer in \[{SEED_RANGE[0]}, {SEED_RANGE[1]}\], got"):
        check_seed("start", seed)


@pytest.mark.parametrize(("seed", "error"), [("1", TypeError), (1.5, ValueError), (True, TypeError), (None, TypeError)])
def test_check_seed_refuses_non_integers(seed, error):
    with pytest.raises(error, match="^seed must be an integer"):
        check_seed("seed", seed)


def test_check_seed_takes_none_only_when_optional():
    assert check_seed("seed", None, optional=True) is None
