"""The policy update on one rollout batch: μ optimizer steps over micro-batches.

Normalizers (sequence count, token count, max length) are those of the whole batch, so the
micro-batch losses add up to the full batch's loss and the accumulated gradient equals the
one-batch gradient exactly. With several processes (:class:`Shard`) the normalizers count
every process's rows, so each process's loss is its share of the whole step's loss and the
gradients, summed across processes, are the single-process gradient.
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
from grpo.logprobs import completion_logprobs, is_fsdp_sharded
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
        advantages = self.advantages_B[rows]  # (B,) or PPO's per-token (B, T)
        prompt_cols = slice(first_prompt_column, None)
        completion_cols = slice(0, completion_width)
        return TrainBatch(
            prompt_ids_BP=self.prompt_ids_BP[rows, prompt_cols],
            prompt_mask_BP=prompt_mask[:, prompt_cols],
            completion_ids_BT=self.completion_ids_BT[rows, completion_cols],
            completion_mask_BT=completion_mask[:, completion_cols],
            advantages_B=advantages if advantages.dim() == 1 else advantages[:, completion_cols],
            sampler_logp_BT=self.sampler_logp_BT[rows, completion_cols],
        )


ReferenceContext = Callable[[], contextlib.AbstractContextManager]


@dataclass
class Shard:
    """How this process's rows fit into a step split across processes.

    ``num_sequences``/``num_tokens``: kept sequences and their completion tokens over all
    processes (the loss normalizers). ``micro_batches``: how many forward/backward passes
    every process runs per optimizer step, the largest count of any process. A process with
    fewer real micro-batches (or no rows at all) runs zero-weighted passes on ``filler``
    (any one row), because DDP needs every process to run the gradient-synchronising
    backward, and FSDP every forward (each gathers parameters from all processes).
    ``no_sync``: the context for all but the last backward of an optimizer step, in which
    gradients accumulate locally; the last backward then sums them across processes once.
    """

    num_sequences: int
    num_tokens: int
    micro_batches: int
    filler: TrainBatch
    no_sync: Callable[[], contextlib.AbstractContextManager] | None = None
    all_agree: Callable[[bool], bool] | None = None  # True when true on every process


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
    shard: Shard | None = None,
) -> dict[str, float]:
    """Run μ = ``algorithm.inner_iterations`` optimizer steps on ``batch``; return metrics.

    π_old log-probs are taken from the first iteration's forward pass (the weights have
    not moved yet, so they are exactly π_old's) and reused by later iterations, never
    recomputed. The reference is ``reference`` (a frozen model) or, for LoRA, the policy
    itself inside ``reference_context`` (adapters disabled). With ``shard``, ``batch`` is
    this process's rows (possibly none) of a step split across processes; the metrics are
    then this process's parts: sums (loss, kl, clip fractions, entropy, sampler_logp_gap)
    add up across processes, ratio_min/ratio_max take the min/max, and grad_norm and
    skipped_updates are the same everywhere.

    An update whose loss (any micro-batch's, on any process) or gradient norm is not finite
    is skipped: no ``optimizer.step()``, so the parameters and the optimizer state are
    unchanged; the scheduler still steps. ``skipped_updates`` counts them.
    """
    rows = batch.advantages_B.shape[0]
    slices = [
        slice(i, min(i + sequences_per_micro_batch, rows))
        for i in range(0, rows, sequences_per_micro_batch)
    ]
    micro_batches = [batch.micro_batch(s) for s in slices]
    weights = [1.0] * len(micro_batches)
    normalizers = {
        "num_sequences": rows,
        "num_tokens": int(batch.completion_mask_BT.sum()),
        "max_length": max_completion_length,
    }
    if shard is not None:
        normalizers["num_sequences"] = shard.num_sequences
        normalizers["num_tokens"] = shard.num_tokens
        padding = max(shard.micro_batches - len(micro_batches), 0)
        micro_batches += [shard.filler] * padding
        weights += [0.0] * padding
    use_kl = algorithm.beta > 0
    reference_logps = [
        _reference_logprobs(policy, reference, reference_context, micro, temperature)
        if use_kl
        else None
        for micro in micro_batches
    ]
    old_logps: list[torch.Tensor | None] = [None] * len(micro_batches)
    # The optimizer's own parameters: under FSDP, policy.parameters() can list the unsharded
    # copies (the root stays unsharded after a no-grad forward), which get no gradient.
    trainable = [p for group in optimizer.param_groups for p in group["params"]]
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
    }
    if use_kl:
        totals["kl"] = 0.0
    token_total = max(normalizers["num_tokens"], 1)
    last_index = len(micro_batches) - 1
    no_sync = shard.no_sync if shard is not None else None

    def add(key: str, value: float) -> None:
        totals[key] = totals.get(key, 0.0) + value

    for iteration in range(algorithm.inner_iterations):
        first = iteration == 0
        losses: list[float] = []  # this update's micro-batch losses (with any KL term)
        for index, micro in enumerate(micro_batches):
            # Gradients are summed across processes once, in the step's last backward.
            local_only = no_sync is not None and index < last_index
            with no_sync() if local_only else contextlib.nullcontext():
                metrics = _micro_step(
                    policy,
                    micro,
                    old_logps,
                    reference_logps,
                    index,
                    weight=weights[index],
                    first=first,
                    algorithm=algorithm,
                    temperature=temperature,
                    normalizers=normalizers,
                )
            if weights[index] == 0.0:
                continue
            losses.append(metrics["loss"])
            tokens = float(micro.completion_mask_BT.sum())
            if iteration == algorithm.inner_iterations - 1:
                add("loss", metrics["loss"])
                if use_kl:
                    add("kl", metrics["kl"])
                add("clip_frac_low", metrics["clip_frac_low"] * tokens / token_total)
                add("clip_frac_high", metrics["clip_frac_high"] * tokens / token_total)
                totals["ratio_min"] = min(totals["ratio_min"], metrics["ratio_min"])
                totals["ratio_max"] = max(totals["ratio_max"], metrics["ratio_max"])
            if first:
                add("entropy", metrics["entropy_sum"] / token_total)
                add("sampler_logp_gap", metrics["gap_sum"] / token_total)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            trainable, max_grad_norm if max_grad_norm > 0 else math.inf
        )
        if hasattr(grad_norm, "full_tensor"):  # FSDP: a replicated DTensor
            grad_norm = grad_norm.full_tensor()
        add("grad_norm", grad_norm.item() / algorithm.inner_iterations)
        finite = bool(torch.isfinite(grad_norm)) and all(map(math.isfinite, losses))
        if shard is not None and shard.all_agree is not None:
            finite = shard.all_agree(finite)  # a loss is local: every process must skip
        if finite:
            optimizer.step()
        else:  # skipped: parameters and optimizer state stay exactly as they were
            add("skipped_updates", 1.0)
        scheduler.step()  # the LR schedule stays on the step clock either way
        optimizer.zero_grad(set_to_none=True)
    totals["clip_frac"] = totals["clip_frac_low"] + totals["clip_frac_high"]
    return totals


def _micro_step(
    policy: nn.Module,
    micro: TrainBatch,
    old_logps: list[torch.Tensor | None],
    reference_logps: list[torch.Tensor | None],
    index: int,
    *,
    weight: float,
    first: bool,
    algorithm: AlgorithmConfig,
    temperature: float,
    normalizers: dict[str, int],
) -> dict[str, float]:
    """Forward, loss × ``weight``, backward for one micro-batch; its scalar statistics."""
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
    metrics: dict[str, float] = {}
    if algorithm.beta > 0:
        kl_term = aggregate(
            kl_penalty(logp_BT, reference_logps[index], algorithm.kl_kind),
            mask_BT,
            algorithm.aggregation,
            **normalizers,
        )
        loss = loss + algorithm.beta * kl_term
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
        metrics["entropy_sum"] = float(entropy_BT[keep_BT].sum())
        gap_BT = (logp_BT.detach() - micro.sampler_logp_BT.to(logp_BT.device)).abs()
        metrics["gap_sum"] = float(gap_BT[keep_BT].sum())
    return metrics


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
    # A separate frozen reference runs under inference mode (no autograd bookkeeping at all);
    # the policy itself (LoRA) and FSDP shards could keep inference tensors for training.
    frozen = reference is not None and not is_fsdp_sharded(reference)
    with context, torch.inference_mode() if frozen else torch.no_grad():
        logp_BT, _ = completion_logprobs(
            model,
            micro.prompt_ids_BP,
            micro.prompt_mask_BP,
            micro.completion_ids_BT,
            micro.completion_mask_BT,
            temperature=temperature,
        )
    return logp_BT.clone() if frozen else logp_BT  # a clone outside inference mode is normal
