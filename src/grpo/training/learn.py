"""The update stage: the kept rows of this process become a :class:`TrainBatch` and μ
optimizer steps run on it (GRPO's :func:`policy_update`, or PPO's :func:`ppo_update`)."""

from __future__ import annotations

import warnings

from grpo.algo.rows import process_major
from grpo.algo.selection import Selection
from grpo.training.rounds import Generation
from grpo.training.runtime.distributed import Dist
from grpo.training.state import Learner
from grpo.training.update.batch import TrainBatch
from grpo.training.update.critic import ppo_update
from grpo.training.update.policy import policy_update
from grpo.training.update.shard import update_shard


def learn(
    learner: Learner, generation: Generation, selection: Selection, dist: Dist
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
    keep_B, advantages_B = selection.keep_B, selection.advantages_B
    length_B, reward_B = generation.results.length_B, generation.results.reward_B
    if generation.rounds > 1:  # this process's rows of every round, side by side
        keep_B, advantages_B, length_B, reward_B = (
            process_major(t, generation.rounds, dist.world_size)
            for t in (keep_B, advantages_B, length_B, reward_B)
        )
    local_rollout = generation.rollout  # this process's rows, as its block of the reordered
    local_rows = dist.rows(keep_B.shape[0])
    device = local_rollout.completion_ids_BT.device
    local_keep_B = keep_B[local_rows].to(device)
    local_advantages_B = advantages_B[local_rows].to(device)
    batch = TrainBatch.of(local_rollout, local_advantages_B, local_keep_B)
    shard = update_shard(
        dist, learner.trained, keep_B, length_B, local_rollout, learner.sequences_per_micro_batch
    )
    if learner.critic is not None:  # PPO: the critic's per-token GAE advantages replace A_i
        return ppo_update(
            learner.critic,
            learner.trained,
            batch,
            objective,
            optimization,
            rewards_B=reward_B[local_rows].to(device)[local_keep_B],
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
