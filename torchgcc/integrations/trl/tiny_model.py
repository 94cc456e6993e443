"""A tiny causal language model and a character tokenizer, both built in code: GRPO runs offline on a CPU.

Nothing is downloaded: the tokenizer is a ``tokenizers`` word-level model over single characters (one token per
character, ``<pad>`` = 0 and ``<eos>`` = 1 first) wrapped as a ``PreTrainedTokenizerFast``, and the model is a
randomly initialised ``LlamaForCausalLM`` built from a config (two layers of width 32: about 21k parameters).
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

__all__ = ["CHARACTERS", "char_tokenizer", "tiny_causal_lm"]

#: The characters of the arithmetic prompts and answers.
CHARACTERS = "0123456789+="


def char_tokenizer(characters: str = CHARACTERS) -> PreTrainedTokenizerFast:
    """One token per character of ``characters`` after ``<pad>`` (id 0) and ``<eos>`` (id 1); decoding joins the
    characters without spaces and ``skip_special_tokens=True`` drops ``<pad>`` and ``<eos>``."""
    if len(set(characters)) != len(characters):
        raise ValueError(f"characters must be distinct, got {characters!r}")
    vocab = {token: index for index, token in enumerate(["<pad>", "<eos>", *characters])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>")


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
