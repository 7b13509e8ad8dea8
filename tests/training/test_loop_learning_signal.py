"""The trainer with dynamic sampling, the curriculum and the advantage variants (tiny model)."""

from __future__ import annotations

import json

import pytest
import torch

from grpo.rewards.runner import RewardFunction

SETTINGS = (  # over tiny_config's
    "rollout.max_new_tokens=4",
    "train.sequences_per_micro_batch=8",
    "algorithm.beta=0.0",
)


def scripted(patterns: list[list[list[float]]]):
    """A reward that returns ``patterns[k]`` (one list of G rewards per group) on its k-th
    call, then the last pattern again: which groups have variance is chosen by the test."""
    calls = []

    def reward(prompts: list[str], completions: list[str], **_: object) -> list[float]:
        pattern = patterns[min(len(calls), len(patterns) - 1)]
        calls.append(len(completions))
        return [value for group in pattern for value in group]

    return [RewardFunction(name="scripted", fn=reward)], calls


MIXED, RIGHT, WRONG = [1.0, 0.0, 1.0, 0.0], [1.0] * 4, [0.0] * 4


def test_dynamic_sampling_refills_until_enough_informative_groups(tiny_config, tmp_path) -> None:
    from grpo.training.loop import train

    # Step 1: round 1 has 1 mixed group of 4, round 2 has 2, round 3 has 4 → 7 ≥ 4 after 3
    # rounds; the step trains the first 4 (1 + 2 + 1). Step 2: every round all mixed → 1 round.
    rewards, calls = scripted(
        [
            [MIXED, RIGHT, WRONG, WRONG],
            [RIGHT, MIXED, MIXED, WRONG],
            [MIXED] * 4,
        ]
    )
    config = tiny_config(*SETTINGS, "algorithm.dynamic_sampling=true")
    history = train(config, reward_functions=rewards, verbose=False).history
    assert len(calls) == 4
    first, second = history
    assert first["generation_rounds"] == 3 and second["generation_rounds"] == 1
    assert first["groups_trained"] == 4 and second["groups_trained"] == 4
    # Step 1: 12 groups of 4 = 48 samples; 5 zero-variance groups (2 right, 3 wrong) = 20.
    assert first["samples/generated"] == 48 and first["samples/zero_variance"] == 20
    assert first["groups/all_correct_frac"] == pytest.approx(2 / 12)
    assert first["groups/all_wrong_frac"] == pytest.approx(3 / 12)
    assert first["groups/mixed_frac"] == pytest.approx(7 / 12)
    assert second["samples/generated_total"] == 64 and second["samples/zero_variance_total"] == 20
    assert second["samples/wasted_frac_total"] == pytest.approx(20 / 64)
    assert "grad_norm" in first
    # The per-prompt statistics of the run, one line per prompt of the dataset.
    lines = (tmp_path / "run" / "prompt_stats.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 64 and sum(row["attempts"] for row in rows) == 64
    assert sum(row["successes"] for row in rows) == 2 * 4 + 7 * 2 + 4 * 2  # right + mixed


def test_dynamic_sampling_stops_at_the_round_cap(tiny_config) -> None:
    from grpo.training.loop import train

    rewards, calls = scripted([[WRONG] * 4])
    config = tiny_config(
        *SETTINGS,
        "algorithm.dynamic_sampling=true",
        "algorithm.max_generation_rounds=3",
    )
    history = train(config, reward_functions=rewards, verbose=False).history
    assert len(calls) == 6
    for row in history:
        assert row["generation_rounds"] == 3 and row["groups_trained"] == 0
        assert row["samples/generated"] == 48 and row["samples/zero_variance"] == 48
        assert row["groups/all_wrong_frac"] == 1.0
    assert history[-1]["samples/wasted_frac_total"] == 1.0


def test_uniform_sampling_reports_wasted_samples(tiny_config) -> None:
    from grpo.training.loop import train

    rewards, _ = scripted([[MIXED, RIGHT, WRONG, MIXED]])
    history = train(tiny_config(*SETTINGS), reward_functions=rewards, verbose=False).history
    for step, row in enumerate(history, start=1):
        assert row["generation_rounds"] == 1 and row["groups_trained"] == 2
        assert row["samples/zero_variance"] == 8 and row["samples/zero_variance_total"] == 8 * step
        assert row["samples/generated_total"] == 16 * step
        assert row["groups/mixed_frac"] == 0.5


def test_curriculum_run_saves_and_resumes_its_statistics(tiny_config, tmp_path) -> None:
    from grpo.runtime.checkpoint import latest_checkpoint, load_checkpoint
    from grpo.training.loop import train

    rewards, _ = scripted([[MIXED, RIGHT, WRONG, MIXED]])
    options = ("curriculum.enabled=true", "curriculum.strength=2.0", "train.save_every=1")
    train(
        tiny_config(*SETTINGS, *options),
        reward_functions=rewards,
        verbose=False,
    )
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["tensors"]["sampler"]
    stats = state["stats"]
    assert sum(stats["attempts"]) == 32 and stats["generated"] == 32
    assert sum(stats["successes"]) == 2 * (2 + 4 + 0 + 2)  # per step: 2 mixed, 1 right
    assert max(stats["last_step"]) == 2 and state["draws"] == 2
    resumed = train(
        tiny_config(
            *SETTINGS,
            *options,
            "train.resume=true",
            "train.steps=3",
        ),
        reward_functions=rewards,
        verbose=False,
    )
    assert [row["step"] for row in resumed.history] == [3]
    assert resumed.history[0]["samples/generated_total"] == 48


def test_first_step_rows_are_all_of_medium_estimated_difficulty(tiny_config) -> None:
    from grpo.training.loop import train

    rewards, _ = scripted([[MIXED, RIGHT, WRONG, MIXED]])
    history = train(
        tiny_config(*SETTINGS, "train.steps=1"),
        reward_functions=rewards,
        verbose=False,
    ).history
    # Nothing seen yet: every prompt's estimate is the Beta(1, 1) prior's 1/2 (medium), so
    # the medium bucket's mean length is the step's mean length and the others are absent.
    row = history[0]
    assert row["reasoning/len_medium"] == pytest.approx(row["completion_len/mean"])
    assert "reasoning/len_hard" not in row and "reasoning/len_easy" not in row
    assert 0.0 <= row["reasoning/self_correction_rate"] <= 1.0


def test_pooled_curriculum_checkpoints_its_recent_counts(tiny_config, tmp_path) -> None:
    from grpo.data.prompt_stats import PromptStats
    from grpo.runtime.checkpoint import latest_checkpoint, load_checkpoint
    from grpo.training.loop import train

    rewards, _ = scripted([[MIXED, RIGHT, WRONG, MIXED]])
    options = (
        "curriculum.enabled=true",
        "curriculum.pool_by='length'",
        "curriculum.length_buckets=2",
        "curriculum.prescreen_threshold=0.05",
        "curriculum.half_life_steps=4.0",
        "train.save_every=1",
    )
    first = train(
        tiny_config(*SETTINGS, *options),
        reward_functions=rewards,
        verbose=False,
    )
    assert all(0.0 <= row["curriculum/predicted_mixed"] <= 1.0 for row in first.history)
    stats = load_checkpoint(latest_checkpoint(tmp_path / "run"))["tensors"]["sampler"]["stats"]
    # Aged to step 2, step 1's 16 attempts weigh 0.5^(1/4) each and step 2's 16 weigh 1.
    recent = PromptStats.empty(len(stats["attempts"]), half_life_steps=4.0)
    recent.load_state_dict(stats)
    assert float(recent.recent(2)[0].sum()) == pytest.approx(16 * 0.5**0.25 + 16)
    resumed = train(
        tiny_config(
            *SETTINGS,
            *options,
            "train.resume=true",
            "train.steps=3",
        ),
        reward_functions=rewards,
        verbose=False,
    )
    assert resumed.history[0]["samples/generated_total"] == 48


@pytest.mark.parametrize("scale", ["rloo", "none", "batch"])
def test_advantage_variants_train(tiny_config, scale) -> None:
    from grpo.training.loop import train

    rewards, _ = scripted([[MIXED, RIGHT, [0.0, 2.0, 0.0, 0.0], WRONG]])
    config = tiny_config(
        *SETTINGS,
        f"algorithm.advantage_scale='{scale}'",
        "train.steps=1",
    )
    history = train(config, reward_functions=rewards, verbose=False).history
    assert all(row["groups_trained"] == 2 for row in history)
    assert all(torch.isfinite(torch.tensor(row["loss"])) for row in history)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("algorithm.dynamic_sampling=true", "algorithm.estimator='ppo'"),
            "algorithm.dynamic_sampling needs algorithm.estimator = 'grpo'",
        ),
        (("algorithm.max_generation_rounds=0",), "algorithm.max_generation_rounds must be ≥ 1"),
        (("curriculum.strength=-1.0",), "curriculum.strength must be ≥ 0"),
        (("curriculum.prior_failures=0.0",), "curriculum.prior_failures must be > 0"),
        (("curriculum.enable=true",), "unknown config key 'curriculum.enable'"),
        (("curriculum.pool_by='column'",), "curriculum.pool_by = 'column' needs"),
        (("curriculum.exploration=1.5",), r"curriculum.exploration must be in \[0, 1\]"),
    ],
)
def test_bad_learning_signal_config_names_the_key(tiny_config, overrides, message) -> None:
    from grpo.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        tiny_config(*SETTINGS, *overrides)
