"""A verifiable task for GRPO on a CPU: add two digits, rewarded 1 for the exact answer and 0 otherwise.

A prompt is ``"a+b="`` with ``0 <= a, b <= max_operand``; the answer is the decimal sum. A completion earns 1 when
its text (special tokens dropped, whitespace stripped) equals the answer exactly: ``"7"`` for ``"3+4="``, but not
``"7="`` or ``"07"``. With ``max_operand <= 4`` every answer is one digit. An untrained
:func:`~torchgcc.integrations.trl.tiny_causal_lm` is right for about one completion in a hundred; within a few
hundred GRPO steps it learns to give the most frequent sum to every prompt (reward ``1 / (max_operand + 1)``), not
to add (docs/control.md): the task exercises the trainer, it does not teach arithmetic.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from datasets import Dataset

__all__ = ["addition_dataset", "exact_match"]


def addition_dataset(size: int, *, max_operand: int = 4, seed: int = 0) -> Dataset:
    """``size`` rows ``{"prompt": "a+b=", "answer": "<a + b>"}`` with operands drawn uniformly from ``seed``."""
    if not isinstance(size, int) or size < 1 or not isinstance(max_operand, int) or not 0 <= max_operand <= 9:
        raise ValueError(f"size must be a positive integer and max_operand in 0..9, got {size!r}, {max_operand!r}")
    operands = torch.randint(0, max_operand + 1, (size, 2), generator=torch.Generator().manual_seed(seed)).tolist()
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in operands])


def exact_match(completions: Sequence[str], answer: Sequence[str], **kwargs: Any) -> list[float]:
    """TRL reward function: 1.0 where the stripped completion equals the row's ``answer``, else 0.0."""
    return [float(completion.strip() == expected) for completion, expected in zip(completions, answer)]
