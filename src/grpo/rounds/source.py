"""The source of scored rounds: what the loop asks for each step's rows.

A **round** is N prompts × G rows drawn and sampled together (train.prompts_per_step
prompts, split over processes like a step). A producer (:class:`SingleTurn` or
:class:`MultiTurn`) rolls out this process's rows of a round; the rewards score them
(:func:`produce_and_score`); every process's per-row results are then gathered and the
groups formed (:func:`gather_rows`). With DAPO's dynamic sampling (Yu et al. 2025) rounds
repeat until the step has enough groups with reward variance; the rounds are then joined
(:meth:`ScoredRows.cat`), in generation order: round after round, each round's rows in order.

One container carries the rows from the producer to the update's selection:
:class:`ScoredRows`. The producer fills this process's rows (``local_*``), scoring fills
``local_scores``, gathering fills every process's per-row results (``*_B``) and the group
view (``*_N``).

The loop reads a :class:`RoundSource`: :class:`SyncRounds` samples each round when the loop
asks for it; :class:`~grpo.rounds.workers.async_rounds.AsyncRounds` hands over rounds that
rollout workers sampled ahead (``rollout.mode = "async"``).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from grpo.agents.trajectories import ENVIRONMENT_REWARD, AgentSettings, run_trajectories
from grpo.algo.groups import (
    group_of,
    informative_groups,
    rows_of,
    skipped_groups,
    zero_variance_groups,
)
from grpo.algo.overlong import longest_run, overlong_penalty
from grpo.data.dataset import PromptDataset
from grpo.data.sampler import PromptSampler
from grpo.log.metric_table import reduce_rounds
from grpo.rewards.runner import RewardError, RewardFunction, RewardScores, score_completions
from grpo.rollout.engine import (
    Rollout,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
    concat_rollouts,
)
from grpo.rollout.turns import TurnEngine
from grpo.runtime.distributed import Dist
from grpo.text.reasoning import self_corrects, thinking_chars

# Every process's per-row results, in the order they are gathered (float32, bool or int64:
# gathering goes through float64, exact for all three).
ROW_COLUMNS = (
    "reward_B",
    "skip_B",
    "length_B",
    "truncated_B",
    "accuracy_B",
    "overlong_penalty_B",
    "has_think_B",
    "think_chars_B",
    "self_correction_B",
    "env_tokens_B",
    "turn_length_B",
)


@dataclass
class ScoredRows:
    """A round's rows, or a step's rounds joined: b rows on this process, B = N·G in all.

    Row b belongs to prompt ``indices[b // G]``. Fields are filled stage by stage and are
    None until then: the producer's (``local_*``), scoring's (``local_scores``), gathering's
    (``*_B`` and ``*_N``, the same on every process)."""

    indices: list[int]  # the N prompts (dataset rows), the same in every process
    group_size: int
    # --- this process's rows, from the producer -------------------------------------
    local_rollout: Rollout
    local_prompts: list[str]  # each row's prompt text
    local_completions: list[str]  # each row's completion text (multi-turn: the model's turns)
    local_columns: dict[str, list[Any]]  # what reward functions get beside the texts
    extra_rewards: list[RewardFunction]  # the producer's own (an environment's), scored last
    local_skip_B: torch.Tensor | None  # bool: rows whose rewards must not count; None: none
    local_failed_B: torch.Tensor | None  # bool: an environment failed; the total reward is 0
    local_env_tokens_B: torch.Tensor | None  # int64: tokens tools/environment inserted
    producer_metrics: dict[str, float]  # the producer's own (agent/…)
    # --- this process's rows, scored -----------------------------------------------------
    local_scores: RewardScores | None = None
    # --- every process's rows, gathered (B) ----------------------------------------------
    local_B: torch.Tensor | None = None  # int64: where this process's rows sit among the B
    reward_B: torch.Tensor | None = None  # float32: the weighted total, shaped
    skip_B: torch.Tensor | None = None  # bool: a reward was not scored (skip_group)
    length_B: torch.Tensor | None = None  # int64: completion tokens, EOS included
    truncated_B: torch.Tensor | None = None  # bool: cut at max_new_tokens
    accuracy_B: torch.Tensor | None = None  # the run's accuracy reward, when it has one
    overlong_penalty_B: torch.Tensor | None = None  # DAPO's shaping, already in reward_B
    has_think_B: torch.Tensor | None = None  # bool: the completion has a <think> block
    think_chars_B: torch.Tensor | None = None  # int64: characters inside it (0 without one)
    self_correction_B: torch.Tensor | None = None  # bool: a self-correction phrase occurs
    env_tokens_B: torch.Tensor | None = None  # int64: tokens tools/environment inserted
    turn_length_B: torch.Tensor | None = None  # int64: multi-turn, the longest model turn
    # --- the group view (N) ---------------------------------------------------------------
    zero_variance_N: torch.Tensor | None = None  # bool: every reward of the group is equal
    skipped_N: torch.Tensor | None = None  # bool: a reward of the group was not scored
    # --- a step's rounds joined -------------------------------------------------------------
    rounds: int = 1
    last: ScoredRows | None = field(default=None, repr=False)  # the final round; None: itself

    @property
    def rows(self) -> int:
        """Rows over all processes: N·G."""
        return len(self.indices) * self.group_size

    @property
    def rewards_NG(self) -> torch.Tensor:
        """The (N, G) view of the rewards: row b in group b // G."""
        assert self.reward_B is not None, "gather_rows fills the rewards"
        return self.reward_B.view(-1, self.group_size)

    @property
    def informative_N(self) -> torch.Tensor:
        """Groups that carry a gradient: reward variance and no skipped reward."""
        assert self.zero_variance_N is not None and self.skipped_N is not None
        return informative_groups(self.zero_variance_N, self.skipped_N)

    @property
    def metrics(self) -> dict[str, float]:
        """The reward runner's and the producer's metrics (a step's: reduced over rounds)."""
        scores = self.local_scores.metrics if self.local_scores is not None else {}
        return {**scores, **self.producer_metrics}

    @property
    def final_round(self) -> ScoredRows:
        return self if self.last is None else self.last

    @staticmethod
    def cat(rounds: list[ScoredRows], pad_token_id: int) -> ScoredRows:
        """A step's rounds as one, in generation order: every field side by side, this
        process's rollout rows round after round; the metrics reduced over rounds by the
        metric table; ``last`` is the final round."""
        gathered = {
            name: torch.cat([getattr(r, name) for r in rounds])
            for name in (*ROW_COLUMNS, "zero_variance_N", "skipped_N")
            if getattr(rounds[0], name) is not None
        }
        if rounds[0].local_B is not None:  # each round's positions, offset by the rounds before
            offsets = [sum(r.rows for r in rounds[:index]) for index in range(len(rounds))]
            local_B = [r.local_B + offset for r, offset in zip(rounds, offsets, strict=True)]
            gathered["local_B"] = torch.cat(local_B)
        joined = join_blocks(
            rounds,
            pad_token_id,
            indices=[index for r in rounds for index in r.indices],
            producer_metrics={},  # folded into the scores' metrics just below
            score_metrics=reduce_rounds([r.metrics for r in rounds]),
        )
        return dataclasses.replace(joined, **gathered, rounds=len(rounds), last=rounds[-1])


def join_blocks(
    parts: list[ScoredRows],
    pad_token_id: int,
    *,
    indices: list[int],
    producer_metrics: dict[str, float],
    score_metrics: dict[str, float],
) -> ScoredRows:
    """Blocks of this process's scored rows side by side, in order (a step's rounds, or a
    round's chunks from several workers); the metrics are the caller's combination, since
    rounds and chunks combine theirs by different rules of the metric table."""
    return ScoredRows(
        indices=indices,
        group_size=parts[0].group_size,
        local_rollout=concat_rollouts([p.local_rollout for p in parts], pad_token_id),
        local_prompts=[text for p in parts for text in p.local_prompts],
        local_completions=[text for p in parts for text in p.local_completions],
        local_columns=join_columns([p.local_columns for p in parts]),
        extra_rewards=parts[0].extra_rewards,
        local_skip_B=cat_optional([p.local_skip_B for p in parts]),
        local_failed_B=cat_optional([p.local_failed_B for p in parts]),
        local_env_tokens_B=cat_optional([p.local_env_tokens_B for p in parts]),
        producer_metrics=producer_metrics,
        local_scores=RewardScores.cat([p.local_scores for p in parts], score_metrics),
    )


def join_columns(parts: list[dict[str, list]]) -> dict[str, list]:
    return {name: [value for part in parts for value in part[name]] for name in parts[0]}


def cat_optional(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    return None if any(p is None for p in parts) else torch.cat(parts)  # type: ignore[arg-type]


def needs_another_round(rounds: list[ScoredRows], target_groups: int, max_rounds: int) -> bool:
    """True while fewer than ``target_groups`` informative groups are in hand and the cap
    on rounds is not reached."""
    informative = sum(int(r.informative_N.sum()) for r in rounds)
    return len(rounds) < max_rounds and informative < target_groups


# --- producers ----------------------------------------------------------------------------


class Producer(Protocol):
    """Rows ``rows`` of the len(indices)·G rows of a round on dataset prompts ``indices``.

    A producer holds its engine, its sampling settings and the noise generator; it draws
    nothing else at random."""

    dataset: PromptDataset  # the prompts' file and rows name a failure's row

    def produce(self, indices: list[int], group_size: int, rows: slice) -> ScoredRows: ...


def _row_texts(
    dataset: PromptDataset, indices: list[int], group_size: int, rows: slice
) -> tuple[list[str], dict[str, list[Any]]]:
    """Each of the rows' prompt text and dataset columns (row b is prompt b // G)."""
    row_prompts = rows_of(indices, group_size)[rows]
    prompts = [dataset.prompts[i] for i in row_prompts]
    columns = {name: [values[i] for i in row_prompts] for name, values in dataset.columns.items()}
    return prompts, columns


@dataclass(frozen=True)
class SingleTurn:
    """One completion per row, sampled on the prompt's token ids."""

    engine: RolloutEngine
    sampling: SamplingParams
    generator: torch.Generator  # the same seed in every process: noise for the whole round
    dataset: PromptDataset
    decode: Callable[[torch.Tensor, torch.Tensor], list[str]]  # (ids_BT, mask_BT) → texts

    def produce(self, indices: list[int], group_size: int, rows: slice) -> ScoredRows:
        prompts, columns = _row_texts(self.dataset, indices, group_size, rows)
        prompt_ids = [self.dataset.prompt_token_ids[i] for i in indices]
        request = RolloutRequest.block(prompt_ids, group_size, self.sampling, self.generator, rows)
        rollout = self.engine.generate_rows(request)
        completions = self.decode(rollout.completion_ids_BT, rollout.completion_mask_BT)
        return ScoredRows(
            indices, group_size, rollout, prompts, completions, columns, [], None, None, None, {}
        )


@dataclass(frozen=True)
class MultiTurn:
    """Multi-turn trajectories (:func:`~grpo.agents.trajectories.run_trajectories`) on a
    :class:`~grpo.rollout.turns.TurnEngine`: the model's turns, tool results and
    environment replies."""

    engine: TurnEngine
    sampling: SamplingParams
    generator: torch.Generator
    dataset: PromptDataset
    settings: AgentSettings

    def produce(self, indices: list[int], group_size: int, rows: slice) -> ScoredRows:
        dataset = self.dataset
        records = [
            {"prompt": dataset.prompts[i], **{k: v[i] for k, v in dataset.columns.items()}}
            for i in indices
        ]
        block = range(len(indices) * group_size)[rows]
        names = [dataset.where(i) for i in indices]
        agent = run_trajectories(
            self.engine,
            records,
            group_size,
            self.sampling,
            self.generator,
            block,
            self.settings,
            names,
        )
        prompts, columns = _row_texts(dataset, indices, group_size, rows)
        extra = [ENVIRONMENT_REWARD] if self.settings.environment is not None else []
        return ScoredRows(
            indices,
            group_size,
            local_rollout=agent.rollout,
            local_prompts=prompts,
            local_completions=agent.completions,
            local_columns=columns | agent.columns,
            extra_rewards=extra,
            local_skip_B=torch.tensor(agent.skip, dtype=torch.bool),
            local_failed_B=torch.tensor(agent.failed, dtype=torch.bool),
            local_env_tokens_B=inserted_tokens(agent.rollout),
            producer_metrics=agent.block_metrics,
        )


def inserted_tokens(rollout: Rollout) -> torch.Tensor:
    """Per row: the completion columns' tokens that tools and the environment inserted."""
    return (rollout.real_mask_BT.sum(dim=1) - rollout.completion_mask_BT.sum(dim=1)).cpu()


# --- the round source ---------------------------------------------------------------------


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

    def next_round(self, step: int) -> tuple[ScoredRows, dict[str, float]]:
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

    def next_round(self, step: int) -> tuple[ScoredRows, dict[str, float]]:
        maker, dist, group_size = self.maker, self.dist, self.group_size
        rounds: list[ScoredRows] = []
        seconds = {"rollout": 0.0, "reward": 0.0}
        while not rounds or needs_another_round(rounds, self.prompts_per_step, self.max_rounds):
            indices = self.sampler.next_indices(self.prompts_per_step)
            # This process produces and scores its block of the round's rows; the per-row
            # results are then gathered, so every process has the whole round's.
            local_rows = dist.rows(len(indices) * group_size)
            local = produce_and_score(maker, indices, group_size, local_rows, dist, seconds)
            rounds.append(gather_rows(maker, local, dist))
        return ScoredRows.cat(rounds, maker.pad_token_id), seconds

    def weights_changed(self, step: int, policy: nn.Module, *, updated: bool) -> None:
        if updated:
            self.maker.engine.sync_weights(policy)  # vLLM gets the new weights

    def take_metrics(self, step_seconds: float) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, object]:
        return {}

    def close(self) -> None:
        pass


def produce_and_score(
    maker: RoundMaker,
    indices: list[int],
    group_size: int,
    rows: slice,
    dist: Dist,
    seconds: dict[str, float],
) -> ScoredRows:
    """Rows ``rows`` of the round on prompts ``indices``, produced and scored; the seconds
    each took are added to ``seconds`` (an asynchronous worker runs this alone)."""
    started = time.perf_counter()
    local = maker.producer.produce(indices, group_size, rows)
    seconds["rollout"] += time.perf_counter() - started
    started = time.perf_counter()
    scores = _score(maker, local, dist, rows)
    seconds["reward"] += time.perf_counter() - started
    return dataclasses.replace(local, local_scores=scores)


def gather_rows(maker: RoundMaker, local: ScoredRows, dist: Dist) -> ScoredRows:
    """This process's scored rows of a round with every process's per-row results gathered,
    the overlong shaping applied and the group view formed."""
    rollout, scores, group_size = local.local_rollout, local.local_scores, local.group_size
    assert scores is not None, "produce_and_score scores the rows first"
    accuracy_B = scores.per_function[maker.accuracy_reward] if maker.accuracy_reward else None
    columns = {
        "reward_B": scores.total_B,
        "skip_B": scores.skip_B,
        "length_B": rollout.completion_mask_BT.sum(dim=1).cpu(),
        "truncated_B": rollout.truncated_B.cpu(),
        "accuracy_B": accuracy_B,
        **text_features(local.local_completions, maker.self_correction),
        "env_tokens_B": local.local_env_tokens_B,
        "turn_length_B": model_turn_lengths(rollout),
    }
    gathered = dist.gather_columns({k: v for k, v in columns.items() if v is not None})
    if maker.overlong_buffer > 0:  # on the whole round's rows: the same in every process
        gathered = with_overlong_penalty(
            gathered, maker.max_new_tokens, maker.overlong_buffer, maker.overlong_penalty
        )
    rewards_NG = gathered["reward_B"].view(-1, group_size)
    return dataclasses.replace(
        local,
        local_B=torch.arange(local.rows)[dist.rows(local.rows)],
        **gathered,
        zero_variance_N=zero_variance_groups(rewards_NG),
        skipped_N=skipped_groups(gathered["skip_B"], group_size),
    )


def with_overlong_penalty(
    columns: dict[str, torch.Tensor], max_length: int, buffer: int, penalty: float
) -> dict[str, torch.Tensor]:
    """DAPO's overlong penalty (:func:`~grpo.algo.overlong.overlong_penalty`) added to the
    reward, before advantages and the zero-variance test. Its length is the completion's,
    or a multi-turn row's longest model turn (``max_length`` caps a turn)."""
    if "env_tokens_B" in columns and "turn_length_B" not in columns:
        raise ValueError("multi-turn rows need turn_length_B: their length cap is per turn")
    lengths_B = columns.get("turn_length_B", columns["length_B"])
    penalty_B = overlong_penalty(lengths_B, max_length, buffer, penalty)
    return {**columns, "reward_B": columns["reward_B"] + penalty_B, "overlong_penalty_B": penalty_B}


def model_turn_lengths(rollout: Rollout) -> torch.Tensor | None:
    """Per row of a multi-turn rollout, its longest model turn (CPU int64): the length the
    overlong shaping caps; None for single-turn rows (their length is the completion's)."""
    if rollout.attention_mask_BT is None:
        return None
    return longest_run(rollout.completion_mask_BT).cpu()


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


def _score(maker: RoundMaker, local: ScoredRows, dist: Dist, rows: slice) -> RewardScores:
    """The configured rewards (and the producer's own) on this process's rows; a reward
    that fails names the dataset file and row of the completion (and under torchrun the
    process)."""
    rewards = [*maker.rewards, *local.extra_rewards]
    completions = local.local_completions
    try:
        scores = score_completions(
            rewards, local.local_prompts, completions, local.local_columns, local.local_failed_B
        )
    except RewardError as error:
        if error.row is None:
            where = f"the whole call on the {len(completions)} completions"
        else:
            row = rows.start + error.row  # the round's row: prompt row // G, member row % G
            group_size = local.group_size
            where = (
                f"{maker.producer.dataset.where(local.indices[group_of(row, group_size)])}, "
                f"completion {row % group_size + 1} of {group_size}"
            )
        if dist.enabled:
            where = f"process {dist.rank}: {where}"
        raise error.at(where) from error.__cause__
    if local.local_skip_B is not None:
        scores.skip_B |= local.local_skip_B
    return scores
