"""PPO with a critic, end to end on the tiny random model: the critic learns, the policy moves."""

from __future__ import annotations

import math

import pytest
import torch

from grpo.config import ConfigError
from grpo.rewards.runner import RewardFunction
from tests.user_code.user_rewards import digit_fraction


def offset_digit_fraction(prompts: list[str], completions: list[str], **_: object) -> list[float]:
    """1 + the digit fraction: the constant 1 is what a critic should learn first."""
    return [1.0 + reward for reward in digit_fraction(prompts, completions)]


REWARDS = [RewardFunction(name="offset_digit_fraction", fn=offset_digit_fraction)]


SETTINGS = (  # over tiny_config's
    "algorithm.estimator='ppo'",
    "rollout.group_size=2",
    "train.sequences_per_micro_batch=3",
)


def test_ppo_trains_policy_and_critic(tiny_config, tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    from grpo.training.loop import train

    config = tiny_config(
        *SETTINGS,
        "train.steps=6",
        "algorithm.beta=0.05",
        "ppo.critic_lr=1e-2",
    )
    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    result = train(config, reward_functions=REWARDS, verbose=False)
    history = result.history
    assert all(row["groups_trained"] == 4 for row in history)  # no group is dropped under PPO
    for row in history:
        for key in ("loss", "kl", "grad_norm", "value_loss", "critic_grad_norm"):
            assert math.isfinite(row[key]), key
    value_losses = [row["value_loss"] for row in history]
    # V starts at 0 against returns ≈ 1.1: ½·E[R²] ≈ 0.6; a critic that learns the mean gets
    # down to ½·Var(R), about 0.01.
    assert value_losses[0] > 0.4
    assert max(value_losses[-2:]) < 0.2 * value_losses[0], value_losses
    assert history[-1]["value_mean"] > 0.5  # the critic now predicts a positive return
    after = AutoModelForCausalLM.from_pretrained(result.final_dir)
    moved = [
        not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters(), strict=True)
    ]
    assert all(moved)


def test_group_size_one_is_allowed_for_ppo_only(tiny_config) -> None:
    tiny_config(*SETTINGS, "rollout.group_size=1")
    with pytest.raises(ConfigError, match=r"rollout\.group_size"):
        tiny_config(
            *SETTINGS,
            "rollout.group_size=1",
            "algorithm.estimator='grpo'",
        )
    with pytest.raises(ConfigError, match=r"train\.resume"):
        tiny_config(*SETTINGS, "train.resume=true")


def test_lora_critic_trains_adapters_and_head_only(
    tiny_model_dir, arithmetic_jsonl, tmp_path
) -> None:
    pytest.importorskip("peft")
    from grpo.models.loading import LoraSpec, TrainableSpec
    from grpo.models.value import completion_values, load_value_model

    lora = LoraSpec(rank=4, alpha=16.0, dropout=0.0, target_modules=("all-linear",))
    spec = TrainableSpec("float32", disable_dropout=True, gradient_checkpointing=False, lora=lora)
    model = load_value_model(str(tiny_model_dir), torch.device("cpu"), spec)
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name or name.startswith("head.") for name in trainable)
    assert any(name.startswith("head.") for name in trainable)
    values_BT = completion_values(
        model,
        torch.tensor([[0, 5, 6], [7, 8, 9]]),
        torch.tensor([[0, 1, 1], [1, 1, 1]]),
        torch.tensor([[10, 11], [12, 0]]),
        torch.tensor([[1, 1], [1, 0]]),
    )
    assert values_BT.shape == (2, 2) and torch.equal(values_BT, torch.zeros(2, 2))  # head = 0
