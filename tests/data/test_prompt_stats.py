"""Per-prompt statistics, group-outcome metrics and curriculum weights, on hand-made numbers."""

from __future__ import annotations

import pytest
import torch

from grpo.algo.curriculum import (
    completion_successes,
    curriculum_probabilities,
    group_outcomes,
    uncertainty_weights,
)
from grpo.data.prompt_stats import PromptStats, run_totals
from grpo.data.sampler import CurriculumSettings, PromptSampler


def _two_steps() -> PromptStats:
    stats = PromptStats.empty(5)
    # Step 1: prompts 3 (all right), 1 (2 of 4) and 4 (all wrong); G = 4.
    stats.record(
        [3, 1, 4],
        torch.tensor([[1.0, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]]),
        torch.tensor([True, False, True]),
        step=1,
    )
    # Step 2: prompt 1 again (1 of 4) and prompt 0 (3 of 4).
    stats.record(
        [1, 0], torch.tensor([[0.0, 0, 1, 0], [1, 1, 0, 1]]), torch.tensor([False, False]), step=2
    )
    return stats


def test_per_prompt_statistics_accumulate() -> None:
    stats = _two_steps()
    assert stats.attempts == [4, 8, 0, 4, 4]
    assert stats.successes == [3, 3, 0, 4, 0]
    assert stats.last_step == [2, 2, 0, 1, 1]
    # 12 + 8 completions generated; the all-right and the all-wrong group of step 1 wasted 8.
    assert (stats.generated, stats.zero_variance) == (20, 8)
    assert run_totals(stats) == {
        "samples/generated_total": 20.0,
        "samples/zero_variance_total": 8.0,
        "samples/wasted_frac_total": 0.4,
    }


def test_group_outcome_fractions_and_wasted_samples() -> None:
    successes = torch.tensor([[1.0, 1, 1], [0, 0, 0], [0, 0, 0], [1, 0, 1]])
    # Group 3 is all wrong by accuracy but its rewards differ (say a format bonus), so only
    # groups 0 and 1 have zero reward variance.
    zero_variance = torch.tensor([True, True, False, False])
    assert group_outcomes(successes, zero_variance) == {
        "groups/all_correct_frac": 0.25,
        "groups/all_wrong_frac": 0.5,
        "groups/mixed_frac": 0.25,
        "samples/generated": 12.0,
        "samples/zero_variance": 6.0,
    }


def test_successes_from_accuracy_or_clipped_reward() -> None:
    rewards = torch.tensor([1.2, 0.4, -0.5, 1.0])
    accuracy = torch.tensor([1.0, 0.0, 0.0, 0.5])
    assert completion_successes(rewards, accuracy).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert completion_successes(rewards, None).tolist() == pytest.approx([1.0, 0.4, 0.0, 1.0])


def test_weights_are_the_beta_posterior_expectation_of_p_one_minus_p() -> None:
    stats = _two_steps()
    weights = uncertainty_weights(torch.tensor(stats.attempts), torch.tensor(stats.successes))
    # α = 1 + s, β = 1 + n − s; E[p(1−p)] = αβ / ((α+β)(α+β+1)).
    # prompt 0: 3 of 4 → Beta(4, 2): 8/(6·7);  prompt 1: 3 of 8 → Beta(4, 6): 24/(10·11);
    # prompt 2 unseen → Beta(1, 1): 1/6;  prompt 3: 4 of 4 → Beta(5, 1): 5/42;
    # prompt 4: 0 of 4 → Beta(1, 5): 5/42.
    expected = [8 / 42, 24 / 110, 1 / 6, 5 / 42, 5 / 42]
    assert weights.tolist() == pytest.approx(expected)
    # A stronger prior: Beta(2, 2) for prompt 2 → 4/(4·5) = 0.2; prompt 3 → Beta(6, 2): 12/72.
    strong = uncertainty_weights(
        torch.tensor(stats.attempts),
        torch.tensor(stats.successes),
        prior_successes=2.0,
        prior_failures=2.0,
    )
    assert strong[2].item() == pytest.approx(0.2)
    assert strong[3].item() == pytest.approx(12 / 72)


def test_probabilities_follow_the_strength() -> None:
    weights = torch.tensor([0.25, 0.125, 0.125, 0.0])
    assert curriculum_probabilities(weights, 1.0).tolist() == pytest.approx([0.5, 0.25, 0.25, 0])
    # k = 2: squares 1/16, 1/64, 1/64 → 4/6, 1/6, 1/6.
    assert curriculum_probabilities(weights, 2.0).tolist() == pytest.approx(
        [4 / 6, 1 / 6, 1 / 6, 0]
    )
    assert curriculum_probabilities(weights[:3], 0.0).tolist() == pytest.approx([1 / 3] * 3)


def test_curriculum_draws_follow_the_weights() -> None:
    sampler = PromptSampler(size=3, seed=0, curriculum=CurriculumSettings(enabled=True))
    # Prompt 0 is solved 20 of 20 times (weight 21/506 ≈ 0.04), prompt 1 half of 20
    # (121/506 ≈ 0.24), prompt 2 never seen (1/6): probabilities ≈ 0.09, 0.53, 0.37.
    sampler.stats.record(
        [0, 1], torch.tensor([[1.0] * 20, [1.0, 0.0] * 10]), torch.tensor([1, 0]), 1
    )
    counts = torch.zeros(3)
    for _ in range(3000):
        counts[sampler.next_indices(1)[0]] += 1
    weights = torch.tensor([21 / 506, 121 / 506, 1 / 6])
    assert (counts / 3000).tolist() == pytest.approx((weights / weights.sum()).tolist(), abs=0.03)
    assert len(set(sampler.next_indices(3))) == 3  # distinct within a draw


def test_sampler_state_round_trips_with_the_statistics() -> None:
    config = CurriculumSettings(enabled=True, strength=2.0)
    sampler = PromptSampler(size=6, seed=4, curriculum=config)
    for step in range(1, 4):
        indices = sampler.next_indices(2)
        outcomes = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
        sampler.stats.record(indices, outcomes, torch.tensor([False, True]), step)
    state = sampler.state_dict()
    resumed = PromptSampler(size=6, seed=4, curriculum=config)
    resumed.load_state_dict(state)
    assert resumed.stats == sampler.stats
    assert [resumed.next_indices(2) for _ in range(5)] == [
        sampler.next_indices(2) for _ in range(5)
    ]
    # Plain numbers only, so it saves with torch.save(weights_only=True) and as JSON.
    assert set(state["stats"]) == {
        "attempts",
        "successes",
        "last_step",
        "generated",
        "zero_variance",
        "recent_attempts",
        "recent_successes",
    }
    with pytest.raises(ValueError, match="statistics for 6 prompts, the dataset has 7"):
        PromptSampler(size=7, seed=4).load_state_dict(state)


def test_uniform_sampler_keeps_its_order_and_still_counts() -> None:
    plain = PromptSampler(size=10, seed=3)
    order = [plain.next_indices(4) for _ in range(3)]
    counted = PromptSampler(size=10, seed=3)
    picks = []
    for step in range(1, 4):
        picks.append(counted.next_indices(4))
        counted.stats.record(picks[-1], torch.ones(4, 2), torch.ones(4, dtype=torch.bool), step)
    assert picks == order  # recording statistics does not change the uniform order
    assert counted.stats.generated == 24 and counted.stats.zero_variance == 24
