"""Signs of learned reasoning in completions, counted (pure; no model).

DeepSeek-R1 (DeepSeek-AI 2025) reports that a model trained with GRPO alone spent longer
thinking on harder problems and learned to re-check itself.
These functions turn that into numbers per completion and per step:

- the thinking length: characters inside ``<think>…</think>`` (to the end when the block is
  not closed), and whether the completion has such a block at all;
- self-correction: whether the completion contains one of a list of phrases ("wait",
  "let me re-check", …; ``train.self_correction_phrases``, default in
  ``grpo.config.sections.DEFAULT_SELF_CORRECTION_PHRASES``), matched case-insensitively at
  word boundaries;
- completion length by difficulty: rows bucketed by their prompt's estimated success rate
  p̂ (hard: p̂ < 1/3, medium: 1/3 ≤ p̂ ≤ 2/3, easy: p̂ > 2/3).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
HARD_BELOW, EASY_ABOVE = 1 / 3, 2 / 3


def thinking_chars(completion: str) -> int | None:
    """Characters inside the first ``<think>`` block (to the end if unclosed); None when
    there is no block.

    Example: ``"<think>ab c</think>42"`` → 4; ``"42"`` → None.
    """
    start = completion.find(THINK_OPEN)
    if start < 0:
        return None
    body = completion[start + len(THINK_OPEN) :]
    end = body.find(THINK_CLOSE)
    return len(body if end < 0 else body[:end])


def phrase_pattern(phrases: Sequence[str]) -> re.Pattern[str] | None:
    """One case-insensitive regex matching any phrase at word boundaries (None: no phrases)."""
    if not phrases:
        return None
    alternatives = "|".join(re.escape(phrase) for phrase in sorted(phrases, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def self_corrects(completion: str, pattern: re.Pattern[str] | None) -> bool:
    """True when the completion contains a self-correction phrase.

    Example: "Wait, 12" matches "wait"; "awaited" does not (word boundaries).
    """
    return pattern is not None and pattern.search(completion) is not None


def difficulty_bucket(estimated_success: float) -> str:
    """ "hard" (p̂ < 1/3), "medium" (1/3 ≤ p̂ ≤ 2/3) or "easy" (p̂ > 2/3)."""
    if estimated_success < HARD_BELOW:
        return "hard"
    return "easy" if estimated_success > EASY_ABOVE else "medium"


def reasoning_summary(
    lengths: Sequence[float],
    estimated_success: Sequence[float],
    think_chars: Sequence[float | None],
    self_correction: Sequence[bool],
) -> dict[str, float]:
    """One step's ``reasoning/*`` metrics from per-completion values.

    ``reasoning/len_{hard,medium,easy}``: mean completion length (tokens) per difficulty
    bucket (a bucket with no rows is left out); ``reasoning/think_frac``: the share of
    completions with a ``<think>`` block; ``reasoning/think_chars``: their mean thinking
    length (left out when none has one); ``reasoning/self_correction_rate``: the share of
    completions with a self-correction phrase.
    """
    buckets: dict[str, list[float]] = {"hard": [], "medium": [], "easy": []}
    for length, success in zip(lengths, estimated_success, strict=True):
        buckets[difficulty_bucket(success)].append(float(length))
    metrics = {
        f"reasoning/len_{name}": sum(values) / len(values)
        for name, values in buckets.items()
        if values
    }
    thinking = [float(chars) for chars in think_chars if chars is not None]
    total = max(len(think_chars), 1)
    metrics["reasoning/think_frac"] = len(thinking) / total
    if thinking:
        metrics["reasoning/think_chars"] = sum(thinking) / len(thinking)
    metrics["reasoning/self_correction_rate"] = sum(map(bool, self_correction)) / max(
        len(self_correction), 1
    )
    return metrics
