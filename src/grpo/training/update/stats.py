"""What an update measured: each micro-batch's statistics, returned by its pass, and their
fold into the update's metrics.

Every metric is this process's part of the whole step's value, so that processes' parts
combine by the metric table (:mod:`grpo.log.metric_table`): token shares add up
(``value · tokens / step tokens``), extremes take the min or max, and the loss adds up
because each micro-batch's loss already carries the step's normalizers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from grpo.log.metric_table import Reduce, metric


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
