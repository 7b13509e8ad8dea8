"""Loading the policy, the frozen reference model and the tokenizer from local directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from grpo.config import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(name: str, local_rank: int | None = None) -> torch.device:
    """``model.device``: "auto" = cuda when available, else cpu. Under torchrun
    (``local_rank`` given) a bare "cuda" means this process's GPU, cuda:LOCAL_RANK."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        return torch.device("cuda", local_rank)
    return torch.device(name)


class ModelError(ValueError):
    """A model or tokenizer directory that cannot be loaded; the message names the key."""


def require_local_directory(path: str, key: str) -> None:
    """Nothing is downloaded: a path that is not a local directory is an error naming its key."""
    if not Path(path).is_dir():
        raise FileNotFoundError(
            f"{key}: no local model directory at {path!r} (nothing is downloaded)"
        )


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def load_tokenizer(config: ModelConfig) -> Any:
    from transformers import AutoTokenizer

    key = "model.tokenizer_path" if config.tokenizer_path else "model.path"
    require_local_directory(config.tokenizer_path or config.path, key)
    try:
        tokenizer = AutoTokenizer.from_pretrained(config.tokenizer_path or config.path)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ModelError(
            f"{key}: no loadable tokenizer in {config.tokenizer_path or config.path} "
            f"({_first_line(error)})"
        ) from None
    if tokenizer.pad_token_id is None:
        # Padding positions are always masked out; any id will do, EOS is the usual choice.
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        where = config.tokenizer_path or config.path
        raise ValueError(f"model.tokenizer_path: tokenizer at {where} has no EOS token")
    return tokenizer


def _load_causal_lm(path: str, config: ModelConfig, device: torch.device) -> nn.Module:
    from transformers import AutoModelForCausalLM

    require_local_directory(path, "model.path")
    if not (Path(path) / "config.json").is_file():
        raise ModelError(f"model.path: {path} has no config.json: not a Hugging Face model folder")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[config.dtype])
    except (OSError, ValueError, KeyError) as error:
        reason = _first_line(error)
        if "Unrecognized configuration class" in reason:
            model_type = json.loads((Path(path) / "config.json").read_text()).get("model_type")
            reason = f"a {model_type!r} model is not a causal LM (AutoModelForCausalLM)"
        raise ModelError(f"model.path: cannot load {path}: {reason}") from None
    return model.to(device)


def disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def lora_config(config: ModelConfig, task_type: str | None = None) -> Any:
    """The peft ``LoraConfig`` of ``model.lora_*`` (rank, alpha, dropout, target modules)."""
    from peft import LoraConfig

    targets = config.lora_target_modules
    return LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets[0] if targets == ["all-linear"] else targets,
        task_type=task_type,
    )


def load_policy(
    config: ModelConfig, device: torch.device, *, adapter_path: str | None = None
) -> nn.Module:
    """The trainable policy; a LoRA-wrapped one when ``lora_rank > 0``.

    ``adapter_path`` resumes a LoRA adapter; for full fine-tuning, resume by pointing
    ``path`` at the checkpoint folder instead.
    """
    model = _load_causal_lm(config.path, config, device)
    if config.disable_dropout:
        disable_dropout(model)
    if config.lora_rank > 0:
        try:
            from peft import PeftModel, get_peft_model
        except ImportError:
            raise ImportError(
                "model.lora_rank > 0 needs the `peft` extra: pip install 'grpo[peft]'"
            ) from None
        if adapter_path:
            model = PeftModel.from_pretrained(model, adapter_path, is_trainable=True)
        else:
            model = get_peft_model(model, lora_config(config, task_type="CAUSAL_LM"))
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if config.lora_rank > 0:
            model.enable_input_require_grads()
    model.train()
    return model


def load_reference(config: ModelConfig, device: torch.device) -> nn.Module:
    """A frozen copy of the starting policy (no grad, eval mode)."""
    model = _load_causal_lm(config.path, config, device)
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
