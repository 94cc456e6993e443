"""Coded computing across processes launched by torchrun.

Rank 0 is the :class:`Coordinator` (encode, post, collect, decode); ranks 1..P-1 run :func:`serve` and host the N
coded workers. Messages travel through the rendezvous store (see :mod:`torchgcc.distributed.transport` and
docs/distributed.md for why not through gloo or NCCL send/recv).
"""

from torchgcc.distributed.arrival import ARRIVAL_MODES, Injected, Measured, Simulated, StepPlan
from torchgcc.distributed.dataplane import DataPlane, Message, PairBrokenError, PairChannel, open_peer_pair
from torchgcc.distributed.coordinator import Coordinator, StepResult, TooFewWorkersError
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.placement import PLACEMENTS, place_workers
from torchgcc.distributed.schemes import CodedScheme, UncodedScheme, make_scheme
from torchgcc.distributed.transport import Channel, connect
from torchgcc.distributed.worker import serve

__all__ = [
    "ARRIVAL_MODES",
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
    "PLACEMENTS",
    "Simulated",
    "StepPlan",
    "StepResult",
    "TooFewWorkersError",
    "UncodedScheme",
    "connect",
    "make_scheme",
    "open_peer_pair",
    "place_workers",
    "serve",
]
