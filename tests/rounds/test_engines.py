"""What vLLM is told to load for each kind of model name (no vLLM needed: the arguments only)."""

from __future__ import annotations

import json
from pathlib import Path

from grpo.config import ModelConfig
from grpo.rounds.engines import vllm_sources


def _tiny(tiny_model_dir: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    return policy, AutoTokenizer.from_pretrained(str(tiny_model_dir))


def test_folders_and_hub_ids_go_to_vllm_as_named(tiny_model_dir) -> None:
    policy, tokenizer = _tiny(tiny_model_dir)
    folder = vllm_sources(ModelConfig(path=str(tiny_model_dir)), policy, tokenizer)
    assert folder == {
        "model_path": str(tiny_model_dir),
        "revision": None,
        "tokenizer_path": str(tiny_model_dir),
        "tokenizer_revision": None,
        "load_format": "auto",
    }
    hub = vllm_sources(
        ModelConfig(path="acme/tiny@v1", tokenizer_path="acme/tok"), policy, tokenizer
    )
    assert hub == {
        "model_path": "acme/tiny",
        "revision": "v1",
        "tokenizer_path": "acme/tok",
        "tokenizer_revision": None,
        "load_format": "auto",
    }


def test_a_gguf_goes_to_vllm_as_a_stand_in_folder_without_weights(tmp_path, tiny_model_dir) -> None:
    from transformers import AutoTokenizer

    policy, tokenizer = _tiny(tiny_model_dir)
    policy.config.architectures = None  # as transformers leaves a model loaded from a GGUF
    sources = vllm_sources(ModelConfig(path=str(tmp_path / "m.gguf")), policy, tokenizer)
    stand_in = Path(sources["model_path"])
    assert sources == {
        "model_path": str(stand_in),
        "revision": None,
        "tokenizer_path": str(stand_in),
        "tokenizer_revision": None,
        "load_format": "dummy",  # random weights, the policy's synced in
    }
    config = json.loads((stand_in / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert not list(stand_in.glob("*.safetensors"))
    assert AutoTokenizer.from_pretrained(str(stand_in)).get_vocab() == tokenizer.get_vocab()
