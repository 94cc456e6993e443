"""``CodedModule``: run any model through a code, with a straggler mask per step."""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from torchgcc.codes import Code
from torchgcc.codes.maps import eager_under_compile
from torchgcc.stragglers import StragglerModel

__all__ = ["CodedModule", "group_samples", "ungroup_samples"]


def group_samples(x: torch.Tensor, num_inputs: int) -> torch.Tensor:
    """``(M, *in) -> (ceil(M / K), K, *in)``; the last group is padded by repeating the last sample.

    Repeating a real sample keeps the padded coded inputs on the data's own path (zeros would be an outlier input).
    """
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"expected a non-empty batch of samples, got shape {tuple(x.shape)}")
    groups = math.ceil(x.shape[0] / num_inputs)
    pad = groups * num_inputs - x.shape[0]
    if pad:
        x = torch.cat([x, x[-1:].expand((pad,) + x.shape[1:])])
    return x.reshape((groups, num_inputs) + x.shape[1:])


def ungroup_samples(y: torch.Tensor, num_samples: int) -> torch.Tensor:
    """``(B, K, *out) -> (num_samples, *out)``, dropping the padding of :func:`group_samples`."""
    return y.reshape((-1,) + y.shape[2:])[:num_samples]


class CodedModule(nn.Module):
    """Coded computing around ``model``: ``forward(x)`` with ``x`` ``(M, *in)`` returns ``(M, *out)``.

    The batch is grouped by ``K = code.num_inputs`` (the last group padded), each group is encoded into
    ``N = code.num_workers`` coded inputs, ``model`` runs once on all ``B * N`` coded inputs (in chunks of
    ``chunk_size`` if given), a ``(B, N)`` mask is drawn from ``stragglers`` (or taken from ``mask=``; all workers
    arrive when neither is given), and the decoder estimates the outputs of the original samples. Gradients flow
    through encoder and decoder into ``model``.

    Options for the settings of the GCC family (all off by default):

    - ``noise``: ``noise(results, mask) -> results`` applied to the workers' results (:mod:`torchgcc.noise`);
    - ``attack``: ``attack(results, mask) -> results`` after the noise, corrupting arrived results as adversarial
      workers would (:mod:`torchgcc.attacks`); pair it with a robust code (:class:`torchgcc.codes.robust.RobustGCC`);
    - ``grouping``: ``grouping(x) -> permutation (M,)`` choosing which samples are coded together and in which order
      (:class:`torchgcc.manifold.ManifoldGrouping`); outputs come back in the caller's order.

    Attributes:
        last_mask: the ``(B, N)`` mask of the last forward.
    """

    def __init__(
        self,
        model: nn.Module,
        code: Code,
        stragglers: Optional[StragglerModel] = None,
        *,
        chunk_size: Optional[int] = None,
        noise: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
        attack: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
        grouping: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> None:
        super().__init__()
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
        self.model = model
        self.code = code
        self.stragglers = stragglers
        self.chunk_size = chunk_size
        self.last_mask: Optional[torch.Tensor] = None
        self.noise, self.attack, self.grouping = noise, attack, grouping

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        num_samples = x.shape[0]
        perm = None if self.grouping is None else self.grouping(x)
        if perm is not None:
            x = x[perm]
        coded = self.code.encoder(group_samples(x, self.code.num_inputs))  # (B, N, *in)
        groups, workers = coded.shape[:2]
        results = self.run_model(coded.reshape((groups * workers,) + coded.shape[2:]))
        results = results.reshape((groups, workers) + results.shape[1:])
        mask = self.draw_mask(groups, results.device) if mask is None else mask
        if mask.shape != (groups, workers):
            raise ValueError(f"mask must have shape (B, N) = {(groups, workers)} for {num_samples} samples, got {tuple(mask.shape)}")
        self.last_mask = mask
        if self.noise is not None:
            results = self.noise(results, mask)
        if self.attack is not None:
            results = self.attack(results, mask.to(results.device))
        out = ungroup_samples(self.code.decoder(results, mask), num_samples)
        return out if perm is None else out[torch.argsort(perm)]

    @eager_under_compile  # the straggler model's generator advances eagerly, also under torch.compile
    def draw_mask(self, num_groups: int, device: Optional[torch.device] = None) -> torch.Tensor:
        """A ``(B, N)`` mask on ``device`` (the results' device in :meth:`forward`) from the straggler model (all
        True without one)."""
        if self.stragglers is None:
            return torch.ones(num_groups, self.code.num_workers, dtype=torch.bool, device=device)
        return self.stragglers.sample(num_groups, self.code.num_workers, device=device)

    def run_model(self, inputs: torch.Tensor) -> torch.Tensor:
        """``model`` on ``(B * N, *in)`` coded inputs, in chunks of ``chunk_size``."""
        if self.chunk_size is None or inputs.shape[0] <= self.chunk_size:
            return self.model(inputs)
        return torch.cat([self.model(chunk) for chunk in inputs.split(self.chunk_size)])
