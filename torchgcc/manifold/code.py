"""``ManifoldGCC``: GCC with the manifold-aware encoder, its decoder putting the estimates back in the caller's order.

The encoder reorders each group's inputs along the data (:class:`~torchgcc.manifold.encoding.ManifoldEncoder`); the
decoder is GCC's, followed by the inverse of that order. The order is the encoder's state from its last call, so
decode the results of the batch last encoded (as :class:`torchgcc.CodedModule` does); a decoder call whose number
of groups differs from the last encode raises.
"""

from __future__ import annotations

from typing import Any, Union

import torch
from torch import nn

from torchgcc.codes.gcc import GCC
from torchgcc.manifold.encoding import ManifoldEncoder
from torchgcc.manifold.graph import ReferenceGraph

__all__ = ["ManifoldGCC", "ReorderedDecoder"]


class ReorderedDecoder(nn.Module):
    """``base`` decoder ``(B, N, *out), mask -> (B, K, *out)``, then each group's estimates permuted back from the
    order ``encoder.last_order`` placed the inputs in."""

    def __init__(self, base: nn.Module, encoder: ManifoldEncoder) -> None:
        super().__init__()
        self.base = base
        self._encoder = [encoder]  # not a submodule: the code owns it

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:  # alpha, beta, min_arrived, num_inputs, ... of the base decoder
            return getattr(super().__getattr__("base"), name)

    def forward(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        order = self._encoder[0].last_order
        if order is None or len(order) != len(y):
            groups = "nothing" if order is None else f"{len(order)} groups"
            raise ValueError(
                f"this decoder puts back the order of the last encoded batch ({groups}), got {len(y)} groups; "
                "decode the results of the batch you encoded last"
            )
        estimates = self.base(y, mask)  # (B, K, *out), row k = the input placed at alpha_k
        inverse = order.argsort(dim=1).to(estimates.device)
        return estimates.gather(1, inverse.view(inverse.shape + (1,) * (estimates.dim() - 2)).expand_as(estimates))


class ManifoldGCC(GCC):
    """GCC whose encoder follows the data manifold (:class:`ManifoldEncoder` on ``reference``); the decoder is GCC's
    (``lambda_dec`` and the options as for :class:`GCC`), with the caller's order restored.

    Args:
        num_inputs, num_workers: K and N.
        reference: ``(M, *feat)`` samples of the data, or their :class:`ReferenceGraph` (the encoder's graph).
        neighbours, follow_paths, bandwidth_ratio, route: those of :class:`ManifoldEncoder`.
        options: those of :class:`GCC` (``lambda_dec``, points, non-finite policy, ...).
    """

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        reference: Union[torch.Tensor, ReferenceGraph],
        neighbours: int = 10,
        follow_paths: bool = True,
        bandwidth_ratio: float = 0.5,
        route: str = "euclidean",
        **options: Any,
    ) -> None:
        super().__init__(num_inputs, num_workers, **options)
        alpha, beta = self._points
        # the manifold encoder and the reordered decoder follow Encoder's and Decoder's interfaces without deriving
        encoder = ManifoldEncoder(
            alpha,
            beta,
            reference,
            neighbours=neighbours,
            follow_paths=follow_paths,
            bandwidth_ratio=bandwidth_ratio,
            route=route,
        )
        self.encoder = encoder  # type: ignore[assignment]
        self.decoder = ReorderedDecoder(self.decoder, encoder)  # type: ignore[assignment]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, manifold encoder"
