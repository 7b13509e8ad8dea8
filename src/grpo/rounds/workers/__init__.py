"""Asynchronous rollouts (``rollout.mode = "async"``): chunks of rounds, the worker, its
pools (local processes or Ray actors) and the learner's side, :class:`AsyncRounds`."""
