"""Chunks: how a round's rows are cut for workers, and how their results join back."""

from __future__ import annotations

import pytest
import torch

from grpo.rewards.runner import RewardScores
from grpo.rollout.engine import Rollout
from grpo.rounds.source import ScoredRows
from grpo.rounds.workers.chunks import (
    ChunkRequest,
    ChunkResult,
    chunk_rows,
    chunks_within,
    join_chunks,
)


def test_a_round_is_cut_into_whole_groups_as_even_as_they_can_be() -> None:
    # 5 prompts × G = 2 for 2 workers: 3 groups and 2 groups.
    assert chunk_rows(5, 2, workers=2) == [slice(0, 6), slice(6, 10)]
    # More workers than prompts: one group each.
    assert chunk_rows(2, 4, workers=3) == [slice(0, 4), slice(4, 8)]
    # Two processes, 2 workers: each process's block (4 prompts × G = 2 → 4 rows) cut apart.
    assert chunk_rows(4, 2, workers=2, processes=2) == [slice(0, 4), slice(4, 8)]
    # A process block that splits a group (3 prompts × G = 2 over 2 processes) stays whole.
    assert chunk_rows(3, 2, workers=4, processes=2) == [slice(0, 3), slice(3, 6)]


def _chunk(rows: slice, reward: float, seconds: float) -> ChunkResult:
    count = rows.stop - rows.start
    rollout = Rollout(
        prompt_ids_BP=torch.ones(count, 2, dtype=torch.long),
        prompt_mask_BP=torch.ones(count, 2, dtype=torch.long),
        completion_ids_BT=torch.full((count, 3), rows.start, dtype=torch.long),
        completion_mask_BT=torch.ones(count, 3, dtype=torch.long),
        sampler_logp_BT=torch.zeros(count, 3),
        stopped_B=torch.ones(count, dtype=torch.bool),
    )
    scores = RewardScores(
        total_B=torch.full((count,), reward),
        per_function={"r": torch.full((count,), reward)},
        skip_B=torch.zeros(count, dtype=torch.bool),
        metrics={"reward/r/mean": reward, "reward/r/seconds": seconds},
    )
    texts = [f"row {b}" for b in range(rows.start, rows.stop)]
    scored = ScoredRows(
        [7, 8, 9], 2, rollout, texts, texts, {}, [], None, None, None, {}, local_scores=scores
    )
    request = ChunkRequest(rows.start, step=1, indices=[7, 8, 9], group_size=2, rows=rows, noise=0)
    return ChunkResult(request, scored, version=0, generator_state=torch.zeros(1), worker=0)


def test_chunks_join_in_row_order_and_combine_like_processes() -> None:
    first, second = _chunk(slice(0, 4), 1.0, 2.0), _chunk(slice(4, 6), 0.0, 3.0)
    assert chunks_within([first, second], slice(3, 6)) == [second]
    joined = join_chunks([first, second], pad_token_id=0)
    assert joined.indices == [7, 8, 9] and joined.group_size == 2
    assert joined.local_completions == [f"row {b}" for b in range(6)]
    assert joined.local_rollout.completion_ids_BT[:, 0].tolist() == [0, 0, 0, 0, 4, 4]
    assert joined.local_scores.total_B.tolist() == [1.0] * 4 + [0.0] * 2
    # Chunks of one round are equal shards, like processes: means average, seconds take
    # the slowest (the workers ran side by side).
    assert joined.metrics == pytest.approx({"reward/r/mean": 0.5, "reward/r/seconds": 3.0})
    assert join_chunks([first], pad_token_id=0) is first.rows


def test_rounds_join_unlike_chunks() -> None:
    """The same two blocks as two rounds of a step: the seconds add up (rounds ran one after
    the other); the prompts are both rounds'."""
    first, second = _chunk(slice(0, 4), 1.0, 2.0).rows, _chunk(slice(4, 6), 0.0, 3.0).rows
    for rows, reward in ((first, 1.0), (second, 0.0)):
        count = len(rows.local_completions)
        rows.reward_B = torch.full((count,), reward)
        rows.skip_B = torch.zeros(count, dtype=torch.bool)
    joined = ScoredRows.cat([first, second], pad_token_id=0)
    assert joined.indices == [7, 8, 9, 7, 8, 9] and joined.rounds == 2
    assert joined.metrics["reward/r/seconds"] == 5.0
    assert joined.reward_B.tolist() == [1.0] * 4 + [0.0] * 2
