"""DAPO dynamic sampling (Yu et al. 2025): keep generating until the step has enough groups
with reward variance, then train on exactly that many.

Each generation round is shaped like an ordinary step (train.prompts_per_step prompts × G
rows, split over processes the same way), so rollout, scoring and gathering are unchanged;
this module only merges the rounds and picks the groups that train.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo.rollout import Rollout


@dataclass
class GenerationRound:
    """One round of sections 1–3: its prompts, this process's rollout rows, and the whole
    round's gathered per-row columns (``step_rows``), in generation order."""

    indices: list[int]
    rollout: Rollout
    step_rows: dict[str, torch.Tensor]
    reward_metrics: dict[str, float]


def informative_groups(zero_variance_N: torch.Tensor, skipped_N: torch.Tensor) -> torch.Tensor:
    """Groups that carry a gradient: reward variance and no skipped reward."""
    return ~zero_variance_N & ~skipped_N


def first_groups(informative_N: torch.Tensor, count: int) -> torch.Tensor:
    """The first ``count`` informative groups in generation order (the rest are surplus).

    Example:
        >>> first_groups(torch.tensor([True, False, True, True]), 2)
        tensor([ True, False,  True, False])
    """
    return informative_N & (informative_N.cumsum(dim=0) <= count)


def needs_another_round(
    rounds: list[GenerationRound], group_size: int, target_groups: int, max_rounds: int
) -> bool:
    """True while fewer than ``target_groups`` informative groups are in hand and the cap
    on rounds is not reached."""
    if len(rounds) >= max_rounds:
        return False
    informative = 0
    for generation in rounds:
        rewards_NG = generation.step_rows["reward"].view(-1, group_size)
        skipped_N = generation.step_rows["skip"].view(-1, group_size).any(dim=1)
        zero_variance_N = (rewards_NG == rewards_NG[:, :1]).all(dim=1)
        informative += int(informative_groups(zero_variance_N, skipped_N).sum())
    return informative < target_groups


def _pad_columns(tensor_BX: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    missing = width - tensor_BX.shape[1]
    if missing == 0:
        return tensor_BX
    padding = (missing, 0) if left else (0, missing)
    return torch.nn.functional.pad(tensor_BX, padding, value=value)


def concat_rollouts(rollouts: list[Rollout], pad_token_id: int) -> Rollout:
    """Stack rollouts row-wise; prompts stay left-padded and completions right-padded."""
    if len(rollouts) == 1:
        return rollouts[0]
    prompt_width = max(r.prompt_ids_BP.shape[1] for r in rollouts)
    completion_width = max(r.completion_ids_BT.shape[1] for r in rollouts)

    def stack(name: str, width: int, value: float, left: bool) -> torch.Tensor:
        return torch.cat([_pad_columns(getattr(r, name), width, value, left) for r in rollouts])

    return Rollout(
        prompt_ids_BP=stack("prompt_ids_BP", prompt_width, pad_token_id, True),
        prompt_mask_BP=stack("prompt_mask_BP", prompt_width, 0, True),
        completion_ids_BT=stack("completion_ids_BT", completion_width, pad_token_id, False),
        completion_mask_BT=stack("completion_mask_BT", completion_width, 0, False),
        sampler_logp_BT=stack("sampler_logp_BT", completion_width, 0.0, False),
        stopped_B=torch.cat([r.stopped_B for r in rollouts]),
    )


def process_major(values_B: torch.Tensor, rounds: int, world_size: int) -> torch.Tensor:
    """Rows in generation order (round after round, each split into world_size blocks) →
    each process's rows of every round together, so process r holds block r of the result.

    Example (2 rounds, 2 processes, rows 0–3 then 4–7):
        >>> process_major(torch.arange(8), 2, 2)
        tensor([0, 1, 4, 5, 2, 3, 6, 7])
    """
    return values_B.reshape(rounds, world_size, -1).transpose(0, 1).reshape(-1)


def merge_rounds(rounds: list[GenerationRound], pad_token_id: int) -> GenerationRound:
    """All rounds as one: prompts, per-row columns in generation order, this process's
    rollout rows round after round; reward metrics add up (errors, seconds), pool (stds)
    or average."""
    if len(rounds) == 1:
        return rounds[0]
    metrics: dict[str, float] = {}
    for key in rounds[0].reward_metrics:
        values = [r.reward_metrics[key] for r in rounds]
        mean_key = key.removesuffix("/std") + "/mean"
        if key.endswith(("/errors", "/seconds")):
            metrics[key] = sum(values)
        elif key.endswith("/std") and mean_key in rounds[0].reward_metrics:
            # Pooled over equal-sized rounds: σ² = mean_r(σ_r² + μ_r²) − μ².
            means = [r.reward_metrics[mean_key] for r in rounds]
            second = sum(s * s + m * m for s, m in zip(values, means, strict=True)) / len(rounds)
            metrics[key] = max(second - (sum(means) / len(rounds)) ** 2, 0.0) ** 0.5
        else:
            metrics[key] = sum(values) / len(values)
    return GenerationRound(
        indices=[index for r in rounds for index in r.indices],
        rollout=concat_rollouts([r.rollout for r in rounds], pad_token_id),
        step_rows={
            name: torch.cat([r.step_rows[name] for r in rounds]) for name in rounds[0].step_rows
        },
        reward_metrics=metrics,
    )
