"""Resuming a run: which checkpoint, loading it into the live run, and rewinding what a
killed run wrote past it (see :mod:`grpo.runtime.checkpoint` for the layout)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from grpo.config import ConfigError
from grpo.log.metrics import APPENDED_LOGS
from grpo.runtime.checkpoint import (
    RUN_CONFIG,
    CheckpointError,
    checkpoints_dir,
    latest_checkpoint,
    load_checkpoint,
    remove_folder,
    restore_rng,
    step_of,
)


def resume_point(run_dir: Path, resume: bool) -> Path | None:
    """The checkpoint to resume from: ``latest`` with ``resume``, else None. Starting
    afresh over a run's checkpoints is an error: they would be mixed with the new run's."""
    latest = latest_checkpoint(run_dir)
    if latest is None or resume:
        return latest
    raise CheckpointError(
        f"train.run_dir {run_dir} already holds checkpoints (latest: {latest.name}): "
        "continue it with `grpo train CONFIG --resume` (train.resume = true), "
        "or choose another train.run_dir"
    )


def clean_leftovers(run_dir: Path, resumed_step: int) -> None:
    """Remove the staging and trash folders a killed run leaves behind, and any checkpoint
    newer than the one resumed from (written just before a kill, ``latest`` not yet moved)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return
    for path in root.iterdir():
        if path.name.startswith((".tmp-", ".trash-")):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        elif (step_of(path) or 0) > resumed_step:
            remove_folder(path)


def rewind_logs(run_dir: Path, step: int) -> None:
    """Cut every log the run appends to (metrics.jsonl, completions.jsonl) back to its
    lines of steps up to ``step``: a run killed after logging a step but before
    checkpointing it logs that step again when resumed. A torn last line goes too. The
    lines are in step order, so the file is truncated at its first line past ``step``."""
    for name in APPENDED_LOGS:
        path = Path(run_dir) / name
        if path.exists():
            os.truncate(path, _kept_bytes(path, step))


def _kept_bytes(path: Path, step: int) -> int:
    """The length of ``path``'s leading whole lines of steps up to ``step``."""
    kept = 0
    with path.open("rb") as handle:
        for line in handle:
            try:
                if not line.endswith(b"\n") or json.loads(line)["step"] > step:
                    break
            except (ValueError, KeyError, TypeError):
                break
            kept += len(line)
    return kept


def config_changes(directory: Path, config: dict[str, Any]) -> list[str]:
    """'section.key: old → new' for each value that differs from the checkpoint's run."""
    path = directory / RUN_CONFIG
    if not path.exists():
        return []
    old, new = _flatten(json.loads(path.read_text())), _flatten(config)
    ignored = {"train.resume", "train.steps"}
    keys = sorted((set(old) | set(new)) - ignored)
    return [f"{k}: {old.get(k)!r} → {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value and prefix.count(".") < 1:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def resume_run(
    checkpoint_dir: Path | None,
    run_dir: Path,
    config: dict[str, Any],
    *,
    live: tuple[Callable[[dict[str, Any]], None], Any, Any, torch.Generator],
    is_main: bool,
    say: Callable[[str], None],
) -> int:
    """Load ``checkpoint_dir`` (None: a fresh start) into the live (optimizer-state loader,
    scheduler, prompt sampler, rollout generator); return its step.

    Rank 0 then drops what a killed run left past that step: staging folders, newer
    checkpoints, the lines of metrics.jsonl and completions.jsonl. A checkpoint past
    ``train.steps`` is an error; one at it says there is nothing to train.
    """
    step = 0
    if checkpoint_dir is not None:
        load_optimizer_state, scheduler, sampler, generator = live
        state = load_checkpoint(checkpoint_dir)
        tensors = state["tensors"]
        load_optimizer_state(tensors["optimizer"])
        scheduler.load_state_dict(tensors["scheduler"])
        sampler.load_state_dict(tensors["sampler"])
        restore_rng(state["rng"], tensors["rng"], generator)
        step, steps = int(state["step"]), config["train"]["steps"]
        say(f"grpo: resumed from {checkpoint_dir} at step {step} of {steps}")
        for change in config_changes(checkpoint_dir, config):
            say(f"grpo: note: the config differs from the checkpoint's run: {change}")
        if step > steps:
            raise ConfigError(
                f"train.steps = {steps} but {checkpoint_dir} is at step {step}: "
                "raise train.steps to continue the run"
            )
        if step == steps:
            say(
                f"grpo: nothing to train: the run is complete at train.steps = {steps} "
                "(raise train.steps to train further)"
            )
    if is_main:
        clean_leftovers(run_dir, step)
        rewind_logs(run_dir, step if checkpoint_dir is not None else -1)
    return step
