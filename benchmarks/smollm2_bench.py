"""What the real-model benchmarks share: SmolLM2-135M-Instruct as a plain folder both trainers
load, its shape for FLOP counts, the demo's questions as chat-templated prompts, and a reward
that varies within every group.

The weights come from the GGUF file the demo fetches (``grpo.demo.smollm2``), dequantized by
grpo's own loader (``model.path`` = the ``.gguf``) and saved with the tokenizer as one folder,
so TRL (which takes a folder) and grpo read the same float32 tensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# SmolLM2-135M: a Llama with grouped-query attention (9 heads, 3 KV heads of width 64) and
# tied embeddings.
SMOLLM2_SHAPE = {"hidden": 576, "intermediate": 1536, "layers": 30, "heads": 9, "kv_heads": 3}
SMOLLM2_VOCAB = 49152


def smollm2_model_dir(directory: Path, dtype: str = "float32") -> Path:
    """SmolLM2-135M-Instruct in ``directory`` (``save_pretrained``: weights in ``dtype``,
    config, tokenizer with its chat template), from the GGUF through grpo's loader; returns
    ``directory``."""
    import torch

    from grpo.demo.smollm2 import fetch_smollm2_gguf
    from grpo.models.loading import load_reference, load_tokenizer

    gguf = str(fetch_smollm2_gguf())
    if not (directory / "config.json").is_file():
        model = load_reference(gguf, torch.device("cpu"), dtype=dtype)
        model.save_pretrained(str(directory), safe_serialization=True)
        load_tokenizer(gguf).save_pretrained(str(directory))
    return directory


def chat_prompt_rows(tokenizer: Any, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """``rows`` with each prompt put in the chat template as text (the template's default
    system turn and the assistant header included), so both trainers see the same ids
    without templating it themselves."""
    return [
        {
            **row,
            "prompt": tokenizer.apply_chat_template(
                [{"role": "user", "content": row["prompt"]}],
                add_generation_prompt=True,
                tokenize=False,
            ),
        }
        for row in rows
    ]


def write_smollm2_prompts(path: Path, model_dir: Path, count: int) -> float:
    """``count`` of the demo's training questions, chat-templated, as JSONL rows
    ``{"prompt": ...}`` at ``path``; returns their mean length in tokens."""
    from transformers import AutoTokenizer

    from grpo.demo.smollm2_task import make_smollm2_splits

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    rows = chat_prompt_rows(tokenizer, make_smollm2_splits()[0][:count])
    path.write_text("".join(json.dumps({"prompt": row["prompt"]}) + "\n" for row in rows))
    lengths = [len(tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]) for row in rows]
    return sum(lengths) / len(lengths)


def digit_share(completions: list[str]) -> list[float]:
    """Share of a completion's characters that are digits: continuous, and different within
    nearly every group, so no group is skipped for zero variance by either trainer."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]
