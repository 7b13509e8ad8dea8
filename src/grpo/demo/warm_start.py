"""A short supervised warm start, so the "base" answers some problems right but far from all."""

from __future__ import annotations

import random
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
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        batch = [rows[rng.randrange(len(rows))] for _ in range(batch_size)]
        prompts = [tokenizer(row["prompt"])["input_ids"] for row in batch]
        answers = [
            tokenizer(row["answer"])["input_ids"] + [tokenizer.eos_token_id] for row in batch
        ]
        width = max(len(p) + len(a) for p, a in zip(prompts, answers, strict=True))
        input_ids = torch.full((batch_size, width), tokenizer.pad_token_id)
        labels = torch.full((batch_size, width), -100)
        attention = torch.zeros((batch_size, width), dtype=torch.long)
        for row, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
            sequence = prompt + answer
            input_ids[row, : len(sequence)] = torch.tensor(sequence)
            labels[row, len(prompt) : len(sequence)] = torch.tensor(answer)
            attention[row, : len(sequence)] = 1
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
