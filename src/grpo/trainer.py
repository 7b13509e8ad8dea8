"""train(): the GRPO loop, read top to bottom.

Per step: 1 sample prompts → 2 roll out G completions each → 3 score them → 4 group
advantages, dropping zero-variance groups → 5 policy update (reference log-probs, μ inner
iterations over micro-batches, AdamW) → 6 metrics → 7 checkpoint. With dynamic sampling
1–3 repeat until enough groups have reward variance (``grpo.dynamic_sampling``); the
sampler draws by the curriculum when enabled and keeps per-prompt statistics
(``grpo.curriculum``).

Under torchrun (see ``grpo.distributed``) every process samples the same prompts and takes
a contiguous block of the step's rows through 2, 3 and 5; after 3 the per-row results are
all-gathered, so 4 sees the whole step everywhere. Only rank 0 writes.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from grpo.advantages import group_advantages, zero_variance_groups
from grpo.checkpoint import (
    checkpoints_dir,
    latest_checkpoint,
    resume_point,
    resume_run,
    save_checkpoint,
    save_model,
)
from grpo.config import BatchPlan, Config, ConfigError, batch_plan, config_to_dict
from grpo.critic import load_critic, ppo_update
from grpo.curriculum import record_step, write_prompt_stats
from grpo.data import PromptSampler, load_dataset_for
from grpo.distributed import (
    Dist,
    full_model_state,
    full_optimizer_state,
    init_distributed,
    reduce_step_metrics,
    shard_fsdp,
    update_shard,
    world_from_env,
    wrap_for_training,
)
from grpo.dynamic_sampling import (
    GenerationRound,
    first_groups,
    informative_groups,
    merge_rounds,
    needs_another_round,
    process_major,
)
from grpo.evaluate import held_out_evaluator
from grpo.faults import GracefulStop, NonFiniteGuard
from grpo.metrics import open_metrics_log
from grpo.models import eos_token_ids, load_policy, load_reference, load_tokenizer
from grpo.optim import build_optimizer
from grpo.progress import step_progress
from grpo.rewards.runner import (
    RewardError,
    RewardFunction,
    resolve_reward_functions,
    score_completions,
)
from grpo.rollout import RolloutEngine, SamplingParams, TransformersEngine
from grpo.update import TrainBatch, policy_update


@dataclass
class TrainResult:
    run_dir: Path
    final_dir: Path
    history: list[dict[str, float]]
    model: nn.Module
    tokenizer: Any
    stopped_by: str | None = None  # "SIGTERM"/"SIGINT": stopped early, after a checkpoint


def decode_completions(tokenizer: Any, ids_BT: torch.Tensor, mask_BT: torch.Tensor) -> list[str]:
    lengths = mask_BT.sum(dim=1).tolist()
    rows = [row[:length] for row, length in zip(ids_BT.tolist(), lengths, strict=True)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def _rollout_engine(config: Config, policy: nn.Module, tokenizer: Any, dist: Dist) -> RolloutEngine:
    """rollout.engine: the built-in sampler on the policy itself, or vLLM (GPU)."""
    eos_ids = eos_token_ids(policy, tokenizer)
    if config.rollout.engine == "vllm":
        from grpo.vllm_engine import VLLMEngine

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


def train(
    config: Config,
    *,
    reward_functions: list[RewardFunction] | None = None,
    verbose: bool = True,
) -> TrainResult:
    """Train ``config.model.path`` with GRPO; returns the run directory and the metrics.

    Under torchrun this is one process of the job: it joins the process group (and
    leaves it at the end). A batch that does not split evenly over the processes, or an
    unsupported combination, is a :class:`ConfigError` before anything is loaded.
    """
    plan = batch_plan(config, world_from_env()[1])
    if plan.world_size > 1 and config.distributed.strategy == "fsdp" and config.model.lora_rank:
        raise ConfigError(
            "distributed.strategy = 'fsdp' with model.lora_rank > 0 is not supported: "
            "use distributed.strategy = 'ddp' (only the adapters train, so DDP is cheap)"
        )
    if plan.world_size > 1 and config.algorithm.estimator == "ppo":
        raise ConfigError("algorithm.estimator = 'ppo' runs in a single process (no torchrun)")
    if config.rollout.engine == "vllm":  # before anything is loaded: vLLM and a GPU
        from grpo.vllm_engine import import_vllm

        try:
            import_vllm()
        except (ImportError, RuntimeError) as error:
            raise ConfigError(str(error)) from None
    dist, device = init_distributed(config.distributed, config.model.device)
    try:
        with GracefulStop(announce=verbose and dist.is_main) as stop:
            return _train(config, plan, dist, device, reward_functions, verbose, stop)
    finally:
        dist.close()


def _train(
    config: Config,
    plan: BatchPlan,
    dist: Dist,
    device: torch.device,
    reward_functions: list[RewardFunction] | None,
    verbose: bool,
    stop: GracefulStop,
) -> TrainResult:
    # --- 0. Set-up: seeds, run directory, models, data, rewards, optimizer ---------------
    train_cfg, algo, rollout_cfg = config.train, config.algorithm, config.rollout
    random.seed(train_cfg.seed)
    torch.manual_seed(train_cfg.seed)
    run_dir = Path(train_cfg.run_dir)
    checkpoint_dir = resume_point(run_dir, train_cfg.resume)  # None: start from step 0
    resuming = checkpoint_dir is not None

    def say(message: str) -> None:
        if verbose and dist.is_main:
            print(message, flush=True)

    if train_cfg.resume and not resuming:
        say(f"train.resume: no checkpoint in {checkpoints_dir(run_dir)}; starting from step 0")
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(config_to_dict(config), indent=2))

    tokenizer = load_tokenizer(config.model)
    uses_lora = config.model.lora_rank > 0
    if resuming and not uses_lora:
        policy = load_policy(dataclasses.replace(config.model, path=str(checkpoint_dir)), device)
    else:
        policy = load_policy(
            config.model, device, adapter_path=str(checkpoint_dir) if resuming else None
        )
    trained = wrap_for_training(policy, dist)  # DDP / FSDP2 / the policy itself
    reference, reference_context = None, None
    if algo.beta > 0:
        if uses_lora:  # the base weights are the reference: no second copy in memory
            reference_context = policy.disable_adapter
        else:
            reference = load_reference(config.model, device)
            if dist.fsdp:
                reference = shard_fsdp(reference, dist)
    rewards = (
        reward_functions
        if reward_functions is not None
        else resolve_reward_functions(config.rewards)
    )
    dataset = load_dataset_for(config.data.train_path, tokenizer, config.data)
    if dataset.skipped:
        say(f"grpo: {dataset.describe_skipped()}")
    sampler = PromptSampler(
        len(dataset), seed=train_cfg.seed, shuffle=config.data.shuffle, curriculum=config.curriculum
    )
    evaluate = held_out_evaluator(
        config, tokenizer, rewards, all_done=dist.all_done if dist.fsdp else None
    )
    optimizer, scheduler = build_optimizer(trained, config)
    critic = load_critic(config, device) if algo.estimator == "ppo" else None  # PPO's value model
    engine = _rollout_engine(config, policy, tokenizer, dist)
    sampling = SamplingParams(
        temperature=rollout_cfg.temperature,
        top_p=rollout_cfg.top_p,
        top_k=rollout_cfg.top_k,
        max_new_tokens=rollout_cfg.max_new_tokens,
        stop_strings=tuple(rollout_cfg.stop_strings),
    )
    # The same seed in every process: the sampling noise is drawn for the whole step.
    generator = torch.Generator(device=device).manual_seed(train_cfg.seed)
    start_step = resume_run(  # 0 without a checkpoint; rewinds what a killed run left
        checkpoint_dir,
        run_dir,
        config_to_dict(config),
        live=(trained, optimizer, scheduler, sampler, generator),
        dist=dist,
        say=say,
    )
    if start_step > 0:
        engine.sync_weights(policy)  # an external engine starts from the base weights
    group_size, prompts_per_step = plan.group_size, plan.prompts_per_step
    max_rounds = algo.max_generation_rounds if algo.dynamic_sampling else 1
    rows = dist.rows(plan.sequences_per_step)  # this process's block of the step's rows
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    reference_kind = (
        "none (β = 0)" if algo.beta == 0 else "LoRA base" if uses_lora else "frozen copy"
    )
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
    log = open_metrics_log(
        config, enabled=dist.is_main, purge_step=start_step + 1 if resuming else 0
    )
    guard = NonFiniteGuard(train_cfg.max_consecutive_skips, run_dir)
    stopped_by = None
    history: list[dict[str, float]] = []
    if evaluate is not None and start_step == 0:
        accuracy = evaluate(policy)
        log.write(0, {"eval/accuracy": accuracy})
        history.append({"step": 0, "eval/accuracy": accuracy})
        say(f"grpo: held-out greedy accuracy before training: {accuracy:.1%}")
    progress = step_progress(train_cfg, start_step, enabled=verbose and dist.is_main)

    def checkpoint(step: int) -> None:
        model_state = full_model_state(trained, dist)  # FSDP: gathered from every process
        optimizer_state = full_optimizer_state(trained, optimizer, dist)
        if dist.is_main:
            save_checkpoint(
                run_dir,
                step=step,
                model=policy,
                tokenizer=tokenizer,
                optimizer=optimizer,
                scheduler=scheduler,
                sampler_state=sampler.state_dict(),
                generator=generator,
                config=config_to_dict(config),
                keep=train_cfg.keep_checkpoints,
                model_state=model_state,
                optimizer_state=optimizer_state,
            )

    for step in range(start_step + 1, train_cfg.steps + 1):
        step_started = time.perf_counter()
        rounds: list[GenerationRound] = []
        rollout_seconds = reward_seconds = 0.0
        # 1–3 run once, or with algorithm.dynamic_sampling until enough groups have signal.
        while not rounds or needs_another_round(rounds, group_size, prompts_per_step, max_rounds):
            round_started = time.perf_counter()
            # --- 1. Sample prompts (the same in every process) ---------------------------
            indices = sampler.next_indices(prompts_per_step)
            step_prompts = [index for index in indices for _ in range(group_size)]  # b → b // G
            row_prompts = step_prompts[rows]

            # --- 2. Roll out G completions per prompt (this process: its rows only) -----
            rollout = engine.generate(
                [dataset.prompt_token_ids[i] for i in indices],
                group_size,
                sampling,
                generator,
                rows=rows if dist.enabled else None,
            )
            completions = decode_completions(
                tokenizer, rollout.completion_ids_BT, rollout.completion_mask_BT
            )
            rollout_seconds += time.perf_counter() - round_started

            # --- 3. Score every completion; gather the whole step's per-row results -----
            reward_started = time.perf_counter()
            columns = {
                name: [values[i] for i in row_prompts] for name, values in dataset.columns.items()
            }
            try:
                scores = score_completions(
                    rewards,
                    [dataset.prompts[i] for i in row_prompts],
                    completions,
                    columns,
                    group_size=1 if dist.enabled else group_size,  # groups may span processes
                )
            except RewardError as error:
                if not dist.enabled:
                    raise
                where = f"process {dist.rank} (its row 0 is the step's row {rows.start})"
                raise RewardError(f"{where}: {error}", error.function, error.row) from error
            reward_seconds += time.perf_counter() - reward_started
            accuracy_names = [f.name for f in rewards if getattr(f.fn, "is_accuracy", False)]
            step_rows = dist.gather_columns(
                {
                    "reward": scores.total_B,
                    "skip": scores.skip_B,
                    "length": rollout.completion_mask_BT.sum(dim=1).cpu(),
                    "truncated": rollout.truncated_B.cpu(),
                    **{
                        f"accuracy:{name}": scores.per_function[name] for name in accuracy_names[:1]
                    },
                }
            )
            rounds.append(GenerationRound(indices, rollout, step_rows, scores.metrics))
        generation = merge_rounds(rounds, tokenizer.pad_token_id)
        indices, rollout, step_rows = generation.indices, generation.rollout, generation.step_rows

        # --- 4. Group advantages; zero-variance groups carry no signal and are dropped ----
        rewards_NG = step_rows["reward"].view(len(indices), group_size)
        advantages_B = group_advantages(
            rewards_NG, scale=algo.advantage_scale, eps=algo.advantage_eps
        ).view(-1)
        zero_variance_N = zero_variance_groups(rewards_NG)
        skipped_N = step_rows["skip"].view(len(indices), group_size).any(dim=1)
        trains_N = first_groups(informative_groups(zero_variance_N, skipped_N), prompts_per_step)
        if critic is not None:  # PPO: the critic is the baseline, so equal rewards still teach
            trains_N = ~skipped_N
        keep_B = trains_N.repeat_interleave(group_size)
        accuracy_B = step_rows.get(f"accuracy:{accuracy_names[0]}") if accuracy_names else None
        signal_metrics = record_step(
            sampler.stats, indices, rewards_NG, accuracy_B, zero_variance_N, step
        )
        update_rows, lengths_B = rows, step_rows["length"]
        if len(rounds) > 1:  # this process's rows of every round, side by side
            update_rows = dist.rows(len(rounds) * plan.sequences_per_step)
            keep_B, advantages_B, lengths_B = (
                process_major(t, len(rounds), dist.world_size)
                for t in (keep_B, advantages_B, lengths_B)
            )

        # --- 5. Policy update: μ optimizer steps over micro-batches of the kept rows -----
        train_started = time.perf_counter()
        update_metrics: dict[str, float] = {}
        if keep_B.any():  # the whole step's decision: the same in every process
            local_keep_B = keep_B[update_rows].to(rollout.completion_ids_BT.device)
            batch = TrainBatch(
                prompt_ids_BP=rollout.prompt_ids_BP[local_keep_B],
                prompt_mask_BP=rollout.prompt_mask_BP[local_keep_B],
                completion_ids_BT=rollout.completion_ids_BT[local_keep_B],
                completion_mask_BT=rollout.completion_mask_BT[local_keep_B],
                advantages_B=advantages_B[update_rows].to(device)[local_keep_B],
                sampler_logp_BT=rollout.sampler_logp_BT[local_keep_B],
            )
            update = policy_update
            if critic is not None:  # PPO: the critic's per-token GAE advantages replace A_i
                kept_rewards_B = step_rows["reward"][rows][keep_B[rows]].to(device)
                update = partial(ppo_update, critic, rewards_B=kept_rewards_B)
            update_metrics = update(
                trained,
                batch,
                algorithm=algo,
                temperature=rollout_cfg.temperature,
                max_completion_length=rollout_cfg.max_new_tokens,
                sequences_per_micro_batch=train_cfg.sequences_per_micro_batch,
                optimizer=optimizer,
                scheduler=scheduler,
                max_grad_norm=config.optim.max_grad_norm,
                reference=reference,
                reference_context=reference_context,
                shard=update_shard(
                    dist,
                    trained,
                    keep_B,
                    lengths_B,
                    rollout,
                    plan.sequences_per_micro_batch,
                ),
            )
            engine.sync_weights(policy)  # no-op for the built-in engine; vLLM gets the weights
        else:
            # No optimizer step was due; keep the LR schedule on the step clock all the same.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                for _ in range(algo.inner_iterations):
                    scheduler.step()
        train_seconds = time.perf_counter() - train_started

        # --- 6. Metrics (the whole step's; each process's own parts are reduced) ---------
        lengths_B = step_rows["length"].float()
        times = {
            "time/rollout": rollout_seconds,
            "time/reward": reward_seconds,
            "time/train": train_seconds,
            "time/step": time.perf_counter() - step_started,
        }
        reward_metrics, update_metrics, times = reduce_step_metrics(
            dist, generation.reward_metrics, update_metrics, times
        )
        metrics = {
            "reward/mean": step_rows["reward"].mean().item(),
            "reward/std": step_rows["reward"].std(unbiased=False).item(),
            **reward_metrics,
            "zero_variance_frac": zero_variance_N.float().mean().item(),
            "skipped_groups": float(skipped_N.sum()),
            "groups_trained": float(keep_B.sum().item() // group_size),
            "generation_rounds": float(len(rounds)),
            **signal_metrics,
            "completion_len/mean": lengths_B.mean().item(),
            "completion_len/max": lengths_B.max().item(),
            "truncated_frac": step_rows["truncated"].float().mean().item(),
            "lr": scheduler.get_last_lr()[0],
            **update_metrics,
            **times,
        }
        if evaluate is not None and (
            step == train_cfg.steps or (config.eval.every and step % config.eval.every == 0)
        ):
            metrics["eval/accuracy"] = evaluate(policy)
        if accuracy_names:
            accuracy_B = step_rows[f"accuracy:{accuracy_names[0]}"]
            metrics["accuracy"] = (accuracy_B >= 1.0).float().mean().item()
        history.append({"step": step, **metrics})
        log.write(step, metrics)
        prompt_texts = [dataset.prompts[i] for i in row_prompts]  # the last round's rows
        last_round_B = advantages_B[-plan.sequences_per_step :][rows]
        log.completions(step, prompt_texts, completions, scores, last_round_B)
        progress.update(step, metrics)

        # --- 7. Checkpoint (rank 0 writes); stop on K non-finite updates or a signal ------
        if warning := guard.record(step, metrics, updates=algo.inner_iterations * keep_B.any()):
            say(warning)
        signalled = stop.agreed(dist) and step < train_cfg.steps  # the same on every process
        due = train_cfg.save_every and step % train_cfg.save_every == 0 and step < train_cfg.steps
        if (due or signalled) and guard.healthy:  # never over the last good checkpoint
            checkpoint(step)
        if signalled:
            stopped_by = stop.received or "a signal to another process"
            break

    progress.close()
    log.close()
    if stopped_by is not None:
        dist.barrier()
        last = latest_checkpoint(run_dir)
        say(
            f"grpo: stopped by {stopped_by} after step {step} of {train_cfg.steps}; "
            f"checkpoint: {last}; continue with `grpo train CONFIG --resume`"
        )
        return TrainResult(run_dir, last or run_dir, history, policy, tokenizer, stopped_by)
    final_dir = run_dir / "final"
    final_state = full_model_state(trained, dist)
    if dist.is_main:
        write_prompt_stats(run_dir / "prompt_stats.jsonl", dataset.prompts, sampler.stats)
        save_model(policy, tokenizer, final_dir, merge_lora=True, state_dict=final_state)
        if uses_lora:
            policy.save_pretrained(str(run_dir / "final_adapter"))
    if train_cfg.save_every and start_step < train_cfg.steps and guard.healthy:
        checkpoint(train_cfg.steps)
    dist.barrier()  # everything is written when any process returns
    say(
        f"grpo: final policy saved to {final_dir} "
        "(safetensors; AutoModelForCausalLM.from_pretrained loads it)"
    )
    return TrainResult(
        run_dir=run_dir, final_dir=final_dir, history=history, model=policy, tokenizer=tokenizer
    )
