"""``RouteGCC``: GCC with the route encoder; its decoder evaluates at each group's regression points and puts the
estimates back in the caller's order.

The encoder reorders each group's inputs and may place them at per-group regression points
(:class:`~torchgcc.manifold.encoding.RouteEncoder`); the decoder is GCC's smoothing spline through the surviving
results, evaluated at those points, followed by the inverse of that order. Both are the encoder's state from its last
call, so decode the results of the batch last encoded (as :class:`torchgcc.CodedModule` does); a decoder call whose
number of groups differs from the last encode raises.
"""

from __future__ import annotations

from typing import Any, Union

import torch
from torch import nn

from torchgcc.codes.gcc import GCC, GCVSplineDecoder, SplineDecoder
from torchgcc.functional import smoothing_spline_matrix
from torchgcc.manifold.encoding import RouteEncoder
from torchgcc.manifold.graph import ReferenceGraph

__all__ = ["RouteDecoder", "RouteGCC"]


class RouteDecoder(nn.Module):
    """``(B, N, *out), mask -> (B, K, *out)``: the ``base`` spline decoder's estimates at the regression points of the
    last encoded batch (``encoder.last_alpha``, or the code's), each group's put back from ``encoder.last_order``.

    With per-group points the matrices are built per group (``smoothing_spline_matrix`` of the survivors at the
    group's points, smoothing ``base.lam_for(survivors)``; a default decoder calibrates on its first call first).
    """

    base: SplineDecoder

    def __init__(self, base: SplineDecoder, encoder: RouteEncoder) -> None:
        super().__init__()
        self.base = base
        self._encoder = [encoder]  # not a submodule: the code owns it

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:  # alpha, beta, min_arrived, num_inputs, ... of the base decoder
            return getattr(super().__getattr__("base"), name)

    def forward(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        encoder = self._encoder[0]
        order = encoder.last_order
        if order is None or len(order) != len(y):
            groups = "nothing" if order is None else f"{len(order)} groups"
            raise ValueError(
                f"this decoder puts back the order of the last encoded batch ({groups}), got {len(y)} groups; "
                "decode the results of the batch you encoded last"
            )
        if encoder.last_alpha is None:
            estimates = self.base(y, mask)  # (B, K, *out), row k = the input placed at alpha_k
        else:
            estimates = self._at_points(y, mask, encoder.last_alpha)
        inverse = order.argsort(dim=1).to(estimates.device)
        return estimates.gather(1, inverse.view(inverse.shape + (1,) * (estimates.dim() - 2)).expand_as(estimates))

    def _at_points(self, y: torch.Tensor, mask: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """The smoothing spline through each group's survivors evaluated at its own points ``alpha`` ``(B, K)``."""
        base = self.base
        y, mask = base.check_inputs(y, mask)
        base._check_counts(mask)
        if isinstance(base, GCVSplineDecoder) and base.calibrates and not base.calibrated:
            base.calibrate(y, mask)
        if base.depends_on_results:
            raise TypeError("per-group regression points need a mask-only smoothing rule (not lambda_dec='gcv')")
        flat = y.reshape(y.shape[0], base.num_workers, -1)
        counts = mask.sum(dim=1)
        lam = torch.as_tensor(base.lam_for(counts), dtype=torch.float64)
        out = []
        for group in range(len(y)):
            arrived = mask[group]
            matrix = smoothing_spline_matrix(base.beta[arrived], alpha[group].to(base.beta), lam[group])
            out.append(matrix @ flat[group, arrived].to(torch.float64))
        return torch.stack(out).to(y.dtype).reshape((len(y), base.num_inputs) + y.shape[2:])


class RouteGCC(GCC):
    """GCC whose encoder draws each group's coded samples along a short path through its inputs
    (:class:`RouteEncoder`: the shortest straight-line route, centripetal regression points, by default); the decoder
    is GCC's (``lambda_dec`` and the options as for :class:`GCC`; a mask-only rule when the points are per group),
    evaluated at the encoder's points, with the caller's order restored.

    Args:
        num_inputs, num_workers: K and N.
        reference: ``(M, *feat)`` samples of the data, or their :class:`ReferenceGraph`: only for the graph options.
        order, points, follow_paths, neighbours, bandwidth_ratio: those of :class:`RouteEncoder`.
        options: those of :class:`GCC` (``lambda_dec``, points, non-finite policy, ...).
    """

    def __init__(
        self,
        num_inputs: int,
        num_workers: int,
        *,
        reference: Union[torch.Tensor, ReferenceGraph, None] = None,
        order: str = "route",
        points: str = "centripetal",
        follow_paths: bool = False,
        neighbours: int = 10,
        bandwidth_ratio: float = 0.5,
        **options: Any,
    ) -> None:
        super().__init__(num_inputs, num_workers, **options)
        alpha, beta = self._points
        # the route encoder and decoder follow Encoder's and Decoder's interfaces without deriving
        encoder = RouteEncoder(
            alpha,
            beta,
            reference,
            order=order,
            points=points,
            follow_paths=follow_paths,
            neighbours=neighbours,
            bandwidth_ratio=bandwidth_ratio,
        )
        self.encoder = encoder  # type: ignore[assignment]
        assert isinstance(self.decoder, SplineDecoder)
        self.decoder = RouteDecoder(self.decoder, encoder)  # type: ignore[assignment]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, route encoder"
