"""Checkpoints: weights via ``save_pretrained`` (safetensors) plus the state needed to resume.

RUN_DIR/checkpoint/ holds the policy (or its LoRA adapter), the tokenizer and
``trainer_state.pt`` (optimizer, scheduler, RNG streams, data cursor, step). It is written
to a temporary folder and renamed, so a crash mid-save never leaves a torn checkpoint.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn


def save_model(
    model: nn.Module,
    tokenizer: Any,
    directory: Path,
    *,
    merge_lora: bool = False,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> None:
    """Save in Hugging Face format; with ``merge_lora`` a LoRA model is saved merged.

    ``state_dict`` replaces the model's own (the gathered full weights of an FSDP-sharded
    model, whose parameters here are only this process's shards).
    """
    directory.mkdir(parents=True, exist_ok=True)
    to_save = model
    if merge_lora and hasattr(model, "merge_and_unload"):
        import copy

        to_save = copy.deepcopy(model).merge_and_unload()
    extra = {} if state_dict is None else {"state_dict": _without_tied_aliases(to_save, state_dict)}
    to_save.save_pretrained(str(directory), safe_serialization=True, **extra)
    tokenizer.save_pretrained(str(directory))
    _fix_fsdp_architecture(to_save, directory)


def _without_tied_aliases(
    model: nn.Module, state_dict: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Drop the later names of tied parameters (lm_head = embeddings), as save_pretrained
    does for the model's own weights: a gathered state dict holds them as separate copies."""
    first_name: dict[int, str] = {}
    aliases = set()
    for name, parameter in model.state_dict(keep_vars=True).items():
        if id(parameter) in first_name:
            aliases.add(name)
        first_name.setdefault(id(parameter), name)
    return {name: tensor for name, tensor in state_dict.items() if name not in aliases}


def _fix_fsdp_architecture(model: nn.Module, directory: Path) -> None:
    """FSDP2 swaps the model's class for FSDP<Name>; config.json must name <Name>."""
    import json

    cls = type(model)
    if not cls.__name__.startswith("FSDP"):
        return
    original = next((c for c in cls.__mro__[1:] if c.__name__ == cls.__name__[4:]), None)
    path = directory / "config.json"
    if original is None or not path.exists():
        return
    config = json.loads(path.read_text())
    config["architectures"] = [original.__name__]
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def save_checkpoint(
    run_dir: Path,
    *,
    step: int,
    model: nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    sampler_state: dict[str, int],
    generator: torch.Generator,
    model_state: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Write RUN_DIR/checkpoint atomically. ``model_state``/``optimizer_state`` replace the
    model's and optimizer's own state dicts (the gathered full ones under FSDP)."""
    final = run_dir / "checkpoint"
    staging = run_dir / "checkpoint.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    save_model(model, tokenizer, staging, state_dict=model_state)
    torch.save(
        {
            "step": step,
            "optimizer": optimizer.state_dict() if optimizer_state is None else optimizer_state,
            "scheduler": scheduler.state_dict(),
            "sampler": sampler_state,
            "rollout_generator": generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        },
        staging / "trainer_state.pt",
    )
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    return final


def load_trainer_state(checkpoint_dir: Path) -> dict[str, Any]:
    return torch.load(checkpoint_dir / "trainer_state.pt", weights_only=False)


def restore_rng(state: dict[str, Any], generator: torch.Generator) -> None:
    generator.set_state(state["rollout_generator"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
