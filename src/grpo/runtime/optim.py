"""The optimizer and learning-rate schedule: AdamW over the trainable parameters, with a
warm-up then constant, linear or cosine decay on the optimizer-step clock."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


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


@dataclass
class Optimization:
    """What takes an optimizer step: AdamW, its schedule, and the gradient-norm clip
    (0 = no clipping)."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    max_grad_norm: float


def adamw(
    parameters: list[nn.Parameter],
    *,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    fused: bool,
) -> torch.optim.AdamW:
    """AdamW over ``parameters``; with ``fused``, one fused kernel per step where torch has
    one for every parameter's device and kind, else the multi-tensor (foreach) loop.

    The plain per-parameter loop launches ~10 kernels per tensor per step (hundreds of
    tensors in a model); the update is the same up to floating-point rounding.
    """
    return torch.optim.AdamW(
        parameters, lr=lr, betas=betas, weight_decay=weight_decay, **adamw_kind(parameters, fused)
    )


def adamw_kind(parameters: list[nn.Parameter], fused: bool) -> dict[str, bool]:
    """``{"fused": True}``, ``{"foreach": True}`` or ``{}`` (torch's default) for these
    parameters: fused needs floating-point plain tensors on a device with the kernel (DTensor
    shards under FSDP take foreach)."""
    if not fused or not parameters:
        return {}
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    devices = set(_get_fused_kernels_supported_devices())
    plain = all(
        type(p.data) is torch.Tensor and p.is_floating_point() and p.device.type in devices
        for p in parameters
    )
    return {"fused": True} if plain else {"foreach": True}


def build_optimizer(
    model: nn.Module,
    *,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    schedule: str,
    warmup_steps: int,
    total_steps: int,
    max_grad_norm: float,
    fused: bool = True,
) -> Optimization:
    """AdamW on ``model``'s trainable parameters (:func:`adamw`) and its schedule over
    ``total_steps`` optimizer steps (the run's steps × μ)."""
    optimizer = adamw(
        [p for p in model.parameters() if p.requires_grad],
        lr=lr,
        betas=betas,
        weight_decay=weight_decay,
        fused=fused,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(schedule, warmup_steps, total_steps)
    )
    return Optimization(optimizer, scheduler, max_grad_norm)
