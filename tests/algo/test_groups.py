"""The group rules: one (N, G) view per round, its zero-variance and skipped groups."""

from __future__ import annotations

import pytest
import torch

from grpo.algo.advantages import group_advantages
from grpo.algo.groups import (
    first_groups,
    informative_groups,
    skipped_groups,
    zero_variance_groups,
)


def test_a_round_has_its_group_facts() -> None:
    rewards_NG = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5]).view(-1, 2)
    skip_B = torch.tensor([False, False, False, True, False, False])
    zero_variance_N = zero_variance_groups(rewards_NG)
    skipped_N = skipped_groups(skip_B, 2)
    assert zero_variance_N.tolist() == [True, False, True]
    assert skipped_N.tolist() == [False, True, False]  # row 3 spoils group 1
    assert informative_groups(zero_variance_N, skipped_N).tolist() == [False, False, False]


def test_skips_fold_into_their_groups() -> None:
    skip_B = torch.tensor([False, False, False, True, True, False])
    assert skipped_groups(skip_B, 3).tolist() == [False, True]
    assert skipped_groups(skip_B, 2).tolist() == [False, True, True]


def test_first_groups_counts_in_generation_order() -> None:
    informative_N = torch.tensor([False, True, True, True])
    assert first_groups(informative_N, 2).tolist() == [False, True, True, False]


def test_a_given_zero_variance_mask_gives_the_same_advantages() -> None:
    # Group 0: r = (1, 0): mean ½, σ = ½ → A = ±0.5 / (0.5 + 1e-4). Group 1 is constant.
    rewards_NG = torch.tensor([[1.0, 0.0], [3.0, 3.0]])
    given = group_advantages(rewards_NG, zero_variance_N=zero_variance_groups(rewards_NG))
    assert torch.equal(given, group_advantages(rewards_NG))
    expected = 0.5 / (0.5 + 1e-4)
    assert given[0].tolist() == pytest.approx([expected, -expected], rel=1e-7)
    assert given[1].tolist() == [0.0, 0.0]  # exactly


def test_first_groups_keeps_the_configured_number() -> None:
    informative = torch.tensor([False, True, True, False, True, True])
    assert first_groups(informative, 3).tolist() == [False, True, True, False, True, False]
    assert first_groups(informative, 10).tolist() == informative.tolist()
