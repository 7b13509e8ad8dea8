"""The select stage: advantages for every row and which groups train."""

from __future__ import annotations

import pytest
import torch

from grpo.algo.groups import skipped_groups, zero_variance_groups
from grpo.algo.selection import select_groups
from grpo.rollout.engine import Rollout
from grpo.training.update.policy import TrainBatch

Groups = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # rewards_NG, zero variance, skipped


def _groups(rewards: list[float], skip: list[bool] | None = None) -> Groups:
    skip_B = torch.tensor(skip or [False] * len(rewards))
    rewards_NG = torch.tensor(rewards).view(-1, 2)
    return rewards_NG, zero_variance_groups(rewards_NG), skipped_groups(skip_B, 2)


def test_informative_groups_train_up_to_the_target() -> None:
    # Groups: (1, 0) informative, (1, 1) constant, (0, 2) informative, (2, 0) informative.
    groups = _groups([1.0, 0.0, 1.0, 1.0, 0.0, 2.0, 2.0, 0.0])
    selection = select_groups(*groups, target_groups=2, scale="none", eps=1e-4)
    assert selection.trains_N.tolist() == [True, False, True, False]  # the surplus waits
    assert selection.keep_B.tolist() == [True, True, False, False, True, True, False, False]
    # scale = "none": A_i = r_i − mean(r) per group.
    assert selection.advantages_B.tolist() == [0.5, -0.5, 0.0, 0.0, -1.0, 1.0, 1.0, -1.0]


def test_group_scale_divides_by_the_population_std() -> None:
    selection = select_groups(*_groups([3.0, 1.0]), target_groups=1, scale="group", eps=0.0)
    assert selection.advantages_B.tolist() == pytest.approx([1.0, -1.0])  # (±1) / σ = 1


def test_skipped_groups_never_train_and_the_critic_keeps_constant_ones() -> None:
    groups = _groups([1.0, 0.0, 1.0, 1.0], skip=[False, True, False, False])
    grpo = select_groups(*groups, target_groups=2, scale="group", eps=1e-4)
    assert grpo.trains_N.tolist() == [False, False]
    ppo = select_groups(*groups, target_groups=2, scale="group", eps=1e-4, critic_baseline=True)
    assert ppo.trains_N.tolist() == [False, True]  # the critic is the baseline


def test_train_batch_takes_the_kept_rows_and_expands_their_advantage() -> None:
    rollout = Rollout(
        prompt_ids_BP=torch.arange(6).view(3, 2),
        prompt_mask_BP=torch.ones(3, 2, dtype=torch.long),
        completion_ids_BT=torch.arange(9).view(3, 3),
        completion_mask_BT=torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]]),
        sampler_logp_BT=torch.zeros(3, 3),
        stopped_B=torch.ones(3, dtype=torch.bool),
    )
    batch = TrainBatch.of(
        rollout, torch.tensor([0.5, -1.0, 2.0]), torch.tensor([True, False, True])
    )
    assert batch.completion_ids_BT.tolist() == [[0, 1, 2], [6, 7, 8]]
    assert batch.advantages_BT.tolist() == [[0.5, 0.5, 0.5], [2.0, 2.0, 2.0]]
    micro = batch.micro_batch(slice(1, 2))  # its 2 tokens: the padding column is trimmed
    assert micro.advantages_BT.tolist() == [[2.0, 2.0]]
