"""Difficulty keys for the pooled curriculum, and drawing prompts by pooled estimates.

A key groups prompts expected to be about equally hard: the values of a dataset column
(``curriculum.pool_by = "column"``, e.g. ``level`` or ``source``) or quantile buckets of
the tokenized prompt length (``"length"``). The estimates and the pre-screen are the pure
functions of :mod:`grpo.algo.pooled_difficulty`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo.algo.pooled_difficulty import (
    exploration_count,
    key_priors,
    mixed_probability,
    pooled_posteriors,
    prescreened_probabilities,
)
from grpo.data.dataset import DataError, PromptDataset
from grpo.data.prompt_stats import PromptStats


@dataclass(frozen=True)
class DifficultyKeys:
    """``keys[i]`` is prompt i's key, an index into ``names``."""

    keys: list[int]
    names: list[str]

    @property
    def num_keys(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class PoolSettings:
    """The ``[curriculum]`` keys a pooled draw reads (unpacked at the edge)."""

    group_size: int
    strength: float
    max_prior_weight: float
    prescreen_threshold: float
    exploration: float


def column_keys(dataset: PromptDataset, column: str) -> DifficultyKeys:
    """One key per distinct value of ``column`` (names sorted as strings)."""
    if column not in dataset.columns:
        raise DataError(
            f"{dataset.source}: curriculum.pool_column = {column!r} is not a column; "
            f"its columns are {sorted(dataset.columns)}"
        )
    values = [str(value) for value in dataset.columns[column]]
    names = sorted(set(values))
    index = {name: number for number, name in enumerate(names)}
    return DifficultyKeys([index[value] for value in values], names)


def length_keys(token_ids: list[list[int]], buckets: int) -> DifficultyKeys:
    """Quantile buckets of prompt length: bucket b holds lengths in (q_{b−1}, q_b], with
    q_b the (b / buckets)-quantile of the lengths (ties share a bucket, so there may be
    fewer). Names say the range, e.g. ``"len 5-8"``.

    Example: lengths 1..8 in 2 buckets → q = 4: keys 0 0 0 0 1 1 1 1.
    """
    lengths = torch.tensor([len(ids) for ids in token_ids], dtype=torch.float64)
    quantiles = torch.quantile(lengths, torch.arange(1, buckets, dtype=torch.float64) / buckets)
    edges = torch.unique(quantiles)
    raw = torch.bucketize(lengths, edges).tolist()  # right = False: lengths ≤ edge go left
    used = sorted(set(raw))
    renumber = {bucket: number for number, bucket in enumerate(used)}
    names = []
    for bucket in used:
        members = [int(n) for n, b in zip(lengths.tolist(), raw, strict=True) if b == bucket]
        names.append(f"len {min(members)}-{max(members)}")
    return DifficultyKeys([renumber[bucket] for bucket in raw], names)


def difficulty_keys(
    dataset: PromptDataset, pool_by: str, pool_column: str, length_buckets: int
) -> DifficultyKeys | None:
    """The keys ``curriculum.pool_by`` asks for; None for ``"none"``."""
    if pool_by == "column":
        return column_keys(dataset, pool_column)
    if pool_by == "length":
        return length_keys(dataset.prompt_token_ids, length_buckets)
    return None


def pooled_estimates(
    stats: PromptStats, keys: DifficultyKeys, step: int, max_prior_weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each prompt's pooled posterior (α_D, β_D) from the counts forgotten up to ``step``."""
    attempts_D, successes_D = stats.recent(step)
    keys_D = torch.tensor(keys.keys)
    priors_K = key_priors(attempts_D, successes_D, keys_D, keys.num_keys, max_prior_weight)
    return pooled_posteriors(priors_K, keys_D, attempts_D, successes_D)


def draw_pooled(
    stats: PromptStats,
    keys: DifficultyKeys,
    count: int,
    settings: PoolSettings,
    generator: torch.Generator,
) -> tuple[list[int], dict[str, float]]:
    """``count`` prompts: an exploration share uniformly, the rest ∝ P(mixed)^strength among
    the prompts the pre-screen keeps; with the draw's metrics.

    Distinct prompts unless ``count`` exceeds what is available to each part.
    """
    now = max(stats.last_step, default=0)
    alpha_D, beta_D = pooled_estimates(stats, keys, now, settings.max_prior_weight)
    mixed_D = mixed_probability(alpha_D, beta_D, settings.group_size)
    probabilities_D = prescreened_probabilities(
        mixed_D, settings.prescreen_threshold, settings.strength
    )
    explore = exploration_count(count, settings.exploration)
    exploit = count - explore
    available = int((probabilities_D > 0).sum())
    picked = (
        torch.multinomial(
            probabilities_D, exploit, replacement=exploit > available, generator=generator
        ).tolist()
        if exploit
        else []
    )
    taken = set(picked)
    rest = [i for i in torch.randperm(len(mixed_D), generator=generator).tolist() if i not in taken]
    while len(rest) < explore:  # more prompts asked for than the dataset has
        rest += torch.randperm(len(mixed_D), generator=generator).tolist()
    picked += rest[:explore]
    metrics = {
        "curriculum/prescreened_frac": float(
            (mixed_D < settings.prescreen_threshold).double().mean()
        ),
        "curriculum/predicted_mixed": float(mixed_D[picked].mean()),
    }
    return picked, metrics


def estimated_success(
    stats: PromptStats,
    keys: DifficultyKeys | None,
    indices: list[int],
    prior: tuple[float, float],
    max_prior_weight: float,
) -> list[float]:
    """Each listed prompt's posterior-mean success rate α / (α + β) before its newest
    outcomes: pooled when there are keys, else under the fixed Beta(α₀, β₀) prior."""
    if keys is not None:
        now = max(stats.last_step, default=0)
        alpha_D, beta_D = pooled_estimates(stats, keys, now, max_prior_weight)
    else:
        alpha_D = prior[0] + torch.tensor(stats.successes, dtype=torch.float64)
        beta_D = prior[1] + torch.tensor(stats.attempts, dtype=torch.float64) - (alpha_D - prior[0])
    mean_D = alpha_D / (alpha_D + beta_D)
    return mean_D[indices].tolist()
