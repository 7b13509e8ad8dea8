"""The real pretrained model, SmolLM2-135M-Instruct from its GGUF: it loads as a plain tied
Llama that answers, trains a GRPO step, saves a plain folder that loads where gguf is not
installed, and ``grpo eval`` runs on that folder. Slow: the file is dequantized (tens of
seconds) and 135 M parameters train on a CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

JOB_TIMEOUT_S = 600  # generous: the CPU cores are shared
# Run before anything else in a child process: `import gguf` then fails, as where the gguf
# extra is not installed.
WITHOUT_GGUF = "import sys; sys.modules['gguf'] = None\n"


def test_the_real_model_loads_as_a_plain_tied_llama_that_answers(
    smollm2_gguf, smollm2_tokenizer_dir
) -> None:
    from transformers import AutoTokenizer

    from grpo.models.loading import load_reference

    model = load_reference(str(smollm2_gguf), torch.device("cpu"), dtype="float32")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    config = model.config
    shape = (config.num_hidden_layers, config.hidden_size, config.num_attention_heads)
    assert (*shape, config.num_key_value_heads, config.vocab_size) == (30, 576, 9, 3, 49152)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # one tensor, tied
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert getattr(model, "hf_quantizer", None) is None
    assert getattr(config, "quantization_config", None) is None
    assert (model.generation_config.eos_token_id, model.generation_config.pad_token_id) == (2, 2)
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_dir))
    question = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(
        question, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :])
    assert "Paris" in answer and answer.endswith("<|im_end|>"), answer


def _child(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_GGUF + script, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=JOB_TIMEOUT_S,
    )


# One child (an interpreter and its imports cost seconds): the folder reloads, then
# `grpo eval` runs on it.
RELOAD_THEN_EVAL = """
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
print("reloaded", json.dumps({
    "tied": model.lm_head.weight is model.model.embed_tokens.weight,
    "dtypes": sorted({str(p.dtype) for p in model.parameters()}),
    "tokens": [tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token],
    "ids": [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id],
    "template": bool(tokenizer.chat_template),
    "generation_eos": model.generation_config.eos_token_id,
}), flush=True)
from grpo.cli.main import main
raise SystemExit(main(sys.argv[2:]))
"""


def test_one_grpo_step_then_a_plain_folder_that_loads_and_evaluates_without_gguf(
    tmp_path, smollm2_gguf, monkeypatch
) -> None:
    from safetensors.torch import load_file

    from grpo.cli.common import check_model_names
    from grpo.config import load_config
    from grpo.models import loading
    from grpo.training.loop import train

    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))  # converted afresh here
    dequantized = []
    real = loading.dequantized_gguf
    monkeypatch.setattr(loading, "dequantized_gguf", lambda *a: dequantized.append(a) or real(*a))
    rows = [
        {"prompt": f"What is {a} + {b}? Answer with the number.", "answer": str(a + b)}
        for a, b in ((2, 3), (4, 4))
    ]
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = load_config(
        None,
        [
            f"--model.path={smollm2_gguf}",
            "--model.dtype=bfloat16",
            f"--data.train_path={data}",
            "--data.chat_template=true",
            '--rewards=[{ function = "grpo.rewards:numeric_answer" }]',
            *("--rollout.group_size=2", "--rollout.max_new_tokens=8", "--rollout.temperature=1.0"),
            *("--algorithm.beta=0.04", "--optim.lr=1e-5"),
            *(
                "--train.steps=1",
                "--train.prompts_per_step=2",
                f"--train.run_dir={tmp_path / 'run'}",
            ),
        ],
    )
    check_model_names(config)  # what grpo train checks first passes on the real file
    result = train(config, verbose=False)
    assert len(dequantized) == 1  # π_ref was copied from the fresh policy, not dequantized again
    again = loading.load_reference(str(smollm2_gguf), torch.device("cpu"), dtype="bfloat16")
    assert len(dequantized) == 1  # later loads read the folder the first one converted
    assert again.lm_head.weight is again.model.embed_tokens.weight
    assert again.generation_config.eos_token_id == 2
    converted = list((tmp_path / "cache" / "gguf").glob("*/bfloat16/model.safetensors"))
    assert len(converted) == 1, "the weights were converted once, in bfloat16"
    assert [row["step"] for row in result.history] == [1]
    final = result.final_dir
    saved = json.loads((final / "config.json").read_text())
    assert "quantization_config" not in saved and saved["architectures"] == ["LlamaForCausalLM"]
    weights = load_file(final / "model.safetensors")
    assert "lm_head.weight" not in weights  # tied: saved once
    trained = result.model.state_dict()
    assert all(torch.equal(tensor, trained[name]) for name, tensor in weights.items())
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}

    report = tmp_path / "eval.json"
    child = _child(
        RELOAD_THEN_EVAL,
        str(final),
        *("eval", str(final), str(data), "--max-new-tokens", "8", "--json", str(report)),
        "--data.chat_template=true",
        cwd=tmp_path,
    )
    assert child.returncode == 0, child.stderr
    reloaded = next(line for line in child.stdout.splitlines() if line.startswith("reloaded "))
    assert json.loads(reloaded.removeprefix("reloaded ")) == {
        "tied": True,
        "dtypes": ["torch.bfloat16"],
        "tokens": ["<|im_start|>", "<|im_end|>", "<|im_end|>"],
        "ids": [1, 2, 2],
        "template": True,
        "generation_eos": 2,
    }
    assert json.loads(report.read_text())["prompts"] == 2
