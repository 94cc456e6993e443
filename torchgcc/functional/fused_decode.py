"""Fused Triton kernels that build the decode matrices of a whole batch of straggler masks in one launch.

One program per mask ``(B, N)`` row writes that mask's ``(K, N)`` decode matrix, zero in the straggler columns:

- :func:`spline_decode_matrices`: the cubic smoothing spline through the surviving worker points evaluated at the
  ``K`` regression points (the matrices of :func:`torchgcc.functional.smoothing_spline_matrix`, scattered into the
  surviving columns). The program compacts the survivors ``t_0 < ... < t_{n-1}``, forms the Reinsch bands of
  ``M = R + mu Q^T Q`` (``mu = n lam``) and the sparse right-hand sides ``c - mu Q^T v`` of the K points (four
  entries each), factors ``M = L diag(d) L^T`` while it solves ``L z = b`` in the same forward sweep, then solves
  ``D L^T x = z`` backwards and emits the matrix row of knot ``r`` as soon as ``x_{r-2}`` is known:
  ``D[:, r] = x_r / h_r - (1 / h_{r-1} + 1 / h_r) x_{r-1} + x_{r-2} / h_{r-1} + (a, b at the point's interval)``.
  Work O(N K) per mask: the program runs the banded recurrences sequentially, which a kernel does cheaply where
  the torch path (:mod:`torchgcc.functional.banded`) would need a launch per step. The smoothing ``mu = n lam`` of
  every row is read from memory, so the spacing rule and the data-adaptive rules (computed on the device first) use the
  same kernel.
- :func:`berrut_decode_matrices`: Berrut's rational interpolant through the survivors (closed form, two sweeps).

Everything is float64, one warp per mask (the K points are its lanes). The kernels are launched on CUDA tensors; with
the environment variable ``TRITON_INTERPRET=1`` set before this module is imported, Triton's interpreter runs them on
CPU tensors (slow, for testing). No CUDA run of them has been recorded yet (``benchmarks/gpu_check.sh`` does it).

This module imports ``triton`` at import time; ``torchgcc`` imports it only when a decoder uses the ``"triton"``
backend.
"""

import contextlib
import os
from typing import Tuple

import numpy as np
import torch
import triton
import triton.language as tl

__all__ = ["spline_decode_matrices", "berrut_decode_matrices", "interpreted"]


def interpreted() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1`` at import)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _spline_kernel(
    mask_ptr,
    beta_ptr,
    alpha_ptr,
    out_ptr,
    knots_ptr,
    index_ptr,
    bands_ptr,
    z_ptr,
    mu_ptr,
    N,
    K,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_K)
    kmask = offs < K
    alpha = tl.load(alpha_ptr + offs, mask=kmask, other=0.0)
    zeros = tl.zeros([BLOCK_K], dtype=tl.float64)
    mask_row = mask_ptr + pid * N
    out_row = out_ptr + pid * K * N
    knots = knots_ptr + pid * N
    index = index_ptr + pid * N
    d_row = bands_ptr + pid * 3 * N
    e_row = d_row + N
    f_row = e_row + N
    z_rows = z_ptr + pid * N * BLOCK_K

    # Sweep 0: compact the survivors (knots and their columns), zero the straggler columns, and count the knots at
    # or left of every point.
    n = tl.program_id(0) * 0
    count = tl.zeros([BLOCK_K], dtype=tl.int32)
    for j in range(0, N):
        arrived = tl.load(mask_row + j) != 0
        knot = tl.load(beta_ptr + j)
        tl.store(knots + n, knot, mask=arrived)
        tl.store(index + n, j, mask=arrived)
        tl.store(out_row + offs * N + j, zeros, mask=kmask & (tl.load(mask_row + j) == 0))
        count += (arrived & (knot <= alpha)).to(tl.int32)
        n += arrived.to(tl.int32)
    nf = n.to(tl.float64)
    mu = tl.load(mu_ptr + pid)  # the row's mu = n lam, computed on the device by the caller
    last = tl.maximum(n - 1, 0)  # loads are clamped to the survivors (masks with n < 2 are rejected by the caller)

    # Interval of every point: knots[idx] <= alpha < knots[idx + 1], clamped to the end intervals.
    idx = tl.minimum(tl.maximum(count - 1, 0), tl.maximum(n - 2, 0))
    t_left = tl.load(knots + idx, mask=kmask, other=0.0)
    h_at = tl.load(knots + tl.minimum(idx + 1, last), mask=kmask, other=1.0) - t_left
    a = (t_left + h_at - alpha) / h_at  # weight of the fitted value at knot idx
    b = (alpha - t_left) / h_at  # ... at knot idx + 1
    outside = (a < 0) | (b < 0)  # beyond the outermost knots the natural spline is linear
    c_a = tl.where(outside, -a, a * a * a - a) * h_at * h_at / 6.0
    c_b = tl.where(outside, -b, b * b * b - b) * h_at * h_at / 6.0
    # Spacings next to the interval, read only where the entry's column is interior (loads clamped otherwise).
    h_before = t_left - tl.load(knots + tl.maximum(idx - 1, 0), mask=kmask, other=0.0)
    h_after = tl.load(knots + tl.minimum(idx + 2, last), mask=kmask, other=1.0) - tl.load(
        knots + tl.minimum(idx + 1, last), mask=kmask, other=0.0
    )
    inv_before = tl.where(idx >= 1, 1.0 / h_before, 0.0)
    inv_at = 1.0 / h_at
    inv_after = tl.where(idx + 2 <= last, 1.0 / h_after, 0.0)
    # Right-hand side entries in interior columns idx - 2 .. idx + 1 (Q's columns are (1/h_j, -(1/h_j + 1/h_{j+1}),
    # 1/h_{j+1}) in rows j, j + 1, j + 2).
    entry0 = -mu * inv_before * a
    entry1 = c_a - mu * (-(inv_before + inv_at) * a + inv_at * b)
    entry2 = c_b - mu * (inv_at * a + -(inv_at + inv_after) * b)
    entry3 = -mu * inv_after * b

    # Sweep 1 (forward): bands of M, its LDL^T factors and z = L^{-1} rhs, row i = interior knot i + 1.
    m = n - 2
    d1 = nf * 0 + 1.0
    d2 = nf * 0 + 1.0
    e1 = nf * 0
    f1 = nf * 0
    f2 = nf * 0
    z1 = zeros
    z2 = zeros
    for i in range(0, m):
        t0 = tl.load(knots + i)
        t1 = tl.load(knots + i + 1)
        t2 = tl.load(knots + i + 2)
        t3 = tl.load(knots + tl.minimum(i + 3, last))
        h0 = t1 - t0
        h1 = t2 - t1
        lo = 1.0 / h0
        hi = 1.0 / h1
        mid = -(lo + hi)
        lo_next = hi
        hi_next = tl.where(i + 1 < m, 1.0 / (t3 - t2), 0.0)
        mid_next = -(lo_next + hi_next)
        diag = (h0 + h1) / 3.0 + mu * (lo * lo + mid * mid + hi * hi)
        off1 = tl.where(i + 1 < m, h1 / 6.0 + mu * (mid * lo_next + hi * mid_next), 0.0)
        off2 = tl.where(i + 2 < m, mu * (hi * hi_next), 0.0)
        d = diag - e1 * e1 * d1 - f2 * f2 * d2
        e = (off1 - f1 * e1 * d1) / d
        f = off2 / d
        rhs = (
            tl.where(idx - 2 == i, entry0, 0.0)
            + tl.where(idx - 1 == i, entry1, 0.0)
            + tl.where(idx == i, entry2, 0.0)
            + tl.where(idx + 1 == i, entry3, 0.0)
        )
        z = rhs - e1 * z1 - f2 * z2
        tl.store(d_row + i, d)
        tl.store(e_row + i, e)
        tl.store(f_row + i, f)
        tl.store(z_rows + i * BLOCK_K + offs, z)
        d2 = d1
        d1 = d
        e1 = e
        f2 = f1
        f1 = f
        z2 = z1
        z1 = z

    # Sweep 2 (backward): x = (D L^T)^{-1} z, and the matrix column of knot r once x_{r-2} is known.
    x_r = zeros  # x_r, x_{r-1}: zero beyond the interior
    x_r1 = zeros
    for step in range(0, n):
        r = n - 1 - step
        j = r - 2
        jj = tl.maximum(j, 0)
        x_next = x_r1  # x_{j+1}
        x_next2 = x_r  # x_{j+2}
        x_j = (
            tl.load(z_rows + jj * BLOCK_K + offs) * (1.0 / tl.load(d_row + jj))
            - tl.load(e_row + jj) * x_next
            - tl.load(f_row + jj) * x_next2
        )
        x_j = tl.where(j >= 0, x_j, 0.0)
        t_r = tl.load(knots + r)
        inv_h_r = tl.where(r < n - 1, 1.0 / (tl.load(knots + tl.minimum(r + 1, last)) - t_r), 0.0)
        inv_h_r1 = tl.where(r >= 1, 1.0 / (t_r - tl.load(knots + tl.maximum(r - 1, 0))), 0.0)
        column = inv_h_r * x_r + -(inv_h_r1 + inv_h_r) * x_r1 + inv_h_r1 * x_j
        column = column + tl.where(idx == r, a, 0.0) + tl.where(idx + 1 == r, b, 0.0)
        tl.store(out_row + offs * N + tl.load(index + r), column, mask=kmask)
        x_r = x_r1
        x_r1 = x_j


@triton.jit
def _berrut_kernel(mask_ptr, beta_ptr, alpha_ptr, out_ptr, N, K, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_K)
    kmask = offs < K
    alpha = tl.load(alpha_ptr + offs, mask=kmask, other=0.0)
    mask_row = mask_ptr + pid * N
    out_row = out_ptr + pid * K * N
    # Sweep 1: the sum of the weights (-1)^rank / (alpha - t_j) over survivors, and whether a point hits a node.
    total = tl.zeros([BLOCK_K], dtype=tl.float64)
    hits = tl.zeros([BLOCK_K], dtype=tl.int32)
    rank = tl.program_id(0) * 0
    for j in range(0, N):
        arrived = tl.load(mask_row + j) != 0
        diff = alpha - tl.load(beta_ptr + j)
        hit = arrived & (diff == 0)
        sign = 1.0 - 2.0 * (rank % 2).to(tl.float64)
        total += tl.where(arrived & (diff != 0), sign / tl.where(hit | (diff == 0), 1.0, diff), 0.0)
        hits += hit.to(tl.int32)
        rank += arrived.to(tl.int32)
    # Sweep 2: normalised weights, or the unit row of the node a point hits; zero in straggler columns.
    rank = rank * 0
    for j in range(0, N):
        arrived = tl.load(mask_row + j) != 0
        diff = alpha - tl.load(beta_ptr + j)
        hit = arrived & (diff == 0)
        sign = 1.0 - 2.0 * (rank % 2).to(tl.float64)
        weight = tl.where(arrived & (diff != 0), sign / tl.where(diff == 0, 1.0, diff), 0.0) / total
        value = tl.where(hits > 0, hit.to(tl.float64), weight)
        tl.store(out_row + offs * N + j, value, mask=kmask)
        rank += arrived.to(tl.int32)


def _quiet():
    """The interpreter evaluates both branches of ``tl.where`` in numpy: silence its divide-by-zero warnings."""
    return np.errstate(all="ignore") if interpreted() else contextlib.nullcontext()


def _prepare(mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    if mask.dtype != torch.bool or mask.ndim != 2 or mask.shape[1] != beta.shape[0]:
        raise ValueError(f"mask must be a (B, N={beta.shape[0]}) bool tensor, got {mask.dtype} {tuple(mask.shape)}")
    if mask.device.type != "cuda" and not interpreted():
        raise ValueError(
            f"the triton backend runs on CUDA tensors (or on CPU with TRITON_INTERPRET=1 set before import), "
            f"got a mask on {mask.device}; use backend='torch' there"
        )
    device = mask.device
    beta = beta.to(device=device, dtype=torch.float64).contiguous()
    alpha = alpha.to(device=device, dtype=torch.float64).contiguous()
    out = torch.empty(mask.shape[0], alpha.shape[0], beta.shape[0], dtype=torch.float64, device=device)
    return mask.contiguous().view(torch.uint8), beta, alpha, out


def spline_decode_matrices(
    mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor, mu: torch.Tensor
) -> torch.Tensor:
    """``(B, K, N)`` float64 smoothing-spline decode matrices for ``(B, N)`` bool masks (True = arrived).

    Args:
        mask: ``(B, N)`` bool; every row needs at least two survivors (rows with fewer give undefined values, the
            caller checks the counts).
        beta: ``(N,)`` ascending worker points.
        alpha: ``(K,)`` points where the spline is evaluated.
        mu: ``(B,)`` float64 ``mu = n lam`` of each row (``n`` its survivors, ``lam`` the smoothing of the
            mean-normalised objective), on the mask's device: a rule of the survivor counts or a data-adaptive
            choice, computed there without a read back.

    Equals :func:`torchgcc.functional.smoothing_spline_matrix` of each row's survivors, scattered into their
    columns, to rounding.
    """
    mask_u8, beta, alpha, out = _prepare(mask, beta, alpha)
    groups, num_workers = mask.shape
    num_inputs = alpha.shape[0]
    block = max(triton.next_power_of_2(num_inputs), 2)
    device = mask.device
    knots = torch.empty(groups, num_workers, dtype=torch.float64, device=device)
    index = torch.empty(groups, num_workers, dtype=torch.int32, device=device)
    bands = torch.empty(groups, 3, num_workers, dtype=torch.float64, device=device)
    z = torch.empty(groups, num_workers, block, dtype=torch.float64, device=device)
    mu = mu.to(device=device, dtype=torch.float64).expand(groups).contiguous()
    if groups:
        with _quiet():
            _spline_kernel[(groups,)](
                mask_u8,
                beta,
                alpha,
                out,
                knots,
                index,
                bands,
                z,
                mu,
                num_workers,
                num_inputs,
                BLOCK_K=block,
                num_warps=1,
            )
    return out


def berrut_decode_matrices(mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """``(B, K, N)`` float64 Berrut decode matrices for ``(B, N)`` bool masks (True = arrived; at least one per row).

    Equals :func:`torchgcc.functional.berrut_matrix` of each row's survivors, scattered into their columns.
    """
    mask_u8, beta, alpha, out = _prepare(mask, beta, alpha)
    groups, num_workers = mask.shape
    block = max(triton.next_power_of_2(alpha.shape[0]), 2)
    if groups:
        with _quiet():
            _berrut_kernel[(groups,)](
                mask_u8, beta, alpha, out, num_workers, alpha.shape[0], BLOCK_K=block, num_warps=1
            )
    return out
