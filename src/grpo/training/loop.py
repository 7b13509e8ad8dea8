"""train(): the GRPO loop, read top to bottom.

Per step: **generate** (sample prompts, roll out G completions each, score them; with
dynamic sampling, repeat until enough groups have reward variance) → **select** (group
advantages; zero-variance and skipped groups are dropped and counted) → record the
per-prompt statistics the curriculum draws by → **update** (reference log-probs, μ inner
iterations over micro-batches, AdamW) → **metrics** → **checkpoint**. Each stage is a
function of its own module with typed inputs and outputs; the config is unpacked once, in
:func:`~grpo.training.setup.set_up`.

Departures from the paper (Shao et al. 2024), each a documented option: the advantage's
scale (``algorithm.advantage_scale``), the loss aggregation (``algorithm.aggregation``),
asymmetric clipping, DAPO's dynamic sampling, the curriculum, and PPO's critic as an
alternative baseline (``algorithm.estimator``).

Under torchrun (see :mod:`grpo.training.runtime.distributed`) every process samples the same
prompts and takes a contiguous block of the step's rows through generate and update; the
per-row results are all-gathered after scoring, so select sees the whole step everywhere.
Only rank 0 writes, and it holds the run directory's lock (:mod:`grpo.training.runtime.run_lock`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from torch import nn

from grpo.algo.selection import Selection, select_groups
from grpo.config import Config, batch_plan
from grpo.config.errors import UserCodeError
from grpo.data.prompt_stats import record_step
from grpo.models.compiled_trunk import trunk_compile_seconds
from grpo.rewards.runner import RewardFunction
from grpo.training.engines import check_engine_available
from grpo.training.generate import generate
from grpo.training.learn import learn
from grpo.training.reasoning_metrics import reasoning_metrics
from grpo.training.rounds import Generation
from grpo.training.runtime.checkpoint import latest_checkpoint
from grpo.training.runtime.distributed import Dist, init_distributed, world_from_env
from grpo.training.runtime.faults import GracefulStop, NonFiniteGuard
from grpo.training.runtime.run_lock import lock_run_dir
from grpo.training.saving import save_checkpoint_of, save_final
from grpo.training.setup import set_up
from grpo.training.setup_async import start_feeder
from grpo.training.state import Run
from grpo.training.step_metrics import accuracy, step_metrics


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
    :class:`~grpo.training.runtime.run_lock.RunDirInUse` naming the first.
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
            if config.rollout.mode == "async":
                run.feeder = start_feeder(config, run, reward_functions, dist)
            return _train(run, dist, stop)
    finally:
        if run is not None and run.feeder is not None:
            run.feeder.close()  # no worker outlives the run: normal end, error or Ctrl-C
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
            metrics, generation, selection = _step(run, dist, step)
        except UserCodeError as error:  # a reward or environment failed: say at which step
            error.step = step
            raise
        history.append({"step": step, **metrics})
        run.log.write(step, metrics)
        last = generation.last  # the step's last rows; this process logs its own block
        local_advantages_B = selection.advantages_B[-last.rows :][dist.rows(last.rows)]
        run.log.completions(
            step,
            last.prompts,
            last.completions,
            last.scores,
            local_advantages_B,
            columns=last.columns,  # an agent run's conversations
            rollout=last.rollout,  # the ids the update trained on (train.log_token_ids)
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


def _step(run: Run, dist: Dist, step: int) -> tuple[dict[str, float], Generation, Selection]:
    """One step: generate → select → record the curriculum's statistics → update →
    metrics (and the held-out accuracy when due)."""
    settings, learner = run.settings, run.learner
    step_started = time.perf_counter()
    compiled_before = _compile_seconds(run)
    if run.feeder is None:
        generation, seconds = generate(
            run.rollouts,
            run.sampler,
            dist,
            prompts_per_step=settings.prompts_per_step,
            group_size=settings.group_size,
            max_rounds=settings.max_rounds,
        )
    else:  # sampled by the workers, up to rollout.max_staleness versions ago
        generation, seconds = run.feeder.next_generation(step)
    groups = generation.groups
    selection = select_groups(
        groups,
        target_groups=settings.prompts_per_step,
        scale=settings.advantage_scale,
        eps=settings.advantage_eps,
        critic_baseline=learner.critic is not None,
        drop_B=generation.results.truncated_B if settings.mask_truncated_completions else None,
    )
    # Difficulty as estimated before this step's outcomes, for reasoning/len_*.
    estimated_N = run.sampler.estimated_success(generation.indices)
    signal = record_step(  # the curriculum's per-prompt statistics
        run.sampler.stats,
        generation.indices,
        groups.rewards_NG,
        generation.results.accuracy_B,
        groups.zero_variance_N,
        step,
    )
    signal.update(run.sampler.draw_metrics)  # the pooled curriculum's pre-screen, if on
    train_started = time.perf_counter()
    update = learn(learner, generation, selection, dist)
    if update:
        run.rollouts.engine.sync_weights(learner.policy)  # vLLM gets the new weights
    if run.feeder is not None:
        run.feeder.after_update(step, learner.policy)  # the workers' weights, when due
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
        generation, selection, signal=signal, update=update, times=times, lr=lr, dist=dist
    )
    if run.evaluate is not None and (
        step == settings.steps or (settings.eval_every and step % settings.eval_every == 0)
    ):
        metrics["eval/accuracy"] = run.evaluate(learner.policy)
    if run.feeder is not None:
        metrics.update(run.feeder.take_metrics())
        metrics["async/samples_per_s"] = generation.results.reward_B.numel() / times["time/step"]
    metrics.update(accuracy(generation))
    metrics.update(reasoning_metrics(generation, estimated_N, settings.group_size))
    return metrics, generation, selection


def _compile_seconds(run: Run) -> float | None:
    """Seconds compiling so far (rollout.compile, train.compile); None when neither is on."""
    engine = getattr(run.rollouts.engine, "compiled", None)
    if engine is None and not run.settings.compile:
        return None
    return getattr(run.rollouts.engine, "compile_seconds", 0.0) + trunk_compile_seconds()


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
