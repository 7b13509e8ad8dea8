"""The optimizer and learning-rate schedule: AdamW over the trainable parameters, with a
warm-up then constant, linear or cosine decay on the optimizer-step clock."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from grpo.config import Config


def lr_lambda(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """The LR factor at optimizer step ``step``: ``(step + 1) / warmup`` while warming up,
    then 1 (constant), ``1 - progress`` (linear) or ``(1 + cos(π·progress)) / 2`` (cosine)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
        return 1.0

    return factor


def build_optimizer(
    model: nn.Module, config: Config
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW on ``model``'s trainable parameters and its schedule over the whole run
    (``train.steps × algorithm.inner_iterations`` optimizer steps)."""
    optim_cfg = config.optim
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=optim_cfg.lr,
        betas=(optim_cfg.beta1, optim_cfg.beta2),
        weight_decay=optim_cfg.weight_decay,
    )
    total_optimizer_steps = config.train.steps * config.algorithm.inner_iterations
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(optim_cfg.schedule, optim_cfg.warmup_steps, total_optimizer_steps)
    )
    return optimizer, scheduler
