"""Difficulty keys, pooled draws with the pre-screen, and their state across a resume."""

from __future__ import annotations

import pytest
import torch

from grpo.data.dataset import DataError, PromptDataset
from grpo.data.difficulty import (
    DifficultyKeys,
    PoolSettings,
    column_keys,
    draw_pooled,
    estimated_success,
    length_keys,
)
from grpo.data.prompt_stats import PromptStats
from grpo.data.sampler import CurriculumSettings, PromptSampler


def _dataset() -> PromptDataset:
    levels = ["easy", "hard", "easy", "mid", "hard"]
    return PromptDataset("mem", ["p"] * 5, [[1]] * 5, {"level": levels, "answer": ["1"] * 5})


def test_column_keys_and_a_missing_column() -> None:
    keys = column_keys(_dataset(), "level")
    assert keys.names == ["easy", "hard", "mid"]
    assert keys.keys == [0, 1, 0, 2, 1]
    with pytest.raises(DataError, match="pool_column = 'source' is not a column"):
        column_keys(_dataset(), "source")


def test_length_keys_are_quantile_buckets() -> None:
    keys = length_keys([[0] * n for n in [1, 2, 3, 4, 5, 6, 7, 8]], 2)
    assert keys.keys == [0, 0, 0, 0, 1, 1, 1, 1]  # median 4.5: 1-4 | 5-8
    assert keys.names == ["len 1-4", "len 5-8"]
    # All lengths equal: one bucket however many are asked for.
    same = length_keys([[0, 0]] * 3, 4)
    assert (same.keys, same.names) == ([0, 0, 0], ["len 2-2"])


def _stats_easy_key_solved() -> PromptStats:
    # Key 0 = prompts 0-3, key 1 = prompts 4-7. Prompts 0 and 1 solved 4 of 4 (easy key);
    # prompts 4 and 5 solved 2 of 4 (a mixed key). Prompts 2, 3, 6, 7 never seen.
    stats = PromptStats.empty(8)
    stats.record(
        [0, 1, 4, 5],
        torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 0], [0, 1, 0, 1]]),
        torch.tensor([True, True, False, False]),
        step=1,
    )
    return stats


KEYS = DifficultyKeys([0, 0, 0, 0, 1, 1, 1, 1], ["easy", "mixed"])


def test_prescreen_skips_the_solved_bucket_but_explores() -> None:
    stats = _stats_easy_key_solved()
    settings = PoolSettings(4, 1.0, 10.0, prescreen_threshold=0.2, exploration=0.0)
    picked, metrics = draw_pooled(stats, KEYS, 4, settings, torch.Generator().manual_seed(0))
    # Key 0's prior is Beta(9.99, 0.01): every prompt of it, seen or not, is screened out;
    # key 1's Beta(5, 5) (rates alike: c = cap 10) leaves the four of key 1.
    assert sorted(picked) == [4, 5, 6, 7]
    assert metrics["curriculum/prescreened_frac"] == 0.5
    # Unseen prompts 6, 7 under Beta(5, 5), G = 4: 1 − 2·(5·6·7·8)/(10·11·12·13) = 1 − 2·14/143.
    # Prompts 4, 5 under Beta(7, 7): 1 − 2·(7·8·9·10)/(14·15·16·17) = 1 − 2·3/34.
    expected = (2 * (1 - 28 / 143) + 2 * (1 - 6 / 34)) / 4
    assert metrics["curriculum/predicted_mixed"] == pytest.approx(expected)
    # With exploration 0.5, two of the four are uniform picks among the rest.
    explore = PoolSettings(4, 1.0, 10.0, prescreen_threshold=0.2, exploration=0.5)
    picks = [
        draw_pooled(stats, KEYS, 4, explore, torch.Generator().manual_seed(seed))[0]
        for seed in range(20)
    ]
    assert all(len(set(p)) == 4 for p in picks)
    assert any(i < 4 for p in picks for i in p)  # the screened bucket is still visited


def test_estimated_success_pooled_and_unpooled() -> None:
    stats = _stats_easy_key_solved()
    pooled = estimated_success(stats, KEYS, [2, 6], (1.0, 1.0), 10.0)
    assert pooled == pytest.approx([0.999, 0.5])  # unseen prompts borrow their key's mean
    plain = estimated_success(stats, None, [0, 4, 2], (1.0, 1.0), 10.0)
    assert plain == pytest.approx([5 / 6, 3 / 6, 1 / 2])


def test_forgetting_ages_the_recent_counts() -> None:
    stats = PromptStats.empty(2, half_life_steps=2.0)
    stats.record([0], torch.tensor([[1.0, 1, 0, 0]]), torch.tensor([False]), step=1)
    stats.record([0], torch.tensor([[1.0, 1, 1, 1]]), torch.tensor([True]), step=3)
    # Step 3: 4 · 0.5 + 4 = 6 attempts, 2 · 0.5 + 4 = 5 successes; at step 5 halved again.
    assert (stats.recent_attempts[0], stats.recent_successes[0]) == (6.0, 5.0)
    attempts, successes = stats.recent(5)
    assert attempts.tolist() == [3.0, 0.0]
    assert successes.tolist() == [2.5, 0.0]
    assert stats.attempts[0] == 8.0  # the plain counts do not forget


def test_pooled_sampler_resumes_exactly() -> None:
    curriculum = CurriculumSettings(enabled=True, prescreen_threshold=0.1, half_life_steps=5.0)
    keys = DifficultyKeys([0, 0, 0, 0, 1, 1, 1, 1], ["a", "b"])

    def sampler() -> PromptSampler:
        return PromptSampler(8, seed=1, curriculum=curriculum, keys=keys, group_size=4)

    first = sampler()
    for step in range(1, 4):
        picked = first.next_indices(3)
        rows = torch.tensor([[1.0, 1, 1, 1] if i < 4 else [1.0, 0, 0, 1] for i in picked])
        first.stats.record(picked, rows, rows.std(dim=1) == 0, step)
    state = first.state_dict()
    expected = [first.next_indices(3) for _ in range(3)]
    resumed = sampler()
    resumed.load_state_dict(state)
    assert [resumed.next_indices(3) for _ in range(3)] == expected
    assert resumed.stats.recent_attempts == first.stats.recent_attempts
