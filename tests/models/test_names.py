"""Model names as users write them: a folder, a .gguf file or a Hub id; bad ones are one line
naming the key, and ``grpo train`` stops on them with exit 2 before any model loads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grpo.cli.main import main
from grpo.models.names import ModelError, check_model_name, model_name

FORMS = "(a model is a local folder, a .gguf file or a Hub id org/name[@revision])"


def test_a_folder_a_gguf_file_and_a_hub_id_are_told_apart(tmp_path, tiny_model_dir) -> None:
    folder = model_name(str(tiny_model_dir), "model.path")
    assert (folder.kind, folder.pretrained()) == ("folder", (str(tiny_model_dir), {}))
    gguf = model_name(str(tmp_path / "m" / "SmolLM2.Q4_1.gguf"), "model.path")
    assert gguf.kind == "gguf"
    assert gguf.pretrained() == (str(tmp_path / "m"), {"gguf_file": "SmolLM2.Q4_1.gguf"})
    hub = model_name("HuggingFaceTB/SmolLM2-135M-Instruct", "model.path")
    assert (hub.kind, hub.pretrained()) == ("hub", ("HuggingFaceTB/SmolLM2-135M-Instruct", {}))
    sha = "0123456789abcdef0123456789abcdef01234567"
    pinned = model_name(f"org/model.v2@{sha}", "model.tokenizer_path")
    assert pinned.pretrained() == ("org/model.v2", {"revision": sha})
    assert model_name("org/name@v1.0", "k").revision == "v1.0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "model.tokenizer_path is empty " + FORMS),
        ("gpt2", f"model.tokenizer_path: 'gpt2' is no local model directory {FORMS}"),
        (
            "runs/x/final",
            f"model.tokenizer_path: 'runs/x/final' is no local model directory {FORMS}",
        ),
        ("./org/name", f"model.tokenizer_path: './org/name' is no local model directory {FORMS}"),
        (
            "org/name@",
            f"model.tokenizer_path: 'org/name@': the revision after '@' is empty {FORMS}",
        ),
        ("org/na--me", "model.tokenizer_path: 'org/na--me' is not a valid Hub id: "),
        ("org/name.git", "model.tokenizer_path: 'org/name.git' is not a valid Hub id: "),
    ],
)
def test_a_malformed_name_is_one_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ModelError) as error:
        model_name(text, "model.tokenizer_path")
    assert "\n" not in str(error.value)
    assert str(error.value).startswith(message)


def test_a_file_that_is_not_a_gguf_is_not_taken_for_a_folder(tmp_path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelError, match="is a file, not a model folder"):
        model_name(str(tmp_path / "model.safetensors"), "model.path")


def _write_gguf(path: Path, architecture: str) -> Path:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _config_file(tmp_path: Path, data: Path, *lines: str) -> Path:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[model]\npath = "unset"\n[data]\ntrain_path = "{data}"\n'
        '[[rewards]]\nfunction = "grpo.rewards:numeric_answer"\n' + "\n".join(lines) + "\n"
    )
    return config


def _start(capsys, config: Path, *overrides: str) -> str:
    """``grpo train`` that must stop at start-up: exit 2 and one line on stderr."""
    assert main(["train", str(config), *overrides]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_a_bad_gguf_stops_grpo_train_at_start_up(tmp_path, arithmetic_jsonl, capsys) -> None:
    config = _config_file(tmp_path, arithmetic_jsonl)
    missing = tmp_path / "missing.gguf"
    assert _start(capsys, config, f"--model.path={missing}") == (
        f"grpo train: error: model.path: no .gguf file at {str(missing)!r}"
    )
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_text("these are not GGUF bytes")
    assert _start(capsys, config, f"--model.path={not_gguf}") == (
        f"grpo train: error: model.path: {not_gguf} is not a GGUF file (it does not begin "
        "with the bytes 'GGUF')"
    )
    unknown = _write_gguf(tmp_path / "rwkv.gguf", "rwkv6")  # llama.cpp has it; transformers not
    assert _start(capsys, config, f"--model.path={unknown}") == (
        f"grpo train: error: model.path: transformers cannot dequantize {unknown}: "
        "GGUF model with architecture rwkv6 is not supported yet."
    )


def test_a_model_that_is_not_a_causal_lm_stops_grpo_train_at_start_up(
    tmp_path, tiny_model_dir, arithmetic_jsonl, capsys
) -> None:
    from transformers import ViTConfig

    vit = tmp_path / "vit"
    shutil.copytree(tiny_model_dir, vit)
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(vit)
    config = _config_file(tmp_path, arithmetic_jsonl)
    assert _start(capsys, config, f"--model.path={vit}") == (
        f"grpo train: error: model.path: {vit}: a 'vit' model is not a causal LM "
        "(AutoModelForCausalLM)"
    )
    assert _start(capsys, config, f"--model.path={tmp_path}") == (
        f"grpo train: error: model.path: {tmp_path} has no config.json: not a Hugging Face "
        "model folder"
    )
    assert _start(
        capsys, config, f"--model.path={tiny_model_dir}", "--model.tokenizer_path=a/"
    ) == (f"grpo train: error: model.tokenizer_path: 'a/' is no local model directory {FORMS}")


def test_a_reward_model_is_checked_at_start_up(
    tmp_path, tiny_model_dir, arithmetic_jsonl, capsys
) -> None:
    from transformers import ViTConfig

    vit = tmp_path / "vit"
    vit.mkdir()
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(vit)
    table = '[[rewards]]\nfunction = "grpo.rewards:reward_model"\noptions = {{ path = "{}" }}'
    config = _config_file(tmp_path, arithmetic_jsonl, table.format(vit))
    model = f"--model.path={tiny_model_dir}"
    assert _start(capsys, config, model) == (
        f"grpo train: error: rewards[1].options.path: {vit}: a 'vit' model is not a sequence "
        "classifier (AutoModelForSequenceClassification)"
    )
    gguf = _write_gguf(tmp_path / "rm.gguf", "llama")
    config = _config_file(tmp_path, arithmetic_jsonl, table.format(gguf))
    assert _start(capsys, config, model).startswith(
        f"grpo train: error: rewards[1].options.path: {gguf} is a .gguf file, which holds a "
        "causal LM; a reward model is a Hugging Face folder or Hub id"
    )
    config = _config_file(tmp_path, arithmetic_jsonl, table.replace("path", "paths").format(vit))
    assert _start(capsys, config, model) == (
        "grpo train: error: rewards[1].options.path: grpo.rewards:reward_model needs the "
        "reward model's path"
    )


def test_a_tokenizer_folder_needs_no_config_json(tmp_path, tiny_model_dir) -> None:
    tokenizer_only = tmp_path / "tokenizer"
    tokenizer_only.mkdir()
    for file in tiny_model_dir.glob("tokenizer*"):
        shutil.copy(file, tokenizer_only)
    check_model_name(model_name(str(tokenizer_only), "model.tokenizer_path"), "tokenizer")
