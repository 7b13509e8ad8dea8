"""The metrics stage: one flat dict of the step's numbers, the same on every process.

Per-row values are the whole step's (gathered); each process's own parts (reward runner,
producer, update, timings) are reduced over processes first, each key as the metric table
says (:mod:`grpo.log.metric_table`). The glossary of every key is
:mod:`grpo.log.metric_glossary` (docs/reference/metrics.md).
"""

from __future__ import annotations

from grpo.agents.rollout import env_token_frac
from grpo.algo.selection import Selection
from grpo.log.metric_table import reduce_processes
from grpo.training.rounds import Generation
from grpo.training.runtime.distributed import Dist


def step_metrics(
    generation: Generation,
    selection: Selection,
    *,
    signal: dict[str, float],
    update: dict[str, float],
    times: dict[str, float],
    lr: float,
    dist: Dist,
) -> dict[str, float]:
    """Rewards, groups, the learning signal (``signal``: group outcomes and sample
    counts), completion lengths, the update and the step's seconds."""
    reward_metrics = reduce_over_processes(dist, generation.reward_metrics)
    update, times = reduce_over_processes(dist, update), reduce_over_processes(dist, times)
    results, groups = generation.results, generation.groups
    length_B = results.length_B.float()
    metrics = {
        "reward/mean": results.reward_B.mean().item(),
        "reward/std": results.reward_B.std(unbiased=False).item(),
        **reward_metrics,
        "zero_variance_frac": groups.zero_variance_N.float().mean().item(),
        "skipped_groups": float(groups.skipped_N.sum()),
        "groups_trained": float(selection.trains_N.sum()),
        "generation_rounds": float(generation.rounds),
        **signal,
        "completion_len/mean": length_B.mean().item(),
        "completion_len/max": length_B.max().item(),
        "truncated_frac": results.truncated_B.float().mean().item(),
        "lr": lr,
        **update,
        **times,
    }
    if results.overlong_penalty_B is not None:
        metrics["reward/overlong_penalty"] = results.overlong_penalty_B.mean().item()
    if results.env_tokens_B is not None:  # multi-turn: Σ inserted / Σ (inserted + model)
        inserted, model = results.env_tokens_B.sum().item(), length_B.sum().item()
        metrics["agent/env_token_frac"] = env_token_frac(inserted, model)
    if selection.dropped_rows is not None:
        metrics["truncated_masked"] = float(selection.dropped_rows)
    return metrics


def accuracy(generation: Generation) -> dict[str, float]:
    """The fraction of completions the accuracy reward scores ≥ 1, when the run has one."""
    accuracy_B = generation.results.accuracy_B
    if accuracy_B is None:
        return {}
    return {"accuracy": (accuracy_B >= 1.0).float().mean().item()}


def reduce_over_processes(dist: Dist, metrics: dict[str, float]) -> dict[str, float]:
    """Each process's values of ``metrics`` as one, by the metric table (identity alone)."""
    if not dist.enabled or not metrics:
        return dict(metrics)
    return reduce_processes(dist.gather_values(metrics))
