"""Which rollout engine a run samples with: the built-in one on the policy, or vLLM."""

from __future__ import annotations

from typing import Any

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
        from grpo.rollout.vllm_engine import VLLMEngine

        device = next(policy.parameters()).device
        return VLLMEngine.from_config(config, tokenizer, eos_ids, device)
    return TransformersEngine(
        policy,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_ids,
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        max_sequences_per_batch=config.rollout.max_sequences_per_batch,
        all_done=dist.all_done if dist.fsdp else None,
    )
