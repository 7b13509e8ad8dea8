"""Set-up of asynchronous rollouts (``rollout.mode = "async"``): the worker pool of the
configured backend and the feeder that requests rounds from it, from the ``[rollout]`` keys
and, on resume, the checkpoint's requested-not-trained prompts."""

from __future__ import annotations

from functools import partial

from grpo.config import Config
from grpo.rewards.runner import RewardFunction
from grpo.training.async_feeder import AsyncSettings, Feeder
from grpo.training.generate import assemble_round
from grpo.training.rollout_worker import WorkerSpec
from grpo.training.runtime.checkpoint import latest_checkpoint, read_extra
from grpo.training.runtime.distributed import Dist
from grpo.training.state import Run
from grpo.training.worker_pool import WorkerPool


def start_feeder(
    config: Config, run: Run, reward_functions: list[RewardFunction] | None, dist: Dist
) -> Feeder:
    """Start the workers, send them the policy's weights and request the first rounds.
    Under torchrun rank 0 holds the workers; the other processes get its rounds."""
    rollout, settings = config.rollout, run.settings
    resumed = {}
    if run.start_step > 0 and (checkpoint := latest_checkpoint(run.run_dir)) is not None:
        resumed = read_extra(checkpoint).get("async", {})
    spec = WorkerSpec(config, reward_functions, rollout.worker_threads)
    pool = None
    if dist.is_main:
        pool = open_pool(
            rollout.backend,
            spec,
            rollout.workers,
            timeout_s=rollout.worker_timeout_s,
            max_restarts=rollout.max_worker_restarts,
        )
    try:
        feeder = Feeder(
            pool,
            run.sampler,
            run.rollouts,
            AsyncSettings(
                max_staleness=rollout.max_staleness,
                stale=rollout.stale,
                sync_every=rollout.sync_every,
                seed=config.train.seed,
                prompts_per_step=settings.prompts_per_step,
                group_size=settings.group_size,
                max_rounds=settings.max_rounds,
                last_step=settings.steps,
            ),
            assemble=partial(assemble_round, run.rollouts),
            dist=dist,
            start_step=run.start_step,
            pending=resumed.get("pending", []),
            requests_issued=resumed.get("requests_issued", 0),
        )
        if resumed.get("pending"):
            rounds = len(resumed["pending"])
            run.say(f"grpo: requesting again the {rounds} rounds in flight at the checkpoint")
        feeder.start(run.learner.policy)
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    return feeder


def open_pool(
    backend: str, spec: WorkerSpec, workers: int, *, timeout_s: float, max_restarts: int
) -> WorkerPool:
    """The ``rollout.backend`` pool: local processes or Ray actors (`grpo[ray]`)."""
    if backend == "ray":
        from grpo.training.ray_pool import RayPool

        return RayPool(spec, workers, timeout_s=timeout_s, max_restarts=max_restarts)
    from grpo.training.local_pool import LocalPool

    return LocalPool(spec, workers, timeout_s=timeout_s, max_restarts=max_restarts)
