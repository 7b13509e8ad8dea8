"""Shared fixtures: a tiny random Llama and a character tokenizer, built locally (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpo.demo.model import build_tiny_llama
    from grpo.demo.tokenizer import build_char_tokenizer

    directory = tmp_path_factory.mktemp("tiny_model")
    tokenizer = build_char_tokenizer(directory)
    build_tiny_llama(tokenizer, hidden_size=32, layers=2, heads=2, directory=directory)
    return directory


@pytest.fixture(scope="session")
def arithmetic_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpo.demo.task import make_splits, write_jsonl

    rows, _ = make_splits(64, 0, seed=1)
    return write_jsonl(rows, tmp_path_factory.mktemp("data") / "train.jsonl")
