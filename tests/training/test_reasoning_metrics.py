"""The step's reasoning/* metrics from per-row results, and from a real (tiny) run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grpo.rounds.source import text_features
from grpo.text.reasoning import phrase_pattern
from grpo.training.loop import reasoning_metrics


def test_text_features_per_completion() -> None:
    features = text_features(
        ["<think>abc</think>7", "Wait, 8", "9"], phrase_pattern(["wait", "hmm"])
    )
    assert features["has_think_B"].tolist() == [True, False, False]
    assert features["think_chars_B"].tolist() == [3, 0, 0]
    assert features["self_correction_B"].tolist() == [False, True, False]


def test_reasoning_metrics_over_groups() -> None:
    # Two groups of G = 2: prompt estimates 0.2 (hard) and 0.9 (easy).
    rows = SimpleNamespace(
        length_B=torch.tensor([12, 8, 3, 5]),
        has_think_B=torch.tensor([True, False, True, False]),
        think_chars_B=torch.tensor([40, 0, 10, 0]),
        self_correction_B=torch.tensor([True, False, False, False]),
    )
    metrics = reasoning_metrics(rows, [0.2, 0.9], group_size=2)
    assert metrics == pytest.approx(
        {
            "reasoning/len_hard": 10.0,
            "reasoning/len_easy": 4.0,
            "reasoning/think_frac": 0.5,
            "reasoning/think_chars": 25.0,
            "reasoning/self_correction_rate": 0.25,
        }
    )
