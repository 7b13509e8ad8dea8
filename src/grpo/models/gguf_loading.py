"""A ``.gguf`` file (llama.cpp's format) loaded as an ordinary Hugging Face model and tokenizer.

transformers reads the file (``from_pretrained(folder, gguf_file=name)``) and dequantizes its
weights. What comes out here is what a folder would have given: the weights in the dtype asked
for, tied embeddings sharing one tensor, no quantization left on the model or in its config
(so ``save_pretrained`` writes plain safetensors that load where ``gguf`` is not installed),
and the BOS, EOS and pad tokens that the file's own metadata names, with its chat template.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from grpo.models.names import ModelError, ModelName, check_gguf_file, first_line, gguf_metadata

# special token → its id's key in the GGUF metadata
GGUF_SPECIAL_TOKENS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
}


def dequantized_gguf(name: ModelName, dtype: torch.dtype) -> nn.Module:
    """The causal LM in the ``.gguf`` file ``name``, dequantized into ``dtype`` (on the CPU);
    a one-line :class:`ModelError` when transformers cannot, or leaves it quantized."""
    from transformers import AutoModelForCausalLM

    check_gguf_file(name)
    where, options = name.pretrained()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            where, dtype=dtype, **options, **_dequantize_options()
        )
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise ModelError(
            f"{name.key}: transformers cannot dequantize {name}: {first_line(error)}"
        ) from None
    if getattr(model, "hf_quantizer", None) is not None or getattr(
        model.config, "quantization_config", None
    ):
        raise ModelError(
            f"{name.key}: transformers left {name} quantized (its weights in GGUF blocks), "
            "which can be neither trained nor saved; a newer transformers dequantizes it"
        )
    _tie_embeddings(model, name)
    _match_generation_tokens(model, name)
    return model


def _dequantize_options() -> dict[str, Any]:
    """transformers 5 keeps a GGUF's weights packed in their blocks where a kernel can run
    them, unless told to dequantize; older versions always dequantize."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    if "dequantize" not in inspect.signature(GgufConfig).parameters:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def _tie_embeddings(model: nn.Module, name: ModelName) -> None:
    """A model whose config ties its output head to its embeddings (a GGUF without an
    ``output.weight``) holds one tensor for both, as ``from_pretrained`` on a folder gives:
    two copies would train apart, and save as two."""
    if not getattr(model.config.get_text_config(), "tie_word_embeddings", False):
        return
    if model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        model.tie_weights()
    if model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        raise ModelError(
            f"{name.key}: {name}: tie_word_embeddings is set, but the output head and the "
            "embeddings did not come out as one tensor"
        )


def _match_generation_tokens(model: nn.Module, name: ModelName) -> None:
    """Generation stops at the GGUF's own EOS (the engines read ``generation_config``)."""
    metadata = gguf_metadata(name.location)
    generation = model.generation_config
    for role, key in GGUF_SPECIAL_TOKENS.items():
        if key in metadata:
            setattr(generation, f"{role}_token_id", int(metadata[key]))
            setattr(model.config, f"{role}_token_id", int(metadata[key]))


def match_gguf_special_tokens(tokenizer: Any, name: ModelName) -> None:
    """BOS, EOS and pad as the GGUF's metadata names them, its ``add_bos_token`` honoured
    and its chat template carried.

    transformers has read these wrongly from some files (BOS and EOS swapped): each token
    that differs from the metadata's id is set to the token of that id; an id outside the
    vocabulary, or a BOS added (or not) against the metadata, is a :class:`ModelError`.
    """
    metadata = gguf_metadata(name.location)
    for role, key in GGUF_SPECIAL_TOKENS.items():
        wanted = metadata.get(key)
        if wanted is None or getattr(tokenizer, f"{role}_token_id") == wanted:
            continue
        if not 0 <= wanted < len(tokenizer):
            raise ModelError(
                f"{name.key}: {name}: its {key} = {wanted} is outside its vocabulary "
                f"of {len(tokenizer)} tokens"
            )
        setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(int(wanted)))
        if getattr(tokenizer, f"{role}_token_id") != wanted:
            raise ModelError(
                f"{name.key}: {name}: the tokenizer's {role} token cannot be set to id "
                f"{wanted}, which its metadata ({key}) names"
            )
    _check_bos_added(tokenizer, metadata, name)
    template = metadata.get("tokenizer.chat_template")
    if template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = template


def _check_bos_added(tokenizer: Any, metadata: dict[str, Any], name: ModelName) -> None:
    """Whether encoding a text puts BOS first must be what ``tokenizer.ggml.add_bos_token``
    says: a BOS the model never saw in training (or one missing) shifts every prompt."""
    add_bos = metadata.get("tokenizer.ggml.add_bos_token")
    if add_bos is None or tokenizer.bos_token_id is None:
        return
    adds = tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]
    if adds != bool(add_bos):
        raise ModelError(
            f"{name.key}: {name}: its metadata says add_bos_token = {bool(add_bos)}, but the "
            f"tokenizer transformers built from it {'adds' if adds else 'does not add'} BOS"
        )
