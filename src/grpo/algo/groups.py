"""The group rules, in one place: which groups carry a learning signal and which train.

A step's B = N·G rows are N groups of G completions of one prompt each, row b in group
b // G (the (N, G) view is ``rewards_B.view(-1, G)``). Two facts about each group are
computed once per generation round (:class:`~grpo.rounds.source.ScoredRows` holds them):
zero variance (all rewards equal: advantage 0, no gradient) and skipped (a reward function
failed on a row under ``on_error = "skip_group"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch

Value = TypeVar("Value")


def group_of(row: int | torch.Tensor, group_size: int) -> int | torch.Tensor:
    """The group of row ``row``, which is also the index of its prompt among the round's:
    row b belongs to group b // G (rows of one group are contiguous).

    Example:
        >>> group_of(5, 4), group_of(torch.arange(3, 6), 2).tolist()
        (1, [1, 2, 2])
    """
    return row // group_size


def rows_of(
    values_N: Sequence[Value] | torch.Tensor, group_size: int
) -> list[Value] | torch.Tensor:
    """The N → B expansion: each group's value once per row of the group, in row order (the
    inverse of :func:`group_of`).

    Example:
        >>> rows_of(torch.tensor([True, False]), 2).tolist(), rows_of(["a", "b"], 2)
        ([True, True, False, False], ['a', 'a', 'b', 'b'])
    """
    if isinstance(values_N, torch.Tensor):
        return values_N.repeat_interleave(group_size)
    return [value for value in values_N for _ in range(group_size)]


def zero_variance_groups(rewards_NG: torch.Tensor) -> torch.Tensor:
    """Which groups carry no learning signal: every reward in the group is equal.

    Such a group has advantage 0 for all of its completions, hence no policy gradient
    (DAPO, Yu et al. 2025, filters such groups out for the same reason), so the
    trainer drops it before the loss and counts it.

    Example:
        >>> zero_variance_groups(torch.tensor([[1.0, 1.0], [0.0, 1.0]]))
        tensor([ True, False])
    """
    return (rewards_NG == rewards_NG[:, :1]).all(dim=1)


def skipped_groups(skip_B: torch.Tensor, group_size: int) -> torch.Tensor:
    """A group is skipped when any of its rows is: one failed reward spoils its baseline.

    Example:
        >>> skipped_groups(torch.tensor([False, True, False, False]), 2)
        tensor([ True, False])
    """
    return skip_B.view(-1, group_size).any(dim=1)


def informative_groups(zero_variance_N: torch.Tensor, skipped_N: torch.Tensor) -> torch.Tensor:
    """Groups that carry a gradient: reward variance and no skipped reward.

    Example:
        >>> zero_variance_N = torch.tensor([True, False, False])
        >>> informative_groups(zero_variance_N, torch.tensor([False, True, False]))
        tensor([False, False,  True])
    """
    return ~zero_variance_N & ~skipped_N


def first_groups(informative_N: torch.Tensor, count: int) -> torch.Tensor:
    """The first ``count`` informative groups in generation order (the rest are surplus).

    Example:
        >>> first_groups(torch.tensor([True, False, True, True]), 2)
        tensor([ True, False,  True, False])
    """
    return informative_N & (informative_N.cumsum(dim=0) <= count)
