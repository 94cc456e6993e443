"""Coded evaluation of a classifier as a Lightning callback: sweep codes and straggler counts on the test set.

For every test batch and every code, the batch is grouped into groups of K, encoded into N coded inputs and the
model runs ONCE on them; every straggler count S then draws its masks (shared by all codes, so the comparison is
paired) and decodes. A :class:`torchgcc.metrics.CodedMetrics` per (code, S) accumulates the MSE against the uncoded
logits, the argmax agreement and the accuracy of the decoded logits with 95% half-widths over groups (the
accumulator of :mod:`torchgcc.app.evaluate` too). At the end of the test epoch the records are logged as
``coded/<code>/S<S>/<metric>`` and rank zero writes ``results.json`` / ``results.csv`` (schema of ``torchgcc
reproduce``) and ``coded_eval.png`` (:func:`torchgcc.app.plots.plot_straggler_sweep`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer

import torchgcc
from torchgcc.app.plots import plot_straggler_sweep
from torchgcc.app.results import write_results
from torchgcc.coded_module import group_samples, ungroup_samples
from torchgcc.codes.gcc import GCVSplineDecoder
from torchgcc.metrics import CodedMetrics
from torchgcc.stragglers import FixedStragglers

#: Metrics logged per (code, S), keys of :meth:`CodedMetrics.compute`.
LOGGED_METRICS = ("mse", "agreement", "accuracy")


def _gather(value: Any) -> list[Any]:
    """``value`` of every rank, in rank order (``[value]`` without torch.distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, value)
    return parts


class CodedEvaluation(Callback):
    """Sweep ``codes`` x ``stragglers`` on the test set of ``trainer.test`` (see the module docstring).

    Args:
        codes: registered code names (``torchgcc.list_codes()``).
        num_inputs: K, inputs per group.
        num_workers: N, workers per group.
        stragglers: the straggler counts S to sweep.
        repeats: masks drawn per group and S (the decode is cheap: the model runs once per code and batch).
        placement: where the stragglers fall (``random``, ``contiguous``, ``widest_gap``).
        code_kwargs: per code name, extra keyword arguments of the code (e.g. ``{"gcc": {"lambda_dec": 1e-6}}``).
        seed: straggler seed (rank r uses ``seed + r``).
        output_dir: where rank zero writes ``results.json``, ``results.csv`` and ``coded_eval.png``;
            ``None`` writes nothing.
        provenance: extra entries for the ``config`` of ``results.json`` (recipe, data, checkpoint).
    """

    def __init__(
        self,
        *,
        codes: Sequence[str] = ("gcc", "natural", "bacc"),
        num_inputs: int = 8,
        num_workers: int = 24,
        stragglers: Sequence[int] = (0, 2, 4, 6, 8),
        repeats: int = 1,
        placement: str = "random",
        code_kwargs: dict[str, dict[str, Any]] | None = None,
        seed: int = 0,
        output_dir: str | Path | None = None,
        provenance: Mapping[str, Any] | None = None,
    ) -> None:
        unknown = set(code_kwargs or {}) - set(codes)
        if unknown:
            raise ValueError(f"code_kwargs names codes that are not swept: {sorted(unknown)}")
        kwargs = code_kwargs or {}
        self.codes = {
            name: torchgcc.make_code(name, num_inputs=num_inputs, num_workers=num_workers, **kwargs.get(name, {}))
            for name in codes
        }
        self.num_inputs, self.num_workers = num_inputs, num_workers
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        self.stragglers, self.repeats, self.placement, self.seed = list(stragglers), repeats, placement, seed
        self.output_dir = None if output_dir is None else Path(output_dir)
        self.config = {
            **(provenance or {}),
            "codes": list(codes),
            "K": num_inputs,
            "N": num_workers,
            "stragglers": self.stragglers,
            "repeats": repeats,
            "placement": placement,
            "code_kwargs": code_kwargs or {},
            "seed": seed,
            "code_repr": {name: f"{type(code).__name__}({code.extra_repr()})" for name, code in self.codes.items()},
        }
        self.records: list[dict[str, Any]] = []

    def on_test_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        seed = self.seed + trainer.global_rank
        self._masks = {
            s: FixedStragglers(num_stragglers=s, placement=self.placement, seed=seed) for s in self.stragglers
        }
        self._metrics = {(name, s): CodedMetrics(self.num_inputs) for name in self.codes for s in self.stragglers}
        for code in self.codes.values():
            code.to(pl_module.device)
        # one decoder per straggler level: a calibrating decoder (GCC's default) chooses its smoothing on the first
        # batch it decodes (validated as a CodedModule's first forward validates it), and each level is its own
        # deployment
        self._decoders = {
            (name, s): copy.deepcopy(code.decoder) for name, code in self.codes.items() for s in self.stragglers
        }

    @torch.no_grad()
    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        x, labels = batch
        reference = pl_module(x)
        groups = group_samples(x, self.num_inputs)  # (B, K, *in)
        masks = {  # (repeats, B, N), shared by all codes
            s: model.sample(self.repeats * len(groups), self.num_workers).view(self.repeats, len(groups), -1)
            for s, model in self._masks.items()
        }
        for name, code in self.codes.items():
            coded = code.encoder(groups)  # (B, N, *in)
            results = pl_module(coded.flatten(0, 1)).unflatten(0, coded.shape[:2])  # (B, N, classes)
            for s, repeated in masks.items():
                decoder, repeated = self._decoders[name, s], repeated.to(x.device)
                if isinstance(decoder, GCVSplineDecoder):  # GCC's default calibrates here, on its first batch
                    decoder.calibrate_validated(  # against the model's own outputs (G, K, classes)
                        results, repeated[0], lambda index: group_samples(reference, self.num_inputs)[index]
                    )
                for mask in repeated:
                    decoded = ungroup_samples(decoder(results, mask), len(x))  # (M, classes)
                    self._metrics[name, s].update(decoded, reference, labels)

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.records = []
        for (name, s), metrics in self._metrics.items():
            merged = CodedMetrics(self.num_inputs)
            for part in _gather(metrics):
                merged.merge(part)
            record: dict[str, Any] = {
                "scheme": name,
                "N": self.num_workers,
                "K": self.num_inputs,
                "S": s,
                "placement": self.placement,
                "repeats": self.repeats,
                **merged.compute(),
            }
            for metric in LOGGED_METRICS:
                pl_module.log(f"coded/{name}/S{s}/{metric}", record[metric], sync_dist=True)  # equal on all ranks
            self.records.append(record)
        if self.output_dir is not None and trainer.is_global_zero:
            paths = write_results(self.output_dir, config=self.config, records=self.records)
            title = (
                f"coded evaluation, K={self.num_inputs}, N={self.num_workers}, {self.placement} stragglers, "
                f"{self.repeats} repeats"
            )
            plot = plot_straggler_sweep(self.records, self.output_dir / "coded_eval.png", title=title)
            print(f"wrote {paths['json']}, {paths['csv']}, {plot}")
