"""Every registered code, every shipped decoder variant, and a code a user registers, pass
:class:`code_contract.CodeContract`."""

from __future__ import annotations

import pytest
import torch
from code_contract import CodeContract, K, N

import torchgcc
from torchgcc.codes.catalog import CODES
from torchgcc.codes.maps import Decoder, Encoder

#: Required arguments of registered codes that have no default.
REQUIRED = {"lcc": {"degree": 1}}


@pytest.mark.parametrize("name", torchgcc.list_codes())
class TestRegisteredCodes(CodeContract):
    @pytest.fixture(autouse=True)
    def _name(self, name):
        self.name = name
        if name == "uncoded":  # N = K
            self.num_workers = K

    def make(self, **options) -> torchgcc.Code:
        return torchgcc.make_code(
            self.name, num_inputs=K, num_workers=self.num_workers, **REQUIRED.get(self.name, {}), **options
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


@pytest.mark.parametrize("variant", sorted(VARIANTS))
class TestDecoderVariants(CodeContract):
    @pytest.fixture(autouse=True)
    def _variant(self, variant):
        self.name, self.options = VARIANTS[variant]

    def make(self, **options) -> torchgcc.Code:
        return torchgcc.make_code(self.name, num_inputs=K, num_workers=N, **{**self.options, **options})


@pytest.mark.parametrize("variant", sorted(UNCHECKED))
class TestUncheckedVariants(CodeContract):
    checked = False

    @pytest.fixture(autouse=True)
    def _variant(self, variant):
        self.name, self.options = UNCHECKED[variant]

    def make(self, **options) -> torchgcc.Code:
        return torchgcc.make_code(self.name, num_inputs=K, num_workers=N, **{**self.options, **options})


class MeanDecoder(Decoder):
    """Estimates every output by the mean of the arrived results (a third party's decoder: only ``fit_matrix``)."""

    def fit_matrix(self, survivors) -> torch.Tensor:
        weights = survivors.valid / survivors.counts.unsqueeze(-1).clamp(min=1)
        return weights.to(torch.float64).unsqueeze(1).expand(-1, self.num_inputs, -1)


class MeanCode(torchgcc.Code):
    """A user's code: each worker gets the mean of the inputs; the decoder averages what arrived."""

    def __init__(self, num_inputs: int, num_workers: int, **options) -> None:
        super().__init__(num_inputs, num_workers, **options)
        alpha, beta = self._points
        self.encoder = Encoder(torch.full((num_workers, num_inputs), 1.0 / num_inputs, dtype=torch.float64))
        self.decoder = MeanDecoder(alpha, beta, min_arrived=1, **self._decoder_options)


class TestUserRegisteredCode(CodeContract):
    @pytest.fixture(autouse=True)
    def _register(self, monkeypatch):
        monkeypatch.setitem(CODES._entries, "user_mean", MeanCode)  # undone after each test
        assert "user_mean" in torchgcc.list_codes()

    def make(self, **options) -> torchgcc.Code:
        return torchgcc.make_code("user_mean", num_inputs=K, num_workers=N, **options)
