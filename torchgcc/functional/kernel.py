"""Kernel form of the smoothing problem (the journal version's "linear combinations of kernel functions").

For a kernel ``k`` that is (conditionally) positive definite modulo polynomials of degree < ``m``, the minimiser of

    (1/n) sum_i (y_i - u(t_i))^2 + lam * J(u)

is ``u(x) = sum_i c_i k(x, t_i) + sum_l d_l x^l`` with

    [[K + n lam I, T], [T^T, 0]] [c; d] = [y; 0],   K_ij = k(t_i, t_j),  T_il = t_i^l.

With :func:`cubic_spline_kernel`, ``k(s, t) = |s - t|^3 / 12`` and ``m = 2``, ``J(u) = int u''^2`` and ``u`` is the
natural cubic smoothing spline, so :func:`kernel_smoother_matrix` must equal
:func:`torchgcc.functional.smoothing_spline_matrix`; it costs a dense O(n^3) solve and serves as an independent
check and as the mould for other kernels.

On CPU the saddle-point systems are solved one at a time: in a process that has called
``torch.set_num_threads(n > 1)`` (even with the default count), torch's batched LU on CPU (``torch.linalg.solve`` /
``lu_factor_ex`` on a batch) reports bad ``DLASWP`` arguments from n = 160 on and returns wrong solutions or never
returns (torch 2.14.1, MKL; 128 works), while the unbatched LU is LAPACK's ``getrf``/``getrs``.
"""

from __future__ import annotations

from typing import Callable, Union

import torch

from torchgcc.checks import batch_shape, check_integer, check_nodes
from torchgcc.functional.spline import check_lam

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

    ``knots`` must be finite and distinct (any order), at least ``max(1, null_space_degree + 1)`` of them (fewer
    cannot determine the unpenalised polynomial); ``points`` finite; ``lam`` as for
    :func:`~torchgcc.functional.smoothing_spline_matrix` (:func:`~torchgcc.functional.spline.check_lam`);
    ``null_space_degree`` the highest degree of the unpenalised polynomials (1 for lines, -1 for none), an integer.
    Else a one-line ``TypeError`` / ``ValueError`` naming the argument, also when the system is singular (a
    ``kernel`` that is not conditionally positive definite of order ``null_space_degree + 1`` on the knots).
    Returns ``(..., P, n)`` float64.
    """
    null_space_degree = check_integer("null_space_degree", null_space_degree, minimum=-1)
    if not callable(kernel):
        raise TypeError(f"kernel must be a function k(s, t), got {type(kernel).__name__}")
    knots = check_nodes(knots, "knots", order="distinct")
    points = check_nodes(points, "points")
    lam = check_lam(lam, knots.device)
    n = knots.shape[-1]
    if n < max(1, null_space_degree + 1):
        raise ValueError(
            f"a kernel smoother with null_space_degree={null_space_degree} needs at least "
            f"{max(1, null_space_degree + 1)} knots, got {n} knots"
        )
    batch_shape(knots=knots.shape[:-1], points=points.shape[:-1], lam=lam.shape)
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
    try:
        coefficients = _solve(system, rhs)  # (..., n + m, n)
    except torch.linalg.LinAlgError:
        raise ValueError(
            f"the kernel system on these knots is singular: kernel is not conditionally positive definite of order "
            f"null_space_degree + 1 = {null_space_degree + 1} there; raise lam or null_space_degree"
        ) from None
    basis = torch.cat([kernel(points, knots), t_points], dim=-1)
    return basis @ coefficients


def _solve(system: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``system^{-1} rhs`` for ``(..., s, s)`` and ``(..., s, r)``; one LU per matrix on CPU (see the module doc)."""
    if system.device.type != "cpu" or system.dim() == 2:
        return torch.linalg.solve(system, rhs)
    batch = torch.broadcast_shapes(system.shape[:-2], rhs.shape[:-2])
    systems = system.expand(batch + system.shape[-2:]).reshape(-1, *system.shape[-2:])
    rights = rhs.expand(batch + rhs.shape[-2:]).reshape(-1, *rhs.shape[-2:])
    solutions = [torch.linalg.solve(a, b) for a, b in zip(systems, rights)]
    return (
        torch.stack(solutions).reshape(batch + rhs.shape[-2:]) if solutions else rhs.new_empty(batch + rhs.shape[-2:])
    )
