"""A short supervised warm start, so the "base" answers some problems right but far from all.

A finished warm start is recorded next to the model it saved (``warm_start.json``: its
recipe and its outcome); a demo run again in the same work directory reuses it when the
recipe is the same, rather than training it again (delete ``base/`` to warm-start anew)."""

from __future__ import annotations

import json
import random
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def supervised_warm_start(
    model: nn.Module,
    tokenizer: Any,
    rows: list[dict],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Cross-entropy on ``answer + EOS`` given ``prompt`` (prompt tokens are not trained)."""
    traces = []
    for row in rows:
        prompt = tokenizer(row["prompt"])["input_ids"]
        answer = tokenizer(row["answer"])["input_ids"] + [tokenizer.eos_token_id]
        traces.append((prompt + answer, [0] * len(prompt) + [1] * len(answer)))
    return supervised_steps(
        model, traces, tokenizer.pad_token_id, steps=steps, batch_size=batch_size, lr=lr, seed=seed
    )


def supervised_steps(
    model: nn.Module,
    traces: list[tuple[list[int], list[int]]],
    pad_token_id: int,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Cross-entropy on the ids whose mask is 1, each trace an (ids, mask) pair; a batch
    is ``batch_size`` traces drawn with replacement. Returns the loss of each step."""
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        batch = [traces[rng.randrange(len(traces))] for _ in range(batch_size)]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((batch_size, width), pad_token_id)
        labels = torch.full((batch_size, width), -100)
        attention = torch.zeros((batch_size, width), dtype=torch.long)
        for row, (ids, mask) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(ids)] = torch.where(
                torch.tensor(mask, dtype=torch.bool), torch.tensor(ids), -100
            )
            attention[row, : len(ids)] = 1
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


RECORD = "warm_start.json"


def warm_start_recipe(demo: str, **settings: Any) -> dict[str, Any]:
    """What makes a warm start what it is: the demo, its settings and the versions of grpo
    and torch (another version may train to other weights)."""
    return {"demo": demo, **settings, "grpo": version("grpo"), "torch": torch.__version__}


def recorded_warm_start(base_dir: Path, recipe: dict[str, Any]) -> dict[str, Any] | None:
    """The outcome of the warm start saved in ``base_dir`` when ``recipe`` made it, else None."""
    try:
        record = json.loads((base_dir / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if record.get("recipe") != recipe or not (base_dir / "model.safetensors").is_file():
        return None
    return record["outcome"]


def record_warm_start(base_dir: Path, recipe: dict[str, Any], outcome: dict[str, Any]) -> None:
    """Write down, next to the model it saved, how a warm start was made and what it gave."""
    record = {"recipe": recipe, "outcome": outcome}
    (base_dir / RECORD).write_text(json.dumps(record, indent=2) + "\n")
