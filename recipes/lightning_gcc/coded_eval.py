"""Coded evaluation of a classifier as a Lightning callback: sweep codes and straggler counts on the test set.

For every test batch and every code, the batch is grouped into groups of K, encoded into N coded inputs and the
model runs ONCE on them; every straggler count S then draws its masks (shared by all codes, so the comparison is
paired) and decodes. Per group we keep the MSE against the uncoded logits, the argmax agreement (RelAcc) and the
accuracy of the decoded logits; at the end of the test epoch the records (point value over all samples, 95%
half-width over groups as in :mod:`torchgcc.experiments.evaluate`) are logged as ``coded/<code>/S<S>/<metric>``
and rank zero writes ``results.json`` / ``results.csv`` (schema of ``torchgcc reproduce``) and ``coded_eval.png``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer

import torchgcc
from torchgcc.coded_module import group_samples, ungroup_samples
from torchgcc.experiments.evaluate import mean_ci
from torchgcc.experiments.results import write_results
from torchgcc.stragglers import FixedStragglers

#: Per-sample statistics ``(M,)`` kept for every (code, S): name -> fn(decoded, reference, labels). Their means
#: are :func:`torchgcc.metrics.mse`, :func:`torchgcc.metrics.argmax_agreement` and the decoded accuracy.
SAMPLE_METRICS = {
    "mse": lambda decoded, reference, labels: (decoded - reference).double().pow(2).flatten(1).mean(1),
    "relacc": lambda decoded, reference, labels: (decoded.argmax(-1) == reference.argmax(-1)).double(),
    "acc": lambda decoded, reference, labels: (decoded.argmax(-1) == labels).double(),
}


def _gather(values: list[Any]) -> list[Any]:
    """Concatenate a per-rank list over all ranks (identity without torch.distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return values
    parts: list[list[Any]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(parts, values)
    return [value for part in parts for value in part]


class CodedEvaluation(Callback):
    """Sweep ``codes`` x ``stragglers`` on the test set of ``trainer.test`` (see the module docstring).

    Args:
        codes: registered code names (``torchgcc.list_codes()``).
        num_inputs: K, inputs per group.
        num_workers: N, workers per group.
        stragglers: the straggler counts S to sweep.
        repeats: masks drawn per group and S (the decode is cheap: the model runs once per code and batch).
        placement: where the stragglers fall (``random``, ``contiguous``, ``worst``).
        code_kwargs: per code name, extra keyword arguments of the code (e.g. ``{"gcc": {"lambda_dec": 1e-6}}``).
        seed: straggler seed (rank r uses ``seed + r``).
        output_dir: where rank zero writes ``results.json``, ``results.csv`` and ``coded_eval.png``;
            ``None`` writes nothing.
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
        output_dir: str | Path | None = "torchgcc-results/coded_eval",
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
            "codes": list(codes), "K": num_inputs, "N": num_workers, "stragglers": self.stragglers,
            "repeats": repeats, "placement": placement, "code_kwargs": code_kwargs or {}, "seed": seed,
            "code_repr": {name: f"{type(code).__name__}({code.extra_repr()})" for name, code in self.codes.items()},
        }
        self.records: list[dict[str, Any]] = []

    def on_test_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        seed = self.seed + trainer.global_rank
        self._masks = {
            s: FixedStragglers(num_stragglers=s, placement=self.placement, seed=seed) for s in self.stragglers
        }
        self._groups: dict[tuple[str, int, str], list[float]] = defaultdict(list)
        self._totals: dict[tuple[str, int, str], list[float]] = defaultdict(list)
        self._plain_correct: list[float] = []
        for code in self.codes.values():
            code.to(pl_module.device)

    @torch.no_grad()
    def on_test_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        x, labels = batch
        reference = pl_module(x)
        self._plain_correct += (reference.argmax(-1) == labels).double().tolist()
        groups = group_samples(x, self.num_inputs)  # (B, K, *in)
        masks = {  # (repeats, B, N), shared by all codes
            s: model.sample(self.repeats * len(groups), self.num_workers).view(self.repeats, len(groups), -1)
            for s, model in self._masks.items()
        }
        for name, code in self.codes.items():
            coded = code.encoder(groups)  # (B, N, *in)
            results = pl_module(coded.flatten(0, 1)).unflatten(0, coded.shape[:2])  # (B, N, classes)
            for s, repeated in masks.items():
                for mask in repeated.to(x.device):
                    decoded = ungroup_samples(code.decoder(results, mask), len(x))  # (M, classes)
                    self._accumulate(name, s, decoded, reference, labels)

    def _accumulate(
        self, name: str, s: int, decoded: torch.Tensor, reference: torch.Tensor, labels: torch.Tensor
    ) -> None:
        """Group means and sums of one decode: ``decoded`` and ``reference`` ``(M, classes)``, ``labels`` ``(M,)``."""
        group = torch.arange(len(labels), device=labels.device) // self.num_inputs
        sizes = torch.bincount(group).double()
        for metric, fn in SAMPLE_METRICS.items():
            values = fn(decoded, reference, labels)
            sums = torch.zeros(len(sizes), dtype=torch.float64, device=values.device).index_add_(0, group, values)
            self._groups[name, s, metric] += (sums / sizes).tolist()
            self._totals[name, s, metric].append(values.sum().item())

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        plain = _gather(self._plain_correct)
        plain_acc = sum(plain) / len(plain)
        self.records = []
        for name in self.codes:
            for s in self.stragglers:
                record: dict[str, Any] = {"scheme": name, "N": self.num_workers, "K": self.num_inputs, "S": s,
                                          "placement": self.placement, "repeats": self.repeats}
                for metric in SAMPLE_METRICS:
                    per_group = torch.tensor(_gather(self._groups[name, s, metric]))
                    record[metric] = sum(_gather(self._totals[name, s, metric])) / (len(plain) * self.repeats)
                    record[f"{metric}_ci"] = mean_ci(per_group)[1]
                    pl_module.log(f"coded/{name}/S{s}/{metric}", record[metric], sync_dist=True)  # equal on all ranks
                record["groups"] = len(per_group)
                record["plain_acc"] = plain_acc
                self.records.append(record)
        if self.output_dir is not None and trainer.is_global_zero:
            write_results(self.output_dir, config=self.config, records=self.records, plain_acc=plain_acc)
            plot_sweep(self.records, self.output_dir / "coded_eval.png")


def plot_sweep(records: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Plot MSE (log scale), RelAcc and decoded accuracy against S, one line per scheme, with 95% CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("mse", "MSE vs uncoded logits"), ("relacc", "RelAcc (argmax agreement)"), ("acc", "accuracy of decoded"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), constrained_layout=True)
    for ax, (metric, title) in zip(axes, panels):
        for scheme in dict.fromkeys(r["scheme"] for r in records):
            rows = [r for r in records if r["scheme"] == scheme]
            ax.errorbar([r["S"] for r in rows], [r[metric] for r in rows], yerr=[r[f"{metric}_ci"] for r in rows],
                        marker="o", capsize=3, label=scheme)
        if metric == "acc":
            ax.axhline(records[0]["plain_acc"], color="0.5", ls="--", label="uncoded")
        ax.set(xlabel="stragglers S", title=title)
        ax.legend(fontsize=8)
        if metric == "mse":
            ax.set_yscale("log")
    rows = records[0]
    fig.suptitle(f"coded evaluation, K={rows['K']}, N={rows['N']}, {rows['placement']} stragglers")
    fig.savefig(path, dpi=120)
    plt.close(fig)
