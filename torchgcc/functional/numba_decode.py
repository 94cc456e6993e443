"""Compiled CPU kernels (numba) that build the decode matrices of a whole batch of straggler masks in one call.

The CPU counterparts of the Triton kernels in :mod:`torchgcc.functional.fused_decode`, the same algorithms and the
same contracts (``(B, N)`` bool masks in, ``(B, K, N)`` float64 matrices out, zero in the straggler columns):

- :func:`spline_decode_matrices`: per mask, compact the survivors ``t_0 < ... < t_{n-1}``, form the Reinsch bands of
  ``M = R + mu Q^T Q`` (``mu = n lam``) and the sparse right-hand sides ``c - mu Q^T v`` of the K points (four
  entries each, :mod:`torchgcc.functional.spline`), factor ``M = L diag(d) L^T`` while solving ``L z = b`` in one
  forward sweep, solve ``diag(d) L^T x = z`` backwards and write knot ``r``'s column
  ``D[:, r] = x_r / h_r - (1 / h_{r-1} + 1 / h_r) x_{r-1} + x_{r-2} / h_{r-1} + (a, b at the point's interval)``
  once ``x_{r-2}`` is known. O(N K) work and O(N K) scratch per mask.
- :func:`berrut_decode_matrices`: Berrut's rational interpolant through the survivors (two sweeps).

Why a compiled kernel on CPU: the batched torch path (:mod:`torchgcc.functional.banded`) solves the banded systems
of every mask with a few hundred vectorised operations, each a pass over ``(B, N, K)`` arrays and, for the 2x2-block
elimination, many small LAPACK calls; the sequential recurrences here touch each entry once (``benchmarks/decode.py``
measures both). The kernels release the GIL: a call splits the batch's groups over up to ``torch.get_num_threads()``
threads (each given at least :data:`MIN_WORK_PER_THREAD`), and calls from several threads run concurrently;
everything is float64. They are compiled on first use and cached on disk (numba's ``cache=True``), so the first call
of a fresh environment takes a few seconds. They take CPU tensors outside ``torch.compile`` (the decoders use the
torch path when traced) and are not differentiable (the matrices depend on the mask only).

This module imports ``numba`` at import time; ``torchgcc`` imports it only when a decoder uses the ``"numba"``
backend (the default for CPU data).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Tuple

import numba
import numpy as np
import torch

__all__ = ["berrut_decode_matrices", "spline_decode_matrices"]


@numba.njit(cache=True, nogil=True)
def _spline_kernel(mask, beta, alpha, mu_by_group, out):  # pragma: no cover - compiled (tested through the wrapper)
    groups, num_workers = mask.shape
    num_points = alpha.shape[0]
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
    for g in range(groups):
        out[g] = 0.0  # the straggler columns stay zero
        n = 0
        for j in range(num_workers):  # compact the survivors
            if mask[g, j]:
                knots[n] = beta[j]
                column[n] = j
                n += 1
        if n < 2:  # the caller marks such groups unusable
            continue
        mu = mu_by_group[g]
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
                -mu * before * ak,
                ca - mu * (-(before + at) * ak + at * bk),
                cb - mu * (at * ak - (at + after) * bk),
                -mu * after * bk,
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
            diag = (h0 + h1) / 3.0 + mu * (lo * lo + mid * mid + hi * hi)
            off1 = h1 / 6.0 + mu * (mid * hi - hi * (hi + hi_next)) if i + 1 < m else 0.0
            off2 = mu * hi * hi_next if i + 2 < m else 0.0
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
        # knot r's column: (Q x)_r, then the fitted values' weights a, b at each point's interval
        for r in range(n):
            right, left = inv_h[r + 1], inv_h[r]
            target = column[r]
            for k in range(num_points):
                out[g, k, target] = right * x[r + 2, k] - (left + right) * x[r + 1, k] + left * x[r, k]
        for k in range(num_points):
            out[g, k, column[idx[k]]] += a[k]
            out[g, k, column[idx[k] + 1]] += b[k]


@numba.njit(cache=True, nogil=True)
def _berrut_kernel(mask, beta, alpha, out):  # pragma: no cover - compiled (tested through the wrapper)
    groups, num_workers = mask.shape
    num_points = alpha.shape[0]
    for g in range(groups):
        for k in range(num_points):
            # the sum of the weights (-1)^rank / (alpha - t_j) over the survivors, or the survivor alpha hits
            total = 0.0
            hit = -1
            rank = 0
            for j in range(num_workers):
                if mask[g, j]:
                    diff = alpha[k] - beta[j]
                    if diff == 0.0:
                        hit = j
                    else:
                        total += (1.0 - 2.0 * (rank % 2)) / diff
                    rank += 1
            rank = 0
            for j in range(num_workers):
                if not mask[g, j]:
                    out[g, k, j] = 0.0
                    continue
                if hit >= 0:
                    out[g, k, j] = 1.0 if j == hit else 0.0
                else:
                    out[g, k, j] = (1.0 - 2.0 * (rank % 2)) / (alpha[k] - beta[j]) / total
                rank += 1


def _prepare(mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor) -> Tuple[np.ndarray, ...]:
    if mask.dtype != torch.bool or mask.ndim != 2 or mask.shape[1] != beta.shape[0]:
        raise ValueError(f"mask must be a (B, N={beta.shape[0]}) bool tensor, got {mask.dtype} {tuple(mask.shape)}")
    if mask.device.type != "cpu":
        raise ValueError(f"the numba backend runs on CPU tensors, got a mask on {mask.device}; use 'auto' or 'torch'")
    out = torch.empty(mask.shape[0], alpha.shape[0], beta.shape[0], dtype=torch.float64)
    arrays = (mask.contiguous(), beta.to(torch.float64).contiguous(), alpha.to(torch.float64).contiguous(), out)
    return tuple(array.numpy() for array in arrays)


#: The least work (groups x N x K) a thread is given: splitting smaller batches costs more in hand-offs (tens of
#: microseconds) than it saves (a group at N = 64, K = 16 takes about 2 microseconds).
MIN_WORK_PER_THREAD = 2**16

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


def _over_groups(run: Callable[[int, int], None], groups: int, work_per_group: int) -> None:
    """``run(start, stop)`` over contiguous chunks of ``range(groups)``, on up to ``torch.get_num_threads()`` threads
    (the calling one included; the kernels release the GIL), each given at least :data:`MIN_WORK_PER_THREAD`."""
    chunks = max(1, min(torch.get_num_threads(), groups, groups * work_per_group // MIN_WORK_PER_THREAD))
    bounds = [groups * i // chunks for i in range(chunks + 1)]
    futures = (
        [_helpers(chunks - 1).submit(run, *chunk) for chunk in zip(bounds[1:-1], bounds[2:])] if chunks > 1 else []
    )
    run(bounds[0], bounds[1])
    for future in futures:
        future.result()


def spline_decode_matrices(
    mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor, mu: torch.Tensor
) -> torch.Tensor:
    """``(B, K, N)`` float64 smoothing-spline decode matrices for ``(B, N)`` bool masks (True = arrived), on CPU.

    Args:
        mask: ``(B, N)`` bool; rows with fewer than two survivors come back zero (the caller marks them unusable).
        beta: ``(N,)`` ascending worker points.
        alpha: ``(K,)`` points where the spline is evaluated.
        mu: ``(B,)`` (or a scalar) float64 ``mu = n lam`` of each row, ``n`` its survivors and ``lam`` the smoothing
            of the mean-normalised objective (the argument of
            :func:`~torchgcc.functional.spline.padded_spline_matrices`).

    Equals :func:`torchgcc.functional.smoothing_spline_matrix` of each row's survivors, scattered into their
    columns, to rounding.
    """
    mask_np, beta_np, alpha_np, out_np = _prepare(mask, beta, alpha)
    mu_np = mu.detach().to(torch.float64).expand(mask.shape[0]).contiguous().numpy()

    def run(start: int, stop: int) -> None:
        _spline_kernel(mask_np[start:stop], beta_np, alpha_np, mu_np[start:stop], out_np[start:stop])

    _over_groups(run, len(mask_np), beta_np.shape[0] * alpha_np.shape[0])
    return torch.from_numpy(out_np)


def berrut_decode_matrices(mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """``(B, K, N)`` float64 Berrut decode matrices for ``(B, N)`` bool masks (True = arrived; at least one per row),
    on CPU. Equals :func:`torchgcc.functional.berrut_matrix` of each row's survivors, scattered into their columns."""
    mask_np, beta_np, alpha_np, out_np = _prepare(mask, beta, alpha)

    def run(start: int, stop: int) -> None:
        _berrut_kernel(mask_np[start:stop], beta_np, alpha_np, out_np[start:stop])

    _over_groups(run, len(mask_np), beta_np.shape[0] * alpha_np.shape[0])
    return torch.from_numpy(out_np)
