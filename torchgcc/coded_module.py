"""``CodedModule``: run any model through a code, with a straggler mask per step."""

from __future__ import annotations

import math
import warnings
from functools import wraps
from typing import Any, Callable, Optional, Union

import torch
from torch import nn

from torchgcc.codes import Code
from torchgcc.stragglers import StragglerModel
from torchgcc.tracing import graph_break

__all__ = ["CodedModule", "ModelOutput", "group_samples", "ungroup_samples"]

#: What ``CodedModule`` accepts from a model: a tensor, or a tuple, list or dict of tensors (all decoded together).
ModelOutput = Union[torch.Tensor, tuple, list, dict]


#: Why a ``CodedModule`` that draws its masks cannot be one compiled graph (the explanation of the error that
#: ``torch.compile(fullgraph=True)`` stops with; without ``fullgraph`` the draw runs eagerly).
MASK_UNDER_COMPILE = (
    "torchgcc: CodedModule draws its straggler mask from the straggler model's generator, which torch.compile "
    "cannot trace; to compile with fullgraph=True pass mask= to the call (draw it outside the compiled call, e.g. "
    "coded.stragglers.sample(B, N))"
)


def eager_under_compile(fn):
    """Run ``fn`` eagerly under ``torch.compile`` (a graph break with the reason :data:`MASK_UNDER_COMPILE`, then
    ``torch.compiler.disable``), for code Dynamo cannot trace (a straggler model's generator). Applied at call time,
    so importing torchgcc does not import Dynamo."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        if torch.compiler.is_compiling():
            graph_break(MASK_UNDER_COMPILE)
            return torch.compiler.disable(fn)(*args, **kwargs)
        return fn(*args, **kwargs)

    return wrapper


def output_leaves(output: object, rows: int) -> tuple[list, list[torch.Tensor]]:
    """Split a model output into ``(keys, tensors)``: ``([None], [t])`` for a tensor, the positions of a tuple or list,
    the keys of a dict. Every tensor must have ``rows`` rows (one per coded input); anything else raises ``TypeError``
    or ``ValueError`` naming the output."""
    keys: list[Any]
    if isinstance(output, torch.Tensor):
        keys, values = [None], [output]
    elif isinstance(output, dict):
        keys, values = list(output.keys()), list(output.values())
    elif isinstance(output, (tuple, list)):
        keys, values = list(range(len(output))), list(output)
    else:
        raise TypeError(
            f"CodedModule decodes a model output that is a tensor, or a tuple, list or dict of tensors; "
            f"got {type(output).__name__}"
        )
    if not values:
        raise ValueError(f"the model returned an empty {type(output).__name__}: CodedModule has nothing to decode")
    for key, value in zip(keys, values):
        name = "model output" if key is None else f"model output [{key!r}]"
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{name} is a {type(value).__name__}, not a tensor: CodedModule decodes tensors only (return the "
                "other values from a separate call)"
            )
        if not value.is_floating_point():
            raise TypeError(f"{name} has dtype {value.dtype}: CodedModule decodes floating-point outputs only")
        if value.ndim == 0 or value.shape[0] != rows:
            raise ValueError(
                f"{name} has shape {tuple(value.shape)}, but the model ran on {rows} coded inputs: CodedModule needs "
                f"one output row per input row, (B * N, *out) = ({rows}, ...)"
            )
    return keys, values


def describe_output(output: object, keys: list) -> str:
    """``output``'s structure in words, for errors: ``"a tensor"``, ``"a dict with keys ['a', 'b']"``, ..."""
    if isinstance(output, torch.Tensor):
        return "a tensor"
    if isinstance(output, dict):
        return f"a {type(output).__name__} with keys {keys}"
    return f"a {type(output).__name__} of {len(keys)}"


def rebuild_output(like: ModelOutput, keys: list, tensors: list[torch.Tensor]) -> ModelOutput:
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

    The batch is grouped by ``K = code.num_inputs`` (the last group padded), each group is encoded into
    ``N = code.num_workers`` coded inputs, ``model`` runs once on all ``B * N`` coded inputs (in chunks of
    ``chunk_size`` if given), a ``(B, N)`` mask is drawn from ``stragglers`` (or taken from ``mask=``; all workers
    arrive when neither is given), and the decoder estimates the outputs of the original samples. Gradients flow
    through encoder and decoder into ``model``.

    ``model`` may return a tensor ``(B * N, *out)`` or a tuple, list or dict of such tensors (one level), returned in
    the same container. All of them are decoded in ONE decoder call (their outputs side by side, per dtype), so the
    per-group work of the decoder is done once and a data-adaptive smoothing is chosen from all outputs together.
    A ``BatchNorm`` layer of ``model`` in train mode computes its statistics over the coded inputs, not the samples:
    ``CodedModule`` warns once (call ``model.eval()`` for inference, or train without coding).

    Options for the settings of the GCC family (all off by default), applied once per forward to all outputs:

    - ``noise``: ``noise(results, mask) -> results`` applied to the workers' results (:mod:`torchgcc.noise`);
    - ``attack``: ``attack(results, mask) -> results`` after the noise, corrupting arrived results as adversarial
      workers would (:mod:`torchgcc.attacks`); pair it with a robust code (:class:`torchgcc.codes.robust.RobustGCC`);
    - ``grouping``: ``grouping(x) -> permutation (M,)`` choosing which samples are coded together and in which order
      (:class:`torchgcc.manifold.ManifoldGrouping`); outputs come back in the caller's order.

    With the code's ``check=False`` the forward never reads back from the device (capturable in a CUDA graph and by
    ``torch.compile(fullgraph=True)`` with an explicit ``mask=``); with the default ``check=True`` it reads one flag.

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
        if not callable(model):
            raise TypeError(f"model must be a torch.nn.Module (or callable), got {type(model).__name__}")
        if not isinstance(code, Code):
            raise TypeError(f"code must be a torchgcc.Code (e.g. torchgcc.GCC(K, N)), got {type(code).__name__}")
        if stragglers is not None and not isinstance(stragglers, StragglerModel):
            raise TypeError(
                f"stragglers must be a torchgcc.stragglers.StragglerModel (e.g. FixedStragglers(2)), got "
                f"{type(stragglers).__name__}"
            )
        if chunk_size is not None and (
            isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
        ):
            raise ValueError(f"chunk_size must be a positive integer (coded inputs per model call), got {chunk_size!r}")
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
        if x.ndim == 0 or x.shape[0] == 0:
            raise ValueError(f"x must be a non-empty batch of samples (M, *in), got shape {tuple(x.shape)}")
        if x.ndim == 1:
            raise ValueError(
                f"x must be a batch of samples (M, *in) with the samples' own dimensions after M, got a 1-D x of shape "
                f"{tuple(x.shape)}: pass x.unsqueeze(0) for one sample, or x.unsqueeze(-1) for {x.shape[0]} scalars"
            )
        if not x.is_floating_point():
            raise TypeError(
                f"x must be floating point (the encoder mixes samples), got {x.dtype}; cast it with .float()"
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
        keys, leaves = output_leaves(output, groups * workers)
        if mask is None:
            mask = self.draw_mask(groups, leaves[0].device)
        elif mask.shape != (groups, workers):
            raise ValueError(
                f"mask must have shape (B, N) = {(groups, workers)} for {num_samples} samples, got {tuple(mask.shape)}"
            )
        self.last_mask = mask
        decoded = self.decode([leaf.reshape((groups, workers) + leaf.shape[1:]) for leaf in leaves], mask)
        outputs = [ungroup_samples(out, num_samples) for out in decoded]
        if perm is not None:
            inverse = torch.argsort(perm)
            outputs = [out[inverse] for out in outputs]
        return rebuild_output(output, keys, outputs)

    def decode(self, results: list[torch.Tensor], mask: torch.Tensor) -> list[torch.Tensor]:
        """Noise, attack and decoder on every output's ``(B, N, *out)`` results at once (one call per dtype) ->
        ``(B, K, *out)`` each."""
        out: dict[int, torch.Tensor] = {}
        for dtype in dict.fromkeys(r.dtype for r in results):
            members = [i for i, r in enumerate(results) if r.dtype == dtype]
            flats = [results[i].reshape(results[i].shape[:2] + (-1,)) for i in members]
            joined = torch.cat(flats, 2) if len(flats) > 1 else flats[0]
            if self.noise is not None:
                joined = self.noise(joined, mask)
            if self.attack is not None:
                joined = self.attack(joined, mask.to(joined.device))
            estimates = self.code.decoder(joined, mask).split([f.shape[2] for f in flats], 2)
            for i, estimate in zip(members, estimates):
                out[i] = estimate.reshape(estimate.shape[:2] + results[i].shape[2:])
        return [out[i] for i in range(len(results))]

    def _warn_train_batchnorm(self) -> None:
        if self._warned_batchnorm or torch.compiler.is_compiling() or not isinstance(self.model, nn.Module):
            return
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training for m in self.model.modules()):
            self._warned_batchnorm = True
            warnings.warn(
                "a BatchNorm layer of the model is in train mode: its batch statistics are computed over "
                "the coded inputs, not the samples; call model.eval() to use its running statistics",
                stacklevel=3,
            )

    def draw_mask(self, num_groups: int, device: Optional[torch.device] = None) -> torch.Tensor:
        """A ``(B, N)`` mask on ``device`` (the results' device in :meth:`forward`) from the straggler model (all
        True without one, also in a compiled graph). Meta tensors (shape inference) get a mask drawn on the CPU,
        moved to ``meta``."""
        device = torch.device("cpu" if device is None else device)
        if self.stragglers is None:
            return torch.ones(num_groups, self.code.num_workers, dtype=torch.bool, device=device)
        return self._sample(num_groups, device)

    @eager_under_compile  # the straggler model's generator advances eagerly, also under torch.compile
    def _sample(self, num_groups: int, device: torch.device) -> torch.Tensor:
        if device.type == "meta":
            return self.stragglers.sample(num_groups, self.code.num_workers).to(device)
        return self.stragglers.sample(num_groups, self.code.num_workers, device=device)

    def run_model(self, inputs: torch.Tensor) -> ModelOutput:
        """``model`` on ``(B * N, *in)`` coded inputs, in chunks of ``chunk_size``, the chunks' outputs joined per key
        (a dict's by name, whatever its order; a tuple's or list's by position). Every chunk must return the
        structure of the first: the same container, keys or length, and per key the same dtype and trailing shape;
        else ``ValueError`` naming the chunk and what changed (joining by position would mix or drop outputs)."""
        if self.chunk_size is None or inputs.shape[0] <= self.chunk_size:
            return self.model(inputs)
        parts = inputs.split(self.chunk_size)
        outputs = [self.model(part) for part in parts]
        keys, first = output_leaves(outputs[0], len(parts[0]))
        columns: dict = {key: [] for key in keys}
        for index, (output, part) in enumerate(zip(outputs, parts)):
            chunk_keys, tensors = output_leaves(output, len(part))
            same_keys = set(chunk_keys) == set(keys) if isinstance(output, dict) else chunk_keys == keys
            if type(output) is not type(outputs[0]) or not same_keys:
                was, now = describe_output(outputs[0], keys), describe_output(output, chunk_keys)
                raise ValueError(
                    f"the model's output changed structure between chunks (chunk_size={self.chunk_size}): chunk 0 "
                    f"returned {was}, chunk {index} {now}; CodedModule joins the chunks' outputs, so the model must "
                    "return the same keys every call"
                )
            for key, tensor in zip(chunk_keys, tensors):
                like = first[keys.index(key)]
                if tensor.dtype != like.dtype or tensor.shape[1:] != like.shape[1:]:
                    name = "model output" if key is None else f"model output [{key!r}]"
                    raise ValueError(
                        f"{name} changed between chunks (chunk_size={self.chunk_size}): chunk 0 gave "
                        f"{like.dtype} rows of shape {tuple(like.shape[1:])}, chunk {index} {tensor.dtype} rows of "
                        f"shape {tuple(tensor.shape[1:])}; the model must return the same shapes every call"
                    )
                columns[key].append(tensor)
        return rebuild_output(outputs[0], keys, [torch.cat(columns[key]) for key in keys])
