"""Gradient codes (Tandon et al., ICML 2017) and the uncoded baselines, as small objects.

A gradient code spreads ``k`` data partitions over ``n`` workers. Its encoding matrix ``B`` (``(n, k)`` float64)
says everything: worker ``i`` holds the partitions in the support of row ``b_i`` and sends the linear combination
``f_i = sum_j B[i, j] g_j`` of their gradients. The coordinator waits for :attr:`GradientCode.wait_for` workers and
asks :meth:`GradientCode.decode` for a vector ``a`` (``(n,)`` float64, zero outside the arrived set ``F``) with

    sum_{i in F} a_i f_i = sum_j (a^T B)_j g_j  ~  sum_j g_j.

Exact codes (FR, CR, uncoded) satisfy ``a^T B_F = 1`` (the full gradient sum, checked); the approximate baselines
(IS-SGD, IS-GC) return a rescaled estimate of it and say so with ``exact = False``.

=====================  =====================================================  ================  ===========
code                   worker i holds                                          waits for         decoding
=====================  =====================================================  ================  ===========
``UncodedCode`` (DGD)  partition i                                              all n             exact
``IgnoreStragglers``   partition i                                              n - s             n / |F|
``FractionalRep...``   its group's s + 1 partitions, coefficients 1            n - s             first per group
``CyclicRep...``       partitions i..i+s mod n, random null-space coefficients  n - s             least squares
``IgnoreStragglersGC`` c partitions (FR groups or cyclic windows), 1            n - s             disjoint union
=====================  =====================================================  ================  ===========
"""

from __future__ import annotations

import itertools
import operator
from abc import ABC, abstractmethod
from typing import Any, Iterable, Sequence

import torch

from torchgcc.checks import check_seed

__all__ = [
    "CyclicRepetitionCode",
    "FractionalRepetitionCode",
    "GradientCode",
    "IgnoreStragglersCode",
    "IgnoreStragglersGCCode",
    "UncodedCode",
    "UndecodableError",
    "recovery_error",
    "residual_tolerance",
]


class UndecodableError(ValueError):
    """The workers that arrived cannot recover the gradient sum with this code."""


def _check_count(name: str, value: int, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


class GradientCode(ABC):
    """``n`` workers, ``k`` partitions, tolerance ``s``, encoding matrix :attr:`B` ``(n, k)`` float64.

    Subclasses set :attr:`B` and implement :meth:`_decode`; :meth:`decode` checks the arrived set first.
    """

    #: True when :meth:`decode` returns ``a`` with ``a^T B_F = 1`` (the exact gradient sum).
    exact: bool = True
    #: True for pipelined codes (:mod:`torchgcc.gradient_coding.pipelined`): one fresh partition per step.
    pipelined: bool = False

    def __init__(self, num_workers: int, num_stragglers: int, B: torch.Tensor) -> None:
        self.num_workers = num_workers
        self.num_stragglers = num_stragglers
        self.B = B.to(torch.float64)

    @property
    def num_partitions(self) -> int:
        """k, the data partitions (columns of :attr:`B`)."""
        return self.B.shape[1]

    @property
    def wait_for(self) -> int:
        """How many workers the coordinator waits for (``n - s``)."""
        return self.num_workers - self.num_stragglers

    def partitions(self, worker: int) -> list[int]:
        """The partitions worker ``worker`` holds, in the order it computes them (ascending)."""
        return self.B[worker].nonzero().flatten().tolist()

    def coefficients(self, worker: int) -> torch.Tensor:
        """``(len(partitions(worker)),)`` float64: the weights of its partition gradients in its message."""
        return self.B[worker, self.partitions(worker)]

    def compute_load(self, step: int) -> int:
        """Partitions every worker computes at ``step`` (the most any row holds)."""
        return int((self.B != 0).sum(dim=1).max())

    def decode(self, arrived: Sequence[int]) -> torch.Tensor:
        """Decoding vector ``a`` ``(n,)`` float64 from the workers that arrived, in arrival order.

        Raises:
            TypeError: ``arrived`` is not a sequence, or a worker index is not an integer (``0.5``, ``True``; numpy
                and 0-dim integer tensors are).
            ValueError: a worker index is out of range or repeated.
            UndecodableError: the arrived workers cannot recover the gradient sum (exact codes) or none arrived.
        """
        if isinstance(arrived, (str, bytes)) or not isinstance(arrived, Iterable):
            raise TypeError(
                f"arrived must be a sequence of the worker indices that arrived (e.g. [0, 2, 3]), got {arrived!r}"
            )
        arrived = [_worker_index(i) for i in arrived]
        if len(set(arrived)) != len(arrived) or any(not 0 <= i < self.num_workers for i in arrived):
            raise ValueError(f"arrived must list distinct workers in [0, {self.num_workers}), got {arrived}")
        if not arrived:
            raise UndecodableError("no worker arrived; nothing to decode")
        return self._decode(arrived)

    @abstractmethod
    def _decode(self, arrived: list[int]) -> torch.Tensor: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.num_workers}, s={self.num_stragglers}, k={self.num_partitions})"


def _worker_index(value: Any) -> int:
    """``value`` as a worker index: an integer (Python, numpy, or a 0-dim integer tensor), never a float or bool."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        raise TypeError(f"worker indices must be integers, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"worker indices must be integers, got {value!r} ({type(value).__name__})") from None


def recovery_error(code: GradientCode, a: torch.Tensor) -> float:
    """``max_j |(a^T B)_j - 1|``: how far ``a`` is from recovering the plain gradient sum."""
    return float((a @ code.B - 1).abs().max())


class UncodedCode(GradientCode):
    """DGD, synchronous SGD: one partition per worker, ``B = I``, wait for all ``n``."""

    def __init__(self, num_workers: int) -> None:
        _check_count("num_workers", num_workers, 1)
        super().__init__(num_workers, 0, torch.eye(num_workers, dtype=torch.float64))

    def _decode(self, arrived):
        missing = sorted(set(range(self.num_workers)) - set(arrived))
        if missing:
            raise UndecodableError(f"uncoded gradient descent needs every worker; missing {missing}")
        return torch.ones(self.num_workers, dtype=torch.float64)


class IgnoreStragglersCode(GradientCode):
    """IS-SGD: one partition per worker, wait for the first ``n - s``, rescale their sum by ``n / |F|``.

    An unbiased (over uniformly random straggler sets) but inexact estimate of the gradient sum.
    """

    exact = False

    def __init__(self, num_workers: int, num_stragglers: int) -> None:
        _check_count("num_workers", num_workers, 1)
        _check_count("num_stragglers", num_stragglers, 0)
        if num_stragglers >= num_workers:
            raise ValueError(f"num_stragglers must be < num_workers={num_workers}, got {num_stragglers}")
        super().__init__(num_workers, num_stragglers, torch.eye(num_workers, dtype=torch.float64))

    def _decode(self, arrived):
        a = torch.zeros(self.num_workers, dtype=torch.float64)
        a[arrived] = self.num_workers / len(arrived)
        return a


def _fr_groups(num_workers: int, group_size: int) -> torch.Tensor:
    """``I_{n/g} kron 1_{g x g}``: groups of ``group_size`` workers share ``group_size`` partitions."""
    if num_workers % group_size:
        raise ValueError(f"fractional repetition needs group size {group_size} to divide num_workers={num_workers}")
    ones = torch.ones(group_size, group_size, dtype=torch.float64)
    return torch.kron(torch.eye(num_workers // group_size, dtype=torch.float64), ones)


def _cyclic_support(num_workers: int, width: int) -> torch.Tensor:
    """``(n, n)`` 0/1 float64: row ``i`` covers partitions ``i, i+1, ..., i+width-1`` mod ``n``."""
    rows = torch.arange(num_workers).unsqueeze(1)
    cols = (rows + torch.arange(width)) % num_workers
    support = torch.zeros(num_workers, num_workers, dtype=torch.float64)
    support.scatter_(1, cols, 1.0)
    return support


class FractionalRepetitionCode(GradientCode):
    """FR: ``n / (s + 1)`` groups of ``s + 1`` workers; a group's workers all hold its ``s + 1`` partitions.

    ``B = I_{n/(s+1)} kron 1_{(s+1) x (s+1)}``, so each worker sends the plain sum of its partitions' gradients, and
    with at most ``s`` stragglers every group has a survivor. Decoding takes the first arrival of every group
    (``a_i = 1`` there, 0 elsewhere): exact, no linear algebra. Requires ``(s + 1) | n``.
    """

    def __init__(self, num_workers: int, num_stragglers: int) -> None:
        _check_count("num_workers", num_workers, 1)
        _check_count("num_stragglers", num_stragglers, 0)
        super().__init__(num_workers, num_stragglers, _fr_groups(num_workers, num_stragglers + 1))

    def group(self, worker: int) -> int:
        """The group of ``worker``."""
        return worker // (self.num_stragglers + 1)

    def _decode(self, arrived):
        first: dict[int, int] = {}
        for worker in arrived:
            first.setdefault(self.group(worker), worker)
        missing = sorted(set(range(self.num_workers // (self.num_stragglers + 1))) - set(first))
        if missing:
            raise UndecodableError(
                f"fractional repetition: no worker of group(s) {missing} arrived "
                f"(arrived {sorted(arrived)}); at most s={self.num_stragglers} per group may "
                "straggle"
            )
        a = torch.zeros(self.num_workers, dtype=torch.float64)
        a[list(first.values())] = 1.0
        return a


class CyclicRepetitionCode(GradientCode):
    """CR: worker ``i`` holds partitions ``i, ..., i + s`` mod ``n`` with coefficients from a random null space.

    Construction (Tandon et al., Alg. 1): draw ``H`` ``(s, n)`` standard normal with its last column set to minus
    the row sums (so ``H 1 = 0``); row ``i`` of ``B`` has ``B[i, i] = 1`` and its other ``s`` support entries
    solve ``H[:, S_i \\ {i}] x = -H[:, i]``, so every row lies in ``null(H)`` (dimension ``n - s``, containing
    ``1``). Any ``n - s`` rows are then independent with probability 1 and span ``1``.

    Decoding solves ``B_F^T a = 1`` by least squares (SVD) over the arrived set and checks the residual against the
    backward-error bound of a consistent system, :func:`residual_tolerance`:
    ``max |a^T B_F - 1| <= c * max(k, |F|) * eps * (||B_F||_F ||a||_2 + sqrt(k))`` with ``c = 10``. The tolerance
    thus grows with the conditioning (``||B_F|| ||a||`` is of the order of cond(B_F)), which reaches ~1e6 at
    n = 12, s = 3 and ~3e8 at n = 32, s = 6; a set that cannot recover the sum leaves a residual of order 1e-4 or
    more and raises :class:`UndecodableError`.

    Args:
        num_workers: n (= k partitions).
        num_stragglers: s, with ``s < n``.
        seed: seed of the random ``H`` (an integer).
    """

    def __init__(self, num_workers: int, num_stragglers: int, *, seed: int = 0) -> None:
        _check_count("num_workers", num_workers, 1)
        _check_count("num_stragglers", num_stragglers, 0)
        if num_stragglers >= num_workers:
            raise ValueError(f"num_stragglers must be < num_workers={num_workers}, got {num_stragglers}")
        self.seed = seed = check_seed("seed", seed)
        super().__init__(num_workers, num_stragglers, self._construct(num_workers, num_stragglers, seed))
        self._cache: dict[frozenset, torch.Tensor] = {}

    def partitions(self, worker: int) -> list[int]:
        """``[i, i + 1, ..., i + s]`` mod n, in this cyclic order."""
        return [(worker + j) % self.num_workers for j in range(self.num_stragglers + 1)]

    @staticmethod
    def _construct(n: int, s: int, seed: int) -> torch.Tensor:
        B = torch.zeros(n, n, dtype=torch.float64)
        if s == 0:
            return B.fill_diagonal_(1.0)
        generator = torch.Generator().manual_seed(seed)
        H = torch.randn(s, n, generator=generator, dtype=torch.float64)
        H[:, -1] = -H[:, :-1].sum(dim=1)
        for i in range(n):
            others = [(i + j) % n for j in range(1, s + 1)]
            B[i, i] = 1.0
            B[i, others] = torch.linalg.solve(H[:, others], -H[:, i])
        return B

    def _decode(self, arrived):
        key = frozenset(arrived)
        if key not in self._cache:
            rows = sorted(key)
            BF = self.B[rows]  # (|F|, k)
            ones = torch.ones(self.num_partitions, 1, dtype=torch.float64)
            solution = torch.linalg.lstsq(BF.T, ones, driver="gelsd").solution.flatten()
            residual = float((solution @ BF - 1).abs().max())
            tolerance = residual_tolerance(BF, solution)
            if not residual <= tolerance:
                why = (
                    f"it needs at least n - s = {self.wait_for} workers, {len(rows)} arrived"
                    if len(rows) < self.wait_for
                    else f"{len(rows)} >= n - s = {self.wait_for} arrived, but B_F is numerically rank-deficient "
                    f"for this random construction (seed={self.seed})"
                )
                raise UndecodableError(
                    f"cyclic repetition cannot recover the gradient sum from workers {rows}: residual "
                    f"max|a^T B_F - 1| = {residual:.3g} > tolerance {tolerance:.3g}; {why}"
                )
            a = torch.zeros(self.num_workers, dtype=torch.float64)
            a[rows] = solution
            self._cache[key] = a
        return self._cache[key].clone()


#: Constant ``c`` of :func:`residual_tolerance`.
RESIDUAL_FACTOR = 10.0


def residual_tolerance(BF: torch.Tensor, a: torch.Tensor) -> float:
    """The largest residual ``max |a^T B_F - 1|`` that rounding explains for a least-squares ``a`` of a consistent
    system: ``c * max(k, |F|) * eps * (||B_F||_F ||a||_2 + sqrt(k))``, ``c`` = :data:`RESIDUAL_FACTOR`.

    A backward-stable solver returns the exact solution of ``(B_F + E)^T a = 1 + e`` with ``||E|| <= c' u ||B_F||``
    and ``||e|| <= c' u ||1||`` (``c'`` of the order of the dimensions), so the residual is at most
    ``||E|| ||a|| + ||e||``; ``||B_F||_F`` bounds the 2-norm from above.
    """
    rows, k = BF.shape
    eps = torch.finfo(torch.float64).eps
    return RESIDUAL_FACTOR * max(k, rows) * eps * (float(torch.linalg.norm(BF)) * float(a.norm()) + k**0.5)


class IgnoreStragglersGCCode(GradientCode):
    """IS-GC: ``c`` partitions per worker (FR groups of ``c``, or cyclic windows of length ``c``), coefficient 1.

    Waits for ``n - s`` workers and keeps a largest set of arrived workers whose partitions do not overlap (each
    arrived FR group once; for cyclic windows, the best greedy scan over every starting worker, which is optimal
    for equal-length arcs on a circle). Their sum covers ``count * c`` distinct partitions and is rescaled by
    ``n / (count * c)`` to estimate the sum over all ``n`` partitions (the authors' normalisation by the number of
    recovered partitions). Inexact.

    Args:
        num_workers: n (= k partitions).
        num_stragglers: s, with ``s < n`` (only the number waited for).
        partitions_per_worker: c (2 in the PGC simulations); for ``layout="fr"`` it must divide n.
        layout: ``"cr"`` (cyclic windows) or ``"fr"`` (groups).
    """

    exact = False

    def __init__(
        self, num_workers: int, num_stragglers: int, *, partitions_per_worker: int = 2, layout: str = "cr"
    ) -> None:
        _check_count("num_workers", num_workers, 1)
        _check_count("num_stragglers", num_stragglers, 0)
        _check_count("partitions_per_worker", partitions_per_worker, 1)
        if num_stragglers >= num_workers or partitions_per_worker > num_workers:
            raise ValueError(
                f"need num_stragglers < num_workers and partitions_per_worker <= num_workers, got "
                f"s={num_stragglers}, c={partitions_per_worker}, n={num_workers}"
            )
        if layout not in ("cr", "fr"):
            raise ValueError(f"layout must be 'cr' or 'fr', got {layout!r}")
        self.layout, self.c = layout, partitions_per_worker
        support = (_fr_groups if layout == "fr" else _cyclic_support)(num_workers, partitions_per_worker)
        super().__init__(num_workers, num_stragglers, support)

    def disjoint_workers(self, arrived: Sequence[int]) -> list[int]:
        """A largest subset of ``arrived`` whose partition sets do not overlap, ascending."""
        n, c = self.num_workers, self.c
        if self.layout == "fr":
            first: dict[int, int] = {}
            for worker in arrived:
                first.setdefault(worker // c, worker)
            return sorted(first.values())
        ordered = sorted(arrived)
        best: list[int] = []
        for start in range(len(ordered)):
            chosen, end = [], None  # end: first partition offset (from the start worker) still free
            for worker in itertools.chain(ordered[start:], ordered[:start]):
                offset = (worker - ordered[start]) % n
                if (end is None or offset >= end) and offset + c <= n:
                    chosen.append(worker)
                    end = offset + c
            if len(chosen) > len(best):
                best = chosen
        return sorted(best)

    def _decode(self, arrived):
        chosen = self.disjoint_workers(arrived)
        a = torch.zeros(self.num_workers, dtype=torch.float64)
        a[chosen] = self.num_workers / (len(chosen) * self.c)
        return a
