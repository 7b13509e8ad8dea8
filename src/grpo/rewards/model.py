"""Learned reward model: an ``AutoModelForSequenceClassification`` scores each
(prompt, completion) pair.

Configure it as ``function = "grpo.rewards:reward_model"`` with ``options = { path =
"/models/my-rm" }``: a local folder holding the model and its tokenizer, or a Hub id
``org/name[@revision]`` (:mod:`grpo.models.names`; checked at start-up). The model is
loaded once per (path, device, dtype) and cached for the run; it is frozen
(``requires_grad_(False)``), in eval mode, and run under ``torch.inference_mode()``.

Text given to the model: with its tokenizer's chat template (when it has one and
``chat_template`` is true), a user turn holding the prompt and an assistant turn holding
the completion; otherwise prompt + completion as they are. The prompts the trainer passes
are already formatted with the *policy's* chat template when ``data.chat_template`` is on;
then point ``prompt_column`` at a column with the raw prompt text, or set
``chat_template = false``. Inputs longer than ``max_length`` tokens lose their beginning
(the score is read at the end).

Score: the logit, for a one-label model (the usual reward model); with several labels,
the logit or probability (``output``) of label ``label`` (default: the last).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from grpo.models.names import check_model_name, model_name


@dataclass
class LoadedRewardModel:
    model: Any
    tokenizer: Any
    device: torch.device
    lock: threading.Lock = field(default_factory=threading.Lock)  # one forward at a time


_CACHE: dict[tuple[str, str, str], LoadedRewardModel] = {}
_CACHE_LOCK = threading.Lock()
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_reward_model(
    path: str, *, device: str = "auto", dtype: str = "float32"
) -> LoadedRewardModel:
    """The model and tokenizer in ``path``, loaded on first use and cached after."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, not {dtype!r}")
    key = (str(path), device, dtype)
    with _CACHE_LOCK:  # held while loading: two threads must not load the same model twice
        if key not in _CACHE:
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            name = model_name(str(path), "reward_model: path")
            if name.kind == "gguf":  # says why a .gguf file cannot be one
                check_model_name(name, "sequence_classifier")
            where, options = name.pretrained()
            tokenizer = AutoTokenizer.from_pretrained(where, **options)
            model = AutoModelForSequenceClassification.from_pretrained(
                where, dtype=_DTYPES[dtype], **options
            )
            if tokenizer.pad_token is None:  # batches need padding; many causal LMs lack a pad
                tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
            if tokenizer.pad_token is None:
                raise ValueError(f"reward model {path}: the tokenizer has no pad, eos or unk token")
            tokenizer.padding_side = "right"
            tokenizer.truncation_side = "left"  # keep the end, where the score is read
            # Sequence classifiers read the score at the last non-pad token, found by this id.
            model.config.pad_token_id = tokenizer.pad_token_id
            target = _device(device)
            model.to(target).eval().requires_grad_(False)
            _CACHE[key] = LoadedRewardModel(model=model, tokenizer=tokenizer, device=target)
        return _CACHE[key]


def _texts(
    loaded: LoadedRewardModel, prompts: list[str], completions: list[str], chat_template: bool
) -> tuple[list[str], bool]:
    """The model's input texts, and whether they already hold the special tokens."""
    tokenizer = loaded.tokenizer
    if chat_template and getattr(tokenizer, "chat_template", None):
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}],
                tokenize=False,
            )
            for prompt, completion in zip(prompts, completions, strict=True)
        ]
        return texts, True
    return [
        prompt + completion for prompt, completion in zip(prompts, completions, strict=True)
    ], False


def reward_model(
    prompts: list[str],
    completions: list[str],
    *,
    path: str,
    batch_size: int = 16,
    max_length: int = 1024,
    device: str = "auto",
    dtype: str = "float32",
    chat_template: bool = True,
    prompt_column: str | None = None,
    label: int = -1,
    output: Literal["logit", "probability"] = "logit",
    **columns: Any,
) -> list[float]:
    """The reward model's score for each (prompt, completion), computed ``batch_size`` at a time."""
    loaded = load_reward_model(path, device=device, dtype=dtype)
    if prompt_column is not None:
        if prompt_column not in columns:
            raise ValueError(
                f"reward_model: no column {prompt_column!r}; columns: {sorted(columns)}"
            )
        prompts = [str(value) for value in columns[prompt_column]]
    texts, templated = _texts(loaded, prompts, completions, chat_template)
    scores: list[float] = []
    with loaded.lock, torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = loaded.tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=True,
                max_length=max_length,
                add_special_tokens=not templated,  # a chat template adds its own
                return_tensors="pt",
            ).to(loaded.device)
            logits = loaded.model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).logits.float()
            if logits.shape[-1] == 1:
                values = logits[:, 0]
            elif output == "probability":
                values = logits.softmax(dim=-1)[:, label]
            else:
                values = logits[:, label]
            scores.extend(values.cpu().tolist())
    return scores
