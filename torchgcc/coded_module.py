"""``CodedModule``: run any model through a code, with a straggler mask per step."""

from __future__ import annotations

import math
import warnings
from typing import Callable, Optional, Union

import torch
from torch import nn

from torchgcc.codes import Code
from torchgcc.codes.maps import eager_under_compile
from torchgcc.stragglers import StragglerModel

__all__ = ["CodedModule", "group_samples", "ungroup_samples", "ModelOutput"]

#: What ``CodedModule`` accepts from a model: a tensor, or a tuple, list or dict of tensors (each decoded).
ModelOutput = Union[torch.Tensor, tuple, list, dict]


def output_leaves(output: object) -> tuple[list, list[torch.Tensor]]:
    """Split a model output into ``(keys, tensors)``: ``([None], [t])`` for a tensor, the positions of a tuple or list,
    the keys of a dict. Anything else (a nested container, a non-tensor value) raises ``TypeError``."""
    if isinstance(output, torch.Tensor):
        return [None], [output]
    if isinstance(output, dict):
        keys, values = list(output.keys()), list(output.values())
    elif isinstance(output, (tuple, list)):
        keys, values = list(range(len(output))), list(output)
    else:
        raise TypeError(
            f"CodedModule decodes a model output that is a tensor, or a tuple, list or dict of tensors; "
            f"got {type(output).__name__}"
        )
    for key, value in zip(keys, values):
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"model output [{key!r}] is a {type(value).__name__}, not a tensor: CodedModule decodes "
                "tensors only (return the other values from a separate call)"
            )
    return keys, values


def rebuild_output(like: object, keys: list, tensors: list[torch.Tensor]) -> ModelOutput:
    """The inverse of :func:`output_leaves`: ``tensors`` in the container type of ``like``."""
    if isinstance(like, torch.Tensor):
        return tensors[0]
    if isinstance(like, dict):
        return type(like)(zip(keys, tensors))
    if isinstance(like, tuple) and hasattr(like, "_fields"):  # a namedtuple
        return type(like)(*tensors)
    return type(like)(tensors)


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

    ``model`` may return a tensor ``(B * N, *out)`` or a tuple, list or dict of such tensors (one level); each is
    decoded with the same mask and returned in the same container. Any other value raises ``TypeError``.
    A ``BatchNorm`` layer of ``model`` in train mode computes its statistics over the coded inputs, not the samples:
    ``CodedModule`` warns once (call ``model.eval()`` for inference, or train without coding).

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
        self._warned_batchnorm = False

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> ModelOutput:
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"x must be a torch.Tensor of shape (M, *in), got {type(x).__name__}; "
                "convert it with torch.as_tensor(...)"
            )
        if mask is not None and not isinstance(mask, torch.Tensor):
            raise TypeError(
                f"mask must be a bool torch.Tensor of shape (B, N), got {type(mask).__name__}; "
                "convert it with torch.as_tensor(mask, dtype=torch.bool)"
            )
        self._warn_train_batchnorm()
        num_samples = x.shape[0]
        perm = None if self.grouping is None else self.grouping(x)
        if perm is not None:
            x = x[perm]
        coded = self.code.encoder(group_samples(x, self.code.num_inputs))  # (B, N, *in)
        groups, workers = coded.shape[:2]
        output = self.run_model(coded.reshape((groups * workers,) + coded.shape[2:]))
        keys, leaves = output_leaves(output)
        mask = self.draw_mask(groups, leaves[0].device) if mask is None else mask
        if mask.shape != (groups, workers):
            raise ValueError(
                f"mask must have shape (B, N) = {(groups, workers)} for {num_samples} samples, got {tuple(mask.shape)}"
            )
        self.last_mask = mask
        decoded = [
            self.decode(leaf.reshape((groups, workers) + leaf.shape[1:]), mask, num_samples, perm) for leaf in leaves
        ]
        return rebuild_output(output, keys, decoded)

    def decode(
        self, results: torch.Tensor, mask: torch.Tensor, num_samples: int, perm: Optional[torch.Tensor]
    ) -> torch.Tensor:
        """Noise, attack and decoder on one output's ``(B, N, *out)`` results -> ``(M, *out)`` in caller order."""
        if self.noise is not None:
            results = self.noise(results, mask)
        if self.attack is not None:
            results = self.attack(results, mask.to(results.device))
        out = ungroup_samples(self.code.decoder(results, mask), num_samples)
        return out if perm is None else out[torch.argsort(perm)]

    def _warn_train_batchnorm(self) -> None:
        if self._warned_batchnorm or torch.compiler.is_compiling():
            return
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training for m in self.model.modules()):
            self._warned_batchnorm = True
            warnings.warn(
                "a BatchNorm layer of the model is in train mode: its batch statistics are computed over "
                "the coded inputs, not the samples; call model.eval() to use its running statistics",
                stacklevel=3,
            )

    @eager_under_compile  # the straggler model's generator advances eagerly, also under torch.compile
    def draw_mask(self, num_groups: int, device: Optional[torch.device] = None) -> torch.Tensor:
        """A ``(B, N)`` mask on ``device`` (the results' device in :meth:`forward`) from the straggler model (all
        True without one)."""
        if self.stragglers is None:
            return torch.ones(num_groups, self.code.num_workers, dtype=torch.bool, device=device)
        return self.stragglers.sample(num_groups, self.code.num_workers, device=device)

    def run_model(self, inputs: torch.Tensor) -> ModelOutput:
        """``model`` on ``(B * N, *in)`` coded inputs, in chunks of ``chunk_size`` (concatenated per output)."""
        if self.chunk_size is None or inputs.shape[0] <= self.chunk_size:
            return self.model(inputs)
        chunks = [self.model(chunk) for chunk in inputs.split(self.chunk_size)]
        keys, _ = output_leaves(chunks[0])
        columns = zip(*(output_leaves(chunk)[1] for chunk in chunks))
        return rebuild_output(chunks[0], keys, [torch.cat(column) for column in columns])
