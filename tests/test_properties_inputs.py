"""Property tests: what the public API accepts and how it refuses the rest.

- Numbers given as anything (strings, None, floats, NaN, bools, out of range) to the constructors: the object is
  built exactly when an independent predicate says the value is valid; otherwise one ``TypeError`` / ``ValueError``
  raised by torchgcc, one line, naming the argument.
- Point sets of any values: accepted exactly when finite, strictly increasing and on [-1, 1].
- ``CodedModule`` with ``chunk_size``: for a model whose output (a tensor, tuple, list or dict, the dict's key order
  drawn per call) keeps its structure, the chunked result equals the unchunked one bit for bit; a model whose
  structure changes between chunks is refused, naming the chunk.
"""

from __future__ import annotations

import math
import traceback
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from properties import PROFILE, masks

import torchgcc
from torchgcc.codes import RobustGCC
from torchgcc.points import resolve_points
from torchgcc.stragglers import BernoulliStragglers, FixedStragglers, LatencyStragglers

PACKAGE = Path(torchgcc.__file__).resolve().parent

#: Anything a user might pass for a number.
ANYTHING = st.one_of(
    st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.integers(-3, 40).map(str),
    st.lists(st.integers(0, 3), max_size=2),
)


def is_int(value, low=None, high=None) -> bool:
    ok = isinstance(value, int) and not isinstance(value, bool)
    return ok and (low is None or value >= low) and (high is None or value <= high)


def is_real(value, low=None, high=None, *, low_open=False, high_open=False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    above = low is None or (value > low if low_open else value >= low)
    below = high is None or (value < high if high_open else value <= high)
    return above and below


def assert_refused_clearly(build, names: list[str]) -> None:
    """``build()`` raises one TypeError or ValueError from torchgcc's own code, on one line, naming one of
    ``names``."""
    with pytest.raises((TypeError, ValueError)) as raised:
        build()
    message = str(raised.value)
    innermost = traceback.extract_tb(raised.value.__traceback__)[-1].filename
    assert Path(innermost).resolve().is_relative_to(PACKAGE), f"raised outside torchgcc: {innermost}"
    assert "\n" not in message and any(name in message for name in names), message


CONSTRUCTORS = {
    # name -> (build(value), argument names a refusal must mention, is the value valid)
    "GCC num_workers": (lambda v: torchgcc.GCC(2, v), ["num_workers", "num_inputs"], lambda v: is_int(v, 2)),
    "BACC num_inputs": (lambda v: torchgcc.BACC(v, 6), ["num_inputs"], lambda v: is_int(v, 1, 6)),
    "LCC degree": (lambda v: torchgcc.LCC(2, 8, degree=v), ["degree", "workers"], lambda v: is_int(v, 1, 7)),
    "GCC lambda_dec": (
        lambda v: torchgcc.GCC(2, 6, lambda_dec=v),
        ["lambda_dec"],
        lambda v: v in ("adaptive", "gcv", "spacing") or is_real(v, 0),
    ),
    "RobustGCC q": (lambda v: RobustGCC(2, 6, q=v), ["q"], lambda v: is_int(v, 0, 5)),
    "RobustGCC c": (lambda v: RobustGCC(2, 6, q=1, c=v), ["c"], lambda v: is_real(v, 0)),
    "FixedStragglers num_stragglers": (lambda v: FixedStragglers(v), ["num_stragglers"], lambda v: is_int(v, 0)),
    "FixedStragglers seed": (lambda v: FixedStragglers(1, seed=v), ["seed"], lambda v: v is None or is_int(v)),
    "BernoulliStragglers p": (
        lambda v: BernoulliStragglers(v),
        ["p"],
        lambda v: is_real(v, 0, 1, high_open=True),
    ),
    "LatencyStragglers deadline": (
        lambda v: LatencyStragglers(deadline=v),
        ["deadline"],
        lambda v: v is None or is_real(v, 0, low_open=True),
    ),
    "FixedStragglers.sample num_groups": (
        lambda v: FixedStragglers(1, seed=0).sample(v, 4),
        ["num_groups"],
        lambda v: is_int(v, 0),
    ),
}


@pytest.mark.parametrize("argument", list(CONSTRUCTORS))
@PROFILE
@given(value=ANYTHING)
def test_numbers_are_accepted_exactly_when_valid_and_refused_naming_the_argument(argument, value):
    build, names, valid = CONSTRUCTORS[argument]
    if valid(value):
        build(value)
    else:
        assert_refused_clearly(lambda: build(value), names)


@PROFILE
@given(
    values=st.lists(st.floats(-3, 3) | st.sampled_from([-1.0, 1.0, 0.0, math.nan, math.inf]), min_size=1, max_size=6)
)
def test_points_are_accepted_exactly_when_finite_increasing_and_on_the_unit_interval(values):
    valid = all(math.isfinite(v) and -1 <= v <= 1 for v in values) and all(b > a for a, b in zip(values, values[1:]))
    if valid:
        assert resolve_points(values, len(values), name="beta").tolist() == values
        torchgcc.BACC(1, len(values), beta=values)
    else:
        assert_refused_clearly(lambda: torchgcc.BACC(1, len(values), beta=values), ["beta"])


class DrawnModel:
    """A row-wise model whose output is a ``kind`` container of ``leaves`` tensors (leaf ``i``: ``(i + 1) * t``,
    trailing shape ``(*in, i + 1)``); a dict's key order is shuffled on every call, and with ``change_at`` the call of
    that index returns one leaf fewer (a structure change)."""

    def __init__(self, kind: str, leaves: int, orders: list[list[int]], change_at: int | None = None) -> None:
        self.kind, self.leaves, self.orders, self.change_at, self.calls = kind, leaves, orders, change_at, 0

    def __call__(self, t: torch.Tensor):
        call, self.calls = self.calls, self.calls + 1
        count = self.leaves - 1 if call == self.change_at else self.leaves
        values = [((i + 1) * t).unsqueeze(-1).expand(*t.shape, i + 1) for i in range(count)]
        if self.kind == "tensor":
            return values[0]
        if self.kind == "dict":
            order = [i for i in self.orders[call % len(self.orders)] if i < count]
            return {f"out{i}": values[i] for i in order}
        return tuple(values) if self.kind == "tuple" else list(values)


@PROFILE
@given(data=st.data())
def test_chunked_outputs_equal_unchunked_ones_whatever_the_order_of_a_dicts_keys(data):
    inputs, workers = data.draw(st.integers(1, 3), label="K"), data.draw(st.integers(3, 8), label="N")
    kind = data.draw(st.sampled_from(["tensor", "tuple", "list", "dict"]), label="output")
    leaves = 1 if kind == "tensor" else data.draw(st.integers(1, 3), label="leaves")
    orders = data.draw(st.lists(st.permutations(range(leaves)), min_size=1, max_size=4), label="key orders")
    samples, feat = data.draw(st.integers(1, 7), label="M"), data.draw(st.sampled_from([(1,), (2,), (2, 2)]))
    groups = -(-samples // inputs)
    chunk = data.draw(st.integers(1, groups * workers), label="chunk_size")
    code = torchgcc.GCC(inputs, workers, lambda_dec="spacing")
    x = torch.randn(samples, *feat, dtype=torch.float64, generator=torch.Generator().manual_seed(samples))
    mask = data.draw(masks(groups, workers, minimum=2), label="mask")
    whole = torchgcc.CodedModule(DrawnModel(kind, leaves, orders), code)(x, mask=mask)
    chunked = torchgcc.CodedModule(DrawnModel(kind, leaves, orders), code, chunk_size=chunk)(x, mask=mask)
    assert type(chunked) is type(whole)
    if kind == "tensor":
        assert torch.equal(chunked, whole)
    elif kind == "dict":
        assert sorted(chunked) == sorted(whole)
        for key in whole:
            assert torch.equal(chunked[key], whole[key]), key
    else:
        assert len(chunked) == len(whole) and all(torch.equal(a, b) for a, b in zip(chunked, whole))


@PROFILE
@given(data=st.data())
def test_an_output_whose_structure_changes_between_chunks_is_refused(data):
    workers = data.draw(st.integers(3, 8), label="N")
    kind = data.draw(st.sampled_from(["tuple", "list", "dict"]), label="output")
    leaves = data.draw(st.integers(2, 3), label="leaves")
    chunks = data.draw(st.integers(2, 4), label="chunks")
    change_at = data.draw(st.integers(1, chunks - 1), label="changing chunk")
    code = torchgcc.GCC(2, workers, lambda_dec="spacing")
    x = torch.randn(2 * chunks, 3, dtype=torch.float64)  # chunks groups of N coded inputs: one chunk per group
    coded = torchgcc.CodedModule(DrawnModel(kind, leaves, [list(range(leaves))], change_at), code, chunk_size=workers)
    with pytest.raises(ValueError, match=f"changed structure between chunks.*chunk {change_at} "):
        coded(x)
