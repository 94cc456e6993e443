"""Shared pieces of the Lightning recipes: the classifier module, DataModules, coded evaluation and the CLI.

Without the ``recipes`` extra (Lightning, jsonargparse and the experiments' packages) a recipe ends in one line
naming it and exit status 2, before anything else is imported.
"""

import sys
from pathlib import Path

from torchgcc.optional import MissingExtraError, check_extra

try:
    check_extra("recipes")
    check_extra("experiments")
except MissingExtraError as error:
    print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
    raise SystemExit(2) from None

from .cli import CodedCLI, CodedTrainer, run  # noqa: E402
from .coded_eval import CodedEvaluation  # noqa: E402
from .data import CIFAR10Data, CIFAR100Data, DigitsData, ImageNetData, MNISTData  # noqa: E402
from .module import CodedClassifier, CodedTraining  # noqa: E402

__all__ = [
    "CIFAR10Data",
    "CIFAR100Data",
    "CodedCLI",
    "CodedClassifier",
    "CodedEvaluation",
    "CodedTrainer",
    "CodedTraining",
    "DigitsData",
    "ImageNetData",
    "MNISTData",
    "run",
]
