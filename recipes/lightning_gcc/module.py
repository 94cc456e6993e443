"""``CodedClassifier``: an image classifier that can train THROUGH a coding layer.

Plain mode trains ``backbone`` with cross-entropy. With ``coded`` set, every training step groups the batch
into groups of K, encodes each group into N coded inputs, runs the backbone on them, draws a fresh straggler
mask, decodes the K outputs from the surviving workers (:class:`torchgcc.CodedModule`) and takes the
cross-entropy of the DECODED logits (plus ``plain_loss_weight`` times the plain loss). Gradients flow through
the linear decoder and encoder, so the model learns to stay accurate on coded inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

import torchgcc
from torchgcc.metrics import argmax_agreement
from torchgcc.stragglers import FixedStragglers

from .backbones import build_backbone

#: Offset between the training and validation straggler seeds, so validation masks never repeat training ones.
VALIDATION_SEED_OFFSET = 1_000_003


@dataclass
class CodedTraining:
    """How to train through a code.

    Args:
        code: registered code name (``torchgcc.list_codes()``: gcc, natural, bacc, lcc).
        num_inputs: K, inputs per group.
        num_workers: N, coded inputs (workers) per group.
        num_stragglers: S, workers whose results are dropped in every group and step.
        placement: where the stragglers fall (``random``, ``contiguous``, ``widest_gap``).
        code_kwargs: extra keyword arguments of the code (e.g. ``lambda_dec``).
        plain_loss_weight: weight of the plain (uncoded) cross-entropy added to the decoded one.
        seed: straggler seed; rank r of a multi-device run uses ``seed + r`` so ranks draw different masks.
    """

    code: str = "gcc"
    num_inputs: int = 8
    num_workers: int = 24
    num_stragglers: int = 6
    placement: str = "random"
    code_kwargs: dict[str, Any] = field(default_factory=dict)
    plain_loss_weight: float = 0.0
    seed: int = 0


class CodedClassifier(LightningModule):
    """Image classifier ``(M, C, H, W) -> logits (M, num_classes)`` with optional coded-aware training.

    Args:
        backbone: ``"source:arch"`` (see :func:`build_backbone`), e.g. ``"resnet18"`` or ``"torchgcc:lenet5"``.
        num_classes: classes (linked from the DataModule by the recipes' CLI).
        in_chans: image channels (linked from the DataModule).
        image_size: image height and width (linked from the DataModule).
        backbone_kwargs: extra keyword arguments of the backbone factory.
        lr: AdamW learning rate (cosine decay over ``trainer.max_epochs``).
        weight_decay: AdamW weight decay.
        coded: train through this code (coded-aware fine-tuning); ``None`` trains the plain model.
        init_from: Lightning checkpoint whose weights initialise the model before fitting (fine-tuning).

    Logged metrics: ``train/loss``, ``train/acc`` (of the decoded logits when coded), ``val/loss``,
    ``val/acc``, ``test/loss``, ``test/acc``; when coded also ``val/coded_acc`` (accuracy of the decoded
    logits) and ``val/agreement`` (their argmax agreement with the plain logits), with the same seeded masks at
    every validation.
    """

    def __init__(
        self,
        backbone: str = "resnet18",
        num_classes: int = 10,
        in_chans: int = 3,
        image_size: int = 32,
        backbone_kwargs: dict[str, Any] | None = None,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        coded: CodedTraining | None = None,
        init_from: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = build_backbone(
            backbone, num_classes=num_classes, in_chans=in_chans, image_size=image_size, **(backbone_kwargs or {})
        )
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.coded = coded
        if coded is not None:
            self.val_coded_acc = MulticlassAccuracy(num_classes, average="micro")
            self.val_agreement = MeanMetric()
        # Coded wrappers share self.net; they are kept out of the module tree so that checkpoints hold the plain
        # model only (a coded fine-tune loads into a plain classifier and back).
        self._coded_runs: dict[str, torchgcc.CodedModule] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _coded_run(self, stage: str, seed: int) -> torchgcc.CodedModule:
        """A fresh ``CodedModule`` around ``self.net`` whose straggler model is seeded with ``seed``."""
        cfg = self.coded
        code = torchgcc.make_code(cfg.code, num_inputs=cfg.num_inputs, num_workers=cfg.num_workers, **cfg.code_kwargs)
        stragglers = FixedStragglers(num_stragglers=cfg.num_stragglers, placement=cfg.placement, seed=seed)
        run = torchgcc.CodedModule(self.net, code, stragglers=stragglers).to(self.device)
        self._coded_runs[stage] = run
        return run

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.hparams.init_from:
            # A Lightning checkpoint of this module written by the recipes themselves (it pickles hparams).
            checkpoint = torch.load(self.hparams.init_from, map_location="cpu", weights_only=False)
            self.load_state_dict(checkpoint["state_dict"])

    def on_fit_start(self) -> None:
        if self.coded is not None:
            self._coded_run("train", seed=self.coded.seed + self.global_rank)

    def on_validation_epoch_start(self) -> None:
        if self.coded is not None:
            self._coded_run("val", seed=self.coded.seed + VALIDATION_SEED_OFFSET + self.global_rank)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        if self.coded is None:
            logits = self(x)
            loss = F.cross_entropy(logits, y)
        else:
            logits = self._coded_runs["train"](x)
            loss = F.cross_entropy(logits, y)
            if self.coded.plain_loss_weight:
                loss = loss + self.coded.plain_loss_weight * F.cross_entropy(self(x), y)
        self.train_acc(logits, y)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.val_acc(logits, y)
        self.log("val/loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val/acc", self.val_acc, prog_bar=True)
        if self.coded is not None:
            decoded = self._coded_runs["val"](x)
            self.val_coded_acc(decoded, y)
            self.val_agreement.update(argmax_agreement(decoded, logits), weight=len(x))
            self.log("val/coded_acc", self.val_coded_acc, prog_bar=True)
            self.log("val/agreement", self.val_agreement, prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.test_acc(logits, y)
        self.log("test/loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("test/acc", self.test_acc)

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}
