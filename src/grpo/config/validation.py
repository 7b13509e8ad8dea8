"""Range checks that types cannot express; each error names its key.

The checks are one table, :data:`RULES`, in the order they are reported. Most lines of it are
a numeric range on one dotted key, ``KEY ≥ N``, ``KEY > N`` or ``KEY in [LO, HI]`` (either end
open with ``(`` or ``)``), and the error is the line itself: ``"KEY must be ≥ N"``. A line
``@name`` stands for one of the few rules that look at several keys at once, written out in
:data:`CROSS_FIELD`. Every rule is evaluated before the first failing one raises, so a config
with several mistakes always reports the same one first.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import NamedTuple

from grpo.config.errors import ConfigError
from grpo.config.sections import Config


class Rule(NamedTuple):
    """A check and its error; ``message`` is a ``str.format`` template over ``c``, the config."""

    passes: Callable[[Config], bool]
    message: str


CROSS_FIELD: dict[str, Rule] = {
    "model_path": Rule(
        lambda c: bool(c.model.path),
        "model.path must name a model: a local folder, a .gguf file or a Hub id "
        "org/name[@revision]",
    ),
    "train_path": Rule(
        lambda c: bool(c.data.train_path),
        "data.train_path must name a dataset: a file, a folder or a Hub dataset id org/name",
    ),
    "column_map": Rule(
        lambda c: all(isinstance(v, str) for v in c.data.column_map.values()),
        "data.column_map values must be column names (strings)",
    ),
    "group_of_one": Rule(
        lambda c: c.rollout.group_size >= 2 or c.algorithm.estimator == "ppo",
        "rollout.group_size = {c.rollout.group_size} with algorithm.advantage_scale = "
        "{c.algorithm.advantage_scale!r}: the group mean is the baseline, so a group of one "
        "has advantage 0 whatever its reward; rollout.group_size must be ≥ 2 "
        "(or algorithm.estimator = 'ppo')",
    ),
    "ppo_resume": Rule(
        lambda c: not (c.algorithm.estimator == "ppo" and c.train.resume),
        "train.resume is not supported with algorithm.estimator = 'ppo' "
        "(the critic is not checkpointed)",
    ),
    "dynamic_sampling_ppo": Rule(
        lambda c: not (c.algorithm.dynamic_sampling and c.algorithm.estimator == "ppo"),
        "algorithm.dynamic_sampling needs algorithm.estimator = 'grpo' "
        "(PPO's critic learns from zero-variance groups too)",
    ),
    "pool_column": Rule(
        lambda c: c.curriculum.pool_by != "column" or bool(c.curriculum.pool_column),
        "curriculum.pool_by = 'column' needs curriculum.pool_column (the difficulty column)",
    ),
    "gspo_grpo": Rule(
        lambda c: c.algorithm.ratio_level == "token" or c.algorithm.estimator == "grpo",
        "algorithm.ratio_level = 'sequence' (GSPO) needs algorithm.estimator = 'grpo' "
        "(one advantage per completion)",
    ),
    "mask_band": Rule(
        lambda c: c.algorithm.sampler_mask_low <= 1.0 <= c.algorithm.sampler_mask_high,
        "algorithm.sampler_mask_low must be ≤ 1 ≤ algorithm.sampler_mask_high "
        "(the band must keep on-policy tokens), got "
        "[{c.algorithm.sampler_mask_low}, {c.algorithm.sampler_mask_high}]",
    ),
    "geo_band": Rule(
        lambda c: c.algorithm.sampler_geo_low <= 1.0 <= c.algorithm.sampler_geo_high,
        "algorithm.sampler_geo_low must be ≤ 1 ≤ algorithm.sampler_geo_high "
        "(the band must keep on-policy sequences), got "
        "[{c.algorithm.sampler_geo_low}, {c.algorithm.sampler_geo_high}]",
    ),
    "overlong_buffer": Rule(
        lambda c: c.algorithm.overlong_buffer <= c.rollout.max_new_tokens,
        "algorithm.overlong_buffer = {c.algorithm.overlong_buffer} must be ≤ "
        "rollout.max_new_tokens = {c.rollout.max_new_tokens}",
    ),
    "rewards_present": Rule(
        lambda c: len(c.rewards) >= 1 or bool(c.agent.environment),
        "rewards: at least one [[rewards]] table is needed (or an agent.environment)",
    ),
    "sync_every": Rule(
        lambda c: c.rollout.mode == "sync" or c.rollout.sync_every <= c.rollout.max_staleness + 1,
        "rollout.sync_every = {c.rollout.sync_every} must be ≤ rollout.max_staleness + 1 = "
        "{c.rollout.max_staleness} + 1: weights synced less often would leave every sample "
        "more than max_staleness versions behind",
    ),
    "async_fsdp": Rule(
        lambda c: c.rollout.mode == "sync" or c.distributed.strategy != "fsdp",
        "rollout.mode = 'async' is not supported with distributed.strategy = 'fsdp' "
        "(the workers need the full weights after each sync; use 'ddp')",
    ),
    "async_vllm": Rule(
        lambda c: c.rollout.mode == "sync" or c.rollout.engine == "transformers",
        "rollout.mode = 'async' runs the built-in engine in its workers: "
        "rollout.engine must be 'transformers'",
    ),
    "async_ppo": Rule(
        lambda c: c.rollout.mode == "sync" or c.algorithm.estimator == "grpo",
        "rollout.mode = 'async' needs algorithm.estimator = 'grpo' "
        "(the critic is not corrected for stale samples)",
    ),
    "off_policy_sync": Rule(
        lambda c: c.rollout.mode == "async" or c.algorithm.off_policy in ("auto", "none"),
        "algorithm.off_policy = {c.algorithm.off_policy!r} needs rollout.mode = 'async' "
        "(synchronous samples come from the weights being trained)",
    ),
    "off_policy_gspo": Rule(
        lambda c: c.algorithm.off_policy != "sampler" or c.algorithm.ratio_level == "token",
        "algorithm.off_policy = 'sampler' with algorithm.ratio_level = 'sequence' (GSPO): "
        "GSPO's clip range (algorithm.sequence_clip_low/high, ~1e-4) assumes a ratio that "
        "starts at 1, but against stale weights it starts wherever the staleness put it, so "
        "most sequences would be clipped before the first step; use off_policy = 'decoupled'",
    ),
    "eval_reward": Rule(
        lambda c: not c.eval.reward or ":" in c.eval.reward,
        "eval.reward must be 'module:function'",
    ),
}

# One rule a line, in check order (train.completions_every stands among the eval rules:
# that is where it has always been reported, which keeps a many-mistake config's first error).
_TABLE = """
    @model_path
    @train_path
    @column_map
    data.max_prompt_tokens ≥ 1
    @group_of_one
    rollout.group_size ≥ 1
    ppo.gamma in [0, 1]
    ppo.lam in [0, 1]
    ppo.value_clip ≥ 0
    ppo.critic_lr > 0
    @ppo_resume
    rollout.max_new_tokens ≥ 1
    rollout.temperature > 0
    rollout.top_p in (0, 1]
    rollout.top_k ≥ 0
    rollout.max_sequences_per_batch ≥ 1
    algorithm.advantage_eps ≥ 0
    algorithm.clip_low in [0, 1)
    algorithm.clip_high ≥ 0
    algorithm.beta ≥ 0
    algorithm.inner_iterations ≥ 1
    algorithm.max_generation_rounds ≥ 1
    @dynamic_sampling_ppo
    @gspo_grpo
    algorithm.sequence_clip_low in [0, 1)
    algorithm.sequence_clip_high ≥ 0
    algorithm.entropy_coef ≥ 0
    algorithm.sampler_is_cap > 0
    algorithm.sampler_mask_low ≥ 0
    @mask_band
    algorithm.sampler_geo_low ≥ 0
    @geo_band
    algorithm.overlong_buffer ≥ 0
    @overlong_buffer
    algorithm.overlong_penalty ≥ 0
    curriculum.strength ≥ 0
    curriculum.prior_successes > 0
    curriculum.prior_failures > 0
    @pool_column
    curriculum.length_buckets ≥ 1
    curriculum.max_prior_weight > 0
    curriculum.prescreen_threshold in [0, 1)
    curriculum.exploration in [0, 1]
    curriculum.half_life_steps ≥ 0
    @rewards_present
    optim.lr > 0
    optim.max_grad_norm ≥ 0
    optim.warmup_steps ≥ 0
    train.steps ≥ 1
    train.prompts_per_step ≥ 1
    train.sequences_per_micro_batch ≥ 1
    train.log_every ≥ 1
    train.threads ≥ 0
    train.save_every ≥ 0
    train.keep_checkpoints ≥ 1
    train.max_consecutive_skips ≥ 1
    eval.every ≥ 0
    train.completions_every ≥ 0
    eval.max_new_tokens ≥ 0
    @eval_reward
    model.lora_rank ≥ 0
    rollout.vllm_gpu_memory_utilization in (0, 1]
    rollout.vllm_max_model_len ≥ 0
    distributed.timeout_s > 0
    agent.max_turns ≥ 1
    agent.max_tool_response_tokens ≥ 1
    agent.tool_timeout_s ≥ 0
    agent.env_timeout_s ≥ 0
    agent.tool_workers ≥ 1
    rollout.workers ≥ 1
    rollout.max_staleness ≥ 0
    rollout.sync_every ≥ 1
    @sync_every
    rollout.worker_threads ≥ 1
    rollout.worker_timeout_s > 0
    rollout.max_worker_restarts ≥ 0
    @async_fsdp
    @async_vllm
    @async_ppo
    @off_policy_sync
    @off_policy_gspo
"""

_BOUND = {"≥": operator.ge, ">": operator.gt}
_INTERVAL = re.compile(r"in ([\[(])([\d.]+), ([\d.]+)([\])])")


def _range_rule(row: str) -> Rule:
    """The rule of one ``KEY ≥ N`` / ``KEY > N`` / ``KEY in [LO, HI]`` line of the table."""
    key, range_ = row.split(" ", 1)
    get = operator.attrgetter(key)
    message = f"{key} must be {range_}"
    symbol, _, number = range_.partition(" ")
    if symbol in _BOUND:
        compare, bound = _BOUND[symbol], _number(number)
        return Rule(lambda c: compare(get(c), bound), message)
    interval = _INTERVAL.fullmatch(range_)
    if interval is None:
        raise ValueError(f"not a range: {row!r}")
    opening, low, high, closing = interval.groups()
    above_low = operator.le if opening == "[" else operator.lt
    below_high = operator.le if closing == "]" else operator.lt
    lo, hi = _number(low), _number(high)
    return Rule(lambda c: above_low(lo, get(c)) and below_high(get(c), hi), message)


def _number(text: str) -> int | float:
    return int(text) if text.isdigit() else float(text)


def _parse(table: str) -> tuple[Rule, ...]:
    """The table's rules in order: ``@name`` lines from :data:`CROSS_FIELD`, the rest ranges."""
    rows = [row.strip() for row in table.splitlines() if row.strip()]
    return tuple(CROSS_FIELD[row[1:]] if row[0] == "@" else _range_rule(row) for row in rows)


RULES: tuple[Rule, ...] = _parse(_TABLE)


def validate(config: Config) -> None:
    """Raise :class:`ConfigError` for the first rule (then [[rewards]] table) that fails."""
    failures = [rule.message.format(c=config) for rule in RULES if not rule.passes(config)]
    failures += _reward_failures(config)
    if failures:
        raise ConfigError(failures[0])


def _reward_failures(config: Config) -> list[str]:
    """Each [[rewards]] table's function name, then its timeout, table by table; then at
    most one accuracy reward."""
    failures: list[str] = []
    for index, reward in enumerate(config.rewards):
        if ":" not in reward.function:
            failures.append(f"rewards[{index}].function must be 'module:function'")
        if not reward.timeout_s >= 0:
            failures.append(f"rewards[{index}].timeout_s must be ≥ 0")
    claims = [index for index, reward in enumerate(config.rewards) if reward.accuracy]
    if len(claims) > 1:
        failures.append(
            f"rewards[{claims[1]}].accuracy: rewards[{claims[0]}] is already the accuracy reward"
            " (at most one [[rewards]] table may set accuracy = true)"
        )
    return failures
