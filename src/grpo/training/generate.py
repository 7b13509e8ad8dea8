"""The generate stage: a producer rolls out a round, this stage scores it, gathers the
per-row results from every process, and repeats (dynamic sampling) until the step has
enough signal. Each process holds its own block of a round's rows (``dist.rows``)."""

from __future__ import annotations

import re
import time

import torch

from grpo.algo.groups import Groups
from grpo.data.sampler import PromptSampler
from grpo.rewards.runner import RewardError, RewardScores, score_completions
from grpo.text.reasoning import self_corrects, thinking_chars
from grpo.training.rounds import (
    Generation,
    ProducedRound,
    Round,
    RowResults,
    merge_rounds,
    model_turn_lengths,
    needs_another_round,
)
from grpo.training.runtime.distributed import Dist
from grpo.training.state import Rollouts


def generate(
    rollouts: Rollouts,
    sampler: PromptSampler,
    dist: Dist,
    *,
    prompts_per_step: int,
    group_size: int,
    max_rounds: int,
) -> tuple[Generation, dict[str, float]]:
    """Rounds of ``prompts_per_step`` prompts × G until ``prompts_per_step`` groups are
    informative or ``max_rounds`` is reached (1: an ordinary step); also the seconds spent
    rolling out and scoring."""
    rounds: list[Round] = []
    seconds = {"rollout": 0.0, "reward": 0.0}
    while not rounds or needs_another_round(rounds, prompts_per_step, max_rounds):
        indices = sampler.next_indices(prompts_per_step)
        rounds.append(generate_round(rollouts, indices, group_size, dist, seconds))
    return merge_rounds(rounds, rollouts.pad_token_id), seconds


def text_features(
    completions: list[str], pattern: re.Pattern[str] | None
) -> dict[str, torch.Tensor]:
    """Per completion: whether it has a ``<think>`` block, its length in characters (0
    without one), and whether it self-corrects (see :mod:`grpo.text.reasoning`)."""
    chars = [thinking_chars(completion) for completion in completions]
    return {
        "has_think_B": torch.tensor([c is not None for c in chars], dtype=torch.bool),
        "think_chars_B": torch.tensor([c or 0 for c in chars], dtype=torch.long),
        "self_correction_B": torch.tensor([self_corrects(c, pattern) for c in completions]),
    }


def generate_round(
    rollouts: Rollouts,
    indices: list[int],
    group_size: int,
    dist: Dist,
    seconds: dict[str, float],
) -> Round:
    """One round on prompts ``indices``: this process produces and scores its block of the
    rows; the per-row results are then gathered, so every process has the round's."""
    local_rows = dist.rows(len(indices) * group_size)  # this process's block of the round
    produced, scores = produce_and_score(rollouts, indices, group_size, local_rows, dist, seconds)
    return assemble_round(rollouts, indices, group_size, produced, scores, dist)


def produce_and_score(
    rollouts: Rollouts,
    indices: list[int],
    group_size: int,
    rows: slice,
    dist: Dist,
    seconds: dict[str, float],
) -> tuple[ProducedRound, RewardScores]:
    """Rows ``rows`` of the round on prompts ``indices``, produced and scored; the seconds
    each took are added to ``seconds`` (an asynchronous worker runs this alone)."""
    started = time.perf_counter()
    produced = rollouts.producer.produce(indices, group_size, rows)
    seconds["rollout"] += time.perf_counter() - started
    started = time.perf_counter()
    scores = _score(rollouts, produced, dist, indices, group_size, rows)
    seconds["reward"] += time.perf_counter() - started
    return produced, scores


def assemble_round(
    rollouts: Rollouts,
    indices: list[int],
    group_size: int,
    produced: ProducedRound,
    scores: RewardScores,
    dist: Dist,
) -> Round:
    """This process's scored rows of a round → the Round: every process's per-row results
    gathered, the overlong shaping applied, the groups formed."""
    rollout = produced.rollout
    local = RowResults(
        reward_B=scores.total_B,
        skip_B=scores.skip_B,
        length_B=rollout.completion_mask_BT.sum(dim=1).cpu(),
        truncated_B=rollout.truncated_B.cpu(),
        accuracy_B=scores.per_function[rollouts.accuracy_reward]
        if rollouts.accuracy_reward
        else None,
        **text_features(produced.completions, rollouts.self_correction),
        env_tokens_B=produced.inserted_tokens_B,
        turn_length_B=model_turn_lengths(rollout),
    )
    results = RowResults(**dist.gather_columns(local.columns()))
    if rollouts.overlong_buffer > 0:  # on the whole round's rows: the same in every process
        results = results.with_overlong_penalty(
            rollouts.max_new_tokens, rollouts.overlong_buffer, rollouts.overlong_penalty
        )
    groups = Groups.of(results.reward_B, results.skip_B, group_size)
    return Round(
        indices,
        rollout,
        produced.prompts,
        produced.completions,
        scores,
        results,
        groups,
        produced.metrics,
        produced.columns,
    )


def _score(
    rollouts: Rollouts,
    produced: ProducedRound,
    dist: Dist,
    indices: list[int],
    group_size: int,
    rows: slice,
) -> RewardScores:
    """The configured rewards (and the producer's own) on this process's rows; a reward
    that fails names the dataset file and row of the completion (and under torchrun the
    process)."""
    rewards = [*rollouts.rewards, *produced.extra_rewards]
    try:
        scores = score_completions(
            rewards, produced.prompts, produced.completions, produced.columns, produced.failed_B
        )
    except RewardError as error:
        if error.row is None:
            where = f"the whole call on the {len(produced.completions)} completions"
        else:
            row = rows.start + error.row  # the round's row: prompt row // G, member row % G
            where = (
                f"{rollouts.producer.dataset.where(indices[row // group_size])}, "
                f"completion {row % group_size + 1} of {group_size}"
            )
        if dist.enabled:
            where = f"process {dist.rank}: {where}"
        raise error.at(where) from error.__cause__
    if produced.skip_B is not None:
        scores.skip_B |= produced.skip_B
    return scores
