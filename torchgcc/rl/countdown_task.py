"""A verifiable toy task for RL on CPU: count down from ``a`` to ``b``, rewarded per matching position.

A prompt is two digits ``a >= b`` followed by ``SEP``; the correct answer is ``a, a - 1, ..., b`` followed by
``EOS`` (``a - b + 1`` digits, so the answer length depends on the prompt). The reward of an answer ``y`` (the
tokens before its first ``EOS``) against the correct digits ``c`` is

    r = #{i < min(|y|, |c|) : y_i = c_i} / max(|y|, |c|)

in ``[0, 1]``: 1 only for the exact answer; every missing or extra token costs, so the reward depends on the
output length as well as its content.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CountdownTask"]


@dataclass(frozen=True)
class CountdownTask:
    """Vocabulary: digits ``0..9``, ``SEP = 10`` (ends the prompt), ``EOS = 11`` (ends the answer).

    ``max_span`` bounds ``a - b`` (answers have 1 to ``max_span + 1`` digits) and ``max_low`` bounds ``b``. The
    default ``max_low = 0`` counts down to zero, which the tiny policy learns in a few hundred GRPO steps; a larger
    ``max_low`` makes the policy also remember where to stop, and learning is much slower.
    """

    max_span: int = 6
    max_low: int = 0

    SEP: int = 10
    EOS: int = 11
    VOCAB: int = 12

    @property
    def max_new_tokens(self) -> int:
        """Generation budget: the longest answer, its EOS and two extra tokens."""
        return self.max_span + 4

    def sample_prompts(self, num_prompts: int, generator: torch.Generator) -> torch.Tensor:
        """``(num_prompts, 3)`` int64 prompts ``[a, b, SEP]`` with ``0 <= a - b <= max_span``, ``0 <= b <= max_low``."""
        span = torch.randint(0, self.max_span + 1, (num_prompts,), generator=generator)
        room = (9 - span).clamp(max=self.max_low)  # b in [0, min(max_low, 9 - span)]
        low = (torch.rand(num_prompts, generator=generator) * (room + 1)).long()
        return torch.stack([low + span, low, torch.full_like(low, self.SEP)], 1)

    def answer_lengths(self, answers: torch.Tensor) -> torch.Tensor:
        """Tokens before the first EOS of each answer ``(B, T)`` (``T`` when there is none), int64."""
        is_eos = answers == self.EOS
        none = torch.full((len(answers),), answers.shape[1], dtype=torch.int64)
        return torch.where(is_eos.any(1), is_eos.int().argmax(1), none)

    def rewards(self, prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
        """``(B,)`` float32 rewards of ``answers`` ``(B, T)`` for ``prompts`` ``(B, 3)``."""
        high, low = prompts[:, 0:1], prompts[:, 1:2]
        position = torch.arange(answers.shape[1])
        correct = high - position  # the i-th correct digit (valid while >= low)
        correct_len = (high - low + 1).squeeze(1)
        answer_len = self.answer_lengths(answers)
        inside = position < torch.minimum(answer_len, correct_len).unsqueeze(1)
        matches = ((answers == correct) & inside).sum(1).float()
        return matches / torch.maximum(answer_len, correct_len).float()
