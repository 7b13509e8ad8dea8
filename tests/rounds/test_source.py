"""Dynamic sampling: which groups train, when to refill, and how rounds merge."""

from __future__ import annotations

import pytest
import torch

from grpo.algo.groups import skipped_groups, zero_variance_groups
from grpo.rewards.runner import RewardScores
from grpo.rollout.engine import Rollout, concat_rollouts
from grpo.rounds.source import ScoredRows, needs_another_round


def _round(rewards_NG: list[list[float]], skip: list[bool] | None = None) -> ScoredRows:
    rewards = torch.tensor(rewards_NG).view(-1)
    group_size = len(rewards_NG[0])
    skip_B = torch.tensor(skip or [False] * len(rewards_NG)).repeat_interleave(group_size)
    rows = rewards.numel()
    rollout = Rollout(
        prompt_ids_BP=torch.ones(rows, 2, dtype=torch.long),
        prompt_mask_BP=torch.ones(rows, 2, dtype=torch.long),
        completion_ids_BT=torch.ones(rows, 3, dtype=torch.long),
        completion_mask_BT=torch.ones(rows, 3, dtype=torch.long),
        sampler_logp_BT=torch.zeros(rows, 3),
        stopped_B=torch.ones(rows, dtype=torch.bool),
    )
    texts = [""] * rows
    return ScoredRows(
        list(range(len(rewards_NG))),
        group_size,
        rollout,
        texts,
        texts,
        {},
        [],
        None,
        None,
        None,
        {},
        local_scores=RewardScores(rewards, {}, skip_B, {}),
        reward_B=rewards,
        skip_B=skip_B,
        length_B=torch.full((rows,), 3),
        truncated_B=torch.zeros(rows, dtype=torch.bool),
        zero_variance_N=zero_variance_groups(rewards.view(-1, group_size)),
        skipped_N=skipped_groups(skip_B, group_size),
    )


def test_refills_until_enough_informative_groups() -> None:
    # Target 3 informative groups of G = 2 per step.
    one = _round([[1, 1], [0, 1], [0, 0]])  # 1 informative
    assert needs_another_round([one], 3, max_rounds=4)
    two = _round([[0, 1], [1, 1], [0, 0]])  # 2 in hand
    assert needs_another_round([one, two], 3, max_rounds=4)
    three = _round([[1, 0], [1, 1], [1, 1]])  # 3: done
    assert not needs_another_round([one, two, three], 3, max_rounds=4)


def test_stops_at_the_round_cap_and_skipped_groups_do_not_count() -> None:
    empty = _round([[0, 0], [1, 1], [0, 1]], skip=[False, False, True])  # its mixed one skipped
    assert needs_another_round([empty], 1, max_rounds=2)
    assert not needs_another_round([empty, empty], 1, max_rounds=2)


def test_rounds_merge_with_padding() -> None:
    first, second = _round([[0, 1]]), _round([[1, 1]])
    second.local_rollout.prompt_ids_BP = torch.full((2, 4), 7)
    second.local_rollout.prompt_mask_BP = torch.ones(2, 4, dtype=torch.long)
    second.local_rollout.completion_ids_BT = torch.full((2, 1), 7)
    second.local_rollout.completion_mask_BT = torch.ones(2, 1, dtype=torch.long)
    second.local_rollout.sampler_logp_BT = torch.full((2, 1), -0.5)
    first.local_scores.metrics = {
        "reward/total/mean": 0.5,
        "reward/total/std": 0.5,
        "reward/r/seconds": 1.0,
    }
    second.local_scores.metrics = {
        "reward/total/mean": 1.0,
        "reward/total/std": 0.0,
        "reward/r/seconds": 2.0,
    }
    merged = ScoredRows.cat([first, second], pad_token_id=0)
    assert merged.indices == [0, 0] and merged.rounds == 2 and merged.final_round is second
    assert merged.reward_B.tolist() == [0, 1, 1, 1]
    assert merged.rewards_NG.tolist() == [[0, 1], [1, 1]]
    assert merged.zero_variance_N.tolist() == [False, True]
    # Rewards 0, 1, 1, 1: mean 0.75, population σ = sqrt(0.75 − 0.5625) = sqrt(3)/4.
    assert merged.metrics == pytest.approx(
        {"reward/total/mean": 0.75, "reward/total/std": 3**0.5 / 4, "reward/r/seconds": 3.0}
    )
    rollout = merged.local_rollout
    # Prompts stay left-padded: the 2-token prompts get 2 pad columns in front.
    assert rollout.prompt_ids_BP.tolist() == [[0, 0, 1, 1]] * 2 + [[7] * 4] * 2
    assert rollout.prompt_mask_BP.tolist() == [[0, 0, 1, 1]] * 2 + [[1] * 4] * 2
    # Completions stay right-padded: the 1-token completions get 2 pad columns after.
    assert rollout.completion_ids_BT.tolist() == [[1, 1, 1]] * 2 + [[7, 0, 0]] * 2
    assert rollout.completion_mask_BT.tolist() == [[1, 1, 1]] * 2 + [[1, 0, 0]] * 2
    assert rollout.sampler_logp_BT[2:].tolist() == [[-0.5, 0.0, 0.0]] * 2
    assert concat_rollouts([first.local_rollout], 0) is first.local_rollout
