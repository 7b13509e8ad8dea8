"""The source of scored rounds: producers, scoring, gathering and dynamic sampling
(:mod:`grpo.rounds.source`), the one builder of the rollout side (:mod:`grpo.rounds.build`),
and asynchronous rollout workers (:mod:`grpo.rounds.workers`)."""
