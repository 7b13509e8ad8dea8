"""A tiny Llama-architecture causal LM with random weights, built from a config (no download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def build_tiny_llama(
    tokenizer: Any,
    *,
    hidden_size: int = 128,
    layers: int = 4,
    heads: int = 4,
    max_positions: int = 128,
    seed: int = 0,
    directory: str | Path | None = None,
):
    """A randomly initialised ``LlamaForCausalLM`` sized for a CPU; saved when asked."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    if directory is not None:
        model.save_pretrained(str(directory), safe_serialization=True)
        tokenizer.save_pretrained(str(directory))
    return model
