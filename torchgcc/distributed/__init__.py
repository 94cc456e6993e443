"""Coded computing across processes launched by torchrun.

Rank 0 is the :class:`Coordinator` (encode, post, collect, decode); ranks 1..P-1 run :func:`serve` and host the N
coded workers. :class:`RayCoordinator` is the same coordinator on Ray actors (:class:`RayWorkers`, the ``ray``
extra). Payloads travel on the data plane (:mod:`torchgcc.distributed.dataplane`: a two-member gloo group
per worker rank) or, as a fallback, through the rendezvous store; the store is always the control plane (rounds,
heartbeats, shutdown). See docs/distributed.md.
"""

from torchgcc.distributed.arrival import Injected, Measured, Simulated, StepPlan
from torchgcc.distributed.coordinator import Coordinator, StepResult, TooFewWorkersError
from torchgcc.distributed.dataplane import DataPlane, Message, PairBrokenError, PairChannel, open_peer_pair
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.layout import LAYOUTS, layout_workers
from torchgcc.distributed.ray_coordinator import RayCoordinator
from torchgcc.distributed.ray_workers import RayWorkers, local_ray
from torchgcc.distributed.schemes import (
    BASELINE_SCHEMES,
    CodedScheme,
    ReplicationScheme,
    UncodedScheme,
    list_execution_schemes,
    make_execution_scheme,
)
from torchgcc.distributed.transport import Channel, connect
from torchgcc.distributed.worker import serve

__all__ = [
    "Channel",
    "CodedScheme",
    "Coordinator",
    "DataPlane",
    "FaultPlan",
    "Injected",
    "Measured",
    "Message",
    "PairBrokenError",
    "PairChannel",
    "RayCoordinator",
    "RayWorkers",
    "ReplicationScheme",
    "BASELINE_SCHEMES",
    "LAYOUTS",
    "Simulated",
    "StepPlan",
    "StepResult",
    "TooFewWorkersError",
    "UncodedScheme",
    "connect",
    "list_execution_schemes",
    "make_execution_scheme",
    "open_peer_pair",
    "layout_workers",
    "local_ray",
    "serve",
]
