"""Straggler-resilient training: gradient codes, pipelined gradient coding, a virtual-clock simulator and a
torch.distributed runtime.

- :mod:`~torchgcc.gradient_coding.codes`: FR, CR (Tandon et al. 2017) and the baselines DGD, IS-SGD, IS-GC.
- :mod:`~torchgcc.gradient_coding.pipelined`: pipelined gradient coding (PGC-FR, PGC-CR; Su & Li 2026).
- :mod:`~torchgcc.gradient_coding.gradients`: the worker's coded gradient (one backward pass) and the update.
- :mod:`~torchgcc.gradient_coding.simulator`: one process, real gradients, virtual clock.
- :mod:`~torchgcc.gradient_coding.adaptive_wait`: the simulator waiting for ``n - S`` workers, S chosen per step.
- :mod:`~torchgcc.gradient_coding.distributed_training`: a coordinator and worker ranks under torchrun
  (``python -m torchgcc.gradient_coding.runtime``).
- :mod:`~torchgcc.gradient_coding.catalog`: the gradient codes by name (``"dgd"``, ``"gc-fr"``, ``"pgc-cr"``...).
"""

from torchgcc.gradient_coding.adaptive_wait import train_with_adaptive_wait
from torchgcc.gradient_coding.catalog import GRADIENT_CODES, list_gradient_codes, make_gradient_code
from torchgcc.gradient_coding.clock import DelaySchedule, WorkerClock, expected_step_time, first_arrivals
from torchgcc.gradient_coding.codes import (
    CyclicRepetitionCode,
    FractionalRepetitionCode,
    GradientCode,
    IgnoreStragglersCode,
    IgnoreStragglersGCCode,
    UncodedCode,
    UndecodableError,
    recovery_error,
)
from torchgcc.gradient_coding.gradients import GradientWorker, apply_update, combine, weighted_gradient
from torchgcc.gradient_coding.partitions import PartitionedData
from torchgcc.gradient_coding.pipelined import PipelinedGradientCode, staleness
from torchgcc.gradient_coding.simulator import Simulation, StepRecord, measure_compute_time

__all__ = [
    "train_with_adaptive_wait",
    "CyclicRepetitionCode",
    "DelaySchedule",
    "FractionalRepetitionCode",
    "GradientCode",
    "GradientWorker",
    "IgnoreStragglersCode",
    "IgnoreStragglersGCCode",
    "PartitionedData",
    "PipelinedGradientCode",
    "GRADIENT_CODES",
    "Simulation",
    "StepRecord",
    "UncodedCode",
    "UndecodableError",
    "WorkerClock",
    "apply_update",
    "combine",
    "expected_step_time",
    "first_arrivals",
    "list_gradient_codes",
    "make_gradient_code",
    "measure_compute_time",
    "recovery_error",
    "staleness",
    "weighted_gradient",
]
