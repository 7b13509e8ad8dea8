"""Shared fixtures: a tiny random Llama and a character tokenizer, built locally (no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# One torch thread, here and in every `grpo` subprocess the tests start (they inherit the
# environment): the tiny models gain nothing from more, and on a busy machine 2 threads on
# 2 cores ran a training step 3–14× slower than 1 (benchmarks/threads.py), which pushed the
# end-to-end tests past their timeouts.
os.environ["OMP_NUM_THREADS"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.set_num_threads(1)


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


@pytest.fixture(scope="session")
def trained_run_dir(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, arithmetic_jsonl: Path
) -> Path:
    """A real 4-step run of the tiny model with KL, two rewards (an accuracy reward, and one
    that varies between random completions so that groups train), held-out evaluation and
    a completion table every 2 steps: the input of the report, metric and glossary tests."""
    from grpo.config import load_config
    from grpo.rewards import numeric_answer
    from grpo.rewards.runner import RewardFunction
    from grpo.training.loop import train

    def digit_fraction(prompts: list[str], completions: list[str], **_: object) -> list[float]:
        return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    config = load_config(
        None,
        [
            f"--model.path={tiny_model_dir}",
            f"--data.train_path={arithmetic_jsonl}",
            '--rewards=[{ function = "grpo.rewards:numeric_answer" }]',
            f"--eval.path={arithmetic_jsonl}",
            "--eval.every=2",
            "--eval.max_new_tokens=4",
            "--rollout.group_size=4",
            "--rollout.max_new_tokens=6",
            "--algorithm.beta=0.04",
            "--optim.lr=1e-3",
            "--train.steps=4",
            "--train.prompts_per_step=2",
            "--train.completions_every=2",
            f"--train.run_dir={run_dir}",
        ],
    )
    rewards = [
        RewardFunction(name="numeric_answer", fn=numeric_answer),
        RewardFunction(name="digit_fraction", fn=digit_fraction, weight=0.5),
    ]
    train(config, reward_functions=rewards, verbose=False)
    return run_dir
