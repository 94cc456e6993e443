"""What the coordinator sends and how it rebuilds outputs: a coded scheme (any core code) or the uncoded baseline.

A scheme maps a batch ``(M, *in)`` to one payload per worker ``(N, b, *in)`` and the stacked worker results
``(N, b, *out)`` (zeros where nothing arrived) back to ``(M, *out)``. Workers only ever run the model on their
payload, so they do not know which scheme is running.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from torchgcc.codes import list_codes, make_code
from torchgcc.coded_module import group_samples, ungroup_samples

__all__ = ["CodedScheme", "UncodedScheme", "make_scheme"]


class CodedScheme:
    """Encode groups of K samples into N coded inputs with ``code``; decode from the arrived results.

    Args:
        code: a core code (``encoder``, ``decoder(y, mask)``, ``min_arrived``, ``alpha`` (K,), ``beta`` (N,)).
        name: the name reported in the results.
    """

    def __init__(self, code: nn.Module, *, name: str) -> None:
        self.code = code
        self.name = name
        self.num_inputs = code.alpha.numel()
        self.num_workers = code.beta.numel()
        self.min_arrived = code.min_arrived

    def num_groups(self, num_samples: int) -> int:
        return math.ceil(num_samples / self.num_inputs)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``(M, *in) -> (N, B, *in)``, B = ceil(M / K)."""
        with torch.no_grad():
            return self.code.encoder(group_samples(x, self.num_inputs)).movedim(1, 0)

    def decode(self, results: torch.Tensor, mask: torch.Tensor, num_samples: int) -> torch.Tensor:
        """``(N, B, *out)`` and ``(B, N)`` bool -> ``(M, *out)``."""
        with torch.no_grad():
            return ungroup_samples(self.code.decoder(results.movedim(0, 1), mask), num_samples)


class UncodedScheme:
    """The baseline: split the batch into N equal shares (the last padded) and wait for every worker."""

    def __init__(self, *, num_workers: int) -> None:
        self.name = "uncoded"
        self.num_workers = num_workers
        self.min_arrived = num_workers

    def num_groups(self, num_samples: int) -> int:
        return 1

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``(M, *in) -> (N, ceil(M / N), *in)``."""
        share = math.ceil(x.shape[0] / self.num_workers)
        padding = x[-1:].expand(share * self.num_workers - x.shape[0], *x.shape[1:])
        return torch.cat([x, padding]).unflatten(0, (self.num_workers, share))

    def decode(self, results: torch.Tensor, mask: torch.Tensor, num_samples: int) -> torch.Tensor:
        if not bool(mask.all()):
            raise ValueError("the uncoded scheme needs every worker's result")
        return results.flatten(0, 1)[:num_samples]


def make_scheme(name: str, *, num_inputs: int, num_workers: int, **code_kwargs) -> CodedScheme | UncodedScheme:
    """``"uncoded"`` or any name in ``torchgcc.list_codes()`` (built with ``torchgcc.make_code``)."""
    if name == "uncoded":
        return UncodedScheme(num_workers=num_workers)
    if name not in list_codes():
        raise ValueError(f"unknown code {name!r}; choose 'uncoded' or one of {list_codes()}")
    code = make_code(name, num_inputs=num_inputs, num_workers=num_workers, **code_kwargs)
    return CodedScheme(code, name=name)
