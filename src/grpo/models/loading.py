"""Loading the policy, the frozen reference model and the tokenizer, from a local folder, a
``.gguf`` file or a Hub id (:mod:`grpo.models.names`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from grpo.config import ModelConfig
from grpo.models.gguf_cache import cached_gguf_model, cached_gguf_tokenizer
from grpo.models.gguf_loading import dequantized_gguf, match_gguf_special_tokens
from grpo.models.names import ModelError, check_gguf_file, first_line, model_name

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(name: str, local_rank: int | None = None) -> torch.device:
    """``model.device``: "auto" = cuda when available, else cpu. Under torchrun
    (``local_rank`` given) a bare "cuda" means this process's GPU, cuda:LOCAL_RANK."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        return torch.device("cuda", local_rank)
    return torch.device(name)


def load_tokenizer(path: str, *, tokenizer_path: str = "") -> Any:
    """The tokenizer named by ``tokenizer_path``, or with the model ``path`` when that is
    empty (a folder, a ``.gguf`` file or a Hub id, :mod:`grpo.models.names`); errors name the
    key it came from. A GGUF's BOS, EOS and pad are checked against its own metadata when it
    is first converted (:mod:`grpo.models.gguf_cache`)."""
    from transformers import AutoTokenizer

    key = "model.tokenizer_path" if tokenizer_path else "model.path"
    name = model_name(tokenizer_path or path, key)
    if name.kind == "gguf":
        check_gguf_file(name)

    def from_pretrained() -> Any:
        where, options = name.pretrained()
        try:
            tokenizer = AutoTokenizer.from_pretrained(where, **options)
        except (OSError, ValueError, TypeError, KeyError) as error:
            reason = first_line(error)
            raise ModelError(f"{key}: no loadable tokenizer in {name} ({reason})") from None
        if name.kind == "gguf":
            match_gguf_special_tokens(tokenizer, name)
        return tokenizer

    if name.kind == "gguf":
        tokenizer = cached_gguf_tokenizer(Path(name.location), from_pretrained)
    else:
        tokenizer = from_pretrained()
    if tokenizer.pad_token_id is None:
        # Padding positions are always masked out; any id will do, EOS is the usual choice.
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ModelError(f"{key}: the tokenizer of {name} has no EOS token")
    return tokenizer


def _load_causal_lm(path: str, dtype: str, device: torch.device) -> nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    name = model_name(path, "model.path")
    if name.kind == "folder" and not (Path(path) / "config.json").is_file():
        raise ModelError(f"model.path: {path} has no config.json: not a Hugging Face model folder")
    if name.kind == "gguf":
        model = cached_gguf_model(
            Path(name.location), DTYPES[dtype], lambda: dequantized_gguf(name, DTYPES[dtype])
        )
        return model.to(device)
    where, options = name.pretrained()
    try:
        model = AutoModelForCausalLM.from_pretrained(where, dtype=DTYPES[dtype], **options)
    except (OSError, ValueError, KeyError) as error:
        reason = first_line(error)
        if "Unrecognized configuration class" in reason:
            model_type = AutoConfig.from_pretrained(where, **options).model_type
            reason = f"a {model_type!r} model is not a causal LM (AutoModelForCausalLM)"
        raise ModelError(f"model.path: cannot load {name}: {reason}") from None
    return model.to(device)


def turn_off_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters (``model.lora_*``): rank, scaling numerator, dropout inside the
    adapters, and the module names to adapt (``("all-linear",)``: every linear layer but
    the output head)."""

    rank: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]


def lora_config(lora: LoraSpec, task_type: str | None = None) -> Any:
    """The peft ``LoraConfig`` of ``lora``."""
    from peft import LoraConfig

    targets = list(lora.target_modules)  # peft turns a list (not a tuple) into a set
    return LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets[0] if targets == ["all-linear"] else targets,
        task_type=task_type,
    )


@dataclass(frozen=True)
class TrainableSpec:
    """How a model that trains (the policy, PPO's value model) is loaded."""

    dtype: str  # a key of DTYPES
    disable_dropout: bool  # dropout off: the ratio is exactly 1 on-policy
    gradient_checkpointing: bool
    lora: LoraSpec | None  # None: every weight trains


def load_policy(
    path: str, device: torch.device, spec: TrainableSpec, adapter_path: str | None = None
) -> nn.Module:
    """The trainable policy at ``path``; a LoRA-wrapped one with ``spec.lora``.

    ``adapter_path`` resumes a LoRA adapter; for full fine-tuning, resume by pointing
    ``path`` at the checkpoint folder instead.
    """
    model = _load_causal_lm(path, spec.dtype, device)
    lora, gradient_checkpointing = spec.lora, spec.gradient_checkpointing
    if spec.disable_dropout:
        turn_off_dropout(model)
    if lora is not None:
        try:
            from peft import PeftModel, get_peft_model
        except ImportError:
            raise ImportError(
                "model.lora_rank > 0 needs the `peft` extra: pip install 'grpo[peft]'"
            ) from None
        if adapter_path:
            model = PeftModel.from_pretrained(model, adapter_path, is_trainable=True)
        else:
            model = get_peft_model(model, lora_config(lora, task_type="CAUSAL_LM"))
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora is not None:
            model.enable_input_require_grads()
    model.train()
    return model


def load_reference(
    path: str, device: torch.device, *, dtype: str, policy: nn.Module | None = None
) -> nn.Module:
    """A frozen copy of the starting policy (no grad, eval mode): loaded from ``path``, or
    copied from ``policy`` when given, the policy just loaded from the same ``path`` (the same
    tensors; a ``.gguf`` file is then dequantized once, not twice)."""
    model = copy.deepcopy(policy) if policy is not None else _load_causal_lm(path, dtype, device)
    model.requires_grad_(False)
    model.eval()
    return model


def eos_token_ids(model: nn.Module, tokenizer: Any) -> set[int]:
    ids = {tokenizer.eos_token_id}
    generation_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(generation_eos, int):
        ids.add(generation_eos)
    elif isinstance(generation_eos, list):
        ids.update(generation_eos)
    return ids


def trainable_spec(model: ModelConfig) -> TrainableSpec:
    """The ``[model]`` keys that say how the trained model loads."""
    return TrainableSpec(
        dtype=model.dtype,
        disable_dropout=model.disable_dropout,
        gradient_checkpointing=model.gradient_checkpointing,
        lora=lora_spec(model),
    )


def lora_spec(model: ModelConfig) -> LoraSpec | None:
    """The ``model.lora_*`` keys, or None for full fine-tuning (``lora_rank`` = 0)."""
    if model.lora_rank <= 0:
        return None
    return LoraSpec(
        rank=model.lora_rank,
        alpha=model.lora_alpha,
        dropout=model.lora_dropout,
        target_modules=tuple(model.lora_target_modules),
    )
