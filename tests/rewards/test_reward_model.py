"""The learned reward model, with a tiny random Llama classifier and a local tokenizer."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForSequenceClassification, PreTrainedTokenizerFast

from grpo.rewards import RewardFunction, reward_model, score_completions
from grpo.rewards.model import load_reward_model

WORDS = [
    "[PAD]",
    "[UNK]",
    "[EOS]",
    "<user>",
    "<assistant>",
    "what",
    "is",
    "two",
    "plus",
    "four",
    "five",
    "cats",
    "the",
    "answer",
    "?",
    ".",
]
CHAT_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}[EOS]"


def build_reward_model(
    directory: Path, *, num_labels: int = 1, chat_template: str | None = None
) -> Path:
    torch.manual_seed(0)
    backend = Tokenizer(
        models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="[UNK]")
    )
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    if chat_template:
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(directory)
    config = LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_labels=num_labels,
        pad_token_id=0,
    )
    LlamaForSequenceClassification(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_reward_model(tmp_path_factory.mktemp("rm"))


PROMPTS = ["what is two plus two ?", "what is two plus two ?", "what is two plus two ?", "the cats"]
COMPLETIONS = ["four", "the answer is five .", "cats cats cats cats cats cats", "."]


def test_scores_one_finite_number_per_pair_and_depends_on_the_completion(model_dir: Path) -> None:
    scores = reward_model(PROMPTS, COMPLETIONS, path=str(model_dir), device="cpu")
    assert len(scores) == len(COMPLETIONS)
    assert all(isinstance(s, float) and math.isfinite(s) for s in scores)
    assert len({round(s, 6) for s in scores}) == len(scores)


def test_batching_and_padding_do_not_change_scores(model_dir: Path) -> None:
    one_by_one = reward_model(PROMPTS, COMPLETIONS, path=str(model_dir), device="cpu", batch_size=1)
    together = reward_model(PROMPTS, COMPLETIONS, path=str(model_dir), device="cpu", batch_size=3)
    assert torch.allclose(torch.tensor(one_by_one), torch.tensor(together), atol=1e-5)


def test_loaded_once_frozen_and_in_eval_mode(model_dir: Path) -> None:
    first = load_reward_model(str(model_dir), device="cpu")
    reward_model(PROMPTS[:1], COMPLETIONS[:1], path=str(model_dir), device="cpu")
    assert load_reward_model(str(model_dir), device="cpu") is first
    assert not first.model.training
    assert not any(p.requires_grad for p in first.model.parameters())


def test_uses_the_chat_template_when_the_tokenizer_has_one(tmp_path: Path) -> None:
    directory = build_reward_model(tmp_path, chat_template=CHAT_TEMPLATE)
    templated = reward_model(PROMPTS, COMPLETIONS, path=str(directory), device="cpu")
    rendered = [
        f"<user> {p} <assistant> {c} [EOS]" for p, c in zip(PROMPTS, COMPLETIONS, strict=True)
    ]
    by_hand = reward_model(
        rendered, [""] * len(rendered), path=str(directory), device="cpu", chat_template=False
    )
    plain = reward_model(
        PROMPTS, COMPLETIONS, path=str(directory), device="cpu", chat_template=False
    )
    assert torch.allclose(torch.tensor(templated), torch.tensor(by_hand), atol=1e-5)
    assert not torch.allclose(torch.tensor(templated), torch.tensor(plain), atol=1e-5)


def test_prompt_column_replaces_the_formatted_prompt(model_dir: Path) -> None:
    options = {"path": str(model_dir), "device": "cpu"}
    raw = reward_model(
        ["x"] * 2, COMPLETIONS[:2], prompt_column="question", question=PROMPTS[:2], **options
    )
    direct = reward_model(PROMPTS[:2], COMPLETIONS[:2], path=str(model_dir), device="cpu")
    assert raw == pytest.approx(direct, abs=1e-6)


def test_several_labels_give_a_probability(tmp_path: Path) -> None:
    directory = build_reward_model(tmp_path, num_labels=2)
    scores = reward_model(
        PROMPTS, COMPLETIONS, path=str(directory), device="cpu", output="probability"
    )
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_runs_under_the_runner_with_options_bound(model_dir: Path) -> None:
    fn = functools.wraps(reward_model)(
        functools.partial(reward_model, path=str(model_dir), device="cpu")
    )
    scores = score_completions([RewardFunction("rm", fn)], PROMPTS, COMPLETIONS, {})
    assert scores.per_function["rm"].shape == (4,)
    assert scores.metrics["reward/rm/errors"] == 0.0
