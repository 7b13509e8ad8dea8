"""The set-up stage: everything a run holds for its whole length, built from the config.

This is the edge where the :class:`~grpo.config.Config` is unpacked: the stages after it
take plain values and the small typed containers built here.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from grpo.config import BatchPlan, Config, CurriculumConfig, DataConfig, config_to_dict
from grpo.data.dataset import PromptDataset, load_dataset_for
from grpo.data.difficulty import difficulty_keys
from grpo.data.sampler import CurriculumSettings, PromptSampler
from grpo.eval.evaluate import correctness_reward, greedy_accuracy
from grpo.log.metrics import MetricsLog
from grpo.log.progress import StepProgress, step_progress
from grpo.models.loading import load_tokenizer
from grpo.models.shared_prompt import sharing_blocker
from grpo.rewards.resolve import resolve_reward_functions
from grpo.rewards.runner import RewardFunction
from grpo.rounds.build import agent_settings, build_round_maker
from grpo.rounds.source import RoundMaker, RoundSource, SyncRounds
from grpo.rounds.workers.start import start_async_rounds
from grpo.runtime.checkpoint import checkpoints_dir, read_extra
from grpo.runtime.distributed import Dist
from grpo.runtime.optim import Optimization
from grpo.runtime.resume import resume_point, resume_run
from grpo.runtime.sharding import load_optimizer_state
from grpo.training.setup_learner import (
    build_critic,
    build_models,
    build_objective,
    build_optimization,
)
from grpo.training.state import Learner, LoopSettings, Run


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
    say = partial(_say, verbose and dist.is_main)
    checkpoint_dir = _checkpoint_to_resume(run_dir, train_cfg.resume, say)
    config_dict = _write_config(config, run_dir, dist.is_main)
    tokenizer = load_tokenizer(config.model.path, tokenizer_path=config.model.tokenizer_path)
    policy, trained, reference = build_models(config, dist, device, checkpoint_dir)
    rewards = reward_functions  # the Python API may pass functions directly
    if rewards is None:
        rewards = resolve_reward_functions(config.rewards, config.train.import_dirs)
    dataset = _training_set(config.data, tokenizer, say, agent=config.agent.enabled)
    sampler = _sampler(config, dataset)
    evaluate = _evaluator(config, tokenizer, rewards, dist)
    optimization = build_optimization(config, trained)
    critic = build_critic(config, device) if config.algorithm.estimator == "ppo" else None
    all_agree = dist.all_agree if dist.fsdp else None  # FSDP: processes decode in lockstep
    maker = build_round_maker(config, policy, tokenizer, dataset, rewards, device, all_agree)
    start_step = _resume(
        checkpoint_dir, run_dir, config_dict, trained, optimization, sampler, maker, dist, say
    )
    if start_step > 0:
        maker.engine.sync_weights(policy)  # an external engine starts from the base weights
    learner = Learner(
        policy,
        trained,
        optimization,
        build_objective(config),
        reference,
        critic,
        plan.sequences_per_micro_batch,
        config.model.lora_rank > 0,
        train_cfg.share_prompt,
    )
    _describe(config, plan, dist, device, dataset, learner, say)
    purge_step = start_step + 1 if checkpoint_dir is not None else 0  # TensorBoard rewinds
    log = _metrics_log(config, run_dir, enabled=dist.is_main, purge_step=purge_step)
    settings = _settings(config, plan)
    resumed = {}
    if checkpoint_dir is not None and start_step > 0:  # the async rounds in flight
        resumed = read_extra(checkpoint_dir).get("async", {})
    source = _round_source(
        config, settings, maker, sampler, policy, dist, reward_functions, start_step, resumed, say
    )  # last: asynchronous workers start here, and nothing after it can fail
    return Run(
        settings,
        run_dir,
        config_dict,
        tokenizer,
        dataset,
        sampler,
        maker,
        learner,
        evaluate,
        log,
        _progress(config, start_step, shown=verbose and dist.is_main),
        start_step,
        say,
        source,
    )


def _round_source(
    config: Config,
    settings: LoopSettings,
    maker: RoundMaker,
    sampler: PromptSampler,
    policy: nn.Module,
    dist: Dist,
    reward_functions: list[RewardFunction] | None,
    start_step: int,
    resumed: dict[str, object],
    say: Callable[[str], None],
) -> RoundSource:
    """Rounds sampled on the learner's engine when asked (``rollout.mode = "sync"``), or by
    rollout workers ahead of the learner, resuming the checkpoint's rounds in flight
    (``resumed``). ``reward_functions``: the Python API's, else None (a worker resolves
    the config's itself)."""
    if config.rollout.mode != "async":
        return SyncRounds(
            maker,
            sampler,
            dist,
            prompts_per_step=settings.prompts_per_step,
            group_size=settings.group_size,
            max_rounds=settings.max_rounds,
        )
    return start_async_rounds(
        config,
        maker,
        sampler,
        policy,
        dist,
        reward_functions=reward_functions,
        prompts_per_step=settings.prompts_per_step,
        group_size=settings.group_size,
        max_rounds=settings.max_rounds,
        start_step=start_step,
        resumed=resumed,
        say=say,
    )


def _checkpoint_to_resume(run_dir: Path, resume: bool, say: Callable[[str], None]) -> Path | None:
    """The checkpoint ``train.resume`` continues from; None starts from step 0."""
    checkpoint_dir = resume_point(run_dir, resume)
    if resume and checkpoint_dir is None:
        say(f"train.resume: no checkpoint in {checkpoints_dir(run_dir)}; starting from step 0")
    return checkpoint_dir


def _training_set(
    data: DataConfig, tokenizer: Any, say: Callable[[str], None], *, agent: bool
) -> PromptDataset:
    """``data.train_path``'s prompts; the rows ``data.skip_bad_rows`` left out are said."""
    dataset = load_dataset_for(data.train_path, tokenizer, data, agent=agent)
    if dataset.skipped:
        say(f"grpo: {dataset.describe_skipped()}")
    return dataset


def _resume(
    checkpoint_dir: Path | None,
    run_dir: Path,
    config_dict: dict[str, Any],
    trained: nn.Module,
    optimization: Optimization,
    sampler: PromptSampler,
    maker: RoundMaker,
    dist: Dist,
    say: Callable[[str], None],
) -> int:
    """The checkpoint's step after loading its state into the live parts (0 without one);
    rewinds what a killed run wrote past it."""
    return resume_run(
        checkpoint_dir,
        run_dir,
        config_dict,
        live=(
            partial(load_optimizer_state, trained, optimization.optimizer, dist=dist),
            optimization.scheduler,
            sampler,
            maker.generator,
        ),
        is_main=dist.is_main,
        say=say,
    )


def _write_config(config: Config, run_dir: Path, is_main: bool) -> dict[str, Any]:
    """The resolved config, for checkpoints and (in RUN_DIR/config.json) the reader."""
    config_dict = config_to_dict(config)
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(config_dict, indent=2))
    return config_dict


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
        compile=train_cfg.compile,
    )


def _sampler(config: Config, dataset: PromptDataset) -> PromptSampler:
    """The prompt sampler, with difficulty keys when the curriculum pools (a missing
    ``curriculum.pool_column`` is a data error naming the file's columns)."""
    curriculum = config.curriculum
    return PromptSampler(
        len(dataset),
        seed=config.train.seed,
        shuffle=config.data.shuffle,
        curriculum=_curriculum_settings(curriculum),
        keys=difficulty_keys(
            dataset, curriculum.pool_by, curriculum.pool_column, curriculum.length_buckets
        ),
        group_size=config.rollout.group_size,
    )


def _curriculum_settings(curriculum: CurriculumConfig) -> CurriculumSettings:
    """The ``[curriculum]`` keys the sampler draws by (same names)."""
    names = [field.name for field in dataclasses.fields(CurriculumSettings)]
    return CurriculumSettings(**{name: getattr(curriculum, name) for name in names})


def _evaluator(
    config: Config, tokenizer: Any, rewards: list[RewardFunction], dist: Dist
) -> Callable[[nn.Module], float] | None:
    """Held-out greedy accuracy on ``eval.path``, formatted as ``[data]`` says, or None
    without one."""
    if not config.eval.path:
        return None
    reward = correctness_reward(config.eval.reward, rewards, config.agent, config.train.import_dirs)
    agent = None
    if config.agent.enabled:
        dirs = config.train.import_dirs
        agent = agent_settings(config.agent, tokenizer, config.data, import_dirs=dirs)
    return partial(
        greedy_accuracy,
        tokenizer=tokenizer,
        dataset=load_dataset_for(
            config.eval.path,
            tokenizer,
            config.data,
            agent=config.agent.enabled,
            split=config.eval.split,
        ),
        reward=reward,
        max_new_tokens=config.eval.max_new_tokens or config.rollout.max_new_tokens,
        all_done=dist.all_agree if dist.fsdp else None,
        agent=agent,
        stop_strings=config.rollout.stop_strings if config.agent.enabled else (),
    )


def _progress(config: Config, start_step: int, *, shown: bool) -> Callable[[], StepProgress]:
    """The console display, opened as the loop starts (whether stdout is a terminal is
    asked then); ``shown`` is false off rank 0 or when not verbose."""
    train_cfg = config.train
    return partial(
        step_progress,
        total_steps=train_cfg.steps,
        start_step=start_step,
        log_every=train_cfg.log_every,
        enabled=shown and train_cfg.progress,
        quiet=train_cfg.quiet,
    )


def _metrics_log(config: Config, run_dir: Path, *, enabled: bool, purge_step: int) -> MetricsLog:
    train_cfg = config.train
    return MetricsLog(
        run_dir,
        tensorboard=train_cfg.tensorboard,
        enabled=enabled,
        purge_step=purge_step,
        completions_every=train_cfg.completions_every,
        token_ids=train_cfg.log_token_ids,
        trackers={"wandb": train_cfg.wandb_project, "trackio": train_cfg.trackio_project},
        config=dataclasses.asdict(config),
    )


def _say(enabled: bool, message: str) -> None:
    if enabled:
        print(message, flush=True)


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
