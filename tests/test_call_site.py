"""Warnings about a call name the caller's line, however the call reached the library (torchgcc.call_site)."""

import os

import torch
from helpers import caught_warnings

import torchgcc
from torchgcc import call_site


def lcc_mask() -> torch.Tensor:
    """7 of 12 workers at one end: LCC(4, 12, degree=2) extrapolates, and its weights amplify rounding past 2^12."""
    mask = torch.zeros(2, 12, dtype=torch.bool)
    mask[:, 5:] = True
    return mask


def test_every_library_warning_names_this_file_directly_or_through_coded_module():
    code = torchgcc.LCC(4, 12, degree=2)
    coded = torchgcc.CodedModule(torch.nn.Linear(3, 2), code)
    batchnorm = torchgcc.CodedModule(
        torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)), torchgcc.GCC(4, 12, lambda_dec="spacing")
    )
    calls = {
        "ConditioningWarning (decoder)": lambda: code.decoder(torch.randn(2, 12, 2), lcc_mask()),
        "ConditioningWarning (CodedModule)": lambda: coded(torch.randn(8, 3), mask=lcc_mask()),
        "CalibrationWarning": lambda: torchgcc.GCC(4, 12).decoder(torch.randn(2, 12, 2), torch.ones(2, 12).bool()),
        "BatchNorm in train mode": lambda: batchnorm(torch.randn(8, 3)),
    }
    for name, call in calls.items():
        _, caught = caught_warnings(call)
        assert caught, name
        assert {w.filename for w in caught} == {__file__}, (name, [(w.filename, w.lineno) for w in caught])


def test_the_library_and_torch_are_internal_and_the_application_and_tests_are_not():
    library = os.path.dirname(torchgcc.__file__)
    assert call_site.internal(os.path.join(library, "codes", "lcc.py"))
    assert call_site.internal(torch.nn.Module.__call__.__code__.co_filename)
    assert not call_site.internal(os.path.join(library, "app", "cli.py"))
    assert not call_site.internal(__file__)
    assert not call_site.internal(library + "_extra/module.py")  # a sibling folder whose name starts the same
