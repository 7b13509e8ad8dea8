"""Rollout engines on token ids: the built-in sampler on the policy, and vLLM."""
