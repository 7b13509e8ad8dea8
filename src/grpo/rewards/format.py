"""DeepSeek-R1's format reward: think first, then answer, in tags."""

from __future__ import annotations

import re

_R1_PATTERN = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def r1_format(prompts: list[str], completions: list[str], **_: object) -> list[float]:
    """1.0 when the completion is exactly ``<think>…</think>`` then ``<answer>…</answer>``."""
    return [1.0 if _R1_PATTERN.match(completion) else 0.0 for completion in completions]
