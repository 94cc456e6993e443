"""The common shape of every code: points, an encoder and a decoder."""

from __future__ import annotations

from typing import TypedDict

import torch
from torch import nn

from torchgcc.checks import check_integer, check_mask
from torchgcc.codes.maps import Decoder, Encoder
from torchgcc.points import PointSpec, resolve_points

__all__ = ["Code", "DecoderOptions", "check_sizes"]


class DecoderOptions(TypedDict):
    """The :class:`Code` options that every decoder takes (:attr:`Code.decoder_options`, passed on by subclasses)."""

    nonfinite: str
    backend: str
    check: bool


def check_sizes(num_inputs: object, num_workers: object) -> tuple[int, int]:
    """``(K, N)`` if they are positive integers with ``K <= N``, else a one-line error naming the argument."""
    num_inputs = check_integer("num_inputs", num_inputs, minimum=1)
    num_workers = check_integer("num_workers", num_workers, minimum=1)
    if num_inputs > num_workers:
        raise ValueError(f"num_inputs (K={num_inputs}) must not exceed num_workers (N={num_workers})")
    return num_inputs, num_workers


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
        num_inputs, num_workers = check_sizes(num_inputs, num_workers)
        self.num_inputs = num_inputs
        self.num_workers = num_workers
        self._points = (
            resolve_points(alpha, num_inputs, name="alpha", count_name="num_inputs"),
            resolve_points(beta, num_workers, name="beta", count_name="num_workers"),
        )
        self._decoder_options: DecoderOptions = {"nonfinite": nonfinite, "backend": backend, "check": check}

    @property
    def points(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(alpha, beta)``: the regression points ``(K,)`` and worker points ``(N,)`` resolved from the
        constructor's ``alpha=`` and ``beta=`` (float64, ascending, on [-1, 1]), for a subclass to build its encoder
        and decoder from."""
        return self._points

    @property
    def decoder_options(self) -> DecoderOptions:
        """The constructor's decoder options (``nonfinite``, ``backend``, ``check``), for a subclass to pass to its
        :class:`Decoder`."""
        return self._decoder_options.copy()  # a copy: the code's own stay as built

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
        *which* workers arrived (replication) override it, checking ``mask`` with the same
        :func:`~torchgcc.checks.check_mask`. Engines end a wait once every group is decodable.

        Raises ``TypeError`` (not a bool tensor) or ``ValueError`` (not ``(B, N)``) naming ``mask``, as the decoder
        does."""
        return check_mask(mask, self.num_workers).sum(dim=-1) >= self.min_arrived

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors):
        """Before anything is loaded: a ``ValueError`` naming the first entry that does not fit (another shape, or
        with ``strict`` an entry missing or unexpected): such a state dict comes from a code built otherwise. The
        loaded points then define the code (its decoder derives its layout from them)."""
        own = self.state_dict(prefix=prefix, keep_vars=True)
        for key, value in own.items():
            if key in state_dict and tuple(state_dict[key].shape) != tuple(value.shape):
                raise ValueError(
                    f"state_dict does not fit this {type(self).__name__}({self.extra_repr()}): {key} has shape "
                    f"{tuple(state_dict[key].shape)}, this code's {tuple(value.shape)}; load it into a code built "
                    "with the same arguments"
                )
        if strict:
            theirs = {key for key in state_dict if key.startswith(prefix)}
            missing, unexpected = sorted(set(own) - theirs), sorted(theirs - set(own))
            if missing or unexpected:
                raise ValueError(
                    f"state_dict does not fit this {type(self).__name__}({self.extra_repr()}): missing {missing}, "
                    f"unexpected {unexpected}; it was saved from another code or lambda_dec: load it into a code "
                    "built with the same arguments (or pass strict=False)"
                )
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Encode and decode with the identity computation: ``(B, K, *feat) -> (B, K, *feat)`` (a sanity check)."""
        return self.decoder(self.encoder(x), mask)

    def extra_repr(self) -> str:
        return f"num_inputs={self.num_inputs}, num_workers={self.num_workers}"
