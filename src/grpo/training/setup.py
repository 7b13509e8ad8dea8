"""The set-up stage: everything a run holds for its whole length, built from the config.

This is the edge where the :class:`~grpo.config.Config` is unpacked: the stages after it
take plain values and the small typed containers built here.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from grpo.algo.advantages import AdvantageScale
from grpo.algo.corrections import CorrectionSettings
from grpo.algo.objective import Objective
from grpo.config import AlgorithmConfig, BatchPlan, Config, config_to_dict
from grpo.data.dataset import PromptDataset, load_dataset_for
from grpo.data.difficulty import difficulty_keys
from grpo.data.sampler import PromptSampler
from grpo.eval.evaluate import correctness_reward, held_out_evaluator
from grpo.eval.reasoning import phrase_pattern
from grpo.log.metrics import MetricsLog
from grpo.log.progress import StepProgress, step_progress
from grpo.models.loading import load_policy, load_reference, load_tokenizer
from grpo.models.shared_prompt import sharing_blocker
from grpo.models.value import load_value_model
from grpo.rewards.runner import RewardFunction, accuracy_reward, resolve_reward_functions
from grpo.rollout.engine import SamplingParams, decode_completions
from grpo.training.engines import rollout_engine
from grpo.training.generate import Rollouts, agent_settings
from grpo.training.runtime.checkpoint import checkpoints_dir
from grpo.training.runtime.distributed import Dist
from grpo.training.runtime.optim import Optimization, adamw, build_optimizer
from grpo.training.runtime.resume import resume_point, resume_run
from grpo.training.runtime.sharding import load_optimizer_state, shard_fsdp, wrap_for_training
from grpo.training.update.batch import Reference
from grpo.training.update.critic import Critic


@dataclass
class Learner:
    """What the update stage trains and reads."""

    policy: nn.Module  # generation, evaluation and saving use it
    trained: nn.Module  # forward/backward run on it: DDP, FSDP2 or the policy itself
    optimization: Optimization
    objective: Objective
    reference: Reference
    critic: Critic | None  # PPO's value model; None for GRPO
    sequences_per_micro_batch: int
    lora: bool  # only adapters train; the final save also writes them alone
    share_prompt: bool = True  # groups run their prompt once in the policy/reference passes


@dataclass(frozen=True)
class LoopSettings:
    """The loop's own numbers, unpacked from the config once."""

    steps: int
    prompts_per_step: int
    group_size: int
    max_rounds: int  # generation rounds per step: 1 without dynamic sampling
    advantage_scale: AdvantageScale
    advantage_eps: float
    save_every: int  # 0: only the final save
    keep_checkpoints: int
    eval_every: int  # 0: held-out accuracy only before and after training
    max_consecutive_skips: int
    mask_truncated_completions: bool = False  # truncated rows stay out of the loss


@dataclass
class Run:
    """A run's long-lived parts, built once by :func:`set_up`."""

    settings: LoopSettings
    run_dir: Path
    config_dict: dict[str, Any]  # the resolved config, saved with every checkpoint
    tokenizer: Any
    dataset: PromptDataset
    sampler: PromptSampler
    rollouts: Rollouts
    learner: Learner
    evaluate: Callable[[nn.Module], float] | None  # held-out greedy accuracy
    log: MetricsLog
    open_progress: Callable[[], StepProgress]  # the console display, opened as the loop starts
    start_step: int  # the checkpoint's step when resuming, else 0
    say: Callable[[str], None]  # a console line, on rank 0 when verbose


def set_up(
    config: Config,
    plan: BatchPlan,
    dist: Dist,
    device: torch.device,
    reward_functions: list[RewardFunction] | None,
    verbose: bool,
) -> Run:
    """Seeds, run directory, models, data, rewards, optimizer and engine; then the
    checkpoint's state when resuming. The order of construction is the order of the
    random draws (LoRA and value-head initialisation), so it is part of reproducibility."""
    train_cfg, run_dir = config.train, Path(config.train.run_dir)
    random.seed(train_cfg.seed)
    torch.manual_seed(train_cfg.seed)
    checkpoint_dir = resume_point(run_dir, train_cfg.resume)  # None: start from step 0
    say = partial(_say, verbose and dist.is_main)
    if train_cfg.resume and checkpoint_dir is None:
        say(f"train.resume: no checkpoint in {checkpoints_dir(run_dir)}; starting from step 0")
    config_dict = config_to_dict(config)
    if dist.is_main:  # the resolved config, for the reader of the run directory
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(config_dict, indent=2))
    tokenizer = load_tokenizer(config.model)
    policy, trained, reference = _models(config, dist, device, checkpoint_dir)
    if reward_functions is None:  # the Python API may pass functions directly
        reward_functions = resolve_reward_functions(config.rewards)
    dataset = load_dataset_for(config.data.train_path, tokenizer, config.data)
    if dataset.skipped:
        say(f"grpo: {dataset.describe_skipped()}")
    sampler = _sampler(config, dataset)
    evaluate = _evaluator(config, tokenizer, reward_functions, dist)
    optimization = _optimization(config, trained)
    critic = _critic(config, device) if config.algorithm.estimator == "ppo" else None
    rollouts = _rollouts(config, policy, tokenizer, dataset, reward_functions, dist, device)
    start_step = resume_run(  # 0 without a checkpoint; rewinds what a killed run left
        checkpoint_dir,
        run_dir,
        config_dict,
        live=(
            partial(load_optimizer_state, trained, optimization.optimizer, dist=dist),
            optimization.scheduler,
            sampler,
            rollouts.generator,
        ),
        is_main=dist.is_main,
        say=say,
    )
    if start_step > 0:
        rollouts.engine.sync_weights(policy)  # an external engine starts from the base weights
    learner = Learner(
        policy,
        trained,
        optimization,
        _objective(config),
        reference,
        critic,
        plan.sequences_per_micro_batch,
        config.model.lora_rank > 0,
        train_cfg.share_prompt,
    )
    _describe(config, plan, dist, device, dataset, learner, say)
    purge_step = start_step + 1 if checkpoint_dir is not None else 0  # TensorBoard rewinds
    log = _metrics_log(config, run_dir, enabled=dist.is_main, purge_step=purge_step)
    progress = partial(step_progress, train_cfg, start_step, enabled=verbose and dist.is_main)
    return Run(
        _settings(config, plan),
        run_dir,
        config_dict,
        tokenizer,
        dataset,
        sampler,
        rollouts,
        learner,
        evaluate,
        log,
        progress,
        start_step,
        say,
    )


def _settings(config: Config, plan: BatchPlan) -> LoopSettings:
    algo, train_cfg = config.algorithm, config.train
    return LoopSettings(
        steps=train_cfg.steps,
        prompts_per_step=plan.prompts_per_step,
        group_size=plan.group_size,
        max_rounds=algo.max_generation_rounds if algo.dynamic_sampling else 1,
        advantage_scale=algo.advantage_scale,
        advantage_eps=algo.advantage_eps,
        save_every=train_cfg.save_every,
        keep_checkpoints=train_cfg.keep_checkpoints,
        eval_every=config.eval.every,
        max_consecutive_skips=train_cfg.max_consecutive_skips,
        mask_truncated_completions=algo.mask_truncated_completions,
    )


def _sampler(config: Config, dataset: PromptDataset) -> PromptSampler:
    """The prompt sampler, with difficulty keys when the curriculum pools (a missing
    ``curriculum.pool_column`` is a data error naming the file's columns)."""
    curriculum = config.curriculum
    return PromptSampler(
        len(dataset),
        seed=config.train.seed,
        shuffle=config.data.shuffle,
        curriculum=curriculum,
        keys=difficulty_keys(
            dataset, curriculum.pool_by, curriculum.pool_column, curriculum.length_buckets
        ),
        group_size=config.rollout.group_size,
    )


def _evaluator(
    config: Config, tokenizer: Any, rewards: list[RewardFunction], dist: Dist
) -> Callable[[nn.Module], float] | None:
    """Held-out greedy accuracy on ``eval.path``, or None without one."""
    if not config.eval.path:
        return None
    return held_out_evaluator(
        config.eval.path,
        tokenizer,
        config.data,
        correctness_reward(config.eval.reward, rewards),
        max_new_tokens=config.eval.max_new_tokens or config.rollout.max_new_tokens,
        all_done=dist.all_done if dist.fsdp else None,
        agent=agent_settings(config.agent, tokenizer) if config.agent.enabled else None,
        stop_strings=config.rollout.stop_strings if config.agent.enabled else (),
    )


def _optimization(config: Config, trained: nn.Module) -> Optimization:
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


def _objective(config: Config) -> Objective:
    """The ``[algorithm]`` keys the loss uses (same names), τ and the length cap."""
    settings = {
        field.name: getattr(config.algorithm, field.name)
        for field in dataclasses.fields(Objective)
        if hasattr(config.algorithm, field.name)
    }
    return Objective(
        **settings,
        temperature=config.rollout.temperature,
        max_completion_length=config.rollout.max_new_tokens,
        correction=correction_settings(config.algorithm, config.rollout.engine),
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


def _metrics_log(config: Config, run_dir: Path, *, enabled: bool, purge_step: int) -> MetricsLog:
    train_cfg = config.train
    return MetricsLog(
        run_dir,
        tensorboard=train_cfg.tensorboard,
        enabled=enabled,
        purge_step=purge_step,
        completions_every=train_cfg.completions_every,
        trackers={"wandb": train_cfg.wandb_project, "trackio": train_cfg.trackio_project},
        config=dataclasses.asdict(config),
    )


def _say(enabled: bool, message: str) -> None:
    if enabled:
        print(message, flush=True)


def _models(
    config: Config, dist: Dist, device: torch.device, checkpoint_dir: Path | None
) -> tuple[nn.Module, nn.Module, Reference]:
    """The policy (from the checkpoint when resuming), its training wrapper, π_ref."""
    uses_lora = config.model.lora_rank > 0
    if checkpoint_dir is not None and not uses_lora:
        policy = load_policy(dataclasses.replace(config.model, path=str(checkpoint_dir)), device)
    else:
        adapter_path = str(checkpoint_dir) if checkpoint_dir is not None else None
        policy = load_policy(config.model, device, adapter_path=adapter_path)
    trained = wrap_for_training(policy, dist)
    reference = Reference()
    if config.algorithm.beta > 0:
        if uses_lora:  # the base weights are the reference: no second copy in memory
            reference = Reference(context=policy.disable_adapter)
        else:
            frozen = load_reference(config.model, device)
            reference = Reference(model=shard_fsdp(frozen, dist) if dist.fsdp else frozen)
    return policy, trained, reference


def _critic(config: Config, device: torch.device) -> Critic:
    """PPO's value model and its own AdamW at ``ppo.critic_lr`` (constant)."""
    model = load_value_model(config.model, device)
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


def _rollouts(
    config: Config,
    policy: nn.Module,
    tokenizer: Any,
    dataset: PromptDataset,
    rewards: list[RewardFunction],
    dist: Dist,
    device: torch.device,
) -> Rollouts:
    rollout_cfg = config.rollout
    sampling = SamplingParams(
        temperature=rollout_cfg.temperature,
        top_p=rollout_cfg.top_p,
        top_k=rollout_cfg.top_k,
        max_new_tokens=rollout_cfg.max_new_tokens,
        stop_strings=tuple(rollout_cfg.stop_strings),
    )
    engine = rollout_engine(config, policy, tokenizer, dist)
    accuracy = accuracy_reward(rewards)
    return Rollouts(
        engine=engine,
        sampling=sampling,
        # The same seed in every process: the sampling noise is drawn for the whole step.
        generator=torch.Generator(device=device).manual_seed(config.train.seed),
        dataset=dataset,
        rewards=rewards,
        accuracy_reward=accuracy.name if accuracy is not None else None,
        decode=partial(decode_completions, tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        overlong_buffer=config.algorithm.overlong_buffer,
        overlong_penalty=config.algorithm.overlong_penalty,
        agent=agent_settings(config.agent, tokenizer) if config.agent.enabled else None,
        self_correction=phrase_pattern(config.train.self_correction_phrases),
    )


def _describe(
    config: Config,
    plan: BatchPlan,
    dist: Dist,
    device: torch.device,
    dataset: PromptDataset,
    learner: Learner,
    say: Callable[[str], None],
) -> None:
    trainable = sum(p.numel() for p in learner.policy.parameters() if p.requires_grad)
    beta, uses_lora = config.algorithm.beta, config.model.lora_rank > 0
    reference_kind = "none (β = 0)" if beta == 0 else "LoRA base" if uses_lora else "frozen copy"
    placement = (
        f"{dist.world_size} processes ({config.distributed.strategy})"
        if dist.enabled
        else str(device)
    )
    say(
        f"grpo: {dataset.source}: {len(dataset)} prompts; policy {config.model.path} "
        f"({trainable:,} trainable parameters) on {placement}; reference: {reference_kind}"
    )
    say(f"grpo: {plan.describe()}")
    if learner.share_prompt and (blocker := sharing_blocker(learner.trained)) is not None:
        say(f"grpo: train.share_prompt: each row runs its own prompt here ({blocker})")
