"""The gradient codes by name: ``make_gradient_code("pgc-fr", num_workers=12, num_stragglers=2)``.

=========  =============================================================================
name       code
=========  =============================================================================
dgd        :class:`UncodedCode` (waits for all n; ``num_stragglers`` ignored)
is-sgd     :class:`IgnoreStragglersCode`
gc-fr      :class:`FractionalRepetitionCode`
gc-cr      :class:`CyclicRepetitionCode` (seeded)
is-gc      :class:`IgnoreStragglersGCCode`, cyclic windows of c = 2 partitions
pgc-fr     :class:`PipelinedGradientCode` over FR, exact decoding
pgc-cr     :class:`PipelinedGradientCode` over CR, uniform decoding
pgc-cr-ls  :class:`PipelinedGradientCode` over CR, least-squares decoding
=========  =============================================================================
"""

from __future__ import annotations

from typing import Callable

from torchgcc.gradient_coding.codes import (
    CyclicRepetitionCode,
    FractionalRepetitionCode,
    GradientCode,
    IgnoreStragglersCode,
    IgnoreStragglersGCCode,
    UncodedCode,
)
from torchgcc.gradient_coding.pipelined import PipelinedGradientCode
from torchgcc.registry import Registry

__all__ = ["GRADIENT_CODES", "list_gradient_codes", "make_gradient_code"]

GradientCodeFactory = Callable[..., GradientCode]

#: ``name -> factory(num_workers, num_stragglers, seed) -> GradientCode``.
GRADIENT_CODES: Registry[GradientCodeFactory] = Registry("gradient code")
GRADIENT_CODES.register("dgd", lambda n, s, seed: UncodedCode(n))
GRADIENT_CODES.register("is-sgd", lambda n, s, seed: IgnoreStragglersCode(n, s))
GRADIENT_CODES.register("gc-fr", lambda n, s, seed: FractionalRepetitionCode(n, s))
GRADIENT_CODES.register("gc-cr", lambda n, s, seed: CyclicRepetitionCode(n, s, seed=seed))
GRADIENT_CODES.register("is-gc", lambda n, s, seed: IgnoreStragglersGCCode(n, s, partitions_per_worker=2, layout="cr"))
GRADIENT_CODES.register("pgc-fr", lambda n, s, seed: PipelinedGradientCode(FractionalRepetitionCode(n, s)))
GRADIENT_CODES.register("pgc-cr", lambda n, s, seed: PipelinedGradientCode(CyclicRepetitionCode(n, s, seed=seed)))
GRADIENT_CODES.register(
    "pgc-cr-ls", lambda n, s, seed: PipelinedGradientCode(CyclicRepetitionCode(n, s, seed=seed), decoder="lstsq")
)


def list_gradient_codes() -> list[str]:
    """Names accepted by :func:`make_gradient_code`."""
    return GRADIENT_CODES.names()


def make_gradient_code(name: str, *, num_workers: int, num_stragglers: int, seed: int = 0) -> GradientCode:
    """The gradient code ``name`` for ``n`` workers tolerating ``s`` stragglers (``seed``: CR's random matrix)."""
    return GRADIENT_CODES[name](num_workers, num_stragglers, seed)
