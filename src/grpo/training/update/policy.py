"""The policy update on one rollout batch: μ optimizer steps over micro-batches.

Normalizers (sequence count, token count, max length) are those of the whole batch, so the
micro-batch losses add up to the full batch's loss and the accumulated gradient equals the
one-batch gradient exactly. With several processes (:class:`~grpo.training.update.batch.Shard`)
the normalizers count every process's rows, so each process's loss is its share of the
whole step's loss and the gradients, summed across processes, are the single-process
gradient.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from grpo.algo.kl import kl_penalty
from grpo.algo.losses import aggregate
from grpo.algo.objective import Objective
from grpo.models.logprobs import completion_logprobs
from grpo.models.wrappers import is_fsdp_sharded
from grpo.training.runtime.optim import Optimization
from grpo.training.update.batch import Reference, TrainBatch, micro_slices
from grpo.training.update.shard import Shard
from grpo.training.update.surrogate import add_correction_sums, correction_totals, surrogate_loss


def policy_update(
    policy: nn.Module,
    batch: TrainBatch,
    objective: Objective,
    optimization: Optimization,
    *,
    sequences_per_micro_batch: int,
    reference: Reference | None = None,
    shard: Shard | None = None,
    share_prompt: bool = True,
) -> dict[str, float]:
    """Run μ = ``objective.inner_iterations`` optimizer steps on ``batch``; return metrics.

    π_old log-probs are taken from the first iteration's forward pass (the weights have
    not moved yet, so they are exactly π_old's) and reused by later iterations, never
    recomputed. With ``shard``, ``batch`` is this process's rows (possibly none) of a step
    split across processes; the metrics are then this process's parts: sums (loss, kl,
    clip fractions, entropy, sampler_logp_gap) add up across processes, ratio_min/ratio_max
    take the min/max, and grad_norm and skipped_updates are the same everywhere.

    An update whose loss (any micro-batch's, on any process) or gradient norm is not finite
    is skipped: no ``optimizer.step()``, so the parameters and the optimizer state are
    unchanged; the scheduler still steps. ``skipped_updates`` counts them.

    ``share_prompt``: the policy and reference passes run each micro-batch's prompts once
    per group (:mod:`grpo.models.shared_prompt`), where the model allows it.
    """
    micro_batches, weights, normalizers = _plan(
        batch, sequences_per_micro_batch, objective.max_completion_length, shard
    )
    use_kl = objective.beta > 0
    reference_logps = [
        _reference_logprobs(
            policy, reference or Reference(), micro, objective.temperature, share_prompt
        )
        if use_kl
        else None
        for micro in micro_batches
    ]
    old_logps: list[torch.Tensor | None] = [None] * len(micro_batches)
    # Every key from the start: a process with only filler passes reports neutral values.
    totals: dict[str, float] = {
        "loss": 0.0,
        "clip_frac_low": 0.0,
        "clip_frac_high": 0.0,
        "ratio_min": math.inf,
        "ratio_max": -math.inf,
        "entropy": 0.0,
        "sampler_logp_gap": 0.0,
        "grad_norm": 0.0,
        "skipped_updates": 0.0,  # updates skipped for a non-finite loss or gradient
        **correction_totals(objective),
    }
    if use_kl:
        totals["kl"] = 0.0
    for iteration in range(objective.inner_iterations):
        losses = _accumulate_gradients(
            policy,
            micro_batches,
            weights,
            (old_logps, reference_logps),
            objective,
            normalizers,
            shard,
            totals,
            iteration,
            share_prompt=share_prompt,
        )
        _optimizer_step(optimization, losses, shard, totals, objective.inner_iterations)
    totals["clip_frac"] = totals["clip_frac_low"] + totals["clip_frac_high"]
    return totals


def _plan(
    batch: TrainBatch, sequences_per_micro_batch: int, max_length: int, shard: Shard | None
) -> tuple[list[TrainBatch], list[float], dict[str, int]]:
    """The micro-batches, their loss weights (0 for filler passes) and the normalizers."""
    slices = micro_slices(batch.rows, sequences_per_micro_batch)
    micro_batches = [batch.micro_batch(s) for s in slices]
    weights = [1.0] * len(micro_batches)
    normalizers = {
        "num_sequences": batch.rows,
        "num_tokens": int(batch.completion_mask_BT.sum()),
        "max_length": max_length,
    }
    if shard is not None:
        normalizers["num_sequences"] = shard.num_sequences
        normalizers["num_tokens"] = shard.num_tokens
        padding = max(shard.micro_batches - len(micro_batches), 0)
        micro_batches += [shard.filler] * padding
        weights += [0.0] * padding
    return micro_batches, weights, normalizers


def _accumulate_gradients(
    policy: nn.Module,
    micro_batches: list[TrainBatch],
    weights: list[float],
    logps: tuple[list[torch.Tensor | None], list[torch.Tensor | None]],
    objective: Objective,
    normalizers: dict[str, int],
    shard: Shard | None,
    totals: dict[str, float],
    iteration: int,
    *,
    share_prompt: bool,
) -> list[float]:
    """Forward and backward every micro-batch; add its statistics to ``totals`` (the last
    iteration's losses, the first's entropy); return this update's micro-batch losses."""
    first, last = iteration == 0, iteration == objective.inner_iterations - 1
    token_total = max(normalizers["num_tokens"], 1)
    no_sync = shard.no_sync if shard is not None else None
    losses: list[float] = []  # with any KL term
    for index, micro in enumerate(micro_batches):
        # Gradients are summed across processes once, in the step's last backward.
        local_only = no_sync is not None and index < len(micro_batches) - 1
        with no_sync() if local_only else contextlib.nullcontext():
            metrics = _micro_step(
                policy,
                micro,
                logps,
                index,
                weights[index],
                first,
                objective,
                normalizers,
                share_prompt=share_prompt,
            )
        if weights[index] == 0.0:
            continue
        losses.append(metrics["loss"])
        tokens = float(micro.completion_mask_BT.sum())
        if last:
            totals["loss"] += metrics["loss"]
            if objective.beta > 0:
                totals["kl"] += metrics["kl"]
            totals["clip_frac_low"] += metrics["clip_frac_low"] * tokens / token_total
            totals["clip_frac_high"] += metrics["clip_frac_high"] * tokens / token_total
            totals["ratio_min"] = min(totals["ratio_min"], metrics["ratio_min"])
            totals["ratio_max"] = max(totals["ratio_max"], metrics["ratio_max"])
        if first:
            totals["entropy"] += metrics["entropy_sum"] / token_total
            totals["sampler_logp_gap"] += metrics["gap_sum"] / token_total
            add_correction_sums(totals, metrics, token_total)
    return losses


def _optimizer_step(
    optimization: Optimization,
    losses: list[float],
    shard: Shard | None,
    totals: dict[str, float],
    inner_iterations: int,
) -> None:
    """Clip, then step, unless the loss or the gradient is not finite; the LR schedule
    steps either way."""
    optimizer = optimization.optimizer
    # The optimizer's own parameters: under FSDP, policy.parameters() can list the unsharded
    # copies (the root stays unsharded after a no-grad forward), which get no gradient.
    trainable = [p for group in optimizer.param_groups for p in group["params"]]
    max_norm = optimization.max_grad_norm
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_norm if max_norm > 0 else math.inf)
    if hasattr(grad_norm, "full_tensor"):  # FSDP: a replicated DTensor
        grad_norm = grad_norm.full_tensor()
    totals["grad_norm"] += grad_norm.item() / inner_iterations
    finite = bool(torch.isfinite(grad_norm)) and all(map(math.isfinite, losses))
    if shard is not None and shard.all_agree is not None:
        finite = shard.all_agree(finite)  # a loss is local: every process must skip
    if finite:
        optimizer.step()
    else:  # skipped: parameters and optimizer state stay exactly as they were
        totals["skipped_updates"] += 1.0
    optimization.scheduler.step()  # the LR schedule stays on the step clock either way
    optimizer.zero_grad(set_to_none=True)


def _micro_step(
    policy: nn.Module,
    micro: TrainBatch,
    logps: tuple[list[torch.Tensor | None], list[torch.Tensor | None]],
    index: int,
    weight: float,
    first: bool,
    objective: Objective,
    normalizers: dict[str, int],
    *,
    share_prompt: bool,
) -> dict[str, float]:
    """Forward, loss × ``weight``, backward for one micro-batch; its scalar statistics."""
    old_logps, reference_logps = logps
    logp_BT, entropy_BT = completion_logprobs(
        policy,
        micro.prompt_ids_BP,
        micro.prompt_mask_BP,
        micro.completion_ids_BT,
        micro.completion_mask_BT,
        temperature=objective.temperature,
        with_entropy=first or objective.entropy_coef > 0,
        entropy_grad=objective.entropy_coef > 0,
        attention_mask_BT=micro.attention_mask_BT,
        share_prompt=share_prompt,
    )
    if old_logps[index] is None:
        old_logps[index] = logp_BT.detach()
    loss, stats, correction = surrogate_loss(
        logp_BT, old_logps[index], entropy_BT, micro, objective, normalizers, with_metrics=first
    )
    mask_BT = micro.completion_mask_BT
    metrics: dict[str, float] = {}
    if objective.beta > 0:
        kl_BT = kl_penalty(logp_BT, reference_logps[index], objective.kl_kind)
        kl_term = aggregate(kl_BT, mask_BT, objective.aggregation, **normalizers)
        loss = loss + objective.beta * kl_term
        metrics["kl"] = kl_term.item()
    (loss if weight == 1.0 else loss * weight).backward()
    if weight == 0.0:
        return metrics
    metrics.update(
        loss=loss.item(),
        clip_frac_low=stats["clip_frac_low"].item(),
        clip_frac_high=stats["clip_frac_high"].item(),
        ratio_min=stats["ratio_min"].item(),
        ratio_max=stats["ratio_max"].item(),
    )
    if first:
        keep_BT = mask_BT.bool()
        metrics["entropy_sum"] = float(entropy_BT.detach()[keep_BT].sum())
        gap_BT = (logp_BT.detach() - micro.sampler_logp_BT.to(logp_BT.device)).abs()
        metrics["gap_sum"] = float(gap_BT[keep_BT].sum())
        metrics.update(correction)  # "sampler/…" sums, when a correction is on
    return metrics


def _reference_logprobs(
    policy: nn.Module,
    reference: Reference,
    micro: TrainBatch,
    temperature: float,
    share_prompt: bool,
) -> torch.Tensor:
    frozen_model = reference.model
    model = frozen_model if frozen_model is not None else policy
    context = (
        reference.context()
        if frozen_model is None and reference.context
        else contextlib.nullcontext()
    )
    # A separate frozen reference runs under inference mode (no autograd bookkeeping at all);
    # the policy itself (LoRA) and FSDP shards could keep inference tensors for training.
    frozen = frozen_model is not None and not is_fsdp_sharded(frozen_model)
    with context, torch.inference_mode() if frozen else torch.no_grad():
        logp_BT, _ = completion_logprobs(
            model,
            micro.prompt_ids_BP,
            micro.prompt_mask_BP,
            micro.completion_ids_BT,
            micro.completion_mask_BT,
            temperature=temperature,
            attention_mask_BT=micro.attention_mask_BT,
            share_prompt=share_prompt,
        )
    return logp_BT.clone() if frozen else logp_BT  # a clone outside inference mode is normal
