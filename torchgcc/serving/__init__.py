"""Coded serving under load: open-loop arrivals, batching, dispatch to N workers, decode from the fastest.

- :class:`PoissonArrivals` (:mod:`~torchgcc.serving.arrivals`): seeded open-loop arrival times;
- :func:`form_batches` (:mod:`~torchgcc.serving.batcher`): batches of a fixed size or fewer at a timeout;
- :class:`HedgePolicy` (:mod:`~torchgcc.serving.hedging`): when to send a backup request;
- :class:`WorkerPool`, :class:`Task`, :class:`Completion` (:mod:`~torchgcc.serving.pool`): the executor
  interface, with :class:`ProcessPool` (local processes), :class:`VirtualPool` (a virtual clock) and
  ``RayPool`` (:mod:`torchgcc.serving.ray_pool`, Ray actors; needs the ``ray`` extra);
- :func:`serve_open_loop` (:mod:`~torchgcc.serving.dispatcher`): the dispatch/decode loop and per-query latency;
- :class:`CpuHog` (:mod:`~torchgcc.serving.interference`): a competing busy loop pinned to chosen cores.

See docs/serving.md.
"""

from torchgcc.serving.arrivals import PoissonArrivals
from torchgcc.serving.batcher import Batch, form_batches
from torchgcc.serving.dispatcher import BatchRecord, ServingRun, serve_open_loop
from torchgcc.serving.hedging import HedgePolicy
from torchgcc.serving.interference import CpuHog
from torchgcc.serving.pool import Completion, Task, WorkerPool
from torchgcc.serving.process_pool import ProcessPool
from torchgcc.serving.virtual_pool import VirtualPool

__all__ = [
    "Batch",
    "BatchRecord",
    "Completion",
    "CpuHog",
    "HedgePolicy",
    "PoissonArrivals",
    "ProcessPool",
    "ServingRun",
    "Task",
    "VirtualPool",
    "WorkerPool",
    "form_batches",
    "serve_open_loop",
]
