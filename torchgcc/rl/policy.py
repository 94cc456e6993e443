"""A tiny autoregressive policy (embedding, GRU, linear head) that samples answers and scores them."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["TinyPolicy"]


class TinyPolicy(nn.Module):
    """GRU language model over a small vocabulary: ``logits = head(GRU(embed(tokens)))``.

    Shapes: ``forward(tokens (B, T)) -> logits (B, T, vocab)``; the logits at position ``t`` predict token ``t + 1``.
    """

    def __init__(self, vocab: int, *, embed: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(self.embed(tokens))[0])

    @torch.no_grad()
    def generate(
        self, prompts: torch.Tensor, max_new_tokens: int, *, eos: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Sample ``(B, max_new_tokens)`` answer tokens after ``prompts`` ``(B, P)``; tokens after EOS repeat EOS."""
        output, state = self.gru(self.embed(prompts))
        logits = self.head(output[:, -1])
        done = torch.zeros(len(prompts), dtype=torch.bool)
        tokens = []
        for _ in range(max_new_tokens):
            token = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)
            token = torch.where(done, torch.full_like(token, eos), token)
            tokens.append(token)
            done |= token == eos
            if done.all():
                break
            output, state = self.gru(self.embed(token).unsqueeze(1), state)
            logits = self.head(output[:, -1])
        answers = torch.stack(tokens, 1)
        pad = max_new_tokens - answers.shape[1]
        return torch.cat([answers, torch.full((len(prompts), pad), eos)], 1) if pad else answers

    def answer_log_probs(self, prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
        """Per-token log-probabilities ``(B, T)`` of ``answers`` ``(B, T)`` given ``prompts`` ``(B, P)``."""
        tokens = torch.cat([prompts, answers[:, :-1]], 1)
        logits = self(tokens)[:, prompts.shape[1] - 1 :]
        return logits.log_softmax(-1).gather(-1, answers.unsqueeze(-1)).squeeze(-1)
