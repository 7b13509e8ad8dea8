"""The shapes of a decoder-only transformer that the memory planner needs, and reading them
(with the exact parameter count) from a local Hugging Face config."""

from __future__ import annotations

from dataclasses import dataclass

from grpo.models.names import model_name


@dataclass(frozen=True)
class Architecture:
    """The shapes the activation, logit and LoRA estimates need (a decoder-only transformer)."""

    parameters: int
    hidden_size: int
    layers: int
    intermediate_size: int
    attention_width: int  # heads × head_dim (the q projection's output)
    kv_width: int  # key/value heads × head_dim
    vocab_size: int

    def lora_parameters(self, rank: int) -> int:
        """r·(in + out) per adapted linear layer: q, k, v, o, gate, up, down in every layer
        (peft's "all-linear", which leaves the LM head alone)."""
        h, q, kv, i = self.hidden_size, self.attention_width, self.kv_width, self.intermediate_size
        per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
        return rank * per_layer * self.layers

    def activation_elements_per_token(self, gradient_checkpointing: bool) -> int:
        """Tensors a Llama-style layer saves for backward, per token (SDPA attention, no L² term):
        each RMSNorm its input and output (2h, twice), q with its RoPE intermediates (3·q),
        k likewise (3·kv), v (kv), the attention output (q), and the MLP's gate, up, SiLU and
        product (4·i). With checkpointing only each layer's input (h) is kept, plus one layer
        recomputed at a time."""
        h, q, kv, i = self.hidden_size, self.attention_width, self.kv_width, self.intermediate_size
        per_layer = 4 * h + 4 * q + 4 * kv + 4 * i
        if gradient_checkpointing:
            return self.layers * h + per_layer
        return self.layers * per_layer


def architecture_from_config(path: str) -> Architecture:
    """Shapes and the exact parameter count of the model ``path`` names: a local folder, a
    Hub id or a ``.gguf`` file (:mod:`grpo.models.names`), its config alone read.

    The model is built on the meta device (no memory, no weights read), so any architecture
    transformers knows is counted exactly, tied embeddings once.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    where, options = model_name(path, "--config").pretrained()
    config = AutoConfig.from_pretrained(where, **options)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    parameters = sum(p.numel() for p in model.parameters())
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    return Architecture(
        parameters=parameters,
        hidden_size=text.hidden_size,
        layers=text.num_hidden_layers,
        intermediate_size=getattr(text, "intermediate_size", 4 * text.hidden_size),
        attention_width=heads * head_dim,
        kv_width=kv_heads * head_dim,
        vocab_size=text.vocab_size,
    )
