"""Pipelined gradient coding (PGC; Su & Li, arXiv 2607.20739), as reconstructed from the authors' artifact code.

Each worker holds the ``s + 1`` partitions of an FR or CR gradient code in slot order ``pi_i(0..s)`` and keeps one
cached gradient per slot. Step 0 (warm-up) computes every slot at ``w_0``; step ``t >= 1`` recomputes only slot
``k_t = t mod (s + 1)`` at ``w_t``. The worker sends ``f_i = sum_k B[i, pi_i(k)] * cache_k``, so slot ``k`` enters
step ``t`` with staleness

    tau_k(t) = t - (last step <= t that computed slot k) = min(t, (t - k) mod (s + 1))   in {0, ..., s}.

Decoding (the result estimates the sum over all partitions of their cached gradients):

- ``"exact"`` (PGC-FR): the members of an FR group share partitions, schedule and model, so their messages are
  identical; the first arrival of each group gives the full gradient, each partition at staleness <= s.
- ``"uniform"`` (PGC-CR, the authors' decoder): coefficients 1 on the cyclic band and
  ``a_i = mu = n / (|F| (s + 1))`` for every arrived worker (``n / ((n - s)(s + 1))`` when ``|F| = n - s``);
  unbiased over uniformly random straggler sets, approximate for any one set.
- ``"lstsq"`` (PGC-CR, optional): the CR code's random null-space coefficients and its least-squares ``a``
  (``a^T B_F = 1``, so each partition's cached gradients enter with total weight 1).

The staleness formula and the decoders follow the authors' code (``PipelinedNetwork``, ``Pipelined_GC_CR``); the
paper's own text and theorems were not available to us.
"""

from __future__ import annotations

import torch

from torchgcc.checks import check_integer
from torchgcc.gradient_coding.codes import CyclicRepetitionCode, FractionalRepetitionCode, GradientCode

__all__ = ["DECODERS", "PipelinedGradientCode", "staleness"]

#: The decoders of :class:`PipelinedGradientCode`.
DECODERS = ("exact", "uniform", "lstsq")


def staleness(step: int, num_slots: int) -> torch.Tensor:
    """``(num_slots,)`` int64: ``tau_k(step) = min(step, (step - k) mod num_slots)`` for every slot ``k``
    (``step`` an integer >= 0, ``num_slots`` one >= 1)."""
    step = check_integer("step", step, minimum=0)
    num_slots = check_integer("num_slots", num_slots, minimum=1)
    slots = torch.arange(num_slots)
    return torch.minimum((step - slots) % num_slots, torch.tensor(step))


class PipelinedGradientCode(GradientCode):
    """PGC over an FR or CR code: one fresh partition per worker per step, ``s + 1`` cached gradients.

    Args:
        code: a :class:`FractionalRepetitionCode` (decoder ``"exact"``) or :class:`CyclicRepetitionCode`
            (decoder ``"uniform"`` or ``"lstsq"``).
        decoder: one of :data:`DECODERS`; default ``"exact"`` for FR and ``"uniform"`` for CR.
    """

    pipelined = True

    def __init__(self, code: GradientCode, decoder: str | None = None) -> None:
        allowed: tuple[str, ...]
        if isinstance(code, FractionalRepetitionCode):
            allowed, default = ("exact",), "exact"
        elif isinstance(code, CyclicRepetitionCode):
            allowed, default = ("uniform", "lstsq"), "uniform"
        else:
            raise TypeError(f"code must be a FractionalRepetitionCode or CyclicRepetitionCode, got {code!r}")
        decoder = default if decoder is None else decoder
        if decoder not in allowed:
            raise ValueError(f"decoder must be one of {allowed} for {type(code).__name__}, got {decoder!r}")
        B = (code.B != 0).to(torch.float64) if decoder == "uniform" else code.B
        super().__init__(code.num_workers, code.num_stragglers, B)
        self.code, self.decoder = code, decoder
        self.exact = decoder != "uniform"

    @property
    def num_slots(self) -> int:
        """``s + 1`` cached partition gradients per worker."""
        return self.num_stragglers + 1

    def partitions(self, worker: int) -> list[int]:
        """Slot order ``pi_i(0..s)``: the FR group's partitions ascending, or ``i, ..., i + s`` mod n for CR."""
        return self.code.partitions(worker)

    def slots_computed(self, step: int) -> list[int]:
        """Slots recomputed at ``step``: all at the warm-up step 0, else ``[step mod (s + 1)]``."""
        return list(range(self.num_slots)) if step == 0 else [step % self.num_slots]

    def compute_load(self, step: int) -> int:
        return len(self.slots_computed(step))

    def staleness(self, step: int) -> torch.Tensor:
        """``(s + 1,)`` staleness of each slot's cached gradient in the messages of ``step``."""
        return staleness(step, self.num_slots)

    def _decode(self, arrived):
        if self.decoder == "uniform":
            a = torch.zeros(self.num_workers, dtype=torch.float64)
            a[arrived] = self.num_workers / (len(arrived) * self.num_slots)
            return a
        return self.code.decode(arrived)

    def __repr__(self) -> str:
        return f"PipelinedGradientCode({self.code!r}, decoder={self.decoder!r})"
