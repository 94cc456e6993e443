"""A tiny causal language model and a character tokenizer, both built in code: GRPO runs offline on a CPU.

Nothing is downloaded: the tokenizer is a ``tokenizers`` word-level model over single characters (one token per
character, ``<pad>`` = 0 and ``<eos>`` = 1 first, no unknown token) wrapped as a ``PreTrainedTokenizerFast``, and the
model is a randomly initialised ``LlamaForCausalLM`` built from a config (two layers of width 32: about 21k
parameters).
"""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

__all__ = ["CHARACTERS", "char_tokenizer", "tiny_causal_lm"]

#: The characters of the arithmetic prompts and answers.
CHARACTERS = "0123456789+="


class _CharTokenizer(PreTrainedTokenizerFast):
    """A ``PreTrainedTokenizerFast`` that refuses text with a character outside its alphabet (every encoding call
    goes through ``_encode_plus``), naming the characters, instead of encoding them as some other token."""

    def _encode_plus(self, text: Any, text_pair: Any = None, *args: Any, **kwargs: Any) -> Any:
        known = {token for token in self.get_vocab() if len(token) == 1}
        unknown = _unknown_characters(text, known, list(self.added_tokens_encoder)) | _unknown_characters(
            text_pair, known, list(self.added_tokens_encoder)
        )
        if unknown:
            raise ValueError(
                f"the text holds characters outside the tokenizer's alphabet {''.join(sorted(known))!r}: "
                f"{sorted(unknown)} (build it with char_tokenizer(characters=...) to include them)"
            )
        return super()._encode_plus(text, text_pair, *args, **kwargs)


def _unknown_characters(text: Any, known: set[str], special: list[str]) -> set[str]:
    """The characters of ``text`` (a string or nested lists / tuples of strings) outside ``known``, once the
    ``special`` tokens (``<pad>``, ``<eos>``) are taken out."""
    if text is None:
        return set()
    if isinstance(text, str):
        for token in special:
            text = text.replace(token, "")
        return set(text) - known
    return set().union(*(_unknown_characters(part, known, special) for part in text))


def char_tokenizer(characters: str = CHARACTERS) -> PreTrainedTokenizerFast:
    """One token per character of ``characters`` after ``<pad>`` (id 0) and ``<eos>`` (id 1); decoding joins the
    characters without spaces and ``skip_special_tokens=True`` drops ``<pad>`` and ``<eos>``. Encoding text with a
    character outside ``characters`` raises ``ValueError`` naming it (there is no unknown token: the character
    would otherwise be lost)."""
    if len(set(characters)) != len(characters):
        raise ValueError(f"characters must be distinct, got {characters!r}")
    vocab = {token: index for index, token in enumerate(["<pad>", "<eos>", *characters])}
    # "<unk>" is not in the vocabulary: the tokenizers model itself fails on an unknown character (a tokenizer saved
    # and loaded back without this class still refuses it rather than encoding it as padding)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer.decoder = decoders.Fuse()
    return _CharTokenizer(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>")


def tiny_causal_lm(
    tokenizer: PreTrainedTokenizerFast,
    *,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    max_length: int = 32,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A ``LlamaForCausalLM`` over ``tokenizer``'s vocabulary, initialised from ``seed`` (the global torch generator
    is left as it was); ``max_length`` bounds prompt plus completion tokens."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_length,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)
