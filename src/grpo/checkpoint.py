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
    model: nn.Module, tokenizer: Any, directory: Path, *, merge_lora: bool = False
) -> None:
    """Save in Hugging Face format; with ``merge_lora`` a LoRA model is saved merged."""
    directory.mkdir(parents=True, exist_ok=True)
    to_save = model
    if merge_lora and hasattr(model, "merge_and_unload"):
        import copy

        to_save = copy.deepcopy(model).merge_and_unload()
    to_save.save_pretrained(str(directory), safe_serialization=True)
    tokenizer.save_pretrained(str(directory))


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
) -> Path:
    final = run_dir / "checkpoint"
    staging = run_dir / "checkpoint.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    save_model(model, tokenizer, staging)
    torch.save(
        {
            "step": step,
            "optimizer": optimizer.state_dict(),
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
