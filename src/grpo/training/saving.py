"""The checkpoint stage and the final save (rank 0 writes; under FSDP every process takes
part in gathering the full state first)."""

from __future__ import annotations

from pathlib import Path

from grpo.data.prompt_stats import write_prompt_stats
from grpo.runtime.checkpoint import save_checkpoint, save_model
from grpo.runtime.distributed import Dist
from grpo.runtime.sharding import full_model_state, full_optimizer_state
from grpo.training.state import Run


def save_checkpoint_of(run: Run, step: int, dist: Dist, *, keep: int) -> None:
    """RUN_DIR/checkpoints/step-``step``: weights, optimizer, scheduler, sampler, RNG."""
    learner = run.learner
    optimizer = learner.optimization.optimizer
    model_state = full_model_state(learner.trained, dist)  # FSDP: gathered from every process
    optimizer_state = full_optimizer_state(learner.trained, optimizer, dist)
    if dist.is_main:
        save_checkpoint(
            run.run_dir,
            step=step,
            model=learner.policy,
            tokenizer=run.tokenizer,
            optimizer=optimizer,
            scheduler=learner.optimization.scheduler,
            sampler_state=run.sampler.state_dict(),
            generator=run.maker.generator,
            config=run.config_dict,
            keep=keep,
            model_state=model_state,
            optimizer_state=optimizer_state,
            extra={"async": state} if (state := run.source.state_dict()) else None,
        )


def save_final(run: Run, dist: Dist) -> Path:
    """RUN_DIR/final (LoRA merged) and, under LoRA, RUN_DIR/final_adapter; the per-prompt
    statistics in RUN_DIR/prompt_stats.jsonl."""
    final_dir = run.run_dir / "final"
    policy = run.learner.policy
    final_state = full_model_state(run.learner.trained, dist)
    if dist.is_main:
        write_prompt_stats(
            run.run_dir / "prompt_stats.jsonl", run.dataset.prompts, run.sampler.stats
        )
        save_model(policy, run.tokenizer, final_dir, merge_lora=True, state_dict=final_state)
        if run.learner.lora:
            policy.save_pretrained(str(run.run_dir / "final_adapter"))
    return final_dir
