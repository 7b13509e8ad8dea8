"""The source of scored rounds: what the loop asks for each step's rows.

A **round** is N prompts × G rows drawn and sampled together (train.prompts_per_step
prompts, split over processes like a step). A producer (:mod:`grpo.rounds.producers`) rolls
out this process's rows of a round; they are scored here, every process's per-row results
are gathered, and the groups formed. With DAPO's dynamic sampling (Yu et al. 2025) rounds
repeat until the step has enough groups with reward variance; the rounds are then merged
into one :class:`Generation`, in generation order: round after round, each round's rows in
order.

The loop reads a :class:`RoundSource`: :class:`SyncRounds` samples each round when the loop
asks for it; :class:`~grpo.rounds.workers.feeder.AsyncRounds` hands over rounds that
rollout workers sampled ahead (``rollout.mode = "async"``).
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import torch
from torch import nn

from grpo.algo.groups import Groups
from grpo.algo.overlong import longest_run, overlong_penalty
from grpo.data.sampler import PromptSampler
from grpo.log.metric_table import reduce_rounds
from grpo.rewards.runner import RewardError, RewardFunction, RewardScores, score_completions
from grpo.rollout.engine import Rollout, RolloutEngine, concat_rollouts
from grpo.rounds.producers import ProducedRound, Producer
from grpo.runtime.distributed import Dist
from grpo.text.reasoning import self_corrects, thinking_chars


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
    turn_length_B: torch.Tensor | None = None  # int64: multi-turn, the longest model turn

    def with_overlong_penalty(self, max_length: int, buffer: int, penalty: float) -> RowResults:
        """DAPO's overlong penalty (:func:`~grpo.algo.overlong.overlong_penalty`) added to
        the reward, before advantages and the zero-variance test. Its length is the
        completion's, or a multi-turn row's longest model turn (``max_length`` caps a turn)."""
        if self.env_tokens_B is not None and self.turn_length_B is None:
            raise ValueError("multi-turn rows need turn_length_B: their length cap is per turn")
        lengths_B = self.length_B if self.turn_length_B is None else self.turn_length_B
        penalty_B = overlong_penalty(lengths_B, max_length, buffer, penalty)
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


def model_turn_lengths(rollout: Rollout) -> torch.Tensor | None:
    """Per row of a multi-turn rollout, its longest model turn (CPU int64): the length the
    overlong shaping caps; None for single-turn rows (their length is the completion's)."""
    if rollout.attention_mask_BT is None:
        return None
    return longest_run(rollout.completion_mask_BT).cpu()


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
    # this process's rows' columns (the producer's: a conversation, …), for the logs
    columns: dict[str, list[Any]] = field(default_factory=dict)

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
        reward_metrics=reduce_rounds([{**r.scores.metrics, **r.metrics} for r in rounds]),
        rounds=len(rounds),
        last=rounds[-1],
    )


@dataclass(frozen=True)
class RoundMaker:
    """What rounds are made and scored with: the producer, the rewards, the shaping
    (built by :func:`grpo.rounds.build.build_round_maker`)."""

    producer: Producer
    engine: RolloutEngine  # the producer's; it gets the new weights after each update
    generator: torch.Generator  # the producer's sampling noise, saved with checkpoints
    rewards: list[RewardFunction]
    accuracy_reward: str | None  # the reward whose value ≥ 1 means a correct answer
    pad_token_id: int
    max_new_tokens: int
    overlong_buffer: int = 0  # DAPO's overlong shaping (algorithm.overlong_buffer); 0 = off
    overlong_penalty: float = 1.0
    self_correction: re.Pattern[str] | None = None  # train.self_correction_phrases


class RoundSource(Protocol):
    """Where the loop gets each step's scored rounds, and whom it tells of new weights."""

    def next_round(self, step: int) -> tuple[Generation, dict[str, float]]:
        """Step ``step``'s rounds as one, and the seconds spent on them (rollout, reward)."""
        ...

    def weights_changed(self, step: int, policy: nn.Module, *, updated: bool) -> None:
        """Step ``step`` is trained (``updated``: an optimizer step ran)."""
        ...

    def take_metrics(self, step_seconds: float) -> dict[str, float]:
        """The source's own metrics of the step (``async/*``), then reset."""
        ...

    def state_dict(self) -> dict[str, object]:
        """What a checkpoint keeps of the source ({}: nothing)."""
        ...

    def close(self) -> None: ...


class SyncRounds:
    """Rounds sampled on the learner's own engine when the loop asks (``rollout.mode =
    "sync"``): rounds of ``prompts_per_step`` prompts × G until ``prompts_per_step`` groups
    are informative or ``max_rounds`` is reached (1: an ordinary step)."""

    def __init__(
        self,
        maker: RoundMaker,
        sampler: PromptSampler,
        dist: Dist,
        *,
        prompts_per_step: int,
        group_size: int,
        max_rounds: int,
    ) -> None:
        self.maker, self.sampler, self.dist = maker, sampler, dist
        self.prompts_per_step, self.group_size, self.max_rounds = (
            prompts_per_step,
            group_size,
            max_rounds,
        )

    def next_round(self, step: int) -> tuple[Generation, dict[str, float]]:
        maker, dist, group_size = self.maker, self.dist, self.group_size
        rounds: list[Round] = []
        seconds = {"rollout": 0.0, "reward": 0.0}
        while not rounds or needs_another_round(rounds, self.prompts_per_step, self.max_rounds):
            indices = self.sampler.next_indices(self.prompts_per_step)
            # This process produces and scores its block of the round's rows; the per-row
            # results are then gathered, so every process has the whole round's.
            local_rows = dist.rows(len(indices) * group_size)
            produced, scores = produce_and_score(
                maker, indices, group_size, local_rows, dist, seconds
            )
            rounds.append(assemble_round(maker, indices, group_size, produced, scores, dist))
        return merge_rounds(rounds, maker.pad_token_id), seconds

    def weights_changed(self, step: int, policy: nn.Module, *, updated: bool) -> None:
        if updated:
            self.maker.engine.sync_weights(policy)  # vLLM gets the new weights

    def take_metrics(self, step_seconds: float) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, object]:
        return {}

    def close(self) -> None:
        pass


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


def produce_and_score(
    maker: RoundMaker,
    indices: list[int],
    group_size: int,
    rows: slice,
    dist: Dist,
    seconds: dict[str, float],
) -> tuple[ProducedRound, RewardScores]:
    """Rows ``rows`` of the round on prompts ``indices``, produced and scored; the seconds
    each took are added to ``seconds`` (an asynchronous worker runs this alone)."""
    started = time.perf_counter()
    produced = maker.producer.produce(indices, group_size, rows)
    seconds["rollout"] += time.perf_counter() - started
    started = time.perf_counter()
    scores = _score(maker, produced, dist, indices, group_size, rows)
    seconds["reward"] += time.perf_counter() - started
    return produced, scores


def assemble_round(
    maker: RoundMaker,
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
        accuracy_B=scores.per_function[maker.accuracy_reward] if maker.accuracy_reward else None,
        **text_features(produced.completions, maker.self_correction),
        env_tokens_B=produced.inserted_tokens_B,
        turn_length_B=model_turn_lengths(rollout),
    )
    results = RowResults(**dist.gather_columns(local.columns()))
    if maker.overlong_buffer > 0:  # on the whole round's rows: the same in every process
        results = results.with_overlong_penalty(
            maker.max_new_tokens, maker.overlong_buffer, maker.overlong_penalty
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
    maker: RoundMaker,
    produced: ProducedRound,
    dist: Dist,
    indices: list[int],
    group_size: int,
    rows: slice,
) -> RewardScores:
    """The configured rewards (and the producer's own) on this process's rows; a reward
    that fails names the dataset file and row of the completion (and under torchrun the
    process)."""
    rewards = [*maker.rewards, *produced.extra_rewards]
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
                f"{maker.producer.dataset.where(indices[row // group_size])}, "
                f"completion {row % group_size + 1} of {group_size}"
            )
        if dist.enabled:
            where = f"process {dist.rank}: {where}"
        raise error.at(where) from error.__cause__
    if produced.skip_B is not None:
        scores.skip_B |= produced.skip_B
    return scores
