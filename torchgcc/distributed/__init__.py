"""Coded computing across processes: engines on the ranks of a torchrun job and on Ray actors, and the data plane.

- :class:`ProcessGroupWorkers` (rank 0) and :func:`serve` (ranks 1..P-1): the N coded workers hosted by the ranks
  of a torchrun job (or of the local launcher, :func:`~torchgcc.distributed.launch.launch`), an engine for
  ``CodedModule(model, code, workers=...)``; payloads travel on the data plane (:mod:`~torchgcc.distributed.dataplane`:
  a two-member gloo group per worker rank) or, as a fallback, through the rendezvous store, which is always the
  control plane (rounds, heartbeats, shutdown);
- :class:`RayWorkers` on a :func:`local_ray` instance: the N workers as Ray actors (the ``ray`` extra).

The rule that ends a wait, the round loop and the engine interface are :mod:`torchgcc.workers`'. See
docs/distributed.md.
"""

from torchgcc.distributed.dataplane import DataPlane, Message, PairBrokenError, PairChannel, open_peer_pair
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.layout import LAYOUTS, layout_workers
from torchgcc.distributed.process_group import ProcessGroupWorkers
from torchgcc.distributed.ray_workers import RayWorkers, local_ray
from torchgcc.distributed.transport import Channel, connect
from torchgcc.distributed.worker import CoordinatorLost, serve

__all__ = [
    "LAYOUTS",
    "Channel",
    "CoordinatorLost",
    "DataPlane",
    "FaultPlan",
    "Message",
    "PairBrokenError",
    "PairChannel",
    "ProcessGroupWorkers",
    "RayWorkers",
    "connect",
    "layout_workers",
    "local_ray",
    "open_peer_pair",
    "serve",
]
