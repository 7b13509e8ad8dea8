"""train(): the GRPO loop, read top to bottom.

Per step: the **round source** hands over the step's scored rounds (sample prompts, roll
out G completions each, score them; with dynamic sampling, repeat until enough groups
have reward variance) → **select** (group advantages; zero-variance and skipped groups are
dropped and counted) → record the per-prompt statistics the curriculum draws by →
**learn** (reference log-probs, μ inner iterations over micro-batches, AdamW; in
:mod:`grpo.training.update.policy`) → **metrics** → **checkpoint**. The config is unpacked
once, in :func:`~grpo.training.setup.set_up`; the loop reads a
:class:`~grpo.rounds.source.RoundSource` and does not know whether rounds are sampled
when asked (:class:`~grpo.rounds.source.SyncRounds`) or by rollout workers ahead of it
(:class:`~grpo.rounds.workers.async_rounds.AsyncRounds`).

Departures from the paper (Shao et al. 2024), each a documented option: the advantage's
scale (``algorithm.advantage_scale``), the loss aggregation (``algorithm.aggregation``),
asymmetric clipping, DAPO's dynamic sampling, the curriculum, and PPO's critic as an
alternative baseline (``algorithm.estimator``).

Under torchrun (see :mod:`grpo.runtime.distributed`) every process samples the same
prompts and takes a contiguous block of the step's rows through generation and update;
the per-row results are all-gathered after scoring, so selection sees the whole step
everywhere. Only rank 0 writes, and it holds the run directory's lock
(:mod:`grpo.runtime.run_lock`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from torch import nn

from grpo.agents.trajectories import env_token_frac
from grpo.algo.curriculum import is_correct
from grpo.algo.groups import rows_of
from grpo.algo.selection import Selection, select_groups
from grpo.config import Config, batch_plan
from grpo.config.errors import UserCodeError
from grpo.data.prompt_stats import record_step
from grpo.log.metric_table import reduce_processes
from grpo.models.compiled_trunk import trunk_compile_seconds
from grpo.rewards.runner import RewardFunction
from grpo.rounds.engines import check_engine_available
from grpo.rounds.source import ScoredRows
from grpo.runtime.checkpoint import latest_checkpoint
from grpo.runtime.distributed import Dist, init_distributed, world_from_env
from grpo.runtime.faults import GracefulStop, NonFiniteGuard
from grpo.runtime.run_lock import lock_run_dir
from grpo.text.reasoning import reasoning_summary
from grpo.training.saving import save_checkpoint_of, save_final
from grpo.training.setup import set_up
from grpo.training.state import Learner, Run
from grpo.training.update.critic import ppo_update
from grpo.training.update.policy import TrainBatch, policy_update, step_split


@dataclass
class TrainResult:
    run_dir: Path
    final_dir: Path
    history: list[dict[str, float]]
    model: nn.Module
    tokenizer: Any
    stopped_by: str | None = None  # "SIGTERM"/"SIGINT": stopped early, after a checkpoint


def train(
    config: Config,
    *,
    reward_functions: list[RewardFunction] | None = None,
    verbose: bool = True,
) -> TrainResult:
    """Train ``config.model.path`` with GRPO; returns the run directory and the metrics.

    Under torchrun this is one process of the job: it joins the process group (and
    leaves it at the end). A batch that does not split evenly over the processes, or an
    unsupported combination, is a :class:`ConfigError` before anything is loaded. The run
    directory is locked for the whole run: a second run into it stops at once with a
    :class:`~grpo.runtime.run_lock.RunDirInUse` naming the first.
    """
    plan = batch_plan(config, world_from_env()[1])  # ConfigErrors for what cannot split
    check_engine_available(config.rollout.engine)  # before anything is loaded
    distributed = config.distributed
    dist, device = init_distributed(
        config.model.device,
        strategy=distributed.strategy,
        backend=distributed.backend,
        timeout_s=distributed.timeout_s,
    )
    run, lock = None, None
    try:
        lock = lock_run_dir(Path(config.train.run_dir), dist)  # one process per run directory
        with GracefulStop(announce=verbose and dist.is_main) as stop:
            run = set_up(config, plan, dist, device, reward_functions, verbose)
            return _train(run, dist, stop)
    finally:
        if run is not None:
            run.source.close()  # no rollout worker outlives the run: end, error or Ctrl-C
        if lock is not None:
            lock.release()
        dist.close(run)


def _train(run: Run, dist: Dist, stop: GracefulStop) -> TrainResult:
    settings, learner = run.settings, run.learner
    guard = NonFiniteGuard(settings.max_consecutive_skips, partial(latest_checkpoint, run.run_dir))
    history = _evaluate_before(run)
    progress = run.open_progress()
    step, stopped_by = run.start_step, None
    for step in range(run.start_step + 1, settings.steps + 1):
        try:
            metrics, scored, selection = _step(run, dist, step)
        except UserCodeError as error:  # a reward or environment failed: say at which step
            error.step = step
            raise
        history.append({"step": step, **metrics})
        run.log.write(step, metrics)
        last = scored.final_round  # the step's last rows; this process logs its own block
        local_advantages_B = selection.advantages_B[-last.rows :][dist.rows(last.rows)]
        run.log.completions(
            step,
            last.local_prompts,
            last.local_completions,
            last.local_scores,
            local_advantages_B,
            columns=last.local_columns,  # an agent run's conversations
            rollout=last.local_rollout,  # the ids the update trained on (train.log_token_ids)
        )
        progress.update(step, metrics)
        updates = learner.objective.inner_iterations * int(selection.keep_B.any())
        if warning := guard.record(step, metrics, updates=updates):
            run.say(warning)
        signalled = stop.agreed(dist) and step < settings.steps  # the same on every process
        due = settings.save_every and step % settings.save_every == 0 and step < settings.steps
        if (due or signalled) and guard.healthy:  # never over the last good checkpoint
            save_checkpoint_of(run, step, dist, keep=settings.keep_checkpoints)
        if signalled:
            stopped_by = stop.received or "a signal to another process"
            break
    progress.close()
    run.log.close()
    return _finish(run, dist, history, step, stopped_by, guard.healthy)


def _step(run: Run, dist: Dist, step: int) -> tuple[dict[str, float], ScoredRows, Selection]:
    """One step: generate → select → record the curriculum's statistics → update →
    metrics (and the held-out accuracy when due)."""
    settings, learner = run.settings, run.learner
    step_started = time.perf_counter()
    compiled_before = _compile_seconds(run)
    scored, seconds = run.source.next_round(step)  # async: up to max_staleness old
    selection = select_groups(
        scored.rewards_NG,
        scored.zero_variance_N,
        scored.skipped_N,
        target_groups=settings.prompts_per_step,
        scale=settings.advantage_scale,
        eps=settings.advantage_eps,
        critic_baseline=learner.critic is not None,
        drop_B=scored.truncated_B if settings.mask_truncated_completions else None,
    )
    # Difficulty as estimated before this step's outcomes, for reasoning/len_*.
    estimated_N = run.sampler.estimated_success(scored.indices)
    signal = record_step(  # the curriculum's per-prompt statistics
        run.sampler.stats,
        scored.indices,
        scored.rewards_NG,
        scored.accuracy_B,
        scored.zero_variance_N,
        step,
    )
    signal.update(run.sampler.draw_metrics)  # the pooled curriculum's pre-screen, if on
    train_started = time.perf_counter()
    update = learn(learner, scored, selection, dist)
    run.source.weights_changed(step, learner.policy, updated=bool(update))  # vLLM, workers
    times = {
        "time/rollout": seconds["rollout"],
        "time/reward": seconds["reward"],
        "time/train": time.perf_counter() - train_started,
        "time/step": time.perf_counter() - step_started,
    }
    if compiled_before is not None:
        times["time/compile"] = _compile_seconds(run) - compiled_before
    lr = learner.optimization.scheduler.get_last_lr()[0]
    metrics = step_metrics(
        scored, selection, signal=signal, update=update, times=times, lr=lr, dist=dist
    )
    if run.evaluate is not None and (
        step == settings.steps or (settings.eval_every and step % settings.eval_every == 0)
    ):
        metrics["eval/accuracy"] = run.evaluate(learner.policy)
    metrics.update(run.source.take_metrics(times["time/step"]))
    metrics.update(accuracy(scored))
    metrics.update(reasoning_metrics(scored, estimated_N, settings.group_size))
    return metrics, scored, selection


def learn(
    learner: Learner, scored: ScoredRows, selection: Selection, dist: Dist
) -> dict[str, float]:
    """Update the policy on the selected rows; the update's metrics ({} when no group
    trains: then no optimizer step is due, but the LR schedule still steps μ times)."""
    optimization, objective = learner.optimization, learner.objective
    if not selection.keep_B.any():  # the whole step's decision: the same in every process
        with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()"
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(objective.inner_iterations):
                optimization.scheduler.step()
        return {}
    keep_B = selection.keep_B
    local_rollout = scored.local_rollout  # this process's rows of every round, in order
    device = local_rollout.completion_ids_BT.device
    local_keep_B = keep_B[scored.local_B].to(device)
    local_advantages_B = selection.advantages_B[scored.local_B].to(device)
    batch = TrainBatch.of(local_rollout, local_advantages_B, local_keep_B)
    shard = step_split(
        dist,
        learner.trained,
        keep_B,
        scored.length_B,
        scored.rounds,
        local_rollout,
        learner.sequences_per_micro_batch,
    )
    if learner.critic is not None:  # PPO: the critic's per-token GAE advantages replace A_i
        return ppo_update(
            learner.critic,
            learner.trained,
            batch,
            objective,
            optimization,
            rewards_B=scored.reward_B[scored.local_B].to(device)[local_keep_B],
            sequences_per_micro_batch=learner.sequences_per_micro_batch,
            reference=learner.reference,
            shard=shard,
            share_prompt=learner.share_prompt,
        )
    return policy_update(
        learner.trained,
        batch,
        objective,
        optimization,
        sequences_per_micro_batch=learner.sequences_per_micro_batch,
        reference=learner.reference,
        shard=shard,
        share_prompt=learner.share_prompt,
    )


def step_metrics(
    scored: ScoredRows,
    selection: Selection,
    *,
    signal: dict[str, float],
    update: dict[str, float],
    times: dict[str, float],
    lr: float,
    dist: Dist,
) -> dict[str, float]:
    """Rewards, groups, the learning signal (``signal``: group outcomes and sample
    counts), completion lengths, the update and the step's seconds."""
    reward_metrics = reduce_over_processes(dist, scored.metrics)
    update, times = reduce_over_processes(dist, update), reduce_over_processes(dist, times)
    length_B = scored.length_B.float()
    metrics = {
        "reward/mean": scored.reward_B.mean().item(),
        "reward/std": scored.reward_B.std(unbiased=False).item(),
        **reward_metrics,
        "zero_variance_frac": scored.zero_variance_N.float().mean().item(),
        "skipped_groups": float(scored.skipped_N.sum()),
        "groups_trained": float(selection.trains_N.sum()),
        "generation_rounds": float(scored.rounds),
        **signal,
        "completion_len/mean": length_B.mean().item(),
        "completion_len/max": length_B.max().item(),
        "truncated_frac": scored.truncated_B.float().mean().item(),
        "lr": lr,
        **update,
        **times,
    }
    if scored.overlong_penalty_B is not None:
        metrics["reward/overlong_penalty"] = scored.overlong_penalty_B.mean().item()
    if scored.env_tokens_B is not None:  # multi-turn: Σ inserted / Σ (inserted + model)
        inserted, model = scored.env_tokens_B.sum().item(), length_B.sum().item()
        metrics["agent/env_token_frac"] = env_token_frac(inserted, model)
    if selection.dropped_rows is not None:
        metrics["truncated_masked"] = float(selection.dropped_rows)
    return metrics


def accuracy(scored: ScoredRows) -> dict[str, float]:
    """The fraction of completions the accuracy reward scores ≥ 1, when the run has one."""
    accuracy_B = scored.accuracy_B
    if accuracy_B is None:
        return {}
    return {"accuracy": is_correct(accuracy_B).float().mean().item()}


def reduce_over_processes(dist: Dist, metrics: dict[str, float]) -> dict[str, float]:
    """Each process's values of ``metrics`` as one, by the metric table (identity alone)."""
    if not dist.enabled or not metrics:
        return dict(metrics)
    return reduce_processes(dist.gather_values(metrics))


def reasoning_metrics(
    scored: ScoredRows, estimated_success_N: list[float], group_size: int
) -> dict[str, float]:
    """``estimated_success_N``: each generated group's prompt's success rate as estimated
    before this step (the sampler's posterior mean), in generation order; row b belongs to
    group b // G."""
    success_B = rows_of(estimated_success_N, group_size)
    think_B: list[int | None] = []
    if scored.think_chars_B is not None and scored.has_think_B is not None:
        think_B = [
            chars if has else None
            for chars, has in zip(
                scored.think_chars_B.tolist(), scored.has_think_B.tolist(), strict=True
            )
        ]
    correction_B = [] if scored.self_correction_B is None else scored.self_correction_B.tolist()
    return reasoning_summary(scored.length_B.tolist(), success_B, think_B, correction_B)


def _compile_seconds(run: Run) -> float | None:
    """Seconds compiling so far (rollout.compile, train.compile); None when neither is on."""
    engine = getattr(run.maker.engine, "compiled", None)
    if engine is None and not run.settings.compile:
        return None
    return getattr(run.maker.engine, "compile_seconds", 0.0) + trunk_compile_seconds()


def _evaluate_before(run: Run) -> list[dict[str, float]]:
    """Held-out accuracy at step 0 (a fresh run only): the curve's starting point."""
    if run.evaluate is None or run.start_step != 0:
        return []
    score = run.evaluate(run.learner.policy)
    run.log.write(0, {"eval/accuracy": score})
    run.say(f"grpo: held-out greedy accuracy before training: {score:.1%}")
    return [{"step": 0, "eval/accuracy": score}]


def _finish(
    run: Run,
    dist: Dist,
    history: list[dict[str, float]],
    step: int,
    stopped_by: str | None,
    healthy: bool,
) -> TrainResult:
    """Stopped by a signal: point at the checkpoint. Otherwise save the final policy (and
    a last checkpoint when checkpointing is on)."""
    policy, tokenizer, steps = run.learner.policy, run.tokenizer, run.settings.steps
    if stopped_by is not None:
        dist.barrier()
        last = latest_checkpoint(run.run_dir)
        run.say(
            f"grpo: stopped by {stopped_by} after step {step} of {steps}; "
            f"checkpoint: {last}; continue with `grpo train CONFIG --resume`"
        )
        return TrainResult(run.run_dir, last or run.run_dir, history, policy, tokenizer, stopped_by)
    final_dir = save_final(run, dist)
    if run.settings.save_every and run.start_step < steps and healthy:
        save_checkpoint_of(run, steps, dist, keep=run.settings.keep_checkpoints)
    dist.barrier()  # everything is written when any process returns
    run.say(
        f"grpo: final policy saved to {final_dir} "
        "(safetensors; AutoModelForCausalLM.from_pretrained loads it)"
    )
    return TrainResult(run.run_dir, final_dir, history, policy, tokenizer)
