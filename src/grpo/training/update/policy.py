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
from grpo.training.update.stats import MicroStats, fold_update
from grpo.training.update.surrogate import surrogate_loss


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
    reference_logps = _reference_pass(policy, reference, micro_batches, objective, share_prompt)
    old_logps: list[torch.Tensor | None] = [None] * len(micro_batches)  # π_old: iteration 0's
    first: list[MicroStats] = []
    last: list[MicroStats] = []
    grad_norms: list[float] = []
    skipped = 0
    for iteration in range(objective.inner_iterations):
        passes = _accumulate_gradients(
            policy,
            micro_batches,
            weights,
            (old_logps, reference_logps),
            objective,
            normalizers,
            shard,
            first=iteration == 0,
            share_prompt=share_prompt,
        )
        if iteration == 0:
            old_logps = [logp for _, logp in passes]
        stats = [micro for micro, _ in passes if micro is not None]
        first = stats if iteration == 0 else first
        last = stats
        grad_norm, stepped = _optimizer_step(optimization, [s.loss for s in stats], shard)
        grad_norms.append(grad_norm)
        skipped += 0 if stepped else 1
    return fold_update(
        first,
        last,
        grad_norms,
        skipped,
        num_tokens=normalizers["num_tokens"],
        correction_keys=objective.correction.mode != "none",
        use_kl=objective.beta > 0,
    )


def _reference_pass(
    policy: nn.Module,
    reference: Reference | None,
    micro_batches: list[TrainBatch],
    objective: Objective,
    share_prompt: bool,
) -> list[torch.Tensor | None]:
    """π_ref's log-probs of every micro-batch, once per update (none when β = 0)."""
    if objective.beta <= 0:
        return [None] * len(micro_batches)
    return [
        _reference_logprobs(
            policy, reference or Reference(), micro, objective.temperature, share_prompt
        )
        for micro in micro_batches
    ]


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
    *,
    first: bool,
    share_prompt: bool,
) -> list[tuple[MicroStats | None, torch.Tensor]]:
    """Forward and backward every micro-batch: per pass its statistics (None for a filler
    pass) and its detached log-probs (π_old's, on the first iteration)."""
    no_sync = shard.no_sync if shard is not None else None
    passes = []
    for index, micro in enumerate(micro_batches):
        # Gradients are summed across processes once, in the step's last backward.
        local_only = no_sync is not None and index < len(micro_batches) - 1
        old_logps, reference_logps = logps
        with no_sync() if local_only else contextlib.nullcontext():
            passes.append(
                _micro_step(
                    policy,
                    micro,
                    (old_logps[index], reference_logps[index]),
                    weights[index],
                    first,
                    objective,
                    normalizers,
                    share_prompt=share_prompt,
                )
            )
    return passes


def _optimizer_step(
    optimization: Optimization, losses: list[float], shard: Shard | None
) -> tuple[float, bool]:
    """Clip, then step, unless the loss or the gradient is not finite; the LR schedule
    steps either way. Returns the gradient norm before clipping and whether it stepped."""
    optimizer = optimization.optimizer
    # The optimizer's own parameters: under FSDP, policy.parameters() can list the unsharded
    # copies (the root stays unsharded after a no-grad forward), which get no gradient.
    trainable = [p for group in optimizer.param_groups for p in group["params"]]
    max_norm = optimization.max_grad_norm
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_norm if max_norm > 0 else math.inf)
    if hasattr(grad_norm, "full_tensor"):  # FSDP: a replicated DTensor
        grad_norm = grad_norm.full_tensor()
    finite = bool(torch.isfinite(grad_norm)) and all(map(math.isfinite, losses))
    if shard is not None and shard.all_agree is not None:
        finite = shard.all_agree(finite)  # a loss is local: every process must skip
    if finite:
        optimizer.step()
    # else skipped: parameters and optimizer state stay exactly as they were
    optimization.scheduler.step()  # the LR schedule stays on the step clock either way
    optimizer.zero_grad(set_to_none=True)
    return grad_norm.item(), finite


def _micro_step(
    policy: nn.Module,
    micro: TrainBatch,
    logps: tuple[torch.Tensor | None, torch.Tensor | None],
    weight: float,
    first: bool,
    objective: Objective,
    normalizers: dict[str, int],
    *,
    share_prompt: bool,
) -> tuple[MicroStats | None, torch.Tensor]:
    """Forward, loss × ``weight``, backward for one micro-batch: its statistics (None for
    a filler pass, ``weight`` 0) and its detached log-probs. ``logps``: π_old's (None on
    the first iteration: this pass's own, the weights have not moved yet) and π_ref's."""
    old_logp_BT, reference_logp_BT = logps
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
    if old_logp_BT is None:
        old_logp_BT = logp_BT.detach()
    loss, stats, correction = surrogate_loss(
        logp_BT, old_logp_BT, entropy_BT, micro, objective, normalizers, with_metrics=first
    )
    mask_BT = micro.completion_mask_BT
    kl = None
    if objective.beta > 0:
        kl_BT = kl_penalty(logp_BT, reference_logp_BT, objective.kl_kind)
        kl_term = aggregate(kl_BT, mask_BT, objective.aggregation, **normalizers)
        loss = loss + objective.beta * kl_term
        kl = kl_term.item()
    (loss if weight == 1.0 else loss * weight).backward()
    if weight == 0.0:
        return None, old_logp_BT
    entropy_sum = gap_sum = None
    if first:
        keep_BT = mask_BT.bool()
        entropy_sum = float(entropy_BT.detach()[keep_BT].sum())
        gap_BT = (logp_BT.detach() - micro.sampler_logp_BT.to(logp_BT.device)).abs()
        gap_sum = float(gap_BT[keep_BT].sum())
    micro_stats = MicroStats(
        loss=loss.item(),
        kl=kl,
        clip_frac_low=stats["clip_frac_low"].item(),
        clip_frac_high=stats["clip_frac_high"].item(),
        ratio_min=stats["ratio_min"].item(),
        ratio_max=stats["ratio_max"].item(),
        tokens=float(mask_BT.sum()),
        entropy_sum=entropy_sum,
        gap_sum=gap_sum,
        correction=correction,
    )
    return micro_stats, old_logp_BT


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
