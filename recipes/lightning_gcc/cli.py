"""The recipes' command line: LightningCLI with ``fit``, ``validate``, ``test``, ``predict`` and ``coded_eval``.

``coded_eval`` runs the test loop with a :class:`CodedEvaluation` callback: it sweeps codes and straggler counts
for a checkpoint and writes ``results.json`` and a plot. Coded-aware fine-tuning is ``fit`` with
``--model.coded`` (and ``--model.init_from`` the checkpoint to start from). Each recipe script calls :func:`run`
with its DataModule and default config file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

from torchgcc.app.cli import UsageError
from torchgcc.app.options import check_output_dir, default_threads, fresh_output_dir

from .coded_eval import CodedEvaluation
from .module import CodedClassifier

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"

#: ``ckpt_path`` values Lightning resolves itself (not files).
LIGHTNING_CHECKPOINTS = ("best", "last", "hpc", "registry")


def usage_error(subcommand: str, message: str) -> None:
    """Print ``<subcommand>: error: <message>`` on one line and exit with status 2."""
    print(f"{subcommand}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class CodedTrainer(Trainer):
    """A Lightning ``Trainer`` with a ``coded_eval`` entry point beside fit / validate / test / predict."""

    def coded_eval(
        self,
        model: LightningModule,
        datamodule: LightningDataModule | None = None,
        ckpt_path: str | None = None,
        codes: list[str] = ["gcc", "natural", "bacc"],  # noqa: B006 (jsonargparse reads the default)
        num_inputs: int = 8,
        num_workers: int = 24,
        stragglers: list[int] = [0, 2, 4, 6, 8],  # noqa: B006
        repeats: int = 1,
        placement: str = "random",
        code_kwargs: dict[str, dict[str, Any]] | None = None,
        seed: int = 0,
        output_dir: str | None = "auto",
        random_weights: bool = False,
    ) -> list[dict[str, Any]]:
        """Coded evaluation: sweep codes and straggler counts on the test set, write results.json and a plot.

        Args:
            model: the classifier.
            datamodule: provides the test split.
            ckpt_path: checkpoint to evaluate; required unless ``random_weights``.
            codes: registered code names to compare.
            num_inputs: K, inputs per group.
            num_workers: N, workers per group.
            stragglers: straggler counts S to sweep.
            repeats: straggler masks drawn per group and S.
            placement: straggler placement (random, contiguous, widest_gap).
            code_kwargs: per code, extra keyword arguments (e.g. ``{gcc: {lambda_dec: 1e-6}}``).
            seed: straggler seed.
            output_dir: folder for results.json, results.csv and coded_eval.png; ``auto``: a fresh
                ``torchgcc-results/coded_eval/<data>-<date>-<time>``; ``None``: write nothing.
            random_weights: evaluate the model's current (untrained, random) weights without a checkpoint, on
                purpose; without it and without ``ckpt_path`` the command refuses (exit status 2).

        Returns:
            One record per (code, S) with mse, agreement, accuracy, their 95% half-widths and reference_accuracy.
        """
        if ckpt_path is None and not random_weights:
            usage_error(
                "coded_eval",
                "no --ckpt_path: the model's weights are random (untrained); pass --ckpt_path CKPT (fit "
                "prints where it wrote one), or --random_weights true to evaluate random weights on purpose",
            )
        data_name = type(datamodule).__name__ if datamodule is not None else "data"
        if output_dir == "auto":
            output_dir = fresh_output_dir(f"coded_eval/{data_name}")
        provenance = {
            "recipe": Path(sys.argv[0]).name,
            "data": data_name,
            "data_hparams": dict(getattr(datamodule, "hparams", {}) or {}),
            "backbone": getattr(model, "hparams", {}).get("backbone"),
            "ckpt_path": ckpt_path,
            "weights": "checkpoint" if ckpt_path is not None else "random (untrained)",
        }
        callback = CodedEvaluation(
            codes=codes,
            num_inputs=num_inputs,
            num_workers=num_workers,
            stragglers=stragglers,
            repeats=repeats,
            placement=placement,
            code_kwargs=code_kwargs,
            seed=seed,
            output_dir=output_dir,
            provenance=provenance,
        )
        self.callbacks.append(callback)
        try:
            self.test(model, datamodule=datamodule, ckpt_path=ckpt_path)
        finally:
            self.callbacks.remove(callback)
        return callback.records


class CodedCLI(LightningCLI):
    """LightningCLI that links the data's shape to the model and adds the ``coded_eval`` subcommand."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {**LightningCLI.subcommands(), "coded_eval": {"model", "datamodule"}}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for attribute in ("num_classes", "in_chans", "image_size"):
            parser.link_arguments(f"data.{attribute}", f"model.{attribute}", apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Parse, then end the run in one line and exit status 2 if a checkpoint is not a file or an output folder
        cannot be made: before anything is seeded, built or trained."""
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        config = self.config.get(subcommand) if subcommand else self.config
        ckpt = config.get("ckpt_path")
        if ckpt is not None and ckpt not in LIGHTNING_CHECKPOINTS and "://" not in ckpt and not Path(ckpt).is_file():
            usage_error(
                subcommand, f"--ckpt_path {ckpt} is not a file; pass a checkpoint fit wrote (it prints its path)"
            )
        output = config.get("output_dir")
        if output not in (None, "auto"):
            try:
                check_output_dir(Path(output), "--output_dir")
            except UsageError as error:
                usage_error(subcommand, str(error))

    def before_fit(self) -> None:
        """``--trainer.logger false`` drops the configs' ``LearningRateMonitor`` (it needs a logger)."""
        if not self.trainer.loggers:
            self.trainer.callbacks[:] = [c for c in self.trainer.callbacks if not isinstance(c, LearningRateMonitor)]

    def after_fit(self) -> None:
        """Print where the checkpoints went (nothing under ``fast_dev_run``, which saves none)."""
        callback = self.trainer.checkpoint_callback
        paths = [
            path
            for path in (getattr(callback, "best_model_path", ""), getattr(callback, "last_model_path", ""))
            if path
        ]
        if paths and self.trainer.is_global_zero:
            print("wrote checkpoint " + " and ".join(dict.fromkeys(paths)))


def run(datamodule_class: type[LightningDataModule], config: str | None = None, args: ArgsType = None) -> CodedCLI:
    """Run the recipe CLI for ``datamodule_class`` with ``configs/<config>`` as default config file.

    ``args`` (a list of strings) replaces ``sys.argv[1:]``, for calls from Python and tests. Unless
    ``OMP_NUM_THREADS`` is set, torch uses :func:`torchgcc.app.options.default_threads` CPU threads (half
    the CPUs, at most 4): torch's default of every core oversubscribes small shared machines.
    """
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(default_threads())
    argv = sys.argv if args is None else sys.argv[:1]  # LightningCLI warns when it sees both
    with mock.patch.object(sys, "argv", argv):
        return CodedCLI(
            CodedClassifier,
            datamodule_class,
            trainer_class=CodedTrainer,
            # with --trainer.logger false every run saves its config.yaml into default_root_dir: keep the newest
            save_config_kwargs={"overwrite": True},
            parser_kwargs={
                subcommand: {"default_config_files": [str(CONFIG_DIR / config)] if config else []}
                for subcommand in CodedCLI.subcommands()
            },
            args=args,
        )
