"""Selection: the group baseline, and which groups train.

GRPO: A_i = (r_i − mean(r)) / (std(r) + eps) within each group (see
:func:`~grpo.algo.advantages.group_advantages`); only informative groups train (reward
variance, no skipped reward), and under dynamic sampling only the first
``target_groups`` of them. PPO's critic is the baseline instead, so every group without a
skipped reward trains, equal rewards included.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo.algo.advantages import AdvantageScale, group_advantages
from grpo.algo.groups import first_groups, informative_groups, rows_of


@dataclass(frozen=True)
class Selection:
    """The whole step's rows in generation order (B = N·G)."""

    advantages_B: torch.Tensor  # A_i, float32
    trains_N: torch.Tensor  # bool: the group trains
    keep_B: torch.Tensor  # bool: the row trains (its group does, and it is not dropped)
    dropped_rows: int | None = None  # rows of training groups left out; None: no drop asked


def select_groups(
    rewards_NG: torch.Tensor,
    zero_variance_N: torch.Tensor,
    skipped_N: torch.Tensor,
    *,
    target_groups: int,
    scale: AdvantageScale,
    eps: float,
    critic_baseline: bool = False,
    drop_B: torch.Tensor | None = None,
) -> Selection:
    """Advantages for every row and the groups that train (see the module docstring), from
    the (N, G) rewards and the group facts (:mod:`grpo.algo.groups`).

    ``drop_B`` (bool, B): rows left out of the loss although their group trains, e.g.
    truncated completions (DAPO's overlong filtering, TRL's ``mask_truncated_completions``);
    their rewards still count in the group's baseline."""
    advantages_B = group_advantages(
        rewards_NG, scale=scale, eps=eps, zero_variance_N=zero_variance_N
    ).view(-1)
    if critic_baseline:
        trains_N = ~skipped_N
    else:
        trains_N = first_groups(informative_groups(zero_variance_N, skipped_N), target_groups)
    keep_B = rows_of(trains_N, rewards_NG.shape[1])
    if drop_B is None:
        return Selection(advantages_B, trains_N, keep_B)
    dropped_B = keep_B & drop_B.to(keep_B.device)
    return Selection(advantages_B, trains_N, keep_B & ~dropped_B, int(dropped_B.sum()))
