"""SmolLM2's real tokenizer, read from its GGUF: the special tokens its metadata names, its
chat template, and a tiny random Llama trained with it (fast; the real weights are in
test_smollm2_slow.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo.models.gguf_loading import match_gguf_special_tokens
from grpo.models.names import ModelError, gguf_metadata, model_name

CHATML_USER_HI = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
)


def _tokenizer(folder: Path, **options: object):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), **options)


def test_the_tokenizer_has_the_special_tokens_and_template_of_the_gguf(
    smollm2_gguf, smollm2_tokenizer_dir
) -> None:
    metadata = gguf_metadata(smollm2_gguf)
    tokenizer = _tokenizer(smollm2_tokenizer_dir)  # as load_tokenizer built and saved it
    assert len(tokenizer) == 49152
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (
        metadata["tokenizer.ggml.bos_token_id"],
        metadata["tokenizer.ggml.eos_token_id"],
        metadata["tokenizer.ggml.padding_token_id"],
    )
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    )
    assert metadata["tokenizer.ggml.add_bos_token"] is False
    assert tokenizer("Hello world")["input_ids"] == [19556, 905]  # no BOS put first
    assert tokenizer.chat_template == metadata["tokenizer.chat_template"]
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text == CHATML_USER_HI  # the template adds its default system turn


def test_swapped_special_tokens_are_set_back_from_the_metadata(
    smollm2_gguf, smollm2_tokenizer_dir
) -> None:
    tokenizer = _tokenizer(smollm2_tokenizer_dir)
    tokenizer.bos_token, tokenizer.eos_token = "<|im_end|>", "<|im_start|>"  # the known bug
    tokenizer.pad_token = "<|endoftext|>"
    match_gguf_special_tokens(tokenizer, model_name(str(smollm2_gguf), "model.path"))
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    assert tokenizer.eos_token == "<|im_end|>"


def test_a_bos_put_first_against_the_metadata_is_refused(
    smollm2_gguf, smollm2_tokenizer_dir
) -> None:
    tokenizer = _tokenizer(smollm2_tokenizer_dir, add_bos_token=True)
    assert tokenizer("Hello world")["input_ids"][0] == 1
    with pytest.raises(ModelError) as error:
        match_gguf_special_tokens(tokenizer, model_name(str(smollm2_gguf), "model.path"))
    assert str(error.value) == (
        f"model.path: {smollm2_gguf}: its metadata says add_bos_token = False, but the "
        "tokenizer transformers built from it adds BOS"
    )


def test_a_tiny_llama_trains_with_the_real_tokenizer_and_its_chat_template(
    tmp_path, smollm2_tiny_dir, arithmetic_jsonl
) -> None:
    from transformers import AutoModelForCausalLM

    from grpo.config import load_config
    from grpo.training.loop import train

    config = load_config(
        None,
        [
            f"--model.path={smollm2_tiny_dir}",
            f"--data.train_path={arithmetic_jsonl}",
            "--data.chat_template=true",
            '--rewards=[{ function = "grpo.rewards:numeric_answer" }]',
            "--rollout.group_size=2",
            "--rollout.max_new_tokens=4",
            "--train.steps=1",
            "--train.prompts_per_step=2",
            "--train.completions_every=1",
            f"--train.run_dir={tmp_path / 'run'}",
        ],
    )
    result = train(config, verbose=False)
    rows = (result.run_dir / "completions.jsonl").read_text().splitlines()
    prompt = json.loads(rows[0])["prompt"]
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")  # through the template
    final = result.run_dir / "final"
    model = AutoModelForCausalLM.from_pretrained(str(final))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    tokenizer = _tokenizer(final)
    assert (tokenizer.eos_token, tokenizer.pad_token_id) == ("<|im_end|>", 2)
    assert tokenizer.chat_template == _tokenizer(smollm2_tiny_dir).chat_template
