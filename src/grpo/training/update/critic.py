"""PPO with a critic (``algorithm.estimator = "ppo"``): the value model and its update.

The rollout, rewards, logging and the clipped policy update are GRPO's; only the advantage
differs. GRPO's A_i is the completion's reward against its group; PPO's A_it comes from a
critic V(prompt, y_<t) by GAE (see :mod:`grpo.algo.ppo`). Per rollout batch:

1. the critic's values V_old on every completion token (no gradient);
2. the reward on each completion's last token → GAE → per-token advantages (whitened over
   the batch when ``ppo.whiten_advantages``) and returns R = A + V_old;

   multi-turn rows (``[agent]``): the critic sees the whole trajectory, the inserted tool and
   environment tokens included, but only the model's tokens (``completion_mask_BT``) are
   time steps: the reward sits on the last model token, GAE steps over the inserted ones
   (:func:`~grpo.algo.ppo.gae`), they get no advantage or return, and the value loss, the
   whitening and ``explained_variance`` skip them;
3. the policy update (:func:`grpo.training.update.policy.policy_update`) with those advantages;
4. μ critic steps over the same micro-batches on the clipped value loss, AdamW at
   ``ppo.critic_lr``. The policy's gradients are freed before the critic's backward.

The critic is the policy's architecture, its transformer body loaded from ``model.path``,
with a ``Linear(hidden, 1)`` head in place of the LM head (zero-initialised: V starts at 0).
With ``model.lora_rank`` > 0 the body is LoRA-adapted too (its own frozen base) and the head
trains in full. This is the memory GRPO saves: a second trained model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from grpo.algo.objective import Objective
from grpo.algo.ppo import gae, terminal_rewards, value_loss, whiten
from grpo.models.value import ValueModel, completion_values
from grpo.runtime.optim import Optimization
from grpo.training.update.policy import (
    Reference,
    StepSplit,
    TrainBatch,
    micro_slices,
    policy_update,
)


@dataclass
class Critic:
    model: ValueModel
    optimizer: torch.optim.Optimizer
    gamma: float
    lam: float
    value_clip: float
    whiten_advantages: bool
    max_grad_norm: float


def _values(model: ValueModel, micro: TrainBatch) -> torch.Tensor:
    return completion_values(
        model,
        micro.prompt_ids_BP,
        micro.prompt_mask_BP,
        micro.completion_ids_BT,
        micro.completion_mask_BT,
        micro.attention_mask_BT,
    )


def ppo_update(
    critic: Critic,
    policy: nn.Module,
    batch: TrainBatch,
    objective: Objective,
    optimization: Optimization,
    *,
    rewards_B: torch.Tensor,
    sequences_per_micro_batch: int,
    reference: Reference | None = None,
    shard: StepSplit | None = None,
    share_prompt: bool = True,
) -> dict[str, float]:
    """Steps 1-4 of the module docstring on one rollout batch; the policy's and the critic's
    metrics. ``batch``'s own advantages are replaced by the critic's."""
    slices = micro_slices(batch.rows, sequences_per_micro_batch)
    micro_batches = [batch.micro_batch(s) for s in slices]
    mask_BT = batch.completion_mask_BT
    old_values_BT = torch.zeros(mask_BT.shape, dtype=torch.float32, device=mask_BT.device)
    with torch.no_grad():
        for rows, micro in zip(slices, micro_batches, strict=True):
            values_BT = _values(critic.model, micro)
            old_values_BT[rows, : values_BT.shape[1]] = values_BT
    advantages_BT, returns_BT = gae(
        terminal_rewards(rewards_B, mask_BT),
        old_values_BT,
        mask_BT,
        gamma=critic.gamma,
        lam=critic.lam,
    )
    if critic.whiten_advantages:
        advantages_BT = whiten(advantages_BT, mask_BT)
    metrics = policy_update(
        policy,
        dataclasses.replace(batch, advantages_BT=advantages_BT),
        objective,
        optimization,
        sequences_per_micro_batch=sequences_per_micro_batch,
        reference=reference,
        shard=shard,
        share_prompt=share_prompt,
    )
    metrics.update(
        _critic_steps(
            critic, micro_batches, slices, old_values_BT, returns_BT, objective.inner_iterations
        )
    )
    keep_BT = mask_BT.bool()
    returns, old_values = returns_BT[keep_BT], old_values_BT[keep_BT]
    metrics["explained_variance"] = float(
        1 - (returns - old_values).var(unbiased=False) / returns.var(unbiased=False).clamp(min=1e-8)
    )
    return metrics


def _critic_steps(
    critic: Critic,
    micro_batches: list[TrainBatch],
    slices: list[slice],
    old_values_BT: torch.Tensor,
    returns_BT: torch.Tensor,
    inner_iterations: int,
) -> dict[str, float]:
    """μ AdamW steps on the clipped value loss; gradients accumulate over micro-batches."""
    model, optimizer = critic.model, critic.optimizer
    trainable = [p for group in optimizer.param_groups for p in group["params"]]
    num_tokens = int(sum(int(micro.completion_mask_BT.sum()) for micro in micro_batches))
    totals = {"value_loss": 0.0, "value_clip_frac": 0.0, "value_mean": 0.0, "return_mean": 0.0}
    grad_norm_sum = 0.0
    for iteration in range(inner_iterations):
        last = iteration == inner_iterations - 1
        for rows, micro in zip(slices, micro_batches, strict=True):
            width = micro.completion_ids_BT.shape[1]
            loss, stats = value_loss(
                _values(model, micro),
                old_values_BT[rows, :width],
                returns_BT[rows, :width],
                micro.completion_mask_BT,
                clip=critic.value_clip,
                num_tokens=num_tokens,
            )
            loss.backward()
            if last:
                share = float(micro.completion_mask_BT.sum()) / max(num_tokens, 1)
                totals["value_loss"] += loss.item()
                for key in ("value_clip_frac", "value_mean", "return_mean"):
                    totals[key] += stats[key].item() * share
        grad_norm = torch.nn.utils.clip_grad_norm_(
            trainable, critic.max_grad_norm if critic.max_grad_norm > 0 else math.inf
        )
        if not torch.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"critic gradient norm is {grad_norm.item()}")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        grad_norm_sum += grad_norm.item()
    totals["critic_grad_norm"] = grad_norm_sum / inner_iterations
    return totals
