"""The metric table: every key the trainer logs, and how its value reduces.

A step's numbers come from three places: whole-step computations on the gathered rows
(identical on every process), the reward runner and the multi-turn rollout (once per
generation round, on this process's rows), and the update and the timers (this process's
parts). So each key says how it reduces over the rounds of a step (DAPO's dynamic sampling)
and over the processes of a torchrun job. :func:`reduce_rounds` and
:func:`reduce_processes` read this table; no reduction is written anywhere else. The
meaning of each key is in :mod:`grpo.log.metric_glossary` (a test checks both agree).

In a key, ``<name>`` stands for a reward function's name (``total``: their weighted sum)
and ``<kind>`` for a kind of tool-call error; each matches one path segment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache


class Reduce(StrEnum):
    """How the values of one key (one per round, or one per process) become one."""

    SUM = "sum"  # counts, and each process's share of the step's sums
    MEAN = "mean"  # over equal-sized rounds or shards
    MAX = "max"  # extremes, and wall-clock seconds of processes working side by side
    MIN = "min"
    POOLED_STD = "pooled std"  # σ² = mean_r(σ_r² + μ_r²) − μ², with the key's /mean sibling
    WHOLE_STEP = "whole step"  # computed once from the step's gathered rows: nothing to reduce
    ONCE = "once a step"  # over rounds: measured once per step, after its rounds
    ONE_PROCESS = "one process"  # over processes: logged only by runs of a single process


@dataclass(frozen=True)
class Metric:
    key: str
    over_rounds: Reduce
    over_processes: Reduce


SUM, MEAN, MAX, MIN = Reduce.SUM, Reduce.MEAN, Reduce.MAX, Reduce.MIN
POOLED_STD, WHOLE_STEP, ONCE = Reduce.POOLED_STD, Reduce.WHOLE_STEP, Reduce.ONCE

_WHOLE_STEP_KEYS = (
    "reward/mean",
    "reward/std",
    "accuracy",
    "eval/accuracy",
    "zero_variance_frac",
    "skipped_groups",
    "groups_trained",
    "generation_rounds",
    "groups/all_correct_frac",
    "groups/all_wrong_frac",
    "groups/mixed_frac",
    "samples/generated",
    "samples/zero_variance",
    "samples/generated_total",
    "samples/zero_variance_total",
    "samples/wasted_frac_total",
    "curriculum/prescreened_frac",
    "curriculum/predicted_mixed",
    "completion_len/mean",
    "completion_len/max",
    "reasoning/len_hard",
    "reasoning/len_medium",
    "reasoning/len_easy",
    "reasoning/think_frac",
    "reasoning/think_chars",
    "reasoning/self_correction_rate",
    "truncated_frac",
    "truncated_masked",
    "reward/overlong_penalty",
    "agent/env_token_frac",  # Σ inserted / Σ (inserted + model) over every process's rows
    "lr",
)

METRICS: tuple[Metric, ...] = (
    *(Metric(key, WHOLE_STEP, WHOLE_STEP) for key in _WHOLE_STEP_KEYS),
    # The reward runner, per round on this process's rows.
    Metric("reward/<name>/mean", MEAN, MEAN),
    Metric("reward/<name>/std", POOLED_STD, POOLED_STD),
    Metric("reward/<name>/errors", SUM, SUM),
    Metric("reward/<name>/seconds", SUM, MAX),
    # The multi-turn rollout, per round on this process's rows.
    Metric("agent/turns/mean", MEAN, MEAN),
    Metric("agent/tool_calls/mean", MEAN, MEAN),
    Metric("agent/tool_call_frac", MEAN, MEAN),
    Metric("agent/cut_at_max_turns_frac", MEAN, MEAN),
    Metric("agent/prefix_breaks", SUM, SUM),
    Metric("agent/<kind>/errors", SUM, SUM),
    Metric("agent/tool/seconds", SUM, MAX),
    # The update: each process's parts of the whole step's sums.
    *(
        Metric(key, ONCE, SUM)
        for key in ("loss", "kl", "clip_frac", "clip_frac_low", "clip_frac_high", "entropy")
    ),
    Metric("sampler_logp_gap", ONCE, SUM),
    Metric("ratio_min", ONCE, MIN),
    Metric("ratio_max", ONCE, MAX),
    Metric("grad_norm", ONCE, MAX),  # the same on every process (gradients are summed first)
    Metric("skipped_updates", ONCE, MAX),  # every process skips together
    *(
        Metric(f"sampler/{key}", ONCE, SUM)
        for key in ("kl_k3", "is_ratio_mean", "is_weight_mean", "masked_frac", "capped_frac")
    ),
    *(Metric(f"sampler/{name}_min", ONCE, MIN) for name in ("is_ratio", "is_weight")),
    *(Metric(f"sampler/{name}_max", ONCE, MAX) for name in ("is_ratio", "is_weight")),
    # PPO's critic: algorithm.estimator = "ppo" runs in one process.
    *(
        Metric(key, ONCE, Reduce.ONE_PROCESS)
        for key in (
            "value_loss",
            "value_clip_frac",
            "value_mean",
            "return_mean",
            "critic_grad_norm",
            "explained_variance",
        )
    ),
    # Asynchronous rollouts (rollout.mode = "async"): the learner's own, once a step.
    *(
        Metric(f"async/{key}", ONCE, Reduce.ONE_PROCESS)
        for key in (
            "version_lag_mean",
            "version_lag_max",
            "groups_at_lag/<n>",
            "queue_depth",
            "in_flight",
            "learner_idle_s",
            "worker_idle_s",
            "worker_busy_s",
            "sync_s",
            "sync_bytes",
            "samples_per_s",
            "stale_waits",
            "stale_dropped",
            "worker_restarts",
        )
    ),
    # Timers: rounds run one after the other, processes side by side.
    Metric("time/rollout", SUM, MAX),
    Metric("time/reward", SUM, MAX),
    Metric("time/compile", ONCE, MAX),
    Metric("time/train", ONCE, MAX),
    Metric("time/step", ONCE, MAX),
)


@cache
def _patterns() -> tuple[tuple[re.Pattern[str], Metric], ...]:
    """Exact keys before patterns, so ``reward/mean`` is never ``reward/<name>``."""
    ordered = sorted(METRICS, key=lambda metric: "<" in metric.key)
    return tuple(
        (re.compile(re.sub(r"<\w+>", "[^/]+", re.escape(row.key)) + "$"), row) for row in ordered
    )


@cache  # a step logs the same keys every time: after the first, a lookup is a dict hit
def metric(key: str) -> Metric:
    """The table's row for ``key``; a :class:`KeyError` names a key the table lacks."""
    for pattern, row in _patterns():
        if pattern.match(key):
            return row
    raise KeyError(f"metric {key!r} is not in the metric table (grpo.log.metric_table)")


def reduce_values(rule: Reduce, values: list[float], means: list[float] | None = None) -> float:
    """One value from equal-weighted ``values`` (rounds of equal size, or equal shards).

    Pooled std needs the parts' means: σ² = mean_r(σ_r² + μ_r²) − μ², μ = mean_r(μ_r).
    Two rounds with rewards {0, 2} (μ=1, σ=1) and {4, 4} (μ=4, σ=0) pool to the std of
    {0, 2, 4, 4}, which is √(mean(0, 4, 16, 16) − 2.5²) = √2.75:

        >>> round(reduce_values(Reduce.POOLED_STD, [1.0, 0.0], means=[1.0, 4.0]), 4)
        1.6583
        >>> reduce_values(metric("reward/exact/errors").over_rounds, [2.0, 1.0])
        3.0
    """
    if rule is Reduce.POOLED_STD:
        if means is None:
            raise ValueError("a pooled std needs the means of its parts")
        second = sum(s * s + m * m for s, m in zip(values, means, strict=True)) / len(values)
        return max(second - (sum(means) / len(values)) ** 2, 0.0) ** 0.5
    if rule is Reduce.SUM:
        return sum(values)
    if rule is Reduce.MAX:
        return max(values)
    if rule is Reduce.MIN:
        return min(values)
    if rule is Reduce.MEAN:
        return sum(values) / len(values)
    if rule is Reduce.WHOLE_STEP:
        return values[0]  # the same everywhere
    raise ValueError(f"{rule.value}: these values cannot be reduced")


def _reduce(parts: dict[str, list[float]], rule_of: str) -> dict[str, float]:
    reduced = {}
    for key, values in parts.items():
        rule = getattr(metric(key), rule_of)
        means = parts.get(key.removesuffix("/std") + "/mean") if rule is Reduce.POOLED_STD else None
        reduced[key] = reduce_values(rule, values, means)
    return reduced


def reduce_rounds(per_round: list[dict[str, float]]) -> dict[str, float]:
    """A step's per-round metrics (rounds of equal size) as one set, by the table."""
    if len(per_round) == 1:
        return per_round[0]
    return _reduce({key: [r[key] for r in per_round] for key in per_round[0]}, "over_rounds")


def reduce_processes(gathered: dict[str, list[float]]) -> dict[str, float]:
    """Each key's value on every process (equal shards of the step) as one, by the table."""
    return _reduce(gathered, "over_processes")
