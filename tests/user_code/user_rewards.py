"""A reward function as a user's own module holds one: worker processes (asynchronous
rollouts, torchrun, Ray) import it by name, ``user_rewards:digit_fraction``, with this
folder on their path (the ``user_rewards`` and ``user_code_dir`` fixtures); tests in this
process import it from ``tests.user_code.user_rewards``."""

from __future__ import annotations


def digit_fraction(prompts: list[str], completions: list[str], **_: object) -> list[float]:
    """The fraction of a completion's characters that are digits: it varies between the tiny
    random model's completions, so that groups have a spread and train."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]
