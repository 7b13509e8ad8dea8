"""Which rollout engine a run samples with: the built-in one on the policy, or vLLM."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from grpo.config import Config, ConfigError
from grpo.models.loading import eos_token_ids
from grpo.rollout.engine import RolloutEngine
from grpo.rollout.hf_engine import TransformersEngine
from grpo.training.runtime.distributed import Dist


def check_engine_available(engine: str) -> None:
    """vLLM needs its package and a GPU: a :class:`ConfigError` before anything loads."""
    if engine != "vllm":
        return
    from grpo.rollout.vllm_engine import import_vllm

    try:
        import_vllm()
    except (ImportError, RuntimeError) as error:
        raise ConfigError(str(error)) from None


def rollout_engine(config: Config, policy: nn.Module, tokenizer: Any, dist: Dist) -> RolloutEngine:
    """rollout.engine: the built-in sampler on the policy itself, or vLLM (GPU)."""
    eos_ids = eos_token_ids(policy, tokenizer)
    if config.rollout.engine == "vllm":
        device = next(policy.parameters()).device
        return _vllm_engine(config, tokenizer.pad_token_id, eos_ids, device)
    return TransformersEngine(
        policy,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_ids,
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        max_sequences_per_batch=config.rollout.max_sequences_per_batch,
        all_done=dist.all_done if dist.fsdp else None,
        compile=config.rollout.compile,
    )


def _vllm_engine(
    config: Config, pad_token_id: int, eos_ids: set[int], device: torch.device
) -> RolloutEngine:
    """vLLM on the ``rollout.vllm_*`` keys; ``max_model_len`` 0: room for a whole trajectory."""
    from grpo.rollout.vllm_engine import VLLMEngine, context_length

    model, rollout, agent = config.model, config.rollout, config.agent
    max_model_len = rollout.vllm_max_model_len or context_length(
        config.data.max_prompt_tokens,
        rollout.max_new_tokens,
        max_turns=agent.max_turns if agent.enabled else None,
        max_tool_response_tokens=agent.max_tool_response_tokens,
    )
    return VLLMEngine(
        model.path,
        tokenizer_path=model.tokenizer_path or model.path,
        pad_token_id=pad_token_id,
        eos_token_ids=eos_ids,
        device=device,
        dtype=model.dtype,
        gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
        max_model_len=max_model_len,
        sleep=rollout.vllm_sleep,
        enforce_eager=rollout.vllm_enforce_eager,
        seed=config.train.seed,
    )
