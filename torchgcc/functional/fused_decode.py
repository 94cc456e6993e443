"""Triton kernels for the decode on CUDA: the decode matrices of a whole batch of straggler masks in one launch, and
their product with the results in a second one, with the check's finiteness flag; registered as torch operators.

Launches and their contracts (the same as :mod:`torchgcc.functional.numba_decode`'s on CPU):

- :func:`spline_rows` (``torchgcc::triton_spline_rows``): ``(B, N)`` bool masks in, ``(B, N, K)`` *rows* out
  (row ``j`` of a group holds worker ``j``'s weights for the K points: the transposed ``(K, N)`` decode matrix, every
  row written contiguously), zero rows for the stragglers and NaN everywhere in a group with fewer than
  ``min_arrived`` survivors. A program builds ``GROUPS`` groups at once, in a ``(GROUPS, BLOCK_K)`` block of lanes
  (one lane per group and point; a full warp at K = 16 with two groups). It compacts the survivors of a chunk of
  workers at a time (a prefix sum of the mask, a scatter of the knots), counts each point's knots to its left (its
  interval), reads the group's ``mu = n lam`` from a table indexed by ``n``, then runs the recurrences of
  :mod:`torchgcc.functional.numba_decode` with every group's scalars in registers: the forward sweep forms the
  Reinsch bands of ``M = R + mu Q^T Q``, factors ``M = L diag(d) L^T`` and solves ``L z = b`` for the K sparse
  right-hand sides (``z`` to a float64 scratch in the rows' layout), the backward sweep solves ``diag(d) L^T x = z``
  and writes knot ``r``'s row once ``x_{r-2}`` is known, in float64 or float32 (the product's dtype). The loads
  of the next knot are issued a step ahead; one float64 division per step is on the recurrence's critical path.
- :func:`berrut_rows` (``torchgcc::triton_berrut_rows``): Berrut's rational interpolant, one program per group, a
  ``(CHUNK, BLOCK_K)`` tile of rows at a time.
- :func:`apply_rows` (``torchgcc::triton_apply``): ``out = matrices @ y`` for float32, float16 and bfloat16 results
  (float32 products and sums, IEEE, no TF32), ``(B, K, N)`` matrices of any strides, one program per
  ``(group, BLOCK_K points, BLOCK_D outputs)`` tile, and with ``check`` a count of the non-finite estimates (atomics
  only where a tile has one), so that the check reads one number back and never makes a second pass over the output.

Per call with ``check=False``: two launches (rows, product) and no host synchronisation, capturable in a CUDA graph
(the memory comes from torch's allocator); ``check=True`` adds the flag's zeroing and its one read. Being
``torch.library.triton_op`` operators, ``torch.compile`` sees the kernels (``fullgraph=True`` holds) and calls the
same launches.

With the environment variable ``TRITON_INTERPRET=1`` set before this module is imported, Triton's interpreter runs
the kernels on CPU tensors (slow, for testing). No CUDA run of them has been recorded yet (``benchmarks/gpu_check.sh``
does it; docs/api.md writes down what to expect).

This module imports ``triton``; ``torchgcc`` imports it only when a decoder uses the ``"triton"`` backend.
"""

import contextlib
import os

import numpy as np
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

__all__ = ["APPLY_DTYPES", "apply_rows", "berrut_rows", "interpreted", "spline_rows"]

#: The result dtypes :func:`apply_rows` takes (its products are float32).
APPLY_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def interpreted() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1`` at import)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _spline_rows_kernel(
    mask_ptr,
    beta_ptr,
    alpha_ptr,
    mu_ptr,
    out_ptr,
    z_ptr,
    knots_ptr,
    cols_ptr,
    factors_ptr,
    B,
    N,
    K,
    mu_stride,
    min_arrived,
    GROUPS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    CHUNK: tl.constexpr,
):
    group = tl.program_id(0).to(tl.int64) * GROUPS + tl.arange(0, GROUPS)  # (G,)
    in_batch = group < B
    lane = tl.arange(0, BLOCK_K)  # (P,): the points
    point_ok = lane < K
    alpha = tl.load(alpha_ptr + lane, mask=point_ok, other=0.0)
    lanes_ok = in_batch[:, None] & point_ok[None, :]  # (G, P)
    rows = out_ptr + group * N * K  # (G,): row j of a group at rows + j K
    z_rows = z_ptr + group * N * K  # the forward sweep's z, float64, in the same layout
    knots = knots_ptr + group * N
    cols = cols_ptr + group * N
    factors = factors_ptr + group * 3 * N
    slot = tl.arange(0, CHUNK)

    # Compaction, a chunk of workers at a time: survivor s of a group is its knot s (point and worker index); each
    # point counts the knots at or left of it.
    n = tl.zeros([GROUPS], dtype=tl.int32)
    count = tl.zeros([GROUPS, BLOCK_K], dtype=tl.int32)
    for start in range(0, N, CHUNK):
        worker = start + slot
        worker_ok = worker < N
        in_chunk = in_batch[:, None] & worker_ok[None, :]
        arrived = tl.load(mask_ptr + group[:, None] * N + worker[None, :], mask=in_chunk, other=0) != 0  # (G, C)
        beta = tl.load(beta_ptr + worker, mask=worker_ok, other=0.0)
        ones = arrived.to(tl.int32)
        position = n[:, None] + tl.cumsum(ones, axis=1) - ones
        tl.store(knots[:, None] + position, beta[None, :] + tl.zeros([GROUPS, CHUNK], dtype=tl.float64), mask=arrived)
        tl.store(cols[:, None] + position, worker[None, :] + tl.zeros([GROUPS, CHUNK], dtype=tl.int32), mask=arrived)
        left = arrived[:, :, None] & (beta[None, :, None] <= alpha[None, None, :])  # (G, C, P)
        count += tl.sum(left.to(tl.int32), axis=1)
        n += tl.sum(ones, axis=1)
    tl.debug_barrier()  # the knots are read by other lanes than wrote them

    mu = tl.load(mu_ptr + group * mu_stride + n, mask=in_batch, other=0.0)  # (G,) mu = n lam of the group
    m = n - 2  # interior knots
    last_knot = tl.maximum(n - 1, 0)
    last = last_knot[:, None]
    # each point's interval knots[idx] <= alpha < knots[idx + 1] (clamped to the end intervals), its weights a, b of
    # the fitted values there, and its right-hand side's entries in interior rows idx - 2 .. idx + 1
    idx = tl.minimum(tl.maximum(count - 1, 0), tl.maximum(n - 2, 0)[:, None])
    t_left = tl.load(knots[:, None] + idx, mask=lanes_ok, other=0.0)
    h_at = tl.load(knots[:, None] + tl.minimum(idx + 1, last), mask=lanes_ok, other=1.0) - t_left
    h_before = t_left - tl.load(knots[:, None] + tl.maximum(idx - 1, 0), mask=lanes_ok, other=0.0)
    h_after = tl.load(knots[:, None] + tl.minimum(idx + 2, last), mask=lanes_ok, other=1.0) - tl.load(
        knots[:, None] + tl.minimum(idx + 1, last), mask=lanes_ok, other=0.0
    )
    inv_at = 1.0 / h_at
    inv_before = tl.where(idx >= 1, 1.0 / h_before, 0.0)
    inv_after = tl.where(idx + 2 <= last, 1.0 / h_after, 0.0)
    a = (t_left + h_at - alpha[None, :]) * inv_at
    b = (alpha[None, :] - t_left) * inv_at
    outside = (a < 0) | (b < 0)  # beyond the outermost knots the natural spline is linear
    c_a = tl.where(outside, -a, a * a * a - a) * h_at * h_at / 6.0
    c_b = tl.where(outside, -b, b * b * b - b) * h_at * h_at / 6.0
    mu_p = mu[:, None]
    entry0 = -mu_p * inv_before * a
    entry1 = c_a - mu_p * (-(inv_before + inv_at) * a + inv_at * b)
    entry2 = c_b - mu_p * (inv_at * a - (inv_at + inv_after) * b)
    entry3 = -mu_p * inv_after * b

    # Forward sweep: row i of M (interior knot i + 1) from knots i .. i + 3, its factors d, e, f, and z.
    t0 = tl.load(knots, mask=in_batch, other=0.0)
    t1 = tl.load(knots + tl.minimum(1, last_knot), mask=in_batch, other=1.0)
    t2 = tl.load(knots + tl.minimum(2, last_knot), mask=in_batch, other=2.0)
    t3 = tl.load(knots + tl.minimum(3, last_knot), mask=in_batch, other=3.0)
    inv0 = 1.0 / (t1 - t0)
    inv1 = 1.0 / (t2 - t1)
    d1 = tl.full([GROUPS], 1.0, tl.float64)
    d2 = tl.full([GROUPS], 1.0, tl.float64)
    e1 = tl.zeros([GROUPS], dtype=tl.float64)
    f1 = tl.zeros([GROUPS], dtype=tl.float64)
    f2 = tl.zeros([GROUPS], dtype=tl.float64)
    z1 = tl.zeros([GROUPS, BLOCK_K], dtype=tl.float64)
    z2 = tl.zeros([GROUPS, BLOCK_K], dtype=tl.float64)
    for i in range(0, tl.max(m, axis=0)):
        t4 = tl.load(knots + tl.minimum(i + 4, last_knot), mask=in_batch, other=4.0)  # the next step's knot
        active = i < m
        lo, hi = inv0, inv1
        hi_next = tl.where(i + 1 < m, 1.0 / (t3 - t2), 0.0)
        mid = -(lo + hi)
        diag = (t2 - t0) / 3.0 + mu * (lo * lo + mid * mid + hi * hi)
        off1 = tl.where(i + 1 < m, (t2 - t1) / 6.0 + mu * (mid * hi - hi * (hi + hi_next)), 0.0)
        off2 = tl.where(i + 2 < m, mu * hi * hi_next, 0.0)
        d = diag - e1 * e1 * d1 - f2 * f2 * d2
        inv_d = 1.0 / d
        e = (off1 - f1 * e1 * d1) * inv_d
        f = off2 * inv_d
        rhs = (
            tl.where(idx - 2 == i, entry0, 0.0)
            + tl.where(idx - 1 == i, entry1, 0.0)
            + tl.where(idx == i, entry2, 0.0)
            + tl.where(idx + 1 == i, entry3, 0.0)
        )
        z = rhs - e1[:, None] * z1 - f2[:, None] * z2
        tl.store(z_rows[:, None] + i * K + lane[None, :], z, mask=lanes_ok & active[:, None])
        tl.store(factors + 3 * i, inv_d, mask=in_batch & active)
        tl.store(factors + 3 * i + 1, e, mask=in_batch & active)
        tl.store(factors + 3 * i + 2, f, mask=in_batch & active)
        d2, d1, e1, f2, f1 = d1, d, e, f1, f
        z2, z1 = z1, z
        t0, t1, t2, t3 = t1, t2, t3, t4
        inv0, inv1 = inv1, hi_next
    tl.debug_barrier()

    # Backward sweep: x_j = z_j / d_j - e_j x_{j+1} - f_j x_{j+2} for j = r - 2, then knot r's row
    # x_r / h_r - (1 / h_{r-1} + 1 / h_r) x_{r-1} + x_{r-2} / h_{r-1}, plus a, b where r ends a point's interval.
    x_r = tl.zeros([GROUPS, BLOCK_K], dtype=tl.float64)  # x_r and x_{r-1}: zero beyond the interior
    x_r1 = tl.zeros([GROUPS, BLOCK_K], dtype=tl.float64)
    r = n - 1
    t_r = tl.load(knots + tl.maximum(r, 0), mask=in_batch, other=0.0)
    t_before = tl.load(knots + tl.maximum(r - 1, 0), mask=in_batch, other=0.0)
    inv_right = tl.zeros([GROUPS], dtype=tl.float64)  # 1 / h_r, zero at the last knot
    for step in range(0, tl.max(n, axis=0)):
        r = n - 1 - step
        j = r - 2
        jj = tl.maximum(j, 0)
        active = r >= 0
        solved = j >= 0
        z_j = tl.load(z_rows[:, None] + jj[:, None] * K + lane[None, :], mask=lanes_ok & solved[:, None], other=0.0)
        inv_d = tl.load(factors + 3 * jj, mask=in_batch & solved, other=0.0)
        e = tl.load(factors + 3 * jj + 1, mask=in_batch & solved, other=0.0)
        f = tl.load(factors + 3 * jj + 2, mask=in_batch & solved, other=0.0)
        t_next = tl.load(knots + tl.maximum(r - 2, 0), mask=in_batch, other=0.0)  # the next step's t_{r-1}
        x_j = tl.where(solved[:, None], z_j * inv_d[:, None] - e[:, None] * x_r1 - f[:, None] * x_r, 0.0)
        inv_left = tl.where(r >= 1, 1.0 / (t_r - t_before), 0.0)  # 1 / h_{r-1}
        value = inv_right[:, None] * x_r - (inv_left + inv_right)[:, None] * x_r1 + inv_left[:, None] * x_j
        value += tl.where(idx == r[:, None], a, 0.0) + tl.where(idx + 1 == r[:, None], b, 0.0)
        column = tl.load(cols + tl.maximum(r, 0), mask=in_batch & active, other=0)
        tl.store(rows[:, None] + column[:, None] * K + lane[None, :], value, mask=lanes_ok & active[:, None])
        x_r, x_r1 = x_r1, x_j
        inv_right = inv_left
        t_r, t_before = t_before, t_next
    tl.debug_barrier()

    # The stragglers' rows are zero, an unusable group's NaN.
    unusable = n < tl.maximum(min_arrived, 2)
    for start in range(0, N, CHUNK):
        worker = start + slot
        worker_ok = in_batch[:, None] & (worker < N)[None, :]
        arrived = tl.load(mask_ptr + group[:, None] * N + worker[None, :], mask=worker_ok, other=0) != 0
        fill = tl.where(unusable[:, None], float("nan"), 0.0).to(tl.float64) + tl.zeros([GROUPS, CHUNK], tl.float64)
        write = worker_ok & (unusable[:, None] | ~arrived)
        tl.store(
            rows[:, None, None] + worker[None, :, None] * K + lane[None, None, :],
            fill[:, :, None] + tl.zeros([GROUPS, CHUNK, BLOCK_K], tl.float64),
            mask=write[:, :, None] & point_ok[None, None, :],
        )


@triton.jit
def _berrut_rows_kernel(
    mask_ptr, beta_ptr, alpha_ptr, out_ptr, N, K, min_arrived, BLOCK_K: tl.constexpr, CHUNK: tl.constexpr
):
    group = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, BLOCK_K)
    point_ok = lane < K
    alpha = tl.load(alpha_ptr + lane, mask=point_ok, other=0.0)
    slot = tl.arange(0, CHUNK)
    rows = out_ptr + group * N * K
    # Sweep 1: the sum of the weights (-1)^rank / (alpha - t_j) over the survivors, and whether a point hits one.
    total = tl.zeros([BLOCK_K], dtype=tl.float64)
    hits = tl.zeros([BLOCK_K], dtype=tl.int32)
    n = tl.program_id(0) * 0
    for start in range(0, N, CHUNK):
        worker = start + slot
        arrived = tl.load(mask_ptr + group * N + worker, mask=worker < N, other=0) != 0
        ones = arrived.to(tl.int32)
        rank = n + tl.cumsum(ones, axis=0) - ones
        sign = 1.0 - 2.0 * (rank % 2).to(tl.float64)
        diff = alpha[None, :] - tl.load(beta_ptr + worker, mask=worker < N, other=0.0)[:, None]  # (C, P)
        counted = arrived[:, None] & (diff != 0)
        total += tl.sum(tl.where(counted, sign[:, None] / tl.where(counted, diff, 1.0), 0.0), axis=0)
        hits += tl.sum((arrived[:, None] & (diff == 0)).to(tl.int32), axis=0)
        n += tl.sum(ones, axis=0)
    # Sweep 2: the normalised weights, or the unit row of the node a point hits; zero rows for the stragglers, NaN
    # everywhere for an unusable group.
    unusable = n < tl.maximum(min_arrived, 1)
    n = n * 0
    for start in range(0, N, CHUNK):
        worker = start + slot
        arrived = tl.load(mask_ptr + group * N + worker, mask=worker < N, other=0) != 0
        ones = arrived.to(tl.int32)
        rank = n + tl.cumsum(ones, axis=0) - ones
        sign = 1.0 - 2.0 * (rank % 2).to(tl.float64)
        diff = alpha[None, :] - tl.load(beta_ptr + worker, mask=worker < N, other=0.0)[:, None]
        counted = arrived[:, None] & (diff != 0)
        weight = tl.where(counted, sign[:, None] / tl.where(counted, diff, 1.0), 0.0) / total[None, :]
        value = tl.where(hits[None, :] > 0, (arrived[:, None] & (diff == 0)).to(tl.float64), weight)
        value = tl.where(unusable, float("nan"), value)
        tl.store(rows + worker[:, None] * K + lane[None, :], value, mask=(worker < N)[:, None] & point_ok[None, :])
        n += tl.sum(ones, axis=0)


@triton.jit
def _apply_kernel(
    mat_ptr,
    y_ptr,
    out_ptr,
    flag_ptr,
    K,
    N,
    D,
    mat_b,
    mat_k,
    mat_n,
    y_b,
    y_n,
    y_d,
    k_tiles,
    d_tiles,
    BLOCK_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    CHECK: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    group = pid // (k_tiles * d_tiles)
    k_tile = (pid // d_tiles) % k_tiles
    d_tile = pid % d_tiles
    point = k_tile * BLOCK_K + tl.arange(0, BLOCK_K)
    column = d_tile * BLOCK_D + tl.arange(0, BLOCK_D)
    point_ok = point < K
    column_ok = column < D
    acc = tl.zeros([BLOCK_K, BLOCK_D], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        worker = start + tl.arange(0, BLOCK_N)
        worker_ok = worker < N
        weights = tl.load(
            mat_ptr + group * mat_b + point[:, None] * mat_k + worker[None, :] * mat_n,
            mask=point_ok[:, None] & worker_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        results = tl.load(
            y_ptr + group * y_b + worker[:, None] * y_n + column[None, :] * y_d,
            mask=worker_ok[:, None] & column_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        acc = tl.dot(weights, results, acc, input_precision="ieee")
    valid = point_ok[:, None] & column_ok[None, :]
    value = acc.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + group * K * D + point[:, None] * D + column[None, :], value, mask=valid)
    if CHECK:
        bad = tl.sum((valid & ~(tl.abs(value.to(tl.float32)) < float("inf"))).to(tl.int32))
        tl.atomic_add(flag_ptr, bad, mask=bad > 0)


def _quiet():
    """The interpreter evaluates both branches of ``tl.where`` in numpy: silence its divide-by-zero warnings."""
    return np.errstate(all="ignore") if interpreted() else contextlib.nullcontext()


def _block(count: int) -> int:
    return max(triton.next_power_of_2(count), 2)


@triton_op("torchgcc::triton_spline_rows", mutates_args=())
def spline_rows(
    mask: torch.Tensor,
    beta: torch.Tensor,
    alpha: torch.Tensor,
    mu: torch.Tensor,
    min_arrived: int,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``(B, N, K)`` smoothing-spline decode rows in ``dtype`` for ``(B, N)`` bool masks (True = arrived), solved in
    float64, on CUDA (or on CPU tensors under ``TRITON_INTERPRET=1``); arguments and result as
    :func:`torchgcc.functional.numba_decode.spline_rows` says (contiguous inputs on the mask's device, not
    checked)."""
    groups, num_workers = mask.shape
    num_points = alpha.shape[0]
    block = _block(num_points)
    per_program = max(1, 32 // block)  # groups per program: a full warp of lanes where K is small
    chunk = max(16, min(64, 2048 // (per_program * block)))
    out = torch.empty(groups, num_workers, num_points, dtype=dtype, device=mask.device)
    z = torch.empty(groups, num_workers, num_points, dtype=torch.float64, device=mask.device)
    knots = torch.empty(groups, num_workers, dtype=torch.float64, device=mask.device)
    cols = torch.empty(groups, num_workers, dtype=torch.int32, device=mask.device)
    factors = torch.empty(groups, num_workers, 3, dtype=torch.float64, device=mask.device)
    with _quiet():
        wrap_triton(_spline_rows_kernel)[(triton.cdiv(groups, per_program),)](
            mask.view(torch.uint8),
            beta,
            alpha,
            mu,
            out,
            z,
            knots,
            cols,
            factors,
            groups,
            num_workers,
            num_points,
            mu.shape[-1] if mu.ndim == 2 and mu.shape[0] > 1 else 0,
            min_arrived,
            GROUPS=per_program,
            BLOCK_K=block,
            CHUNK=chunk,
            num_warps=max(1, min(8, per_program * block // 32)),
        )
    return out


@triton_op("torchgcc::triton_berrut_rows", mutates_args=())
def berrut_rows(
    mask: torch.Tensor, beta: torch.Tensor, alpha: torch.Tensor, min_arrived: int, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """``(B, N, K)`` Berrut decode rows in ``dtype`` (computed in float64) for ``(B, N)`` bool masks, on CUDA; as
    :func:`torchgcc.functional.numba_decode.berrut_rows` says."""
    groups, num_workers = mask.shape
    num_points = alpha.shape[0]
    block = _block(num_points)
    out = torch.empty(groups, num_workers, num_points, dtype=dtype, device=mask.device)
    with _quiet():
        wrap_triton(_berrut_rows_kernel)[(groups,)](
            mask.view(torch.uint8),
            beta,
            alpha,
            out,
            num_workers,
            num_points,
            min_arrived,
            BLOCK_K=block,
            CHUNK=max(16, min(64, 2048 // block)),
            num_warps=max(1, min(8, block // 32)),
        )
    return out


@triton_op("torchgcc::triton_apply", mutates_args=())
def apply_rows(matrices: torch.Tensor, y: torch.Tensor, check: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(matrices @ y, flag)``: ``(B, K, N)`` matrices (float64 or float32, any strides) applied to ``(B, N, d)``
    results of a dtype in :data:`APPLY_DTYPES` in float32, rounded once to ``y``'s dtype, ``(B, K, d)`` contiguous;
    with ``check`` the flag (int32 ``(1,)``) counts the non-finite estimates; without it the flag is not written (nor
    zeroed: no launch for it) and means nothing."""
    groups, num_points, num_workers = matrices.shape
    outputs = y.shape[-1]
    out = torch.empty(groups, num_points, outputs, dtype=y.dtype, device=y.device)
    flag = (torch.zeros if check else torch.empty)(1, dtype=torch.int32, device=y.device)
    block_k = min(max(triton.next_power_of_2(num_points), 16), 64)
    block_d = 64
    k_tiles, d_tiles = triton.cdiv(num_points, block_k), triton.cdiv(outputs, block_d)
    if groups * k_tiles * d_tiles:
        with _quiet():
            wrap_triton(_apply_kernel)[(groups * k_tiles * d_tiles,)](
                matrices,
                y,
                out,
                flag,
                num_points,
                num_workers,
                outputs,
                matrices.stride(0),
                matrices.stride(1),
                matrices.stride(2),
                y.stride(0),
                y.stride(1),
                y.stride(2),
                k_tiles,
                d_tiles,
                BLOCK_K=block_k,
                BLOCK_N=32,
                BLOCK_D=block_d,
                CHECK=check,
                num_warps=4,
            )
    return out, flag


def _save_for_backward(ctx, inputs, output) -> None:
    matrices, y, _ = inputs
    ctx.save_for_backward(matrices, y)


def _apply_backward(ctx, grad_out, grad_flag):
    """The product's gradients in float32, as autograd of ``torch.bmm`` in :func:`apply_linear` gives them."""
    matrices, y = ctx.saved_tensors
    grad = grad_out.float()
    grad_matrices = (grad @ y.float().transpose(1, 2)).to(matrices.dtype) if ctx.needs_input_grad[0] else None
    grad_y = (matrices.float().transpose(1, 2) @ grad).to(y.dtype) if ctx.needs_input_grad[1] else None
    return grad_matrices, grad_y, None


apply_rows.register_autograd(_apply_backward, setup_context=_save_for_backward)
