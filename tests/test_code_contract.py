"""Every registered code, every shipped decoder variant, and the user-registered code of docs/api.md pass
:class:`torchgcc.testing.CodeContract`."""

from __future__ import annotations

import io
import re
import sys
import types
import unittest
from pathlib import Path

import pytest

import torchgcc
from torchgcc.codes.catalog import CODES
from torchgcc.testing import CodeContract

#: Required arguments of registered codes that have no default.
REQUIRED = {"lcc": {"degree": 1}}


@pytest.mark.parametrize("name", torchgcc.list_codes())
class TestRegisteredCodes(CodeContract):
    @pytest.fixture(autouse=True)
    def _name(self, name):
        self.name = name
        if name == "uncoded":  # N = K
            self.num_workers = self.num_inputs

    def make(self, **options) -> torchgcc.Code:
        return torchgcc.make_code(
            self.name,
            num_inputs=self.num_inputs,
            num_workers=self.num_workers,
            **REQUIRED.get(self.name, {}),
            **options,
        )


#: Every decoder variant the library ships beyond the registered codes' defaults: ``(name, make_code options)``.
VARIANTS = {
    "gcc-gcv": ("gcc", {"lambda_dec": "gcv"}),
    "gcc-spacing": ("gcc", {"lambda_dec": "spacing"}),
    "gcc-fixed-lambda": ("gcc", {"lambda_dec": 1e-4, "lambda_enc": 1e-6}),
    "gcc-straggle": ("gcc", {"nonfinite": "straggle"}),
    "bacc-straggle": ("bacc", {"nonfinite": "straggle"}),
    "lcc-interpolate": ("lcc", {"degree": 1, "below_threshold": "interpolate"}),
}

#: The same, with ``check=False`` (no read back from the device, held to what that promises).
UNCHECKED = {
    "gcc-unchecked": ("gcc", {"check": False}),
    "gcc-spacing-unchecked": ("gcc", {"lambda_dec": "spacing", "check": False}),
    "natural-unchecked": ("natural", {"check": False}),
    "bacc-unchecked": ("bacc", {"check": False}),
    "lcc-unchecked": ("lcc", {"degree": 1, "check": False}),
}


class _Variant(CodeContract):
    variants: dict

    @pytest.fixture(autouse=True)
    def _variant(self, variant):
        self.name, self.options = self.variants[variant]

    def make(self, **options) -> torchgcc.Code:
        return torchgcc.make_code(
            self.name, num_inputs=self.num_inputs, num_workers=self.num_workers, **{**self.options, **options}
        )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
class TestDecoderVariants(_Variant):
    variants = VARIANTS


@pytest.mark.parametrize("variant", sorted(UNCHECKED))
class TestUncheckedVariants(_Variant):
    variants = UNCHECKED
    checked = False


API = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def documented_example() -> str:
    """The python block of docs/api.md that registers a code and tests it with ``CodeContract``."""
    (block,) = [block for block in re.findall(r"```python\n(.*?)```", API.read_text(), re.S) if "CodeContract" in block]
    return block


@pytest.fixture
def documented(monkeypatch) -> types.ModuleType:
    """docs/api.md's example as a module (importable, so that its code pickles), with its registration undone after
    the test."""
    monkeypatch.setattr(CODES, "_entries", dict(CODES._entries))
    module = types.ModuleType("api_md_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(documented_example(), str(API), "exec"), module.__dict__)  # noqa: S102 - the repository's own docs
    return module


@pytest.mark.parametrize("test", sorted(name for name in dir(CodeContract) if name.startswith("test_")))
def test_the_documented_user_code_passes_the_contract(documented, test):
    assert "mean" in torchgcc.list_codes()
    getattr(documented.TestMeanCode(), test)()


def test_the_contract_fails_a_code_that_does_not_pickle_and_runs_under_unittest(documented):
    class Unpicklable(documented.MeanCode):
        def __init__(self, num_inputs, num_workers, **options):
            super().__init__(num_inputs, num_workers, **options)
            self.scale = lambda y: y  # a lambda attribute: the module cannot be pickled

    class TestUnpicklable(CodeContract, unittest.TestCase):
        def make(self, **options):
            return Unpicklable(self.num_inputs, self.num_workers, **options)

    suite = unittest.defaultTestLoader.loadTestsFromTestCase(TestUnpicklable)
    result = unittest.TextTestRunner(stream=io.StringIO()).run(suite)
    failed = [test.id().rsplit(".", 1)[-1] for test, _ in result.failures + result.errors]
    assert failed == ["test_pickling_round_trips"]
    assert result.testsRun == len([name for name in dir(CodeContract) if name.startswith("test_")])
