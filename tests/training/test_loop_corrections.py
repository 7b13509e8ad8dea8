"""End to end with a deliberately mismatched sampler (the built-in engine sampling under
top-k, renormalised over the kept tokens, while the trainer scores the full softmax), and
with GSPO, the entropy bonus and the overlong options: each run trains, logs its metrics,
and documents every key it logs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from grpo.config import AlgorithmConfig, ConfigError
from grpo.rewards.runner import RewardFunction
from grpo.training.setup_learner import correction_settings
from tests.user_code.user_rewards import digit_fraction

GLOSSARY = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"


REWARDS = [RewardFunction(name="digit_fraction", fn=digit_fraction)]
SETTINGS = (  # over tiny_config's
    "train.sequences_per_micro_batch=5",
    "algorithm.beta=0",
    "train.tensorboard=false",
)


def _glossary() -> set[str]:
    section = GLOSSARY.read_text()
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def _logged(run_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _undocumented(rows: list[dict[str, float]]) -> list[str]:
    keys = {re.sub(r"^reward/digit_fraction/", "reward/<name>/", k) for row in rows for k in row}
    return sorted(keys - _glossary())


def test_a_mismatched_sampler_trains_and_logs_the_mismatch(tiny_config) -> None:
    from grpo.training.loop import train

    config = tiny_config(
        *SETTINGS,
        "rollout.top_k=4",  # the sampler renormalises over 4 tokens; the trainer does not
        "algorithm.sampler_correction='tis'",
        "algorithm.sampler_is_cap=2.0",
        "algorithm.inner_iterations=2",
    )
    result = train(config, reward_functions=REWARDS, verbose=False)
    rows = [row for row in _logged(result.run_dir) if row.get("groups_trained", 0) > 0]
    assert rows, "no group had reward variance"
    for row in rows:
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
        # Top-k raises every sampled token's probability: π_old/π_sampler < 1, KL > 0.
        assert row["sampler/kl_k3"] > 0 and row["sampler_logp_gap"] > 0
        assert row["sampler/is_ratio_max"] <= 1.0 + 1e-4
        assert 0 < row["sampler/is_ratio_min"] < row["sampler/is_ratio_mean"] < 1.0
        assert row["sampler/is_weight_max"] <= 2.0  # the cap bounds the weight
        assert row["sampler/masked_frac"] == 0.0  # TIS truncates, it never masks
    assert _undocumented(_logged(result.run_dir)) == []


def test_gspo_entropy_bonus_and_overlong_options_run(tiny_config) -> None:
    from grpo.training.loop import train

    config = tiny_config(
        *SETTINGS,
        "rollout.top_p=0.9",
        "algorithm.ratio_level='sequence'",
        "algorithm.entropy_coef=0.01",
        "algorithm.sampler_correction='geo_mask'",
        "algorithm.sampler_geo_low=0.5",
        "algorithm.sampler_geo_high=1.5",
        "algorithm.overlong_buffer=3",
        "algorithm.mask_truncated_completions=true",
    )
    result = train(config, reward_functions=REWARDS, verbose=False)
    rows = _logged(result.run_dir)
    for row in rows:
        # Random completions of 6 tokens mostly hit the cap: the full penalty of 1.
        assert -1.0 <= row["reward/overlong_penalty"] < 0
        assert row["truncated_masked"] >= 0
        if "loss" in row:
            assert math.isfinite(row["loss"]) and row["entropy"] > 0
    assert any(row["truncated_masked"] > 0 for row in rows)
    assert _undocumented(rows) == []


def test_auto_correction_is_tis_for_vllm_and_none_for_the_built_in_engine() -> None:
    assert correction_settings(AlgorithmConfig(), "vllm").mode == "tis"
    assert correction_settings(AlgorithmConfig(), "transformers").mode == "none"
    explicit = AlgorithmConfig(sampler_correction="mis", sampler_mask_low=0.2)
    settings = correction_settings(explicit, "transformers")
    assert (settings.mode, settings.mask_low, settings.mask_high) == ("mis", 0.2, 2.0)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.sampler_correction='icepop'", "algorithm.sampler_correction must be one of"),
        ("algorithm.sampler_is_cap=0", "algorithm.sampler_is_cap must be > 0"),
        ("algorithm.sampler_mask_high=0.9", "algorithm.sampler_mask_low must be ≤ 1 ≤"),
        ("algorithm.sampler_geo_low=1.2", "algorithm.sampler_geo_low must be ≤ 1 ≤"),
        ("algorithm.ratio_level='group'", "algorithm.ratio_level must be one of"),
        ("algorithm.sequence_clip_low=1.5", "algorithm.sequence_clip_low must be in"),
        ("algorithm.entropy_coef=-0.1", "algorithm.entropy_coef must be ≥ 0"),
        ("algorithm.overlong_buffer=7", "algorithm.overlong_buffer = 7 must be ≤"),
        ("algorithm.overlong_penalty=-1", "algorithm.overlong_penalty must be ≥ 0"),
    ],
)
def test_bad_settings_name_the_key(tiny_config, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        tiny_config(*SETTINGS, override)


def test_gspo_needs_the_group_baseline(tiny_config) -> None:
    with pytest.raises(ConfigError, match=re.escape("algorithm.ratio_level = 'sequence'")):
        tiny_config(*SETTINGS, "algorithm.ratio_level='sequence'", "algorithm.estimator='ppo'")
