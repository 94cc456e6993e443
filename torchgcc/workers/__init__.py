"""Engines: where a code's N coded inputs are computed, and the one rule that ends a wait for their results.

- :class:`Workers` (:mod:`~torchgcc.workers.protocol`): the engine interface (submit tasks, wait for completions,
  cancel), with :class:`Task` and :class:`Completion`;
- :class:`WaitPolicy` (:mod:`~torchgcc.workers.wait`): fastest ``N - S``, a deadline, the code's ``decodable``, an
  adaptive wait count;
- :func:`run_round` (:mod:`~torchgcc.workers.rounds`): one batch on an engine, ``(B, N, *in) -> (B, N, *out)`` and
  the arrival mask; what ``CodedModule(model, code, workers=...)`` runs;
- engines here: :class:`ProcessWorkers` (local processes) and :class:`VirtualWorkers` (a virtual clock); on Ray
  actors and on the ranks of a torchrun job: :mod:`torchgcc.distributed`.
"""

from torchgcc.workers.processes import ProcessWorkers
from torchgcc.workers.protocol import Completion, Task, Workers
from torchgcc.workers.rounds import Round, TooFewWorkersError, run_round, stack_results
from torchgcc.workers.virtual import VirtualWorkers
from torchgcc.workers.wait import WaitPolicy

__all__ = [
    "Completion",
    "ProcessWorkers",
    "Round",
    "Task",
    "TooFewWorkersError",
    "VirtualWorkers",
    "WaitPolicy",
    "Workers",
    "run_round",
    "stack_results",
]
