"""vLLM's requests and outputs ↔ this project's layout: plain functions, no vLLM needed
(used by :mod:`grpo.rollout.vllm_engine` and :mod:`grpo.rollout.vllm_turns`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo.rollout.engine import SamplingParams


def request_params(
    params: SamplingParams, eos_token_ids: set[int], seed: int | None
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one row (n = 1).

    top_k 0 (off) is vLLM's -1; ``logprobs=0`` returns the sampled token's log-prob only.
    EOS ids are stop tokens, and stop strings end a completion with the token that
    completed them kept, as in the built-in engine.
    """
    return {
        "n": 1,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "max_tokens": params.max_new_tokens,
        "stop": list(params.stop_strings) or None,
        "stop_token_ids": sorted(eos_token_ids),
        "include_stop_str_in_output": True,
        "logprobs": 0,
        "seed": seed,
    }


@dataclass
class Completion:
    """One row's output from vLLM: tokens (EOS included), their sampler log-probs, stopped."""

    token_ids: list[int]
    logprobs: list[float]
    stopped: bool  # ended on EOS or a stop string (vLLM finish_reason "stop"), not on length


def completion_from_output(output: Any) -> Completion:  # Any: the optional package's type
    """vLLM ``CompletionOutput`` → :class:`Completion` (the sampled token's log-prob per step)."""
    token_ids = list(output.token_ids)
    entries = output.logprobs or []
    logprobs = [
        float(entry[token].logprob) if entry is not None and token in entry else 0.0
        for token, entry in zip(token_ids, entries, strict=False)
    ]
    logprobs += [0.0] * (len(token_ids) - len(logprobs))
    return Completion(token_ids, logprobs, stopped=output.finish_reason == "stop")
