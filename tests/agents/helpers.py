"""Shared pieces of the agents tests: the tiny engine, a scripted environment, a spy."""

from __future__ import annotations

from typing import Any

import torch

from grpo.rollout.engine import RolloutRequest
from grpo.rollout.turns import TurnEngine, TurnOutput, TurnSession


def tiny_engine(model_dir: Any) -> tuple[Any, Any, Any]:
    from transformers import AutoModelForCausalLM

    from grpo.demo.tokenizer import build_char_tokenizer
    from grpo.rollout.hf_engine import TransformersEngine

    tokenizer = build_char_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    return engine, model, tokenizer


class Echo:
    """Answers every turn with an observation and never ends: rows run to max_turns."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.prompt, self.turns = row["prompt"], 0

    def reset(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.prompt}]

    def step(self, assistant_text: str) -> tuple[str | None, float | None, bool]:
        self.turns += 1
        return f"more {self.turns}", None, False


class Spy(TurnEngine):
    """Records every turn call: (rows, inserted ids, outputs, model forwards (B, W))."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.model, self.pad_token_id = engine, engine.model, engine.pad_token_id
        self.calls: list[tuple[list[int], list[list[int]], list[TurnOutput], list[tuple]]] = []
        self.forwards: list[tuple[int, int]] = []
        self.model.register_forward_pre_hook(self._record, with_kwargs=True)

    @property
    def device(self) -> torch.device:
        return self.engine.device

    def _record(self, module: Any, args: tuple, kwargs: dict) -> None:
        self.forwards.append(tuple(kwargs["input_ids"].shape))

    def start_turns(self, request: RolloutRequest, max_model_tokens: int) -> TurnSession:
        session = self.engine.start_turns(request, max_model_tokens)
        spy = self

        class Recording(TurnSession):
            def generate(
                self, rows: list[int], inserted: list[list[int]], max_new_tokens: list[int]
            ) -> list[TurnOutput]:
                before = len(spy.forwards)
                outputs = session.generate(rows, inserted, max_new_tokens)
                spy.calls.append((rows, inserted, outputs, spy.forwards[before:]))
                return outputs

            def close(self) -> None:
                spy.session = session
                session.close()

        return Recording()


def assert_scored_as_sampled(model: Any, rollout: Any, atol: float = 1e-4) -> None:
    """The trainer's log-probs of the model's tokens on the assembled rollout are the
    sampler's: the turns were sampled on exactly the sequence the trainer scores."""
    from grpo.models.logprobs import completion_logprobs

    logp_BT, _ = completion_logprobs(
        model,
        rollout.prompt_ids_BP,
        rollout.prompt_mask_BP,
        rollout.completion_ids_BT,
        rollout.completion_mask_BT,
        attention_mask_BT=rollout.attention_mask_BT,
    )
    model_BT = rollout.completion_mask_BT.bool()
    torch.testing.assert_close(
        logp_BT[model_BT], rollout.sampler_logp_BT[model_BT], atol=atol, rtol=0
    )
