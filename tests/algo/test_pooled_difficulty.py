"""Pooled difficulty estimates, P(mixed) and the pre-screen, on hand-computed numbers."""

from __future__ import annotations

import doctest

import pytest
import torch

import grpo.algo.pooled_difficulty as pooled
from grpo.algo.pooled_difficulty import (
    exploration_count,
    forgetting_factor,
    key_priors,
    mixed_probability,
    pooled_posteriors,
    prescreened_probabilities,
)


def test_docstring_examples() -> None:
    assert doctest.testmod(pooled).failed == 0


def test_key_prior_by_the_method_of_moments() -> None:
    # Key 0: rates 3/4 and 1/4 (n = 4 each) → m = 1/2, v = 1/16, h = 1/4,
    #   σ² = (1/16 − 1/4 · 1/4) / (3/4) = 0 → all alike within the noise: c = cap = 8.
    # Key 1: rates 4/4 and 0/4 → v = 1/4, σ² = (1/4 − 1/16) / (3/4) = 1/4,
    #   c = (1/4) / (1/4) − 1 = 0 → clipped up to 0.5: a = b = 0.25.
    # Key 2: rates 8/8, 6/8, 7/8 → m = 7/8; v = (8·(1/8)² + 8·(1/8)² + 0) / 24 = 1/96,
    #   h = 1/8, σ² = (1/96 − 7/64 · 1/8) / (7/8) < 0 → c = 8: a = 7, b = 1.
    # Key 3: one prompt, 1 of 2 → m = 1/2, c = 8.  Key 4: nothing seen → Beta(1, 1).
    attempts = torch.tensor([4.0, 4, 4, 4, 8, 8, 8, 2, 0])
    successes = torch.tensor([3.0, 1, 4, 0, 8, 6, 7, 1, 0])
    keys = torch.tensor([0, 0, 1, 1, 2, 2, 2, 3, 4])
    alpha, beta = key_priors(attempts, successes, keys, 5, max_prior_weight=8.0)
    assert alpha.tolist() == pytest.approx([4.0, 0.25, 7.0, 4.0, 1.0])
    assert beta.tolist() == pytest.approx([4.0, 0.25, 1.0, 4.0, 1.0])


def test_key_prior_with_a_moderate_spread() -> None:
    # Rates 1/2 and 1 with n = 10 and 10: m = 3/4, v = (10/16 + 10/16)/20 = 1/16,
    # h = 1/10, σ² = (1/16 − 3/16 · 1/10) / (9/10) = (10 − 3)/144 = 7/144,
    # c = (3/16) / (7/144) − 1 = 27/7 − 1 = 20/7 → a = 15/7, b = 5/7.
    alpha, beta = key_priors(
        torch.tensor([10.0, 10]), torch.tensor([5.0, 10]), torch.tensor([0, 0]), 1, 100.0
    )
    assert alpha.item() == pytest.approx(15 / 7)
    assert beta.item() == pytest.approx(5 / 7)


def test_an_unseen_prompt_borrows_its_keys_estimate() -> None:
    # Key 0 (easy): two prompts 4 of 4 → m clipped to 0.999, c = cap 10 → Beta(9.99, 0.01).
    # Prompt 2 is unseen in key 0: its posterior is the prior; prompt 3 is unseen in key 1.
    attempts = torch.tensor([4.0, 4, 0, 0])
    successes = torch.tensor([4.0, 4, 0, 0])
    keys = torch.tensor([0, 0, 0, 1])
    priors = key_priors(attempts, successes, keys, 2, 10.0)
    alpha, beta = pooled_posteriors(priors, keys, attempts, successes)
    assert alpha.tolist() == pytest.approx([13.99, 13.99, 9.99, 1.0])
    assert beta.tolist() == pytest.approx([0.01, 0.01, 0.01, 1.0])
    mixed = mixed_probability(alpha, beta, 4)
    assert mixed[2] < 0.01  # an easy bucket: predicted all-correct, though never seen
    assert mixed[3] == pytest.approx(1 - 2 * (1 / 2 * 2 / 3 * 3 / 4 * 4 / 5))  # 3/5


def test_mixed_probability_by_hand() -> None:
    # Beta(2, 1), G = 3: all right = 2/3 · 3/4 · 4/5 = 2/5; all wrong = 1/3 · 2/4 · 3/5 = 1/10.
    assert mixed_probability(torch.tensor([2.0]), torch.tensor([1.0]), 3).item() == pytest.approx(
        1 - 0.4 - 0.1
    )
    # A near-certain prompt is all-right with probability ≈ 1.
    assert mixed_probability(torch.tensor([1e6]), torch.tensor([1e-6]), 8).item() < 1e-5


def test_forgetting_halves_every_half_life() -> None:
    assert forgetting_factor(torch.tensor([0.0, 5, 15]), 5.0).tolist() == pytest.approx(
        [1.0, 0.5, 0.125]
    )
    assert forgetting_factor(torch.tensor([7.0]), 0.0).tolist() == [1.0]


def test_prescreen_drops_confident_prompts_and_falls_back() -> None:
    probabilities = prescreened_probabilities(torch.tensor([0.02, 0.6, 0.3, 0.0]), 0.1, 2.0)
    # 0.36 and 0.09 over 0.45.
    assert probabilities.tolist() == pytest.approx([0.0, 0.8, 0.2, 0.0])
    # Nobody passes: every prompt by its weight (a step never lacks prompts).
    fallback = prescreened_probabilities(torch.tensor([0.01, 0.03]), 0.5, 1.0)
    assert fallback.tolist() == pytest.approx([0.25, 0.75])


def test_exploration_count() -> None:
    assert exploration_count(16, 0.1) == 2  # round(1.6)
    assert exploration_count(4, 0.05) == 1  # at least one when exploring
    assert exploration_count(16, 0.0) == 0
    assert exploration_count(3, 1.0) == 3
