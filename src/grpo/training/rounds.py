"""Generation rounds and the step's per-row record.

Each round is shaped like an ordinary step (train.prompts_per_step prompts × G rows, split
over processes the same way). With DAPO's dynamic sampling (Yu et al. 2025) rounds repeat
until the step has enough groups with reward variance; the rounds are then merged into one
:class:`Generation`, in generation order: round after round, each round's rows in order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from grpo.algo.groups import Groups
from grpo.algo.overlong import overlong_penalty
from grpo.log.metric_table import merge_rounds as merge_round_metrics
from grpo.rewards.runner import RewardFunction, RewardScores
from grpo.rollout.engine import Rollout, concat_rollouts


@dataclass
class RowResults:
    """Per-row results of the whole round (or step), gathered from every process."""

    reward_B: torch.Tensor  # float32: the weighted total reward
    skip_B: torch.Tensor  # bool: a reward was not scored (on_error = "skip_group")
    length_B: torch.Tensor  # int64: completion tokens, EOS included
    truncated_B: torch.Tensor  # bool: cut at max_new_tokens
    accuracy_B: torch.Tensor | None = None  # the run's accuracy reward, when it has one
    overlong_penalty_B: torch.Tensor | None = None  # DAPO's shaping, already in reward_B
    has_think_B: torch.Tensor | None = None  # bool: the completion has a <think> block
    think_chars_B: torch.Tensor | None = None  # int64: characters inside it (0 without one)
    self_correction_B: torch.Tensor | None = None  # bool: a self-correction phrase occurs
    env_tokens_B: torch.Tensor | None = None  # int64: tokens tools/environment inserted

    def with_overlong_penalty(self, max_length: int, buffer: int, penalty: float) -> RowResults:
        """DAPO's overlong penalty (:func:`~grpo.algo.overlong.overlong_penalty`) added to
        the reward, before advantages and the zero-variance test."""
        penalty_B = overlong_penalty(self.length_B, max_length, buffer, penalty)
        return dataclasses.replace(
            self, reward_B=self.reward_B + penalty_B, overlong_penalty_B=penalty_B
        )

    def columns(self) -> dict[str, torch.Tensor]:
        """The present fields by name (what a collective gathers)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }

    @staticmethod
    def cat(parts: list[RowResults]) -> RowResults:
        if len(parts) == 1:
            return parts[0]
        return RowResults(
            **{name: torch.cat([getattr(p, name) for p in parts]) for name in parts[0].columns()}
        )


@dataclass
class ProducedRound:
    """What a producer returns for one round: this process's rows, before scoring."""

    rollout: Rollout
    prompts: list[str]  # each row's prompt text
    completions: list[str]  # each row's completion text (multi-turn: the model's turns)
    columns: dict[str, list[Any]]  # what reward functions get beside prompts and completions
    extra_rewards: list[RewardFunction]  # scored after the configured ones (an environment's)
    skip_B: torch.Tensor | None  # bool: rows whose rewards must not count; None: none
    metrics: dict[str, float]  # the producer's own, reduced by the metric table
    inserted_tokens_B: torch.Tensor | None  # int64: tokens tools/environment inserted


@dataclass
class Round:
    """One round: its prompts, this process's rollout rows and their texts and scores, and
    the whole round's per-row results and groups."""

    indices: list[int]  # the N prompts (dataset rows), the same in every process
    rollout: Rollout  # this process's rows
    prompts: list[str]  # this process's rows' prompt texts
    completions: list[str]  # … and completion texts
    scores: RewardScores  # … and rewards
    results: RowResults  # every process's rows
    groups: Groups
    metrics: dict[str, float] = field(default_factory=dict)  # the producer's (agent/…)

    @property
    def rows(self) -> int:
        """The round's rows over all processes: N·G."""
        return self.results.reward_B.numel()


@dataclass
class Generation:
    """All rounds of a step as one, in generation order; ``last`` is the final round."""

    indices: list[int]
    rollout: Rollout  # this process's rows, round after round
    results: RowResults
    groups: Groups
    reward_metrics: dict[str, float]  # the reward runner's and the producer's, per step
    rounds: int
    last: Round


def informative_count(rounds: list[Round]) -> int:
    return sum(int(r.groups.informative_N.sum()) for r in rounds)


def needs_another_round(rounds: list[Round], target_groups: int, max_rounds: int) -> bool:
    """True while fewer than ``target_groups`` informative groups are in hand and the cap
    on rounds is not reached."""
    return len(rounds) < max_rounds and informative_count(rounds) < target_groups


def merge_rounds(rounds: list[Round], pad_token_id: int) -> Generation:
    """All rounds as one: prompts, per-row results and groups in generation order, this
    process's rollout rows round after round."""
    return Generation(
        indices=[index for r in rounds for index in r.indices],
        rollout=concat_rollouts([r.rollout for r in rounds], pad_token_id),
        results=RowResults.cat([r.results for r in rounds]),
        groups=Groups.cat([r.groups for r in rounds]),
        reward_metrics=merge_round_metrics([{**r.scores.metrics, **r.metrics} for r in rounds]),
        rounds=len(rounds),
        last=rounds[-1],
    )
