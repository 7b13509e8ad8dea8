"""Generation rounds and the step's per-row record.

Each round is shaped like an ordinary step (train.prompts_per_step prompts × G rows, split
over processes the same way). With DAPO's dynamic sampling (Yu et al. 2025) rounds repeat
until the step has enough groups with reward variance; the rounds are then merged into one
:class:`Generation`, in generation order: round after round, each round's rows in order.

Asynchronous rollout workers (``rollout.mode = "async"``) are sent a :class:`Request` for
rows of a round and answer with a :class:`Result` tagged with the policy version that sampled
it. A round's rows are cut into chunks of whole groups, one per worker, so a group is sampled
by one version and ages out as a whole; the chunks are joined back in row order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from grpo.algo.groups import Groups
from grpo.algo.overlong import longest_run, overlong_penalty
from grpo.log.metric_table import merge_rounds as merge_round_metrics
from grpo.log.metric_table import reduce_processes
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
    failed_B: torch.Tensor | None = None  # bool: an environment failed; the total reward is 0


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
        reward_metrics=merge_round_metrics([{**r.scores.metrics, **r.metrics} for r in rounds]),
        rounds=len(rounds),
        last=rounds[-1],
    )


# --- rounds sampled by asynchronous rollout workers ----------------------------------


@dataclass(frozen=True)
class Request:
    """Rows ``rows`` of the round on prompts ``indices`` (N·G rows in all)."""

    number: int  # issue order over the run: the key of its result
    step: int  # the step that will train on it
    indices: list[int]
    group_size: int
    rows: slice
    # the sampling noise: a generator state to start from (max_staleness 0: the learner's
    # own, so the results are sync's) or a seed of the request's own
    noise: torch.Tensor | int


@dataclass
class Result:
    """A request's rows, produced and scored by a worker."""

    request: Request
    produced: ProducedRound
    scores: RewardScores
    version: int  # the policy version (optimizer steps) that sampled every row
    generator_state: torch.Tensor  # the noise generator after the request
    worker: int
    seconds: dict[str, float] = field(default_factory=dict)  # rollout, reward
    idle_s: float = 0.0  # the worker's seconds waiting for work since its previous result


def group_chunks(prompts: int, group_size: int, chunks: int) -> list[slice]:
    """Up to ``chunks`` contiguous row slices of whole groups, as even as they can be."""
    chunks = min(chunks, prompts)
    base, extra = divmod(prompts, chunks)
    slices, start = [], 0
    for chunk in range(chunks):
        size = (base + (chunk < extra)) * group_size
        slices.append(slice(start, start + size))
        start += size
    return slices


def chunk_rows(prompts: int, group_size: int, workers: int, processes: int = 1) -> list[slice]:
    """A round's rows cut for ``workers`` workers: whole groups, as even as they can be;
    under torchrun each process's block of rows is cut apart, so that every process joins
    its own chunks (a block that splits a group stays one chunk)."""
    per_process = prompts * group_size // processes
    slices: list[slice] = []
    for process in range(processes):
        start = process * per_process
        if per_process % group_size:
            slices.append(slice(start, start + per_process))
            continue
        per_worker = -(-workers // processes)
        for rows in group_chunks(per_process // group_size, group_size, per_worker):
            slices.append(slice(start + rows.start, start + rows.stop))
    return slices


def chunks_within(results: list[Result], rows: slice) -> list[Result]:
    """The chunk results whose rows lie in ``rows`` (one process's block), in row order."""
    return [r for r in results if rows.start <= r.request.rows.start < rows.stop]


def join_chunks(results: list[Result], pad_token_id: int) -> tuple[ProducedRound, RewardScores]:
    """A round's chunk results (in row order) as one produced round and its scores. The
    producers' and reward runner's metrics combine as equal shards, like processes'."""
    if len(results) == 1:
        return results[0].produced, results[0].scores
    produced = [r.produced for r in results]
    scores = [r.scores for r in results]
    joined = ProducedRound(
        rollout=concat_rollouts([p.rollout for p in produced], pad_token_id),
        prompts=[text for p in produced for text in p.prompts],
        completions=[text for p in produced for text in p.completions],
        columns=_join_columns([p.columns for p in produced]),
        extra_rewards=produced[0].extra_rewards,
        skip_B=_cat_optional([p.skip_B for p in produced]),
        metrics=_combine([p.metrics for p in produced]),
        inserted_tokens_B=_cat_optional([p.inserted_tokens_B for p in produced]),
        failed_B=_cat_optional([p.failed_B for p in produced]),
    )
    joined_scores = RewardScores(
        total_B=torch.cat([s.total_B for s in scores]),
        per_function={
            name: torch.cat([s.per_function[name] for s in scores])
            for name in scores[0].per_function
        },
        skip_B=torch.cat([s.skip_B for s in scores]),
        metrics=_combine([s.metrics for s in scores]),
        errors={
            name: [e for s in scores for e in s.errors.get(name, [])]
            for name in {name for s in scores for name in s.errors}
        },
    )
    return joined, joined_scores


def request_seed(seed: int, number: int) -> int:
    """A request's own noise seed: fixed by the run's seed and the request's number, so a
    request issued again (after a worker restart) samples the same rows."""
    return (seed * 1_000_003 + number * 7_919 + 1) % (2**63 - 1)


def _join_columns(parts: list[dict[str, list]]) -> dict[str, list]:
    return {name: [value for part in parts for value in part[name]] for name in parts[0]}


def _cat_optional(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    return None if any(p is None for p in parts) else torch.cat(parts)  # type: ignore[arg-type]


def _combine(parts: list[dict[str, float]]) -> dict[str, float]:
    keys = {key for part in parts for key in part}
    return reduce_processes({key: [part.get(key, 0.0) for part in parts] for key in keys})
