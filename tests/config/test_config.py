"""Bad configuration: each mistake is a one-line ConfigError naming the key."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from grpo.config import Config, ConfigError, load_config
from grpo.config.sections import Bound, above, at_least, field_bounds, within
from grpo.config.validation import range_rules

BASE = [
    "model.path='m'",
    "data.train_path='d.jsonl'",
    "rewards=[{function='grpo.rewards:numeric_answer'}]",
]


def _error(*overrides: str, toml: str | None = None, tmp_path=None) -> str:
    path = None
    if toml is not None:
        path = tmp_path / "c.toml"
        path.write_text(toml)
    with pytest.raises(ConfigError) as error:
        load_config(path, [*BASE, *overrides] if toml is None else list(overrides))
    message = str(error.value)
    assert "\n" not in message
    return message


def test_unknown_key_in_a_file_names_it(tmp_path) -> None:
    toml = (
        '[model]\npath = "m"\n[data]\ntrain_path = "d.jsonl"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n[train]\nsave_evry = 5\n'
    )
    message = _error(toml=toml, tmp_path=tmp_path)
    assert message.startswith(
        "unknown config key 'train.save_evry'; did you mean 'train.save_every'? (known: "
    )


@pytest.mark.parametrize(
    ("override", "start"),
    [
        ("train.stpes=3", "unknown config key 'train.stpes'; did you mean 'train.steps'?"),
        ("rollout.grup_size=4", "unknown config key 'rollout.grup_size'; did you mean "
         "'rollout.group_size'?"),
        ("optimm.lr=1e-3", "unknown config key 'optimm'; did you mean 'optim'?"),
        ("train.zzz=1", "unknown config key 'train.zzz' (known: "),  # nothing close: no guess
    ],
)  # fmt: skip
def test_an_unknown_key_or_section_suggests_the_closest_known_one(override, start) -> None:
    assert _error(override).startswith(start)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.steps='ten'", "train.steps must be an integer, got 'ten'"),
        ("train.steps=2.5", "train.steps must be an integer, got 2.5"),
        ("train.resume=1", "train.resume must be true or false, got 1"),
        ("optim.lr=nan", "optim.lr must be a number, got nan"),
        ("rollout.stop_strings='###'", "rollout.stop_strings must be a list"),
        ("rewards[0]", "override 'rewards[0]' must look like --section.key=value"),
    ],
)
def test_wrong_type_names_the_key(override, message) -> None:
    assert _error(override).startswith(message)


def test_group_of_one_with_group_scaling_is_impossible() -> None:
    message = _error("rollout.group_size=1", "algorithm.advantage_scale='group'")
    assert message.startswith(
        "rollout.group_size = 1 with algorithm.advantage_scale = 'group': the group mean is "
        "the baseline"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.steps=0", "train.steps must be ≥ 1"),
        ("train.prompts_per_step=0", "train.prompts_per_step must be ≥ 1"),
        ("train.sequences_per_micro_batch=-2", "train.sequences_per_micro_batch must be ≥ 1"),
        ("rollout.max_new_tokens=0", "rollout.max_new_tokens must be ≥ 1"),
        ("data.max_prompt_tokens=0", "data.max_prompt_tokens must be ≥ 1"),
        ("rollout.max_sequences_per_batch=0", "rollout.max_sequences_per_batch must be ≥ 1"),
        ("algorithm.inner_iterations=0", "algorithm.inner_iterations must be ≥ 1"),
        ("train.keep_checkpoints=0", "train.keep_checkpoints must be ≥ 1"),
        ("train.max_consecutive_skips=0", "train.max_consecutive_skips must be ≥ 1"),
        ("train.save_every=-1", "train.save_every must be ≥ 0"),
        ("optim.lr=0", "optim.lr must be > 0"),
    ],
)
def test_non_positive_sizes_name_the_key(override, message) -> None:
    assert _error(override) == message


ASYNC = "rollout.mode='async'"


@pytest.mark.parametrize(
    ("overrides", "start"),
    [
        ((ASYNC, "rollout.workers=0"), "rollout.workers must be ≥ 1"),
        ((ASYNC, "rollout.max_staleness=-1"), "rollout.max_staleness must be ≥ 0"),
        ((ASYNC, "rollout.worker_timeout_s=0"), "rollout.worker_timeout_s must be > 0"),
        (
            (ASYNC, "rollout.max_staleness=1", "rollout.sync_every=3"),
            "rollout.sync_every = 3 must be ≤ rollout.max_staleness + 1",
        ),
        ((ASYNC, "distributed.strategy='fsdp'"), "rollout.mode = 'async' is not supported with"),
        ((ASYNC, "rollout.engine='vllm'"), "rollout.mode = 'async' runs the built-in engine"),
        ((ASYNC, "algorithm.estimator='ppo'"), "rollout.mode = 'async' needs algorithm.estim"),
        (("algorithm.off_policy='decoupled'",), "algorithm.off_policy = 'decoupled' needs"),
    ],
)
def test_async_rollout_mistakes_name_the_key(overrides, start) -> None:
    assert _error(*overrides).startswith(start)


def _bounded_fields() -> list[tuple[str, type, Bound]]:
    sections = typing.get_type_hints(Config)
    return [
        (f"{section.name}.{name}", typing.get_type_hints(sections[section.name])[name], bound)
        for section in dataclasses.fields(Config)
        if dataclasses.is_dataclass(sections[section.name])
        for name, bound in field_bounds(sections[section.name]).items()
    ]


@pytest.mark.parametrize(
    ("key", "kind", "bound"), _bounded_fields(), ids=[key for key, *_ in _bounded_fields()]
)
def test_each_range_beside_its_field_is_checked_at_both_ends(key, kind, bound) -> None:
    """Just outside the range is the one-line error "KEY must be …"; a closed end is inside."""
    step = 1 if kind is int else 0.5
    outside = [bound.low if bound.open_low else bound.low - step]
    inside = [] if bound.open_low else [bound.low]
    if bound.high is not None:
        outside.append(bound.high if bound.open_high else bound.high + step)
        inside += [] if bound.open_high else [bound.high]
    for value in outside:
        assert _error(f"{key}={value}") == f"{key} must be {bound}"
    for value in inside:
        try:
            load_config(None, [*BASE, f"{key}={value}"])
        except ConfigError as error:  # another rule may object (group_size = 1), not this one
            assert not str(error).startswith(f"{key} must be"), str(error)


def test_ranges_are_written_beside_their_fields() -> None:
    assert len(_bounded_fields()) == len(range_rules()) == 62
    assert str(at_least(1)) == "≥ 1" and str(above(0)) == "> 0"
    assert str(within(0, 1, open_high=True)) == "in [0, 1)"
    assert within(0, 1, open_low=True).holds(1) and not within(0, 1, open_low=True).holds(0)
