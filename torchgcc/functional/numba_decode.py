"""Compiled CPU kernels (numba) that build the decode matrices of a whole batch of straggler masks in one call, and
the torch operators that run them (``torchgcc::numba_spline_rows``, ``torchgcc::numba_berrut_rows``).

The CPU counterparts of the Triton kernels in :mod:`torchgcc.functional.fused_decode`, the same contracts: ``(B, N)``
bool masks in, ``(B, N, K)`` *rows* out (row ``j`` of a group holds worker ``j``'s weights for the K points,
the transpose of the ``(K, N)`` decode matrix, so that every row is written contiguously), zero rows for the
stragglers and NaN everywhere in a group with fewer than ``min_arrived`` survivors:

- :func:`spline_rows`: per mask, count and compact the survivors ``t_0 < ... < t_{n-1}``, read the group's smoothing
  ``mu = n lam`` from a table indexed by ``n``, form the Reinsch bands of ``M = R + mu Q^T Q`` and the sparse
  right-hand sides ``c - mu Q^T v`` of the K points (four entries each, :mod:`torchgcc.functional.spline`), factor
  ``M = L diag(d) L^T`` while solving ``L z = b`` in one forward sweep, solve ``diag(d) L^T x = z`` backwards and write
  knot ``r``'s row ``x_r / h_r - (1 / h_{r-1} + 1 / h_r) x_{r-1} + x_{r-2} / h_{r-1} + (a, b at the point's
  interval)``. O(N K) work and O(N K) scratch per mask.
- :func:`berrut_rows`: Berrut's rational interpolant through the survivors (two sweeps).

Why a compiled kernel on CPU: the batched torch path (:mod:`torchgcc.functional.banded`) solves the banded systems
of every mask with a few hundred vectorised operations; the sequential recurrences here touch each entry once
(``benchmarks/decode_profile.py`` profiles the torch path). The kernels release the GIL: a call splits the batch's
groups over up to ``torch.get_num_threads()`` threads (each given at least :data:`MIN_WORK_PER_THREAD`; small calls
run on the calling thread alone), and calls from several threads run concurrently. They solve in float64 and write the
rows in the dtype asked for (float32 for a float32 product: no conversion pass).

Each kernel is registered as a torch operator with a fake (shape-only) implementation, so ``torch.compile`` (also with
``fullgraph=True``) keeps the call in its graph and runs the same kernel. In eager mode the wrappers call the
implementation directly: going through the dispatcher adds a few microseconds per call, the kernel time of a small
batch.

Compilation and its cache: the kernels are compiled on first use (about a second) and cached on disk by numba, in the
directory ``NUMBA_CACHE_DIR`` names (numba's own setting, read when numba is imported), else next to this file, else
in the user's cache directory. Where none of them is writable (a read-only install run by a user without a writable
home) they are compiled in every process instead, after one logged warning.

This module imports ``numba``; ``torchgcc`` imports it only when a decoder uses the ``"numba"`` backend (the default
for CPU data).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

import numba
import numpy as np
import torch

__all__ = ["MIN_WORK_PER_THREAD", "berrut_rows", "spline_rows"]

logger = logging.getLogger("torchgcc.functional.numba_decode")

_warned_about_cache = False


def _compiled(function: Callable) -> Callable:
    """``function`` compiled by numba (GIL released), cached on disk where a cache directory is writable."""
    global _warned_about_cache
    try:
        return numba.njit(cache=True, nogil=True)(function)
    except RuntimeError as error:  # numba: "cannot cache function ...: no locator available"
        if not _warned_about_cache:
            _warned_about_cache = True
            logger.warning(
                "numba finds no writable cache directory (%s): the decode kernels are compiled in every process "
                "(about a second each); set NUMBA_CACHE_DIR to a writable directory to keep them",
                error,
            )
        return numba.njit(nogil=True)(function)


def _spline_kernel(mask, beta, alpha, mu, min_arrived, out, start, stop):  # pragma: no cover - compiled
    num_workers = mask.shape[1]
    num_points = alpha.shape[0]
    shared_mu = mu.shape[0] == 1
    knots = np.empty(num_workers)
    column = np.empty(num_workers, np.int64)
    # inv_h[r + 1] = 1 / (t_{r+1} - t_r) for r < n - 1, zero at 0 and from n: the terms of h_{-1} and h_{n-1} vanish
    inv_h = np.zeros(num_workers + 2)
    idx = np.empty(num_points, np.int64)
    a = np.empty(num_points)
    b = np.empty(num_points)
    factors = np.empty((3, num_workers))  # 1 / d, e, f of M = L diag(d) L^T
    # interior row i's right-hand sides, then z, then x, in row i + 2: two zero rows on either side of the m rows
    x = np.zeros((num_workers + 4, num_points))
    for g in range(start, stop):
        n = 0
        for j in range(num_workers):  # compact the survivors; the stragglers' rows are zero
            if mask[g, j]:
                knots[n] = beta[j]
                column[n] = j
                n += 1
            else:
                out[g, j, :] = 0.0
        if n < max(min_arrived, 2):  # unusable: NaN everywhere, so that the estimates are too
            out[g] = np.nan
            continue
        lam_n = mu[0 if shared_mu else g, n]
        m = n - 2
        for r in range(n - 1):
            inv_h[r + 1] = 1.0 / (knots[r + 1] - knots[r])
        inv_h[n] = inv_h[n + 1] = 0.0
        x[: m + 4] = 0.0
        # each point's interval knots[i] <= alpha < knots[i + 1] (clamped to the end intervals), its weights a, b of
        # the fitted values there, and its right-hand side's entries in interior rows i - 2 .. i + 1
        for k in range(num_points):
            point = alpha[k]
            i = min(max(np.searchsorted(knots[:n], point, side="right") - 1, 0), n - 2)
            idx[k] = i
            before, at, after = inv_h[i], inv_h[i + 1], inv_h[i + 2]
            h = knots[i + 1] - knots[i]
            ak = (knots[i + 1] - point) * at
            bk = (point - knots[i]) * at
            if ak < 0 or bk < 0:  # beyond the outermost knots the natural spline is linear
                ca, cb = -ak * h * h / 6.0, -bk * h * h / 6.0
            else:
                ca, cb = (ak * ak * ak - ak) * h * h / 6.0, (bk * bk * bk - bk) * h * h / 6.0
            a[k], b[k] = ak, bk
            entries = (
                -lam_n * before * ak,
                ca - lam_n * (-(before + at) * ak + at * bk),
                cb - lam_n * (at * ak - (at + after) * bk),
                -lam_n * after * bk,
            )
            for offset in range(4):
                row = i - 2 + offset
                if 0 <= row < m:
                    x[row + 2, k] = entries[offset]
        # forward: the bands of M (row i = interior knot i + 1), its factors and z = L^-1 rhs
        d1 = d2 = 1.0
        e1 = f1 = f2 = 0.0
        for i in range(m):
            h0 = knots[i + 1] - knots[i]
            h1 = knots[i + 2] - knots[i + 1]
            lo, hi, hi_next = inv_h[i + 1], inv_h[i + 2], inv_h[i + 3]
            mid = -(lo + hi)
            diag = (h0 + h1) / 3.0 + lam_n * (lo * lo + mid * mid + hi * hi)
            off1 = h1 / 6.0 + lam_n * (mid * hi - hi * (hi + hi_next)) if i + 1 < m else 0.0
            off2 = lam_n * hi * hi_next if i + 2 < m else 0.0
            d = diag - e1 * e1 * d1 - f2 * f2 * d2
            inv_d = 1.0 / d
            e = (off1 - f1 * e1 * d1) * inv_d
            f = off2 * inv_d
            factors[0, i], factors[1, i], factors[2, i] = inv_d, e, f
            for k in range(num_points):
                x[i + 2, k] -= e1 * x[i + 1, k] + f2 * x[i, k]
            d2, d1, e1, f2, f1 = d1, d, e, f1, f
        # backward: x = (diag(d) L^T)^-1 z
        for j in range(m - 1, -1, -1):
            inv_d, e, f = factors[0, j], factors[1, j], factors[2, j]
            for k in range(num_points):
                x[j + 2, k] = x[j + 2, k] * inv_d - e * x[j + 3, k] - f * x[j + 4, k]
        # knot r's row: (Q x)_r, plus the fitted values' weights a, b where r ends a point's interval (those two
        # entries of each point written again with them, so that every entry is rounded once to out's dtype)
        for r in range(n):
            right, left = inv_h[r + 1], inv_h[r]
            row = out[g, column[r]]
            for k in range(num_points):
                row[k] = right * x[r + 2, k] - (left + right) * x[r + 1, k] + left * x[r, k]
        for k in range(num_points):
            for r, weight in ((idx[k], a[k]), (idx[k] + 1, b[k])):
                right, left = inv_h[r + 1], inv_h[r]
                out[g, column[r], k] = right * x[r + 2, k] - (left + right) * x[r + 1, k] + left * x[r, k] + weight


def _berrut_kernel(mask, beta, alpha, min_arrived, out, start, stop):  # pragma: no cover - compiled
    num_workers = mask.shape[1]
    num_points = alpha.shape[0]
    total = np.empty(num_points)
    hit = np.empty(num_points, np.int64)
    for g in range(start, stop):
        # the sum of the weights (-1)^rank / (alpha - t_j) over the survivors, or the survivor alpha hits
        total[:] = 0.0
        hit[:] = -1
        rank = 0
        for j in range(num_workers):
            if mask[g, j]:
                sign = 1.0 - 2.0 * (rank % 2)
                for k in range(num_points):
                    diff = alpha[k] - beta[j]
                    if diff == 0.0:
                        hit[k] = j
                    else:
                        total[k] += sign / diff
                rank += 1
        if rank < max(min_arrived, 1):
            out[g] = np.nan
            continue
        rank = 0
        for j in range(num_workers):
            row = out[g, j]
            if not mask[g, j]:
                row[:] = 0.0
                continue
            sign = 1.0 - 2.0 * (rank % 2)
            for k in range(num_points):
                if hit[k] >= 0:
                    row[k] = 1.0 if j == hit[k] else 0.0
                else:
                    row[k] = sign / (alpha[k] - beta[j]) / total[k]
            rank += 1


_spline_kernel = _compiled(_spline_kernel)
_berrut_kernel = _compiled(_berrut_kernel)

#: The least work (groups x N x K, about 2 ns an entry) a thread is given. A helper thread pays only where its share
#: outlasts the spin-wait of torch's OpenMP workers: after every parallel torch op (the decode's own bmm, a model's
#: layers) they keep the other cores busy for some milliseconds (libgomp's default wait policy), and a split started
#: then runs no faster than one thread until they sleep. In loops of decodes on 2 threads a split paid from about
#: 2^21 entries in all (N = 256 and 1024) and lost below it (N = 64, B = 512: 3-6% slower than one thread).
MIN_WORK_PER_THREAD = 2**20

_pool: Optional[ThreadPoolExecutor] = None
_pool_size = 0
_pool_lock = threading.Lock()


def _forget_pool_in_child() -> None:  # a forked child has none of the parent's threads
    global _pool, _pool_size
    _pool, _pool_size = None, 0


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _helpers(count: int) -> ThreadPoolExecutor:
    """The module's thread pool, with at least ``count`` threads (a larger one replaces a smaller)."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < count:
            _pool, _pool_size = ThreadPoolExecutor(max_workers=count, thread_name_prefix="torchgcc-decode"), count
        return _pool


def _over_groups(kernel: Callable, args: tuple, groups: int, work_per_group: int) -> None:
    """``kernel(*args, start, stop)`` (groups ``start`` to ``stop``) over contiguous chunks of ``range(groups)``, on up
    to ``torch.get_num_threads()`` threads (the calling one included; the kernels release the GIL), each given at least
    :data:`MIN_WORK_PER_THREAD`; a small call runs on the calling thread alone."""
    chunks = min(groups, groups * work_per_group // MIN_WORK_PER_THREAD, torch.get_num_threads())
    if chunks < 2:
        kernel(*args, 0, groups)
        return
    bounds = [groups * i // chunks for i in range(chunks + 1)]
    futures = [_helpers(chunks - 1).submit(kernel, *args, *chunk) for chunk in zip(bounds[1:-1], bounds[2:])]
    kernel(*args, bounds[0], bounds[1])
    for future in futures:
        future.result()


#: numpy views of the decoders' constant inputs (points, smoothing tables), by ``id``: a weak reference to the
#: tensor, its data pointer when viewed, the views. A hit needs the same live tensor on the same memory.
_views: dict[int, tuple[weakref.ref, int, tuple[np.ndarray, np.ndarray]]] = {}


def _constant(tensor: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``tensor.numpy()`` and the same as a table (a vector as its one row), remembered for the tensors a decoder
    passes on every call."""
    entry = _views.get(id(tensor))
    if entry is not None and entry[0]() is tensor and entry[1] == tensor.data_ptr():
        return entry[2]
    key = id(tensor)
    view = tensor.numpy()
    views = (view, view.reshape(1, -1) if view.ndim == 1 else view)
    _views[key] = (weakref.ref(tensor, lambda _: _views.pop(key, None)), tensor.data_ptr(), views)
    return views


def _spline_rows(
    mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor, mu: torch.Tensor, min_arrived: int, dtype: torch.dtype
) -> torch.Tensor:
    groups, num_workers = mask.shape
    num_points = alpha.shape[0]
    out = torch.empty(groups, num_workers, num_points, dtype=dtype)
    args = (mask.numpy(), _constant(beta)[0], _constant(alpha)[0], _constant(mu)[1], min_arrived, out.numpy())
    _over_groups(_spline_kernel, args, groups, num_workers * num_points)
    return out


def _berrut_rows(
    mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor, min_arrived: int, dtype: torch.dtype
) -> torch.Tensor:
    groups, num_workers = mask.shape
    num_points = alpha.shape[0]
    out = torch.empty(groups, num_workers, num_points, dtype=dtype)
    args = (mask.numpy(), _constant(beta)[0], _constant(alpha)[0], min_arrived, out.numpy())
    _over_groups(_berrut_kernel, args, groups, num_workers * num_points)
    return out


# The operators, defined with torch.library's define / impl / register_fake rather than torch.library.custom_op: the
# latter's Python wrappers (autograd, the aliasing check) cost 13 microseconds a call against 4 (torch 2.14.1, the
# fastest of many calls), which a compiled graph pays on every decode; these operators have no autograd (their
# inputs never require it).
torch.library.define(
    "torchgcc::numba_spline_rows",
    "(Tensor mask, Tensor beta, Tensor alpha, Tensor mu, int min_arrived, ScalarType dtype) -> Tensor",
)
torch.library.define(
    "torchgcc::numba_berrut_rows",
    "(Tensor mask, Tensor beta, Tensor alpha, int min_arrived, ScalarType dtype) -> Tensor",
)
torch.library.impl("torchgcc::numba_spline_rows", "cpu", _spline_rows)
torch.library.impl("torchgcc::numba_berrut_rows", "cpu", _berrut_rows)


@torch.library.register_fake("torchgcc::numba_spline_rows")
def _(mask, beta, alpha, mu, min_arrived, dtype):
    return mask.new_empty((mask.shape[0], beta.shape[0], alpha.shape[0]), dtype=dtype)


@torch.library.register_fake("torchgcc::numba_berrut_rows")
def _(mask, beta, alpha, min_arrived, dtype):
    return mask.new_empty((mask.shape[0], beta.shape[0], alpha.shape[0]), dtype=dtype)


def spline_rows(
    mask: torch.Tensor,
    beta: torch.Tensor,
    alpha: torch.Tensor,
    mu: torch.Tensor,
    min_arrived: int,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``(B, N, K)`` smoothing-spline decode rows (the transposed ``(B, K, N)`` matrices) for ``(B, N)`` bool masks
    (True = arrived), on CPU: solved in float64, written in ``dtype`` (float32 for a float32 product: no conversion
    pass).

    Args:
        mask: ``(B, N)`` bool, contiguous.
        beta: ``(N,)`` float64 ascending worker points, contiguous.
        alpha: ``(K,)`` float64 points where the spline is evaluated, contiguous.
        mu: ``(N + 1,)`` or ``(B, N + 1)`` float64, contiguous: ``mu[..., n] = n lam`` for a group of ``n``
            survivors (``lam`` the smoothing of the mean-normalised objective, the argument of
            :func:`~torchgcc.functional.padded_spline_matrices`), one table for every group or one per group.
        min_arrived: groups with fewer survivors (or fewer than 2) are NaN everywhere.
        dtype: float64 or float32, the rows' dtype.

    Equals :func:`torchgcc.functional.smoothing_spline_matrix` of each row's survivors, transposed and scattered into
    their rows, to rounding. The inputs are not checked (the decoder has checked them).
    """
    if torch.compiler.is_compiling():
        return torch.ops.torchgcc.numba_spline_rows.default(mask, beta, alpha, mu, min_arrived, dtype)
    return _spline_rows(mask, beta, alpha, mu, min_arrived, dtype)


def berrut_rows(
    mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor, min_arrived: int, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """``(B, N, K)`` Berrut decode rows in ``dtype`` for ``(B, N)`` bool masks (True = arrived), on CPU: the transposed
    :func:`torchgcc.functional.berrut_matrix` of each row's survivors, scattered into their rows; NaN everywhere in a
    group with fewer than ``min_arrived`` (or no) survivors. Arguments as :func:`spline_rows` says."""
    if torch.compiler.is_compiling():
        return torch.ops.torchgcc.numba_berrut_rows.default(mask, beta, alpha, min_arrived, dtype)
    return _berrut_rows(mask, beta, alpha, min_arrived, dtype)
