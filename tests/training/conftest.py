"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

USER_REWARDS = """
def digit_fraction(prompts, completions, **_):
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]
"""


@pytest.fixture
def user_rewards(tmp_path, monkeypatch) -> str:
    """A reward module the asynchronous workers import by name, as a user's own would be
    (they are other processes: a function defined in a test module cannot reach them)."""
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "user_rewards.py").write_text(USER_REWARDS)
    monkeypatch.syspath_prepend(str(folder))
    return "user_rewards:digit_fraction"
