"""The policy update as the update tests run it: plain SGD at a constant rate, no clipping."""

from __future__ import annotations

from typing import Any

import torch

from grpo.algo.objective import Objective
from grpo.runtime.optim import Optimization
from grpo.training.update.policy import TrainBatch, policy_update


def sgd_update(
    model: torch.nn.Module,
    batch: TrainBatch,
    objective: Objective,
    *,
    lr: float,
    micro: int,
    **options: Any,
) -> dict[str, float]:
    """μ SGD steps of ``policy_update`` on ``batch`` (``options``: its other keywords)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    optimization = Optimization(optimizer, scheduler, max_grad_norm=0.0)
    return policy_update(
        model, batch, objective, optimization, sequences_per_micro_batch=micro, **options
    )
