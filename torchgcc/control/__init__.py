"""Straggler-aware control: choose a size per step (GRPO group size, wait count N - S) under a budget on the
long-run rate of straggler events. Our design in the spirit of SAGC (arXiv 2606.02218); see docs/control.md."""

from torchgcc.control.controller import StragglerAwareController
from torchgcc.control.dual import DualVariable
from torchgcc.control.event_models import EVENT_MODELS, AllMustFinish, EventModel, WaitForFastest
from torchgcc.control.group_size import group_size_controller
from torchgcc.control.tail_risk import BetaTailRisk, beta_binomial_sf
from torchgcc.control.thresholds import THRESHOLDS, DeadlineThreshold, RelativeThreshold, StragglerThreshold
from torchgcc.control.utilities import UTILITIES, normalised_utility
from torchgcc.control.wait_count import WaitCountController

__all__ = [
    "AllMustFinish",
    "BetaTailRisk",
    "DeadlineThreshold",
    "DualVariable",
    "EVENT_MODELS",
    "EventModel",
    "RelativeThreshold",
    "StragglerAwareController",
    "StragglerThreshold",
    "THRESHOLDS",
    "UTILITIES",
    "WaitCountController",
    "WaitForFastest",
    "beta_binomial_sf",
    "group_size_controller",
    "normalised_utility",
]
