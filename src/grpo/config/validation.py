"""The checks that types cannot express; each error names its key.

A numeric field's range is written beside the field, as a :class:`~grpo.config.sections.Bound`
in its annotation (``Annotated[int, at_least(1)]``), and its error is ``"KEY must be ≥ 1"``.
The rules that look at several keys at once are :data:`CROSS_FIELD`. The ranges are checked
in the order the fields are declared, then the cross-field rules, then each [[rewards]]
table; every rule is evaluated before the first failing one raises, so a config with
several mistakes always reports the same one first.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable
from typing import NamedTuple

from grpo.config.errors import ConfigError
from grpo.config.sections import Bound, Config, field_bounds


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


def range_rules() -> tuple[Rule, ...]:
    """A rule for each field declared with a :class:`Bound`, in declaration order."""
    sections = typing.get_type_hints(Config)
    return tuple(
        _range_rule(f"{section.name}.{name}", bound)
        for section in dataclasses.fields(Config)
        if dataclasses.is_dataclass(sections[section.name])  # not [[rewards]]: checked below
        for name, bound in field_bounds(sections[section.name]).items()
    )


def _range_rule(key: str, bound: Bound) -> Rule:
    get = operator.attrgetter(key)
    return Rule(lambda c: bound.holds(get(c)), f"{key} must be {bound}")


RULES: tuple[Rule, ...] = (*range_rules(), *CROSS_FIELD.values())


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
