"""GRPO's pieces: group-relative advantages and the clipped policy loss (no KL term, no value network).

For a prompt with a group of ``G`` sampled answers and rewards ``r_1..r_G``, the advantage of answer ``i`` is
``A_i = (r_i - mean(r)) / (std(r) + eps)`` (Shao et al., DeepSeekMath 2024). The loss over the answer tokens
``t`` (up to and including the first EOS) is

    L = - mean_i  (1 / |a_i|) sum_t  min(rho_it A_i, clip(rho_it, 1 - c, 1 + c) A_i),
    rho_it = exp(log pi(a_it) - log pi_old(a_it)).
"""

from __future__ import annotations

import torch

__all__ = ["clipped_policy_loss", "group_advantages"]


def group_advantages(rewards: torch.Tensor, group_size: int, *, eps: float = 1e-4) -> torch.Tensor:
    """``(P * G,)`` rewards, grouped as consecutive runs of ``group_size`` -> ``(P * G,)`` advantages."""
    if group_size < 2 or rewards.numel() % group_size:
        raise ValueError(f"need group_size >= 2 dividing the {rewards.numel()} rewards, got {group_size}")
    groups = rewards.reshape(-1, group_size)
    centred = groups - groups.mean(1, keepdim=True)
    return (centred / (groups.std(1, keepdim=True) + eps)).reshape(-1)


def clipped_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float = 0.2,
) -> torch.Tensor:
    """The GRPO loss above: ``log_probs``, ``old_log_probs``, ``mask`` ``(B, T)``, ``advantages`` ``(B,)``."""
    ratio = (log_probs - old_log_probs).exp()
    adv = advantages.unsqueeze(1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    mask = mask.to(surrogate.dtype)
    per_answer = (surrogate * mask).sum(1) / mask.sum(1).clamp_min(1)
    return -per_answer.mean()
