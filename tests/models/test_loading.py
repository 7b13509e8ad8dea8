"""Model folders: missing, not a model, not a causal LM → one-line errors naming the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from grpo.models.loading import ModelError, TrainableSpec, load_policy, load_tokenizer


def _policy(path: Path) -> torch.nn.Module:
    spec = TrainableSpec("float32", disable_dropout=True, gradient_checkpointing=False, lora=None)
    return load_policy(str(path), torch.device("cpu"), spec)


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_missing_directory_names_model_path(tmp_path) -> None:
    with pytest.raises(ModelError) as error:
        _policy(tmp_path / "nope")
    assert _one_line(error) == (
        f"model.path: {str(tmp_path / 'nope')!r} is no local model directory "
        "(a model is a local folder, a .gguf file or a Hub id org/name[@revision])"
    )


def test_a_folder_without_a_model_names_model_path(tmp_path) -> None:
    with pytest.raises(ModelError) as error:
        load_tokenizer(str(tmp_path))
    assert _one_line(error).startswith(f"model.path: no loadable tokenizer in {tmp_path} (")
    with pytest.raises(ModelError) as error:
        _policy(tmp_path)
    assert _one_line(error) == (
        f"model.path: {tmp_path} has no config.json: not a Hugging Face model folder"
    )


def test_a_model_that_is_not_a_causal_lm_is_named(tmp_path, tiny_model_dir) -> None:
    from transformers import ViTConfig

    shutil.copytree(tiny_model_dir, tmp_path / "vit")
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
        tmp_path / "vit"
    )  # a vision encoder's config over the tokenizer files
    load_tokenizer(str(tmp_path / "vit"))  # the tokenizer itself is fine
    with pytest.raises(ModelError) as error:
        _policy(tmp_path / "vit")
    assert _one_line(error) == (
        f"model.path: cannot load {tmp_path / 'vit'}: a 'vit' model is not a causal LM "
        "(AutoModelForCausalLM)"
    )


def test_a_missing_tokenizer_directory_names_model_tokenizer_path(tmp_path, tiny_model_dir) -> None:
    with pytest.raises(ModelError) as error:
        load_tokenizer(str(tiny_model_dir), tokenizer_path=str(tmp_path / "nope"))
    assert _one_line(error).startswith(f"model.tokenizer_path: {str(tmp_path / 'nope')!r} is no ")
