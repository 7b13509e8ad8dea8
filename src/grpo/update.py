"""The policy update on one rollout batch: μ optimizer steps over micro-batches.

Normalizers (sequence count, token count, max length) are those of the whole batch, so the
micro-batch losses add up to the full batch's loss and the accumulated gradient equals the
one-batch gradient exactly.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from grpo.config import AlgorithmConfig
from grpo.kl import kl_penalty
from grpo.logprobs import completion_logprobs
from grpo.losses import aggregate, policy_loss


@dataclass
class TrainBatch:
    """The rows that train: groups with variance only. B rows, P prompt and T completion columns."""

    prompt_ids_BP: torch.Tensor
    prompt_mask_BP: torch.Tensor
    completion_ids_BT: torch.Tensor
    completion_mask_BT: torch.Tensor
    advantages_B: torch.Tensor
    sampler_logp_BT: torch.Tensor

    def micro_batch(self, rows: slice) -> TrainBatch:
        """Rows ``rows`` with padding columns that no row of them uses trimmed away."""
        prompt_mask = self.prompt_mask_BP[rows]
        completion_mask = self.completion_mask_BT[rows]
        first_prompt_column = (
            int((prompt_mask.sum(dim=0) > 0).nonzero().min()) if prompt_mask.any() else 0
        )
        completion_width = max(int(completion_mask.sum(dim=1).max()), 1)
        prompt_cols = slice(first_prompt_column, None)
        completion_cols = slice(0, completion_width)
        return TrainBatch(
            prompt_ids_BP=self.prompt_ids_BP[rows, prompt_cols],
            prompt_mask_BP=prompt_mask[:, prompt_cols],
            completion_ids_BT=self.completion_ids_BT[rows, completion_cols],
            completion_mask_BT=completion_mask[:, completion_cols],
            advantages_B=self.advantages_B[rows],
            sampler_logp_BT=self.sampler_logp_BT[rows, completion_cols],
        )


ReferenceContext = Callable[[], contextlib.AbstractContextManager]


def policy_update(
    policy: nn.Module,
    batch: TrainBatch,
    *,
    algorithm: AlgorithmConfig,
    temperature: float,
    max_completion_length: int,
    sequences_per_micro_batch: int,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    max_grad_norm: float,
    reference: nn.Module | None = None,
    reference_context: ReferenceContext | None = None,
) -> dict[str, float]:
    """Run μ = ``algorithm.inner_iterations`` optimizer steps on ``batch``; return metrics.

    π_old log-probs are taken from the first iteration's forward pass (the weights have
    not moved yet, so they are exactly π_old's) and reused by later iterations, never
    recomputed. The reference is ``reference`` (a frozen model) or, for LoRA, the policy
    itself inside ``reference_context`` (adapters disabled).
    """
    rows = batch.advantages_B.shape[0]
    slices = [
        slice(i, min(i + sequences_per_micro_batch, rows))
        for i in range(0, rows, sequences_per_micro_batch)
    ]
    micro_batches = [batch.micro_batch(s) for s in slices]
    normalizers = {
        "num_sequences": rows,
        "num_tokens": int(batch.completion_mask_BT.sum()),
        "max_length": max_completion_length,
    }
    use_kl = algorithm.beta > 0
    reference_logps = [
        _reference_logprobs(policy, reference, reference_context, micro, temperature)
        if use_kl
        else None
        for micro in micro_batches
    ]
    old_logps: list[torch.Tensor | None] = [None] * len(micro_batches)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    totals: dict[str, float] = {}
    token_total = max(normalizers["num_tokens"], 1)

    def add(key: str, value: float) -> None:
        totals[key] = totals.get(key, 0.0) + value

    for iteration in range(algorithm.inner_iterations):
        first = iteration == 0
        for index, micro in enumerate(micro_batches):
            logp_BT, entropy_BT = completion_logprobs(
                policy,
                micro.prompt_ids_BP,
                micro.prompt_mask_BP,
                micro.completion_ids_BT,
                micro.completion_mask_BT,
                temperature=temperature,
                with_entropy=first,
            )
            if old_logps[index] is None:
                old_logps[index] = logp_BT.detach()
            loss, stats = policy_loss(
                logp_BT,
                old_logps[index],
                micro.advantages_B,
                micro.completion_mask_BT,
                clip_low=algorithm.clip_low,
                clip_high=algorithm.clip_high,
                aggregation=algorithm.aggregation,
                **normalizers,
            )
            mask_BT = micro.completion_mask_BT
            tokens = float(mask_BT.sum())
            last = iteration == algorithm.inner_iterations - 1
            if use_kl:
                kl_term = aggregate(
                    kl_penalty(logp_BT, reference_logps[index], algorithm.kl_kind),
                    mask_BT,
                    algorithm.aggregation,
                    **normalizers,
                )
                loss = loss + algorithm.beta * kl_term
                if last:
                    add("kl", kl_term.item())
            loss.backward()
            if last:
                add("loss", loss.item())
                add("clip_frac_low", stats["clip_frac_low"].item() * tokens / token_total)
                add("clip_frac_high", stats["clip_frac_high"].item() * tokens / token_total)
                totals["ratio_min"] = min(
                    totals.get("ratio_min", math.inf), stats["ratio_min"].item()
                )
                totals["ratio_max"] = max(
                    totals.get("ratio_max", -math.inf), stats["ratio_max"].item()
                )
            if first:
                keep_BT = mask_BT.bool()
                add("entropy", float(entropy_BT[keep_BT].sum()) / token_total)
                gap = (logp_BT.detach() - micro.sampler_logp_BT.to(logp_BT.device)).abs()
                add("sampler_logp_gap", float(gap[keep_BT].sum()) / token_total)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            trainable, max_grad_norm if max_grad_norm > 0 else math.inf
        )
        if not torch.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(
                f"gradient norm is {grad_norm.item()} at inner iteration {iteration}"
            )
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        add("grad_norm", grad_norm.item() / algorithm.inner_iterations)
    totals["clip_frac"] = totals["clip_frac_low"] + totals["clip_frac_high"]
    return totals


@torch.no_grad()
def _reference_logprobs(
    policy: nn.Module,
    reference: nn.Module | None,
    reference_context: ReferenceContext | None,
    micro: TrainBatch,
    temperature: float,
) -> torch.Tensor:
    model = reference if reference is not None else policy
    context = (
        reference_context() if reference is None and reference_context else contextlib.nullcontext()
    )
    with context:
        logp_BT, _ = completion_logprobs(
            model,
            micro.prompt_ids_BP,
            micro.prompt_mask_BP,
            micro.completion_ids_BT,
            micro.completion_mask_BT,
            temperature=temperature,
        )
    return logp_BT
