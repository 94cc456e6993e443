"""Coded computing across processes: engines on the ranks of a torchrun job and on Ray actors, and the data plane.

- :class:`ProcessGroupWorkers` (rank 0) and :func:`serve` (ranks 1..P-1): the N coded workers hosted by the ranks
  of a torchrun job (or of the local launcher, :func:`~torchgcc.distributed.launch.launch`), an engine for
  ``CodedModule(model, code, workers=...)``; payloads travel on the data plane (:mod:`~torchgcc.distributed.dataplane`:
  a two-member gloo group per worker rank) or, as a fallback, through the rendezvous store, which is always the
  control plane (rounds, heartbeats, shutdown);
- :class:`RayWorkers` on a :func:`local_ray` instance: the N workers as Ray actors (the ``ray`` extra).

The rule that ends a wait, the round loop and the engine interface are :mod:`torchgcc.workers`'. See
docs/distributed.md.

The public names are imported on first use (PEP 562): ``python -m torchgcc.distributed`` imports this package before
its entry point runs, and the entry point sets ``TORCH_CPP_LOG_LEVEL`` before anything imports torch (c10 reads it
once, when torch is imported).
"""

import importlib
from typing import Any

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "LAYOUTS": "torchgcc.distributed.layout",
    "Channel": "torchgcc.distributed.transport",
    "CoordinatorLost": "torchgcc.distributed.worker",
    "DataPlane": "torchgcc.distributed.dataplane",
    "FaultPlan": "torchgcc.distributed.faults",
    "Message": "torchgcc.distributed.dataplane",
    "PairBrokenError": "torchgcc.distributed.dataplane",
    "PairChannel": "torchgcc.distributed.dataplane",
    "ProcessGroupWorkers": "torchgcc.distributed.process_group",
    "RayWorkers": "torchgcc.distributed.ray_workers",
    "connect": "torchgcc.distributed.transport",
    "layout_workers": "torchgcc.distributed.layout",
    "local_ray": "torchgcc.distributed.ray_workers",
    "open_peer_pair": "torchgcc.distributed.dataplane",
    "serve": "torchgcc.distributed.worker",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'torchgcc.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
