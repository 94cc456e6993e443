"""Coded serving under load: open-loop arrivals, batching, dispatch to N workers, decode from the fastest.

- :class:`PoissonArrivals` (:mod:`~torchgcc.serving.arrivals`): seeded open-loop arrival times;
- :func:`form_batches` (:mod:`~torchgcc.serving.batcher`): batches of a fixed size or fewer at a timeout;
- :class:`HedgePolicy` (:mod:`~torchgcc.serving.hedging`): when to send a backup request (hedging is the loop's
  policy, not a code);
- :func:`serve_open_loop` (:mod:`~torchgcc.serving.dispatcher`): the dispatch/decode loop of a
  ``CodedModule(model, code, workers=..., wait=...)`` on an engine (:mod:`torchgcc.workers`: local processes, a
  virtual clock; :class:`torchgcc.distributed.RayWorkers`), and per-query latency;
- :class:`CpuHog` (:mod:`~torchgcc.serving.interference`): a competing busy loop pinned to chosen cores.

See docs/serving.md.
"""

from torchgcc.serving.arrivals import PoissonArrivals
from torchgcc.serving.batcher import Batch, form_batches
from torchgcc.serving.dispatcher import BatchRecord, ServingRun, padding_slots, serve_open_loop
from torchgcc.serving.hedging import HedgePolicy
from torchgcc.serving.interference import CpuHog

__all__ = [
    "Batch",
    "BatchRecord",
    "CpuHog",
    "HedgePolicy",
    "PoissonArrivals",
    "ServingRun",
    "form_batches",
    "padding_slots",
    "serve_open_loop",
]
