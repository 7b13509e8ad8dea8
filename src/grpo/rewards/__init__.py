"""Reward functions: ``fn(prompts, completions, **columns) -> list[float]``."""

from grpo.rewards.format import r1_format
from grpo.rewards.math import extract_answer, numeric_answer
from grpo.rewards.runner import (
    RewardError,
    RewardFunction,
    RewardScores,
    resolve_reward_functions,
    score_completions,
)

__all__ = [
    "RewardError",
    "RewardFunction",
    "RewardScores",
    "extract_answer",
    "numeric_answer",
    "r1_format",
    "resolve_reward_functions",
    "score_completions",
]
