"""The names ``grpo`` exports stay as they are; its docstring examples run as doctests."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import grpo

PUBLIC = [
    "Config",
    "ConfigError",
    "aggregate",
    "group_advantages",
    "kl_penalty",
    "leave_one_out_advantages",
    "load_config",
    "policy_loss",
    "train",
    "zero_variance_groups",
]

# Every module with a docstring example: the examples are documentation, so they must run.
SRC = Path(grpo.__file__).parent
DOCTESTED = sorted(
    "grpo." + ".".join(path.relative_to(SRC).with_suffix("").parts)
    for path in SRC.rglob("*.py")
    if ">>>" in path.read_text()
)


def test_public_names_are_unchanged() -> None:
    assert sorted(grpo.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(grpo, name) is not None
    assert callable(grpo.train) and grpo.train.__module__ == "grpo.training.loop"


@pytest.mark.parametrize("name", DOCTESTED)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert results.failed == 0, f"{name}: {results.failed} of {results.attempted} examples failed"


def test_the_core_has_examples() -> None:
    core = ("advantages", "corrections", "groups", "kl", "losses", "ppo")
    assert {f"grpo.algo.{name}" for name in core} <= set(DOCTESTED)
    assert "grpo.log.metric_table" in DOCTESTED and "grpo.text.fences" in DOCTESTED
