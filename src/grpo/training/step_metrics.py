"""The metrics stage: one flat dict of the step's numbers, the same on every process.

Per-row values are the whole step's (gathered); each process's own parts (reward runner,
update, timings) are reduced over processes first (see
:func:`~grpo.training.runtime.distributed.reduce_step_metrics`). The glossary of every key is in
the README.
"""

from __future__ import annotations

from grpo.training.rounds import Generation
from grpo.training.runtime.distributed import Dist, reduce_step_metrics
from grpo.training.select import Selection


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
    reward_metrics, update, times = reduce_step_metrics(
        dist, generation.reward_metrics, update, times
    )
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
        inserted = results.env_tokens_B.sum().item()
        metrics["agent/env_token_frac"] = inserted / max(inserted + length_B.sum().item(), 1.0)
    if selection.dropped_rows is not None:
        metrics["truncated_masked"] = float(selection.dropped_rows)
    return metrics


def accuracy(generation: Generation) -> dict[str, float]:
    """The fraction of completions the accuracy reward scores ≥ 1, when the run has one."""
    accuracy_B = generation.results.accuracy_B
    if accuracy_B is None:
        return {}
    return {"accuracy": (accuracy_B >= 1.0).float().mean().item()}
