"""What the coordinator sends and how it rebuilds outputs: a coded scheme (any core code), replication, or the
uncoded baseline.

A scheme maps a batch ``(M, *in)`` to one payload per worker ``(N, b, *in)`` and the stacked worker results
``(N, b, *out)`` (zeros where nothing arrived) back to ``(M, *out)``. It also says when a step's wait is over
(:meth:`wait_over`) and which arrival masks it can decode at all (:meth:`decodable`). Workers only ever run the
model on their payload, so they do not know which scheme is running.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from torchgcc.coded_module import group_samples, ungroup_samples
from torchgcc.codes import list_codes, make_code

__all__ = [
    "BASELINE_SCHEMES",
    "CodedScheme",
    "ReplicationScheme",
    "UncodedScheme",
    "list_execution_schemes",
    "make_execution_scheme",
]


class CodedScheme:
    """Encode groups of K samples into N coded inputs with ``code``; decode from the arrived results.

    Args:
        code: a core code (``encoder``, ``decoder(y, mask)``, ``min_arrived``, ``num_inputs``, ``num_workers``).
        name: the name reported in the results.
        num_stragglers: S of this scheme (its wait ends at the fastest ``N - S``), overriding the run's ``-S`` in
            the injected and measured modes; None: the run's.
        policy: an adaptive wait count (a :class:`~torchgcc.control.wait_count.WaitCountController`): the executor
            sets ``num_stragglers = policy.choose()`` before every step and reports the step's worker latencies
            to ``policy.observe`` after it; None: a fixed S.
    """

    def __init__(self, code: nn.Module, *, name: str, num_stragglers: int | None = None, policy=None) -> None:
        self.code = code
        self.name = name
        self.num_stragglers = num_stragglers
        self.policy = policy
        self.num_inputs = code.num_inputs
        self.num_workers = code.num_workers
        self.min_arrived = code.min_arrived
        code.decoder.warm_up()  # a kernel's first-use compile belongs to the setup, not to the first timed step

    def wait_over(self, mask: torch.Tensor, rule_met: bool) -> bool:
        """The step's arrival rule (fastest ``N - S``, or the simulated mask) decides."""
        return rule_met

    def decodable(self, mask: torch.Tensor) -> bool:
        """Every group has at least ``min_arrived`` results."""
        return bool((mask.sum(1) >= self.min_arrived).all())

    def num_groups(self, num_samples: int) -> int:
        return math.ceil(num_samples / self.num_inputs)

    def padding_workers(self, num_samples: int) -> set[int]:
        """Workers whose results no output of the first ``num_samples`` needs: none (every coded input mixes
        every input of its group)."""
        return set()

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``(M, *in) -> (N, B, *in)``, B = ceil(M / K)."""
        with torch.no_grad():
            return self.code.encoder(group_samples(x, self.num_inputs)).movedim(1, 0)

    def decode(self, results: torch.Tensor, mask: torch.Tensor, num_samples: int) -> tuple[torch.Tensor, list[int]]:
        """``(N, B, *out)`` and ``(B, N)`` bool -> ``(M, *out)`` and the samples without a result (none)."""
        with torch.no_grad():
            return ungroup_samples(self.code.decoder(results.movedim(0, 1), mask), num_samples), []

    def used_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The results :meth:`decode` reads: every arrived one."""
        return mask


class UncodedScheme:
    """The baseline: split the batch into N equal shares (the last padded) and wait for every worker."""

    def __init__(self, *, num_workers: int) -> None:
        self.name = "uncoded"
        self.num_workers = num_workers
        self.min_arrived = num_workers

    def wait_over(self, mask: torch.Tensor, rule_met: bool) -> bool:
        return bool(mask.all())

    def decodable(self, mask: torch.Tensor) -> bool:
        return bool(mask.all())

    def num_groups(self, num_samples: int) -> int:
        return 1

    def padding_workers(self, num_samples: int) -> set[int]:
        """The workers whose shares are padding only (``M < N``: worker j's share starts at ``j * ceil(M / N)``)."""
        share = math.ceil(num_samples / self.num_workers)
        return {j for j in range(self.num_workers) if j * share >= num_samples}

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``(M, *in) -> (N, ceil(M / N), *in)``."""
        share = math.ceil(x.shape[0] / self.num_workers)
        padding = x[-1:].expand(share * self.num_workers - x.shape[0], *x.shape[1:])
        return torch.cat([x, padding]).unflatten(0, (self.num_workers, share))

    def decode(self, results: torch.Tensor, mask: torch.Tensor, num_samples: int) -> tuple[torch.Tensor, list[int]]:
        if not bool(mask.all()):
            raise ValueError("the uncoded scheme needs every worker's result")
        return results.flatten(0, 1)[:num_samples], []

    def used_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The results :meth:`decode` reads: every worker's."""
        return mask


class ReplicationScheme:
    """The practitioner's baseline at equal N: every input of a group goes to ``r = N / K`` workers.

    Worker ``n`` computes input ``n // r`` of every group (copies of one input sit on neighbouring workers, which
    the ``round_robin`` layout spreads over different ranks). Each input is decoded from a copy that arrived (all
    copies are the same computation, so which one does not matter); the wait is over as soon as every input of
    every group has a copy. At the deadline, inputs without any copy are **reported** (their sample indices in
    the second return value of :meth:`decode`) and their outputs are NaN, never a silent zero.

    Args:
        num_inputs: K inputs per group.
        num_workers: N workers, a multiple of K.
    """

    def __init__(self, *, num_inputs: int, num_workers: int) -> None:
        if num_workers % num_inputs:
            raise ValueError(
                f"replication needs N a multiple of K (r = N / K copies of each input); got N={num_workers}, "
                f"K={num_inputs}"
            )
        self.name = "replication"
        self.num_inputs, self.num_workers = num_inputs, num_workers
        self.copies = num_workers // num_inputs
        self.min_arrived = 1

    def num_groups(self, num_samples: int) -> int:
        return math.ceil(num_samples / self.num_inputs)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``(M, *in) -> (N, B, *in)``: worker n gets input ``n // r`` of every group."""
        groups = group_samples(x, self.num_inputs)  # (B, K, *in)
        return groups.repeat_interleave(self.copies, dim=1).movedim(1, 0)

    def padding_workers(self, num_samples: int) -> set[int]:
        """The copies of inputs that are padding in every group (``M < K``: input ``n // r`` of worker n)."""
        return {n for n in range(self.num_workers) if n // self.copies >= num_samples}

    def covered(self, mask: torch.Tensor) -> torch.Tensor:
        """``(B, N)`` arrivals -> ``(B, K)``: which inputs have at least one copy."""
        return mask.unflatten(1, (self.num_inputs, self.copies)).any(-1)

    def wait_over(self, mask: torch.Tensor, rule_met: bool) -> bool:
        return bool(self.covered(mask).all())

    def decodable(self, mask: torch.Tensor) -> bool:
        return bool(mask.any())

    def decode(self, results: torch.Tensor, mask: torch.Tensor, num_samples: int) -> tuple[torch.Tensor, list[int]]:
        """``(N, B, *out)`` -> ``(M, *out)`` from the lowest-index arrived copy of each input; NaN where none."""
        copies = results.movedim(0, 1).unflatten(1, (self.num_inputs, self.copies))  # (B, K, r, *out)
        arrived = mask.unflatten(1, (self.num_inputs, self.copies))  # (B, K, r)
        first = arrived.to(torch.int8).argmax(-1)  # (B, K): index of the first True (0 if none)
        index = first.reshape(*first.shape, 1, *([1] * (copies.dim() - 3))).expand(*first.shape, 1, *copies.shape[3:])
        decoded = copies.gather(2, index).squeeze(2).clone()  # (B, K, *out)
        covered = arrived.any(-1)
        decoded[~covered] = float("nan")
        missing = [i for i in (~covered).flatten().nonzero().flatten().tolist() if i < num_samples]
        return ungroup_samples(decoded, num_samples), missing

    def used_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The copies :meth:`decode` reads: the first arrived one of each input."""
        arrived = mask.unflatten(1, (self.num_inputs, self.copies))
        first = torch.nn.functional.one_hot(arrived.to(torch.int8).argmax(-1), self.copies).bool() & arrived
        return first.flatten(1)


#: The execution schemes that are not codes (every registered code is an execution scheme too).
BASELINE_SCHEMES = ("uncoded", "replication")


def list_execution_schemes() -> list[str]:
    """Every name :func:`make_execution_scheme` accepts (without a ``:S=...`` or ``:adaptive`` suffix)."""
    return [*BASELINE_SCHEMES, *list_codes()]


def make_execution_scheme(
    name: str, *, num_inputs: int, num_workers: int, policy=None, **code_kwargs
) -> CodedScheme | UncodedScheme | ReplicationScheme:
    """``"uncoded"``, ``"replication"`` or any name in ``torchgcc.list_codes()`` (built with ``make_code``, which
    alone receives ``code_kwargs``: the same options can be given for a mix of codes and baselines).

    A code name may carry its own S as ``"gcc:S=4"`` (so one run compares a code at several S on the same delays),
    or ``"gcc:adaptive"``: S chosen before every step by ``policy`` (a ``WaitCountController``, required then).
    """
    name, _, option = name.partition(":")
    num_stragglers = None
    if option == "adaptive":
        if policy is None or name in BASELINE_SCHEMES:
            raise ValueError(
                f"scheme {name}:adaptive needs a code name and policy=WaitCountController(...) "
                "(torchgcc.distributed: --wait-deadline)"
            )
    elif option:
        key, _, value = option.partition("=")
        if key != "S" or not value.isdigit() or name in BASELINE_SCHEMES:
            raise ValueError(f"bad scheme {name}:{option!r}: a code may carry its S as e.g. 'gcc:S=4'")
        num_stragglers = int(value)
        if num_stragglers >= num_workers:
            raise ValueError(f"scheme {name}:{option} leaves no worker out of N={num_workers}")
    if name == "uncoded":
        return UncodedScheme(num_workers=num_workers)
    if name == "replication":
        return ReplicationScheme(num_inputs=num_inputs, num_workers=num_workers)
    if name not in list_codes():
        raise ValueError(f"unknown scheme {name!r}; choose from {list_execution_schemes()}")
    code = make_code(name, num_inputs=num_inputs, num_workers=num_workers, **code_kwargs)
    if option == "adaptive":
        return CodedScheme(code, name=f"{name}:adaptive", num_stragglers=policy.num_stragglers, policy=policy)
    return CodedScheme(code, name=f"{name}:S={num_stragglers}" if option else name, num_stragglers=num_stragglers)
