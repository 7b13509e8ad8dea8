"""The names ``grpo`` exports stay as they are; its docstring examples run as doctests."""

from __future__ import annotations

import doctest
import importlib

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

# Modules whose docstring examples are part of the documentation of the public core.
DOCTESTED = [
    "grpo.algo.advantages",
    "grpo.algo.corrections",
    "grpo.algo.curriculum",
    "grpo.algo.groups",
    "grpo.algo.kl",
    "grpo.algo.losses",
    "grpo.algo.overlong",
    "grpo.algo.ppo",
    "grpo.algo.rows",
    "grpo.log.metric_table",
    "grpo.eval.evaluate",
]


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
    finder = doctest.DocTestFinder()
    for name in DOCTESTED:
        examples = sum(len(t.examples) for t in finder.find(importlib.import_module(name)))
        assert examples > 0, f"{name} has no docstring example"
