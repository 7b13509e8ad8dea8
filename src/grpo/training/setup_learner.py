"""Set-up of the learner's side: the policy, its training wrapper and π_ref, the optimizer,
the objective's settings and PPO's critic, each from its config section."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from grpo.algo.corrections import CorrectionSettings
from grpo.algo.objective import Objective
from grpo.algo.off_policy import resolve_off_policy
from grpo.config import AlgorithmConfig, Config, ConfigError
from grpo.models.loading import load_policy, load_reference, trainable_spec
from grpo.models.logprobs import compile_training_passes
from grpo.models.names import model_name
from grpo.models.value import load_value_model
from grpo.runtime.distributed import Dist
from grpo.runtime.optim import Optimization, adamw, build_optimizer
from grpo.runtime.sharding import shard_fsdp, wrap_for_training
from grpo.training.update.critic import Critic
from grpo.training.update.policy import Reference


def build_models(
    config: Config, dist: Dist, device: torch.device, checkpoint_dir: Path | None
) -> tuple[nn.Module, nn.Module, Reference]:
    """The policy (from the checkpoint when resuming), its training wrapper, π_ref."""
    model = config.model
    uses_lora = model.lora_rank > 0
    resumed = str(checkpoint_dir) if checkpoint_dir is not None else None
    policy = load_policy(
        # A full fine-tune resumes from the checkpoint's weights, LoRA from its adapter.
        resumed if resumed is not None and not uses_lora else model.path,
        device,
        trainable_spec(model),
        adapter_path=resumed if uses_lora else None,
    )
    frozen = None
    if config.algorithm.beta > 0 and not uses_lora and resumed is None and _is_gguf(model.path):
        # π_ref copied from the policy just dequantized, not dequantized again; copied before
        # wrapping, so that neither DDP's hooks nor FSDP's shards come with it.
        frozen = load_reference(model.path, device, dtype=model.dtype, policy=policy)
    trained = wrap_for_training(policy, dist)
    reference = Reference()
    if config.algorithm.beta > 0:
        if uses_lora:  # the base weights are the reference: no second copy in memory
            reference = Reference(context=policy.disable_adapter)
        else:
            if frozen is None:
                frozen = load_reference(model.path, device, dtype=model.dtype)
            reference = Reference(model=shard_fsdp(frozen, dist) if dist.fsdp else frozen)
    if config.train.compile:
        for passes in (trained, reference.model):
            if passes is not None and not compile_training_passes(passes):
                raise ConfigError(
                    "train.compile: this model's training passes take the full-logits path "
                    "(DDP, FSDP or scaled logits), which is not compiled; set it to false"
                )
    return policy, trained, reference


def _is_gguf(path: str) -> bool:
    return model_name(path, "model.path").kind == "gguf"


def build_optimization(config: Config, trained: nn.Module) -> Optimization:
    optim = config.optim
    return build_optimizer(
        trained,
        lr=optim.lr,
        betas=(optim.beta1, optim.beta2),
        weight_decay=optim.weight_decay,
        schedule=optim.schedule,
        warmup_steps=optim.warmup_steps,
        total_steps=config.train.steps * config.algorithm.inner_iterations,
        max_grad_norm=optim.max_grad_norm,
        fused=optim.fused,
    )


def build_objective(config: Config) -> Objective:
    """The ``[algorithm]`` keys the loss uses (same names), τ and the length cap; the
    off-policy mode with ``"auto"`` resolved from ``rollout.mode`` and ``max_staleness``."""
    settings = {
        field.name: getattr(config.algorithm, field.name)
        for field in dataclasses.fields(Objective)
        if hasattr(config.algorithm, field.name)
    }
    rollout = config.rollout
    settings["off_policy"] = resolve_off_policy(
        config.algorithm.off_policy, rollout.mode, rollout.max_staleness
    )
    return Objective(
        **settings,
        temperature=rollout.temperature,
        max_completion_length=rollout.max_new_tokens,
        correction=correction_settings(config.algorithm, rollout.engine),
    )


def correction_settings(algorithm: AlgorithmConfig, engine: str) -> CorrectionSettings:
    """The ``algorithm.sampler_*`` keys; ``"auto"`` is TIS for an external engine (vLLM,
    whose kernels and precision differ from the trainer's) and none for the built-in engine,
    which samples from the policy itself."""
    mode = algorithm.sampler_correction
    if mode == "auto":
        mode = "none" if engine == "transformers" else "tis"
    return CorrectionSettings(
        mode=mode,
        is_cap=algorithm.sampler_is_cap,
        mask_low=algorithm.sampler_mask_low,
        mask_high=algorithm.sampler_mask_high,
        geo_low=algorithm.sampler_geo_low,
        geo_high=algorithm.sampler_geo_high,
    )


def build_critic(config: Config, device: torch.device) -> Critic:
    """PPO's value model and its own AdamW at ``ppo.critic_lr`` (constant)."""
    model = load_value_model(config.model.path, device, trainable_spec(config.model))
    optimizer = adamw(
        [p for p in model.parameters() if p.requires_grad],
        lr=config.ppo.critic_lr,
        betas=(config.optim.beta1, config.optim.beta2),
        weight_decay=config.optim.weight_decay,
        fused=config.optim.fused,
    )
    ppo = config.ppo
    return Critic(
        model,
        optimizer,
        ppo.gamma,
        ppo.lam,
        ppo.value_clip,
        ppo.whiten_advantages,
        config.optim.max_grad_norm,
    )
