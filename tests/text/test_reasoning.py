"""Counting the signs of learned reasoning, on hand-counted completions."""

from __future__ import annotations

import pytest

from grpo.config.sections import DEFAULT_SELF_CORRECTION_PHRASES
from grpo.text.reasoning import (
    difficulty_bucket,
    phrase_pattern,
    reasoning_summary,
    self_corrects,
    thinking_chars,
)


def test_thinking_length() -> None:
    assert thinking_chars("<think>ab c</think>42") == 4
    assert thinking_chars("so <think>x</think> and <think>yy</think>") == 1  # the first block
    assert thinking_chars("<think>unclosed") == 8
    assert thinking_chars("42") is None


def test_self_correction_phrases_match_whole_words_case_insensitively() -> None:
    pattern = phrase_pattern(DEFAULT_SELF_CORRECTION_PHRASES)
    assert self_corrects("12. Wait, 13.", pattern)
    assert self_corrects("Let me re-check: 7", pattern)
    assert self_corrects("ACTUALLY it is 5", pattern)
    assert not self_corrects("I awaited the answer: 9", pattern)  # not a whole word
    assert not self_corrects("The answer is 4", pattern)
    assert not self_corrects("wait", phrase_pattern([]))  # an empty list counts nothing
    custom = phrase_pattern(["hold on"])
    assert self_corrects("hold on, 3", custom) and not self_corrects("wait, 3", custom)


def test_difficulty_buckets() -> None:
    assert [difficulty_bucket(p) for p in (0.0, 0.32, 1 / 3, 0.5, 2 / 3, 0.67, 1.0)] == [
        "hard",
        "hard",
        "medium",
        "medium",
        "medium",
        "easy",
        "easy",
    ]


def test_reasoning_summary_by_hand() -> None:
    # Six completions: lengths 10, 20 (hard: p̂ 0.1), 5 (medium: 0.5), 2, 4, 6 (easy: 0.9).
    # Two have <think> blocks of 30 and 10 characters; three of six self-correct.
    metrics = reasoning_summary(
        lengths=[10, 20, 5, 2, 4, 6],
        estimated_success=[0.1, 0.1, 0.5, 0.9, 0.9, 0.9],
        think_chars=[30, None, 10, None, None, None],
        self_correction=[True, True, False, True, False, False],
    )
    assert metrics == pytest.approx(
        {
            "reasoning/len_hard": 15.0,
            "reasoning/len_medium": 5.0,
            "reasoning/len_easy": 4.0,
            "reasoning/think_frac": 2 / 6,
            "reasoning/think_chars": 20.0,
            "reasoning/self_correction_rate": 0.5,
        }
    )
    # No medium rows and no <think> block: those keys are left out.
    sparse = reasoning_summary([3, 5], [0.0, 1.0], [None, None], [False, False])
    assert sparse == {
        "reasoning/len_hard": 3.0,
        "reasoning/len_easy": 5.0,
        "reasoning/think_frac": 0.0,
        "reasoning/self_correction_rate": 0.0,
    }
