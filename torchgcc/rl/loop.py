"""A small but real synchronous GRPO loop whose group size is chosen per step by a hook.

Each step samples ``prompts_per_step`` prompts, lets the hook choose the group size ``G``
(:class:`~torchgcc.control.group_size.GroupSizeHook`), generates ``G`` answers per prompt with the current
policy, rewards them (:class:`~torchgcc.rl.countdown_task.CountdownTask`), and takes ``inner_epochs`` Adam steps on
the clipped GRPO loss (:mod:`torchgcc.rl.grpo`). Complete groups only, current policy only: the loop is synchronous
and on-policy whatever G the hook picks.

Time. Generation is real (timed with ``time.perf_counter``), but a single CPU process cannot show the straggling
of a rollout fleet, so every rollout also gets a simulated heavy-tailed delay proportional to its length:

    duration_i = t_gen * n_i / max_j n_j + token_seconds * n_i * X_i,
    X_i ~ Pareto(scale=1, tail_index=delay_tail_index)

with ``n_i`` the answer's token count (up to and including EOS) and ``t_gen`` the measured time of the batched
generation. The rollouts run on a fleet of ``rollout_slots`` generation slots (an inference engine's batch): each
rollout takes the next free slot in order (list scheduling), so a step of ``P * G`` rollouts needs about
``P * G / rollout_slots`` waves. The step's rollout time is the makespan, the time at which the LAST rollout ends
(the synchronous barrier), and its wall-clock adds the measured update time. Delays come from
:class:`torchgcc.stragglers.Pareto` with a generator seeded per run.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from torchgcc.control.group_size import GroupSizeHook
from torchgcc.rl.countdown_task import CountdownTask
from torchgcc.rl.grpo import clipped_policy_loss, group_advantages
from torchgcc.rl.policy import TinyPolicy
from torchgcc.stragglers import Pareto

__all__ = ["GRPOConfig", "makespan", "train_grpo"]


def makespan(durations: torch.Tensor, slots: int) -> float:
    """When the last of ``durations`` ``(n,)`` ends if each, in order, starts on the earliest free of ``slots``."""
    if slots < 1:
        raise ValueError(f"slots must be a positive integer, got {slots}")
    free = [0.0] * slots
    for duration in durations.tolist():
        heapq.heapreplace(free, free[0] + duration)
    return max(free)


@dataclass(frozen=True)
class GRPOConfig:
    """Settings of one GRPO run (the group size comes from the hook)."""

    steps: int = 240
    prompts_per_step: int = 16
    max_span: int = 3
    hidden: int = 128
    lr: float = 3e-3
    clip: float = 0.2
    inner_epochs: int = 2
    token_seconds: float = 0.05
    rollout_slots: int = 64
    delay_tail_index: float = 1.5
    seed: int = 0


def train_grpo(
    config: GRPOConfig, hook: GroupSizeHook, *, on_step: Optional[Callable[[dict[str, Any]], None]] = None
) -> list[dict[str, Any]]:
    """Run ``config.steps`` GRPO steps with group sizes from ``hook``; returns one record per step, each also
    handed to ``on_step`` as it is made (for progress).

    Record keys: ``step``, ``G``, ``reward`` (mean over the step's rollouts), ``answer_tokens`` (mean),
    ``event`` (straggler event), ``rollout_seconds`` (the barrier: the makespan on the slots),
    ``update_seconds`` (measured), ``generate_seconds`` (measured), ``clock`` (cumulative wall-clock in seconds,
    simulated delays included).
    The policy's initialisation and the prompt stream depend only on ``config.seed``, not on the group sizes.
    """
    task = CountdownTask(max_span=config.max_span)
    torch.manual_seed(config.seed)
    policy = TinyPolicy(task.VOCAB, hidden=config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    prompt_rng = torch.Generator().manual_seed(config.seed)
    sample_rng = torch.Generator().manual_seed(config.seed + 1)
    delay_rng = torch.Generator().manual_seed(config.seed + 2)
    delays = Pareto(scale=1.0, tail_index=config.delay_tail_index)
    records, clock = [], 0.0
    for step in range(config.steps):
        group = hook.on_step_begin()
        prompts = task.sample_prompts(config.prompts_per_step, prompt_rng).repeat_interleave(group, 0)
        start = time.perf_counter()
        answers = policy.generate(prompts, task.max_new_tokens, eos=task.EOS, generator=sample_rng)
        generate_seconds = time.perf_counter() - start
        rewards = task.rewards(prompts, answers)
        tokens = (task.answer_lengths(answers) + 1).clamp(max=answers.shape[1])  # EOS included
        durations = generate_seconds * tokens / tokens.max() + config.token_seconds * tokens * delays.sample(
            (len(tokens),), delay_rng
        )
        hook.record_rollouts(durations)

        start = time.perf_counter()
        mask = torch.arange(answers.shape[1]) < tokens.unsqueeze(1)
        advantages = group_advantages(rewards, group)
        old = policy.answer_log_probs(prompts, answers).detach()
        for _ in range(config.inner_epochs):
            loss = clipped_policy_loss(
                policy.answer_log_probs(prompts, answers), old, advantages, mask, clip=config.clip
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        update_seconds = time.perf_counter() - start
        event = hook.on_step_end()
        rollout_seconds = makespan(durations, config.rollout_slots)
        clock += rollout_seconds + update_seconds
        records.append(
            {
                "step": step,
                "G": group,
                "reward": float(rewards.mean()),
                "answer_tokens": float(tokens.double().mean()),
                "event": bool(event),
                "rollout_seconds": rollout_seconds,
                "update_seconds": update_seconds,
                "generate_seconds": generate_seconds,
                "clock": clock,
            }
        )
        if on_step is not None:
            on_step(records[-1])
    return records
