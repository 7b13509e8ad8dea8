"""Applying the objective to a rollout batch: the kept rows as a batch (``batch``), a step
split over processes (``shard``), one micro-batch's surrogate (``surrogate``), GRPO's μ
optimizer steps (``policy``) and PPO's critic (``critic``)."""
