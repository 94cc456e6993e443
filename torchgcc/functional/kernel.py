"""Kernel form of the smoothing problem (the journal version's "linear combinations of kernel functions").

For a kernel ``k`` that is (conditionally) positive definite modulo polynomials of degree < ``m``, the minimiser of

    (1/n) sum_i (y_i - u(t_i))^2 + lam * J(u)

is ``u(x) = sum_i c_i k(x, t_i) + sum_l d_l x^l`` with

    [[K + n lam I, T], [T^T, 0]] [c; d] = [y; 0],   K_ij = k(t_i, t_j),  T_il = t_i^l.

With :func:`cubic_spline_kernel`, ``k(s, t) = |s - t|^3 / 12`` and ``m = 2``, ``J(u) = int u''^2`` and ``u`` is the
natural cubic smoothing spline, so :func:`kernel_smoother_matrix` must equal
:func:`torchgcc.functional.smoothing_spline_matrix`; it costs a dense O(n^3) solve and serves as an independent
check and as the mould for other kernels.
"""

from __future__ import annotations

from typing import Callable, Union

import torch

__all__ = ["cubic_spline_kernel", "kernel_smoother_matrix"]

Kernel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cubic_spline_kernel(s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``|s - t|^3 / 12`` for ``s`` ``(..., P)`` and ``t`` ``(..., n)``, shape ``(..., P, n)``.

    The reproducing kernel of the semi-norm ``int u''^2`` (the second-order Sobolev space W^{2,2} modulo lines),
    conditionally positive definite of order 2.
    """
    return (s.unsqueeze(-1) - t.unsqueeze(-2)).abs() ** 3 / 12


def kernel_smoother_matrix(
    knots: torch.Tensor,
    points: torch.Tensor,
    lam: Union[float, torch.Tensor] = 0.0,
    *,
    kernel: Kernel = cubic_spline_kernel,
    null_space_degree: int = 1,
) -> torch.Tensor:
    """Matrix mapping data at ``knots`` ``(..., n)`` to the kernel smoother's values at ``points`` ``(..., P)``.

    ``null_space_degree`` is the highest degree of the unpenalised polynomials (1 for lines, -1 for none).
    Returns ``(..., P, n)`` float64.
    """
    knots = knots.to(torch.float64)
    points = points.to(torch.float64)
    n = knots.shape[-1]
    lam = torch.as_tensor(lam, dtype=torch.float64, device=knots.device)
    powers = torch.arange(null_space_degree + 1, device=knots.device, dtype=torch.float64)
    t_knots = knots.unsqueeze(-1) ** powers  # (..., n, m)
    t_points = points.unsqueeze(-1) ** powers
    m = powers.numel()
    gram = kernel(knots, knots) + (n * lam)[..., None, None] * torch.eye(n, dtype=torch.float64, device=knots.device)
    top = torch.cat([gram, t_knots], dim=-1)
    bottom = torch.cat([t_knots.transpose(-1, -2), t_knots.new_zeros(t_knots.shape[:-2] + (m, m))], dim=-1)
    system = torch.cat([top, bottom], dim=-2)
    identity = torch.eye(n, dtype=torch.float64, device=knots.device).expand(system.shape[:-2] + (n, n))
    rhs = torch.cat([identity, identity.new_zeros(identity.shape[:-2] + (m, n))], dim=-2)
    coefficients = torch.linalg.solve(system, rhs)  # (..., n + m, n)
    basis = torch.cat([kernel(points, knots), t_points], dim=-1)
    return basis @ coefficients
