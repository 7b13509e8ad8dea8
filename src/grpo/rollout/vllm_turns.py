"""Turn-by-turn sampling on vLLM (:class:`~grpo.rollout.turns.TurnSession`), on token ids.

vLLM keeps no state between ``generate`` calls that this session could continue from, so
each turn submits every live row's whole id sequence so far (the prompt, the turns it
sampled, the ids the environment inserted) as ``prompt_token_ids``; vLLM's prefix cache
(``enable_prefix_caching``, on in :class:`~grpo.rollout.vllm_engine.VLLMEngine`) finds
the part it has computed before, so a turn effectively prefills only its new tokens.
Nothing is re-rendered from text: the ids submitted are exactly the ids the caller trains
on.

Seeds: one base seed per session, drawn from the step's generator (the same draw in every
process), and row b's turn k is seeded ``base + b + k · total_rows`` (b the row's index in
the step): a row's tokens do not depend on how the rows are split across processes, and
no two (row, turn) pairs share a seed. Greedy turns (temperature 0) are unseeded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import torch

from grpo.algo.groups import group_of
from grpo.rollout.engine import RolloutRequest
from grpo.rollout.turns import TurnOutput, TurnSession, check_turn_rows
from grpo.rollout.vllm_io import completion_from_output, request_params

SEED_LIMIT = 2**63 - 1  # vLLM seeds are 64-bit


class TokenGenerator(Protocol):
    """What a session calls of ``vllm.LLM``: generation from token-id prompts."""

    def generate(
        self, prompts: list[dict[str, list[int]]], *, sampling_params: list[Any], use_tqdm: bool
    ) -> list[Any]:  # vLLM's RequestOutput and SamplingParams: the optional package's types
        ...


class VLLMSessionEngine(Protocol):
    """What a session uses of ``VLLMEngine``."""

    llm: TokenGenerator
    sampling_params: Callable[..., Any]  # vllm.SamplingParams (its keywords: request_params)
    eos_token_ids: set[int]

    def wake(self) -> None: ...

    def rest(self) -> None: ...


class VLLMTurnSession(TurnSession):
    """A block of a step's rows, sampled turn by turn on a ``VLLMEngine`` (module docstring)."""

    def __init__(
        self, engine: VLLMSessionEngine, request: RolloutRequest, max_model_tokens: int
    ) -> None:
        self.engine, self.request, self.max_model_tokens = engine, request, max_model_tokens
        generator = request.generator
        device = generator.device if generator is not None else None
        self.base = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=device))
        G, prompts = request.group_size, request.prompt_token_ids
        rows = range(request.start, request.stop)
        self.history = [list(prompts[group_of(row, G)]) for row in rows]  # every id so far, per row
        self.sampled = [0] * len(rows)  # model tokens per row, over all its turns
        self.turns = [0] * len(rows)
        self.live = list(range(len(rows)))
        engine.wake()

    def generate(
        self, rows: list[int], inserted: list[list[int]], max_new_tokens: list[int]
    ) -> list[TurnOutput]:
        check_turn_rows(rows, self.live)
        self.live = list(rows)
        for row, ids in zip(rows, inserted, strict=True):
            self.history[row] += ids
        budgets = [
            min(budget, self.max_model_tokens - self.sampled[row])
            for row, budget in zip(rows, max_new_tokens, strict=True)
        ]
        asking = [(row, budget) for row, budget in zip(rows, budgets, strict=True) if budget > 0]
        outputs = self._sample(asking)
        results = []
        for row, budget in zip(rows, budgets, strict=True):
            # A row with no model tokens left samples nothing: cut, as at a token budget.
            output = outputs.pop(0) if budget > 0 else TurnOutput([], [], False)
            self.history[row] += output.token_ids
            self.sampled[row] += len(output.token_ids)
            self.turns[row] += 1
            results.append(output)
        return results

    def context(self, row: int) -> list[int]:
        return self.history[row]  # what the next turn submits, before its insertion

    def close(self) -> None:
        self.engine.rest()

    def _sample(self, asking: list[tuple[int, int]]) -> list[TurnOutput]:
        """One turn for each (session row, token budget): one vLLM request per row."""
        if not asking:
            return []
        request, engine = self.request, self.engine
        params = request.params
        requests = []
        for row, budget in asking:
            seed = None
            if params.temperature > 0:
                step_row = request.start + row
                seed = (self.base + step_row + self.turns[row] * request.total_rows) % SEED_LIMIT
            turn = dataclasses.replace(params, max_new_tokens=budget)
            requests.append(
                engine.sampling_params(**request_params(turn, engine.eos_token_ids, seed))
            )
        outputs = engine.llm.generate(
            [{"prompt_token_ids": list(self.history[row])} for row, _ in asking],
            sampling_params=requests,
            use_tqdm=False,
        )
        return [_turn_output(output.outputs[0]) for output in outputs]


def _turn_output(output: Any) -> TurnOutput:  # vllm.CompletionOutput (optional package)
    completion = completion_from_output(output)
    return TurnOutput(completion.token_ids, completion.logprobs, completion.stopped)
