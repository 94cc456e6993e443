"""Coded inference against the uncoded model: MSE and argmax agreement with 95% confidence intervals.

The statistics come from :class:`torchgcc.metrics.CodedMetrics`: the unit of the confidence intervals is the GROUP
of K inputs coded together (every group draws its own straggler mask, so groups, pooled over repeats, are
independent samples of the coded-inference error).

Every scheme in a sweep decodes the SAME masks at a given setting, so the comparison between codes is paired.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Mapping, Sequence

import torch

from torchgcc.coded_module import group_samples, ungroup_samples
from torchgcc.codes import Code
from torchgcc.codes.gcc import GCVSplineDecoder
from torchgcc.metrics import CodedMetrics
from torchgcc.optional import require
from torchgcc.stragglers import StragglerModel

__all__ = ["evaluate_coded", "evaluate_sweep", "model_outputs"]


@torch.no_grad()
def model_outputs(
    model: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor, *, batch_size: int = 4096
) -> torch.Tensor:
    """The uncoded outputs ``(M, *out)`` of ``model`` on ``inputs`` ``(M, *in)``, computed in batches."""
    return torch.cat([model(inputs[i : i + batch_size]) for i in range(0, len(inputs), batch_size)])


@torch.no_grad()
def evaluate_coded(
    model: Callable[[torch.Tensor], torch.Tensor],
    code: Code,
    inputs: torch.Tensor,
    masks: torch.Tensor,
    *,
    reference: torch.Tensor | None = None,
    classification: bool = True,
    batch_size: int = 4096,
) -> dict[str, float]:
    """Coded inference of ``model`` on ``inputs`` ``(M, *in)`` under each of ``masks`` ``(R, B, N)``.

    ``B = ceil(M / K)`` groups per repeat, ``R`` repeats. This is :class:`torchgcc.CodedModule`'s pipeline
    (group, encode, run the model on the ``B * N`` coded inputs, decode, ungroup) with the workers' results computed
    once and decoded under every mask, since they do not depend on the mask. A decoder that calibrates (GCC's
    default) calibrates as a ``CodedModule``'s first forward does: on the pooled groups of the first repeat,
    validated against ``model``'s outputs on those groups' samples (every worker's result is at hand here, so the
    validation's drawn straggler sets read no extra model run). ``reference`` ``(M, *out)`` defaults to
    the uncoded outputs; ``model`` should be in eval mode. Returns :class:`~torchgcc.metrics.CodedMetrics`' ``mse``,
    ``mse_ci`` and, when ``classification``, ``agreement``, ``agreement_ci`` (argmax agreement with the uncoded model),
    plus ``groups`` (the number of CI units, ``R * B``).
    """
    num_inputs, num_workers = code.num_inputs, code.num_workers
    num_groups = math.ceil(len(inputs) / num_inputs)
    if masks.dim() != 3 or masks.shape[1:] != (num_groups, num_workers):
        raise ValueError(
            f"masks must be (repeats, B, N) with B={num_groups}, N={num_workers}, got shape {tuple(masks.shape)}"
        )
    if reference is None:
        reference = model_outputs(model, inputs, batch_size=batch_size)
    grouped = group_samples(inputs, num_inputs)  # (B, K, *in)
    coded = code.encoder(grouped)  # (B, N, *in)
    results = model_outputs(model, coded.flatten(0, 1), batch_size=batch_size).unflatten(0, coded.shape[:2])
    decoder = code.decoder
    if isinstance(decoder, GCVSplineDecoder):  # GCC's default calibrates here, on its first batch
        decoder.calibrate_validated(
            results,
            masks[0],
            lambda index: model_outputs(model, grouped[index].flatten(0, 1), batch_size=batch_size).unflatten(
                0, (len(index), num_inputs)
            ),
        )
    metrics = CodedMetrics(num_inputs, classification=classification)
    for mask in masks:
        metrics.update(ungroup_samples(code.decoder(results, mask), len(inputs)), reference)
    stats = metrics.compute()
    del stats["samples"]
    return stats


def evaluate_sweep(
    model: Callable[[torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    *,
    codes: Mapping[str, Code],
    settings: Sequence[tuple[Mapping[str, Any], StragglerModel]],
    repeats: int,
    reference: torch.Tensor | None = None,
    classification: bool = True,
    progress: bool = True,
    desc: str = "coded inference",
) -> list[dict[str, Any]]:
    """Evaluate every code under every straggler setting, all codes on the same masks per setting.

    ``codes`` maps scheme names to codes sharing ``(K, N)``; ``settings`` pairs a record label such as
    ``{"S": 3}`` or ``{"p": 0.1}`` with a straggler model. Each setting decodes with a fresh copy of each code, so a
    decoder that calibrates on its first batch (GCC's default) calibrates under that setting's stragglers, as one
    deployed there would. Returns one record per (setting, scheme):
    ``{"scheme", "N", "K", **label, "repeats", "mse", "mse_ci", ["agreement", "agreement_ci"], "groups"}``.
    """
    tqdm = require("tqdm").tqdm
    shapes = {(code.num_inputs, code.num_workers) for code in codes.values()}
    if len(shapes) != 1:
        raise ValueError(f"all codes must share (K, N), got {sorted(shapes)}")
    ((num_inputs, num_workers),) = shapes
    num_groups = math.ceil(len(inputs) / num_inputs)
    if reference is None:
        reference = model_outputs(model, inputs)
    records = []
    bar = tqdm(total=len(settings) * len(codes), desc=desc, disable=not progress, leave=False)
    for label, stragglers in settings:
        masks = stragglers.sample(num_groups * repeats, num_workers).view(repeats, num_groups, num_workers)
        for scheme, code in codes.items():
            bar.set_postfix(scheme=scheme, **label)
            fresh = copy.deepcopy(code)
            stats = evaluate_coded(model, fresh, inputs, masks, reference=reference, classification=classification)
            records.append({"scheme": scheme, "N": num_workers, "K": num_inputs, **label, "repeats": repeats, **stats})
            bar.update()
    bar.close()
    return records
