"""The training schemes by name: ``make_training_scheme("pgc-fr", num_workers=12, num_stragglers=2)``.

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

__all__ = ["TRAINING_SCHEMES", "list_training_schemes", "make_training_scheme"]

SchemeFactory = Callable[..., GradientCode]

#: ``name -> factory(num_workers, num_stragglers, seed) -> GradientCode``.
TRAINING_SCHEMES: Registry[SchemeFactory] = Registry("gradient-coding scheme")
TRAINING_SCHEMES.register("dgd", lambda n, s, seed: UncodedCode(n))
TRAINING_SCHEMES.register("is-sgd", lambda n, s, seed: IgnoreStragglersCode(n, s))
TRAINING_SCHEMES.register("gc-fr", lambda n, s, seed: FractionalRepetitionCode(n, s))
TRAINING_SCHEMES.register("gc-cr", lambda n, s, seed: CyclicRepetitionCode(n, s, seed=seed))
TRAINING_SCHEMES.register(
    "is-gc", lambda n, s, seed: IgnoreStragglersGCCode(n, s, partitions_per_worker=2, layout="cr")
)
TRAINING_SCHEMES.register("pgc-fr", lambda n, s, seed: PipelinedGradientCode(FractionalRepetitionCode(n, s)))
TRAINING_SCHEMES.register("pgc-cr", lambda n, s, seed: PipelinedGradientCode(CyclicRepetitionCode(n, s, seed=seed)))
TRAINING_SCHEMES.register(
    "pgc-cr-ls", lambda n, s, seed: PipelinedGradientCode(CyclicRepetitionCode(n, s, seed=seed), decoder="lstsq")
)


def list_training_schemes() -> list[str]:
    """Names accepted by :func:`make_training_scheme`."""
    return TRAINING_SCHEMES.names()


def make_training_scheme(name: str, *, num_workers: int, num_stragglers: int, seed: int = 0) -> GradientCode:
    """The code of scheme ``name`` for ``n`` workers tolerating ``s`` stragglers (``seed``: CR's random matrix)."""
    return TRAINING_SCHEMES[name](num_workers, num_stragglers, seed)
