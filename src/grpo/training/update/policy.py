"""The policy update: the step's kept rows as a :class:`TrainBatch`, and μ optimizer steps
over its micro-batches.

Normalizers (sequence count, token count, max length) are those of the whole batch, so the
micro-batch losses add up to the full batch's loss and the accumulated gradient equals the
one-batch gradient exactly. With several processes (:class:`StepSplit`) the normalizers
count every process's rows, so each process's loss is its share of the whole step's loss
and the gradients, summed across processes, are the single-process gradient.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from grpo.algo.corrections import correction_sums
from grpo.algo.kl import kl_penalty
from grpo.algo.losses import aggregate, policy_loss
from grpo.algo.objective import Objective
from grpo.algo.off_policy import off_policy_terms
from grpo.log.metric_table import Reduce, metric
from grpo.models.logprobs import completion_logprobs
from grpo.models.wrappers import is_fsdp_sharded
from grpo.rollout.engine import Rollout
from grpo.runtime.distributed import Dist
from grpo.runtime.optim import Optimization
from grpo.runtime.sharding import no_sync_context


@dataclass
class TrainBatch:
    """The rows that train: groups with variance only. B rows, P prompt and T completion columns."""

    prompt_ids_BP: torch.Tensor
    prompt_mask_BP: torch.Tensor
    completion_ids_BT: torch.Tensor
    completion_mask_BT: torch.Tensor
    advantages_BT: torch.Tensor  # GRPO: A_i expanded along T (a view); PPO: GAE's A_it
    sampler_logp_BT: torch.Tensor
    # Multi-turn: 1 on every real completion-column token (environment tokens included);
    # completion_mask_BT, the loss mask, is 1 on the model's tokens only. None: single turn.
    attention_mask_BT: torch.Tensor | None = None

    @classmethod
    def of(cls, rollout: Rollout, advantages_B: torch.Tensor, keep_B: torch.Tensor) -> TrainBatch:
        """Rows ``keep_B`` of ``rollout``, each with its completion's advantage A_i."""
        completion_ids_BT = rollout.completion_ids_BT[keep_B]
        return cls(
            prompt_ids_BP=rollout.prompt_ids_BP[keep_B],
            prompt_mask_BP=rollout.prompt_mask_BP[keep_B],
            completion_ids_BT=completion_ids_BT,
            completion_mask_BT=rollout.completion_mask_BT[keep_B],
            advantages_BT=advantages_B[keep_B][:, None].expand(-1, completion_ids_BT.shape[1]),
            sampler_logp_BT=rollout.sampler_logp_BT[keep_B],
            attention_mask_BT=None
            if rollout.attention_mask_BT is None
            else rollout.attention_mask_BT[keep_B],
        )

    @property
    def rows(self) -> int:
        return self.completion_ids_BT.shape[0]

    def micro_batch(self, rows: slice) -> TrainBatch:
        """Rows ``rows`` with padding columns that no row of them uses trimmed away."""
        prompt_mask = self.prompt_mask_BP[rows]
        completion_mask = self.completion_mask_BT[rows]
        first_prompt_column = (
            int((prompt_mask.sum(dim=0) > 0).nonzero().min()) if prompt_mask.any() else 0
        )
        attention = None if self.attention_mask_BT is None else self.attention_mask_BT[rows]
        # Real tokens are contiguous from column 0 (right padding): the widest row's count.
        real = completion_mask if attention is None else attention
        completion_width = max(int(real.sum(dim=1).max()), 1)
        prompt_cols = slice(first_prompt_column, None)
        completion_cols = slice(0, completion_width)
        return TrainBatch(
            prompt_ids_BP=self.prompt_ids_BP[rows, prompt_cols],
            prompt_mask_BP=prompt_mask[:, prompt_cols],
            completion_ids_BT=self.completion_ids_BT[rows, completion_cols],
            completion_mask_BT=completion_mask[:, completion_cols],
            advantages_BT=self.advantages_BT[rows, completion_cols],
            sampler_logp_BT=self.sampler_logp_BT[rows, completion_cols],
            attention_mask_BT=None if attention is None else attention[:, completion_cols],
        )


def micro_slices(rows: int, sequences_per_micro_batch: int) -> list[slice]:
    """Consecutive row blocks of at most ``sequences_per_micro_batch`` rows."""
    return [
        slice(i, min(i + sequences_per_micro_batch, rows))
        for i in range(0, rows, sequences_per_micro_batch)
    ]


ReferenceContext = Callable[[], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class Reference:
    """π_ref: a frozen ``model``, or (LoRA) the policy itself inside ``context``, which
    disables its adapters, so no second copy of the weights is held."""

    model: nn.Module | None = None
    context: ReferenceContext | None = None


@dataclass
class StepSplit:
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


def step_split(
    dist: Dist,
    trained: nn.Module,
    keep_B: torch.Tensor,
    lengths_B: torch.Tensor,
    rounds: int,
    rollout: Rollout,
    sequences_per_micro_batch: int,
) -> StepSplit | None:
    """How this process's kept rows fit into the step's update (None for one process).

    Every process holds the whole step's keep mask and completion lengths (``rounds``
    rounds, each split into one block per process), so each computes the global
    normalizers and every process's micro-batch count itself.
    """
    if not dist.enabled:
        return None
    kept_per_process = keep_B.view(rounds, dist.world_size, -1).sum(dim=(0, 2))
    most_kept = int(kept_per_process.max())
    device = rollout.completion_ids_BT.device
    first_row_B = torch.arange(rollout.completion_ids_BT.shape[0], device=device) == 0
    # This process's row 0, advantage 0; its passes are weighted 0 anyway.
    zero_B = torch.zeros(first_row_B.shape[0], device=device)
    filler = TrainBatch.of(rollout, zero_B, first_row_B).micro_batch(slice(0, 1))
    return StepSplit(
        num_sequences=int(keep_B.sum()),
        num_tokens=int(lengths_B[keep_B].sum()),
        micro_batches=math.ceil(most_kept / sequences_per_micro_batch),
        filler=filler,
        no_sync=no_sync_context(trained, dist),
        all_agree=dist.all_agree,
    )


def policy_update(
    policy: nn.Module,
    batch: TrainBatch,
    objective: Objective,
    optimization: Optimization,
    *,
    sequences_per_micro_batch: int,
    reference: Reference | None = None,
    shard: StepSplit | None = None,
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
    # The micro-batches, their loss weights (0 for a filler pass) and the normalizers.
    slices = micro_slices(batch.rows, sequences_per_micro_batch)
    micro_batches = [batch.micro_batch(s) for s in slices]
    weights = [1.0] * len(micro_batches)
    normalizers = {
        "num_sequences": batch.rows,
        "num_tokens": int(batch.completion_mask_BT.sum()),
        "max_length": objective.max_completion_length,
    }
    if shard is not None:
        normalizers["num_sequences"] = shard.num_sequences
        normalizers["num_tokens"] = shard.num_tokens
        padding = max(shard.micro_batches - len(micro_batches), 0)
        micro_batches += [shard.filler] * padding
        weights += [0.0] * padding
    no_sync = shard.no_sync if shard is not None else None
    reference_logps = _reference_pass(policy, reference, micro_batches, objective, share_prompt)
    old_logps: list[torch.Tensor | None] = [None] * len(micro_batches)  # π_old: iteration 0's
    first: list[MicroStats] = []
    last: list[MicroStats] = []
    grad_norms: list[float] = []
    skipped = 0
    for iteration in range(objective.inner_iterations):
        stats: list[MicroStats] = []
        for index, micro in enumerate(micro_batches):
            # Gradients are summed across processes once, in the step's last backward.
            local_only = no_sync is not None and index < len(micro_batches) - 1
            with no_sync() if local_only else contextlib.nullcontext():
                micro_stats, logp_BT = _micro_step(
                    policy,
                    micro,
                    (old_logps[index], reference_logps[index]),
                    weights[index],
                    iteration == 0,
                    objective,
                    normalizers,
                    share_prompt=share_prompt,
                )
            if iteration == 0:
                old_logps[index] = logp_BT  # detached: π_old for the later iterations
            if micro_stats is not None:  # None: a filler pass
                stats.append(micro_stats)
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


def _optimizer_step(
    optimization: Optimization, losses: list[float], shard: StepSplit | None
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
    # The surrogate on π_prox = ``old_logp_BT`` (the learner's before the update): with the
    # defaults (no sampler correction, off_policy "none", token ratios, no entropy bonus)
    # exactly policy_loss. The ``sampler/*`` sums, with a correction on, describe the
    # weight the loss used: under "decoupled" the behaviour weight times the correction's
    # rejection, under "sampler" the rejection alone.
    mask_BT, settings = micro.completion_mask_BT, objective.correction
    correction: dict[str, float] = {}
    sampler_logp_BT = micro.sampler_logp_BT.to(logp_BT.device)  # π_behav
    terms = off_policy_terms(
        logp_BT, old_logp_BT, sampler_logp_BT, mask_BT, objective.off_policy, settings
    )
    if first and terms.correction is not None:
        correction = correction_sums(
            terms.correction, old_logp_BT, sampler_logp_BT, mask_BT, settings
        )
    clip_low, clip_high = objective.clip_range
    loss, stats = policy_loss(
        logp_BT,
        terms.anchor_logp_BT,
        micro.advantages_BT,
        mask_BT,
        clip_low=clip_low,
        clip_high=clip_high,
        aggregation=objective.aggregation,
        ratio_level=objective.ratio_level,
        weights_BT=terms.weights_BT,
        **normalizers,
    )
    if objective.entropy_coef > 0:
        if entropy_BT is None:
            raise ValueError("the entropy bonus needs the policy's entropy (with_entropy=True)")
        # The masked token mean over the whole step (step-wide token count).
        bonus = aggregate(entropy_BT, mask_BT, "token", num_tokens=normalizers["num_tokens"])
        loss = loss - objective.entropy_coef * bonus
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


# What an update measured. Every metric is this process's part of the whole step's value,
# so that processes' parts combine by the metric table (grpo.log.metric_table): token
# shares add up (value · tokens / step tokens), extremes take the min or max, and the loss
# adds up because each micro-batch's loss already carries the step's normalizers.


@dataclass(frozen=True)
class MicroStats:
    """One micro-batch pass (a real one: filler passes return none)."""

    loss: float  # with the KL term
    kl: float | None  # None when β = 0
    clip_frac_low: float
    clip_frac_high: float
    ratio_min: float
    ratio_max: float
    tokens: float  # completion tokens the model wrote in the micro-batch
    entropy_sum: float | None = None  # first iteration only: Σ entropy over its tokens
    gap_sum: float | None = None  # first iteration only: Σ |log π_sampler − log π_old|
    correction: dict[str, float] = field(default_factory=dict)  # sampler/… sums (first)


def fold_update(
    first: list[MicroStats],
    last: list[MicroStats],
    grad_norms: list[float],
    skipped: int,
    *,
    num_tokens: int,
    correction_keys: bool,
    use_kl: bool,
) -> dict[str, float]:
    """The update's metrics from its first and last iterations' micro-batches and each
    optimizer step's gradient norm (their mean). Every key is present even when this
    process ran only filler passes, with neutral values."""
    token_total = max(num_tokens, 1)
    totals: dict[str, float] = {
        "loss": 0.0,
        "clip_frac_low": 0.0,
        "clip_frac_high": 0.0,
        "ratio_min": math.inf,
        "ratio_max": -math.inf,
        "entropy": 0.0,
        "sampler_logp_gap": 0.0,
        "grad_norm": 0.0,
        "skipped_updates": float(skipped),
        **(_correction_start() if correction_keys else {}),
    }
    if use_kl:
        totals["kl"] = 0.0
    for stats in last:
        totals["loss"] += stats.loss
        if stats.kl is not None:
            totals["kl"] += stats.kl
        totals["clip_frac_low"] += stats.clip_frac_low * stats.tokens / token_total
        totals["clip_frac_high"] += stats.clip_frac_high * stats.tokens / token_total
        totals["ratio_min"] = min(totals["ratio_min"], stats.ratio_min)
        totals["ratio_max"] = max(totals["ratio_max"], stats.ratio_max)
    for stats in first:
        totals["entropy"] += stats.entropy_sum / token_total
        totals["sampler_logp_gap"] += stats.gap_sum / token_total
        _add_correction(totals, stats.correction, token_total)
    for grad_norm in grad_norms:
        totals["grad_norm"] += grad_norm / len(grad_norms)
    totals["clip_frac"] = totals["clip_frac_low"] + totals["clip_frac_high"]
    return totals


def _correction_start() -> dict[str, float]:
    """The correction's keys with neutral starting values (a run without a correction logs
    none of them)."""
    keys = ("kl_k3", "is_ratio_mean", "is_weight_mean", "masked_frac", "capped_frac")
    totals = {f"sampler/{key}": 0.0 for key in keys}
    for name in ("is_ratio", "is_weight"):
        totals[f"sampler/{name}_min"] = math.inf
        totals[f"sampler/{name}_max"] = -math.inf
    return totals


def _add_correction(totals: dict[str, float], sums: dict[str, float], tokens: int) -> None:
    """One micro-batch's ``sampler/…`` sums, combined as processes' parts are."""
    for key, value in sums.items():
        rule = metric(key).over_processes
        if rule is Reduce.MIN:
            totals[key] = min(totals[key], value)
        elif rule is Reduce.MAX:
            totals[key] = max(totals[key], value)
        else:
            totals[key] += value / tokens
