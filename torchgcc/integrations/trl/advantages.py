"""Group-relative advantages by group id, for groups of any size and completions left out of their group.

A completion ``i`` of group ``g(i)`` with reward ``r_i`` gets, as in GRPO (Shao et al. 2024) and TRL's default
``scale_rewards="group"``,

    A_i = (r_i - mean_{j in g(i)} r_j) / (std_{j in g(i)} r_j + eps)

where the mean and the standard deviation (Bessel-corrected, as ``torch.std``) run over the group's *usable*
completions only: a reward of NaN marks a completion left out (past a deadline, or unscorable), which gets no
statistics role and advantage 0. Groups are found by their id, never by position, so groups may differ in size and
their members need not be adjacent. ``scale="batch"`` divides by the standard deviation of all usable rewards
instead, ``scale="none"`` does not divide.
"""

from __future__ import annotations

import torch

from torchgcc.checks import check_integer

__all__ = ["SCALES", "group_advantages", "usable_groups"]

#: The ``scale`` choices, named as TRL's ``GRPOConfig.scale_rewards``.
SCALES = ("group", "batch", "none")


def _group_statistics(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-row group index, and per group: usable count, mean and Bessel-corrected std (NaN below 2), float64."""
    if not isinstance(group_ids, torch.Tensor):
        raise TypeError(
            f"group_ids must be an integer torch.Tensor of shape (R,), got {type(group_ids).__name__}; convert it "
            "with torch.as_tensor(group_ids, dtype=torch.long)"
        )
    if group_ids.dtype == torch.bool or group_ids.is_floating_point() or group_ids.is_complex():
        # float ids group by exact equality (0.1 + 0.2 and 0.3 are two groups); the trainer's ids are int64
        raise TypeError(f"group_ids must be integers, got a {group_ids.dtype} tensor; use group_ids.long()")
    if rewards.ndim != 1 or rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards and group_ids must both be of shape (R,), got {tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    groups, index = torch.unique(group_ids, return_inverse=True)
    values = rewards.double()
    usable = ~torch.isnan(values)
    filled = torch.where(usable, values, 0.0)
    count = torch.zeros(len(groups), dtype=torch.float64).index_add_(0, index, usable.double())
    mean = torch.zeros_like(count).index_add_(0, index, filled) / count
    squares = torch.where(usable, (values - mean[index]) ** 2, 0.0)
    std = (torch.zeros_like(count).index_add_(0, index, squares) / (count - 1)).sqrt()
    return index, count, mean, torch.where(count > 1, std, torch.nan)


def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, scale: str = "group", eps: float = 1e-4
) -> torch.Tensor:
    """Advantages ``(R,)`` of ``rewards`` ``(R,)`` (NaN: left out) in groups ``group_ids`` ``(R,)`` (integers).
    Left-out completions, and members of a group with a single usable completion under ``scale="group"``, get 0.
    ``group_ids`` of any other dtype (float, bool, complex) or not a tensor raise a ``TypeError`` naming it.

    Computed in float64 and returned in the dtype of floating-point ``rewards``; integer or bool rewards (0/1
    exact-match scores, say) give the default float dtype (``torch.get_default_dtype()``, float32 unless changed),
    never their own dtype, which would truncate the advantages.

    Group 3 has two usable rewards (mean 0.5, std 0.707), group 5 two equal ones:

    >>> rewards = torch.tensor([1.0, 2.0, 0.0, float("nan"), 2.0])
    >>> group_advantages(rewards, torch.tensor([3, 5, 3, 3, 5]))
    tensor([ 0.7070,  0.0000, -0.7070,  0.0000,  0.0000])
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    index, _, mean, std = _group_statistics(rewards, group_ids)
    centred = rewards.double() - mean[index]
    if scale == "group":
        centred = centred / (std[index] + eps)
    elif scale == "batch":
        usable = rewards.double()[~torch.isnan(rewards.double())]
        centred = centred / ((usable.std() if usable.numel() > 1 else torch.tensor(torch.nan)) + eps)
    dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    return torch.nan_to_num(centred, nan=0.0).to(dtype)


def usable_groups(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, min_size: int = 2, require_variance: bool = False
) -> torch.Tensor:
    """``(R,)`` bool: True for the usable completions (reward not NaN) of groups that keep at least ``min_size``
    usable completions and, with ``require_variance``, whose usable rewards are not all equal (DAPO's dynamic
    sampling drops those: they carry no group-relative signal). ``group_ids`` as in :func:`group_advantages`."""
    min_size = check_integer("min_size", min_size, minimum=1)
    index, count, _, _ = _group_statistics(rewards, group_ids)
    keep = count >= min_size
    if require_variance:  # compared exactly: the spread of equal rewards is 0, their float std need not be
        usable = ~torch.isnan(rewards)
        values = rewards.double()
        low = torch.full_like(count, torch.inf).scatter_reduce(0, index[usable], values[usable], "amin")
        high = torch.full_like(count, -torch.inf).scatter_reduce(0, index[usable], values[usable], "amax")
        keep &= high > low
    return keep[index] & ~torch.isnan(rewards)
