"""The group rules: one (N, G) view per round, its zero-variance and skipped groups."""

from __future__ import annotations

import pytest
import torch

from grpo.algo.advantages import group_advantages
from grpo.algo.groups import Groups, first_groups, skipped_groups


def test_a_round_becomes_groups_once_with_its_facts() -> None:
    rewards_B = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
    skip_B = torch.tensor([False, False, False, True, False, False])
    groups = Groups.of(rewards_B, skip_B, group_size=2)
    assert groups.rewards_NG.tolist() == [[1.0, 1.0], [0.0, 1.0], [0.5, 0.5]]
    assert groups.zero_variance_N.tolist() == [True, False, True]
    assert groups.skipped_N.tolist() == [False, True, False]  # row 3 spoils group 1
    assert groups.informative_N.tolist() == [False, False, False]
    assert groups.group_size == 2


def test_rounds_concatenate_in_generation_order() -> None:
    first = Groups.of(torch.tensor([0.0, 1.0]), torch.zeros(2, dtype=torch.bool), 2)
    second = Groups.of(torch.tensor([1.0, 1.0]), torch.tensor([True, False]), 2)
    both = Groups.cat([first, second])
    assert both.rewards_NG.tolist() == [[0.0, 1.0], [1.0, 1.0]]
    assert both.zero_variance_N.tolist() == [False, True]
    assert both.skipped_N.tolist() == [False, True]
    assert Groups.cat([first]) is first


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
    groups = Groups.of(rewards_NG.view(-1), torch.zeros(4, dtype=torch.bool), 2)
    given = group_advantages(rewards_NG, zero_variance_N=groups.zero_variance_N)
    assert torch.equal(given, group_advantages(rewards_NG))
    expected = 0.5 / (0.5 + 1e-4)
    assert given[0].tolist() == pytest.approx([expected, -expected], rel=1e-7)
    assert given[1].tolist() == [0.0, 0.0]  # exactly


def test_first_groups_keeps_the_configured_number() -> None:
    informative = torch.tensor([False, True, True, False, True, True])
    assert first_groups(informative, 3).tolist() == [False, True, True, False, True, False]
    assert first_groups(informative, 10).tolist() == informative.tolist()
