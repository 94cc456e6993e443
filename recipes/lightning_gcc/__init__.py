"""Shared pieces of the Lightning recipes: the classifier module, DataModules, coded evaluation and the CLI."""

from .cli import CodedCLI, CodedTrainer, run
from .coded_eval import CodedEvaluation
from .data import CIFAR10Data, CIFAR100Data, DigitsData, ImageNetData, MNISTData
from .module import CodedClassifier, CodedTraining

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
