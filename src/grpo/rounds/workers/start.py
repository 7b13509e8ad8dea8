"""Start asynchronous rollouts (``rollout.mode = "async"``): the worker pool of the
configured backend and the :class:`AsyncRounds` that requests rounds from it, from the
``[rollout]`` keys and, on resume, the checkpoint's requested-not-trained prompts."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from grpo.config import Config
from grpo.data.sampler import PromptSampler
from grpo.rewards.runner import RewardFunction
from grpo.rounds.source import RoundMaker
from grpo.rounds.workers.async_rounds import AsyncRounds, AsyncSettings
from grpo.rounds.workers.pool import WorkerPool
from grpo.rounds.workers.worker import WorkerSpec
from grpo.runtime.distributed import Dist


def start_async_rounds(
    config: Config,
    maker: RoundMaker,
    sampler: PromptSampler,
    policy: nn.Module,
    dist: Dist,
    *,
    reward_functions: list[RewardFunction] | None,
    prompts_per_step: int,
    group_size: int,
    max_rounds: int,
    start_step: int,
    resumed: dict[str, object],
    say: Callable[[str], None],
) -> AsyncRounds:
    """Start the workers, send them the policy's weights and request the first rounds.
    Under torchrun rank 0 holds the workers; the other processes get its rounds.
    ``resumed``: what the checkpoint kept of the last run's rounds ({} for a fresh run)."""
    rollout = config.rollout
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
    pending: list[list[int]] = resumed.get("pending", [])  # type: ignore[assignment]
    try:
        rounds = AsyncRounds(
            pool,
            sampler,
            maker,
            AsyncSettings(
                max_staleness=rollout.max_staleness,
                stale=rollout.stale,
                sync_every=rollout.sync_every,
                seed=config.train.seed,
                prompts_per_step=prompts_per_step,
                group_size=group_size,
                max_rounds=max_rounds,
                last_step=config.train.steps,
            ),
            dist=dist,
            start_step=start_step,
            pending=pending,
            requests_issued=resumed.get("requests_issued", 0),  # type: ignore[arg-type]
        )
        if pending:
            say(f"grpo: requesting again the {len(pending)} rounds in flight at the checkpoint")
        rounds.start(policy)
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    return rounds


def open_pool(
    backend: str, spec: WorkerSpec, workers: int, *, timeout_s: float, max_restarts: int
) -> WorkerPool:
    """The ``rollout.backend`` pool: local processes or Ray actors (`grpo[ray]`)."""
    if backend == "ray":
        from grpo.rounds.workers.ray_pool import RayPool

        return RayPool(spec, workers, timeout_s=timeout_s, max_restarts=max_restarts)
    from grpo.rounds.workers.local_pool import LocalPool

    return LocalPool(spec, workers, timeout_s=timeout_s, max_restarts=max_restarts)
