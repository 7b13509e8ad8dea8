"""PPO with a critic (``algorithm.estimator = "ppo"``): the value model and its update.

The rollout, rewards, logging and the clipped policy update are GRPO's; only the advantage
differs. GRPO's A_i is the completion's reward against its group; PPO's A_it comes from a
critic V(prompt, y_<t) by GAE (see :mod:`grpo.ppo`). Per rollout batch:

1. the critic's values V_old on every completion token (no gradient);
2. the reward on each completion's last token → GAE → per-token advantages (whitened over
   the batch when ``ppo.whiten_advantages``) and returns R = A + V_old;
3. the policy update (:func:`grpo.update.policy_update`) with those advantages;
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

from grpo.config import AlgorithmConfig, Config
from grpo.logprobs import positions_from_mask
from grpo.models import DTYPES, _disable_dropout, lora_config, require_local_directory
from grpo.ppo import gae, terminal_rewards, value_loss, whiten
from grpo.update import TrainBatch, policy_update


class ValueModel(nn.Module):
    """A transformer body and a scalar head: one value per position, shape (B, L)."""

    def __init__(self, body: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.body = body
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        hidden_BLH = self.body(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state
        return self.head(hidden_BLH.to(self.head.weight.dtype)).squeeze(-1)


@dataclass
class Critic:
    model: ValueModel
    optimizer: torch.optim.Optimizer
    gamma: float
    lam: float
    value_clip: float
    whiten_advantages: bool
    max_grad_norm: float


def load_critic(config: Config, device: torch.device) -> Critic:
    """The value model from ``model.path`` (body) plus a fresh head, and its optimizer."""
    from transformers import AutoModel

    model_cfg, ppo = config.model, config.ppo
    require_local_directory(model_cfg.path, "model.path")
    body = AutoModel.from_pretrained(model_cfg.path, dtype=DTYPES[model_cfg.dtype])
    if model_cfg.disable_dropout:
        _disable_dropout(body)
    if model_cfg.gradient_checkpointing:
        body.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if model_cfg.lora_rank > 0:
        from peft import get_peft_model

        body = get_peft_model(body, lora_config(model_cfg))
        if model_cfg.gradient_checkpointing:
            body.enable_input_require_grads()
    hidden_size = body.config.get_text_config().hidden_size
    model = ValueModel(body, hidden_size).to(device=device, dtype=DTYPES[model_cfg.dtype])
    model.train()
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=ppo.critic_lr,
        betas=(config.optim.beta1, config.optim.beta2),
        weight_decay=config.optim.weight_decay,
    )
    return Critic(
        model=model,
        optimizer=optimizer,
        gamma=ppo.gamma,
        lam=ppo.lam,
        value_clip=ppo.value_clip,
        whiten_advantages=ppo.whiten_advantages,
        max_grad_norm=config.optim.max_grad_norm,
    )


def completion_values(model: ValueModel, micro: TrainBatch) -> torch.Tensor:
    """V at each completion token's state (the position whose logits predict it), (B, T)."""
    input_ids_BL = torch.cat([micro.prompt_ids_BP, micro.completion_ids_BT], dim=1)
    attention_mask_BL = torch.cat([micro.prompt_mask_BP, micro.completion_mask_BT], dim=1)
    values_BL = model(input_ids_BL, attention_mask_BL, positions_from_mask(attention_mask_BL))
    prompt_width, completion_width = micro.prompt_ids_BP.shape[1], micro.completion_ids_BT.shape[1]
    return values_BL[:, prompt_width - 1 : prompt_width - 1 + completion_width].float()


def _micro_slices(rows: int, sequences_per_micro_batch: int) -> list[slice]:
    return [
        slice(i, min(i + sequences_per_micro_batch, rows))
        for i in range(0, rows, sequences_per_micro_batch)
    ]


def ppo_update(
    critic: Critic,
    policy: nn.Module,
    batch: TrainBatch,
    *,
    rewards_B: torch.Tensor,
    algorithm: AlgorithmConfig,
    sequences_per_micro_batch: int,
    **policy_kwargs,
) -> dict[str, float]:
    """Steps 1-4 of the module docstring on one rollout batch; the policy's and the critic's
    metrics. ``policy_kwargs`` go to :func:`policy_update` unchanged."""
    slices = _micro_slices(batch.completion_ids_BT.shape[0], sequences_per_micro_batch)
    micro_batches = [batch.micro_batch(s) for s in slices]
    mask_BT = batch.completion_mask_BT
    old_values_BT = torch.zeros(mask_BT.shape, dtype=torch.float32, device=mask_BT.device)
    with torch.no_grad():
        for rows, micro in zip(slices, micro_batches, strict=True):
            values_bt = completion_values(critic.model, micro)
            old_values_BT[rows, : values_bt.shape[1]] = values_bt
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
        dataclasses.replace(batch, advantages_B=advantages_BT),
        algorithm=algorithm,
        sequences_per_micro_batch=sequences_per_micro_batch,
        **policy_kwargs,
    )
    metrics.update(
        _critic_steps(
            critic, micro_batches, slices, old_values_BT, returns_BT, algorithm.inner_iterations
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
                completion_values(model, micro),
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
