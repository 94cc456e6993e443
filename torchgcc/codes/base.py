"""The common shape of every code: points, an encoder and a decoder."""

from __future__ import annotations

from typing import TypedDict

import torch
from torch import nn

from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.points import PointSpec, resolve_points

__all__ = ["Code", "DecoderOptions"]


class DecoderOptions(TypedDict):
    """The :class:`Code` options that every decoder takes (``Code._decoder_options``, passed on by subclasses)."""

    nonfinite: str
    backend: str
    check: bool


class Code(nn.Module):
    """A coded-computing scheme for ``K = num_inputs`` inputs on ``N = num_workers`` workers.

    Subclasses build ``self.encoder`` (:class:`Encoder`, ``(B, K, *feat) -> (B, N, *feat)``) and ``self.decoder``
    (:class:`Decoder`, ``(B, N, *out), mask (B, N) -> (B, K, *out)``) from the regression points ``alpha`` ``(K,)``
    and worker points ``beta`` ``(N,)``, both float64 on [-1, 1] and ascending, and pass their remaining keyword
    arguments (the options below) to this constructor.

    >>> import torchgcc
    >>> code = torchgcc.GCC(num_inputs=4, num_workers=12)
    >>> x = torch.randn(5, 4, 3)  # B = 5 groups of K = 4 inputs, 3 features each
    >>> y = code.encoder(x)  # (B, N, 3): one coded input per worker
    >>> mask = torch.ones(5, 12, dtype=torch.bool)
    >>> mask[:, [2, 7]] = False  # workers 2 and 7 straggle in every group
    >>> code.decoder(y, mask).shape  # the K estimates from the 10 results that arrived
    torch.Size([5, 4, 3])

    Args:
        num_inputs: K, the inputs coded together.
        num_workers: N >= K, the workers.
        alpha: regression points, a rule of :data:`torchgcc.points.POINT_RULES` or K increasing values.
        beta: worker points, likewise with N values.
        nonfinite: the decoder's handling of a NaN/Inf result from a worker that arrived (see :class:`Decoder`).
        backend: how the decoder builds its matrices, ``"auto"``, ``"torch"``, ``"triton"`` or ``"numba"`` (see
            :data:`torchgcc.codes.maps.BACKENDS`; ``"triton"`` and ``"numba"`` raise ``ValueError`` for a decoder
            without kernels).
        check: validate every decode with one read back from the device (``True``) or never synchronise with the
            host (``False``; see :class:`Decoder`). The encoder never synchronises.
    """

    encoder: Encoder
    decoder: Decoder

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        alpha: PointSpec = "chebyshev1",
        beta: PointSpec = "chebyshev2",
        nonfinite: str = "error",
        backend: str = "auto",
        check: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (("num_inputs", num_inputs), ("num_workers", num_workers)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if num_inputs > num_workers:
            raise ValueError(f"num_inputs (K={num_inputs}) must not exceed num_workers (N={num_workers})")
        self.num_inputs = num_inputs
        self.num_workers = num_workers
        self._points = (
            resolve_points(alpha, num_inputs, name="alpha", count_name="num_inputs"),
            resolve_points(beta, num_workers, name="beta", count_name="num_workers"),
        )
        self._decoder_options: DecoderOptions = {"nonfinite": nonfinite, "backend": backend, "check": check}

    @property
    def alpha(self) -> torch.Tensor:
        """``(K,)`` float64 regression points."""
        return self.decoder.alpha

    @property
    def beta(self) -> torch.Tensor:
        """``(N,)`` float64 worker points."""
        return self.decoder.beta

    @property
    def min_arrived(self) -> int:
        """The fewest arrived results the decoder accepts."""
        return self.decoder.min_arrived

    def decodable(self, mask: torch.Tensor) -> torch.Tensor:
        """``(B,)`` bool: which groups of the ``(B, N)`` bool ``mask`` this code decodes fully (every estimate from
        enough arrived results). The default: at least :attr:`min_arrived` arrived; codes whose needs depend on
        *which* workers arrived (replication) override it. Engines end a wait once every group is decodable."""
        return mask.sum(dim=-1) >= self.min_arrived

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Encode and decode with the identity computation: ``(B, K, *feat) -> (B, K, *feat)`` (a sanity check)."""
        return self.decoder(self.encoder(x), mask)

    def extra_repr(self) -> str:
        return f"num_inputs={self.num_inputs}, num_workers={self.num_workers}"
