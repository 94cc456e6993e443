"""Every registered code, and a code a user registers, passes :class:`code_contract.CodeContract`."""

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

    def make(self, **options) -> torchgcc.Code:
        return torchgcc.make_code(self.name, num_inputs=K, num_workers=N, **REQUIRED.get(self.name, {}), **options)


class MeanDecoder(Decoder):
    """Estimates every output by the mean of the arrived results (a third party's decoder: only ``fit_matrix``)."""

    def fit_matrix(self, knots: torch.Tensor) -> torch.Tensor:
        return knots.new_full((knots.shape[0], self.num_inputs, knots.shape[1]), 1.0 / knots.shape[1])


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
