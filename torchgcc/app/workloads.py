"""Workloads of the distributed job (``python -m torchgcc.distributed``), its benchmarks and tests: every rank
builds the same one.

``mlp`` is a tiny seeded MLP on Gaussian inputs; any other name is a timm image model (``timm.create_model(name,
pretrained=False)``: seeded random weights, or a checkpoint's) on seeded random images ``(M, 3, H, W)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

__all__ = ["WORKLOADS", "Workload", "make_workload", "mlp_workload", "timm_workload"]


@dataclass
class Workload:
    """A model and a deterministic stream of batches.

    Attributes:
        model: the network every worker runs (identical on every rank: built from the seed on the CPU).
        batch: ``step -> (M, *in)`` inputs of that step (the same on every call).
    """

    model: nn.Module
    batch: Callable[[int], torch.Tensor]


def mlp_workload(
    *, seed: int = 0, batch_size: int = 64, in_features: int = 16, hidden: int = 64, classes: int = 10
) -> Workload:
    """A seeded random tanh MLP ``(M, in_features) -> (M, classes)`` on standard normal inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(in_features, hidden), nn.Tanh(), nn.Linear(hidden, classes)).eval()

    def batch(step: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        return torch.randn(batch_size, in_features, generator=generator)

    return Workload(model=model, batch=batch)


def timm_workload(
    name: str,
    *,
    seed: int = 0,
    batch_size: int = 64,
    image_size: int = 224,
    num_classes: int = 1000,
    checkpoint: str | None = None,
) -> Workload:
    """A timm model in eval mode (seeded random weights unless ``checkpoint``) on seeded ``N(0, 1)`` images.

    Raises:
        ValueError: ``name`` is not a timm model, or the checkpoint does not fit it.
    """
    try:
        import timm
    except ImportError as error:  # pragma: no cover - timm is in the experiments extra
        raise ValueError(f"--task {name!r} needs timm (pip install 'torchgcc[experiments]')") from error
    if not timm.is_model(name):
        import difflib

        close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "see timm.list_models()"
        raise ValueError(f"unknown task {name!r}: neither 'mlp' nor a timm model name; {hint}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = timm.create_model(name, pretrained=False, num_classes=num_classes)
    if checkpoint is not None:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        try:
            model.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
        except RuntimeError as error:
            raise ValueError(f"checkpoint {checkpoint} does not fit {name}: {str(error).splitlines()[0]}") from None
    model.eval()

    def batch(step: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        return torch.randn(batch_size, 3, image_size, image_size, generator=generator)

    return Workload(model=model, batch=batch)


#: name -> factory(seed=, batch_size=) -> Workload.
WORKLOADS: dict[str, Callable[..., Workload]] = {"mlp": mlp_workload}


def make_workload(
    name: str,
    *,
    seed: int,
    batch_size: int,
    image_size: int = 224,
    num_classes: int = 1000,
    checkpoint: str | None = None,
) -> Workload:
    """A built-in workload (:data:`WORKLOADS`) or, for any other name, :func:`timm_workload`."""
    if name in WORKLOADS:
        return WORKLOADS[name](seed=seed, batch_size=batch_size)
    return timm_workload(
        name, seed=seed, batch_size=batch_size, image_size=image_size, num_classes=num_classes, checkpoint=checkpoint
    )
