"""Which rollout engine a run samples with: the built-in one on the policy, or vLLM."""

from __future__ import annotations

import atexit
import copy
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from grpo.config import Config, ConfigError, ModelConfig
from grpo.models.loading import eos_token_ids
from grpo.models.names import ModelName, model_name
from grpo.rollout.engine import RolloutEngine
from grpo.rollout.hf_engine import TransformersEngine


def check_engine_available(engine: str) -> None:
    """vLLM needs its package and a GPU: a :class:`ConfigError` before anything loads."""
    if engine != "vllm":
        return
    from grpo.rollout.vllm_engine import import_vllm

    try:
        import_vllm()
    except (ImportError, RuntimeError) as error:
        raise ConfigError(str(error)) from None


def rollout_engine(
    config: Config,
    policy: nn.Module,
    tokenizer: Any,
    all_agree: Callable[[bool], bool] | None = None,
) -> RolloutEngine:
    """rollout.engine: the built-in sampler on the policy itself, or vLLM (GPU).
    ``all_agree`` (FSDP: every process runs every forward) ANDs a flag over processes."""
    eos_ids = eos_token_ids(policy, tokenizer)
    if config.rollout.engine == "vllm":
        device = next(policy.parameters()).device
        return _vllm_engine(config, policy, tokenizer, eos_ids, device)
    return TransformersEngine(
        policy,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_ids,
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        max_sequences_per_batch=config.rollout.max_sequences_per_batch,
        all_done=all_agree,
        compile=config.rollout.compile,
    )


def _vllm_engine(
    config: Config, policy: nn.Module, tokenizer: Any, eos_ids: set[int], device: torch.device
) -> RolloutEngine:
    """vLLM on the ``rollout.vllm_*`` keys; ``max_model_len`` 0: room for a whole trajectory.
    A model from a ``.gguf`` file starts from random weights and the policy's are synced in
    at once (:func:`vllm_sources`)."""
    from grpo.rollout.vllm_engine import VLLMEngine, context_length

    model, rollout, agent = config.model, config.rollout, config.agent
    max_model_len = rollout.vllm_max_model_len or context_length(
        config.data.max_prompt_tokens,
        rollout.max_new_tokens,
        max_turns=agent.max_turns if agent.enabled else None,
        max_tool_response_tokens=agent.max_tool_response_tokens,
    )
    sources = vllm_sources(model, policy, tokenizer)
    engine = VLLMEngine(
        **sources,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_ids,
        device=device,
        dtype=model.dtype,
        gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
        max_model_len=max_model_len,
        sleep=rollout.vllm_sleep,
        enforce_eager=rollout.vllm_enforce_eager,
        seed=config.train.seed,
    )
    if sources["load_format"] == "dummy":
        engine.sync_weights(policy)  # every process: under FSDP the weights are gathered
    return engine


def vllm_sources(model: ModelConfig, policy: nn.Module, tokenizer: Any) -> dict[str, Any]:
    """Where vLLM loads the model and tokenizer from (``VLLMEngine``'s keywords): a folder
    or a Hub id (and its revision) as named; for a ``.gguf`` file, :func:`gguf_stand_in` with
    random weights (``load_format = "dummy"``), the policy's to be synced in."""
    weights = model_name(model.path, "model.path")
    vocabulary = weights
    if model.tokenizer_path:
        vocabulary = model_name(model.tokenizer_path, "model.tokenizer_path")
    stand_in = gguf_stand_in(policy, tokenizer) if "gguf" in (weights.kind, vocabulary.kind) else ""

    def place(name: ModelName) -> tuple[str, str | None]:
        return (stand_in, None) if name.kind == "gguf" else (name.location, name.revision)

    (model_path, revision), (tokenizer_path, tokenizer_revision) = place(weights), place(vocabulary)
    return {
        "model_path": model_path,
        "revision": revision,
        "tokenizer_path": tokenizer_path,
        "tokenizer_revision": tokenizer_revision,
        "load_format": "dummy" if weights.kind == "gguf" else "auto",
    }


def gguf_stand_in(policy: nn.Module, tokenizer: Any) -> str:
    """A folder vLLM can start from in place of a ``.gguf`` file: the policy's config and
    generation config and the tokenizer, no weights (vLLM starts from random ones and the
    policy's are synced in). vLLM would load the file itself quantized, with its own
    tokenizer conversion, and the trained weights could not be synced into it. Removed when
    the process exits."""
    folder = tempfile.mkdtemp(prefix="grpo-vllm-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy  # LoRA
    config = copy.deepcopy(base.config)
    config.architectures = [type(base).__name__.removeprefix("FSDP")]  # FSDP2 renames the class
    config.save_pretrained(folder)
    base.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
