"""train(): the GRPO loop, read top to bottom.

Per step: 1 sample prompts → 2 roll out G completions each → 3 score them → 4 group
advantages, dropping zero-variance groups → 5 policy update (reference log-probs, μ inner
iterations over micro-batches, AdamW) → 6 metrics → 7 checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from grpo.advantages import group_advantages, zero_variance_groups
from grpo.checkpoint import load_trainer_state, restore_rng, save_checkpoint, save_model
from grpo.config import Config, ConfigError, batch_plan, config_to_dict
from grpo.data import PromptSampler, load_prompt_dataset
from grpo.evaluate import greedy_accuracy
from grpo.metrics import MetricsLog, console_line
from grpo.models import eos_token_ids, load_policy, load_reference, load_tokenizer, pick_device
from grpo.rewards.runner import (
    RewardFunction,
    resolve_function,
    resolve_reward_functions,
    score_completions,
)
from grpo.rollout import SamplingParams, TransformersEngine
from grpo.update import TrainBatch, policy_update


@dataclass
class TrainResult:
    run_dir: Path
    final_dir: Path
    history: list[dict[str, float]]
    model: nn.Module
    tokenizer: Any


def lr_lambda(schedule: str, warmup_steps: int, total_steps: int):
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
        return 1.0

    return factor


def decode_completions(tokenizer: Any, ids_BT: torch.Tensor, mask_BT: torch.Tensor) -> list[str]:
    lengths = mask_BT.sum(dim=1).tolist()
    rows = [row[:length] for row, length in zip(ids_BT.tolist(), lengths, strict=True)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def _held_out_evaluator(config: Config, tokenizer: Any, rewards: list[RewardFunction]):
    """A function policy → held-out greedy accuracy, or None when no eval set is configured."""
    if not config.eval.path:
        return None
    if config.eval.reward:
        reward = RewardFunction(name=config.eval.reward, fn=resolve_function(config.eval.reward))
    else:
        accuracy_rewards = [f for f in rewards if getattr(f.fn, "is_accuracy", False)]
        if not accuracy_rewards:
            raise ConfigError(
                "eval.path is set but no reward is an accuracy reward: set eval.reward"
            )
        reward = accuracy_rewards[0]
    dataset = load_prompt_dataset(
        config.eval.path,
        tokenizer,
        prompt_column=config.data.prompt_column,
        max_prompt_tokens=config.data.max_prompt_tokens,
        truncate_long_prompts=config.data.truncate_long_prompts,
        chat_template=config.data.chat_template,
        system_prompt=config.data.system_prompt,
    )
    max_new_tokens = config.eval.max_new_tokens or config.rollout.max_new_tokens

    def evaluate(policy: nn.Module) -> float:
        return greedy_accuracy(policy, tokenizer, dataset, reward, max_new_tokens=max_new_tokens)

    return evaluate


def train(
    config: Config,
    *,
    reward_functions: list[RewardFunction] | None = None,
    verbose: bool = True,
) -> TrainResult:
    """Train ``config.model.path`` with GRPO; returns the run directory and the metrics."""
    # --- 0. Set-up: seeds, run directory, models, data, rewards, optimizer ---------------
    train_cfg, algo, rollout_cfg = config.train, config.algorithm, config.rollout
    random.seed(train_cfg.seed)
    torch.manual_seed(train_cfg.seed)
    device = pick_device(config.model.device)
    run_dir = Path(train_cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_dir = run_dir / "checkpoint"
    resuming = train_cfg.resume and (checkpoint_dir / "trainer_state.pt").exists()
    if train_cfg.resume and not resuming:
        print(f"train.resume: no checkpoint in {checkpoint_dir}; starting from step 0")
    (run_dir / "config.json").write_text(json.dumps(config_to_dict(config), indent=2))

    def say(message: str) -> None:
        if verbose:
            print(message, flush=True)

    tokenizer = load_tokenizer(config.model)
    uses_lora = config.model.lora_rank > 0
    if resuming and not uses_lora:
        policy = load_policy(dataclasses.replace(config.model, path=str(checkpoint_dir)), device)
    else:
        policy = load_policy(
            config.model, device, adapter_path=str(checkpoint_dir) if resuming else None
        )
    reference, reference_context = None, None
    if algo.beta > 0:
        if uses_lora:  # the base weights are the reference: no second copy in memory
            reference_context = policy.disable_adapter
        else:
            reference = load_reference(config.model, device)
    rewards = (
        reward_functions
        if reward_functions is not None
        else resolve_reward_functions(config.rewards)
    )
    dataset = load_prompt_dataset(
        config.data.train_path,
        tokenizer,
        prompt_column=config.data.prompt_column,
        max_prompt_tokens=config.data.max_prompt_tokens,
        truncate_long_prompts=config.data.truncate_long_prompts,
        chat_template=config.data.chat_template,
        system_prompt=config.data.system_prompt,
    )
    sampler = PromptSampler(len(dataset), seed=train_cfg.seed, shuffle=config.data.shuffle)
    evaluate = _held_out_evaluator(config, tokenizer, rewards)
    optim_cfg = config.optim
    optimizer = torch.optim.AdamW(
        [p for p in policy.parameters() if p.requires_grad],
        lr=optim_cfg.lr,
        betas=(optim_cfg.beta1, optim_cfg.beta2),
        weight_decay=optim_cfg.weight_decay,
    )
    total_optimizer_steps = train_cfg.steps * algo.inner_iterations
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(optim_cfg.schedule, optim_cfg.warmup_steps, total_optimizer_steps)
    )
    engine = TransformersEngine(
        policy,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_token_ids(policy, tokenizer),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        max_sequences_per_batch=rollout_cfg.max_sequences_per_batch,
    )
    sampling = SamplingParams(
        temperature=rollout_cfg.temperature,
        top_p=rollout_cfg.top_p,
        top_k=rollout_cfg.top_k,
        max_new_tokens=rollout_cfg.max_new_tokens,
        stop_strings=tuple(rollout_cfg.stop_strings),
    )
    generator = torch.Generator(device=device).manual_seed(train_cfg.seed)
    start_step = 0
    if resuming:
        state = load_trainer_state(checkpoint_dir)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        sampler.load_state_dict(state["sampler"])
        restore_rng(state, generator)
        start_step = state["step"]
        say(f"resumed from {checkpoint_dir} at step {start_step}")
        if start_step >= train_cfg.steps:
            say(
                f"nothing to train: the checkpoint is at step {start_step} of train.steps = {train_cfg.steps}"
            )
    plan = batch_plan(config)
    group_size, prompts_per_step = plan.group_size, plan.prompts_per_step
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    say(
        f"grpo: {dataset.source}: {len(dataset)} prompts; policy {config.model.path} ({trainable:,} trainable "
        f"parameters) on {device}; reference: {'none (β = 0)' if algo.beta == 0 else 'LoRA base' if uses_lora else 'frozen copy'}"
    )
    say(f"grpo: {plan.describe()}")
    log = MetricsLog(run_dir, tensorboard=train_cfg.tensorboard)
    history: list[dict[str, float]] = []
    if evaluate is not None and start_step == 0:
        accuracy = evaluate(policy)
        log.write(0, {"eval/accuracy": accuracy})
        history.append({"step": 0, "eval/accuracy": accuracy})
        say(f"grpo: held-out greedy accuracy before training: {accuracy:.1%}")
    progress = None
    if verbose and train_cfg.progress:
        from tqdm.auto import tqdm

        progress = tqdm(
            total=train_cfg.steps, initial=start_step, desc="grpo", unit="step", dynamic_ncols=True
        )

    for step in range(start_step + 1, train_cfg.steps + 1):
        step_started = time.perf_counter()
        # --- 1. Sample prompts -----------------------------------------------------------
        indices = sampler.next_indices(prompts_per_step)
        rows = [index for index in indices for _ in range(group_size)]  # row b → prompt b // G

        # --- 2. Roll out G completions per prompt from the current policy ---------------
        rollout = engine.generate(
            [dataset.prompt_token_ids[i] for i in indices], group_size, sampling, generator
        )
        completions = decode_completions(
            tokenizer, rollout.completion_ids_BT, rollout.completion_mask_BT
        )
        rollout_seconds = time.perf_counter() - step_started

        # --- 3. Score every completion ----------------------------------------------------
        reward_started = time.perf_counter()
        columns = {name: [values[i] for i in rows] for name, values in dataset.columns.items()}
        scores = score_completions(
            rewards, [dataset.prompts[i] for i in rows], completions, columns, group_size=group_size
        )
        reward_seconds = time.perf_counter() - reward_started

        # --- 4. Group advantages; zero-variance groups carry no signal and are dropped ----
        rewards_NG = scores.total_B.view(prompts_per_step, group_size)
        advantages_B = group_advantages(
            rewards_NG, scale=algo.advantage_scale, eps=algo.advantage_eps
        ).view(-1)
        zero_variance_N = zero_variance_groups(rewards_NG)
        skipped_N = scores.skip_B.view(prompts_per_step, group_size).any(dim=1)
        keep_B = (
            (~zero_variance_N & ~skipped_N)
            .repeat_interleave(group_size)
            .to(rollout.completion_ids_BT.device)
        )

        # --- 5. Policy update: μ optimizer steps over micro-batches of the kept rows -----
        train_started = time.perf_counter()
        update_metrics: dict[str, float] = {}
        if keep_B.any():
            batch = TrainBatch(
                prompt_ids_BP=rollout.prompt_ids_BP[keep_B],
                prompt_mask_BP=rollout.prompt_mask_BP[keep_B],
                completion_ids_BT=rollout.completion_ids_BT[keep_B],
                completion_mask_BT=rollout.completion_mask_BT[keep_B],
                advantages_B=advantages_B.to(device)[keep_B],
                sampler_logp_BT=rollout.sampler_logp_BT[keep_B],
            )
            update_metrics = policy_update(
                policy,
                batch,
                algorithm=algo,
                temperature=rollout_cfg.temperature,
                max_completion_length=rollout_cfg.max_new_tokens,
                sequences_per_micro_batch=train_cfg.sequences_per_micro_batch,
                optimizer=optimizer,
                scheduler=scheduler,
                max_grad_norm=optim_cfg.max_grad_norm,
                reference=reference,
                reference_context=reference_context,
            )
        else:
            with (
                warnings.catch_warnings()
            ):  # no optimizer step was due; keep the LR on the step clock
                warnings.simplefilter("ignore", UserWarning)
                for _ in range(algo.inner_iterations):
                    scheduler.step()
        train_seconds = time.perf_counter() - train_started

        # --- 6. Metrics --------------------------------------------------------------------
        lengths_B = rollout.completion_mask_BT.sum(dim=1).float()
        metrics = {
            "reward/mean": scores.total_B.mean().item(),
            "reward/std": scores.total_B.std(unbiased=False).item(),
            **scores.metrics,
            "zero_variance_frac": zero_variance_N.float().mean().item(),
            "skipped_groups": float(skipped_N.sum()),
            "groups_trained": float(keep_B.sum().item() // group_size),
            "completion_len/mean": lengths_B.mean().item(),
            "completion_len/max": lengths_B.max().item(),
            "truncated_frac": rollout.truncated_B.float().mean().item(),
            "lr": scheduler.get_last_lr()[0],
            **update_metrics,
            "time/rollout": rollout_seconds,
            "time/reward": reward_seconds,
            "time/train": train_seconds,
            "time/step": time.perf_counter() - step_started,
        }
        if evaluate is not None and (
            step == train_cfg.steps or (config.eval.every and step % config.eval.every == 0)
        ):
            metrics["eval/accuracy"] = evaluate(policy)
        accuracy_values = [
            scores.per_function[f.name] for f in rewards if getattr(f.fn, "is_accuracy", False)
        ]
        if accuracy_values:
            metrics["accuracy"] = (accuracy_values[0] >= 1.0).float().mean().item()
        history.append({"step": step, **metrics})
        log.write(step, metrics)
        if progress is not None:
            progress.update(1)
            if step % train_cfg.log_every == 0 or step == train_cfg.steps:
                progress.write(console_line(step, train_cfg.steps, metrics))

        # --- 7. Checkpoint -------------------------------------------------------------------
        if train_cfg.save_every and step % train_cfg.save_every == 0 and step < train_cfg.steps:
            save_checkpoint(
                run_dir,
                step=step,
                model=policy,
                tokenizer=tokenizer,
                optimizer=optimizer,
                scheduler=scheduler,
                sampler_state=sampler.state_dict(),
                generator=generator,
            )

    if progress is not None:
        progress.close()
    log.close()
    final_dir = run_dir / "final"
    save_model(policy, tokenizer, final_dir, merge_lora=True)
    if uses_lora:
        policy.save_pretrained(str(run_dir / "final_adapter"))
    if train_cfg.save_every:
        save_checkpoint(
            run_dir,
            step=train_cfg.steps,
            model=policy,
            tokenizer=tokenizer,
            optimizer=optimizer,
            scheduler=scheduler,
            sampler_state=sampler.state_dict(),
            generator=generator,
        )
    say(
        f"grpo: final policy saved to {final_dir} (safetensors; AutoModelForCausalLM.from_pretrained loads it)"
    )
    return TrainResult(
        run_dir=run_dir, final_dir=final_dir, history=history, model=policy, tokenizer=tokenizer
    )
